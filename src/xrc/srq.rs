//! XRC SRQs (`ibv_create_srq_ex(3)` with `IBV_SRQT_XRC`): shared receive
//! queues in an XRC domain, whose receives complete on their own CQ. They
//! are [`SharedReceiveQueue`]s: receives are posted with
//! [`SharedReceiveQueue::post_recv`].

use super::XrcDomain;
use crate::cq::{CompletionQueue, CqInner};
use crate::error::{check, Error, Result};
use crate::ffi;
use crate::pd::ProtectionDomain;
use crate::srq::SharedReceiveQueue;
use std::ptr::NonNull;
use std::sync::Arc;

/// What an XRC SRQ keeps alive until it is destroyed: its domain and the
/// CQ its receives complete on.
pub(crate) struct XrcParents {
    _domain: XrcDomain,
    _cq: Arc<CqInner>,
}

impl SharedReceiveQueue {
    /// Creates an XRC SRQ in `domain` (`IBV_SRQT_XRC`) holding `max_wr`
    /// receives of up to `max_sge` SGEs each, in `pd` (the protection
    /// domain that the sends and RDMA operations which name it are checked
    /// against), its receives completing on `cq`. Initiators reach it by
    /// its [`srq_num`](Self::srq_num) through a target QP of `domain`.
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
            cq: crate::qp::ffi_cq(cq),
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
        let parents = XrcParents {
            _domain: domain.clone(),
            _cq: cq.share(),
        };
        Ok(Self::wrap(srq, attr.attr, pd, Some(parents)))
    }

    /// The SRQ's number (`ibv_get_srq_num(3)`): what an XRC initiator
    /// names it by ([`XrcSrqn`](crate::XrcSrqn)).
    pub fn srq_num(&self) -> Result<u32> {
        let mut n = 0;
        // SAFETY: the SRQ is live; `n` is writable.
        let rc = unsafe { ffi::ibv_get_srq_num(self.as_ptr(), &mut n) };
        check(rc, "ibv_get_srq_num", || {
            format!("SRQ on {}", self.pd().context().name())
        })?;
        Ok(n)
    }
}
