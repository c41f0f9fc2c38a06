//! Set-up shared by the log's tests that need a pool file.

use std::path::PathBuf;

/// A directory of its own for a test's pool files, removed when dropped: on tmpfs when there is
/// one (a mapping there is in the ADR domain, as emulated PM), else in the temporary directory.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(test: &str, tag: &str) -> Dir {
        let shm = std::path::Path::new("/dev/shm");
        let base = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        let d = base.join(format!("kavach-log-{test}-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("test directory");
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
