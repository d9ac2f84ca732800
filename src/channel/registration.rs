//! A channel's fd on tokio's reactors (feature `tokio`): one `AsyncFd`
//! registration per fd and runtime, kept by the fd's owner (a completion
//! channel, in `async_fd`; an rdma_cm event channel, in `cm::aio`).
//!
//! Why one registration per runtime: a registration belongs to the
//! reactor of the runtime it was made on, and only that runtime's driver
//! turns the fd's readiness into wakeups. A task on another runtime
//! awaiting it would sleep while the first runtime idles, and fail once
//! that runtime is gone. Each runtime that waits on the fd gets its own
//! registration of it (one fd may be in several epoll sets); a
//! registration found dead (its runtime shut down, its id reused) is
//! dropped and made again.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::task::Poll;
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
/// channel's, or an rdma_cm event channel's in `cm::aio`).
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
