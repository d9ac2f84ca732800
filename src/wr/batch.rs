//! The batch itself ([`WrBatch`]): opened on a QP (`ibv_wr_start`), its
//! work requests started, posted whole (`ibv_wr_complete`) or aborted
//! when dropped (`ibv_wr_abort`).

use super::flags::SendFlags;
use super::op::Wr;
use super::state::{BatchState, Invariant, PeerReceive, RawAddr, RawDc, RawUd};
use crate::error::{Error, Result};
use crate::ffi;
use crate::qp::{
    Connected, DcAddr, DcInitiator, Post, QpEx, Transport, UdAddr, UnreliableDatagram,
    BATCH_CLOSED, BATCH_OPEN,
};
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;

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
    pub(super) state: BatchState,
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
    pub(super) fn open_batch<'m>(&mut self, flags: SendFlags) -> WrBatch<'_, 'm, T> {
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
    pub(super) fn start_wr(&mut self, wr_id: u64, addr: Option<RawAddr>) -> Wr<'_, 'm, T> {
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
