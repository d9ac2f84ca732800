//! The examples' command line, on any machine: no RDMA device is needed.
//!
//! Every example binary refuses a bad number, a value out of its option's
//! range, an unknown option, a missing value and an extra argument with
//! exit status 2, one line and a hint, before it opens a device; and takes
//! getopt's forms (bundled flags, attached values, `--long=value`, `--`)
//! and goes on to the device: with `-d` naming no device, it fails there,
//! with exit status 1. The parser (`examples/common/cli.rs`) and the
//! clients' wait for their server (`examples/common/mod.rs`) are also
//! tested here in-process.
//!
//! The examples are built by this test (`cargo build --example ...`, with
//! this test's features and profile) before they are run.

#[path = "../examples/common/mod.rs"]
mod common;
#[allow(dead_code)]
mod support;

use common::{flag, val, Cli, Failure, Wait};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use support::process::{finish, spawn, text};

/// A device name no machine has.
const NODEV: &str = "mlx5dv-no-such-device";

/// The examples this build has (`tokio_echo` needs the `tokio` feature,
/// `rping` the `rdma-cm` one).
fn examples() -> Vec<&'static str> {
    let mut v = vec![
        "cq_events",
        "dc_write",
        "devinfo",
        "dma_memcpy",
        "mkey_layout",
        "raw_wqe",
        "rc_pingpong",
        "rc_write",
        "srq_pingpong",
        "uc_pingpong",
        "ud_pingpong",
        "xsrq_pingpong",
    ];
    if cfg!(feature = "tokio") {
        v.push("tokio_echo");
    }
    if cfg!(feature = "rdma-cm") {
        v.push("rping");
    }
    v
}

/// `target/<profile>/`, where this test runs from (`deps/`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("test executable in target/<profile>/deps")
        .to_path_buf()
}

/// Builds the examples once, with this test's features, into this test's
/// target directory and profile.
fn build_examples() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let profile = profile_dir();
        let target_dir = profile.parent().expect("target/<profile>");
        let name = profile.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["build", "--quiet", "--target-dir"])
            .arg(target_dir)
            .args(["--profile", if name == "debug" { "dev" } else { name }]);
        if !cfg!(feature = "bindgen") {
            cmd.arg("--no-default-features");
        }
        let features: Vec<&str> = [
            (cfg!(feature = "tokio"), "tokio"),
            (cfg!(feature = "rdma-cm"), "rdma-cm"),
        ]
        .into_iter()
        .filter_map(|(on, f)| on.then_some(f))
        .collect();
        if !features.is_empty() {
            cmd.args(["--features", &features.join(",")]);
        }
        for e in examples() {
            cmd.args(["--example", e]);
        }
        let status = cmd.status().expect("run cargo build");
        assert!(status.success(), "{cmd:?}: {status}");
    });
}

/// The built example `name`: `target/<profile>/examples/<name>`.
fn example(name: &str) -> PathBuf {
    build_examples();
    let path = profile_dir().join("examples").join(name);
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// Runs example `name` with `args`, no input, killed after 60 s.
fn run(name: &str, args: &[&str]) -> Output {
    let child = spawn(Command::new(example(name)).args(args));
    finish(child, &format!("{name} {args:?}"), Duration::from_secs(60))
}

/// Asserts exit status 2 with `"<name>: <...want...>"` and the hint as the
/// only two lines of standard error, and nothing on standard output.
#[track_caller]
fn assert_usage_error(name: &str, args: &[&str], want: &str) {
    let out = run(name, args);
    let what = format!("{name} {args:?}: {}", text(&out));
    assert_eq!(out.status.code(), Some(2), "{what}");
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{what}");
    assert!(
        lines[0].starts_with(&format!("{name}: ")) && lines[0].contains(want),
        "wanted '{want}': {what}"
    );
    assert_eq!(lines[1], format!("Try '{name} -h'."), "{what}");
    assert!(out.stdout.is_empty(), "{what}");
}

/// Asserts that the line parsed and the example went on to open device
/// [`NODEV`]: exit status 1, and the library's "no such device" message.
#[track_caller]
fn assert_reaches_the_device(name: &str, args: &[&str]) {
    let out = run(name, args);
    let what = format!("{name} {args:?}: {}", text(&out));
    assert_eq!(out.status.code(), Some(1), "{what}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(&format!(
            "{name}: no RDMA device named \"{NODEV}\" (found: "
        )),
        "{what}"
    );
    assert!(!err.contains("Try '"), "{what}");
}

