//! rdma_cm on tokio (features `rdma-cm` and `tokio`): the event channel's
//! fd on the reactor, and async forms of the calls that wait for an event.
//!
//! Each channel is registered once with the reactor of each runtime that
//! waits on it (tokio's `AsyncFd`, made by the first async wait on that
//! runtime), so tasks of several runtimes may wait on one channel. A
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
//! ends moves its QP to ERR (no work request of it runs, and the peer
//! reaches nothing through it) and leaves the connection unfinished: drop
//! the id. A future leaked (`mem::forget`) instead of dropped leaves the
//! QP where the wait found it, short of RTS either way: INIT for a
//! connect (the CM's answer not yet taken), RTR for an accept (RTS comes
//! only with `RDMA_CM_EVENT_ESTABLISHED`), so that none of its work
//! requests is sent.

use super::handles::{CmEvent, CmId, ConnectRequest, EventChannel};
use super::id::{check_event, disconnected};
use super::kind::{CmEventKind, CmIdKey};
use super::param::ConnParam;
use super::reactor::lock;
use super::request::accept_finish;
use super::steps::Awaiting;
use crate::channel::{RawChannelFd, RegisterError, Registration};
use crate::error::{Error, Result};
use crate::qp::RcQp;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use tokio::io::unix::AsyncFdReadyGuard;

/// What a look at the channel found.
enum Found<'a> {
    Event(CmEvent),
    Readable(AsyncFdReadyGuard<'a, RawChannelFd>),
    /// The wait's future is polled on another runtime than its
    /// registration's.
    Moved,
}

impl EventChannel {
    /// The channel's registration with the current tokio runtime's
    /// reactor, made by the first async wait on that runtime.
    fn registration(&self) -> Result<Arc<Registration>> {
        let mut regs = lock(&self.0.reactor.registrations);
        // SAFETY: the fd is the channel's, open until the channel is
        // destroyed, and every registration is gone by then: the channel
        // drops its own shares first, and every other share is held by a
        // wait that holds a handle of the channel and drops the share
        // before it.
        match unsafe { regs.current(self.as_raw_fd()) } {
            Ok(r) => Ok(r),
            Err(RegisterError::NoRuntime) => Err(Error::InvalidArgument(
                "an async wait on an rdma_cm event channel outside a tokio runtime".into(),
            )),
            Err(RegisterError::NoIoDriver) => Err(Error::InvalidArgument(
                "an async wait on an rdma_cm event channel on a tokio runtime without its I/O \
                 driver (build the runtime with enable_io or enable_all)"
                    .into(),
            )),
            Err(RegisterError::Io(e)) => Err(io_error("epoll_ctl", &e)),
        }
    }

    /// The next event of `id` (or of any id, for `None`), asleep in the
    /// runtime until it comes.
    async fn next_matching_async(&self, id: Option<CmIdKey>) -> Result<CmEvent> {
        // The share of the registration is dropped before this handle of
        // the channel (locals drop in reverse order).
        let channel = self.clone();
        // A registration that failed once was dropped and made again; a
        // second failure is the current runtime's own (shutting down).
        let mut renewed = false;
        'registered: loop {
            let reg = channel.registration()?;
            loop {
                let mut readable = pin!(reg.fd.readable());
                let found = poll_fn(|cx| {
                    if !reg.on_current_runtime() {
                        return Poll::Ready(Ok(Found::Moved));
                    }
                    // Registered before looking, so an event queued after the
                    // look wakes this task.
                    channel.0.reactor.add_waker(cx.waker());
                    if let Some(ev) = channel.take_queued(id) {
                        return Poll::Ready(Ok(Found::Event(ev)));
                    }
                    readable.as_mut().poll(cx).map(|r| r.map(Found::Readable))
                })
                .await;
                let mut guard = match found {
                    Ok(Found::Event(ev)) => return Ok(ev),
                    Ok(Found::Readable(guard)) => guard,
                    Ok(Found::Moved) => continue 'registered,
                    Err(e) if renewed => return Err(io_error("epoll_wait", &e)),
                    Err(_) => {
                        // Its runtime is gone (a runtime id reused): register
                        // anew on the current one.
                        lock(&channel.0.reactor.registrations).forget(&reg);
                        renewed = true;
                        continue 'registered;
                    }
                };
                // Read after the readiness was seen: what comes later raises it
                // again, so clearing it loses nothing.
                match channel.take_matching(id)? {
                    Some(ev) => return Ok(ev),
                    None => guard.clear_ready(),
                }
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

    /// Awaits the answer of `step`: dropped before it (cancelled), the
    /// step's late answer goes to no later wait (see `cm::steps`).
    async fn expect_async(
        &self,
        mut step: Awaiting,
        want: CmEventKind,
        what: &str,
    ) -> Result<CmEvent> {
        let ev = self.get_event_async().await?;
        step.got(&ev);
        check_event(want, what, ev)
    }

    /// [`resolve_addr`](Self::resolve_addr), awaiting
    /// `RDMA_CM_EVENT_ADDR_RESOLVED` (or the CM's error after `timeout`).
    pub async fn resolve_addr_async(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let (what, step) = self.ask(CmEventKind::AddrResolved, || {
            self.resolve_addr_start(src, dst, timeout)
        })?;
        self.expect_async(step, CmEventKind::AddrResolved, &what)
            .await
            .map(drop)
    }

    /// [`resolve_route`](Self::resolve_route), awaiting
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED` (or the CM's error after `timeout`).
    pub async fn resolve_route_async(&self, timeout: Duration) -> Result<()> {
        let ((), step) = self.ask(CmEventKind::RouteResolved, || {
            self.resolve_route_start(timeout)
        })?;
        self.expect_async(step, CmEventKind::RouteResolved, "rdma_resolve_route")
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
    ///
    /// Dropped before it ends, it moves the QP to ERR (see
    /// [the module's docs](crate::cm#async)).
    pub async fn connect_async(&self, qp: &RcQp, param: &ConnParam) -> Result<Vec<u8>> {
        let (what, step) = self.ask(CmEventKind::ConnectResponse, || {
            self.connect_start(qp, param)
        })?;
        let cancelled = ErrOnDrop(Some(qp));
        let ev = self
            .expect_async(step, CmEventKind::ConnectResponse, &what)
            .await;
        cancelled.disarm();
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
    ///
    /// The QP waits in RTR and moves to RTS on the event. Dropped before
    /// it ends, the accept moves the QP to ERR (see
    /// [the module's docs](crate::cm#async)).
    pub async fn accept_async(self, qp: &RcQp, param: &ConnParam) -> Result<CmId> {
        let (id, what, rts, step) = self.accept_start(qp, param)?;
        let cancelled = ErrOnDrop(Some(qp));
        let ev = id.expect_async(step, CmEventKind::Established, &what).await;
        cancelled.disarm();
        accept_finish(id, qp, param, rts, ev)
    }
}

/// Moves a QP to ERR when the connect or accept that holds it is dropped
/// before its event came (cancelled).
struct ErrOnDrop<'q>(Option<&'q RcQp>);

impl ErrOnDrop<'_> {
    /// The event came: the call ends the connection itself.
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for ErrOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(qp) = self.0 {
            // Best effort: should it fail, the QP stays short of RTS.
            let _ = qp.to_error();
        }
    }
}
