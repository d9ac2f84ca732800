//! The work-request batch: `ibv_wr_start` → per WR: attributes, one
//! builder, its data → `ibv_wr_complete`, as in `ibv_wr_post(3)`.
//!
//! ```no_run
//! # use mlx5dv::*;
//! # fn demo(qp: &mut RcQp, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! let mut batch = qp.batch();
//! batch.wr(1).signaled().rdma_write(remote).sge(mr.sge(0..64)?)?;
//! batch.wr(2).send().inline(b"done")?;
//! // SAFETY: `mr` stays registered and untouched until the write's
//! // completion has been polled.
//! unsafe { batch.complete()? };
//! # Ok(()) }
//! ```
//!
//! Each work request is handed to the provider whole, in its last step
//! (`sge`, `sge_list`, `inline`): the builder and the setters are called
//! together, after every check has passed, so no half-built work request
//! ever reaches C. The rules of the man page are types:
//!
//! Data cannot be given before a builder:
//!
//! ```compile_fail,E0599
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp, mr: &MemoryRegion) -> Result<()> {
//! let mut batch = qp.batch();
//! batch.wr(1).sge(mr.sge(..)?)?; // ERROR: no builder chosen: no `sge` here
//! # Ok(()) }
//! ```
//!
//! A work request cannot be left half-built across `complete`:
//!
//! ```compile_fail,E0505
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! let mut batch = qp.batch();
//! let half = batch.wr(1).rdma_write(remote);
//! unsafe { batch.complete()? }; // ERROR: `half` still borrows the batch
//! half.sge(mr.sge(..)?)?;
//! # Ok(()) }
//! ```
//!
//! A batch completes once:
//!
//! ```compile_fail,E0382
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp) -> Result<()> {
//! let batch = qp.batch();
//! unsafe { batch.complete()? };
//! unsafe { batch.complete()? }; // ERROR: moved by the first complete
//! # Ok(()) }
//! ```
//!
//! Two batches cannot be open on one QP:
//!
//! ```compile_fail,E0499
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp) {
//! let a = qp.batch();
//! let b = qp.batch(); // ERROR: the QP is already borrowed by `a`
//! drop((a, b));
//! # }
//! ```
//!
//! Inline data cannot be given to an RDMA read (it has a destination, not
//! a source):
//!
//! ```compile_fail,E0599
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp, remote: RemoteBuf) -> Result<()> {
//! let mut batch = qp.batch();
//! batch.wr(1).rdma_read(remote).inline(b"x")?; // ERROR: a read has no inline data
//! # Ok(()) }
//! ```
//!
//! On a DCI every work request needs its DC address
//! (`mlx5dv_wr_set_dc_addr`): there is no `wr` without one.
//!
//! ```compile_fail,E0061
//! # use mlx5dv::*;
//! # fn f(qp: &mut DciQp, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! let mut batch = qp.batch();
//! batch.wr(1).rdma_write(remote).sge(mr.sge(..)?)?; // ERROR: no DcAddr
//! # Ok(()) }
//! ```
//!
//! The RC-only builders (`mr_list`, `mr_interleaved`, `raw_wqe`) do not
//! exist on a DCI work request:
//!
//! ```compile_fail,E0599
//! # use mlx5dv::*;
//! # fn f(qp: &mut DciQp, addr: DcAddr<'_>, mkey: &Mkey, mr: &MemoryRegion) -> Result<()> {
//! let mut batch = qp.batch();
//! batch.wr(1, addr).mr_list(mkey, AccessFlags::LOCAL_WRITE, &[mr.sge(..)?])?; // ERROR: RC only
//! # Ok(()) }
//! ```
//!
//! A DCI work request with its address compiles:
//!
//! ```no_run
//! # use mlx5dv::*;
//! # fn f(qp: &mut DciQp, ah: &AddressHandle, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! let addr = DcAddr::new(ah, 0x1234, 0xC0FFEE);
//! let mut batch = qp.batch();
//! batch.wr(1, addr).signaled().rdma_write(remote).sge(mr.sge(..)?)?;
//! batch.wr_stream(2, addr, 1).send().inline(b"hi")?;
//! // SAFETY: `mr` outlives the completions, polled later.
//! unsafe { batch.complete()? };
//! # Ok(()) }
//! ```
//!
//! In the scoped form ([`QpEx::post_and_wait`]), memory a work request
//! uses stays borrowed until the device is done with it: after a write
//! from `src` is added, `src` cannot be changed, even within the closure
//! that added it (the borrow lasts past the closure, to the completion):
//!
//! ```compile_fail,E0502
//! # use mlx5dv::*;
//! # use std::time::Duration;
//! # fn f(qp: &mut RcQp, cq: &mut CompletionQueue, src: &mut MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! qp.post_and_wait(cq, Duration::from_secs(1), |b| {
//!     b.wr(1).rdma_write(remote).sge(src.sge(0..8)?)?;
//!     src.fill(0..8, 1) // ERROR: the posted write still borrows `src`
//! })?;
//! # Ok(()) }
//! ```
//!
//! Memory the device writes (RDMA read, atomic and memcpy destinations) is
//! named by an [`SgeMut`], which borrows its region
//! exclusively: nothing may read it while the device writes it.
//!
//! ```compile_fail,E0277
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! let mut batch = qp.batch();
//! batch.wr(1).rdma_read(remote).sge(mr.sge(0..8)?)?; // ERROR: a read's destination is an SgeMut, not an Sge
//! # Ok(()) }
//! ```
//!
//! An atomic has exactly one 8-byte SGE: there is no `sge_list` for it.
//!
//! ```compile_fail,E0599
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp, mr: &mut MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! let (lo, hi) = mr.sge_mut(0..8)?.split_at(4)?;
//! let mut batch = qp.batch();
//! batch.wr(1).atomic_fetch_add(remote, 1).sge_list(&[lo, hi])?; // ERROR: one SGE only
//! # Ok(()) }
//! ```
//!
//! Dropping a batch without completing it aborts it (`ibv_wr_abort`):
//! nothing of it is posted.
//!
//! Flags: [`QpEx::batch_with`] sets the flags of every work request of a
//! batch once (C's `qpx->wr_flags = ...` before its loop); [`Wr::flags`]
//! and its shorthands add flags to one work request. A work request's
//! flags are written before its builder when they differ from what the
//! QP's `wr_flags` holds (the batch's, or those the previous work request
//! wrote), so a loop of work requests with the same flags writes them at
//! most once.

use crate::error::{Error, Result};
use crate::ffi;
#[cfg(doc)]
use crate::mr::SgeMut;
use crate::qp::Connected;
use crate::qp::{
    DcAddr, DcInitiator, Mlx5Info, Post, QpCaps, QpEx, SendOps, Transport, UdAddr,
    UnreliableDatagram, WrOps,
};

mod atomic_write;
mod bind;
#[cfg(mlx5dv_ibv_wr_flush)]
mod flush;
mod mlx5;
mod op;
mod scoped;
#[cfg(test)]
mod tests;
mod xrc;

#[cfg(mlx5dv_ibv_wr_flush)]
pub use flush::{FlushLevel, FlushPlacement};
pub use mlx5::{MemcpyOp, MrInterleaved};
pub(crate) use op::{Addressed, PeerReceive};
pub use op::{Atomic, Destination, Op, Source, Wr};
pub use scoped::ScopedBatch;
pub(crate) use scoped::{abort_with, said_with};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;

bitflags::bitflags! {
    /// Per-WR flags (`ibv_qp_ex.wr_flags`, `enum ibv_send_flags`).
    ///
    /// `IBV_SEND_INLINE` tells the device that a work request's data is in
    /// the WQE itself, so the crate sets it on exactly the work requests
    /// whose data is inline ([`Op::inline`], and the builders that need
    /// it, such as [`Wr::mr_list`]) and clears it on every other: set on a
    /// work request with SGEs, the device would send the WQE's own bytes as
    /// data (a kernel crash on soft-RoCE). [`Wr::flags`] keeps `FENCE`,
    /// `SIGNALED` and `SOLICITED` only; [`QpEx::batch_with`] also keeps
    /// [`INLINE`](Self::INLINE), as a statement that the batch's work
    /// requests carry inline data (so that they need no flag write of
    /// their own). Any undefined bit (from
    /// [`SendFlags::from_bits_retain`]) is masked out before C sees it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA reads and atomics before this WR
        /// (`IBV_SEND_FENCE`).
        const FENCE = ffi::IBV_SEND_FENCE;
        /// Generate a completion (`IBV_SEND_SIGNALED`).
        const SIGNALED = ffi::IBV_SEND_SIGNALED;
        /// Solicited event at the receiver (`IBV_SEND_SOLICITED`).
        const SOLICITED = ffi::IBV_SEND_SOLICITED;
        /// The data is copied into the WQE (`IBV_SEND_INLINE`): applied by
        /// the crate to inline data only (see above).
        const INLINE = ffi::IBV_SEND_INLINE;
    }
}

