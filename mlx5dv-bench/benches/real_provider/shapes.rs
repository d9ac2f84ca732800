//! The table's rows: one batch of 32 work requests (or one poll of 32
//! completions) per call, in C (`c/post.c`'s loops, compiled against
//! libmlx5's QP layout by build.rs and named `real_c_best_<shape>`,
//! `real_c_plain_<shape>`) and in Rust through the safe API: the tuned and
//! natural forms that `benches/post_vs_c.rs` measures too
//! (`common/shapes.rs`).

use crate::common::measure::Row;
use crate::common::wc::BenchWc;
use crate::common::{c_loops, CLoop, CSide, BATCH, INLINE, LIST, LOG_STREAMS, MSG};
use crate::rig::Rig;
use mlx5dv::wqe::Wqe;
use mlx5dv::{
    AccessFlags, AddressHandle, CompletionQueue, DcAddr, DciQp, MemcpyOp, MemoryRegion, Mkey, RcQp,
    RemoteBuf, Result, SendFlags, Sge, SgeMut,
};

// The Rust shapes, shared with post_vs_c.rs: included where they were
// always compiled (the file's head says why).
include!("../common/shapes.rs");

/// Which send queue a shape posts on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Queue {
    Rc,
    Dci,
}

/// What a shape's calls need around them (outside the measured calls).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Work {
    /// Posts a batch on this queue: afterwards the device runs it and its
    /// completions are drained; `recvs`: the peer needs a receive per work
    /// request (sends).
    Post { queue: Queue, recvs: bool },
    /// Polls 32 completions: before, 32 RDMA writes per call are posted and
    /// run.
    Poll,
}

/// One row: C best, C plain and one Rust form of the same work.
pub struct Shape {
    /// The Rust version is `rust_<name>`.
    pub name: &'static str,
    /// The C versions are `real_c_best_<c>` and `real_c_plain_<c>`.
    pub c: &'static str,
    /// The row's title in the table, and its kind (tuned or natural).
    pub title: &'static str,
    pub kind: &'static str,
    pub best: CLoop,
    pub plain: CLoop,
    pub rust: fn(&mut Rig, &Plan<'_>) -> usize,
    pub work: Work,
}

impl Shape {
    /// Calls version `v` (0 best C, 1 plain C, 2 Rust) once; how many work
    /// requests it posted or completions it read.
    pub fn call(&self, v: usize, c: &CSide, rig: &mut Rig, p: &Plan<'_>) -> usize {
        match v {
            0 => c.call(self.best),
            1 => c.call(self.plain),
            _ => (self.rust)(rig, p),
        }
    }
}

impl Row for Shape {
    const C_PREFIX: &'static str = "real_";

    fn name(&self) -> &'static str {
        self.name
    }

    fn c(&self) -> &'static str {
        self.c
    }
}

// The C loops, under the names build.rs gives them.
c_loops! {
    real_c_best_rc_write_sge real_c_plain_rc_write_sge
    real_c_best_rc_inline_send real_c_plain_rc_inline_send
    real_c_best_dci_write_sge real_c_plain_dci_write_sge
    real_c_best_dci_write_sge_stream real_c_plain_dci_write_sge_stream
    real_c_best_memcpy real_c_plain_memcpy
    real_c_best_mr_list real_c_plain_mr_list
    real_c_best_raw_wqe real_c_plain_raw_wqe
    real_c_best_poll_cq real_c_plain_poll_cq
}

fn ok(r: Result<u32>) -> usize {
    r.expect("libmlx5 accepts every batch") as usize
}

const RC: Work = Work::Post {
    queue: Queue::Rc,
    recvs: false,
};
const DCI: Work = Work::Post {
    queue: Queue::Dci,
    recvs: false,
};

