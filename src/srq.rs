//! Shared receive queues (`ibv_create_srq(3)`): the receive side of DCTs,
//! and of RC QPs made with [`QpBuilder::srq`](crate::QpBuilder::srq).
//!
//! One concern a file: the handle, its creation, receives and drop
//! (`handle`); how it is destroyed, or kept by its CQ when an XRC SRQ
//! (`retire`); its limit and attributes (`limit`); XRC SRQs' creation and
//! number (`xrc`).

mod handle;
mod limit;
mod retire;
mod xrc;

pub use handle::SharedReceiveQueue;
pub use limit::SrqAttr;
#[cfg(test)]
pub(crate) use retire::XrcParents;
