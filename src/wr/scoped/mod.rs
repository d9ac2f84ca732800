//! The scoped post: [`QpEx::post_and_wait`] and the batch its closure
//! builds, [`ScopedBatch`].
//!
//! What it promises: when it returns — with its completions, or with any
//! error — the device no longer uses the memory of any work request the
//! closure added. So the borrows of that memory may end.
//!
//! How it keeps that promise:
//! - Its work requests carry ids of its own (bit 63 set, a per-QP sequence
//!   from a random start); the caller's ids are given back in the
//!   completions. A completion is its own only when it carries the QP's
//!   number and one of those ids, so receive completions, completions of
//!   earlier batches and those of other QPs sharing the CQ are never taken
//!   for its own. They are not lost either: they are kept in the CQ's
//!   backlog, which the next polls hand out first.
//! - A QP's send completions arrive in the order of its work requests, so
//!   the completion of its last work request (successful, failed or
//!   flushed) means that the device is done with all of them.
//! - When it cannot see that completion — a timeout, a failed poll, a
//!   batch the provider refused after publishing it (soft-RoCE), a CQ that
//!   overran — it moves the QP to ERR and waits a bounded time for the
//!   flush; failing that, it moves the QP to RESET, after which the device
//!   runs nothing of the QP. Only then does it return.
//! - The closure's batch has a lifetime of its own (the closure is
//!   higher-ranked over it), so it cannot be swapped with another batch;
//!   it has no `complete`, and dropping it (an error, a panic) aborts it.

use super::batch::WrBatch;
use super::flags::SendFlags;
use super::state::{PeerReceive, RawAddr, RawDc, RawUd};
use crate::cq::{write_wc_fields, CompletionQueue, RawWc, WorkCompletion};
use crate::error::{Error, Result};
use crate::qp::{Connected, DcAddr, DcInitiator, QpEx, Transport};
use crate::qp::{UdAddr, UnreliableDatagram};
use crate::qp::{XrcInitiator, XrcSrqn};
use crate::qp::{BATCH_ABORTING, BATCH_CLOSED, BATCH_OPEN};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::time::Duration;

mod abort;
mod wait;
use abort::AbortOnUnwind;
pub(crate) use abort::{abort_with, said_with};

use crate::qp::SCOPED_ID_BIT;

