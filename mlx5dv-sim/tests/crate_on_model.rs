//! The `mlx5dv` crate on the software device, where the crate's device
//! suites do not reach: the rules of `CompletionQueue::poll_each` callbacks
//! against the CQ lock the real libmlx5 holds from `start_poll` to
//! `end_poll`. Inside a callback a QP dropped is destroyed when the poll
//! ends (destroying it there would take the lock again: a deadlock in
//! libmlx5), `QpEx::reset` and `QpEx::post_and_wait` are refused, and a
//! batch may be posted. And the one kind of work request the crate can
//! post that its device suites do not: a send with invalidate.
//!
//! Each test re-runs itself under the `mlx5-sim` runner (which must start
//! the process for the interposer to be loaded) and fails if that run
//! fails or does not end within [`LIMIT`] (a deadlock).
//!
//! In the published package, which has no `mlx5dv` dev-dependency, this
//! file compiles to nothing (see `build.rs`).
#![cfg(mlx5dv_sim_with_mlx5dv)]

mod common;

use mlx5dv::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one re-run may take before it counts as a deadlock.
const LIMIT: Duration = Duration::from_secs(60);

/// How long a test waits for completions.
const WAIT: Duration = Duration::from_secs(10);

/// Outside the runner: runs test `name` of this binary under it, asserts
/// that it passed, and returns `true` (the caller returns). Inside it
/// (`MLX5DV_SIM=1`): returns `false`, and the caller runs the test.
fn rerun_under_the_runner(name: &str) -> bool {
    if std::env::var("MLX5DV_SIM").as_deref() == Ok("1") {
        return false;
    }
    common::ensure_library();
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Command::new(common::runner())
        .arg("--")
        .arg(exe)
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start mlx5-sim");
    let deadline = Instant::now() + LIMIT;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().expect("wait");
            panic!(
                "{name} did not end within {} s (a deadlock?):\n{}",
                LIMIT.as_secs(),
                common::text(&o)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = child.wait_with_output().expect("wait");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("1 passed"),
        "{name} under mlx5-sim:\n{}",
        common::text(&o)
    );
    true
}

/// Two RC QPs on one PD whose send and receive completions all go to one
/// CQ, connected to each other, and a region each can write.
struct Pair {
    pd: ProtectionDomain,
    ctx: Context,
    cq: CompletionQueue,
    a: RcQp,
    b: Option<RcQp>,
    mr: MemoryRegion,
}

fn pair() -> Pair {
    pair_with(SendOps::rc_default(), Mlx5SendOps::empty())
}

fn pair_with(ops: SendOps, mlx5_ops: Mlx5SendOps) -> Pair {
    let ctx = Context::open("mlx5_0").expect("open mlx5_0");
    assert!(ctx.is_mlx5());
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let cq = CompletionQueue::new(&ctx, 64).unwrap();
    let port = ctx.query_port(1).unwrap();
    let opts = ConnectOptions::default()
        .mtu(port.active_mtu)
        .timeout(14)
        .retry_cnt(7)
        .rnr_retry(7);
    let qp = || {
        QpBuilder::rc(&pd, &cq, &cq)
            .send_ops(ops)
            .mlx5_send_ops(mlx5_ops)
            .build()
            .unwrap()
    };
    let (a, b) = (qp(), qp());
    let (ea, eb) = (a.endpoint(1, &opts).unwrap(), b.endpoint(2, &opts).unwrap());
    a.connect(&eb, 1, &opts).unwrap();
    b.connect(&ea, 2, &opts).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr = MemoryRegion::new(&pd, 4096, access).unwrap();
    Pair {
        pd,
        ctx,
        cq,
        a,
        b: Some(b),
        mr,
    }
}

/// A signalled write of 8 bytes from A, [0, 8) to [at, at + 8) of the
/// region, posted with the unsafe `complete`.
fn write(p: &mut Pair, wr_id: u64, at: usize) {
    let remote = p.mr.remote(at..at + 8).unwrap();
    let mut b = p.a.batch_with(SendFlags::SIGNALED);
    b.wr(wr_id)
        .rdma_write(remote)
        .sge(p.mr.sge(0..8).unwrap())
        .unwrap();
    // SAFETY: the region outlives the completion, which the caller polls.
    assert_eq!(unsafe { b.complete() }.unwrap(), 1);
}

