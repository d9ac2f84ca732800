//! The device as programs other than libibverbs look at it, UCX's way:
//! `access()` of the uverbs node, the sysfs tree laid out as the kernel
//! lays it out (the class link into the PCI function's directory, with
//! its PCI ids), the general HCA capabilities, a zero-length RDMA write
//! with no key (UCX's flush), and UAR pages mapped by the `mmap` system
//! call rather than through the interposer (what UCX's memory hooks
//! make of libmlx5's `mmap`). A C program (`tests/c/host_view.c`,
//! rdma-core's API and libc only) runs each check under the runner; the
//! last test, run with `--ignored` by `scripts/ucx-on-sim`, runs UCX's
//! `ucx_info`.
//!
//! These tests need rdma-core's development files (libibverbs-dev) and a
//! C compiler.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

mod common;
use common::{compile_c, ensure_library, runner, text};

/// The C program, compiled once per test binary.
fn host_view() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| compile_c("host_view", &["host_view.c", "helpers.c"]))
}

fn sim(roce: bool, args: &[&str], envs: &[(&str, &str)]) -> Output {
    ensure_library();
    let mut c = Command::new(runner());
    if roce {
        c.arg("--roce");
    }
    c.arg("--").args(args);
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("run mlx5-sim")
}

fn assert_check(check: &str, roce: bool, envs: &[(&str, &str)]) {
    let bin = host_view().to_str().expect("UTF-8 path").to_owned();
    let o = sim(roce, &[&bin, check], envs);
    assert!(o.status.success(), "check {check}:\n{}", text(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), format!("ok {check}\n"));
}

#[test]
fn the_uverbs_node_is_accessible_for_read_and_write() {
    assert_check("access", false, &[]);
}

#[test]
fn the_sysfs_tree_links_the_device_into_its_pci_function() {
    assert_check("sysfs", false, &[]);
    assert_check("sysfs", true, &[]);
}

#[test]
fn general_hca_caps_describe_a_connectx6() {
    assert_check("hca_caps", false, &[]);
    assert_check("hca_caps", true, &[]);
}

#[test]
fn a_zero_length_rdma_write_checks_no_rkey() {
    assert_check("zero_length_write", false, &[]);
}

#[test]
fn uar_pages_mapped_by_the_mmap_system_call_work() {
    assert_check("raw_mmap", false, &[("HOST_VIEW_RAW_MMAP", "1")]);
}

/// UCX (Debian's `ucx-utils`) lists the device's RC, DC and UD transports
/// with no settings of ours. Run by `scripts/ucx-on-sim` (in CI), which
/// installs UCX.
#[test]
#[ignore = "needs UCX (Debian: ucx-utils); scripts/ucx-on-sim runs it"]
fn ucx_info_lists_the_mlx5_transports() {
    let found = Command::new("ucx_info").arg("-v").output();
    assert!(
        found.is_ok_and(|o| o.status.success()),
        "ucx_info is not installed (Debian: apt-get install ucx-utils)"
    );
    let o = sim(false, &["ucx_info", "-d"], &[]);
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for tl in ["rc_mlx5", "dc_mlx5", "ud_mlx5", "rc_verbs"] {
        let line = format!("Transport: {tl}");
        let at = out
            .find(&line)
            .unwrap_or_else(|| panic!("no {tl}:\n{}", text(&o)));
        assert!(
            out[at..]
                .lines()
                .nth(1)
                .is_some_and(|l| l.contains("Device: mlx5_0:1")),
            "{tl} not on mlx5_0:1:\n{}",
            text(&o)
        );
    }
}
