//! The safe layer against the recording provider: for each builder and
//! setter, the exact sequence of C calls and arguments that reaches the
//! provider, including the flags the wrapper adds, and that a refused work
//! request reaches it not at all.

#![allow(clippy::undocumented_unsafe_blocks)]

#[path = "../../tests/support/recorder.rs"]
mod recorder;

use crate::ffi;
use crate::qp::{Mlx5Info, QpParts};
use crate::wqe::{Opcode, WqeBuilder};
use crate::*;
use recorder::wc;
use recorder::*;
use std::ptr::NonNull;
use std::time::Duration;

const SIG: u32 = ffi::IBV_SEND_SIGNALED;
const INL: u32 = ffi::IBV_SEND_INLINE;
const LEN: usize = 1 << 16;

/// Fake objects under real handles (none of them owned, so nothing is
/// destroyed on drop). The QP plays a device (echo mode): its work
/// requests complete on `fcq`, and `ibv_modify_qp` on it reaches the fake
/// context `_vctx`.
struct Fx {
    fq: Box<FakeQp>,
    _vctx: Box<FakeVerbsContext>,
    _pd: Box<ffi::ibv_pd>,
    fcq: Box<FakeCq>,
    mr_raw: Box<ffi::ibv_mr>,
    mkey_raw: Box<ffi::mlx5dv_mkey>,
    ah_raw: Box<ffi::ibv_ah>,
    buf: Vec<u8>,
    pd: ProtectionDomain,
    cq: CompletionQueue,
}

impl Fx {
    fn new() -> Box<Fx> {
        let mut vctx = FakeVerbsContext::new("fake0");
        let mut pd_raw: Box<ffi::ibv_pd> = Box::default();
        pd_raw.context = vctx.ctx();
        let mut fcq = FakeCq::new();
        let context = Context::fake(NonNull::new(vctx.ctx()).unwrap(), "fake0", true);
        // SAFETY (test): fake objects that outlive the handles.
        let pd = unsafe { ProtectionDomain::from_raw(&context, NonNull::from(&mut *pd_raw)) };
        let cq = unsafe { CompletionQueue::from_raw(&context, NonNull::new(fcq.cq()).unwrap()) }
            .unwrap();
        let mut buf = vec![0u8; LEN];
        let mr_raw = Box::new(ffi::ibv_mr {
            addr: buf.as_mut_ptr().cast(),
            length: LEN,
            lkey: 0x1111_2222,
            rkey: 0x3333_4444,
            ..Default::default()
        });
        let mkey_raw = Box::new(ffi::mlx5dv_mkey {
            lkey: 0x5555_6666,
            rkey: 0x7777_8888,
        });
        let mut fq = FakeQp::new();
        fq.ibv.qp_base.qp_num = wc::QP_NUM;
        // Of the PD, as libibverbs makes a QP (UD and DC addresses are
        // checked against it).
        fq.ibv.qp_base.pd = &mut *pd_raw;
        vctx.add_qp(&mut fq);
        fq.attach(&mut fcq);
        let ah_raw = Box::new(ffi::ibv_ah {
            context: vctx.ctx(),
            pd: &mut *pd_raw,
            ..Default::default()
        });
        Box::new(Fx {
            fq,
            _vctx: vctx,
            _pd: pd_raw,
            fcq,
            mr_raw,
            mkey_raw,
            ah_raw,
            buf,
            pd,
            cq,
        })
    }

    fn qp<T: Transport>(
        &mut self,
        ops: SendOps,
        mlx5: Mlx5SendOps,
        streams: Option<DciStreams>,
    ) -> QpEx<T> {
        QpEx::assemble(QpParts {
            qp: NonNull::new(self.fq.qp()).unwrap(),
            qpx: NonNull::new(self.fq.ibv()).unwrap(),
            mlx5: Mlx5Info {
                mqpx: NonNull::new(self.fq.dv()),
                ops: mlx5,
                max_memcpy: 1 << 20,
                streams,
                wqe_blocks: 0,
            },
            caps: QpCaps::default(),
            send_ops: ops,
            owned: false,
            pd: &self.pd,
            send_cq: &self.cq,
            recv_cq: &self.cq,
        })
        .expect("every fake entry is filled")
    }

    fn rc(&mut self) -> RcQp {
        self.qp(
            SendOps::rc_default() | SendOps::LOCAL_INV,
            Mlx5SendOps::all(),
            None,
        )
    }

    /// An RC QP over the fakes that the handle owns: its drop calls
    /// `ibv_destroy_qp`, which reaches the fake context's `destroy_qp`.
    fn owned_rc(&mut self) -> RcQp {
        QpEx::assemble(QpParts {
            qp: NonNull::new(self.fq.qp()).unwrap(),
            qpx: NonNull::new(self.fq.ibv()).unwrap(),
            mlx5: Mlx5Info::default(),
            caps: QpCaps::default(),
            send_ops: SendOps::rc_default(),
            owned: true,
            pd: &self.pd,
            send_cq: &self.cq,
            recv_cq: &self.cq,
        })
        .expect("every fake entry is filled")
    }

    /// Another fake context, with a PD and a CQ of it.
    fn other_context(&self) -> Other {
        let mut vctx = FakeVerbsContext::new("fake1");
        let ctx = Context::fake(NonNull::new(vctx.ctx()).unwrap(), "fake1", true);
        let mut pd_raw: Box<ffi::ibv_pd> = Box::default();
        pd_raw.context = vctx.ctx();
        let pd = unsafe { ProtectionDomain::from_raw(&ctx, NonNull::from(&mut *pd_raw)) };
        let mut fcq = FakeCq::new();
        let cq =
            unsafe { CompletionQueue::from_raw(&ctx, NonNull::new(fcq.cq()).unwrap()) }.unwrap();
        Other {
            pd,
            cq,
            _pd_raw: pd_raw,
            _fcq: fcq,
            _vctx: vctx,
        }
    }

    /// A second PD of the fixture's own context, and an address handle of
    /// it (as `AddressHandle::new` in that PD makes one).
    fn second_pd(&self) -> SecondPd {
        let ctx = self.pd.context();
        let mut pd_raw: Box<ffi::ibv_pd> = Box::default();
        pd_raw.context = ctx.as_ptr();
        let pd = unsafe { ProtectionDomain::from_raw(ctx, NonNull::from(&mut *pd_raw)) };
        let mut ah_raw = Box::new(ffi::ibv_ah {
            context: ctx.as_ptr(),
            pd: &mut *pd_raw,
            ..Default::default()
        });
        let ah =
            unsafe { crate::addressing::ah::AddressHandle::fake(&pd, NonNull::from(&mut *ah_raw)) };
        SecondPd {
            ah,
            pd,
            _ah_raw: ah_raw,
            _pd_raw: pd_raw,
        }
    }

    /// An address handle of the fixture's PD.
    fn ah(&mut self) -> crate::addressing::ah::AddressHandle {
        let raw = NonNull::from(&mut *self.ah_raw);
        unsafe { crate::addressing::ah::AddressHandle::fake(&self.pd, raw) }
    }

    fn mr(&self) -> MemoryRegion {
        unsafe {
            MemoryRegion::from_raw(&self.pd, NonNull::from(&*self.mr_raw), AccessFlags::all())
        }
        .unwrap()
    }

    fn mkey(&self, max_entries: u16) -> Mkey {
        let p = NonNull::from(&*self.mkey_raw);
        unsafe { Mkey::from_raw(&self.pd, p, max_entries, false) }
    }

