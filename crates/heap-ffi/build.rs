//! Writes the pkg-config files of `libkavach` next to the build's outputs:
//! `target/<profile>/kavach.pc` (link with `libkavach.so`) and `kavach-static.pc` (link with
//! `libkavach.a`), so a C program builds with
//! `PKG_CONFIG_PATH=target/release cc prog.c $(pkg-config --cflags --libs kavach)`.
//!
//! They describe this build tree, not an installation: `includedir` is this crate's `include/`
//! and `libdir` is `target/<profile>/deps`, where rustc writes `libkavach.a` and `libkavach.so`
//! for every cargo command (`cargo build` also copies them to `target/<profile>/`, `cargo test`
//! does not), so the files work after `cargo build` and inside `cargo test` alike.
//!
//! A file is rewritten only when its text changes (so its time stamp, and anything that depends
//! on it, stays put). To get it back after deleting it, `touch crates/heap-ffi/build.rs`.

use std::path::{Path, PathBuf};

/// The system libraries the Rust standard library in `libkavach.a` needs with glibc 2.34 or
/// later (`cargo rustc -- --print native-static-libs` lists more, which glibc now folds into
/// libc; see the crate README). `tests/c_api.rs` links with exactly these.
const NATIVE_LIBS: &str = "-lpthread -ldl -lm";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let crate_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    // OUT_DIR is <target>[/<triple>]/<profile>/build/kavach-heap-ffi-<hash>/out.
    let Some(profile_dir) = out_dir
        .ancestors()
        .nth(3)
        .filter(|_| out_dir.ancestors().nth(2).and_then(Path::file_name) == Some("build".as_ref()))
    else {
        println!(
            "cargo:warning=kavach.pc not written: OUT_DIR {} is not <target>/<profile>/build/<pkg>/out",
            out_dir.display()
        );
        return;
    };
    let include_dir = crate_dir.join("include");
    let (Some(profile), Some(include)) = (pc_path(profile_dir), pc_path(&include_dir)) else {
        println!(
            "cargo:warning=kavach.pc not written: {} or {} is not a UTF-8 path without spaces",
            profile_dir.display(),
            crate_dir.display()
        );
        return;
    };
    let version = std::env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    let vars = format!(
        "# Written by crates/heap-ffi/build.rs for the build tree it describes.\n\
         prefix={profile}\n\
         libdir=${{prefix}}/deps\n\
         includedir={include}\n\
         \n"
    );
    let shared = format!(
        "{vars}Name: kavach\n\
         Description: Kavach's persistent heap, C interface kavach.h (shared libkavach.so)\n\
         Version: {version}\n\
         Cflags: -I${{includedir}}\n\
         Libs: -L${{libdir}} -Wl,-rpath,${{libdir}} -lkavach\n\
         Libs.private: {NATIVE_LIBS}\n"
    );
    let static_ = format!(
        "{vars}Name: kavach-static\n\
         Description: Kavach's persistent heap, C interface kavach.h (static libkavach.a)\n\
         Version: {version}\n\
         Cflags: -I${{includedir}}\n\
         Libs: ${{libdir}}/libkavach.a {NATIVE_LIBS}\n"
    );
    for (name, text) in [("kavach.pc", shared), ("kavach-static.pc", static_)] {
        let path = profile_dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
            continue;
        }
        if let Err(e) = std::fs::write(&path, text) {
            println!("cargo:warning=cannot write {}: {e}", path.display());
        }
    }
}

/// `path` as a pkg-config value, if it is one (pkg-config splits on spaces).
fn pc_path(path: &Path) -> Option<&str> {
    path.to_str()
        .filter(|s| !s.chars().any(char::is_whitespace) && !s.contains('$'))
}
