//! What the tests of the software device share: the runner and the
//! interposer library, built for the tests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The `mlx5-sim` runner cargo built for these tests.
pub fn runner() -> &'static str {
    env!("CARGO_BIN_EXE_mlx5-sim")
}

/// Builds the interposer library next to the runner: `cargo test` builds
/// the crate's rlib and binary for the tests, not its cdylib. Nothing to
/// do when the runner carries a copy of its own (see `build.rs`).
pub fn ensure_library() {
    if cfg!(mlx5dv_sim_embedded) {
        return;
    }
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let profile_dir = Path::new(runner()).parent().expect("runner directory");
        let target_dir = profile_dir.parent().expect("target directory");
        let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => "dev",
            Some(p) => p,
        };
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let o = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--lib", "--profile", profile])
            .arg("--manifest-path")
            .arg(&manifest)
            .arg("--target-dir")
            .arg(target_dir)
            .env_remove("LD_PRELOAD")
            .output()
            .expect("run cargo");
        assert!(
            o.status.success(),
            "building libmlx5dv_sim.so failed:\n{}",
            text(&o)
        );
    });
}

/// stdout and stderr of `o`, with its status, for a failure message.
pub fn text(o: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Compiles the C program `name` from `files` of `tests/c/` (with `-Wall
/// -Werror`, linked with libibverbs and libmlx5) into the tests' temporary
/// directory, and returns its path.
pub fn compile_c(name: &str, files: &[&str]) -> PathBuf {
    let bin = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("mlx5dv-sim-{name}-{}", std::process::id()));
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let o = Command::new(cc)
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .args(files.iter().map(|f| dir.join(f)))
        .args(["-libverbs", "-lmlx5", "-ldl"])
        .output()
        .expect("run the C compiler");
    assert!(o.status.success(), "compiling {name} failed:\n{}", text(&o));
    bin
}
