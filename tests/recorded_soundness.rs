//! Regression tests of the soundness fixes, against the recording provider
//! playing a device (`support::recorder`'s echo mode): each test is named
//! after the defect it guards against, and checks what reached the
//! provider (the recorded calls and their arguments) and what came back
//! (the completions' ids, status, opcode, ...).

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::ffi;
use mlx5dv::*;
use std::ptr::NonNull;
use std::time::{Duration, Instant};
use support::fakes::*;
use support::recorder::{self, builders, Arg, Call, Wc, FLUSH_VENDOR_ERR};

const SIG: u32 = ffi::IBV_SEND_SIGNALED;
const INL: u32 = ffi::IBV_SEND_INLINE;
const FENCE: u32 = ffi::IBV_SEND_FENCE;
const SOL: u32 = ffi::IBV_SEND_SOLICITED;
const BIT63: u64 = 1 << 63;

/// The entries of `calls`, poll calls left out.
fn names(calls: &[Call]) -> Vec<&'static str> {
    calls
        .iter()
        .map(|c| c.entry)
        .filter(|e| !e.ends_with("_poll") && !e.starts_with("read_"))
        .collect()
}

/// The `modify_qp` calls: (new state, mask).
fn modifies(calls: &[Call]) -> Vec<(u32, u32)> {
    calls
        .iter()
        .filter(|c| c.entry == "modify_qp")
        .map(|c| match c.args[..] {
            [Arg::U32(state), Arg::U32(mask)] => (state, mask),
            _ => panic!("{c:?}"),
        })
        .collect()
}

/// The `k`-th scoped id after `id`.
fn after(id: u64, k: u64) -> u64 {
    BIT63 | (id.wrapping_add(k) & !BIT63)
}

/// A second handle on the fixture's region, for sources (the recorder
/// never touches memory, so it stands for another region).
fn source(fx: &mut Fx) -> MemoryRegion {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    unsafe { MemoryRegion::from_raw(&fx.pd, NonNull::from(&mut *fx._raw.mr), access) }.unwrap()
}

/// One scoped write on the RC QP; returns the id it was posted with, so
/// that the next scoped post's ids are known (they follow).
fn scoped_id_of_one_write(fx: &mut Fx, src: &MemoryRegion) -> u64 {
    recorder::take();
    let r = remote(fx, 8);
    let wcs = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(1).rdma_write(r).sge(src.sge(0..8)?)
        })
        .unwrap();
    assert_eq!(wcs.len(), 1);
    let ids = builders(&recorder::take());
    assert_eq!(ids.len(), 1);
    assert_ne!(ids[0].0 & BIT63, 0);
    ids[0].0
}

/// The completion `wc` as the crate must hand it out.
fn expected(wc: &Wc) -> WorkCompletion {
    let with_imm = wc.wc_flags & ffi::IBV_WC_WITH_IMM != 0;
    let with_inv = !with_imm && wc.wc_flags & ffi::IBV_WC_WITH_INV != 0;
    // The sender of a receive, as the fake CQ reports every one.
    let recv = wc.opcode & ffi::IBV_WC_RECV != 0;
    WorkCompletion {
        wr_id: wc.wr_id,
        status: WcStatus::from_raw(wc.status),
        opcode: WcOpcode::from_raw(wc.opcode),
        byte_len: wc.byte_len,
        imm: with_imm.then(|| u32::from_be(wc.imm_data)),
        invalidated_rkey: with_inv.then_some(wc.imm_data),
        qp_num: wc.qp_num,
        vendor_err: wc.vendor_err,
        wc_flags: WcFlags::from_bits_retain(wc.wc_flags),
        src_qp: recv.then_some(recorder::wc::SRC_QP),
        slid: recv.then_some(recorder::wc::SLID as u16),
        // Polled from the CQ, which QPs of any kind may share.
        qp_kind: None,
    }
}

/// A PD of the fixture's other context: its raw struct (kept alive with
/// the handle) and the handle.
fn foreign_pd(fx: &Fx) -> (Context, Box<ffi::ibv_pd>, ProtectionDomain) {
    let other_ctx = fx.other_cq.context().clone();
    let mut raw: Box<ffi::ibv_pd> = zeroed();
    raw.context = other_ctx.as_ptr();
    let pd = unsafe { ProtectionDomain::from_raw(&other_ctx, NonNull::from(&mut *raw)) };
    (other_ctx, raw, pd)
}

fn no_violations(fx: &mut Fx) {
    let v = &fx.fcq().violations;
    assert!(v.is_empty(), "the CQ was polled out of order: {v:?}");
}

// ----- 1. a scoped post counts only its own completions -----

