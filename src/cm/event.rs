//! The event channel (`rdma_create_event_channel(3)`) and typed CM events
//! (`rdma_get_cm_event(3)`): opening the channel, reading its events,
//! keeping them for their ids and handing them out. [`EventChannel`] and
//! [`CmEvent`] are defined in `handles.rs`, with the id and the request
//! they hold.

use super::handles::{ChannelInner, CmEvent, CmId, ConnectRequest, EventChannel, Steps};
use super::kind::{CmEventKind, CmIdKey};
use super::steps::answers;
use crate::error::{Error, Result};
use crate::fd::{clear_errno, poll_readable, set_nonblocking};
use crate::ffi::cm;
use std::collections::VecDeque;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

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
