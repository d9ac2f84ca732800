//! Refused WQEs: control segment, opcodes, address vectors, data,
//! atomics and memcpy. Each gets its error and syndrome.

use super::sq::{Sq, INLINE, STALE};
use super::{one, parse_at, refused};
use crate::wqe::error::{SYNDROME_LOCAL_LENGTH_ERR as LEN, SYNDROME_LOCAL_QP_OP_ERR as QP_OP};
use crate::wqe::layout::opcode as op;
use crate::wqe::{parse, QpKind, QpView, Wqe, WqeError};

/// An RC RDMA write of one SGE (DS 3), linearised, and its QP view.
fn write_wqe() -> (Vec<u8>, QpView) {
    let mut sq = Sq::new(QpKind::Rc, 8);
    sq.rdma(op::RDMA_WRITE, 0, 1, 0x1000, None);
    sq.set_sge(2, 0x2000, 64);
    (sq.linearise(0), sq.view(0))
}

/// Parses the write WQE after `edit`.
fn edited(edit: impl FnOnce(&mut Vec<u8>, &mut QpView)) -> Result<Wqe, WqeError> {
    let (mut w, mut qp) = write_wqe();
    edit(&mut w, &mut qp);
    parse(&w, &qp)
}

/// Builds on a fresh SQ, then edits the linearised WQE before parsing.
fn built(
    kind: QpKind,
    build: impl FnOnce(&mut Sq),
    edit: impl FnOnce(&mut Vec<u8>),
) -> Result<Wqe, WqeError> {
    let mut sq = Sq::new(kind, 8);
    build(&mut sq);
    let mut w = sq.linearise(0);
    edit(&mut w);
    parse(&w, &sq.view(0))
}

/// Sets the DS byte and resizes the WQE to match (at least the control
/// segment stays).
pub(super) fn set_ds(w: &mut Vec<u8>, ds: u8) {
    w[7] = ds;
    w.resize(usize::from(ds & 0x3f).max(1) * 16, 0);
}

fn set_opcode(w: &mut [u8], opmod: u8, opcode: u8) {
    w[0] = opmod;
    w[3] = opcode;
}

#[test]
fn control_segment_size() {
    let (w, qp) = write_wqe();
    refused(
        parse(&w[..8], &qp),
        WqeError::Size { have: 8, need: 16 },
        QP_OP,
    );
    refused(
        parse(&w[..32], &qp),
        WqeError::Size { have: 32, need: 48 },
        QP_OP,
    );
    let mut long = w.clone();
    long.extend_from_slice(&[0; 16]);
    refused(
        parse(&long, &qp),
        WqeError::Size { have: 64, need: 48 },
        QP_OP,
    );
    let bad = |ds, reason| WqeError::BadDs { ds, reason };
    refused(edited(|w, _| set_ds(w, 0)), bad(0, "zero"), QP_OP);
    refused(
        edited(|w, _| w[7] = 0x43),
        bad(0x43, "reserved bits 7:6 set"),
        QP_OP,
    );
    let too_big = "WQE larger than the QP's maximum WQE size";
    refused(edited(|_, qp| qp.max_wqe_size = 32), bad(3, too_big), QP_OP);
    let sq_small = "WQE larger than the send queue";
    refused(
        edited(|w, qp| {
            set_ds(w, 9);
            qp.sq_wqe_cnt = 2
        }),
        bad(9, sq_small),
        QP_OP,
    );
}

#[test]
fn qpn_index_and_signature() {
    refused(
        edited(|w, _| w[6] = 0x24),
        WqeError::QpnMismatch {
            wqe: 0x124,
            qp: 0x123,
        },
        QP_OP,
    );
    refused(
        edited(|_, qp| qp.expected_wqe_index = Some(1)),
        WqeError::WqeIndexMismatch {
            wqe: 0,
            expected: 1,
        },
        QP_OP,
    );
    let r = edited(|w, _| w[8] = 0x5c);
    assert!(
        matches!(
            r,
            Err(WqeError::BadSignature {
                signature: 0x5c,
                ..
            })
        ),
        "{r:?}"
    );
    let mut sq = Sq::new(QpKind::Rc, 8);
    sq.wq_sig = true;
    sq.rdma(op::RDMA_WRITE, 0, 1, 2, None);
    sq.set_sge(1, 2, 3);
    let mut w = sq.linearise(0);
    w[40] ^= 1;
    let r = parse(&w, &sq.view(0));
    assert!(
        matches!(r, Err(WqeError::BadSignature { xor: 0xfe, .. })),
        "{r:?}"
    );
    assert_eq!(r.unwrap_err().syndrome(), QP_OP);
}

