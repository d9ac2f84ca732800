//! `uc_pingpong` against rdma-core's `ibv_uc_pingpong`, in both directions,
//! on an RDMA device (soft-RoCE in the test guest; the software mlx5
//! device, where every process under one `scripts/mlx5-sim` is a host of
//! one fabric): the same exchange, the same QP attributes, the same
//! messages, each side's exit status and report checked; with `-e`
//! (completion events) and `-c` (the C tools' data validation) too.
//!
//! The examples must be built first (`cargo build --examples`). Without
//! `MLX5DV_TEST_DEVICE` the tests are ignored, and fail if forced to run.

mod support;

use std::process::{Command, Output};
use support::examples::*;
use support::process::{spawn, text};

/// The address line `who` ("local", "remote") of a pingpong's output, as
/// rdma-core prints it: `  local address:  LID 0x0001, QPN 0x000123, ...`.
#[track_caller]
fn address_line(out: &Output, who: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .find(|l| l.starts_with(&format!("  {who} address:")))
        .unwrap_or_else(|| panic!("no {who} address line: {}", text(out)));
    let fields: Vec<&str> = line.split(", ").collect();
    assert_eq!(fields.len(), 4, "{line}");
    assert!(
        fields[0].contains(" LID 0x") && fields[0].len() >= 6,
        "{line}"
    );
    for (f, key) in fields[1..].iter().zip(["QPN 0x", "PSN 0x", "GID "]) {
        assert!(f.starts_with(key), "{line}");
    }
    // The hex fields as the C tool pads them: LID 4 digits, QPN and PSN 6.
    let digits = |f: &str, key: &str| f.split(key).nth(1).map_or(0, str::len);
    assert_eq!(digits(fields[0], "LID 0x"), 4, "{line}");
    assert_eq!(digits(fields[1], "QPN 0x"), 6, "{line}");
    assert_eq!(digits(fields[2], "PSN 0x"), 6, "{line}");
    line.to_string()
}

/// One run: the server (`c_serves`: rdma-core's tool, else the example)
/// and the client (the other), both given `args`; returns (ours, theirs).
fn pingpong(c_serves: bool, args: &[&str]) -> (Output, Output) {
    let client_args = [args, &["127.0.0.1"]].concat();
    if c_serves {
        let server = spawn(Command::new("ibv_uc_pingpong").args(args));
        let client = run_client(example("uc_pingpong"), &client_args);
        (client, finish(server, "ibv_uc_pingpong server"))
    } else {
        let server = spawn(Command::new(example("uc_pingpong")).args(args));
        let client = run_client("ibv_uc_pingpong", &client_args);
        (finish(server, "uc_pingpong server"), client)
    }
}

/// Both sides passed, each sent and received `iters` messages of `size`
/// bytes, ours checked every byte, and the two agree on each other's
/// addresses (one's local QPN and PSN are the other's remote ones).
#[track_caller]
fn assert_both_passed(ours: &Output, theirs: &Output, iters: u32, size: u32, what: &str) {
    assert_status(ours, 0, &format!("uc_pingpong {what}"));
    assert_status(theirs, 0, &format!("ibv_uc_pingpong {what}"));
    let out = String::from_utf8_lossy(&ours.stdout);
    assert!(
        out.contains(&format!(
            "{iters} messages of {size} bytes received and checked"
        )),
        "{what}: {}",
        text(ours)
    );
    for o in [ours, theirs] {
        let s = String::from_utf8_lossy(&o.stdout);
        assert!(
            s.contains(&format!("{iters} iters in")),
            "{what}: {}",
            text(o)
        );
        assert!(s.contains(" Mbit/sec"), "{what}: {}", text(o));
        assert!(!s.contains("invalid data"), "{what}: {}", text(o));
    }
    let qpn_psn = |l: &str| l.split(", ").skip(1).take(2).collect::<Vec<_>>().join(", ");
    assert_eq!(
        qpn_psn(&address_line(ours, "local")),
        qpn_psn(&address_line(theirs, "remote")),
        "{what}"
    );
    assert_eq!(
        qpn_psn(&address_line(ours, "remote")),
        qpn_psn(&address_line(theirs, "local")),
        "{what}"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn uc_pingpong_client_passes_against_ibv_uc_pingpong_server() {
    let (dev, gid) = device_and_gid();
    let args = ["-d", &dev, "-g", &gid, "-n", "100", "-p", "19141"];
    let (ours, theirs) = pingpong(true, &args);
    assert_both_passed(&ours, &theirs, 100, 4096, "client, C server");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn ibv_uc_pingpong_client_passes_against_uc_pingpong_server() {
    let (dev, gid) = device_and_gid();
    let args = ["-d", &dev, "-g", &gid, "-n", "100", "-p", "19142"];
    let (ours, theirs) = pingpong(false, &args);
    assert_both_passed(&ours, &theirs, 100, 4096, "server, C client");
}

/// Messages of several pages over a 512-byte MTU (many packets each, none
/// acknowledged), a small receive queue, completion events, and `-c` (the
/// C client zeroes the first byte of each page, the C server echoes it:
/// the example takes 0 or 0x7b there).
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn uc_pingpong_with_events_chk_odd_size_and_mtu_both_ways() {
    let (dev, gid) = device_and_gid();
    for (c_serves, port) in [(true, "19143"), (false, "19144")] {
        let args = [
            "-d", &dev, "-g", &gid, "-n", "40", "-s", "10000", "-m", "512", "-r", "8", "-e", "-c",
            "-p", port,
        ];
        let (ours, theirs) = pingpong(c_serves, &args);
        let what = format!("-e -c -s 10000 -m 512 (C serves: {c_serves})");
        assert_both_passed(&ours, &theirs, 40, 10000, &what);
        {
            let out = String::from_utf8_lossy(&ours.stdout);
            assert!(
                out.contains("but the first of each page, 0"),
                "{what}: {out}"
            );
        }
    }
}
