//! An RC QP driven by async operations that own their memory: the
//! handle ([`AsyncQp`]), its table of work requests in flight, and the
//! polls that hand their completions back (the operations are in `op.rs`).

use crate::cq::{CompletionQueue, WcStatus, WorkCompletion};
use crate::error::{Error, Result};
use crate::qp::RcQp;
use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Waker;

/// What an operation gives back: its completion, or why it has none, and
/// its region.
pub type BufResult<B> = (Result<WorkCompletion>, B);

/// Every id has bit 63, as the scoped post's do: ids that the unsafe
/// posts (`WrBatch::complete`, `post_recv`) may not use, so that no
/// completion of theirs is taken for an operation's.
const ID_BIT: u64 = 1 << 63;

/// How many completions one poll of a CQ takes at most.
const POLL_BATCH: usize = 32;

/// An RC QP, its send CQ and (when not the same) its receive CQ, driven by
/// async operations (feature `tokio`): sends, RDMA writes and reads, and
/// receives, each owning its region until the device is done with it (see
/// [`aio`](crate::aio) for the cancellation model).
///
/// A cheap, cloneable handle: operations take `&self` and hold a handle, so
/// several may be in flight at once, from several tasks. Each work request
/// is signalled; an operation is refused (given back at once, with
/// [`Error::SendQueueFull`] or [`Error::OutOfRange`]) when its queue or
/// its CQ has no room left for it: the CQ's places are shared with the
/// memory window binds of other QPs made on it
/// ([`CompletionQueue::binds_in_flight`]), each taken until a poll reads
/// its completion.
///
/// The work request is posted when the operation is made; awaiting it
/// polls the CQs, arms its CQ and sleeps on the CQ's channel, on a tokio
/// runtime (the first wait registers the channel with that runtime's
/// reactor). Awaited where no event can be waited for (outside a tokio
/// runtime), it stops the QP (RESET, so that its memory is free) and ends
/// with that error. A failed poll or a failed `ibv_wr_complete` (the work
/// request may have been posted) stops the QP too: every operation then
/// ends as flushed.
///
/// An operation the QP's state does not take is refused at once, with
/// [`Error::QpNotReady`], its region given back and the QP left as it is:
/// a receive in RESET; a send, write or read in RESET, INIT or RTR
/// (connect the QP first, in [`with_qp`](Self::with_qp)) or in ERR (an
/// operation failed, or the QP was stopped: [`reset`](Self::reset) it and
/// connect it again), as [`QpEx::post_and_wait`](crate::QpEx::post_and_wait)
/// refuses them.
///
/// ```no_run
/// # use mlx5dv::*;
/// # use mlx5dv::aio::AsyncQp;
/// # async fn f(qp: RcQp, cq: CompletionQueue, pd: &ProtectionDomain) -> Result<()> {
/// let qp = AsyncQp::new(qp, cq, None)?; // connected; its CQ made on a channel
/// let buf = MemoryRegion::new(pd, 4096, AccessFlags::LOCAL_WRITE)?;
/// let (wc, buf) = qp.recv(buf, 0..4096).await; // the region comes back
/// let n = wc?.byte_len as usize;
/// let (wc, _buf) = qp.send(buf, 0..n).await; // echo it
/// wc?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use]
pub struct AsyncQp(pub(super) Arc<Shared>);

pub(super) struct Shared {
    inner: Mutex<Inner>,
    pub(super) qp_num: u32,
}

pub(super) struct Inner {
    /// Taken and destroyed first when the last handle goes (`Shared`'s
    /// `Drop`), before the regions in `table` are dropped.
    qp: Option<RcQp>,
    send_cq: CompletionQueue,
    /// `None`: the send CQ is also the receive CQ.
    recv_cq: Option<CompletionQueue>,
    /// The work requests posted and not yet handed back, by id.
    pub(super) table: HashMap<u64, Entry>,
    /// The next id: bit 63, then a sequence from a random start.
    next_id: u64,
    /// Sends (and writes, reads) and receives posted and not yet done.
    sends: u32,
    recvs: u32,
    /// Completions polled that name no operation of this QP (of another QP
    /// created on these CQs, or come after a reset).
    stray: Vec<WorkCompletion>,
    /// The CQ could not be polled and the QP not be reset: the device's
    /// progress is unknown, and the regions in flight stay held.
    pub(super) broken: Option<String>,
    /// Regions the device is done with, of operations dropped before
    /// (abandoned): dropped once the lock is released ([`Locked`]), so
    /// that a region's `Drop` may use this `AsyncQp`.
    graveyard: Vec<Entry>,
}

