//! The software device as a fabric: a server and a client process of one C
//! program (`tests/c/fabric*.c`, rdma-core's API only) under one `mlx5-sim`
//! runner, each a host with its own LID, GUID and GIDs, talk RC, UC, UD and DC
//! to each other, on the InfiniBand port and on a RoCE port (`--roce`).
//! Each side checks every byte and every completion's status and opcode;
//! the two step each other through a check over an abstract Unix socket.
//!
//! Every run has a deadline: a side that hangs fails the test, and the
//! whole process group of the run is killed.
//!
//! These tests need rdma-core's development files (libibverbs-dev) and a C
//! compiler.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod common;
use common::{compile_c, ensure_library, runner};

/// The longest one run (both processes) may take.
const DEADLINE: Duration = Duration::from_secs(60);

/// The requester's least acknowledgement timeout for these runs: short, so
/// that the retry checks are quick (the C program reads it back to compute
/// the retry budget it asserts).
const MIN_ACK_TIMEOUT_MS: &str = "20";

/// Runs the server in the background and the client in the foreground,
/// then reports both exit statuses.
const SCRIPT: &str = r#""$0" "$1" server "$2" & s=$!
"$0" "$1" client "$2"; c=$?
wait $s; s=$?
echo "exit server $s client $c""#;

/// The C program, compiled once per test binary.
fn fabric() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        compile_c(
            "fabric",
            &[
                "fabric.c",
                "fabric_rc.c",
                "fabric_faults.c",
                "fabric_dgram.c",
                "fabric_uc.c",
                "helpers.c",
            ],
        )
    })
}

/// What one run of a check gave.
struct Run {
    /// The server's and the client's exit status.
    status: Option<(i32, i32)>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Run {
    fn text(&self) -> String {
        format!(
            "statuses {:?} after {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.took, self.stdout, self.stderr
        )
    }
}

fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    })
}

/// Runs check `check` of the C program as a server and a client under one
/// runner (`--roce` if `roce`), killing everything at the deadline.
fn pair(check: &str, roce: bool) -> Run {
    ensure_library();
    let bin = fabric();
    let channel = format!(
        "mlx5dv-sim-fabric-test/{}/{check}/{}",
        std::process::id(),
        if roce { "roce" } else { "ib" }
    );
    let mut c = Command::new(runner());
    if roce {
        c.arg("--roce");
    }
    c.args(["--", "sh", "-c", SCRIPT])
        .arg(bin)
        .args([check, &channel])
        .env("MLX5DV_SIM_MIN_ACK_TIMEOUT_MS", MIN_ACK_TIMEOUT_MS)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that the deadline kills all of it.
        .process_group(0);
    let t0 = Instant::now();
    let mut child = c.spawn().expect("run mlx5-sim");
    let out = drain(child.stdout.take().expect("stdout"));
    let err = drain(child.stderr.take().expect("stderr"));
    let mut hung = false;
    while child.try_wait().expect("wait for mlx5-sim").is_none() {
        if t0.elapsed() > DEADLINE {
            // SAFETY: kill(2) of the process group this test started.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            hung = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let took = t0.elapsed();
    let stdout = out.join().expect("stdout reader");
    let stderr = err.join().expect("stderr reader");
    let status = stdout.lines().find_map(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        match w.as_slice() {
            ["exit", "server", s, "client", c] => Some((s.parse().ok()?, c.parse().ok()?)),
            _ => None,
        }
    });
    let run = Run {
        status,
        stdout,
        stderr,
        took,
    };
    assert!(!hung, "no end within {DEADLINE:?}:\n{}", run.text());
    run
}

/// Both sides of `check` pass.
fn assert_pair(check: &str, roce: bool) {
    let r = pair(check, roce);
    assert_eq!(r.status, Some((0, 0)), "{}", r.text());
    for role in ["server", "client"] {
        let line = format!("ok {check} {role}");
        assert!(r.stdout.lines().any(|l| l == line), "{}", r.text());
    }
}

/// One test on the InfiniBand port and one on the RoCE port per check.
macro_rules! on_both_ports {
    ($($(#[doc = $doc:literal])* $check:literal: $ib:ident, $roce:ident;)*) => {$(
        $(#[doc = $doc])*
        #[test]
        fn $ib() {
            assert_pair($check, false);
        }

        $(#[doc = $doc])*
        /// On a RoCE port.
        #[test]
        fn $roce() {
            assert_pair($check, true);
        }
    )*};
}

on_both_ports! {
    /// Each process sees its own LID, node GUID and GIDs, and they differ.
    "identity": two_processes_have_their_own_lid_guid_and_gids,
        two_processes_have_their_own_guid_and_gids_on_roce;
    /// RC write, write with immediate, read, send and send with immediate
    /// into an RQ and into an SRQ, compare-and-swap and fetch-and-add,
    /// 1 MiB messages, many small sends in order (PSNs wrap on the way).
    "rc": rc_traffic_between_processes, rc_traffic_between_processes_on_roce;
    /// A send with no receive: RNR_RETRY_EXC_ERR after rnr_retry tries; with
    /// rnr_retry 7 a receive the peer posts 300 ms later completes it.
    "rnr": rnr_retries_exhausted_or_a_late_receive,
        rnr_retries_exhausted_or_a_late_receive_on_roce;
    /// A write to a QPN the peer does not have: RETRY_EXC_ERR within the
    /// retry budget, the QP in ERR.
    "absent_qp": a_write_to_an_absent_qp_exhausts_its_retries,
        a_write_to_an_absent_qp_exhausts_its_retries_on_roce;
    /// A write to a process that has exited: RETRY_EXC_ERR within the retry
    /// budget, the QP in ERR.
    "exited": a_write_to_an_exited_process_exhausts_its_retries,
        a_write_to_an_exited_process_exhausts_its_retries_on_roce;
    /// A bad rkey and a write to a QP without remote write: REM_ACCESS_ERR
    /// and REM_INV_REQ_ERR; both QPs in ERR, the responder's async events,
    /// its receive flushed.
    "nak": remote_naks_put_both_qps_in_error_with_async_events,
        remote_naks_put_both_qps_in_error_with_async_events_on_roce;
    /// UD send and send with immediate (40 bytes of GRH room), and a wrong
    /// qkey: dropped, the sender completes.
    "ud": ud_datagrams_between_processes_and_a_wrong_qkey,
        ud_datagrams_between_processes_and_a_wrong_qkey_on_roce;
    /// DCI to the peer's DCT: write, send, read; a wrong DC key; DCI
    /// streams (one errored stream, the others go on; reset).
    "dc": dc_between_processes_keys_and_streams,
        dc_between_processes_keys_and_streams_on_roce;
    /// UC: a 64 KiB write with immediate and sends land; a write to a bad
    /// rkey and a send without a receive complete at the sender, are
    /// dropped at the responder, which stays in RTS and takes what follows.
    "uc": uc_between_processes_and_silent_drops,
        uc_between_processes_and_silent_drops_on_roce;
}

/// The server is killed (SIGKILL) while the client streams 256 KiB writes to
/// it: the client's stream ends in RETRY_EXC_ERR within its retry budget,
/// the rest flushed; nothing hangs.
#[test]
fn a_peer_killed_mid_stream_ends_in_retry_exceeded() {
    for roce in [false, true] {
        let r = pair("killed", roce);
        assert_eq!(r.status, Some((128 + libc::SIGKILL, 0)), "{}", r.text());
        assert!(
            r.stdout.lines().any(|l| l == "ok killed client"),
            "{}",
            r.text()
        );
    }
}
