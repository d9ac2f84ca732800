//! Refused UMR WQEs: each malformed control, mkey context or translation.

use super::refuse::set_ds;
use super::refused;
use super::sq::{Interleaved, Sq, INLINE};
use super::sq_dv::ACC_RW;
use crate::wqe::error::{SYNDROME_LOCAL_LENGTH_ERR as LEN, SYNDROME_LOCAL_QP_OP_ERR as QP_OP};
use crate::wqe::{parse, QpKind, Wqe, WqeError};

/// A `mlx5dv_wr_mr_list` of 3 entries (60 bytes, DS 12) edited by `edit`.
fn list(edit: impl FnOnce(&mut Vec<u8>)) -> Result<Wqe, WqeError> {
    let mut sq = Sq::new(QpKind::Rc, 8);
    sq.mr_list(
        0x4201,
        INLINE,
        ACC_RW,
        &[
            (0x100, 0x1000, 10),
            (0x200, 0x2000, 20),
            (0x300, 0x3000, 30),
        ],
    );
    let mut w = sq.linearise(0);
    edit(&mut w);
    parse(&w, &sq.view(0))
}

/// A `mlx5dv_wr_mr_interleaved` of 2 entries x 3 (DS 12) edited by `edit`.
fn interleaved(edit: impl FnOnce(&mut Vec<u8>)) -> Result<Wqe, WqeError> {
    let mut sq = Sq::new(QpKind::Rc, 8);
    let e = |addr, lkey| Interleaved {
        addr,
        bytes_count: 8,
        bytes_skip: 8,
        lkey,
    };
    sq.mr_interleaved(
        0x4300,
        INLINE,
        ACC_RW,
        3,
        &[e(0x1000, 0x11), e(0x2000, 0x22)],
    );
    let mut w = sq.linearise(0);
    edit(&mut w);
    parse(&w, &sq.view(0))
}

fn reserved(field: &'static str, at: usize, value: u64) -> WqeError {
    WqeError::Reserved { field, at, value }
}

fn unsupported(what: &'static str) -> WqeError {
    WqeError::Unsupported { what }
}

#[test]
fn fixtures_are_accepted() {
    assert!(list(|_| ()).is_ok());
    assert!(interleaved(|_| ()).is_ok());
}

#[test]
fn umr_control_segment() {
    refused(
        list(|w| w[16] |= 0x01),
        reserved("UMR control flags", 16, 1),
        QP_OP,
    );
    refused(
        list(|w| w[16] |= 0x40),
        reserved("UMR control flags", 16, 0x40),
        QP_OP,
    );
    refused(
        list(|w| w[18] = 1),
        reserved("UMR control rsvd0", 17, 0),
        QP_OP,
    );
    refused(
        list(|w| w[40] = 1),
        reserved("UMR control rsvd1", 32, 0),
        QP_OP,
    );
    refused(
        list(|w| w[23] = 1),
        unsupported("UMR translation offset / BSF octowords"),
        QP_OP,
    );
    let sig = unsupported("signature/crypto mkeys (mkey_mask SIG_ERR or BSF_ENABLE)");
    refused(list(|w| w[30] |= 0x10), sig.clone(), QP_OP);
    refused(list(|w| w[30] |= 0x02), sig, QP_OP);
    refused(
        list(|w| w[31] |= 0x02),
        reserved("mkey_mask bits", 24, 2),
        QP_OP,
    );
    refused(
        list(|w| w[24] |= 0x80),
        reserved("mkey_mask bits", 24, 1 << 63),
        QP_OP,
    );
    let partial = unsupported("a partial access mask (libmlx5 sets the four access bits together)");
    refused(list(|w| w[29] &= !0x04), partial, QP_OP);
    let pointer = unsupported("UMR translation by pointer (no INLINE flag)");
    refused(list(|w| w[16] = 0), pointer, QP_OP);
}

#[test]
fn mkey_context() {
    refused(
        list(|w| w[64] = 0x41),
        reserved("mkey context free byte", 64, 0x41),
        QP_OP,
    );
    let field = "mkey context access flags bits 7, 1:0";
    refused(list(|w| w[66] |= 0x80), reserved(field, 66, 0xa0), QP_OP);
    refused(list(|w| w[66] |= 0x01), reserved(field, 66, 0x21), QP_OP);
    let len = |declared, computed| WqeError::UmrLength {
        what: "mkey length is not the length of its translation",
        declared,
        computed,
    };
    refused(list(|w| w[95] = 61), len(61, 60), LEN);
    refused(interleaved(|w| w[95] = 47), len(47, 48), LEN);
}

#[test]
fn translation_size() {
    let layout = |size| WqeError::Layout {
        what: "UMR klm_octowords does not end at the DS",
        at: 20,
        size,
    };
    refused(list(|w| w[21] = 8), layout(192), QP_OP);
    refused(list(|w| set_ds(w, 8)), layout(128), QP_OP);
    let umr = |what, at| WqeError::Umr { what, at };
    let r = list(|w| {
        w[21] = 2;
        set_ds(w, 10);
    });
    refused(
        r,
        umr(
            "klm_octowords is not a multiple of 4 (64-byte translation)",
            20,
        ),
        QP_OP,
    );
}

#[test]
fn klm_entries() {
    let r = list(|w| {
        w[128] = 0x80;
        w[131] = 1;
    });
    let want = WqeError::UmrLength {
        what: "KLM longer than 2 GiB",
        declared: 0x8000_0001,
        computed: 0x8000_0000,
    };
    refused(r, want, LEN);
}

#[test]
fn repeat_block() {
    let umr = |what, at| WqeError::Umr { what, at };
    refused(
        interleaved(|w| w[140] = 1),
        reserved("repeat block reserved", 140, 0x100),
        QP_OP,
    );
    let count = "klm_octowords is not num_ent + 1 rounded up to a multiple of 4";
    refused(interleaved(|w| w[143] = 4), umr(count, 142), QP_OP);
    // num_ent 0 fits 4 octowords too: the two entries are then padding.
    refused(
        interleaved(|w| w[143] = 0),
        umr("non-zero padding after the repeat entries", 144),
        QP_OP,
    );
    refused(
        interleaved(|w| w[190] = 1),
        umr("non-zero padding after the repeat entries", 176),
        QP_OP,
    );
    let sum = WqeError::UmrLength {
        what: "repeat block byte_count is not the sum of its entries",
        declared: 17,
        computed: 16,
    };
    refused(interleaved(|w| w[131] = 17), sum, LEN);
}

#[test]
fn list_whose_first_key_is_0x400_reads_as_a_repeat_block() {
    // Documented ambiguity: KLM mkey 0x400 sits where a repeat block's
    // `op` is; the device must not hand out that key.
    let mut sq = Sq::new(QpKind::Rc, 8);
    sq.mr_list(0x4201, INLINE, ACC_RW, &[(0x400, 0x1000, 10)]);
    let r = parse(&sq.linearise(0), &sq.view(0));
    assert!(
        matches!(r, Err(WqeError::Umr { .. } | WqeError::UmrLength { .. })),
        "{r:?}"
    );
}
