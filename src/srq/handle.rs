//! The SRQ handle: [`SharedReceiveQueue`], its creation, its receives and
//! its drop (an XRC SRQ posted on is handed to its CQ, `retire`).

use super::retire::{destroy_srq, XrcParents};
use crate::error::{check, Error, Result};
use crate::ffi;
use crate::mr::{recv_wr, Sge};
use crate::pd::ProtectionDomain;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A shared receive queue, destroyed when its last handle goes. A cheap,
/// cloneable handle; DCTs and QPs made on it keep it alive, so it is
/// destroyed after the last of them (`ibv_destroy_srq` fails while a QP
/// is on it).
///
/// An XRC SRQ ([`new_xrc`](Self::new_xrc)) on which a receive was posted
/// is not destroyed with its last handle: its CQ keeps it, with its
/// protection domain and XRC domain, and destroys it right before itself
/// (once the CQ's handle and the last QP and SRQ on it are gone). Its
/// receives may have completed without their completions being polled, or
/// may still complete (a peer can still send to it), and the provider
/// finds an XRC SRQ's completions by the SRQ's index (libmlx5's user
/// index): destroyed, the SRQ would leave its index to the next SRQ made,
/// which would be credited with them (with its own work request ids, its
/// buffers never written). Kept, its completions carry its own receives'
/// ids, and the memory of its receives stays the device's until they are
/// polled or the CQ is destroyed (see [`post_recv`](Self::post_recv)). An
/// XRC SRQ never posted on is destroyed at once, as a plain SRQ is. This
/// holds on every provider.
#[derive(Clone)]
pub struct SharedReceiveQueue(Arc<SrqInner>);

struct SrqInner {
    srq: NonNull<ffi::ibv_srq>,
    max_wr: u32,
    max_sge: u32,
    /// Whether a receive may have been posted on it: set before each post
    /// (a failed post may have posted) and when its raw pointer is handed
    /// out. An XRC SRQ with it set is kept by its CQ when dropped.
    posted: AtomicBool,
    // Dropped after the SRQ is destroyed (or handed to its CQ).
    pd: ProtectionDomain,
    /// An XRC SRQ's domain and CQ, kept until it is destroyed.
    xrc: Option<XrcParents>,
}

// SAFETY: SRQ calls (posting, destruction) are thread-safe in rdma-core's
// providers, which lock the SRQ.
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        if let Some(xrc) = self.xrc.as_ref() {
            // The last handle is gone, so every post (and every pointer
            // handed out) happened before this load.
            if self.posted.load(Ordering::Relaxed) {
                // Its completions may be in its CQ, or still come: the CQ
                // keeps it, and destroys it right before itself.
                // SAFETY: created by this crate in `xrc`'s domain on its
                // CQ; no handle is left, so nothing else destroys it.
                unsafe { xrc.retire(self.srq, &self.pd) };
                return;
            }
        }
        // SAFETY: created by this crate, destroyed once when no handle (and
        // so no DCT) is left.
        unsafe { destroy_srq(self.srq, &self.pd) };
    }
}

impl SharedReceiveQueue {
    /// Creates an SRQ in `pd` holding `max_wr` receives of up to `max_sge`
    /// SGEs each.
    pub fn new(pd: &ProtectionDomain, max_wr: u32, max_sge: u32) -> Result<Self> {
        if max_wr == 0 || max_sge == 0 {
            return Err(Error::OutOfRange {
                what: "SRQ max_wr / max_sge",
                value: 0,
                limit: "at least 1 each".into(),
            });
        }
        let mut attr = ffi::ibv_srq_init_attr {
            attr: ffi::ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
            ..Default::default()
        };
        // SAFETY: the PD is live and `attr` initialised; NULL is handled.
        let srq = unsafe { ffi::ibv_create_srq(pd.as_ptr(), &mut attr) };
        let srq = NonNull::new(srq).ok_or_else(|| {
            Error::last_os(
                "ibv_create_srq",
                format!("{max_wr} WRs × {max_sge} SGEs on {}", pd.context().name()),
            )
        })?;
        Ok(Self::wrap(srq, attr.attr, pd, None))
    }

    /// The handle of an SRQ this crate created, with what it got.
    pub(crate) fn wrap(
        srq: NonNull<ffi::ibv_srq>,
        got: ffi::ibv_srq_attr,
        pd: &ProtectionDomain,
        xrc: Option<XrcParents>,
    ) -> Self {
        SharedReceiveQueue(Arc::new(SrqInner {
            srq,
            max_wr: got.max_wr,
            max_sge: got.max_sge,
            posted: AtomicBool::new(false),
            pd: pd.clone(),
            xrc,
        }))
    }

    /// Whether it is an XRC SRQ ([`new_xrc`](Self::new_xrc)): it feeds XRC
    /// target QPs only, not an RC QP or a DCT.
    pub fn is_xrc(&self) -> bool {
        self.0.xrc.is_some()
    }

    /// The raw SRQ, valid while this handle lives.
    ///
    /// Receives may be posted through it (`ibv_post_srq_recv`): an XRC SRQ
    /// whose pointer was taken is therefore kept by its CQ when dropped, as
    /// one posted on with [`post_recv`](Self::post_recv) is.
    pub fn as_ptr(&self) -> *mut ffi::ibv_srq {
        self.0.posted.store(true, Ordering::Relaxed);
        self.raw()
    }

    /// The raw SRQ, for the crate's own calls (which post nothing).
    pub(crate) fn raw(&self) -> *mut ffi::ibv_srq {
        self.0.srq.as_ptr()
    }

    /// Receives it holds.
    pub fn max_wr(&self) -> u32 {
        self.0.max_wr
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.0.pd
    }

    /// Posts one receive (`ibv_post_srq_recv(3)`); its completion carries
    /// `wr_id`.
    ///
    /// # Safety
    ///
    /// As [`QpEx::post_recv`](crate::QpEx::post_recv): the SGEs' memory
    /// must stay registered and unaccessed by other references until the
    /// receive's completion (or flush) has been polled or the SRQ has been
    /// destroyed; `wr_id` is below 2^63 (ids with bit 63 are the crate's
    /// own, see `QpEx::post_recv`).
    ///
    /// A plain SRQ is destroyed when its last handle and the last QP or
    /// DCT on it are dropped. An XRC SRQ that a receive was posted on is
    /// not destroyed with its last handle (see [`SharedReceiveQueue`]): its
    /// CQ keeps it, and a peer may still send to it, so the memory of its
    /// receives stays the device's after the SRQ is dropped, until their
    /// completions have been polled from the CQ or the CQ has been
    /// destroyed (its handle, and every QP and SRQ completing on it,
    /// dropped).
    pub unsafe fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        let mut wr = recv_wr(wr_id, sges, self.0.max_sge, "the SRQ's max_sge")?;
        let mut bad = std::ptr::null_mut();
        // Before the call: a failed post may have posted some of it.
        self.0.posted.store(true, Ordering::Relaxed);
        // SAFETY: the SRQ is live; `wr` and its SGE list are valid for the
        // call; the memory's lifetime is the caller's promise.
        let rc = unsafe { ffi::ibv_post_srq_recv(self.raw(), &mut wr, &mut bad) };
        check(rc, "ibv_post_srq_recv", || format!("wr_id {wr_id}"))
    }
}

impl fmt::Debug for SharedReceiveQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedReceiveQueue")
            .field("max_wr", &self.0.max_wr)
            .field("max_sge", &self.0.max_sge)
            .finish()
    }
}
