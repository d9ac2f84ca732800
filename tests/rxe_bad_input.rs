//! The bad-input table, device half: the inputs whose limits only the
//! device knows (CQ size, QP capabilities, SRQ sizes, ports, GID indices,
//! RDMA-atomic depths, access flags, send-queue depth), at 0, the limit,
//! one past it and the type's maximum, on a real device; and the crate's
//! own checks once more against real objects. Each row must give its typed
//! error (a `Verbs` error from the kernel for the device's limits), or
//! succeed at the limit, never panic.
//!
//! Run by `scripts/test` in the guest with `MLX5DV_TEST_DEVICE=rxe0`. On
//! soft-RoCE every mlx5 object is `Unsupported`; those rows say so. On an
//! mlx5 device those objects are made, and the rows whose limits libmlx5
//! reckons differently from the device attributes (send WQEs counted in
//! 64-byte basic blocks, receive SGEs against the largest receive WQE, an
//! address vector built without the kernel) expect what libmlx5 44 does;
//! each such row says why.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use support::rig::{self, Pair, MR_LEN, WAIT};
use support::table::{row, run, Expect, Row};
use Expect::*;

/// A connected pair, with the device's attributes and one more CQ.
struct Dev {
    p: Pair,
    attr: DeviceAttr,
    port: PortAttr,
    cq: CompletionQueue,
}

/// A new RC QP in RESET on the pair's PD, with default capabilities.
fn fresh(d: &Dev) -> RcQp {
    QpBuilder::rc(&d.p.pd, &d.cq, &d.cq)
        .build()
        .expect("create RC QP")
}

/// A valid endpoint to connect to: B's.
fn peer(d: &Dev) -> Endpoint {
    d.p.b.qp.endpoint(0x4321, &d.p.opts).expect("endpoint B")
}

fn device_rows<'a>(d: &Dev) -> Vec<Row<'a, Dev>> {
    let mut rows: Vec<Row<'a, Dev>> = Vec::new();
    let name = d.p.ctx.name().to_string();
    for bad in [
        String::new(),
        format!("{name}x"),
        format!(" {name}"),
        format!("{name}\0"),
        name.to_uppercase(),
    ] {
        rows.push(row(
            format!("Context::open({bad:?})"),
            DeviceNotFound,
            move |_: &mut Dev| Context::open(&bad).map(drop),
        ));
    }
    let ports = d.attr.phys_port_cnt;
    for (port, expect) in [
        (0, Verbs("ibv_query_port")),
        (1, Ok),
        (ports, Ok),
        (ports + 1, Verbs("ibv_query_port")),
        (u8::MAX, Verbs("ibv_query_port")),
    ] {
        rows.push(row(
            format!("query_port({port})"),
            expect,
            move |d: &mut Dev| d.p.ctx.query_port(port).map(drop),
        ));
    }
    let tbl = u32::try_from(d.port.gid_tbl_len).unwrap();
    for (port, index, expect) in [
        (1, 0, Ok),
        (1, tbl - 1, Ok),
        (1, tbl, Verbs("ibv_query_gid")),
        (1, i32::MAX as u32, Verbs("ibv_query_gid")),
        (1, i32::MAX as u32 + 1, OutOfRange("GID index")),
        (1, u32::MAX, OutOfRange("GID index")),
        (0, 0, Verbs("ibv_query_gid")),
        (ports + 1, 0, Verbs("ibv_query_gid")),
    ] {
        rows.push(row(
            format!("gid(port {port}, index {index:#x})"),
            expect,
            move |d: &mut Dev| {
                let got = d.p.ctx.gid(port, index).map(drop);
                // ibv_query_gid(3) returns -1 and sets errno: the error must
                // carry errno's cause, not the -1 read as errno 1 (EPERM).
                if let Err(e) = &got {
                    assert!(
                        e.errno() != Some(libc::EPERM),
                        "ibv_query_gid's -1 reported as errno 1 (EPERM): {e}"
                    );
                }
                got
            },
        ));
    }
    let mlx5 = d.p.ctx.is_mlx5();
    rows.push(row(
        "mlx5_caps",
        if mlx5 { Ok } else { Unsupported },
        |d: &mut Dev| d.p.ctx.mlx5_caps().map(drop),
    ));
    let max_cqe = d.attr.max_cqe;
    for (n, expect) in [
        (0, OutOfRange("CQ entries")),
        (1, Ok),
        (max_cqe, Ok),
        (max_cqe + 1, Verbs("ibv_create_cq_ex")),
        (i32::MAX as u32, Verbs("ibv_create_cq_ex")),
        (u32::MAX, OutOfRange("CQ entries")),
    ] {
        rows.push(row(
            format!("CompletionQueue::new({n}), device max_cqe {max_cqe}"),
            expect,
            move |d: &mut Dev| CompletionQueue::new(&d.p.ctx, n).map(drop),
        ));
    }
    rows
}