/// The batch of a [`QpEx::post_and_wait`] closure: add work requests with
/// [`wr`](ScopedBatch::wr) as on a [`WrBatch`]; the scoped post completes
/// it. It cannot be completed, swapped with another batch or kept past the
/// closure.
///
/// Another QP's batch cannot take its place:
///
/// ```compile_fail,E0521
/// # use mlx5dv::*;
/// # use std::time::Duration;
/// # fn f(qp: &mut RcQp, cq: &mut CompletionQueue, other: &mut RcQp, other_cq: &mut CompletionQueue) -> Result<()> {
/// other.post_and_wait(other_cq, Duration::from_secs(1), |theirs| {
///     qp.post_and_wait(cq, Duration::from_secs(1), |mine| {
///         std::mem::swap(mine, theirs); // ERROR: each closure's batch has a lifetime of its own
///         Ok(())
///     })?;
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
///
/// # Address handles
///
/// The address handle that a UD or DCI work request names (its
/// [`UdAddr`] or [`DcAddr`]) stays borrowed for `'m` too, as the memory
/// of the work requests does: until the device is done with the whole
/// batch, past the closure. An address handle made in the closure, or
/// dropped there, does not compile. A UD send needs it that long:
/// soft-RoCE looks the address handle up when it sends the packet, after
/// the closure has returned, and fails the send (moving the QP to ERR)
/// when it is gone. A DCI's would need it less (libmlx5 copies the
/// address vector into the WQE when the work request is built), but the
/// rule is the same for both: one rule to know, which holds whatever the
/// provider does with the handle, and costs nothing at run time. Make
/// the address handles ([`UdDest`](crate::UdDest),
/// [`RemoteDct`](crate::RemoteDct)) before the call.
///
/// ```compile_fail,E0597
/// # use mlx5dv::*;
/// # use std::time::Duration;
/// # fn f(qp: &mut UdQp, cq: &mut CompletionQueue, pd: &ProtectionDomain, attr: &AhAttr) -> Result<()> {
/// qp.post_and_wait(cq, Duration::from_secs(1), |b| {
///     let ah = AddressHandle::new(pd, attr)?;
///     // `ah` is dropped at the closure's end, before the send is posted:
///     b.wr(1, UdAddr::new(&ah, 0x12, 0x1111_1111)).send().inline(b"hi") // ERROR: does not live long enough
/// })?;
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0597
/// # use mlx5dv::*;
/// # use std::time::Duration;
/// # fn f(qp: &mut UdQp, cq: &mut CompletionQueue, ah: AddressHandle) -> Result<()> {
/// qp.post_and_wait(cq, Duration::from_secs(1), |b| {
///     // The closure takes `ah` (to drop it), and drops it before the send is posted:
///     b.wr(1, UdAddr::new(&ah, 0x12, 0x1111_1111)).send().inline(b"hi")?; // ERROR: does not live long enough
///     drop(ah);
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0597
/// # use mlx5dv::*;
/// # use std::time::Duration;
/// # fn f(dci: &mut DciQp, cq: &mut CompletionQueue, pd: &ProtectionDomain, peer: &DctEndpoint,
/// #      opts: &ConnectOptions, src: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
/// dci.post_and_wait(cq, Duration::from_secs(1), |b| {
///     let target = RemoteDct::new(pd, peer, opts)?;
///     // `target` (its address handle) is dropped before the write is posted:
///     b.wr(1, target.addr()).rdma_write(remote).sge(src.sge(0..8)?) // ERROR: does not live long enough
/// })?;
/// # Ok(()) }
/// ```
///
/// Made before the call, they may go after it:
///
/// ```no_run
/// # use mlx5dv::*;
/// # use std::time::Duration;
/// # fn f(qp: &mut UdQp, cq: &mut CompletionQueue, pd: &ProtectionDomain, peer: &UdEndpoint,
/// #      opts: &ConnectOptions, src: &MemoryRegion) -> Result<()> {
/// let to = UdDest::new(pd, peer, opts)?; // in the QP's protection domain
/// qp.post_and_wait(cq, Duration::from_secs(1), |b| {
///     b.wr(1, to.addr()).send().sge(src.sge(0..64)?)
/// })?;
/// drop(to);
/// # Ok(()) }
/// ```
#[must_use = "a work request is added only when its data is given"]
pub struct ScopedBatch<'q, 'm, T: Transport> {
    batch: WrBatch<'q, 'm, T>,
    /// The id of the batch's first work request (bit 63 set); the others
    /// follow, without carrying out of the low 63 bits (see `first_id`).
    base: u64,
    /// The caller's id of each work request added, in order: `ids[i]` for
    /// the work request posted `i`-th, written past the list's length
    /// (which the scoped post sets to the batch's size when the closure has
    /// returned), so that noting one costs a compare and a store.
    ids: Vec<u64>,
}

impl<T: Transport> std::fmt::Debug for ScopedBatch<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The caller's ids are written past the list's length (`next_id`):
        // the batch's length says how many there are.
        f.debug_struct("ScopedBatch")
            .field("batch", &self.batch)
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl<'q, 'm, T: Transport> ScopedBatch<'q, 'm, T> {
    /// How many work requests were added so far.
    pub fn len(&self) -> u32 {
        self.batch.len()
    }

    /// Whether none were.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    fn into_parts(self) -> (WrBatch<'q, 'm, T>, Vec<u64>) {
        (self.batch, self.ids)
    }

    /// The id the next work request is posted with, after noting the
    /// caller's at index `posted` of `ids`. A work request started but never
    /// given its data is not posted, and the next one takes its place.
    #[inline]
    fn next_id(&mut self, wr_id: u64) -> u64 {
        let i = self.batch.state.posted;
        if i < self.ids.capacity() {
            // SAFETY: `i` is within the capacity: the slot is in the
            // list's allocation (`ids` holds plain integers).
            unsafe { self.ids.as_mut_ptr().add(i).write(wr_id) };
        } else {
            // By value: the list's address does not escape to the growing
            // call, so that the batch's state stays in registers.
            self.ids = noted_at(std::mem::take(&mut self.ids), i, wr_id);
        }
        self.base.wrapping_add(i as u64)
    }
}

