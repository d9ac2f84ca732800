//! How an SRQ is destroyed: at once ([`destroy_srq`]) or, an XRC SRQ that
//! a receive was posted on, kept by its CQ ([`RetiredSrq`]) with what it
//! needs ([`XrcParents`]) until the CQ goes.

use crate::cq::{CompletionQueue, CqInner};
use crate::ffi;
use crate::pd::ProtectionDomain;
use crate::xrc::XrcDomain;
use std::ptr::NonNull;
use std::sync::Arc;

/// Destroys `srq` (`ibv_destroy_srq`), reporting a failure as every
/// destroy in drop is reported.
///
/// # Safety
/// `srq` is a live SRQ of `pd`'s context that nothing uses any more; it is
/// destroyed once.
pub(crate) unsafe fn destroy_srq(srq: NonNull<ffi::ibv_srq>, pd: &ProtectionDomain) {
    // SAFETY: the caller's promise.
    let rc = unsafe { ffi::ibv_destroy_srq(srq.as_ptr()) };
    crate::error::report_destroy_failure("ibv_destroy_srq", rc, pd.context().name());
}

/// What an XRC SRQ keeps alive until it is destroyed: its domain and the
/// CQ its receives complete on.
pub(crate) struct XrcParents {
    domain: XrcDomain,
    cq: Arc<CqInner>,
}

impl XrcParents {
    /// The parents of an XRC SRQ made in `domain` on `cq`.
    pub(crate) fn new(domain: &XrcDomain, cq: &CompletionQueue) -> Self {
        XrcParents {
            domain: domain.clone(),
            cq: cq.share(),
        }
    }

    /// Hands `srq`, whose last handle is gone, to its CQ, which destroys
    /// it right before itself; its PD and domain are kept open until then.
    ///
    /// libmlx5 reads an XRC SRQ's receive completions by the SRQ's user
    /// index (its `mlx5_destroy_srq` frees the index without cleaning the
    /// CQ, as `mlx5_destroy_qp` cleans a QP's CQs): destroyed now, its
    /// completions still in the CQ, or still to come from a peer, would be
    /// read as receives of the next SRQ given the index. Kept, they are
    /// read with its own receives' ids.
    ///
    /// # Safety
    /// `srq` is a live XRC SRQ of `pd`, made in this domain on this CQ,
    /// that nothing else destroys or uses any more.
    pub(crate) unsafe fn retire(&self, srq: NonNull<ffi::ibv_srq>, pd: &ProtectionDomain) {
        self.cq.retire(Box::new(RetiredSrq {
            srq,
            pd: pd.clone(),
            _domain: self.domain.clone(),
        }));
    }
}

/// An XRC SRQ whose handles are gone but whose receives may still
/// complete, kept by its CQ ([`CqInner`]) and destroyed when dropped, which
/// the CQ does right before destroying itself (`ibv_destroy_cq` fails while
/// an SRQ names the CQ). It holds the SRQ's PD and domain, not the CQ: the
/// CQ holds it.
pub(crate) struct RetiredSrq {
    srq: NonNull<ffi::ibv_srq>,
    // Dropped after the SRQ is destroyed.
    pd: ProtectionDomain,
    _domain: XrcDomain,
}

// SAFETY: the SRQ is only destroyed (once, by its owner, in drop), a
// thread-safe verbs call; its PD and domain handles are `Send + Sync`.
unsafe impl Send for RetiredSrq {}
// SAFETY: as above; `&RetiredSrq` reaches nothing.
unsafe impl Sync for RetiredSrq {}

impl Drop for RetiredSrq {
    fn drop(&mut self) {
        // SAFETY: handed over by the SRQ's last handle (`retire`), held by
        // its CQ alone, and destroyed once, here.
        unsafe { destroy_srq(self.srq, &self.pd) };
    }
}
