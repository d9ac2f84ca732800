//! Robustness: arbitrary and mutated WQE bytes never panic the parser, and
//! every refusal has one of the two syndromes.

use super::sq::{Interleaved, Sq, INLINE};
use crate::wqe::error::{SYNDROME_LOCAL_LENGTH_ERR, SYNDROME_LOCAL_QP_OP_ERR};
use crate::wqe::layout::opcode as op;
use crate::wqe::{parse, QpKind, QpView};

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn check(w: &[u8], qp: &QpView) {
    if let Err(e) = parse(w, qp) {
        let s = e.syndrome();
        assert!(
            s == SYNDROME_LOCAL_LENGTH_ERR || s == SYNDROME_LOCAL_QP_OP_ERR,
            "{e}"
        );
        assert!(!e.to_string().is_empty());
    }
}

/// Valid WQEs of every builder, linearised, with their QP views.
fn corpus() -> Vec<(Vec<u8>, QpView)> {
    let mut out = vec![];
    let mut add = |kind, build: &dyn Fn(&mut Sq)| {
        let mut sq = Sq::new(kind, 8);
        sq.cur_post = 6;
        build(&mut sq);
        let w = sq.linearise(6);
        assert!(parse(&w, &sq.view(6)).is_ok(), "{kind:?} fixture");
        out.push((w, sq.view(6)));
    };
    add(QpKind::Rc, &|sq| {
        sq.rdma(op::RDMA_WRITE_IMM, 0, 1, 2, Some(3));
        sq.set_sge_list(&[(1, 2, 3), (4, 5, 6)]);
    });
    add(QpKind::Rc, &|sq| {
        sq.send(op::SEND, INLINE, None);
        sq.set_inline_list(&[&[9; 50]]);
    });
    add(QpKind::Rc, &|sq| {
        sq.atomic(op::ATOMIC_CS, 0, 1, 2, 3, 4);
        sq.set_sge(1, 2, 8);
    });
    add(QpKind::Dci, &|sq| {
        sq.rdma(op::RDMA_READ, 0, 1, 2, None);
        sq.set_dc_addr(1, 2, 3, Some(1), Some([7; 16]));
        sq.set_sge(1, 2, 8);
    });
    add(QpKind::Ud, &|sq| {
        sq.send(op::SEND_IMM, 0, Some(1));
        sq.set_ud_addr(1, 2, 3);
        sq.set_sge(1, 2, 8);
    });
    add(QpKind::Rc, &|sq| {
        sq.mr_list(
            0x4200,
            INLINE,
            1,
            &[(1, 2, 3), (4, 5, 6), (7, 8, 9), (1, 1, 1), (2, 2, 2)],
        )
    });
    add(QpKind::Rc, &|sq| {
        let e = Interleaved {
            addr: 1,
            bytes_count: 2,
            bytes_skip: 3,
            lkey: 4,
        };
        sq.mr_interleaved(0x4200, INLINE, 1, 5, &[e, e, e, e]);
    });
    add(QpKind::Dci, &|sq| sq.umr_bind(0, 0x77, None));
    add(QpKind::Rc, &|sq| sq.memcpy(0, (1, 2), (3, 4), 5, (6, 7)));
    out
}

#[test]
fn mutated_fixtures_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for (w, qp) in corpus() {
        for _ in 0..3000 {
            let mut m = w.clone();
            for _ in 0..=rng.below(3) {
                let i = rng.below(m.len() as u64) as usize;
                m[i] = rng.next() as u8;
            }
            if rng.below(8) == 0 {
                let ds = rng.below(64) as u8;
                m[7] = ds;
                m.resize(usize::from(ds).max(1) * 16, rng.next() as u8);
            }
            check(&m, &qp);
        }
    }
}

#[test]
fn arbitrary_bytes_never_panic() {
    let mut rng = Rng(0x0123_4567_89ab_cdef);
    for kind in [QpKind::Rc, QpKind::Dci, QpKind::Ud, QpKind::Dct] {
        let mut qp = Sq::new(kind, 64).view(0);
        qp.expected_wqe_index = None;
        for _ in 0..5000 {
            let ds = 1 + rng.below(63) as usize;
            let mut w: Vec<u8> = (0..ds * 16).map(|_| rng.next() as u8).collect();
            w[4..8].copy_from_slice(&((qp.qpn << 8) | ds as u32).to_be_bytes());
            w[8..11].fill(0);
            w[11] &= 0xee;
            w[0] = 0;
            check(&w, &qp);
        }
    }
}
