//! Completion channels (`ibv_create_comp_channel(3)`): waiting for
//! completions asleep in the kernel instead of on a core.
//!
//! A CQ created on a channel ([`CompletionQueue::with_channel`]) and armed
//! ([`CompletionQueue::req_notify`], `ibv_req_notify_cq(3)`) raises one
//! event on the channel at its next completion; the event is read with
//! `ibv_get_cq_event(3)` and must be acknowledged (`ibv_ack_cq_events`)
//! before the CQ is destroyed, or `ibv_destroy_cq` waits for ever.
//!
//! Who touches what, and until when:
//! - The channel's fd is read by this crate only, under the channel's lock,
//!   in non-blocking mode; one thread at a time sleeps in `poll(2)` on it
//!   and hands what it reads to the others (a condition variable), so that
//!   an event read by one thread for another thread's CQ wakes that thread.
//! - `ibv_get_cq_event` returns the `struct ibv_cq` of the event's CQ and
//!   reads it. libibverbs' `ibv_destroy_cq` waits until every event the
//!   kernel handed out for the CQ is acknowledged, so that CQ is live until
//!   the event is acknowledged. The channel keeps a registry of its CQs,
//!   keyed by that address: an event of a registered CQ is counted there
//!   (acknowledged in batches, and the rest when the CQ is dropped); a CQ
//!   leaves the registry, under the same lock, before its destroy starts,
//!   so an event read for a CQ not in the registry is of one being
//!   destroyed right now, whose destroy waits for exactly that
//!   acknowledgement: it is acknowledged at once and reported to nobody.
//!   Nothing outside the lock keeps the address: events name their CQ by
//!   its [`CqId`], a number.
//! - The channel outlives its CQs: each holds a share of it, dropped after
//!   the CQ is destroyed.

use crate::cq::{CompletionQueue, PolledWc};
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ffi;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// How many events of one CQ are acknowledged together. Each
/// `ibv_ack_cq_events` takes the CQ's mutex in libibverbs; the count left
/// is acknowledged when the CQ is dropped.
const ACK_BATCH: u32 = 32;

/// Which CQ an event names: the kernel's handle of the CQ
/// (`struct ibv_cq`'s `handle`), unique among the live CQs of a context.
/// [`CompletionQueue::id`] gives a CQ's; a [`CqEvent`] and an
/// [`AsyncEvent::CqErr`](crate::AsyncEvent::CqErr) carry one.
///
/// A number, not a pointer: an id kept after its CQ was dropped reaches
/// nothing (the kernel may give it to a later CQ).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqId(pub(crate) u32);

impl CqId {
    /// The kernel handle.
    pub const fn handle(self) -> u32 {
        self.0
    }

    /// The id of a CQ.
    ///
    /// # Safety
    /// `cq` is a live CQ.
    pub(crate) unsafe fn of(cq: *mut ffi::ibv_cq) -> Self {
        // SAFETY: the caller's promise.
        CqId(unsafe { (*cq).handle })
    }
}

impl fmt::Debug for CqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CqId({})", self.0)
    }
}

/// A completion event read from a [`CompletionChannel`]: the CQ it names
/// had a completion after it was armed.
///
/// The CQ is no longer armed: poll it, then arm it again
/// ([`CompletionQueue::req_notify`]) and poll once more before waiting for
/// the next event (a completion that came between the poll and the arm
/// raises none). The event has been counted for acknowledgement already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "an event means its CQ has completions to poll and is no longer armed"]
pub struct CqEvent {
    cq: CqId,
}

impl CqEvent {
    /// The CQ the event is for: compare with [`CompletionQueue::id`].
    pub fn cq(&self) -> CqId {
        self.cq
    }
}

