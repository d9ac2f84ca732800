//! Connecting as RDMA programs do: rdma_cm through librdmacm
//! (`rdma_cm(7)`; feature `rdma-cm`).
//!
//! The CM resolves an IP address to an RDMA device, port and path (on RoCE:
//! the GIDs, from the address), exchanges the QP numbers, PSNs and private
//! data with the peer over the IB CM protocol, and gives each side the
//! attributes that move its QP to RTR and RTS. Programs such as rdma-core's
//! `rping` connect this way; a program here interoperates with them.
//!
//! The QP is one of this crate's ([`QpBuilder`](crate::QpBuilder): RC, or
//! RC with mlx5 send ops on mlx5), made on the id's device
//! ([`CmId::context`]) and moved through its states by
//! [`CmId::connect`] / [`ConnectRequest::accept`] with the attributes the
//! CM gives (`rdma_init_qp_attr(3)`), as librdmacm does for a QP it made
//! itself. The QP stays a plain [`QpEx`](crate::QpEx): its batches, scoped
//! posts and receives work as on any other.
//!
//! Active side:
//!
//! ```no_run
//! use mlx5dv::cm::{CmId, ConnParam};
//! use mlx5dv::*;
//! use std::time::Duration;
//!
//! # fn main() -> Result<()> {
//! let t = Duration::from_secs(2);
//! let id = CmId::new()?;
//! id.resolve_addr(None, "10.99.0.1:7174".parse().unwrap(), t)?;
//! id.resolve_route(t)?;
//! let ctx = id.context()?; // the device the address resolved to
//! let pd = ProtectionDomain::new(&ctx)?;
//! let cq = CompletionQueue::new(&ctx, 64)?;
//! let qp = QpBuilder::rc(&pd, &cq, &cq).build()?;
//! let reply = id.connect(&qp, &ConnParam::new().private_data(b"hello"), t)?;
//! // ... post on `qp` ...
//! id.disconnect()?;
//! # let _ = reply;
//! # Ok(())
//! # }
//! ```
//!
//! Passive side:
//!
//! ```no_run
//! use mlx5dv::cm::{CmId, ConnParam};
//! use mlx5dv::*;
//! use std::time::Duration;
//!
//! # fn main() -> Result<()> {
//! let listener = CmId::new()?;
//! listener.listen("0.0.0.0:7174".parse().unwrap(), 8)?;
//! let req = listener.get_request(None)?;
//! if req.private_data().starts_with(b"hello") {
//!     let ctx = req.id().context()?;
//!     let pd = ProtectionDomain::new(&ctx)?;
//!     let cq = CompletionQueue::new(&ctx, 64)?;
//!     let qp = QpBuilder::rc(&pd, &cq, &cq).build()?;
//!     req.id().init_qp(&qp)?; // INIT: receives may be posted before accepting
//!     let conn = req.accept(&qp, &ConnParam::new(), Duration::from_secs(2))?;
//!     conn.wait_disconnected(Duration::from_secs(60))?;
//! } else {
//!     req.reject(b"go away")?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! ## Events
//!
//! Every id reports on an [`EventChannel`] (a non-blocking fd, for
//! `poll`/`epoll` or an async runtime, or blocking waits with a timeout).
//! An event is copied out of librdmacm — private data included — and
//! acknowledged (`rdma_ack_cm_event(3)`) as it is read, so nothing points
//! into librdmacm's memory and destroying an id never waits on an
//! unacknowledged event. A connect request's new id is moved to a channel
//! of its own, so each connection's events (its disconnect) come on its
//! own fd.
//!
//! ## Async
//!
//! With the `tokio` feature too, every call that waits for an event has an
//! async form that sleeps in the runtime instead:
//! [`CmId::resolve_addr_async`], [`resolve_route_async`](CmId::resolve_route_async),
//! [`connect_async`](CmId::connect_async),
//! [`get_request_async`](CmId::get_request_async),
//! [`ConnectRequest::accept_async`],
//! [`wait_disconnected_async`](CmId::wait_disconnected_async),
//! [`get_event_async`](CmId::get_event_async) and
//! [`EventChannel::get_event_async`]. Each channel's fd is registered once
//! with the reactor of each runtime that waits on it; any number of ids on it can be awaited at once, by
//! tasks and blocking threads alike (whoever reads an event of another id
//! keeps it for that id and wakes its task).
//!
//! They take no timer: resolution ends with the CM's own error event after
//! the `timeout` it is given, a connect or accept with the peer's answer or
//! the CM's `RDMA_CM_EVENT_UNREACHABLE`; wrap a call in
//! `tokio::time::timeout` for a deadline of your own. Dropping a future
//! loses no other id's event and borrows no memory; a connect or accept
//! dropped before it ends moves its QP to ERR (nothing of it runs, and the
//! peer reaches nothing through it): drop the id. The late answer of a
//! step whose wait ended early (dropped, or timed out) goes to no later
//! wait of the id. A future leaked (`mem::forget`) instead of dropped
//! leaves its step waiting: its answer goes to the id's next wait.
//!
#![cfg_attr(feature = "tokio", doc = "```no_run")]
#![cfg_attr(not(feature = "tokio"), doc = "```ignore")]
//! use mlx5dv::cm::{CmId, ConnParam};
//! use mlx5dv::*;
//! use std::time::Duration;
//!
//! async fn serve_one(listener: &CmId) -> Result<()> {
//!     let req = listener.get_request_async().await?;
//!     let ctx = req.id().context()?;
//!     let pd = ProtectionDomain::new(&ctx)?;
//!     let cq = CompletionQueue::new(&ctx, 64)?;
//!     let qp = QpBuilder::rc(&pd, &cq, &cq).build()?;
//!     let conn = req.accept_async(&qp, &ConnParam::new()).await?;
//!     // ... post on `qp` ...
//!     conn.wait_disconnected_async().await
//! }
//!
//! async fn connect(to: std::net::SocketAddr) -> Result<()> {
//!     let t = Duration::from_secs(2);
//!     let id = CmId::new()?;
//!     id.resolve_addr_async(None, to, t).await?;
//!     id.resolve_route_async(t).await?;
//!     let ctx = id.context()?;
//!     let pd = ProtectionDomain::new(&ctx)?;
//!     let cq = CompletionQueue::new(&ctx, 64)?;
//!     let qp = QpBuilder::rc(&pd, &cq, &cq).build()?;
//!     id.connect_async(&qp, &ConnParam::new()).await?;
//!     id.disconnect()
//! }
//! ```
//!
//! ## Lifetimes
//!
//! - A [`CmId`] holds its channel; the channel is destroyed after its last
//!   id.
//! - A [`Context`](crate::Context) from [`CmId::context`] holds the id
//!   (librdmacm owns that device context while the id lives), and every
//!   PD, CQ, MR and QP made on it holds the context: the id is destroyed
//!   (`rdma_destroy_id`) only after all of them.
//! - Dropping a connected [`CmId`] disconnects it; dropping an undecided
//!   [`ConnectRequest`] rejects it.
//!
//! ## RoCE
//!
//! The CM picks the source GID from the address the id is bound to (the
//! RoCE v2 GID of that IP address where the port has one), and the traffic
//! class from [`CmId::set_tos`]; nothing here needs a GID index.

mod addr;
#[cfg(feature = "tokio")]
mod aio;
mod event;
mod handles;
mod id;
mod kind;
mod param;
#[cfg(feature = "tokio")]
mod reactor;
mod request;
mod steps;

pub use handles::{CmEvent, CmId, ConnectRequest, EventChannel};
pub use kind::{CmEventKind, CmIdKey};
pub use param::{
    ConnParam, MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA,
};
