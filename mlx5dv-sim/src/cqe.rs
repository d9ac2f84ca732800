//! Completion-queue entries: the 64-byte `struct mlx5_cqe64` images the
//! device writes and libmlx5 44 parses (`mlx5_parse_cqe`, `handle_good_req`,
//! `handle_responder`, `mlx5_handle_error_cqe` in `providers/mlx5/cq.c`).
//!
//! # API
//! - [`Requester`], [`Responder`], [`ErrorCqe`]: the fields of a good
//!   requester, a good responder and an error CQE; each has
//!   `encode(&self, owner: bool) -> CqeImage`.
//! - [`CqeImage`] `{ head: [u8; 63], op_own: u8 }`: bytes 0..=62 and the
//!   `op_own` byte apart, because the device must store `head` first and
//!   `op_own` last, with release ordering: libmlx5 reads the rest only after
//!   it sees a valid opcode and owner bit. [`CqeImage::to_bytes`] joins them.
//! - [`op_own`]`(opcode, owner) -> u8`; [`owner_bit`]`(pi, ncqe)` and
//!   [`slot`]`(pi, ncqe)`: CQE number `pi` goes to slot `pi & (ncqe - 1)`
//!   with owner bit `(pi / ncqe) & 1` (`get_sw_cqe`).
//! - [`decode`]`(&[u8; 64]) -> Result<Decoded, CqeDecodeError>`, for tests
//!   and traces.
//!
//! All multi-byte fields are big-endian. With 128-byte CQEs the image is the
//! *second* 64 bytes of the entry. Inline scatter (`op_own` bits 3:2), CQE
//! compression and timestamps other than the given value are not produced.
//! The unit tests are in `cqe/tests.rs`.
//!
//! Fields libmlx5 reads, by opcode (with `cqe_version = 1`):
//! - `MLX5_CQE_REQ` (0): `srqn_uidx` (user index, to find the QP),
//!   `wqe_counter` (the WQE index; the SQ tail moves past it),
//!   `sop_drop_qpn` (WQE opcode 31:24, which gives the work-completion
//!   opcode; UMR, NOP and MMO take libmlx5's own record instead; QPN 23:0),
//!   `byte_cnt` (`ibv_poll_cq` uses it for RDMA read and fixes atomics at
//!   8, but `ibv_wc_read_byte_len` on an extended CQ returns it for every
//!   completion: write the bytes transferred, 8 for atomics), `timestamp`.
//! - `MLX5_CQE_RESP_*` (1 write with immediate, 2 send, 3 send with
//!   immediate, 4 send with invalidate): `srqn_uidx` (the QP's, or with an
//!   SRQ the QP's user index too; the SRQ's WQE is `wqe_counter`),
//!   `byte_cnt`, `imm_inval_pkey` (immediate as is, invalidated rkey, or
//!   pkey index), `flags_rqpn` (SL 27:24, GRH 29:28, source QP 23:0),
//!   `slid`, `ml_path`; `sop_drop_qpn` bits 23:0 as `qp_num`.
//! - `MLX5_CQE_REQ_ERR` (13) / `MLX5_CQE_RESP_ERR` (14): `syndrome`,
//!   `vendor_err_synd`, `srqn_uidx`, `wqe_counter`, `s_wqe_opcode_qpn`.

use std::fmt;

/// Size of a CQE image.
pub const CQE_SIZE: usize = 64;

/// CQE opcodes (`op_own` bits 7:4, `MLX5_CQE_*`).
pub mod opcode {
    /// `MLX5_CQE_REQ`: a requester (send queue) completion.
    pub const REQ: u8 = 0;
    /// `MLX5_CQE_RESP_WR_IMM`: RDMA write with immediate received.
    pub const RESP_WR_IMM: u8 = 1;
    /// `MLX5_CQE_RESP_SEND`: send received.
    pub const RESP_SEND: u8 = 2;
    /// `MLX5_CQE_RESP_SEND_IMM`: send with immediate received.
    pub const RESP_SEND_IMM: u8 = 3;
    /// `MLX5_CQE_RESP_SEND_INV`: send with invalidate received.
    pub const RESP_SEND_INV: u8 = 4;
    /// `MLX5_CQE_REQ_ERR`: requester error.
    pub const REQ_ERR: u8 = 13;
    /// `MLX5_CQE_RESP_ERR`: responder error.
    pub const RESP_ERR: u8 = 14;
    /// `MLX5_CQE_INVALID`: what libmlx5 pre-fills; never valid.
    pub const INVALID: u8 = 15;
}