impl SendFlags {
    /// What a caller may set on one work request.
    const PER_WR: SendFlags = SendFlags::from_bits_retain(
        SendFlags::FENCE.bits() | SendFlags::SIGNALED.bits() | SendFlags::SOLICITED.bits(),
    );
}

/// Makes `'m` invariant: a batch's memory lifetime can be neither shortened
/// nor lengthened by subtyping.
type Invariant<'m> = fn(&'m ()) -> &'m ();

/// What a batch needs of its QP, copied at `batch()`.
struct BatchState {
    qpx: NonNull<ffi::ibv_qp_ex>,
    /// The QP's capabilities, copied: a value of the batch's own, which
    /// the provider's calls cannot change, so that a check against them
    /// (the inline data's length, the SGE count) is made once for a loop.
    caps: QpCaps,
    send_ops: SendOps,
    /// What an mlx5 QP was created with (mlx5 extension, ops, limits).
    mlx5: Mlx5Info,
    /// The provider's entries, resolved at QP creation; they live in the
    /// QP, which the batch borrows mutably for its whole life.
    ops: NonNull<WrOps>,
    /// The batch's flags: what every work request gets unless it adds its
    /// own.
    flags: SendFlags,
    /// What the QP's `wr_flags` holds now: the batch's flags at first,
    /// then those of the last work request that wrote its own. A work
    /// request writes its flags only when they differ from these, so a run
    /// of work requests with the same flags writes them once.
    wr_flags: SendFlags,
    /// WRs handed to the provider so far.
    posted: usize,
    /// The last of them that consumes a receive at the peer, for the
    /// scoped post's timeout (which may then be the peer's "receiver not
    /// ready"): its index plus one, shifted left by 2, or'ed with its
    /// [`PeerReceive`]; 0 for none. Stored only by those work requests
    /// (see `last_peer_receive`).
    peer_receive_mark: usize,
    /// How many the batch may hold: the send queue's depth
    /// (`max_send_wr`) less the type 1 binds still queued on it (see
    /// `crate::cq::Queued`), past which libmlx5 would build a work request
    /// over the last WQE it wrote, or less after [`WrBatch::limit`].
    room: usize,
    /// The room the send queue had when the batch opened, as `room` has it
    /// at first (so that, in a batch that is not limited, the compiler
    /// knows the two equal): its depth less the binds queued then.
    depth: u32,
    /// The QP's context: an mkey must come from it.
    ctx: *mut ffi::ibv_context,
    /// The QP's protection domain: a DC or UD address's address handle
    /// must be of it (`ibv_create_ah(3)`, `ibv_post_send(3)`), which also
    /// makes it of the QP's context.
    pd: *mut ffi::ibv_pd,
    /// The largest message a send may carry (a UD QP's MTU; `u32::MAX`
    /// on the others).
    max_message: u32,
}

