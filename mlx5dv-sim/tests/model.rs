//! The software device under the real libibverbs and libmlx5: rdma-core's
//! own tools and a C program (`tests/c/`) that uses only rdma-core's
//! API, each run under the `mlx5-sim` runner. Data is checked byte for byte
//! and every completion's status and opcode (in the C program).
//!
//! These tests need rdma-core's development files (libibverbs-dev) and a C
//! compiler, and `ibv_devices`/`ibv_devinfo` (ibverbs-utils).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

mod common;
use common::{compile_c, ensure_library, runner, text};

fn sim(args: &[&str], envs: &[(&str, &str)]) -> Output {
    ensure_library();
    let mut c = Command::new(runner());
    c.arg("--").args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("run mlx5-sim")
}

/// The C program, compiled once per test binary.
fn model() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        compile_c(
            "model",
            &[
                "model.c",
                "helpers.c",
                "checks_rc.c",
                "checks_dv.c",
                "checks_more.c",
                "checks_raw.c",
                "checks_errors.c",
                "checks_ops.c",
                "checks_verbs.c",
                "checks_xrc.c",
            ],
        )
    })
}

/// Runs one check of the C program (all of them for `None`).
fn run_check(check: Option<&str>, envs: &[(&str, &str)]) -> Output {
    let bin = model().to_str().expect("UTF-8 path").to_owned();
    match check {
        Some(c) => sim(&[&bin, c], envs),
        None => sim(&[&bin], envs),
    }
}

