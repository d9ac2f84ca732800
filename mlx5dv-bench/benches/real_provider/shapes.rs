//! The table's rows: one batch of 32 work requests (or one poll or wait of
//! 32 completions) per call, in C (the loops `post_vs_c.rs` measures: every
//! build of `c/post.c`'s C best, `c_best_<build>_<shape>`, and
//! `c/plain.c`'s `c_plain_<shape>`, given libmlx5's own QPs and CQ) and in
//! Rust through the safe API: the tuned and natural forms, and the
//! completions as `WorkCompletion`s, that `benches/post_vs_c.rs` measures
//! too (`common/shapes.rs`). And the direct path's Rust side
//! (`rust_direct_*`), whose rows `direct.rs` runs against C direct.

use crate::common::measure::{Row, Version};
use crate::common::wc::{kept, BenchWc};
use crate::common::{CShape, CSide, DcTarget, BATCH, INLINE, LIST, LOG_STREAMS, MSG};
use crate::rig::{Queue, Rig, Work};
use mlx5dv::direct::{DirectDcAddr, DirectDci, DirectRc, DirectWc, WriteSource};
use mlx5dv::wqe::Wqe;
use mlx5dv::{
    AccessFlags, AddressHandle, CompletionQueue, DcAddr, DciQp, MemcpyOp, MemoryRegion, Mkey,
    NonEmptySge, RcQp, RemoteBuf, Result, SendFlags, Sge, SgeMut, WorkCompletion,
};
use std::time::Duration;

// The Rust shapes, shared with post_vs_c.rs: included where they were
// always compiled (the file's head says why).
include!("../common/shapes.rs");

/// One row: C best (every build), C plain and one Rust form of the same
/// work.
pub struct Shape {
    /// The Rust version is `rust_<name>`.
    pub name: &'static str,
    /// The C versions' loop (`c_best_<build>_<c>`, `c_plain_<c>`).
    pub c: CShape,
    /// The row's title in the table, and its kind (tuned or natural).
    pub title: &'static str,
    pub kind: &'static str,
    pub rust: fn(&mut Rig, &Plan<'_>) -> usize,
    pub work: Work,
}

impl Shape {
    /// Calls version `v` once; how many work requests it posted or
    /// completions it read.
    pub fn call(&self, v: Version, c: &CSide, rig: &mut Rig, p: &Plan<'_>) -> usize {
        match v.c_loops() {
            Some(loops) => c.call(loops, self.c),
            None => (self.rust)(rig, p),
        }
    }
}

impl Row for Shape {
    fn name(&self) -> &'static str {
        self.name
    }

    fn c(&self) -> CShape {
        self.c
    }
}

fn ok(r: Result<u32>) -> usize {
    r.expect("libmlx5 accepts every batch") as usize
}

fn done(r: Result<usize>) -> usize {
    r.expect("the CQ holds the completions")
}

const RC: Work = Work::Post {
    queue: Queue::Rc,
    recvs: false,
};
const DCI: Work = Work::Post {
    queue: Queue::Dci,
    recvs: false,
};

