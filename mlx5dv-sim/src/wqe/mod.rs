//! WQE parsing and validation: the send-queue entries libmlx5 44 writes,
//! read as a ConnectX reads them, strictly.
//!
//! # API
//! - [`ctrl_ds`]`(ctrl: &[u8]) -> u8`: the DS (16-byte units) of the WQE
//!   whose control segment starts `ctrl`; [`wqebbs`]`(ds) -> u32`: the
//!   64-byte blocks it occupies (the SQ consumer advances by this);
//!   [`ctrl_opcode`]`(ctrl) -> u8` for the error CQE of a refused WQE.
//! - [`parse`]`(wqe: &[u8], qp: &QpView) -> Result<Wqe, WqeError>`: `wqe` is
//!   the linearised WQE of exactly `ds * 16` bytes (the caller undoes the
//!   wrap at the end of the SQ). If `ctrl_ds` is 0, pass the 16-byte control
//!   segment alone: `parse` then reports [`WqeError::BadDs`].
//! - [`Wqe`] `{ ctrl: Ctrl, body: Body }`; [`Ctrl`] (opcode, opmod,
//!   wqe_index, qpn, ds, signature, dci_stream_channel_id, fm_ce_se,
//!   signaled, solicited, [`Fence`], imm); [`Body`]: `Nop`, `RdmaWrite`,
//!   `RdmaWriteImm`, `RdmaRead` ([`Rdma`]), `Send`, `SendImm`, `SendInv`
//!   ([`Message`]), `AtomicCs`, `AtomicFa` ([`Atomic`]), `Umr` ([`Umr`]),
//!   `Mmo` ([`Mmo`]); [`Data`] `Sges(Vec<Sge>)` (pointers only) or
//!   `Gather(Vec<Part>)` (a gather list with inline data: [`Part`]
//!   `Inline(Vec<u8>)` or `Pointer(Sge)`, in WQE order);
//!   [`Sge`] `{ lkey, addr, len }` (len decoded: 0 on the wire is 2 GiB);
//!   [`Av`] (DCI/UD address vector).
//! - [`WqeError`] (what and where) and [`WqeError::syndrome`], the
//!   error-CQE syndrome; the mapping is in the `error` module's docs.
//! - [`layout`]: segment offsets and `MLX5_OPCODE_*` values.
//!
//! # Rules
//! Control segment: DS 1..=63 (reserved bits 7:6 clear), `ds * 16` within
//! the QP's maximum WQE size and `wqebbs(ds)` within the SQ; QPN is the
//! QP's; the WQE index is the expected one (if the caller gives it); the
//! signature checks (XOR of the WQE is 0xff) with `MLX5_QP_FLAG_SIGNATURE`,
//! else is 0; a stream channel id only on a DCI with streams; `fm_ce_se`
//! reserved bits clear, CE 0 or 2, fence mode at most 4.
//!
//! Opcodes per QP kind (opcode modifier 0, MMO 1):
//!
//! | opcode | RC | UC | DCI | UD | XRC INI |
//! |---|---|---|---|---|---|
//! | NOP | yes | yes | yes | yes | yes |
//! | SEND, SEND_IMM | yes | yes | AV | AV | XRC |
//! | SEND_INVAL, RDMA_WRITE(_IMM) | yes | yes | AV | no | XRC |
//! | RDMA_READ, ATOMIC_CS/FA | yes | no | AV | no | XRC |
//! | UMR: mkey configure (list, interleaved) | yes | no | no | no | no |
//! | UMR: local invalidate, window bind | yes | yes | yes, no AV | no | yes |
//! | MMO (DMA memcpy, DS 4) | yes | no | yes, no AV | no | no |
//!
//! "XRC": after the control segment, the 16-byte XRC segment naming the
//! remote SRQ ([`Wqe::xrc_srqn`]); its reserved bytes are not checked
//! (libmlx5's `ibv_wr_*` path leaves them as they were).
//!
//! A DCT has no send queue. Masked atomics, TSO, SET_PSV and the other
//! opcodes are refused. Segments must fill the DS exactly: AV (48 bytes,
//! extended form), raddr (reserved 0), atomic segment + exactly one 8-byte
//! pointer segment, then data segments: pointer segments (at most
//! `max_send_sge`) and inline segments (each padded to 16; their bytes
//! together at most `max_inline`; never on reads, atomics or memcpy) in
//! any order, as the PRM allows for sends and writes. UMR rules are in
//! [`umr`].
//! A NOP's segments are ignored.

pub mod body;
pub mod ctrl;
pub mod error;
pub mod layout;
pub mod qp;
mod segments;
pub mod umr;