#[test]
fn stream_id_only_on_a_dci_and_ignored_without_streams() {
    let want = WqeError::Reserved {
        field: "dci_stream_channel_id (QP is not a DCI)",
        at: 9,
        value: 3,
    };
    refused(edited(|w, _| w[10] = 3), want, QP_OP);
    let mut sq = Sq::new(QpKind::Dci, 8);
    sq.send(op::SEND, 0, None);
    sq.set_dc_addr(1, 2, 3, Some(3), None);
    sq.set_sge(1, 2, 3);
    let mut qp = sq.view(0);
    assert_eq!(
        parse(&sq.linearise(0), &qp)
            .unwrap()
            .ctrl
            .dci_stream_channel_id,
        3
    );
    qp.dci_streams = false;
    let w = parse(&sq.linearise(0), &qp).expect("a DCI without streams ignores the id");
    assert_eq!(w.ctrl.dci_stream_channel_id, 0);
}

#[test]
fn fm_ce_se() {
    let reserved = |v| WqeError::Reserved {
        field: "fm_ce_se bits 4 and 0",
        at: 11,
        value: v,
    };
    refused(edited(|w, _| w[11] = 0x01), reserved(1), QP_OP);
    refused(edited(|w, _| w[11] = 0x10), reserved(0x10), QP_OP);
    let ce = WqeError::Unsupported {
        what: "completion mode (fm_ce_se CE) 1 or 3",
    };
    refused(edited(|w, _| w[11] = 0x04), ce.clone(), QP_OP);
    refused(edited(|w, _| w[11] = 0x0c), ce, QP_OP);
    let fm = WqeError::Reserved {
        field: "fence mode (fm_ce_se bits 7:5) above 4",
        at: 11,
        value: 5,
    };
    refused(edited(|w, _| w[11] = 0xa0), fm, QP_OP);
}

#[test]
fn opcodes_and_modifiers() {
    let (w, _) = write_wqe();
    assert_eq!(
        (crate::wqe::ctrl_opcode(&w), crate::wqe::ctrl_opcode(&[])),
        (op::RDMA_WRITE, 0)
    );
    refused(
        edited(|w, _| set_opcode(w, 0, 0x03)),
        WqeError::BadOpcode { opcode: 3 },
        QP_OP,
    );
    refused(
        edited(|w, _| set_opcode(w, 0, 0xff)),
        WqeError::BadOpcode { opcode: 0xff },
        QP_OP,
    );
    refused(
        edited(|w, _| set_opcode(w, 1, op::RDMA_WRITE)),
        WqeError::BadOpmod {
            opcode: 8,
            opmod: 1,
        },
        QP_OP,
    );
    refused(
        edited(|w, _| set_opcode(w, 0, op::MMO)),
        WqeError::BadOpmod {
            opcode: 0x2f,
            opmod: 0,
        },
        QP_OP,
    );
    let tso = WqeError::OpcodeNotForQp {
        opcode: op::TSO,
        kind: QpKind::Rc,
    };
    refused(edited(|w, _| set_opcode(w, 0, op::TSO)), tso, QP_OP);
    let masked = WqeError::Unsupported {
        what: "masked atomics",
    };
    refused(
        edited(|w, _| set_opcode(w, 0, op::ATOMIC_MASKED_FA)),
        masked,
        QP_OP,
    );
    let psv = WqeError::Unsupported {
        what: "SET_PSV (signature offload)",
    };
    refused(edited(|w, _| set_opcode(w, 0, op::SET_PSV)), psv, QP_OP);
    let r = edited(|w, _| set_opcode(w, 0, op::LOCAL_INVAL));
    assert!(matches!(r, Err(WqeError::Unsupported { .. })), "{r:?}");
}

