//! rdma_cm on tokio (features `rdma-cm` and `tokio`): the event channel's
//! fd on the reactor, and async forms of the calls that wait for an event.
//!
//! Each channel is registered once with the reactor (tokio's `AsyncFd`,
//! made by the first async wait on it, on the runtime current then). A
//! task waiting for its id's event awaits the fd's readiness; whoever
//! reads the fd (a task or a blocking call) keeps the other ids' events in
//! the channel's backlog and wakes the waiting tasks, which look there
//! first. So any number of ids on one channel can be awaited at once, by
//! tasks and threads alike.
//!
//! The async calls take no timer: address and route resolution end with
//! the CM's own error event after the `timeout` they pass to it, and a
//! connect or accept with the peer's answer or the CM's
//! (`RDMA_CM_EVENT_UNREACHABLE` after its retries). For a deadline of your
//! own, wrap a call in `tokio::time::timeout`.
//!
//! Cancelling (dropping the future) loses no event of another id, and no
//! memory is borrowed by a wait. A connect or accept dropped before it
//! ends leaves its QP short of RTS (no work request of it ever runs) and
//! the connection unfinished: drop the id.

use super::event::{CmEvent, CmEventKind, CmIdKey, EventChannel};
use super::id::{check_event, disconnected, CmId};
use super::param::ConnParam;
use super::request::{accept_finish, ConnectRequest};
use crate::channel::{RawChannelFd, Registration};
use crate::error::{Error, Result};
use crate::qp::RcQp;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::time::Duration;
use tokio::io::unix::AsyncFdReadyGuard;

/// The async side of an event channel.
#[derive(Default)]
pub(crate) struct Reactor {
    /// Made by the first async wait; dropped before the channel's fd is
    /// closed (by the channel, and by each wait, which holds a handle of
    /// the channel while it holds a share).
    registration: Mutex<Option<Arc<Registration>>>,
    /// Tasks waiting for an event, woken when events go to the backlog.
    wakers: Mutex<Vec<Waker>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Reactor {
    /// Drops the channel's own share of the registration.
    pub(super) fn deregister(&mut self) {
        let reg = self
            .registration
            .get_mut()
            .unwrap_or_else(|p| p.into_inner());
        drop(reg.take());
    }

    /// Wakes every waiting task (events of some ids went to the backlog).
    pub(super) fn wake_all(&self) {
        for w in std::mem::take(&mut *lock(&self.wakers)) {
            w.wake();
        }
    }

    fn add_waker(&self, waker: &Waker) {
        let mut wakers = lock(&self.wakers);
        if !wakers.iter().any(|w| w.will_wake(waker)) {
            wakers.push(waker.clone());
        }
    }
}

/// What a look at the channel found.
enum Found<'a> {
    Event(CmEvent),
    Readable(AsyncFdReadyGuard<'a, RawChannelFd>),
}

impl EventChannel {
    /// The channel's registration with the reactor, made on the current
    /// tokio runtime by the first async wait.
    fn registration(&self) -> Result<Arc<Registration>> {
        let mut reg = lock(&self.0.reactor.registration);
        if let Some(r) = &*reg {
            return Ok(r.clone());
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(Error::InvalidArgument(
                "an async wait on an rdma_cm event channel outside a tokio runtime".into(),
            ));
        }
        // SAFETY: the fd is the channel's, open until the channel is
        // destroyed, and the registration is gone by then: the channel
        // drops its own share first, and every other share is held by a
        // wait that holds a handle of the channel and drops the share
        // before it.
        let r = unsafe { Registration::new(self.as_raw_fd()) }
            .map_err(|e| io_error("epoll_ctl", &e))?;
        let r = Arc::new(r);
        *reg = Some(r.clone());
        Ok(r)
    }

