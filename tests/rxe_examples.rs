//! The example programs, run as a newcomer would run them, on a real RDMA
//! device (soft-RoCE in the test guest): `rc_pingpong` against rdma-core's
//! `ibv_rc_pingpong` in both directions (also addressed by the port's
//! IPv4 RoCE v2 GID, or on InfiniBand by LID alone), `rc_write` between
//! two processes and in one, `rc_write --perftest` against perftest's
//! `ib_write_bw` in both directions and against itself, `dc_write` server
//! and client in two processes (mlx5 only; with DCI streams too),
//! `dc_write --perftest` against `ib_write_bw -c DC` in both directions
//! (mlx5 only), a malformed perftest exchange refused, `devinfo`, and on a
//! device that is not mlx5 the clean refusal (exit status 3, the missing
//! capability named, no panic) of each mlx5-only example (and of
//! `rc_write --direct`, `rc_pingpong --direct`, `dc_write --direct`). On
//! an mlx5 device those run for real instead.
//! On the software mlx5 device (`mlx5dv-sim`, InfiniBand or `--roce`)
//! every process under one `scripts/mlx5-sim` is a host of one fabric,
//! so the two-process runs run there too.
//!
//! The examples must be built first (`cargo build --examples`; scripts/test
//! does it). Run by `scripts/test` in the guest with
//! `MLX5DV_TEST_DEVICE=rxe0`; without that variable the tests are ignored,
//! and fail if forced to run. The two-guest runs are `scripts/demo`'s,
//! which scripts/test also runs.

mod support;

