//! The bad-input table for the work-request builders, on the host: inline
//! length, SGE count, length against the remote buffer, atomics, memcpy
//! length, mr_list and mr_interleaved entry counts and patterns, raw WQE
//! size, DCI streams, and ops the QP was not created with; at 0, the
//! limit, one past it and the type's maximum. Each row must give its typed
//! error (or succeed, at the limit), never panic, and a refused work
//! request must reach the provider not at all.
//!
//! The QPs are fakes under real handles (`support::fakes`) whose provider
//! tables record every call, so the mlx5 builders' limits are tried on a
//! machine without any RDMA device.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::wqe::{Opcode, WqeBuilder};
use mlx5dv::*;
use support::fakes::{remote, wr_row, Fx, LEN, MEMCPY_MAX};
use support::table::{row, run, Expect, Row};
use Expect::*;

/// The work-request builders' limits, on the fake QPs.
fn wr_rows<'a>() -> Vec<Row<'a, Fx>> {
    let mut rows: Vec<Row<'a, Fx>> = Vec::new();
    let inl = "inline data length";
    for (len, expect) in [
        (0, Ok),
        (60, Ok),
        (61, OutOfRange(inl)),
        (1 << 20, OutOfRange(inl)),
    ] {
        rows.push(wr_row(
            format!("send().inline({len} bytes), max 60"),
            expect,
            move |fx| fx.rc.batch().wr(1).send().inline(&vec![7; len]),
        ));
    }
    let sges = "SGE count";
    for (n, expect) in [
        (0, Ok),
        (4, Ok),
        (5, OutOfRange(sges)),
        (64, OutOfRange(sges)),
    ] {
        rows.push(wr_row(
            format!("send().sge_list({n} SGEs), max 4"),
            expect,
            move |fx| {
                let Fx { rc, mr, .. } = fx;
                let list: Vec<_> = (0..n).map(|i| mr.sge(i * 8..i * 8 + 8).unwrap()).collect();
                rc.batch().wr(1).send().sge_list(&list)
            },
        ));
    }
    let wrl = "work request length";
    for (len, expect) in [(64, Ok), (65, OutOfRange(wrl)), (LEN, OutOfRange(wrl))] {
        rows.push(wr_row(
            format!("rdma_write(64-byte remote).sge({len} bytes)"),
            expect,
            move |fx| {
                let r = remote(fx, 64);
                let Fx { rc, mr, .. } = fx;
                rc.batch().wr(1).rdma_write(r).sge(mr.sge(0..len)?)
            },
        ));
        rows.push(wr_row(
            format!("rdma_read(64-byte remote).sge({len} bytes)"),
            expect,
            move |fx| {
                let r = remote(fx, 64);
                let Fx { rc, mr, .. } = fx;
                rc.batch().wr(1).rdma_read(r).sge(mr.sge_mut(0..len)?)
            },
        ));
    }
    rows.push(wr_row(
        "rdma_write(59-byte remote).inline(60 bytes)",
        OutOfRange(wrl),
        |fx| {
            let r = remote(fx, 59);
            fx.rc.batch().wr(1).rdma_write(r).inline(&[1; 60])
        },
    ));
    for (sge_len, offset, rlen, expect) in [
        (8, 0, 8, Ok),
        (4, 0, 8, InvalidArgument),
        (16, 0, 16, InvalidArgument),
        (0, 0, 8, InvalidArgument),
        (8, 4, 8, InvalidArgument),
        (8, 0, 4, OutOfRange(wrl)),
    ] {
        rows.push(wr_row(
            format!("atomic_fetch_add(SGE {sge_len} bytes, remote +{offset}, {rlen} bytes)"),
            expect,
            move |fx| {
                let r = remote(fx, 4096).slice(offset, rlen)?;
                let Fx { rc, mr, .. } = fx;
                rc.batch()
                    .wr(1)
                    .atomic_fetch_add(r, 1)
                    .sge(mr.sge_mut(0..sge_len)?)
            },
        ));
        rows.push(wr_row(
            format!("atomic_cmp_swp(SGE {sge_len} bytes, remote +{offset}, {rlen} bytes)"),
            expect,
            move |fx| {
                let r = remote(fx, 4096).slice(offset, rlen)?;
                let Fx { rc, mr, .. } = fx;
                rc.batch()
                    .wr(1)
                    .atomic_cmp_swp(r, 0, 1)
                    .sge(mr.sge_mut(0..sge_len)?)
            },
        ));
    }
    rows.push(wr_row(
        "send_inv without SEND_WITH_INV",
        Unsupported,
        |fx| fx.rc.batch().wr(1).send_inv(0x42).inline(b"x"),
    ));
    rows.push(wr_row("local_inv without LOCAL_INV", Unsupported, |fx| {
        fx.rc.batch().wr(1).local_inv(0x42)
    }));

    let mcl = "memcpy length";
    for (len, expect) in [
        (0, OutOfRange(mcl)),
        (1, Ok),
        (MEMCPY_MAX as usize, Ok),
        (MEMCPY_MAX as usize + 1, OutOfRange(mcl)),
        (LEN / 2, OutOfRange(mcl)),
    ] {
        rows.push(wr_row(
            format!("memcpy({len} bytes), max {MEMCPY_MAX}"),
            expect,
            move |fx| {
                let Fx { rc, mr, .. } = fx;
                let (s, d) = mr.sge_mut(..)?.split_at((LEN / 2) as u32)?;
                let (d, s) = (d.split_at(len as u32)?.0, s.split_at(len as u32)?.0);
                let s = s.into_sge();
                rc.batch().wr(1).memcpy(d, s)
            },
        ));
    }
    rows.push(wr_row("memcpy(8 bytes into 16)", InvalidArgument, |fx| {
        let Fx { rc, mr, .. } = fx;
        let (s, d) = mr.sge_mut(0..116)?.split_at(100)?;
        rc.batch().wr(1).memcpy(d, s.split_at(8)?.0.into_sge())
    }));
    rows.push(wr_row("memcpy on a QP without MEMCPY", Unsupported, |fx| {
        let Fx { plain, mr, .. } = fx;
        let (s, d) = mr.sge_mut(0..108)?.split_at(100)?;
        plain.batch().wr(1).memcpy(d, s.split_at(8)?.0.into_sge())
    }));

    let list = "mr_list entries";
    for (small, n, expect) in [
        (true, 0, OutOfRange(list)),
        (true, 2, Ok),
        (true, 3, OutOfRange(list)),
        (false, 4, Ok),
        (false, 5, OutOfRange(list)),
        (false, 64, OutOfRange(list)),
        (false, 1000, OutOfRange(list)),
    ] {
        let which = if small { "2" } else { "64" };
        rows.push(wr_row(
            format!("mr_list({n} entries) on an mkey of {which}, WQE room 4"),
            expect,
            move |fx| {
                let Fx {
                    rc,
                    mr,
                    mkey_small,
                    mkey_big,
                    ..
                } = fx;
                let mkey = if small { mkey_small } else { mkey_big };
                let sges: Vec<_> = (0..n).map(|i| mr.sge(i..i + 1).unwrap()).collect();
                rc.batch()
                    .wr(1)
                    .mr_list(mkey, AccessFlags::LOCAL_WRITE, &sges)
                    .map(drop)
            },
        ));
    }
    rows.push(wr_row(
        "mr_list on a QP without MR_LIST",
        Unsupported,
        |fx| {
            let Fx {
                plain,
                mr,
                mkey_big,
                ..
            } = fx;
            let sges = [mr.sge(0..8)?];
            plain
                .batch()
                .wr(1)
                .mr_list(mkey_big, AccessFlags::LOCAL_WRITE, &sges)
                .map(drop)
        },
    ));

    let num = "num_interleaved";
    for (small, n, repeat, expect) in [
        (true, 0, 1, OutOfRange(num)),
        (true, 1, 1, Ok),
        (true, 2, 1, OutOfRange(num)),
        (false, 3, 1, Ok),
        (false, 4, 1, OutOfRange(num)),
        (false, 1000, 1, OutOfRange(num)),
        (false, 1, 0, OutOfRange("repeat_count")),
        (false, 1, LEN as u32 / 128, Ok),
        (
            false,
            1,
            LEN as u32 / 128 + 1,
            OutOfRange("interleaved pattern end"),
        ),
        (false, 1, u32::MAX, OutOfRange("interleaved pattern end")),
    ] {
        let which = if small { "2" } else { "64" };
        rows.push(wr_row(
            format!("mr_interleaved({n} entries of 64 + skip 64, repeat {repeat}) on an mkey of {which}"),
            expect,
            move |fx| {
                let Fx {
                    rc,
                    mr,
                    mkey_small,
                    mkey_big,
                    ..
                } = fx;
                let mkey = if small { mkey_small } else { mkey_big };
                let e: Vec<_> = (0..n)
                    .map(|_| MrInterleaved::new(mr, 0, 64, 64).unwrap())
                    .collect();
                rc.batch()
                    .wr(1)
                    .mr_interleaved(mkey, AccessFlags::LOCAL_WRITE, repeat, &e)
                    .map(drop)
            },
        ));
    }
    rows.push(wr_row(
        "mr_interleaved(skip u32::MAX, repeat u32::MAX): the stride is past 16 bits",
        OutOfRange("interleaved entry stride"),
        |fx| {
            let Fx {
                rc, mr, mkey_big, ..
            } = fx;
            let e = [MrInterleaved::new(mr, 0, 1, u32::MAX)?];
            rc.batch()
                .wr(1)
                .mr_interleaved(mkey_big, AccessFlags::LOCAL_WRITE, u32::MAX, &e)
                .map(drop)
        },
    ));
    let ent = "interleaved entry end";
    for (offset, count, expect) in [
        (0, 0, OutOfRange(ent)),
        (0, LEN as u32, Ok),
        (1, LEN as u32, OutOfRange(ent)),
        (LEN, 1, OutOfRange(ent)),
        (usize::MAX, 1, OutOfRange(ent)),
        (0, u32::MAX, OutOfRange(ent)),
    ] {
        rows.push(row(
            format!("MrInterleaved::new(offset {offset:#x}, bytes_count {count:#x})"),
            expect,
            move |fx: &mut Fx| MrInterleaved::new(&fx.mr, offset, count, 0).map(drop),
        ));
    }

    let blocks = "raw WQE size in 64-byte blocks";
    for (units, expect) in [
        (1, Ok),
        (8, Ok),
        (9, OutOfRange(blocks)),
        (63, OutOfRange(blocks)),
    ] {
        rows.push(wr_row(
            format!("raw_wqe(DS {units}), room for 2 basic blocks"),
            expect,
            move |fx| {
                let wqe = (1..units)
                    .fold(WqeBuilder::new(Opcode::Nop, 1), |b, _| b.raddr_seg(0, 0))
                    .build()?;
                unsafe { fx.rc.batch().wr(1).raw_wqe(&wqe) }
            },
        ));
    }
    rows.push(wr_row(
        "raw_wqe on a QP without RAW_WQE",
        Unsupported,
        |fx| {
            let wqe = WqeBuilder::new(Opcode::Nop, 1).build()?;
            unsafe { fx.plain.batch().wr(1).raw_wqe(&wqe) }
        },
    ));

    for (stream, streams, expect) in [
        (0, false, Unsupported),
        (u16::MAX, false, Unsupported),
        (0, true, Ok),
        (3, true, Ok),
        (u16::MAX, true, Ok),
    ] {
        let dci = if streams { "with" } else { "without" };
        rows.push(wr_row(
            format!("wr_stream(stream {stream}) on a DCI {dci} streams"),
            expect,
            move |fx| {
                let Fx {
                    dci,
                    dci_streams,
                    ah,
                    ..
                } = fx;
                let qp = if streams { dci_streams } else { dci };
                let addr = DcAddr::new(ah, 0x00FF_FFFF, u64::MAX);
                qp.batch().wr_stream(1, addr, stream).send().inline(b"x")
            },
        ));
    }
    rows
}

#[test]
fn every_bad_work_request_gives_its_typed_error_on_the_host() {
    let mut fx = Fx::new();
    run("work requests, host", &mut fx, wr_rows());
}