#[test]
fn post_and_wait_counts_only_its_own_completions_and_keeps_the_others_in_order() {
    let mut fx = Fx::new();
    // A CQ whose completions read the sender of a receive (as a UD QP's
    // does): the kept ones must keep it.
    fx.cq.read_senders();
    let src = source(&mut fx);
    let last = scoped_id_of_one_write(&mut fx, &src);
    let id = |k: u64| after(last, 1 + k);
    // In the CQ before the batch: a receive of the same QP (ordinary id,
    // with an immediate), a late completion of the same QP carrying the
    // id of the previous scoped batch, and another QP's completion
    // carrying exactly the id the batch's LAST work request will have.
    let recv = Wc {
        wr_id: 77,
        opcode: ffi::IBV_WC_RECV_RDMA_WITH_IMM,
        byte_len: 123,
        wc_flags: ffi::IBV_WC_WITH_IMM | ffi::IBV_WC_GRH,
        imm_data: 0x0A0B_0C0Du32.to_be(),
        qp_num: RC_QPN,
        ..Wc::default()
    };
    let stale = Wc {
        wr_id: last,
        status: ffi::IBV_WC_WR_FLUSH_ERR,
        opcode: ffi::IBV_WC_RDMA_WRITE,
        qp_num: RC_QPN,
        vendor_err: FLUSH_VENDOR_ERR,
        ..Wc::default()
    };
    let impostor = Wc {
        wr_id: id(2),
        status: ffi::IBV_WC_REM_ACCESS_ERR,
        opcode: ffi::IBV_WC_SEND,
        byte_len: 9,
        qp_num: PLAIN_QPN,
        vendor_err: 0x1234,
        ..Wc::default()
    };
    // Interleaved with the batch's: another QP's completion after its
    // first, a receive of its own QP (send with invalidate) after its
    // second.
    let between = Wc {
        wr_id: 5,
        opcode: ffi::IBV_WC_RDMA_READ,
        byte_len: 64,
        qp_num: DCI_QPN,
        ..Wc::default()
    };
    let recv2 = Wc {
        wr_id: 78,
        opcode: ffi::IBV_WC_RECV,
        byte_len: 5,
        wc_flags: ffi::IBV_WC_WITH_INV,
        imm_data: 0xDEAD_BEEF,
        qp_num: RC_QPN,
        ..Wc::default()
    };
    for wc in [recv, stale, impostor] {
        fx.fcq().push(wc);
    }
    fx.fq(RC).interleave(0, between);
    fx.fq(RC).interleave(1, recv2);

    let r = remote(&fx, 64);
    let dst = fx.mr.sge_mut(0..16).unwrap();
    let wcs = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(10).rdma_write(r).sge(src.sge(0..8)?)?;
            b.wr(11).send().inline(b"hi")?;
            b.wr(12).rdma_read(r).sge(dst)
        })
        .unwrap();
    let calls = recorder::take();
    // Its work requests carried its own ids (the impostor's is the last).
    assert_eq!(
        builders(&calls),
        [(id(0), SIG), (id(1), SIG | INL), (id(2), SIG)]
    );
    // Exactly its own completions, in order, with the caller's ids.
    let own = |wr_id, opcode, byte_len| WorkCompletion {
        wr_id,
        status: WcStatus::SUCCESS,
        opcode,
        byte_len,
        imm: None,
        invalidated_rkey: None,
        qp_num: RC_QPN,
        vendor_err: 0,
        wc_flags: WcFlags::empty(),
        src_qp: None,
        slid: None,
        // A scoped post's own: its QP's kind.
        qp_kind: Some(QpKind::Rc),
    };
    assert_eq!(
        wcs,
        [
            own(10, WcOpcode::RDMA_WRITE, 8),
            own(11, WcOpcode::SEND, 2),
            own(12, WcOpcode::RDMA_READ, 16),
        ]
    );
    // The others wait in the backlog, in the order the CQ gave them.
    assert_eq!(fx.cq.backlog_len(), 5);
    assert!(fx.fcq().queue.is_empty());
    let mut out = Vec::new();
    assert_eq!(fx.cq.poll_into(&mut out, 2).unwrap(), 2);
    assert_eq!(fx.cq.backlog_len(), 3);
    assert_eq!(fx.cq.poll_into(&mut out, 16).unwrap(), 3);
    assert_eq!(fx.cq.backlog_len(), 0);
    let want: Vec<_> = [recv, stale, impostor, between, recv2]
        .iter()
        .map(expected)
        .collect();
    assert_eq!(out, want);
    assert_eq!(out[0].imm, Some(0x0A0B_0C0D));
    assert_eq!(out[4].invalidated_rkey, Some(0xDEAD_BEEF));
    // The backlog was handed out without a poll of the device; now the
    // device is polled again, and is empty.
    let replayed = recorder::take();
    assert!(
        replayed.iter().all(|c| c.entry.starts_with("read_")),
        "{replayed:?}"
    );
    assert_eq!(fx.cq.poll_into(&mut out, 16).unwrap(), 0);
    assert_eq!(names(&recorder::take()), Vec::<&str>::new());
    no_violations(&mut fx);
}

#[test]
fn the_backlog_comes_first_in_poll_each_and_wait() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    let receive = |wr_id| Wc {
        wr_id,
        opcode: ffi::IBV_WC_RECV,
        byte_len: 1,
        qp_num: RC_QPN,
        ..Wc::default()
    };
    fx.fcq().push(receive(1));
    fx.fcq().push(receive(2));
    let wcs = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(3).rdma_write(r).sge(src.sge(0..8)?)
        })
        .unwrap();
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [3]);
    // A completion that arrives later comes after the backlog.
    fx.fcq().push(receive(4));
    let mut ids = Vec::new();
    assert_eq!(fx.cq.poll_each(1, |wc| ids.push(wc.wr_id())).unwrap(), 1);
    let got = fx.cq.wait(2, Duration::from_secs(1)).unwrap();
    ids.extend(got.iter().map(|w| w.wr_id));
    assert_eq!(ids, [1, 2, 4]);
    assert_eq!(fx.cq.backlog_len(), 0);
    no_violations(&mut fx);
}

#[test]
fn an_empty_scoped_batch_posts_nothing() {
    let mut fx = Fx::new();
    let wcs = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |_| Ok(()))
        .unwrap();
    assert!(wcs.is_empty());
    assert_eq!(names(&recorder::take()), ["wr_start", "wr_abort"]);
}

#[test]
fn a_failed_work_request_and_the_flushed_rest_are_returned_with_the_callers_ids() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    fx.fq(RC).fail_at = Some((1, ffi::IBV_WC_REM_ACCESS_ERR, 0x42));
    let wcs = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            for i in 0..3 {
                b.wr(20 + i).rdma_write(r).sge(src.sge(0..8)?)?;
            }
            Ok(())
        })
        .unwrap();
    let got: Vec<_> = wcs
        .iter()
        .map(|w| (w.wr_id, w.status, w.vendor_err, w.qp_num))
        .collect();
    assert_eq!(
        got,
        [
            (20, WcStatus::SUCCESS, 0, RC_QPN),
            (21, WcStatus::REM_ACCESS_ERR, 0x42, RC_QPN),
            (22, WcStatus::WR_FLUSH_ERR, FLUSH_VENDOR_ERR, RC_QPN),
        ]
    );
    let e = wcs[1].ok().unwrap_err();
    assert!(
        matches!(
            e,
            Error::WorkCompletion {
                wr_id: 21,
                kind: Some(QpKind::Rc),
                ..
            }
        ),
        "{e}"
    );
    // The RC QP's causes and recovery, not a DCI's.
    let text = e.to_string();
    assert!(
        text.contains("connect_to") && text.contains("rkey"),
        "{text}"
    );
    assert!(
        !text.contains("DC key") && !text.contains("UD: ready"),
        "{text}"
    );
    // The last work request's completion was seen: nothing to stop.
    assert_eq!(modifies(&recorder::take()), []);
    assert_eq!(fx.cq.backlog_len(), 0);
}

#[test]
fn a_dcis_failed_completion_names_the_dc_key_and_its_recovery() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    fx.fq(DCI).fail_at = Some((0, ffi::IBV_WC_REM_ACCESS_ERR, 0x42));
    let ah = &fx.ah;
    let wcs = fx
        .dci
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(30, DcAddr::new(ah, 0x10, 0x20))
                .rdma_write(r)
                .sge(src.sge(0..8)?)
        })
        .unwrap();
    assert_eq!(wcs[0].qp_kind, Some(QpKind::Dci));
    let text = wcs[0].ok().unwrap_err().to_string();
    assert!(
        text.contains("DC key") && text.contains("ready(psn, &opts)"),
        "{text}"
    );
    assert!(!text.contains("connect_to"), "{text}");
}

// ----- 2. a scoped post waits for its LAST work request -----