impl BatchState {
    /// The QP's capabilities.
    #[inline(always)]
    pub(crate) fn caps(&self) -> &QpCaps {
        &self.caps
    }

    /// The error of a batch of `batch` work requests, more than its room:
    /// the batch's [`limit`](WrBatch::limit) where that is below the room
    /// the send queue had, else a full send queue (whose `depth` is that
    /// room: the depth less the binds queued). Built of integers where it
    /// is made (inlined), so that the caller's `?` knows it is an error
    /// and its loop keeps one counter.
    #[inline(always)]
    fn no_room(&self, batch: u32) -> Error {
        let room = self.room as u32;
        if room < self.depth {
            Error::BatchLimit { limit: room }
        } else {
            Error::SendQueueFull {
                batch,
                depth: self.depth,
            }
        }
    }

    /// The batch's last work request that consumes a receive at the peer:
    /// what it is, and its position (from 1); `None` when none does.
    fn last_peer_receive(&self) -> Option<(PeerReceive, usize)> {
        let kind = match self.peer_receive_mark & 3 {
            1 => PeerReceive::Send,
            2 => PeerReceive::WriteImm,
            _ => return None,
        };
        Some((kind, self.peer_receive_mark >> 2))
    }

    /// The provider's entries.
    #[inline]
    fn ops(&self) -> &WrOps {
        // SAFETY: `ops` points into the QP the batch borrows mutably for its
        // whole life, and nothing writes to it meanwhile.
        unsafe { self.ops.as_ref() }
    }
}