/// Error-CQE syndromes (`MLX5_CQE_SYNDROME_*`).
pub mod syndrome {
    /// `LOCAL_LENGTH_ERR` → `IBV_WC_LOC_LEN_ERR`.
    pub const LOCAL_LENGTH_ERR: u8 = 0x01;
    /// `LOCAL_QP_OP_ERR` → `IBV_WC_LOC_QP_OP_ERR`.
    pub const LOCAL_QP_OP_ERR: u8 = 0x02;
    /// `LOCAL_PROT_ERR` → `IBV_WC_LOC_PROT_ERR`.
    pub const LOCAL_PROT_ERR: u8 = 0x04;
    /// `WR_FLUSH_ERR` → `IBV_WC_WR_FLUSH_ERR`.
    pub const WR_FLUSH_ERR: u8 = 0x05;
    /// `MW_BIND_ERR` → `IBV_WC_MW_BIND_ERR`.
    pub const MW_BIND_ERR: u8 = 0x06;
    /// `BAD_RESP_ERR` → `IBV_WC_BAD_RESP_ERR`.
    pub const BAD_RESP_ERR: u8 = 0x10;
    /// `LOCAL_ACCESS_ERR` → `IBV_WC_LOC_ACCESS_ERR`.
    pub const LOCAL_ACCESS_ERR: u8 = 0x11;
    /// `REMOTE_INVAL_REQ_ERR` → `IBV_WC_REM_INV_REQ_ERR`.
    pub const REMOTE_INVAL_REQ_ERR: u8 = 0x12;
    /// `REMOTE_ACCESS_ERR` → `IBV_WC_REM_ACCESS_ERR`.
    pub const REMOTE_ACCESS_ERR: u8 = 0x13;
    /// `REMOTE_OP_ERR` → `IBV_WC_REM_OP_ERR`.
    pub const REMOTE_OP_ERR: u8 = 0x14;
    /// `TRANSPORT_RETRY_EXC_ERR` → `IBV_WC_RETRY_EXC_ERR`.
    pub const TRANSPORT_RETRY_EXC_ERR: u8 = 0x15;
    /// `RNR_RETRY_EXC_ERR` → `IBV_WC_RNR_RETRY_EXC_ERR`.
    pub const RNR_RETRY_EXC_ERR: u8 = 0x16;
    /// `REMOTE_ABORTED_ERR` → `IBV_WC_REM_ABORT_ERR`.
    pub const REMOTE_ABORTED_ERR: u8 = 0x22;
}

/// Byte offsets in `struct mlx5_cqe64` / `struct mlx5_err_cqe`.
pub mod offset {
    /// `ml_path`.
    pub const ML_PATH: usize = 17;
    /// `slid` (be16).
    pub const SLID: usize = 22;
    /// `flags_rqpn` (be32).
    pub const FLAGS_RQPN: usize = 24;
    /// `srqn_uidx` (be32; `mlx5_err_cqe.srqn`).
    pub const SRQN_UIDX: usize = 32;
    /// `imm_inval_pkey` (be32).
    pub const IMM_INVAL_PKEY: usize = 36;
    /// `byte_cnt` (be32).
    pub const BYTE_CNT: usize = 44;
    /// `timestamp` (be64).
    pub const TIMESTAMP: usize = 48;
    /// `mlx5_err_cqe.vendor_err_synd`.
    pub const VENDOR_ERR_SYND: usize = 54;
    /// `mlx5_err_cqe.syndrome`.
    pub const SYNDROME: usize = 55;
    /// `sop_drop_qpn` (be32; `mlx5_err_cqe.s_wqe_opcode_qpn`).
    pub const SOP_DROP_QPN: usize = 56;
    /// `wqe_counter` (be16).
    pub const WQE_COUNTER: usize = 60;
    /// `signature`.
    pub const SIGNATURE: usize = 62;
    /// `op_own`: opcode 7:4, format/inline scatter 3:2, SE 1, owner 0.
    pub const OP_OWN: usize = 63;
}