impl<'m, T: Connected> ScopedBatch<'_, 'm, T> {
    /// Adds a work request whose completion carries `wr_id`, as
    /// [`WrBatch::wr`]. It is signalled.
    #[inline]
    pub fn wr(&mut self, wr_id: u64) -> super::Wr<'_, 'm, T> {
        let id = self.next_id(wr_id);
        self.batch.start_wr(id, None)
    }
}

impl<'m> ScopedBatch<'_, 'm, XrcInitiator> {
    /// Adds a work request to the XRC SRQ `srqn` of the target, whose
    /// completion carries `wr_id`, as [`WrBatch::wr`] on an XRC initiator.
    /// It is signalled.
    #[inline]
    pub fn wr(&mut self, wr_id: u64, srqn: XrcSrqn) -> super::Wr<'_, 'm, XrcInitiator> {
        let id = self.next_id(wr_id);
        self.batch.start_wr(id, Some(RawAddr::Xrc(srqn.0)))
    }
}

impl<'m> ScopedBatch<'_, 'm, DcInitiator> {
    /// Adds a work request to the DCT at `addr`, whose completion carries
    /// `wr_id`, as [`WrBatch::wr`] on a DCI. It is signalled.
    ///
    /// The address handle stays borrowed for `'m`, as the memory of the
    /// work requests does: until the device is done with the batch (see
    /// [`ScopedBatch`]).
    #[inline]
    pub fn wr(&mut self, wr_id: u64, addr: DcAddr<'m>) -> super::Wr<'_, 'm, DcInitiator> {
        let id = self.next_id(wr_id);
        self.batch
            .start_wr(id, Some(RawAddr::Dc(RawDc::new(addr, None))))
    }

    /// Like [`wr`](Self::wr), on DCI stream `stream_id`, as
    /// [`WrBatch::wr_stream`].
    #[inline]
    pub fn wr_stream(
        &mut self,
        wr_id: u64,
        addr: DcAddr<'m>,
        stream_id: u16,
    ) -> super::Wr<'_, 'm, DcInitiator> {
        let id = self.next_id(wr_id);
        self.batch
            .start_wr(id, Some(RawAddr::Dc(RawDc::new(addr, Some(stream_id)))))
    }
}

impl<'m> ScopedBatch<'_, 'm, UnreliableDatagram> {
    /// Adds a work request to the UD QP at `addr`, whose completion
    /// carries `wr_id`, as [`WrBatch::wr`] on a UD QP. It is signalled.
    ///
    /// The address handle stays borrowed for `'m`, as the memory of the
    /// work requests does: until the device is done with the batch (see
    /// [`ScopedBatch`]).
    #[inline]
    pub fn wr(&mut self, wr_id: u64, addr: UdAddr<'m>) -> super::Wr<'_, 'm, UnreliableDatagram> {
        let id = self.next_id(wr_id);
        self.batch.start_wr(id, Some(RawAddr::Ud(RawUd::new(addr))))
    }
}

/// `ids` grown to hold `wr_id` at index `i`, the first `i` being the
/// posted work requests' ids, written past its length: the first batches
/// of a QP, until the list has room for its batches.
#[cold]
#[inline(never)]
fn noted_at(mut ids: Vec<u64>, i: usize, wr_id: u64) -> Vec<u64> {
    // SAFETY: `ids[..i]` were written by `next_id`, each within the
    // capacity then, so `i` is the capacity now (the growing call comes
    // at the first index past it); they are plain integers.
    unsafe { ids.set_len(i) };
    ids.push(wr_id);
    ids
}