/// The `AsyncQp`'s lock: on release, the regions the device is done with
/// that no operation takes back (`graveyard`) are dropped, unlocked.
pub(super) struct Locked<'a>(std::mem::ManuallyDrop<MutexGuard<'a, Inner>>);

impl std::ops::Deref for Locked<'_> {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut Inner {
        &mut self.0
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let gone = std::mem::take(&mut self.0.graveyard);
        // SAFETY: dropped once, here; not used after.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.0) };
        drop(gone);
    }
}

pub(super) struct Entry {
    /// The operation's region (its `B`), owned here while posted.
    pub(super) buf: Box<dyn Any + Send>,
    pub(super) recv: bool,
    /// Set once the device is done with the memory.
    pub(super) result: Option<Result<WorkCompletion>>,
    pub(super) waker: Option<Waker>,
    /// The operation was dropped: the region is dropped when done.
    pub(super) abandoned: bool,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let inner = self.inner.get_mut().unwrap_or_else(PoisonError::into_inner);
        let qp = inner.qp.take();
        let table = std::mem::take(&mut inner.table);
        // The places its operations in flight take in the CQs, given back
        // once the QP is destroyed (its completions with it).
        let recv_cq = inner.recv_cq.as_ref().unwrap_or(&inner.send_cq);
        let places = [
            (inner.send_cq.share(), inner.sends),
            (recv_cq.share(), inner.recvs),
        ];
        // The QP first: once destroyed, the device runs none of its work
        // requests, and the regions in flight are free. Inside a poll
        // callback the QP's destruction waits for the end of the poll, and
        // so must the regions: both go then, together.
        crate::cq::after_polls(Box::new(move || {
            let failures = crate::destroy_failures();
            drop(qp);
            if crate::destroy_failures() != failures {
                // A destroy failed (here or on another thread): the kernel
                // may have kept the QP. Leak rather than free under it.
                std::mem::forget(table);
            } else {
                for (cq, n) in places {
                    cq.watch.give_back(n);
                }
            }
        }));
    }
}

impl AsyncQp {
    /// Takes over a connected (or yet to be connected: see
    /// [`with_qp`](Self::with_qp)) RC QP with its send CQ and, when not the
    /// same, its receive CQ. Both must be made on a channel
    /// ([`CompletionQueue::with_channel`]) and be the QP's; refused with
    /// [`Error::InvalidArgument`] otherwise.
    ///
    /// From here on the `AsyncQp` alone posts on the QP and polls the CQs:
    /// completions of other QPs on them are kept for
    /// [`take_stray`](Self::take_stray).
    pub fn new(
        qp: RcQp,
        send_cq: CompletionQueue,
        recv_cq: Option<CompletionQueue>,
    ) -> Result<Self> {
        let qp_num = qp.qp_num();
        let refuse = |why: &str| {
            Err(Error::InvalidArgument(format!(
                "AsyncQp of QP {qp_num:#x}: {why}"
            )))
        };
        if !qp.completes_on(&send_cq) {
            return refuse("the send CQ given is not the QP's");
        }
        let rcq = recv_cq.as_ref().unwrap_or(&send_cq);
        // SAFETY: the QP is live while `qp` is; its `recv_cq` field is set
        // at creation and read only.
        let qp_recv_cq = unsafe { (*qp.as_ptr()).recv_cq };
        if qp_recv_cq != rcq.raw_cq().as_ptr() {
            return refuse("the receive CQ given is not the QP's");
        }
        if send_cq.channel().is_none() || rcq.channel().is_none() {
            return refuse(
                "its CQs must be made on a completion channel (CompletionQueue::with_channel)",
            );
        }
        // What the CQs hold now (a failed scoped post's completions in the
        // backlog, those of work requests posted before) is no operation's:
        // kept for `take_stray`.
        let (mut send_cq, mut recv_cq) = (send_cq, recv_cq);
        let mut stray = Vec::new();
        poll_dry(&mut send_cq, &mut stray)?;
        if let Some(cq) = &mut recv_cq {
            poll_dry(cq, &mut stray)?;
        }
        let random = {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        };
        Ok(AsyncQp(Arc::new(Shared {
            inner: Mutex::new(Inner {
                qp: Some(qp),
                send_cq,
                recv_cq,
                table: HashMap::new(),
                next_id: ID_BIT | random,
                sends: 0,
                recvs: 0,
                stray,
                broken: None,
                graveyard: Vec::new(),
            }),
            qp_num,
        })))
    }