fn qp_cap_rows<'a>(d: &Dev) -> Vec<Row<'a, Dev>> {
    type Set = fn(&mut QpCaps, u32);
    let (wr, sge) = (d.attr.max_qp_wr, d.attr.max_sge);
    let fields: [(&str, Set, u32); 4] = [
        ("max_send_wr", |c, v| c.max_send_wr = v, wr),
        ("max_recv_wr", |c, v| c.max_recv_wr = v, wr),
        ("max_send_sge", |c, v| c.max_send_sge = v, sge),
        ("max_recv_sge", |c, v| c.max_recv_sge = v, sge),
    ];
    let mut rows: Vec<Row<'a, Dev>> = Vec::new();
    let mlx5 = d.p.ctx.is_mlx5();
    for (field, set, limit) in fields {
        // On mlx5, libmlx5 44 (mlx5_calc_sq_size) counts the send queue in
        // 64-byte basic blocks against max_qp_wr, and a WQE of these
        // default caps (4 SGEs, 64 bytes inline) takes more than one: the
        // device limit itself does not fit. Receive SGEs are checked
        // against the largest receive WQE (max_rq_desc_sz, 512 bytes on a
        // ConnectX: 32 SGEs), not against max_sge (the smaller of the send
        // and receive limits), and the kernel does not check a user QP's:
        // one past max_sge is accepted.
        let at_limit = if mlx5 && field == "max_send_wr" {
            Verbs("ibv_create_qp_ex")
        } else {
            Ok
        };
        let past_limit = if mlx5 && field == "max_recv_sge" {
            Ok
        } else {
            Verbs("ibv_create_qp_ex")
        };
        for (value, expect) in [
            // The man page sets no floor: the device decides.
            (0, Any),
            (limit, at_limit),
            (limit + 1, past_limit),
            (u32::MAX, Verbs("ibv_create_qp_ex")),
        ] {
            rows.push(row(
                format!("RC QP {field} = {value:#x}, device limit {limit:#x}"),
                expect,
                move |d: &mut Dev| {
                    let mut caps = QpCaps::default();
                    set(&mut caps, value);
                    QpBuilder::rc(&d.p.pd, &d.cq, &d.cq)
                        .caps(caps)
                        .build()
                        .map(drop)
                },
            ));
        }
    }
    for (value, expect) in [
        (0, Ok),
        (1 << 20, Verbs("ibv_create_qp_ex")),
        // libmlx5 44 (mlx5_calc_send_wqe) adds 4 to max_inline_data in
        // size_t and keeps the sum in an int: u32::MAX wraps to a 16-byte
        // inline segment and the QP is made, reporting the inline size its
        // WQE really has.
        (u32::MAX, if mlx5 { Ok } else { Verbs("ibv_create_qp_ex") }),
    ] {
        rows.push(row(
            format!("RC QP max_inline_data = {value:#x}"),
            expect,
            move |d: &mut Dev| {
                let caps = QpCaps {
                    max_inline_data: value,
                    ..QpCaps::default()
                };
                let qp = QpBuilder::rc(&d.p.pd, &d.cq, &d.cq).caps(caps).build()?;
                let got = qp.caps().max_inline_data;
                assert!(
                    got <= 1024,
                    "the QP reports max_inline_data {got:#x}, more than a WQE holds"
                );
                Result::Ok(())
            },
        ));
    }
    rows.push(row(
        "RC QP mkey_entries(u16::MAX, u16::MAX): a WQE no device has",
        Verbs("ibv_create_qp_ex"),
        |d: &mut Dev| {
            QpBuilder::rc(&d.p.pd, &d.cq, &d.cq)
                .mkey_entries(u16::MAX, u16::MAX)
                .build()
                .map(drop)
        },
    ));
    rows
}

