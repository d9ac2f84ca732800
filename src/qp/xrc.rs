//! The XRC initiator (`IBV_QPT_XRC_SEND`): a send-only QP connected to
//! one XRC target QP, each of whose work requests names the XRC SRQ it
//! lands in ([`XrcSrqn`]). The target's side is
//! [`XrcTgtQp`](crate::XrcTgtQp), the SRQs and their domain
//! [`XrcDomain`](crate::XrcDomain).

use super::transitions::{self, Step};
use super::{sealed, ConnectOptions, Endpoint, QpBuilder, QpCaps, QpEx, Transport};
use super::{RemoteReadAtomic, RemoteWrite};
use crate::cq::CompletionQueue;
use crate::error::Result;
use crate::ffi;
use crate::mr::AccessFlags;
use crate::pd::ProtectionDomain;

/// XRC initiator (`IBV_QPT_XRC_SEND`): the transport of an [`XrcIniQp`].
/// Its work requests are RC's (sends, RDMA writes and reads, atomics),
/// each addressed to an XRC SRQ of the target ([`WrBatch::wr`] takes an
/// [`XrcSrqn`]).
///
/// [`WrBatch::wr`]: crate::WrBatch::wr
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XrcInitiator {}
impl sealed::Sealed for XrcInitiator {}
impl Transport for XrcInitiator {
    const NAME: &'static str = "XRC initiator";
    const KIND: crate::QpKind = crate::QpKind::Xrc;
    const DC: bool = false;
    const QP_TYPE: ffi::ibv_qp_type = ffi::IBV_QPT_XRC_SEND;
}
impl RemoteWrite for XrcInitiator {}
impl RemoteReadAtomic for XrcInitiator {}

/// An XRC initiator QP ([`QpBuilder::xrc_ini`]): `QpEx<XrcInitiator>`.
///
/// It has no receive queue (what reaches its side lands in the XRC SRQs
/// of its own domain's targets), so it has no `post_recv`:
///
/// ```compile_fail,E0599
/// # use mlx5dv::*;
/// # fn f(qp: &mut XrcIniQp, mr: &mut MemoryRegion) -> Result<()> {
/// let buf = mr.sge_mut(0..64)?.into();
/// unsafe { qp.post_recv(1, &[buf])? }; // ERROR: an initiator has no receive queue
/// # Ok(()) }
/// ```
pub type XrcIniQp = QpEx<XrcInitiator>;

/// The number of an XRC SRQ at the target
/// ([`SharedReceiveQueue::srq_num`](crate::SharedReceiveQueue::srq_num)
/// there, sent over out of band): where an XRC work request lands
/// (`ibv_wr_set_xrc_srqn`). 24 bits; a larger number is refused when the
/// work request is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct XrcSrqn(pub u32);

impl<'a> QpBuilder<'a, XrcInitiator> {
    /// An XRC initiator in `pd` whose sends complete on `send_cq`. It has
    /// no receive queue (`max_recv_wr` 0): what it receives lands in the
    /// XRC SRQs of its own targets. Refused with
    /// [`Error::Unsupported`](crate::Error::Unsupported) by
    /// [`build`](Self::build) on a device without XRC
    /// (`IBV_DEVICE_XRC`), such as soft-RoCE.
    pub fn xrc_ini(pd: &'a ProtectionDomain, send_cq: &'a CompletionQueue) -> Self {
        let caps = QpCaps {
            max_recv_wr: 0,
            max_recv_sge: 0,
            ..QpCaps::default()
        };
        Self::new(pd, send_cq, send_cq, caps)
    }
}

impl XrcIniQp {
    fn apply(&self, step: Step) -> Result<()> {
        transitions::apply(self.qp, step, || self.describe())
    }

    /// RESET → INIT on `port`.
    pub fn to_init(&self, port: u8) -> Result<()> {
        self.apply(transitions::init(port, AccessFlags::empty()))
    }

    /// INIT → RTR towards the XRC target `remote` (its
    /// [`XrcTgtQp::endpoint`](crate::XrcTgtQp::endpoint)). The initiator
    /// serves no requests: its RTR carries neither `max_dest_rd_atomic`
    /// nor `min_rnr_timer`.
    pub fn to_rtr(&self, remote: &Endpoint, opts: &ConnectOptions) -> Result<()> {
        self.apply(transitions::rtr(self.pd.context(), remote, opts, false)?)
    }

    /// RTR → RTS, sending from packet sequence number `sq_psn` (as RC).
    pub fn to_rts(&self, sq_psn: u32, opts: &ConnectOptions) -> Result<()> {
        self.rts_from_rtr(sq_psn, opts)
    }

    /// RESET → INIT → RTR → RTS: connects to the XRC target `remote`,
    /// sending from `local_psn`, the PSN this side's
    /// [`endpoint`](Self::endpoint) gave the target. Inputs are checked
    /// before the QP is touched.
    pub fn connect(&self, remote: &Endpoint, local_psn: u32, opts: &ConnectOptions) -> Result<()> {
        super::check_psn(remote.psn)?;
        super::check_psn(local_psn)?;
        super::check_retries(opts)?;
        crate::addressing::roce::require_gid(self.pd.context(), opts)?;
        self.to_init(opts.port)?;
        self.to_rtr(remote, opts)?;
        self.to_rts(local_psn, opts)
    }

    /// This initiator's side of the exchange: its number, `psn` (the PSN
    /// it sends from), and the port's LID and GID at `opts.gid_index`.
    pub fn endpoint(&self, psn: u32, opts: &ConnectOptions) -> Result<Endpoint> {
        super::check_psn(psn)?;
        let ctx = self.pd.context();
        crate::addressing::roce::require_gid(ctx, opts)?;
        Ok(Endpoint {
            qpn: self.qp_num(),
            psn,
            lid: ctx.query_port(opts.port)?.lid,
            gid: super::local_gid(ctx, opts)?,
        })
    }
}