    fn base(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// The calls made on the fake QP (not the CQ's), taken.
    fn qp_calls(&self) -> Vec<Call> {
        let cq = &self.fcq.cq as *const _ as usize;
        take().into_iter().filter(|c| c.obj != cq).collect()
    }
}

/// A context other than the fixture's, with a PD and a CQ (field order is
/// drop order: the handles first).
struct Other {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    _pd_raw: Box<ffi::ibv_pd>,
    _fcq: Box<FakeCq>,
    _vctx: Box<FakeVerbsContext>,
}

/// Checks that the calls since the last `take` are `n` batches opened
/// and aborted: nothing built or posted, and the QP not moved.
fn only_aborted_batches(n: usize) {
    let names: Vec<_> = take().iter().map(|c| c.entry).collect();
    assert_eq!(names, ["wr_start", "wr_abort"].repeat(n));
}

/// The arguments of each of the fixture QP's calls to `entry`, taken.
fn args_of(fx: &Fx, entry: &str) -> Vec<Vec<Arg>> {
    let calls = fx.qp_calls();
    entries(&calls, entry)
        .into_iter()
        .map(|c| c.args.clone())
        .collect()
}

/// The id and status of each completion.
fn outcomes(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wcs.iter().map(|w| (w.wr_id, w.status)).collect()
}

/// A second PD of the fixture's context with an address handle of it
/// (field order is drop order: the handles first).
struct SecondPd {
    ah: crate::addressing::ah::AddressHandle,
    pd: ProtectionDomain,
    _ah_raw: Box<ffi::ibv_ah>,
    _pd_raw: Box<ffi::ibv_pd>,
}

fn remote(len: u64) -> RemoteBuf {
    RemoteBuf {
        addr: 0xFFEE_0000_1234_5000,
        len,
        rkey: 0xABCD_EF01,
    }
}

#[test]
fn rc_write_sge_batch_makes_exactly_the_c_calls_of_ibv_wr_post() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut qp = fx.rc();
    let mut b = qp.batch();
    b.wr(7)
        .signaled()
        .rdma_write(remote(64))
        .sge(mr.sge(16..80).unwrap())
        .unwrap();
    b.wr(8)
        .fence()
        .send_imm(0x0102_0304)
        .sge(mr.sge(0..4).unwrap())
        .unwrap();
    assert_eq!(unsafe { b.complete() }.unwrap(), 2);
    let (f, base) = (&fx.fq, fx.base());
    let r = remote(64);
    assert_eq!(
        fx.qp_calls(),
        [
            qp_call("wr_start", f, (0, 0), vec![]),
            qp_call(
                "wr_rdma_write",
                f,
                (7, SIG),
                vec![Arg::U32(r.rkey), Arg::U64(r.addr)]
            ),
            qp_call(
                "wr_set_sge",
                f,
                (7, SIG),
                vec![Arg::U32(0x1111_2222), Arg::U64(base + 16), Arg::U32(64)]
            ),
            qp_call(
                "wr_send_imm",
                f,
                (8, ffi::IBV_SEND_FENCE),
                vec![Arg::U32(0x0102_0304u32.to_be())]
            ),
            qp_call(
                "wr_set_sge",
                f,
                (8, ffi::IBV_SEND_FENCE),
                vec![Arg::U32(0x1111_2222), Arg::U64(base), Arg::U32(4)]
            ),
            // Each WR's own flags are written before its builder, where
            // they differ from what the QP holds; nothing is written back
            // (the provider reads wr_flags at the builders only).
            qp_call("wr_complete", f, (8, ffi::IBV_SEND_FENCE), vec![]),
        ]
    );
}

#[test]
fn batch_flags_are_written_once_and_a_work_requests_own_flags_only_for_it() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut qp = fx.rc();
    let mut b = qp.batch_with(SendFlags::SIGNALED);
    let sges = [mr.sge(0..8).unwrap()];
    let sge = sges[0];
    // By reference (read at the setter) or by value.
    let by_ref: &Sge = sges.first().unwrap();
    b.wr(1).rdma_write(remote(8)).sge(by_ref).unwrap();
    b.wr(2).fence().rdma_write(remote(8)).sge(sge).unwrap();
    b.wr(3).send().inline(b"hi").unwrap();
    b.wr(4).signaled().send().sge(by_ref).unwrap();
    assert_eq!(unsafe { b.complete() }.unwrap(), 4);
    let f = &*fx.fq;
    let fence = SIG | ffi::IBV_SEND_FENCE;
    let seen: Vec<_> = fx
        .qp_calls()
        .into_iter()
        .map(|c| (c.entry, c.wr.unwrap().1))
        .collect();
    assert_eq!(
        seen,
        [
            ("wr_start", 0),
            ("wr_rdma_write", SIG),
            ("wr_set_sge", SIG),
            ("wr_rdma_write", fence),
            ("wr_set_sge", fence),
            ("wr_send", SIG | INL),
            ("wr_set_inline_data", SIG | INL),
            // SIGNALED is the batch's already: nothing of its own.
            ("wr_send", SIG),
            ("wr_set_sge", SIG),
            ("wr_complete", SIG),
        ]
    );
    // The last work request's flags are the batch's.
    assert_eq!(f.ibv.wr_flags, SIG);
}

#[test]
fn a_work_request_without_flags_after_one_with_them_gets_none() {
    // The QP keeps the last flags written (nothing is written back): a
    // run of signalled work requests writes SIGNALED once, and the one
    // after it that adds nothing gets the batch's flags (none) back.
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut qp = fx.rc();
    let mut b = qp.batch();
    for id in 1..=3 {
        b.wr(id)
            .signaled()
            .send()
            .sge(mr.sge(0..8).unwrap())
            .unwrap();
    }
    b.wr(4).send().sge(mr.sge(0..8).unwrap()).unwrap();
    b.wr(5).send().inline(b"x").unwrap();
    b.wr(6).send().sge(mr.sge(0..8).unwrap()).unwrap();
    assert_eq!(unsafe { b.complete() }.unwrap(), 6);
    let seen: Vec<_> = fx
        .qp_calls()
        .into_iter()
        .filter(|c| c.entry == "wr_send")
        .map(|c| c.wr.unwrap())
        .collect();
    assert_eq!(
        seen,
        [(1, SIG), (2, SIG), (3, SIG), (4, 0), (5, INL), (6, 0)]
    );
}

#[test]
fn an_unbounded_remote_buffer_passes_its_key_and_address_unchecked() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut out = fx.mr();
    let whole = out.sge_mut(..).unwrap();
    let mut qp = fx.rc();
    let mut b = qp.batch();
    let far = RemoteBuf::unbounded(0xFFFF_FFFF_FFFF_F000, 0x1234_5678);
    assert_eq!(far.len, u64::MAX);
    b.wr(1)
        .rdma_write(far)
        .sge(mr.sge(0..4096).unwrap())
        .unwrap();
    b.wr(2).rdma_read(far).sge(part(whole, 0..8)).unwrap();
    assert_eq!(unsafe { b.complete() }.unwrap(), 2);
    let calls = fx.qp_calls();
    for (i, entry) in [(1, "wr_rdma_write"), (3, "wr_rdma_read")] {
        assert_eq!(calls[i].entry, entry);
        assert_eq!(
            calls[i].args,
            [Arg::U32(0x1234_5678), Arg::U64(0xFFFF_FFFF_FFFF_F000)]
        );
    }
}

#[test]
fn inline_data_gets_ibv_send_inline_from_the_wrapper() {
    let mut fx = Fx::new();
    let mut qp = fx.rc();
    let mut b = qp.batch();
    b.wr(1).send().inline(b"hello").unwrap();
    drop(b);
    let f = &fx.fq;
    let calls = fx.qp_calls();
    assert_eq!(calls[1], qp_call("wr_send", f, (1, INL), vec![]));
    assert_eq!(calls[2].entry, "wr_set_inline_data");
    assert_eq!(
        calls[2].args[1..],
        [Arg::Usize(5), Arg::Bytes(b"hello".to_vec())]
    );
    // Dropped without complete: aborted, never completed.
    assert_eq!(calls[3], qp_call("wr_abort", f, (1, INL), vec![]));
    assert_eq!(calls.len(), 4);
}

