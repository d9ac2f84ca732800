//! The C calls of a completion channel, in one table (libibverbs', or a
//! unit test's fakes).

use crate::fd::clear_errno;
use crate::ffi;

/// The channel's C calls, in one table: reading an event, acknowledging
/// events, destroying the channel. Unit tests put fakes over a pipe here,
/// so that the waits and the acknowledgements are checked without a
/// device.
pub(super) struct ChannelOps {
    /// `ibv_get_cq_event` on the (non-blocking) channel: the event's CQ, or
    /// the errno (`EAGAIN` when none is waiting).
    pub(super) get_event:
        unsafe fn(*mut ffi::ibv_comp_channel) -> std::result::Result<*mut ffi::ibv_cq, i32>,
    /// `ibv_ack_cq_events`.
    pub(super) ack: unsafe fn(*mut ffi::ibv_cq, u32),
    /// `ibv_destroy_comp_channel`: 0, or the errno.
    pub(super) destroy: unsafe fn(*mut ffi::ibv_comp_channel) -> i32,
}

/// libibverbs' calls.
pub(super) static VERBS: ChannelOps = ChannelOps {
    get_event: verbs_get_event,
    ack: verbs_ack,
    destroy: verbs_destroy,
};

/// `ibv_get_cq_event`, the CQ or the errno.
///
/// # Safety
/// `chan` is a live channel; the caller holds the channel's lock.
unsafe fn verbs_get_event(
    chan: *mut ffi::ibv_comp_channel,
) -> std::result::Result<*mut ffi::ibv_cq, i32> {
    let mut cq = std::ptr::null_mut();
    let mut cq_context = std::ptr::null_mut();
    clear_errno();
    // SAFETY: the caller's promise; the CQ returned is live until its
    // event is acknowledged.
    let rc = unsafe { ffi::ibv_get_cq_event(chan, &mut cq, &mut cq_context) };
    if rc == 0 {
        Ok(cq)
    } else {
        // A short read leaves errno unset: an I/O error then.
        // SAFETY: `__errno_location` returns this thread's errno.
        match unsafe { *libc::__errno_location() } {
            0 => Err(libc::EIO),
            errno => Err(errno),
        }
    }
}

/// `ibv_ack_cq_events`.
///
/// # Safety
/// `cq` is live, and `n` of its events were read and not yet acknowledged.
unsafe fn verbs_ack(cq: *mut ffi::ibv_cq, n: u32) {
    // SAFETY: the caller's promise.
    unsafe { ffi::ibv_ack_cq_events(cq, n) }
}

/// `ibv_destroy_comp_channel`.
///
/// # Safety
/// `chan` is live, has no CQ left, and is destroyed once.
unsafe fn verbs_destroy(chan: *mut ffi::ibv_comp_channel) -> i32 {
    // SAFETY: the caller's promise.
    unsafe { ffi::ibv_destroy_comp_channel(chan) }
}
