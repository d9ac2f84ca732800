//! Byte layouts of the send-WQE segments (`<infiniband/mlx5dv.h>`, and
//! `struct mlx5_mmo_wqe` of rdma-core's `providers/mlx5/wqe.h`), opcodes,
//! and big-endian field readers.
//!
//! Every offset is relative to the start of its segment; the unit tests
//! compare them with `offsetof()` of the installed header.

/// Size of an octoword: the DS unit.
pub const OCTOWORD: usize = 16;
/// Size of a send WQE basic block (`MLX5_SEND_WQE_BB`).
pub const SEND_WQE_BB: usize = 64;
/// Largest DS the 6-bit field can hold.
pub const MAX_DS: u8 = 0x3f;

/// `MLX5_OPCODE_*` send opcodes (`opmod_idx_opcode` bits 7:0).
pub mod opcode {
    /// `MLX5_OPCODE_NOP`.
    pub const NOP: u8 = 0x00;
    /// `MLX5_OPCODE_SEND_INVAL`.
    pub const SEND_INVAL: u8 = 0x01;
    /// `MLX5_OPCODE_RDMA_WRITE`.
    pub const RDMA_WRITE: u8 = 0x08;
    /// `MLX5_OPCODE_RDMA_WRITE_IMM`.
    pub const RDMA_WRITE_IMM: u8 = 0x09;
    /// `MLX5_OPCODE_SEND`.
    pub const SEND: u8 = 0x0a;
    /// `MLX5_OPCODE_SEND_IMM`.
    pub const SEND_IMM: u8 = 0x0b;
    /// `MLX5_OPCODE_TSO`.
    pub const TSO: u8 = 0x0e;
    /// `MLX5_OPCODE_RDMA_READ`.
    pub const RDMA_READ: u8 = 0x10;
    /// `MLX5_OPCODE_ATOMIC_CS`.
    pub const ATOMIC_CS: u8 = 0x11;
    /// `MLX5_OPCODE_ATOMIC_FA`.
    pub const ATOMIC_FA: u8 = 0x12;
    /// `MLX5_OPCODE_ATOMIC_MASKED_CS`.
    pub const ATOMIC_MASKED_CS: u8 = 0x14;
    /// `MLX5_OPCODE_ATOMIC_MASKED_FA`.
    pub const ATOMIC_MASKED_FA: u8 = 0x15;
    /// `MLX5_OPCODE_FMR`.
    pub const FMR: u8 = 0x19;
    /// `MLX5_OPCODE_LOCAL_INVAL`.
    pub const LOCAL_INVAL: u8 = 0x1b;
    /// `MLX5_OPCODE_CONFIG_CMD`.
    pub const CONFIG_CMD: u8 = 0x1f;
    /// `MLX5_OPCODE_SET_PSV`.
    pub const SET_PSV: u8 = 0x20;
    /// `MLX5_OPCODE_UMR`.
    pub const UMR: u8 = 0x25;
    /// `MLX5_OPCODE_TAG_MATCHING`.
    pub const TAG_MATCHING: u8 = 0x28;
    /// `MLX5_OPCODE_FLOW_TBL_ACCESS`.
    pub const FLOW_TBL_ACCESS: u8 = 0x2c;
    /// `MLX5_OPCODE_MMO`.
    pub const MMO: u8 = 0x2f;
    /// `MLX5_OPC_MOD_MMO_DMA`: the opcode modifier of a DMA memcpy MMO.
    pub const OPC_MOD_MMO_DMA: u8 = 0x01;
}