#[test]
fn refused_work_requests_never_reach_the_provider() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut out = fx.mr();
    let whole = out.sge_mut(..).unwrap();
    let mut qp = fx.qp::<ReliableConnection>(SendOps::RDMA_WRITE, Mlx5SendOps::empty(), None);
    let mut b = qp.batch();
    assert!(matches!(
        b.wr(1).send().sge(mr.sge(0..8).unwrap()),
        Err(Error::Unsupported { .. })
    ));
    let too_long = b.wr(2).rdma_write(remote(8)).sge(mr.sge(0..9).unwrap());
    assert!(matches!(too_long, Err(Error::OutOfRange { value: 9, .. })));
    assert!(b.wr(3).rdma_write(remote(65)).inline(&[0; 65]).is_err());
    assert!(matches!(
        b.wr(4).memcpy(part(whole, 0..8), mr.sge(8..16).unwrap()),
        Err(Error::Unsupported { .. })
    ));
    assert_eq!(b.len(), 0);
    drop(b);
    let names: Vec<_> = fx.qp_calls().iter().map(|c| c.entry).collect();
    assert_eq!(names, ["wr_start", "wr_abort"]);
}

#[test]
fn post_and_wait_signals_every_work_request() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut out = fx.mr();
    let whole = out.sge_mut(..).unwrap();
    let mut qp = fx.rc();
    take();
    let wcs = qp
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(1).rdma_write(remote(8)).sge(mr.sge(0..8)?)?;
            b.wr(2).rdma_read(remote(16)).sge(part(whole, 8..24))
        })
        .unwrap()
        .to_vec();
    let calls = fx.qp_calls();
    // Every work request signalled, under an id of the scoped post's own:
    // bit 63 set, consecutive.
    let builders: Vec<_> = calls
        .iter()
        .filter(|c| c.entry.starts_with("wr_rdma"))
        .map(|c| c.wr.unwrap())
        .collect();
    assert_eq!(builders.len(), 2);
    let first = builders[0].0;
    assert_ne!(first & (1 << 63), 0, "{first:#x}");
    assert_eq!(
        builders,
        [(first, SIG), ((first + 1) | (1 << 63), SIG)],
        "{builders:x?}"
    );
    let names: Vec<_> = calls.iter().map(|c| c.entry).collect();
    assert_eq!(
        names,
        [
            "wr_start",
            "wr_rdma_write",
            "wr_set_sge",
            "wr_rdma_read",
            "wr_set_sge",
            "wr_complete"
        ]
    );
    // The completions, with the caller's ids, in order.
    let got: Vec<_> = wcs
        .iter()
        .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len, w.qp_num))
        .collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE, 8, wc::QP_NUM),
            (2, WcStatus::SUCCESS, WcOpcode::RDMA_READ, 16, wc::QP_NUM),
        ]
    );
    assert_eq!(fx.cq.backlog_len(), 0);
    assert!(fx.fcq.violations.is_empty(), "{:?}", fx.fcq.violations);
}

#[test]
fn post_and_wait_into_appends_after_what_the_vector_holds() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut qp = fx.rc();
    let mut wcs = Vec::new();
    for round in 0..3u64 {
        qp.post_and_wait_into(&mut fx.cq, Duration::from_secs(1), &mut wcs, |b| {
            for i in 0..4 {
                b.wr(round * 10 + i).send().sge(mr.sge(0..8)?)?;
            }
            Ok(())
        })
        .unwrap();
    }
    let ids: Vec<_> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [0, 1, 2, 3, 10, 11, 12, 13, 20, 21, 22, 23]);
    assert!(wcs.iter().all(|w| w.status == WcStatus::SUCCESS));
    assert_eq!(fx.cq.backlog_len(), 0);
    // An empty batch posts nothing and adds nothing.
    qp.post_and_wait_into(&mut fx.cq, Duration::from_secs(1), &mut wcs, |_| Ok(()))
        .unwrap();
    assert_eq!(wcs.len(), 12);
    assert!(fx.fcq.violations.is_empty(), "{:?}", fx.fcq.violations);
}

#[test]
fn post_and_wait_refuses_a_cq_that_is_not_the_send_cq_and_posts_nothing() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut qp = fx.rc();
    let mut other_fcq = FakeCq::new();
    let mut other = unsafe {
        CompletionQueue::from_raw(fx.cq.context(), NonNull::new(other_fcq.cq()).unwrap())
    }
    .unwrap();
    assert!(qp.completes_on(&fx.cq));
    assert!(!qp.completes_on(&other));
    take();
    let mut built = false;
    let err = qp
        .post_and_wait(&mut other, Duration::from_secs(1), |b| {
            built = true;
            b.wr(1).rdma_write(remote(8)).sge(mr.sge(0..8)?)
        })
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(!built, "the batch was not even opened");
    let calls = take();
    assert!(calls.is_empty(), "nothing reached the provider: {calls:?}");
}

#[test]
fn dci_work_requests_end_with_their_dc_address() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut out = fx.mr();
    let whole = out.sge_mut(..).unwrap();
    let ah_ptr = &mut *fx.ah_raw as *mut ffi::ibv_ah;
    let streams = DciStreams {
        log_num_concurent: 4,
        log_num_errored: 2,
    };
    let mut qp = fx.qp::<DcInitiator>(SendOps::rc_default(), Mlx5SendOps::MEMCPY, Some(streams));
    let ah = unsafe {
        crate::addressing::ah::AddressHandle::fake(&fx.pd, NonNull::new(ah_ptr).unwrap())
    };
    let addr = DcAddr::new(&ah, 0x00AB_CDEF, 0xFEED_0000_DEAD_BEEF);
    let mut b = qp.batch();
    b.wr(1, addr)
        .signaled()
        .rdma_write(remote(64))
        .sge(mr.sge(0..64).unwrap())
        .unwrap();
    b.wr_stream(2, addr, 15)
        .send()
        .sge(mr.sge(0..8).unwrap())
        .unwrap();
    // Any 16-bit stream id reaches the provider (the device maps ids to
    // its streams; rdma-core's tests use ids past 2^log_num_concurent).
    b.wr_stream(3, addr, u16::MAX)
        .send()
        .sge(mr.sge(0..8).unwrap())
        .unwrap();
    b.wr(4, addr)
        .memcpy(part(whole, 0..32), mr.sge(32..64).unwrap())
        .unwrap();
    assert_eq!(unsafe { b.complete() }.unwrap(), 4);
    let f = &fx.fq;
    let base = fx.base();
    let dc = |stream: Option<u16>| {
        let mut a = vec![
            ptr(ah_ptr),
            Arg::U32(0x00AB_CDEF),
            Arg::U64(0xFEED_0000_DEAD_BEEF),
        ];
        a.extend(stream.map(Arg::U16));
        a
    };
    let sge = |addr: u64, len: u32| vec![Arg::U32(0x1111_2222), Arg::U64(addr), Arg::U32(len)];
    assert_eq!(
        fx.qp_calls(),
        [
            qp_call("wr_start", f, (0, 0), vec![]),
            qp_call(
                "wr_rdma_write",
                f,
                (1, SIG),
                vec![Arg::U32(remote(0).rkey), Arg::U64(remote(0).addr)]
            ),
            qp_call("wr_set_sge", f, (1, SIG), sge(base, 64)),
            dv_call("wr_set_dc_addr", f, (1, SIG), dc(None)),
            qp_call("wr_send", f, (2, 0), vec![]),
            qp_call("wr_set_sge", f, (2, 0), sge(base, 8)),
            dv_call("wr_set_dc_addr_stream", f, (2, 0), dc(Some(15))),
            qp_call("wr_send", f, (3, 0), vec![]),
            qp_call("wr_set_sge", f, (3, 0), sge(base, 8)),
            dv_call("wr_set_dc_addr_stream", f, (3, 0), dc(Some(u16::MAX))),
            dv_call(
                "wr_memcpy",
                f,
                (4, 0),
                vec![
                    Arg::U32(0x1111_2222),
                    Arg::U64(base),
                    Arg::U32(0x1111_2222),
                    Arg::U64(base + 32),
                    Arg::Usize(32),
                ],
            ),
            // A memcpy's WQE is finished by its builder, with no address:
            // a DC setter after it would write over it.
            qp_call("wr_complete", f, (4, 0), vec![]),
        ]
    );
}

