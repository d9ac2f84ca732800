//! UMR WQEs (`MLX5_OPCODE_UMR`): control segment, then
//! `struct mlx5_wqe_umr_ctrl_seg` (48 bytes), `struct
//! mlx5_wqe_mkey_context_seg` (64 bytes) and `klm_octowords * 16` bytes of
//! inline translation; DS = 8 + `klm_octowords`.
//!
//! Libmlx5 44 writes two families:
//! - mkey configure (`mlx5_send_wr_mkey_configure` and its setters, which
//!   `mlx5dv_wr_mr_list` / `mlx5dv_wr_mr_interleaved` call): flags
//!   `INLINE`; mask `FREE | MKEY` (+ the four access bits, + `LEN`); the
//!   mkey context zeroed, then `qpn_mkey = 0xffffff00 | tag`, access flags,
//!   `len`; translation a KLM list (`umr_sg_list_create`: data segments,
//!   zero-padded to a multiple of 4) or a repeat block
//!   (`umr_strided_seg_create`: block + entries, zero-padded to 64 bytes);
//!   `klm_octowords = align(translation bytes, 64) / 16`.
//! - local invalidate / memory-window bind (`_build_umr_wqe`,
//!   `set_bind_wr`): flags `INLINE | TRNSLATION_OFFSET` (+ `CHECK_FREE` or
//!   `CHECK_QPN`), mask `FREE | MKEY | QPN` (+ `LEN | START_ADDR |
//!   ACCESS`); only the masked mkey-context fields are written (the rest is
//!   stale SQ content), so, as the hardware does, fields outside the mask
//!   are ignored; a bind adds one KLM in a 64-byte block.
//!
//! Refused: signature/crypto BSFs (`SIG_ERR`, `BSF_ENABLE`), a non-zero
//! translation offset, non-inline translation, partial access masks.
//! A KLM list whose first entry's mkey is `0x400` reads as a repeat block
//! (its `op`); the device must not hand out that key.

use crate::mkey::{Layout, RepeatEntry, Sge};

use super::error::{need, WqeError};
use super::layout::{
    be16, be32, be64, ctrl, is_zero, klm, mkey_ctx as mk, repeat, umr_ctrl as uc, OCTOWORD,
};

/// A parsed UMR WQE. `Option` fields are `Some` exactly when the
/// `mkey_mask` selects them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Umr {
    /// The mkey being modified: `ctrl.imm` (lkey with its tag byte).
    pub mkey: u32,
    /// The raw UMR control flags (`MLX5_WQE_UMR_CTRL_FLAG_*`).
    pub flags: u8,
    /// The raw `mkey_mask` (`MLX5_WQE_UMR_CTRL_MKEY_MASK_*`).
    pub mkey_mask: u64,
    /// Octowords of inline translation (`klm_octowords`): what the device
    /// compares with the mkey's `translations_octword_size`.
    pub klm_octowords: u16,
    /// `FREE`: the new free state (true: the mkey becomes invalid).
    pub free: Option<bool>,
    /// `MKEY`: the new mkey tag (variant byte, `qpn_mkey` bits 7:0).
    pub tag: Option<u8>,
    /// `QPN`: the QP a type-2 window is bound to (`0xffffff`: none).
    pub qpn: Option<u32>,
    /// All four `ACCESS_*` bits: the new access flags
    /// (`MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_*`; local read is implicit).
    pub access: Option<u8>,
    /// `START_ADDR`: the mkey's first address (absent: zero-based).
    pub start_addr: Option<u64>,
    /// `LEN`: the mkey's length in bytes.
    pub len: Option<u64>,
    /// The new translation, when `klm_octowords` is not 0.
    pub layout: Option<Layout>,
}

impl Umr {
    /// `MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE`: fail unless the mkey is free.
    pub fn check_free(&self) -> bool {
        self.flags & uc::FLAG_CHECK_FREE != 0
    }

    /// `MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN`: fail unless the window is bound
    /// to this QP.
    pub fn check_qpn(&self) -> bool {
        self.flags & uc::FLAG_CHECK_QPN != 0
    }

    /// A local invalidate: sets the mkey free and maps nothing.
    pub fn is_invalidate(&self) -> bool {
        self.free == Some(true) && self.layout.is_none()
    }

    /// A memory-window bind (`set_bind_wr`): sets a start address (mkey
    /// configure never does: its mkeys are zero-based).
    pub fn is_bind(&self) -> bool {
        self.start_addr.is_some()
    }