/// An open batch of work requests on one QP (`ibv_wr_start`).
///
/// Add work requests with [`wr`](Self::wr); post them all with
/// [`complete`](Self::complete). Dropped without `complete`, the batch is
/// aborted (`ibv_wr_abort`) and nothing of it is posted.
///
/// `'m` is how long the memory named by the batch's SGEs is borrowed: in
/// [`QpEx::post_and_wait`] it outlives the wait for the completions.
///
/// A batch holds at most the QP's `max_send_wr` work requests: the one
/// past that is refused ([`Error::SendQueueFull`]) before the provider
/// sees it. libmlx5 (rdma-core 44) would build it over the last WQE it
/// wrote (with no send queue at all, at no WQE), and would take the send
/// CQ's lock to find the queue full: a lock that a
/// [`poll_each`](crate::CompletionQueue::poll_each) of that CQ holds, so
/// that a batch built in its callback would wait for ever. Within that
/// bound, and with the queue empty (as the safe API always leaves it; see
/// `complete`'s `# Safety` for work requests posted with it), neither
/// happens, and a batch may be built and posted in a poll callback.
///
/// Type 1 memory window binds ([`QpEx::bind_mw`]) stay in the send queue
/// after the call that posts them, until the device has run them: a batch
/// opens with the depth less the binds not yet seen complete (by a poll of
/// the send CQ, or a later scoped post) as its room, and its work request
/// past that room is refused with [`Error::SendQueueFull`], whose `depth`
/// is then that room.
#[must_use = "a batch is aborted when dropped: call complete() to post it"]
pub struct WrBatch<'q, 'm, T: Transport> {
    state: BatchState,
    /// Invariant in `'q`: in [`QpEx::post_and_wait`] the batch's `'q` is
    /// the closure's own (higher-ranked), so no other batch has its type
    /// and it cannot be swapped with one.
    _qp: PhantomData<(&'q mut QpEx<T>, Invariant<'q>)>,
    _mem: PhantomData<Invariant<'m>>,
}

