//! The typed fields of the control segment (`struct mlx5_wqe_ctrl_seg`):
//! the opcode, the fence mode and the completion flags.

use crate::ffi;
use crate::{Error, Result};

/// The operation of a WQE: the low byte of the control segment's
/// `opmod_idx_opcode`, one of mlx5dv.h's `MLX5_OPCODE_*` constants.
///
/// The opcode decides which segments follow the control segment (an RDMA
/// write carries a remote-address segment and then its data, an atomic a
/// remote-address segment, an atomic segment and one 8-byte data segment);
/// the builder writes the segments in the order they are appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum Opcode {
    /// No operation (`MLX5_OPCODE_NOP`).
    Nop = ffi::MLX5_OPCODE_NOP as u8,
    /// Send with invalidate (`MLX5_OPCODE_SEND_INVAL`); the control
    /// segment's immediate is the rkey to invalidate.
    SendInval = ffi::MLX5_OPCODE_SEND_INVAL as u8,
    /// RDMA write (`MLX5_OPCODE_RDMA_WRITE`).
    RdmaWrite = ffi::MLX5_OPCODE_RDMA_WRITE as u8,
    /// RDMA write with immediate data (`MLX5_OPCODE_RDMA_WRITE_IMM`).
    RdmaWriteImm = ffi::MLX5_OPCODE_RDMA_WRITE_IMM as u8,
    /// Send (`MLX5_OPCODE_SEND`).
    Send = ffi::MLX5_OPCODE_SEND as u8,
    /// Send with immediate data (`MLX5_OPCODE_SEND_IMM`).
    SendImm = ffi::MLX5_OPCODE_SEND_IMM as u8,
    /// TCP segmentation offload (`MLX5_OPCODE_TSO`).
    Tso = ffi::MLX5_OPCODE_TSO as u8,
    /// RDMA read (`MLX5_OPCODE_RDMA_READ`).
    RdmaRead = ffi::MLX5_OPCODE_RDMA_READ as u8,
    /// Atomic compare-and-swap (`MLX5_OPCODE_ATOMIC_CS`).
    AtomicCs = ffi::MLX5_OPCODE_ATOMIC_CS as u8,
    /// Atomic fetch-and-add (`MLX5_OPCODE_ATOMIC_FA`).
    AtomicFa = ffi::MLX5_OPCODE_ATOMIC_FA as u8,
    /// Masked atomic compare-and-swap (`MLX5_OPCODE_ATOMIC_MASKED_CS`).
    AtomicMaskedCs = ffi::MLX5_OPCODE_ATOMIC_MASKED_CS as u8,
    /// Masked atomic fetch-and-add (`MLX5_OPCODE_ATOMIC_MASKED_FA`).
    AtomicMaskedFa = ffi::MLX5_OPCODE_ATOMIC_MASKED_FA as u8,
    /// Fast memory registration (`MLX5_OPCODE_FMR`).
    Fmr = ffi::MLX5_OPCODE_FMR as u8,
    /// Local invalidate (`MLX5_OPCODE_LOCAL_INVAL`).
    LocalInval = ffi::MLX5_OPCODE_LOCAL_INVAL as u8,
    /// Configuration command (`MLX5_OPCODE_CONFIG_CMD`).
    ConfigCmd = ffi::MLX5_OPCODE_CONFIG_CMD as u8,
    /// Set a protection signature value (`MLX5_OPCODE_SET_PSV`).
    SetPsv = ffi::MLX5_OPCODE_SET_PSV as u8,
    /// User-mode memory registration (`MLX5_OPCODE_UMR`).
    Umr = ffi::MLX5_OPCODE_UMR as u8,
    /// Tag matching (`MLX5_OPCODE_TAG_MATCHING`).
    TagMatching = ffi::MLX5_OPCODE_TAG_MATCHING as u8,
    /// Flow table access (`MLX5_OPCODE_FLOW_TBL_ACCESS`).
    FlowTblAccess = ffi::MLX5_OPCODE_FLOW_TBL_ACCESS as u8,
    /// Memory-to-memory offload, e.g. DMA memcpy (`MLX5_OPCODE_MMO`).
    Mmo = ffi::MLX5_OPCODE_MMO as u8,
}

impl Opcode {
    /// Every opcode, in the order of mlx5dv.h.
    pub const ALL: [Opcode; 20] = [
        Opcode::Nop,
        Opcode::SendInval,
        Opcode::RdmaWrite,
        Opcode::RdmaWriteImm,
        Opcode::Send,
        Opcode::SendImm,
        Opcode::Tso,
        Opcode::RdmaRead,
        Opcode::AtomicCs,
        Opcode::AtomicFa,
        Opcode::AtomicMaskedCs,
        Opcode::AtomicMaskedFa,
        Opcode::Fmr,
        Opcode::LocalInval,
        Opcode::ConfigCmd,
        Opcode::SetPsv,
        Opcode::Umr,
        Opcode::TagMatching,
        Opcode::FlowTblAccess,
        Opcode::Mmo,
    ];

    /// The `MLX5_OPCODE_*` value written into the control segment.
    pub const fn raw(self) -> u8 {
        self as u8
    }
}

impl TryFrom<u8> for Opcode {
    type Error = Error;

    /// The opcode whose `MLX5_OPCODE_*` value is `raw`; an
    /// [`Error::InvalidArgument`] for a value mlx5dv.h does not name.
    fn try_from(raw: u8) -> Result<Self> {
        Opcode::ALL
            .into_iter()
            .find(|op| op.raw() == raw)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{raw:#04x} is not an MLX5_OPCODE_* value of mlx5dv.h"
                ))
            })
    }
}

/// The fence mode: bits 7..5 of the control segment's `fm_ce_se`.
///
/// A 3-bit field, one value at a time, so an enum rather than flags.
/// mlx5dv.h names two values besides none.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FenceMode {
    /// No fence.
    #[default]
    None = 0,
    /// Initiator small fence (`MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`): the
    /// provider sets it on the WQE after a local invalidate or a UMR.
    InitiatorSmall = ffi::MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE as u8,
    /// Fence (`MLX5_WQE_CTRL_FENCE`): wait for earlier RDMA reads and
    /// atomics, what the provider writes for `IBV_SEND_FENCE`.
    Fence = ffi::MLX5_WQE_CTRL_FENCE as u8,
}

impl FenceMode {
    /// The bits written into `fm_ce_se`.
    pub const fn bits(self) -> u8 {
        self as u8
    }
}

bitflags::bitflags! {
    /// The completion and solicited-event bits of the control segment's
    /// `fm_ce_se` (`MLX5_WQE_CTRL_*` of mlx5dv.h).
    ///
    /// A raw WQE ignores the work request's `wr_flags` (and a QP's
    /// `sq_sig_all`): a completion is generated only when
    /// [`CtrlFlags::CQ_UPDATE`] is set here.
    #[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct CtrlFlags: u8 {
        /// Generate a completion for this WQE (`MLX5_WQE_CTRL_CQ_UPDATE`),
        /// what the provider writes for `IBV_SEND_SIGNALED`.
        const CQ_UPDATE = ffi::MLX5_WQE_CTRL_CQ_UPDATE as u8;
        /// Solicited event at the receiver (`MLX5_WQE_CTRL_SOLICITED`),
        /// what the provider writes for `IBV_SEND_SOLICITED`.
        const SOLICITED = ffi::MLX5_WQE_CTRL_SOLICITED as u8;
    }
}