/// Polls `cq` with `poll_each` until a completion came, running `f` on it
/// inside the callback; returns its (wr_id, status).
fn poll_one_with(cq: &mut CompletionQueue, mut f: impl FnMut(&PolledWc<'_>)) -> (u64, WcStatus) {
    let deadline = Instant::now() + WAIT;
    let mut got = None;
    while got.is_none() {
        assert!(Instant::now() < deadline, "no completion within {WAIT:?}");
        cq.poll_each(1, |wc| {
            got = Some((wc.wr_id(), wc.status()));
            f(wc);
        })
        .unwrap();
    }
    got.unwrap()
}

#[test]
fn a_qp_dropped_inside_a_poll_callback_is_destroyed_after_the_poll() {
    if rerun_under_the_runner("a_qp_dropped_inside_a_poll_callback_is_destroyed_after_the_poll") {
        return;
    }
    let mut p = pair();
    p.mr.write_at(0, b"dropped!").unwrap();
    write(&mut p, 1, 64);
    let mut b = p.b.take();
    // B's QP has its completions on the CQ being polled: destroying it
    // here would take the CQ lock libmlx5 holds (__mlx5_cq_clean).
    let got = poll_one_with(&mut p.cq, |_| drop(b.take()));
    assert_eq!(got, (1, WcStatus::SUCCESS));
    assert!(b.is_none());
    assert_eq!(p.mr.to_vec(64..72).unwrap(), b"dropped!");
    // After the poll B is gone: a write to it is not answered.
    write(&mut p, 2, 128);
    let wcs = p.cq.wait(1, WAIT).unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (2, WcStatus::RETRY_EXC_ERR),
        "{:?}",
        wcs[0]
    );
    assert_eq!(p.mr.to_vec(128..136).unwrap(), [0; 8]);
}

#[test]
fn reset_and_post_and_wait_inside_a_poll_callback_are_refused() {
    if rerun_under_the_runner("reset_and_post_and_wait_inside_a_poll_callback_are_refused") {
        return;
    }
    let mut p = pair();
    write(&mut p, 1, 64);
    let a = &p.a;
    let mut reset = None;
    let got = poll_one_with(&mut p.cq, |_| {
        reset = Some(a.reset());
    });
    assert_eq!(got, (1, WcStatus::SUCCESS));
    match reset {
        Some(Err(Error::InvalidArgument(m))) => assert!(m.contains("poll_each callback"), "{m}"),
        other => panic!("reset inside the callback: {other:?}"),
    }
    assert_eq!(p.a.state().unwrap(), QpState::Rts);
    // A scoped post inside the callback: refused before posting.
    write(&mut p, 2, 64);
    let mut other = CompletionQueue::new(&p.ctx, 4).unwrap();
    let remote = p.mr.remote(256..264).unwrap();
    let sge = p.mr.sge(0..8).unwrap();
    let a = &mut p.a;
    let mut scoped = None;
    let got = poll_one_with(&mut p.cq, |_| {
        scoped = Some(
            a.post_and_wait(&mut other, WAIT, |b| b.wr(3).rdma_write(remote).sge(sge))
                .map(<[_]>::to_vec),
        );
    });
    assert_eq!(got, (2, WcStatus::SUCCESS));
    match scoped {
        Some(Err(Error::InvalidArgument(m))) => assert!(m.contains("poll_each callback"), "{m}"),
        other => panic!("post_and_wait inside the callback: {other:?}"),
    }
    // Outside the callback, the reset runs.
    p.a.reset().unwrap();
    assert_eq!(p.a.state().unwrap(), QpState::Reset);
}

