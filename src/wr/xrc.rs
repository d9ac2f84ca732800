//! The work requests of an XRC initiator: each names the XRC SRQ of the
//! target it lands in (`ibv_wr_set_xrc_srqn`, called after the builder
//! and its data, as `ibv_wr_post(3)` orders the setters).

use super::batch::WrBatch;
use super::op::Wr;
use super::state::RawAddr;
use crate::qp::{XrcInitiator, XrcSrqn};

impl<'m> WrBatch<'_, 'm, XrcInitiator> {
    /// Adds a work request whose completion carries `wr_id`, to the XRC
    /// SRQ `srqn` of the target QP the initiator is connected to (a send
    /// lands in a receive of that SRQ; an RDMA write or read is checked
    /// against that SRQ's protection domain). An XRC work request cannot
    /// be built without one:
    ///
    /// ```compile_fail,E0061
    /// # use mlx5dv::*;
    /// # fn f(qp: &mut XrcIniQp, mr: &MemoryRegion) -> Result<()> {
    /// let mut batch = qp.batch();
    /// batch.wr(1).send().sge(mr.sge(0..8)?)?; // ERROR: no XrcSrqn
    /// # Ok(()) }
    /// ```
    ///
    /// An SRQ number past 24 bits is refused with
    /// [`Error::OutOfRange`](crate::Error::OutOfRange) when the work
    /// request is built, before any C call.
    #[inline]
    pub fn wr(&mut self, wr_id: u64, srqn: XrcSrqn) -> Wr<'_, 'm, XrcInitiator> {
        self.start_wr(wr_id, Some(RawAddr::Xrc(srqn.0)))
    }
}
