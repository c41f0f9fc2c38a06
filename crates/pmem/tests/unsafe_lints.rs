//! The workspace's rule for unsafe code (`docs/unsafe.md`, "Where unsafe code lives"), checked
//! over every crate of the workspace (this crate is the bottom of the stack, so the check lives
//! here):
//!
//! - every crate root (`src/lib.rs`, `src/main.rs`, `src/bin/*.rs`) says `#![forbid(unsafe_code)]`
//!   or `#![deny(unsafe_code)]`;
//! - every `#[allow(unsafe_code)]` carries a comment giving the reason, on its line or the line
//!   above, and sits on a module declaration;
//! - every module allowed unsafe code outside tests, and every crate that allows any, is named
//!   in `docs/unsafe.md`'s table.
//!
//! The compiler then refuses unsafe code anywhere else.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/pmem is two levels below the workspace")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.expect("dir entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The crates of the workspace: (directory name, its crate roots, its `src` files).
fn crates() -> Vec<(String, Vec<PathBuf>, Vec<PathBuf>)> {
    let mut out = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(workspace().join("crates"))
        .expect("crates/")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.join("Cargo.toml").is_file())
        .collect();
    dirs.sort();
    for dir in dirs {
        let src = dir.join("src");
        let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
            .iter()
            .map(|f| src.join(f))
            .filter(|p| p.is_file())
            .collect();
        if let Ok(bins) = std::fs::read_dir(src.join("bin")) {
            roots.extend(bins.map(|e| e.expect("dir entry").path()));
        }
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let name = dir
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        out.push((name, roots, files));
    }
    out
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn every_crate_root_forbids_or_denies_unsafe_code() {
    let crates = crates();
    assert!(crates.len() >= 10, "found only {} crates", crates.len());
    let mut missing = Vec::new();
    for (_, roots, _) in &crates {
        assert!(!roots.is_empty());
        for root in roots {
            let text = read(root);
            if !text.contains("#![forbid(unsafe_code)]") && !text.contains("#![deny(unsafe_code)]")
            {
                missing.push(root.display().to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "crate roots without #![forbid(unsafe_code)] or #![deny(unsafe_code)]:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_allowance_has_a_reason_and_is_documented() {
    let doc = read(&workspace().join("docs/unsafe.md"));
    let table = doc
        .split("## Where unsafe code lives")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/unsafe.md has a section \"Where unsafe code lives\"");
    let mut problems = Vec::new();
    for (name, _, files) in crates() {
        let mut allows = 0;
        for file in files {
            let text = read(&file);
            let lines: Vec<&str> = text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                let t = line.trim();
                if !t.starts_with("#[allow(unsafe_code)]")
                    && !t.starts_with("#![allow(unsafe_code)]")
                {
                    continue;
                }
                allows += 1;
                let here = format!("{}:{}", file.display(), i + 1);
                let reason_above = i > 0 && lines[i - 1].trim().starts_with("// ");
                if !reason_above && !t.contains("// ") {
                    problems.push(format!("{here}: #[allow(unsafe_code)] without a reason"));
                }
                let next = lines.get(i + 1).map_or("", |l| l.trim());
                let module = next
                    .trim_start_matches("pub ")
                    .strip_prefix("mod ")
                    .map(|m| m.trim_end_matches([';', '{', ' ']));
                match module {
                    None => problems.push(format!(
                        "{here}: #[allow(unsafe_code)] is not on a module declaration"
                    )),
                    Some("tests") => {}
                    Some(m) if !table.contains(&format!("`{m}`"))
                        && !table.contains(&format!("::{m}`")) =>
                    {
                        problems.push(format!(
                            "{here}: module `{m}` allows unsafe code but is not in docs/unsafe.md's table"
                        ))
                    }
                    Some(_) => {}
                }
            }
        }
        if allows > 0 && !table.contains(&format!("| `{name}` |")) {
            problems.push(format!(
                "crate {name} allows unsafe code but has no row in docs/unsafe.md's table"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
