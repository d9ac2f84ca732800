//! The channel on tokio's reactors (feature `tokio`): one `AsyncFd`
//! registration per channel and runtime, and an async task's wait for one
//! CQ's event.
//!
//! Every async wait on the channel awaits the fd's readiness on its own
//! runtime's reactor (tokio wakes each task waiting on it); the first to
//! run reads every event the fd holds, under the channel's lock, into the
//! same per-CQ bookkeeping the blocking waits use (`Slot::events`, counted
//! for acknowledgement), and clears the readiness. A wait ends when its
//! own CQ's count of events has moved past the one it noted when it armed
//! the CQ: by its own read, by another task's, or by a blocking thread's
//! read, which wakes it through `Slot::wakers`. Nothing consumes another
//! waiter's wakeup. While a blocking wait sleeps in `poll(2)` on the fd,
//! async waits leave the reading to it (it would otherwise sleep on until
//! its timeout with its event read by a task).
//!
//! Why one registration per runtime: a registration belongs to the
//! reactor of the runtime it was made on, and only that runtime's driver
//! turns the fd's readiness into wakeups. A task on another runtime
//! awaiting it would sleep while the first runtime idles, and fail once
//! that runtime is gone. Each runtime that waits on the channel gets its
//! own registration of the fd (one fd may be in several epoll sets); a
//! registration found dead (its runtime shut down, its id reused) is
//! dropped and made again.

use super::{ChannelInner, CompletionChannel, EventCount};
use crate::error::{Error, Result};
use std::future::{poll_fn, Future};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::pin;
use std::sync::Arc;
use std::task::{Poll, Waker};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::runtime::{Handle, Id};

/// A channel's fd as the reactor knows it: a number. The channel owns
/// the fd and drops its registrations before closing it.
pub(crate) struct RawChannelFd(RawFd);

impl AsRawFd for RawChannelFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// A channel's registration with one tokio reactor (a completion
/// channel's here, an rdma_cm event channel's in `cm::aio`).
pub(crate) struct Registration {
    pub(crate) fd: AsyncFd<RawChannelFd>,
    /// The runtime whose reactor it is.
    runtime: Id,
}

impl Registration {
    /// Registers `fd` for readability with the reactor of the current
    /// runtime, `runtime`.
    ///
    /// # Safety
    ///
    /// `fd` stays open until the registration is dropped: its owner drops
    /// every share of it before closing the fd.
    unsafe fn new(fd: RawFd, runtime: Id) -> std::result::Result<Self, RegisterError> {
        // tokio panics when the runtime was built without its I/O driver
        // (`enable_io`): an error here, not a panic in the caller's task.
        let registered = std::panic::catch_unwind(|| {
            // SAFETY: the caller's promise.
            unsafe { AsyncFd::register_with_interest(RawChannelFd(fd), Interest::READABLE) }
        });
        let fd = match registered {
            Ok(r) => r.map_err(|e| RegisterError::Io(e.into()))?,
            Err(_) => return Err(RegisterError::NoIoDriver),
        };
        Ok(Registration { fd, runtime })
    }

    /// Whether its runtime's reactor still runs (a registration whose
    /// runtime shut down reports an error).
    fn is_live(&self) -> bool {
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        !matches!(self.fd.poll_read_ready(&mut cx), Poll::Ready(Err(_)))
    }

    /// Whether the task polling now runs on the runtime of this
    /// registration. A wait's future may be polled on one runtime, then
    /// moved to another: only the current runtime's reactor wakes it, so
    /// it checks this at every poll and takes the current runtime's
    /// registration when it moved.
    ///
    /// Polled outside any tokio runtime (by another executor), it keeps
    /// the registration it has: nothing better can be had there.
    pub(crate) fn on_current_runtime(&self) -> bool {
        Handle::try_current().map_or(true, |h| h.id() == self.runtime)
    }
}

/// An fd's registrations, one for each tokio runtime that waited on it,
/// kept by the fd's owner under its lock.
#[derive(Default)]
pub(crate) struct Registrations(Vec<(Id, Arc<Registration>)>);

/// Why no registration could be had.
pub(crate) enum RegisterError {
    /// The caller is not on a tokio runtime.
    NoRuntime,
    /// The runtime was built without its I/O driver (`enable_io`).
    NoIoDriver,
    /// The reactor refused the fd (`epoll_ctl`).
    Io(std::io::Error),
}

impl Registrations {
    /// The registration on the current runtime's reactor, made if there
    /// is none yet.
    ///
    /// # Safety
    ///
    /// `fd` stays open until every registration made of it is dropped:
    /// its owner clears these (and waits drop their shares) before closing
    /// it.
    pub(crate) unsafe fn current(
        &mut self,
        fd: RawFd,
    ) -> std::result::Result<Arc<Registration>, RegisterError> {
        let id = Handle::try_current()
            .map_err(|_| RegisterError::NoRuntime)?
            .id();
        if let Some((_, reg)) = self.0.iter().find(|(k, _)| *k == id) {
            return Ok(reg.clone());
        }
        // A new runtime: the registrations of runtimes shut down since go
        // (each holds its reactor's handle).
        self.0.retain(|(_, reg)| reg.is_live());
        // SAFETY: the caller's promise.
        let reg = Arc::new(unsafe { Registration::new(fd, id) }?);
        self.0.push((id, reg.clone()));
        Ok(reg)
    }