/// A completion channel (`struct ibv_comp_channel`,
/// `ibv_create_comp_channel(3)`): the file descriptor on which the CQs
/// created on it raise their completion events.
///
/// A cheap, cloneable handle, shareable by several CQs of one context
/// ([`CompletionQueue::with_channel`]); each CQ keeps it alive, and it is
/// destroyed (`ibv_destroy_comp_channel`) after its last CQ and handle.
///
/// Its fd is in non-blocking mode (`O_NONBLOCK`), for `epoll` and async
/// runtimes ([`AsFd`], [`AsRawFd`]): wait for it to be readable, then take
/// the events with [`try_get_event`](Self::try_get_event). Or block, with
/// a timeout, in [`get_event`](Self::get_event). [`CompletionQueue::wait`]
/// and [`QpEx::post_and_wait`](crate::QpEx::post_and_wait) on a CQ with a
/// channel sleep on it by themselves.
///
/// Events are read by this crate only, and every one is acknowledged: in
/// batches while its CQ lives, the rest when the CQ is dropped. Several
/// threads may wait on one channel at once (each for its own CQ, or for
/// any event): one sleeps in `poll(2)` and hands the others what it reads.
/// An event loop that waits on the fd itself should be the channel's only
/// reader: an event that a [`CompletionQueue::wait`] on another thread
/// reads first is delivered (to the next [`try_get_event`](Self::try_get_event))
/// without the fd becoming readable again.
///
/// ```no_run
/// use mlx5dv::*;
/// use std::time::Duration;
///
/// # fn main() -> Result<()> {
/// let ctx = Context::open("rxe0")?;
/// let channel = CompletionChannel::new(&ctx)?;
/// let mut send_cq = CompletionQueue::with_channel(&ctx, 64, &channel)?;
/// let mut recv_cq = CompletionQueue::with_channel(&ctx, 64, &channel)?;
/// // ... QPs on them, work requests posted ...
/// send_cq.req_notify(false)?;
/// recv_cq.req_notify(false)?;
/// let event = channel.get_event(Duration::from_secs(1))?;
/// let cq = if event.cq() == send_cq.id() { &mut send_cq } else { &mut recv_cq };
/// cq.req_notify(false)?; // arm again, then poll: nothing is missed
/// cq.poll_each(16, |wc| println!("{}: {}", wc.wr_id(), wc.status()))?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
#[must_use]
pub struct CompletionChannel(Arc<ChannelInner>);

struct ChannelInner {
    chan: NonNull<ffi::ibv_comp_channel>,
    state: Mutex<State>,
    /// Signalled when the reading thread has read events, or stopped
    /// reading.
    read: Condvar,
    /// Closed after the channel is destroyed (`Drop` runs first).
    ctx: Context,
}

/// What the channel knows of its CQs, behind its lock.
#[derive(Default)]
struct State {
    /// The CQs on the channel that this crate created and has not begun to
    /// destroy, by the address of their `struct ibv_cq`.
    cqs: HashMap<usize, Slot>,
    /// A thread is in `poll(2)` on the fd; the others wait on `read`.
    reading: bool,
    /// CQs with an event not yet taken by `get_event`, oldest first; each
    /// at most once (`Slot::queued`).
    ready: VecDeque<usize>,
}

struct Slot {
    id: CqId,
    /// Events read and not yet acknowledged.
    unacked: u32,
    /// An event came since the CQ was last armed or its event taken.
    notified: bool,
    /// The CQ is in `State::ready`.
    queued: bool,
}

// SAFETY: the channel's fd is read only under `state`'s lock; the channel
// is destroyed by the last owner; the CQ addresses in the registry are
// dereferenced (by `ibv_get_cq_event` and `ibv_ack_cq_events`) only under
// that lock, while the CQ is registered or its destroy waits (see the
// module's docs).
unsafe impl Send for ChannelInner {}
// SAFETY: as above.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // SAFETY: created by this crate; every CQ on it holds this Arc, so
        // none is left; destroyed once.
        let rc = unsafe { ffi::ibv_destroy_comp_channel(self.chan.as_ptr()) };
        crate::report_destroy_failure("ibv_destroy_comp_channel", rc, self.ctx.name());
    }
}

