//! The event channel (`rdma_create_event_channel(3)`) and typed CM events
//! (`rdma_get_cm_event(3)`).

use super::id::CmId;
use super::request::ConnectRequest;
use super::steps::{answers, Steps};
use crate::error::{Error, Result};
use crate::fd::{clear_errno, poll_readable, set_nonblocking};
use crate::ffi::cm;
use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Which CM id an event is about: [`CmId::key`]. A number the crate gives
/// each id, never reused in a process (unlike the id's address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmIdKey(pub(crate) u64);

/// The kind of a CM event (`enum rdma_cm_event_type`, rdma_get_cm_event(3)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CmEventKind {
    /// `RDMA_CM_EVENT_ADDR_RESOLVED`.
    AddrResolved,
    /// `RDMA_CM_EVENT_ADDR_ERROR`.
    AddrError,
    /// `RDMA_CM_EVENT_ROUTE_RESOLVED`.
    RouteResolved,
    /// `RDMA_CM_EVENT_ROUTE_ERROR`.
    RouteError,
    /// `RDMA_CM_EVENT_CONNECT_REQUEST`: a peer asks to connect; the event
    /// carries a [`ConnectRequest`].
    ConnectRequest,
    /// `RDMA_CM_EVENT_CONNECT_RESPONSE`: the peer accepted; the active
    /// side completes the connection (done by [`CmId::connect`]).
    ConnectResponse,
    /// `RDMA_CM_EVENT_CONNECT_ERROR`.
    ConnectError,
    /// `RDMA_CM_EVENT_UNREACHABLE`: the peer did not answer.
    Unreachable,
    /// `RDMA_CM_EVENT_REJECTED`: the peer rejected (no listener on that
    /// port, or the application refused); `status` is the reject reason.
    Rejected,
    /// `RDMA_CM_EVENT_ESTABLISHED`.
    Established,
    /// `RDMA_CM_EVENT_DISCONNECTED`.
    Disconnected,
    /// `RDMA_CM_EVENT_DEVICE_REMOVAL`.
    DeviceRemoval,
    /// `RDMA_CM_EVENT_MULTICAST_JOIN`.
    MulticastJoin,
    /// `RDMA_CM_EVENT_MULTICAST_ERROR`.
    MulticastError,
    /// `RDMA_CM_EVENT_ADDR_CHANGE`.
    AddrChange,
    /// `RDMA_CM_EVENT_TIMEWAIT_EXIT`: the QP of a disconnected id may be
    /// reused.
    TimewaitExit,
    /// A value this crate does not know.
    Other(u32),
}

impl CmEventKind {
    pub(crate) fn from_raw(raw: cm::rdma_cm_event_type) -> Self {
        use CmEventKind::*;
        match raw {
            cm::RDMA_CM_EVENT_ADDR_RESOLVED => AddrResolved,
            cm::RDMA_CM_EVENT_ADDR_ERROR => AddrError,
            cm::RDMA_CM_EVENT_ROUTE_RESOLVED => RouteResolved,
            cm::RDMA_CM_EVENT_ROUTE_ERROR => RouteError,
            cm::RDMA_CM_EVENT_CONNECT_REQUEST => ConnectRequest,
            cm::RDMA_CM_EVENT_CONNECT_RESPONSE => ConnectResponse,
            cm::RDMA_CM_EVENT_CONNECT_ERROR => ConnectError,
            cm::RDMA_CM_EVENT_UNREACHABLE => Unreachable,
            cm::RDMA_CM_EVENT_REJECTED => Rejected,
            cm::RDMA_CM_EVENT_ESTABLISHED => Established,
            cm::RDMA_CM_EVENT_DISCONNECTED => Disconnected,
            cm::RDMA_CM_EVENT_DEVICE_REMOVAL => DeviceRemoval,
            cm::RDMA_CM_EVENT_MULTICAST_JOIN => MulticastJoin,
            cm::RDMA_CM_EVENT_MULTICAST_ERROR => MulticastError,
            cm::RDMA_CM_EVENT_ADDR_CHANGE => AddrChange,
            cm::RDMA_CM_EVENT_TIMEWAIT_EXIT => TimewaitExit,
            other => Other(other),
        }
    }