impl<T: Transport> QpEx<T> {
    /// Opens a batch (`ibv_wr_start`). The QP stays mutably borrowed until
    /// the batch is completed or dropped.
    #[inline]
    pub fn batch<'m>(&mut self) -> WrBatch<'_, 'm, T> {
        self.open_batch(SendFlags::empty())
    }

    /// Opens a batch whose every work request gets `flags` (plus what it
    /// adds itself with [`Wr::flags`] and the like), as C sets
    /// `qpx->wr_flags` once before a loop of work requests.
    ///
    /// This is the cheapest way to give a whole batch the same flags: the
    /// flags are written to the QP once here, and a work request that adds
    /// none writes none and tests none. (With [`batch`](Self::batch), a
    /// work request that sets flags compares them with those the QP holds
    /// and writes them when they differ: `.signaled()` on every work
    /// request costs a compare each and one write.)
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # fn f(qp: &mut RcQp, sges: &[Sge<'_>], remote: RemoteBuf) -> Result<()> {
    /// let mut b = qp.batch_with(SendFlags::SIGNALED);
    /// for (i, sge) in sges.iter().enumerate() {
    ///     let to = remote.slice(i as u64 * 64, 64)?;
    ///     b.wr(i as u64).rdma_write(to).sge(*sge)?; // signalled
    /// }
    /// // SAFETY: the memory stays registered and untouched until the
    /// // completions are polled.
    /// unsafe { b.complete()? };
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn batch_with<'m>(&mut self, flags: SendFlags) -> WrBatch<'_, 'm, T> {
        self.open_batch(flags.intersection(SendFlags::all()))
    }

    #[inline]
    fn open_batch<'m>(&mut self, flags: SendFlags) -> WrBatch<'_, 'm, T> {
        let qpx = self.qpx;
        self.abort_if_leaked();
        // Type 1 binds still queued take up room: the depth less those,
        // kept up to date by the binds and the polls that see them done.
        let room = self.queued.room();
        // SAFETY: the QP is live; `start` is its provider's wr_start entry
        // (resolved non-NULL at creation); `&mut self` excludes any other
        // live batch on it, and a leaked one was just aborted. `wr_flags`
        // is the caller's field of the QP, read by the provider at each
        // builder.
        unsafe {
            (self.ops.start)(qpx.as_ptr());
            (*qpx.as_ptr()).wr_flags = flags.bits();
        }
        self.ops.open.store(BATCH_OPEN, Relaxed);
        WrBatch {
            state: BatchState {
                qpx,
                // SAFETY: the QP is live.
                ctx: unsafe { (*self.qp.as_ptr()).context },
                // SAFETY: as above.
                pd: unsafe { (*self.qp.as_ptr()).pd },
                caps: self.caps,
                send_ops: self.send_ops(),
                mlx5: self.mlx5,
                ops: NonNull::from(&*self.ops),
                flags,
                wr_flags: flags,
                posted: 0,
                peer_receive_mark: 0,
                room: room as usize,
                depth: room,
                max_message: self.max_message.load(Relaxed),
            },
            _qp: PhantomData,
            _mem: PhantomData,
        }
    }
}

impl<'q, 'm, T: Transport> WrBatch<'q, 'm, T> {
    /// How many work requests were added so far.
    pub fn len(&self) -> u32 {
        self.state.posted as u32
    }

    /// Whether none were.
    pub fn is_empty(&self) -> bool {
        self.state.posted == 0
    }

    /// Holds the batch to `n` more work requests, and checks now that
    /// there is room for them: in the send queue ([`Error::SendQueueFull`]
    /// if not) and within an earlier limit ([`Error::BatchLimit`]). On an
    /// error the batch is unchanged.
    ///
    /// Past the limit, a work request is refused before the provider sees
    /// it, with [`Error::BatchLimit`] (or [`Error::SendQueueFull`] when the
    /// limit is all the room the send queue had). Within it, the send
    /// queue's bound is not checked again: when `n` is the trip count of
    /// the loop that fills the batch (a constant, or the length of the
    /// slice it walks), the compiler folds the per-work-request bound into
    /// the loop's own, and the loop is C's.
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # fn f(qp: &mut RcQp, sges: &[Sge<'_>; 32], raddr: &[u64; 32], rkey: u32) -> Result<()> {
    /// let mut b = qp.batch_with(SendFlags::SIGNALED);
    /// b.limit(32)?;
    /// for i in 0..32 {
    ///     let to = RemoteBuf::unbounded(raddr[i], rkey);
    ///     b.wr(i as u64).rdma_write(to).sge(&sges[i])?;
    /// }
    /// // SAFETY: the memory stays registered and untouched until the
    /// // completions are polled.
    /// unsafe { b.complete()? };
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn limit(&mut self, n: usize) -> Result<()> {
        let posted = self.state.posted;
        if n > self.state.room - posted {
            let batch = posted.saturating_add(n).min(u32::MAX as usize) as u32;
            return Err(self.state.no_room(batch));
        }
        self.state.room = posted + n;
        Ok(())
    }