#[test]
fn post_and_wait_waits_for_its_last_work_request_then_stops_the_qp() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let last = scoped_id_of_one_write(&mut fx, &src);
    // Another QP's completion carrying the id of the batch's last work
    // request is no reason to stop waiting.
    let impostor = Wc {
        wr_id: after(last, 4),
        opcode: ffi::IBV_WC_RDMA_WRITE,
        qp_num: PLAIN_QPN,
        ..Wc::default()
    };
    fx.fcq().push(impostor);
    // The device runs 2 of the 4 work requests, then stalls.
    fx.fq(RC).budget = Some(2);
    let r = remote(&fx, 8);
    let timeout = Duration::from_millis(100);
    let start = Instant::now();
    let err = fx
        .rc
        .post_and_wait(&mut fx.cq, timeout, |b| {
            for i in 0..4 {
                b.wr(i).rdma_write(r).sge(src.sge(0..8)?)?;
            }
            Ok(())
        })
        .unwrap_err();
    assert!(start.elapsed() >= timeout, "it stopped waiting early");
    let Error::Timeout { what, waited_ms } = &err else {
        panic!("{err}");
    };
    assert!(*waited_ms >= 100, "{err}");
    assert!(
        what.contains("4 completions of QP 0xabcdef (2 arrived)"),
        "{err}"
    );
    // Then it moved the QP to ERR, and the flush of the other two came.
    assert!(what.contains("moved to ERR and the rest flushed"), "{err}");
    let calls = recorder::take();
    let mut want = vec!["wr_start"];
    for _ in 0..4 {
        want.extend(["wr_rdma_write", "wr_set_sge"]);
    }
    want.extend(["wr_complete", "modify_qp"]);
    assert_eq!(names(&calls), want);
    assert_eq!(modifies(&calls), [(ffi::IBV_QPS_ERR, ffi::IBV_QP_STATE)]);
    assert!(fx.fq(RC).outstanding.is_empty());
    assert_eq!(fx.fq(RC).ibv.qp_base.state, ffi::IBV_QPS_ERR);
    // The backlog holds the impostor, then what the batch saw of its own
    // completions, with the caller's ids: two ran, two were flushed.
    let mut out = Vec::new();
    fx.cq.poll_into(&mut out, 8).unwrap();
    assert_eq!(out[0], expected(&impostor));
    let ok = WcStatus::SUCCESS;
    let flushed = WcStatus::from_raw(ffi::IBV_WC_WR_FLUSH_ERR);
    let got: Vec<_> = out[1..]
        .iter()
        .map(|wc| (wc.wr_id, wc.status, wc.qp_num))
        .collect();
    assert_eq!(
        got,
        [
            (0, ok, RC_QPN),
            (1, ok, RC_QPN),
            (2, flushed, RC_QPN),
            (3, flushed, RC_QPN)
        ]
    );
    assert_eq!(out[1].opcode, WcOpcode::RDMA_WRITE);
    assert_eq!(out[1].byte_len, 8);
    no_violations(&mut fx);
}

#[test]
fn a_scoped_post_whose_flush_is_lost_resets_the_qp_before_returning() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    // One of three runs; the flush after ERR never comes (a CQ overrun).
    fx.fq(RC).budget = Some(1);
    fx.fq(RC).flush_on_err = false;
    let start = Instant::now();
    let err = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_millis(20), |b| {
            for i in 0..3 {
                b.wr(i).rdma_write(r).sge(src.sge(0..8)?)?;
            }
            Ok(())
        })
        .unwrap_err();
    // It waited for the flush (5 s), then moved the QP to RESET.
    assert!(start.elapsed() >= Duration::from_secs(5));
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("moved to RESET"), "{err}");
    let calls = recorder::take();
    assert_eq!(
        modifies(&calls),
        [
            (ffi::IBV_QPS_ERR, ffi::IBV_QP_STATE),
            (ffi::IBV_QPS_RESET, ffi::IBV_QP_STATE),
        ]
    );
    assert_eq!(
        names(&calls).last(),
        Some(&"modify_qp"),
        "nothing after the reset"
    );
    // The device runs nothing of it any more.
    assert!(fx.fq(RC).outstanding.is_empty());
    assert_eq!(fx.fq(RC).ibv.qp_base.state, ffi::IBV_QPS_RESET);
    no_violations(&mut fx);
}

#[test]
fn a_batch_the_provider_refused_but_published_is_flushed_before_returning() {
    // soft-RoCE publishes the work requests of a failed wr_complete; the
    // fixture's provider is not mlx5, so the scoped post cannot assume a
    // rollback.
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    fx.fq(RC).complete_ret = libc::EINVAL;
    fx.fq(RC).publish_failed = true;
    let err = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(1).rdma_write(r).sge(src.sge(0..8)?)?;
            b.wr(2).rdma_write(r).sge(src.sge(0..8)?)
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Verbs {
                call: "ibv_wr_complete",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.errno(), Some(libc::EINVAL));
    assert!(
        err.to_string()
            .contains("moved to ERR and the rest flushed"),
        "{err}"
    );
    let calls = recorder::take();
    assert_eq!(modifies(&calls), [(ffi::IBV_QPS_ERR, ffi::IBV_QP_STATE)]);
    let after_complete: Vec<_> = names(&calls)
        .into_iter()
        .skip_while(|e| *e != "wr_complete")
        .collect();
    // EINVAL asks the QP's state, to say whether it explains the refusal
    // (in RTS it does not).
    assert_eq!(after_complete, ["wr_complete", "query_qp", "modify_qp"]);
    // Both flushes were its own: the device has nothing left, and the
    // flushes wait in the backlog with the caller's ids, to tell which
    // work requests did not run.
    assert!(fx.fq(RC).outstanding.is_empty());
    assert!(fx.fcq().queue.is_empty());
    let mut out = Vec::new();
    fx.cq.poll_into(&mut out, 8).unwrap();
    let got: Vec<_> = out.iter().map(|wc| (wc.wr_id, wc.status)).collect();
    let flushed = WcStatus::from_raw(ffi::IBV_WC_WR_FLUSH_ERR);
    assert_eq!(got, [(1, flushed), (2, flushed)]);
    assert!(out.iter().all(|wc| wc.qp_num == RC_QPN));
    assert_eq!(fx.cq.backlog_len(), 0);
    no_violations(&mut fx);
}

