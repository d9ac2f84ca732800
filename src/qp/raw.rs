//! Interop: driving a QP created elsewhere (another crate, C, a test
//! double) through this crate's batches.

use super::{DciStreams, Mlx5Info, Mlx5SendOps, QpCaps, QpEx, QpParts, SendOps, Transport};
use crate::cq::CompletionQueue;
use crate::error::Result;
use crate::ffi;
use crate::pd::ProtectionDomain;
use std::ptr::NonNull;

/// The parts of a QP created elsewhere, for [`QpEx::from_raw_parts`].
#[derive(Debug)]
pub struct RawQp<'a> {
    /// The QP.
    pub qp: NonNull<ffi::ibv_qp>,
    /// Its extended QP (`ibv_qp_to_qp_ex`).
    pub qpx: NonNull<ffi::ibv_qp_ex>,
    /// The PD it was created in.
    pub pd: &'a ProtectionDomain,
    /// Its send CQ.
    pub send_cq: &'a CompletionQueue,
    /// Its receive CQ.
    pub recv_cq: &'a CompletionQueue,
    /// What it got at creation (or less).
    pub caps: QpCaps,
    /// The generic send ops it was created with (or fewer).
    pub send_ops: SendOps,
    /// For a QP made with `mlx5dv_create_qp`: its mlx5 side.
    pub mlx5: Option<RawMlx5>,
}

/// The mlx5 side of a [`RawQp`].
#[derive(Debug, Clone, Copy)]
pub struct RawMlx5 {
    /// `mlx5dv_qp_ex_from_ibv_qp_ex` of the QP.
    pub mqpx: NonNull<ffi::mlx5dv_qp_ex>,
    /// The mlx5 send ops it was created with (or fewer).
    pub ops: Mlx5SendOps,
    /// The DCI streams it was created with, if any.
    pub streams: Option<DciStreams>,
    /// The device's `max_wr_memcpy_length` (0 when memcpy is not used).
    pub max_wr_memcpy_length: u64,
}

impl<T: Transport> QpEx<T> {
    /// Wraps a QP of transport `T` created elsewhere; the handle does not
    /// destroy it. The provider entries the batch needs for `send_ops` and
    /// the mlx5 ops are resolved now, and a NULL one is refused.
    ///
    /// # Safety
    ///
    /// Every pointer must be live and belong together as described on
    /// [`RawQp`] and [`RawMlx5`] (a DCI needs its mlx5 side), the QP must be
    /// of transport `T` and have been created with at least `send_ops` and
    /// the mlx5 ops, in `pd`, with these CQs; nothing else may post on it
    /// while this handle lives, nor modify or query it (`ibv_modify_qp`,
    /// `ibv_query_qp`, which write libibverbs' record of its state that a
    /// post reads) from another thread while this handle posts; and it
    /// must stay alive until this handle is
    /// dropped. No send work request posted on it before may still be
    /// outstanding (its completion, or a later one's, polled; or the QP
    /// reset), as the batches' bound on the send queue assumes an empty
    /// queue, and none carried an id with bit 63 set (see
    /// [`WrBatch::complete`](crate::WrBatch::complete)).
    pub unsafe fn from_raw_parts(raw: RawQp<'_>) -> Result<Self> {
        let mlx5 = raw.mlx5.map_or_else(Mlx5Info::default, |m| Mlx5Info {
            mqpx: Some(m.mqpx),
            ops: m.ops,
            max_memcpy: m.max_wr_memcpy_length,
            streams: m.streams,
            // Set by `assemble`, from the capabilities.
            wqe_blocks: 0,
        });
        QpEx::assemble(QpParts {
            qp: raw.qp,
            qpx: raw.qpx,
            mlx5,
            caps: raw.caps,
            send_ops: raw.send_ops,
            owned: false,
            pd: raw.pd,
            send_cq: raw.send_cq,
            recv_cq: raw.recv_cq,
        })
    }
}