pub const SHAPES: &[Shape] = &[
    Shape {
        name: "rc_write_sge",
        c: CShape::RcWriteSge,
        title: "RC write + SGE",
        kind: "tuned",
        rust: |r, p| ok(rust_rc_write_sge(&mut r.rc, p)),
        work: RC,
    },
    Shape {
        name: "rc_write_sge_natural",
        c: CShape::RcWriteSge,
        title: "RC write + SGE",
        kind: "natural",
        rust: |r, _| ok(rust_rc_write_sge_natural(&mut r.rc, &r.src, r.remote)),
        work: RC,
    },
    Shape {
        name: "rc_inline_send",
        c: CShape::RcInlineSend,
        title: "RC send, 16 B inline",
        kind: "tuned",
        rust: |r, p| ok(rust_rc_inline_send(&mut r.rc, p)),
        work: Work::Post {
            queue: Queue::Rc,
            recvs: true,
        },
    },
    Shape {
        name: "dci_write_sge",
        c: CShape::DciWriteSge,
        title: "DCI write + SGE + DC address",
        kind: "tuned",
        rust: |r, p| ok(rust_dci_write_sge(&mut r.dci, p, r.dc.with(&r.ah))),
        work: DCI,
    },
    Shape {
        name: "dci_write_sge_natural",
        c: CShape::DciWriteSge,
        title: "DCI write + SGE + DC address",
        kind: "natural",
        rust: |r, _| {
            let Rig {
                dci,
                ah,
                dc,
                src,
                remote,
                ..
            } = r;
            ok(rust_dci_write_sge_natural(dci, ah, *dc, src, *remote))
        },
        work: DCI,
    },
    Shape {
        name: "dci_write_sge_stream",
        c: CShape::DciWriteSgeStream,
        title: "DCI write, stream",
        kind: "tuned",
        rust: |r, p| ok(rust_dci_write_sge_stream(&mut r.dci, p, r.dc.with(&r.ah))),
        work: DCI,
    },
    Shape {
        name: "memcpy",
        c: CShape::Memcpy,
        title: "DMA memcpy, 64 B",
        kind: "tuned",
        rust: |r, p| ok(rust_memcpy(&mut r.rc, p)),
        work: RC,
    },
    Shape {
        name: "memcpy_natural",
        c: CShape::Memcpy,
        title: "DMA memcpy, 64 B",
        kind: "natural",
        rust: |r, _| ok(rust_memcpy_natural(&mut r.rc, &r.src, &mut r.dst)),
        work: RC,
    },
    Shape {
        name: "mr_list",
        c: CShape::MrList,
        title: "mkey list registration, 2 entries",
        kind: "tuned",
        rust: |r, p| ok(rust_mr_list(&mut r.rc, p, &r.mkey)),
        work: RC,
    },
    Shape {
        name: "raw_wqe",
        c: CShape::RawWqe,
        title: "raw WQE post",
        kind: "tuned",
        rust: |r, _| ok(rust_raw_wqe(&mut r.rc, &r.wqe)),
        work: RC,
    },
    Shape {
        name: "poll_cq",
        c: CShape::PollCq,
        title: "poll 32, `poll_each` (per completion)",
        kind: "tuned",
        rust: |r, _| done(rust_poll_cq(&mut r.cq, &mut r.completions)),
        work: Work::Poll { full: false },
    },
    Shape {
        name: "poll_into",
        c: CShape::PollFull,
        title: "`cq.poll_into` of 32 (per completion)",
        kind: "completions",
        rust: |r, _| done(rust_poll_into(&mut r.cq, &mut r.wcs)),
        work: Work::Poll { full: true },
    },
    Shape {
        name: "cq_wait",
        c: CShape::CqWait,
        title: "`cq.wait(32, ..)` (per completion)",
        kind: "completions",
        rust: |r, _| kept(rust_cq_wait(&mut r.cq), &mut r.wcs),
        work: Work::Poll { full: true },
    },
    Shape {
        name: "cq_wait_into",
        c: CShape::CqWait,
        title: "`cq.wait_into` of 32 (per completion)",
        kind: "completions",
        rust: |r, _| done(rust_cq_wait_into(&mut r.cq, &mut r.wcs)),
        work: Work::Poll { full: true },
    },
];

// ----- The direct path (`mlx5dv::direct`): the rows named `direct` -----

/// The RC rows' 32 RDMA writes + SGE, one doorbell: write `i` from the
/// plan's entry `i` to `to(i)`; every one signalled, or with `last_only`
/// only the last. Inlined into each measured function, whose constant
/// arguments fold.
#[inline(always)]
fn direct_rc_writes<'m, S: WriteSource<'m>>(
    qp: &mut DirectRc,
    src: &[S; BATCH],
    last_only: bool,
    to: impl Fn(usize) -> RemoteBuf,
) -> Result<u32> {
    let mut b = qp.batch();
    b.limit(BATCH)?;
    for (i, &e) in src.iter().enumerate() {
        let flags = if !last_only || i == BATCH - 1 {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        };
        b.rdma_write(i as u64, flags, to(i), e)?;
    }
    // SAFETY: the plan's region and the peer's stay registered for the
    // whole run, and nothing of the program reads or writes them.
    Ok(unsafe { b.ring() })
}

/// 32 RDMA writes + SGE through the direct path, every one signalled, one
/// doorbell. The peer's memory is passed as C direct's loop takes it, one
/// rkey and an address per work request (`RemoteBuf::unbounded`: no
/// length to check on this side; the peer's device checks each access).
#[no_mangle]
#[inline(never)]
pub fn rust_direct_rc_write_sge(qp: &mut DirectRc, p: &Plan<'_>) -> Result<u32> {
    direct_rc_writes(qp, &p.whole, false, |i| {
        RemoteBuf::unbounded(p.raddr[i], p.rkey)
    })
}

/// The same, only the last of the 32 signalled.
#[no_mangle]
#[inline(never)]
pub fn rust_direct_rc_write_sge_last(qp: &mut DirectRc, p: &Plan<'_>) -> Result<u32> {
    direct_rc_writes(qp, &p.whole, true, |i| {
        RemoteBuf::unbounded(p.raddr[i], p.rkey)
    })
}

/// `rust_direct_rc_write_sge` to the peer's memory as checked slices
/// (`RemoteBuf::slice`), each write's length checked against its slice's
/// (what C direct checked does).
#[no_mangle]
#[inline(never)]
pub fn rust_direct_rc_write_sge_checked(qp: &mut DirectRc, p: &Plan<'_>) -> Result<u32> {
    direct_rc_writes(qp, &p.sge, false, |i| p.remote[i])
}

/// `rust_direct_rc_write_sge_last` to checked slices.
#[no_mangle]
#[inline(never)]
pub fn rust_direct_rc_write_sge_last_checked(qp: &mut DirectRc, p: &Plan<'_>) -> Result<u32> {
    direct_rc_writes(qp, &p.sge, true, |i| p.remote[i])
}