fn object_rows<'a>(d: &Dev) -> Vec<Row<'a, Dev>> {
    let mut rows: Vec<Row<'a, Dev>> = Vec::new();
    let mrl = "memory region length";
    let lw = AccessFlags::LOCAL_WRITE;
    for (len, access, expect) in [
        (0, lw, OutOfRange(mrl)),
        (1, lw, Ok),
        (usize::MAX, lw, OutOfRange(mrl)),
        (1 << 62, lw, Verbs("alloc_zeroed")),
        // ibv_reg_mr(3): remote write or atomic access needs local write.
        (4096, AccessFlags::REMOTE_WRITE, Verbs("ibv_reg_mr")),
        (4096, AccessFlags::REMOTE_ATOMIC, Verbs("ibv_reg_mr")),
        (4096, AccessFlags::from_bits_retain(1 << 31), Refused),
    ] {
        rows.push(row(
            format!("MemoryRegion::new({len:#x} bytes, {access:?})"),
            expect,
            move |d: &mut Dev| MemoryRegion::new(&d.p.pd, len, access).map(drop),
        ));
    }
    let sge = d.attr.max_sge;
    let srq = "SRQ max_wr / max_sge";
    let mlx5 = d.p.ctx.is_mlx5();
    for (wr, sges, expect) in [
        (0, 1, OutOfRange(srq)),
        (1, 0, OutOfRange(srq)),
        (1, 1, Ok),
        (u32::MAX, 1, Verbs("ibv_create_srq")),
        // libmlx5 44 (mlx5_create_srq) checks SGEs against the largest
        // receive WQE (max_rq_desc_sz / 16: 32 on a ConnectX), not max_sge.
        (1, sge + 1, if mlx5 { Ok } else { Verbs("ibv_create_srq") }),
        (1, u32::MAX, Verbs("ibv_create_srq")),
    ] {
        rows.push(row(
            format!("SharedReceiveQueue::new(max_wr {wr:#x}, max_sge {sges:#x})"),
            expect,
            move |d: &mut Dev| SharedReceiveQueue::new(&d.p.pd, wr, sges).map(drop),
        ));
    }
    let ports = d.attr.phys_port_cnt;
    let gid_index = d.p.opts.gid_index;
    for (port, sgid, expect) in [
        (0, gid_index, OutOfRange("port number")),
        (1, gid_index, Ok),
        (ports + 1, gid_index, Verbs("ibv_create_ah")),
        (u8::MAX, gid_index, Verbs("ibv_create_ah")),
        // On an InfiniBand port libmlx5 builds the address vector in user
        // space (mlx5_create_ah) and never looks the source GID up: an
        // index past the table is the device's to refuse when it sends.
        (
            1,
            Some(u8::MAX),
            if mlx5 && d.port.link_layer == LinkLayer::InfiniBand {
                Ok
            } else {
                Verbs("ibv_create_ah")
            },
        ),
    ] {
        rows.push(row(
            format!("AddressHandle::new(port {port}, sgid_index {sgid:?})"),
            expect,
            move |d: &mut Dev| {
                let dgid = d.p.ctx.gid(1, u32::from(gid_index.unwrap_or(0)))?;
                let attr = AhAttr {
                    port,
                    dlid: d.port.lid,
                    sl: 0,
                    grh: sgid.map(|sgid_index| Grh {
                        dgid,
                        sgid_index,
                        hop_limit: 64,
                        traffic_class: 0,
                        flow_label: 0,
                    }),
                };
                AddressHandle::new(&d.p.pd, &attr).map(drop)
            },
        ));
    }
    for (n, expect) in [
        (0, OutOfRange("mkey max_entries")),
        (1, if mlx5 { Ok } else { Unsupported }),
        (u16::MAX, if mlx5 { Ok } else { Unsupported }),
    ] {
        rows.push(row(
            format!("Mkey::new(max_entries {n})"),
            expect,
            move |d: &mut Dev| match Mkey::new(&d.p.pd, n, false) {
                // On mlx5 the firmware decides how many translation entries
                // an indirect mkey may have (CREATE_MKEY fails beyond):
                // either answer is right for the largest request.
                Err(Error::Verbs {
                    call: "mlx5dv_create_mkey",
                    ..
                }) if n == u16::MAX && d.p.ctx.is_mlx5() => Result::Ok(()),
                r => r.map(drop),
            },
        ));
    }
    let streams = "DCI streams log_num_concurent / log_num_errored";
    // On mlx5, libmlx5 checks the request against the device's DCI stream
    // caps (EINVAL beyond).
    let streams_caps = if mlx5 {
        d.p.ctx.mlx5_caps().ok().and_then(|c| c.dci_streams_caps)
    } else {
        None
    };
    let within = |c: u8, e: u8| {
        streams_caps.is_some_and(|s| c <= s.max_log_num_concurent && e <= s.max_log_num_errored)
    };
    let on_mlx5 = |c: u8, e: u8| match (mlx5, within(c, e)) {
        (false, _) => Unsupported,
        (true, true) => Ok,
        (true, false) => Verbs("mlx5dv_create_qp"),
    };
    for (c, e, expect) in [
        (0, 0, on_mlx5(0, 0)),
        (16, 16, on_mlx5(16, 16)),
        (17, 0, OutOfRange(streams)),
        (0, 17, OutOfRange(streams)),
        (u8::MAX, u8::MAX, OutOfRange(streams)),
    ] {
        rows.push(row(
            format!("DCI with dci_streams({c}, {e})"),
            expect,
            move |d: &mut Dev| {
                QpBuilder::dci(&d.p.pd, &d.cq)
                    .dci_streams(c, e)
                    .build()
                    .map(drop)
            },
        ));
    }
    let unsupported_unless_mlx5 = if mlx5 { Ok } else { Unsupported };
    rows.push(row(
        "DCI without streams",
        unsupported_unless_mlx5,
        |d: &mut Dev| QpBuilder::dci(&d.p.pd, &d.cq).build().map(drop),
    ));
    rows.push(row("DCI with MR_LIST", InvalidArgument, |d: &mut Dev| {
        QpBuilder::dci(&d.p.pd, &d.cq)
            .mlx5_send_ops(Mlx5SendOps::MR_LIST)
            .build()
            .map(drop)
    }));
    for ops in [
        Mlx5SendOps::MEMCPY,
        Mlx5SendOps::RAW_WQE,
        Mlx5SendOps::all(),
    ] {
        // Without DMA MMO (max_wr_memcpy_length 0) libmlx5 refuses MEMCPY
        // with EOPNOTSUPP.
        let memcpy = d.p.ctx.mlx5_caps().is_ok_and(|c| c.memcpy_supported());
        let expect = if ops.contains(Mlx5SendOps::MEMCPY) && !memcpy {
            Unsupported
        } else {
            unsupported_unless_mlx5
        };
        rows.push(row(
            format!("RC QP with {ops:?}"),
            expect,
            move |d: &mut Dev| {
                QpBuilder::rc(&d.p.pd, &d.cq, &d.cq)
                    .mlx5_send_ops(ops)
                    .build()
                    .map(drop)
            },
        ));
    }
    rows.push(row("Dct::new", unsupported_unless_mlx5, |d: &mut Dev| {
        let srq = SharedReceiveQueue::new(&d.p.pd, 16, 1)?;
        Dct::new(&d.p.pd, &d.cq, &srq, 0xC0FFEE).map(drop)
    }));
    rows
}

