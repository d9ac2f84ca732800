//! Gather lists that mix inline and pointer data segments, as UCX writes
//! them (`am_zcopy` on `rc_mlx5`/`dc_mlx5`: an inline header segment, then
//! pointer segments) and as the PRM allows them in any order: the parts in
//! WQE order, and the limits that still hold over the whole list.

use super::refused;
use super::sq::{Sq, STALE};
use crate::wqe::error::{SYNDROME_LOCAL_LENGTH_ERR as LEN, SYNDROME_LOCAL_QP_OP_ERR as QP_OP};
use crate::wqe::layout::opcode as op;
use crate::wqe::{parse, Body, Data, Part, QpKind, QpView, Sge, Wqe, WqeError};

/// A data segment to append: inline bytes, or `(lkey, addr, byte_count)`.
enum Seg<'a> {
    I(&'a [u8]),
    P(u32, u64, u32),
}
use Seg::{I, P};

/// The segments' bytes: an inline segment is `byte_count | MLX5_INLINE_SEG`
/// and its data, padded to 16 bytes with stale bytes (the device ignores
/// the padding); a pointer segment is `struct mlx5_wqe_data_seg`.
fn encode(segs: &[Seg]) -> Vec<u8> {
    let mut w = Vec::new();
    for s in segs {
        match *s {
            I(data) => {
                w.extend_from_slice(&(data.len() as u32 | 0x8000_0000).to_be_bytes());
                w.extend_from_slice(data);
                w.resize(w.len().next_multiple_of(16), STALE);
            }
            P(lkey, addr, len) => {
                w.extend_from_slice(&len.to_be_bytes());
                w.extend_from_slice(&lkey.to_be_bytes());
                w.extend_from_slice(&addr.to_be_bytes());
            }
        }
    }
    w
}

/// A WQE whose head (control, address vector or XRC, raddr segments) the
/// libmlx5 model writes with `head` (which ends with an empty data setter),
/// followed by `segs`, its DS set to match; and the QP view to parse it by.
fn wqe(kind: QpKind, head: impl FnOnce(&mut Sq), segs: &[Seg]) -> (Vec<u8>, QpView) {
    let mut sq = Sq::new(kind, 8);
    head(&mut sq);
    let mut w = sq.linearise(0);
    w.extend_from_slice(&encode(segs));
    w[7] = (w.len() / 16) as u8;
    (w, sq.view(0))
}

/// Parses [`wqe`]'s WQE.
fn parsed(kind: QpKind, head: impl FnOnce(&mut Sq), segs: &[Seg]) -> Result<Wqe, WqeError> {
    let (w, qp) = wqe(kind, head, segs);
    parse(&w, &qp)
}

fn send(opcode: u8, imm: Option<u32>) -> impl FnOnce(&mut Sq) {
    move |sq: &mut Sq| {
        sq.send(opcode, 0, imm);
        sq.set_sge(0, 0, 0);
    }
}

fn write(opcode: u8, imm: Option<u32>) -> impl FnOnce(&mut Sq) {
    move |sq: &mut Sq| {
        sq.rdma(opcode, 0, 0x77, 0x5000, imm);
        sq.set_sge(0, 0, 0);
    }
}

fn sge(lkey: u32, addr: u64, len: u32) -> Sge {
    Sge { lkey, addr, len }
}

/// UCX's `am_zcopy` header: 13 bytes, so the inline segment takes two
/// 16-byte units with stale padding.
const HDR: &[u8] = b"ucx-am-header";

/// The parts of [`HDR`] then pointers `(1, 0x1000, 100)` and
/// `(2, 0x2000, 300)`.
fn header_and_two_pointers() -> Vec<Part> {
    vec![
        Part::Inline(HDR.to_vec()),
        Part::Pointer(sge(1, 0x1000, 100)),
        Part::Pointer(sge(2, 0x2000, 300)),
    ]
}

const HDR_AND_TWO: &[Seg] = &[I(HDR), P(1, 0x1000, 100), P(2, 0x2000, 300)];

#[test]
fn rc_sends_inline_header_then_two_pointers() {
    for (opcode, imm) in [
        (op::SEND, None),
        (op::SEND_IMM, Some(0x0102_0304)),
        (op::SEND_INVAL, Some(0x4d02)),
    ] {
        let w = parsed(QpKind::Rc, send(opcode, imm), HDR_AND_TWO).unwrap();
        assert_eq!(w.ctrl.ds, 1 + 2 + 1 + 1);
        let data = w.body.data().unwrap();
        assert_eq!(data, &Data::Gather(header_and_two_pointers()));
        assert_eq!(data.len(), HDR.len() as u64 + 400);
        if let Some(imm) = imm {
            assert_eq!(w.ctrl.imm, imm);
        }
    }
}

#[test]
fn rc_writes_inline_header_then_two_pointers() {
    for (opcode, imm) in [(op::RDMA_WRITE, None), (op::RDMA_WRITE_IMM, Some(9))] {
        let w = parsed(QpKind::Rc, write(opcode, imm), HDR_AND_TWO).unwrap();
        let (Body::RdmaWrite(r) | Body::RdmaWriteImm(r)) = w.body else {
            panic!("{:?}", w.body)
        };
        assert_eq!((r.raddr, r.rkey), (0x5000, 0x77));
        assert_eq!(r.data, Data::Gather(header_and_two_pointers()));
    }
}