fn assert_check(check: &str) {
    let o = run_check(Some(check), &[]);
    assert!(o.status.success(), "check {check}:\n{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), format!("ok {check}\n"));
}

#[test]
fn ibv_devices_lists_mlx5_0() {
    let o = sim(&["ibv_devices"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("mlx5_0") && out.contains("0c42a10300b10001"),
        "{}",
        text(&o)
    );
}

#[test]
fn ibv_devinfo_shows_a_connectx6_with_an_active_port() {
    let o = sim(&["ibv_devinfo", "-v"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for want in [
        "hca_id:\tmlx5_0",
        "vendor_id:\t\t\t0x02c9",
        "vendor_part_id:\t\t\t4123",
        "PORT_ACTIVE (4)",
        "link_layer:\t\tInfiniBand",
        "fw_ver:\t\t\t\t20.39.1002",
        "max_sge:\t\t\t30",
        "port_lid:\t\t1",
        "GID[  0]:\t\tfe80:0000:0000:0000:0c42:a103:00b1:0001",
    ] {
        assert!(out.contains(want), "missing {want:?}:\n{}", text(&o));
    }
}

#[test]
fn without_mlx5dv_sim_the_library_passes_through() {
    // The interposer is loaded and the tree is there, but the device is
    // off: the fake uverbs node does not exist, so no fake device shows.
    let o = sim(&["env", "-u", "MLX5DV_SIM", "ibv_devices"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("0c42a10300b15e00"),
        "{}",
        text(&o)
    );
}

#[test]
fn device_and_port_attributes() {
    assert_check("device");
}

#[test]
fn rc_write_read_send_atomics_and_remote_access_error() {
    assert_check("rc");
}

#[test]
fn srq_receives() {
    assert_check("srq");
}

#[test]
fn dci_to_dct_right_and_wrong_key_and_streams() {
    assert_check("dc");
}

#[test]
fn memcpy_mr_list_mr_interleaved_and_raw_wqe() {
    assert_check("mlx5");
}

#[test]
fn local_protection_error_then_flush() {
    assert_check("local_error");
}

#[test]
fn completion_channel_events() {
    assert_check("channel");
}

#[test]
fn local_and_remote_invalidate() {
    assert_check("invalidate");
}

#[test]
fn two_contexts_share_one_device() {
    assert_check("contexts");
}

#[test]
fn ud_datagrams_and_a_wrong_qkey() {
    assert_check("ud");
}

#[test]
fn malformed_raw_wqes_complete_in_error_and_flush_the_rest() {
    assert_check("raw_refusals");
}

#[test]
fn abort_inline_data_list_and_mkey_configure() {
    assert_check("ops");
}

#[test]
fn responder_and_transport_error_syndromes() {
    assert_check("syndromes");
}

#[test]
fn rereg_mr_and_verbs_the_device_declines() {
    assert_check("verbs");
}

#[test]
fn unmapped_registered_memory_does_not_fault_the_device() {
    assert_check("unmapped");
}

#[test]
fn xrc_domains_srqs_and_qps() {
    assert_check("xrc");
}

#[test]
fn classic_post_send() {
    assert_check("post_send");
}

#[test]
fn step_mode_without_the_device_thread() {
    let o = run_check(None, &[("MLX5DV_SIM_THREAD", "0"), ("MODEL_STEP", "1")]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    // Every check but the ones run by name only ("overrun").
    assert_eq!(out.lines().count(), 17, "{}", text(&o));
}

#[test]
fn trace_records_every_wqe() {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("trace-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let p = path.to_str().expect("UTF-8 path");
    let o = run_check(Some("rc"), &[("MLX5DV_SIM_TRACE", p)]);
    assert!(o.status.success(), "{}", text(&o));
    let trace = std::fs::read_to_string(&path).expect("trace file");
    let wqes: Vec<&str> = trace.lines().filter(|l| l.starts_with("wqe ")).collect();
    let cqes: Vec<&str> = trace.lines().filter(|l| l.starts_with("cqe ")).collect();
    // The first WQE: RDMA write (opcode 0x08) at index 0, DS 4 (ctrl,
    // raddr, two data segments), signalled.
    let first = wqes.first().expect("a WQE");
    let hex = first.split("bytes=").nth(1).expect("bytes");
    assert_eq!(hex.len(), 4 * 32, "{first}");
    assert!(hex.starts_with("00000008"), "{first}");
    assert_eq!(&hex[14..16], "04", "{first}");
    assert_eq!(&hex[22..24], "08", "{first}");
    // Every WQE of the check is there, the flushed one included.
    assert_eq!(wqes.len(), 12, "{trace}");
    // Its CQE: a requester completion (op_own 0x00, owner 0) of WQE 0,
    // opcode RDMA write in sop_drop_qpn.
    let c = cqes.first().expect("a CQE");
    let hex = c.split("bytes=").nth(1).expect("bytes");
    assert_eq!(hex.len(), 128, "{c}");
    assert_eq!(&hex[112..114], "08", "sop_drop_qpn opcode: {c}");
    assert_eq!(&hex[120..124], "0000", "wqe_counter: {c}");
    assert_eq!(&hex[126..128], "00", "op_own: {c}");
    // The wrong rkey's error CQE: REQ_ERR (0xd) with syndrome 0x13.
    assert!(
        cqes.iter().any(|l| l.ends_with("d0") && l.contains("0013")),
        "{trace}"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn injected_command_failure() {
    let o = run_check(Some("rc"), &[("MLX5DV_SIM_FAIL_CMD", "CREATE_QP:12")]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("mlx5dv_create_qp: Cannot allocate memory"),
        "{}",
        text(&o)
    );
}

#[test]
fn injected_error_completion() {
    let o = run_check(Some("rc"), &[("MLX5DV_SIM_FAIL_WQE", "1:0x04")]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("status local protection error"),
        "{}",
        text(&o)
    );
}

#[test]
fn injected_cq_overrun_raises_an_async_event() {
    let o = run_check(Some("overrun"), &[("MLX5DV_SIM_FAIL_CQ_OVERRUN", "1")]);
    assert!(o.status.success(), "{}", text(&o));
}

#[test]
fn memcpy_capability_follows_the_configuration() {
    let o = run_check(Some("device"), &[("MLX5DV_SIM_LOG_DMA_MMO_MAX_SIZE", "20")]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("memcpy length 1048576"),
        "{}",
        text(&o)
    );
}
