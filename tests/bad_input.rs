//! The bad-input table, host half: every public constructor, builder and
//! check with numeric or enum inputs, at 0, at the limit, one past it and
//! at the type's maximum, where the crate refuses the input itself, before
//! any C call: MTUs, opcodes, WQE segments, remote and region ranges,
//! device names, CQ, MR, SRQ, AH, mkey and QP-builder inputs, PSNs and
//! retry counts. Each row must give its typed error (or succeed, at the
//! limit), never panic.
//!
//! The objects are fakes under real handles (`support::fakes`), so this
//! runs on a machine without any RDMA device. The work-request limits are
//! in `tests/bad_input_wr.rs`; the rows that need a device's own limits in
//! `tests/rxe_bad_input.rs`.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::wqe::{CtrlFlags, Opcode, Wqe, WqeBuilder, MAX_DS, MAX_QP_NUM, MAX_WQE_BYTES};
use mlx5dv::*;
use std::ops::Bound;
use std::ptr::NonNull;
use support::fakes::{Fx, LEN};
use support::table::{pure, row, run, Expect, Row};
use Expect::*;

/// The MTU, opcode, WQE and remote-range rows: pure functions of their
/// inputs.
fn pure_rows<'a>() -> Vec<Row<'a, Fx>> {
    let mut rows = Vec::new();
    let mtu = "MTU in bytes";
    for (bytes, expect) in [
        (0, OutOfRange(mtu)),
        (255, OutOfRange(mtu)),
        (256, Ok),
        (1000, OutOfRange(mtu)),
        (4096, Ok),
        (4097, OutOfRange(mtu)),
        (8192, OutOfRange(mtu)),
        (u32::MAX, OutOfRange(mtu)),
    ] {
        rows.push(pure(
            format!("Mtu::from_bytes({bytes})"),
            expect,
            move || Mtu::from_bytes(bytes),
        ));
    }
    let raw = "enum ibv_mtu";
    for (value, expect) in [
        (0, OutOfRange(raw)),
        (1, Ok),
        (5, Ok),
        (6, OutOfRange(raw)),
        (u32::MAX, OutOfRange(raw)),
    ] {
        rows.push(pure(format!("Mtu::from_raw({value})"), expect, move || {
            Mtu::from_raw(value)
        }));
    }
    // Every u8: an opcode exactly where mlx5dv.h names one.
    let named = [
        ffi::MLX5_OPCODE_NOP,
        ffi::MLX5_OPCODE_SEND_INVAL,
        ffi::MLX5_OPCODE_RDMA_WRITE,
        ffi::MLX5_OPCODE_RDMA_WRITE_IMM,
        ffi::MLX5_OPCODE_SEND,
        ffi::MLX5_OPCODE_SEND_IMM,
        ffi::MLX5_OPCODE_TSO,
        ffi::MLX5_OPCODE_RDMA_READ,
        ffi::MLX5_OPCODE_ATOMIC_CS,
        ffi::MLX5_OPCODE_ATOMIC_FA,
        ffi::MLX5_OPCODE_ATOMIC_MASKED_CS,
        ffi::MLX5_OPCODE_ATOMIC_MASKED_FA,
        ffi::MLX5_OPCODE_FMR,
        ffi::MLX5_OPCODE_LOCAL_INVAL,
        ffi::MLX5_OPCODE_CONFIG_CMD,
        ffi::MLX5_OPCODE_SET_PSV,
        ffi::MLX5_OPCODE_UMR,
        ffi::MLX5_OPCODE_TAG_MATCHING,
        ffi::MLX5_OPCODE_FLOW_TBL_ACCESS,
        ffi::MLX5_OPCODE_MMO,
    ];
    for raw in 0..=u8::MAX {
        let expect = if named.contains(&u32::from(raw)) {
            Ok
        } else {
            InvalidArgument
        };
        rows.push(pure(
            format!("Opcode::try_from({raw:#04x})"),
            expect,
            move || {
                let op = Opcode::try_from(raw)?;
                assert_eq!(op.raw(), raw, "the opcode round-trips");
                Result::Ok(())
            },
        ));
    }
    rows.extend(wqe_rows());
    rows.extend(remote_buf_rows());
    rows
}

