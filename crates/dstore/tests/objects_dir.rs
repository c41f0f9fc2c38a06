//! The object data file on a real file system (`Config::object_dir`, `pwrite` + `fdatasync`):
//! a store made by `open_dir` keeps its objects' data there, reopens with it, refuses to open
//! without it, and the file starts with the documented header.

mod scratch;

use dstore::api::OpenMode;
use dstore::{Config, Store};
use scratch::Scratch;

fn config(dir: Option<std::path::PathBuf>) -> Config {
    Config {
        shards: 4,
        log_bytes: 1 << 20,
        background: false,
        object_dir: dir,
        ..Config::default()
    }
}

#[test]
fn objects_live_in_the_directory_and_come_back() {
    let d = Scratch::new("objects-dir");
    let (pool, objects) = (d.0.join("pool"), d.0.join("objects"));
    {
        let (s, opened) = Store::open_dir(&pool, config(Some(objects.clone()))).unwrap();
        assert!(opened.created);
        assert!(s.has_object_file());
        let mut c = s.context();
        for i in 0..10u8 {
            let h = c.oopen(&[b'o', i], 0, OpenMode::CREATE).unwrap().unwrap();
            c.owrite(&h, &vec![i; 4096 + i as usize * 100], 0).unwrap();
        }
        drop(c);
        s.close().unwrap();
    }
    let file = std::fs::read(objects.join(dstore::zone::OBJECT_FILE)).unwrap();
    assert_eq!(&file[..8], b"KVOBJDAT");
    assert!(file.len() >= 4096 * 11, "a header and the objects' blocks");
    let e = Store::open_dir(&pool, config(None)).unwrap_err();
    assert!(e.to_string().contains("object data file"), "{e}");
    let (s, _) = Store::open_dir(&pool, config(Some(objects))).unwrap();
    let mut c = s.context();
    for i in 0..10u8 {
        let h = c.oopen(&[b'o', i], 0, OpenMode::READ).unwrap().unwrap();
        let mut buf = vec![0u8; 8192];
        let n = c.oread(&h, &mut buf, 0).unwrap();
        assert_eq!(n, 4096 + i as usize * 100);
        assert!(buf[..n].iter().all(|&b| b == i));
    }
    drop(c);
    s.close().unwrap();
}
