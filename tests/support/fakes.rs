//! Fake RDMA objects under the crate's real handles, for the host-side
//! bad-input tables and the recorded soundness tests: a device, contexts,
//! a PD, CQs, a memory region, mkeys, an address handle and QPs whose
//! provider tables are the recording provider of `super::recorder`. None
//! is owned by its handle, so nothing is destroyed; the C objects outlive
//! the handles.
//!
//! The QPs play a device (the recorder's echo mode): their work requests
//! complete on the shared CQ `cq`, each QP with its own number, and
//! `ibv_modify_qp` on them reaches the fake context (ERR flushes, RESET
//! cleans). Tests reach the fakes through `Fx::_raw`.

#![allow(dead_code, clippy::undocumented_unsafe_blocks)]

use super::recorder::{self, FakeCq, FakeQp, FakeVerbsContext};
use super::table::{row, Expect, Row};
use mlx5dv::*;
use std::ptr::NonNull;

pub const LEN: usize = 64 * 1024;
/// The fake QPs' `max_wr_memcpy_length`.
pub const MEMCPY_MAX: u64 = 4096;
/// The fake RC QP's capabilities: 4 SGEs, 60 bytes inline, so its WQE
/// holds (60 + 4) / 16 = 4 mr_list entries, 3 interleaved ones, and a raw
/// WQE of ceil((16 + 64) / 64) = 2 basic blocks.
pub const CAPS: QpCaps = QpCaps {
    max_send_wr: 16,
    max_recv_wr: 16,
    max_send_sge: 4,
    max_recv_sge: 4,
    max_inline_data: 60,
};

/// A zeroed C struct on the heap: the fakes' starting point.
pub fn zeroed<T>() -> Box<T> {
    Box::new(unsafe { std::mem::zeroed() })
}

/// The QP numbers of the fixture's QPs (distinct: they share one CQ).
pub const RC_QPN: u32 = 0x00AB_CDEF;
pub const PLAIN_QPN: u32 = 0x00AB_CD02;
pub const DCI_QPN: u32 = 0x00AB_CD03;
pub const DCI_STREAMS_QPN: u32 = 0x00AB_CD04;

/// Indices of `Raw::qps`.
pub const RC: usize = 0;
pub const PLAIN: usize = 1;
pub const DCI: usize = 2;
pub const DCI_STREAMS: usize = 3;

/// A fake context (with its ops table: see `FakeVerbsContext`) on a fake
/// device named `name`.
pub fn fake_context(name: &str) -> (Box<FakeVerbsContext>, Context) {
    let mut vctx = FakeVerbsContext::new(name);
    let context = unsafe { Context::from_raw(NonNull::new(vctx.ctx()).unwrap()) };
    (vctx, context)
}

/// The C objects behind the handles; they outlive them (dropped last).
/// Each is boxed so that it stays where the handles point while the
/// fixture is assembled and moved.
#[allow(dead_code, clippy::vec_box)]
pub struct Raw {
    /// The context of everything, then another one (`other_cq`'s).
    pub ctxs: Vec<Box<FakeVerbsContext>>,
    pub pd: Box<ffi::ibv_pd>,
    /// `cq`, `other_cq`, then those of `Fx::extra_rc`.
    pub cqs: Vec<Box<FakeCq>>,
    /// `rc`, `plain`, `dci`, `dci_streams` (indices `RC`, ...), then those
    /// of `Fx::extra_rc`.
    pub qps: Vec<Box<FakeQp>>,
    pub buf: Vec<u8>,
    pub mr: Box<ffi::ibv_mr>,
    pub mkeys: Vec<Box<ffi::mlx5dv_mkey>>,
    pub ah: Box<ffi::ibv_ah>,
}