fn wqe_rows<'a>() -> Vec<Row<'a, Fx>> {
    let qpn = "QP number";
    let ds = "WQE size in 16-byte units (DS)";
    let bc = "data segment byte count";
    let nop = |qp: u32| WqeBuilder::new(Opcode::Nop, qp);
    let mut rows: Vec<Row<'a, Fx>> = Vec::new();
    for (qp, expect) in [
        (0, Ok),
        (MAX_QP_NUM, Ok),
        (MAX_QP_NUM + 1, OutOfRange(qpn)),
        (u32::MAX, OutOfRange(qpn)),
    ] {
        rows.push(pure(
            format!("WqeBuilder::new(QP number {qp:#x})"),
            expect,
            move || nop(qp).build(),
        ));
    }
    for (count, expect) in [
        (0, Ok),
        (0x7fff_ffff, Ok),
        (0x8000_0000, OutOfRange(bc)),
        (u32::MAX, OutOfRange(bc)),
    ] {
        rows.push(pure(
            format!("data_seg(byte count {count:#x})"),
            expect,
            move || nop(1).data_seg(count, 0x1234, 0x1000).build(),
        ));
    }
    // The control segment is 1 unit: 62 more fill DS to its limit of 63.
    for (segs, expect) in [(62, Ok), (63, OutOfRange(ds)), (200, OutOfRange(ds))] {
        rows.push(pure(
            format!("{segs} remote-address segments"),
            expect,
            move || {
                (0..segs)
                    .fold(nop(1), |b, _| b.raddr_seg(0x1000, 0x55))
                    .build()
            },
        ));
    }
    // Inline: a 4-byte header, then the data, in 62 units at most.
    let max_inline = MAX_WQE_BYTES - 16 - 4;
    for (len, expect) in [
        (0, InvalidArgument),
        (1, Ok),
        (max_inline, Ok),
        (max_inline + 1, OutOfRange(ds)),
        (1 << 20, OutOfRange(ds)),
    ] {
        rows.push(pure(
            format!("inline_data_seg({len} bytes)"),
            expect,
            move || nop(1).inline_data_seg(&vec![0xA5; len]).build(),
        ));
    }
    for (len, expect) in [
        (0, InvalidArgument),
        (15, InvalidArgument),
        (16, Ok),
        (17, InvalidArgument),
        (MAX_WQE_BYTES - 16, Ok),
        (MAX_WQE_BYTES, OutOfRange(ds)),
        (1 << 20, OutOfRange(ds)),
    ] {
        rows.push(pure(format!("raw_seg({len} bytes)"), expect, move || {
            nop(1).raw_seg(&vec![0x5A; len]).build()
        }));
    }
    for (bits, expect) in [
        (0, Ok),
        (CtrlFlags::all().bits(), Ok),
        (0x01, InvalidArgument),
        (0x04, InvalidArgument),
        (0x20, InvalidArgument),
        (0xff, InvalidArgument),
    ] {
        rows.push(pure(
            format!("control flags {bits:#04x}"),
            expect,
            move || nop(1).flags(CtrlFlags::from_bits_retain(bits)).build(),
        ));
    }
    rows.push(pure(
        "the first error wins: QP number, then DS",
        OutOfRange(qpn),
        move || {
            (0..70)
                .fold(nop(u32::MAX), |b, _| b.raddr_seg(0, 0))
                .build()
        },
    ));
    rows.push(pure(
        "empty inline data after a full WQE gives the inline error",
        InvalidArgument,
        move || {
            (0..62)
                .fold(nop(1), |b, _| b.raddr_seg(0, 0))
                .inline_data_seg(&[])
                .build()
        },
    ));

    let size = "WQE size in bytes";
    let with_ds = |units: usize, ds_byte: u8| {
        let mut b = vec![0u8; units * 16];
        if b.len() > 7 {
            b[7] = ds_byte;
        }
        b
    };
    for (name, bytes, expect) in [
        ("no bytes", vec![], InvalidArgument),
        ("15 bytes", vec![0; 15], InvalidArgument),
        ("17 bytes", vec![0; 17], InvalidArgument),
        ("1 unit, DS 1", with_ds(1, 1), Ok),
        ("1 unit, DS 0", with_ds(1, 0), InvalidArgument),
        ("1 unit, DS 2", with_ds(1, 2), InvalidArgument),
        (
            "1 unit, DS 1 | reserved bit 6",
            with_ds(1, 0x41),
            InvalidArgument,
        ),
        ("63 units, DS 63", with_ds(63, MAX_DS), Ok),
        ("64 units, DS 64", with_ds(64, 64), OutOfRange(size)),
        ("64 units, DS 0", with_ds(64, 0), OutOfRange(size)),
        ("4096 units", with_ds(4096, 0), OutOfRange(size)),
    ] {
        rows.push(pure(
            format!("Wqe::from_bytes({name})"),
            expect,
            move || Wqe::from_bytes(&bytes),
        ));
    }
    rows
}