/// `struct mlx5_wqe_ctrl_seg` (16 bytes).
pub mod ctrl {
    /// Size.
    pub const SIZE: usize = 16;
    /// `opmod_idx_opcode` (be32): opmod 31:24, WQE index 23:8, opcode 7:0.
    pub const OPMOD_IDX_OPCODE: usize = 0;
    /// `qpn_ds` (be32): QPN 31:8, DS 5:0.
    pub const QPN_DS: usize = 4;
    /// `signature`.
    pub const SIGNATURE: usize = 8;
    /// `dci_stream_channel_id` (be16).
    pub const DCI_STREAM_CHANNEL_ID: usize = 9;
    /// `fm_ce_se`.
    pub const FM_CE_SE: usize = 11;
    /// `imm` (be32): immediate data, invalidated rkey or UMR mkey.
    pub const IMM: usize = 12;
    /// `MLX5_WQE_CTRL_CQ_UPDATE` (CE = 2: always generate a CQE).
    pub const CQ_UPDATE: u8 = 2 << 2;
    /// `MLX5_WQE_CTRL_SOLICITED`.
    pub const SOLICITED: u8 = 1 << 1;
    /// `MLX5_WQE_CTRL_FENCE` (fence mode 4, small-and-fence).
    pub const FENCE: u8 = 4 << 5;
    /// `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE` (fence mode 1).
    pub const INITIATOR_SMALL_FENCE: u8 = 1 << 5;
}

/// `struct mlx5_wqe_av` = `struct mlx5_wqe_datagram_seg` (48 bytes).
pub mod av {
    /// Size.
    pub const SIZE: usize = 48;
    /// `key` (be64 `dc_key`, or be32 `qkey` + be32 reserved for UD).
    pub const KEY: usize = 0;
    /// `dqp_dct` (be32): `MLX5_EXTENDED_UD_AV` bit 31, QPN/DCTN 23:0.
    pub const DQP_DCT: usize = 8;
    /// `stat_rate_sl`: static rate 7:4, SL 3:0.
    pub const STAT_RATE_SL: usize = 12;
    /// `fl_mlid`: force loopback 7, source path bits 6:0.
    pub const FL_MLID: usize = 13;
    /// `rlid` (be16).
    pub const RLID: usize = 14;
    /// `reserved0[4]`.
    pub const RESERVED0: usize = 16;
    /// `rmac[6]`.
    pub const RMAC: usize = 20;
    /// `tclass`.
    pub const TCLASS: usize = 26;
    /// `hop_limit`.
    pub const HOP_LIMIT: usize = 27;
    /// `grh_gid_fl` (be32): GRH 30, SGID index 27:20, flow label 19:0.
    pub const GRH_GID_FL: usize = 28;
    /// `rgid[16]`.
    pub const RGID: usize = 32;
    /// `MLX5_EXTENDED_UD_AV`.
    pub const EXTENDED: u32 = 0x8000_0000;
}

/// `struct mlx5_wqe_xrc_seg` (16 bytes): follows the control segment of
/// every XRC initiator WQE (`set_xrc_seg`, `mlx5_send_wr_set_xrc_srqn`).
pub mod xrc {
    /// Size.
    pub const SIZE: usize = 16;
    /// `xrc_srqn` (be32): the remote XRC SRQ number, 23:0.
    pub const SRQN: usize = 0;
}

/// `struct mlx5_wqe_raddr_seg` (16 bytes).
pub mod raddr {
    /// Size.
    pub const SIZE: usize = 16;
    /// `raddr` (be64).
    pub const RADDR: usize = 0;
    /// `rkey` (be32).
    pub const RKEY: usize = 8;
    /// `reserved` (be32).
    pub const RESERVED: usize = 12;
}

/// `struct mlx5_wqe_atomic_seg` (16 bytes).
pub mod atomic {
    /// Size.
    pub const SIZE: usize = 16;
    /// `swap_add` (be64).
    pub const SWAP_ADD: usize = 0;
    /// `compare` (be64).
    pub const COMPARE: usize = 8;
    /// The length of an atomic's local buffer (`MLX5_ATOMIC_SIZE`).
    pub const DATA_SIZE: u32 = 8;
}

