//! A work request's flags ([`SendFlags`]): what a caller may set, and
//! what the crate sets itself.

use crate::ffi;

bitflags::bitflags! {
    /// Per-WR flags (`ibv_qp_ex.wr_flags`, `enum ibv_send_flags`).
    ///
    /// `IBV_SEND_INLINE` tells the device that a work request's data is in
    /// the WQE itself, so the crate sets it on exactly the work requests
    /// whose data is inline ([`Op::inline`](crate::wr::Op::inline), and the builders that need
    /// it, such as [`Wr::mr_list`](crate::wr::Wr::mr_list)) and clears it on every other: set on a
    /// work request with SGEs, the device would send the WQE's own bytes as
    /// data (a kernel crash on soft-RoCE). [`Wr::flags`](crate::wr::Wr::flags) keeps `FENCE`,
    /// `SIGNALED` and `SOLICITED` only; [`QpEx::batch_with`](crate::QpEx::batch_with) also keeps
    /// [`INLINE`](Self::INLINE), as a statement that the batch's work
    /// requests carry inline data (so that they need no flag write of
    /// their own). Any undefined bit (from
    /// [`SendFlags::from_bits_retain`]) is masked out before C sees it.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SendFlags: u32 {
        /// Wait for earlier RDMA reads and atomics before this WR
        /// (`IBV_SEND_FENCE`).
        const FENCE = ffi::IBV_SEND_FENCE;
        /// Generate a completion (`IBV_SEND_SIGNALED`).
        const SIGNALED = ffi::IBV_SEND_SIGNALED;
        /// Solicited event at the receiver (`IBV_SEND_SOLICITED`).
        const SOLICITED = ffi::IBV_SEND_SOLICITED;
        /// The data is copied into the WQE (`IBV_SEND_INLINE`): applied by
        /// the crate to inline data only (see above).
        const INLINE = ffi::IBV_SEND_INLINE;
    }
}

impl SendFlags {
    /// What a caller may set on one work request.
    pub(super) const PER_WR: SendFlags = SendFlags::from_bits_retain(
        SendFlags::FENCE.bits() | SendFlags::SIGNALED.bits() | SendFlags::SOLICITED.bits(),
    );
}
