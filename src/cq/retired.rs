//! The XRC SRQs a CQ keeps: dropped after a receive was posted on them,
//! their completions may still be in the CQ, or still come, and are read
//! by the SRQ's own index (see [`SharedReceiveQueue`](crate::SharedReceiveQueue)).
//! They are destroyed right before the CQ, since `ibv_destroy_cq` fails
//! while an SRQ names the CQ.

use super::handle::Retired;
use super::{CompletionQueue, CqInner};
use std::sync::PoisonError;

impl CqInner {
    /// Keeps `srq` until the CQ is destroyed.
    pub(crate) fn retire(&self, srq: Retired) {
        self.retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(srq);
    }

    /// Destroys the SRQs it keeps (each reporting a failure as every
    /// destroy in drop does), oldest first.
    pub(super) fn destroy_retired(&mut self) {
        let retired = self
            .retired
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        for srq in retired.drain(..) {
            drop(srq);
        }
    }
}

impl CompletionQueue {
    /// How many dropped XRC SRQs the CQ keeps (see
    /// [`SharedReceiveQueue`](crate::SharedReceiveQueue)).
    pub(crate) fn retired_srqs(&self) -> usize {
        self.inner
            .retired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}
