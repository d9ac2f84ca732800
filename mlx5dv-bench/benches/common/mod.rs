//! What the two harnesses share: `post_vs_c.rs` (the null provider) and
//! `real_provider/` (the real libmlx5 on the software mlx5 device) post
//! the same batches, written once here: the sizes of `c/bench.h`, the C
//! loops (every build of C best, and C plain) and what they take, the
//! completions as both sides read them (`wc`), what drives callgrind and
//! reads its counts (`measure`), and the plan and the Rust shapes
//! (`shapes.rs`, which each harness includes where it measures them: see
//! its head).
//!
//! Each bench declares this folder as `mod common` (`#[path]`). The
//! measured functions are `#[no_mangle]` or C: their symbols, which the
//! scripts toggle callgrind on, do not depend on the module they are in.

pub mod measure;
pub mod wc;

use mlx5dv::{ffi, AddressHandle, DcAddr};
use std::ffi::{c_int, c_void};
use wc::{BenchWc, CWc};

/// Work requests per batch, completions per poll (`BENCH_BATCH`).
pub const BATCH: usize = 32;
/// Bytes per WR (`BENCH_MSG`), of the inline message (`BENCH_INLINE`).
pub const MSG: usize = 64;
pub const INLINE: usize = 16;
/// log2 of the DCI's streams (`BENCH_LOG_STREAMS`).
pub const LOG_STREAMS: u8 = 2;
/// Entries per mkey list registration (`BENCH_LIST`).
pub const LIST: usize = 2;

/// `struct bench_dc` of `c/bench.h`: the DC target of the DCI loops.
#[repr(C)]
pub struct CDc {
    pub ah: *mut ffi::ibv_ah,
    pub dctn: u32,
    pub key: u64,
}

type Qpx = *mut ffi::ibv_qp_ex;
type Mqpx = *mut ffi::mlx5dv_qp_ex;
type Cq = *mut ffi::ibv_cq_ex;
/// `const struct bench_plan *`.
type CPlan = *const c_void;
/// `struct bench_wc *` (`BATCH` of them).
type CWcs = *mut c_void;
/// `struct bench_wc_full *` (`BATCH` of them).
type CWcsFull = *mut c_void;

/// The C loops of one build (`BENCH_LOOPS(prefix)` of `c/bench.h`): one
/// batch per call, 0 on success, or a poll's count of completions read;
/// a negative errno on failure.
pub struct CLoops {
    pub rc_write_sge: unsafe extern "C" fn(Qpx, u32, CPlan) -> c_int,
    pub rc_inline_send: unsafe extern "C" fn(Qpx, CPlan) -> c_int,
    pub dci_write_sge: unsafe extern "C" fn(Qpx, Mqpx, u32, *const CDc, CPlan) -> c_int,
    pub dci_write_sge_stream: unsafe extern "C" fn(Qpx, Mqpx, u32, *const CDc, CPlan) -> c_int,
    pub memcpy: unsafe extern "C" fn(Qpx, Mqpx, CPlan) -> c_int,
    pub mr_list: unsafe extern "C" fn(Qpx, Mqpx, *mut ffi::mlx5dv_mkey, CPlan) -> c_int,
    pub raw_wqe: unsafe extern "C" fn(Qpx, Mqpx, *const c_void) -> c_int,
    pub poll_cq: unsafe extern "C" fn(Cq, CWcs) -> c_int,
    pub poll_full: unsafe extern "C" fn(Cq, CWcsFull) -> c_int,
    pub cq_wait: unsafe extern "C" fn(Cq, CWcsFull) -> c_int,
    pub post_wait: unsafe extern "C" fn(Qpx, u32, CPlan, Cq, CWcsFull) -> c_int,
}

