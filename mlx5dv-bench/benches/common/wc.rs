//! The fields of a completion that the poll shape reads, as the C loops
//! write them (`CWc`) and as a Rust user keeps them (`BenchWc`); every field
//! of one, as the C loops of the completions rows write them (`CWcFull`).

use mlx5dv::{WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// `struct bench_wc` of `c/bench.h`: what the C poll loops read of each
/// completion.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CWc {
    wr_id: u64,
    status: u32,
    opcode: u32,
    byte_len: u32,
    has_imm: u32,
    imm: u32,
    qp_num: u32,
    vendor_err: u32,
}

/// The same, as a Rust user keeps it: the crate's types, the immediate as
/// an `Option`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BenchWc {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub byte_len: u32,
    pub imm: Option<u32>,
    pub qp_num: u32,
    pub vendor_err: u32,
}

impl BenchWc {
    pub const ZERO: BenchWc = BenchWc {
        wr_id: 0,
        status: WcStatus::from_raw(0),
        opcode: WcOpcode::from_raw(0),
        byte_len: 0,
        imm: None,
        qp_num: 0,
        vendor_err: 0,
    };

    pub fn from_c(c: &CWc) -> Self {
        BenchWc {
            wr_id: c.wr_id,
            status: WcStatus::from_raw(c.status),
            opcode: WcOpcode::from_raw(c.opcode),
            byte_len: c.byte_len,
            imm: (c.has_imm != 0).then_some(c.imm),
            qp_num: c.qp_num,
            vendor_err: c.vendor_err,
        }
    }
}

/// `struct bench_wc_full` of `c/bench.h`: every field of a
/// `WorkCompletion`, as the C loops `poll_full` and `cq_wait` read them.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CWcFull {
    wr_id: u64,
    status: u32,
    opcode: u32,
    byte_len: u32,
    has_imm: u32,
    imm: u32,
    has_inv: u32,
    inv: u32,
    qp_num: u32,
    vendor_err: u32,
    wc_flags: u32,
    has_sender: u32,
}

impl CWcFull {
    // Only real_provider makes the C loops' arrays in Rust.
    #[allow(dead_code)]
    pub const ZERO: CWcFull = CWcFull {
        wr_id: 0,
        status: 0,
        opcode: 0,
        byte_len: 0,
        has_imm: 0,
        imm: 0,
        has_inv: 0,
        inv: 0,
        qp_num: 0,
        vendor_err: 0,
        wc_flags: 0,
        has_sender: 0,
    };

    pub fn to_rust(self) -> WorkCompletion {
        assert_eq!(self.has_sender, 0, "the C loops read no sender");
        WorkCompletion {
            wr_id: self.wr_id,
            status: WcStatus::from_raw(self.status),
            opcode: WcOpcode::from_raw(self.opcode),
            byte_len: self.byte_len,
            imm: (self.has_imm != 0).then_some(self.imm),
            invalidated_rkey: (self.has_inv != 0).then_some(self.inv),
            qp_num: self.qp_num,
            vendor_err: self.vendor_err,
            wc_flags: WcFlags::from_bits_retain(self.wc_flags),
            // The C read no sender (a CQ no UD QP receives on), and says
            // so; a completion read from a CQ knows no QP's kind.
            src_qp: None,
            slid: None,
            qp_kind: None,
        }
    }
}

/// The completions a wait returned in its CQ's buffer, copied into `keep`
/// for the harness's check (after the counted call); how many.
pub fn kept(r: mlx5dv::Result<&[WorkCompletion]>, keep: &mut Vec<WorkCompletion>) -> usize {
    let wcs = r.expect("the CQ holds the completions");
    keep.clear();
    keep.extend_from_slice(wcs);
    wcs.len()
}