    /// The C name, e.g. `RDMA_CM_EVENT_ESTABLISHED`.
    pub fn name(self) -> &'static str {
        use CmEventKind::*;
        match self {
            AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
            AddrError => "RDMA_CM_EVENT_ADDR_ERROR",
            RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
            RouteError => "RDMA_CM_EVENT_ROUTE_ERROR",
            ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
            ConnectResponse => "RDMA_CM_EVENT_CONNECT_RESPONSE",
            ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
            Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
            Rejected => "RDMA_CM_EVENT_REJECTED",
            Established => "RDMA_CM_EVENT_ESTABLISHED",
            Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
            DeviceRemoval => "RDMA_CM_EVENT_DEVICE_REMOVAL",
            MulticastJoin => "RDMA_CM_EVENT_MULTICAST_JOIN",
            MulticastError => "RDMA_CM_EVENT_MULTICAST_ERROR",
            AddrChange => "RDMA_CM_EVENT_ADDR_CHANGE",
            TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
            Other(_) => "RDMA_CM_EVENT_(unknown)",
        }
    }
}

impl fmt::Display for CmEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmEventKind::Other(v) => write!(f, "RDMA_CM_EVENT {v}"),
            k => f.write_str(k.name()),
        }
    }
}

/// One CM event, copied out of librdmacm's and acknowledged
/// (`rdma_ack_cm_event(3)`) before it is handed out: nothing of it points
/// into librdmacm, and no id waits on it to be destroyed.
#[derive(Debug)]
pub struct CmEvent {
    pub(crate) kind: CmEventKind,
    pub(crate) status: i32,
    pub(crate) id: CmIdKey,
    pub(crate) private_data: Vec<u8>,
    pub(crate) request: Option<ConnectRequest>,
    /// Why a connect request's new id could not be taken over (it was
    /// destroyed, which rejected the request): the listening id's waits
    /// report it, not the wait that happened to read the event.
    pub(crate) request_failed: Option<Error>,
}

impl CmEvent {
    /// What happened.
    pub fn kind(&self) -> CmEventKind {
        self.kind
    }

    /// The event's status: 0, a negative errno (address, route and
    /// connect errors, unreachable), or the reject reason of
    /// [`CmEventKind::Rejected`] (28: the peer's application rejected).
    pub fn status(&self) -> i32 {
        self.status
    }

    /// The id it is about; for a connect request, the listening id.
    pub fn id(&self) -> CmIdKey {
        self.id
    }

    /// The peer's private data (connect request, response, established,
    /// rejected), as the transport delivered it: on InfiniBand and RoCE
    /// padded with zeros to the message's size (56 bytes for a request).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The request of a [`CmEventKind::ConnectRequest`] event: the new id,
    /// to accept or reject. `None` for other events, and for a request
    /// whose new id could not be taken over (see
    /// [`request_error`](Self::request_error)).
    pub fn into_request(self) -> Option<ConnectRequest> {
        self.request
    }

    /// For a [`CmEventKind::ConnectRequest`] event whose new id could not
    /// be taken over (a new event channel for it, or `rdma_migrate_id(3)`,
    /// failed; the id was destroyed, which rejected the request): why.
    pub fn request_error(&self) -> Option<&Error> {
        self.request_failed.as_ref()
    }
}

/// An rdma_cm event channel (`rdma_create_event_channel(3)`): the file
/// descriptor the CM reports events of its ids on.
///
/// A cheap, cloneable handle; each [`CmId`] holds its channel, so the
/// channel is destroyed after its last id. Its fd is non-blocking: wait for
/// it to be readable (`poll`, `epoll`, an async runtime, through [`AsFd`]),
/// then take the events with [`try_get_event`](Self::try_get_event); or
/// block in [`get_event`](Self::get_event).
///
/// Events of ids that a blocking call of another id reads meanwhile are
/// kept, in order, for the next reader. Every wait of an id (blocking or
/// async) looks there first, so none sleeps past its own event whoever
/// read it. An event loop of one's own that waits on the fd should be the
/// channel's only reader: events another reader moved to the backlog are
/// handed to the next [`try_get_event`](Self::try_get_event) without the
/// fd becoming readable again (an edge-triggered `epoll` would not
/// report them), so call it until `None` after each readiness and after
/// each other wait on the channel.
#[derive(Clone)]
pub struct EventChannel(pub(crate) Arc<ChannelInner>);

