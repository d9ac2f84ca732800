//! XRC SRQs (`ibv_create_srq_ex(3)` with `IBV_SRQT_XRC`): shared receive
//! queues in an XRC domain, whose receives complete on their own CQ. They
//! are [`SharedReceiveQueue`]s: receives are posted with
//! [`SharedReceiveQueue::post_recv`]. One dropped after a receive was
//! posted on it is kept by its CQ ([`RetiredSrq`](super::retire::RetiredSrq))
//! until the CQ goes.

use super::retire::XrcParents;
use super::SharedReceiveQueue;
use crate::cq::CompletionQueue;
use crate::error::{check, Error, Result};
use crate::ffi;
use crate::pd::ProtectionDomain;
use crate::xrc::XrcDomain;
use std::ptr::NonNull;

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