use std::path::PathBuf;
use std::process::{Command, Output};
use support::examples::*;
use support::process::{spawn, text};
use support::rig;

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rc_pingpong_client_passes_against_ibv_rc_pingpong_server() {
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

/// rdma-core's `ibv_rc_pingpong` and `rc_pingpong` against each other,
/// each way, addressed as a user would: on RoCE both with `-g` of the
/// port's IPv4 RoCE v2 GID (`Context::default_gid_index`: index 3 on the
/// software device, 1 in the soft-RoCE guest), which each then prints as
/// its own address and the peer's (`::ffff:a.b.c.d`); on InfiniBand both
/// without `-g`, by LID alone, as both tools do by default (the other
/// pingpong tests pass `-g`). `rc_pingpong`, like the C tool, uses a GID
/// only when `-g` names one: on RoCE without it the client refuses before
/// any TCP, naming the index `default_gid_index` gives.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn pingpong_both_ways_by_the_ipv4_roce_v2_gid_or_by_lid_alone() {
    let ctx = rig::open();
    let gid = ctx.default_gid_index(1).expect("default_gid_index");
    if let Some(i) = gid {
        let g = ctx.gid(1, u32::from(i)).expect("the GID");
        assert!(g.to_string().starts_with("::ffff:"), "GID {i} is {g}");
    }
    let dev = ctx.name().to_string();
    if let Some(i) = gid {
        let args = ["-d", &dev, "-n", "5", "-p", "19108", "127.0.0.1"];
        let out = run(Command::new(example("rc_pingpong")).args(args));
        assert_status(&out, 1, "rc_pingpong without -g on RoCE");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("is RoCE") && err.contains(&format!("default_gid_index gives {i} (")),
            "{}",
            text(&out)
        );
    }
    let gid = gid.map(|i| i.to_string());
    let mut args = vec!["-d", &dev, "-n", "50"];
    if let Some(g) = &gid {
        args.extend(["-g", g]);
    }
    let runs = both_ways("rc_pingpong", "ibv_rc_pingpong", ["19108", "19109"], &args);
    for (what, ours, theirs) in runs {
        let out = String::from_utf8_lossy(&ours.stdout);
        assert!(
            out.contains("50 messages of 4096 bytes received and checked"),
            "{what}: {out}"
        );
        if gid.is_some() {
            for who in ["local", "remote"] {
                let line = out
                    .lines()
                    .find(|l| l.trim_start().starts_with(&format!("{who} address:")))
                    .unwrap_or_else(|| panic!("{what}: no {who} address: {out}"));
                assert!(line.contains("GID ::ffff:"), "{what}: {line}");
            }
        }
        assert!(
            String::from_utf8_lossy(&theirs.stdout).contains("50 iters in"),
            "{}",
            text(&theirs)
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rc_write_server_and_client_check_the_data() {
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
    assert_checked(&server, &client, 300, 131072);
}

/// What a server and its client (`rc_write`, `dc_write`) say of a data
/// check that passed: `writes` writes received, each of `bytes` checked.
#[track_caller]
fn assert_checked(server: &Output, client: &Output, writes: u32, bytes: u32) {
    let c = String::from_utf8_lossy(&client.stdout);
    assert!(
        c.contains(&format!(
            "the server checked its {bytes} bytes: all as written"
        )),
        "{c}"
    );
    let s = String::from_utf8_lossy(&server.stdout);
    assert!(
        s.contains(&format!(
            "{writes} writes received; all {bytes} bytes of the target checked"
        )),
        "{s}"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn hello_rc_the_front_page_program_writes_between_two_processes() {
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

/// `dc_write` as server (a DCT) and as client (a DCI) in two processes,
/// 300 writes of 4096 bytes in batches of 8 on TCP port `port`, `extra`
/// on both; the server checks every byte of its 32768. On a device that
/// is not mlx5 (soft-RoCE), or an mlx5 device without the `streams` DCI
/// streams asked for, each side exits 3 before any TCP, naming why.
fn dc_write_server_and_client(port: &str, streams: Option<u8>) {
    let (dev, gid) = device_and_gid();
    let log = streams.map(|l| l.to_string());
    let mut args = vec![
        "-d", &dev, "-g", &gid, "-n", "300", "-s", "4096", "-b", "8", "-p", port,
    ];
    if let Some(log) = &log {
        args.extend(["--streams", log]);
    }
    let client_args = [&args[..], &["127.0.0.1"]].concat();
    let ctx = rig::open();
    let why = if !ctx.is_mlx5() {
        Some("is not an mlx5 device (")
    } else {
        let have = ctx.mlx5_caps().expect("mlx5 caps").dci_streams_caps;
        match streams {
            Some(l) if have.is_none_or(|c| c.max_log_num_concurent < l) => Some("DCI streams"),
            _ => None,
        }
    };
    if let Some(why) = why {
        for args in [&args, &client_args] {
            let what = format!("dc_write {}", args.join(" "));
            let out = run(Command::new(example("dc_write")).args(args));
            assert_status(&out, 3, &what);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.starts_with("dc_write: ") && err.contains(why),
                "{what}: {}",
                text(&out)
            );
            assert!(out.stdout.is_empty(), "{what}: {}", text(&out));
        }
        return;
    }
    let server = spawn(Command::new(example("dc_write")).args(&args));
    let client = run_client(example("dc_write"), &client_args);
    let server = finish(server, "dc_write server");
    assert_status(&client, 0, "dc_write client");
    assert_status(&server, 0, "dc_write server");
    let c = String::from_utf8_lossy(&client.stdout);
    let shape = match streams {
        Some(l) => format!("{} DCI streams", 1u32 << l),
        None => "no DCI streams".into(),
    };
    assert!(
        c.contains(&format!(
            "300 writes of 4096 bytes in batches of 8, {shape}"
        )),
        "{c}"
    );
    assert!(c.contains("writing to DCT"), "{c}");
    assert_checked(&server, &client, 300, 32768);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn dc_write_server_and_client_check_the_data() {
    dc_write_server_and_client("19106", None);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn dc_write_server_and_client_with_four_dci_streams_check_the_data() {
    dc_write_server_and_client("19107", Some(2));
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
        (
            "rc_write",
            base(&["--direct", "--loopback", "-n", "200", "-s", "4096"]),
        ),
        (
            "dc_write",
            base(&["--direct", "--loopback", "-n", "200", "-s", "4096"]),
        ),
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
    cases.push((
        "rc_pingpong",
        vec![
            "-d".into(),
            dev.clone(),
            "--direct".into(),
            "-p".into(),
            "19152".into(),
        ],
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

// ------------------------------------------------- perftest's TCP exchange

/// The GID index arguments for perftest's exchange (`-x N`, which both
/// perftest and the examples take): the index of [`device_and_gid`] where
/// the port needs one (RoCE) or one is asked for, none on InfiniBand,
/// where both sides then send their connection data without a GID.
fn perftest_gid_args() -> Vec<String> {
    let asked = std::env::var("MLX5DV_TEST_GID_INDEX")
        .or_else(|_| std::env::var("MLX5DV_VM_GID_INDEX"))
        .is_ok();
    if asked || rig::connect_options(&rig::open()).gid_index.is_some() {
        vec!["-x".into(), device_and_gid().1]
    } else {
        Vec::new()
    }
}

/// `-d DEV [-x GID] -s SIZE -n ITERS -p PORT`, as perftest and the
/// examples' `--perftest` both take them, then `extra`.
fn perftest_args(size: &str, iters: &str, port: &str, extra: &[&str]) -> Vec<String> {
    let mut v = vec!["-d".to_string(), device_and_gid().0];
    v.extend(perftest_gid_args());
    for a in ["-s", size, "-n", iters, "-p", port].iter().chain(extra) {
        v.push(a.to_string());
    }
    v
}

/// Runs `server` (spawned first) and `client` (tried until it reaches the
/// server) with `args`, the client with `127.0.0.1` after them; returns
/// both outputs, each checked for exit status 0 and no panic.
fn perftest_pair(
    server: (&str, PathBuf, &[String]),
    client: (&str, PathBuf, &[String]),
) -> (Output, Output) {
    let (s, c) = perftest_pair_unchecked(&server, &client);
    assert_status(&c, 0, client.0);
    assert_status(&s, 0, server.0);
    (s, c)
}

/// [`perftest_pair`] without the checks of the exit statuses.
fn perftest_pair_unchecked(
    server: &(&str, PathBuf, &[String]),
    client: &(&str, PathBuf, &[String]),
) -> (Output, Output) {
    let s = spawn(Command::new(&server.1).args(server.2));
    let mut cargs: Vec<&str> = client.2.iter().map(String::as_str).collect();
    cargs.push("127.0.0.1");
    let c = run_client(&client.1, &cargs);
    let s = finish(s, server.0);
    (s, c)
}

/// `example --perftest` against perftest's `ib_write_bw` (with `-c DC`
/// for `dc_write`), `perftest_serves` or the other way round, `-n 200`
/// writes of `size` bytes on TCP port `port`. Returns the example's and
/// perftest's standard output.
fn against_perftest(
    example_name: &str,
    perftest_serves: bool,
    size: &str,
    port: &str,
) -> (String, String) {
    let args = perftest_args(size, "200", port, &[]);
    let mine = [&["--perftest".to_string()][..], &args].concat();
    let mut theirs = args.clone();
    if example_name == "dc_write" {
        theirs.extend(["-c".to_string(), "DC".to_string()]);
    }
    let ex = (example_name, example(example_name), &mine[..]);
    let tool = ("ib_write_bw", PathBuf::from("ib_write_bw"), &theirs[..]);
    let (ex_out, tool_out) = again_while_perftest_could_not_time(|| {
        if perftest_serves {
            let (s, c) = perftest_pair_unchecked(&tool, &ex);
            (c, s)
        } else {
            perftest_pair_unchecked(&ex, &tool)
        }
    });
    assert_status(&ex_out, 0, ex.0);
    assert_status(&tool_out, 0, tool.0);
    let out = |o: &Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let tool_out = out(&tool_out);
    // perftest 6.06 (Debian 12) says MB/sec; later releases MiB/sec.
    assert!(
        tool_out.contains("BW average[MB/sec]") || tool_out.contains("BW average[MiB/sec]"),
        "{tool_out}"
    );
    (out(&ex_out), tool_out)
}

/// Whether the example as client says of perftest as server that its 200
/// writes completed and perftest (of whatever version) checks nothing.
fn says_perftest_checks_nothing(mine: &str) -> bool {
    mine.lines().any(|l| {
        l.contains("200 writes completed; the peer is perftest \"")
            && l.ends_with("\", which does not check the data")
    })
}

/// What the example as server says of perftest's 200 writes of 1000
/// bytes: perftest's stride is 1024 (the cache line), four slots in its
/// 4096-byte cycle buffer; each was written, the 96 bytes between them
/// not.
const PERFTEST_SLOTS_WRITTEN: &str = "data check: each of the 4 slots perftest's writes cover \
     (4000 bytes) was written, the other 96 bytes are untouched";

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rc_write_perftest_client_passes_against_ib_write_bw_server() {
    let (mine, _) = against_perftest("rc_write", true, "4096", "19110");
    assert!(mine.contains("peer version \""), "{mine}");
    assert!(says_perftest_checks_nothing(&mine), "{mine}");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn ib_write_bw_client_passes_against_rc_write_perftest_server() {
    let (mine, _) = against_perftest("rc_write", false, "1000", "19111");
    assert!(mine.contains(PERFTEST_SLOTS_WRITTEN), "{mine}");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rc_write_perftest_server_and_client_check_every_byte() {
    let args = perftest_args("100", "300", "19112", &["--perftest", "-b", "8"]);
    let (server, client) = perftest_pair(
        ("rc_write --perftest server", example("rc_write"), &args),
        ("rc_write --perftest client", example("rc_write"), &args),
    );
    let s = String::from_utf8_lossy(&server.stdout);
    assert!(
        s.contains("data check: the 3200 bytes the writes covered hold what was written, the other 896 are untouched"),
        "{s}"
    );
    let c = String::from_utf8_lossy(&client.stdout);
    assert!(
        c.contains("the server checked the bytes written: all as written"),
        "{c}"
    );
}

/// On a device that is not mlx5, `dc_write --perftest` (either side) exits
/// 3 before any exchange; returns whether it did (the test is then done).
fn dc_write_perftest_refused(port: &str) -> bool {
    if rig::open().is_mlx5() {
        return false;
    }
    let args = perftest_args("4096", "200", port, &["--perftest"]);
    for extra in [&[][..], &["127.0.0.1"][..]] {
        let out = run(Command::new(example("dc_write")).args(&args).args(extra));
        assert_status(&out, 3, "dc_write --perftest on a device that is not mlx5");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("is not an mlx5 device ("), "{}", text(&out));
    }
    true
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn dc_write_perftest_client_passes_against_ib_write_bw_dc_server() {
    if dc_write_perftest_refused("19113") {
        return;
    }
    let (mine, theirs) = against_perftest("dc_write", true, "4096", "19113");
    assert!(
        mine.contains("writing to DCT") && mine.contains("(key 0xffeeddcc)"),
        "{mine}"
    );
    assert!(says_perftest_checks_nothing(&mine), "{mine}");
    assert!(theirs.contains("Connection type : DC"), "{theirs}");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn ib_write_bw_dc_client_passes_against_dc_write_perftest_server() {
    if dc_write_perftest_refused("19114") {
        return;
    }
    let (mine, theirs) = against_perftest("dc_write", false, "1000", "19114");
    assert!(mine.contains(PERFTEST_SLOTS_WRITTEN), "{mine}");
    assert!(theirs.contains("Connection type : DC"), "{theirs}");
}

/// A fake perftest server: answers the opening exchanges as perftest 6.06
/// does, then sends 108 bytes that are not connection data.
fn fake_perftest_server(port: u16) -> std::thread::JoinHandle<()> {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind");
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().expect("accept");
        let mut version = [0u8; 16];
        version[..4].copy_from_slice(b"6.06");
        let replies: [&[u8]; 4] = [
            &version,
            &4096u32.to_be_bytes(),
            &64u32.to_be_bytes(),
            b"3\0",
        ];
        for reply in replies {
            let mut buf = vec![0u8; reply.len()];
            s.read_exact(&mut buf).expect("the client's message");
            s.write_all(reply).expect("reply");
        }
        let mut keys = [0u8; 108];
        let _ = s.read(&mut keys);
        let _ = s.write_all(&[b'z'; 108]);
    })
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rc_write_perftest_refuses_connection_data_that_is_not_perftests() {
    let server = fake_perftest_server(19115);
    let args = perftest_args("4096", "10", "19115", &["--perftest", "127.0.0.1"]);
    let out = run(Command::new(example("rc_write")).args(&args));
    server.join().expect("the fake server");
    assert_status(&out, 1, "rc_write --perftest against a fake server");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("rc_write: ") && err.contains("connection data"),
        "{}",
        text(&out)
    );
}

/// `xsrq_pingpong` against rdma-core's `ibv_xsrq_pingpong`, each as server
/// and as client (one client, 50 messages each way, on port `port`; with
/// the GID index on RoCE). On a device without XRC (soft-RoCE) the
/// example exits 3 before any TCP, naming XRC, and so does the C tool
/// fail there (exit 1, "Couldn't Open the XRC Domain").
fn xsrq_pingpong_against_ibv_xsrq_pingpong(c_serves: bool, port: &str) {
    let (dev, gid) = device_and_gid();
    let ctx = rig::open();
    let roce = ctx.query_port(1).expect("port 1").link_layer == mlx5dv::LinkLayer::Ethernet;
    let mut args = vec!["-d", &dev, "-n", "50", "-s", "1024", "-p", port];
    if roce {
        args.extend(["-g", &gid]);
    }
    let client_args = [&args[..], &["127.0.0.1"]].concat();
    if !ctx.is_mlx5() {
        for a in [&args, &client_args] {
            let what = format!("xsrq_pingpong {}", a.join(" "));
            let out = run(Command::new(example("xsrq_pingpong")).args(a));
            assert_status(&out, 3, &what);
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.starts_with("xsrq_pingpong: ") && err.contains("XRC"),
                "{what}: {}",
                text(&out)
            );
            assert!(out.stdout.is_empty(), "{what}: {}", text(&out));
        }
        return;
    }
    let (server, client) = if c_serves {
        let server = spawn(Command::new("ibv_xsrq_pingpong").args(&args));
        let client = run_client(example("xsrq_pingpong"), &client_args);
        (finish(server, "ibv_xsrq_pingpong server"), client)
    } else {
        let server = spawn(Command::new(example("xsrq_pingpong")).args(&args));
        let client = run_client("ibv_xsrq_pingpong", &client_args);
        (finish(server, "xsrq_pingpong server"), client)
    };
    assert_status(&server, 0, "server");
    assert_status(&client, 0, "client");
    for (out, what) in [(&server, "server"), (&client, "client")] {
        let o = String::from_utf8_lossy(&out.stdout);
        assert!(o.trim_end().ends_with("success"), "{what}: {}", text(out));
        // Each printed its own and the peer's address, in the C format.
        assert_eq!(o.matches(", SRQN ").count(), 2, "{what}: {}", text(out));
        assert!(o.contains("   local: LID "), "{what}: {}", text(out));
        assert!(o.contains("  remote: LID "), "{what}: {}", text(out));
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn xsrq_pingpong_client_passes_against_ibv_xsrq_pingpong_server() {
    xsrq_pingpong_against_ibv_xsrq_pingpong(true, "18531");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn ibv_xsrq_pingpong_client_passes_against_xsrq_pingpong_server() {
    xsrq_pingpong_against_ibv_xsrq_pingpong(false, "18532");
}
