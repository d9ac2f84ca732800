//! The XRC initiator's work requests on the recording provider (no
//! device): each builder and its data, then `ibv_wr_set_xrc_srqn` with the
//! SRQ number the work request named, in `ibv_wr_post(3)`'s order; an SRQ
//! number past 24 bits refused before any call.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::ffi;
use mlx5dv::*;
use std::ptr::NonNull;
use support::fakes::*;
use support::recorder::{self, qp_call, Arg, FakeCq, FakeQp};

const SIG: u32 = ffi::IBV_SEND_SIGNALED;

#[test]
fn each_work_request_ends_with_its_srq_number() {
    let (mut vctx, ctx) = fake_context("fake0");
    let mut pd_raw: Box<ffi::ibv_pd> = zeroed();
    pd_raw.context = ctx.as_ptr();
    let pd = unsafe { ProtectionDomain::from_raw(&ctx, NonNull::from(&mut *pd_raw)) };
    let mut fcq = FakeCq::new();
    let cq = unsafe { CompletionQueue::from_raw(&ctx, NonNull::new(fcq.cq()).unwrap()) }.unwrap();
    let mut fq = FakeQp::new();
    fq.ibv.qp_base.qp_num = 0x77;
    vctx.add_qp(&mut fq);
    fq.attach(&mut fcq);
    let raw = RawQp {
        qp: NonNull::new(fq.qp()).unwrap(),
        qpx: NonNull::new(fq.ibv()).unwrap(),
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        caps: CAPS,
        send_ops: SendOps::rc_default(),
        mlx5: None,
    };
    let mut qp = unsafe { XrcIniQp::from_raw_parts(raw) }.unwrap();
    let mut buf = vec![0u8; 64];
    let mut mr_raw: Box<ffi::ibv_mr> = zeroed();
    mr_raw.addr = buf.as_mut_ptr().cast();
    mr_raw.length = buf.len();
    mr_raw.lkey = 0x1111_2222;
    mr_raw.rkey = 0x3333_4444;
    let mr = unsafe {
        MemoryRegion::from_raw(&pd, NonNull::from(&mut *mr_raw), AccessFlags::LOCAL_WRITE)
    }
    .unwrap();
    let remote = RemoteBuf {
        addr: 0x1000,
        len: 64,
        rkey: 0x99,
    };
    recorder::take();

    let mut b = qp.batch();
    b.wr(1, XrcSrqn(0x42))
        .signaled()
        .send()
        .sge(mr.sge(0..8).unwrap())
        .unwrap();
    b.wr(2, XrcSrqn(0x43))
        .rdma_write(remote)
        .sge(mr.sge(8..16).unwrap())
        .unwrap();
    // Past 24 bits: refused, nothing called for it.
    assert!(matches!(
        b.wr(3, XrcSrqn(1 << 24)).send().sge(mr.sge(0..8).unwrap()),
        Err(Error::OutOfRange {
            what: "XRC SRQ number",
            ..
        })
    ));
    unsafe { b.complete() }.unwrap();
    let calls = recorder::take();
    let names: Vec<_> = calls.iter().map(|c| c.entry).collect();
    assert_eq!(
        names,
        [
            "wr_start",
            "wr_send",
            "wr_set_sge",
            "wr_set_xrc_srqn",
            "wr_rdma_write",
            "wr_set_sge",
            "wr_set_xrc_srqn",
            "wr_complete"
        ],
        "{calls:#?}"
    );
    assert_eq!(
        calls[3],
        qp_call("wr_set_xrc_srqn", &fq, (1, SIG), vec![Arg::U32(0x42)])
    );
    assert_eq!(
        calls[6],
        qp_call("wr_set_xrc_srqn", &fq, (2, 0), vec![Arg::U32(0x43)])
    );
    drop((qp, mr, cq, pd));
    drop((fq, fcq, vctx, pd_raw, mr_raw, buf));
}