#[test]
fn dci_memcpy_and_local_inv_take_no_dc_address_after_a_dc_work_request() {
    // libmlx5 finishes a memcpy's and a local invalidate's WQE in the
    // builder and does not reset its setter count: an address set after
    // them would overwrite the finished WQE and, after a DC work request
    // (which leaves the count at 1), finish it twice and skip a slot.
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut out = fx.mr();
    let whole = out.sge_mut(..).unwrap();
    let ah_ptr = &mut *fx.ah_raw as *mut ffi::ibv_ah;
    let ops = SendOps::rc_default() | SendOps::LOCAL_INV;
    let mut qp = fx.qp::<DcInitiator>(ops, Mlx5SendOps::MEMCPY, None);
    let ah = unsafe {
        crate::addressing::ah::AddressHandle::fake(&fx.pd, NonNull::new(ah_ptr).unwrap())
    };
    let addr = DcAddr::new(&ah, 0x00AB_CDEF, 0xFEED_0000_DEAD_BEEF);
    let mut b = qp.batch();
    b.wr(1, addr)
        .rdma_write(remote(8))
        .sge(mr.sge(0..8).unwrap())
        .unwrap();
    b.wr(2, addr)
        .memcpy(part(whole, 0..32), mr.sge(32..64).unwrap())
        .unwrap();
    b.wr(3, addr).local_inv(0x1234).unwrap();
    b.wr(4, addr).send().sge(mr.sge(0..8).unwrap()).unwrap();
    assert_eq!(unsafe { b.complete() }.unwrap(), 4);
    let names: Vec<_> = fx.qp_calls().iter().map(|c| c.entry).collect();
    assert_eq!(
        names,
        [
            "wr_start",
            "wr_rdma_write",
            "wr_set_sge",
            "wr_set_dc_addr",
            "wr_memcpy",
            "wr_local_inv",
            "wr_send",
            "wr_set_sge",
            "wr_set_dc_addr",
            "wr_complete"
        ]
    );
}

#[test]
fn memcpy_length_is_checked_at_its_boundaries() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut out = fx.mr();
    let whole = out.sge_mut(..).unwrap();
    let mut qp = fx.rc();
    qp.mlx5.max_memcpy = 4096;
    let mut b = qp.batch();
    let s = |r: std::ops::Range<usize>| mr.sge(r).unwrap();
    let d = |r: std::ops::Range<usize>| part(whole, r);
    let zero = b.wr(1).memcpy(d(0..0), s(8..8)).unwrap_err();
    assert!(
        matches!(
            zero,
            Error::OutOfRange {
                what: "memcpy length",
                value: 0,
                ..
            }
        ),
        "{zero}"
    );
    assert!(b.wr(2).memcpy(d(0..4096), s(8192..12288)).is_ok());
    let over = b.wr(3).memcpy(d(0..4097), s(8192..12289)).unwrap_err();
    assert!(
        matches!(
            over,
            Error::OutOfRange {
                what: "memcpy length",
                value: 4097,
                ..
            }
        ),
        "{over}"
    );
    let uneven = b.wr(4).memcpy(d(0..8), s(8..24)).unwrap_err();
    assert!(matches!(uneven, Error::InvalidArgument(_)), "{uneven}");
    assert_eq!(b.len(), 1);
}

#[test]
fn a_memcpy_op_is_checked_once_and_posts_the_same_call_as_memcpy() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut out = fx.mr();
    let whole = out.sge_mut(..).unwrap();
    let s = |r: std::ops::Range<usize>| mr.sge(r).unwrap();
    let d = |r: std::ops::Range<usize>| part(whole, r);
    let mut qp = fx.rc();
    qp.mlx5.max_memcpy = 4096;
    // The checks of memcpy, made when the op is.
    let zero = qp.memcpy_op(d(0..0), s(8..8)).unwrap_err();
    assert!(
        matches!(
            zero,
            Error::OutOfRange {
                what: "memcpy length",
                value: 0,
                ..
            }
        ),
        "{zero}"
    );
    let over = qp.memcpy_op(d(0..4097), s(8192..12289)).unwrap_err();
    assert!(
        matches!(
            over,
            Error::OutOfRange {
                what: "memcpy length",
                value: 4097,
                ..
            }
        ),
        "{over}"
    );
    let uneven = qp.memcpy_op(d(0..8), s(8..24)).unwrap_err();
    assert!(matches!(uneven, Error::InvalidArgument(_)), "{uneven}");
    let op = qp.memcpy_op(d(0..4096), s(8192..12288)).unwrap();
    assert_eq!((op.dest(), op.src()), (d(0..4096), s(8192..12288)));
    // Posted, it makes the call memcpy makes.
    let mut b = qp.batch_with(SendFlags::SIGNALED);
    b.wr(1).memcpy_op(&op).unwrap();
    b.wr(2).memcpy(op.dest(), op.src()).unwrap();
    assert_eq!(unsafe { b.complete() }.unwrap(), 2);
    let calls: Vec<_> = fx
        .qp_calls()
        .into_iter()
        .filter(|c| c.entry == "wr_memcpy")
        .collect();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].wr, Some((1, SIG)));
    assert_eq!(calls[1].wr, Some((2, SIG)));
    assert_eq!(calls[0].args, calls[1].args);
    // A QP without MEMCPY makes none, and a prepared one is refused there.
    let mut plain = fx.qp::<ReliableConnection>(SendOps::rc_default(), Mlx5SendOps::empty(), None);
    assert!(matches!(
        plain.memcpy_op(d(0..8), s(8..16)),
        Err(Error::Unsupported { .. })
    ));
    let mut b = plain.batch();
    assert!(matches!(
        b.wr(3).memcpy_op(&op),
        Err(Error::Unsupported { .. })
    ));
}

#[test]
fn mr_list_sets_inline_and_checks_entries_against_mkey_and_wqe() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mkey = fx.mkey(8);
    let mut qp = fx.rc();
    let mut b = qp.batch();
    let sges: Vec<Sge> = (0..5)
        .map(|i| mr.sge(i * 100..i * 100 + 10).unwrap())
        .collect();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    // 4 entries fit the default WQE (max_inline_data 64); 5 do not.
    let layout = b
        .wr(9)
        .signaled()
        .mr_list(&mkey, access, &sges[..4])
        .unwrap();
    // The layout it registers: 4 entries of 10 bytes, on this mkey.
    assert_eq!(layout.len(), 40);
    assert_eq!(layout.mkey().rkey(), mkey.rkey());
    let err = b.wr(10).mr_list(&mkey, access, &sges).unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                what: "mr_list entries",
                value: 5,
                ..
            }
        ),
        "{err}"
    );
    let err = b.wr(11).mr_list(&mkey, access, &[]).unwrap_err();
    assert!(matches!(err, Error::OutOfRange { value: 0, .. }), "{err}");
    b.wr(12).local_inv(mkey.rkey()).unwrap();
    assert_eq!(unsafe { b.complete() }.unwrap(), 2);
    let base = fx.base();
    let f = &fx.fq;
    let calls = fx.qp_calls();
    let mkey_ptr = &*fx.mkey_raw as *const ffi::mlx5dv_mkey;
    let list: Vec<_> = (0..4u64)
        .map(|i| (base + i * 100, 10, 0x1111_2222))
        .collect();
    assert_eq!(calls[1].entry, "wr_mr_list");
    assert_eq!(
        calls[1].wr,
        Some((9, SIG | INL)),
        "the wrapper sets IBV_SEND_INLINE"
    );
    assert_eq!(
        calls[1].args[..3],
        [ptr(mkey_ptr), Arg::U32(access.bits()), Arg::U16(4)]
    );
    assert_eq!(calls[1].args[4], Arg::Sges(list));
    assert_eq!(
        calls[2],
        qp_call("wr_local_inv", f, (12, 0), vec![Arg::U32(0x7777_8888)])
    );
    // A 2-entry mkey refuses 3 entries: its max_entries is the limit.
    let small = fx.mkey(2);
    let mut qp = fx.rc();
    let mut b = qp.batch();
    let err = b.wr(1).mr_list(&small, access, &sges[..3]).unwrap_err();
    assert!(
        matches!(err, Error::OutOfRange { value: 3, ref limit, .. } if limit.contains("max_entries")),
        "{err}"
    );
}