    /// Posts the batch (`ibv_wr_complete`) and returns how many work
    /// requests it held.
    ///
    /// An error does not mean that nothing was posted: soft-RoCE publishes
    /// the work requests to the device before its doorbell fails (on a QP
    /// not in RTS that the check below did not catch, for one), and they
    /// run once the QP can run them. (mlx5 rolls a failed batch back; other providers may not.)
    /// Treat a failed batch as posted until the QP has been moved to RESET
    /// or destroyed, or their completions polled.
    ///
    /// The exception: a QP that cannot send yet (RESET, INIT, RTR) is
    /// refused before the provider sees the batch, with
    /// [`Error::QpNotReady`], and the batch is aborted: nothing of it was
    /// posted. The check reads libibverbs' record of the state (one
    /// compare), and asks the kernel only to confirm a refusal. In ERR the
    /// batch is posted, and flushed (`ibv_modify_qp(3)`), as in C.
    ///
    /// # Safety
    ///
    /// The device reads and writes the memory of the batch's SGEs after
    /// this returns, even when it returns an error: every region must stay
    /// registered and its memory must not be freed, nor accessed in
    /// conflict with the device (written while the device reads it, read
    /// or written while the device writes it), until the work request's
    /// completion — or that of a later signalled one on the same QP — has
    /// been polled, or the QP has been moved to ERR and the flush
    /// completion polled, or the QP has been moved to RESET or destroyed.
    /// A peer may also reach memory through the keys the batch sends.
    ///
    /// The address handles its work requests name (their [`UdAddr`] or
    /// [`DcAddr`]) must stay alive, not destroyed, until the same point:
    /// the work request's completion (or a later one's) polled, or the QP
    /// flushed, reset or destroyed. Their borrows end with the work
    /// requests' building, but the device may use them later: soft-RoCE
    /// looks a UD send's address handle up when it sends the packet, and
    /// fails the send (moving the QP to ERR) when it is gone.
    ///
    /// Until then its work requests also take up the send queue: work
    /// requests built on the QP (by any batch, the safe scoped post
    /// included) while the queue has no room left for them make libmlx5
    /// (rdma-core 44) write them over the last WQE it posted, which the
    /// device may not have run yet. So the work requests posted and not
    /// yet known done (their completion, or a later one's, polled), plus
    /// those of any batch being built, must stay within the QP's
    /// `max_send_wr`. (Type 1 binds posted with [`QpEx::bind_mw`] are
    /// among those posted: the crate counts them until their completions
    /// are polled, or a scoped post's later ones, and leaves them room, but
    /// it cannot see work requests posted by `complete`.)
    ///
    /// The batch's work request ids are below 2^63: ids with bit 63 set
    /// are those [`QpEx::post_and_wait`] (and the `tokio` feature's
    /// operations) give their own work requests, and a completion carrying
    /// one could be taken for one of them. Nor may a memory window bind
    /// posted here share its id with a type 1 bind of the QP
    /// ([`QpEx::bind_mw`](crate::QpEx::bind_mw)) that is counted now
    /// ([`CompletionQueue::binds_in_flight`](crate::CompletionQueue::binds_in_flight))
    /// or is posted before this one's completion is polled: that
    /// completion would be taken for the type 1 bind's, whose room in the
    /// queue and place in the CQ would be given back while it may not have
    /// run.
    /// [`QpEx::post_and_wait`] keeps all of these rules for you.
    #[inline]
    pub unsafe fn complete(self) -> Result<u32> {
        let qpx = self.state.qpx.as_ptr();
        // SAFETY: `qpx` is the live extended QP the batch borrows; its
        // first field is the QP.
        let qp = unsafe { std::ptr::addr_of_mut!((*qpx).qp_base) };
        // A QP in RESET, INIT or RTR refuses sends: refused here, as
        // libibverbs' record of the state says (and the kernel confirms),
        // rather than by the provider, which soft-RoCE does only after
        // publishing the batch. One compare when the QP can send.
        // SAFETY: the QP is live.
        if let Err(e) = unsafe { crate::qp::refuse(qp, "ibv_wr_complete", Post::Send) } {
            drop(self); // aborted: nothing of it was posted
            return Err(e);
        }
        // Disarm the abort of Drop before finalising: never both.
        let this = ManuallyDrop::new(self);
        // The entry is read from the QP at each call, as the header's
        // `ibv_wr_complete` does: libmlx5 (rdma-core 40 and later) swaps it
        // with the QP's state (a stub that refuses, outside RTS). A NULL
        // one (never seen) falls back to the entry resolved at creation.
        // SAFETY: the batch was started on this live QP and not finalised;
        // the entry is the provider's current one for this QP; the memory
        // rules are the caller's promise.
        let rc = unsafe {
            let complete = (*qpx).wr_complete.unwrap_or(this.state.ops().complete);
            complete(qpx)
        };
        this.state.ops().open.store(BATCH_CLOSED, Relaxed);
        if rc != 0 {
            return Err(complete_failed(
                rc,
                this.state.posted as u32,
                this.state.ops().depth,
                qp,
            ));
        }
        Ok(this.state.posted as u32)
    }