#[test]
fn opcodes_not_for_the_qp_kind() {
    let dct = WqeError::OpcodeNotForQp {
        opcode: op::RDMA_WRITE,
        kind: QpKind::Dct,
    };
    refused(edited(|_, qp| qp.kind = QpKind::Dct), dct, QP_OP);
    for opcode in [
        op::RDMA_WRITE,
        op::RDMA_READ,
        op::ATOMIC_CS,
        op::SEND_INVAL,
        op::UMR,
        op::MMO,
    ] {
        let want = WqeError::OpcodeNotForQp {
            opcode,
            kind: QpKind::Ud,
        };
        let opmod = u8::from(opcode == op::MMO);
        let r = built(
            QpKind::Ud,
            |sq| {
                sq.send(op::SEND, 0, None);
                sq.set_ud_addr(1, 2, 3);
                sq.set_sge(1, 2, 3);
            },
            |w| set_opcode(w, opmod, opcode),
        );
        refused(r, want, QP_OP);
    }
    // mkey configure is RC only (libmlx5 44); on a DCI only invalidation.
    let r = built(
        QpKind::Dci,
        |sq| sq.mr_list(0x4200, INLINE, 0, &[(1, 2, 3)]),
        |_| (),
    );
    refused(
        r,
        WqeError::OpcodeNotForQp {
            opcode: op::UMR,
            kind: QpKind::Dci,
        },
        QP_OP,
    );
}

#[test]
fn segments_past_or_short_of_the_ds() {
    let short = |what, at, size| WqeError::Layout { what, at, size };
    // An RC write whose raddr is cut off: DS 1 leaves no raddr.
    let r = edited(|w, _| set_ds(w, 1));
    refused(
        r,
        short("remote address segment runs past the DS", 16, 16),
        QP_OP,
    );
    let r = built(
        QpKind::Dci,
        |sq| {
            sq.send(op::SEND, 0, None);
            sq.set_dc_addr(1, 2, 3, None, None);
            sq.set_sge(1, 2, 3);
        },
        |w| set_ds(w, 3),
    );
    refused(r, short("address vector runs past the DS", 16, 48), QP_OP);
    let r = built(
        QpKind::Rc,
        |sq| {
            sq.atomic(op::ATOMIC_FA, 0, 1, 2, 3, 4);
            sq.set_sge(1, 2, 8);
        },
        |w| set_ds(w, 2),
    );
    refused(r, short("atomic segment runs past the DS", 32, 32), QP_OP);
}

#[test]
fn raddr_reserved() {
    let want = WqeError::Reserved {
        field: "raddr_seg.reserved",
        at: 28,
        value: 0x100,
    };
    refused(edited(|w, _| w[30] = 1), want, QP_OP);
}

#[test]
fn too_many_sges() {
    let r = edited(|w, qp| {
        qp.max_send_sge = 2;
        let sge = w[32..48].to_vec();
        w.extend_from_slice(&sge);
        w.extend_from_slice(&sge);
        w[7] = 5;
    });
    refused(r, WqeError::TooManySges { count: 3, max: 2 }, QP_OP);
}

fn inline_write(len: usize) -> impl FnOnce(&mut Sq) {
    move |sq: &mut Sq| {
        sq.rdma(op::RDMA_WRITE, INLINE, 1, 2, None);
        sq.set_inline_list(&[&vec![7; len]]);
    }
}

#[test]
fn inline_too_long() {
    let r = built(QpKind::Rc, inline_write(40), |_| ());
    assert!(r.is_ok());
    let mut sq = Sq::new(QpKind::Rc, 8);
    inline_write(40)(&mut sq);
    let mut qp = sq.view(0);
    qp.max_inline = 39;
    refused(
        parse(&sq.linearise(0), &qp),
        WqeError::InlineTooLong { len: 40, max: 39 },
        LEN,
    );
}

#[test]
fn inline_where_pointers_are_needed() {
    let what = "inline data segment where the opcode needs pointer segments";
    let r = built(QpKind::Rc, inline_write(8), |w| w[3] = op::RDMA_READ);
    refused(r, WqeError::Inline { what, at: 32 }, QP_OP);
    let r = built(
        QpKind::Rc,
        |sq| {
            sq.atomic(op::ATOMIC_CS, 0, 1, 2, 3, 4);
            sq.set_inline_list(&[&[0; 8]]);
        },
        |_| (),
    );
    refused(r, WqeError::Inline { what, at: 48 }, QP_OP);
}

#[test]
fn inline_runs_past_the_ds() {
    // An inline byte count longer than the DS (mixed gather lists, which
    // the PRM allows, are in the gather tests).
    let r = built(QpKind::Rc, inline_write(8), |w| w[35] = 13);
    let what = "inline data runs past the DS";
    refused(
        r,
        WqeError::Layout {
            what,
            at: 32,
            size: 48,
        },
        QP_OP,
    );
}

