//! The control segment (`struct mlx5_wqe_ctrl_seg`), as libmlx5 44 writes
//! it in `_common_wqe_init_op` and `_common_wqe_finalize`:
//! `opmod_idx_opcode = opmod << 24 | (cur_post & 0xffff) << 8 | opcode`,
//! `qpn_ds = qpn << 8 | ds`, bytes 8..12 (signature, stream id, `fm_ce_se`)
//! zeroed then `fm_ce_se` set; `imm` is written only by the builders that
//! use it (immediate, invalidate, UMR), so it is stale otherwise.

use super::error::WqeError;
use super::layout::{be16, be32, ctrl as c, MAX_DS, OCTOWORD};
use super::qp::{QpKind, QpView};

/// The fence mode (`fm_ce_se` bits 7:5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fence {
    /// 0: no fence.
    None,
    /// 1: initiator small fence (`MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`;
    /// libmlx5 sets it on the WQE after a UMR).
    InitiatorSmall,
    /// 2: fence.
    Fence,
    /// 3: strong ordering.
    StrongOrdering,
    /// 4: small and fence (`MLX5_WQE_CTRL_FENCE`, from `IBV_SEND_FENCE`).
    SmallAndFence,
}

/// The parsed control segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ctrl {
    /// The opcode (`MLX5_OPCODE_*`).
    pub opcode: u8,
    /// The opcode modifier (bits 31:24).
    pub opmod: u8,
    /// The WQE index (bits 23:8): libmlx5's `cur_post & 0xffff`, the WQEBB
    /// counter at which the WQE starts; CQEs report it as `wqe_counter`.
    pub wqe_index: u16,
    /// The QP number (`qpn_ds` bits 31:8).
    pub qpn: u32,
    /// The WQE size in octowords (`qpn_ds` bits 5:0).
    pub ds: u8,
    /// The signature byte (0 unless the QP has `MLX5_QP_FLAG_SIGNATURE`).
    pub signature: u8,
    /// The DCI stream channel id (0 unless a DCI with streams).
    pub dci_stream_channel_id: u16,
    /// The raw `fm_ce_se` byte.
    pub fm_ce_se: u8,
    /// CE = 2 (`MLX5_WQE_CTRL_CQ_UPDATE`): a CQE on success too.
    pub signaled: bool,
    /// `MLX5_WQE_CTRL_SOLICITED`.
    pub solicited: bool,
    /// The fence mode.
    pub fence: Fence,
    /// The raw `imm` field, `u32::from_be_bytes` of its bytes: immediate
    /// data (write it back with `to_be_bytes`), the rkey to invalidate, or
    /// the UMR's mkey. Stale for opcodes that do not use it.
    pub imm: u32,
}

/// DS in octowords from a control segment (`qpn_ds & 0x3f`); 0 if fewer
/// than 8 bytes are given.
pub fn ctrl_ds(ctrl: &[u8]) -> u8 {
    if ctrl.len() < c::QPN_DS + 4 {
        return 0;
    }
    ctrl[c::QPN_DS + 3] & MAX_DS
}

/// The opcode byte of a control segment (`opmod_idx_opcode` bits 7:0), for
/// the error CQE of a WQE that [`parse`](super::parse) refused; 0 if the
/// slice is empty. (Report the device's own WQEBB counter as its
/// `wqe_counter`, not the WQE's index field, which may be what is wrong.)
pub fn ctrl_opcode(ctrl: &[u8]) -> u8 {
    ctrl.get(c::OPMOD_IDX_OPCODE + 3).copied().unwrap_or(0)
}

/// WQEBBs (64-byte blocks) a WQE of `ds` octowords occupies:
/// `ceil(ds * 16 / 64)`.
pub fn wqebbs(ds: u8) -> u32 {
    u32::from(ds).div_ceil(4)
}