fn remote_buf_rows<'a>() -> Vec<Row<'a, Fx>> {
    let end = "remote range end";
    let buf = RemoteBuf {
        addr: 0x7f00_0000_0000,
        len: 4096,
        rkey: 0x42,
    };
    let mut rows: Vec<Row<'a, Fx>> = Vec::new();
    for (offset, len, expect) in [
        (0, 0, Ok),
        (0, 4096, Ok),
        (4096, 0, Ok),
        (4095, 1, Ok),
        (0, 4097, OutOfRange(end)),
        (4097, 0, OutOfRange(end)),
        (4096, 1, OutOfRange(end)),
        (u64::MAX, 1, OutOfRange(end)),
        (1, u64::MAX, OutOfRange(end)),
        (u64::MAX, u64::MAX, OutOfRange(end)),
    ] {
        rows.push(pure(
            format!("RemoteBuf(4096 bytes).slice({offset:#x}, {len:#x})"),
            expect,
            move || {
                let s = buf.slice(offset, len)?;
                assert_eq!((s.addr, s.len, s.rkey), (buf.addr + offset, len, buf.rkey));
                Result::Ok(())
            },
        ));
    }
    // RemoteBuf's fields are public, so safe code can describe a buffer
    // that ends past 2^64: `slice` must refuse the address overflow too.
    let high = RemoteBuf {
        addr: u64::MAX - 7,
        len: 64,
        rkey: 0x42,
    };
    rows.push(pure(
        "RemoteBuf(addr 2^64 - 8, 64 bytes).slice(16, 8): the address overflows",
        OutOfRange("remote range address"),
        move || high.slice(16, 8),
    ));
    rows
}

/// Constructors and builders that refuse their input before any C call
/// (the fake objects would not survive one).
fn constructor_rows<'a>() -> Vec<Row<'a, Fx>> {
    let mut rows: Vec<Row<'a, Fx>> = Vec::new();
    for name in ["", "no-such-device", "fake0\0", "rxe0 ", &"x".repeat(4096)] {
        let name = name.to_string();
        rows.push(pure(
            format!("Context::open({:?})", &name[..name.len().min(16)]),
            DeviceNotFound,
            move || Context::open(&name),
        ));
    }
    let gid = "GID index";
    for (index, expect) in [
        (i32::MAX as u32 + 1, OutOfRange(gid)),
        (u32::MAX, OutOfRange(gid)),
    ] {
        rows.push(row(
            format!("Context::gid(1, {index:#x})"),
            expect,
            move |fx: &mut Fx| fx.ctx.gid(1, index).map(drop),
        ));
    }
    rows.push(row(
        "mlx5_caps on a non-mlx5 device",
        Unsupported,
        |fx: &mut Fx| fx.ctx.mlx5_caps().map(drop),
    ));
    let cqe = "CQ entries";
    for n in [0, i32::MAX as u32 + 1, u32::MAX] {
        rows.push(row(
            format!("CompletionQueue::new({n})"),
            OutOfRange(cqe),
            move |fx: &mut Fx| CompletionQueue::new(&fx.ctx, n).map(drop),
        ));
    }
    let mrl = "memory region length";
    for (len, expect) in [
        (0, OutOfRange(mrl)),
        (usize::MAX, OutOfRange(mrl)),
        (isize::MAX as usize, OutOfRange(mrl)),
        // Passes the layout check; no allocator has 2^63 bytes.
        (isize::MAX as usize - 4095, Verbs("alloc_zeroed")),
    ] {
        rows.push(row(
            format!("MemoryRegion::new({len:#x} bytes)"),
            expect,
            move |fx: &mut Fx| MemoryRegion::new(&fx.pd, len, AccessFlags::LOCAL_WRITE).map(drop),
        ));
    }
    rows.push(row(
        "MemoryRegion::register_raw(0 bytes)",
        OutOfRange(mrl),
        |fx: &mut Fx| {
            let p = NonNull::new(fx.mr.addr() as *mut u8).unwrap();
            unsafe { MemoryRegion::register_raw(&fx.pd, p, 0, AccessFlags::LOCAL_WRITE) }.map(drop)
        },
    ));
    let srq = "SRQ max_wr / max_sge";
    for (wr, sge) in [(0, 1), (1, 0), (0, 0)] {
        rows.push(row(
            format!("SharedReceiveQueue::new(max_wr {wr}, max_sge {sge})"),
            OutOfRange(srq),
            move |fx: &mut Fx| SharedReceiveQueue::new(&fx.pd, wr, sge).map(drop),
        ));
    }
    rows.push(row(
        "AddressHandle::new(port 0)",
        OutOfRange("port number"),
        |fx: &mut Fx| {
            let attr = AhAttr {
                port: 0,
                dlid: 0,
                sl: 0,
                grh: None,
            };
            AddressHandle::new(&fx.pd, &attr).map(drop)
        },
    ));
    for (n, expect) in [
        (0, OutOfRange("mkey max_entries")),
        (1, Unsupported),
        (u16::MAX, Unsupported),
    ] {
        rows.push(row(
            format!("Mkey::new(max_entries {n}) on a non-mlx5 device"),
            expect,
            move |fx: &mut Fx| Mkey::new(&fx.pd, n, false).map(drop),
        ));
    }
    rows.extend(qp_builder_rows());
    rows.extend(connect_rows());
    rows
}

