//! Accepted WQEs of the verbs builders (`ibv_wr_*`), RC, DCI and UD.

use super::sq::{Sq, FENCE, INLINE, SIGNALED, SOLICITED, STALE};
use super::{one, parse_at};
use crate::wqe::layout::opcode as op;
use crate::wqe::{parse, Body, Data, Fence, Part, QpKind, Sge};

fn sge(lkey: u32, addr: u64, len: u32) -> Sge {
    Sge { lkey, addr, len }
}

/// The data of one inline segment alone.
fn inline(bytes: &[u8]) -> Data {
    Data::Gather(vec![Part::Inline(bytes.to_vec())])
}

#[test]
fn rc_rdma_write_one_sge() {
    let w = one(QpKind::Rc, |sq| {
        sq.rdma(op::RDMA_WRITE, SIGNALED, 0x1234, 0xdead_0000, None);
        sq.set_sge(0x55, 0x7000, 100);
    })
    .unwrap();
    assert_eq!(w.ctrl.opcode, op::RDMA_WRITE);
    assert_eq!(w.body.name(), "RDMA_WRITE");
    assert_eq!((w.ctrl.ds, w.ctrl.wqe_index, w.ctrl.qpn), (3, 0, 0x123));
    assert!(w.ctrl.signaled && !w.ctrl.solicited);
    assert_eq!(w.ctrl.fence, Fence::None);
    // libmlx5 leaves `imm` of a plain write stale.
    assert_eq!(w.ctrl.imm, u32::from_be_bytes([STALE; 4]));
    let Body::RdmaWrite(r) = w.body else {
        panic!("{:?}", w.body)
    };
    assert_eq!((r.av, r.raddr, r.rkey), (None, 0xdead_0000, 0x1234));
    assert_eq!(r.data, Data::Sges(vec![sge(0x55, 0x7000, 100)]));
}

#[test]
fn rc_rdma_write_imm_inline_list() {
    let w = one(QpKind::Rc, |sq| {
        sq.rdma(
            op::RDMA_WRITE_IMM,
            SOLICITED | FENCE | INLINE,
            1,
            2,
            Some(0xa1b2_c3d4),
        );
        sq.set_inline_list(&[b"hello ", b"world!!"]);
    })
    .unwrap();
    assert_eq!(w.ctrl.ds, 1 + 1 + 2);
    assert_eq!(w.ctrl.imm, 0xa1b2_c3d4);
    assert!(!w.ctrl.signaled && w.ctrl.solicited);
    assert_eq!(w.ctrl.fence, Fence::SmallAndFence);
    let Body::RdmaWriteImm(r) = w.body else {
        panic!()
    };
    assert_eq!(r.data, inline(b"hello world!!"));
}

#[test]
fn rc_rdma_read_sge_list_skips_empty_entries() {
    let w = one(QpKind::Rc, |sq| {
        sq.rdma(op::RDMA_READ, 0, 9, 0x100, None);
        sq.set_sge_list(&[(1, 0x10, 8), (2, 0x20, 0), (3, 0x30, 0x7fff_ffff)]);
    })
    .unwrap();
    let Body::RdmaRead(r) = w.body else { panic!() };
    assert_eq!(
        r.data,
        Data::Sges(vec![sge(1, 0x10, 8), sge(3, 0x30, 0x7fff_ffff)])
    );
    assert_eq!(r.data.len(), 0x8000_0007);
}

#[test]
fn rc_zero_length_operations() {
    for opcode in [op::RDMA_WRITE, op::RDMA_READ] {
        let w = one(QpKind::Rc, |sq| {
            sq.rdma(opcode, 0, 9, 0x100, None);
            sq.set_sge(1, 2, 0);
        })
        .unwrap();
        assert_eq!(w.ctrl.ds, 2);
        assert!(w.body.data().unwrap().is_empty());
    }
    let w = one(QpKind::Rc, |sq| {
        sq.send(op::SEND, 0, None);
        sq.set_inline_list(&[]);
    })
    .unwrap();
    assert_eq!(w.ctrl.ds, 1);
    assert_eq!(
        w.body,
        Body::Send(crate::wqe::Message {
            av: None,
            data: Data::Sges(vec![])
        })
    );
}