impl CompletionChannel {
    /// Creates a completion channel on `ctx` (`ibv_create_comp_channel(3)`)
    /// and puts its fd in non-blocking mode.
    pub fn new(ctx: &Context) -> Result<Self> {
        // SAFETY: the context is open; NULL is handled.
        let chan = unsafe { ffi::ibv_create_comp_channel(ctx.as_ptr()) };
        let chan = NonNull::new(chan)
            .ok_or_else(|| Error::last_os("ibv_create_comp_channel", ctx.name()))?;
        let this = CompletionChannel(Arc::new(ChannelInner {
            chan,
            state: Mutex::new(State::default()),
            read: Condvar::new(),
            ctx: ctx.clone(),
        }));
        set_nonblocking(this.as_fd(), || {
            format!("the completion channel of {}", ctx.name())
        })?;
        Ok(this)
    }

    /// The context the channel belongs to.
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    /// The raw channel, valid while this handle lives. Its events are read
    /// by this crate: reading them elsewhere, or creating CQs on it other
    /// than with [`CompletionQueue::with_channel`], breaks the count of
    /// acknowledgements that `ibv_destroy_cq` waits for.
    pub fn as_ptr(&self) -> *mut ffi::ibv_comp_channel {
        self.0.chan.as_ptr()
    }

    /// Waits up to `timeout` for an event of any CQ on the channel
    /// (`poll(2)` on its fd, then `ibv_get_cq_event(3)`), without
    /// spinning. [`Error::Timeout`] when none came.
    pub fn get_event(&self, timeout: Duration) -> Result<CqEvent> {
        let start = Instant::now();
        match self
            .0
            .wait_for(start.checked_add(timeout), State::pop_ready)?
        {
            Some(cq) => Ok(CqEvent { cq }),
            None => Err(Error::Timeout {
                what: format!("a completion event on {}", self.describe()),
                waited_ms: start.elapsed().as_millis() as u64,
            }),
        }
    }

    /// The next event, if one is waiting; `Ok(None)` at once otherwise (or
    /// while another thread is reading the channel: it hands the events it
    /// reads to the next call).
    ///
    /// It reads every event the fd holds at once: after the fd was found
    /// readable, call it until it returns `None` before waiting for the fd
    /// again (an edge-triggered `epoll`, as async runtimes use, reports
    /// only new readiness).
    pub fn try_get_event(&self) -> Result<Option<CqEvent>> {
        let cq = self.0.wait_for(Some(Instant::now()), State::pop_ready)?;
        Ok(cq.map(|cq| CqEvent { cq }))
    }

    /// How many CQs are on the channel.
    pub fn cq_count(&self) -> usize {
        self.0.lock().cqs.len()
    }

    fn describe(&self) -> String {
        format!("the completion channel of {}", self.0.ctx.name())
    }

    /// Registers a CQ just created on this channel (before anything can
    /// arm it).
    ///
    /// # Safety
    /// `cq` is a live CQ created on this channel, which calls
    /// [`detach`](Self::detach) before it is destroyed.
    pub(crate) unsafe fn attach(&self, cq: NonNull<ffi::ibv_cq>) {
        // SAFETY: the caller's promise.
        let id = unsafe { CqId::of(cq.as_ptr()) };
        self.0.lock().cqs.insert(
            cq.as_ptr() as usize,
            Slot {
                id,
                unacked: 0,
                notified: false,
                queued: false,
            },
        );
    }

    /// Takes a CQ off the registry and acknowledges its events: called
    /// right before the CQ is destroyed. An event read after this is
    /// acknowledged by its reader.
    ///
    /// # Safety
    /// `cq` is live, attached to this channel, and destroyed next.
    pub(crate) unsafe fn detach(&self, cq: NonNull<ffi::ibv_cq>) {
        let key = cq.as_ptr() as usize;
        let mut st = self.0.lock();
        if let Some(slot) = st.cqs.remove(&key) {
            if slot.queued {
                st.ready.retain(|&k| k != key);
            }
            if slot.unacked > 0 {
                // SAFETY: the caller's promise: the CQ is live; these are
                // the events read for it and not yet acknowledged.
                unsafe { ffi::ibv_ack_cq_events(cq.as_ptr(), slot.unacked) };
            }
        }
    }

