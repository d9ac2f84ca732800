//! What the two harnesses share: `post_vs_c.rs` (the null provider) and
//! `real_provider/` (the real libmlx5 on the software mlx5 device) post
//! the same batches, written once here: the sizes of `c/bench.h`, the
//! objects as the C loops take them, the completions as both sides read
//! them (`wc`), what drives callgrind and reads its counts (`measure`),
//! and the plan and the Rust shapes (`shapes.rs`, which each harness
//! includes where it measures them: see its head).
//!
//! Each bench declares this folder as `mod common` (`#[path]`). The
//! measured functions are `#[no_mangle]`: their symbols, which the scripts
//! toggle callgrind on, do not depend on the module they are in.

pub mod measure;
pub mod wc;

use mlx5dv::ffi;
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

/// `struct bench_objs` of `c/bench.h`: the null provider's fake objects
/// (`bench_objs_new`), or the device's (`Rig::c_side`; there `rc`, `dci`
/// and `rcw`, the QPs as the loops' `struct null_qp`, are libmlx5's QP
/// from its `ibv_qp_ex` on). `wc_full`: `BATCH` `struct bench_wc_full`.
#[repr(C)]
pub struct BenchObjs {
    pub ctx: *mut ffi::ibv_context,
    pub pd: *mut ffi::ibv_pd,
    pub cq: *mut ffi::ibv_cq_ex,
    pub mr: *mut ffi::ibv_mr,
    pub mkey: *mut ffi::mlx5dv_mkey,
    pub ah: *mut ffi::ibv_ah,
    pub rc: *mut c_void,
    pub dci: *mut c_void,
    pub rc_qp: *mut ffi::ibv_qp,
    pub rc_qpx: *mut ffi::ibv_qp_ex,
    pub rc_mqpx: *mut ffi::mlx5dv_qp_ex,
    pub dci_qp: *mut ffi::ibv_qp,
    pub dci_qpx: *mut ffi::ibv_qp_ex,
    pub dci_mqpx: *mut ffi::mlx5dv_qp_ex,
    pub remote_addr: u64,
    pub rkey: u32,
    pub remote_dctn: u32,
    pub remote_dc_key: u64,
    pub wqe: *const c_void,
    pub rcw: *mut c_void,
    pub rcw_qp: *mut ffi::ibv_qp,
    pub rcw_qpx: *mut ffi::ibv_qp_ex,
    pub wcq: *mut ffi::ibv_cq_ex,
    pub wc_full: *mut c_void,
}

/// A C loop of `c/post.c`: one batch posted (0 on success) or one round
/// of completions read (how many), from the objects, the plan
/// (`struct bench_plan`) and the completion array (`struct bench_wc`).
pub type CLoop = unsafe extern "C" fn(*const BenchObjs, *const c_void, *mut c_void) -> c_int;

/// Declares C loops (`CLoop`s) under the names given.
macro_rules! c_loops {
    ($($f:ident)*) => {
        extern "C" {
            $(
                fn $f(
                    o: *const $crate::common::BenchObjs,
                    p: *const ::std::ffi::c_void,
                    wc: *mut ::std::ffi::c_void,
                ) -> ::std::ffi::c_int;
            )*
        }
    };
}
pub(crate) use c_loops;

/// The C side's inputs: the objects, the plan and the completion array,
/// which live for the whole process.
pub struct CSide {
    pub o: *const BenchObjs,
    pub plan: *const c_void,
    pub wc: *mut c_void,
}

impl CSide {
    /// Calls a C loop: how many work requests it posted (0 on success) or
    /// completions it read.
    pub fn call(&self, f: CLoop) -> usize {
        // SAFETY: the objects, plan and completion array live for the whole
        // process; nothing else posts on the QPs or polls the CQs during
        // the call.
        let n = unsafe { f(self.o, self.plan, self.wc) };
        match n {
            0 => BATCH,
            n if n > 0 => n as usize,
            n => panic!("C loop failed: {n}"),
        }
    }

    /// What the last C poll loop read.
    pub fn wcs(&self) -> [BenchWc; BATCH] {
        // SAFETY: `wc` holds BATCH `struct bench_wc`, which `CWc` lays out.
        let c = unsafe { &*(self.wc as *const [CWc; BATCH]) };
        c.map(|w| BenchWc::from_c(&w))
    }
}
