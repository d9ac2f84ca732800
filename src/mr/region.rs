//! The region itself: [`MemoryRegion`], its registration, keys and
//! deregistration, and the range checks every entry and remote buffer made
//! of it goes through.

use super::remote::RemoteBuf;
use crate::access::AccessFlags;
use crate::error::{Error, Result};
use crate::ffi;
use crate::pd::ProtectionDomain;
use std::alloc::{self, Layout};
use std::fmt;
use std::ops::{Bound, RangeBounds};
use std::ptr::NonNull;

/// The alignment of buffers this crate allocates: a page.
pub(super) const BUF_ALIGN: usize = 4096;

/// A registered memory region (`ibv_reg_mr(3)`), deregistered on drop.
///
/// [`MemoryRegion::new`] allocates and owns a zeroed, page-aligned buffer;
/// [`MemoryRegion::register_raw`] registers memory the caller owns.
/// The region keeps its protection domain alive.
///
/// Work requests name local memory as a region plus a byte range, checked
/// against the region ([`MemoryRegion::sge`], [`MemoryRegion::sge_mut`]);
/// [`MemoryRegion::remote`] describes a range for a peer's RDMA read, write
/// or atomic.
///
/// # Who may touch the memory, and when
///
/// Three agents reach a region's memory: this program, the local device
/// (running the work requests posted here) and, with remote access, peers.
/// The types keep them from meeting where one could break what the
/// compiler assumes of the other:
///
/// - Memory the local device **reads** (the source of a send or an RDMA
///   write) is named by an [`Sge`](crate::Sge), which borrows the region
///   shared: until the completion it can be read here but not written.
/// - Memory the local device **writes** (the destination of an RDMA read,
///   an atomic or a memcpy) is named by an [`SgeMut`](crate::SgeMut),
///   which borrows the region exclusively: until the completion nothing
///   here reads or writes it, not even by copying.
/// - Memory a **remote peer may write**: a region registered with
///   [`REMOTE_WRITE`](AccessFlags::REMOTE_WRITE),
///   [`REMOTE_ATOMIC`](AccessFlags::REMOTE_ATOMIC) or
///   [`MW_BIND`](AccessFlags::MW_BIND) ([`is_peer_writable`](Self::is_peer_writable))
///   can change at any moment while it is registered, whatever is borrowed
///   here. Rust assumes the memory behind a `&[u8]` or `&mut [u8]` changes
///   only through it, and an optimiser that relies on that moves or merges
///   loads across the peer's write; so such a region never hands out a
///   plain slice: [`as_slice`](Self::as_slice) and
///   [`as_mut_slice`](Self::as_mut_slice) return [`Error::PeerWritable`].
///   It is read and written by copying with volatile accesses
///   ([`read_at`](Self::read_at), [`to_vec`](Self::to_vec),
///   [`write_at`](Self::write_at), [`fill`](Self::fill)), which the
///   compiler performs as written, as rust-vmm's `vm-memory` reaches guest
///   memory. A copy taken while the peer is writing may mix old and new
///   bytes: read once the protocol says the peer is done.
/// - Any other region is this program's alone while no work request holds
///   it: `as_slice` and `as_mut_slice` give plain slices. The copying
///   methods work on every region.
///
/// A region peers may write, reached by copying:
///
/// ```no_run
/// # use mlx5dv::*;
/// # fn f(pd: &ProtectionDomain) -> Result<()> {
/// let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
/// let mut mr = MemoryRegion::new(pd, 4096, access)?;
/// assert!(mr.is_peer_writable());
/// assert!(matches!(mr.as_slice(), Err(Error::PeerWritable { .. })));
/// mr.write_at(0, b"hello")?;
/// // ... the peer RDMA-writes 64 bytes at 0 and says it is done ...
/// let mut head = [0u8; 5];
/// mr.read_at(0, &mut head)?;
/// let message: Vec<u8> = mr.to_vec(0..64)?;
/// # Ok(()) }
/// ```
///
/// A region only this program and its device touch, as plain slices:
///
/// ```no_run
/// # use mlx5dv::*;
/// # fn f(pd: &ProtectionDomain) -> Result<()> {
/// let mut mr = MemoryRegion::new(pd, 4096, AccessFlags::LOCAL_WRITE)?;
/// mr.as_mut_slice()?[..5].copy_from_slice(b"hello");
/// let src = mr.sge(0..5)?; // the device will read it: `mr` stays readable
/// assert_eq!(&mr.as_slice()?[..5], b"hello");
/// # let _ = src;
/// # Ok(()) }
/// ```
///
/// Memory the device writes, borrowed exclusively until the completions are
/// in; one region cut into a read's destination and an atomic's:
///
/// ```no_run
/// # use mlx5dv::*;
/// # use std::time::Duration;
/// # fn f(qp: &mut RcQp, cq: &mut CompletionQueue, dst: &mut MemoryRegion,
/// #      page: RemoteBuf, counter: RemoteBuf) -> Result<()> {
/// let (page_into, old_into) = dst.sge_mut(0..4096 + 8)?.split_at(4096)?;
/// qp.post_and_wait(cq, Duration::from_secs(5), |b| {
///     b.wr(1).rdma_read(page).sge(page_into)?;
///     b.wr(2).atomic_fetch_add(counter, 1).sge(old_into)
/// })?;
/// let old = dst.to_vec(4096..4096 + 8)?; // the entries are gone: `dst` is free
/// # Ok(()) }
/// ```
pub struct MemoryRegion {
    pub(super) mr: NonNull<ffi::ibv_mr>,
    pub(super) addr: NonNull<u8>,
    pub(super) len: usize,
    /// The keys, read from the `ibv_mr` at registration and after each
    /// re-registration (which takes `&mut self`), so that a loop making
    /// SGEs keeps the lkey in a register, as C keeps `mr->lkey`.
    pub(super) lkey: u32,
    pub(super) rkey: u32,
    /// Allocated by this region (freed after deregistration).
    pub(super) owned_buf: Option<Layout>,
    /// Registered by this value (deregistered on drop).
    pub(super) owned: bool,
    pub(super) access: AccessFlags,
    /// Whether a peer was ever granted write access (remote write or
    /// atomic, or a window bind): kept for the region's life, since an
    /// mkey layout or a window made while it was granted may still reach
    /// the memory after a re-registration takes the access away.
    pub(super) peer_granted: bool,
    /// Held (cloned) by every memory window ever bound to the region, until
    /// that window is deallocated: while a clone lives, a window may reach
    /// the memory, so the region's buffer is not freed, moved or handed to
    /// another PD.
    pub(crate) windows: std::sync::Arc<()>,
    // Dropped after the region is deregistered.
    pub(super) pd: ProtectionDomain,
}

