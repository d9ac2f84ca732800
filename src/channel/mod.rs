//! Completion channels (`ibv_create_comp_channel(3)`): waiting for
//! completions asleep in the kernel instead of on a core.
//!
//! A CQ created on a channel ([`CompletionQueue::with_channel`](crate::CompletionQueue::with_channel)) and armed
//! ([`CompletionQueue::req_notify`](crate::CompletionQueue::req_notify), `ibv_req_notify_cq(3)`) raises one
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
//!
//! Who learns of an event, and how (the liveness rule: a wait ends soon
//! after its own CQ's event, whoever reads the fd):
//! - Each registered CQ counts the events read for it (`Slot::events`,
//!   only ever growing). A wait for one CQ (blocking or async) notes the
//!   count when it arms the CQ and ends once the count has moved: reading
//!   an event never consumes another waiter's wakeup, whichever thread or
//!   task read it and whoever else takes it with `get_event`.
//! - [`CompletionChannel::get_event`] and `try_get_event` take events from
//!   a queue of their own (`State::ready`, `Slot::notified`): what they
//!   take, no CQ wait misses.

#[cfg(feature = "tokio")]
mod async_fd;
mod ops;
#[cfg(feature = "tokio")]
mod registration;
#[cfg(all(feature = "tokio", feature = "rdma-cm"))]
pub(crate) use registration::{RawChannelFd, RegisterError, Registration, Registrations};
#[cfg(test)]
mod tests;

use crate::fd::{poll_readable_at, readable_now, set_nonblocking};

use crate::clock::Mono;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ffi;
use ops::{ChannelOps, VERBS};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::Waker;
use std::time::Duration;

/// How many events of one CQ are acknowledged together. Each
/// `ibv_ack_cq_events` takes the CQ's mutex in libibverbs; the count left
/// is acknowledged when the CQ is dropped.
const ACK_BATCH: u32 = 32;

/// Which CQ an event names: the kernel's handle of the CQ
/// (`struct ibv_cq`'s `handle`), unique among the live CQs of a context.
/// [`CompletionQueue::id`](crate::CompletionQueue::id) gives a CQ's; a [`CqEvent`] and an
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
/// ([`CompletionQueue::req_notify`](crate::CompletionQueue::req_notify)) and poll once more before waiting for
/// the next event (a completion that came between the poll and the arm
/// raises none). The event has been counted for acknowledgement already.
///
/// Whoever read an event from the fd, `get_event` names its CQ: once for
/// all the events the CQ had since `get_event` last named it, and even
/// when a wait for that CQ on another thread
/// ([`CompletionQueue::wait`](crate::CompletionQueue::wait)) woke for them
/// too and has polled the completions since: an event loop then finds the
/// CQ empty, and arms it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use = "an event means its CQ has completions to poll and is no longer armed"]
pub struct CqEvent {
    cq: CqId,
}

impl CqEvent {
    /// The CQ the event is for: compare with [`CompletionQueue::id`](crate::CompletionQueue::id).
    pub fn cq(&self) -> CqId {
        self.cq
    }
}

/// A completion channel (`struct ibv_comp_channel`,
/// `ibv_create_comp_channel(3)`): the file descriptor on which the CQs
/// created on it raise their completion events.
///
/// A cheap, cloneable handle, shareable by several CQs of one context
/// ([`CompletionQueue::with_channel`](crate::CompletionQueue::with_channel)); each CQ keeps it alive, and it is
/// destroyed (`ibv_destroy_comp_channel`) after its last CQ and handle.
///
/// Its fd is in non-blocking mode (`O_NONBLOCK`), for `epoll` and async
/// runtimes ([`AsFd`], [`AsRawFd`]): wait for it to be readable, then take
/// the events with [`try_get_event`](Self::try_get_event). Or block, with
/// a timeout, in [`get_event`](Self::get_event). [`CompletionQueue::wait`](crate::CompletionQueue::wait)
/// and [`QpEx::post_and_wait`](crate::QpEx::post_and_wait) on a CQ with a
/// channel sleep on it by themselves.
///
/// Events are read by this crate only, and every one is acknowledged: in
/// batches while its CQ lives, the rest when the CQ is dropped. Several
/// threads may wait on one channel at once (each for its own CQ, or for
/// any event): one sleeps in `poll(2)` and hands the others what it reads.
/// An event loop that waits on the fd itself should be the channel's only
/// reader: an event that a [`CompletionQueue::wait`](crate::CompletionQueue::wait) on another thread
/// reads first is delivered (to the next [`try_get_event`](Self::try_get_event))
/// without the fd becoming readable again.
///
/// On tokio, the `tokio` feature does this (`CompletionQueue::wait_async`,
/// `aio::AsyncQp`: the fd registered with each runtime that waits on the
/// channel). With another
/// runtime, register the fd once for the channel (it is `AsRawFd`), and for each
/// CQ loop on [`CompletionQueue::poll_or_arm`](crate::CompletionQueue::poll_or_arm): when it returns 0 the CQ is
/// armed; await readability, take the events with
/// [`try_get_event`](Self::try_get_event) until `None`, clear the
/// readiness, and poll again.
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
    /// The C calls on the channel and its events: libibverbs' (`VERBS`),
    /// or a unit test's fakes.
    ops: &'static ChannelOps,
    state: Mutex<State>,
    /// Signalled when the reading thread has read events, or stopped
    /// reading.
    read: Condvar,
    /// Closed after the channel is destroyed (`Drop` runs first).
    ctx: Context,
}

