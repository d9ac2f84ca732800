//! What a CM event is ([`CmEventKind`]) and which id it is about
//! ([`CmIdKey`]).

use crate::ffi::cm;
use std::fmt;

/// Which CM id an event is about: [`CmId::key`](super::CmId::key). A
/// number the crate gives each id, never reused in a process (unlike the
/// id's address).
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
    /// carries a [`ConnectRequest`](super::ConnectRequest).
    ConnectRequest,
    /// `RDMA_CM_EVENT_CONNECT_RESPONSE`: the peer accepted; the active
    /// side completes the connection (done by
    /// [`CmId::connect`](super::CmId::connect)).
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