#[test]
fn a_failed_poll_stops_the_qp_and_keeps_what_it_polled_of_others() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    fx.fcq().start_err = Some((1, libc::EIO));
    fx.fq(RC).interleave(
        0,
        Wc {
            wr_id: 9,
            qp_num: PLAIN_QPN,
            opcode: ffi::IBV_WC_SEND,
            ..Wc::default()
        },
    );
    let err = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(1).rdma_write(r).sge(src.sge(0..8)?)?;
            b.wr(2).rdma_write(r).sge(src.sge(0..8)?)
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Verbs {
                call: "ibv_start_poll",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(err.errno(), Some(libc::EIO));
    assert!(err.to_string().contains("moved to ERR"), "{err}");
    let calls = recorder::take();
    assert_eq!(modifies(&calls), [(ffi::IBV_QPS_ERR, ffi::IBV_QP_STATE)]);
    // The failed start_poll came before the move to ERR.
    let entries: Vec<_> = calls.iter().map(|c| c.entry).collect();
    let first_poll = entries.iter().position(|e| *e == "start_poll").unwrap();
    let modify = entries.iter().position(|e| *e == "modify_qp").unwrap();
    assert!(first_poll < modify, "{entries:?}");
    // The other QP's completion, polled while stopping, is kept; so are
    // the batch's own completions (the device ran both before the ERR),
    // after it, with the caller's ids.
    let mut out = Vec::new();
    assert_eq!(fx.cq.poll_into(&mut out, 8).unwrap(), 3);
    let got: Vec<_> = out.iter().map(|wc| (wc.wr_id, wc.qp_num)).collect();
    assert_eq!(got, [(9, PLAIN_QPN), (1, RC_QPN), (2, RC_QPN)]);
    assert!(
        out[1..]
            .iter()
            .all(|wc| wc.status == WcStatus::SUCCESS && wc.opcode == WcOpcode::RDMA_WRITE),
        "{out:#?}"
    );
    no_violations(&mut fx);
}

#[test]
fn post_and_wait_is_refused_inside_a_poll_callback_before_posting() {
    // Its error paths may need a RESET, which mlx5 cannot make while a poll
    // holds the CQ lock: it is refused before anything is posted, whichever
    // CQ the callback is polling.
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    let (other_qp, mut other_cq) = fx.extra_rc(0x42, CAPS, 16);
    fx._raw.cqs.last_mut().unwrap().push(Wc {
        wr_id: 5,
        qp_num: 0x42,
        opcode: ffi::IBV_WC_SEND,
        ..Wc::default()
    });
    recorder::take();
    let mut refused = None;
    let n = other_cq
        .poll_each(4, |wc| {
            assert_eq!(wc.wr_id(), 5);
            refused = Some(
                fx.rc
                    .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
                        b.wr(1).rdma_write(r).sge(src.sge(0..8)?)
                    })
                    .unwrap_err(),
            );
        })
        .unwrap();
    assert_eq!(n, 1);
    let e = refused.expect("the callback ran");
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("poll_each callback")),
        "{e}"
    );
    let calls = recorder::take();
    let on_qp: Vec<_> = names(&calls)
        .into_iter()
        .filter(|e| e.starts_with("wr_") || *e == "modify_qp")
        .collect();
    assert_eq!(
        on_qp,
        [] as [&str; 0],
        "nothing started, posted or modified"
    );
    // Outside the callback the same post runs.
    let wcs = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(1).rdma_write(r).sge(src.sge(0..8)?)
        })
        .unwrap();
    assert_eq!(
        (wcs.len(), wcs[0].wr_id, wcs[0].status),
        (1, 1, WcStatus::SUCCESS)
    );
    drop((other_qp, other_cq));
}

// ----- 3. a scoped batch larger than its send queue or CQ is refused -----

#[test]
fn a_scoped_batch_larger_than_the_send_queue_is_refused_before_posting() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    let depth = CAPS.max_send_wr as u64;
    assert!(fx.cq.capacity() as u64 > depth);
    for n in [depth + 1, depth] {
        recorder::take();
        let got = fx
            .rc
            .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
                for i in 0..n {
                    b.wr(i).rdma_write(r).sge(src.sge(0..8)?)?;
                }
                Ok(())
            });
        let calls = recorder::take();
        let mut want = vec!["wr_start"];
        // The work request past the depth is refused before the provider
        // sees it (libmlx5 would build it over the last one).
        for _ in 0..n.min(depth) {
            want.extend(["wr_rdma_write", "wr_set_sge"]);
        }
        if n > depth {
            let err = got.unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::SendQueueFull { batch, depth: d }
                        if u64::from(batch) == n && u64::from(d) == depth
                ),
                "{err}"
            );
            want.push("wr_abort");
            assert_eq!(names(&calls), want, "nothing was completed");
            assert!(calls.iter().all(|c| !c.entry.ends_with("_poll")));
            assert!(fx.fcq().queue.is_empty());
        } else {
            assert_eq!(got.unwrap().len() as u64, n);
            want.push("wr_complete");
            assert_eq!(names(&calls), want);
        }
    }
}

