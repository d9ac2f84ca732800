//! Posting on a QP whose state does not take the post, and the scoped
//! post's timeout when its last work request waits for a receive at the
//! peer, against the recording provider playing a device
//! (`support::recorder`'s echo mode): what reached the provider (nothing
//! of a refused post), the error and its text, and that the QP was left as
//! it was and can then be used.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::ffi;
use mlx5dv::*;
use std::ptr::NonNull;
use std::time::Duration;
use support::fakes::*;
use support::recorder::{self, Call};

/// The entries of `calls`, poll calls left out.
fn names(calls: &[Call]) -> Vec<&'static str> {
    calls
        .iter()
        .map(|c| c.entry)
        .filter(|e| !e.ends_with("_poll") && !e.starts_with("read_"))
        .collect()
}

/// A second handle on the fixture's region, for sources.
fn source(fx: &mut Fx) -> MemoryRegion {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    unsafe { MemoryRegion::from_raw(&fx.pd, NonNull::from(&mut *fx._raw.mr), access) }.unwrap()
}

/// Moves the RC QP to `state` through libibverbs (`ibv_modify_qp`), as a
/// connect would (the fake device takes any transition).
fn move_to(fx: &mut Fx, state: u32) {
    let mut attr = ffi::ibv_qp_attr {
        qp_state: state,
        ..Default::default()
    };
    let rc = unsafe { ffi::ibv_modify_qp(fx.rc.as_ptr(), &mut attr, ffi::IBV_QP_STATE as i32) };
    assert_eq!(rc, 0);
}

/// One scoped write of 8 bytes on the RC QP, with `wr_id`.
fn scoped_write(fx: &mut Fx, src: &MemoryRegion, wr_id: u64) -> Result<Vec<WorkCompletion>> {
    let r = remote(fx, 8);
    fx.rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(wr_id).rdma_write(r).sge(src.sge(0..8)?)
        })
        .map(<[_]>::to_vec)
}

#[test]
fn a_scoped_post_on_a_qp_in_reset_is_refused_flatly_and_the_qp_left_as_it_is() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    fx.rc.reset().unwrap();
    recorder::take();
    let mut built = false;
    let r = remote(&fx, 8);
    let err = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            built = true;
            b.wr(1).rdma_write(r).sge(src.sge(0..8)?)
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::QpNotReady {
                what: "post_and_wait",
                qp_num: RC_QPN,
                state: QpState::Reset,
                receive: false,
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "post_and_wait: QP 0xabcdef is in RESET (not connected): connect it \
         (connect_to / ready) before posting"
    );
    assert!(!built, "the closure ran on a QP that cannot send");
    // Only the state was asked (to confirm libibverbs' record): no batch,
    // no state change, nothing in the CQ.
    assert_eq!(names(&recorder::take()), ["query_qp"]);
    assert_eq!(fx.fq(RC).ibv.qp_base.state, ffi::IBV_QPS_RESET);
    assert!(fx.fcq().queue.is_empty() && fx.cq.backlog_len() == 0);
    // Connected, it posts.
    move_to(&mut fx, ffi::IBV_QPS_INIT);
    move_to(&mut fx, ffi::IBV_QPS_RTR);
    move_to(&mut fx, ffi::IBV_QPS_RTS);
    recorder::take();
    let wcs = scoped_write(&mut fx, &src, 2).unwrap();
    assert_eq!((wcs[0].wr_id, wcs[0].status), (2, WcStatus::SUCCESS));
    let calls = names(&recorder::take());
    assert!(
        !calls.contains(&"query_qp"),
        "a QP in RTS was asked: {calls:?}"
    );
}