// SAFETY: the region's memory is owned by it (or promised to it by the
// caller of `register_raw`); ibv_mr may be used and deregistered from any
// thread.
unsafe impl Send for MemoryRegion {}
// SAFETY: `&self` gives only shared reads of the buffer (plain slices only
// when no peer may write it, volatile copies otherwise) and of the keys;
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
    /// with the region's accessors ([`as_slice`](Self::as_slice),
    /// [`as_mut_slice`](Self::as_mut_slice), [`read_at`](Self::read_at),
    /// [`write_at`](Self::write_at), ...) or with the device, until the
    /// region is dropped and every [`MemoryWindow`](crate::MemoryWindow)
    /// ever bound to it is deallocated (a window may reach the memory
    /// until then).
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
        // SAFETY: registered above.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        Ok(MemoryRegion {
            mr,
            addr,
            len,
            lkey,
            rkey,
            owned_buf,
            owned: true,
            access,
            peer_granted: access.intersects(PEER_WRITES),
            windows: Default::default(),
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
    /// registered, and is not re-registered (`ibv_rereg_mr`: its address,
    /// length and keys are read once, here), until this handle is dropped.
    /// `access` must include every
    /// remote access the region grants: from it the handle decides whether
    /// peers may write the memory, and so whether it may be handed out as a
    /// plain slice ([`is_peer_writable`](Self::is_peer_writable)).
    pub unsafe fn from_raw(
        pd: &ProtectionDomain,
        mr: NonNull<ffi::ibv_mr>,
        access: AccessFlags,
    ) -> Result<Self> {
        // SAFETY: the caller promises a live region.
        let (addr, len, lkey, rkey) = unsafe {
            let r = &*mr.as_ptr();
            (r.addr, r.length, r.lkey, r.rkey)
        };
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
            lkey,
            rkey,
            owned_buf: None,
            owned: false,
            access,
            peer_granted: access.intersects(PEER_WRITES),
            windows: Default::default(),
            pd: pd.clone(),
        })
    }

    /// The local key, for SGEs.
    #[inline]
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key, for peers' RDMA and atomics.
    #[inline]
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// The address of the first byte, as the device sees it.
    #[inline]
    pub fn addr(&self) -> u64 {
        self.addr.as_ptr() as u64
    }

    /// The length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// False, but for a region whose re-registration failed in the
    /// command ([`rereg_access`](Self::rereg_access)): it has length 0
    /// and reaches no memory.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The access the region was registered (or last re-registered) with.
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

    /// Checks `range` against the region and returns its (offset, length).
    #[inline]
    pub(crate) fn check_range(&self, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
        range_within_of(&self.len, range)
    }

    /// What a peer needs to reach `range` of this region with RDMA: its
    /// address, length and rkey. Send it to the peer out of band.
    ///
    /// It is made whatever the region's access, as a `RemoteBuf` is
    /// plain data that any code may also build field by field: a peer's
    /// work request that the region's access does not allow (no
    /// [`REMOTE_WRITE`](AccessFlags::REMOTE_WRITE),
    /// [`REMOTE_READ`](AccessFlags::REMOTE_READ) or
    /// [`REMOTE_ATOMIC`](AccessFlags::REMOTE_ATOMIC) for its operation)
    /// completes, at the peer, with
    /// [`WcStatus::REM_ACCESS_ERR`](crate::WcStatus::REM_ACCESS_ERR), its
    /// QP going to ERR, and nothing shows on this side. Check
    /// [`access`](Self::access) before handing one out; after
    /// [`rereg_access`](Self::rereg_access) make a new one, as the rkey
    /// may have changed.
    #[inline]
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
///
/// Inlined, its errors' text made out of line: each check is a compare
/// in the caller (and the start's folds away where the range's length is
/// known). The error's variant is made at the check, so that the caller's
/// `?` knows the result is an error and no value of the error path flows
/// back into its loop.
#[inline]
pub(crate) fn range_within(len: usize, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
    range_within_of(&len, range)
}

