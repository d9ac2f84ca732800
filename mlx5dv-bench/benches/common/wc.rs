//! The fields of a completion that the poll shape reads, as the C loops
//! write them (`CWc`) and as a Rust user keeps them (`BenchWc`).

use mlx5dv::{WcOpcode, WcStatus};

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
