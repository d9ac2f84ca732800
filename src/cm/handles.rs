//! The CM's handles: the event channel ([`EventChannel`]), an id
//! ([`CmId`]), a peer's connect request ([`ConnectRequest`]) and the event
//! that carries one ([`CmEvent`]). They hold one another (an event its
//! request, a request its id, an id its channel, a channel the events it
//! keeps and the steps of its ids awaiting their answer), so they are
//! defined together here, with what each owns and how it is destroyed;
//! their methods are in `event.rs`, `id.rs`, `request.rs` and `steps.rs`.

use super::kind::{CmEventKind, CmIdKey};
#[cfg(feature = "tokio")]
use super::reactor::Reactor;
#[cfg(doc)]
use crate::device::Context;
use crate::error::Error;
use crate::ffi::cm;
use std::collections::VecDeque;
#[cfg(doc)]
use std::os::fd::AsFd;
use std::ptr::NonNull;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

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
    pub(super) ch: NonNull<cm::rdma_event_channel>,
    /// Read events not yet taken, oldest first; also the lock that
    /// serialises reads.
    pub(super) backlog: Mutex<VecDeque<CmEvent>>,
    /// The steps of its ids awaiting their answer (`cm::steps`); locked
    /// after `backlog` where both are.
    pub(super) steps: Mutex<Steps>,
    /// The async side (feature `tokio`): the fd's registration with the
    /// reactor and the tasks to wake when events go to the backlog.
    #[cfg(feature = "tokio")]
    pub(super) reactor: Reactor,
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

/// The id itself; destroyed (`rdma_destroy_id`) when the last holder goes:
/// its [`CmId`], and the [`Context`]s made from it with their objects.
pub(crate) struct IdInner {
    pub(super) id: NonNull<cm::rdma_cm_id>,
    pub(super) key: CmIdKey,
    // Dropped after the id is destroyed (fields drop after Drop::drop).
    pub(super) channel: EventChannel,
}

// SAFETY: librdmacm's id calls are thread-safe (each is a command written
// to the channel's fd, and librdmacm locks its own state); the id is
// destroyed once, in Drop, when no holder is left.
unsafe impl Send for IdInner {}
// SAFETY: as above.
unsafe impl Sync for IdInner {}

impl Drop for IdInner {
    fn drop(&mut self) {
        self.channel.forget(self.key);
        // SAFETY: created or adopted by this crate, destroyed once; every
        // event of it that was read has been acknowledged (events are
        // acknowledged as they are read), so the call does not wait for
        // ever.
        let rc = unsafe { cm::rdma_destroy_id(self.id.as_ptr()) };
        if rc != 0 {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            crate::error::report_destroy_failure("rdma_destroy_id", errno.max(1), "rdma_cm");
        }
    }
}

/// An rdma_cm id (`rdma_create_id(3)`, port space `RDMA_PS_TCP`: reliable
/// connections): the CM's socket. An active id resolves an address and a
/// route and connects; a passive one listens and hands out
/// [`ConnectRequest`]s, each with an id of its own.
///
/// Each id's events arrive on its [`EventChannel`]: the one it was created
/// on, or, for an id of a connect request, a channel of its own. The
/// blocking calls here wait for the events of this id and keep the others
/// for their readers.
///
/// Dropping a connected id disconnects it (`rdma_disconnect`). The id is
/// destroyed when its handle and every [`Context`] made from it (with the
/// objects made in that context) are gone, so nothing that depends on it
/// outlives it.
pub struct CmId {
    pub(super) inner: Arc<IdInner>,
    pub(super) connected: AtomicBool,
}

/// A peer's request to connect (`RDMA_CM_EVENT_CONNECT_REQUEST`), with the
/// new id it came with: [`accept`](Self::accept) or
/// [`reject`](Self::reject) it. Dropped undecided, its id is destroyed,
/// which rejects it.
#[derive(Debug)]
pub struct ConnectRequest {
    pub(super) id: CmId,
    pub(super) private_data: Vec<u8>,
    pub(super) responder_resources: u8,
    pub(super) initiator_depth: u8,
}

/// The steps of a channel's ids, behind the channel's lock for them.
#[derive(Default)]
pub(crate) struct Steps {
    pub(super) next: u64,
    pub(super) list: Vec<Step>,
}

pub(super) struct Step {
    pub(super) token: u64,
    pub(super) id: CmIdKey,
    pub(super) want: CmEventKind,
    /// Its wait ended without the answer.
    pub(super) abandoned: bool,
}
