//! Accepted WQEs of the mlx5dv builders: UMR (mkey configure, list,
//! interleaved, local invalidate, window bind) and DMA memcpy.

use super::sq::{Interleaved, Sq, INLINE, SIGNALED};
use super::sq_dv::{ACC_A, ACC_LW, ACC_RR, ACC_RW};
use super::{one, parse_at};
use crate::mkey::{Layout, RepeatEntry, Sge};
use crate::wqe::layout::opcode as op;
use crate::wqe::{Body, Fence, QpKind, Umr};

fn umr(body: Body) -> Umr {
    match body {
        Body::Umr(u) => u,
        b => panic!("not a UMR: {b:?}"),
    }
}

#[test]
fn mr_list_three_entries_padded() {
    let sges = [
        (0x100, 0x1000, 10),
        (0x200, 0x2000, 20),
        (0x300, 0x3000, 30),
    ];
    let w = one(QpKind::Rc, |sq| {
        sq.mr_list(0x4201, SIGNALED | INLINE, ACC_LW | ACC_RR | ACC_RW, &sges)
    })
    .unwrap();
    assert_eq!(
        (w.ctrl.opcode, w.ctrl.ds, w.ctrl.imm),
        (op::UMR, 8 + 4, 0x4201)
    );
    let u = umr(w.body);
    assert_eq!(u.mkey, 0x4201);
    assert_eq!(
        (u.flags, u.mkey_mask),
        (0x80, (1 << 29) | (1 << 13) | (0xf << 18) | 1)
    );
    assert_eq!(
        (u.free, u.tag, u.qpn, u.start_addr),
        (Some(false), Some(0x01), None, None)
    );
    assert_eq!((u.access, u.len), (Some(0x38), Some(60)));
    let want: Vec<Sge> = sges
        .iter()
        .map(|&(lkey, addr, len)| Sge { lkey, addr, len })
        .collect();
    assert_eq!(u.layout, Some(Layout::List(want)));
    assert_eq!(u.klm_octowords, 4);
    assert!(!u.is_invalidate() && !u.check_free() && !u.check_qpn());
    assert!(u.is_mkey_configure() && !u.is_bind());
}

#[test]
fn mr_list_four_and_five_entries() {
    for n in [4usize, 5] {
        let sges: Vec<_> = (0..n as u32)
            .map(|i| (i + 1, u64::from(i) << 12, 100))
            .collect();
        let w = one(QpKind::Rc, |sq| sq.mr_list(0x4200, INLINE, ACC_A, &sges)).unwrap();
        assert_eq!(w.ctrl.ds as usize, 8 + n.next_multiple_of(4));
        let u = umr(w.body);
        assert_eq!(u.access, Some(0x40));
        let Some(Layout::List(l)) = u.layout else {
            panic!()
        };
        assert_eq!(l.len(), n);
        assert_eq!(u.len, Some(100 * n as u64));
    }
}

#[test]
fn mr_list_wraps_at_qend_and_fences_the_next_wqe() {
    let mut sq = Sq::new(QpKind::Rc, 4);
    sq.cur_post = 2;
    let sges = [
        (1, 0x10, 1),
        (2, 0x20, 2),
        (3, 0x30, 3),
        (4, 0x40, 4),
        (5, 0x50, 5),
    ];
    sq.mr_list(0x4200, INLINE, ACC_LW, &sges);
    let w = parse_at(&sq, 2).unwrap();
    assert_eq!(w.ctrl.ds, 16);
    assert_eq!(umr(w.body).len, Some(15));
    // libmlx5 fences the WQE after a UMR with an initiator small fence.
    let next = sq.cur_post;
    sq.rdma(op::RDMA_WRITE, 0, 1, 2, None);
    sq.set_sge(1, 2, 3);
    assert_eq!(
        parse_at(&sq, next).unwrap().ctrl.fence,
        Fence::InitiatorSmall
    );
}

