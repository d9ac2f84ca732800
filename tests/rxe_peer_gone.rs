//! A peer process killed while the other side works: the survivor's calls
//! end, with the errors verbs defines, and none of them hangs.
//!
//! Two processes on one device (soft-RoCE in the test guest; the software
//! mlx5 device, whose processes are hosts on one fabric): the test and a
//! re-run of this test binary that plays the peer (`MLX5DV_TEST_PEER`).
//! They swap their RC endpoints and memory as `examples/hello_rc.rs` does
//! (`Endpoint::to_bytes`, `RemoteBuf::to_bytes`) over TCP; the test
//! listens, on a port the kernel picks, so that tests running at once
//! never meet each other's peers. Then the peer is killed (SIGKILL):
//!
//! - the peer is the target of the test's RDMA writes: the write in flight
//!   fails with `RETRY_EXC_ERR` (the peer's QP is gone with its process,
//!   and nothing answers: on soft-RoCE packets to a QP number that does not
//!   exist are dropped, on the software device to a host that is gone are
//!   lost) within the QP's retry budget, `(retry_cnt + 1)` tries of
//!   4.096 µs × 2^`timeout` (on the software device each try waits at
//!   least `MLX5DV_SIM_MIN_ACK_TIMEOUT_MS`, 50 ms by default), plus slack
//!   for the peer's exit and the schedulers; the error names the QP; what
//!   was posted after it is flushed. On a kernel device (soft-RoCE) the
//!   dead process's objects are destroyed one at a time as it exits: a
//!   write that arrives after its memory region is gone but while its QP
//!   still answers fails at once with `REM_ACCESS_ERR` instead (seen with
//!   rdma-core 56's rxe provider); that is taken too, there, and only
//!   the budget's upper bound applies to it;
//! - the peer writes into the test's memory: the test's wait for its TCP
//!   message ends (end of file), its receive posted is flushed when the
//!   QP is moved to ERR, and the QP is destroyed in bounded time.
//!
//! Every wait has a deadline: a hang fails the test.
//!
//! Run by `scripts/test` in the guest with `MLX5DV_TEST_DEVICE=rxe0`; on
//! the software device under `scripts/mlx5-sim` (`--roce` too) with
//! `MLX5DV_TEST_DEVICE=mlx5_0`.

mod support;

use mlx5dv::*;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};
use support::process::{start_peer, text};
use support::rig;

/// Set in a re-run of this binary that plays the peer: `target PORT` or
/// `writer PORT` (the test's TCP port on 127.0.0.1).
const PEER_ENV: &str = "MLX5DV_TEST_PEER";

/// The memory each side exposes, and writes from.
const LEN: usize = 64 * 1024;
/// Bytes per RDMA write: one slot.
const SLOT: usize = 4096;
/// Writes per round.
const PER_ROUND: usize = 8;

/// The QPs' transport timeout: 4.096 µs × 2^16 ≈ 268 ms per try.
const TIMEOUT: u8 = 16;
/// Retries after the first try.
const RETRY_CNT: u8 = 3;
/// Beyond the retry budget: the killed process's exit, the device's
/// timers and the schedulers of an emulated guest.
const SLACK: Duration = Duration::from_secs(5);
/// The longest any other step may take before the test fails instead of
/// hanging.
const LIMIT: Duration = Duration::from_secs(60);