pub(crate) struct ChannelInner {
    ch: NonNull<cm::rdma_event_channel>,
    /// Read events not yet taken, oldest first; also the lock that
    /// serialises reads.
    backlog: Mutex<VecDeque<CmEvent>>,
    /// The steps of its ids awaiting their answer (`cm::steps`); locked
    /// after `backlog` where both are.
    steps: Mutex<Steps>,
    /// The async side (feature `tokio`): the fd's registration with the
    /// reactor and the tasks to wake when events go to the backlog.
    #[cfg(feature = "tokio")]
    pub(super) reactor: super::aio::Reactor,
}

// SAFETY: librdmacm's event channel is a file descriptor; reads of it are
// serialised by `backlog`'s lock, and destroying happens once, in Drop,
// when no handle is left.
unsafe impl Send for ChannelInner {}
// SAFETY: as above.
unsafe impl Sync for ChannelInner {}

impl Drop for ChannelInner {
    fn drop(&mut self) {
        // Requests still queued own ids on channels of their own: dropping
        // them destroys those ids first.
        self.backlog.get_mut().map(VecDeque::clear).ok();
        // The reactor forgets the fd before it is closed (a later fd with
        // the same number must not be deregistered in its place).
        #[cfg(feature = "tokio")]
        self.reactor.deregister();
        // SAFETY: created by this handle; every id on it holds this Arc, so
        // none is left; destroyed once.
        unsafe { cm::rdma_destroy_event_channel(self.ch.as_ptr()) };
    }
}

impl EventChannel {
    /// Opens an event channel (`rdma_create_event_channel(3)`). Fails with
    /// a message naming the fix where `/dev/infiniband/rdma_cm` is missing
    /// (the `rdma_ucm` kernel module is not loaded).
    pub fn new() -> Result<Self> {
        clear_errno();
        // SAFETY: no arguments; NULL is handled.
        let ch = unsafe { cm::rdma_create_event_channel() };
        let Some(ch) = NonNull::new(ch) else {
            let e = Error::last_os("rdma_create_event_channel", "rdma_cm");
            return Err(match e.errno() {
                Some(errno @ (libc::ENOENT | libc::ENODEV)) => Error::verbs(
                    "rdma_create_event_channel",
                    errno,
                    "no /dev/infiniband/rdma_cm: load the rdma_ucm kernel module \
                     (modprobe rdma_ucm)",
                ),
                _ => e,
            });
        };
        let channel = EventChannel(Arc::new(ChannelInner {
            ch,
            backlog: Mutex::new(VecDeque::new()),
            steps: Mutex::new(Steps::default()),
            #[cfg(feature = "tokio")]
            reactor: Default::default(),
        }));
        set_nonblocking(channel.as_fd(), || "an rdma_cm event channel".into())?;
        Ok(channel)
    }