/// `struct mlx5_wqe_data_seg` (16 bytes) and `struct mlx5_wqe_inl_data_seg`
/// (a 4-byte header before the inline bytes).
pub mod data {
    /// Size of a pointer segment.
    pub const SIZE: usize = 16;
    /// `byte_count` (be32).
    pub const BYTE_COUNT: usize = 0;
    /// `lkey` (be32).
    pub const LKEY: usize = 4;
    /// `addr` (be64).
    pub const ADDR: usize = 8;
    /// Size of the inline segment header (`byte_count`).
    pub const INLINE_HEADER: usize = 4;
    /// `MLX5_INLINE_SEG`: bit 31 of `byte_count` marks inline data.
    pub const INLINE_SEG: u32 = 0x8000_0000;
    /// A pointer segment's `byte_count` of 0 means this many bytes.
    pub const ZERO_MEANS: u32 = 0x8000_0000;
}

/// `struct mlx5_mmo_metadata_seg` (16 bytes, after the control segment) of
/// `struct mlx5_mmo_wqe`.
pub mod mmo {
    /// Size of the whole MMO WQE (`struct mlx5_mmo_wqe`): DS 4.
    pub const WQE_SIZE: usize = 64;
    /// `mmo_control_31_0` (be32).
    pub const CONTROL: usize = 0;
    /// `local_key` (be32).
    pub const LOCAL_KEY: usize = 4;
    /// `local_address` (be64).
    pub const LOCAL_ADDRESS: usize = 8;
    /// Offset of the source data segment in the WQE.
    pub const SRC: usize = 32;
    /// Offset of the destination data segment in the WQE.
    pub const DST: usize = 48;
}

/// `struct mlx5_wqe_umr_ctrl_seg` (48 bytes).
pub mod umr_ctrl {
    /// Size.
    pub const SIZE: usize = 48;
    /// `flags`.
    pub const FLAGS: usize = 0;
    /// `rsvd0[3]`.
    pub const RSVD0: usize = 1;
    /// `klm_octowords` (be16).
    pub const KLM_OCTOWORDS: usize = 4;
    /// `translation_offset` / `bsf_octowords` (be16).
    pub const TRANSLATION_OFFSET: usize = 6;
    /// `mkey_mask` (be64).
    pub const MKEY_MASK: usize = 8;
    /// `rsvd1[32]`.
    pub const RSVD1: usize = 16;
    /// `MLX5_WQE_UMR_CTRL_FLAG_INLINE`.
    pub const FLAG_INLINE: u8 = 1 << 7;
    /// `MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE`.
    pub const FLAG_CHECK_FREE: u8 = 1 << 5;
    /// `MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET`.
    pub const FLAG_TRANSLATION_OFFSET: u8 = 1 << 4;
    /// `MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN`.
    pub const FLAG_CHECK_QPN: u8 = 1 << 3;
    /// `MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN`.
    pub const MASK_LEN: u64 = 1 << 0;
    /// `MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR`.
    pub const MASK_START_ADDR: u64 = 1 << 6;
    /// `MLX5_WQE_UMR_CTRL_MKEY_MASK_SIG_ERR`.
    pub const MASK_SIG_ERR: u64 = 1 << 9;
    /// `MLX5_WQE_UMR_CTRL_MKEY_MASK_BSF_ENABLE`.
    pub const MASK_BSF_ENABLE: u64 = 1 << 12;
    /// `MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY`.
    pub const MASK_MKEY: u64 = 1 << 13;
    /// `MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN`.
    pub const MASK_QPN: u64 = 1 << 14;
    /// `MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE`.
    pub const MASK_ACCESS_LOCAL_WRITE: u64 = 1 << 18;
    /// `MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ`.
    pub const MASK_ACCESS_REMOTE_READ: u64 = 1 << 19;
    /// `MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE`.
    pub const MASK_ACCESS_REMOTE_WRITE: u64 = 1 << 20;
    /// `MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC`.
    pub const MASK_ACCESS_ATOMIC: u64 = 1 << 21;
    /// `MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE`.
    pub const MASK_FREE: u64 = 1 << 29;
    /// The four access bits, which libmlx5 always sets together.
    pub const MASK_ACCESS: u64 = MASK_ACCESS_LOCAL_WRITE
        | MASK_ACCESS_REMOTE_READ
        | MASK_ACCESS_REMOTE_WRITE
        | MASK_ACCESS_ATOMIC;
}

