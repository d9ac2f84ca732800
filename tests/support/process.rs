//! Running a program as the tests do: no input, its output captured,
//! killed (and its output shown) when it runs past a limit.

#![allow(dead_code)]

use std::io::ErrorKind;
use std::net::{TcpListener, TcpStream};
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

/// Starts the other side of a two-process test: this test binary run
/// again as `--exact test --ignored --nocapture` (then `extra_args`),
/// with `env` set to `value(port)`, where `port` is that of a TCP
/// listener bound here on 127.0.0.1; the other side is to connect to it.
///
/// Returns the process and its connection, blocking with `limit` as its
/// read timeout. Fails (with the process's output, the process killed)
/// when the process ends before connecting or has not connected within
/// `limit`; `what` names it in that message ("the server").
pub fn start_peer(
    test: &str,
    extra_args: &[&str],
    env: &str,
    value: impl FnOnce(u16) -> String,
    limit: Duration,
    what: &str,
) -> (Child, TcpStream) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).expect("bind a TCP port");
    let port = listener.local_addr().expect("local_addr").port();
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = spawn(
        Command::new(exe)
            .args(["--exact", test, "--ignored", "--nocapture"])
            .args(extra_args)
            .env(env, value(port)),
    );
    listener.set_nonblocking(true).expect("nonblocking");
    let deadline = Instant::now() + limit;
    loop {
        match listener.accept() {
            Ok((tcp, _)) => {
                tcp.set_nonblocking(false).expect("blocking");
                tcp.set_read_timeout(Some(limit)).expect("read timeout");
                return (child, tcp);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let ended = child.try_wait().expect("try_wait").is_some();
                if ended || Instant::now() > deadline {
                    let _ = child.kill();
                    let out = child.wait_with_output().expect("wait");
                    panic!("{what} never connected: {}", text(&out));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
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