    /// The QP's number.
    pub fn qp_num(&self) -> u32 {
        self.0.qp_num
    }

    /// Runs `f` on the QP (to connect it, read its state, ...), under the
    /// `AsyncQp`'s lock.
    ///
    /// A reset made in `f` (`qp.reset()`) counts as [`reset`](Self::reset):
    /// when `f` returns (or unwinds), the operations in flight end as
    /// flushed, their regions are given back, and the QP may be connected
    /// again for new ones.
    pub fn with_qp<R>(&self, f: impl FnOnce(&RcQp) -> R) -> R {
        /// Ends the operations a reset in `f` ended on the device, however
        /// `f` returns.
        struct AfterReset<'a> {
            inner: Locked<'a>,
            qp_num: u32,
            resets: u64,
        }
        impl Drop for AfterReset<'_> {
            fn drop(&mut self) {
                if self.inner.resets() != self.resets {
                    self.inner.after_reset(self.qp_num);
                }
            }
        }
        let mut inner = self.0.lock();
        // What the device completed so far goes to its operations first:
        // a reset in `f` may discard it (see `reset`).
        let _ = inner.poll_and_dispatch(self.0.qp_num);
        let resets = inner.resets();
        let guard = AfterReset {
            inner,
            qp_num: self.0.qp_num,
            resets,
        };
        f(guard.inner.qp())
    }

    /// How many of its operations' work requests the device may still be
    /// using (posted, not yet known done): their regions are held, whether
    /// or not their futures live.
    pub fn in_flight(&self) -> usize {
        self.0
            .lock()
            .table
            .values()
            .filter(|e| e.result.is_none())
            .count()
    }

    /// Polls the CQs without waiting and hands what came to the operations
    /// (the regions of dropped ones are dropped); returns how many
    /// completions it took. Operations awaited do this themselves.
    pub fn poll(&self) -> Result<usize> {
        self.0.lock().progress(self.0.qp_num)
    }

    /// Moves the QP to ERR: its work requests in flight complete as
    /// flushed ([`WcStatus::WR_FLUSH_ERR`]), which the operations (or
    /// [`poll`](Self::poll)) then hand back.
    pub fn to_error(&self) -> Result<()> {
        self.0.lock().qp().to_error()
    }

    /// Moves the QP to RESET (from which it can be connected again with
    /// [`with_qp`](Self::with_qp)): the device runs none of its work
    /// requests after that, so every operation in flight ends at once,
    /// with [`Error::WorkCompletion`] of status
    /// [`WcStatus::WR_FLUSH_ERR`], and the regions of dropped ones are
    /// dropped.
    ///
    /// The CQs are polled first, so an operation whose completion is
    /// already there ends with it. One that completes between that poll
    /// and the reset may still end as flushed: mlx5 (and other providers)
    /// remove the QP's completions from its CQs on RESET. For every
    /// operation's true status, move the QP to ERR first
    /// ([`to_error`](Self::to_error)) and await the operations (each ends
    /// with its completion or its flush), then reset.
    pub fn reset(&self) -> Result<()> {
        let mut inner = self.0.lock();
        let _ = inner.poll_and_dispatch(self.0.qp_num);
        inner.qp().reset()?;
        inner.after_reset(self.0.qp_num);
        Ok(())
    }

    /// The completions polled that named no operation of this QP (another
    /// QP's on the same CQ, or late ones of work requests a reset ended).
    pub fn take_stray(&self) -> Vec<WorkCompletion> {
        std::mem::take(&mut self.0.lock().stray)
    }
}

impl Shared {
    pub(super) fn lock(&self) -> Locked<'_> {
        // Every update is complete before anything that can panic.
        Locked(std::mem::ManuallyDrop::new(
            self.inner.lock().unwrap_or_else(PoisonError::into_inner),
        ))
    }
}

impl Inner {
    pub(super) fn qp(&self) -> &RcQp {
        self.qp
            .as_ref()
            .expect("the QP lives as long as the AsyncQp")
    }

    pub(super) fn qp_mut(&mut self) -> &mut RcQp {
        self.qp
            .as_mut()
            .expect("the QP lives as long as the AsyncQp")
    }

