//! The barriers of the direct path, per architecture, as rdma-core's
//! `util/udma_barrier.h` defines them for the provider (libmlx5) and as
//! UCX's `uct/ib/mlx5` uses them.
//!
//! - [`to_device`]: the WQEs written to the send queue (ordinary,
//!   write-back memory the device reads by DMA) are visible before the
//!   doorbell record says they are there (`udma_to_device_barrier`).
//! - [`wc_start`] and [`flush_writes`]: the doorbell record is written
//!   before the 64-bit doorbell write to the UAR page, and that write
//!   leaves the CPU's write-combining buffer before the next
//!   (`mmio_wc_start`, `mmio_flush_writes`).
//! - [`from_device`]: the CQE's fields are read after its owner bit
//!   (`udma_from_device_barrier`). On x86-64 loads are not reordered with
//!   older loads (Intel SDM vol. 3A, 9.2.2) and device writes to
//!   write-back memory are coherent, so a compiler barrier is enough, as
//!   in UCX (`ucs_memory_cpu_load_fence`); libmlx5 issues `lfence` there.
//!
//! Every barrier here is at least a compiler barrier: an `asm!` block
//! without `nomem` may read and write any memory, so the compiler keeps
//! memory accesses on their side of it.

#[cfg(target_arch = "x86_64")]
mod imp {
    use std::arch::asm;

    #[inline(always)]
    pub(crate) fn to_device() {
        // SAFETY: an empty block: a compiler barrier only.
        unsafe { asm!("", options(nostack, preserves_flags)) }
    }

    #[inline(always)]
    pub(crate) fn from_device() {
        // SAFETY: as above.
        unsafe { asm!("", options(nostack, preserves_flags)) }
    }

    #[inline(always)]
    pub(crate) fn wc_start() {
        // SAFETY: a store fence; no operands.
        unsafe { asm!("sfence", options(nostack, preserves_flags)) }
    }

    #[inline(always)]
    pub(crate) fn flush_writes() {
        // SAFETY: as above.
        unsafe { asm!("sfence", options(nostack, preserves_flags)) }
    }
}

#[cfg(target_arch = "aarch64")]
mod imp {
    use std::arch::asm;

    #[inline(always)]
    pub(crate) fn to_device() {
        // SAFETY: a data synchronisation barrier for stores; no operands.
        unsafe { asm!("dsb st", options(nostack, preserves_flags)) }
    }

    #[inline(always)]
    pub(crate) fn from_device() {
        // SAFETY: a data synchronisation barrier for loads; no operands.
        unsafe { asm!("dsb ld", options(nostack, preserves_flags)) }
    }

    #[inline(always)]
    pub(crate) fn wc_start() {
        // SAFETY: as in `to_device`.
        unsafe { asm!("dsb st", options(nostack, preserves_flags)) }
    }

    #[inline(always)]
    pub(crate) fn flush_writes() {
        // SAFETY: as in `to_device`.
        unsafe { asm!("dsb st", options(nostack, preserves_flags)) }
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod imp {
    // Elsewhere a full fence: at least as strong as what libmlx5 issues.
    use std::sync::atomic::{fence, Ordering::SeqCst};

    #[inline(always)]
    pub(crate) fn to_device() {
        fence(SeqCst)
    }

    #[inline(always)]
    pub(crate) fn from_device() {
        fence(SeqCst)
    }

    #[inline(always)]
    pub(crate) fn wc_start() {
        fence(SeqCst)
    }

    #[inline(always)]
    pub(crate) fn flush_writes() {
        fence(SeqCst)
    }
}

pub(crate) use imp::{flush_writes, from_device, to_device, wc_start};