/// [`range_within`], given where the length is: the errors read it from
/// there, so that in the caller's loop the length has one use, the
/// compare, which then reads it from memory itself (a region's length is
/// read once per check, not held in a register for the error's text).
#[inline]
fn range_within_of(len: &usize, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
    // An inclusive end (or exclusive start) of usize::MAX names a byte
    // past any possible region.
    let past_any = |bound: usize| Error::OutOfRange {
        what: "range bound",
        value: bound as u64,
        limit: below_region_len(len),
    };
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => match s.checked_add(1) {
            Some(s) => s,
            None => return Err(past_any(s)),
        },
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => match e.checked_add(1) {
            Some(e) => e,
            None => return Err(past_any(e)),
        },
        Bound::Excluded(&e) => e,
        Bound::Unbounded => *len,
    };
    if end > *len {
        return Err(Error::OutOfRange {
            what: "range end",
            value: end as u64,
            limit: at_most_region_len(len),
        });
    }
    if start > end {
        return Err(Error::OutOfRange {
            what: "range start",
            value: start as u64,
            limit: at_most_range_end(end),
        });
    }
    Ok((start, end - start))
}

#[cold]
#[inline(never)]
fn below_region_len(len: &usize) -> String {
    format!("below {len} (the memory region's length)")
}

#[cold]
#[inline(never)]
fn at_most_region_len(len: &usize) -> String {
    format!("at most {len} (the memory region's length)")
}

#[cold]
#[inline(never)]
fn at_most_range_end(end: usize) -> String {
    format!("at most the range end {end}")
}

/// The access bits that let a peer write a region's memory.
pub(crate) const PEER_WRITES: AccessFlags = AccessFlags::REMOTE_WRITE
    .union(AccessFlags::REMOTE_ATOMIC)
    .union(AccessFlags::MW_BIND);

impl MemoryRegion {
    /// Whether a memory window bound to the region (at any time) is still
    /// allocated, and so may reach its memory.
    pub(crate) fn windows_may_reach(&self) -> bool {
        std::sync::Arc::strong_count(&self.windows) > 1
    }

    /// Records that a peer may write the memory from now on.
    pub(crate) fn grant_peer(&mut self, access: AccessFlags) {
        self.peer_granted |= access.intersects(PEER_WRITES);
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: registered by this value and deregistered once.
        let rc = unsafe { ffi::ibv_dereg_mr(self.mr.as_ptr()) };
        crate::error::report_destroy_failure("ibv_dereg_mr", rc, self.pd.context().name());
        if let Some(layout) = self.owned_buf {
            if rc == 0 && !self.windows_may_reach() {
                // SAFETY: allocated in `new` with `layout`; the device can no
                // longer reach it.
                unsafe { alloc::dealloc(self.addr.as_ptr(), layout) };
            }
            // When deregistration failed, or a memory window bound to the
            // region is still allocated, the device may still reach the
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