    #[inline(always)]
    fn start_wr(&mut self, wr_id: u64, addr: Option<RawAddr>) -> Wr<'_, 'm, T> {
        Wr {
            flags: self.state.flags,
            state: &mut self.state,
            wr_id,
            addr,
            peer_receive: PeerReceive::No,
            _p: PhantomData,
        }
    }
}

impl<'m, T: Connected> WrBatch<'_, 'm, T> {
    /// Adds a work request whose completion carries `wr_id`. Choose its
    /// flags, then one builder, then its data.
    #[inline]
    pub fn wr(&mut self, wr_id: u64) -> Wr<'_, 'm, T> {
        self.start_wr(wr_id, None)
    }
}

impl<'m> WrBatch<'_, 'm, DcInitiator> {
    /// Adds a work request whose completion carries `wr_id`, going to the
    /// DCT at `addr` (`mlx5dv_wr_set_dc_addr`, called after the builder and
    /// its data, as mlx5dv_wr_post(3) orders it). A DCI work request cannot
    /// be built without an address. Its address handle is borrowed while
    /// the work request is built; see [`complete`](Self::complete) for how
    /// long it must live.
    #[inline]
    pub fn wr<'s>(&'s mut self, wr_id: u64, addr: DcAddr<'s>) -> Wr<'s, 'm, DcInitiator> {
        self.start_wr(wr_id, Some(RawAddr::Dc(RawDc::new(addr, None))))
    }

    /// Like [`wr`](Self::wr), on DCI stream `stream_id`
    /// (`mlx5dv_wr_set_dc_addr_stream`), for a DCI created with
    /// [`dci_streams`](crate::QpBuilder::dci_streams) (on a DCI without
    /// streams the work request is refused with [`Error::Unsupported`]).
    /// Any 16-bit id is passed on: the device maps ids to its
    /// 2^`log_num_concurent` concurrent streams (rdma-core's own tests use
    /// ids past that count).
    #[inline]
    pub fn wr_stream<'s>(
        &'s mut self,
        wr_id: u64,
        addr: DcAddr<'s>,
        stream_id: u16,
    ) -> Wr<'s, 'm, DcInitiator> {
        self.start_wr(wr_id, Some(RawAddr::Dc(RawDc::new(addr, Some(stream_id)))))
    }
}

impl<'m> WrBatch<'_, 'm, UnreliableDatagram> {
    /// Adds a work request whose completion carries `wr_id`, going to the
    /// UD QP at `addr` (`ibv_wr_set_ud_addr`, called after the builder and
    /// its data). A UD work request cannot be built without an address.
    /// Its address handle is borrowed while the work request is built;
    /// see [`complete`](Self::complete) for how long it must live.
    #[inline]
    pub fn wr<'s>(&'s mut self, wr_id: u64, addr: UdAddr<'s>) -> Wr<'s, 'm, UnreliableDatagram> {
        self.start_wr(wr_id, Some(RawAddr::Ud(RawUd::new(addr))))
    }
}