fn qp_builder_rows<'a>() -> Vec<Row<'a, Fx>> {
    let mut rows: Vec<Row<'a, Fx>> = Vec::new();
    let streams = "DCI streams log_num_concurent / log_num_errored";
    for (c, e, expect) in [
        (17, 0, OutOfRange(streams)),
        (0, 17, OutOfRange(streams)),
        (17, 17, OutOfRange(streams)),
        (u8::MAX, u8::MAX, OutOfRange(streams)),
        // Within the 16-bit bound: refused only because the fake is not
        // an mlx5 device.
        (16, 16, Unsupported),
        (0, 0, Unsupported),
    ] {
        rows.push(row(
            format!("QpBuilder::dci().dci_streams({c}, {e})"),
            expect,
            move |fx: &mut Fx| {
                QpBuilder::dci(&fx.pd, &fx.cq)
                    .dci_streams(c, e)
                    .build()
                    .map(drop)
            },
        ));
    }
    for ops in [Mlx5SendOps::MR_LIST, Mlx5SendOps::MR_INTERLEAVED] {
        rows.push(row(
            format!("QpBuilder::dci() with {ops:?} (RC-only)"),
            InvalidArgument,
            move |fx: &mut Fx| {
                QpBuilder::dci(&fx.pd, &fx.cq)
                    .mlx5_send_ops(ops)
                    .build()
                    .map(drop)
            },
        ));
    }
    rows.push(row(
        "QpBuilder::rc() with a send CQ of another device",
        InvalidArgument,
        |fx: &mut Fx| {
            QpBuilder::rc(&fx.pd, &fx.other_cq, &fx.cq)
                .build()
                .map(drop)
        },
    ));
    rows.push(row(
        "QpBuilder::rc() with a receive CQ of another device",
        InvalidArgument,
        |fx: &mut Fx| {
            QpBuilder::rc(&fx.pd, &fx.cq, &fx.other_cq)
                .build()
                .map(drop)
        },
    ));
    for ops in [
        Mlx5SendOps::MEMCPY,
        Mlx5SendOps::RAW_WQE,
        Mlx5SendOps::MR_LIST,
        Mlx5SendOps::all(),
    ] {
        rows.push(row(
            format!("QpBuilder::rc() with {ops:?} on a non-mlx5 device"),
            Unsupported,
            move |fx: &mut Fx| {
                QpBuilder::rc(&fx.pd, &fx.cq, &fx.cq)
                    .mkey_entries(u16::MAX, u16::MAX)
                    .mlx5_send_ops(ops)
                    .build()
                    .map(drop)
            },
        ));
    }
    rows.push(row(
        "QpBuilder::rc().disable_scatter_to_cqe() on a non-mlx5 device",
        Unsupported,
        |fx: &mut Fx| {
            QpBuilder::rc(&fx.pd, &fx.cq, &fx.cq)
                .disable_scatter_to_cqe()
                .build()
                .map(drop)
        },
    ));
    rows
}

