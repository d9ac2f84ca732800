//! The regions an async operation owns while the device uses them:
//! [`IoBuf`] (read by the device) and [`IoBufMut`] (written by it).

use crate::MemoryRegion;
use std::sync::Arc;

/// A registered region that an async operation owns while the device
/// reads it (a send or RDMA-write source), given back with the result.
///
/// # Safety
///
/// [`region`](Self::region) returns the same region for as long as the
/// value lives, whose memory stays where it is when the value moves, and
/// which nothing writes through another handle while an operation holds
/// the value (an `Arc` gives its other holders only `&MemoryRegion`:
/// reads).
pub unsafe trait IoBuf: Send + 'static {
    /// The region.
    fn region(&self) -> &MemoryRegion;
}

/// A registered region that an async operation owns while the device
/// writes it (a receive or RDMA-read destination): held by value, so that
/// nothing else reads or writes it meanwhile.
///
/// # Safety
///
/// As for [`IoBuf`], and nothing reads or writes the region through
/// another handle while an operation holds the value.
pub unsafe trait IoBufMut: IoBuf {
    /// The region, to be written.
    fn region_mut(&mut self) -> &mut MemoryRegion;
}

// SAFETY: owned by value: the region moves, its memory does not.
unsafe impl IoBuf for MemoryRegion {
    fn region(&self) -> &MemoryRegion {
        self
    }
}
// SAFETY: as above; no other handle exists.
unsafe impl IoBufMut for MemoryRegion {
    fn region_mut(&mut self) -> &mut MemoryRegion {
        self
    }
}

// SAFETY: the box owns the region.
unsafe impl IoBuf for Box<MemoryRegion> {
    fn region(&self) -> &MemoryRegion {
        self
    }
}
// SAFETY: as above.
unsafe impl IoBufMut for Box<MemoryRegion> {
    fn region_mut(&mut self) -> &mut MemoryRegion {
        self
    }
}

// SAFETY: the other holders of the Arc have `&MemoryRegion` only, which
// reads (writes take `&mut`); the region lives while any holder does.
unsafe impl IoBuf for Arc<MemoryRegion> {
    fn region(&self) -> &MemoryRegion {
        self
    }
}
