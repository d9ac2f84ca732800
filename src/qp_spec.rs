//! What a QP is made with, which the QP and its batches both read: the
//! send ops ([`SendOps`], [`Mlx5SendOps`]), the sizes ([`QpCaps`],
//! [`DciStreams`]), the WQE size they give, and the checks of the ops
//! against the device. Below the QPs (`crate::qp`) and the work-request
//! batches (`crate::wr`).

use crate::device::Context;
use crate::error::{Error, Result};
use crate::ffi;

/// Bytes of the inline-data segment header (`struct
/// mlx5_wqe_inl_data_seg`), which a UMR's entries also share the WQE with.
pub(crate) const INL_HDR: u32 = 4;
/// Bytes of one data segment (`struct mlx5_wqe_data_seg`), and of one list
/// entry (`struct mlx5_wqe_data_seg`) or one interleaved entry (`struct
/// mlx5_wqe_umr_repeat_ent_seg`) in a UMR WQE.
pub(crate) const ENTRY: u32 = 16;

bitflags::bitflags! {
    /// The work-request builders a QP is created with
    /// (`ibv_qp_init_attr_ex.send_ops_flags`, `enum ibv_qp_create_send_ops_flags`).
    /// A builder whose op was not asked for is refused with
    /// [`Error::Unsupported`] before any C call.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SendOps: u64 {
        /// `ibv_wr_rdma_write`.
        const RDMA_WRITE = ffi::IBV_QP_EX_WITH_RDMA_WRITE as u64;
        /// `ibv_wr_rdma_write_imm`.
        const RDMA_WRITE_WITH_IMM = ffi::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM as u64;
        /// `ibv_wr_send`.
        const SEND = ffi::IBV_QP_EX_WITH_SEND as u64;
        /// `ibv_wr_send_imm`.
        const SEND_WITH_IMM = ffi::IBV_QP_EX_WITH_SEND_WITH_IMM as u64;
        /// `ibv_wr_rdma_read`.
        const RDMA_READ = ffi::IBV_QP_EX_WITH_RDMA_READ as u64;
        /// `ibv_wr_atomic_cmp_swp`.
        const ATOMIC_CMP_AND_SWP = ffi::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP as u64;
        /// `ibv_wr_atomic_fetch_add`.
        const ATOMIC_FETCH_AND_ADD = ffi::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD as u64;
        /// `ibv_wr_local_inv`.
        const LOCAL_INV = ffi::IBV_QP_EX_WITH_LOCAL_INV as u64;
        /// `ibv_wr_bind_mw` (type 2 windows, in a batch), and what
        /// [`QpEx::bind_mw`](crate::QpEx::bind_mw) (type 1, `ibv_bind_mw`)
        /// needs: libmlx5 sizes the send queue's slots for a bind only
        /// with it.
        const BIND_MW = ffi::IBV_QP_EX_WITH_BIND_MW as u64;
        /// `ibv_wr_send_inv`.
        const SEND_WITH_INV = ffi::IBV_QP_EX_WITH_SEND_WITH_INV as u64;
        /// `ibv_wr_atomic_write` (rdma-core's soft-RoCE provider; not
        /// libmlx5 44, whose QP creation refuses it).
        const ATOMIC_WRITE = ffi::IBV_QP_EX_WITH_ATOMIC_WRITE as u64;
        /// `ibv_wr_flush` (built with rdma-core 45 or later only).
        #[cfg(mlx5dv_ibv_wr_flush)]
        const FLUSH = ffi::IBV_QP_EX_WITH_FLUSH as u64;
    }
}

impl SendOps {
    /// Writes, reads, sends (with and without immediate) and both atomics:
    /// the usual set for an RC QP.
    pub fn rc_default() -> Self {
        SendOps::RDMA_WRITE
            | SendOps::RDMA_WRITE_WITH_IMM
            | SendOps::SEND
            | SendOps::SEND_WITH_IMM
            | SendOps::RDMA_READ
            | SendOps::ATOMIC_CMP_AND_SWP
            | SendOps::ATOMIC_FETCH_AND_ADD
    }
}

bitflags::bitflags! {
    /// The mlx5 builders a QP is created with
    /// (`mlx5dv_qp_init_attr.send_ops_flags`,
    /// `enum mlx5dv_qp_create_send_ops_flags`). Asking for any of them makes
    /// the QP with `mlx5dv_create_qp(3)`, which fails on a device or QP that
    /// does not support them.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Mlx5SendOps: u64 {
        /// `mlx5dv_wr_mr_interleaved` (RC only).
        const MR_INTERLEAVED = ffi::MLX5DV_QP_EX_WITH_MR_INTERLEAVED as u64;
        /// `mlx5dv_wr_mr_list` (RC only).
        const MR_LIST = ffi::MLX5DV_QP_EX_WITH_MR_LIST as u64;
        /// `mlx5dv_wr_raw_wqe`.
        const RAW_WQE = ffi::MLX5DV_QP_EX_WITH_RAW_WQE as u64;
        /// `mlx5dv_wr_memcpy` (RC or DCI; needs a non-zero
        /// `max_wr_memcpy_length`).
        const MEMCPY = ffi::MLX5DV_QP_EX_WITH_MEMCPY as u64;
    }
}

