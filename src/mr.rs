//! Memory regions: registered memory the device may read and write.

use crate::error::{Error, Result};
use crate::ffi;
use crate::pd::ProtectionDomain;
use std::alloc::{self, Layout};
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::ptr::NonNull;

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

/// The alignment of buffers this crate allocates: a page.
const BUF_ALIGN: usize = 4096;

/// A registered memory region (`ibv_reg_mr(3)`), deregistered on drop.
///
/// [`MemoryRegion::new`] allocates and owns a zeroed, page-aligned buffer;
/// [`MemoryRegion::register_raw`] registers memory the caller owns.
/// The region keeps its protection domain alive.
///
/// Work requests name local memory as a region plus a byte range, checked
/// against the region ([`MemoryRegion::sge`]); [`MemoryRegion::remote`]
/// describes a range for a peer's RDMA read, write or atomic.
///
/// Memory registered with remote access can be changed by a peer at any
/// moment, exactly as in C; read it once the protocol says the peer is done.
pub struct MemoryRegion {
    mr: NonNull<ffi::ibv_mr>,
    addr: NonNull<u8>,
    len: usize,
    /// Allocated by this region (freed after deregistration).
    owned_buf: Option<Layout>,
    /// Registered by this value (deregistered on drop).
    owned: bool,
    access: AccessFlags,
    // Dropped after the region is deregistered.
    pd: ProtectionDomain,
}

