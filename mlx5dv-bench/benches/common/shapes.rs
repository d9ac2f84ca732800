// The Rust shapes both harnesses measure: one batch of 32 work requests
// (or one poll or wait of 32 completions) per call through the safe API,
// in the tuned forms (`rust_<shape>`, from a `Plan`), the natural forms
// (`rust_<shape>_natural`), the completions as `WorkCompletion`s
// (`rust_poll_into`, `rust_cq_wait`, `rust_cq_wait_into`) and, for
// post_vs_c's table only, two tuned shapes with the conveniences that cost
// (`rust_<shape>_checked`).
//
// Included (`include!`), not a module: each harness includes it where its
// shapes have always been compiled, post_vs_c.rs in its crate root and
// real_provider in its `shapes` module. rustc splits a crate into codegen
// units by module, and LLVM optimises a function with what shares its
// unit: the same functions compiled in a module of their own were inlined
// and unrolled otherwise, and counted other instructions (post_vs_c's
// raw_wqe 25.4 Ir per work request, then 43.0).
//
// The includer has in scope what it names: `mlx5dv::{AccessFlags,
// AddressHandle, CompletionQueue, DcAddr, DciQp, MemcpyOp, MemoryRegion,
// Mkey, NonEmptySge, RcQp, RemoteBuf, Result, SendFlags, Sge, SgeMut,
// WorkCompletion}`,
// `mlx5dv::wqe::Wqe`, `std::time::Duration`, and `common::{BATCH, DcTarget,
// INLINE, LIST, LOG_STREAMS, MSG}` and `common::wc::BenchWc`.

