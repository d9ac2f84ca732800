//! Shared receive queues (`ibv_create_srq(3)`): the receive side of DCTs,
//! and of RC QPs made with [`QpBuilder::srq`](crate::QpBuilder::srq).

mod limit;

pub use limit::SrqAttr;

use crate::error::{check, Error, Result};
use crate::ffi;
use crate::mr::{recv_wr, Sge};
use crate::pd::ProtectionDomain;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

/// A shared receive queue, destroyed when its last handle goes. A cheap,
/// cloneable handle; DCTs and QPs made on it keep it alive, so it is
/// destroyed after the last of them (`ibv_destroy_srq` fails while a QP
/// is on it).
#[derive(Clone)]
pub struct SharedReceiveQueue(Arc<SrqInner>);

struct SrqInner {
    srq: NonNull<ffi::ibv_srq>,
    max_wr: u32,
    max_sge: u32,
    // Dropped after the SRQ is destroyed.
    pd: ProtectionDomain,
    /// An XRC SRQ's domain and CQ, kept until it is destroyed.
    _xrc: Option<crate::xrc::XrcParents>,
}

// SAFETY: SRQ calls (posting, destruction) are thread-safe in rdma-core's
// providers, which lock the SRQ.
unsafe impl Send for SrqInner {}
// SAFETY: as above.
unsafe impl Sync for SrqInner {}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: created by this crate, destroyed once when no handle (and
        // so no DCT) is left.
        let rc = unsafe { ffi::ibv_destroy_srq(self.srq.as_ptr()) };
        crate::error::report_destroy_failure("ibv_destroy_srq", rc, self.pd.context().name());
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
        xrc: Option<crate::xrc::XrcParents>,
    ) -> Self {
        SharedReceiveQueue(Arc::new(SrqInner {
            srq,
            max_wr: got.max_wr,
            max_sge: got.max_sge,
            pd: pd.clone(),
            _xrc: xrc,
        }))
    }

    /// Whether it is an XRC SRQ ([`new_xrc`](Self::new_xrc)): it feeds XRC
    /// target QPs only, not an RC QP or a DCT.
    pub fn is_xrc(&self) -> bool {
        self.0._xrc.is_some()
    }

    /// The raw SRQ, valid while this handle lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_srq {
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
    /// receive's completion (or flush) has been polled; `wr_id` is below
    /// 2^63 (ids with bit 63 are the crate's own, see `QpEx::post_recv`).
    pub unsafe fn post_recv(&self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        let mut wr = recv_wr(wr_id, sges, self.0.max_sge, "the SRQ's max_sge")?;
        let mut bad = std::ptr::null_mut();
        // SAFETY: the SRQ is live; `wr` and its SGE list are valid for the
        // call; the memory's lifetime is the caller's promise.
        let rc = unsafe { ffi::ibv_post_srq_recv(self.as_ptr(), &mut wr, &mut bad) };
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
