//! Why a WQE was refused, and the error-CQE syndrome a ConnectX reports.
//!
//! Mapping of [`WqeError::syndrome`]:
//! - `MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR` (0x01): lengths that do not add
//!   up: inline data over the QP's `max_inline_data`
//!   ([`WqeError::InlineTooLong`]), an atomic's local buffer not exactly
//!   8 bytes ([`WqeError::AtomicLength`]), DMA memcpy source and
//!   destination lengths that differ ([`WqeError::MmoLength`]), a UMR whose
//!   declared length is not the length of its translation, or a KLM longer
//!   than 2 GiB ([`WqeError::UmrLength`]).
//! - `MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR` (0x02): every other malformed WQE:
//!   DS, QPN, WQE index or signature wrong, opcode or opcode modifier not
//!   valid (for this QP), reserved bits set (address vector, raddr, UMR,
//!   control segment), segments that do not fill the DS exactly, too many
//!   gather entries, inline data where it cannot be, a bad UMR structure,
//!   and forms the model does not implement ([`WqeError::Unsupported`]).
//!
//! A ConnectX moves the QP to the error state after such a completion; so
//! must the device model (flushing the rest with `WR_FLUSH_ERR`).

use std::fmt;

use super::qp::QpKind;

/// `MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR`.
pub const SYNDROME_LOCAL_LENGTH_ERR: u8 = 0x01;
/// `MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR`.
pub const SYNDROME_LOCAL_QP_OP_ERR: u8 = 0x02;

/// A WQE the device refuses: what is wrong and where (`at` is a byte
/// offset from the start of the WQE).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WqeError {
    /// The bytes handed to the parser are not the `ds * 16` bytes of one WQE
    /// (or fewer than a control segment).
    Size {
        /// Bytes given.
        have: usize,
        /// Bytes the control segment's DS asks for.
        need: usize,
    },
    /// The DS field (`qpn_ds` bits 5:0) is zero, has reserved bits 7:6 set,
    /// or exceeds the QP's maximum WQE size or send queue.
    BadDs {
        /// The whole `qpn_ds` low byte.
        ds: u8,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `qpn_ds` names another QP.
    QpnMismatch {
        /// The QPN in the WQE.
        wqe: u32,
        /// The QP whose send queue holds the WQE.
        qp: u32,
    },
    /// The WQE index (`opmod_idx_opcode` bits 23:8) is not the producer
    /// counter at which the WQE was found.
    WqeIndexMismatch {
        /// The index in the WQE.
        wqe: u16,
        /// The index the device expected.
        expected: u16,
    },
    /// The WQE signature does not check (or is set on a QP without
    /// `MLX5_QP_FLAG_SIGNATURE`).
    BadSignature {
        /// The signature byte.
        signature: u8,
        /// The XOR over the WQE's bytes (0xff when valid).
        xor: u8,
    },
    /// Not an mlx5 send opcode.
    BadOpcode {
        /// The opcode.
        opcode: u8,
    },
    /// A valid opcode this QP type cannot post.
    OpcodeNotForQp {
        /// The opcode.
        opcode: u8,
        /// The QP's type.
        kind: QpKind,
    },
    /// The opcode modifier is not valid for the opcode.
    BadOpmod {
        /// The opcode.
        opcode: u8,
        /// The opcode modifier.
        opmod: u8,
    },
    /// A reserved field or bit is not zero.
    Reserved {
        /// The field.
        field: &'static str,
        /// Byte offset of the field in the WQE.
        at: usize,
        /// Its value.
        value: u64,
    },
    /// The segments do not fill the DS exactly: a segment runs past the end,
    /// or bytes are left over.
    Layout {
        /// What is wrong.
        what: &'static str,
        /// Byte offset where it was found.
        at: usize,
        /// The WQE size in bytes (`ds * 16`).
        size: usize,
    },
    /// More gather/scatter entries than the QP's `max_send_sge`.
    TooManySges {
        /// Entries in the WQE.
        count: usize,
        /// The QP's limit.
        max: u32,
    },
    /// Inline data (one segment's, or all of a WQE's together) longer than
    /// the QP's `max_inline_data`.
    InlineTooLong {
        /// Inline bytes.
        len: u32,
        /// The QP's limit.
        max: u32,
    },
    /// An inline data segment where the opcode needs pointer segments
    /// (RDMA read, atomics, memcpy).
    Inline {
        /// What is wrong.
        what: &'static str,
        /// Byte offset of the segment.
        at: usize,
    },
    /// An atomic WQE's local buffer is not one data segment of 8 bytes.
    AtomicLength {
        /// Number of data segments.
        segments: usize,
        /// Byte count of the first (0 if none).
        byte_count: u32,
    },
    /// DMA memcpy source and destination lengths differ.
    MmoLength {
        /// Source byte count (decoded).
        src: u32,
        /// Destination byte count (decoded).
        dst: u32,
    },
    /// A UMR WQE whose structure is inconsistent.
    Umr {
        /// What is wrong.
        what: &'static str,
        /// Byte offset where it was found.
        at: usize,
    },
    /// A UMR WQE whose lengths do not add up.
    UmrLength {
        /// What is wrong.
        what: &'static str,
        /// The length declared (or the entry's length).
        declared: u64,
        /// The length computed from the translation (or the limit).
        computed: u64,
    },
    /// A form valid on hardware that the model does not implement.
    Unsupported {
        /// What it is.
        what: &'static str,
    },
}