/// The id of a scoped batch's first work request: bit 63 and `next`, or 0
/// when the batch's `depth` work requests could carry out of the low 63
/// bits from there (the sequence then starts again at 0, as it would
/// when wrapping). So the batch's ids are `first + k` for its k-th work
/// request, each with bit 63 set, and an id is the batch's exactly when
/// `id - first` (wrapping) is below the batch's length.
#[inline]
fn first_id(next: u64, depth: u32) -> u64 {
    let room = SCOPED_ID_BIT - 1 - u64::from(depth);
    SCOPED_ID_BIT | if next > room { 0 } else { next }
}

/// The fewest completions a scoped post's poll takes.
const OTHERS_PER_POLL: usize = 64;

/// What a scoped post has seen of its completions.
struct Waiting<'a> {
    qp_num: u32,
    /// The batch's first id (bit 63 set; see `first_id`).
    base: u64,
    ids: &'a [u64],
    /// Its completions, with the caller's ids: `out[start..]`.
    out: &'a mut Vec<WorkCompletion>,
    start: usize,
    /// Whether its last work request's completion has come.
    done: bool,
    /// Its last work request that needs a receive at the peer, and that
    /// one's position (from 1): its timeout may be the peer's "receiver
    /// not ready".
    peer_receive: Option<(PeerReceive, usize)>,
    /// Whether the QP is a DCI (whose peers receive through a DCT's SRQ).
    dc: bool,
    /// The QP's kind, which its completions carry.
    kind: crate::QpKind,
}

impl Waiting<'_> {
    /// Polls the device's completions (not the backlog), at most as many
    /// as are still to come: its own are written into `out` as they are
    /// read, every other one is kept in the CQ's backlog.
    fn poll(&mut self, cq: &mut CompletionQueue) -> Result<usize> {
        // One loop for a CQ that reads senders and one for a CQ that does
        // not: neither tests it per completion.
        if cq.reads_senders() {
            self.poll_as::<true>(cq)
        } else {
            self.poll_as::<false>(cq)
        }
    }

    /// [`poll`](Self::poll), reading the sender of each receive or not.
    #[inline(always)]
    fn poll_as<const SENDERS: bool>(&mut self, cq: &mut CompletionQueue) -> Result<usize> {
        let n = self.ids.len() as u64;
        let seen = self.out.len() - self.start;
        // Its own still to come, but at least a poll's worth, so that
        // others' go to the backlog 64 at a time.
        let max = self.ids.len().saturating_sub(seen).max(OTHERS_PER_POLL);
        // Room in `out` for every completion the poll may take (it hands
        // out at most `max`), so that each of its own has a slot (even
        // one a device reported twice) with no test per completion:
        // normally nothing to do, the CQ's buffer or the caller's vector
        // having grown to it before. Written from `slots` on and counted
        // after the poll, so that the loop keeps the place and the count
        // in registers rather than in the vector.
        self.out.reserve(max);
        let slots = self
            .out
            .spare_capacity_mut()
            .as_mut_ptr()
            .cast::<WorkCompletion>();
        let mut written = 0;
        let mut last = false;
        let mut others: Vec<RawWc> = Vec::new();
        let (qp_num, base, ids, kind) = (self.qp_num, self.base, self.ids, self.kind);
        // Inlined (twice, in `poll_provider`): the test and the writes are
        // then the poll loop's own, with their values in registers.
        let polled = cq.poll_provider(
            max,
            #[inline(always)]
            |wc| {
                let id = wc.wr_id();
                // The batch's ids are `base + k`, k < n, with bit 63 set
                // and no carry (`first_id`): any other id, with bit 63
                // or without, gives a k past `ids`. One compare for the
                // range and the index.
                let k = id.wrapping_sub(base);
                let caller = usize::try_from(k).ok().and_then(|k| ids.get(k));
                match caller {
                    Some(&caller) if wc.qp_num() == qp_num => {
                        // SAFETY: `written` counts the completions this
                        // closure took, fewer than the `max` the poll
                        // hands out at most, for which room was reserved
                        // past `out`'s length: slot `written` is in its
                        // allocation and uninitialised; every field is
                        // written (two here, the rest by
                        // `write_wc_fields`, the kind after it) before it
                        // is counted.
                        unsafe {
                            let slot = slots.add(written);
                            std::ptr::addr_of_mut!((*slot).wr_id).write(caller);
                            std::ptr::addr_of_mut!((*slot).qp_num).write(qp_num);
                            write_wc_fields::<SENDERS>(slot, wc);
                            std::ptr::addr_of_mut!((*slot).qp_kind).write(Some(kind));
                        }
                        written += 1;
                        last |= k + 1 == n;
                    }
                    _ => others.push(RawWc::of(wc)),
                }
            },
        );
        // SAFETY: the first `written` slots past the length were written
        // whole, within the reserved room.
        unsafe { self.out.set_len(self.out.len() + written) };
        self.done |= last;
        if !others.is_empty() {
            cq.keep(others);
        }
        polled
    }

    /// Moves the completions of its own that it has seen to the CQ's
    /// backlog (after an error: the next polls hand them out).
    fn keep_seen(self, cq: &mut CompletionQueue) {
        cq.keep(self.out.drain(self.start..).map(|wc| RawWc::from_read(&wc)));
    }
}