#[test]
fn complete_on_a_qp_in_reset_init_or_rtr_is_refused_and_the_batch_aborted() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    fx.rc.reset().unwrap();
    for (state, want, text) in [
        (ffi::IBV_QPS_RESET, QpState::Reset, "RESET (not connected)"),
        (ffi::IBV_QPS_INIT, QpState::Init, "INIT (not ready to send)"),
        (ffi::IBV_QPS_RTR, QpState::Rtr, "RTR (not ready to send)"),
    ] {
        move_to(&mut fx, state);
        recorder::take();
        let mut b = fx.rc.batch();
        b.wr(1)
            .signaled()
            .rdma_write(r)
            .sge(src.sge(0..8).unwrap())
            .unwrap();
        let err = unsafe { b.complete() }.unwrap_err();
        match &err {
            Error::QpNotReady {
                what: "ibv_wr_complete",
                state,
                receive: false,
                ..
            } => assert_eq!(*state, want),
            other => panic!("{other:?}"),
        }
        assert!(
            err.to_string()
                .starts_with(&format!("ibv_wr_complete: QP 0xabcdef is in {text}")),
            "{err}"
        );
        // Aborted, never completed: nothing was posted.
        assert_eq!(
            names(&recorder::take()),
            [
                "wr_start",
                "wr_rdma_write",
                "wr_set_sge",
                "query_qp",
                "wr_abort"
            ]
        );
        assert!(fx.fq(RC).outstanding.is_empty() && fx.fcq().queue.is_empty());
        assert_eq!(fx.fq(RC).ibv.qp_base.state, state);
    }
}

#[test]
fn in_err_a_scoped_post_is_refused_and_complete_posts_a_work_request_that_is_flushed() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    fx.rc.to_error().unwrap();
    recorder::take();
    let err = scoped_write(&mut fx, &src, 1).unwrap_err();
    assert!(
        matches!(
            err,
            Error::QpNotReady {
                state: QpState::Err,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with(
            "post_and_wait: QP 0xabcdef is in ERR: a work request failed or it was stopped; \
             RC, UC, DCI, UD: reset() it, then connect_to (RC, UC) or ready (DCI, UD) again; \
             XRC: reset() the initiator, then connect; a DCT or an XRC target has no \
             reset(): make a new one"
        ),
        "{err}"
    );
    assert_eq!(names(&recorder::take()), ["query_qp"]);
    // The unsafe complete keeps C's rule: posted in ERR, and flushed (a
    // drain marker).
    let r = remote(&fx, 8);
    let mut b = fx.rc.batch();
    b.wr(7)
        .signaled()
        .rdma_write(r)
        .sge(src.sge(0..8).unwrap())
        .unwrap();
    assert_eq!(unsafe { b.complete() }.unwrap(), 1);
    let wc = fx.cq.wait(1, Duration::from_secs(1)).unwrap()[0];
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::WR_FLUSH_ERR));
    // Reset and connected again, the scoped post runs.
    fx.rc.reset().unwrap();
    for s in [ffi::IBV_QPS_INIT, ffi::IBV_QPS_RTR, ffi::IBV_QPS_RTS] {
        move_to(&mut fx, s);
    }
    let wcs = scoped_write(&mut fx, &src, 8).unwrap();
    assert_eq!((wcs[0].wr_id, wcs[0].status), (8, WcStatus::SUCCESS));
}

#[test]
fn receives_are_refused_in_reset_only() {
    let mut fx = Fx::new();
    let mr = source(&mut fx);
    fx.rc.reset().unwrap();
    recorder::take();
    let err = unsafe { fx.rc.post_recv(1, &[mr.sge(0..64).unwrap()]) }.unwrap_err();
    assert!(
        matches!(
            err,
            Error::QpNotReady {
                what: "ibv_post_recv",
                state: QpState::Reset,
                receive: true,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("is in RESET (not connected): receives are taken from INIT on"),
        "{err}"
    );
    assert_eq!(names(&recorder::take()), ["query_qp"]);
    // INIT, RTR, RTS and ERR take them (ERR flushes them).
    for s in [
        ffi::IBV_QPS_INIT,
        ffi::IBV_QPS_RTR,
        ffi::IBV_QPS_RTS,
        ffi::IBV_QPS_ERR,
    ] {
        move_to(&mut fx, s);
        recorder::take();
        unsafe { fx.rc.post_recv(u64::from(s), &[mr.sge(0..64).unwrap()]) }.unwrap();
        assert_eq!(names(&recorder::take()), ["post_recv"], "state {s}");
    }
}

#[test]
fn after_a_failed_work_request_the_next_scoped_post_is_refused_as_in_err() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    fx.fq(RC).fail_at = Some((0, ffi::IBV_WC_REM_ACCESS_ERR, 0x88));
    recorder::take();
    let wcs = scoped_write(&mut fx, &src, 1).unwrap();
    assert_eq!(wcs[0].status, WcStatus::REM_ACCESS_ERR);
    // The failure made the scoped post ask the QP's state, which tells
    // libibverbs' record (a device moves the QP to ERR by itself).
    let calls = names(&recorder::take());
    assert_eq!(calls.last(), Some(&"query_qp"), "{calls:?}");
    let err = scoped_write(&mut fx, &src, 2).unwrap_err();
    assert!(
        err.to_string().contains("is in ERR: a work request failed"),
        "{err}"
    );
    assert!(fx.fq(RC).outstanding.is_empty() && fx.fcq().queue.is_empty());
}

/// A scoped post on the RC QP of one work request, built by `build`, that
/// the fake device never runs: its timeout's text (after 50 ms).
fn stalled<'m>(
    fx: &mut Fx,
    build: impl for<'q> FnOnce(&mut ScopedBatch<'q, 'm, ReliableConnection>) -> Result<()>,
) -> String {
    stalled_after(fx, 0, build)
}