/// What each example takes: a numeric option, and whether it takes a
/// host (a client) or no argument at all.
fn numeric_option(name: &str) -> Option<&'static str> {
    match name {
        "devinfo" => None,
        "mkey_layout" => Some("-r"),
        "rping" => Some("-C"),
        _ => Some("-n"),
    }
}

fn takes_a_host(name: &str) -> bool {
    matches!(
        name,
        "dc_write"
            | "rc_pingpong"
            | "rc_write"
            | "srq_pingpong"
            | "tokio_echo"
            | "uc_pingpong"
            | "ud_pingpong"
            | "xsrq_pingpong"
    )
}

#[test]
fn every_example_refuses_bad_usage_with_status_2_before_the_device() {
    for name in examples() {
        if name == "rping" {
            continue; // its own getopt string: below
        }
        // With `-d NODEV` first, an example that parsed on would fail at
        // the device with status 1, not 2.
        let d = ["-d", NODEV];
        if let Some(n) = numeric_option(name) {
            for bad in ["lots", "12x", "-1", "0x", ""] {
                assert_usage_error(name, &[&d[..], &[n, bad]].concat(), "is not a number");
            }
            let attached = format!("{n}lots");
            assert_usage_error(
                name,
                &[&d[..], &[&attached]].concat(),
                "'lots' is not a number",
            );
            assert_usage_error(
                name,
                &[&d[..], &[n, "99999999999999999999"]].concat(),
                "is out of range",
            );
        }
        if name != "devinfo" {
            for (bad, want) in [
                (["-i", "0"], "--ib-port: 0 is out of range (1 to 255)"),
                (["-i", "256"], "--ib-port: 256 is out of range (1 to 255)"),
                (["-g", "0x100"], "--gid-idx: 256 is out of range (0 to 255)"),
            ] {
                assert_usage_error(name, &[&d[..], &bad].concat(), want);
            }
        }
        if takes_a_host(name) {
            assert_usage_error(
                name,
                &["-d", NODEV, "-p", "65536"],
                "--port: 65536 is out of range",
            );
            assert_usage_error(name, &["-d", NODEV, "h1", "h2"], "unexpected argument 'h2'");
        } else {
            assert_usage_error(name, &["-d", NODEV, "extra"], "unexpected argument 'extra'");
        }
        assert_usage_error(
            name,
            &["-d", NODEV, "--no-such-option"],
            "unknown option '--no-such-option'",
        );
        assert_usage_error(name, &["-d", NODEV, "-Q"], "unknown option '-Q'");
        assert_usage_error(name, &["-d"], "option '-d' needs a value");
        assert_usage_error(name, &["--ib-dev"], "option '--ib-dev' needs a value");
        // `-d NODEV` after the bad option: nothing is read past it.
        assert_usage_error(name, &["-Q", "-d", NODEV], "unknown option '-Q'");
    }
    for (name, args, want) in [
        (
            "rc_pingpong",
            &["-m", "1000"][..],
            "--mtu: 1000 is not 256, 512, 1024, 2048 or 4096",
        ),
        ("dc_write", &["-m", "4097"], "--mtu: 4097 is not"),
        ("rc_write", &["-m", "0"], "--mtu: 0 is not"),
        (
            "rc_write",
            &["--loopback=yes"],
            "option '--loopback' takes no value",
        ),
        ("rc_write", &["--direct"], "--direct is the writer's"),
        (
            "rc_write",
            &["--direct", "-R", "host"],
            "-R does not go with --direct",
        ),
        (
            "rc_write",
            &["--direct", "--perftest"],
            "--direct is the writer's",
        ),
        (
            "dc_write",
            &["--direct", "--perftest"],
            "--direct is the DCI's",
        ),
        (
            "dc_write",
            &["-s", "0"],
            "--size, --iters and --batch must be at least 1",
        ),
        (
            "dc_write",
            &["-b", "0x100000000"],
            "--batch: 0x100000000 is out of range",
        ),
        ("dc_write", &["--streams", "16"], "at most 15"),
        ("cq_events", &["-s", "4"], "--size 8 to 1 MiB"),
        ("rc_pingpong", &["-r", "0"], "must be at least 1"),
        ("uc_pingpong", &["-s", "0"], "must be at least 1"),
        ("uc_pingpong", &["-e=1"], "option '-e' takes no value"),
        ("rc_pingpong", &["-l", "256"], "--sl: 256 is out of range"),
        (
            "rc_pingpong",
            &["--direct", "-e"],
            "-e does not go with --direct",
        ),
        (
            "rc_pingpong",
            &["--rx-depth=0x100000000"],
            "--rx-depth: 0x100000000 is out of range",
        ),
        ("devinfo", &["-v=1"], "option '-v' takes no value"),
        (
            "srq_pingpong",
            &["-q", "256"],
            "--num-qp 256 must be less than 256",
        ),
        ("srq_pingpong", &["-q", "0"], "must be at least 1"),
        (
            "srq_pingpong",
            &["--events=1"],
            "option '--events' takes no value",
        ),
    ] {
        assert_usage_error(name, &[&["-d", NODEV][..], args].concat(), want);
    }
}