#[test]
fn mr_interleaved_needs_one_more_mkey_entry_and_stays_in_its_region() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut qp = fx.rc();
    let access = AccessFlags::LOCAL_WRITE;
    let e = |off: usize| MrInterleaved::new(&mr, off, 64, 192).unwrap();
    let entries = [e(0), e(64), e(128)];
    // 3 entries need an mkey of 4; 3 is one short.
    let mkey3 = fx.mkey(3);
    let mkey4 = fx.mkey(4);
    let mut b = qp.batch();
    let err = b
        .wr(1)
        .mr_interleaved(&mkey3, access, 4, &entries)
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                what: "num_interleaved",
                value: 3,
                ..
            }
        ),
        "{err}"
    );
    let layout = b.wr(2).mr_interleaved(&mkey4, access, 4, &entries).unwrap();
    assert_eq!(layout.len(), 3 * 64 * 4, "3 entries of 64 bytes, 4 repeats");
    // repeat_count 0, and a pattern that runs past the region.
    assert!(matches!(
        b.wr(3).mr_interleaved(&mkey4, access, 0, &entries),
        Err(Error::OutOfRange {
            what: "repeat_count",
            ..
        })
    ));
    let last = MrInterleaved::new(&mr, LEN - 64, 64, 0).unwrap();
    let layout = b.wr(4).mr_interleaved(&mkey4, access, 1, &[last]).unwrap();
    assert_eq!(layout.len(), 64, "1 × 64 bytes");
    assert!(matches!(
        b.wr(5).mr_interleaved(&mkey4, access, 2, &[last]),
        Err(Error::OutOfRange {
            what: "interleaved pattern end",
            ..
        })
    ));
    assert!(MrInterleaved::new(&mr, LEN - 63, 64, 0).is_err());
    assert!(MrInterleaved::new(&mr, 0, 0, 0).is_err());
    assert_eq!(unsafe { b.complete() }.unwrap(), 2);
    let calls = fx.qp_calls();
    let base = fx.base();
    let first = calls
        .iter()
        .find(|c| c.entry == "wr_mr_interleaved")
        .unwrap();
    assert_eq!(first.wr, Some((2, INL)));
    let mkey_ptr = &*fx.mkey_raw as *const ffi::mlx5dv_mkey;
    assert_eq!(
        first.args[..4],
        [
            ptr(mkey_ptr),
            Arg::U32(access.bits()),
            Arg::U32(4),
            Arg::U16(3)
        ]
    );
    let want: Vec<_> = (0..3u64)
        .map(|i| (base + i * 64, 64, 192, 0x1111_2222))
        .collect();
    assert_eq!(first.args[5], Arg::Interleaved(want));
}

#[test]
fn raw_wqe_hands_the_wqe_bytes_to_the_provider() {
    let mut fx = Fx::new();
    let mut qp = fx.rc();
    let wqe = WqeBuilder::new(Opcode::Send, 0x12_3456)
        .signaled()
        .data_seg(16, 0x1111_2222, 0x1000)
        .build()
        .unwrap();
    let mut b = qp.batch();
    unsafe { b.wr(5).raw_wqe(&wqe) }.unwrap();
    assert_eq!(unsafe { b.complete() }.unwrap(), 1);
    let calls = fx.qp_calls();
    assert_eq!(calls[1].entry, "wr_raw_wqe");
    assert_eq!(
        calls[1].args,
        [ptr(wqe.as_ptr()), Arg::Bytes(wqe.as_bytes()[..16].to_vec())]
    );
}

#[test]
fn raw_wqe_larger_than_the_qps_wqe_is_refused() {
    let mut fx = Fx::new();
    let mut qp = fx.rc();
    // Default caps: 64 bytes inline, 4 SGEs → the WQE holds 2 blocks.
    let wqe = |segs: usize| {
        let mut b = WqeBuilder::new(Opcode::Send, 1);
        for i in 0..segs {
            b = b.data_seg(8, 1, i as u64 * 8);
        }
        b.build().unwrap()
    };
    let mut b = qp.batch();
    assert_eq!(wqe(7).basic_blocks(), 2);
    assert!(unsafe { b.wr(1).raw_wqe(&wqe(7)) }.is_ok());
    assert_eq!(wqe(8).basic_blocks(), 3);
    let err = unsafe { b.wr(2).raw_wqe(&wqe(8)) }.unwrap_err();
    assert!(matches!(err, Error::OutOfRange { value: 3, .. }), "{err}");
    assert_eq!(b.len(), 1);
}

#[test]
fn a_full_send_queue_is_a_typed_error() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut qp = fx.rc();
    for errno in [libc::ENOMEM, libc::ENOSPC] {
        fx.fq.complete_ret = errno;
        let mut b = qp.batch();
        b.wr(1)
            .rdma_write(remote(8))
            .sge(mr.sge(0..8).unwrap())
            .unwrap();
        let err = unsafe { b.complete() }.unwrap_err();
        assert!(
            matches!(
                err,
                Error::SendQueueFull {
                    batch: 1,
                    depth: 128
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("none was posted"), "{err}");
    }
    fx.fq.complete_ret = libc::EINVAL;
    let b = qp.batch();
    let err = unsafe { b.complete() }.unwrap_err();
    assert_eq!(err.errno(), Some(libc::EINVAL));
}

#[test]
fn mkey_entries_sizes_the_wqe_so_the_entry_limits_follow() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mkey = fx.mkey(64);
    let mut b = QpBuilder::rc(&fx.pd, &fx.cq, &fx.cq);
    b.mkey_entries(10, 6);
    let caps = b.caps;
    // 10 list entries: 16 × 10 - 4 = 156 bytes; 6 interleaved: 16 × 7 - 4 = 108.
    assert_eq!(caps.max_inline_data, 156);
    let mut qp = fx.rc();
    qp.caps = caps;
    let sges: Vec<Sge> = (0..11).map(|i| mr.sge(i * 8..i * 8 + 8).unwrap()).collect();
    let mut batch = qp.batch();
    assert!(batch
        .wr(1)
        .mr_list(&mkey, AccessFlags::LOCAL_WRITE, &sges[..10])
        .is_ok());
    let err = batch
        .wr(2)
        .mr_list(&mkey, AccessFlags::LOCAL_WRITE, &sges)
        .unwrap_err();
    assert!(matches!(err, Error::OutOfRange { value: 11, .. }), "{err}");
    let e = |off: usize| MrInterleaved::new(&mr, off, 8, 8).unwrap();
    let entries: Vec<_> = (0..10).map(|i| e(i * 16)).collect();
    // 156 bytes hold (156 + 4) / 16 - 1 = 9 interleaved entries.
    assert!(batch
        .wr(3)
        .mr_interleaved(&mkey, AccessFlags::LOCAL_WRITE, 1, &entries[..9])
        .is_ok());
    assert!(batch
        .wr(4)
        .mr_interleaved(&mkey, AccessFlags::LOCAL_WRITE, 1, &entries)
        .is_err());
    // The default sizes: a small mkey_entries request changes nothing.
    let mut b = QpBuilder::rc(&fx.pd, &fx.cq, &fx.cq);
    b.mkey_entries(4, 3);
    assert_eq!(b.caps.max_inline_data, QpCaps::default().max_inline_data);
}