#[test]
fn a_batch_posted_inside_a_poll_callback_of_its_own_send_cq_runs() {
    if rerun_under_the_runner("a_batch_posted_inside_a_poll_callback_of_its_own_send_cq_runs") {
        return;
    }
    let mut p = pair();
    p.mr.write_at(0, b"chained!").unwrap();
    write(&mut p, 1, 64);
    let (a, remote, sge) = (
        &mut p.a,
        p.mr.remote(512..520).unwrap(),
        p.mr.sge(0..8).unwrap(),
    );
    let mut posted = None;
    let got = poll_one_with(&mut p.cq, |_| {
        let mut b = a.batch_with(SendFlags::SIGNALED);
        b.wr(2).rdma_write(remote).sge(sge).unwrap();
        // SAFETY: the region outlives the completion, polled below.
        posted = Some(unsafe { b.complete() });
    });
    assert_eq!(got, (1, WcStatus::SUCCESS));
    assert_eq!(posted.unwrap().unwrap(), 1);
    let wcs = p.cq.wait(1, WAIT).unwrap();
    assert_eq!((wcs[0].wr_id, wcs[0].status), (2, WcStatus::SUCCESS));
    assert_eq!(p.mr.to_vec(512..520).unwrap(), b"chained!");
}

#[test]
fn a_send_with_invalidate_invalidates_the_receivers_mkey() {
    if rerun_under_the_runner("a_send_with_invalidate_invalidates_the_receivers_mkey") {
        return;
    }
    let ops = SendOps::rc_default() | SendOps::SEND_WITH_INV;
    let mut p = pair_with(ops, Mlx5SendOps::MR_INTERLEAVED);
    let mkey = Mkey::new(&p.pd, 4, true).unwrap();
    assert!(mkey.remote_invalidate());
    // B lays the mkey over [1024, 1040) of the region, remote-writable.
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let b = p.b.as_mut().unwrap();
    let target = [MrInterleaved::new(&p.mr, 1024, 16, 0).unwrap()];
    let wcs = b
        .post_and_wait(&mut p.cq, WAIT, |w| {
            w.wr(1).mr_interleaved(&mkey, access, 1, &target).map(drop)
        })
        .unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].opcode),
        (1, WcStatus::SUCCESS, WcOpcode::UMR)
    );
    // A writes through the mkey (zero-based): it lands.
    p.mr.write_at(0, b"0123456789abcdef").unwrap();
    let through = RemoteBuf::unbounded(0, mkey.rkey());
    let src = p.mr.sge(0..16).unwrap();
    let wcs =
        p.a.post_and_wait(&mut p.cq, WAIT, |w| w.wr(2).rdma_write(through).sge(src))
            .unwrap();
    assert_eq!((wcs[0].wr_id, wcs[0].status), (2, WcStatus::SUCCESS));
    assert_eq!(p.mr.to_vec(1024..1040).unwrap(), b"0123456789abcdef");
    // A sends with invalidate of the mkey's rkey into a receive of B.
    let recv = p.mr.sge(2048..2064).unwrap();
    // SAFETY: the region outlives the receive, completed below.
    unsafe { p.b.as_mut().unwrap().post_recv(3, &[recv]) }.unwrap();
    p.mr.write_at(16, b"invalidate it!!!").unwrap();
    let src = p.mr.sge(16..32).unwrap();
    let rkey = mkey.rkey();
    let mut wcs =
        p.a.post_and_wait(&mut p.cq, WAIT, |w| w.wr(4).send_inv(rkey).sge(src))
            .unwrap()
            .to_vec();
    // The receive's completion, on the same CQ, may come with it or
    // after it.
    if wcs.iter().all(|c| c.wr_id != 3) {
        wcs.extend(p.cq.wait(1, WAIT).unwrap());
    }
    let recv = wcs.iter().find(|c| c.wr_id == 3).expect("the receive");
    let send = wcs.iter().find(|c| c.wr_id == 4).expect("the send");
    assert_eq!(
        (send.status, send.opcode),
        (WcStatus::SUCCESS, WcOpcode::SEND)
    );
    assert_eq!(
        (recv.status, recv.opcode),
        (WcStatus::SUCCESS, WcOpcode::RECV)
    );
    assert_eq!(recv.byte_len, 16);
    assert_eq!(recv.invalidated_rkey, Some(rkey), "{recv:?}");
    assert_eq!(p.mr.to_vec(2048..2064).unwrap(), b"invalidate it!!!");
    // Invalidated, the mkey takes no more writes.
    p.mr.write_at(0, b"too late, gone!!").unwrap();
    let src = p.mr.sge(0..16).unwrap();
    let wcs =
        p.a.post_and_wait(&mut p.cq, WAIT, |w| w.wr(5).rdma_write(through).sge(src))
            .unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (5, WcStatus::REM_ACCESS_ERR),
        "{wcs:?}"
    );
    assert_eq!(p.mr.to_vec(1024..1040).unwrap(), b"0123456789abcdef");
}