#[test]
fn a_scoped_batch_larger_than_the_cq_is_refused_before_posting() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    let caps = QpCaps {
        max_send_wr: 128,
        ..CAPS
    };
    let (mut qp, mut cq) = fx.extra_rc(0x77, caps, 4);
    assert_eq!(cq.capacity(), 4);
    recorder::take();
    let err = qp
        .post_and_wait(&mut cq, Duration::from_secs(1), |b| {
            for i in 0..5 {
                b.wr(i).rdma_write(r).sge(src.sge(0..8)?)?;
            }
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange { what: "scoped batch size", value: 5, ref limit }
                if limit.contains("CQ's capacity")
        ),
        "{err}"
    );
    let mut want = vec!["wr_start"];
    for _ in 0..5 {
        want.extend(["wr_rdma_write", "wr_set_sge"]);
    }
    want.push("wr_abort");
    assert_eq!(names(&recorder::take()), want);
    // As many as the CQ holds pass.
    let wcs = qp
        .post_and_wait(&mut cq, Duration::from_secs(1), |b| {
            for i in 0..4 {
                b.wr(i).rdma_write(r).sge(src.sge(0..8)?)?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(
        wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert!(wcs.iter().all(|w| w.qp_num == 0x77));
}

// ----- 4. INLINE and undefined flags never reach an SGE work request -----

#[test]
fn inline_and_undefined_flags_never_reach_a_work_request_with_sges() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 64);
    let junk = SendFlags::from_bits_retain(!0);
    let per_wr = FENCE | SIG | SOL;
    let dst = fx.mr.sge_mut(0..32).unwrap();

    // Through Wr::flags.
    let mut b = fx.rc.batch();
    b.wr(1)
        .flags(SendFlags::INLINE)
        .rdma_write(r)
        .sge(src.sge(0..8).unwrap())
        .unwrap();
    b.wr(2)
        .flags(junk)
        .send()
        .sge(src.sge(0..8).unwrap())
        .unwrap();
    b.wr(3).flags(junk).send().inline(b"x").unwrap();
    b.wr(4)
        .flags(junk)
        .memcpy(dst, src.sge(32..64).unwrap())
        .unwrap();
    drop(b);
    let calls = recorder::take();
    assert_eq!(
        builders(&calls),
        [(1, 0), (2, per_wr), (3, per_wr | INL), (4, per_wr),]
    );
    // The setters saw the same flags as their builders.
    for c in calls.iter().filter(|c| c.entry == "wr_set_sge") {
        assert_eq!(c.wr.unwrap().1 & INL, 0, "{c:?}");
    }

    // Through batch_with: the batch's INLINE is for inline data only, and
    // its undefined bits are gone.
    let mut b = fx.rc.batch_with(junk);
    let all = per_wr | INL;
    assert_eq!(fx._raw.qps[RC].ibv.wr_flags, all, "the batch's flags");
    b.wr(1).rdma_write(r).sge(src.sge(0..8).unwrap()).unwrap();
    b.wr(2).send().inline(b"y").unwrap();
    b.wr(3)
        .mr_list(
            &fx.mkey_big,
            AccessFlags::LOCAL_WRITE,
            &[src.sge(0..8).unwrap()],
        )
        .unwrap();
    b.wr(4)
        .rdma_read(r)
        .sge(fx.mr.sge_mut(0..8).unwrap())
        .unwrap();
    drop(b);
    assert_eq!(
        builders(&recorder::take()),
        [(1, per_wr), (2, all), (3, all), (4, per_wr)]
    );

    // batch_with(SIGNALED | INLINE): inline work requests with INLINE, SGE
    // ones without.
    let mut b = fx.rc.batch_with(SendFlags::SIGNALED | SendFlags::INLINE);
    b.wr(1).send().inline(b"a").unwrap();
    b.wr(2).rdma_write(r).sge(src.sge(0..8).unwrap()).unwrap();
    b.wr(3).send().inline(b"b").unwrap();
    b.wr(4)
        .flags(SendFlags::INLINE)
        .send()
        .sge_list(&[src.sge(0..4).unwrap(), src.sge(8..12).unwrap()])
        .unwrap();
    drop(b);
    assert_eq!(
        builders(&recorder::take()),
        [(1, SIG | INL), (2, SIG), (3, SIG | INL), (4, SIG)]
    );

    // And in a scoped post.
    let wcs = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(1).flags(junk).rdma_write(r).sge(src.sge(0..8)?)?;
            b.wr(2).flags(junk).send().inline(b"z")
        })
        .unwrap();
    assert_eq!(wcs.len(), 2);
    let flags: Vec<_> = builders(&recorder::take())
        .into_iter()
        .map(|(_, f)| f)
        .collect();
    assert_eq!(flags, [per_wr, per_wr | INL]);
}

// ----- 5. a leaked batch is aborted before the next one -----

#[test]
fn a_leaked_batch_is_aborted_by_the_next_batch_and_by_the_qps_drop() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    std::mem::forget(fx.rc.batch());
    let b = fx.rc.batch();
    drop(b);
    assert_eq!(
        names(&recorder::take()),
        ["wr_start", "wr_abort", "wr_start", "wr_abort"]
    );

    // A leaked work request is discarded: nothing of it completes.
    let mut b = fx.rc.batch_with(SendFlags::SIGNALED);
    b.wr(1).rdma_write(r).sge(src.sge(0..8).unwrap()).unwrap();
    std::mem::forget(b);
    let wcs = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(2).rdma_write(r).sge(src.sge(0..8)?)
        })
        .unwrap();
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [2]);
    assert_eq!(
        names(&recorder::take()),
        [
            "wr_start",
            "wr_rdma_write",
            "wr_set_sge",
            "wr_abort",
            "wr_start",
            "wr_rdma_write",
            "wr_set_sge",
            "wr_complete"
        ]
    );
    assert_eq!(fx.cq.backlog_len(), 0);
    assert!(fx.fcq().queue.is_empty());

    // Dropping a QP with a leaked batch aborts it.
    let (mut qp, _cq) = fx.extra_rc(0x78, CAPS, 8);
    recorder::take();
    std::mem::forget(qp.batch());
    drop(qp);
    let calls = recorder::take();
    assert_eq!(names(&calls), ["wr_start", "wr_abort"]);
    let fq = fx._raw.qps.last_mut().unwrap();
    assert!(calls.iter().all(|c| c.obj == fq.ibv() as usize));
}

#[test]
fn a_leaked_batch_is_aborted_before_a_reset_not_after() {
    // mlx5's move to RESET resets the send queue's indices; the abort of a
    // batch leaked before it restores the index saved at its wr_start, so
    // an abort after the RESET would leave the queue pointing at stale
    // WQEs, which the doorbell of the next batch would hand to the device
    // again. The abort comes first, once.
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    let mut b = fx.rc.batch_with(SendFlags::SIGNALED);
    b.wr(1).rdma_write(r).sge(src.sge(0..8).unwrap()).unwrap();
    std::mem::forget(b);
    recorder::take();
    fx.rc.reset().unwrap();
    fx.rc.reset().unwrap();
    let calls = recorder::take();
    assert_eq!(names(&calls), ["wr_abort", "modify_qp", "modify_qp"]);
    assert_eq!(
        modifies(&calls),
        [
            (ffi::IBV_QPS_RESET, ffi::IBV_QP_STATE),
            (ffi::IBV_QPS_RESET, ffi::IBV_QP_STATE)
        ]
    );
    // The next batch starts afresh: no second abort.
    drop(fx.rc.batch());
    assert_eq!(names(&recorder::take()), ["wr_start", "wr_abort"]);
}

// ----- 12. a DC address of another context is refused -----

#[test]
fn a_dct_number_of_more_than_24_bits_is_refused_before_any_builder() {
    // libmlx5 ORs the number into the address vector with its flag bit:
    // a 25th bit would land in the AV's reserved bits.
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    recorder::take();
    let mut b = fx.dci.batch();
    for dctn in [0x0100_0000, u32::MAX] {
        let e = b
            .wr(1, DcAddr::new(&fx.ah, dctn, 7))
            .rdma_write(r)
            .sge(src.sge(0..8).unwrap())
            .unwrap_err();
        assert!(
            matches!(e, Error::OutOfRange { what: "remote DCT number", value, .. }
                if value == u64::from(dctn)),
            "{e}"
        );
    }
    b.wr(2, DcAddr::new(&fx.ah, 0x00FF_FFFF, 7))
        .rdma_write(r)
        .sge(src.sge(0..8).unwrap())
        .unwrap();
    drop(b);
    assert_eq!(
        names(&recorder::take()),
        [
            "wr_start",
            "wr_rdma_write",
            "wr_set_sge",
            "wr_set_dc_addr",
            "wr_abort"
        ]
    );
}