#[test]
fn send_with_invalidate_carries_the_rkey_and_needs_its_send_op() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut qp = fx.qp::<ReliableConnection>(
        SendOps::SEND | SendOps::SEND_WITH_INV,
        Mlx5SendOps::empty(),
        None,
    );
    let mut b = qp.batch();
    b.wr(4)
        .signaled()
        .send_inv(0x7777_8888)
        .sge(mr.sge(0..16).unwrap())
        .unwrap();
    drop(b);
    let calls = fx.qp_calls();
    let f = &fx.fq;
    assert_eq!(
        calls[1],
        qp_call("wr_send_inv", f, (4, SIG), vec![Arg::U32(0x7777_8888)])
    );
    assert_eq!(calls[2].entry, "wr_set_sge");
    let mut qp = fx.qp::<ReliableConnection>(SendOps::SEND, Mlx5SendOps::empty(), None);
    let mut b = qp.batch();
    let err = b.wr(5).send_inv(1).inline(b"x").unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
}

#[test]
fn a_registration_returns_its_layout_which_bounds_remote_and_local_use() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mkey = fx.mkey(8);
    let mut qp = fx.rc();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    let mut b = qp.batch();
    let sges = [mr.sge(0..100).unwrap(), mr.sge(1000..1200).unwrap()];
    let layout = b.wr(3).mr_list(&mkey, access, &sges).unwrap();
    unsafe { b.complete() }.unwrap();
    assert_eq!(layout.len(), 300);
    let r = layout.remote(100..300).unwrap();
    assert_eq!(
        (r.addr, r.len, r.rkey),
        (100, 200, mkey.rkey()),
        "zero-based"
    );
    assert!(matches!(
        layout.remote(0..301),
        Err(Error::OutOfRange { .. })
    ));
    // SAFETY: the SGE is only inspected.
    let sge = unsafe { layout.sge(..) }.unwrap();
    assert_eq!(
        (sge.addr(), sge.length(), sge.lkey()),
        (0, 300, mkey.lkey())
    );
    // SAFETY: as above.
    assert!(unsafe { layout.sge(1..302) }.is_err());
    // A layout registered elsewhere is described by hand.
    assert_eq!(MkeyLayout::new(&mkey, 300), layout);
    assert!(MkeyLayout::new(&mkey, 0).is_empty());
}

#[test]
fn more_interleaved_entries_than_the_stack_array_holds_arrive_whole() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mkey = fx.mkey(32);
    let mut b = QpBuilder::rc(&fx.pd, &fx.cq, &fx.cq);
    b.mkey_entries(0, 20);
    let caps = b.caps;
    let mut qp = fx.rc();
    qp.caps = caps;
    let entries: Vec<_> = (0..20)
        .map(|i| MrInterleaved::new(&mr, i * 16, 8, 8).unwrap())
        .collect();
    let mut batch = qp.batch();
    let layout = batch
        .wr(1)
        .mr_interleaved(&mkey, AccessFlags::LOCAL_WRITE, 2, &entries)
        .unwrap();
    assert_eq!(layout.len(), 20 * 8 * 2);
    unsafe { batch.complete() }.unwrap();
    let base = fx.base();
    let call = fx
        .qp_calls()
        .into_iter()
        .find(|c| c.entry == "wr_mr_interleaved")
        .unwrap();
    assert_eq!(call.args[3], Arg::U16(20));
    let want: Vec<_> = (0..20u64)
        .map(|i| (base + i * 16, 8, 8, 0x1111_2222))
        .collect();
    assert_eq!(call.args[5], Arg::Interleaved(want));
}

/// `r` of a destination SGE (the recording provider never touches memory,
/// so a second handle on a test region stands for another region).
fn part(whole: SgeMut<'_>, r: std::ops::Range<usize>) -> SgeMut<'_> {
    let (_, tail) = whole.split_at(r.start as u32).unwrap();
    tail.split_at((r.end - r.start) as u32).unwrap().0
}

// ----- the device's side: state transitions, destruction, polls -----

/// The calls of entry `entry`, taken from `calls`.
fn entries<'a>(calls: &'a [Call], entry: &str) -> Vec<&'a Call> {
    calls.iter().filter(|c| c.entry == entry).collect()
}

#[test]
fn state_transitions_reach_the_provider_through_libibverbs() {
    let mut fx = Fx::new();
    let qp = fx.rc();
    take();
    qp.to_error().unwrap();
    qp.reset().unwrap();
    let qp_ptr = fx.fq.qp() as usize;
    let calls = take();
    let modify = |state| Call {
        entry: "modify_qp",
        obj: qp_ptr,
        wr: None,
        args: vec![Arg::U32(state), Arg::U32(ffi::IBV_QP_STATE)],
    };
    assert_eq!(
        calls,
        [modify(ffi::IBV_QPS_ERR), modify(ffi::IBV_QPS_RESET)]
    );
    // libibverbs keeps the state it was given, and query_qp reports it.
    assert_eq!(qp.state().unwrap(), QpState::Reset);
    assert_eq!(take()[0].entry, "query_qp");
}

#[test]
fn a_batch_mlx5_refused_is_rolled_back_and_not_waited_for() {
    // mlx5 rolls back a batch whose wr_complete fails: nothing of it runs,
    // so the scoped post returns at once, without stopping the QP.
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut qp = fx.rc();
    assert!(qp.pd().context().is_mlx5());
    for (errno, full) in [(libc::EINVAL, false), (libc::ENOMEM, true)] {
        fx.fq.complete_ret = errno;
        take();
        let err = qp
            .post_and_wait(&mut fx.cq, Duration::from_secs(5), |b| {
                b.wr(1).rdma_write(remote(8)).sge(mr.sge(0..8)?)
            })
            .unwrap_err();
        if full {
            assert!(
                matches!(err, Error::SendQueueFull { batch: 1, .. }),
                "{err}"
            );
        } else {
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
        }
        let names: Vec<_> = take().iter().map(|c| c.entry).collect();
        // EINVAL asks the QP's state, to say whether it explains the
        // refusal (here, in RTS, it does not).
        let want: &[&str] = if full {
            &["wr_start", "wr_rdma_write", "wr_set_sge", "wr_complete"]
        } else {
            &[
                "wr_start",
                "wr_rdma_write",
                "wr_set_sge",
                "wr_complete",
                "query_qp",
            ]
        };
        assert_eq!(names, want, "no poll, no state change");
        assert!(fx.fcq.queue.is_empty());
    }
}

#[test]
fn a_qp_dropped_inside_a_poll_callback_is_destroyed_after_the_poll_ends() {
    let mut fx = Fx::new();
    let qp = fx.owned_rc();
    let qp_ptr = fx.fq.qp() as usize;
    for wr_id in [5, 6] {
        fx.fcq.push(Wc {
            wr_id,
            qp_num: wc::QP_NUM,
            opcode: ffi::IBV_WC_RECV,
            ..Wc::default()
        });
    }
    take();
    let mut held = Some(qp);
    let mut seen = Vec::new();
    let n = fx
        .cq
        .poll_each(8, |wc| {
            seen.push(wc.wr_id());
            if let Some(qp) = held.take() {
                // A reset here would take the lock the poll may hold: it
                // is refused, without a call into C.
                let e = qp.reset().unwrap_err();
                assert!(
                    matches!(e, Error::InvalidArgument(ref m) if m.contains("poll_each callback")),
                    "{e}"
                );
                drop(qp);
            }
        })
        .unwrap();
    assert_eq!((n, seen), (2, vec![5, 6]));
    let calls = take();
    let names: Vec<_> = calls.iter().map(|c| c.entry).collect();
    assert_eq!(
        names,
        [
            "start_poll",
            "next_poll",
            "next_poll",
            "end_poll",
            "destroy_qp"
        ],
        "destroyed after the poll ended, and no modify_qp"
    );
    assert_eq!(calls[4].obj, qp_ptr);
    assert!(fx.fcq.violations.is_empty(), "{:?}", fx.fcq.violations);

    // Outside a poll, the drop destroys at once.
    let qp = fx.owned_rc();
    take();
    drop(qp);
    assert_eq!(entries(&take(), "destroy_qp").len(), 1);
}

