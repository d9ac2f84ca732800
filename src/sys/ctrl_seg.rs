//! `struct mlx5_wqe_ctrl_seg`, written by hand.
//!
//! mlx5dv.h declares it `__attribute__((packed, aligned(4)))`: 16 bytes,
//! 4-byte aligned, with a big-endian 16-bit field at the odd offset 9.
//! bindgen cannot express packed-and-aligned and emits a 20-byte struct, so
//! the type is blocklisted there and defined here with the same bytes: the
//! unaligned `__be16` is a `[u8; 2]`, which needs no packing. The layout is
//! tested against the C compiler's numbers (`tests/layout.rs`).

/// The control segment that starts every mlx5 send WQE
/// (`struct mlx5_wqe_ctrl_seg` in mlx5dv.h).
///
/// Multi-byte fields hold big-endian values, as the device reads them.
/// `mlx5dv_set_ctrl_seg` (a shim in this module) fills one the way the
/// header does.
#[repr(C, align(4))]
#[derive(Debug, Default, Copy, Clone, PartialEq, Eq, Hash)]
pub struct mlx5_wqe_ctrl_seg {
    /// `__be32`: opcode modifier (bits 31..24), WQE index (23..8), opcode (7..0).
    pub opmod_idx_opcode: u32,
    /// `__be32`: QP number (bits 31..8) and the WQE size in 16-byte units (7..0).
    pub qpn_ds: u32,
    /// The WQE signature byte.
    pub signature: u8,
    /// `__be16`, unaligned in C: the DCI stream channel id.
    pub dci_stream_channel_id: [u8; 2],
    /// Fence mode, completion-event and solicited-event flags.
    pub fm_ce_se: u8,
    /// `__be32`: immediate data, or the invalidated rkey.
    pub imm: u32,
}

const _: () = assert!(core::mem::size_of::<mlx5_wqe_ctrl_seg>() == 16);
const _: () = assert!(core::mem::align_of::<mlx5_wqe_ctrl_seg>() == 4);