/// Parses and checks the control segment of the linearised WQE `wqe`.
pub(super) fn parse(wqe: &[u8], qp: &QpView) -> Result<Ctrl, WqeError> {
    if wqe.len() < c::SIZE {
        return Err(WqeError::Size {
            have: wqe.len(),
            need: c::SIZE,
        });
    }
    let qpn_ds = be32(wqe, c::QPN_DS);
    let ds_byte = qpn_ds as u8;
    let ds = ds_byte & MAX_DS;
    let bad_ds = |reason| {
        Err(WqeError::BadDs {
            ds: ds_byte,
            reason,
        })
    };
    if ds_byte & !MAX_DS != 0 {
        return bad_ds("reserved bits 7:6 set");
    }
    if ds == 0 {
        return bad_ds("zero");
    }
    if usize::from(ds) * OCTOWORD > qp.max_wqe_size as usize {
        return bad_ds("WQE larger than the QP's maximum WQE size");
    }
    if wqebbs(ds) > qp.sq_wqe_cnt {
        return bad_ds("WQE larger than the send queue");
    }
    let size = usize::from(ds) * OCTOWORD;
    if wqe.len() != size {
        return Err(WqeError::Size {
            have: wqe.len(),
            need: size,
        });
    }
    let qpn = qpn_ds >> 8;
    if qpn != qp.qpn {
        return Err(WqeError::QpnMismatch {
            wqe: qpn,
            qp: qp.qpn,
        });
    }
    let word0 = be32(wqe, c::OPMOD_IDX_OPCODE);
    let wqe_index = (word0 >> 8) as u16;
    if let Some(expected) = qp.expected_wqe_index {
        if wqe_index != expected {
            return Err(WqeError::WqeIndexMismatch {
                wqe: wqe_index,
                expected,
            });
        }
    }
    let signature = wqe[c::SIGNATURE];
    check_signature(wqe, signature, qp.signature)?;
    let mut dci_stream_channel_id = be16(wqe, c::DCI_STREAM_CHANNEL_ID);
    if dci_stream_channel_id != 0 && qp.kind != QpKind::Dci {
        return Err(WqeError::Reserved {
            field: "dci_stream_channel_id (QP is not a DCI)",
            at: c::DCI_STREAM_CHANNEL_ID,
            value: u64::from(dci_stream_channel_id),
        });
    }
    if !qp.dci_streams {
        // A DCI without streams ignores the field: perftest's DC mode
        // (built with DCI stream support) sets a running stream id through
        // mlx5dv_wr_set_dc_addr_stream on DCIs made without streams, and
        // runs on ConnectX hardware.
        dci_stream_channel_id = 0;
    }
    let fm_ce_se = wqe[c::FM_CE_SE];
    let (signaled, solicited, fence) = parse_fm_ce_se(fm_ce_se)?;
    Ok(Ctrl {
        opcode: word0 as u8,
        opmod: (word0 >> 24) as u8,
        wqe_index,
        qpn,
        ds,
        signature,
        dci_stream_channel_id,
        fm_ce_se,
        signaled,
        solicited,
        fence,
        imm: be32(wqe, c::IMM),
    })
}

/// The signature check: libmlx5 (`wq_sig`) stores the complement of the
/// XOR of the WQE's `ds * 16` bytes, so the XOR over the whole WQE is 0xff.
fn check_signature(wqe: &[u8], signature: u8, enabled: bool) -> Result<(), WqeError> {
    let xor = wqe.iter().fold(0u8, |acc, &b| acc ^ b);
    let ok = if enabled { xor == 0xff } else { signature == 0 };
    if ok {
        Ok(())
    } else {
        Err(WqeError::BadSignature { signature, xor })
    }
}

/// Decodes `fm_ce_se`: FM bits 7:5 (0..=4), bit 4 reserved, CE bits 3:2
/// (0 = CQE on error only, 2 = always; 1 and 3 not modelled), SE bit 1,
/// bit 0 reserved.
fn parse_fm_ce_se(b: u8) -> Result<(bool, bool, Fence), WqeError> {
    let reserved = b & 0b0001_0001;
    if reserved != 0 {
        return Err(WqeError::Reserved {
            field: "fm_ce_se bits 4 and 0",
            at: c::FM_CE_SE,
            value: u64::from(reserved),
        });
    }
    let signaled = match (b >> 2) & 3 {
        0 => false,
        2 => true,
        _ => {
            return Err(WqeError::Unsupported {
                what: "completion mode (fm_ce_se CE) 1 or 3",
            })
        }
    };
    let fence = match b >> 5 {
        0 => Fence::None,
        1 => Fence::InitiatorSmall,
        2 => Fence::Fence,
        3 => Fence::StrongOrdering,
        4 => Fence::SmallAndFence,
        _ => {
            return Err(WqeError::Reserved {
                field: "fence mode (fm_ce_se bits 7:5) above 4",
                at: c::FM_CE_SE,
                value: u64::from(b >> 5),
            })
        }
    };
    Ok((signaled, b & c::SOLICITED != 0, fence))
}