/// UC is unanswered: a write to a bad rkey and a send that finds no
/// receive both complete successfully at the sender and are dropped at the
/// responder, which stays in RTS (no NAK, no RNR, no error state); the
/// next message lands.
#[test]
fn uc_drops_a_bad_rkey_write_and_an_unreceived_send_silently() {
    if rerun_under_the_runner("uc_drops_a_bad_rkey_write_and_an_unreceived_send_silently") {
        return;
    }
    let ctx = Context::open("mlx5_0").expect("open mlx5_0");
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let mut cq = CompletionQueue::new(&ctx, 64).unwrap();
    let opts = ConnectOptions::default().mtu(ctx.query_port(1).unwrap().active_mtu);
    let qp = || QpBuilder::uc(&pd, &cq, &cq).build().unwrap();
    let (mut a, mut b) = (qp(), qp());
    let (ea, eb) = (a.endpoint(1, &opts).unwrap(), b.endpoint(2, &opts).unwrap());
    a.connect_to(&eb, &opts).unwrap();
    b.connect_to(&ea, &opts).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut mr = MemoryRegion::new(&pd, 4096, access).unwrap();
    mr.write_at(0, b"uc bytes").unwrap();
    let good = mr.remote(1024..1032).unwrap();
    let bad = RemoteBuf {
        rkey: good.rkey.wrapping_add(0x100),
        ..good
    };
    let src = mr.sge(0..8).unwrap();
    let wcs = a
        .post_and_wait(&mut cq, WAIT, |w| {
            w.wr(1).rdma_write(bad).sge(src)?;
            w.wr(2).send().sge(src)
        })
        .unwrap();
    for (wc, id, op) in [
        (&wcs[0], 1, WcOpcode::RDMA_WRITE),
        (&wcs[1], 2, WcOpcode::SEND),
    ] {
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (id, WcStatus::SUCCESS, op)
        );
    }
    assert_eq!(b.state().unwrap(), QpState::Rts);
    assert_eq!(mr.to_vec(1024..1032).unwrap(), [0; 8]);
    // The next write with immediate takes the first receive posted now:
    // nothing of the dropped messages was kept.
    // SAFETY: the region outlives the receive, completed below.
    unsafe { b.post_recv(3, &[mr.sge(2048..2056).unwrap()]) }.unwrap();
    let wcs = a
        .post_and_wait(&mut cq, WAIT, |w| w.wr(4).rdma_write_imm(good, 5).sge(src))
        .unwrap()
        .to_vec();
    let mut all = wcs.clone();
    if all.iter().all(|c| c.wr_id != 3) {
        all.extend(cq.wait(1, WAIT).unwrap());
    }
    let recv = all.iter().find(|c| c.wr_id == 3).expect("the receive");
    assert_eq!(
        (recv.status, recv.opcode, recv.imm, recv.byte_len),
        (WcStatus::SUCCESS, WcOpcode::RECV_RDMA_WITH_IMM, Some(5), 8)
    );
    assert_eq!(mr.to_vec(1024..1032).unwrap(), b"uc bytes");
    assert_eq!(mr.to_vec(2048..2056).unwrap(), [0; 8]);
}