    pub(crate) fn as_ptr(&self) -> *mut cm::rdma_event_channel {
        self.0.ch.as_ptr()
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<CmEvent>> {
        self.0.backlog.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The steps of the channel's ids (see `cm::steps`).
    pub(super) fn steps(&self) -> MutexGuard<'_, Steps> {
        self.0.steps.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The wait for step `token` (of `id`, awaiting `want`) ended without
    /// its answer: an answer not read yet will be dropped as it is read;
    /// one read already and queued for the id is dropped now.
    pub(super) fn abandon_step(&self, token: u64, id: CmIdKey, want: CmEventKind) {
        let mut backlog = self.lock();
        if self.steps().abandon(token) {
            return;
        }
        if let Some(i) = backlog
            .iter()
            .position(|e| e.id == id && answers(want, e.kind))
        {
            backlog.remove(i);
        }
    }

    /// The next event, of any id on the channel, if one is there now.
    pub fn try_get_event(&self) -> Result<Option<CmEvent>> {
        let mut backlog = self.lock();
        if let Some(e) = backlog.pop_front() {
            return Ok(Some(e));
        }
        self.read_one()
    }

    /// The next event of any id on the channel, waiting at most `timeout`
    /// (`None`: for ever); [`Error::Timeout`] when none came.
    ///
    /// It takes the event: an event is handed out once (it may carry a
    /// connect request's new id), so a wait of that id
    /// ([`CmId::get_event`](super::CmId::get_event), `connect`, ...) on
    /// another thread does not see it. On one channel, either read every
    /// event here (an event loop) or let each id's calls wait for their
    /// own.
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<CmEvent> {
        self.next_matching(None, timeout, "an rdma_cm event")
    }

    /// The next event of `id` (or of any id, for `None`), waiting at most
    /// `timeout`. Events of other ids read meanwhile go to the backlog.
    pub(crate) fn next_matching(
        &self,
        id: Option<CmIdKey>,
        timeout: Option<Duration>,
        what: &str,
    ) -> Result<CmEvent> {
        let start = Instant::now();
        let deadline = timeout.map(|t| start + t);
        loop {
            if let Some(e) = self.take_matching(id)? {
                return Ok(e);
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(Error::Timeout {
                    what: what.to_string(),
                    waited_ms: now.duration_since(start).as_millis() as u64,
                });
            }
            // Another thread may read this id's event and queue it: look
            // again at least every 50 ms.
            let slice = now + Duration::from_millis(50);
            let until = deadline.map_or(slice, |d| d.min(slice));
            poll_readable(self.as_fd(), Some(until))
                .map_err(|errno| Error::verbs("poll", errno, "an rdma_cm event channel"))?;
        }
    }

    /// The first event of `id` (or of any id, for `None`) in the backlog.
    #[cfg(feature = "tokio")]
    pub(super) fn take_queued(&self, id: Option<CmIdKey>) -> Option<CmEvent> {
        let mut backlog = self.lock();
        let i = backlog.iter().position(|e| id.is_none_or(|k| e.id == k))?;
        backlog.remove(i)
    }

    /// The first event of `id` (or of any id, for `None`) in the backlog,
    /// else the first the fd holds now: reads until one matches or the fd
    /// is empty (`None`), queuing the others' events in the backlog.
    pub(super) fn take_matching(&self, id: Option<CmIdKey>) -> Result<Option<CmEvent>> {
        self.take_first(|e| id.is_none_or(|k| e.id == k))
    }

    /// Reads every event the fd holds now into the backlog (librdmacm
    /// updates its ids as it reads their events).
    pub(super) fn read_pending(&self) -> Result<()> {
        self.take_first(|_| false).map(drop)
    }

    /// The first event `matches` takes in the backlog, else the first the
    /// fd holds now: reads until one matches or the fd is empty (`None`),
    /// queuing the others in the backlog.
    fn take_first(&self, matches: impl Fn(&CmEvent) -> bool) -> Result<Option<CmEvent>> {
        let mut backlog = self.lock();
        if let Some(e) = backlog
            .iter()
            .position(&matches)
            .and_then(|i| backlog.remove(i))
        {
            return Ok(Some(e));
        }
        let mut queued = false;
        let found = loop {
            match self.read_one() {
                Ok(Some(e)) if matches(&e) => break Ok(Some(e)),
                Ok(Some(e)) => {
                    backlog.push_back(e);
                    queued = true;
                }
                other => break other,
            }
        };
        drop(backlog);
        // Async waits for the queued events' ids look at the backlog again
        // (blocking ones look every 50 ms).
        #[cfg(feature = "tokio")]
        if queued {
            self.0.reactor.wake_all();
        }
        #[cfg(not(feature = "tokio"))]
        let _ = queued;
        found
    }

    /// Reads the next event for someone: one event from librdmacm at a
    /// time ([`read_raw`](Self::read_raw)), the late answers of abandoned
    /// steps dropped. Called with the backlog locked.
    fn read_one(&self) -> Result<Option<CmEvent>> {
        loop {
            match self.read_raw()? {
                Some(ev) if self.steps().is_late(&ev) => {}
                other => return Ok(other),
            }
        }
    }

    /// Reads one event from librdmacm, copies it out and acknowledges it.
    /// Called with the backlog locked.
    fn read_raw(&self) -> Result<Option<CmEvent>> {
        let mut ev: *mut cm::rdma_cm_event = std::ptr::null_mut();
        // SAFETY: the channel is live; `ev` is writable.
        let rc = unsafe { cm::rdma_get_cm_event(self.as_ptr(), &mut ev) };
        if rc != 0 {
            let e = Error::last_os("rdma_get_cm_event", "an rdma_cm event channel");
            return match e.errno() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
                _ => Err(e),
            };
        }
        // SAFETY: a successful rdma_get_cm_event gives a valid event, valid
        // until it is acknowledged below; its ids are live until then
        // (rdma_destroy_id waits for the acknowledgement).
        let (kind, status, key, private_data, conn, new_id) = unsafe {
            let e = &*ev;
            let kind = CmEventKind::from_raw(e.event);
            let about = if kind == CmEventKind::ConnectRequest {
                e.listen_id
            } else {
                e.id
            };
            let key = CmIdKey((*about).context as u64);
            let conn: cm::rdma_conn_param = *e.param.conn.as_ref();
            let carries_data = matches!(
                kind,
                CmEventKind::ConnectRequest
                    | CmEventKind::ConnectResponse
                    | CmEventKind::Established
                    | CmEventKind::Rejected
            );
            let private_data = if carries_data && !conn.private_data.is_null() {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    usize::from(conn.private_data_len),
                )
                .to_vec()
            } else {
                Vec::new()
            };
            let new_id = (kind == CmEventKind::ConnectRequest).then_some(e.id);
            (kind, e.status, key, private_data, conn, new_id)
        };
        // SAFETY: the event came from rdma_get_cm_event and is acknowledged
        // once; nothing of it is used after this.
        unsafe { cm::rdma_ack_cm_event(ev) };
        // A failure to take the request's id over is the listening id's
        // event, not an error of whichever wait read it.
        let (request, request_failed) = match new_id.and_then(NonNull::new) {
            // SAFETY: the new id of a connect request, not yet owned by
            // anyone; its event is acknowledged.
            Some(raw) => match unsafe { CmId::adopt_request(raw) } {
                Ok(id) => (
                    Some(ConnectRequest::new(id, private_data.clone(), &conn)),
                    None,
                ),
                Err(e) => (None, Some(e)),
            },
            None => (None, None),
        };
        Ok(Some(CmEvent {
            kind,
            status,
            id: key,
            private_data,
            request,
            request_failed,
        }))
    }