    /// Takes in the region of a work request just posted.
    pub(super) fn insert(&mut self, id: u64, recv: bool, buf: Box<dyn Any + Send>) {
        self.table.insert(
            id,
            Entry {
                buf,
                recv,
                result: None,
                waker: None,
                abandoned: false,
            },
        );
        if recv {
            self.recvs += 1;
        } else {
            self.sends += 1;
        }
    }

    pub(super) fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id = ID_BIT | id.wrapping_add(1);
        id
    }

    /// Refuses a work request its queue or its CQ has no room for.
    pub(super) fn room(&self, recv: bool) -> Result<()> {
        if let Some(why) = &self.broken {
            return Err(Error::InvalidArgument(format!(
                "QP {:#x} is stopped: {why}",
                self.qp().qp_num()
            )));
        }
        let caps = self.qp().caps();
        // Type 1 binds posted on the QP before it was handed over, not
        // yet seen complete, take up the send queue too.
        let binds = self.qp().queued.len();
        if !recv && self.sends.saturating_add(binds) >= caps.max_send_wr {
            return Err(Error::SendQueueFull {
                batch: 1,
                depth: caps.max_send_wr,
            });
        }
        if recv && self.recvs >= caps.max_recv_wr {
            return Err(Error::OutOfRange {
                what: "receives in flight",
                value: u64::from(self.recvs) + 1,
                limit: format!("at most max_recv_wr ({})", caps.max_recv_wr),
            });
        }
        Ok(())
    }

    /// The places a send's or a receive's completion takes: its CQ's.
    fn places_of(&self, recv: bool) -> &crate::cq::Watch {
        match (&self.recv_cq, recv) {
            (Some(rcq), true) => rcq.watch(),
            _ => self.send_cq.watch(),
        }
    }

    /// Takes the place of a work request's completion in its CQ, beside
    /// the places others take there (memory window binds on any QP of
    /// the CQ): refused when it is full. Given back when the completion
    /// is read, or the work request ends otherwise.
    pub(super) fn take_place(&self, recv: bool) -> Result<()> {
        self.places_of(recv)
            .take(1)
            .map_err(|(taken, capacity)| Error::OutOfRange {
                what: "completions in flight on the CQ",
                value: u64::from(taken) + 1,
                limit: format!(
                    "at most its capacity ({capacity}), which operations in flight and memory \
                     window binds not yet polled share"
                ),
            })
    }

    pub(super) fn give_places(&self, recv: bool, n: u32) {
        self.places_of(recv).give_back(n);
    }

    /// How many times the QP was reset (`QpEx::reset`, on any path).
    fn resets(&self) -> u64 {
        self.qp().resets.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Polls both CQs dry and hands each completion to its operation.
    /// On a failed poll the QP is stopped.
    pub(super) fn progress(&mut self, qp_num: u32) -> Result<usize> {
        let polled = self.poll_and_dispatch(qp_num);
        if let Err(e) = polled {
            self.stop(qp_num);
            return Err(e);
        }
        polled
    }

    /// Polls both CQs dry and hands each completion to its operation.
    fn poll_and_dispatch(&mut self, qp_num: u32) -> Result<usize> {
        let mut wcs = Vec::new();
        let polled = poll_dry(&mut self.send_cq, &mut wcs).and_then(|()| match &mut self.recv_cq {
            Some(cq) => poll_dry(cq, &mut wcs),
            None => Ok(()),
        });
        let n = wcs.len();
        // The regions of dropped operations the device is done with go
        // only once every completion is handed to its operation: a region
        // whose drop panics then loses none of them.
        let mut gone = Vec::new();
        for wc in wcs {
            gone.extend(self.dispatch(wc, qp_num));
        }
        // Dropped once the lock is released.
        self.graveyard.extend(gone);
        polled.map(|()| n)
    }

    /// Hands `wc` to its operation; returns the entry of a dropped one,
    /// which the device is done with, for the caller to drop.
    #[must_use]
    fn dispatch(&mut self, wc: WorkCompletion, qp_num: u32) -> Option<Entry> {
        let entry = match self.table.get_mut(&wc.wr_id) {
            Some(entry) if wc.qp_num == qp_num && entry.result.is_none() => entry,
            _ => {
                self.stray.push(wc);
                return None;
            }
        };
        let recv = entry.recv;
        if recv {
            self.recvs -= 1;
        } else {
            self.sends -= 1;
        }
        let failed = !wc.status.is_success() && wc.status != WcStatus::WR_FLUSH_ERR;
        let mut gone = None;
        if entry.abandoned {
            // The device is done: the dropped operation's region goes.
            gone = self.table.remove(&wc.wr_id);
        } else {
            entry.result = Some(wc.ok_for(crate::QpKind::Rc));
            if let Some(waker) = entry.waker.take() {
                waker.wake();
            }
        }
        // Read: its place in the CQ is free.
        self.give_places(recv, 1);
        if failed {
            // The QP may be in ERR now, which the next operation should
            // be told (see `QpEx::post_and_wait`).
            self.qp().note_failed_work_request();
        }
        gone
    }

    /// The device's progress is unknown (a poll or a post failed): moves
    /// the QP to RESET, after which it runs nothing, and ends every
    /// operation; when even that fails, the regions stay held.
    pub(super) fn stop(&mut self, qp_num: u32) {
        // What can still be polled goes to its operations before the reset
        // (which may discard it: see `AsyncQp::reset`).
        let _ = self.poll_and_dispatch(qp_num);
        match self.qp().reset() {
            Ok(()) => self.after_reset(qp_num),
            Err(e) => self.broken = Some(format!("a poll or post failed, then RESET: {e}")),
        }
    }

    /// After the QP was reset (by [`AsyncQp::reset`], a stop, or through
    /// [`AsyncQp::with_qp`]): the completions still in the CQs (a provider
    /// that does not clean them on RESET leaves them) are handed to their
    /// own operations, then every operation still in flight ends as
    /// flushed (the device runs none of them any more).
    fn after_reset(&mut self, qp_num: u32) {
        // A failed poll here leaves nothing to the device: the QP is reset.
        let _ = self.poll_and_dispatch(qp_num);
        self.end_all(qp_num);
        self.broken = None;
    }

    /// Arms both CQs and polls them again: after an event was taken by
    /// one operation, the others' completions either come now or raise a
    /// new event.
    pub(super) fn rearm(&mut self, qp_num: u32) {
        let armed = self.send_cq.req_notify(false).is_ok()
            & self
                .recv_cq
                .as_mut()
                .is_none_or(|cq| cq.req_notify(false).is_ok());
        if armed {
            let _ = self.progress(qp_num);
        }
    }

    /// Ends every operation in flight as flushed (after a RESET).
    fn end_all(&mut self, qp_num: u32) {
        // The QP is reset: the device owes the CQs nothing more of it.
        self.give_places(false, self.sends);
        self.give_places(true, self.recvs);
        self.sends = 0;
        self.recvs = 0;
        // The regions of dropped operations go last, once every other
        // operation has its result: one whose drop panics loses nothing.
        let abandoned: Vec<u64> = self
            .table
            .iter()
            .filter(|(_, e)| e.abandoned && e.result.is_none())
            .map(|(&id, _)| id)
            .collect();
        let gone: Vec<Entry> = abandoned
            .iter()
            .filter_map(|id| self.table.remove(id))
            .collect();
        for (&wr_id, entry) in &mut self.table {
            if entry.result.is_none() {
                entry.result = Some(Err(Error::WorkCompletion {
                    wr_id,
                    qp_num,
                    status: WcStatus::WR_FLUSH_ERR,
                    vendor_err: 0,
                    kind: Some(crate::QpKind::Rc),
                }));
                if let Some(waker) = entry.waker.take() {
                    waker.wake();
                }
            }
        }
        // Dropped once the lock is released.
        self.graveyard.extend(gone);
    }

    /// The CQ an operation's completion comes to.
    pub(super) fn cq_of(&mut self, recv: bool) -> &mut CompletionQueue {
        match (&mut self.recv_cq, recv) {
            (Some(cq), true) => cq,
            _ => &mut self.send_cq,
        }
    }
}

/// Polls `cq` until it is empty, into `out`.
fn poll_dry(cq: &mut CompletionQueue, out: &mut Vec<WorkCompletion>) -> Result<()> {
    while cq.poll_into(out, POLL_BATCH)? == POLL_BATCH {}
    Ok(())
}

impl fmt::Debug for AsyncQp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = self.0.lock();
        f.debug_struct("AsyncQp")
            .field("qp_num", &format_args!("{:#x}", self.0.qp_num))
            .field("operations", &inner.table.len())
            .finish()
    }
}
