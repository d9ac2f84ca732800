//! Posting on a QP that is not ready, on a real device (soft-RoCE in the
//! test guest, the software mlx5 device): a fresh QP (RESET), one moved to
//! INIT, and one in ERR (moved there, or by a failed work request). Each
//! post is refused with `Error::QpNotReady`, whose text says the state
//! flatly; the QP is left where it was (the crate moves it nowhere), nothing
//! of the refused post runs later, and the QP then connects and carries
//! data, checked byte for byte.
//!
//! Run by `scripts/test` in the guest with `MLX5DV_TEST_DEVICE=rxe0`.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use std::time::Duration;
use support::rig::*;

/// A's scoped RDMA write of its bytes [0, 64) to `to`.
fn write_from_a(p: &mut Pair, wr_id: u64, to: RemoteBuf) -> Result<Vec<WorkCompletion>> {
    p.a.qp
        .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
            b.wr(wr_id).rdma_write(to).sge(p.a.mr.sge(0..64)?)
        })
        .map(<[_]>::to_vec)
}

/// Asserts `err` is the refusal of `what` on `qp` in `state`, and that
/// its text says so plainly (and nothing of a reset).
#[track_caller]
fn assert_not_ready(err: &Error, what: &str, qp: &RcQp, state: QpState, says: &str) {
    match err {
        Error::QpNotReady {
            what: w,
            qp_num,
            state: s,
            ..
        } => assert_eq!((*w, *qp_num, *s), (what, qp.qp_num(), state), "{err}"),
        other => panic!("not QpNotReady: {other:?}"),
    }
    let text = err.to_string();
    let want = format!("{what}: QP {:#x} is in {says}", qp.qp_num());
    assert!(text.starts_with(&want), "{text}\nwant: {want}");
    assert!(!text.contains("moved to"), "{text}");
}

