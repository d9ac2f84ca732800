//! The example programs, run as a newcomer would run them, on a real RDMA
//! device (soft-RoCE in the test guest): `rc_pingpong` against rdma-core's
//! `ibv_rc_pingpong` in both directions, `rc_write` between two processes
//! and in one, `devinfo`, and on a device that is not mlx5 the clean
//! refusal (exit status 3, the missing capability named, no panic) of each
//! mlx5-only example. On an mlx5 device those run for real instead. On
//! the software mlx5 device (`mlx5dv-sim`, one device per process) the
//! two-process runs cannot mean anything: they report "SKIPPED, NOT RUN"
//! and fail unless skipped (`--skip`, or `MLX5DV_TEST_ALLOW_MISSING_CAPS=1`).
//!
//! The examples must be built first (`cargo build --examples`; scripts/test
//! does it). Run by `scripts/test` in the guest with
//! `MLX5DV_TEST_DEVICE=rxe0`; without that variable the tests are ignored,
//! and fail if forced to run. The two-guest runs are `scripts/demo`'s,
//! which scripts/test also runs.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};
use support::process::{self, spawn, text};
use support::rig;

/// How long one example run may take (soft-RoCE under emulation is slow).
const LIMIT: Duration = Duration::from_secs(120);

/// The built example `name`: `target/<profile>/examples/<name>`, beside
/// this test's `deps/` folder.
fn example(name: &str) -> PathBuf {
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

/// The device and the GID index the tests use (`MLX5DV_TEST_GID_INDEX`,
/// else the guest's RoCE v2 GID, else the rig's choice).
fn device_and_gid() -> (String, String) {
    let ctx = rig::open();
    let gid = std::env::var("MLX5DV_TEST_GID_INDEX")
        .or_else(|_| std::env::var("MLX5DV_VM_GID_INDEX"))
        .ok()
        .or_else(|| rig::connect_options(&ctx).gid_index.map(|i| i.to_string()));
    (ctx.name().to_string(), gid.unwrap_or_else(|| "0".into()))
}

/// Waits for `child`, killing it after [`LIMIT`].
fn finish(child: Child, what: &str) -> Output {
    process::finish(child, what, LIMIT)
}

fn run(cmd: &mut Command) -> Output {
    let what = format!("{cmd:?}");
    finish(spawn(cmd), &what)
}

#[track_caller]
fn assert_status(out: &Output, code: i32, what: &str) {
    assert_eq!(out.status.code(), Some(code), "{what}: {}", text(out));
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("panicked"),
        "{what} panicked: {}",
        text(out)
    );
}

