//! The checks and queries every QP type shares: 24-bit numbers (QP and
//! DCT numbers, PSNs), the connection options' bit fields, the local GID
//! a connection sends from, and the state the kernel reports.

use super::ConnectOptions;
use crate::error::{Error, Result};
use crate::ffi;
use crate::qp_state::QpState;

/// The state of a QP (`ibv_query_qp` of `IBV_QP_STATE`), or the errno.
///
/// # Safety
/// `qp` is a live QP.
pub(crate) unsafe fn query_state(qp: *mut ffi::ibv_qp) -> std::result::Result<QpState, i32> {
    let mut attr = ffi::ibv_qp_attr::default();
    let mut init = ffi::ibv_qp_init_attr::default();
    // SAFETY: the caller's promise; both out-structs are writable.
    let rc = unsafe { ffi::ibv_query_qp(qp, &mut attr, ffi::IBV_QP_STATE as i32, &mut init) };
    if rc == 0 {
        Ok(QpState::from_raw(attr.qp_state))
    } else {
        Err(rc)
    }
}

/// The local GID that `opts` sends from (its GID index on its port), or the
/// zero GID when it names none (InfiniBand within a subnet).
pub(crate) fn local_gid(
    ctx: &crate::device::Context,
    opts: &ConnectOptions,
) -> Result<crate::port::Gid> {
    match opts.gid_index {
        Some(i) => ctx.gid(opts.port, u32::from(i)),
        None => Ok(crate::port::Gid::default()),
    }
}

/// Transport and RNR retry counts are 3-bit fields, a flow label 20 bits.
pub(crate) fn check_retries(opts: &ConnectOptions) -> Result<()> {
    if opts.flow_label > 0x000F_FFFF {
        return Err(Error::OutOfRange {
            what: "flow_label",
            value: u64::from(opts.flow_label),
            limit: "at most 0xfffff (20 bits)".into(),
        });
    }
    if opts.retry_cnt > 7 || opts.rnr_retry > 7 {
        return Err(Error::OutOfRange {
            what: "retry_cnt / rnr_retry",
            value: u64::from(opts.retry_cnt.max(opts.rnr_retry)),
            limit: "at most 7 (3-bit fields)".into(),
        });
    }
    Ok(())
}

/// A packet sequence number has 24 bits.
pub(crate) fn check_psn(psn: u32) -> Result<()> {
    check_24_bits("PSN", psn)
}

/// QP numbers, DCT numbers and PSNs have 24 bits: `value` of `what` past
/// them is refused.
pub(crate) fn check_24_bits(what: &'static str, value: u32) -> Result<()> {
    if value > MAX_24_BITS {
        return Err(past_24_bits(what, value));
    }
    Ok(())
}

/// The largest 24-bit value: a QP number, a DCT number, a PSN.
pub(crate) const MAX_24_BITS: u32 = 0x00FF_FFFF;

/// The error of a `value` of `what` past 24 bits.
#[cold]
#[inline(never)]
pub(crate) fn past_24_bits(what: &'static str, value: u32) -> Error {
    Error::OutOfRange {
        what,
        value: u64::from(value),
        limit: "at most 0xffffff (24 bits)".into(),
    }
}

/// No PSN given yet (PSNs have 24 bits).
pub(crate) const NO_PSN: u32 = u32::MAX;