#[cfg(test)]
mod tests;

pub use body::{Atomic, Av, Body, Data, Message, Mmo, Part, Rdma, Sge};
pub use ctrl::{ctrl_ds, ctrl_opcode, wqebbs, Ctrl, Fence};
pub use error::WqeError;
pub use qp::{QpKind, QpView};
pub use umr::Umr;

use layout::{
    atomic as atomic_seg, av, ctrl as ctrl_seg, mmo as mmo_seg, opcode as op, raddr, xrc,
};
use segments::{parse_atomic, parse_av, parse_data, parse_pointer, parse_raddr};

/// A parsed, validated WQE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wqe {
    /// The control segment.
    pub ctrl: Ctrl,
    /// The operation.
    pub body: Body,
    /// The remote XRC SRQ number (XRC initiator WQEs only).
    pub xrc_srqn: Option<u32>,
}

/// Parses and validates the linearised WQE `wqe` (`ds * 16` bytes) posted
/// on the send queue of `qp`.
pub fn parse(wqe: &[u8], qp: &QpView) -> Result<Wqe, WqeError> {
    let ctrl = ctrl::parse(wqe, qp)?;
    if qp.kind == QpKind::Dct {
        return Err(not_for_qp(&ctrl, qp));
    }
    let expected_opmod = if ctrl.opcode == op::MMO {
        op::OPC_MOD_MMO_DMA
    } else {
        0
    };
    if is_known(ctrl.opcode) && ctrl.opmod != expected_opmod {
        return Err(WqeError::BadOpmod {
            opcode: ctrl.opcode,
            opmod: ctrl.opmod,
        });
    }
    let kind = qp.kind;
    let connected = matches!(kind, QpKind::Rc | QpKind::Dci | QpKind::XrcIni);
    let body = match ctrl.opcode {
        op::NOP => Body::Nop,
        op::SEND => Body::Send(message(wqe, qp)?),
        op::SEND_IMM => Body::SendImm(message(wqe, qp)?),
        op::SEND_INVAL if kind != QpKind::Ud => Body::SendInv(message(wqe, qp)?),
        op::RDMA_WRITE if kind != QpKind::Ud => Body::RdmaWrite(rdma(wqe, qp, true)?),
        op::RDMA_WRITE_IMM if kind != QpKind::Ud => Body::RdmaWriteImm(rdma(wqe, qp, true)?),
        op::RDMA_READ if connected => Body::RdmaRead(rdma(wqe, qp, false)?),
        op::ATOMIC_CS if connected => Body::AtomicCs(atomic(wqe, qp)?),
        op::ATOMIC_FA if connected => Body::AtomicFa(atomic(wqe, qp)?),
        op::UMR if kind != QpKind::Ud => {
            let u = umr::parse(wqe, ctrl.imm)?;
            if kind != QpKind::Rc && u.is_mkey_configure() {
                return Err(not_for_qp(&ctrl, qp));
            }
            Body::Umr(u)
        }
        op::MMO if matches!(kind, QpKind::Rc | QpKind::Dci) => Body::Mmo(mmo(wqe)?),
        op::ATOMIC_MASKED_CS | op::ATOMIC_MASKED_FA => {
            return Err(WqeError::Unsupported {
                what: "masked atomics",
            })
        }
        op::SET_PSV => {
            return Err(WqeError::Unsupported {
                what: "SET_PSV (signature offload)",
            })
        }
        op::FMR | op::LOCAL_INVAL | op::CONFIG_CMD | op::TAG_MATCHING | op::FLOW_TBL_ACCESS => {
            return Err(WqeError::Unsupported {
                what: "FMR, LOCAL_INVAL, CONFIG_CMD, TAG_MATCHING and FLOW_TBL_ACCESS opcodes",
            })
        }
        o if is_known(o) => return Err(not_for_qp(&ctrl, qp)),
        o => return Err(WqeError::BadOpcode { opcode: o }),
    };
    // Every data-bearing XRC WQE was checked to hold the segment (address).
    let xrc_srqn = (kind == QpKind::XrcIni && wqe.len() >= ctrl_seg::SIZE + xrc::SIZE)
        .then(|| layout::be32(wqe, ctrl_seg::SIZE + xrc::SRQN) & 0xff_ffff);
    Ok(Wqe {
        ctrl,
        body,
        xrc_srqn,
    })
}