#[test]
fn mr_interleaved_two_entries() {
    let ents = [
        Interleaved {
            addr: 0x1000,
            bytes_count: 4,
            bytes_skip: 12,
            lkey: 0x11,
        },
        Interleaved {
            addr: 0x2000,
            bytes_count: 2,
            bytes_skip: 6,
            lkey: 0x22,
        },
    ];
    let w = one(QpKind::Rc, |sq| {
        sq.mr_interleaved(0x4300, INLINE, ACC_RR, 3, &ents)
    })
    .unwrap();
    assert_eq!(w.ctrl.ds, 8 + 4);
    let u = umr(w.body);
    assert_eq!(u.len, Some(18));
    // Block + 2 entries in 4 octowords: fits an mkey created with
    // max_entries 2 (translations_octword_size align(2, 4) = 4).
    assert_eq!(u.klm_octowords, 4);
    assert_eq!(
        u.layout,
        Some(Layout::Interleaved {
            repeat_count: 3,
            entries: vec![
                RepeatEntry {
                    stride: 16,
                    byte_count: 4,
                    key: 0x11,
                    va: 0x1000
                },
                RepeatEntry {
                    stride: 8,
                    byte_count: 2,
                    key: 0x22,
                    va: 0x2000
                },
            ],
        })
    );
}

#[test]
fn mr_interleaved_three_entries_fill_one_block_and_wrap() {
    let ents = [Interleaved {
        addr: 0x1000,
        bytes_count: 64,
        bytes_skip: 0,
        lkey: 0x11,
    }; 3];
    let mut sq = Sq::new(QpKind::Rc, 4);
    sq.cur_post = 2;
    sq.mr_interleaved(0x4300, INLINE, ACC_RR, 2, &ents);
    let w = parse_at(&sq, 2).unwrap();
    assert_eq!(w.ctrl.ds, 12);
    assert_eq!(umr(w.body).len, Some(384));
}

#[test]
fn mkey_configure_with_access_only_or_empty_list() {
    let w = one(QpKind::Rc, |sq| {
        sq.mkey_configure(0x4400, INLINE, 1);
        sq.set_mkey_access_flags(ACC_LW, true);
    })
    .unwrap();
    assert_eq!(w.ctrl.ds, 8);
    let u = umr(w.body);
    assert_eq!((u.access, u.len, u.layout), (Some(0x08), None, None));
    let w = one(QpKind::Rc, |sq| {
        sq.mkey_configure(0x4400, INLINE, 1);
        sq.set_mkey_layout_list(&[], true);
    })
    .unwrap();
    let u = umr(w.body);
    assert_eq!((u.access, u.len, u.layout), (None, Some(0), None));
    let w = one(QpKind::Rc, |sq| {
        sq.mkey_configure(0x4400, INLINE, 0);
    })
    .unwrap();
    assert_eq!(umr(w.body).free, Some(false));
}

#[test]
fn local_invalidate_ignores_the_stale_mkey_context() {
    for kind in [QpKind::Rc, QpKind::Uc, QpKind::Dci] {
        let w = one(kind, |sq| sq.umr_bind(SIGNALED, 0x0000_5a07, None)).unwrap();
        assert_eq!(w.ctrl.ds, 8);
        let u = umr(w.body);
        assert_eq!(
            (u.mkey, u.free, u.tag, u.qpn),
            (0x5a07, Some(true), Some(0), Some(0xff_ffff))
        );
        assert_eq!(
            (u.access, u.len, u.start_addr, &u.layout),
            (None, None, None, &None)
        );
        assert!(u.is_invalidate() && u.check_qpn() && !u.check_free());
    }
}

