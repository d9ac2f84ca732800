//! The plain data of QPs: send ops, sizes, states, endpoints, options.

use crate::ffi;
use crate::mr::AccessFlags;
use crate::port::{Gid, Mtu};

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
        /// `ibv_wr_bind_mw`.
        const BIND_MW = ffi::IBV_QP_EX_WITH_BIND_MW as u64;
        /// `ibv_wr_send_inv`.
        const SEND_WITH_INV = ffi::IBV_QP_EX_WITH_SEND_WITH_INV as u64;
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

/// Queue sizes (`struct ibv_qp_cap`): asked for at creation, and what the
/// QP actually got ([`QpEx::caps`](crate::QpEx::caps)).
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

/// The state of a QP (`enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpState {
    /// Just created, or reset.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error: outstanding work requests are flushed.
    Err,
    /// Another value.
    Other(u32),
}

impl QpState {
    pub(crate) fn from_raw(raw: u32) -> Self {
        match raw {
            ffi::IBV_QPS_RESET => QpState::Reset,
            ffi::IBV_QPS_INIT => QpState::Init,
            ffi::IBV_QPS_RTR => QpState::Rtr,
            ffi::IBV_QPS_RTS => QpState::Rts,
            ffi::IBV_QPS_SQD => QpState::Sqd,
            ffi::IBV_QPS_SQE => QpState::Sqe,
            ffi::IBV_QPS_ERR => QpState::Err,
            other => QpState::Other(other),
        }
    }
}

/// What a peer needs to connect to a QP, exchanged out of band (the
/// LID/QPN/PSN/GID that `ibv_rc_pingpong` sends over TCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The QP number.
    pub qpn: u32,
    /// The first packet sequence number (24 bits).
    pub psn: u32,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The port GID to address it by (RoCE, routed IB); zero when unused.
    pub gid: Gid,
}

/// How to connect an RC QP: the local port and GID, and the transport
/// parameters of the RTR and RTS transitions. `Default` gives the values
/// rdma-core's examples use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// The local port (from 1).
    pub port: u8,
    /// The local GID index to send from: required on RoCE (pick a RoCE v2
    /// entry), `None` on InfiniBand.
    pub gid_index: Option<u8>,
    /// Path MTU.
    pub mtu: Mtu,
    /// Service level.
    pub sl: u8,
    /// What remote peers may do to this QP's memory.
    pub access: AccessFlags,
    /// Local ACK timeout: 4.096 µs × 2^timeout (0 = infinite).
    pub timeout: u8,
    /// Transport retries before `RetryExcErr` (0..=7).
    pub retry_cnt: u8,
    /// RNR retries before `RnrRetryExcErr` (0..=6; 7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code for incoming sends with no receive posted.
    pub min_rnr_timer: u8,
    /// Outstanding RDMA reads/atomics this QP issues.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA reads/atomics this QP accepts.
    pub max_dest_rd_atomic: u8,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            port: 1,
            gid_index: None,
            mtu: Mtu::Mtu1024,
            sl: 0,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
        }
    }
}