/// [`stalled`], with the first `ran` work requests run and completed.
fn stalled_after<'m>(
    fx: &mut Fx,
    ran: usize,
    build: impl for<'q> FnOnce(&mut ScopedBatch<'q, 'm, ReliableConnection>) -> Result<()>,
) -> String {
    for s in [
        ffi::IBV_QPS_RESET,
        ffi::IBV_QPS_INIT,
        ffi::IBV_QPS_RTR,
        ffi::IBV_QPS_RTS,
    ] {
        move_to(fx, s);
    }
    fx.fq(RC).budget = Some(ran);
    let err = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_millis(50), build)
        .unwrap_err();
    fx.fq(RC).budget = None;
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.starts_with("timed out after ")
            && text.contains(&format!(" of QP 0xabcdef ({ran} arrived)")),
        "{text}"
    );
    assert!(
        text.ends_with("; the QP was moved to ERR and the rest flushed"),
        "{text}"
    );
    // The completions it saw, then the flushes, wait in the backlog.
    let mut out = Vec::new();
    fx.cq.poll_into(&mut out, 4).unwrap();
    assert!(
        out.len() > ran
            && out[..ran].iter().all(|wc| wc.status == WcStatus::SUCCESS)
            && out[ran..]
                .iter()
                .all(|wc| wc.status == WcStatus::WR_FLUSH_ERR),
        "{out:?}"
    );
    text
}

#[test]
fn a_timeout_with_a_work_request_waiting_for_a_receive_says_the_receiver_may_not_be_ready() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let mut dst = source(&mut fx);
    let r = remote(&fx, 8);
    let rnr = "the peer may have no receive posted (receiver not ready): with rnr_retry 7 \
               (the default) the send is retried for ever; post a receive at the peer \
               first, or set ConnectOptions::rnr_retry below 7 to get RNR_RETRY_EXC_ERR";

    let send = stalled(&mut fx, |b| b.wr(1).send().inline(b"hello"));
    assert!(
        send.contains(
            "a send of the batch has not completed, and a send waits for a receive at the peer"
        ),
        "{send}"
    );
    assert!(send.contains(rnr), "{send}");

    let send_imm = stalled(&mut fx, |b| b.wr(2).send_imm(7).sge(src.sge(0..8)?));
    assert!(send_imm.contains(rnr), "{send_imm}");

    // A write after a send that has not completed waits behind it: said too.
    let write_last = stalled(&mut fx, |b| {
        b.wr(3).send().inline(b"x")?;
        b.wr(4).rdma_write(r).sge(src.sge(0..8)?)
    });
    assert!(write_last.contains(rnr), "{write_last}");
    // The send completed, the write after it did not: nothing of receives.
    let send_done = stalled_after(&mut fx, 1, |b| {
        b.wr(8).send().inline(b"x")?;
        b.wr(9).rdma_write(r).sge(src.sge(0..8)?)
    });
    assert!(!send_done.contains("receiver not ready"), "{send_done}");

    let write = stalled(&mut fx, |b| b.wr(5).rdma_write(r).sge(src.sge(0..8)?));
    assert!(!write.contains("receiver not ready"), "{write}");
    let read = stalled(&mut fx, |b| b.wr(6).rdma_read(r).sge(dst.sge_mut(0..8)?));
    assert!(!read.contains("receiver not ready"), "{read}");

    let write_imm = stalled(&mut fx, |b| {
        b.wr(7).rdma_write_imm(r, 9).sge(src.sge(0..8)?)
    });
    assert!(
        write_imm.contains("an RDMA write with immediate of the batch has not completed")
            && write_imm.contains("receiver not ready"),
        "{write_imm}"
    );
}
