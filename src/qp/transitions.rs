//! The attributes of the connected state transitions (INIT, RTR, RTS) as
//! `ibv_modify_qp(3)` takes them, for QPs whose masks differ from RC's:
//! the XRC initiator and target (the kernel's `ib_modify_qp_is_ok` table
//! refuses an attribute a transport does not take).

use super::{check_psn, check_retries, ConnectOptions, Endpoint};
use crate::addressing::ah::AhAttr;
use crate::device::Context;
use crate::error::{check, Result};
use crate::ffi;
use crate::mr::AccessFlags;
use std::ptr::NonNull;

/// One transition: the attributes and the mask of those set.
pub(crate) struct Step {
    pub(crate) attr: ffi::ibv_qp_attr,
    pub(crate) mask: u32,
    /// The state's name, for the error.
    pub(crate) to: &'static str,
}

/// RESET → INIT on `port`, allowing `access` from remote peers.
pub(crate) fn init(port: u8, access: AccessFlags) -> Step {
    Step {
        attr: ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qp_access_flags: access.bits(),
            ..Default::default()
        },
        mask: ffi::IBV_QP_STATE
            | ffi::IBV_QP_PKEY_INDEX
            | ffi::IBV_QP_PORT
            | ffi::IBV_QP_ACCESS_FLAGS,
        to: "INIT",
    }
}

/// INIT → RTR towards `remote`; a `responder` (serving the peer's reads,
/// atomics and sends, with RNR NAKs) also gets `max_dest_rd_atomic` and
/// `min_rnr_timer`. On RoCE `opts` must name a source GID.
pub(crate) fn rtr(
    ctx: &Context,
    remote: &Endpoint,
    opts: &ConnectOptions,
    responder: bool,
) -> Result<Step> {
    check_psn(remote.psn)?;
    crate::addressing::roce::require_gid(ctx, opts)?;
    let av = AhAttr::towards(remote.lid, remote.gid, opts);
    let mut mask = ffi::IBV_QP_STATE
        | ffi::IBV_QP_AV
        | ffi::IBV_QP_PATH_MTU
        | ffi::IBV_QP_DEST_QPN
        | ffi::IBV_QP_RQ_PSN;
    if responder {
        mask |= ffi::IBV_QP_MAX_DEST_RD_ATOMIC | ffi::IBV_QP_MIN_RNR_TIMER;
    }
    Ok(Step {
        attr: ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RTR,
            path_mtu: opts.mtu as u32,
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: opts.max_dest_rd_atomic,
            min_rnr_timer: opts.min_rnr_timer,
            ah_attr: av.to_raw(),
            ..Default::default()
        },
        mask,
        to: "RTR",
    })
}

/// RTR → RTS of a QP with no send queue to retry (an XRC target): the
/// PSN it answers from and its ACK timeout only.
pub(crate) fn rts_responder_only(sq_psn: u32, opts: &ConnectOptions) -> Result<Step> {
    check_psn(sq_psn)?;
    check_retries(opts)?;
    Ok(Step {
        attr: ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RTS,
            timeout: opts.timeout,
            sq_psn,
            ..Default::default()
        },
        mask: ffi::IBV_QP_STATE | ffi::IBV_QP_TIMEOUT | ffi::IBV_QP_SQ_PSN,
        to: "RTS",
    })
}

/// Runs `step` on the live QP `qp`; `describe` names it in the error.
pub(crate) fn apply(
    qp: NonNull<ffi::ibv_qp>,
    mut step: Step,
    describe: impl FnOnce() -> String,
) -> Result<()> {
    // SAFETY: the caller's QP is live; `step.attr` is initialised for
    // every bit of `step.mask`.
    let rc = unsafe { ffi::ibv_modify_qp(qp.as_ptr(), &mut step.attr, step.mask as i32) };
    check(rc, "ibv_modify_qp", || {
        format!("{} to {}", describe(), step.to)
    })
}
