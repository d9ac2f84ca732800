//! Re-registration (`ibv_rereg_mr(3)`): a region's access, protection
//! domain or memory changed in place.

use super::region::BUF_ALIGN;
use super::{AccessFlags, MemoryRegion};
use crate::error::{Error, Result};
use crate::ffi;
use crate::pd::ProtectionDomain;
use std::alloc::{self, Layout};
use std::ptr::NonNull;

/// What one `ibv_rereg_mr` call changes.
struct Change<'a> {
    pd: Option<&'a ProtectionDomain>,
    /// The new memory, and its layout when this crate allocated it.
    memory: Option<(NonNull<u8>, usize, Option<Layout>)>,
    access: Option<AccessFlags>,
}

impl MemoryRegion {
    /// Re-registers the region with `access` (`ibv_rereg_mr(3)`,
    /// `IBV_REREG_MR_CHANGE_ACCESS`); the memory and the protection domain
    /// stay.
    ///
    /// `&mut self`: no [`Sge`](crate::Sge) or [`SgeMut`](crate::SgeMut)
    /// of the region is alive, so no work request of this program uses it.
    /// A peer may still hold a [`RemoteBuf`](crate::RemoteBuf) of it:
    /// once this returns, its RDMA is checked against the new access (a
    /// write the region no longer allows completes at the peer with a
    /// remote access error). The keys may change ([`lkey`](Self::lkey),
    /// [`rkey`](Self::rkey) are read again from the `ibv_mr`: send the
    /// peer a new [`remote`](Self::remote)); with the old rkey a peer gets
    /// a remote access error where they did.
    ///
    /// Refused before C is called ([`Error::InvalidArgument`]): remote
    /// write or atomic access without [`LOCAL_WRITE`](AccessFlags::LOCAL_WRITE)
    /// (`ib_check_mr_access`), dropping [`MW_BIND`](AccessFlags::MW_BIND)
    /// (a window bound to the region may still grant a peer access), and a
    /// region this handle does not own ([`from_raw`](Self::from_raw)) or
    /// whose earlier re-registration failed (see below).
    ///
    /// # Errors
    ///
    /// When the command itself fails (`IBV_REREG_MR_ERR_CMD`), the man page
    /// says the region must not be used any more: the handle then has
    /// length 0 and keys 0, so no entry, remote buffer or slice of it
    /// reaches any memory, and it is deregistered on drop. So it is when the
    /// kernel has no re-registration at all ([`Error::Unsupported`] through
    /// the command: soft-RoCE under Linux 6.1): re-register only on a device
    /// that does it. An error caught before the command
    /// (`IBV_REREG_MR_ERR_INPUT`) leaves the region as it was.
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # fn f(pd: &ProtectionDomain) -> Result<()> {
    /// let mut mr = MemoryRegion::new(pd, 4096, AccessFlags::LOCAL_WRITE)?;
    /// mr.rereg_access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    /// let for_peer = mr.remote(..)?; // the rkey as it is now
    /// # let _ = for_peer;
    /// # Ok(()) }
    /// ```
    ///
    /// Not while an entry of the region may be in a work request:
    ///
    /// ```compile_fail,E0502
    /// # use mlx5dv::*;
    /// # fn f(mr: &mut MemoryRegion) -> Result<()> {
    /// let src = mr.sge(0..8)?;
    /// mr.rereg_access(AccessFlags::LOCAL_WRITE)?; // ERROR: `src` borrows `mr`
    /// println!("{}", src.length());
    /// # Ok(()) }
    /// ```
    pub fn rereg_access(&mut self, access: AccessFlags) -> Result<()> {
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(Error::InvalidArgument(format!(
                "ibv_rereg_mr to access {access:?}: remote write and atomic access need \
                 LOCAL_WRITE too"
            )));
        }
        if self.access.contains(AccessFlags::MW_BIND) && !access.contains(AccessFlags::MW_BIND) {
            return Err(Error::InvalidArgument(format!(
                "ibv_rereg_mr from access {:?} to {access:?}: a memory window bound to \
                 the region may still grant access to it; keep MW_BIND",
                self.access
            )));
        }
        self.rereg(Change {
            pd: None,
            memory: None,
            access: Some(access),
        })
    }

    /// Moves the region to protection domain `pd`, of the same context
    /// (`ibv_rereg_mr(3)`, `IBV_REREG_MR_CHANGE_PD`); the memory and the
    /// access stay. Work requests of QPs of the old PD that name the region
    /// then fail (a local protection error for a local entry, a remote
    /// access error at the peer for its RDMA). The keys may change, as for
    /// [`rereg_access`](Self::rereg_access), whose errors apply too; a PD
    /// of another context is refused ([`Error::InvalidArgument`]).
    pub fn rereg_pd(&mut self, pd: &ProtectionDomain) -> Result<()> {
        if pd.context().as_ptr() != self.pd.context().as_ptr() {
            return Err(Error::InvalidArgument(format!(
                "ibv_rereg_mr to a PD of {}: the region is on {} (a PD of its own context \
                 is needed)",
                pd.context().name(),
                self.pd.context().name()
            )));
        }
        self.rereg(Change {
            pd: Some(pd),
            memory: None,
            access: None,
        })
    }

    /// Moves the region to a new zeroed, page-aligned buffer of `len`
    /// bytes that it owns (`ibv_rereg_mr(3)`,
    /// `IBV_REREG_MR_CHANGE_TRANSLATION`); the access and the PD stay.
    /// The old memory is freed if the region owned it (and is the caller's
    /// again if it came from [`register_raw`](Self::register_raw)). What a
    /// peer then writes through the region lands in the new buffer; its
    /// old [`RemoteBuf`](crate::RemoteBuf)s name the old addresses and fail
    /// with a remote access error. Read [`addr`](Self::addr), the keys and
    /// [`remote`](Self::remote) again. Errors as for
    /// [`rereg_access`](Self::rereg_access); a `len` of 0 is
    /// [`Error::OutOfRange`]. Soft-RoCE does not change a region's memory
    /// ([`Error::Unsupported`]).
    pub fn rereg_new_buffer(&mut self, len: usize) -> Result<()> {
        let layout = buffer_layout(len)?;
        // SAFETY: the layout has a non-zero size.
        let buf = unsafe { alloc::alloc_zeroed(layout) };
        let Some(addr) = NonNull::new(buf) else {
            return Err(Error::Verbs {
                call: "alloc_zeroed",
                context: format!("{len}-byte buffer for a memory region"),
                source: std::io::Error::from_raw_os_error(libc::ENOMEM),
            });
        };
        self.rereg(Change {
            pd: None,
            memory: Some((addr, len, Some(layout))),
            access: None,
        })
    }

    /// Moves the region to `len` bytes at `addr`, which the caller owns
    /// (`IBV_REREG_MR_CHANGE_TRANSLATION`), as
    /// [`rereg_new_buffer`](Self::rereg_new_buffer) does with a buffer of
    /// its own. The old memory is freed if the region owned it, and is the
    /// caller's again if it was theirs.
    ///
    /// # Safety
    ///
    /// As for [`register_raw`](Self::register_raw): `addr..addr + len` must
    /// be valid for reads and writes and stay allocated, and not be
    /// accessed in conflict with the region's accessors or the device,
    /// until the region is dropped or moved to other memory.
    pub unsafe fn rereg_raw(&mut self, addr: NonNull<u8>, len: usize) -> Result<()> {
        if len == 0 {
            return Err(zero_length());
        }
        self.rereg(Change {
            pd: None,
            memory: Some((addr, len, None)),
            access: None,
        })
    }

    fn rereg(&mut self, change: Change<'_>) -> Result<()> {
        let refused = |why: &str| {
            // Memory allocated for the change is not the device's.
            if let Some((addr, _, Some(layout))) = change.memory {
                // SAFETY: allocated by `rereg_new_buffer` with `layout`,
                // never registered.
                unsafe { alloc::dealloc(addr.as_ptr(), layout) };
            }
            Err(Error::InvalidArgument(format!(
                "ibv_rereg_mr of a {}-byte region on {}: {why}",
                self.len,
                self.pd.context().name()
            )))
        };
        if !self.owned {
            return refused("the handle wraps a region registered elsewhere (from_raw)");
        }
        if self.len == 0 {
            return refused("an earlier re-registration failed: the region is unusable");
        }
        if (change.memory.is_some() || change.pd.is_some()) && self.windows_may_reach() {
            return refused(
                "a memory window bound to the region is still allocated and may reach its \
                 memory: drop the window first",
            );
        }
        let mut flags = 0;
        if change.pd.is_some() {
            flags |= ffi::IBV_REREG_MR_CHANGE_PD;
        }
        if change.memory.is_some() {
            flags |= ffi::IBV_REREG_MR_CHANGE_TRANSLATION;
        }
        if change.access.is_some() {
            flags |= ffi::IBV_REREG_MR_CHANGE_ACCESS;
        }
        let (addr, len) = change
            .memory
            .map_or((std::ptr::null_mut(), 0), |(a, l, _)| (a.as_ptr(), l));
        let pd = change
            .pd
            .map_or(std::ptr::null_mut(), ProtectionDomain::as_ptr);
        let access = change.access.map_or(0, |a| a.bits() as i32);
        // SAFETY: the region is live and registered by this handle; no
        // work request of this program uses it (`&mut self`: no entry of it
        // is alive); the PD is live and of its context; the new memory is
        // valid for the region's life (allocated here, or the caller's
        // promise).
        let rc = unsafe {
            ffi::ibv_rereg_mr(self.mr.as_ptr(), flags as i32, pd, addr.cast(), len, access)
        };
        if rc == 0 || rc == ffi::IBV_REREG_MR_ERR_DO_FORK_OLD {
            // The new registration is in place (on DO_FORK_OLD only the
            // old range's fork state could not be restored).
            let err = (rc != 0).then(|| self.error("IBV_REREG_MR_ERR_DO_FORK_OLD"));
            self.apply(change);
            return err.map_or(Ok(()), Err);
        }
        let err = self.error(match rc {
            ffi::IBV_REREG_MR_ERR_INPUT => "IBV_REREG_MR_ERR_INPUT",
            ffi::IBV_REREG_MR_ERR_DONT_FORK_NEW => "IBV_REREG_MR_ERR_DONT_FORK_NEW",
            ffi::IBV_REREG_MR_ERR_CMD => "IBV_REREG_MR_ERR_CMD",
            ffi::IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW => "IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW",
            _ => "unknown return code",
        });
        if rc == ffi::IBV_REREG_MR_ERR_INPUT || rc == ffi::IBV_REREG_MR_ERR_DONT_FORK_NEW {
            // The old registration is intact; memory allocated for the
            // change was never the device's.
            if let Some((addr, _, Some(layout))) = change.memory {
                // SAFETY: allocated with `layout`, never registered.
                unsafe { alloc::dealloc(addr.as_ptr(), layout) };
            }
        } else {
            // The region must not be used: nothing of it reaches memory
            // any more. Memory allocated for the change may be the
            // device's: leaked rather than freed under it, unless the
            // kernel has no re-registration at all (EOPNOTSUPP: it changed
            // nothing, as Linux 6.1's soft-RoCE). The old memory is freed
            // on drop, after deregistration.
            let untouched =
                rc == ffi::IBV_REREG_MR_ERR_CMD && matches!(err, Error::Unsupported { .. });
            if let (true, Some((addr, _, Some(layout)))) = (untouched, change.memory) {
                // SAFETY: allocated with `layout`; the kernel refused the
                // command as a whole, so it was never registered.
                unsafe { alloc::dealloc(addr.as_ptr(), layout) };
            }
            self.len = 0;
            self.lkey = 0;
            self.rkey = 0;
        }
        Err(err)
    }

    /// The error of a failed `ibv_rereg_mr`, from `errno`.
    fn error(&self, code: &str) -> Error {
        Error::last_os(
            "ibv_rereg_mr",
            format!(
                "{code}, a {}-byte region on {}",
                self.len,
                self.pd.context().name()
            ),
        )
    }

    /// Records a re-registration that took effect; the keys (and the
    /// translation) are read again from the `ibv_mr`.
    fn apply(&mut self, change: Change<'_>) {
        if let Some(pd) = change.pd {
            self.pd = pd.clone();
        }
        if let Some(access) = change.access {
            self.access = access;
            self.grant_peer(access);
        }
        if let Some((addr, len, layout)) = change.memory {
            if let Some(old) = self.owned_buf {
                // SAFETY: allocated with `old` by this region; the device
                // no longer translates to it.
                unsafe { alloc::dealloc(self.addr.as_ptr(), old) };
            }
            self.addr = addr;
            self.len = len;
            self.owned_buf = layout;
        }
        // SAFETY: the region is live; the provider updated it.
        let (lkey, rkey) = unsafe { ((*self.mr.as_ptr()).lkey, (*self.mr.as_ptr()).rkey) };
        self.lkey = lkey;
        self.rkey = rkey;
    }
}

fn zero_length() -> Error {
    Error::OutOfRange {
        what: "memory region length",
        value: 0,
        limit: "at least 1 byte".into(),
    }
}

/// The layout of a buffer of `len` bytes this crate allocates for a region.
fn buffer_layout(len: usize) -> Result<Layout> {
    if len == 0 {
        return Err(zero_length());
    }
    Layout::from_size_align(len, BUF_ALIGN).map_err(|_| Error::OutOfRange {
        what: "memory region length",
        value: len as u64,
        limit: format!("at most {} bytes", isize::MAX as usize - BUF_ALIGN),
    })
}