/// The hasher of the CQ registry's keys, addresses of `struct ibv_cq`
/// that libibverbs allocated: a multiply and a shift (Fibonacci hashing)
/// instead of SipHash, which cost each wait's three lookups about a hundred
/// instructions apiece. The keys are the crate's own pointers, never a
/// peer's input: nothing to harden against. Made for the registry's one
/// `usize` key: a key written in several parts would keep only its last
/// `usize` (its bytes are folded in, but not mixed as well).
#[derive(Default, Clone, Copy)]
struct BuildAddrHasher;

impl std::hash::BuildHasher for BuildAddrHasher {
    type Hasher = AddrHasher;
    fn build_hasher(&self) -> AddrHasher {
        AddrHasher(0)
    }
}

/// See [`BuildAddrHasher`].
struct AddrHasher(u64);

impl std::hash::Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        // The top bits of the product carry every bit of the address;
        // hashbrown takes its bucket from the low bits and its tag from
        // the top 7: rotate so that both see well-mixed bits.
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(26)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = n as u64;
    }
}

/// What the channel knows of its CQs, behind its lock.
#[derive(Default)]
struct State {
    /// The CQs on the channel that this crate created and has not begun to
    /// destroy, by the address of their `struct ibv_cq`.
    cqs: HashMap<usize, Slot, BuildAddrHasher>,
    /// A thread is in `poll(2)` on the fd; the others wait on `read`.
    reading: bool,
    /// CQs with an event not yet taken by `get_event`, oldest first; each
    /// at most once (`Slot::queued`).
    ready: VecDeque<usize>,
    /// The channel's registrations with the reactors of the tokio runtimes
    /// that waited on it, one a runtime, each made by the first async wait
    /// on that runtime; dropped before the channel is destroyed (its fd
    /// closed).
    #[cfg(feature = "tokio")]
    reactor: registration::Registrations,
}

struct Slot {
    id: CqId,
    /// Events read and not yet acknowledged.
    unacked: u32,
    /// Events read for the CQ, ever: a CQ wait ends when it moves past the
    /// count noted when the wait armed the CQ.
    events: u64,
    /// An event came since `get_event` last took one of this CQ (the "any
    /// event" readers' queue, not the CQ waits').
    notified: bool,
    /// The CQ is in `State::ready`.
    queued: bool,
    /// Async waits for this CQ's event, woken when one is read.
    wakers: Vec<Waker>,
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
        // The reactor forgets the fd before it is closed (a later fd with
        // the same number must not be deregistered in its place).
        #[cfg(feature = "tokio")]
        self.lock().reactor.clear();
        // SAFETY: created by this crate; every CQ on it holds this Arc, so
        // none is left; destroyed once.
        let rc = unsafe { (self.ops.destroy)(self.chan.as_ptr()) };
        crate::error::report_destroy_failure("ibv_destroy_comp_channel", rc, self.ctx.name());
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
            ops: &VERBS,
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
    /// than with [`CompletionQueue::with_channel`](crate::CompletionQueue::with_channel), breaks the count of
    /// acknowledgements that `ibv_destroy_cq` waits for.
    pub fn as_ptr(&self) -> *mut ffi::ibv_comp_channel {
        self.0.chan.as_ptr()
    }

