//! The runner as `cargo install` leaves it: a lone `mlx5-sim` in a
//! directory of its own, no `libmlx5dv_sim.so` beside it, no repository
//! around. It writes the interposer built into it to a private directory
//! for the run, the device answers there, and the copy is gone afterwards;
//! `MLX5DV_SIM_LIB` still overrides it.
//!
//! Needs `ibv_devinfo` (ibverbs-utils) and libmlx5 (ibverbs-providers).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

mod common;
use common::{runner, text};

/// A fresh directory under the tests' temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("installed-runner-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// Copies the runner alone into `<root>/bin/` and runs `sh -c script`
/// under it from `root`, with `TMPDIR` set to `<root>/tmp`.
///
/// One at a time: while one test writes its copy, a process another test
/// forks inherits the copy's open file until that child execs, and the
/// first test's exec of its copy then fails with `ETXTBSY` ("Text file
/// busy"; it did, now and then).
fn run_lone(root: &Path, script: &str, envs: &[(&str, &str)]) -> Output {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let bin = root.join("bin");
    fs::create_dir_all(&bin).expect("create bin/");
    fs::create_dir_all(root.join("tmp")).expect("create tmp/");
    let lone = bin.join("mlx5-sim");
    fs::copy(runner(), &lone).expect("copy the runner");
    let mut c = Command::new(&lone);
    c.args(["--", "sh", "-c", script])
        .current_dir(root)
        .env("TMPDIR", root.join("tmp"))
        .env_remove("MLX5DV_SIM_LIB")
        .env_remove("LD_PRELOAD");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("run the lone mlx5-sim")
}

#[test]
#[cfg_attr(
    not(mlx5dv_sim_embedded),
    ignore = "the runner was built without its copy of the library (MLX5DV_SIM_EMBED=0)"
)]
fn a_lone_runner_writes_its_library_and_the_device_answers() {
    let root = scratch("lone");
    let script = r#"printf '%s\n' "$LD_PRELOAD"; stat -c %a "$(dirname "$LD_PRELOAD")" "$LD_PRELOAD"; exec ibv_devinfo"#;
    let o = run_lone(&root, script, &[]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let mut lines = out.lines();
    let preload = PathBuf::from(lines.next().expect("the LD_PRELOAD line"));
    assert_eq!(
        preload.file_name().and_then(|n| n.to_str()),
        Some("libmlx5dv_sim.so"),
        "{}",
        text(&o)
    );
    assert!(
        preload.starts_with(root.join("tmp")),
        "the copy is not under TMPDIR: {}",
        preload.display()
    );
    assert_eq!(lines.next(), Some("700"), "its directory: {}", text(&o));
    assert_eq!(lines.next(), Some("500"), "the library: {}", text(&o));
    assert!(out.contains("hca_id:\tmlx5_0"), "{}", text(&o));
    assert!(out.contains("PORT_ACTIVE"), "{}", text(&o));
    assert!(
        !preload.exists(),
        "the copy outlived the run: {}",
        preload.display()
    );
    let left: Vec<_> = fs::read_dir(root.join("tmp"))
        .expect("read tmp/")
        .map(|e| e.expect("read tmp/").file_name())
        .collect();
    assert!(left.is_empty(), "left in TMPDIR after the run: {left:?}");
    fs::remove_dir_all(&root).ok();
}

#[test]
fn mlx5dv_sim_lib_overrides_the_built_in_library() {
    let root = scratch("override");
    // Any file: the override is taken as given (the loader then refuses a
    // file that is not a library, and the command runs without it).
    let own = root.join("own.so");
    fs::write(&own, b"not a library").expect("write the stand-in");
    fs::set_permissions(&own, fs::Permissions::from_mode(0o644)).expect("chmod");
    let own_str = own.to_str().expect("UTF-8 path");
    let o = run_lone(
        &root,
        r#"printf '%s\n' "$LD_PRELOAD""#,
        &[("MLX5DV_SIM_LIB", own_str)],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{own_str}\n"),
        "{}",
        text(&o)
    );
    let left = fs::read_dir(root.join("tmp")).expect("read tmp/").count();
    assert_eq!(left, 0, "something was written to TMPDIR: {}", text(&o));
    fs::remove_dir_all(&root).ok();
}