/// `op_own` bit 1: solicited event.
pub const OP_OWN_SE: u8 = 1 << 1;

/// The `op_own` byte: `opcode << 4 | owner`.
pub fn op_own(opcode: u8, owner: bool) -> u8 {
    (opcode << 4) | u8::from(owner)
}

/// The owner bit of the `pi`-th CQE written to a CQ of `ncqe` (a power of
/// two) entries: `(pi / ncqe) & 1`.
pub fn owner_bit(pi: u32, ncqe: u32) -> bool {
    (pi / ncqe) & 1 == 1
}

/// The slot of the `pi`-th CQE in a CQ of `ncqe` (a power of two) entries.
pub fn slot(pi: u32, ncqe: u32) -> u32 {
    pi & (ncqe - 1)
}

/// A CQE image: bytes 0..=62, and `op_own` (byte 63) to store last.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqeImage {
    /// Bytes 0..=62.
    pub head: [u8; CQE_SIZE - 1],
    /// Byte 63.
    pub op_own: u8,
}

impl CqeImage {
    /// The 64 bytes, `op_own` included.
    pub fn to_bytes(&self) -> [u8; CQE_SIZE] {
        let mut out = [0; CQE_SIZE];
        out[..CQE_SIZE - 1].copy_from_slice(&self.head);
        out[offset::OP_OWN] = self.op_own;
        out
    }
}

/// A small big-endian writer over the 63-byte head.
struct Head([u8; CQE_SIZE - 1]);

impl Head {
    fn new() -> Self {
        Head([0; CQE_SIZE - 1])
    }
    fn put(&mut self, off: usize, bytes: &[u8]) -> &mut Self {
        self.0[off..off + bytes.len()].copy_from_slice(bytes);
        self
    }
    fn done(&self, op_own: u8) -> CqeImage {
        CqeImage {
            head: self.0,
            op_own,
        }
    }
}

/// A good requester completion (`MLX5_CQE_REQ`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Requester {
    /// The WQE's opcode (`MLX5_OPCODE_*`).
    pub wqe_opcode: u8,
    /// The QP number (24 bits).
    pub qpn: u32,
    /// The WQE index (`Ctrl::wqe_index`) of the completed WQE.
    pub wqe_counter: u16,
    /// The QP's user index (24 bits, `cqe_version = 1`).
    pub user_index: u32,
    /// Bytes transferred: the read length for RDMA read, 8 for atomics,
    /// the message length otherwise (`ibv_wc_read_byte_len` returns it).
    pub byte_cnt: u32,
    /// Completion timestamp.
    pub timestamp: u64,
}

impl Requester {
    /// The CQE image with the given owner bit.
    pub fn encode(&self, owner: bool) -> CqeImage {
        Head::new()
            .put(
                offset::SRQN_UIDX,
                &(self.user_index & 0xff_ffff).to_be_bytes(),
            )
            .put(offset::BYTE_CNT, &self.byte_cnt.to_be_bytes())
            .put(offset::TIMESTAMP, &self.timestamp.to_be_bytes())
            .put(offset::SOP_DROP_QPN, &sop_qpn(self.wqe_opcode, self.qpn))
            .put(offset::WQE_COUNTER, &self.wqe_counter.to_be_bytes())
            .done(op_own(opcode::REQ, owner))
    }
}

fn sop_qpn(op: u8, qpn: u32) -> [u8; 4] {
    ((u32::from(op) << 24) | (qpn & 0xff_ffff)).to_be_bytes()
}

/// What a responder completion reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RespKind {
    /// `MLX5_CQE_RESP_SEND`.
    #[default]
    Send,
    /// `MLX5_CQE_RESP_SEND_IMM`.
    SendImm,
    /// `MLX5_CQE_RESP_SEND_INV`.
    SendInv,
    /// `MLX5_CQE_RESP_WR_IMM`.
    WriteImm,
}

impl RespKind {
    /// The CQE opcode.
    pub fn opcode(self) -> u8 {
        match self {
            RespKind::Send => opcode::RESP_SEND,
            RespKind::SendImm => opcode::RESP_SEND_IMM,
            RespKind::SendInv => opcode::RESP_SEND_INV,
            RespKind::WriteImm => opcode::RESP_WR_IMM,
        }
    }