    /// Waits up to `timeout` for an event of any CQ on the channel
    /// (`poll(2)` on its fd, then `ibv_get_cq_event(3)`), without
    /// spinning. [`Error::Timeout`] when none came.
    pub fn get_event(&self, timeout: Duration) -> Result<CqEvent> {
        let start = Mono::now();
        match self.0.wait_for(start.after(timeout), State::pop_ready)? {
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
        let cq = self.0.wait_for(Some(Mono::now()), State::pop_ready)?;
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
                events: 0,
                notified: false,
                queued: false,
                wakers: Vec::new(),
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
                unsafe { (self.0.ops.ack)(cq.as_ptr(), slot.unacked) };
            }
        }
    }

    /// Arms `cq` for its next completion, or its next solicited one
    /// (`ibv_req_notify_cq(3)`). Returns the CQ's count of events before
    /// the arm, which a wait for its event passes to
    /// [`wait_notified`](Self::wait_notified). An event that came before
    /// stays queued for `get_event`: a re-arm by the CQ's own waiter never
    /// takes an event from an "any event" reader.
    ///
    /// # Safety
    /// `cq` is live and attached to this channel.
    pub(crate) unsafe fn arm(
        &self,
        cq: NonNull<ffi::ibv_cq>,
        solicited_only: bool,
    ) -> Result<EventCount> {
        let seen = self.0.lock().note_arm(cq.as_ptr() as usize);
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
        })?;
        Ok(seen)
    }

    /// Arms `cq` with `arm`, a doorbell of the caller's own (the direct
    /// path's, which keeps the CQ's consumer index itself), under the
    /// channel's lock: `arm` is given the CQ's count of events read, which
    /// the provider's arm sequence number follows (libmlx5 counts one per
    /// `ibv_get_cq_event`, and those are read under this lock). Returns
    /// the count for [`wait_notified`](Self::wait_notified).
    pub(crate) fn arm_with(&self, cq: NonNull<ffi::ibv_cq>, arm: impl FnOnce(u64)) -> EventCount {
        let st = self.0.lock();
        let seen = st.note_arm(cq.as_ptr() as usize);
        arm(seen.0);
        seen
    }

    /// Sleeps until `cq` has had an event since `armed` (what
    /// [`arm`](Self::arm) returned) or `deadline` passes; returns whether
    /// it had one. Consumes nothing: another waiter, or a `get_event`
    /// that takes the same event, does not hide it from this one.
    pub(crate) fn wait_notified(
        &self,
        cq: NonNull<ffi::ibv_cq>,
        armed: EventCount,
        deadline: Option<Mono>,
    ) -> Result<bool> {
        let key = cq.as_ptr() as usize;
        let woken = self
            .0
            .wait_for(deadline, |st| st.event_since(key, armed).then_some(()))?;
        Ok(woken.is_some())
    }

    /// [`arm_with`](Self::arm_with), then, unless `ready` (a look at the
    /// CQ after the arm) finds a completion there, the sleep of
    /// [`wait_notified`](Self::wait_notified), under one take of the
    /// channel's lock (the direct path's wait).
    pub(crate) fn arm_and_sleep(
        &self,
        cq: NonNull<ffi::ibv_cq>,
        deadline: Option<Mono>,
        arm: impl FnOnce(u64),
        ready: impl FnOnce() -> bool,
    ) -> Result<Slept> {
        let key = cq.as_ptr() as usize;
        let st = self.0.lock();
        let armed = st.note_arm(key);
        arm(armed.0);
        if ready() {
            return Ok(Slept::Ready);
        }
        // The CQ's count cannot have moved since it was noted: the lock
        // has been held since.
        let woken = self
            .0
            .sleep(st, deadline, |st| st.event_since(key, armed).then_some(()))?;
        Ok(if woken.is_some() {
            Slept::Event
        } else {
            Slept::Expired
        })
    }
}

/// What [`CompletionChannel::arm_and_sleep`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slept {
    /// A completion was there after the arm: no sleep.
    Ready,
    /// The CQ's event came.
    Event,
    /// The deadline passed without it.
    Expired,
}

/// A CQ's count of events read, noted when it was armed: its wait ends
/// when the count moves past it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EventCount(u64);

impl State {
    /// What a wait arming the CQ registered under `key` notes: its count
    /// of events (0 for a CQ not registered: nothing will come for it).
    fn note_arm(&self, key: usize) -> EventCount {
        EventCount(self.cqs.get(&key).map_or(0, |slot| slot.events))
    }

    /// Whether the CQ registered under `key` had an event since `armed`,
    /// or has left the channel (nothing more will come for it).
    fn event_since(&self, key: usize, armed: EventCount) -> bool {
        self.cqs.get(&key).is_none_or(|slot| slot.events != armed.0)
    }