/// DCI streams (`struct mlx5dv_dci_streams`): a DCI with
/// `MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS` runs 2^`log_num_concurent` streams
/// at once, of which 2^`log_num_errored` may be in error before the whole QP
/// is. Stream ids go from 0 to 2^`log_num_concurent` - 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DciStreams {
    /// log2 of the concurrent streams (the man page's spelling).
    pub log_num_concurent: u8,
    /// log2 of the streams that may be in error.
    pub log_num_errored: u8,
}

impl DciStreams {
    /// How many stream ids there are: 2^`log_num_concurent`.
    pub fn num_streams(&self) -> u32 {
        1u32.checked_shl(u32::from(self.log_num_concurent))
            .unwrap_or(0)
    }
}

/// Queue sizes (`struct ibv_qp_cap`): asked for at creation
/// ([`QpBuilder::caps`](crate::QpBuilder::caps)), and what the QP actually
/// got ([`QpEx::caps`](crate::QpEx::caps)).
///
/// `Default` asks for:
///
/// | field | default | meaning |
/// |---|---|---|
/// | [`max_send_wr`](Self::max_send_wr) | 128 | work requests the send queue holds |
/// | [`max_recv_wr`](Self::max_recv_wr) | 128 | receives the receive queue holds (0 on a DCI, or with an SRQ) |
/// | [`max_send_sge`](Self::max_send_sge) | 4 | scatter/gather entries of one send work request |
/// | [`max_recv_sge`](Self::max_recv_sge) | 4 | scatter/gather entries of one receive |
/// | [`max_inline_data`](Self::max_inline_data) | 64 | bytes one send may carry inline |
///
/// Each is a minimum: the provider may give more, and what it gives is
/// what the QP holds to. mlx5 rounds the queue depths up to a power of
/// two, and sizes the send WQE for the scatter/gather entries and reports
/// the inline room that size leaves, so asking for `max_inline_data` 0
/// gives 12 there. Read the values the QP got back with
/// [`QpEx::caps`](crate::QpEx::caps), not from what was asked; a value
/// above the device's limits ([`DeviceAttr`](crate::DeviceAttr)) fails
/// the creation.
///
/// ```
/// use mlx5dv::QpCaps;
///
/// let c = QpCaps::default();
/// assert_eq!((c.max_send_wr, c.max_recv_wr), (128, 128));
/// assert_eq!((c.max_send_sge, c.max_recv_sge, c.max_inline_data), (4, 4, 64));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WR.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        }
    }
}

/// `IB_UVERBS_DEVICE_ATOMIC_WRITE`: the device runs atomic writes.
const DEVICE_ATOMIC_WRITE: u64 = 1 << 40;

/// Refuses a QP with [`SendOps::ATOMIC_WRITE`] on a device that does not
/// claim atomic write (a kernel without it would fail each one with a
/// local QP operation error, as soft-RoCE under Linux 6.1 does).
pub(crate) fn check_atomic_write(ctx: &Context, send_ops: SendOps) -> Result<()> {
    if !send_ops.contains(SendOps::ATOMIC_WRITE) {
        return Ok(());
    }
    let mut attr = ffi::ibv_device_attr_ex::default();
    // SAFETY: the context is open; `attr` is writable and the input may be
    // NULL.
    let rc = unsafe { ffi::ibv_query_device_ex(ctx.as_ptr(), std::ptr::null(), &mut attr) };
    crate::error::check(rc, "ibv_query_device_ex", || ctx.name().to_string())?;
    if attr.device_cap_flags_ex & DEVICE_ATOMIC_WRITE == 0 {
        return Err(Error::Unsupported {
            what: format!(
                "atomic write (SendOps::ATOMIC_WRITE) on {}: the device does not claim \
                 IB_UVERBS_DEVICE_ATOMIC_WRITE (soft-RoCE has it from Linux 6.2)",
                ctx.name()
            ),
        });
    }
    Ok(())
}

/// The error of a QP creation the provider refused, naming atomic write
/// when the QP asked for it (providers without the builder refuse its
/// send-op flag).
pub(crate) fn name_refused_ops(err: Error, send_ops: SendOps) -> Error {
    match err {
        Error::Unsupported { what } if send_ops.contains(SendOps::ATOMIC_WRITE) => {
            Error::Unsupported {
                what: format!(
                    "atomic write (IBV_QP_EX_WITH_ATOMIC_WRITE) or another requested send op: \
                     {what}"
                ),
            }
        }
        err => err,
    }
}

/// The 64-byte blocks of a QP's WQE: at least a control segment plus the
/// larger of its inline data (with its 4-byte header) and its SGEs.
pub(crate) fn wqe_blocks(caps: &QpCaps) -> u32 {
    let body =
        (caps.max_inline_data.saturating_add(INL_HDR)).max(caps.max_send_sge.saturating_mul(ENTRY));
    body.saturating_add(16).div_ceil(64)
}
