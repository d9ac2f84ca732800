//! XRC SRQs (`ibv_create_srq_ex(3)` with `IBV_SRQT_XRC`): shared receive
//! queues in an XRC domain, whose receives complete on their own CQ. They
//! are [`SharedReceiveQueue`]s: receives are posted with
//! [`SharedReceiveQueue::post_recv`]. One dropped after a receive was
//! posted on it is kept by its CQ ([`RetiredSrq`]) until the CQ goes.

use super::SharedReceiveQueue;
use crate::cq::{CompletionQueue, CqInner};
use crate::error::{check, Error, Result};
use crate::ffi;
use crate::pd::ProtectionDomain;
use crate::xrc::XrcDomain;
use std::ptr::NonNull;
use std::sync::Arc;

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
        unsafe { super::destroy_srq(self.srq, &self.pd) };
    }
}

impl SharedReceiveQueue {
    /// Creates an XRC SRQ in `domain` (`IBV_SRQT_XRC`) holding `max_wr`
    /// receives of up to `max_sge` SGEs each, in `pd` (the protection
    /// domain that the sends and RDMA operations which name it are checked
    /// against), its receives completing on `cq`. Initiators reach it by
    /// its [`srq_num`](Self::srq_num) through a target QP of `domain`.
    ///
    /// Its last handle dropped after a receive was posted on it, it is not
    /// destroyed then but kept by `cq`, with `pd` and `domain`, until the
    /// CQ itself is destroyed, so that its completions still in the CQ, or
    /// still to come, keep its receives' ids and no new SRQ is credited
    /// with them (see [`SharedReceiveQueue`]). Never posted on, it is
    /// destroyed with its last handle.
    pub fn new_xrc(
        pd: &ProtectionDomain,
        domain: &XrcDomain,
        cq: &CompletionQueue,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<Self> {
        if max_wr == 0 || max_sge == 0 {
            return Err(Error::OutOfRange {
                what: "SRQ max_wr / max_sge",
                value: 0,
                limit: "at least 1 each".into(),
            });
        }
        let ctx = pd.context();
        for (what, other) in [
            ("the XRC domain", domain.context()),
            ("the CQ", cq.context()),
        ] {
            if other.as_ptr() != ctx.as_ptr() {
                return Err(Error::InvalidArgument(format!(
                    "{what} belongs to {}, the PD to {}",
                    other.name(),
                    ctx.name()
                )));
            }
        }
        let mut attr = ffi::ibv_srq_init_attr_ex {
            attr: ffi::ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
            comp_mask: ffi::IBV_SRQ_INIT_ATTR_TYPE
                | ffi::IBV_SRQ_INIT_ATTR_PD
                | ffi::IBV_SRQ_INIT_ATTR_XRCD
                | ffi::IBV_SRQ_INIT_ATTR_CQ,
            srq_type: ffi::IBV_SRQT_XRC,
            pd: pd.as_ptr(),
            xrcd: domain.as_ptr(),
            cq: crate::cq::ffi_cq(cq),
            ..Default::default()
        };
        // SAFETY: the context, PD, domain and CQ are live (borrowed);
        // `attr` is initialised for every bit of its comp_mask; NULL is
        // handled.
        let srq = unsafe { ffi::ibv_create_srq_ex(ctx.as_ptr(), &mut attr) };
        let srq = NonNull::new(srq).ok_or_else(|| {
            Error::last_os(
                "ibv_create_srq_ex",
                format!("XRC SRQ of {max_wr} WRs × {max_sge} SGEs on {}", ctx.name()),
            )
        })?;
        let parents = XrcParents::new(domain, cq);
        Ok(Self::wrap(srq, attr.attr, pd, Some(parents)))
    }

    /// The SRQ's number (`ibv_get_srq_num(3)`): what an XRC initiator
    /// names it by ([`XrcSrqn`](crate::XrcSrqn)).
    pub fn srq_num(&self) -> Result<u32> {
        let mut n = 0;
        // SAFETY: the SRQ is live; `n` is writable.
        let rc = unsafe { ffi::ibv_get_srq_num(self.raw(), &mut n) };
        check(rc, "ibv_get_srq_num", || {
            format!("SRQ on {}", self.pd().context().name())
        })?;
        Ok(n)
    }
}