/// What a performance-minded user prepares before posting (the C side's
/// `struct bench_plan` has the same, from the same region): the batch's
/// SGEs, the peer's addresses, the mkey list, the inline message, the
/// memcpys checked against the QP.
pub struct Plan<'m> {
    /// The write sources, and (as `dst`) the memcpy destinations.
    sge: [Sge<'m>; BATCH],
    /// The write sources as entries known not to be empty (as C knows its
    /// plan's lengths): the direct rows' (real_provider only).
    #[allow(dead_code)]
    whole: [NonEmptySge<'m>; BATCH],
    dst: [SgeMut<'m>; BATCH],
    src: [Sge<'m>; BATCH],
    /// The remote buffers as checked slices of the peer's region.
    remote: [RemoteBuf; BATCH],
    /// The same as C's plan has them: one rkey, an address per WR.
    rkey: u32,
    raddr: [u64; BATCH],
    list: [Sge<'m>; LIST],
    msg: [u8; INLINE],
    /// `sge[i]` ← `src[i]`, checked against the QP once.
    copy: [MemcpyOp<'m>; BATCH],
}

impl<'m> Plan<'m> {
    /// The plan over `mr` (the C plan's offsets: write sources and memcpy
    /// destinations at 0, memcpy sources at 4096, the list at 8192) and
    /// the peer's buffer `remote`.
    pub fn new(mr: &'m mut MemoryRegion, remote: RemoteBuf, qp: &RcQp) -> Result<Self> {
        // The region exclusively borrowed once: memcpy destinations are
        // written by the device; each piece is also a source.
        let whole = mr.sge_mut(..)?;
        let at = |base: usize, i: usize| -> Result<SgeMut<'m>> {
            let (_, tail) = whole.split_at((base + i * MSG) as u32)?;
            Ok(tail.split_at(MSG as u32)?.0)
        };
        let mut dst = [at(0, 0)?; BATCH];
        let mut sge = [dst[0].into_sge(); BATCH];
        let mut src = sge;
        let mut rem = [remote.slice(0, MSG as u64)?; BATCH];
        let mut raddr = [0; BATCH];
        for i in 0..BATCH {
            dst[i] = at(0, i)?;
            sge[i] = dst[i].into_sge();
            src[i] = at(4096, i)?.into_sge();
            rem[i] = remote.slice((i * MSG) as u64, MSG as u64)?;
            raddr[i] = rem[i].addr;
        }
        let list = [at(8192, 0)?.into_sge(), at(8192, 1)?.into_sge()];
        let mut copy = [qp.memcpy_op(dst[0], src[0])?; BATCH];
        for i in 0..BATCH {
            copy[i] = qp.memcpy_op(dst[i], src[i])?;
        }
        let mut msg = [0u8; INLINE];
        for (i, b) in msg.iter_mut().enumerate() {
            *b = i as u8;
        }
        let whole = sge.map(|e| e.non_empty().expect("the plan's entries hold MSG bytes"));
        Ok(Plan {
            sge,
            whole,
            dst,
            src,
            remote: rem,
            rkey: remote.rkey,
            raddr,
            list,
            msg,
            copy,
        })
    }
}

// ----- the tuned forms: one batch per call, from the plan -----
//
// SAFETY (every `complete` below): the memory a batch names is the plan's
// region (or the natural forms' handles on it) and the peer's buffer. The
// null provider keeps nothing of it after the call; on the software
// device both are registered for the whole run, and nothing of the
// program touches them until `Rig::settle` has polled the batch's
// completions.

#[no_mangle]
#[inline(never)]
pub fn rust_rc_write_sge(qp: &mut RcQp, p: &Plan<'_>) -> Result<u32> {
    let mut b = qp.batch_with(SendFlags::SIGNALED);
    b.limit(BATCH)?;
    for i in 0..BATCH {
        // By reference: the SGE's fields are read at the provider's setter,
        // after the builder's call, as C reads them (see BENCHMARKS.md).
        #[allow(clippy::needless_borrows_for_generic_args)]
        b.wr(i as u64)
            .rdma_write(RemoteBuf::unbounded(p.raddr[i], p.rkey))
            .sge(&p.sge[i])?;
    }
    // SAFETY: see above.
    unsafe { b.complete() }
}

/// The same work with the conveniences that cost: a flag per work request
/// and a remote buffer whose length is checked against the SGE's.
#[no_mangle]
#[inline(never)]
pub fn rust_rc_write_sge_checked(qp: &mut RcQp, p: &Plan<'_>) -> Result<u32> {
    let mut b = qp.batch();
    for (i, (sge, remote)) in p.sge.iter().zip(&p.remote).enumerate() {
        b.wr(i as u64).signaled().rdma_write(*remote).sge(*sge)?;
    }
    // SAFETY: see above.
    unsafe { b.complete() }
}

#[no_mangle]
#[inline(never)]
pub fn rust_rc_inline_send(qp: &mut RcQp, p: &Plan<'_>) -> Result<u32> {
    let mut b = qp.batch_with(SendFlags::SIGNALED | SendFlags::INLINE);
    b.limit(BATCH)?;
    for i in 0..BATCH as u64 {
        b.wr(i).send().inline(&p.msg)?;
    }
    // SAFETY: see above.
    unsafe { b.complete() }
}

#[no_mangle]
#[inline(never)]
pub fn rust_dci_write_sge(qp: &mut DciQp, p: &Plan<'_>, addr: DcAddr<'_>) -> Result<u32> {
    let mut b = qp.batch_with(SendFlags::SIGNALED);
    b.limit(BATCH)?;
    for (i, (sge, &raddr)) in p.sge.iter().zip(&p.raddr).enumerate() {
        b.wr(i as u64, addr)
            .rdma_write(RemoteBuf::unbounded(raddr, p.rkey))
            .sge(sge)?;
    }
    // SAFETY: see above.
    unsafe { b.complete() }
}

#[no_mangle]
#[inline(never)]
pub fn rust_dci_write_sge_stream(qp: &mut DciQp, p: &Plan<'_>, addr: DcAddr<'_>) -> Result<u32> {
    let mut b = qp.batch_with(SendFlags::SIGNALED);
    b.limit(BATCH)?;
    for (i, (sge, &raddr)) in p.sge.iter().zip(&p.raddr).enumerate() {
        let stream = (i % (1 << LOG_STREAMS)) as u16;
        b.wr_stream(i as u64, addr, stream)
            .rdma_write(RemoteBuf::unbounded(raddr, p.rkey))
            .sge(sge)?;
    }
    // SAFETY: see above.
    unsafe { b.complete() }
}

#[no_mangle]
#[inline(never)]
pub fn rust_memcpy(qp: &mut RcQp, p: &Plan<'_>) -> Result<u32> {
    let mut b = qp.batch_with(SendFlags::SIGNALED);
    b.limit(BATCH)?;
    for i in 0..BATCH {
        b.wr(i as u64).memcpy_op(&p.copy[i])?;
    }
    // SAFETY: see above.
    unsafe { b.complete() }
}

/// The same work with mlx5dv_wr_post(3)'s length rules checked per work
/// request, and a flag per work request.
#[no_mangle]
#[inline(never)]
pub fn rust_memcpy_checked(qp: &mut RcQp, p: &Plan<'_>) -> Result<u32> {
    let mut b = qp.batch();
    for (i, (dest, src)) in p.dst.iter().zip(&p.src).enumerate() {
        b.wr(i as u64).signaled().memcpy(*dest, *src)?;
    }
    // SAFETY: see above.
    unsafe { b.complete() }
}

#[no_mangle]
#[inline(never)]
pub fn rust_mr_list(qp: &mut RcQp, p: &Plan<'_>, mkey: &Mkey) -> Result<u32> {
    let mut b = qp.batch_with(SendFlags::SIGNALED | SendFlags::INLINE);
    b.limit(BATCH)?;
    for i in 0..BATCH as u64 {
        b.wr(i).mr_list(mkey, AccessFlags::LOCAL_WRITE, &p.list)?;
    }
    // SAFETY: see above.
    unsafe { b.complete() }
}

#[no_mangle]
#[inline(never)]
pub fn rust_raw_wqe(qp: &mut RcQp, wqe: &Wqe) -> Result<u32> {
    let mut b = qp.batch();
    b.limit(BATCH)?;
    for i in 0..BATCH as u64 {
        // SAFETY: both fixtures build the WQE as a signalled RDMA write of
        // 64 bytes from the plan's region to the peer's buffer: the null
        // provider only copies it; on the device both are registered for
        // the whole run.
        unsafe { b.wr(i).raw_wqe(wqe)? };
    }
    // SAFETY: see above.
    unsafe { b.complete() }
}

// ----- the natural forms: what a newcomer writes from the API tour -----

/// `remote.slice(..)?` and `src.sge(..)?` per work request, each
/// signalled, in a `qp.batch()`.
#[no_mangle]
#[inline(never)]
pub fn rust_rc_write_sge_natural(
    qp: &mut RcQp,
    src: &MemoryRegion,
    remote: RemoteBuf,
) -> Result<u32> {
    let mut b = qp.batch();
    for i in 0..BATCH {
        let at = i * MSG;
        b.wr(i as u64)
            .signaled()
            .rdma_write(remote.slice(at as u64, MSG as u64)?)
            .sge(src.sge(at..at + MSG)?)?;
    }
    // SAFETY: see above.
    unsafe { b.complete() }
}

/// The same on a DCI, its address made once (`DcAddr::new`).
#[no_mangle]
#[inline(never)]
pub fn rust_dci_write_sge_natural(
    qp: &mut DciQp,
    ah: &AddressHandle,
    dc: DcTarget,
    src: &MemoryRegion,
    remote: RemoteBuf,
) -> Result<u32> {
    let addr = DcAddr::new(ah, dc.dctn, dc.key);
    let mut b = qp.batch();
    for i in 0..BATCH {
        let at = i * MSG;
        b.wr(i as u64, addr)
            .signaled()
            .rdma_write(remote.slice(at as u64, MSG as u64)?)
            .sge(src.sge(at..at + MSG)?)?;
    }
    // SAFETY: see above.
    unsafe { b.complete() }
}

/// `memcpy(dest, src.sge(..)?)?` per work request, each signalled, the
/// destinations cut from one exclusive borrow (`SgeMut::chunks`).
#[no_mangle]
#[inline(never)]
pub fn rust_memcpy_natural(
    qp: &mut RcQp,
    src: &MemoryRegion,
    dst: &mut MemoryRegion,
) -> Result<u32> {
    let dests = dst.sge_mut(0..BATCH * MSG)?.chunks(MSG as u32)?;
    let mut b = qp.batch();
    for (i, dest) in dests.enumerate() {
        let at = 4096 + i * MSG;
        b.wr(i as u64)
            .signaled()
            .memcpy(dest, src.sge(at..at + MSG)?)?;
    }
    // SAFETY: see above.
    unsafe { b.complete() }
}

// ----- polling -----

/// `cq.poll_each` of one round, each completion's fields read into `out`
/// as the C poll loops read them into `struct bench_wc`.
#[no_mangle]
#[inline(never)]
pub fn rust_poll_cq(cq: &mut CompletionQueue, out: &mut [BenchWc; BATCH]) -> Result<usize> {
    let mut n = 0;
    cq.poll_each(BATCH, |wc| {
        let w = &mut out[n];
        n += 1;
        w.wr_id = wc.wr_id();
        w.status = wc.status();
        w.imm = wc.imm();
        w.opcode = wc.opcode();
        w.byte_len = wc.byte_len();
        w.qp_num = wc.qp_num();
        w.vendor_err = wc.vendor_err();
    })
}

// ----- the completions as `WorkCompletion`s -----
//
// Against C reading every field into `struct bench_wc_full`
// (`c_best_poll_full`, `c_best_cq_wait`). The completions are already in
// the CQ when each call runs: a wait never spins.

/// `cq.poll_into` of one round, into a vector the caller reuses.
#[no_mangle]
#[inline(never)]
pub fn rust_poll_into(cq: &mut CompletionQueue, out: &mut Vec<WorkCompletion>) -> Result<usize> {
    out.clear();
    cq.poll_into(out, BATCH)
}

/// `cq.wait` for 32 completions, returned in the CQ's buffer (the harness
/// copies them out for its check, after the counted call).
#[no_mangle]
#[inline(never)]
pub fn rust_cq_wait(cq: &mut CompletionQueue) -> Result<&[WorkCompletion]> {
    cq.wait(BATCH, Duration::from_secs(5))
}

/// `cq.wait_into` for 32 completions, into a vector the caller reuses.
#[no_mangle]
#[inline(never)]
pub fn rust_cq_wait_into(
    cq: &mut CompletionQueue,
    out: &mut Vec<WorkCompletion>,
) -> Result<usize> {
    out.clear();
    cq.wait_into(out, BATCH, Duration::from_secs(5))?;
    Ok(out.len())
}