impl<T: Transport> QpEx<T> {
    /// Posts a batch and waits until the device is done with all of it,
    /// keeping the memory its SGEs borrow, and the address handles its UD
    /// or DCI work requests name (`'m`), borrowed until then: the safe way
    /// to post.
    ///
    /// `build` adds the work requests to a [`ScopedBatch`]; every one is
    /// signalled. Returns their completions (successful or not), in the
    /// order they were posted, each with the `wr_id` given to
    /// [`ScopedBatch::wr`]. If `build` fails (or panics), the batch is
    /// aborted: nothing of it was posted.
    ///
    /// Refused ([`Error::InvalidArgument`]) inside a
    /// [`poll_each`](CompletionQueue::poll_each) callback: stopping the QP
    /// may need a RESET, which cannot be made there.
    ///
    /// Refused ([`Error::QpNotReady`]) before `build` runs when the QP
    /// cannot send: in RESET (not connected), INIT or RTR (not yet in
    /// RTS), or in ERR (a work request failed, or the QP was stopped:
    /// every work request would only be flushed). Nothing is posted and the
    /// QP is left as it is, so that it can then be connected (or reset and
    /// connected again). The state is libibverbs' record of it (no system
    /// call), confirmed with `ibv_query_qp` only to refuse. The device
    /// moves a QP to ERR by itself when a work request fails, which that
    /// record misses: a post that returns a failed completion asks the
    /// kernel, so that the next one is refused as in ERR.
    ///
    /// While it waits, a CQ made on a completion channel
    /// ([`CompletionQueue::with_channel`]) is armed and the call sleeps in
    /// the kernel until the CQ's event (or the timeout); on any other CQ it
    /// polls, backing off from spinning to 50 µs sleeps.
    ///
    /// `cq` is the QP's send CQ ([`Error::InvalidArgument`] otherwise),
    /// borrowed so that nothing else polls it meanwhile. Only this batch's
    /// completions are taken as its own (receive completions of the QP,
    /// completions of earlier batches and of other QPs are not); the others
    /// it polls are kept in the CQ's backlog, which the next
    /// [`poll_each`](CompletionQueue::poll_each) (and every poll built on
    /// it) hands out first. A batch larger than the CQ's
    /// [`capacity`](CompletionQueue::capacity) is refused
    /// ([`Error::OutOfRange`]) before anything is posted, and one larger
    /// than the send queue at its work request past `max_send_wr`
    /// ([`Error::SendQueueFull`], as on any batch).
    ///
    /// When it returns, with its completions or with any error, the device
    /// no longer uses the batch's memory:
    /// - on timeout, a failed poll, or a batch the provider refused (which
    ///   soft-RoCE may have published anyway: see [`WrBatch::complete`]),
    ///   the QP is moved to ERR and the flushed completions are awaited
    ///   (up to 5 s); if they do not all come (a CQ that overran loses
    ///   them), the QP is moved to RESET, after which the device runs
    ///   nothing of it. The error says which. The QP must then be
    ///   connected again. The completions of the batch it did see (with
    ///   the caller's ids) are kept in the CQ's backlog: the next
    ///   [`poll_each`](CompletionQueue::poll_each) hands them out.
    ///   When a work request of the batch that waits for a receive at the
    ///   peer (a send, or an RDMA write with immediate; on a DCI, at the
    ///   DCT's SRQ) has not completed, the timeout's text also says that
    ///   the peer may have none posted (receiver not ready), which at
    ///   [`ConnectOptions::rnr_retry`](crate::ConnectOptions::rnr_retry)
    ///   7, the default, is retried for ever.
    /// - a completion the CQ lost (an overrun by other QPs sharing it) is
    ///   missing from the result; the completion of the last work request
    ///   still proves every earlier one done.
    /// - if even the move to RESET fails, returning would let the caller
    ///   free memory the device may still write: the process aborts.
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # use std::time::Duration;
    /// # fn f(qp: &mut RcQp, cq: &mut CompletionQueue, src: &MemoryRegion, dst: &mut MemoryRegion, remote: RemoteBuf) -> Result<()> {
    /// let into = dst.sge_mut(0..64)?; // the device writes here: borrowed exclusively
    /// let wcs = qp.post_and_wait(cq, Duration::from_secs(5), |b| {
    ///     b.wr(1).rdma_write(remote).sge(src.sge(0..64)?)?;
    ///     b.wr(2).rdma_read(remote).sge(into)
    /// })?;
    /// assert_eq!(wcs.iter().map(|wc| wc.wr_id).collect::<Vec<_>>(), [1, 2]);
    /// # Ok(()) }
    /// ```
    ///
    /// The completions are returned in the CQ's own buffer, as
    /// [`CompletionQueue::wait`] returns them: they borrow `cq` until you
    /// are done with them, and the next wait reuses the buffer
    /// ([`post_and_wait_into`](Self::post_and_wait_into) appends to a
    /// vector of yours instead).
    ///
    /// What it costs beyond posting and polling: per work request the
    /// caller's id noted, per completion a test that it is the batch's own.
    /// The clock is read only once a poll has brought none of the batch's
    /// own completions: a batch whose completions are there at the first
    /// poll reads none. The timeout counts from that poll.
    pub fn post_and_wait<'c, 'm, F>(
        &mut self,
        cq: &'c mut CompletionQueue,
        timeout: Duration,
        build: F,
    ) -> Result<&'c [WorkCompletion]>
    where
        F: for<'q> FnOnce(&mut ScopedBatch<'q, 'm, T>) -> Result<()>,
    {
        let mut out = cq.take_completions();
        let r = self.post_and_wait_into(cq, timeout, &mut out, build);
        let wcs = cq.give_completions(out);
        r?;
        Ok(wcs)
    }