// SAFETY: the region's memory is owned by it (or promised to it by the
// caller of `register_raw`); ibv_mr may be used and deregistered from any
// thread.
unsafe impl Send for MemoryRegion {}
// SAFETY: `&self` gives only shared reads of the buffer and of the keys;
// writes need `&mut self`.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Allocates a zeroed, page-aligned buffer of `len` bytes and registers
    /// it with `access`.
    pub fn new(pd: &ProtectionDomain, len: usize, access: AccessFlags) -> Result<Self> {
        if len == 0 {
            return Err(Error::OutOfRange {
                what: "memory region length",
                value: 0,
                limit: "at least 1 byte".into(),
            });
        }
        let layout = Layout::from_size_align(len, BUF_ALIGN).map_err(|_| Error::OutOfRange {
            what: "memory region length",
            value: len as u64,
            limit: format!("at most {} bytes", isize::MAX as usize - BUF_ALIGN),
        })?;
        // SAFETY: the layout has a non-zero size.
        let buf = unsafe { alloc::alloc_zeroed(layout) };
        let Some(addr) = NonNull::new(buf) else {
            return Err(Error::Verbs {
                call: "alloc_zeroed",
                context: format!("{len}-byte buffer for a memory region"),
                source: std::io::Error::from_raw_os_error(libc::ENOMEM),
            });
        };
        // SAFETY: `addr` points to `len` bytes allocated above.
        match unsafe { Self::register(pd, addr, len, access, Some(layout)) } {
            Ok(mr) => Ok(mr),
            Err(e) => {
                // SAFETY: allocated above with `layout`, not registered.
                unsafe { alloc::dealloc(buf, layout) };
                Err(e)
            }
        }
    }

    /// Registers `len` bytes at `addr`, which the caller owns.
    ///
    /// # Safety
    ///
    /// `addr..addr + len` must be valid for reads and writes and stay
    /// allocated, and not be accessed through other references in conflict
    /// with [`as_slice`](Self::as_slice) / [`as_mut_slice`](Self::as_mut_slice)
    /// or with the device, until the region is dropped.
    pub unsafe fn register_raw(
        pd: &ProtectionDomain,
        addr: NonNull<u8>,
        len: usize,
        access: AccessFlags,
    ) -> Result<Self> {
        if len == 0 {
            return Err(Error::OutOfRange {
                what: "memory region length",
                value: 0,
                limit: "at least 1 byte".into(),
            });
        }
        // SAFETY: forwarded from the caller.
        unsafe { Self::register(pd, addr, len, access, None) }
    }

    /// # Safety
    /// `addr..addr + len` is valid memory that outlives the region.
    unsafe fn register(
        pd: &ProtectionDomain,
        addr: NonNull<u8>,
        len: usize,
        access: AccessFlags,
        owned_buf: Option<Layout>,
    ) -> Result<Self> {
        // SAFETY: the PD is live; the memory is valid (caller's promise);
        // NULL is handled.
        let mr = unsafe {
            ffi::ibv_reg_mr(pd.as_ptr(), addr.as_ptr().cast(), len, access.bits() as i32)
        };
        let mr = NonNull::new(mr).ok_or_else(|| {
            Error::last_os(
                "ibv_reg_mr",
                format!("{len} bytes, access {access:?}, on {}", pd.context().name()),
            )
        })?;
        Ok(MemoryRegion {
            mr,
            addr,
            len,
            owned_buf,
            owned: true,
            access,
            pd: pd.clone(),
        })
    }

    /// Wraps a region registered elsewhere; the handle does not
    /// deregister it. Its address, length and keys are read from `mr`.
    ///
    /// # Safety
    ///
    /// `mr` must be a live region of `pd` registered with `access`, whose
    /// memory is valid for reads and writes and is not accessed through
    /// other references in conflict with this handle, and which stays
    /// registered until this handle is dropped.
    pub unsafe fn from_raw(
        pd: &ProtectionDomain,
        mr: NonNull<ffi::ibv_mr>,
        access: AccessFlags,
    ) -> Result<Self> {
        // SAFETY: the caller promises a live region.
        let (addr, len) = unsafe { ((*mr.as_ptr()).addr, (*mr.as_ptr()).length) };
        let addr = NonNull::new(addr.cast::<u8>())
            .ok_or_else(|| Error::InvalidArgument("ibv_mr with a NULL address".into()))?;
        if len == 0 {
            return Err(Error::OutOfRange {
                what: "memory region length",
                value: 0,
                limit: "at least 1 byte".into(),
            });
        }
        Ok(MemoryRegion {
            mr,
            addr,
            len,
            owned_buf: None,
            owned: false,
            access,
            pd: pd.clone(),
        })
    }

    /// The local key, for SGEs.
    pub fn lkey(&self) -> u32 {
        // SAFETY: the region is registered while `self` lives.
        unsafe { (*self.mr.as_ptr()).lkey }
    }

    /// The remote key, for peers' RDMA and atomics.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mr.as_ptr()).rkey }
    }

    /// The address of the first byte, as the device sees it.
    pub fn addr(&self) -> u64 {
        self.addr.as_ptr() as u64
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: regions are at least one byte long.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The access the region was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The raw `ibv_mr`, valid while the region lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_mr {
        self.mr.as_ptr()
    }

    /// The memory.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `addr..addr + len` is valid for the region's life;
        // writers need `&mut self`.
        unsafe { std::slice::from_raw_parts(self.addr.as_ptr(), self.len) }
    }

    /// The memory, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.addr.as_ptr(), self.len) }
    }

    /// Checks `range` against the region and returns its (offset, length).
    pub(crate) fn check_range(&self, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
        range_within(self.len, range)
    }

    /// A scatter/gather entry for `range` of this region: its address,
    /// length and lkey. The range must lie inside the region and be at most
    /// 4 GiB - 1 long (the SGE's 32-bit length).
    pub fn sge(&self, range: impl RangeBounds<usize>) -> Result<Sge<'_>> {
        let (offset, len) = self.check_range(range)?;
        let length = u32::try_from(len).map_err(|_| Error::OutOfRange {
            what: "SGE length",
            value: len as u64,
            limit: format!("at most {} (32-bit length)", u32::MAX),
        })?;
        Ok(Sge {
            raw: ffi::ibv_sge {
                addr: self.addr() + offset as u64,
                length,
                lkey: self.lkey(),
            },
            _mr: PhantomData,
        })
    }

    /// What a peer needs to reach `range` of this region with RDMA: its
    /// address, length and rkey. Send it to the peer out of band.
    pub fn remote(&self, range: impl RangeBounds<usize>) -> Result<RemoteBuf> {
        let (offset, len) = self.check_range(range)?;
        Ok(RemoteBuf {
            addr: self.addr() + offset as u64,
            len: len as u64,
            rkey: self.rkey(),
        })
    }
}