/// The address a work request's builder is followed by, as handed to C;
/// the borrow of what it names (an address handle) lives in the `Wr`'s
/// lifetime, and in a scoped batch for its `'m`.
#[derive(Clone, Copy)]
pub(crate) enum RawAddr {
    /// A DCI's `mlx5dv_wr_set_dc_addr` / `mlx5dv_wr_set_dc_addr_stream`.
    Dc(RawDc),
    /// An XRC initiator's `ibv_wr_set_xrc_srqn`: the remote SRQ number.
    Xrc(u32),
    /// A UD QP's `ibv_wr_set_ud_addr`.
    Ud(RawUd),
}

/// A UD address as handed to C.
#[derive(Clone, Copy)]
pub(crate) struct RawUd {
    ah: *mut ffi::ibv_ah,
    /// The address handle's PD (NULL for a QP number past 24 bits).
    pd: *mut ffi::ibv_pd,
    remote_qpn: u32,
    remote_qkey: u32,
}

impl RawUd {
    #[inline(always)]
    fn new(addr: UdAddr<'_>) -> Self {
        RawUd {
            ah: addr.ah_ptr(),
            pd: addr.pd_ptr(),
            remote_qpn: addr.remote_qpn(),
            remote_qkey: addr.remote_qkey(),
        }
    }
}

/// A DC address as handed to C.
#[derive(Clone, Copy)]
pub(crate) struct RawDc {
    ah: *mut ffi::ibv_ah,
    /// The address handle's PD (NULL for a DCT number past 24 bits).
    pd: *mut ffi::ibv_pd,
    remote_dctn: u32,
    remote_dc_key: u64,
    stream_id: Option<u16>,
}

impl RawDc {
    #[inline(always)]
    fn new(addr: DcAddr<'_>, stream_id: Option<u16>) -> Self {
        RawDc {
            ah: addr.ah_ptr(),
            pd: addr.pd_ptr(),
            remote_dctn: addr.remote_dctn(),
            remote_dc_key: addr.remote_dc_key(),
            stream_id,
        }
    }
}

impl<T: Transport> std::fmt::Debug for WrBatch<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WrBatch")
            .field("transport", &T::NAME)
            .field("flags", &self.state.flags)
            .field("work_requests", &self.state.posted)
            .field("room", &self.state.room)
            .finish()
    }
}

impl<T: Transport> Drop for WrBatch<'_, '_, T> {
    fn drop(&mut self) {
        // SAFETY: the batch was started and not completed (complete() does
        // not run Drop); abort discards every WR added since wr_start.
        unsafe { (self.state.ops().abort)(self.state.qpx.as_ptr()) };
        self.state.ops().open.store(BATCH_CLOSED, Relaxed);
    }
}

pub(crate) use crate::qp::{BATCH_ABORTING, BATCH_CLOSED, BATCH_OPEN};

// The errors of the posting path. Their text is made out of line, so that
// each check in the caller's loop stays one compare; the variant is built
// at the check, so the caller's `?` knows it is an error.

#[cold]
#[inline(never)]
fn complete_failed(rc: i32, posted: u32, depth: u32, qp: *mut ffi::ibv_qp) -> Error {
    if rc == libc::ENOMEM || rc == libc::ENOSPC {
        return Error::SendQueueFull {
            batch: posted,
            depth,
        };
    }
    let mut context = format!("batch of {posted} WRs (send queue depth {depth})");
    if rc.abs() == libc::EINVAL {
        // A state the record did not show (changed behind libibverbs'
        // back, or by the device): said as plainly as a refusal.
        // SAFETY: `qp` is the batch's live QP.
        if let Some(why) = unsafe { crate::qp::refusal_explained(qp) } {
            context = format!("{context}; {why}");
        }
    }
    Error::verbs("ibv_wr_complete", rc, context)
}