    /// [`post_and_wait`](Self::post_and_wait), appending the completions
    /// to `out` (after what it holds) instead of returning them in the
    /// CQ's buffer: they are then the caller's, past the next wait. On an
    /// error `out` is left as it was (the completions of the batch that
    /// were seen go to the CQ's backlog, as with `post_and_wait`).
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # use std::time::Duration;
    /// # fn f(qp: &mut RcQp, cq: &mut CompletionQueue, src: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
    /// let mut wcs = Vec::new();
    /// for round in 0..100u64 {
    ///     wcs.clear();
    ///     qp.post_and_wait_into(cq, Duration::from_secs(5), &mut wcs, |b| {
    ///         b.wr(round).rdma_write(remote.slice(0, 64)?).sge(src.sge(0..64)?)
    ///     })?;
    ///     wcs[0].ok()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn post_and_wait_into<'m, F>(
        &mut self,
        cq: &mut CompletionQueue,
        timeout: Duration,
        out: &mut Vec<WorkCompletion>,
        build: F,
    ) -> Result<()>
    where
        F: for<'q> FnOnce(&mut ScopedBatch<'q, 'm, T>) -> Result<()>,
    {
        let qp_num = self.qp_num();
        // Its error paths may need a RESET, which is refused inside a
        // poll_each callback (of any CQ): refuse before posting rather than
        // abort there.
        if crate::cq::in_provider_poll() {
            return Err(crate::cq::in_poll_callback(
                "post_and_wait",
                &self.describe(),
            ));
        }
        if !self.completes_on(cq) {
            return Err(Error::InvalidArgument(format!(
                "post_and_wait on QP {qp_num:#x}: the CQ given is not the QP's send CQ"
            )));
        }
        // A QP that cannot send (RESET, INIT, RTR) or whose work requests
        // would only be flushed (ERR): refused before anything is built,
        // leaving the QP as it is.
        self.ready_to_send("post_and_wait")?;
        let capacity = cq.capacity() as usize;
        let base = first_id(self.scope.next, self.ops.depth);
        let mut ids = std::mem::take(&mut self.scope.ids);
        ids.clear();
        let mut scoped = ScopedBatch {
            batch: self.open_batch(SendFlags::SIGNALED),
            base,
            ids,
        };
        if let Err(e) = build(&mut scoped) {
            // Aborted, nothing posted; the list is kept for the next post.
            let (batch, ids) = scoped.into_parts();
            drop(batch);
            self.scope.ids = ids;
            return Err(e);
        }
        let n = scoped.batch.state.posted;
        // A work request that needs a receive at the peer may wait there
        // for ever (receiver not ready), and the rest behind it: the
        // timeout says so.
        let peer_receive = scoped.batch.state.last_peer_receive();
        let (batch, mut ids) = scoped.into_parts();
        // SAFETY: the ids of the `n` work requests posted were written at
        // `ids[..n]` (`next_id`), within the capacity.
        unsafe { ids.set_len(n) };
        if n == 0 {
            drop(batch); // aborted: nothing to post
            self.scope.ids = ids;
            return Ok(());
        }
        // Room for the completions, before anything is posted (a failed
        // allocation aborts the process, or panics with nothing posted).
        out.reserve(n);
        let start = out.len();
        // The batch's completions take places in the CQ while it runs,
        // beside those taken by others (binds counted on the CQ's QPs, an
        // AsyncQp's operations): none is posted unless all fit. Given back
        // below, once the device is done (nothing unwinds in between).
        if let Err((taken, _)) = cq.watch().take(n as u32) {
            drop(batch);
            self.scope.ids = ids;
            return Err(Error::OutOfRange {
                what: "scoped batch size",
                value: n as u64,
                limit: format!(
                    "at most {} (the send CQ's capacity {capacity}, less {taken} places \
                     taken by completions not yet read: memory window binds, or an \
                     AsyncQp's operations; more completions than it holds would be lost)",
                    capacity.saturating_sub(taken as usize)
                ),
            });
        }
        // SAFETY: the memory of every SGE is borrowed for 'm, which outlives
        // this call; the call returns only when the device is done with
        // every work request of the batch, even after an error of
        // `complete` (below).
        let posted = unsafe { batch.complete() };
        // From here until the device is done, a panic must not unwind out
        // of this call: it would end the borrows of memory the device may
        // still use.
        let unwinding = AbortOnUnwind;
        self.scope.next = base.wrapping_add(n as u64) & !SCOPED_ID_BIT;
        let mut waiting = Waiting {
            qp_num,
            base,
            ids: &ids,
            out,
            start,
            done: false,
            peer_receive,
            dc: T::DC,
            kind: T::KIND,
        };
        let outcome = match posted {
            // Refused before the provider saw it (the QP's state): nothing
            // was posted, and the QP is left as it is.
            Err(e @ Error::QpNotReady { .. }) => Err(e),
            Err(e) if self.provider_rolls_back() => Err(e),
            Err(e) => Err(self.stop(cq, &mut waiting, e)),
            Ok(_) => self.wait_scoped(cq, &mut waiting, timeout),
        };
        std::mem::forget(unwinding);
        // Read, flushed or removed by a RESET: the batch's places are free.
        cq.watch().give_back(n as u32);
        // Its last work request's completion was seen: every type 1 bind
        // queued before the batch is done too (a send queue completes in
        // order).
        if waiting.done {
            self.forget_queued();
        }
        let outcome = match outcome {
            Ok(()) => {
                // The last completion is not a success when any work
                // request failed (those after it are flushed): the QP may
                // be in ERR now, which the next post should be told.
                let last = waiting.out.last().map(|wc| wc.status);
                if last.is_some_and(|s| !s.is_success()) {
                    self.note_failed_work_request();
                }
                Ok(())
            }
            Err(e) => {
                // The completions it did see tell the caller which work
                // requests ran: the next polls hand them out.
                waiting.keep_seen(cq);
                Err(e)
            }
        };
        self.scope.ids = ids;
        outcome
    }

    /// Whether the provider rolls back a batch whose `ibv_wr_complete`
    /// fails (so that nothing of it was posted): mlx5 does.
    fn provider_rolls_back(&self) -> bool {
        self.pd().context().is_mlx5()
    }

    /// Aborts a batch that was leaked (`mem::forget`), if there is one:
    /// the provider still holds the send queue for it, and the next
    /// `wr_start` would wait on it for ever; a move to RESET would reset
    /// the queue's indices under it, and its abort would later restore
    /// stale ones. Its work requests are discarded, as a dropped batch's.
    #[inline]
    pub(crate) fn abort_if_leaked(&self) {
        if self.ops.open.load(Relaxed) != BATCH_CLOSED {
            self.abort_leaked_batch();
        }
    }

    #[cold]
    #[inline(never)]
    fn abort_leaked_batch(&self) {
        // One thread aborts (a RESET through `&self` may run on several at
        // once); the others wait until it has, so that none moves the QP
        // to RESET while the abort still writes the queue's indices.
        match self
            .ops
            .open
            .compare_exchange(BATCH_OPEN, BATCH_ABORTING, Acquire, Acquire)
        {
            Ok(_) => {
                // SAFETY: a batch was started on this live QP and neither
                // completed nor aborted, and it is gone: a live batch
                // borrows the QP mutably, which excludes the `&self` this
                // runs with, so it was leaked. Nothing else finalises it:
                // the mark says this thread aborts it. (libmlx5's
                // send-queue lock is a spinlock that any thread may
                // release.)
                unsafe { (self.ops.abort)(self.qpx.as_ptr()) };
                self.ops.open.store(BATCH_CLOSED, Release);
            }
            Err(_) => {
                while self.ops.open.load(Acquire) == BATCH_ABORTING {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batchs_ids_have_bit_63_and_never_carry_out_of_the_low_63_bits() {
        let top = SCOPED_ID_BIT - 1;
        for depth in [1u32, 128, u32::MAX] {
            for next in [0, 1, 12345, top - u64::from(depth), top - 1, top] {
                let first = first_id(next, depth);
                assert_ne!(first & SCOPED_ID_BIT, 0, "{next:#x} {depth}");
                // The last work request a batch can hold (index `depth`,
                // the one refused as past the queue) still has bit 63.
                let last = first.checked_add(u64::from(depth)).expect("no carry");
                assert_ne!(last & SCOPED_ID_BIT, 0, "{next:#x} {depth}");
                // The sequence goes on from `next` when it can.
                if next <= top - u64::from(depth) {
                    assert_eq!(first, SCOPED_ID_BIT | next);
                } else {
                    assert_eq!(first, SCOPED_ID_BIT);
                }
            }
        }
    }
}