    /// Arms `cq` for its next completion, or its next solicited one
    /// (`ibv_req_notify_cq(3)`); an event that came before is forgotten
    /// (the caller polls after arming).
    ///
    /// # Safety
    /// `cq` is live and attached to this channel.
    pub(crate) unsafe fn arm(&self, cq: NonNull<ffi::ibv_cq>, solicited_only: bool) -> Result<()> {
        if let Some(slot) = self.0.lock().cqs.get_mut(&(cq.as_ptr() as usize)) {
            slot.notified = false;
        }
        // SAFETY: the caller's promise.
        let rc = unsafe { ffi::ibv_req_notify_cq(cq.as_ptr(), i32::from(solicited_only)) };
        crate::error::check(rc, "ibv_req_notify_cq", || {
            format!(
                "{} CQ on {}",
                if solicited_only {
                    "solicited-only arm of a"
                } else {
                    "arm of a"
                },
                self.0.ctx.name()
            )
        })
    }

    /// Sleeps until `cq` has an event or `deadline` passes; returns whether
    /// it had one (and takes it).
    pub(crate) fn wait_notified(
        &self,
        cq: NonNull<ffi::ibv_cq>,
        deadline: Option<Instant>,
    ) -> Result<bool> {
        let key = cq.as_ptr() as usize;
        let woken = self.0.wait_for(deadline, |st| {
            let slot = st.cqs.get_mut(&key)?;
            std::mem::take(&mut slot.notified).then_some(())
        })?;
        Ok(woken.is_some())
    }
}

impl State {
    /// Counts an event read for `cq`, or acknowledges it at once when `cq`
    /// is not registered (its destroy is under way and waits for it).
    ///
    /// # Safety
    /// `cq` was just returned by `ibv_get_cq_event` on this channel, under
    /// the channel's lock (still held).
    unsafe fn record(&mut self, cq: *mut ffi::ibv_cq) {
        let key = cq as usize;
        let Some(slot) = self.cqs.get_mut(&key) else {
            // SAFETY: the kernel names only CQs of this channel, and
            // libibverbs' ibv_destroy_cq waits until this event is
            // acknowledged: the CQ is live until then.
            unsafe { ffi::ibv_ack_cq_events(cq, 1) };
            return;
        };
        slot.unacked += 1;
        if slot.unacked >= ACK_BATCH {
            // SAFETY: registered, so live (it leaves the registry, under
            // this lock, before its destroy).
            unsafe { ffi::ibv_ack_cq_events(cq, slot.unacked) };
            slot.unacked = 0;
        }
        slot.notified = true;
        if !slot.queued {
            slot.queued = true;
            self.ready.push_back(key);
        }
    }

    /// Takes the oldest event not yet taken.
    fn pop_ready(&mut self) -> Option<CqId> {
        while let Some(key) = self.ready.pop_front() {
            if let Some(slot) = self.cqs.get_mut(&key) {
                slot.queued = false;
                if std::mem::take(&mut slot.notified) {
                    return Some(slot.id);
                }
            }
        }
        None
    }
}

