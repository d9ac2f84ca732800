//! Running the example programs as the tests do: where the built ones
//! are, the device and GID to give them, a client that tries until its
//! server listens, and the checks of an exit status.

#![allow(dead_code)]

use super::process::{self, spawn, text};
use super::rig;
use std::path::PathBuf;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

/// How long one example run may take (soft-RoCE under emulation is slow).
pub const LIMIT: Duration = Duration::from_secs(120);

/// The built example `name`: `target/<profile>/examples/<name>`, beside
/// this test's `deps/` folder.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable in target/<profile>/deps");
    let path = profile.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: build the examples first (cargo build --examples, with the \
         features the example needs)",
        path.display()
    );
    path
}

/// The device and the GID index the tests use (`MLX5DV_TEST_GID_INDEX`,
/// else the guest's RoCE v2 GID, else the rig's choice).
pub fn device_and_gid() -> (String, String) {
    let ctx = rig::open();
    let gid = std::env::var("MLX5DV_TEST_GID_INDEX")
        .or_else(|_| std::env::var("MLX5DV_VM_GID_INDEX"))
        .ok()
        .or_else(|| rig::connect_options(&ctx).gid_index.map(|i| i.to_string()));
    (ctx.name().to_string(), gid.unwrap_or_else(|| "0".into()))
}

/// Waits for `child`, killing it after [`LIMIT`].
pub fn finish(child: Child, what: &str) -> Output {
    process::finish(child, what, LIMIT)
}

/// Runs `cmd` to its end, killing it after [`LIMIT`].
pub fn run(cmd: &mut Command) -> Output {
    let what = format!("{cmd:?}");
    finish(spawn(cmd), &what)
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

/// Runs a client until it reaches its server, for at most [`LIMIT`]:
/// rdma-core's pingpong tools and the pingpong examples give up at once
/// when nothing listens yet ("Couldn't connect to", "cannot connect to").
pub fn run_client(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
    let deadline = Instant::now() + LIMIT;
    loop {
        let out = run(Command::new(&program).args(args));
        let err = String::from_utf8_lossy(&out.stderr);
        let refused = err.contains("Couldn't connect to") || err.contains("cannot connect to");
        if out.status.success() || !refused || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The example `ours` and rdma-core's tool `theirs` against each other, each
/// serving once: the tool on TCP port `ports[0]`, the example on
/// `ports[1]`, both with `args` (and `-p PORT`; the client with the
/// server's address, 127.0.0.1, last). Both must exit 0. Returns, per run,
/// what ran (for messages), the example's output and the tool's.
pub fn both_ways(
    ours: &str,
    theirs: &str,
    ports: [&str; 2],
    args: &[&str],
) -> Vec<(String, Output, Output)> {
    let mut runs = Vec::new();
    for (port, c_serves) in [(ports[0], true), (ports[1], false)] {
        let common = [args, &["-p", port]].concat();
        let client_args = [&common[..], &["127.0.0.1"]].concat();
        let (mine, tool) = if c_serves {
            let server = spawn(Command::new(theirs).args(&common));
            let client = run_client(example(ours), &client_args);
            (client, finish(server, &format!("{theirs} server")))
        } else {
            let server = spawn(Command::new(example(ours)).args(&common));
            let client = run_client(theirs, &client_args);
            (finish(server, &format!("{ours} server")), client)
        };
        let what = format!("{ours} {} ({theirs} serves: {c_serves})", common.join(" "));
        assert_status(&mine, 0, &what);
        assert_status(&tool, 0, &format!("{theirs}, against {what}"));
        runs.push((what, mine, tool));
    }
    runs
}

/// Whether perftest ran but could not time its run: its clock
/// calibration (`get_cpu_mhz`: a linear fit of the cycle counter against
/// `gettimeofday`) needs r^2 >= 0.9, which a busy machine can deny it;
/// then it prints "Can't produce a report" and exits 1 after the
/// transfer. Nothing of the transfer is in question.
pub fn perftest_could_not_time(o: &Output) -> bool {
    o.status.code() == Some(1)
        && String::from_utf8_lossy(&o.stderr).contains("Can't produce a report")
}

/// Runs `pair` (an example against a perftest tool, returning the
/// example's output and perftest's) again, at most twice, while the
/// example succeeded and perftest could not time its run
/// ([`perftest_could_not_time`]); any other outcome is returned at once,
/// for the caller to check.
pub fn again_while_perftest_could_not_time(
    mut pair: impl FnMut() -> (Output, Output),
) -> (Output, Output) {
    let mut tries = 1;
    loop {
        let (ours, perftest) = pair();
        if tries == 3 || !ours.status.success() || !perftest_could_not_time(&perftest) {
            return (ours, perftest);
        }
        eprintln!("perftest could not time its run (clock calibration under load); again");
        tries += 1;
    }
}