#[test]
fn a_qp_dropped_in_a_nested_poll_waits_for_the_outermost_and_a_panic_ends_it() {
    let mut fx = Fx::new();
    let mut inner_fcq = FakeCq::new();
    let mut inner = unsafe {
        CompletionQueue::from_raw(fx.cq.context(), NonNull::new(inner_fcq.cq()).unwrap())
    }
    .unwrap();
    let recv = |wr_id| Wc {
        wr_id,
        opcode: ffi::IBV_WC_RECV,
        ..Wc::default()
    };
    fx.fcq.push(recv(1));
    inner_fcq.push(recv(2));
    let mut held = Some(fx.owned_rc());
    take();
    fx.cq
        .poll_each(1, |_| {
            inner.poll_each(1, |_| drop(held.take())).unwrap();
            assert!(crate::cq::in_provider_poll());
        })
        .unwrap();
    let outer = fx.fcq.cq() as usize;
    let calls = take();
    let seen: Vec<_> = calls.iter().map(|c| (c.entry, c.obj == outer)).collect();
    assert_eq!(
        seen,
        [
            ("start_poll", true),
            ("start_poll", false),
            ("end_poll", false),
            ("end_poll", true),
            ("destroy_qp", false),
        ]
    );
    assert!(!crate::cq::in_provider_poll());

    // A callback that panics after dropping a QP: the poll is ended while
    // unwinding, and the QP destroyed after it.
    fx.fcq.push(recv(3));
    let mut held = Some(fx.owned_rc());
    take();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fx.cq
            .poll_each(1, |_| {
                drop(held.take());
                panic!("in the callback");
            })
            .unwrap()
    }));
    assert!(r.is_err());
    // The completion the callback panicked on is read, inside the poll,
    // to be kept for the next poll.
    let names: Vec<_> = take().iter().map(|c| c.entry).collect();
    let n = names.len();
    assert!(n > 3, "{names:?}");
    assert_eq!(names[0], "start_poll");
    assert!(
        names[1..n - 2].iter().all(|e| e.starts_with("read_")),
        "{names:?}"
    );
    assert_eq!(names[n - 2..], ["end_poll", "destroy_qp"]);
    assert!(!crate::cq::in_provider_poll());
    let mut again = Vec::new();
    fx.cq.poll_each(4, |wc| again.push(wc.wr_id())).unwrap();
    assert_eq!(again, [3]);
    take();

    // With no poll in progress, what would wait for one runs at once.
    let ran = std::rc::Rc::new(std::cell::Cell::new(false));
    let r2 = ran.clone();
    crate::cq::after_polls(Box::new(move || r2.set(true)));
    assert!(ran.get());
}

mod dc;
mod srq;

#[test]
fn a_dct_refuses_a_cq_or_srq_of_another_context_before_any_c_call() {
    let fx = Fx::new();
    let other = fx.other_context();
    take();
    // SRQs are made through libibverbs, which reaches the fake contexts.
    let srq = SharedReceiveQueue::new(&fx.pd, 16, 1).unwrap();
    let other_srq = SharedReceiveQueue::new(&other.pd, 16, 1).unwrap();
    let calls = take();
    let made: Vec<_> = calls.iter().map(|c| (c.entry, c.args.clone())).collect();
    let args = vec![Arg::U32(16), Arg::U32(1)];
    assert_eq!(made, [("create_srq", args.clone()), ("create_srq", args)]);
    assert_eq!(calls[0].obj, &*fx._pd as *const ffi::ibv_pd as usize);

    let e = Dct::new(&fx.pd, &other.cq, &srq, 7).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument(ref m)
            if m.contains("the CQ belongs to fake1, the PD to fake0")),
        "{e}"
    );
    let e = Dct::new(&fx.pd, &fx.cq, &other_srq, 7).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument(ref m)
            if m.contains("the SRQ belongs to fake1, the PD to fake0")),
        "{e}"
    );
    assert_eq!(take(), [], "refused before any C call");

    // Of one context, the checks pass and libmlx5 is asked (and refuses a
    // device that is not mlx5's: the fake's).
    let e = Dct::new(&fx.pd, &fx.cq, &srq, 7).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported { ref what }
            if what.starts_with("mlx5dv_create_qp (DCT on fake0)")),
        "{e}"
    );
    drop((srq, other_srq));
    let names: Vec<_> = take().iter().map(|c| c.entry).collect();
    assert_eq!(names, ["destroy_srq", "destroy_srq"]);
}

#[test]
fn a_limited_batch_refuses_the_work_request_past_its_limit_before_the_provider() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut qp = fx.rc();
    let mut b = qp.batch();
    // More than the send queue holds (128): refused, the batch unchanged.
    let err = b.limit(129).unwrap_err();
    assert!(
        matches!(
            err,
            Error::SendQueueFull {
                batch: 129,
                depth: 128
            }
        ),
        "{err}"
    );
    b.wr(1)
        .rdma_write(remote(8))
        .sge(mr.sge(0..8).unwrap())
        .unwrap();
    // Counted from what the batch holds: 1 + 127 fits, 1 + 128 does not.
    assert!(matches!(
        b.limit(128),
        Err(Error::SendQueueFull { batch: 129, .. })
    ));
    b.limit(2).unwrap();
    // A later limit cannot ask for more than the earlier one left.
    let err = b.limit(3).unwrap_err();
    assert!(matches!(err, Error::BatchLimit { limit: 3 }), "{err}");
    b.wr(2)
        .rdma_write(remote(8))
        .sge(mr.sge(0..8).unwrap())
        .unwrap();
    b.wr(3).send().sge(mr.sge(0..8).unwrap()).unwrap();
    take();
    let err = b.wr(4).send().sge(mr.sge(0..8).unwrap()).unwrap_err();
    assert!(matches!(err, Error::BatchLimit { limit: 3 }), "{err}");
    assert!(err.to_string().contains("limited to 3"), "{err}");
    // Refused before the provider saw any of it; the batch stays open.
    assert_eq!(fx.qp_calls(), []);
    assert_eq!(b.len(), 3);
    assert_eq!(unsafe { b.complete() }.unwrap(), 3);
    let calls = fx.qp_calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].entry, "wr_complete");
    // A new batch has the whole queue again.
    let mut b = qp.batch();
    b.limit(128).unwrap();
    drop(b);
}

