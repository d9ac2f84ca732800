//! Running a program as the tests do: no input, its output captured,
//! killed (and its output shown) when it runs past a limit.

#![allow(dead_code)]

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Starts `cmd` with no input and its output piped.
pub fn spawn(cmd: &mut Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"))
}

/// Waits for `child`, killing it (and failing with its output) after
/// `limit`.
pub fn finish(mut child: Child, what: &str, limit: Duration) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!("{what} ran past {} s: {}", limit.as_secs(), text(&out));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("wait_with_output")
}

/// The exit status and both outputs, for a failure message.
pub fn text(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
