//! The one error type of the runtime: every refusal names what, where, what was expected and what
//! was found.

use std::path::PathBuf;

/// Why a run, a save, a resume or an `info` could not do its work.
#[derive(Debug, thiserror::Error)]
pub enum WspError {
    /// The program is not a static, non-PIE x86-64 ELF executable.
    #[error("{path}: not a static non-PIE x86-64 executable: {why}")]
    NotStatic {
        /// The program.
        path: PathBuf,
        /// What the ELF header or program headers said.
        why: String,
    },
    /// `run` refuses to overwrite an existing image.
    #[error("{path}: the image file already exists (run creates a new one)")]
    Exists {
        /// The image.
        path: PathBuf,
    },
    /// The image holds no valid saved state (its marker is not set).
    #[error("{image}: no valid saved state to resume (state: {state})")]
    NotSaved {
        /// The image.
        image: PathBuf,
        /// The state the header records: running, missed or ended.
        state: String,
    },
    /// The program file is not the one the image was saved from.
    #[error(
        "the program changed since the image was saved: {what}: expected {expected}, found {found}"
    )]
    ProgramChanged {
        /// Which property differs (path, size, mtime, crc32c).
        what: &'static str,
        /// The saved value.
        expected: String,
        /// The current value.
        found: String,
    },
    /// The kernel is not the one the image was saved under (the vdso and layout may differ).
    #[error("the kernel changed since the image was saved: expected {expected}, found {found}")]
    KernelChanged {
        /// The saved release.
        expected: String,
        /// The running release.
        found: String,
    },
    /// The image's bytes do not decode.
    #[error("damaged image: {what} at offset {offset}: expected {expected}, found {found}")]
    Damaged {
        /// The structure or field at fault.
        what: &'static str,
        /// Its byte offset in the image file.
        offset: u64,
        /// What a valid image holds there.
        expected: String,
        /// What this one holds.
        found: String,
    },
    /// The saved process held kernel objects that cannot be recreated.
    #[error("not restorable: {}", objects.join("; "))]
    NotRestorable {
        /// Each object, named.
        objects: Vec<String>,
    },
    /// A configuration value is out of range.
    #[error("bad configuration: {what}: expected {expected}, found {found}")]
    Config {
        /// The field.
        what: &'static str,
        /// What is accepted.
        expected: String,
        /// What was given.
        found: String,
    },
    /// A feature the interface names but this build does not provide.
    #[error("not supported: {what}")]
    Unsupported {
        /// The feature.
        what: String,
    },
    /// A file operation failed.
    #[error("{what} {}: {source}", path.display())]
    Io {
        /// The operation.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
    /// A ptrace request, a wait or an injected system call failed.
    #[error("ptrace: {what} (thread {tid}): {detail}")]
    Ptrace {
        /// The request or step.
        what: String,
        /// The thread (pid in the runner's namespace).
        tid: i32,
        /// The error or the unexpected result.
        detail: String,
    },
    /// The traced program disappeared while the runner was working on it.
    #[error("the program is gone ({detail})")]
    Gone {
        /// Its last status.
        detail: String,
    },
}

impl WspError {
    pub(crate) fn io(what: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        WspError::Io {
            what,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn ptrace(what: impl Into<String>, tid: i32, detail: impl Into<String>) -> Self {
        WspError::Ptrace {
            what: what.into(),
            tid,
            detail: detail.into(),
        }
    }

    pub(crate) fn errno(what: impl Into<String>, tid: i32) -> Self {
        WspError::Ptrace {
            what: what.into(),
            tid,
            detail: std::io::Error::last_os_error().to_string(),
        }
    }
}

/// The runtime's result type.
pub type Result<T, E = WspError> = std::result::Result<T, E>;