    /// An mkey configure (`mlx5dv_wr_mkey_configure`, `mr_list`,
    /// `mr_interleaved`): neither an invalidate nor a bind. Libmlx5 44
    /// builds these on RC QPs only.
    pub fn is_mkey_configure(&self) -> bool {
        !self.is_invalidate() && !self.is_bind()
    }
}

const BASE: usize = ctrl::SIZE;
const MKC: usize = BASE + uc::SIZE;
const XLAT: usize = MKC + mk::SIZE;
const KNOWN_FLAGS: u8 =
    uc::FLAG_INLINE | uc::FLAG_CHECK_FREE | uc::FLAG_TRANSLATION_OFFSET | uc::FLAG_CHECK_QPN;
const KNOWN_MASK: u64 = uc::MASK_LEN
    | uc::MASK_START_ADDR
    | uc::MASK_MKEY
    | uc::MASK_QPN
    | uc::MASK_ACCESS
    | uc::MASK_FREE;

fn reserved(field: &'static str, at: usize, value: u64) -> WqeError {
    WqeError::Reserved { field, at, value }
}

fn umr(what: &'static str, at: usize) -> WqeError {
    WqeError::Umr { what, at }
}

/// Parses a UMR WQE (the control segment already checked; `mkey` is its
/// `imm`).
pub(super) fn parse(w: &[u8], mkey: u32) -> Result<Umr, WqeError> {
    need(
        w,
        BASE,
        uc::SIZE + mk::SIZE,
        "UMR control and mkey context run past the DS",
    )?;
    let flags = w[BASE + uc::FLAGS];
    if flags & !KNOWN_FLAGS != 0 {
        return Err(reserved(
            "UMR control flags",
            BASE,
            (flags & !KNOWN_FLAGS).into(),
        ));
    }
    if !is_zero(w, BASE + uc::RSVD0, 3) {
        return Err(reserved("UMR control rsvd0", BASE + uc::RSVD0, 0));
    }
    if !is_zero(w, BASE + uc::RSVD1, 32) {
        return Err(reserved("UMR control rsvd1", BASE + uc::RSVD1, 0));
    }
    let klm_raw = be16(w, BASE + uc::KLM_OCTOWORDS);
    let klm_octowords = usize::from(klm_raw);
    if be16(w, BASE + uc::TRANSLATION_OFFSET) != 0 {
        return Err(WqeError::Unsupported {
            what: "UMR translation offset / BSF octowords",
        });
    }
    let mask = be64(w, BASE + uc::MKEY_MASK);
    if mask & (uc::MASK_SIG_ERR | uc::MASK_BSF_ENABLE) != 0 {
        return Err(WqeError::Unsupported {
            what: "signature/crypto mkeys (mkey_mask SIG_ERR or BSF_ENABLE)",
        });
    }
    if mask & !KNOWN_MASK != 0 {
        return Err(reserved(
            "mkey_mask bits",
            BASE + uc::MKEY_MASK,
            mask & !KNOWN_MASK,
        ));
    }
    let access_bits = mask & uc::MASK_ACCESS;
    if access_bits != 0 && access_bits != uc::MASK_ACCESS {
        return Err(WqeError::Unsupported {
            what: "a partial access mask (libmlx5 sets the four access bits together)",
        });
    }
    let has = |bit: u64| mask & bit != 0;
    let free = if has(uc::MASK_FREE) {
        let b = w[MKC + mk::FREE];
        if b & !mk::FREE_BIT != 0 {
            return Err(reserved("mkey context free byte", MKC + mk::FREE, b.into()));
        }
        Some(b & mk::FREE_BIT != 0)
    } else {
        None
    };
    let qpn_mkey = be32(w, MKC + mk::QPN_MKEY);
    let access = if has(uc::MASK_ACCESS) {
        let a = w[MKC + mk::ACCESS_FLAGS];
        if a & 0x83 != 0 {
            return Err(reserved(
                "mkey context access flags bits 7, 1:0",
                MKC + mk::ACCESS_FLAGS,
                a.into(),
            ));
        }
        Some(a)
    } else {
        None
    };
    if XLAT + klm_octowords * OCTOWORD != w.len() {
        return Err(WqeError::Layout {
            what: "UMR klm_octowords does not end at the DS",
            at: BASE + uc::KLM_OCTOWORDS,
            size: w.len(),
        });
    }
    let layout = if klm_octowords == 0 {
        None
    } else if flags & uc::FLAG_INLINE == 0 {
        return Err(WqeError::Unsupported {
            what: "UMR translation by pointer (no INLINE flag)",
        });
    } else {
        Some(parse_translation(w, klm_octowords)?)
    };
    let len = has(uc::MASK_LEN).then(|| be64(w, MKC + mk::LEN));
    if let (Some(declared), Some(layout)) = (len, &layout) {
        if declared != layout.len() {
            return Err(WqeError::UmrLength {
                what: "mkey length is not the length of its translation",
                declared,
                computed: layout.len(),
            });
        }
    }
    Ok(Umr {
        mkey,
        flags,
        mkey_mask: mask,
        klm_octowords: klm_raw,
        free,
        tag: has(uc::MASK_MKEY).then_some(qpn_mkey as u8),
        qpn: has(uc::MASK_QPN).then_some(qpn_mkey >> 8),
        access,
        start_addr: has(uc::MASK_START_ADDR).then(|| be64(w, MKC + mk::START_ADDR)),
        len,
        layout,
    })
}