    /// Drops the queued events and the steps of `id` (it is being
    /// destroyed).
    pub(crate) fn forget(&self, id: CmIdKey) {
        let mut backlog = self.lock();
        backlog.retain(|e| e.id != id);
        self.steps().forget_id(id);
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the channel's fd is open while the channel lives, which
        // `&self` guarantees for the borrow.
        unsafe { BorrowedFd::borrow_raw((*self.as_ptr()).fd) }
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

impl fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventChannel")
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_map_from_the_c_values() {
        assert_eq!(
            CmEventKind::from_raw(cm::RDMA_CM_EVENT_ESTABLISHED),
            CmEventKind::Established
        );
        assert_eq!(
            CmEventKind::from_raw(cm::RDMA_CM_EVENT_TIMEWAIT_EXIT),
            CmEventKind::TimewaitExit
        );
        assert_eq!(CmEventKind::from_raw(99), CmEventKind::Other(99));
        assert_eq!(CmEventKind::Rejected.to_string(), "RDMA_CM_EVENT_REJECTED");
    }
}

#[cfg(test)]
mod no_device_tests {
    use super::*;

    /// Where the kernel has no rdma_cm device (no `rdma_ucm` module, or no
    /// RDMA at all), the error says what to load.
    #[test]
    fn a_missing_rdma_cm_device_is_named_with_its_fix() {
        if std::path::Path::new("/dev/infiniband/rdma_cm").exists() {
            return;
        }
        let e = EventChannel::new().unwrap_err();
        assert!(e.to_string().contains("modprobe rdma_ucm"), "{e}");
    }
}