#[test]
#[cfg(feature = "rdma-cm")]
fn rping_refuses_bad_usage_with_status_2_before_the_cm() {
    let client = ["-c", "-a", "127.0.0.1"];
    for (args, want) in [
        (&["-C", "lots"][..], "invalid count \"lots\""),
        (&["-p", "65536"], "invalid port"),
        (
            &["-S", "10"],
            "Invalid size 10 (valid range is 26 to 65535)",
        ),
        (&["-Q"], "unknown option '-Q'"),
        (&["--count=1"], "unknown option '--count'"),
        (&["extra"], "unexpected argument \"extra\""),
        (&["-p"], "-p needs a value"),
    ] {
        assert_usage_error("rping", &[&client[..], args].concat(), want);
    }
    assert_usage_error("rping", &["-vV"], "give -s (server) or -c (client)");
    assert_usage_error(
        "rping",
        &["-cvV"],
        "the client needs the server's address (-a)",
    );
}

#[test]
fn help_in_a_bundle_prints_the_usage_and_exits_0() {
    for name in examples() {
        let bundle = match name {
            "devinfo" | "rping" => "-vh",
            "cq_events" => "-Ph",
            "tokio_echo" => "-lh",
            "dc_write" | "rc_write" => "-Lh",
            _ => "-h",
        };
        // Help after a value option (rping's `-a`, the others' `-d`).
        let (opt, v) = match name {
            "rping" => ("-a", "127.0.0.1"),
            _ => ("-d", NODEV),
        };
        for args in [&[bundle][..], &["--help"], &[opt, v, "-h"]] {
            let out = run(name, args);
            let what = format!("{name} {args:?}: {}", text(&out));
            assert_eq!(out.status.code(), Some(0), "{what}");
            assert!(
                String::from_utf8_lossy(&out.stdout).starts_with("Usage"),
                "{what}"
            );
            assert!(out.stderr.is_empty(), "{what}");
        }
    }
}