fn atomic_with(sges: &'static [(u32, u64, u32)]) -> impl FnOnce(&mut Sq) {
    move |sq: &mut Sq| {
        sq.atomic(op::ATOMIC_FA, 0, 1, 2, 3, 4);
        sq.set_sge_list(sges);
    }
}

#[test]
fn atomic_local_buffer_not_8_bytes() {
    let len = |segments, byte_count| WqeError::AtomicLength {
        segments,
        byte_count,
    };
    refused(
        built(QpKind::Rc, atomic_with(&[(1, 2, 16)]), |_| ()),
        len(1, 16),
        LEN,
    );
    refused(
        built(QpKind::Rc, atomic_with(&[(1, 2, 4)]), |_| ()),
        len(1, 4),
        LEN,
    );
    refused(built(QpKind::Rc, atomic_with(&[]), |_| ()), len(0, 0), LEN);
    refused(
        built(QpKind::Rc, atomic_with(&[(1, 2, 8), (1, 10, 8)]), |_| ()),
        len(2, 8),
        LEN,
    );
}

fn dci_send(sq: &mut Sq) {
    sq.send(op::SEND, 0, None);
    sq.set_dc_addr(1, 0x99, 3, None, Some([1; 16]));
    sq.set_sge(1, 2, 3);
}

#[test]
fn address_vector() {
    let unsupported = WqeError::Unsupported {
        what: "compact (non-extended) address vector",
    };
    refused(
        built(QpKind::Dci, dci_send, |w| w[24] = 0),
        unsupported,
        QP_OP,
    );
    let reserved = |field, at, value| WqeError::Reserved { field, at, value };
    let r = built(QpKind::Dci, dci_send, |w| w[24] = 0x81);
    refused(r, reserved("dqp_dct bits 30:24", 24, 0x0100_0000), QP_OP);
    let r = built(QpKind::Dci, dci_send, |w| w[35] = 2);
    refused(r, reserved("reserved0", 32, 2), QP_OP);
    let r = built(QpKind::Dci, dci_send, |w| w[44] |= 0x80);
    refused(
        r,
        reserved("grh_gid_fl bits 31, 29:28", 44, 0x8000_0000),
        QP_OP,
    );
    let r = built(
        QpKind::Ud,
        |sq| {
            sq.send(op::SEND, 0, None);
            sq.set_ud_addr(1, 2, 3);
            sq.set_sge(1, 2, 3);
        },
        |w| w[23] = 1,
    );
    refused(r, reserved("qkey reserved half", 20, 1), QP_OP);
}

fn memcpy(sq: &mut Sq) {
    sq.memcpy(0, (1, 0x1000), (2, 0x2000), 64, (3, 0x3000));
}

#[test]
fn dma_memcpy_refusals() {
    refused(
        built(QpKind::Rc, memcpy, |w| w[51] = 65),
        WqeError::MmoLength { src: 64, dst: 65 },
        LEN,
    );
    let what = "DMA memcpy WQE is not DS 4 (ctrl, metadata, source, destination)";
    refused(
        built(QpKind::Rc, memcpy, |w| set_ds(w, 5)),
        WqeError::Layout {
            what,
            at: 0,
            size: 80,
        },
        QP_OP,
    );
    let what = "inline data segment in a DMA memcpy";
    refused(
        built(QpKind::Rc, memcpy, |w| w[32] = 0x80),
        WqeError::Inline { what, at: 32 },
        QP_OP,
    );
    let what = "MMO control bits (mmo_control_31_0) other than 0";
    refused(
        built(QpKind::Rc, memcpy, |w| w[19] = 1),
        WqeError::Unsupported { what },
        QP_OP,
    );
}

#[test]
fn stale_bytes_are_not_taken_for_fields() {
    // The fixtures' stale fill must not leak into what the parser accepts.
    let mut sq = Sq::new(QpKind::Rc, 8);
    sq.rdma(op::RDMA_WRITE, 0, 1, 2, None);
    sq.set_sge(1, 2, 3);
    assert_eq!(sq.buf[64], STALE);
    assert_eq!(parse_at(&sq, 0).unwrap().ctrl.ds, 3);
    let _ = one(QpKind::Rc, |_| ()).unwrap_err();
}