    /// Counts an event read for `cq`, or acknowledges it at once when `cq`
    /// is not registered (its destroy is under way and waits for it).
    ///
    /// # Safety
    /// `cq` was just returned by `ops.get_event` on this channel, under
    /// the channel's lock (still held).
    unsafe fn record(&mut self, cq: *mut ffi::ibv_cq, ops: &ChannelOps) {
        let key = cq as usize;
        let Some(slot) = self.cqs.get_mut(&key) else {
            // SAFETY: the kernel names only CQs of this channel, and
            // libibverbs' ibv_destroy_cq waits until this event is
            // acknowledged: the CQ is live until then.
            unsafe { (ops.ack)(cq, 1) };
            return;
        };
        slot.unacked += 1;
        if slot.unacked >= ACK_BATCH {
            // SAFETY: registered, so live (it leaves the registry, under
            // this lock, before its destroy).
            unsafe { (ops.ack)(cq, slot.unacked) };
            slot.unacked = 0;
        }
        slot.events += 1;
        slot.notified = true;
        if !slot.wakers.is_empty() {
            for waker in slot.wakers.drain(..) {
                waker.wake();
            }
        }
        if !slot.queued {
            slot.queued = true;
            self.ready.push_back(key);
        }
    }

    /// Wakes every async wait, so that each looks at the fd itself: a
    /// blocking reader it left the reading to stopped on an error, maybe
    /// with events unread (the tasks cleared their readiness).
    fn wake_tasks(&mut self) {
        for slot in self.cqs.values_mut() {
            for waker in slot.wakers.drain(..) {
                waker.wake();
            }
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

    /// Reads every event waiting on the fd (non-blocking) into `st`: until
    /// a read finds none (`EAGAIN`), or a look at the fd after a read finds
    /// it not readable (`poll(2)` with no timeout), which is as good: the
    /// fd is found empty either way. For the usual one event a read and a
    /// look cost fewer instructions than two reads, the second failing;
    /// for several, each read has its look.
    fn read_events(&self, st: &mut State) -> Result<()> {
        loop {
            // SAFETY: the channel is live; its fd is non-blocking; the lock
            // is held (`st`), so this thread alone reads it.
            match unsafe { (self.ops.get_event)(self.chan.as_ptr()) } {
                Ok(cq) => {
                    // SAFETY: just returned by get_event, lock held.
                    unsafe { st.record(cq, self.ops) };
                    if !readable_now(self.fd()) {
                        return Ok(());
                    }
                }
                Err(libc::EAGAIN) => return Ok(()),
                Err(libc::EINTR) => {}
                Err(errno) => {
                    return Err(Error::verbs(
                        "ibv_get_cq_event",
                        errno,
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
        deadline: Option<Mono>,
        mut done: impl FnMut(&mut State) -> Option<T>,
    ) -> Result<Option<T>> {
        let mut st = self.lock();
        if let Some(t) = done(&mut st) {
            return Ok(Some(t));
        }
        self.sleep(st, deadline, done)
    }

    /// [`wait_for`](Self::wait_for) with the lock taken (`st`) and `done`
    /// found nothing since.
    fn sleep<'a, T>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        deadline: Option<Mono>,
        mut done: impl FnMut(&mut State) -> Option<T>,
    ) -> Result<Option<T>> {
        loop {
            let now = Mono::now();
            let expired = deadline.is_some_and(|d| now >= d);
            if st.reading {
                if expired {
                    return Ok(None);
                }
                st = match deadline {
                    None => self.read.wait(st).unwrap_or_else(PoisonError::into_inner),
                    Some(d) => {
                        self.read
                            .wait_timeout(st, Duration::from_nanos(now.until(d)))
                            .unwrap_or_else(PoisonError::into_inner)
                            .0
                    }
                };
            } else if expired {
                // A last look at what the kernel holds, without sleeping.
                let read = self.read_events(&mut st);
                self.read.notify_all();
                if read.is_err() {
                    st.wake_tasks();
                }
                read?;
                return Ok(done(&mut st));
            } else {
                st.reading = true;
                drop(st);
                // The clock read above serves the sleep's timeout too.
                let polled = poll_readable_at(self.fd(), deadline, now);
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
                if read.is_err() {
                    st.wake_tasks();
                }
                read?;
            }
            if let Some(t) = done(&mut st) {
                return Ok(Some(t));
            }
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