pub const SHAPES: &[Shape] = &[
    Shape {
        name: "rc_write_sge",
        c: "rc_write_sge",
        title: "RC write + SGE",
        kind: "tuned",
        best: real_c_best_rc_write_sge,
        plain: real_c_plain_rc_write_sge,
        rust: |r, p| ok(rust_rc_write_sge(&mut r.rc, p)),
        work: RC,
    },
    Shape {
        name: "rc_write_sge_natural",
        c: "rc_write_sge",
        title: "RC write + SGE",
        kind: "natural",
        best: real_c_best_rc_write_sge,
        plain: real_c_plain_rc_write_sge,
        rust: |r, _| ok(rust_rc_write_sge_natural(&mut r.rc, &r.src, r.remote)),
        work: RC,
    },
    Shape {
        name: "rc_inline_send",
        c: "rc_inline_send",
        title: "RC send, 16 B inline",
        kind: "tuned",
        best: real_c_best_rc_inline_send,
        plain: real_c_plain_rc_inline_send,
        rust: |r, p| ok(rust_rc_inline_send(&mut r.rc, p)),
        work: Work::Post {
            queue: Queue::Rc,
            recvs: true,
        },
    },
    Shape {
        name: "dci_write_sge",
        c: "dci_write_sge",
        title: "DCI write + SGE + DC address",
        kind: "tuned",
        best: real_c_best_dci_write_sge,
        plain: real_c_plain_dci_write_sge,
        rust: |r, p| ok(rust_dci_write_sge(&mut r.dci, p, r.dc.with(&r.ah))),
        work: DCI,
    },
    Shape {
        name: "dci_write_sge_natural",
        c: "dci_write_sge",
        title: "DCI write + SGE + DC address",
        kind: "natural",
        best: real_c_best_dci_write_sge,
        plain: real_c_plain_dci_write_sge,
        rust: |r, _| {
            let Rig {
                dci,
                ah,
                dc,
                src,
                remote,
                ..
            } = r;
            ok(rust_dci_write_sge_natural(dci, ah, *dc, src, *remote))
        },
        work: DCI,
    },
    Shape {
        name: "dci_write_sge_stream",
        c: "dci_write_sge_stream",
        title: "DCI write, stream",
        kind: "tuned",
        best: real_c_best_dci_write_sge_stream,
        plain: real_c_plain_dci_write_sge_stream,
        rust: |r, p| ok(rust_dci_write_sge_stream(&mut r.dci, p, r.dc.with(&r.ah))),
        work: DCI,
    },
    Shape {
        name: "memcpy",
        c: "memcpy",
        title: "DMA memcpy, 64 B",
        kind: "tuned",
        best: real_c_best_memcpy,
        plain: real_c_plain_memcpy,
        rust: |r, p| ok(rust_memcpy(&mut r.rc, p)),
        work: RC,
    },
    Shape {
        name: "memcpy_natural",
        c: "memcpy",
        title: "DMA memcpy, 64 B",
        kind: "natural",
        best: real_c_best_memcpy,
        plain: real_c_plain_memcpy,
        rust: |r, _| ok(rust_memcpy_natural(&mut r.rc, &r.src, &mut r.dst)),
        work: RC,
    },
    Shape {
        name: "mr_list",
        c: "mr_list",
        title: "mkey list registration, 2 entries",
        kind: "tuned",
        best: real_c_best_mr_list,
        plain: real_c_plain_mr_list,
        rust: |r, p| ok(rust_mr_list(&mut r.rc, p, &r.mkey)),
        work: RC,
    },
    Shape {
        name: "raw_wqe",
        c: "raw_wqe",
        title: "raw WQE post",
        kind: "tuned",
        best: real_c_best_raw_wqe,
        plain: real_c_plain_raw_wqe,
        rust: |r, _| ok(rust_raw_wqe(&mut r.rc, &r.wqe)),
        work: RC,
    },
    Shape {
        name: "poll_cq",
        c: "poll_cq",
        title: "poll 32, `poll_each` (per completion)",
        kind: "tuned",
        best: real_c_best_poll_cq,
        plain: real_c_plain_poll_cq,
        rust: |r, _| {
            let n = rust_poll_cq(&mut r.cq, &mut r.completions);
            n.expect("the CQ holds the completions")
        },
        work: Work::Poll,
    },
];
