//! XRC target QPs (`ibv_create_qp_ex(3)` with `IBV_QPT_XRC_RECV`): the
//! receiving end of one XRC initiator, made in an XRC domain, with no
//! queues of its own: each request it takes lands in the XRC SRQ of its
//! domain that the request names.

use super::transitions;
use super::{ConnectOptions, Endpoint, QpState};
use crate::error::{Error, Result};
use crate::ffi;
use crate::xrc::XrcDomain;
use std::fmt;
use std::ptr::NonNull;

/// An XRC target QP, destroyed on drop; it keeps its domain open.
///
/// Connected like the responder side of an RC QP
/// ([`connect`](Self::connect)) to one [`XrcIniQp`](crate::XrcIniQp),
/// usually in another process: both sides send each other an
/// [`Endpoint`]. It posts nothing and receives nothing itself; the
/// completions of what it takes appear on the CQs of the XRC SRQs the
/// requests name, carrying this QP's number.
pub struct XrcTgtQp {
    qp: NonNull<ffi::ibv_qp>,
    // Dropped after the QP is destroyed (fields drop after Drop::drop).
    domain: XrcDomain,
}

// SAFETY: the QP is used only through verbs calls (state transitions,
// queries, destruction) that the provider and kernel serialise; it has no
// queues to post to.
unsafe impl Send for XrcTgtQp {}
// SAFETY: as above.
unsafe impl Sync for XrcTgtQp {}

impl Drop for XrcTgtQp {
    fn drop(&mut self) {
        // SAFETY: created by `new`, destroyed once; its domain is kept
        // open until after the call.
        let rc = unsafe { ffi::ibv_destroy_qp(self.qp.as_ptr()) };
        crate::error::report_destroy_failure("ibv_destroy_qp", rc, self.domain.context().name());
    }
}

impl XrcTgtQp {
    /// Creates an XRC target QP in `domain` (`IBV_QPT_XRC_RECV`,
    /// `IBV_QP_INIT_ATTR_XRCD`). Refused with
    /// [`Error::Unsupported`] on a device without XRC.
    pub fn new(domain: &XrcDomain) -> Result<Self> {
        let ctx = domain.context();
        crate::xrc::require_xrc(ctx, "XRC target QP")?;
        let mut attr = ffi::ibv_qp_init_attr_ex {
            qp_type: ffi::IBV_QPT_XRC_RECV,
            comp_mask: ffi::IBV_QP_INIT_ATTR_XRCD,
            xrcd: domain.as_ptr(),
            ..Default::default()
        };
        // SAFETY: the context and domain are live (borrowed); `attr` is
        // initialised for its comp_mask; NULL is handled.
        let qp = unsafe { ffi::ibv_create_qp_ex(ctx.as_ptr(), &mut attr) };
        let qp = NonNull::new(qp).ok_or_else(|| {
            Error::last_os(
                "ibv_create_qp_ex",
                format!("XRC target QP on {}", ctx.name()),
            )
        })?;
        Ok(XrcTgtQp {
            qp,
            domain: domain.clone(),
        })
    }

    /// The QP number: what the initiator connects to, and what the
    /// completions of the requests it takes carry.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: the QP is live.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    /// The domain it was made in.
    pub fn domain(&self) -> &XrcDomain {
        &self.domain
    }

    /// The raw QP, valid while this handle lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_qp {
        self.qp.as_ptr()
    }

    fn describe(&self) -> String {
        format!(
            "XRC target QP {:#x} on {}",
            self.qp_num(),
            self.domain.context().name()
        )
    }

    /// The current state (`ibv_query_qp(3)`).
    pub fn state(&self) -> Result<QpState> {
        // SAFETY: the QP is live.
        unsafe { super::query_state(self.as_ptr()) }
            .map_err(|rc| Error::verbs("ibv_query_qp", rc, self.describe()))
    }

    /// This target's side of the exchange: its number, `psn` (the PSN it
    /// answers from), and the port's LID and GID at `opts.gid_index`.
    pub fn endpoint(&self, psn: u32, opts: &ConnectOptions) -> Result<Endpoint> {
        super::check_psn(psn)?;
        let ctx = self.domain.context();
        crate::addressing::roce::require_gid(ctx, opts)?;
        Ok(Endpoint {
            qpn: self.qp_num(),
            psn,
            lid: ctx.query_port(opts.port)?.lid,
            gid: super::local_gid(ctx, opts)?,
        })
    }

    /// RESET → INIT → RTR → RTS: connects to the XRC initiator `remote`
    /// (its [`XrcIniQp::endpoint`](crate::XrcIniQp::endpoint)), answering
    /// from `local_psn` (the PSN of this side's [`endpoint`](Self::endpoint)).
    /// `opts.access` says what the initiator's RDMA writes, reads and
    /// atomics may do (checked against the memory of the SRQ each names);
    /// its RTR carries the responder's `max_dest_rd_atomic` and
    /// `min_rnr_timer`, its RTS the PSN and ACK timeout only (it has no
    /// send queue). Inputs are checked before the QP is touched.
    pub fn connect(&self, remote: &Endpoint, local_psn: u32, opts: &ConnectOptions) -> Result<()> {
        let ctx = self.domain.context();
        let rtr = transitions::rtr(ctx, remote, opts, true)?;
        let rts = transitions::rts_responder_only(local_psn, opts)?;
        let init = transitions::init(opts.port, opts.access);
        for step in [init, rtr, rts] {
            transitions::apply(self.qp, step, || self.describe())?;
        }
        Ok(())
    }
}

impl fmt::Debug for XrcTgtQp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XrcTgtQp")
            .field("qp_num", &format_args!("{:#x}", self.qp_num()))
            .field("domain", &self.domain)
            .finish()
    }
}