/// Checks that `range` lies within `0..len` and returns its (offset,
/// length). Unbounded ends mean the region's start and end.
pub(crate) fn range_within(len: usize, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
    // An inclusive end (or exclusive start) of usize::MAX names a byte
    // past any possible region.
    let past_any = |v: usize| Error::OutOfRange {
        what: "range bound",
        value: v as u64,
        limit: format!("below {} (the memory region's length)", len),
    };
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.checked_add(1).ok_or_else(|| past_any(s))?,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1).ok_or_else(|| past_any(e))?,
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if end > len {
        return Err(Error::OutOfRange {
            what: "range end",
            value: end as u64,
            limit: format!("at most {len} (the memory region's length)"),
        });
    }
    if start > end {
        return Err(Error::OutOfRange {
            what: "range start",
            value: start as u64,
            limit: format!("at most the range end {end}"),
        });
    }
    Ok((start, end - start))
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: registered by this value and deregistered once.
        let rc = unsafe { ffi::ibv_dereg_mr(self.mr.as_ptr()) };
        crate::report_destroy_failure("ibv_dereg_mr", rc, self.pd.context().name());
        if let Some(layout) = self.owned_buf {
            if rc == 0 {
                // SAFETY: allocated in `new` with `layout`; the device can no
                // longer reach it.
                unsafe { alloc::dealloc(self.addr.as_ptr(), layout) };
            }
            // When deregistration failed the device may still reach the
            // buffer: it is leaked rather than freed under the device.
        }
    }
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len)
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .field("access", &self.access)
            .finish()
    }
}

/// A scatter/gather entry (`struct ibv_sge`): `length` bytes at `addr` of
/// the region whose local key is `lkey`, borrowed from that region for `'m`.
///
/// Made by [`MemoryRegion::sge`], which checks the range; the borrow keeps
/// the region alive and unchanged while a scoped post uses it. Same layout
/// as `struct ibv_sge`, so a slice of them is handed to C as is.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Sge<'m> {
    raw: ffi::ibv_sge,
    _mr: PhantomData<&'m MemoryRegion>,
}

impl Sge<'_> {
    /// Start address.
    pub fn addr(&self) -> u64 {
        self.raw.addr
    }

    /// Length in bytes.
    pub fn length(&self) -> u32 {
        self.raw.length
    }

    /// The region's local key.
    pub fn lkey(&self) -> u32 {
        self.raw.lkey
    }

    /// An entry from raw parts (zero-based mkey entries).
    pub(crate) fn from_raw(raw: ffi::ibv_sge) -> Self {
        Sge {
            raw,
            _mr: PhantomData,
        }
    }

    /// The entries as C sees them.
    pub(crate) fn as_raw_slice<'a>(sges: &'a [Sge<'_>]) -> &'a [ffi::ibv_sge] {
        // SAFETY: Sge is repr(transparent) over ibv_sge.
        unsafe { std::slice::from_raw_parts(sges.as_ptr().cast(), sges.len()) }
    }
}

/// A receive work request over `sges` (`struct ibv_recv_wr`), after checking
/// their count against the queue's `max_sge` (`whose` names the queue).
/// The returned value points into `sges`.
pub(crate) fn recv_wr(
    wr_id: u64,
    sges: &[Sge<'_>],
    max_sge: u32,
    whose: &str,
) -> Result<ffi::ibv_recv_wr> {
    if sges.len() > max_sge as usize {
        return Err(Error::OutOfRange {
            what: "receive SGE count",
            value: sges.len() as u64,
            limit: format!("at most {max_sge} ({whose})"),
        });
    }
    Ok(ffi::ibv_recv_wr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: Sge::as_raw_slice(sges).as_ptr() as *mut ffi::ibv_sge,
        num_sge: sges.len() as i32,
    })
}

impl fmt::Debug for Sge<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sge")
            .field("addr", &format_args!("{:#x}", self.raw.addr))
            .field("length", &self.raw.length)
            .field("lkey", &format_args!("{:#x}", self.raw.lkey))
            .finish()
    }
}

impl PartialEq for Sge<'_> {
    fn eq(&self, other: &Self) -> bool {
        (self.raw.addr, self.raw.length, self.raw.lkey)
            == (other.raw.addr, other.raw.length, other.raw.lkey)
    }
}

impl Eq for Sge<'_> {}

/// A peer's memory: what an RDMA read, write or atomic targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteBuf {
    /// Remote address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// The remote region's rkey.
    pub rkey: u32,
}