#[test]
fn rc_sends() {
    let w = one(QpKind::Rc, |sq| {
        sq.send(op::SEND, 0, None);
        sq.set_sge(7, 0x1000, 64);
    })
    .unwrap();
    assert!(matches!(&w.body, Body::Send(m) if m.data == Data::Sges(vec![sge(7, 0x1000, 64)])));
    let w = one(QpKind::Rc, |sq| {
        sq.send(op::SEND_IMM, INLINE, Some(0x0102_0304));
        sq.set_inline_list(&[&[0xee; 12]]);
    })
    .unwrap();
    assert_eq!((w.ctrl.ds, w.ctrl.imm), (2, 0x0102_0304));
    assert!(matches!(&w.body, Body::SendImm(m) if m.data == inline(&[0xee; 12])));
    let w = one(QpKind::Rc, |sq| {
        sq.send(op::SEND_INVAL, 0, Some(0x0000_4d02));
        sq.set_sge(7, 0x1000, 64);
    })
    .unwrap();
    assert_eq!(w.ctrl.imm, 0x4d02);
    assert!(matches!(w.body, Body::SendInv(_)));
}

#[test]
fn inline_at_the_limit_and_padding_left_stale() {
    let w = one(QpKind::Rc, |sq| {
        sq.max_inline = 60;
        sq.send(op::SEND, 0, None);
        sq.set_inline_list(&[&[1; 60]]);
    })
    .unwrap();
    assert_eq!(w.ctrl.ds, 1 + 4);
    assert_eq!(w.body.data().unwrap().len(), 60);
}

#[test]
fn rc_atomics() {
    let w = one(QpKind::Rc, |sq| {
        sq.atomic(op::ATOMIC_CS, SIGNALED, 0x77, 0x8000, 5, 6);
        sq.set_sge(0x99, 0x4000, 8);
    })
    .unwrap();
    assert_eq!(w.ctrl.ds, 4);
    let Body::AtomicCs(a) = w.body else { panic!() };
    assert_eq!(
        (a.raddr, a.rkey, a.swap_add, a.compare),
        (0x8000, 0x77, 6, 5)
    );
    assert_eq!(a.local, sge(0x99, 0x4000, 8));
    let w = one(QpKind::Rc, |sq| {
        sq.atomic(op::ATOMIC_FA, 0, 0x77, 0x8000, 41, 0);
        sq.set_sge(0x99, 0x4000, 8);
    })
    .unwrap();
    let Body::AtomicFa(a) = w.body else { panic!() };
    // `compare` is stale for fetch-and-add: never checked.
    assert_eq!(
        (a.swap_add, a.compare),
        (41, u64::from_be_bytes([STALE; 8]))
    );
}

#[test]
fn sq_sig_all_and_wqe_index_across_wqes() {
    let mut sq = Sq::new(QpKind::Rc, 32);
    sq.sig_all = true;
    let mut starts = vec![];
    for i in 0..5u32 {
        starts.push(sq.cur_post);
        sq.rdma(op::RDMA_WRITE, 0, 1, 2, None);
        sq.set_sge_list(&vec![(1, 2, 3); 1 + 2 * i as usize]);
    }
    for (i, &idx) in starts.iter().enumerate() {
        let w = parse_at(&sq, idx).unwrap();
        assert!(w.ctrl.signaled);
        assert_eq!(w.ctrl.wqe_index, idx as u16);
        assert_eq!(w.body.data().unwrap().len(), 3 * (1 + 2 * i as u64));
    }
}

