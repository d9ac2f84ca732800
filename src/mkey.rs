//! Indirect mkeys (`mlx5dv_create_mkey(3)`), whose memory layout is set by
//! a work request: `mlx5dv_wr_mr_list` or `mlx5dv_wr_mr_interleaved`.

use crate::error::{Error, Result};
use crate::ffi;
use crate::mr::{range_within, RemoteBuf, Sge};
use crate::pd::ProtectionDomain;
use std::fmt;
use std::ops::RangeBounds;
use std::ptr::NonNull;

/// An indirect mkey (`struct mlx5dv_mkey`), destroyed on drop.
///
/// Created empty with room for `max_entries` layout entries; a registration
/// work request ([`Wr::mr_list`](crate::wr::Wr::mr_list),
/// [`Wr::mr_interleaved`](crate::wr::Wr::mr_interleaved)) gives it a
/// layout, and a local invalidate ([`Wr::local_inv`](crate::wr::Wr::local_inv)
/// with [`Mkey::rkey`]) removes it so that another layout can be
/// registered. As mlx5dv_wr_post(3) says, the mkey is used zero-based:
/// addresses through it are offsets into the layout.
pub struct Mkey {
    mkey: NonNull<ffi::mlx5dv_mkey>,
    max_entries: u16,
    remote_invalidate: bool,
    /// Created by this value (destroyed on drop).
    owned: bool,
    /// The PD's device context, at hand for the check that a QP posting a
    /// layout on the mkey is of the same one.
    ctx: *mut ffi::ibv_context,
    // Dropped after the mkey is destroyed.
    pd: ProtectionDomain,
}

// SAFETY: an mlx5dv_mkey is a pair of keys and a kernel object; creating and
// destroying it are thread-safe calls.
unsafe impl Send for Mkey {}
// SAFETY: as above.
unsafe impl Sync for Mkey {}

impl Mkey {
    /// Creates an indirect mkey (`MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT`)
    /// in `pd` with room for `max_entries` layout entries; with
    /// `remote_invalidate`, a peer's send-with-invalidate may invalidate it
    /// (`MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE`).
    ///
    /// An interleaved layout of N entries needs `max_entries` of N + 1 (one
    /// entry holds the repeat header).
    pub fn new(pd: &ProtectionDomain, max_entries: u16, remote_invalidate: bool) -> Result<Self> {
        let ctx = pd.context();
        if max_entries == 0 {
            return Err(Error::OutOfRange {
                what: "mkey max_entries",
                value: 0,
                limit: "at least 1".into(),
            });
        }
        if !ctx.is_mlx5() {
            return Err(Error::Unsupported {
                what: format!("mlx5dv_create_mkey: {} is not an mlx5 device", ctx.name()),
            });
        }
        let mut flags = ffi::MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT;
        if remote_invalidate {
            flags |= ffi::MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE;
        }
        let mut attr = ffi::mlx5dv_mkey_init_attr {
            pd: pd.as_ptr(),
            create_flags: flags,
            max_entries,
        };
        // SAFETY: the PD is live and `attr` initialised; NULL is handled.
        let mkey = unsafe { ffi::mlx5dv_create_mkey(&mut attr) };
        let mkey = NonNull::new(mkey).ok_or_else(|| {
            Error::last_os(
                "mlx5dv_create_mkey",
                format!("indirect, {max_entries} entries, on {}", ctx.name()),
            )
        })?;
        Ok(Mkey {
            mkey,
            max_entries,
            remote_invalidate,
            owned: true,
            ctx: pd.context().as_ptr(),
            pd: pd.clone(),
        })
    }

    /// Wraps an indirect mkey created elsewhere with room for
    /// `max_entries` entries; the handle does not destroy it.
    ///
    /// # Safety
    ///
    /// `mkey` must be a live indirect mkey of `pd` created with at least
    /// `max_entries` entries, that stays alive until this handle is dropped.
    pub unsafe fn from_raw(
        pd: &ProtectionDomain,
        mkey: NonNull<ffi::mlx5dv_mkey>,
        max_entries: u16,
        remote_invalidate: bool,
    ) -> Self {
        Mkey {
            mkey,
            max_entries,
            remote_invalidate,
            owned: false,
            ctx: pd.context().as_ptr(),
            pd: pd.clone(),
        }
    }

