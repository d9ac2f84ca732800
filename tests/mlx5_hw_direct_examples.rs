//! `rc_write --direct` on an mlx5 device: the client's writes on the
//! direct path (`QpEx::into_direct`, `DirectQp::post_and_wait`) to a
//! plain `rc_write` server in another process, which checks every byte
//! it received; and `--direct --loopback`, both sides in one process.
//! `rc_pingpong --direct` against rdma-core's `ibv_rc_pingpong`;
//! `dc_write --direct` against a plain `dc_write` server; and
//! `rc_write`/`dc_write --perftest --direct` against perftest's
//! `ib_write_bw` (RC, and `-c DC`) and against the examples' own
//! `--perftest` servers, which check every byte.
//!
//! The direct path needs mlx5 (`mlx5dv_init_obj`), so these tests run
//! only where one is named: they are `#[ignore]`d; run them with
//! `MLX5DV_TEST_MLX5_DEVICE=mlx5_0 cargo test --test mlx5_hw_direct_examples
//! -- --ignored` (the examples built first: `cargo build --examples`).
//! Without the variable, or on a device that is not mlx5, a test fails.
//! On the software mlx5 device every process under one `scripts/mlx5-sim`
//! is a host of one fabric, so the server and client run there too
//! (scripts/test runs `tests/mlx5_hw*` so).

mod support;

use std::process::{Command, Output};
use support::examples::*;
use support::process::{spawn, text};
use support::{hw, rig};

/// The mlx5 device of `MLX5DV_TEST_MLX5_DEVICE` (checked to be mlx5) and
/// the GID index to give the examples (on RoCE the first RoCE v2 GID, on
/// InfiniBand 0, which the examples then do not use for the path).
fn mlx5_device_and_gid() -> (String, String) {
    let ctx = hw::open();
    let gid = rig::connect_options(&ctx)
        .gid_index
        .map_or_else(|| "0".to_string(), |i| i.to_string());
    (ctx.name().to_string(), gid)
}

/// The rate line a client or loopback run prints, which must be there.
#[track_caller]
fn rate_line(out: &Output) -> String {
    let s = String::from_utf8_lossy(&out.stdout);
    s.lines()
        .find(|l| l.starts_with("rc_write: ") && l.contains(" writes/s ("))
        .unwrap_or_else(|| panic!("no rate line: {}", text(out)))
        .to_string()
}

/// A plain `rc_write` server and an `rc_write` client with `extra`
/// options, on TCP port `port`: both must exit 0 and the server must have
/// checked every byte. Returns the client's rate line.
fn against_plain_server(dev: &str, gid: &str, port: &str, extra: &[&str]) -> String {
    let common = [
        "-d", dev, "-g", gid, "-n", "300", "-s", "8192", "-b", "16", "-p", port,
    ];
    let server = spawn(Command::new(example("rc_write")).args(common));
    let client_args = [&common[..], extra, &["127.0.0.1"]].concat();
    let client = run_client(example("rc_write"), &client_args);
    let server = finish(server, "rc_write server");
    let what = format!("rc_write client {}", client_args.join(" "));
    assert_status(&client, 0, &what);
    assert_status(&server, 0, &format!("rc_write server, against {what}"));
    let c = String::from_utf8_lossy(&client.stdout);
    assert!(c.contains("BW average[MB/sec]"), "{c}");
    // 16 slots of 8192 bytes, each written and checked.
    assert!(
        c.contains("the server checked its 131072 bytes: all as written"),
        "{c}"
    );
    let s = String::from_utf8_lossy(&server.stdout);
    assert!(
        s.contains("300 writes received; all 131072 bytes of the target checked"),
        "{s}"
    );
    rate_line(&client)
}