#[test]
fn getopt_forms_parse_and_go_on_to_the_device() {
    let d = format!("-d{NODEV}");
    let ib_dev = format!("--ib-dev={NODEV}");
    // A flag and a value option in one word: `-Ld NODEV`, `-Ld<NODEV>`.
    let ld = format!("-Ld{NODEV}");
    let vd = format!("-vd{NODEV}");
    let valid: Vec<(&str, Vec<&str>)> = vec![
        ("cq_events", vec!["-Pn5", "-s64", "-D", "0", &d]),
        (
            "cq_events",
            vec!["--poll", "--iters=5", "--delay", "0x10", &ib_dev],
        ),
        ("dc_write", vec![&ld]),
        ("dc_write", vec!["-Ls4096", "-Ld", NODEV]),
        (
            "dc_write",
            vec!["-Ln", "0x10", "-b4", "-m1024", "-S", "2", "-d", NODEV],
        ),
        (
            "dc_write",
            vec!["-p18517", "-i1", "-g0", &d, "--", "somehost"],
        ),
        ("devinfo", vec![&vd]),
        ("devinfo", vec!["-vd", NODEV]),
        ("devinfo", vec!["--verbose", &ib_dev]),
        ("dma_memcpy", vec!["-s4096", "-n", "0x10", "-b4", &d]),
        (
            "dma_memcpy",
            vec!["--size", "4096", "--batch=4", &ib_dev, "--"],
        ),
        ("mkey_layout", vec!["-r4", &d]),
        ("mkey_layout", vec!["--repeat=0x4", "--ib-dev", NODEV]),
        ("raw_wqe", vec!["-s256", "-n1", "-i", "1", &d]),
        (
            "rc_pingpong",
            vec!["-s4096", "-m1024", "-r8", "-l0", "-p18515", &d, "host"],
        ),
        (
            "rc_pingpong",
            vec!["--mtu=2048", "--sl", "1", &ib_dev, "--", "host"],
        ),
        (
            "srq_pingpong",
            vec!["-ecq4", "-r8", "-n5", "-s64", &d, "host"],
        ),
        (
            "srq_pingpong",
            vec!["--num-qp=2", "--events", "--chk", &ib_dev],
        ),
        ("rc_pingpong", vec!["-ec", "-n5", &d, "host"]),
        (
            "uc_pingpong",
            vec!["-ecs4096", "-m1024", "-r8", "-l0", "-p18515", &d, "host"],
        ),
        (
            "uc_pingpong",
            vec!["--events", "--chk", "--gid-idx=0", &ib_dev, "--", "host"],
        ),
        ("rc_write", vec![&ld]),
        (
            "rc_write",
            vec!["-Ls4096", "-n5", "-b2", "-m", "1024", "-d", NODEV],
        ),
        ("rc_write", vec!["-s4096", "-n5", &d, "host"]),
        ("tokio_echo", vec!["-lc2", "-d", NODEV]),
        (
            "tokio_echo",
            vec!["-n5", "-s64", "--port=18518", &d, "host"],
        ),
    ];
    let built = examples();
    for (name, args) in valid {
        if built.contains(&name) {
            assert_reaches_the_device(name, &args);
        }
    }
}