impl ChannelInner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update of the state is complete before anything that can
        // panic: a poisoned lock still guards a consistent state.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the channel is live while `self` is; its fd stays open
        // until it is destroyed.
        unsafe { BorrowedFd::borrow_raw((*self.chan.as_ptr()).fd) }
    }

    /// Reads every event waiting on the fd (non-blocking) into `st`.
    fn read_events(&self, st: &mut State) -> Result<()> {
        loop {
            let mut cq = std::ptr::null_mut();
            let mut cq_context = std::ptr::null_mut();
            clear_errno();
            // SAFETY: the channel is live; its fd is non-blocking; the lock
            // is held (`st`), so this thread alone reads it; the CQ it
            // returns is live until its event is acknowledged.
            let rc = unsafe { ffi::ibv_get_cq_event(self.chan.as_ptr(), &mut cq, &mut cq_context) };
            if rc == 0 {
                // SAFETY: just returned by ibv_get_cq_event, lock held.
                unsafe { st.record(cq) };
                continue;
            }
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EAGAIN) => return Ok(()),
                Some(libc::EINTR) => continue,
                _ => {
                    return Err(Error::last_os(
                        "ibv_get_cq_event",
                        format!("the completion channel of {}", self.ctx.name()),
                    ))
                }
            }
        }
    }

    /// Waits until `done` finds what it looks for in the state, or
    /// `deadline` passes (`None`: never). One thread at a time sleeps in
    /// `poll(2)` on the fd and reads what comes; the others wait for it
    /// on `read`. Returns `done`'s finding, `None` on timeout.
    fn wait_for<T>(
        &self,
        deadline: Option<Instant>,
        mut done: impl FnMut(&mut State) -> Option<T>,
    ) -> Result<Option<T>> {
        let mut st = self.lock();
        loop {
            if let Some(t) = done(&mut st) {
                return Ok(Some(t));
            }
            let now = Instant::now();
            let expired = deadline.is_some_and(|d| now >= d);
            if st.reading {
                if expired {
                    return Ok(None);
                }
                st = match deadline {
                    None => self.read.wait(st).unwrap_or_else(PoisonError::into_inner),
                    Some(d) => {
                        self.read
                            .wait_timeout(st, d - now)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0
                    }
                };
                continue;
            }
            if expired {
                // A last look at what the kernel holds, without sleeping.
                let read = self.read_events(&mut st);
                self.read.notify_all();
                read?;
                return Ok(done(&mut st));
            }
            st.reading = true;
            drop(st);
            let polled = poll_readable(self.fd(), deadline);
            st = self.lock();
            st.reading = false;
            let read = match polled {
                Ok(true) => self.read_events(&mut st),
                Ok(false) => Ok(()),
                Err(errno) => Err(Error::verbs(
                    "poll",
                    errno,
                    format!("the completion channel of {}", self.ctx.name()),
                )),
            };
            self.read.notify_all();
            read?;
        }
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.fd()
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.0.fd().as_raw_fd()
    }
}

impl fmt::Debug for CompletionChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("device", &self.0.ctx.name())
            .field("fd", &self.as_raw_fd())
            .field("cqs", &self.cq_count())
            .finish()
    }
}

impl CompletionQueue {
    /// Creates a CQ with room for at least `cqe` completions whose events
    /// go to `channel` (`ibv_create_cq_ex(3)` with its `channel`). The CQ
    /// holds the channel alive.
    ///
    /// [`wait`](Self::wait), [`wait_into`](Self::wait_into) and
    /// [`QpEx::post_and_wait`](crate::QpEx::post_and_wait) on it sleep in
    /// the kernel (`poll(2)` on the channel) when the CQ is empty, instead
    /// of spinning: they poll, arm the CQ, poll again and only then sleep,
    /// so no completion is missed. `channel` must be of the same context
    /// ([`Error::InvalidArgument`] otherwise).
    pub fn with_channel(ctx: &Context, cqe: u32, channel: &CompletionChannel) -> Result<Self> {
        if channel.context().as_ptr() != ctx.as_ptr() {
            return Err(Error::InvalidArgument(format!(
                "a CQ on {} cannot use a completion channel of another context ({})",
                ctx.name(),
                channel.context().name()
            )));
        }
        CompletionQueue::create(ctx, cqe, Some(channel))
    }

    /// The CQ's id, which the events naming it carry ([`CqEvent::cq`],
    /// [`AsyncEvent::CqErr`](crate::AsyncEvent::CqErr)).
    pub fn id(&self) -> CqId {
        // SAFETY: the CQ is live while `self` is.
        unsafe { CqId::of(self.raw_cq().as_ptr()) }
    }