/// Parses `slots` octowords of inline translation at [`XLAT`].
fn parse_translation(w: &[u8], slots: usize) -> Result<Layout, WqeError> {
    if !slots.is_multiple_of(4) {
        return Err(umr(
            "klm_octowords is not a multiple of 4 (64-byte translation)",
            BASE + uc::KLM_OCTOWORDS,
        ));
    }
    if be32(w, XLAT + repeat::OP) == repeat::OP_REPEAT_BLOCK {
        parse_repeat_block(w, slots)
    } else {
        parse_klm_list(w, slots)
    }
}

fn slot(i: usize) -> usize {
    XLAT + i * OCTOWORD
}

/// A KLM list: `slots` KLMs, of which up to 3 trailing all-zero ones are
/// the padding to a multiple of 4.
fn parse_klm_list(w: &[u8], slots: usize) -> Result<Layout, WqeError> {
    let mut n = slots;
    while n > slots - 3 && is_zero(w, slot(n - 1), klm::SIZE) {
        n -= 1;
    }
    let mut sges = Vec::with_capacity(n);
    for i in 0..n {
        let at = slot(i);
        let byte_count = be32(w, at + klm::BYTE_COUNT);
        if byte_count > klm::MAX_BYTE_COUNT {
            return Err(WqeError::UmrLength {
                what: "KLM longer than 2 GiB",
                declared: byte_count.into(),
                computed: klm::MAX_BYTE_COUNT.into(),
            });
        }
        sges.push(Sge {
            lkey: be32(w, at + klm::MKEY),
            addr: be64(w, at + klm::ADDRESS),
            len: byte_count,
        });
    }
    Ok(Layout::List(sges))
}

/// A repeat block and its `num_ent` entries, zero-padded to `slots`
/// octowords (`align(num_ent + 1, 4)`).
fn parse_repeat_block(w: &[u8], slots: usize) -> Result<Layout, WqeError> {
    let reserved_field = be16(w, XLAT + repeat::RESERVED);
    if reserved_field != 0 {
        return Err(reserved(
            "repeat block reserved",
            XLAT + repeat::RESERVED,
            reserved_field.into(),
        ));
    }
    let num_ent = usize::from(be16(w, XLAT + repeat::NUM_ENT));
    if (num_ent + 1).next_multiple_of(4) != slots {
        return Err(umr(
            "klm_octowords is not num_ent + 1 rounded up to a multiple of 4",
            XLAT + repeat::NUM_ENT,
        ));
    }
    let mut entries = Vec::with_capacity(num_ent);
    for i in 1..=num_ent {
        let at = slot(i);
        entries.push(RepeatEntry {
            stride: be16(w, at + repeat::ENT_STRIDE),
            byte_count: be16(w, at + repeat::ENT_BYTE_COUNT),
            key: be32(w, at + repeat::ENT_MEMKEY),
            va: be64(w, at + repeat::ENT_VA),
        });
    }
    let pad = slot(num_ent + 1);
    if !is_zero(w, pad, slot(slots) - pad) {
        return Err(umr("non-zero padding after the repeat entries", pad));
    }
    let sum: u64 = entries.iter().map(|e| u64::from(e.byte_count)).sum();
    let byte_count = be32(w, XLAT + repeat::BYTE_COUNT);
    if u64::from(byte_count) != sum {
        return Err(WqeError::UmrLength {
            what: "repeat block byte_count is not the sum of its entries",
            declared: byte_count.into(),
            computed: sum,
        });
    }
    Ok(Layout::Interleaved {
        repeat_count: be32(w, XLAT + repeat::REPEAT_COUNT),
        entries,
    })
}