    /// Forgets `reg`, found dead (its runtime is shut down): the next
    /// wait on the current runtime registers the fd anew.
    pub(crate) fn forget(&mut self, reg: &Arc<Registration>) {
        self.0.retain(|(_, r)| !Arc::ptr_eq(r, reg));
    }

    /// The one registration there is (a test's check).
    #[cfg(test)]
    pub(crate) fn only(&self) -> Arc<Registration> {
        assert_eq!(self.0.len(), 1, "one registration");
        self.0[0].1.clone()
    }

    /// How many runtimes the fd is registered with.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Drops every registration (the owner's share of each).
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}

impl CompletionChannel {
    /// The channel's registration with the current tokio runtime's
    /// reactor, made by the first async wait on that runtime.
    fn registration(&self) -> Result<Arc<Registration>> {
        // SAFETY: the fd is the channel's, open until the channel is
        // destroyed, and every registration is gone by then: the channel
        // drops its own shares first, and every other share is held by a
        // `cq_event` future, which owns a handle of the channel and drops
        // the share before it.
        match unsafe { self.0.lock().reactor.current(self.0.fd().as_raw_fd()) } {
            Ok(reg) => Ok(reg),
            Err(RegisterError::NoRuntime) => Err(Error::InvalidArgument(format!(
                "an async wait on {} outside a tokio runtime",
                self.describe()
            ))),
            Err(RegisterError::NoIoDriver) => Err(Error::InvalidArgument(format!(
                "an async wait on {} on a tokio runtime without its I/O driver \
                 (build the runtime with enable_io or enable_all)",
                self.describe()
            ))),
            Err(RegisterError::Io(e)) => Err(self.0.io_error("epoll_ctl", &e)),
        }
    }

    /// Awaits an event of the CQ registered under `key` (the address of
    /// its `struct ibv_cq`) past `armed`, the count noted when the caller
    /// armed it (and then polled it empty). Returns at once when the CQ
    /// has left the channel.
    ///
    /// Cancel-safe: dropping the future loses nothing (an event read
    /// meanwhile stays counted for the CQ, and the caller polls after
    /// arming anyway).
    ///
    /// It owns a handle of the channel (`self`, dropped after the
    /// registration's share): the fd stays open while it holds the share.
    pub(crate) async fn cq_event(self, key: usize, armed: EventCount) -> Result<()> {
        // A registration that failed once was dropped and made again; a
        // second failure is the current runtime's own (shutting down).
        let mut renewed = false;
        let mut unregister = Unregister {
            channel: &self.0,
            key,
            waker: None,
        };
        'registered: loop {
            let reg = self.registration()?;
            loop {
                let mut readable = pin!(reg.fd.readable());
                let ready = poll_fn(|cx| {
                    if !reg.on_current_runtime() {
                        return Poll::Ready(Some(Err(None)));
                    }
                    {
                        let mut st = self.0.lock();
                        // Gone from the channel: nothing more comes for it.
                        let Some(slot) = st.cqs.get_mut(&key) else {
                            return Poll::Ready(None);
                        };
                        if slot.events != armed.0 {
                            slot.wakers.retain(|w| !w.will_wake(cx.waker()));
                            return Poll::Ready(None);
                        }
                        if !slot.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                            slot.wakers.push(cx.waker().clone());
                            unregister.waker = Some(cx.waker().clone());
                        }
                    }
                    readable.as_mut().poll(cx).map(|r| Some(r.map_err(Some)))
                })
                .await;
                // `Err(None)`: the future moved to another runtime.
                let mut guard = match ready {
                    None => return Ok(()),
                    Some(Ok(guard)) => guard,
                    Some(Err(None)) => continue 'registered,
                    Some(Err(Some(e))) if renewed => return Err(self.0.io_error("epoll_wait", &e)),
                    Some(Err(Some(_))) => {
                        // Its runtime is gone (a runtime id reused): register
                        // anew on the current one.
                        self.0.lock().reactor.forget(&reg);
                        renewed = true;
                        continue 'registered;
                    }
                };
                let read = {
                    let mut st = self.0.lock();
                    // A blocking wait in poll(2) reads what came; its reads
                    // wake the tasks whose CQs they name.
                    let read = if st.reading {
                        Ok(())
                    } else {
                        let read = self.0.read_events(&mut st);
                        self.0.read.notify_all();
                        read
                    };
                    // Read until the fd was found empty (or left to the
                    // blocking reader): an event that comes after this
                    // raises the readiness again.
                    guard.clear_ready();
                    read
                };
                read?;
            }
        }
    }
}

/// Takes a wait's waker off its CQ's slot however the wait ends: a
/// cancelled wait's would otherwise stay there (with its task) until the
/// CQ's next event.
struct Unregister<'a> {
    channel: &'a ChannelInner,
    key: usize,
    waker: Option<Waker>,
}

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        if let Some(waker) = self.waker.take() {
            if let Some(slot) = self.channel.lock().cqs.get_mut(&self.key) {
                slot.wakers.retain(|w| !w.will_wake(&waker));
            }
        }
    }
}

impl ChannelInner {
    /// An error of the reactor's calls on the channel's fd.
    fn io_error(&self, call: &'static str, e: &std::io::Error) -> Error {
        Error::verbs(
            call,
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("the completion channel of {}", self.ctx.name()),
        )
    }
}