#[test]
fn any_order_and_several_inline_segments() {
    // A pointer, two inline segments (one of 16 bytes: 4 + 16 takes two
    // units; one empty: a unit of its byte count alone), a pointer.
    let segs = [
        P(3, 0x30, 8),
        I(&[0xab; 16]),
        I(&[]),
        I(b"xyz"),
        P(4, 0x40, 0),
    ];
    let w = parsed(QpKind::Rc, send(op::SEND, None), &segs).unwrap();
    assert_eq!(w.ctrl.ds, 1 + 1 + 2 + 1 + 1 + 1);
    let data = w.body.data().unwrap();
    assert_eq!(
        data,
        &Data::Gather(vec![
            Part::Pointer(sge(3, 0x30, 8)),
            Part::Inline(vec![0xab; 16]),
            Part::Inline(vec![]),
            Part::Inline(b"xyz".to_vec()),
            // byte_count 0 of a pointer segment is 2 GiB.
            Part::Pointer(sge(4, 0x40, 0x8000_0000)),
        ])
    );
    assert_eq!(data.len(), 8 + 16 + 3 + 0x8000_0000);
}

#[test]
fn ud_send_and_dci_write_with_an_inline_header() {
    let ud = |sq: &mut Sq| {
        sq.send(op::SEND, 0, None);
        sq.set_ud_addr(0x21, 0x55, 0x1111_2222);
        sq.set_sge(0, 0, 0);
    };
    let dci = |sq: &mut Sq| {
        sq.rdma(op::RDMA_WRITE, 0, 0x77, 0x5000, None);
        sq.set_sge(0, 0, 0);
        sq.set_dc_addr(0x11, 0x99, 7, None, None);
    };
    let w = parsed(QpKind::Ud, ud, HDR_AND_TWO).unwrap();
    assert_eq!(w.body.av().unwrap().dctn, 0x55);
    assert_eq!(
        w.body.data(),
        Some(&Data::Gather(header_and_two_pointers()))
    );
    let w = parsed(QpKind::Dci, dci, HDR_AND_TWO).unwrap();
    assert_eq!(w.body.av().unwrap().dctn, 0x99);
    assert_eq!(
        w.body.data(),
        Some(&Data::Gather(header_and_two_pointers()))
    );
}

#[test]
fn wraps_around_the_send_queue() {
    // Posted as a raw WQE at the last WQEBB of a 4-WQEBB queue: the header
    // and the pointers continue at the start of the buffer.
    let (w, _) = wqe(QpKind::Rc, send(op::SEND, None), HDR_AND_TWO);
    let mut sq = Sq::new(QpKind::Rc, 4);
    sq.cur_post = 3;
    sq.raw_wqe(&w);
    let w = super::parse_at(&sq, 3).unwrap();
    assert_eq!(
        w.body.data(),
        Some(&Data::Gather(header_and_two_pointers()))
    );
}

#[test]
fn pointers_only_stay_a_plain_list() {
    let segs = [P(1, 0x1000, 100), P(2, 0x2000, 300)];
    let w = parsed(QpKind::Rc, send(op::SEND, None), &segs).unwrap();
    assert_eq!(
        w.body.data(),
        Some(&Data::Sges(vec![sge(1, 0x1000, 100), sge(2, 0x2000, 300)]))
    );
}

#[test]
fn inline_bytes_together_within_max_inline() {
    // 40 + 40 inline bytes: each under the limit of 60, together over it.
    let segs = [I(&[1; 40]), P(1, 0x1000, 8), I(&[2; 40])];
    let (w, mut qp) = wqe(QpKind::Rc, send(op::SEND, None), &segs);
    qp.max_inline = 80;
    assert!(parse(&w, &qp).is_ok());
    qp.max_inline = 60;
    refused(
        parse(&w, &qp),
        WqeError::InlineTooLong { len: 80, max: 60 },
        LEN,
    );
    qp.max_inline = 39;
    refused(
        parse(&w, &qp),
        WqeError::InlineTooLong { len: 40, max: 39 },
        LEN,
    );
}

#[test]
fn pointer_segments_within_max_send_sge() {
    let segs = [P(1, 1, 1), I(b"h"), P(2, 2, 2), P(3, 3, 3)];
    let (w, mut qp) = wqe(QpKind::Rc, send(op::SEND, None), &segs);
    qp.max_send_sge = 3;
    assert!(parse(&w, &qp).is_ok());
    qp.max_send_sge = 2;
    refused(
        parse(&w, &qp),
        WqeError::TooManySges { count: 3, max: 2 },
        QP_OP,
    );
}

#[test]
fn inline_segment_in_the_middle_runs_past_the_ds() {
    let (mut w, qp) = wqe(QpKind::Rc, send(op::SEND, None), HDR_AND_TWO);
    // The header claims 77 bytes, taking the pointers for its data: its
    // segment would end at byte 112, past the DS's 80.
    w[19] = 77;
    refused(
        parse(&w, &qp),
        WqeError::Layout {
            what: "inline data runs past the DS",
            at: 16,
            size: 80,
        },
        QP_OP,
    );
}

#[test]
fn no_inline_in_reads_or_atomics_wherever_it_stands() {
    let what = "inline data segment where the opcode needs pointer segments";
    let read = |sq: &mut Sq| {
        sq.rdma(op::RDMA_READ, 0, 1, 2, None);
        sq.set_sge(0, 0, 0);
    };
    let r = parsed(QpKind::Rc, read, &[P(1, 2, 3), I(b"hdr")]);
    refused(r, WqeError::Inline { what, at: 48 }, QP_OP);
    let atomic = |sq: &mut Sq| {
        sq.atomic(op::ATOMIC_FA, 0, 1, 2, 3, 4);
        sq.set_sge(0, 0, 0);
    };
    let r = parsed(QpKind::Rc, atomic, &[P(1, 2, 8), I(b"hdr")]);
    refused(r, WqeError::Inline { what, at: 64 }, QP_OP);
}