    /// The next event of `id` (or of any id, for `None`), asleep in the
    /// runtime until it comes.
    async fn next_matching_async(&self, id: Option<CmIdKey>) -> Result<CmEvent> {
        // The share of the registration is dropped before this handle of
        // the channel (locals drop in reverse order).
        let channel = self.clone();
        let reg = channel.registration()?;
        loop {
            let mut readable = pin!(reg.0.readable());
            let found = poll_fn(|cx| {
                // Registered before looking, so an event queued after the
                // look wakes this task.
                channel.0.reactor.add_waker(cx.waker());
                if let Some(ev) = channel.take_queued(id) {
                    return Poll::Ready(Ok(Found::Event(ev)));
                }
                readable.as_mut().poll(cx).map(|r| r.map(Found::Readable))
            })
            .await
            .map_err(|e| io_error("epoll_wait", &e))?;
            let mut guard = match found {
                Found::Event(ev) => return Ok(ev),
                Found::Readable(guard) => guard,
            };
            // Read after the readiness was seen: what comes later raises it
            // again, so clearing it loses nothing.
            match channel.take_matching(id)? {
                Some(ev) => return Ok(ev),
                None => guard.clear_ready(),
            }
        }
    }

    /// The next event of any id on the channel, asleep in the runtime until
    /// one comes (features `rdma-cm` and `tokio`; see
    /// [`cm::aio`](crate::cm#async)). Refused outside a tokio runtime.
    pub async fn get_event_async(&self) -> Result<CmEvent> {
        self.next_matching_async(None).await
    }
}

fn io_error(call: &'static str, e: &std::io::Error) -> Error {
    Error::verbs(
        call,
        e.raw_os_error().unwrap_or(libc::EIO),
        "an rdma_cm event channel",
    )
}

/// Async forms (features `rdma-cm` and `tokio`) of the calls that wait for
/// an event; see [the module's docs](crate::cm#async).
impl CmId {
    /// The next event of this id, asleep in the runtime until it comes;
    /// a peer's disconnect is answered as [`get_event`](Self::get_event)
    /// answers it.
    pub async fn get_event_async(&self) -> Result<CmEvent> {
        let ev = self.channel().next_matching_async(Some(self.key())).await?;
        Ok(self.answer(ev))
    }

    async fn expect_async(&self, want: CmEventKind, what: &str) -> Result<CmEvent> {
        check_event(want, what, self.get_event_async().await?)
    }

    /// [`resolve_addr`](Self::resolve_addr), awaiting
    /// `RDMA_CM_EVENT_ADDR_RESOLVED` (or the CM's error after `timeout`).
    pub async fn resolve_addr_async(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let what = self.resolve_addr_start(src, dst, timeout)?;
        self.expect_async(CmEventKind::AddrResolved, &what)
            .await
            .map(drop)
    }

    /// [`resolve_route`](Self::resolve_route), awaiting
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED` (or the CM's error after `timeout`).
    pub async fn resolve_route_async(&self, timeout: Duration) -> Result<()> {
        self.resolve_route_start(timeout)?;
        self.expect_async(CmEventKind::RouteResolved, "rdma_resolve_route")
            .await
            .map(drop)
    }

    /// [`get_request`](Self::get_request): the next connect request to
    /// this listening id.
    pub async fn get_request_async(&self) -> Result<ConnectRequest> {
        self.request_of(self.get_event_async().await?)
    }

    /// [`connect`](Self::connect), awaiting the peer's answer: the QP is
    /// moved to RTR and RTS on `RDMA_CM_EVENT_CONNECT_RESPONSE`. Returns
    /// the private data of the peer's accept. With no answer the CM ends
    /// it (`RDMA_CM_EVENT_UNREACHABLE`, [`Error::Cm`]) after its retries.
    pub async fn connect_async(&self, qp: &RcQp, param: &ConnParam) -> Result<Vec<u8>> {
        let what = self.connect_start(qp, param)?;
        let ev = self.expect_async(CmEventKind::ConnectResponse, &what).await;
        self.connect_finish(qp, param, &what, ev)
    }

    /// [`wait_disconnected`](Self::wait_disconnected): awaits
    /// `RDMA_CM_EVENT_DISCONNECTED` of this id.
    pub async fn wait_disconnected_async(&self) -> Result<()> {
        disconnected(self.get_event_async().await?)
    }
}

impl ConnectRequest {
    /// [`accept`](Self::accept), awaiting `RDMA_CM_EVENT_ESTABLISHED`
    /// (features `rdma-cm` and `tokio`). Returns the connected id.
    pub async fn accept_async(self, qp: &RcQp, param: &ConnParam) -> Result<CmId> {
        let (id, what) = self.accept_start(qp, param)?;
        let ev = id.expect_async(CmEventKind::Established, &what).await;
        accept_finish(id, qp, ev)
    }
}