/// The same writes as `rust_direct_rc_write_sge`, not measured: what the
/// direct poll finds completed.
#[inline(never)]
pub fn direct_prime(qp: &mut DirectRc, p: &Plan<'_>) -> Result<u32> {
    // The flags opaque: a body identical to `rust_direct_rc_write_sge`'s
    // would be merged with it, and callgrind would count the priming
    // under the measured symbol.
    let flags = std::hint::black_box(SendFlags::SIGNALED);
    let mut b = qp.batch();
    for i in 0..BATCH {
        b.rdma_write(i as u64, flags, p.remote[i], p.sge[i])?;
    }
    // SAFETY: as `rust_direct_rc_write_sge`.
    Ok(unsafe { b.ring() })
}

/// The DCI rows' 32 RDMA writes + SGE to the DC target `dct`, every one
/// signalled, one doorbell: write `i` from the plan's entry `i` to
/// `to(i)`, with `streams` on DCI stream `i % 4`.
#[inline(always)]
fn direct_dci_writes<'m, S: WriteSource<'m>>(
    qp: &mut DirectDci,
    src: &[S; BATCH],
    dct: &DirectDcAddr,
    streams: bool,
    to: impl Fn(usize) -> RemoteBuf,
) -> Result<u32> {
    let mut b = qp.batch();
    b.limit(BATCH)?;
    for (i, &e) in src.iter().enumerate() {
        let wr = if streams {
            b.dc_stream(dct, (i % (1 << LOG_STREAMS)) as u16)
        } else {
            b.dc(dct)
        };
        wr.rdma_write(i as u64, SendFlags::SIGNALED, to(i), e)?;
    }
    // SAFETY: as `direct_rc_writes`.
    Ok(unsafe { b.ring() })
}

/// 32 RDMA writes + SGE through a direct DCI to the DC target `to`, every
/// one signalled, one doorbell; the peer's memory as in
/// `rust_direct_rc_write_sge`.
#[no_mangle]
#[inline(never)]
pub fn rust_direct_dci_write_sge(
    qp: &mut DirectDci,
    p: &Plan<'_>,
    to: &DirectDcAddr,
) -> Result<u32> {
    direct_dci_writes(qp, &p.whole, to, false, |i| {
        RemoteBuf::unbounded(p.raddr[i], p.rkey)
    })
}

/// The same on DCI stream `i % 4`.
#[no_mangle]
#[inline(never)]
pub fn rust_direct_dci_write_sge_stream(
    qp: &mut DirectDci,
    p: &Plan<'_>,
    to: &DirectDcAddr,
) -> Result<u32> {
    direct_dci_writes(qp, &p.whole, to, true, |i| {
        RemoteBuf::unbounded(p.raddr[i], p.rkey)
    })
}

/// `rust_direct_dci_write_sge` to checked slices.
#[no_mangle]
#[inline(never)]
pub fn rust_direct_dci_write_sge_checked(
    qp: &mut DirectDci,
    p: &Plan<'_>,
    to: &DirectDcAddr,
) -> Result<u32> {
    direct_dci_writes(qp, &p.sge, to, false, |i| p.remote[i])
}

/// `rust_direct_dci_write_sge_stream` to checked slices.
#[no_mangle]
#[inline(never)]
pub fn rust_direct_dci_write_sge_stream_checked(
    qp: &mut DirectDci,
    p: &Plan<'_>,
    to: &DirectDcAddr,
) -> Result<u32> {
    direct_dci_writes(qp, &p.sge, to, true, |i| p.remote[i])
}

/// Reads 32 completions of the direct QP, every field, into `out`.
#[no_mangle]
#[inline(never)]
pub fn rust_direct_poll(qp: &mut DirectRc, out: &mut [DirectWc; BATCH]) -> Result<usize> {
    qp.poll_into(out)
}

/// How long a scoped direct post of the bench waits for its completion.
pub const SCOPED_TIMEOUT: Duration = Duration::from_secs(5);

/// 32 RDMA writes + SGE through the scoped direct post (the last signalled
/// by the post, the others not): posted with one doorbell, then waited for
/// until the completion covering them is in `out` (cleared first).
#[no_mangle]
#[inline(never)]
pub fn rust_direct_scoped_rc_write_sge(
    qp: &mut DirectRc,
    p: &Plan<'_>,
    out: &mut Vec<DirectWc>,
) -> Result<usize> {
    out.clear();
    qp.post_and_wait_into(SCOPED_TIMEOUT, out, |b| {
        b.limit(BATCH)?;
        for i in 0..BATCH {
            let to = RemoteBuf::unbounded(p.raddr[i], p.rkey);
            b.rdma_write(i as u64, SendFlags::empty(), to, p.whole[i])?;
        }
        Ok(())
    })?;
    Ok(out.len())
}