/// The `CLoops` of the C functions named `<prefix><shape>`.
macro_rules! c_loops {
    ($prefix:literal) => {
        c_loops!(@ $prefix;
            rc_write_sge(Qpx, u32, CPlan),
            rc_inline_send(Qpx, CPlan),
            dci_write_sge(Qpx, Mqpx, u32, *const CDc, CPlan),
            dci_write_sge_stream(Qpx, Mqpx, u32, *const CDc, CPlan),
            memcpy(Qpx, Mqpx, CPlan),
            mr_list(Qpx, Mqpx, *mut ffi::mlx5dv_mkey, CPlan),
            raw_wqe(Qpx, Mqpx, *const c_void),
            poll_cq(Cq, CWcs),
            poll_full(Cq, CWcsFull),
            cq_wait(Cq, CWcsFull),
            post_wait(Qpx, u32, CPlan, Cq, CWcsFull),
        )
    };
    (@ $prefix:literal; $($f:ident($($arg:ty),*),)*) => {
        CLoops {
            $($f: {
                extern "C" {
                    #[link_name = concat!($prefix, stringify!($f))]
                    fn $f($(_: $arg),*) -> c_int;
                }
                $f
            },)*
        }
    };
}

/// C plain: `c/plain.c`, one build.
pub const PLAIN: CLoops = c_loops!("c_plain_");

/// A loop style of `c/post.c` (`BENCH_STYLE`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Style {
    /// (a) Batch invariants loaded into locals before the loop; the polls
    /// loop on a counter.
    Locals,
    /// (b) Batch invariants re-read inside the loop; the polls loop until
    /// a pointer reaches the end.
    Reread,
}

/// One build of C best (`c/post.c`), as build.rs compiled it.
pub struct Variant {
    /// The compiler, and its `-O` level.
    pub cc: &'static str,
    pub opt: u8,
    pub style: Style,
    /// Its functions are named `<prefix><shape>`.
    pub prefix: &'static str,
    pub loops: CLoops,
}

impl Variant {
    /// How the table names it for `shape`: `clang -O3 reread`.
    pub fn label(&self, shape: CShape) -> String {
        let style = match (self.style, shape.posts(), shape.reads()) {
            (Style::Locals, true, true) => "locals, counter",
            (Style::Reread, true, true) => "reread, pointer",
            (Style::Locals, _, false) => "locals",
            (Style::Reread, _, false) => "reread",
            (Style::Locals, false, true) => "counter",
            (Style::Reread, false, true) => "pointer",
        };
        format!("{} -O{} {style}", self.cc, self.opt)
    }
}

// `VARIANTS`: every build of C best (written by build.rs).
include!(concat!(env!("OUT_DIR"), "/c_variants.rs"));

/// The work of a C loop, the same in every build (`CLoops`' fields).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CShape {
    RcWriteSge,
    RcInlineSend,
    DciWriteSge,
    DciWriteSgeStream,
    Memcpy,
    MrList,
    RawWqe,
    PollCq,
    // The comparisons of the completions as `WorkCompletion`s; `post_wait`
    // only `post_vs_c.rs` measures.
    PollFull,
    CqWait,
    #[allow(dead_code)]
    PostWait,
}

impl CShape {
    /// Its functions' names after the build's prefix.
    pub fn name(self) -> &'static str {
        match self {
            CShape::RcWriteSge => "rc_write_sge",
            CShape::RcInlineSend => "rc_inline_send",
            CShape::DciWriteSge => "dci_write_sge",
            CShape::DciWriteSgeStream => "dci_write_sge_stream",
            CShape::Memcpy => "memcpy",
            CShape::MrList => "mr_list",
            CShape::RawWqe => "raw_wqe",
            CShape::PollCq => "poll_cq",
            CShape::PollFull => "poll_full",
            CShape::CqWait => "cq_wait",
            CShape::PostWait => "post_wait",
        }
    }

    /// Whether it posts work requests.
    fn posts(self) -> bool {
        !matches!(self, CShape::PollCq | CShape::PollFull | CShape::CqWait)
    }

    /// Whether it reads completions (and returns how many).
    fn reads(self) -> bool {
        matches!(
            self,
            CShape::PollCq | CShape::PollFull | CShape::CqWait | CShape::PostWait
        )
    }
}

/// A QP as the C loops take it.
pub struct CQp {
    pub qpx: *mut ffi::ibv_qp_ex,
    /// Null for a QP without the mlx5 extension.
    pub mqpx: *mut ffi::mlx5dv_qp_ex,
}

