//! Queue pairs with the extended work-request API: RC QPs made with
//! `ibv_create_qp_ex(3)`, and mlx5 QPs (RC with mlx5 send ops, DCI) made
//! with `mlx5dv_create_qp(3)`; state transitions and receives.
//!
//! # How each QP type becomes ready, and why they differ
//!
//! A QP is created in RESET and takes work requests only once moved
//! through INIT and RTR to RTS (`ibv_modify_qp(3)`). What the RTR step
//! needs depends on whom the QP talks to, so each type has the call that
//! asks for exactly that:
//!
//! | QP | ready with | needs a peer's | why |
//! |---|---|---|---|
//! | RC, UC ([`RcQp`], [`UcQp`]) | `endpoint(psn, &opts)` to hand out, then `connect_to(&remote, &opts)` (or `connect(&remote, psn, &opts)`) | [`Endpoint`] | connected: RTR names one peer QP (its number, PSN, LID/GID), the path (MTU, GID index) and, on RC, the retry and RDMA-read limits, all in [`ConnectOptions`] |
//! | XRC initiator and target ([`XrcIniQp`], [`XrcTgtQp`](crate::XrcTgtQp)) | `endpoint(psn, &opts)`, then `connect(&remote, psn, &opts)` | [`Endpoint`] | connected as RC, one initiator to one target; the PSN is passed with the peer's endpoint |
//! | DCI ([`DciQp`]) | `ready(psn, &opts)` | nothing | each work request names its DC target ([`DcAddr`]): the QP needs only its port, path and retry settings ([`ConnectOptions`]) and its first send PSN |
//! | DCT ([`Dct`]) | `ready(&opts)`, then `endpoint(&opts)` to hand out | nothing | a target that any DCI may reach: it hands out a [`DctEndpoint`] (number, DC key, address) and never sends first, so it has no send PSN |
//! | UD ([`UdQp`]) | `ready(port, qkey, psn)` | nothing | each work request names its destination ([`UdAddr`]: an address handle, QP number and qkey); the QP has no path of its own, so of [`ConnectOptions`] only the port would apply, and it needs the qkey that incoming datagrams must carry |
//! | RC through rdma_cm (feature `rdma-cm`) | `CmId::connect` / `ConnectRequest::accept` | an address and port | rdma_cm exchanges the endpoints and moves the QP itself |
//!
//! After an error ([`QpState::Err`]) a QP is [`reset`](QpEx::reset) and
//! made ready again the same way ([`QpKind::recovery`] says it in one
//! line per type); a [`Dct`] and an [`XrcTgtQp`](crate::XrcTgtQp) have no
//! `reset`, and a QP connected through rdma_cm is not reconnected: each
//! is made anew.

mod builder;
mod checks;
mod dci;
mod dct;
mod handle;
mod ops;
mod raw;
mod rc;
mod ready;
mod scope;
pub(crate) mod transitions;
mod transport;
mod types;
mod uc;
mod ud;
mod ud_endpoint;
mod xrc;
mod xrc_tgt;

pub use crate::addressing::ConnectOptions;
pub use crate::qp_spec::{DciStreams, Mlx5SendOps, QpCaps, SendOps};
pub use crate::qp_state::{QpKind, QpState};
pub use builder::QpBuilder;
pub(crate) use dci::MAX_DCTN;
pub use dci::{DcAddr, RemoteDct};
pub use dct::{Dct, DctEndpoint};
pub use raw::{RawMlx5, RawQp};
pub use types::Endpoint;
pub use uc::{UcQp, UnreliableConnection};
pub use ud::UdAddr;
pub use ud_endpoint::{UdDest, UdEndpoint};
pub use xrc::{XrcIniQp, XrcInitiator, XrcSrqn};
pub use xrc_tgt::XrcTgtQp;

pub(crate) use crate::byte_form::{versioned_form, ByteForm, FORM_VERSION};
pub(crate) use checks::{
    check_24_bits, check_psn, check_retries, local_gid, past_24_bits, query_state, MAX_24_BITS,
};
pub use handle::{DciQp, QpEx, RcQp, UdQp};
pub(crate) use handle::{Mlx5Info, QpParts};
pub(crate) use ops::{WrOps, BATCH_ABORTING, BATCH_CLOSED, BATCH_OPEN};
pub(crate) use ready::{recorded_state, refusal_explained, refuse, Post};
pub(crate) use scope::SCOPED_ID_BIT;
pub(crate) use transport::sealed;
pub use transport::{
    Connected, DcInitiator, ReliableConnection, RemoteReadAtomic, RemoteWrite, Transport,
    UnreliableDatagram,
};
