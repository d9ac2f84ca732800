//! Running the built example programs and rdma-core's tools against each
//! other, as the example tests do.

#![allow(dead_code)]

use super::process::{finish, spawn, text};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The built example `name`: `target/<profile>/examples/<name>`, beside
/// the test's `deps/` folder.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable in target/<profile>/deps");
    let path = profile.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: build the examples first (cargo build --examples)",
        path.display()
    );
    path
}

/// Runs `cmd` to its end, killing it after `limit`.
pub fn run(cmd: &mut Command, limit: Duration) -> Output {
    let what = format!("{cmd:?}");
    finish(spawn(cmd), &what, limit)
}

/// Asserts the exit status `code`, and no panic.
#[track_caller]
pub fn assert_status(out: &Output, code: i32, what: &str) {
    assert_eq!(out.status.code(), Some(code), "{what}: {}", text(out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{what} panicked: {}",
        text(out)
    );
}

/// Runs a client until it reaches its server, for at most `limit`:
/// rdma-core's pingpong tools and the pingpong examples give up at once
/// when nothing listens yet ("Couldn't connect to", "cannot connect to").
pub fn run_client(program: impl AsRef<OsStr>, args: &[&str], limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        let out = run(Command::new(&program).args(args), limit);
        let err = String::from_utf8_lossy(&out.stderr);
        let refused = err.contains("Couldn't connect to") || err.contains("cannot connect to");
        if out.status.success() || !refused || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}
