//! The `ud_pingpong` example against rdma-core's `ibv_ud_pingpong`, in both
//! directions, on a real RDMA device (soft-RoCE in the test guest) or the
//! software mlx5 device (`mlx5dv-sim`, InfiniBand or `--roce`; every
//! process under one `scripts/mlx5-sim` is a host of one fabric): with a
//! GID (`-g`) and the C tool's buffer check (`-c`), and as a user would on
//! each link layer (on RoCE by the port's IPv4 RoCE v2 GID, on InfiniBand
//! by LID alone); the example against itself sleeping on CQ events
//! (`-e`); its usage errors and its refusal of a message larger than the
//! port's MTU.
//!
//! The examples must be built first (`cargo build --examples`; scripts/test
//! does it). Run with `MLX5DV_TEST_DEVICE` set; without it the tests are
//! ignored, and fail if forced to run.

mod support;

use std::process::{Command, Output};
use support::examples::{assert_status, device_and_gid, example, finish, run, run_client};
use support::process::{spawn, text};
use support::rig;

/// Runs a server (`ud_pingpong` when `c_serves` is false, else the C
/// tool) and the other as its client, with `common` arguments (and
/// `client_extra` for the client); returns (ours, theirs).
fn pair(common: &[&str], client_extra: &[&str], c_serves: bool) -> (Output, Output) {
    let client_args = [common, client_extra, &["127.0.0.1"]].concat();
    if c_serves {
        let server = spawn(Command::new("ibv_ud_pingpong").args(common));
        let client = run_client(example("ud_pingpong"), &client_args);
        (client, finish(server, "ibv_ud_pingpong server"))
    } else {
        let server = spawn(Command::new(example("ud_pingpong")).args(common));
        let client = run_client("ibv_ud_pingpong", &client_args);
        (finish(server, "ud_pingpong server"), client)
    }
}

/// Both ended well: ours checked `n` messages of `size` bytes, the C tool
/// ran its `n` iterations and (with `-c`) found no invalid page.
#[track_caller]
fn assert_both(ours: &Output, theirs: &Output, n: u32, size: u32, what: &str) {
    assert_status(ours, 0, &format!("ud_pingpong, {what}"));
    assert_status(theirs, 0, &format!("ibv_ud_pingpong, {what}"));
    let out = String::from_utf8_lossy(&ours.stdout);
    assert!(
        out.contains(&format!(
            "{n} messages of {size} bytes received and checked"
        )),
        "{what}: {}",
        text(ours)
    );
    let c = String::from_utf8_lossy(&theirs.stdout);
    assert!(
        c.contains(&format!("{n} iters in")),
        "{what}: {}",
        text(theirs)
    );
    assert!(!c.contains("invalid data"), "{what}: {}", text(theirs));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn ud_pingpong_client_passes_against_ibv_ud_pingpong_server() {
    let (dev, gid) = device_and_gid();
    let common = ["-d", &dev, "-g", &gid, "-n", "100", "-p", "19301"];
    let (ours, theirs) = pair(&common, &["-c"], true);
    assert_both(&ours, &theirs, 100, 1024, "C server, -c client");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn ibv_ud_pingpong_client_passes_against_ud_pingpong_server() {
    let (dev, gid) = device_and_gid();
    let common = [
        "-d", &dev, "-g", &gid, "-n", "100", "-s", "512", "-r", "8", "-p", "19302",
    ];
    let (ours, theirs) = pair(&common, &["-c"], false);
    assert_both(&ours, &theirs, 100, 512, "C -c client");
}

/// As a user would address the peer: on RoCE with `-g` of the port's IPv4
/// RoCE v2 GID (`Context::default_gid_index`), on InfiniBand without `-g`,
/// by LID alone (no GRH), each way.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn pingpong_both_ways_by_the_ipv4_roce_v2_gid_or_by_lid_alone() {
    let ctx = rig::open();
    let gid = ctx
        .default_gid_index(1)
        .expect("default_gid_index")
        .map(|i| i.to_string());
    let dev = ctx.name().to_string();
    for (port, c_serves) in [("19303", true), ("19304", false)] {
        let mut common = vec!["-d", &dev, "-n", "50", "-p", port];
        if let Some(g) = &gid {
            common.extend(["-g", g]);
        }
        let (ours, theirs) = pair(&common, &[], c_serves);
        let what = format!("{} (ibv_ud_pingpong serves: {c_serves})", common.join(" "));
        assert_both(&ours, &theirs, 50, 1024, &what);
        let out = String::from_utf8_lossy(&ours.stdout);
        let local = out
            .lines()
            .find(|l| l.trim_start().starts_with("local address:"))
            .unwrap_or_else(|| panic!("{what}: no local address: {out}"));
        if gid.is_some() {
            assert!(local.contains("GID ::ffff:"), "{what}: {local}");
        } else {
            assert!(local.ends_with("GID ::"), "{what}: {local}");
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn ud_pingpong_against_itself_sleeping_on_cq_events() {
    let (dev, gid) = device_and_gid();
    let common = ["-d", &dev, "-g", &gid, "-n", "50", "-e", "-p", "19305"];
    let server = spawn(Command::new(example("ud_pingpong")).args(common));
    let client = run_client(
        example("ud_pingpong"),
        &[&common[..], &["-c", "127.0.0.1"]].concat(),
    );
    let server = finish(server, "ud_pingpong -e server");
    for (out, who) in [(&client, "client"), (&server, "server")] {
        assert_status(out, 0, &format!("ud_pingpong -e {who}"));
        assert!(
            String::from_utf8_lossy(&out.stdout)
                .contains("50 messages of 1024 bytes received and checked"),
            "{who}: {}",
            text(out)
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn ud_pingpong_refuses_bad_usage_and_a_message_past_the_mtu() {
    let (dev, _) = device_and_gid();
    let help = run(Command::new(example("ud_pingpong")).arg("-h"));
    assert_status(&help, 0, "ud_pingpong -h");
    assert!(
        String::from_utf8_lossy(&help.stdout).starts_with("Usage"),
        "{}",
        text(&help)
    );
    let bad = run(Command::new(example("ud_pingpong")).arg("--no-such-option"));
    assert_status(&bad, 2, "ud_pingpong --no-such-option");
    let mtu = rig::open().query_port(1).unwrap().active_mtu.bytes();
    let too_big = (mtu + 1).to_string();
    let args = ["-d", &dev, "-s", &too_big, "-p", "19306", "127.0.0.1"];
    let out = run(Command::new(example("ud_pingpong")).args(args));
    assert_status(&out, 1, "ud_pingpong -s MTU+1");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(&format!("Requested size larger than port MTU ({mtu})")),
        "{}",
        text(&out)
    );
}