impl RemoteBuf {
    /// The peer's memory at `addr` under `rkey`, of a length not known
    /// here (`len` is `u64::MAX`): work requests to it are not checked
    /// against a length on this side, as in C. The responder's device
    /// checks every access against the bounds and rights of its region and
    /// fails the work request with a remote access error
    /// ([`WcStatus::REM_ACCESS_ERR`](crate::WcStatus)) when it falls
    /// outside.
    ///
    /// It is what a loop of writes to one peer region uses to pass the
    /// rkey once and each address as C passes it, with no per-request
    /// length check:
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # fn f(qp: &mut QpEx<Rc>, sges: &[Sge<'_>], rkey: u32, raddr: &[u64]) -> Result<()> {
    /// let mut b = qp.batch_with(SendFlags::SIGNALED);
    /// for (i, (sge, &addr)) in sges.iter().zip(raddr).enumerate() {
    ///     b.wr(i as u64).rdma_write(RemoteBuf::unbounded(addr, rkey)).sge(*sge)?;
    /// }
    /// // SAFETY: the memory stays registered and untouched until the
    /// // completions are polled.
    /// unsafe { b.complete()? };
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub const fn unbounded(addr: u64, rkey: u32) -> RemoteBuf {
        RemoteBuf {
            addr,
            len: u64::MAX,
            rkey,
        }
    }

    /// `len` bytes of this buffer starting at `offset`, checked.
    pub fn slice(&self, offset: u64, len: u64) -> Result<RemoteBuf> {
        let end = offset.checked_add(len).filter(|&end| end <= self.len);
        // The fields are public: the start address plus the offset may
        // overflow even inside the stated length.
        let addr = self.addr.checked_add(offset);
        match (end, addr) {
            (Some(_), Some(addr)) if addr.checked_add(len).is_some() => Ok(RemoteBuf {
                addr,
                len,
                rkey: self.rkey,
            }),
            (Some(_), _) => Err(Error::OutOfRange {
                what: "remote range end address",
                value: self.addr.saturating_add(offset).saturating_add(len),
                limit: "below 2^64 (the remote buffer runs past the end of the address space)"
                    .into(),
            }),
            (None, _) => Err(Error::OutOfRange {
                what: "remote range end",
                value: offset.saturating_add(len),
                limit: format!("at most {} (the remote buffer's length)", self.len),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_checked_at_the_boundaries() {
        let len = 4096;
        assert_eq!(range_within(len, ..).unwrap(), (0, 4096));
        assert_eq!(range_within(len, 0..4096).unwrap(), (0, 4096));
        assert_eq!(range_within(len, 4096..4096).unwrap(), (4096, 0));
        assert_eq!(range_within(len, 0..=4095).unwrap(), (0, 4096));
        assert_eq!(range_within(len, 100..).unwrap(), (100, 3996));
        assert_eq!(range_within(len, 0..0).unwrap(), (0, 0));
        // limit + 1
        assert!(matches!(
            range_within(len, 0..4097),
            Err(Error::OutOfRange {
                what: "range end",
                value: 4097,
                ..
            })
        ));
        assert!(matches!(
            range_within(len, 0..=4096),
            Err(Error::OutOfRange {
                what: "range end",
                value: 4097,
                ..
            })
        ));
        assert!(matches!(
            range_within(len, 4097..),
            Err(Error::OutOfRange {
                what: "range start",
                value: 4097,
                ..
            })
        ));
        // the type's maximum, without overflow
        assert!(range_within(len, usize::MAX..).is_err());
        assert!(range_within(len, ..=usize::MAX).is_err());
        assert!(range_within(usize::MAX, ..=usize::MAX).is_err());
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 10..5;
        assert!(matches!(
            range_within(len, backwards),
            Err(Error::OutOfRange {
                what: "range start",
                ..
            })
        ));
    }

    #[test]
    fn remote_slices_stay_inside_the_buffer() {
        let r = RemoteBuf {
            addr: 0x1000,
            len: 64,
            rkey: 7,
        };
        assert_eq!(r.slice(0, 64).unwrap(), r);
        assert_eq!(
            r.slice(8, 8).unwrap(),
            RemoteBuf {
                addr: 0x1008,
                len: 8,
                rkey: 7
            }
        );
        assert_eq!(r.slice(64, 0).unwrap().len, 0);
        assert!(matches!(
            r.slice(1, 64),
            Err(Error::OutOfRange { value: 65, .. })
        ));
        assert!(matches!(r.slice(65, 0), Err(Error::OutOfRange { .. })));
        assert!(matches!(
            r.slice(u64::MAX, 1),
            Err(Error::OutOfRange {
                value: u64::MAX,
                ..
            })
        ));
    }

    #[test]
    fn sge_has_the_layout_of_ibv_sge() {
        assert_eq!(
            std::mem::size_of::<Sge<'_>>(),
            std::mem::size_of::<ffi::ibv_sge>()
        );
        assert_eq!(
            std::mem::align_of::<Sge<'_>>(),
            std::mem::align_of::<ffi::ibv_sge>()
        );
    }
}
