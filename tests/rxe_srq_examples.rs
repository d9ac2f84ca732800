//! The `srq_pingpong` example against rdma-core's `ibv_srq_pingpong`, both
//! ways, on a real RDMA device (soft-RoCE in the test guest) and on the
//! software device (InfiniBand, and RoCE with `-g`): several RC QPs on one
//! SRQ each side, one TCP exchange of all of their addresses, each
//! message's length and bytes checked by the example and each side's exit
//! status and report checked here.
//!
//! The examples must be built first (`cargo build --examples`; scripts/test
//! does it). Run by `scripts/test` with `MLX5DV_TEST_DEVICE` set; without
//! it the tests are ignored, and fail if forced to run.

mod support;

use std::process::{Command, Output};
use support::examples::*;
use support::process::{spawn, text};

/// `srq_pingpong` and `ibv_srq_pingpong` against each other, each way, on
/// the test device and GID, with `extra` options on both sides.
fn both_ways(ports: [&str; 2], extra: &[&str]) -> Vec<(String, Output, Output)> {
    let (dev, gid) = device_and_gid();
    let args = [&["-d", &dev, "-g", &gid][..], extra].concat();
    support::examples::both_ways("srq_pingpong", "ibv_srq_pingpong", ports, &args)
}

/// The address lines of each QP (`local address:` / `remote address:`).
fn addresses(out: &Output, who: &str) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with(&format!("{who} address:")))
        .map(str::to_string)
        .collect()
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn srq_pingpong_and_ibv_srq_pingpong_both_ways_with_four_qps() {
    for (what, ours, theirs) in both_ways(["19120", "19121"], &["-q", "4", "-n", "60"]) {
        let out = String::from_utf8_lossy(&ours.stdout);
        assert!(out.contains("60 iters in"), "{what}: {}", text(&ours));
        let got = out
            .lines()
            .find(|l| l.contains("messages of 4096 bytes received on 4 QPs of one SRQ"))
            .unwrap_or_else(|| panic!("{what}: no data check line: {out}"));
        // As the C tool, a side may receive a few more than -n (the QPs'
        // last sends cross), never fewer.
        let n: u64 = got.split_whitespace().next().unwrap().parse().unwrap();
        assert!((60..60 + 4).contains(&n), "{what}: {got}");
        assert!(
            String::from_utf8_lossy(&theirs.stdout).contains("60 iters in"),
            "{}",
            text(&theirs)
        );
        // Four QPs each side, and each side's remote QPs are the other's
        // local ones, in order.
        for (a, b) in [(&ours, &theirs), (&theirs, &ours)] {
            let (local, remote) = (addresses(a, "local"), addresses(b, "remote"));
            assert_eq!(local.len(), 4, "{what}: {}", text(a));
            let qpn = |l: &str| l.split("QPN ").nth(1).map(|q| q[..8].to_string());
            let l: Vec<_> = local.iter().map(|l| qpn(l)).collect();
            let r: Vec<_> = remote.iter().map(|l| qpn(l)).collect();
            assert_eq!(l, r, "{what}");
        }
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn srq_pingpong_with_its_defaults_sixteen_qps_events_and_odd_sizes_both_ways() {
    // The C tool's defaults (16 QPs, 500 receives) and a message size
    // that is no multiple of the MTU; the example sleeping on CQ events.
    let runs = both_ways(
        ["19122", "19123"],
        &["-n", "100", "-s", "1500", "-m", "512"],
    );
    for (what, ours, _) in &runs {
        let out = String::from_utf8_lossy(&ours.stdout);
        assert!(
            out.contains("messages of 1500 bytes received on 16 QPs of one SRQ"),
            "{what}: {out}"
        );
    }
    let (dev, gid) = device_and_gid();
    let common = ["-d", &dev, "-g", &gid, "-p", "19124", "-q", "3", "-n", "30"];
    let server = spawn(Command::new(example("srq_pingpong")).args(common).arg("-e"));
    let client = run_client(
        "ibv_srq_pingpong",
        &[&common[..], &["-e", "127.0.0.1"]].concat(),
    );
    let server = finish(server, "srq_pingpong -e server");
    assert_status(&server, 0, "srq_pingpong -e server");
    assert_status(&client, 0, "ibv_srq_pingpong -e client");
    assert!(
        String::from_utf8_lossy(&server.stdout).contains("received on 3 QPs of one SRQ"),
        "{}",
        text(&server)
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn srq_pingpong_refuses_more_qps_than_receives_as_the_c_tool_does() {
    let (dev, gid) = device_and_gid();
    let args = ["-d", &dev, "-g", &gid, "-q", "8", "-r", "4", "-p", "19125"];
    let ours = run(Command::new(example("srq_pingpong")).args(args));
    assert_status(&ours, 1, "srq_pingpong -q 8 -r 4");
    let theirs = run(Command::new("ibv_srq_pingpong").args(args));
    assert_eq!(theirs.status.code(), Some(1), "{}", text(&theirs));
    for out in [&ours, &theirs] {
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("rx_depth 4 is too small for 8 QPs"),
            "{}",
            text(out)
        );
    }
}