/// The direct client writes to a plain server, which checks the data; a
/// plain client then does the same run, and both rate lines are printed
/// (visible with `--nocapture`; nothing is asserted of the rates).
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn rc_write_direct_client_writes_to_a_plain_server_which_checks_the_data() {
    let (dev, gid) = mlx5_device_and_gid();
    let direct = against_plain_server(&dev, &gid, "19140", &["--direct"]);
    assert!(
        direct.contains("300 writes in") && direct.contains("(direct path"),
        "{direct}"
    );
    let plain = against_plain_server(&dev, &gid, "19141", &[]);
    assert!(
        plain.contains("300 writes in") && plain.contains("(libmlx5's ibv_wr_* builders"),
        "{plain}"
    );
    println!("{direct}\n{plain}");
}

/// `--direct --loopback`: the direct writer and a plain target in one
/// process, every byte of the target checked.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn rc_write_direct_loopback_checks_the_data() {
    let (dev, gid) = mlx5_device_and_gid();
    let out = run(Command::new(example("rc_write")).args([
        "--direct",
        "--loopback",
        "-d",
        &dev,
        "-g",
        &gid,
        "-n",
        "1000",
        "-s",
        "4096",
        "-b",
        "32",
    ]));
    assert_status(&out, 0, "rc_write --direct --loopback");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.contains("1000 writes received; all 131072 bytes of the target checked"),
        "{s}"
    );
    let rate = rate_line(&out);
    assert!(rate.contains("(direct path"), "{rate}");
    println!("{rate}");
}

