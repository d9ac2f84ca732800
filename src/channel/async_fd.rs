//! The channel on tokio's reactor (feature `tokio`): one `AsyncFd`
//! registration per channel, and an async task's wait for one CQ's event.
//!
//! Every async wait on the channel awaits the fd's readiness (tokio wakes
//! each task waiting on it); the first to run reads every event the fd
//! holds, under the channel's lock, into the same per-CQ bookkeeping the
//! blocking waits use (`Slot::notified`, counted for acknowledgement), and
//! clears the readiness. A wait ends when its own CQ's `notified` is set:
//! by its own read, by another task's, or by a blocking thread's read,
//! which wakes it through `Slot::wakers`. While a blocking wait sleeps in
//! `poll(2)` on the fd, async waits leave the reading to it (it would
//! otherwise sleep on until its timeout with its event read by a task).

use super::{ChannelInner, CompletionChannel};
use crate::error::{Error, Result};
use std::future::{poll_fn, Future};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A channel's fd as the reactor knows it: a number. The channel owns
/// the fd and drops its registration before closing it.
pub(crate) struct RawChannelFd(RawFd);

impl AsRawFd for RawChannelFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// A channel's one registration with a tokio reactor (a completion
/// channel's here, an rdma_cm event channel's in `cm::aio`).
pub(crate) struct Registration(pub(crate) AsyncFd<RawChannelFd>);

impl Registration {
    /// Registers `fd` for readability with the current runtime's reactor.
    ///
    /// # Safety
    ///
    /// `fd` stays open until the registration is dropped: its owner drops
    /// every share of it before closing the fd.
    pub(crate) unsafe fn new(fd: RawFd) -> std::io::Result<Self> {
        // SAFETY: the caller's promise.
        let fd = unsafe { AsyncFd::register_with_interest(RawChannelFd(fd), Interest::READABLE) }
            .map_err(std::io::Error::from)?;
        Ok(Registration(fd))
    }
}

impl CompletionChannel {
    /// The channel's registration with the reactor, made on the current
    /// tokio runtime by the first async wait.
    fn registration(&self) -> Result<Arc<Registration>> {
        let mut st = self.0.lock();
        if let Some(reg) = &st.reactor {
            return Ok(reg.clone());
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::InvalidArgument(format!(
                "an async wait on {} outside a tokio runtime",
                self.describe()
            )));
        }
        // SAFETY: the fd is the channel's, open until the channel is
        // destroyed, and the registration is gone by then: the channel
        // drops its own share first, and every other share is held by a
        // `cq_event` future, which owns a handle of the channel and drops
        // the share before it.
        let reg = unsafe { Registration::new(self.0.fd().as_raw_fd()) }
            .map_err(|e| self.0.io_error("epoll_ctl", &e))?;
        let reg = Arc::new(reg);
        st.reactor = Some(reg.clone());
        Ok(reg)
    }

    /// Awaits the event of the CQ registered under `key` (the address of
    /// its `struct ibv_cq`), which the caller armed and then polled empty;
    /// takes it. Returns at once when the CQ has left the channel.
    ///
    /// Cancel-safe: dropping the future loses nothing (an event read
    /// meanwhile stays counted for the CQ, and the caller polls after
    /// arming anyway).
    ///
    /// It owns a handle of the channel (`self`, dropped after the
    /// registration's share): the fd stays open while it holds the share.
    pub(crate) async fn cq_event(self, key: usize) -> Result<()> {
        let reg = self.registration()?;
        loop {
            let mut readable = pin!(reg.0.readable());
            let ready = poll_fn(|cx| {
                {
                    let mut st = self.0.lock();
                    let Some(slot) = st.cqs.get_mut(&key) else {
                        return Poll::Ready(None);
                    };
                    if std::mem::take(&mut slot.notified) {
                        slot.wakers.retain(|w| !w.will_wake(cx.waker()));
                        return Poll::Ready(None);
                    }
                    if !slot.wakers.iter().any(|w| w.will_wake(cx.waker())) {
                        slot.wakers.push(cx.waker().clone());
                    }
                }
                readable.as_mut().poll(cx).map(Some)
            })
            .await;
            let mut guard = match ready {
                None => return Ok(()),
                Some(Ok(guard)) => guard,
                Some(Err(e)) => return Err(self.0.io_error("epoll_wait", &e)),
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
                // Read to EAGAIN (or left to the blocking reader): an event
                // that comes after this raises the readiness again.
                guard.clear_ready();
                read
            };
            read?;
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
