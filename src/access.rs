//! What the device may do with memory ([`AccessFlags`]): below the errors
//! that name it, and the regions, windows and QPs that take it.

use crate::ffi;

bitflags::bitflags! {
    /// What the device may do with a memory region (`enum ibv_access_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct AccessFlags: u32 {
        /// The local device may write (needed for receives, reads and
        /// atomics landing here, and for any remote write access).
        const LOCAL_WRITE = ffi::IBV_ACCESS_LOCAL_WRITE;
        /// Remote peers may RDMA-write here.
        const REMOTE_WRITE = ffi::IBV_ACCESS_REMOTE_WRITE;
        /// Remote peers may RDMA-read from here.
        const REMOTE_READ = ffi::IBV_ACCESS_REMOTE_READ;
        /// Remote peers may run atomics here.
        const REMOTE_ATOMIC = ffi::IBV_ACCESS_REMOTE_ATOMIC;
        /// Memory windows may be bound to the region.
        const MW_BIND = ffi::IBV_ACCESS_MW_BIND;
        /// Addresses are offsets from the region's start.
        const ZERO_BASED = ffi::IBV_ACCESS_ZERO_BASED;
        /// On-demand paging.
        const ON_DEMAND = ffi::IBV_ACCESS_ON_DEMAND;
        /// Relaxed ordering of the device's PCI writes.
        const RELAXED_ORDERING = ffi::IBV_ACCESS_RELAXED_ORDERING;
    }
}