#[test]
#[cfg(feature = "rdma-cm")]
fn rping_takes_bundled_flags_and_attached_values() {
    // A client of a port nothing listens on: it parses, then fails in the
    // CM (no device, or nobody answers), with status 1.
    for args in [
        &["-cvVd", "-a127.0.0.1", "-p1", "-S64", "-C1"][..],
        &["-c", "-a", "127.0.0.1", "-p", "1", "-vV"],
    ] {
        let out = run("rping", args);
        let what = format!("rping {args:?}: {}", text(&out));
        assert_eq!(out.status.code(), Some(1), "{what}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.starts_with("rping client: "), "{what}");
        assert!(!err.contains("Try '"), "{what}");
    }
}

// ---- the parser, in-process

fn opts() -> Vec<common::Opt> {
    vec![
        val('d', "ib-dev"),
        val('i', "ib-port"),
        val('p', "port"),
        val('m', "mtu"),
        val('s', "size"),
        val('n', "iters"),
        flag('L', "loopback"),
        flag('v', "verbose"),
    ]
}

fn parse(args: &[&str]) -> Result<Option<Cli>, String> {
    Cli::try_parse_from("t", &opts(), args)
}

fn parsed(args: &[&str]) -> Cli {
    parse(args)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
        .expect("not help")
}

#[test]
fn the_parser_reads_getopt_forms() {
    for args in [
        &["-Lvs4096", "-dmlx5_0", "host"][..],
        &["-L", "-v", "-s", "4096", "-d", "mlx5_0", "host"],
        &["-vLs", "0x1000", "--ib-dev=mlx5_0", "host"],
        &[
            "--loopback",
            "--verbose",
            "--size",
            "4096",
            "--ib-dev",
            "mlx5_0",
            "--",
            "host",
        ],
        &["host", "-vL", "--size=0x1000", "-dmlx5_0"],
    ] {
        let cli = parsed(args);
        assert!(cli.flag("loopback") && cli.flag("verbose"), "{args:?}");
        assert_eq!(cli.num::<usize>("size"), Some(4096), "{args:?}");
        assert_eq!(cli.text("ib-dev"), Some("mlx5_0"), "{args:?}");
        assert_eq!(cli.positional, ["host"], "{args:?}");
        assert_eq!(cli.num::<u64>("iters"), None, "{args:?}");
    }
    // After `--`, an option's look-alike is an argument; a value may start
    // with a dash.
    let cli = parsed(&["-d", "-x", "--", "-L"]);
    assert_eq!(cli.text("ib-dev"), Some("-x"));
    assert!(!cli.flag("loopback"));
    assert_eq!(cli.positional, ["-L"]);
    // The last of a repeated option counts, as with getopt's callers.
    assert_eq!(parsed(&["-n1", "-n", "2"]).num::<u64>("iters"), Some(2));
    // The shared vocabulary: limits, and the MTU.
    let cli = parsed(&["-i255", "-p65535", "-m4096", "-n18446744073709551615"]);
    assert_eq!(cli.num::<u8>("ib-port"), Some(255));
    assert_eq!(cli.num::<u16>("port"), Some(65535));
    assert_eq!(cli.mtu(), Some(mlx5dv::Mtu::Mtu4096));
    assert_eq!(cli.num::<u64>("iters"), Some(u64::MAX));
    assert!(matches!(parse(&["-vh", "-Q"]), Ok(None)), "help first");
}

#[test]
fn the_parser_refuses_with_one_line() {
    for (args, want) in [
        (
            &["-s", "lots"][..],
            "--size: 'lots' is not a number (decimal, or hex with 0x)",
        ),
        (
            &["-s-1"],
            "--size: '-1' is not a number (decimal, or hex with 0x)",
        ),
        (
            &["-n", "18446744073709551616"],
            "--iters: 18446744073709551616 is out of range",
        ),
        (&["-i0"], "--ib-port: 0 is out of range (1 to 255)"),
        (
            &["--port=65536"],
            "--port: 65536 is out of range (0 to 65535)",
        ),
        (
            &["-m", "300"],
            "--mtu: 300 is not 256, 512, 1024, 2048 or 4096",
        ),
        (&["-Lx"], "unknown option '-x'"),
        (&["--size4096"], "unknown option '--size4096'"),
        (&["-s"], "option '-s' needs a value"),
        (&["--size"], "option '--size' needs a value"),
        (&["--loopback=1"], "option '--loopback' takes no value"),
    ] {
        assert_eq!(parse(args).err().as_deref(), Some(want), "{args:?}");
    }
}

// ---- the client's wait, in-process

/// A loopback port that nothing listens on (it did a moment ago).
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("local_addr").port()
}

#[test]
fn a_client_that_waits_once_fails_at_once_when_nothing_listens() {
    let port = closed_port();
    let start = Instant::now();
    let r = common::connect_to_server("127.0.0.1", port, Wait::Once);
    let Err(Failure::Failed(m)) = r else {
        panic!("connected to a closed port: {r:?}")
    };
    assert!(
        m.starts_with(&format!("cannot connect to 127.0.0.1:{port}: ")),
        "{m}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_retrying_client_gives_up_after_its_window() {
    let port = closed_port();
    let start = Instant::now();
    let r = common::connect_to_server("127.0.0.1", port, Wait::Retry(Duration::from_millis(600)));
    let Err(Failure::Failed(m)) = r else {
        panic!("connected to a closed port: {r:?}")
    };
    assert!(
        m.starts_with(&format!("no server at 127.0.0.1:{port} within 600ms: ")),
        "{m}"
    );
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(600) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[test]
fn a_retrying_client_reaches_a_server_that_starts_late() {
    let port = closed_port();
    let server = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        let l = TcpListener::bind(("127.0.0.1", port)).expect("bind the late server");
        l.accept().map(|_| ())
    });
    let s = common::connect_to_server("127.0.0.1", port, Wait::Retry(Duration::from_secs(20)));
    assert!(s.is_ok(), "{s:?}");
    server.join().expect("server thread").expect("accept");
}