    /// Arms the CQ: its next completion (with `solicited_only`, its next
    /// solicited one: a receive of a send with
    /// [`SendFlags::SOLICITED`](crate::SendFlags::SOLICITED), or any
    /// failed completion) raises one event on its channel
    /// (`ibv_req_notify_cq(3)`).
    ///
    /// Completions already in the CQ raise none: arm, then poll, then wait
    /// for the event ([`CompletionChannel::get_event`]). Refused
    /// ([`Error::InvalidArgument`]) for a CQ without a channel.
    pub fn req_notify(&mut self, solicited_only: bool) -> Result<()> {
        let Some(channel) = self.channel() else {
            return Err(self.no_channel("req_notify"));
        };
        // SAFETY: the CQ is live and was attached to its channel when made.
        unsafe { channel.arm(self.raw_cq(), solicited_only) }
    }

    /// One step of an event loop over a CQ with a channel (on `epoll`, an
    /// async runtime, or [`CompletionChannel::get_event`]), free of the
    /// race between polling and arming: polls up to `max` completions into
    /// `f` ([`poll_each`](Self::poll_each)); when there were none, arms the
    /// CQ for its next completion and polls once more, since a completion
    /// that came before the arm raises no event.
    ///
    /// Returns how many completions it handed over. `Ok(0)` means the CQ is
    /// empty and armed: wait for the channel (its fd readable, then
    /// [`CompletionChannel::try_get_event`] until `None`), and call again.
    /// Refused before any C call on a CQ without a channel
    /// ([`Error::InvalidArgument`]) and for `max == 0`
    /// ([`Error::OutOfRange`]: nothing could be handed over, and the CQ
    /// would be armed for a completion left unpolled).
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # use std::time::Duration;
    /// # fn demo(cq: &mut CompletionQueue, channel: &CompletionChannel) -> Result<()> {
    /// loop {
    ///     let n = cq.poll_or_arm(16, |wc| println!("{}: {}", wc.wr_id(), wc.status()))?;
    ///     if n > 0 {
    ///         break;
    ///     }
    ///     // Asleep until the CQ's event (an event loop would wait for the fd).
    ///     match channel.get_event(Duration::from_secs(1)) {
    ///         Ok(_) | Err(Error::Timeout { .. }) => {}
    ///         Err(e) => return Err(e),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn poll_or_arm<F>(&mut self, max: usize, mut f: F) -> Result<usize>
    where
        F: FnMut(&PolledWc<'_>),
    {
        if max == 0 {
            return Err(Error::OutOfRange {
                what: "poll_or_arm max",
                value: 0,
                limit: "at least 1".into(),
            });
        }
        if self.channel().is_none() {
            return Err(self.no_channel("poll_or_arm"));
        }
        let n = self.poll_each(max, &mut f)?;
        if n > 0 {
            return Ok(n);
        }
        self.req_notify(false)?;
        self.poll_each(max, f)
    }

    /// The error of a channel operation asked of a CQ without a channel.
    fn no_channel(&self, what: &str) -> Error {
        Error::InvalidArgument(format!(
            "{what} on a CQ of {} that has no completion channel \
             (create it with CompletionQueue::with_channel)",
            self.context().name()
        ))
    }

    /// What a wait does on a CQ with a channel when a poll found nothing:
    /// arms the CQ, polls once more with `poll` (a completion that came
    /// before the arm raises no event) and, when that finds nothing
    /// either, sleeps until the CQ's event or `deadline`. Returns what the
    /// second poll returned (0 after a sleep, whether an event came or
    /// not: the caller polls again and checks its time).
    #[cold]
    #[inline(never)]
    pub(crate) fn sleep_on_channel<F>(
        &mut self,
        deadline: Option<Instant>,
        poll: F,
    ) -> Result<usize>
    where
        F: FnOnce(&mut CompletionQueue) -> Result<usize>,
    {
        let Some(channel) = self.channel().cloned() else {
            return Ok(0);
        };
        let cq = self.raw_cq();
        // SAFETY: the CQ is live and was attached to its channel when made.
        unsafe { channel.arm(cq, false) }?;
        let k = poll(self)?;
        if k > 0 {
            return Ok(k);
        }
        channel.wait_notified(cq, deadline)?;
        Ok(0)
    }

    /// The CQ as a `struct ibv_cq`.
    pub(crate) fn raw_cq(&self) -> NonNull<ffi::ibv_cq> {
        let cq = NonNull::new(self.as_ptr()).expect("a CompletionQueue's CQ is not NULL");
        cq_of(cq)
    }
}

/// An extended CQ as its `struct ibv_cq` (`ibv_cq_ex_to_cq`).
pub(crate) fn cq_of(cq: NonNull<ffi::ibv_cq_ex>) -> NonNull<ffi::ibv_cq> {
    // SAFETY: `ibv_cq_ex_to_cq` converts the pointer and reads nothing.
    let raw = unsafe { ffi::ibv_cq_ex_to_cq(cq.as_ptr()) };
    NonNull::new(raw).unwrap_or(cq.cast())
}

/// Clears `errno`, so that a C call that fails without setting it is not
/// taken for the failure before it.
pub(crate) fn clear_errno() {
    // SAFETY: `__errno_location` returns this thread's errno.
    unsafe { *libc::__errno_location() = 0 };
}

/// Puts `fd` in non-blocking mode (`O_NONBLOCK`, `fcntl(2)`).
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>, what: impl FnOnce() -> String) -> Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: `fd` is open (borrowed); F_GETFL takes no argument.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    let rc = if flags < 0 {
        flags
    } else {
        // SAFETY: as above; F_SETFL takes the flags.
        unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) }
    };
    if rc < 0 {
        return Err(Error::last_os("fcntl", format!("O_NONBLOCK on {}", what())));
    }
    Ok(())
}