/// `rc_pingpong --direct` against rdma-core's `ibv_rc_pingpong`, one as
/// server and the other as client (`direct_serves`): both exit 0, the C
/// tool reports its iterations, and the direct side has checked every
/// byte of every message and sent as many on the direct path.
fn pingpong_direct_against_the_c_tool(direct_serves: bool, port: &str) {
    let (dev, gid) = mlx5_device_and_gid();
    let common = [
        "-d", &dev, "-g", &gid, "-n", "200", "-s", "2048", "-p", port,
    ];
    let direct_args = [&common[..], &["--direct"]].concat();
    let (server, client) = if direct_serves {
        let server = spawn(Command::new(example("rc_pingpong")).args(&direct_args));
        let client = run_client("ibv_rc_pingpong", &[&common[..], &["127.0.0.1"]].concat());
        (finish(server, "rc_pingpong --direct server"), client)
    } else {
        let server = spawn(Command::new("ibv_rc_pingpong").args(common));
        let client = run_client(
            example("rc_pingpong"),
            &[&direct_args[..], &["127.0.0.1"]].concat(),
        );
        (finish(server, "ibv_rc_pingpong server"), client)
    };
    assert_status(&client, 0, "client");
    assert_status(&server, 0, "server");
    let (direct, c) = if direct_serves {
        (&server, &client)
    } else {
        (&client, &server)
    };
    let d = String::from_utf8_lossy(&direct.stdout);
    assert!(
        d.contains(
            "200 messages of 2048 bytes received and checked (every byte 0x7b); \
             200 sent on the direct path"
        ),
        "{}",
        text(direct)
    );
    assert!(
        String::from_utf8_lossy(&c.stdout).contains("200 iters in"),
        "{}",
        text(c)
    );
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn rc_pingpong_direct_client_against_ibv_rc_pingpong_server() {
    pingpong_direct_against_the_c_tool(false, "19150");
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn ibv_rc_pingpong_client_against_rc_pingpong_direct_server() {
    pingpong_direct_against_the_c_tool(true, "19151");
}

/// `dc_write --direct` (the DCI on the direct path) against a plain
/// `dc_write` server in another process, with `streams` DCI streams (log2):
/// both exit 0, and the server checked every byte of its memory.
fn dc_write_direct_against_a_plain_server(port: &str, streams: Option<&str>) {
    let (dev, gid) = mlx5_device_and_gid();
    let mut args = vec![
        "-d", &dev, "-g", &gid, "-n", "300", "-s", "4096", "-b", "8", "-p", port,
    ];
    if let Some(log) = streams {
        args.extend(["--streams", log]);
    }
    let server = spawn(Command::new(example("dc_write")).args(&args));
    let client = run_client(
        example("dc_write"),
        &[&args[..], &["--direct", "127.0.0.1"]].concat(),
    );
    let server = finish(server, "dc_write server");
    assert_status(&client, 0, "dc_write --direct client");
    assert_status(&server, 0, "dc_write server");
    let c = String::from_utf8_lossy(&client.stdout);
    assert!(
        c.contains("ready on the direct path; writing to DCT"),
        "{c}"
    );
    assert!(
        c.contains("the server checked its 32768 bytes: all as written"),
        "{c}"
    );
    let s = String::from_utf8_lossy(&server.stdout);
    assert!(
        s.contains("300 writes received; all 32768 bytes of the target checked"),
        "{s}"
    );
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dc_write_direct_client_writes_to_a_plain_server_which_checks_the_data() {
    dc_write_direct_against_a_plain_server("19153", None);
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dc_write_direct_client_on_four_dci_streams_writes_to_a_plain_server() {
    let caps = hw::open().mlx5_caps().expect("mlx5 caps").dci_streams_caps;
    assert!(
        caps.is_some_and(|c| c.max_log_num_concurent >= 2),
        "the device has no 4 DCI streams: {caps:?}"
    );
    dc_write_direct_against_a_plain_server("19154", Some("2"));
}

/// `dc_write --direct --loopback`: the direct DCI and the DCT in one
/// process, every byte of the target checked.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dc_write_direct_loopback_checks_the_data() {
    let (dev, gid) = mlx5_device_and_gid();
    let out = run(Command::new(example("dc_write")).args([
        "--direct",
        "--loopback",
        "-d",
        &dev,
        "-g",
        &gid,
        "-n",
        "1000",
        "-s",
        "4096",
        "-b",
        "32",
    ]));
    assert_status(&out, 0, "dc_write --direct --loopback");
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("ready on the direct path"), "{s}");
    assert!(
        s.contains("1000 writes received; all 131072 bytes of the target checked"),
        "{s}"
    );
}

/// `-d DEV [-x GID] -s SIZE -n ITERS -p PORT`, as perftest and the
/// examples' `--perftest` take them (`-x` on RoCE only: perftest on
/// InfiniBand goes by LID).
fn perftest_args(size: &str, iters: &str, port: &str) -> Vec<String> {
    let ctx = hw::open();
    let mut v = vec!["-d".to_string(), ctx.name().to_string()];
    if let Some(i) = rig::connect_options(&ctx).gid_index {
        v.extend(["-x".to_string(), i.to_string()]);
    }
    for a in ["-s", size, "-n", iters, "-p", port] {
        v.push(a.to_string());
    }
    v
}

/// `server` (a command line: program and arguments) spawned, then the
/// direct client `example --perftest --direct` with `extra`, tried until
/// it reaches it; both must exit 0. Returns the server's and the
/// client's standard output.
fn direct_perftest_client(
    server: (&str, &[String]),
    example_name: &str,
    args: &[String],
    extra: &[&str],
) -> (String, String) {
    let (prog, sargs) = server;
    let mut cargs: Vec<&str> = args.iter().map(String::as_str).collect();
    cargs.extend(["--perftest", "--direct"]);
    cargs.extend(extra);
    cargs.push("127.0.0.1");
    let pair = || {
        let s = if prog == example_name {
            spawn(Command::new(example(prog)).args(sargs))
        } else {
            spawn(Command::new(prog).args(sargs))
        };
        let c = run_client(example(example_name), &cargs);
        (c, finish(s, prog))
    };
    let (c, s) = if prog == example_name {
        pair()
    } else {
        again_while_perftest_could_not_time(pair)
    };
    let what = format!("{example_name} {}", cargs.join(" "));
    assert_status(&c, 0, &what);
    assert_status(&s, 0, &format!("{prog} server, against {what}"));
    let out = |o: &Output| String::from_utf8_lossy(&o.stdout).into_owned();
    (out(&s), out(&c))
}

/// perftest's report, which its run prints when it completed.
fn perftest_reported(out: &str) -> bool {
    // perftest 6.06 (Debian 12) says MB/sec; later releases MiB/sec.
    out.contains("BW average[MB/sec]") || out.contains("BW average[MiB/sec]")
}

/// The direct client as perftest's peer: 200 writes completed, perftest
/// (which checks nothing) said so.
fn says_perftest_checks_nothing(prog: &str, mine: &str) -> bool {
    mine.lines().any(|l| {
        l.starts_with(&format!(
            "{prog}: 200 writes completed; the peer is perftest \""
        )) && l.ends_with("\", which does not check the data")
    })
}

/// `rc_write --perftest --direct` against perftest's `ib_write_bw`
/// server (an ordinary verbs QP): the writes on the direct path, each
/// batch's completion covering its writes, perftest's run complete.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn rc_write_perftest_direct_client_against_ib_write_bw_server() {
    let args = perftest_args("4096", "200", "19155");
    let (theirs, mine) = direct_perftest_client(("ib_write_bw", &args), "rc_write", &args, &[]);
    assert!(perftest_reported(&theirs), "{theirs}");
    assert!(mine.contains(", direct path"), "{mine}");
    assert!(says_perftest_checks_nothing("rc_write", &mine), "{mine}");
}

/// `example --perftest --direct` against `example --perftest`, whose
/// server checks every byte the writes covered (at perftest's offsets)
/// and that the rest is untouched; `direct_says` is what the client prints
/// of its direct path.
fn against_own_perftest_server(example_name: &str, port: &str, direct_says: &str) {
    let args = perftest_args("100", "300", port);
    let mut sargs = args.clone();
    sargs.extend(["--perftest".to_string(), "-b".to_string(), "8".to_string()]);
    let (server, client) =
        direct_perftest_client((example_name, &sargs), example_name, &args, &["-b", "8"]);
    assert!(
        server.contains(
            "data check: the 3200 bytes the writes covered hold what was written, \
             the other 896 are untouched"
        ),
        "{server}"
    );
    assert!(client.contains(direct_says), "{client}");
    assert!(
        client.contains("the server checked the bytes written: all as written"),
        "{client}"
    );
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn rc_write_perftest_direct_client_against_rc_write_perftest_server() {
    against_own_perftest_server("rc_write", "19156", ", direct path");
}

/// `dc_write --perftest --direct` on four DCI streams against perftest's
/// `ib_write_bw -c DC` server: the DCI on the direct path writing to
/// perftest's DCT, perftest's run complete.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dc_write_perftest_direct_client_against_ib_write_bw_dc_server() {
    let args = perftest_args("4096", "200", "19157");
    let mut theirs_args = args.clone();
    theirs_args.extend(["-c".to_string(), "DC".to_string()]);
    let (theirs, mine) = direct_perftest_client(
        ("ib_write_bw", &theirs_args),
        "dc_write",
        &args,
        &["--streams", "2"],
    );
    assert!(perftest_reported(&theirs), "{theirs}");
    assert!(theirs.contains("Connection type : DC"), "{theirs}");
    assert!(
        mine.contains("ready on the direct path; writing to DCT")
            && mine.contains("(key 0xffeeddcc)"),
        "{mine}"
    );
    assert!(says_perftest_checks_nothing("dc_write", &mine), "{mine}");
}

/// `dc_write --perftest --direct` against `dc_write --perftest`, whose
/// server checks every byte the writes covered.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dc_write_perftest_direct_client_against_dc_write_perftest_server() {
    against_own_perftest_server("dc_write", "19158", "ready on the direct path");
}