/// Connecting: PSNs, retry counts, ports, GID indices, atomic depths.
fn connect_rows<'a>(d: &Dev) -> Vec<Row<'a, Dev>> {
    let mut rows: Vec<Row<'a, Dev>> = Vec::new();
    let psn = "PSN";
    let retry = "retry_cnt / rnr_retry";
    for (p, expect) in [
        (0, Ok),
        (0x00FF_FFFF, Ok),
        (0x0100_0000, OutOfRange(psn)),
        (u32::MAX, OutOfRange(psn)),
    ] {
        rows.push(row(
            format!("endpoint(PSN {p:#x})"),
            expect,
            move |d: &mut Dev| fresh(d).endpoint(p, &d.p.opts).map(drop),
        ));
    }
    // Input breaking a man-page rule is refused before any C call: a
    // refused `connect` must leave the QP in RESET, so that a corrected
    // `connect` on it succeeds.
    type Tweak = fn(&mut Endpoint, &mut u32, &mut ConnectOptions);
    let cases: [(&str, Tweak, Expect); 5] = [
        (
            "remote PSN 2^24",
            |e, _, _| e.psn = 1 << 24,
            OutOfRange(psn),
        ),
        ("local PSN 2^24", |_, l, _| *l = 1 << 24, OutOfRange(psn)),
        ("retry_cnt 8", |_, _, o| o.retry_cnt = 8, OutOfRange(retry)),
        ("rnr_retry 8", |_, _, o| o.rnr_retry = 8, OutOfRange(retry)),
        (
            "rnr_retry 255",
            |_, _, o| o.rnr_retry = u8::MAX,
            OutOfRange(retry),
        ),
    ];
    for (what, tweak, expect) in cases {
        rows.push(row(
            format!("connect({what}) refuses it with the QP still in RESET"),
            expect,
            move |d: &mut Dev| {
                let qp = fresh(d);
                let (mut remote, mut local, mut opts) = (peer(d), 0x1234, d.p.opts);
                tweak(&mut remote, &mut local, &mut opts);
                let got = qp.connect(&remote, local, &opts);
                let state = qp.state()?;
                assert!(
                    state == QpState::Reset,
                    "the QP moved to {state:?} before the input was refused ({got:?})"
                );
                got
            },
        ));
    }
    for (retry_cnt, expect) in [(0, Ok), (7, Ok)] {
        rows.push(row(
            format!("connect(retry_cnt {retry_cnt}, rnr_retry {retry_cnt})"),
            expect,
            move |d: &mut Dev| {
                let opts = d.p.opts.retry_cnt(retry_cnt).rnr_retry(retry_cnt);
                fresh(d).connect(&peer(d), 0x00FF_FFFF, &opts)
            },
        ));
    }
    let ports = d.attr.phys_port_cnt;
    for port in [0, ports + 1, u8::MAX] {
        rows.push(row(
            format!("connect(port {port})"),
            Verbs("ibv_modify_qp"),
            move |d: &mut Dev| {
                let opts = d.p.opts.port(port);
                fresh(d).connect(&peer(d), 0, &opts)
            },
        ));
        rows.push(row(
            format!("endpoint(port {port})"),
            Verbs("ibv_query_port"),
            move |d: &mut Dev| {
                let opts = d.p.opts.port(port);
                fresh(d).endpoint(0, &opts).map(drop)
            },
        ));
    }
    let tbl = u8::try_from(d.port.gid_tbl_len).unwrap_or(u8::MAX);
    for index in [tbl, u8::MAX] {
        rows.push(row(
            format!(
                "connect(gid_index {index}), table of {}",
                d.port.gid_tbl_len
            ),
            Verbs("ibv_modify_qp"),
            move |d: &mut Dev| {
                let opts = d.p.opts.gid_index(Some(index));
                fresh(d).connect(&peer(d), 0, &opts)
            },
        ));
    }
    let (init, dest) = (d.attr.max_qp_init_rd_atom, d.attr.max_qp_rd_atom);
    type Atom = fn(&mut ConnectOptions, u8);
    let depths: [(&str, Atom, u32); 2] = [
        ("max_rd_atomic", |o, v| o.max_rd_atomic = v, init),
        ("max_dest_rd_atomic", |o, v| o.max_dest_rd_atomic = v, dest),
    ];
    for (field, set, limit) in depths {
        let mut values = vec![(u8::try_from(limit).unwrap_or(u8::MAX), Ok)];
        if let Result::Ok(over) = u8::try_from(limit + 1) {
            // Soft-RoCE refuses an initiator depth over its limit but
            // accepts any responder depth: the device decides.
            let expect = if field == "max_rd_atomic" {
                Verbs("ibv_modify_qp")
            } else {
                Any
            };
            values.push((over, expect));
        }
        for (value, expect) in values {
            rows.push(row(
                format!("connect({field} {value}), device limit {limit}"),
                expect,
                move |d: &mut Dev| {
                    let mut opts = d.p.opts;
                    set(&mut opts, value);
                    fresh(d).connect(&peer(d), 0, &opts)
                },
            ));
        }
    }
    // 5-bit and 4-bit fields of the IB spec that ibv_modify_qp(3) does
    // not bound: whatever the device says, no panic.
    type Opt = fn(&mut ConnectOptions);
    let unbounded: [(&str, Opt); 3] = [
        ("timeout 32", |o| o.timeout = 32),
        ("min_rnr_timer 32", |o| o.min_rnr_timer = 32),
        ("sl 16", |o| o.sl = 16),
    ];
    for (what, set) in unbounded {
        rows.push(row(format!("connect({what})"), Any, move |d: &mut Dev| {
            let mut opts = d.p.opts;
            set(&mut opts);
            fresh(d).connect(&peer(d), 0, &opts)
        }));
    }
    rows
}

