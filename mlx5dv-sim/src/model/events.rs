//! Affiliated async events, which both the kernel's commands and the
//! device engine raise: writing one to a context's async-event pipe, and
//! a QP's move to ERR.
//!
//! `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP on an SRQ that enters ERR takes
//! no more of the SRQ's receives, and says so once (the kernel's
//! `IB_EVENT_QP_LAST_WQE_REACHED`, from the HCA's SRQ_LAST_WQE event), so
//! that its owner knows when it may destroy the QP without losing
//! receives.

use super::state::{Device, QpKind, QpState};
use crate::config::debug;
use crate::sys::real;

/// `IBV_EVENT_QP_LAST_WQE_REACHED`.
pub const QP_LAST_WQE_REACHED: u32 = 16;
/// `IBV_EVENT_SRQ_LIMIT_REACHED`.
pub const SRQ_LIMIT_REACHED: u32 = 15;

/// Writes `ib_uverbs_async_event_desc{element, event_type}` to an async
/// event pipe; false if it could not.
pub fn async_event(w: i32, element: u64, event_type: u32) -> bool {
    let mut desc = [0u8; 16];
    desc[..8].copy_from_slice(&element.to_ne_bytes());
    desc[8..12].copy_from_slice(&event_type.to_ne_bytes());
    // SAFETY: `w` is the device's non-blocking write end of the context's
    // async-event pipe; `desc` is 16 readable bytes.
    let n = unsafe { real::write()(w, desc.as_ptr().cast(), desc.len()) };
    n == 16
}

/// Moves QP `h` to ERR; for a QP (not a DCT) on an SRQ that was not in
/// ERR, queues `IBV_EVENT_QP_LAST_WQE_REACHED` on its context's
/// async-event fd (and counts it, as every QP event is, for DESTROY_QP's
/// `events_reported`).
pub fn enter_err(dev: &mut Device, h: u32) {
    let Some(q) = dev.qps.get_mut(&h) else { return };
    let was = q.state;
    q.state = QpState::Err;
    // A DCT takes its receives from an SRQ too, but is no QP of the SRQ's
    // in this sense (mlx5 reports a DCT's drain with its own event).
    if was == QpState::Err || q.srq.is_none() || q.kind == QpKind::Dct {
        return;
    }
    let (ctx, handle, qpn) = (q.ctx, q.user_handle, q.qpn);
    let w = dev.contexts.get(&ctx).and_then(|c| c.async_fd);
    if w.is_some_and(|(_, w)| async_event(w, handle, QP_LAST_WQE_REACHED)) {
        debug!("QP {qpn:#x} on an SRQ -> ERR: last WQE reached");
        if let Some(q) = dev.qps.get_mut(&h) {
            q.events += 1;
        }
    }
}