/// Runs a client until it reaches its server: rdma-core's
/// `ibv_rc_pingpong` and the `rc_pingpong` example give up at once when
/// nothing listens yet ("Couldn't connect to", "cannot connect to").
fn run_client(program: impl AsRef<std::ffi::OsStr>, args: &[&str]) -> Output {
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

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rc_pingpong_client_passes_against_ibv_rc_pingpong_server() {
    if rig::not_run_without_a_shared_device("rc_pingpong against ibv_rc_pingpong") {
        return;
    }
    let (dev, gid) = device_and_gid();
    let common = ["-d", &dev, "-g", &gid, "-n", "100", "-p", "19101"];
    let server = spawn(Command::new("ibv_rc_pingpong").args(common));
    let client = run_client(
        example("rc_pingpong"),
        &[&common[..], &["127.0.0.1"]].concat(),
    );
    let server = finish(server, "ibv_rc_pingpong server");
    assert_status(&client, 0, "rc_pingpong client");
    assert_status(&server, 0, "ibv_rc_pingpong server");
    let out = String::from_utf8_lossy(&client.stdout);
    assert!(
        out.contains("100 messages of 4096 bytes received and checked"),
        "{out}"
    );
    assert!(
        String::from_utf8_lossy(&server.stdout).contains("100 iters in"),
        "{}",
        text(&server)
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn ibv_rc_pingpong_client_passes_against_rc_pingpong_server() {
    if rig::not_run_without_a_shared_device("ibv_rc_pingpong against rc_pingpong") {
        return;
    }
    let (dev, gid) = device_and_gid();
    let common = ["-d", &dev, "-g", &gid, "-n", "100", "-p", "19102"];
    let server = spawn(Command::new(example("rc_pingpong")).args(common));
    let client = run_client("ibv_rc_pingpong", &[&common[..], &["127.0.0.1"]].concat());
    let server = finish(server, "rc_pingpong server");
    assert_status(&client, 0, "ibv_rc_pingpong client");
    assert_status(&server, 0, "rc_pingpong server");
    assert!(
        String::from_utf8_lossy(&server.stdout)
            .contains("100 messages of 4096 bytes received and checked"),
        "{}",
        text(&server)
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rc_pingpong_with_odd_size_and_mtu_against_ibv_rc_pingpong() {
    if rig::not_run_without_a_shared_device("rc_pingpong against ibv_rc_pingpong") {
        return;
    }
    let (dev, gid) = device_and_gid();
    let common = [
        "-d", &dev, "-g", &gid, "-n", "50", "-s", "1000", "-m", "512", "-r", "8", "-p", "19103",
    ];
    let server = spawn(Command::new("ibv_rc_pingpong").args(common));
    let client = run_client(
        example("rc_pingpong"),
        &[&common[..], &["127.0.0.1"]].concat(),
    );
    let server = finish(server, "ibv_rc_pingpong server");
    assert_status(&client, 0, "rc_pingpong client");
    assert_status(&server, 0, "ibv_rc_pingpong server");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rc_write_server_and_client_check_the_data() {
    if rig::not_run_without_a_shared_device("rc_write server and client") {
        return;
    }
    let (dev, gid) = device_and_gid();
    let common = [
        "-d", &dev, "-g", &gid, "-n", "300", "-s", "8192", "-b", "16", "-p", "19104",
    ];
    let server = spawn(Command::new(example("rc_write")).args(common));
    let client = run_client(example("rc_write"), &[&common[..], &["127.0.0.1"]].concat());
    let server = finish(server, "rc_write server");
    assert_status(&client, 0, "rc_write client");
    assert_status(&server, 0, "rc_write server");
    let c = String::from_utf8_lossy(&client.stdout);
    assert!(c.contains("BW average[MB/sec]"), "{c}");
    assert!(c.contains("all as written"), "{c}");
    let s = String::from_utf8_lossy(&server.stdout);
    assert!(
        s.contains("300 writes received; all 131072 bytes of the target checked"),
        "{s}"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn hello_rc_the_front_page_program_writes_between_two_processes() {
    if rig::not_run_without_a_shared_device("hello_rc server and client") {
        return;
    }
    let (dev, _) = device_and_gid();
    let server = spawn(Command::new(example("hello_rc")).arg(&dev));
    let client = run_client(example("hello_rc"), &[&dev, "127.0.0.1"]);
    let server = finish(server, "hello_rc server");
    assert_status(&client, 0, "hello_rc client");
    assert_status(&server, 0, "hello_rc server");
    let c = String::from_utf8_lossy(&client.stdout);
    assert!(c.contains("hello_rc: wrote 15 bytes"), "{c}");
    let s = String::from_utf8_lossy(&server.stdout);
    assert!(s.contains("wrote \"hello over RDMA\""), "{s}");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rc_write_loopback_checks_the_data() {
    let (dev, gid) = device_and_gid();
    let out = run(Command::new(example("rc_write")).args([
        "--loopback",
        "-d",
        &dev,
        "-g",
        &gid,
        "-n",
        "500",
        "-s",
        "4096",
        "-b",
        "7",
    ]));
    assert_status(&out, 0, "rc_write --loopback");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("500 writes received; all 28672 bytes of the target checked"),
        "{s}"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn devinfo_shows_the_device_its_port_and_gids() {
    let (dev, _) = device_and_gid();
    let out = run(Command::new(example("devinfo")).args(["-d", &dev]));
    assert_status(&out, 0, "devinfo");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.starts_with(&format!("{dev}: node GUID ")), "{s}");
    assert!(s.contains("port 1: Active"), "{s}");
    assert!(s.contains("GID["), "{s}");
    if rig::open().is_mlx5() {
        assert!(s.contains("DMA memcpy (mlx5dv_wr_memcpy):"), "{s}");
    } else {
        assert!(s.contains("mlx5 direct verbs: not available"), "{s}");
    }
    let all = run(&mut Command::new(example("devinfo")));
    assert_status(&all, 0, "devinfo (all devices)");
    let missing = run(Command::new(example("devinfo")).args(["-d", "no-such-device"]));
    assert_status(&missing, 1, "devinfo -d no-such-device");
}

/// The mlx5-only examples, with the arguments that make each run alone.
fn mlx5_examples(dev: &str, gid: &str) -> Vec<(&'static str, Vec<String>)> {
    let base = |extra: &[&str]| {
        let mut v: Vec<String> = ["-d", dev, "-g", gid]
            .iter()
            .map(|s| s.to_string())
            .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    vec![
        ("dc_write", base(&["--loopback", "-n", "200", "-s", "4096"])),
        (
            "dc_write",
            base(&["--loopback", "-n", "200", "--streams", "1"]),
        ),
        ("dma_memcpy", base(&["-n", "200", "-s", "4096"])),
        ("mkey_layout", base(&[])),
        ("raw_wqe", base(&["-n", "5"])),
    ]
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn mlx5_only_examples_refuse_other_devices_with_status_3() {
    let (dev, gid) = device_and_gid();
    let mlx5 = rig::open().is_mlx5();
    let mut cases = mlx5_examples(&dev, &gid);
    // The server and client forms refuse before any TCP: neither waits.
    cases.push((
        "dc_write",
        vec!["-d".into(), dev.clone(), "-p".into(), "19105".into()],
    ));
    cases.push((
        "dc_write",
        vec!["-d".into(), dev.clone(), "127.0.0.1".into()],
    ));
    for (name, args) in cases {
        let what = format!("{name} {}", args.join(" "));
        if mlx5 && args.iter().any(|a| a == "-p" || a == "127.0.0.1") {
            continue; // a real server or client: covered by the loopback form
        }
        let out = run(Command::new(example(name)).args(&args));
        if mlx5 {
            // An mlx5 device without DCI streams refuses --streams alone.
            let no_streams = args.iter().any(|a| a == "--streams")
                && out.status.code() == Some(3)
                && String::from_utf8_lossy(&out.stderr).contains("DCI streams");
            if !no_streams {
                assert_status(&out, 0, &what);
            }
        } else {
            assert_status(&out, 3, &what);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.starts_with(&format!("{name}: {dev} is not an mlx5 device ("))
                    && err.contains("nothing to do"),
                "{what}: {}",
                text(&out)
            );
            assert!(out.stdout.is_empty(), "{what}: {}", text(&out));
        }
    }
}

// Needs no device, only the built examples; run with the device tests.
#[test]
#[ignore = "runs the built examples: cargo build --examples first"]
fn every_example_has_help_and_refuses_bad_usage_with_status_2() {
    for name in [
        "devinfo",
        "rc_pingpong",
        "rc_write",
        "dc_write",
        "dma_memcpy",
        "mkey_layout",
        "raw_wqe",
    ] {
        let help = run(Command::new(example(name)).arg("-h"));
        assert_status(&help, 0, &format!("{name} -h"));
        assert!(
            String::from_utf8_lossy(&help.stdout).starts_with("Usage"),
            "{name} -h: {}",
            text(&help)
        );
        let bad = run(Command::new(example(name)).arg("--no-such-option"));
        assert_status(&bad, 2, &format!("{name} --no-such-option"));
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(
            err.contains("unknown option '--no-such-option'")
                && err.contains(&format!("Try '{name} -h'")),
            "{name}: {}",
            text(&bad)
        );
        let missing = run(Command::new(example(name)).args(["-d"]));
        assert_status(&missing, 2, &format!("{name} -d"));
    }
    let not_a_number = run(Command::new(example("rc_write")).args(["-s", "lots"]));
    assert_status(&not_a_number, 2, "rc_write -s lots");
}