#[test]
fn rc_sge_list_wraps_at_the_end_of_the_sq() {
    let mut sq = Sq::new(QpKind::Rc, 4);
    sq.cur_post = 3;
    sq.rdma(op::RDMA_WRITE, 0, 1, 2, None);
    sq.set_sge_list(&[(1, 0x10, 1), (2, 0x20, 2), (3, 0x30, 3), (4, 0x40, 4)]);
    let w = parse_at(&sq, 3).unwrap();
    assert_eq!(w.ctrl.ds, 6);
    assert_eq!(w.body.data().unwrap().len(), 10);
}

#[test]
fn signature_enabled() {
    let mut sq = Sq::new(QpKind::Rc, 8);
    sq.wq_sig = true;
    sq.rdma(op::RDMA_WRITE, 0, 1, 2, None);
    sq.set_sge(1, 2, 3);
    let w = parse_at(&sq, 0).unwrap();
    assert_ne!(w.ctrl.signature, 0);
}

#[test]
fn dci_rdma_write_with_stream_and_grh() {
    let gid = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
    let w = one(QpKind::Dci, |sq| {
        sq.rdma(op::RDMA_WRITE, SIGNALED, 0x42, 0x9000, None);
        sq.set_dc_addr(0x11, 0x00ab_cdef, 0xdc_0000_0000_0001, Some(3), Some(gid));
        sq.set_sge(5, 0x6000, 32);
    })
    .unwrap();
    assert_eq!(w.ctrl.ds, 1 + 3 + 1 + 1);
    assert_eq!(w.ctrl.dci_stream_channel_id, 3);
    let Body::RdmaWrite(r) = &w.body else {
        panic!()
    };
    let av = r.av.unwrap();
    assert_eq!(
        (av.dctn, av.ext, av.dc_key, av.rlid),
        (0xab_cdef, true, 0xdc_0000_0000_0001, 0x11)
    );
    assert_eq!(
        (av.sl, av.stat_rate, av.src_path_bits, av.force_loopback),
        (3, 0, 1, false)
    );
    assert_eq!(
        (
            av.grh,
            av.sgid_index,
            av.flow_label,
            av.tclass,
            av.hop_limit
        ),
        (true, 2, 0x12345, 7, 64)
    );
    assert_eq!(av.rgid, gid);
    assert_eq!((r.raddr, r.rkey), (0x9000, 0x42));
}

#[test]
fn dci_setters_in_either_order() {
    let w = one(QpKind::Dci, |sq| {
        sq.send(op::SEND_IMM, 0, Some(5));
        sq.set_sge(5, 0x6000, 32);
        sq.set_dc_addr(0x11, 0x77, 1, None, None);
    })
    .unwrap();
    assert_eq!(w.ctrl.dci_stream_channel_id, 0);
    assert_eq!(w.body.av().unwrap().dctn, 0x77);
}

#[test]
fn dci_av_ends_at_qend_raddr_and_data_wrap() {
    let mut sq = Sq::new(QpKind::Dci, 4);
    sq.cur_post = 3;
    sq.atomic(op::ATOMIC_FA, 0, 0x42, 0x9000, 1, 0);
    sq.set_dc_addr(0x11, 0x99, 7, Some(1), None);
    sq.set_sge(5, 0x6000, 8);
    let w = parse_at(&sq, 3).unwrap();
    assert_eq!(w.ctrl.ds, 1 + 3 + 2 + 1);
    let Body::AtomicFa(a) = w.body else { panic!() };
    assert_eq!(
        (a.raddr, a.av.unwrap().dctn, a.local.len),
        (0x9000, 0x99, 8)
    );
}

#[test]
fn dci_send_inline_wraps() {
    let mut sq = Sq::new(QpKind::Dci, 4);
    sq.cur_post = 3;
    sq.send(op::SEND, INLINE, None);
    sq.set_inline_list(&[&(0..100u8).collect::<Vec<_>>()]);
    sq.set_dc_addr(0x11, 0x99, 7, None, None);
    let w = parse_at(&sq, 3).unwrap();
    assert_eq!(w.body.data(), Some(&inline(&(0..100).collect::<Vec<u8>>())));
}