#[test]
fn a_dc_address_whose_ah_is_of_another_context_is_refused_before_any_builder() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    let (other_ctx, mut pd2_raw, pd2) = foreign_pd(&fx);
    let mut ah2_raw: Box<ffi::ibv_ah> = zeroed();
    ah2_raw.context = other_ctx.as_ptr();
    ah2_raw.pd = &mut *pd2_raw;
    let attr = AhAttr {
        port: 1,
        dlid: 0,
        sl: 0,
        grh: None,
    };
    let foreign = unsafe { AddressHandle::from_raw(&pd2, NonNull::from(&mut *ah2_raw), attr) };
    let theirs = DcAddr::new(&foreign, 0x10, 0x20);
    recorder::take();

    let mut b = fx.dci.batch();
    let e = b
        .wr(1, theirs)
        .rdma_write(r)
        .sge(src.sge(0..8).unwrap())
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("another device context")),
        "{e}"
    );
    let e = b.wr(2, theirs).send().inline(b"x").unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    // The DCI's own context's address handle passes.
    b.wr(3, DcAddr::new(&fx.ah, 0x30, 0x40))
        .send()
        .sge(src.sge(0..8).unwrap())
        .unwrap();
    drop(b);
    assert_eq!(
        names(&recorder::take()),
        [
            "wr_start",
            "wr_send",
            "wr_set_sge",
            "wr_set_dc_addr",
            "wr_abort"
        ]
    );

    // With a stream, and in a scoped post.
    let mut b = fx.dci_streams.batch();
    let e = b.wr_stream(1, theirs, 1).send().inline(b"x").unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    drop(b);
    let e = fx
        .dci
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(1, DcAddr::new(&foreign, 0x10, 0x20))
                .rdma_write(r)
                .sge(src.sge(0..8)?)
        })
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert_eq!(
        names(&recorder::take()),
        ["wr_start", "wr_abort", "wr_start", "wr_abort"]
    );

    // An address handle without a context (NULL) is not the DCI's either.
    let mut ah3_raw: Box<ffi::ibv_ah> = zeroed();
    let nullctx = unsafe { AddressHandle::from_raw(&fx.pd, NonNull::from(&mut *ah3_raw), attr) };
    let mut b = fx.dci.batch();
    let e = b
        .wr(1, DcAddr::new(&nullctx, 1, 2))
        .send()
        .inline(b"x")
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    drop(b);
    assert_eq!(names(&recorder::take()), ["wr_start", "wr_abort"]);
}

// ----- 14. mkey layouts: lengths and remote access -----

/// A fake region of `len` bytes at a made-up address (the recorder never
/// touches memory), registered with `access`.
fn fake_region(fx: &Fx, raw: &mut ffi::ibv_mr, len: usize, access: AccessFlags) -> MemoryRegion {
    raw.addr = 0x7F00_0000_0000usize as *mut std::ffi::c_void;
    raw.length = len;
    raw.lkey = 0xAAAA_0001;
    raw.rkey = 0xAAAA_0002;
    unsafe { MemoryRegion::from_raw(&fx.pd, NonNull::from(raw), access) }.unwrap()
}

fn invalid(r: Result<MkeyLayout<'_>>) {
    let e = r.unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
}

#[test]
fn sges_of_2_pow_31_bytes_or_more_cannot_be_made() {
    let fx = Fx::new();
    let mut raw: Box<ffi::ibv_mr> = zeroed();
    let mut huge = fake_region(&fx, &mut raw, 1 << 33, AccessFlags::LOCAL_WRITE);
    for len in [1usize << 31, u32::MAX as usize, 1 << 32, (1 << 33) - 1] {
        let e = huge.sge(0..len).unwrap_err();
        assert!(
            matches!(e, Error::OutOfRange { what: "SGE length", value, .. } if value == len as u64),
            "{e}"
        );
        let e = huge.sge_mut(1..len + 1).unwrap_err();
        assert!(
            matches!(
                e,
                Error::OutOfRange {
                    what: "SGE length",
                    ..
                }
            ),
            "{e}"
        );
    }
    let max = (1usize << 31) - 1;
    assert_eq!(huge.sge(0..max).unwrap().length(), max as u32);
    assert_eq!(huge.sge_mut(1..max + 1).unwrap().length(), max as u32);
}

#[test]
fn mkey_layouts_longer_than_i32_max_are_refused_before_any_builder() {
    let mut fx = Fx::new();
    let mut raw: Box<ffi::ibv_mr> = zeroed();
    let huge = fake_region(&fx, &mut raw, 1 << 33, AccessFlags::LOCAL_WRITE);
    let base = huge.addr();
    let access = AccessFlags::LOCAL_WRITE;
    let max = (1usize << 31) - 1;
    let gib = 1usize << 30;
    let too_long = |e: Error, want: u64| {
        let what = "mkey layout length";
        assert!(
            matches!(e, Error::OutOfRange { what: w, value, .. } if w == what && value == want),
            "{e}"
        );
    };
    recorder::take();
    let mut b = fx.rc.batch();
    let two_max = [huge.sge(0..max).unwrap(), huge.sge(max..2 * max).unwrap()];
    too_long(
        b.wr(1).mr_list(&fx.mkey_big, access, &two_max).unwrap_err(),
        2 * max as u64,
    );
    let two_gib = [huge.sge(0..gib).unwrap(), huge.sge(gib..2 * gib).unwrap()];
    too_long(
        b.wr(2).mr_list(&fx.mkey_big, access, &two_gib).unwrap_err(),
        1 << 31,
    );
    // Interleaved entries have 16-bit strides: long layouts come from
    // their repeats.
    let e = |off: usize, count: u32| MrInterleaved::new(&huge, off, count, 0).unwrap();
    too_long(
        b.wr(3)
            .mr_interleaved(&fx.mkey_big, access, 1 << 16, &[e(0, 1 << 15)])
            .unwrap_err(),
        1 << 31,
    );
    too_long(
        b.wr(4)
            .mr_interleaved(&fx.mkey_big, access, 32770, &[e(0, 65535)])
            .unwrap_err(),
        65535 * 32770,
    );
    too_long(
        b.wr(5)
            .mr_interleaved(
                &fx.mkey_big,
                access,
                1 << 15,
                &[e(0, 1 << 15), e(1 << 31, 1 << 15)],
            )
            .unwrap_err(),
        1 << 31,
    );
    drop(b);
    assert_eq!(names(&recorder::take()), ["wr_start", "wr_abort"]);

    // Exactly i32::MAX bytes pass, and reach the provider whole.
    let mut b = fx.rc.batch();
    let fits = [
        huge.sge(0..gib).unwrap(),
        huge.sge(gib..2 * gib - 1).unwrap(),
    ];
    let layout = b.wr(6).mr_list(&fx.mkey_big, access, &fits).unwrap();
    assert_eq!(layout.len(), max as u64);
    let layout = b
        .wr(7)
        .mr_interleaved(&fx.mkey_big, access, i32::MAX as u32, &[e(0, 1)])
        .unwrap();
    assert_eq!(layout.len(), max as u64);
    drop(b);
    let calls = recorder::take();
    assert_eq!(
        names(&calls),
        ["wr_start", "wr_mr_list", "wr_mr_interleaved", "wr_abort"]
    );
    assert_eq!(
        calls[1].args[4],
        Arg::Sges(vec![
            (base, gib as u32, 0xAAAA_0001),
            (base + gib as u64, gib as u32 - 1, 0xAAAA_0001)
        ])
    );
    assert_eq!(calls[2].args[2], Arg::U32(i32::MAX as u32));
    assert_eq!(
        calls[2].args[5],
        Arg::Interleaved(vec![(base, 1, 0, 0xAAAA_0001)])
    );
}