/// How long one try waits for an answer on this device: 4.096 µs ×
/// 2^[`TIMEOUT`]; on the software device at least its
/// `MLX5DV_SIM_MIN_ACK_TIMEOUT_MS`.
fn per_try() -> Duration {
    let spec = Duration::from_nanos(4096 << TIMEOUT);
    if std::env::var("MLX5DV_SIM").as_deref() != Ok("1") {
        return spec;
    }
    let min_ms = std::env::var("MLX5DV_SIM_MIN_ACK_TIMEOUT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    spec.max(Duration::from_millis(min_ms))
}

/// The QP's retry budget: [`RETRY_CNT`] + 1 tries.
fn budget() -> Duration {
    per_try() * (u32::from(RETRY_CNT) + 1)
}

/// The byte write `i` of round `round` carries (never 0: untouched memory
/// is 0).
fn fill(round: u64, i: usize) -> u8 {
    ((round * PER_ROUND as u64 + i as u64) % 255) as u8 + 1
}

/// One side: an RC QP, the memory it exposes and the memory it writes
/// from.
struct Side {
    // Fields drop in order: the QP goes before its CQ and the memory.
    qp: RcQp,
    cq: CompletionQueue,
    /// What the peer may write and read.
    mr: MemoryRegion,
    /// What this side writes from.
    src: MemoryRegion,
    opts: ConnectOptions,
}

impl Side {
    fn new() -> Side {
        let ctx = rig::open();
        let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
        let cq = CompletionQueue::new(&ctx, 64).expect("create CQ");
        let qp = QpBuilder::rc(&pd, &cq, &cq)
            .caps(QpCaps {
                max_send_wr: 32,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            })
            .build()
            .expect("create RC QP");
        let mr = MemoryRegion::new(&pd, LEN, rig::access_all()).expect("register MR");
        let src = MemoryRegion::new(&pd, LEN, AccessFlags::LOCAL_WRITE).expect("register MR");
        let opts = rig::connect_options(&ctx)
            .timeout(TIMEOUT)
            .retry_cnt(RETRY_CNT);
        Side {
            qp,
            cq,
            mr,
            src,
            opts,
        }
    }

    /// Sends this side's endpoint and memory, reads the peer's, connects;
    /// returns the peer's memory.
    fn connect(&self, tcp: &mut TcpStream, psn: u32) -> RemoteBuf {
        let ours = self.qp.endpoint(psn, &self.opts).expect("endpoint");
        tcp.write_all(&ours.to_bytes()).expect("send the endpoint");
        tcp.write_all(&self.mr.remote(..).expect("remote").to_bytes())
            .expect("send the memory");
        let mut theirs = [0; Endpoint::BYTES + RemoteBuf::BYTES];
        tcp.read_exact(&mut theirs)
            .expect("the peer's endpoint and memory");
        let (endpoint, remote) = theirs.split_at(Endpoint::BYTES);
        let endpoint = Endpoint::from_bytes(endpoint).expect("an endpoint");
        self.qp
            .connect_to(&endpoint, &self.opts)
            .expect("connect to the peer");
        RemoteBuf::from_bytes(remote).expect("a remote buffer")
    }

    /// Round `round`: [`PER_ROUND`] writes, write `i` of `fill(round, i)`
    /// bytes into slot `i` of `remote` (work request ids `round × 100 +
    /// i`), then, with `read_back`, a read of slot 0 into the last slot of
    /// this side's memory (id `round × 100 + PER_ROUND`). Returns every
    /// completion, in posting order.
    fn round(
        &mut self,
        remote: RemoteBuf,
        round: u64,
        read_back: bool,
    ) -> Result<Vec<WorkCompletion>> {
        let Side {
            qp, cq, mr, src, ..
        } = self;
        for i in 0..PER_ROUND {
            src.fill(i * SLOT..(i + 1) * SLOT, fill(round, i))?;
        }
        let into = mr.sge_mut(LEN - SLOT..)?;
        let mut wcs = Vec::new();
        qp.post_and_wait_into(cq, budget() + SLACK, &mut wcs, |b| {
            for i in 0..PER_ROUND {
                let to = remote.slice((i * SLOT) as u64, SLOT as u64)?;
                b.wr(round * 100 + i as u64)
                    .rdma_write(to)
                    .sge(src.sge(i * SLOT..(i + 1) * SLOT)?)?;
            }
            if read_back {
                let from = remote.slice(0, SLOT as u64)?;
                b.wr(round * 100 + PER_ROUND as u64)
                    .rdma_read(from)
                    .sge(into)?;
            }
            Ok(())
        })?;
        Ok(wcs)
    }
}

// ------------------------------------------------------------- the peer

/// In a re-run asked to play the peer: plays it and returns `true` (the
/// test function then returns). Otherwise `false`.
fn play_peer_if_asked() -> bool {
    let Ok(asked) = std::env::var(PEER_ENV) else {
        return false;
    };
    let (role, port) = asked
        .split_once(' ')
        .unwrap_or_else(|| panic!("{PEER_ENV}={asked:?}: expected `ROLE PORT`"));
    let port: u16 = port.parse().expect("a TCP port");
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect to the test");
    let mut side = Side::new();
    let remote = side.connect(&mut tcp, 0x2000);
    match role {
        // Exposes its memory and waits for a message that never comes:
        // it is killed meanwhile (or the test ended: end of file).
        "target" => {
            let _ = tcp.read(&mut [0; 1]);
        }
        // Writes round after round, says so after the first, until killed
        // (or a failure, or LIMIT: a peer never outlives its test long).
        "writer" => {
            let start = Instant::now();
            let mut round = 0;
            while start.elapsed() < LIMIT {
                let wcs = side.round(remote, round, false).expect("a round of writes");
                assert!(
                    wcs.iter().all(|wc| wc.status == WcStatus::SUCCESS),
                    "{wcs:?}"
                );
                if round == 0 {
                    tcp.write_all(b"w").expect("tell the test");
                }
                round += 1;
            }
        }
        _ => panic!("{PEER_ENV}={asked:?}: no such role"),
    }
    true
}

/// The start of test `test`: in a re-run asked to play the peer, plays
/// it and returns `None`; otherwise this side, and the peer in `role`
/// (started as a re-run of `test`) with the TCP connection it made.
fn start(test: &str, role: &str) -> Option<(Side, Child, TcpStream)> {
    if play_peer_if_asked() {
        return None;
    }
    let side = Side::new();
    let (child, tcp) = start_peer(
        test,
        &["--test-threads=1"],
        PEER_ENV,
        |port| format!("{role} {port}"),
        LIMIT,
        &format!("the {role} peer"),
    );
    Some((side, child, tcp))
}

/// Kills `child` (SIGKILL) and returns when that was, and its output.
fn kill(mut child: Child) -> (Instant, Output) {
    let at = Instant::now();
    child.kill().expect("kill the peer");
    (at, child.wait_with_output().expect("wait for the peer"))
}

// ------------------------------------------------------------- the tests

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_target_killed_mid_stream_fails_the_write_in_flight_with_retry_exceeded_in_budget() {
    let Some((mut side, child, mut tcp)) = start(
        "a_target_killed_mid_stream_fails_the_write_in_flight_with_retry_exceeded_in_budget",
        "target",
    ) else {
        return;
    };
    let remote = side.connect(&mut tcp, 0x1000);

    // The peer is killed by another thread once 3 rounds have landed, while
    // this one goes on writing.
    let rounds = Arc::new(AtomicU64::new(0));
    let (killed_tx, killed) = mpsc::channel();
    let seen = Arc::clone(&rounds);
    let killer = std::thread::spawn(move || {
        let deadline = Instant::now() + LIMIT;
        while seen.load(Ordering::Acquire) < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let (at, out) = kill(child);
        killed_tx.send(at).expect("tell the test");
        out
    });

    let deadline = Instant::now() + LIMIT;
    let (round, wcs, failed_at) = loop {
        let round = rounds.load(Ordering::Acquire);
        let wcs = side
            .round(remote, round, true)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        if wcs.iter().any(|wc| wc.status != WcStatus::SUCCESS) {
            break (round, wcs, Instant::now());
        }
        // Every write of the round landed: the read behind them, of slot
        // 0, brings back what write 0 put there.
        let back = side.mr.to_vec(LEN - SLOT..).expect("read back");
        assert!(
            back.iter().all(|&b| b == fill(round, 0)),
            "round {round}: slot 0 reads back {:?}..., not {}",
            &back[..8],
            fill(round, 0)
        );
        rounds.store(round + 1, Ordering::Release);
        assert!(
            Instant::now() < deadline,
            "no error completion {} s after the start: was the peer killed?",
            LIMIT.as_secs()
        );
    };
    let killed_at = killed.recv_timeout(LIMIT).expect("the peer was killed");
    let peer = killer.join().expect("the killer thread");
    assert!(round >= 3, "a round failed before the peer was killed");
    println!(
        "round {round} failed {:?} after the kill (budget {:?}): {wcs:?}",
        failed_at - killed_at,
        budget()
    );

    // Every work request of the round completed, in order: successes, the
    // one in flight when nothing answered any more, then flushes.
    let ids: Vec<u64> = wcs.iter().map(|wc| wc.wr_id).collect();
    let posted: Vec<u64> = (0..=PER_ROUND as u64).map(|i| round * 100 + i).collect();
    assert_eq!(ids, posted, "{wcs:?}");
    let first = wcs
        .iter()
        .position(|wc| wc.status != WcStatus::SUCCESS)
        .expect("an error");
    let status = wcs[first].status;
    let on_sim = std::env::var("MLX5DV_SIM").as_deref() == Ok("1");
    let retried = status == WcStatus::RETRY_EXC_ERR;
    assert!(
        retried || (!on_sim && status == WcStatus::REM_ACCESS_ERR),
        "{wcs:?}"
    );
    for wc in &wcs[first + 1..] {
        assert_eq!(wc.status, WcStatus::WR_FLUSH_ERR, "{wcs:?}");
    }
    let err = wcs[first].ok().unwrap_err().to_string();
    let qpn = format!("{:#x}", side.qp.qp_num());
    let what = if retried {
        "retry counter exceeded"
    } else {
        "remote access error"
    };
    assert!(err.contains(&qpn) && err.contains(what), "{err}");

    // Within the retry budget, plus slack; and not before the retries
    // were made (the try in flight at the kill may have started before
    // it, so at least RETRY_CNT tries after it; half, for coarse timers).
    let took = failed_at - killed_at;
    assert!(
        took <= budget() + SLACK,
        "the error came {took:?} after the kill; budget {:?} + {SLACK:?}",
        budget()
    );
    assert!(
        !retried || took >= per_try() * u32::from(RETRY_CNT) / 2,
        "the error came {took:?} after the kill, before the retries of {:?} each",
        per_try()
    );
    assert_eq!(side.qp.state().unwrap(), QpState::Err);

    // Later posts: the safe post refuses the QP in ERR; a batch posted
    // anyway (as C may) is flushed, each work request.
    match side.round(remote, 90, false) {
        Err(Error::QpNotReady { state, .. }) => assert_eq!(state, QpState::Err),
        other => panic!("a post on the QP in ERR: {other:?}"),
    }
    let target = remote.slice(0, SLOT as u64).unwrap();
    let mut batch = side.qp.batch();
    for id in [91, 92] {
        batch
            .wr(id)
            .signaled()
            .rdma_write(target)
            .sge(side.src.sge(..SLOT).unwrap())
            .unwrap();
    }
    // SAFETY: `side.src` stays registered and unchanged until both
    // completions are polled below (or the QP is destroyed first, on a
    // failure: it is dropped before the memory).
    assert_eq!(unsafe { batch.complete() }.unwrap(), 2);
    let flushed = side.cq.wait(2, LIMIT).expect("the flushes");
    let got: Vec<(u64, WcStatus)> = flushed.iter().map(|wc| (wc.wr_id, wc.status)).collect();
    assert_eq!(
        got,
        [(91, WcStatus::WR_FLUSH_ERR), (92, WcStatus::WR_FLUSH_ERR)]
    );

    // The peer died of the kill, not of its own failure.
    assert!(
        !String::from_utf8_lossy(&peer.stderr).contains("panicked"),
        "{}",
        text(&peer)
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_writer_killed_while_the_target_waits_ends_the_wait_and_the_qp_is_destroyed() {
    let Some((mut side, child, mut tcp)) = start(
        "a_writer_killed_while_the_target_waits_ends_the_wait_and_the_qp_is_destroyed",
        "writer",
    ) else {
        return;
    };
    side.connect(&mut tcp, 0x1000);
    // A receive, which nothing will fill.
    // SAFETY: the region stays registered and unread until the receive's
    // flush is polled below (or the QP is destroyed first: it is dropped
    // before the memory).
    unsafe { side.qp.post_recv(7, &[side.src.sge(..64).unwrap()]) }.unwrap();

    // The writer's first round has completed: its writes are here.
    let mut said = [0; 1];
    tcp.read_exact(&mut said).expect("the writer's first round");
    assert_eq!(&said, b"w");
    for i in 0..PER_ROUND {
        let slot = side.mr.to_vec(i * SLOT..(i + 1) * SLOT).unwrap();
        assert!(
            slot.iter().all(|&b| b != 0),
            "slot {i} was not written: {:?}...",
            &slot[..8]
        );
    }

    let (killed_at, peer) = kill(child);
    // The wait for the writer's next message ends: the connection closed.
    let mut more = [0; 1];
    let e = tcp.read_exact(&mut more).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "{e}");
    assert!(killed_at.elapsed() < LIMIT, "{:?}", killed_at.elapsed());
    assert!(
        !String::from_utf8_lossy(&peer.stderr).contains("panicked"),
        "{}",
        text(&peer)
    );

    // The QP, a responder only, saw nothing fail; stopped, its receive is
    // flushed; then it is destroyed, in bounded time.
    side.qp.to_error().unwrap();
    let wcs = side.cq.wait(1, LIMIT).expect("the receive's flush");
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (7, WcStatus::WR_FLUSH_ERR),
        "{wcs:?}"
    );
    let (done_tx, done) = mpsc::channel();
    let started = Instant::now();
    std::thread::spawn(move || {
        drop(side);
        let _ = done_tx.send(());
    });
    done.recv_timeout(LIMIT)
        .unwrap_or_else(|_| panic!("destroying the QP took over {} s", LIMIT.as_secs()));
    println!("QP and its resources destroyed in {:?}", started.elapsed());
}