/// Fake objects under real handles (none owned: nothing is destroyed).
/// Field order is drop order: the handles go before `_raw`.
pub struct Fx {
    /// RC with the default send ops and every mlx5 send op.
    pub rc: RcQp,
    /// RC without an mlx5 side.
    pub plain: RcQp,
    /// DCI without streams.
    pub dci: DciQp,
    /// DCI with 2^2 streams.
    pub dci_streams: DciQp,
    pub mr: MemoryRegion,
    /// An mkey of 2 entries: its own limit binds before the WQE's.
    pub mkey_small: Mkey,
    /// An mkey of 64 entries: the WQE's limit binds.
    pub mkey_big: Mkey,
    pub ah: AddressHandle,
    pub ctx: Context,
    pub pd: ProtectionDomain,
    /// The send and receive CQ of every QP ([`recorder::CQE`] entries).
    pub cq: CompletionQueue,
    /// A CQ of another context.
    pub other_cq: CompletionQueue,
    pub _raw: Raw,
}

impl Fx {
    pub fn new() -> Fx {
        let (mut vctx, ctx) = fake_context("fake0");
        let (vctx2, ctx2) = fake_context("fake1");
        let mut pd_raw: Box<ffi::ibv_pd> = zeroed();
        pd_raw.context = ctx.as_ptr();
        let pd = unsafe { ProtectionDomain::from_raw(&ctx, NonNull::from(&mut *pd_raw)) };
        let mut fcq = FakeCq::new();
        let mut fcq2 = FakeCq::new();
        let cq =
            unsafe { CompletionQueue::from_raw(&ctx, NonNull::new(fcq.cq()).unwrap()) }.unwrap();
        let other_cq =
            unsafe { CompletionQueue::from_raw(&ctx2, NonNull::new(fcq2.cq()).unwrap()) }.unwrap();

        let mut qps = Vec::new();
        let mut raw_qp = |qpn: u32, mlx5: Option<(Mlx5SendOps, Option<DciStreams>)>| {
            let mut fq = FakeQp::new();
            fq.ibv.qp_base.qp_num = qpn;
            // Of the PD, as libibverbs makes a QP (UD and DC addresses are
            // checked against it).
            fq.ibv.qp_base.pd = pd.as_ptr();
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
                mlx5: mlx5.map(|(ops, streams)| RawMlx5 {
                    mqpx: NonNull::new(fq.dv()).unwrap(),
                    ops,
                    streams,
                    max_wr_memcpy_length: MEMCPY_MAX,
                }),
            };
            qps.push(fq);
            raw
        };
        let all = Mlx5SendOps::all();
        let none = Mlx5SendOps::empty();
        let rc = unsafe { RcQp::from_raw_parts(raw_qp(RC_QPN, Some((all, None)))) }.unwrap();
        let plain = unsafe { RcQp::from_raw_parts(raw_qp(PLAIN_QPN, None)) }.unwrap();
        let dci = unsafe { DciQp::from_raw_parts(raw_qp(DCI_QPN, Some((none, None)))) }.unwrap();
        let streams = DciStreams {
            log_num_concurent: 2,
            log_num_errored: 1,
        };
        let dci_streams =
            unsafe { DciQp::from_raw_parts(raw_qp(DCI_STREAMS_QPN, Some((none, Some(streams))))) }
                .unwrap();