#[test]
fn mkey_layouts_grant_peer_writes_only_over_peer_writable_regions() {
    fn e_private_first(private: &MemoryRegion) -> MrInterleaved<'_> {
        MrInterleaved::new(private, 0, 64, 0).unwrap()
    }
    let mut fx = Fx::new();
    let mut raw: Box<ffi::ibv_mr> = zeroed();
    let private = fake_region(&fx, &mut raw, 1 << 20, AccessFlags::LOCAL_WRITE);
    assert!(!private.is_peer_writable());
    assert!(fx.mr.is_peer_writable());
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let ra = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC;
    let rr = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    // A window bound through the mkey could grant a peer writes too.
    let mw = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND;
    recorder::take();
    let mut b = fx.rc.batch();
    // mr_list: an SGE does not say whether its region is peer-writable.
    invalid(
        b.wr(10)
            .mr_list(&fx.mkey_big, mw, &[fx.mr.sge(0..64).unwrap()]),
    );
    invalid(
        b.wr(11)
            .mr_interleaved(&fx.mkey_big, mw, 1, &[e_private_first(&private)]),
    );
    invalid(
        b.wr(1)
            .mr_list(&fx.mkey_big, rw, &[fx.mr.sge(0..64).unwrap()]),
    );
    invalid(
        b.wr(2)
            .mr_list(&fx.mkey_big, ra, &[fx.mr.sge(0..64).unwrap()]),
    );
    // mr_interleaved: every entry's region must be.
    let e_private = MrInterleaved::new(&private, 0, 64, 0).unwrap();
    let e_shared = MrInterleaved::new(&fx.mr, 0, 64, 0).unwrap();
    invalid(b.wr(3).mr_interleaved(&fx.mkey_big, rw, 1, &[e_private]));
    invalid(b.wr(4).mr_interleaved(&fx.mkey_big, ra, 1, &[e_private]));
    invalid(
        b.wr(5)
            .mr_interleaved(&fx.mkey_big, rw, 1, &[e_shared, e_private]),
    );
    drop(b);
    assert_eq!(names(&recorder::take()), ["wr_start", "wr_abort"]);

    let mut b = fx.rc.batch();
    b.wr(6)
        .mr_list(&fx.mkey_big, rr, &[private.sge(0..64).unwrap()])
        .unwrap();
    b.wr(7)
        .mr_interleaved(&fx.mkey_big, rw, 1, &[e_shared])
        .unwrap();
    b.wr(8)
        .mr_interleaved(&fx.mkey_big, rr, 1, &[e_private])
        .unwrap();
    drop(b);
    let calls = recorder::take();
    let access: Vec<_> = calls
        .iter()
        .filter(|c| c.entry.starts_with("wr_mr_"))
        .map(|c| (c.entry, c.wr.unwrap().0, c.args[1].clone()))
        .collect();
    assert_eq!(
        access,
        [
            ("wr_mr_list", 6, Arg::U32(rr.bits())),
            ("wr_mr_interleaved", 7, Arg::U32(rw.bits())),
            ("wr_mr_interleaved", 8, Arg::U32(rr.bits())),
        ]
    );
}

// ----- the closing audit: mkeys and their entries -----

#[test]
fn mkey_layouts_refuse_a_foreign_mkey_empty_entries_and_strides_past_16_bits() {
    let mut fx = Fx::new();
    let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let lw = AccessFlags::LOCAL_WRITE;
    // An mkey of another device context.
    let (_other_ctx, _pd2_raw, pd2) = foreign_pd(&fx);
    let mut mk2 = Box::new(ffi::mlx5dv_mkey {
        lkey: 0x7777_0001,
        rkey: 0x7777_0002,
    });
    let foreign = unsafe { Mkey::from_raw(&pd2, NonNull::from(&mut *mk2), 64, false) };
    recorder::take();
    let mut b = fx.rc.batch();
    let e = b
        .wr(1)
        .mr_list(&foreign, lw, &[fx.mr.sge(0..64).unwrap()])
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("another device context")),
        "{e}"
    );
    let entry = MrInterleaved::new(&fx.mr, 0, 64, 0).unwrap();
    let e = b
        .wr(2)
        .mr_interleaved(&foreign, rw, 1, &[entry])
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument(ref m) if m.contains("another device context")),
        "{e}"
    );
    // An empty SGE in a list layout.
    let e = b
        .wr(3)
        .mr_list(
            &fx.mkey_big,
            lw,
            &[fx.mr.sge(0..64).unwrap(), fx.mr.sge(64..64).unwrap()],
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfRange {
                what: "mr_list SGE length",
                value: 0,
                ..
            }
        ),
        "{e}"
    );
    // An interleaved stride past the repeat entry's 16 bits.
    let wide = MrInterleaved::new(&fx.mr, 0, 8, 65528).unwrap();
    let e = b
        .wr(4)
        .mr_interleaved(&fx.mkey_big, rw, 1, &[wide])
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfRange {
                what: "interleaved entry stride",
                value: 65536,
                ..
            }
        ),
        "{e}"
    );
    drop(b);
    assert_eq!(names(&recorder::take()), ["wr_start", "wr_abort"]);
    // At the limits, each passes.
    let mut b = fx.rc.batch();
    let widest = MrInterleaved::new(&fx.mr, 0, 8, 65527).unwrap();
    b.wr(5)
        .mr_interleaved(&fx.mkey_big, rw, 1, &[widest])
        .unwrap();
    b.wr(6)
        .mr_list(&fx.mkey_big, lw, &[fx.mr.sge(0..1).unwrap()])
        .unwrap();
    drop(b);
    assert_eq!(
        names(&recorder::take()),
        ["wr_start", "wr_mr_interleaved", "wr_mr_list", "wr_abort"]
    );
}

// ----- the closing audit: the send queue's room -----