/// The C loops' inputs, which live for the whole process: the QPs and
/// CQs, the batch's inputs and room for the completions.
pub struct CSide {
    pub rc: CQp,
    pub dci: CQp,
    /// What the polls read.
    pub cq: *mut ffi::ibv_cq_ex,
    /// The peer's rkey, the DC target, the mkey of the list registration.
    pub rkey: u32,
    pub dc: CDc,
    pub mkey: *mut ffi::mlx5dv_mkey,
    /// A prepared 64-byte raw WQE.
    pub wqe: *const c_void,
    /// `struct bench_plan` (`bench_plan_new`).
    pub plan: *const c_void,
    /// `BATCH` `struct bench_wc` (`bench_wc_new`).
    pub wc: *mut c_void,
    /// For `post_wait` (`post_vs_c.rs` only: null in `real_provider`): the
    /// RC QP whose send CQ `wcq` completes what it was given.
    pub rcw: *mut ffi::ibv_qp_ex,
    pub wcq: *mut ffi::ibv_cq_ex,
    /// `BATCH` `struct bench_wc_full`, for `poll_full`, `cq_wait` and
    /// `post_wait`.
    pub wc_full: *mut c_void,
}

impl CSide {
    /// Calls the loop of `shape` in `loops`: how many work requests it
    /// posted or completions it read.
    pub fn call(&self, loops: &CLoops, shape: CShape) -> usize {
        let (rc, dci, plan) = (&self.rc, &self.dci, self.plan);
        let full = matches!(shape, CShape::PollFull | CShape::CqWait | CShape::PostWait);
        let scoped = shape == CShape::PostWait;
        assert!(
            (!full || !self.wc_full.is_null())
                && (!scoped || !(self.rcw.is_null() || self.wcq.is_null())),
            "{shape:?}: no objects for it"
        );
        // SAFETY: the QPs, CQs, plan and completion arrays live for the
        // whole process, and the QPs have what each loop uses (the mlx5
        // extension for mlx5dv's setters; the objects of `poll_full`,
        // `cq_wait` and `post_wait` checked above); nothing else posts on
        // the QPs or polls the CQs
        // during the call.
        let n = unsafe {
            match shape {
                CShape::RcWriteSge => (loops.rc_write_sge)(rc.qpx, self.rkey, plan),
                CShape::RcInlineSend => (loops.rc_inline_send)(rc.qpx, plan),
                CShape::DciWriteSge => {
                    (loops.dci_write_sge)(dci.qpx, dci.mqpx, self.rkey, &self.dc, plan)
                }
                CShape::DciWriteSgeStream => {
                    (loops.dci_write_sge_stream)(dci.qpx, dci.mqpx, self.rkey, &self.dc, plan)
                }
                CShape::Memcpy => (loops.memcpy)(rc.qpx, rc.mqpx, plan),
                CShape::MrList => (loops.mr_list)(rc.qpx, rc.mqpx, self.mkey, plan),
                CShape::RawWqe => (loops.raw_wqe)(rc.qpx, rc.mqpx, self.wqe),
                CShape::PollCq => (loops.poll_cq)(self.cq, self.wc),
                CShape::PollFull => (loops.poll_full)(self.cq, self.wc_full),
                CShape::CqWait => (loops.cq_wait)(self.cq, self.wc_full),
                CShape::PostWait => {
                    (loops.post_wait)(self.rcw, self.rkey, plan, self.wcq, self.wc_full)
                }
            }
        };
        match n {
            0 if !shape.reads() => BATCH,
            n if n >= 0 => n as usize,
            n => panic!("C loop {shape:?} failed: {n}"),
        }
    }

    /// What the last C poll loop read, and the array zeroed for the next.
    pub fn take_wcs(&self) -> [BenchWc; BATCH] {
        // SAFETY: `wc` holds BATCH `struct bench_wc`, which `CWc` lays out
        // (plain integers: zero is one).
        let c = unsafe { &mut *(self.wc as *mut [CWc; BATCH]) };
        let wcs = c.map(|w| BenchWc::from_c(&w));
        // SAFETY: as above.
        *c = unsafe { std::mem::zeroed() };
        wcs
    }
}

/// The DCT the DCI writes to.
#[derive(Clone, Copy)]
pub struct DcTarget {
    pub dctn: u32,
    pub key: u64,
}

impl DcTarget {
    /// The address of this DCT through `ah`.
    #[inline]
    pub fn with(self, ah: &AddressHandle) -> DcAddr<'_> {
        DcAddr::new(ah, self.dctn, self.key)
    }
}
