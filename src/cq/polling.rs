//! Polling: [`CompletionQueue::poll_each`], the poll of the provider,
//! its errors, and the per-thread count of provider polls in progress
//! (with what waits for them to end).

use super::{CompletionQueue, PolledWc};
use crate::error::{Error, Result};
use crate::ffi;
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

impl CompletionQueue {
    /// Polls up to `max` completions, oldest first, handing each to `f`;
    /// returns how many it handed over. `Ok(0)` when the CQ is empty.
    ///
    /// The extended poll of ibv_create_cq_ex(3) (`ibv_start_poll`,
    /// `ibv_next_poll`, `ibv_end_poll`) with nothing in between but `f`:
    /// `f` reads what it needs through the [`PolledWc`] accessors, each a
    /// direct call of the provider's reader, and nothing is copied or
    /// converted that it does not ask for. The view cannot leave `f`: the
    /// CQ moves on when `f` returns. The poll is ended on every path: after
    /// `max` completions, when the CQ runs empty, on an error of the
    /// provider (returned, after the completions already handed over) and
    /// when `f` panics. `f` cannot reach the CQ (it is borrowed for the
    /// poll), so it cannot start a poll of it within this one. Since the
    /// provider may hold the CQ's lock meanwhile (mlx5 does), a QP dropped
    /// in `f` is destroyed when the poll ends, and [`QpEx::reset`](crate::QpEx::reset)
    /// is refused in `f`.
    ///
    /// Completions a scoped post ([`QpEx::post_and_wait`](crate::QpEx::post_and_wait))
    /// took from the device but did not own are handed out first, oldest
    /// first, before the device is polled again ([`backlog_len`](Self::backlog_len)).
    ///
    /// If `f` panics, the completion it was given is not lost: it is kept
    /// (in that backlog) and handed out again, first, by the next poll; those
    /// handed over before it are not.
    ///
    /// ```no_run
    /// # fn demo(cq: &mut mlx5dv::CompletionQueue) -> mlx5dv::Result<()> {
    /// let (mut bytes, mut failed) = (0u64, Vec::new());
    /// let n = cq.poll_each(32, |wc| {
    ///     if wc.is_success() {
    ///         bytes += u64::from(wc.byte_len());
    ///     } else {
    ///         failed.push((wc.wr_id(), wc.status()));
    ///     }
    /// })?;
    /// println!("{n} completions, {bytes} bytes, failed: {failed:?}");
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn poll_each<F>(&mut self, max: usize, f: F) -> Result<usize>
    where
        F: FnMut(&PolledWc<'_>),
    {
        if !self.backlog.is_empty() {
            self.drop_dead();
            if !self.backlog.is_empty() {
                return Ok(self.replay(max, f));
            }
        }
        self.poll_provider(max, f)
    }

    /// [`poll_each`](Self::poll_each) of the device's completions only,
    /// leaving the backlog alone. On a CQ that watches for binds queued on
    /// its QPs (`queued`), each successful bind completion is also noted
    /// after `f` has seen it, and what the notes show done is retired after
    /// the poll (when `f` panics, nothing is: less room, never more). Two
    /// loops, one that notes and one that does not, so that neither tests
    /// the watch per completion and `f` is inlined into both.
    #[inline(always)]
    pub(crate) fn poll_provider<F>(&mut self, max: usize, f: F) -> Result<usize>
    where
        F: FnMut(&PolledWc<'_>),
    {
        if self.inner.watch.is_on() {
            return self.poll_watched(max, f);
        }
        self.poll_device::<false, F>(max, f, &mut Vec::new())
    }

    /// [`poll_provider`](Self::poll_provider) on a CQ that watches for
    /// binds: what the poll noted is retired when it ends, or unwinds.
    #[inline(always)]
    fn poll_watched<F>(&mut self, max: usize, f: F) -> Result<usize>
    where
        F: FnMut(&PolledWc<'_>),
    {
        struct Retire(Arc<super::CqInner>, super::queued::Seen);
        impl Drop for Retire {
            fn drop(&mut self) {
                self.0.watch.retire(&mut self.1);
            }
        }
        let mut retire = Retire(Arc::clone(&self.inner), Vec::new());
        self.poll_device::<true, F>(max, f, &mut retire.1)
    }

    /// The poll of the device itself, noting bind completions in `seen`
    /// when `WATCH`.
    #[inline(always)]
    fn poll_device<const WATCH: bool, F>(
        &mut self,
        max: usize,
        mut f: F,
        seen: &mut super::queued::Seen,
    ) -> Result<usize>
    where
        F: FnMut(&PolledWc<'_>),
    {
        if max == 0 {
            return Ok(0);
        }
        let cq = self.cq;
        let wc = PolledWc {
            cq,
            senders: self.reads_senders(),
            _poll: PhantomData,
        };
        // SAFETY: the CQ is live, its entries were checked at creation, and
        // no poll of it is in progress (`&mut self`); `attr` is ours,
        // writable, and zero (`start_poll` only reads it).
        let rc = unsafe { entry!(cq, start_poll, &mut self.attr) };
        if rc != 0 {
            return if rc == libc::ENOENT {
                Ok(0)
            } else {
                Err(poll_failed(cq, "ibv_start_poll", rc))
            };
        }
        let poll = EndPoll::new(cq, &mut self.backlog, &self.inner);
        // Written as `f; while n < max { next_poll; f }`, the count is one
        // register, the same at every exit, and the back edge is the test
        // of the count (no copy of it, no extra jump). `f` is inlined
        // twice.
        // A bind's completion is noted as it is read from the device,
        // before `f` sees it (if `f` panics, it is kept in the backlog and
        // handed out again, not noted again).
        if WATCH {
            self.inner.watch.note(seen, &wc);
        }
        f(&wc);
        let mut n = 1;
        while n < max {
            // SAFETY: a poll is in progress (ended by `poll`, not by `f`,
            // which cannot reach the CQ).
            let rc = unsafe { entry!(cq, next_poll) };
            if rc != 0 {
                if rc == libc::ENOENT {
                    poll.end();
                    return Ok(n);
                }
                // The error path ends the poll itself: nothing of `poll`
                // has to be kept for it.
                std::mem::forget(poll);
                return Err(next_poll_failed(cq, rc));
            }
            if WATCH {
                self.inner.watch.note(seen, &wc);
            }
            f(&wc);
            n += 1;
        }
        poll.end();
        Ok(max)
    }
}

/// The error of a failed `start_poll` / `next_poll` of `cq`, naming its
/// device (found through the CQ, so that a poll keeps nothing else at hand
/// for its errors).
#[cold]
#[inline(never)]
fn poll_failed(cq: NonNull<ffi::ibv_cq_ex>, call: &'static str, rc: i32) -> Error {
    // SAFETY: `cq` is live; its context and the context's device, when
    // set, are live too.
    let device = unsafe {
        let ctx = (*cq.as_ptr()).context;
        if ctx.is_null() || (*ctx).device.is_null() {
            "an unnamed device".to_string()
        } else {
            crate::device::device_name((*ctx).device)
        }
    };
    Error::verbs(call, rc, device)
}

/// Ends the poll `next_poll` failed in, and returns its error.
#[cold]
#[inline(never)]
fn next_poll_failed(cq: NonNull<ffi::ibv_cq_ex>, rc: i32) -> Error {
    // SAFETY: called instead of dropping the `EndPoll` of the poll in
    // progress: it ends that poll once.
    unsafe { entry!(cq, end_poll) };
    leave_poll();
    poll_failed(cq, "ibv_next_poll", rc)
}

/// The poll in progress on a CQ (`ibv_end_poll` ends it): made right
/// after a successful `start_poll`; while it lives, this thread is inside
/// a provider poll ([`in_provider_poll`]). A poll that returns ends it with
/// [`end`](Self::end) (or, after a failed `next_poll`, forgets it); one
/// that unwinds (its callback panicked) drops it, which keeps the
/// completion the poll is on in the CQ's backlog before ending the poll:
/// the provider has taken it from the CQ, and no one else would hand it
/// out.
struct EndPoll {
    cq: NonNull<ffi::ibv_cq_ex>,
    backlog: NonNull<std::collections::VecDeque<super::RawWc>>,
    /// The CQ's shared part: whether it reads senders, and its owners.
    inner: NonNull<super::CqInner>,
}

impl EndPoll {
    #[inline(always)]
    fn new(
        cq: NonNull<ffi::ibv_cq_ex>,
        backlog: &mut std::collections::VecDeque<super::RawWc>,
        inner: &super::CqInner,
    ) -> Self {
        // Through `with`, not `LocalKey::set`, which goes through a call
        // that the compiler does not always inline.
        POLLS.with(|p| p.set(p.get() + 1));
        EndPoll {
            cq,
            backlog: NonNull::from(backlog),
            inner: NonNull::from(inner),
        }
    }

    /// Ends the poll (`ibv_end_poll`).
    #[inline(always)]
    fn end(self) {
        let cq = self.cq;
        std::mem::forget(self);
        // SAFETY: made right after a successful start_poll of this live
        // CQ, whose entries were checked at creation, and ended once (the
        // guard is forgotten): it ends that poll.
        unsafe { entry!(cq, end_poll) }
        leave_poll();
    }
}

impl Drop for EndPoll {
    /// Reached only by unwinding: a poll's callback panicked.
    #[cold]
    #[inline(never)]
    fn drop(&mut self) {
        // SAFETY: the polled handle's shared part, which it holds (an
        // `Arc`) for longer than this guard lives.
        let inner = unsafe { self.inner.as_ref() };
        let wc = PolledWc {
            cq: self.cq,
            senders: inner.senders.load(std::sync::atomic::Ordering::Relaxed),
            _poll: PhantomData,
        };
        let kept = super::RawWc::of(&wc).owned_by(&inner.owners);
        // SAFETY: the backlog is the polled CQ handle's, borrowed mutably
        // for the poll (the callback cannot reach it), and outlives it.
        unsafe { self.backlog.as_mut().push_back(kept) };
        // SAFETY: as in `end`; a guard that is dropped was not ended.
        unsafe { entry!(self.cq, end_poll) }
        leave_poll();
    }
}

// A provider may hold a CQ's lock from `start_poll` to `end_poll` (mlx5
// does), and some verbs calls take the locks of a QP's CQs (mlx5's
// `ibv_destroy_qp`, and `ibv_modify_qp` to RESET, which clean the CQs of
// the QP's entries). Made from inside a poll callback on the thread that
// holds the lock, such a call would wait for ever on itself. The crate
// therefore counts, per thread, the provider polls in progress: a QP
// dropped meanwhile is destroyed when the outermost poll ends, and a reset
// is refused ([`in_provider_poll`]).
thread_local! {
    /// Provider polls in progress on this thread, plus [`DEFERRED_BIT`]
    /// when destructions wait for the last of them to end.
    static POLLS: Cell<u32> = const { Cell::new(0) };
    /// What waits for the end of this thread's polls.
    static DEFERRED: RefCell<Vec<Box<dyn FnOnce()>>> = const { RefCell::new(Vec::new()) };
}

/// Set in [`POLLS`] while [`DEFERRED`] holds work.
const DEFERRED_BIT: u32 = 1 << 31;

#[inline(always)]
fn leave_poll() {
    let left = POLLS.with(|p| {
        let left = p.get() - 1;
        p.set(left);
        left
    });
    if left == DEFERRED_BIT {
        run_deferred();
    }
}

#[cold]
#[inline(never)]
fn run_deferred() {
    POLLS.set(0);
    // One at a time: a destruction that drops the last share of a CQ (or
    // anything else) runs with the list released.
    while let Some(f) = DEFERRED.with(|d| d.borrow_mut().pop()) {
        f();
    }
}

/// Whether this thread is inside a provider poll of some CQ (a
/// [`CompletionQueue::poll_each`] callback, at any depth).
pub(crate) fn in_provider_poll() -> bool {
    POLLS.get() & !DEFERRED_BIT != 0
}

/// Runs `f` when this thread's provider polls have all ended (at once when
/// none is in progress).
pub(crate) fn after_polls(f: Box<dyn FnOnce()>) {
    if !in_provider_poll() {
        f();
        return;
    }
    DEFERRED.with(|d| d.borrow_mut().push(f));
    POLLS.set(POLLS.get() | DEFERRED_BIT);
}

/// The error of a call refused inside a poll callback.
#[cold]
pub(crate) fn in_poll_callback(call: &str, what: &str) -> Error {
    Error::InvalidArgument(format!(
        "{call} on {what} inside a poll_each callback: the provider may hold the CQ's \
         lock until the poll ends, and this call would take it again (call it after \
         the poll)"
    ))
}

pub(crate) fn ffi_cq(cq: &CompletionQueue) -> *mut ffi::ibv_cq {
    // SAFETY: a pure pointer cast of a live extended CQ.
    unsafe { ffi::ibv_cq_ex_to_cq(cq.as_ptr()) }
}