#[test]
fn waits_return_the_completions_in_the_cqs_buffer_and_reuse_it() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let mut qp = fx.rc();
    let mut at = Vec::new();
    for round in 0..3u64 {
        let wcs = qp
            .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
                for i in 0..4 {
                    b.wr(round * 10 + i).send().sge(mr.sge(0..8)?)?;
                }
                Ok(())
            })
            .unwrap();
        let ids: Vec<_> = wcs.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, [0, 1, 2, 3].map(|i| round * 10 + i));
        assert!(wcs.iter().all(|w| w.status == WcStatus::SUCCESS));
        at.push(wcs.as_ptr());
    }
    // One buffer, the CQ's, reused by each post (room for a poll's worth
    // was made by the first).
    assert!(at.iter().all(|p| *p == at[0]), "{at:?}");
    // cq.wait returns its completions in the same buffer.
    let mut b = qp.batch_with(SendFlags::SIGNALED);
    for i in 0..3 {
        b.wr(100 + i).send().sge(mr.sge(0..8).unwrap()).unwrap();
    }
    // SAFETY: the region outlives the fixture's CQ, which completes the
    // batch at once.
    unsafe { b.complete() }.unwrap();
    let wcs = fx.cq.wait(3, Duration::from_secs(1)).unwrap();
    assert_eq!(
        wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [100, 101, 102]
    );
    assert_eq!(wcs.as_ptr(), at[0]);
    // On an empty CQ it times out, with a typed error.
    let err = fx.cq.wait(1, Duration::from_millis(10)).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(fx.fcq.violations.is_empty(), "{:?}", fx.fcq.violations);
}

#[test]
fn atomic_write_hands_its_eight_bytes_over_and_needs_its_send_op() {
    let mut fx = Fx::new();
    let mut qp = fx.qp::<ReliableConnection>(
        SendOps::RDMA_WRITE | SendOps::ATOMIC_WRITE,
        Mlx5SendOps::empty(),
        None,
    );
    let value = 0x0102_0304_0506_0708u64.to_le_bytes();
    let target = RemoteBuf {
        addr: 0x10_0000,
        len: 8,
        rkey: 0x4455,
    };
    let mut b = qp.batch();
    b.wr(6).signaled().atomic_write(target, &value).unwrap();
    // Refused before C: a short or unaligned remote buffer.
    let short = RemoteBuf { len: 7, ..target };
    let unaligned = RemoteBuf {
        addr: 0x10_0004,
        ..target
    };
    for bad in [short, unaligned] {
        let err = b.wr(7).atomic_write(bad, &value).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }
    drop(b);
    let calls = fx.qp_calls();
    let writes = entries(&calls, "wr_atomic_write");
    assert_eq!(writes.len(), 1, "{calls:?}");
    assert_eq!(writes[0].args[..2], [Arg::U32(0x4455), Arg::U64(0x10_0000)]);
    assert_eq!(writes[0].args[3], Arg::Bytes(value.to_vec()));
    assert_eq!(writes[0].wr, Some((6, SIG)));
    // A QP without the send op refuses it before C.
    let mut qp = fx.qp::<ReliableConnection>(SendOps::RDMA_WRITE, Mlx5SendOps::empty(), None);
    let mut b = qp.batch();
    let err = b.wr(8).atomic_write(target, &value).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
}

#[cfg(mlx5dv_ibv_wr_flush)]
#[test]
fn flush_hands_its_range_placement_and_level_to_the_provider() {
    use std::cell::RefCell;
    type Seen = ((u64, u32), u32, u64, usize, u8, u8);
    thread_local! {
        static SEEN: RefCell<Vec<Seen>> = const { RefCell::new(Vec::new()) };
    }
    unsafe extern "C" fn wr_flush(
        qp: *mut ffi::ibv_qp_ex,
        rkey: u32,
        remote_addr: u64,
        len: usize,
        placement: u8,
        level: u8,
    ) {
        // SAFETY: the fake QP the batch passes.
        let wr = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
        SEEN.with(|s| {
            s.borrow_mut()
                .push((wr, rkey, remote_addr, len, placement, level))
        });
    }
    let mut fx = Fx::new();
    let target = RemoteBuf {
        addr: 0x20_0000,
        len: 0x1_0000_0010,
        rkey: 0x99,
    };
    {
        let mut qp = fx.qp::<ReliableConnection>(SendOps::RDMA_WRITE, Mlx5SendOps::empty(), None);
        let mut b = qp.batch();
        let err = b
            .wr(4)
            .flush(target, FlushPlacement::Global, FlushLevel::Region)
            .unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    }
    fx.fq.ibv.wr_flush = Some(wr_flush);
    let mut qp = fx.qp::<ReliableConnection>(
        SendOps::RDMA_WRITE | SendOps::FLUSH,
        Mlx5SendOps::empty(),
        None,
    );
    let mut b = qp.batch();
    b.wr(3)
        .signaled()
        .flush(target, FlushPlacement::Persistent, FlushLevel::Range)
        .unwrap();
    drop(b);
    assert_eq!(
        SEEN.with(|s| s.take()),
        [(
            (3, SIG),
            0x99,
            0x20_0000,
            0x1_0000_0010,
            ffi::IBV_FLUSH_PERSISTENT as u8,
            ffi::IBV_FLUSH_RANGE as u8
        )]
    );
}

#[test]
fn a_type2_bind_hands_the_window_its_new_rkey_and_the_range_and_checks_first() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let pd_ptr = fx.pd.as_ptr();
    let mut raw = Box::new(ffi::ibv_mw {
        pd: pd_ptr,
        rkey: 0x4242_4201,
        type_: ffi::IBV_MW_TYPE_2,
        ..Default::default()
    });
    let raw_ptr = &mut *raw as *mut ffi::ibv_mw as usize;
    let mut mw = unsafe { MemoryWindow::fake(&fx.pd, NonNull::from(&mut *raw), MwType::Type2) };
    let bind = MwBind::new(&mr, 64..192, AccessFlags::REMOTE_WRITE).unwrap();
    let mut qp = fx.qp::<ReliableConnection>(
        SendOps::rc_default() | SendOps::BIND_MW,
        Mlx5SendOps::empty(),
        None,
    );
    let mut b = qp.batch();
    let remote = b.wr(3).signaled().bind_mw(&mut mw, &bind).unwrap();
    drop(b);
    // ibv_inc_rkey: the low byte one more.
    assert_eq!(remote.rkey, 0x4242_4202);
    assert_eq!(mw.rkey(), 0x4242_4202);
    assert_eq!((remote.addr, remote.len), (mr.addr() + 64, 128));
    let calls = fx.qp_calls();
    let call = &calls[1];
    assert_eq!((call.entry, call.wr), ("wr_bind_mw", Some((3, SIG))));
    assert_eq!(call.args[0], Arg::Ptr(raw_ptr));
    assert_eq!(call.args[1], Arg::U32(0x4242_4202));
    assert_eq!(
        call.args[3..],
        [
            Arg::Ptr(mr.as_ptr() as usize),
            Arg::U64(mr.addr() + 64),
            Arg::U64(128),
            Arg::U32(ffi::IBV_ACCESS_REMOTE_WRITE),
        ]
    );
    // A chosen key replaces the low byte; zero-based starts at 0.
    let zb = MwBind::new(
        &mr,
        0..64,
        AccessFlags::REMOTE_READ | AccessFlags::ZERO_BASED,
    )
    .unwrap()
    .key(0x77);
    let mut b = qp.batch();
    let remote = b.wr(4).bind_mw(&mut mw, &zb).unwrap();
    drop(b);
    assert_eq!((remote.addr, remote.len, remote.rkey), (0, 64, 0x4242_4277));

    // Refused before any call: a type 1 window, a QP without BIND_MW.
    let before = fx.qp_calls().len();
    raw.type_ = ffi::IBV_MW_TYPE_1;
    let mut one = unsafe { MemoryWindow::fake(&fx.pd, NonNull::from(&mut *raw), MwType::Type1) };
    let mut b = qp.batch();
    let err = b.wr(5).bind_mw(&mut one, &bind).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    drop(b);
    let mut plain = fx.qp::<ReliableConnection>(SendOps::rc_default(), Mlx5SendOps::empty(), None);
    let mut b = plain.batch();
    let err = b.wr(6).bind_mw(&mut mw, &bind).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    drop(b);
    let calls = fx.qp_calls();
    assert!(
        calls[before..].iter().all(|c| c.entry != "wr_bind_mw"),
        "{calls:?}"
    );
}
mod ud;