    /// The device context of the mkey's PD.
    #[inline]
    pub(crate) fn context_ptr(&self) -> *mut ffi::ibv_context {
        self.ctx
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        // SAFETY: the mkey is live while `self` is.
        unsafe { (*self.mkey.as_ptr()).lkey }
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        // SAFETY: as above.
        unsafe { (*self.mkey.as_ptr()).rkey }
    }

    /// How many layout entries it has room for.
    pub fn max_entries(&self) -> u16 {
        self.max_entries
    }

    /// Whether a peer may invalidate it remotely.
    pub fn remote_invalidate(&self) -> bool {
        self.remote_invalidate
    }

    /// The raw mkey, valid while this handle lives.
    pub fn as_ptr(&self) -> *mut ffi::mlx5dv_mkey {
        self.mkey.as_ptr()
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }
}

/// The layout a registration work request gives an mkey: its keys and how
/// many bytes it covers, addressed zero-based. Returned by
/// [`Wr::mr_list`](crate::wr::Wr::mr_list) and
/// [`Wr::mr_interleaved`](crate::wr::Wr::mr_interleaved) (computed from
/// their entries, at no cost when unused), or made with
/// [`MkeyLayout::new`] for a layout registered elsewhere.
///
/// It describes the registration as it was built: the mkey has it only once
/// that work request has completed successfully (not if its batch was
/// aborted, refused or flushed). Through it, the peer's accesses and the
/// local SGEs are bounded by the layout's length; the device checks them
/// against the registered layout too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MkeyLayout<'k> {
    mkey: &'k Mkey,
    len: u64,
}

impl<'k> MkeyLayout<'k> {
    /// A layout of `len` bytes on `mkey`.
    pub fn new(mkey: &'k Mkey, len: u64) -> Self {
        MkeyLayout { mkey, len }
    }

    /// Bytes the layout covers.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it covers none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mkey.
    pub fn mkey(&self) -> &'k Mkey {
        self.mkey
    }

    fn range(&self, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
        let len = usize::try_from(self.len).unwrap_or(usize::MAX);
        range_within(len, range)
    }

    /// What a peer needs to reach `range` of the layout: a zero-based
    /// address (the offset), the length and the mkey's rkey.
    pub fn remote(&self, range: impl RangeBounds<usize>) -> Result<RemoteBuf> {
        let (offset, len) = self.range(range)?;
        Ok(RemoteBuf {
            addr: offset as u64,
            len: len as u64,
            rkey: self.mkey.rkey(),
        })
    }

    /// A local SGE for `range` of the layout (zero-based).
    ///
    /// # Safety
    ///
    /// Work requests through the SGE reach the memory of the regions the
    /// layout was registered over, which this borrow does not cover: those
    /// regions must stay registered, and their memory must not be accessed
    /// in conflict with the device, until the work requests have completed.
    pub unsafe fn sge(&self, range: impl RangeBounds<usize>) -> Result<Sge<'k>> {
        let (offset, len) = self.range(range)?;
        let length = u32::try_from(len).map_err(|_| Error::OutOfRange {
            what: "SGE length",
            value: len as u64,
            limit: format!("at most {} (32-bit length)", u32::MAX),
        })?;
        Ok(Sge::from_raw(ffi::ibv_sge {
            addr: offset as u64,
            length,
            lkey: self.mkey.lkey(),
        }))
    }
}

impl PartialEq for Mkey {
    fn eq(&self, other: &Self) -> bool {
        self.mkey == other.mkey
    }
}

impl Eq for Mkey {}

impl Drop for Mkey {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: created by this value and destroyed once.
        let rc = unsafe { ffi::mlx5dv_destroy_mkey(self.mkey.as_ptr()) };
        crate::error::report_destroy_failure("mlx5dv_destroy_mkey", rc, self.pd.context().name());
    }
}

impl fmt::Debug for Mkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mkey")
            .field("lkey", &format_args!("{:#x}", self.lkey()))
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .field("max_entries", &self.max_entries)
            .finish()
    }
}