/// `struct mlx5_wqe_mkey_context_seg` (64 bytes).
pub mod mkey_ctx {
    /// Size.
    pub const SIZE: usize = 64;
    /// `free`: bit 6 (`MLX5_WQE_MKEY_CONTEXT_FREE`).
    pub const FREE: usize = 0;
    /// `access_flags` (`MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_*`).
    pub const ACCESS_FLAGS: usize = 2;
    /// `qpn_mkey` (be32): QPN 31:8, mkey tag 7:0.
    pub const QPN_MKEY: usize = 4;
    /// `flags_pd` (be32).
    pub const FLAGS_PD: usize = 12;
    /// `start_addr` (be64).
    pub const START_ADDR: usize = 16;
    /// `len` (be64).
    pub const LEN: usize = 24;
    /// `bsf_octword_size` (be32).
    pub const BSF_OCTWORD_SIZE: usize = 32;
    /// `translations_octword_size` (be32).
    pub const TRANSLATIONS_OCTWORD_SIZE: usize = 52;
    /// `log_page_size`.
    pub const LOG_PAGE_SIZE: usize = 59;
    /// `MLX5_WQE_MKEY_CONTEXT_FREE`.
    pub const FREE_BIT: u8 = 1 << 6;
    /// `MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC`.
    pub const ACCESS_ATOMIC: u8 = 1 << 6;
    /// `MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE`.
    pub const ACCESS_REMOTE_WRITE: u8 = 1 << 5;
    /// `MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ`.
    pub const ACCESS_REMOTE_READ: u8 = 1 << 4;
    /// `MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE`.
    pub const ACCESS_LOCAL_WRITE: u8 = 1 << 3;
    /// `MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ`.
    pub const ACCESS_LOCAL_READ: u8 = 1 << 2;
}

/// `struct mlx5_wqe_umr_klm_seg` (16 bytes).
pub mod klm {
    /// Size.
    pub const SIZE: usize = 16;
    /// `byte_count` (be32).
    pub const BYTE_COUNT: usize = 0;
    /// `mkey` (be32).
    pub const MKEY: usize = 4;
    /// `address` (be64).
    pub const ADDRESS: usize = 8;
    /// The longest range one KLM maps.
    pub const MAX_BYTE_COUNT: u32 = 0x8000_0000;
}

/// `struct mlx5_wqe_umr_repeat_block_seg` (16 bytes) and
/// `struct mlx5_wqe_umr_repeat_ent_seg` (16 bytes).
pub mod repeat {
    /// Size of the block header and of one entry.
    pub const SIZE: usize = 16;
    /// Block `byte_count` (be32): bytes of one repetition.
    pub const BYTE_COUNT: usize = 0;
    /// Block `op` (be32).
    pub const OP: usize = 4;
    /// Block `repeat_count` (be32).
    pub const REPEAT_COUNT: usize = 8;
    /// Block `reserved` (be16).
    pub const RESERVED: usize = 12;
    /// Block `num_ent` (be16).
    pub const NUM_ENT: usize = 14;
    /// Entry `stride` (be16).
    pub const ENT_STRIDE: usize = 0;
    /// Entry `byte_count` (be16).
    pub const ENT_BYTE_COUNT: usize = 2;
    /// Entry `memkey` (be32).
    pub const ENT_MEMKEY: usize = 4;
    /// Entry `va` (be64).
    pub const ENT_VA: usize = 8;
    /// The `op` value of a repeat block (libmlx5 `umr_strided_seg_create`).
    pub const OP_REPEAT_BLOCK: u32 = 0x400;
}

/// Reads a big-endian `u16` at `off`; the caller has checked the bounds.
pub fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

/// Reads a big-endian `u32` at `off`; the caller has checked the bounds.
pub fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Reads a big-endian `u64` at `off`; the caller has checked the bounds.
pub fn be64(b: &[u8], off: usize) -> u64 {
    (u64::from(be32(b, off)) << 32) | u64::from(be32(b, off + 4))
}

/// Whether `b[off..off + len]` is all zero.
pub fn is_zero(b: &[u8], off: usize, len: usize) -> bool {
    b[off..off + len].iter().all(|&x| x == 0)
}