/// Work requests on the connected pair, against its real capabilities.
fn wr_rows<'a>(d: &Dev) -> Vec<Row<'a, Dev>> {
    let mut rows: Vec<Row<'a, Dev>> = Vec::new();
    let caps = d.p.a.qp.caps();
    let depth = caps.max_send_wr as usize;
    // A batch larger than the send queue's reported depth is refused at
    // the work request past it, before anything is posted.
    let refused = SendQueueFull;
    for (n, expect) in [(depth, Ok), (depth + 1, refused), (4 * depth, refused)] {
        rows.push(row(
            format!("a batch of {n} writes, send queue depth {depth}"),
            expect,
            move |d: &mut Dev| {
                let remote = d.p.b.mr.remote(0..8)?;
                let (qp, cq, mr) = (&mut d.p.a.qp, &mut d.p.a.send_cq, &d.p.a.mr);
                let wcs = qp.post_and_wait(cq, WAIT, |b| {
                    for i in 0..n {
                        b.wr(i as u64).rdma_write(remote).sge(mr.sge(0..8)?)?;
                    }
                    Result::Ok(())
                })?;
                assert_eq!(wcs.len(), n, "{wcs:?}");
                wcs.iter().try_for_each(|wc| wc.ok().map(drop))
            },
        ));
    }
    let inline = caps.max_inline_data as usize;
    for (len, expect) in [(inline, Ok), (inline + 1, OutOfRange("inline data length"))] {
        rows.push(row(
            format!("rdma_write().inline({len} bytes), QP max_inline_data {inline}"),
            expect,
            move |d: &mut Dev| {
                let remote = d.p.b.mr.remote(..)?;
                let data = rig::pattern(len, 3);
                d.p.a.qp.post_and_wait(&mut d.p.a.send_cq, WAIT, |b| {
                    b.wr(1).rdma_write(remote).inline(&data)
                })?;
                assert_eq!(d.p.b.mr.to_vec(..len).unwrap(), &data[..]);
                Result::Ok(())
            },
        ));
    }
    let sges = caps.max_send_sge as usize;
    for (n, expect) in [(sges, Ok), (sges + 1, OutOfRange("SGE count"))] {
        rows.push(row(
            format!("rdma_write().sge_list({n} SGEs), QP max_send_sge {sges}"),
            expect,
            move |d: &mut Dev| {
                let remote = d.p.b.mr.remote(..)?;
                let mr = &d.p.a.mr;
                let list = (0..n)
                    .map(|i| mr.sge(i * 8..i * 8 + 8))
                    .collect::<Result<Vec<_>>>()?;
                d.p.a
                    .qp
                    .post_and_wait(&mut d.p.a.send_cq, WAIT, |b| {
                        b.wr(1).rdma_write(remote).sge_list(&list)
                    })
                    .map(drop)
            },
        ));
    }
    let recv = caps.max_recv_sge as usize;
    rows.push(row(
        format!("post_recv({} SGEs), QP max_recv_sge {recv}", recv + 1),
        OutOfRange("receive SGE count"),
        move |d: &mut Dev| {
            let mr = &d.p.b.mr;
            let list = (0..=recv)
                .map(|i| mr.sge(i * 8..i * 8 + 8))
                .collect::<Result<Vec<_>>>()?;
            unsafe { d.p.b.qp.post_recv(1, &list) }
        },
    ));
    rows.push(row(
        "SRQ post_recv(2 SGEs), max_sge 1",
        OutOfRange("receive SGE count"),
        |d: &mut Dev| {
            let srq = SharedReceiveQueue::new(&d.p.pd, 4, 1)?;
            let list = [d.p.b.mr.sge(0..8)?, d.p.b.mr.sge(8..16)?];
            unsafe { srq.post_recv(1, &list) }
        },
    ));
    for (len, expect) in [(64, Ok), (65, OutOfRange("work request length"))] {
        rows.push(row(
            format!("rdma_write(64-byte remote).sge({len} bytes)"),
            expect,
            move |d: &mut Dev| {
                let remote = d.p.b.mr.remote(0..64)?;
                let sge = d.p.a.mr.sge(0..len)?;
                d.p.a
                    .qp
                    .post_and_wait(&mut d.p.a.send_cq, WAIT, |b| {
                        b.wr(1).rdma_write(remote).sge(sge)
                    })
                    .map(drop)
            },
        ));
    }
    for (range, expect) in [
        (MR_LEN..MR_LEN, Ok),
        (0..MR_LEN + 1, OutOfRange("range end")),
        (MR_LEN + 1..MR_LEN + 1, OutOfRange("range end")),
    ] {
        rows.push(row(
            format!("MemoryRegion::sge({range:?}) of {MR_LEN}"),
            expect,
            move |d: &mut Dev| d.p.a.mr.sge(range).map(drop),
        ));
    }
    rows.push(row(
        "memcpy on an RC QP of soft-RoCE",
        Unsupported,
        |d: &mut Dev| {
            let (src, dst) = d.p.a.mr.sge_mut(0..72)?.split_at(64)?;
            let (dst, src) = (dst, src.split_at(8)?.0.into_sge());
            d.p.a
                .qp
                .post_and_wait(&mut d.p.a.send_cq, WAIT, |b| b.wr(1).memcpy(dst, src))
                .map(drop)
        },
    ));
    rows
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn every_bad_input_gives_its_typed_error_on_the_device() {
    let p = Pair::new();
    let attr = p.ctx.query_device().expect("query device");
    let port = p.ctx.query_port(1).expect("query port 1");
    let cq = CompletionQueue::new(&p.ctx, 64).expect("CQ");
    let mut d = Dev { p, attr, port, cq };
    let mut rows = device_rows(&d);
    rows.extend(qp_cap_rows(&d));
    rows.extend(object_rows(&d));
    rows.extend(connect_rows(&d));
    rows.extend(wr_rows(&d));
    run(&format!("device {}", d.p.ctx.name()), &mut d, rows);
}