#[test]
fn a_batch_in_a_poll_callback_of_its_own_send_cq_stays_within_the_queue() {
    // mlx5's builders take the send CQ's lock when the queue is full; the
    // poll holds it on this thread. A batch there (opened in the callback,
    // or before the poll and carried into it) holds at most max_send_wr
    // work requests: the one past that never reaches the provider.
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    let depth = CAPS.max_send_wr;
    for wr_id in [5, 6] {
        fx.fcq().push(Wc {
            wr_id,
            qp_num: RC_QPN,
            opcode: ffi::IBV_WC_RECV,
            ..Wc::default()
        });
    }
    recorder::take();
    let Fx { rc, cq, .. } = &mut fx;
    let mut carried = None;
    let mut seen = Vec::new();
    let n = cq
        .poll_each(1, |wc| {
            seen.push(wc.wr_id());
            let mut b = rc.batch();
            for i in 0..depth {
                b.wr(u64::from(i))
                    .rdma_write(r)
                    .sge(src.sge(0..8).unwrap())
                    .unwrap();
            }
            carried = Some(b.wr(99).rdma_write(r).sge(src.sge(0..8).unwrap()));
        })
        .unwrap();
    assert_eq!((n, seen), (1, vec![5]));
    let e = carried.unwrap().unwrap_err();
    assert!(
        matches!(e, Error::SendQueueFull { batch, depth: d } if batch == depth + 1 && d == depth),
        "{e}"
    );
    let builders = recorder::take()
        .iter()
        .filter(|c| c.entry == "wr_rdma_write")
        .count();
    assert_eq!(
        builders, depth as usize,
        "the one past the depth was not built"
    );

    // A batch opened before the poll and filled in its callback: the same.
    let mut b = fx.rc.batch();
    let mut outcomes = Vec::new();
    let n = fx
        .cq
        .poll_each(1, |_| {
            for i in 0..=depth {
                outcomes.push(b.wr(u64::from(i)).rdma_write(r).sge(src.sge(0..8).unwrap()));
            }
        })
        .unwrap();
    assert_eq!(n, 1);
    drop(b);
    assert!(outcomes[..depth as usize].iter().all(|o| o.is_ok()));
    assert!(matches!(
        outcomes[depth as usize],
        Err(Error::SendQueueFull { .. })
    ));
}

#[test]
fn a_qp_without_a_send_queue_takes_no_work_request() {
    // libmlx5 would build the first one at a NULL WQE pointer.
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    let caps = QpCaps {
        max_send_wr: 0,
        ..CAPS
    };
    let (mut qp, mut cq) = fx.extra_rc(0x56, caps, 16);
    recorder::take();
    let mut b = qp.batch();
    let e = b.wr(1).send().inline(b"x").unwrap_err();
    assert!(
        matches!(e, Error::SendQueueFull { batch: 1, depth: 0 }),
        "{e}"
    );
    drop(b);
    let e = qp
        .post_and_wait(&mut cq, Duration::from_secs(1), |b| {
            b.wr(1).rdma_write(r).sge(src.sge(0..8)?)
        })
        .unwrap_err();
    assert!(
        matches!(e, Error::SendQueueFull { batch: 1, depth: 0 }),
        "{e}"
    );
    assert_eq!(
        names(&recorder::take()),
        ["wr_start", "wr_abort", "wr_start", "wr_abort"],
        "no builder reached the provider"
    );
    drop((qp, cq));
}

// ----- 4. memory a peer may write is never a plain slice -----

#[test]
fn a_region_a_peer_may_write_is_reached_only_by_copying() {
    let fx = Fx::new();
    // Backed by real memory, so that the copying methods can be checked.
    let mut buf = vec![0u8; 256];
    for access in [
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC,
        AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND,
    ] {
        let mut raw: Box<ffi::ibv_mr> = zeroed();
        raw.addr = buf.as_mut_ptr().cast();
        raw.length = buf.len();
        let mut mr =
            unsafe { MemoryRegion::from_raw(&fx.pd, NonNull::from(&mut *raw), access) }.unwrap();
        assert!(mr.is_peer_writable(), "{access:?}");
        assert!(
            matches!(mr.as_slice(), Err(Error::PeerWritable { .. })),
            "{access:?}"
        );
        assert!(
            matches!(mr.as_mut_slice(), Err(Error::PeerWritable { .. })),
            "{access:?}"
        );
        mr.write_at(10, b"peer").unwrap();
        mr.fill(20..24, 0xAB).unwrap();
        let mut four = [0u8; 4];
        mr.read_at(10, &mut four).unwrap();
        assert_eq!(&four, b"peer");
        assert_eq!(mr.to_vec(20..24).unwrap(), [0xAB; 4]);
        drop(mr);
        assert_eq!(&buf[10..14], b"peer");
        buf.fill(0);
    }
    // A region only this program writes is a plain slice.
    let mut raw: Box<ffi::ibv_mr> = zeroed();
    raw.addr = buf.as_mut_ptr().cast();
    raw.length = buf.len();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    let mut mr =
        unsafe { MemoryRegion::from_raw(&fx.pd, NonNull::from(&mut *raw), access) }.unwrap();
    assert!(!mr.is_peer_writable());
    mr.as_mut_slice().unwrap()[0] = 7;
    assert_eq!(mr.as_slice().unwrap()[0], 7);
}

// ----- the software mlx5 device found: libmlx5 swaps wr_complete -----

unsafe extern "C" fn complete_refusing(_qp: *mut ffi::ibv_qp_ex) -> i32 {
    libc::EADDRINUSE
}

#[test]
fn complete_calls_the_entry_the_qp_has_now() {
    // libmlx5 (rdma-core 40 and later) gives a QP a wr_complete that
    // refuses while it is not in RTS and swaps in the real one at RTS: the
    // batch must call the entry the QP has at the time, as the header's
    // ibv_wr_complete does, not one copied when the QP was made.
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    let real = fx.fq(RC).ibv.wr_complete;
    fx.fq(RC).ibv.wr_complete = Some(complete_refusing);
    let mut b = fx.rc.batch();
    b.wr(1).rdma_write(r).sge(src.sge(0..8).unwrap()).unwrap();
    let e = unsafe { b.complete() }.unwrap_err();
    assert_eq!(e.errno(), Some(libc::EADDRINUSE), "{e}");
    // Swapped back, the same QP posts.
    fx.fq(RC).ibv.wr_complete = real;
    recorder::take();
    let mut b = fx.rc.batch();
    b.wr(2).rdma_write(r).sge(src.sge(0..8).unwrap()).unwrap();
    assert_eq!(unsafe { b.complete() }.unwrap(), 1);
    assert_eq!(
        names(&recorder::take()),
        ["wr_start", "wr_rdma_write", "wr_set_sge", "wr_complete"]
    );
}
