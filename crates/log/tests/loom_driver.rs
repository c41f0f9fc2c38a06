//! Runs the loom model (`tests/loom.rs`) from the ordinary test command: loom needs the whole
//! crate built with `--cfg loom`, so this test builds it in a target directory of its own.
#![cfg(not(loom))]

use std::process::Command;

#[test]
fn the_loom_model_of_reserve_complete_force_passes() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("loom");
    let out = Command::new(cargo)
        .args(["test", "-p", "kavach-log", "--test", "loom", "--release"])
        .env("RUSTFLAGS", "--cfg loom")
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo for the loom model");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "loom model failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Three models ran (not zero because of a filter or a cfg mistake).
    assert!(stdout.contains("test result: ok. 3 passed"), "{stdout}");
}
