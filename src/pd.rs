//! Protection domains.

use crate::device::Context;
use crate::error::{Error, Result};
use crate::ffi;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

/// A protection domain (`ibv_alloc_pd(3)`): memory regions, QPs and
/// address handles made in it can work together.
///
/// A cheap, cloneable handle that keeps its [`Context`] alive.
#[derive(Clone)]
pub struct ProtectionDomain(pub(crate) Arc<PdInner>);

pub(crate) struct PdInner {
    pub(crate) pd: NonNull<ffi::ibv_pd>,
    owned: bool,
    // Dropped after the PD is deallocated (fields drop after Drop::drop).
    pub(crate) ctx: Context,
}

// SAFETY: ibv_pd is used only through thread-safe verbs calls (object
// creation and deallocation lock in the provider and kernel).
unsafe impl Send for PdInner {}
// SAFETY: as above.
unsafe impl Sync for PdInner {}

impl Drop for PdInner {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: allocated by this crate; every object made in it holds
            // this Arc, so none is left; deallocated once.
            let rc = unsafe { ffi::ibv_dealloc_pd(self.pd.as_ptr()) };
            crate::error::report_destroy_failure("ibv_dealloc_pd", rc, self.ctx.name());
        }
    }
}

impl ProtectionDomain {
    /// Allocates a protection domain on `ctx`.
    pub fn new(ctx: &Context) -> Result<Self> {
        // SAFETY: the context is open while `ctx` lives.
        let pd = unsafe { ffi::ibv_alloc_pd(ctx.as_ptr()) };
        let pd = NonNull::new(pd).ok_or_else(|| Error::last_os("ibv_alloc_pd", ctx.name()))?;
        Ok(ProtectionDomain(Arc::new(PdInner {
            pd,
            owned: true,
            ctx: ctx.clone(),
        })))
    }

    /// Wraps a PD allocated elsewhere; the handle does not deallocate it.
    ///
    /// # Safety
    ///
    /// `pd` must be a live PD of `ctx`'s device context that stays allocated
    /// until this handle, its clones and every object made through them are
    /// dropped.
    pub unsafe fn from_raw(ctx: &Context, pd: NonNull<ffi::ibv_pd>) -> Self {
        ProtectionDomain(Arc::new(PdInner {
            pd,
            owned: false,
            ctx: ctx.clone(),
        }))
    }

    /// The raw PD, valid while this handle lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_pd {
        self.0.pd.as_ptr()
    }

    /// The context the PD belongs to.
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }
}

impl fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("device", &self.0.ctx.name())
            .finish()
    }
}
