//! The transports: the type parameter of a QP ([`Transport`]) and what
//! each allows ([`Connected`], [`RemoteWrite`], [`RemoteReadAtomic`]),
//! with the transports of this folder's root ([`ReliableConnection`],
//! [`DcInitiator`], [`UnreliableDatagram`]); UC and XRC have theirs in
//! their own files.

use crate::ffi;
use crate::qp_spec::{Mlx5SendOps, SendOps};
use crate::qp_state::QpKind;

pub(crate) mod sealed {
    /// Only this crate's transports implement [`Transport`](super::Transport).
    pub trait Sealed {}
}

/// A QP transport: the type parameter of [`QpEx`](crate::QpEx) that decides which
/// builders and setters a work request has.
pub trait Transport: sealed::Sealed + 'static {
    /// The man page's name, e.g. `RC`.
    const NAME: &'static str;
    /// Whether every work request needs a DC address (`mlx5dv_wr_set_dc_addr`).
    #[doc(hidden)]
    const DC: bool;
    /// The kind of its QPs, whose failed completions' hints the crate
    /// gives ([`WcStatus::hint_for`](crate::WcStatus::hint_for)).
    #[doc(hidden)]
    const KIND: QpKind;
    /// The `ibv_qp_type` it is created with.
    #[doc(hidden)]
    const QP_TYPE: ffi::ibv_qp_type;
    /// The generic builders a QP of this transport may be created with;
    /// [`QpBuilder::build`] refuses others before any C call.
    #[doc(hidden)]
    const SEND_OPS: SendOps = SendOps::all();
    /// The mlx5 builders a QP of this transport may be created with.
    #[doc(hidden)]
    const MLX5_SEND_OPS: Mlx5SendOps = Mlx5SendOps::all();
}

/// A connected transport (RC, UC): the QP is joined to one peer QP
/// ([`QpEx::connect_to`](crate::QpEx::connect_to)) and has its own receive queue
/// ([`QpEx::post_recv`](crate::QpEx::post_recv)).
pub trait Connected: Transport {
    /// Whether the transport is reliable (RC: acknowledged, retried, with
    /// RDMA read and atomics), which adds the responder's and requester's
    /// reliability attributes to RTR and RTS.
    #[doc(hidden)]
    const RELIABLE: bool;
}

/// A transport whose work requests may write the peer's memory
/// (`ibv_wr_rdma_write`, `ibv_wr_rdma_write_imm`): RC, UC, DCI; not UD.
pub trait RemoteWrite: Transport {}

/// A transport whose work requests may read the peer's memory and run
/// atomics on it (`ibv_wr_rdma_read`, `ibv_wr_atomic_*`): RC, DCI; not UC
/// or UD.
pub trait RemoteReadAtomic: RemoteWrite {}

/// Reliable connection (`IBV_QPT_RC`): the transport of an [`RcQp`](crate::RcQp).
///
/// Named in full, not `Rc`, so that it never collides with `std::rc::Rc`
/// where both are imported:
///
/// ```
/// use mlx5dv::*;
/// use std::rc::Rc;
///
/// struct Conn {
///     qp: RcQp, // QpEx<ReliableConnection>
///     peers: Rc<Vec<Endpoint>>,
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReliableConnection {}
impl sealed::Sealed for ReliableConnection {}
impl Transport for ReliableConnection {
    const NAME: &'static str = "RC";
    const KIND: QpKind = QpKind::Rc;
    const DC: bool = false;
    const QP_TYPE: ffi::ibv_qp_type = ffi::IBV_QPT_RC;
}
impl RemoteWrite for ReliableConnection {}
impl RemoteReadAtomic for ReliableConnection {}
impl Connected for ReliableConnection {
    const RELIABLE: bool = true;
}

/// mlx5 dynamically connected initiator (`MLX5DV_DCTYPE_DCI`): the
/// transport of a [`DciQp`](crate::DciQp), one QP that reaches many DC targets, each work
/// request addressed with `mlx5dv_wr_set_dc_addr` (or
/// `mlx5dv_wr_set_dc_addr_stream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DcInitiator {}
impl sealed::Sealed for DcInitiator {}
impl Transport for DcInitiator {
    const NAME: &'static str = "DCI";
    const KIND: QpKind = QpKind::Dci;
    const DC: bool = true;
    const QP_TYPE: ffi::ibv_qp_type = ffi::IBV_QPT_DRIVER;
}
impl RemoteWrite for DcInitiator {}
impl RemoteReadAtomic for DcInitiator {}

/// Unreliable datagram (`IBV_QPT_UD`): the transport of a [`UdQp`](crate::UdQp), one QP
/// that sends messages of at most one MTU to any UD QP, each work request
/// addressed with `ibv_wr_set_ud_addr` (a [`UdAddr`](crate::UdAddr)). Sends only: no RDMA
/// write, read or atomics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnreliableDatagram {}
impl sealed::Sealed for UnreliableDatagram {}
impl Transport for UnreliableDatagram {
    const NAME: &'static str = "UD";
    const KIND: QpKind = QpKind::Ud;
    const DC: bool = false;
    const QP_TYPE: ffi::ibv_qp_type = ffi::IBV_QPT_UD;
}