/// Nothing in `cq` for a while.
#[track_caller]
fn assert_empty(cq: &mut CompletionQueue) {
    std::thread::sleep(Duration::from_millis(200));
    let mut none = Vec::new();
    assert_eq!(cq.poll_into(&mut none, 16).unwrap(), 0, "{none:?}");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn posting_on_a_fresh_qp_is_refused_flatly_and_it_then_connects_and_runs() {
    let mut p = Pair::unconnected(QpCaps::default(), SendOps::rc_default());
    p.a.mr.write_at(0, &pattern(64, 1)).unwrap();
    let remote = p.b.mr.remote(0..64).unwrap();

    // RESET: the scoped post, the unsafe batch and a receive are refused.
    let mut built = false;
    let err =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                built = true;
                b.wr(1).rdma_write(remote).sge(p.a.mr.sge(0..64)?)
            })
            .unwrap_err();
    println!("{err}");
    assert_not_ready(
        &err,
        "post_and_wait",
        &p.a.qp,
        QpState::Reset,
        "RESET (not connected): connect it (connect_to / ready) before posting",
    );
    assert!(!built, "the batch was built on a QP that cannot send");
    let mut batch = p.a.qp.batch();
    batch
        .wr(2)
        .signaled()
        .rdma_write(remote)
        .sge(p.a.mr.sge(0..64).unwrap())
        .unwrap();
    let err = unsafe { batch.complete() }.unwrap_err();
    println!("{err}");
    assert_not_ready(
        &err,
        "ibv_wr_complete",
        &p.a.qp,
        QpState::Reset,
        "RESET (not connected)",
    );
    let err = unsafe { p.a.qp.post_recv(3, &[p.a.mr.sge(4096..4160).unwrap()]) }.unwrap_err();
    println!("{err}");
    assert_not_ready(
        &err,
        "ibv_post_recv",
        &p.a.qp,
        QpState::Reset,
        "RESET (not connected): receives are taken from INIT on",
    );
    // The QP is where it was: the crate moved it nowhere.
    assert_eq!(p.a.qp.state().unwrap(), QpState::Reset);

    // INIT: sends are refused, a receive is posted (and used below).
    p.a.qp.to_init(p.opts.port, p.opts.access).unwrap();
    let err = write_from_a(&mut p, 4, remote).unwrap_err();
    println!("{err}");
    assert_not_ready(
        &err,
        "post_and_wait",
        &p.a.qp,
        QpState::Init,
        "INIT (not ready to send)",
    );
    unsafe { p.a.qp.post_recv(5, &[p.a.mr.sge(4096..4160).unwrap()]) }.unwrap();
    assert_eq!(p.a.qp.state().unwrap(), QpState::Init);
    assert_empty(&mut p.a.send_cq);

    // Connected, it carries data both ways; nothing refused ever ran.
    let (pa, pb) = (0x1234, 0x4321);
    let ea = p.a.qp.endpoint(pa, &p.opts).unwrap();
    let eb = p.b.qp.endpoint(pb, &p.opts).unwrap();
    p.a.qp.to_rtr(&eb, &p.opts).unwrap();
    p.a.qp.to_rts(pa, &p.opts).unwrap();
    p.b.qp.connect(&ea, pb, &p.opts).unwrap();
    assert_empty(&mut p.a.send_cq);
    assert!(
        p.b.mr.to_vec(..64).unwrap().iter().all(|&x| x == 0),
        "a refused write ran"
    );
    let to = p.b.mr.remote(128..192).unwrap();
    let wcs = write_from_a(&mut p, 6, to).unwrap();
    assert_wc(&wcs[0], 6, WcOpcode::RDMA_WRITE);
    assert_eq!(p.b.mr.to_vec(128..192).unwrap(), pattern(64, 1));
    assert!(p.b.mr.to_vec(..64).unwrap().iter().all(|&x| x == 0));
    // B's send lands in the receive A posted in INIT.
    p.b.mr.write_at(256, &pattern(64, 2)).unwrap();
    let wcs =
        p.b.qp
            .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                b.wr(7).send().sge(p.b.mr.sge(256..320)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 7, WcOpcode::SEND);
    let recv = p.a.recv_cq.wait(1, WAIT).unwrap()[0];
    assert_wc(&recv, 5, WcOpcode::RECV);
    assert_eq!(recv.byte_len, 64);
    assert_eq!(p.a.mr.to_vec(4096..4160).unwrap(), pattern(64, 2));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn posting_on_a_qp_in_err_is_refused_until_it_is_reset_and_connected_again() {
    let mut p = Pair::new();
    let remote = p.b.mr.remote(0..64).unwrap();
    p.a.mr.write_at(0, &pattern(64, 3)).unwrap();

    // Moved to ERR by hand.
    p.a.qp.to_error().unwrap();
    let err = write_from_a(&mut p, 1, remote).unwrap_err();
    println!("{err}");
    assert_not_ready(
        &err,
        "post_and_wait",
        &p.a.qp,
        QpState::Err,
        "ERR: a work request failed or it was stopped; RC, UC, DCI, UD: reset() it, then \
         connect_to (RC, UC) or ready (DCI, UD) again",
    );
    assert_eq!(p.a.qp.state().unwrap(), QpState::Err);
    assert_empty(&mut p.a.send_cq);
    p.a.qp.reset().unwrap();
    p.b.qp.reset().unwrap();
    p.connect();

    // Moved to ERR by the device: a write the peer's region refuses.
    let read_only = MemoryRegion::new(
        &p.pd,
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    )
    .unwrap();
    let refused = read_only.remote(0..64).unwrap();
    let wcs = write_from_a(&mut p, 2, refused).unwrap();
    assert_eq!(wcs[0].status, WcStatus::REM_ACCESS_ERR, "{wcs:?}");
    let err = write_from_a(&mut p, 3, remote).unwrap_err();
    println!("{err}");
    assert_not_ready(&err, "post_and_wait", &p.a.qp, QpState::Err, "ERR: ");
    assert_empty(&mut p.a.send_cq);
    assert!(p.b.mr.to_vec(..64).unwrap().iter().all(|&x| x == 0));

    // Reset and connected again, it runs.
    p.a.qp.reset().unwrap();
    p.b.qp.reset().unwrap();
    p.connect();
    let wcs = write_from_a(&mut p, 4, remote).unwrap();
    assert_wc(&wcs[0], 4, WcOpcode::RDMA_WRITE);
    assert_eq!(p.b.mr.to_vec(..64).unwrap(), pattern(64, 3));
}