/// Whether `o` is one of the `MLX5_OPCODE_*` send opcodes.
fn is_known(o: u8) -> bool {
    matches!(
        o,
        op::NOP
            | op::SEND_INVAL
            | op::RDMA_WRITE
            | op::RDMA_WRITE_IMM
            | op::SEND
            | op::SEND_IMM
            | op::TSO
            | op::RDMA_READ
            | op::ATOMIC_CS
            | op::ATOMIC_FA
            | op::ATOMIC_MASKED_CS
            | op::ATOMIC_MASKED_FA
            | op::FMR
            | op::LOCAL_INVAL
            | op::CONFIG_CMD
            | op::SET_PSV
            | op::UMR
            | op::TAG_MATCHING
            | op::FLOW_TBL_ACCESS
            | op::MMO
    )
}

fn not_for_qp(ctrl: &Ctrl, qp: &QpView) -> WqeError {
    WqeError::OpcodeNotForQp {
        opcode: ctrl.opcode,
        kind: qp.kind,
    }
}

/// The address vector of data-bearing WQEs (DCI, UD) and the offset after it.
fn address(wqe: &[u8], qp: &QpView) -> Result<(Option<Av>, usize), WqeError> {
    match qp.kind {
        QpKind::Dci | QpKind::Ud => {
            let av = parse_av(wqe, ctrl_seg::SIZE, qp.kind)?;
            Ok((Some(av), ctrl_seg::SIZE + av::SIZE))
        }
        QpKind::XrcIni if wqe.len() < ctrl_seg::SIZE + xrc::SIZE => Err(WqeError::Layout {
            what: "XRC WQE without its XRC segment",
            at: ctrl_seg::SIZE,
            size: wqe.len(),
        }),
        QpKind::XrcIni => Ok((None, ctrl_seg::SIZE + xrc::SIZE)),
        QpKind::Rc | QpKind::Uc | QpKind::Dct => Ok((None, ctrl_seg::SIZE)),
    }
}

fn message(wqe: &[u8], qp: &QpView) -> Result<Message, WqeError> {
    let (av, at) = address(wqe, qp)?;
    let data = parse_data(wqe, at, qp, true)?;
    Ok(Message { av, data })
}

fn rdma(wqe: &[u8], qp: &QpView, allow_inline: bool) -> Result<Rdma, WqeError> {
    let (av, at) = address(wqe, qp)?;
    let (raddr, rkey) = parse_raddr(wqe, at)?;
    let data = parse_data(wqe, at + raddr::SIZE, qp, allow_inline)?;
    Ok(Rdma {
        av,
        raddr,
        rkey,
        data,
    })
}

fn atomic(wqe: &[u8], qp: &QpView) -> Result<Atomic, WqeError> {
    let (av, at) = address(wqe, qp)?;
    let (raddr, rkey) = parse_raddr(wqe, at)?;
    let at = at + raddr::SIZE;
    let (swap_add, compare) = parse_atomic(wqe, at)?;
    let data = parse_data(wqe, at + atomic_seg::SIZE, qp, false)?;
    let Data::Sges(sges) = data else {
        unreachable!("parse_data refuses inline data here")
    };
    match sges.as_slice() {
        [local] if local.len == atomic_seg::DATA_SIZE => Ok(Atomic {
            av,
            raddr,
            rkey,
            swap_add,
            compare,
            local: *local,
        }),
        _ => Err(WqeError::AtomicLength {
            segments: sges.len(),
            byte_count: sges.first().map_or(0, |s| s.len),
        }),
    }
}

fn mmo(wqe: &[u8]) -> Result<Mmo, WqeError> {
    if wqe.len() != mmo_seg::WQE_SIZE {
        return Err(WqeError::Layout {
            what: "DMA memcpy WQE is not DS 4 (ctrl, metadata, source, destination)",
            at: 0,
            size: wqe.len(),
        });
    }
    let meta = ctrl_seg::SIZE;
    let control = layout::be32(wqe, meta + mmo_seg::CONTROL);
    if control != 0 {
        return Err(WqeError::Unsupported {
            what: "MMO control bits (mmo_control_31_0) other than 0",
        });
    }
    let pointer = |at| {
        parse_pointer(wqe, at)?.ok_or(WqeError::Inline {
            what: "inline data segment in a DMA memcpy",
            at,
        })
    };
    let src = pointer(mmo_seg::SRC)?;
    let dst = pointer(mmo_seg::DST)?;
    if src.len != dst.len {
        return Err(WqeError::MmoLength {
            src: src.len,
            dst: dst.len,
        });
    }
    Ok(Mmo {
        opaque_lkey: layout::be32(wqe, meta + mmo_seg::LOCAL_KEY),
        opaque_addr: layout::be64(wqe, meta + mmo_seg::LOCAL_ADDRESS),
        src,
        dst,
    })
}