    fn from_opcode(op: u8) -> Option<Self> {
        Some(match op {
            opcode::RESP_SEND => RespKind::Send,
            opcode::RESP_SEND_IMM => RespKind::SendImm,
            opcode::RESP_SEND_INV => RespKind::SendInv,
            opcode::RESP_WR_IMM => RespKind::WriteImm,
            _ => return None,
        })
    }
}

/// A good responder completion (`MLX5_CQE_RESP_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Responder {
    /// What was received.
    pub kind: RespKind,
    /// The receiving QP (or DCT) number (24 bits).
    pub qpn: u32,
    /// The receiving QP's user index (24 bits, `cqe_version = 1`).
    pub user_index: u32,
    /// The SRQ WQE index consumed (with an SRQ; otherwise 0: libmlx5 takes
    /// the RQ's tail).
    pub wqe_counter: u16,
    /// Bytes received.
    pub byte_cnt: u32,
    /// `imm_inval_pkey`: the immediate (`Ctrl::imm` of the sender, stored
    /// with `to_be_bytes`), the invalidated rkey, or the pkey index.
    pub imm_inval_pkey: u32,
    /// The sender's QP number (24 bits).
    pub src_qpn: u32,
    /// Service level (4 bits).
    pub sl: u8,
    /// A GRH was present.
    pub grh: bool,
    /// The sender's LID.
    pub slid: u16,
    /// Destination LID path bits (7 bits).
    pub path_bits: u8,
    /// Solicited event (`op_own` bit 1).
    pub solicited: bool,
    /// Completion timestamp.
    pub timestamp: u64,
}

impl Responder {
    /// The CQE image with the given owner bit.
    pub fn encode(&self, owner: bool) -> CqeImage {
        let flags_rqpn = (u32::from(self.sl & 0xf) << 24)
            | (u32::from(self.grh) << 28)
            | (self.src_qpn & 0xff_ffff);
        let se = if self.solicited { OP_OWN_SE } else { 0 };
        Head::new()
            .put(offset::ML_PATH, &[self.path_bits & 0x7f])
            .put(offset::SLID, &self.slid.to_be_bytes())
            .put(offset::FLAGS_RQPN, &flags_rqpn.to_be_bytes())
            .put(
                offset::SRQN_UIDX,
                &(self.user_index & 0xff_ffff).to_be_bytes(),
            )
            .put(offset::IMM_INVAL_PKEY, &self.imm_inval_pkey.to_be_bytes())
            .put(offset::BYTE_CNT, &self.byte_cnt.to_be_bytes())
            .put(offset::TIMESTAMP, &self.timestamp.to_be_bytes())
            .put(offset::SOP_DROP_QPN, &sop_qpn(0, self.qpn))
            .put(offset::WQE_COUNTER, &self.wqe_counter.to_be_bytes())
            .done(op_own(self.kind.opcode(), owner) | se)
    }
}

/// An error completion (`struct mlx5_err_cqe`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ErrorCqe {
    /// `MLX5_CQE_RESP_ERR` when true, else `MLX5_CQE_REQ_ERR`.
    pub responder: bool,
    /// `MLX5_CQE_SYNDROME_*` (see [`syndrome`]).
    pub syndrome: u8,
    /// Vendor syndrome (`ibv_wc.vendor_err`).
    pub vendor_err_synd: u8,
    /// The failed WQE's opcode (requester errors).
    pub wqe_opcode: u8,
    /// The QP number (24 bits).
    pub qpn: u32,
    /// The failed WQE's index (requester) or SRQ WQE index (responder).
    pub wqe_counter: u16,
    /// The QP's user index (24 bits).
    pub user_index: u32,
}

impl ErrorCqe {
    /// The CQE opcode.
    pub fn opcode(&self) -> u8 {
        if self.responder {
            opcode::RESP_ERR
        } else {
            opcode::REQ_ERR
        }
    }

