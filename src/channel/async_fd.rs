//! An async task's wait for one CQ's event on tokio (feature `tokio`),
//! on the channel's registration with the task's runtime's reactor.
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
//! The fd's registrations, one per runtime, are in `registration`.

use super::registration::{RegisterError, Registration};
use super::{ChannelInner, CompletionChannel, EventCount};
use crate::error::{Error, Result};
use std::future::{poll_fn, Future};
use std::os::fd::AsRawFd;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Poll, Waker};

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