/// Sleeps in `poll(2)` until `fd` is readable or `deadline` passes
/// (`None`: never); returns whether it is readable (`false` on timeout and
/// on `EINTR`), or the errno of a failed `poll`.
pub(crate) fn poll_readable(
    fd: BorrowedFd<'_>,
    deadline: Option<Instant>,
) -> std::result::Result<bool, i32> {
    let timeout_ms = match deadline {
        None => -1,
        // Rounded up: a wait never ends before its deadline.
        Some(d) => timeout_ms(d.saturating_duration_since(Instant::now())),
    };
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid, writable pollfd; the fd is open (borrowed).
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if rc < 0 {
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        return if errno == libc::EINTR {
            Ok(false)
        } else {
            Err(errno)
        };
    }
    Ok(rc > 0)
}

/// `left` as a `poll(2)` timeout: whole milliseconds, rounded up, at most
/// `i32::MAX`.
fn timeout_ms(left: Duration) -> i32 {
    i32::try_from(left.as_nanos().div_ceil(1_000_000)).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::undocumented_unsafe_blocks)]

    use super::*;
    use std::os::fd::FromRawFd;

    #[test]
    fn poll_timeouts_round_up_and_saturate() {
        assert_eq!(timeout_ms(Duration::ZERO), 0);
        assert_eq!(timeout_ms(Duration::from_nanos(1)), 1);
        assert_eq!(timeout_ms(Duration::from_micros(1500)), 2);
        assert_eq!(timeout_ms(Duration::from_millis(7)), 7);
        assert_eq!(timeout_ms(Duration::from_secs(u64::MAX)), i32::MAX);
    }

    #[test]
    fn poll_readable_sleeps_until_the_deadline_then_sees_data() {
        let mut fds = [0; 2];
        // SAFETY: a writable array of two fds.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both were just opened and are owned here.
        let (r, w) = unsafe {
            (
                std::os::fd::OwnedFd::from_raw_fd(fds[0]),
                std::os::fd::OwnedFd::from_raw_fd(fds[1]),
            )
        };
        set_nonblocking(r.as_fd(), || "a pipe".into()).unwrap();
        let start = Instant::now();
        let ready = poll_readable(r.as_fd(), Some(start + Duration::from_millis(50))).unwrap();
        assert!(!ready);
        assert!(start.elapsed() >= Duration::from_millis(50));
        // SAFETY: one byte from a valid buffer into an open pipe.
        assert_eq!(
            unsafe { libc::write(w.as_raw_fd(), b"x".as_ptr().cast(), 1) },
            1
        );
        assert!(poll_readable(r.as_fd(), None).unwrap());
        // SAFETY: F_GETFL on an open fd.
        let flags = unsafe { libc::fcntl(r.as_raw_fd(), libc::F_GETFL) };
        assert_ne!(flags & libc::O_NONBLOCK, 0);
    }

    /// Provider entries that count their calls and find the CQ empty.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    unsafe extern "C" fn start_poll(_: *mut ffi::ibv_cq_ex, _: *mut ffi::ibv_poll_cq_attr) -> i32 {
        CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        libc::ENOENT
    }
    unsafe extern "C" fn next_poll(_: *mut ffi::ibv_cq_ex) -> i32 {
        libc::ENOENT
    }
    unsafe extern "C" fn end_poll(_: *mut ffi::ibv_cq_ex) {}
    unsafe extern "C" fn read_u32(_: *mut ffi::ibv_cq_ex) -> u32 {
        0
    }

    #[test]
    fn channel_operations_on_a_cq_without_one_are_refused_before_any_c_call() {
        let mut ctx: Box<ffi::ibv_context> = Box::default();
        let context = Context::fake(NonNull::from(&mut *ctx), "fake0", false);
        let mut raw = Box::new(ffi::ibv_cq_ex {
            context: &mut *ctx,
            cqe: 8,
            start_poll: Some(start_poll),
            next_poll: Some(next_poll),
            end_poll: Some(end_poll),
            read_opcode: Some(read_u32),
            read_vendor_err: Some(read_u32),
            read_byte_len: Some(read_u32),
            read_imm_data: Some(read_u32),
            read_qp_num: Some(read_u32),
            read_wc_flags: Some(read_u32),
            ..Default::default()
        });
        let mut cq =
            unsafe { CompletionQueue::from_raw(&context, NonNull::from(&mut *raw)) }.unwrap();
        assert!(cq.channel().is_none());
        let e = cq.req_notify(false).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("req_notify") && m.contains("fake0")),
            "{e}"
        );
        let e = cq.poll_or_arm(4, |_| {}).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains("poll_or_arm")),
            "{e}"
        );
        let e = cq.poll_or_arm(0, |_| {}).unwrap_err();
        assert!(matches!(e, Error::OutOfRange { value: 0, .. }), "{e}");
        assert_eq!(
            CALLS.load(std::sync::atomic::Ordering::Relaxed),
            0,
            "no poll was started"
        );
        // A wait on it polls (and backs off) without touching a channel.
        let e = cq.wait(1, Duration::from_millis(20)).unwrap_err();
        assert!(matches!(e, Error::Timeout { .. }), "{e}");
        assert!(CALLS.load(std::sync::atomic::Ordering::Relaxed) > 0);
        drop(cq);
    }

    #[test]
    fn the_oldest_event_is_taken_first_and_each_cq_is_queued_once() {
        let mut st = State::default();
        for (key, id) in [(0x1000, 7), (0x2000, 9)] {
            st.cqs.insert(
                key,
                Slot {
                    id: CqId(id),
                    unacked: 0,
                    notified: false,
                    queued: false,
                },
            );
        }
        // As `record` marks them (without the C calls).
        for key in [0x2000usize, 0x1000, 0x2000] {
            let slot = st.cqs.get_mut(&key).unwrap();
            slot.notified = true;
            if !slot.queued {
                slot.queued = true;
                st.ready.push_back(key);
            }
        }
        assert_eq!(st.ready.len(), 2);
        assert_eq!(st.pop_ready(), Some(CqId(9)));
        assert_eq!(st.pop_ready(), Some(CqId(7)));
        assert_eq!(st.pop_ready(), None);
    }
}