/// The connection inputs the crate checks before `ibv_modify_qp`.
fn connect_rows<'a>() -> Vec<Row<'a, Fx>> {
    let psn = "PSN";
    let retry = "retry_cnt / rnr_retry";
    let mut rows: Vec<Row<'a, Fx>> = Vec::new();
    for p in [0x0100_0000, u32::MAX] {
        rows.push(row(
            format!("endpoint(PSN {p:#x})"),
            OutOfRange(psn),
            move |fx: &mut Fx| fx.rc.endpoint(p, &ConnectOptions::default()).map(drop),
        ));
        rows.push(row(
            format!("to_rtr(remote PSN {p:#x})"),
            OutOfRange(psn),
            move |fx: &mut Fx| {
                let remote = Endpoint {
                    qpn: 1,
                    psn: p,
                    lid: 0,
                    gid: Gid::default(),
                };
                fx.rc.to_rtr(&remote, &ConnectOptions::default())
            },
        ));
        rows.push(row(
            format!("to_rts(PSN {p:#x})"),
            OutOfRange(psn),
            move |fx: &mut Fx| fx.rc.to_rts(p, &ConnectOptions::default()),
        ));
        rows.push(row(
            format!("DCI ready(PSN {p:#x})"),
            OutOfRange(psn),
            move |fx: &mut Fx| fx.dci.ready(p, &ConnectOptions::default()),
        ));
    }
    for (r, n) in [(8, 7), (7, 8), (u8::MAX, 0), (0, u8::MAX)] {
        rows.push(row(
            format!("to_rts(retry_cnt {r}, rnr_retry {n})"),
            OutOfRange(retry),
            move |fx: &mut Fx| {
                let opts = ConnectOptions::default().retry_cnt(r).rnr_retry(n);
                fx.rc.to_rts(0, &opts)
            },
        ));
    }
    rows
}

/// Ranges of a region and of an mkey's layout.
fn range_rows<'a>() -> Vec<Row<'a, Fx>> {
    let mut rows: Vec<Row<'a, Fx>> = Vec::new();
    let end = "range end";
    let start = "range start";
    let bound = "range bound";
    type Range = (Bound<usize>, Bound<usize>);
    let cases: Vec<(&str, Range, Expect)> = vec![
        ("..", (Bound::Unbounded, Bound::Unbounded), Ok),
        ("0..LEN", (Bound::Included(0), Bound::Excluded(LEN)), Ok),
        ("LEN..LEN", (Bound::Included(LEN), Bound::Excluded(LEN)), Ok),
        (
            "0..=LEN-1",
            (Bound::Included(0), Bound::Included(LEN - 1)),
            Ok,
        ),
        (
            "0..LEN+1",
            (Bound::Included(0), Bound::Excluded(LEN + 1)),
            OutOfRange(end),
        ),
        (
            "0..=LEN",
            (Bound::Included(0), Bound::Included(LEN)),
            OutOfRange(end),
        ),
        (
            "LEN+1..",
            (Bound::Included(LEN + 1), Bound::Unbounded),
            OutOfRange(start),
        ),
        (
            "10..5",
            (Bound::Included(10), Bound::Excluded(5)),
            OutOfRange(start),
        ),
        (
            "..usize::MAX",
            (Bound::Unbounded, Bound::Excluded(usize::MAX)),
            OutOfRange(end),
        ),
        (
            "..=usize::MAX",
            (Bound::Unbounded, Bound::Included(usize::MAX)),
            OutOfRange(bound),
        ),
        (
            "(usize::MAX excl)..",
            (Bound::Excluded(usize::MAX), Bound::Unbounded),
            OutOfRange(bound),
        ),
        (
            "usize::MAX..",
            (Bound::Included(usize::MAX), Bound::Unbounded),
            OutOfRange(start),
        ),
    ];
    for (name, range, expect) in cases {
        rows.push(row(
            format!("MemoryRegion::sge({name})"),
            expect,
            move |fx: &mut Fx| fx.mr.sge(range).map(drop),
        ));
        rows.push(row(
            format!("MemoryRegion::remote({name})"),
            expect,
            move |fx: &mut Fx| fx.mr.remote(range).map(drop),
        ));
    }
    // A layout bounds the ranges made through it.
    rows.push(row(
        "MkeyLayout::remote(0..65) of a 64-byte layout",
        OutOfRange(end),
        |fx: &mut Fx| MkeyLayout::new(&fx.mkey_small, 64).remote(0..65).map(drop),
    ));
    rows.push(row(
        "MkeyLayout::sge(0..1) of an empty layout",
        OutOfRange(end),
        |fx: &mut Fx| unsafe { MkeyLayout::new(&fx.mkey_small, 0).sge(0..1) }.map(drop),
    ));
    rows
}

#[test]
fn every_bad_input_gives_its_typed_error_on_the_host() {
    let mut fx = Fx::new();
    let mut rows = pure_rows();
    rows.extend(constructor_rows());
    rows.extend(range_rows());
    run("host", &mut fx, rows);
}