#[test]
fn ud_send_with_qkey() {
    let w = one(QpKind::Ud, |sq| {
        sq.send(op::SEND, 0, None);
        sq.set_ud_addr(0x21, 0x0055, 0x1111_2222);
        sq.set_sge(5, 0x6000, 32);
    })
    .unwrap();
    let av = w.body.av().unwrap();
    assert_eq!((av.qkey(), av.dctn, av.rlid), (0x1111_2222, 0x55, 0x21));
}

#[test]
fn nop_and_raw_wqes() {
    // A raw NOP of DS 2 whose second octoword is anything: ignored.
    let mut raw = [0u8; 32];
    raw[0..4].copy_from_slice(&0x0000_ff00u32.to_be_bytes());
    raw[4..8].copy_from_slice(&((0x123 << 8) | 2u32).to_be_bytes());
    raw[11] = 0x08;
    raw[16..32].fill(0x5a);
    let mut sq = Sq::new(QpKind::Rc, 4);
    sq.cur_post = 0x1_0003;
    sq.raw_wqe(&raw);
    let w = parse_at(&sq, 0x1_0003).unwrap();
    assert_eq!(
        (w.ctrl.opcode, w.ctrl.wqe_index, w.ctrl.ds),
        (op::NOP, 3, 2)
    );
    assert_eq!(w.body, Body::Nop);
    // A raw RDMA write built by hand (its index bits are rewritten).
    let bytes = words(
        "00ffff08 00012303 00000008 00000000 \
         00000000 00001000 0000abcd 00000000 \
         00000020 00000011 00000000 0000a000",
    );
    sq.raw_wqe(&bytes);
    let w = parse_at(&sq, 0x1_0004).unwrap();
    let Body::RdmaWrite(r) = w.body else { panic!() };
    assert!(w.ctrl.signaled);
    assert_eq!((r.raddr, r.rkey), (0x1000, 0xabcd));
    assert_eq!(r.data, Data::Sges(vec![sge(0x11, 0xa000, 0x20)]));
}

#[test]
fn hand_written_rc_write_image() {
    // ctrl: opmod 0, index 0x0005, RDMA_WRITE; qpn 0x000123, ds 3;
    // signature 0, stream 0, fm_ce_se CQ_UPDATE; imm stale.
    let hex = "00000508 00012303 00000008 a5a5a5a5 \
               00000000 00200000 00000777 00000000 \
               00000040 00000099 00007f00 00001000";
    let bytes = words(hex);
    let mut qp = Sq::new(QpKind::Rc, 8).view(5);
    let w = parse(&bytes, &qp).unwrap();
    let Body::RdmaWrite(r) = w.body else { panic!() };
    assert_eq!((r.raddr, r.rkey), (0x0020_0000, 0x777));
    assert_eq!(r.data, Data::Sges(vec![sge(0x99, 0x7f00_0000_1000, 0x40)]));
    qp.expected_wqe_index = None;
    assert!(parse(&bytes, &qp).is_ok());
}

/// Bytes of a hex dump of big-endian 32-bit words.
fn words(hex: &str) -> Vec<u8> {
    hex.split_whitespace()
        .flat_map(|w| u32::from_str_radix(w, 16).unwrap().to_be_bytes())
        .collect()
}

#[test]
fn uc_writes_and_sends() {
    let w = one(QpKind::Uc, |sq| {
        sq.rdma(op::RDMA_WRITE_IMM, 0, 1, 2, Some(3));
        sq.set_sge(1, 2, 3);
    })
    .unwrap();
    assert!(matches!(w.body, Body::RdmaWriteImm(_)));
    let w = one(QpKind::Uc, |sq| {
        sq.send(op::SEND_INVAL, 0, Some(3));
        sq.set_sge(1, 2, 3);
    })
    .unwrap();
    assert!(matches!(w.body, Body::SendInv(_)));
}