    /// The CQE image with the given owner bit.
    pub fn encode(&self, owner: bool) -> CqeImage {
        Head::new()
            .put(
                offset::SRQN_UIDX,
                &(self.user_index & 0xff_ffff).to_be_bytes(),
            )
            .put(offset::VENDOR_ERR_SYND, &[self.vendor_err_synd])
            .put(offset::SYNDROME, &[self.syndrome])
            .put(offset::SOP_DROP_QPN, &sop_qpn(self.wqe_opcode, self.qpn))
            .put(offset::WQE_COUNTER, &self.wqe_counter.to_be_bytes())
            .done(op_own(self.opcode(), owner))
    }
}

/// A decoded CQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cqe {
    /// `MLX5_CQE_REQ`.
    Requester(Requester),
    /// `MLX5_CQE_RESP_*`.
    Responder(Responder),
    /// `MLX5_CQE_REQ_ERR` / `MLX5_CQE_RESP_ERR`.
    Error(ErrorCqe),
    /// `MLX5_CQE_INVALID`: not (yet) written.
    Invalid,
}

/// A decoded CQE and its owner bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The entry.
    pub cqe: Cqe,
    /// `op_own` bit 0.
    pub owner: bool,
}

/// Why [`decode`] failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CqeDecodeError {
    /// An opcode this model never writes.
    Opcode(u8),
    /// `op_own` bits 3:2 (format, inline scatter) set.
    Format(u8),
}

impl fmt::Display for CqeDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CqeDecodeError::Opcode(o) => write!(f, "CQE opcode {o} is not modelled"),
            CqeDecodeError::Format(b) => write!(f, "CQE op_own format bits {b:#x} set"),
        }
    }
}

impl std::error::Error for CqeDecodeError {}

fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([b[off], b[off + 1]])
}

fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn be64(b: &[u8], off: usize) -> u64 {
    (u64::from(be32(b, off)) << 32) | u64::from(be32(b, off + 4))
}

/// Decodes a 64-byte CQE image, reading the fields libmlx5 reads.
pub fn decode(b: &[u8; CQE_SIZE]) -> Result<Decoded, CqeDecodeError> {
    let op_own = b[offset::OP_OWN];
    let owner = op_own & 1 == 1;
    let op = op_own >> 4;
    if op_own & 0x0c != 0 {
        return Err(CqeDecodeError::Format(op_own & 0x0c));
    }
    let sop = be32(b, offset::SOP_DROP_QPN);
    let user_index = be32(b, offset::SRQN_UIDX) & 0xff_ffff;
    let wqe_counter = be16(b, offset::WQE_COUNTER);
    let timestamp = be64(b, offset::TIMESTAMP);
    let cqe = match op {
        opcode::REQ => Cqe::Requester(Requester {
            wqe_opcode: (sop >> 24) as u8,
            qpn: sop & 0xff_ffff,
            wqe_counter,
            user_index,
            byte_cnt: be32(b, offset::BYTE_CNT),
            timestamp,
        }),
        opcode::REQ_ERR | opcode::RESP_ERR => Cqe::Error(ErrorCqe {
            responder: op == opcode::RESP_ERR,
            syndrome: b[offset::SYNDROME],
            vendor_err_synd: b[offset::VENDOR_ERR_SYND],
            wqe_opcode: (sop >> 24) as u8,
            qpn: sop & 0xff_ffff,
            wqe_counter,
            user_index,
        }),
        opcode::INVALID => Cqe::Invalid,
        _ => {
            let kind = RespKind::from_opcode(op).ok_or(CqeDecodeError::Opcode(op))?;
            let flags_rqpn = be32(b, offset::FLAGS_RQPN);
            Cqe::Responder(Responder {
                kind,
                qpn: sop & 0xff_ffff,
                user_index,
                wqe_counter,
                byte_cnt: be32(b, offset::BYTE_CNT),
                imm_inval_pkey: be32(b, offset::IMM_INVAL_PKEY),
                src_qpn: flags_rqpn & 0xff_ffff,
                sl: ((flags_rqpn >> 24) & 0xf) as u8,
                grh: (flags_rqpn >> 28) & 3 != 0,
                slid: be16(b, offset::SLID),
                path_bits: b[offset::ML_PATH] & 0x7f,
                solicited: op_own & OP_OWN_SE != 0,
                timestamp,
            })
        }
    };
    Ok(Decoded { cqe, owner })
}

#[cfg(test)]
mod tests;