#[test]
fn memory_window_bind() {
    let w = one(QpKind::Rc, |sq| {
        sq.umr_bind(0, 0x0000_6100, Some((0x6101, 0x77, 0x9000, 0x500, ACC_RW)))
    })
    .unwrap();
    assert_eq!(w.ctrl.ds, 12);
    let u = umr(w.body);
    assert_eq!(
        (u.free, u.tag, u.qpn),
        (Some(false), Some(0x01), Some(0x123))
    );
    assert_eq!(
        (u.access, u.start_addr, u.len),
        (Some(0x20), Some(0x9000), Some(0x500))
    );
    assert_eq!(
        u.layout,
        Some(Layout::List(vec![Sge {
            lkey: 0x77,
            addr: 0x9000,
            len: 0x500
        }]))
    );
    assert!(u.check_free());
}

#[test]
fn dma_memcpy() {
    for kind in [QpKind::Rc, QpKind::Dci] {
        let w = one(kind, |sq| {
            sq.memcpy(SIGNALED, (0xd, 0xd000), (0x5, 0x5000), 4096, (0x0a, 0xaa00))
        })
        .unwrap();
        assert_eq!((w.ctrl.opcode, w.ctrl.opmod, w.ctrl.ds), (op::MMO, 1, 4));
        let Body::Mmo(m) = w.body else { panic!() };
        assert_eq!((m.opaque_lkey, m.opaque_addr), (0x0a, 0xaa00));
        assert_eq!(
            m.src,
            Sge {
                lkey: 5,
                addr: 0x5000,
                len: 4096
            }
        );
        assert_eq!(
            m.dst,
            Sge {
                lkey: 0xd,
                addr: 0xd000,
                len: 4096
            }
        );
    }
}

#[test]
fn dma_memcpy_of_2_gib_is_written_as_0() {
    let mut sq = Sq::new(QpKind::Rc, 8);
    sq.memcpy(0, (1, 0), (2, 0), 0x8000_0000, (3, 0));
    assert_eq!(&sq.buf[32..36], &[0; 4]);
    let Body::Mmo(m) = parse_at(&sq, 0).unwrap().body else {
        panic!()
    };
    assert_eq!((m.src.len, m.dst.len), (0x8000_0000, 0x8000_0000));
}

#[test]
fn local_invalidate_and_bind_wrap_at_qend() {
    let mut sq = Sq::new(QpKind::Rc, 4);
    sq.cur_post = 3;
    sq.umr_bind(0, 0x5a07, None);
    let u = umr(parse_at(&sq, 3).unwrap().body);
    assert!(u.is_invalidate());
    sq.cur_post = 2;
    sq.umr_bind(0, 0x6100, Some((0x6101, 0x77, 0x9000, 0x500, ACC_RR)));
    let u = umr(parse_at(&sq, 2).unwrap().body);
    assert_eq!(
        u.layout,
        Some(Layout::List(vec![Sge {
            lkey: 0x77,
            addr: 0x9000,
            len: 0x500
        }]))
    );
}

#[test]
fn mr_interleaved_without_entries() {
    let w = one(QpKind::Rc, |sq| {
        sq.mr_interleaved(0x4300, INLINE, ACC_RR, 7, &[])
    })
    .unwrap();
    assert_eq!(w.ctrl.ds, 12);
    let u = umr(w.body);
    assert_eq!((u.len, u.klm_octowords), (Some(0), 4));
    assert_eq!(
        u.layout,
        Some(Layout::Interleaved {
            repeat_count: 7,
            entries: vec![]
        })
    );
}

#[test]
fn mr_list_entry_of_zero_length_is_kept() {
    let w = one(QpKind::Rc, |sq| {
        sq.mr_list(0x4200, INLINE, ACC_RR, &[(1, 0x10, 0), (2, 0x20, 5)])
    })
    .unwrap();
    let Some(Layout::List(l)) = umr(w.body).layout else {
        panic!()
    };
    assert_eq!(
        l,
        vec![
            Sge {
                lkey: 1,
                addr: 0x10,
                len: 0
            },
            Sge {
                lkey: 2,
                addr: 0x20,
                len: 5
            }
        ]
    );
}