impl WqeError {
    /// The `syndrome` of the error CQE a ConnectX reports for this WQE
    /// (`MLX5_CQE_SYNDROME_*`, see the module documentation).
    pub fn syndrome(&self) -> u8 {
        match self {
            WqeError::InlineTooLong { .. }
            | WqeError::AtomicLength { .. }
            | WqeError::MmoLength { .. }
            | WqeError::UmrLength { .. } => SYNDROME_LOCAL_LENGTH_ERR,
            _ => SYNDROME_LOCAL_QP_OP_ERR,
        }
    }
}

impl fmt::Display for WqeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WqeError::Size { have, need } => {
                write!(f, "WQE of {have} bytes where the control segment needs {need}")
            }
            WqeError::BadDs { ds, reason } => write!(f, "WQE DS {ds:#x}: {reason}"),
            WqeError::QpnMismatch { wqe, qp } => {
                write!(f, "WQE names QP {wqe:#x} but sits in the send queue of QP {qp:#x}")
            }
            WqeError::WqeIndexMismatch { wqe, expected } => {
                write!(f, "WQE index {wqe:#x} where the producer counter is {expected:#x}")
            }
            WqeError::BadSignature { signature, xor } => write!(
                f,
                "WQE signature {signature:#04x} does not check (XOR of the WQE {xor:#04x}, want 0xff)"
            ),
            WqeError::BadOpcode { opcode } => write!(f, "unknown WQE opcode {opcode:#04x}"),
            WqeError::OpcodeNotForQp { opcode, kind } => {
                write!(f, "WQE opcode {opcode:#04x} is not valid on a {kind:?} QP")
            }
            WqeError::BadOpmod { opcode, opmod } => {
                write!(f, "opcode modifier {opmod:#04x} is not valid for opcode {opcode:#04x}")
            }
            WqeError::Reserved { field, at, value } => {
                write!(f, "reserved {field} at byte {at} is {value:#x}, not 0")
            }
            WqeError::Layout { what, at, size } => {
                write!(f, "{what} at byte {at} of a {size}-byte WQE")
            }
            WqeError::TooManySges { count, max } => {
                write!(f, "{count} data segments, over the QP's max_send_sge {max}")
            }
            WqeError::InlineTooLong { len, max } => {
                write!(f, "{len} bytes of inline data, over the QP's max_inline_data {max}")
            }
            WqeError::Inline { what, at } => write!(f, "{what} (data segment at byte {at})"),
            WqeError::AtomicLength {
                segments,
                byte_count,
            } => write!(
                f,
                "atomic WQE with {segments} data segments (first {byte_count} bytes), want one of 8 bytes"
            ),
            WqeError::MmoLength { src, dst } => {
                write!(f, "DMA memcpy source of {src:#x} bytes but destination of {dst:#x}")
            }
            WqeError::Umr { what, at } => write!(f, "UMR: {what} (byte {at})"),
            WqeError::UmrLength {
                what,
                declared,
                computed,
            } => write!(f, "UMR: {what}: {declared:#x} vs {computed:#x}"),
            WqeError::Unsupported { what } => write!(f, "not modelled: {what}"),
        }
    }
}

impl std::error::Error for WqeError {}

/// Fails with a layout error unless `len` bytes at `at` lie in the WQE.
pub(super) fn need(w: &[u8], at: usize, len: usize, what: &'static str) -> Result<(), WqeError> {
    if at + len > w.len() {
        return Err(WqeError::Layout {
            what,
            at,
            size: w.len(),
        });
    }
    Ok(())
}