        let mut buf = vec![0u8; LEN];
        let mut mr_raw: Box<ffi::ibv_mr> = zeroed();
        mr_raw.addr = buf.as_mut_ptr().cast();
        mr_raw.length = LEN;
        mr_raw.lkey = 0x1111_2222;
        mr_raw.rkey = 0x3333_4444;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr =
            unsafe { MemoryRegion::from_raw(&pd, NonNull::from(&mut *mr_raw), access) }.unwrap();
        let mut mk_small = Box::new(ffi::mlx5dv_mkey {
            lkey: 0x5555_0001,
            rkey: 0x5555_0002,
        });
        let mut mk_big = Box::new(ffi::mlx5dv_mkey {
            lkey: 0x6666_0001,
            rkey: 0x6666_0002,
        });
        let mkey_small = unsafe { Mkey::from_raw(&pd, NonNull::from(&mut *mk_small), 2, false) };
        let mkey_big = unsafe { Mkey::from_raw(&pd, NonNull::from(&mut *mk_big), 64, false) };
        // The address handle is of the QPs' PD, as a DCI requires.
        let mut ah_raw: Box<ffi::ibv_ah> = zeroed();
        ah_raw.context = ctx.as_ptr();
        ah_raw.pd = pd.as_ptr();
        let ah_attr = AhAttr {
            port: 1,
            dlid: 0,
            sl: 0,
            grh: None,
        };
        let ah = unsafe { AddressHandle::from_raw(&pd, NonNull::from(&mut *ah_raw), ah_attr) };
        recorder::take();
        Fx {
            rc,
            plain,
            dci,
            dci_streams,
            mr,
            mkey_small,
            mkey_big,
            ah,
            ctx,
            pd,
            cq,
            other_cq,
            _raw: Raw {
                ctxs: vec![vctx, vctx2],
                pd: pd_raw,
                cqs: vec![fcq, fcq2],
                qps,
                buf,
                mr: mr_raw,
                mkeys: vec![mk_small, mk_big],
                ah: ah_raw,
            },
        }
    }

    /// The fake behind QP `i` (`RC`, `PLAIN`, ...).
    pub fn fq(&mut self, i: usize) -> &mut FakeQp {
        &mut self._raw.qps[i]
    }

    /// The fake behind `cq`.
    pub fn fcq(&mut self) -> &mut FakeCq {
        &mut self._raw.cqs[0]
    }

    /// Another RC QP (number `qpn`, with every mlx5 send op, `caps`), alone
    /// on a CQ of `cqe` entries of the fixture's context; its fakes are
    /// the last of `_raw.qps` and `_raw.cqs`. The handles must be dropped
    /// before the fixture.
    pub fn extra_rc(&mut self, qpn: u32, caps: QpCaps, cqe: i32) -> (RcQp, CompletionQueue) {
        let mut fcq = FakeCq::with_capacity(cqe);
        let cq = unsafe { CompletionQueue::from_raw(&self.ctx, NonNull::new(fcq.cq()).unwrap()) }
            .unwrap();
        let mut fq = FakeQp::new();
        fq.ibv.qp_base.qp_num = qpn;
        fq.ibv.qp_base.pd = self.pd.as_ptr();
        self._raw.ctxs[0].add_qp(&mut fq);
        fq.attach(&mut fcq);
        let raw = RawQp {
            qp: NonNull::new(fq.qp()).unwrap(),
            qpx: NonNull::new(fq.ibv()).unwrap(),
            pd: &self.pd,
            send_cq: &cq,
            recv_cq: &cq,
            caps,
            send_ops: SendOps::rc_default(),
            mlx5: Some(RawMlx5 {
                mqpx: NonNull::new(fq.dv()).unwrap(),
                ops: Mlx5SendOps::all(),
                streams: None,
                max_wr_memcpy_length: MEMCPY_MAX,
            }),
        };
        let qp = unsafe { RcQp::from_raw_parts(raw) }.unwrap();
        self._raw.qps.push(fq);
        self._raw.cqs.push(fcq);
        (qp, cq)
    }
}

/// A row that posts on the fakes: besides its outcome, a refused work
/// request must reach the provider not at all (only the batch's own
/// `wr_start` and `wr_abort`).
pub fn wr_row<'a>(
    name: impl Into<String>,
    expect: Expect,
    call: impl FnOnce(&mut Fx) -> Result<()> + 'a,
) -> Row<'a, Fx> {
    row(name, expect, move |fx: &mut Fx| {
        recorder::take();
        let got = call(fx);
        let calls = recorder::take();
        if got.is_err() {
            let leaked: Vec<_> = calls
                .iter()
                .map(|c| c.entry)
                .filter(|e| !matches!(*e, "wr_start" | "wr_abort"))
                .collect();
            assert!(
                leaked.is_empty(),
                "a refused work request reached the provider: {leaked:?}"
            );
        }
        got
    })
}

pub fn remote(fx: &Fx, len: u64) -> RemoteBuf {
    RemoteBuf {
        addr: fx.mr.addr(),
        len,
        rkey: fx.mr.rkey(),
    }
}
