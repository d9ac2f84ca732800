//! RC traffic through the safe layer on a real RDMA device (soft-RoCE in the
//! test guest): two QPs on one device connected to each other. Every test
//! checks the data byte for byte and each completion's status and opcode.
//!
//! Run by `scripts/test` in the guest with `MLX5DV_TEST_DEVICE=rxe0`;
//! without that variable the tests are ignored, and fail if forced to run.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use std::time::Duration;
use support::rig::*;

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn device_port_and_gid_table() {
    let ctx = open();
    let list = DeviceList::new().unwrap();
    assert!(list.iter().any(|d| d.name() == ctx.name()));
    let attr = ctx.query_device().unwrap();
    assert!(attr.phys_port_cnt >= 1, "{attr:?}");
    assert!(attr.max_qp_wr > 0 && attr.max_sge > 0, "{attr:?}");
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.state, PortState::Active);
    let table = ctx.gid_table().unwrap();
    assert!(!table.is_empty());
    for e in &table {
        assert_eq!(ctx.gid(e.port as u8, e.index).unwrap(), e.gid, "{e:?}");
    }
    if port.link_layer == LinkLayer::Ethernet {
        assert!(
            table.iter().any(|e| e.gid_type == GidType::RoceV2),
            "{table:?}"
        );
    }
    assert!(matches!(
        Context::open("no-such-device"),
        Err(Error::DeviceNotFound { .. })
    ));
    assert!(ctx.query_port(0).is_err());
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rdma_write_lands_byte_for_byte() {
    let mut p = Pair::new();
    let data = pattern(4096, 3);
    p.a.mr.write_at(0, &data).unwrap();
    let remote = p.b.mr.remote(1024..1024 + 4096).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(7).rdma_write(remote).sge(p.a.mr.sge(0..4096)?)
            })
            .unwrap();
    assert_eq!(wcs.len(), 1);
    assert_wc(&wcs[0], 7, WcOpcode::RDMA_WRITE);
    let b = p.b.mr.to_vec(..).unwrap();
    assert_eq!(&b[1024..1024 + 4096], &data[..]);
    assert!(
        b[..1024].iter().all(|&x| x == 0),
        "bytes before the target changed"
    );
    assert!(
        b[1024 + 4096..].iter().all(|&x| x == 0),
        "bytes after the target changed"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rdma_write_with_immediate_reaches_the_peer_with_its_immediate() {
    let mut p = Pair::new();
    let data = pattern(512, 9);
    p.a.mr.write_at(0, &data).unwrap();
    // The immediate consumes a receive at B (its SGE list may be empty).
    unsafe { p.b.qp.post_recv(99, &[]).unwrap() };
    let remote = p.b.mr.remote(0..512).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(8)
                    .rdma_write_imm(remote, 0xDEAD_BEEF)
                    .sge(p.a.mr.sge(0..512)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 8, WcOpcode::RDMA_WRITE);
    let rx = p.b.recv_cq.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], 99, WcOpcode::RECV_RDMA_WITH_IMM);
    assert_eq!(rx[0].imm, Some(0xDEAD_BEEF));
    assert_eq!(rx[0].byte_len, 512);
    assert_eq!(p.b.mr.to_vec(..512).unwrap(), &data[..]);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn send_fills_a_posted_receive() {
    let mut p = Pair::new();
    let data = pattern(1000, 1);
    p.a.mr.write_at(0, &data).unwrap();
    unsafe {
        p.b.qp
            .post_recv(5, &[p.b.mr.sge(2048..4096).unwrap()])
            .unwrap()
    };
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(6).send_imm(42).sge(p.a.mr.sge(0..1000)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 6, WcOpcode::SEND);
    let rx = p.b.recv_cq.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], 5, WcOpcode::RECV);
    assert_eq!(rx[0].byte_len, 1000);
    assert_eq!(rx[0].imm, Some(42));
    assert_eq!(rx[0].qp_num, p.b.qp.qp_num());
    assert_eq!(p.b.mr.to_vec(2048..3048).unwrap(), &data[..]);
    assert!(p.b.mr.to_vec(3048..).unwrap().iter().all(|&x| x == 0));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rdma_read_fetches_the_peers_bytes() {
    let mut p = Pair::new();
    let data = pattern(8192, 5);
    p.b.mr.write_at(0, &data).unwrap();
    let remote = p.b.mr.remote(0..8192).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(11)
                    .rdma_read(remote)
                    .sge(p.a.mr.sge_mut(100..100 + 8192)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 11, WcOpcode::RDMA_READ);
    assert_eq!(wcs[0].byte_len, 8192);
    assert_eq!(p.a.mr.to_vec(100..100 + 8192).unwrap(), &data[..]);
    assert!(p.a.mr.to_vec(..100).unwrap().iter().all(|&x| x == 0));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn inline_send_needs_no_registered_source() {
    let mut p = Pair::new();
    let max = p.a.qp.caps().max_inline_data as usize;
    assert!(max >= 16, "max_inline_data {max}");
    let msg = pattern(max, 77);
    unsafe {
        p.b.qp
            .post_recv(1, &[p.b.mr.sge(0..4096).unwrap()])
            .unwrap()
    };
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| b.wr(2).send().inline(&msg))
            .unwrap();
    assert_wc(&wcs[0], 2, WcOpcode::SEND);
    let rx = p.b.recv_cq.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], 1, WcOpcode::RECV);
    assert_eq!(rx[0].byte_len as usize, max);
    assert_eq!(p.b.mr.to_vec(..max).unwrap(), &msg[..]);

    // An inline RDMA write: the bytes come from the WQE, not from an MR.
    let remote = p.b.mr.remote(8192..8192 + max).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(4).rdma_write(remote).inline(&msg)
            })
            .unwrap();
    assert_wc(&wcs[0], 4, WcOpcode::RDMA_WRITE);
    assert_eq!(p.b.mr.to_vec(8192..8192 + max).unwrap(), &msg[..]);
    assert!(p.b.mr.to_vec(8192 + max..).unwrap().iter().all(|&x| x == 0));

    // One byte over the QP's inline limit is refused before any C call.
    let too_long = vec![0u8; max + 1];
    let err =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| b.wr(3).send().inline(&too_long))
            .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                what: "inline data length",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn atomics_compare_swap_and_fetch_add() {
    let mut p = Pair::new();
    p.b.mr.write_at(64, &100u64.to_ne_bytes()).unwrap();
    let target = p.b.mr.remote(64..72).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                let (old_swap, old_add) = p.a.mr.sge_mut(0..16)?.split_at(8)?;
                b.wr(1).atomic_cmp_swp(target, 100, 500).sge(old_swap)?;
                b.wr(2).atomic_fetch_add(target, 25).sge(old_add)
            })
            .unwrap();
    assert_eq!(wcs.len(), 2);
    assert_wc(&wcs[0], 1, WcOpcode::COMP_SWAP);
    assert_wc(&wcs[1], 2, WcOpcode::FETCH_ADD);
    let a = p.a.mr.to_vec(..).unwrap();
    assert_eq!(
        u64::from_ne_bytes(a[0..8].try_into().unwrap()),
        100,
        "old value of the swap"
    );
    assert_eq!(
        u64::from_ne_bytes(a[8..16].try_into().unwrap()),
        500,
        "old value of the add"
    );
    let b = p.b.mr.to_vec(..).unwrap();
    assert_eq!(u64::from_ne_bytes(b[64..72].try_into().unwrap()), 525);

    // An atomic needs exactly 8 bytes and an aligned target.
    let err =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(3)
                    .atomic_fetch_add(target, 1)
                    .sge(p.a.mr.sge_mut(0..16)?)
            })
            .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_batch_of_64_mixed_work_requests_in_one_complete() {
    let caps = QpCaps {
        max_send_wr: 128,
        ..QpCaps::default()
    };
    let mut p = Pair::with(caps, SendOps::rc_default());
    let src = pattern(MR_LEN, 11);
    p.a.mr.write_at(0, &src).unwrap();
    let peer = pattern(MR_LEN, 200);
    p.b.mr.write_at(32 * 1024, &peer[32 * 1024..]).unwrap();
    // 16 sends need 16 receives at B.
    for i in 0..16u64 {
        let at = 16 * 1024 + i as usize * 256;
        unsafe {
            p.b.qp
                .post_recv(1000 + i, &[p.b.mr.sge(at..at + 256).unwrap()])
                .unwrap()
        };
    }
    let remote = p.b.mr.remote(..).unwrap();
    // wr_id i: 0..32 writes of 256 B into B[0..8K); 32..48 sends;
    // 48..64 reads of B[32K..] into A[48K..].
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                // A[48K..56K) is the reads' destination, borrowed exclusively
                // in 512-byte pieces; the writes and sends read below it.
                let (sources, dests) = p.a.mr.sge_mut(..56 * 1024)?.split_at(48 * 1024)?;
                let mut dests = dests.chunks(512)?;
                for i in 0..64u64 {
                    let i_ = i as usize;
                    match i {
                        0..=31 => {
                            let r = remote.slice(i * 256, 256)?;
                            b.wr(i)
                                .rdma_write(r)
                                .sge(piece(sources, i_ * 256, 256)?.into_sge())?
                        }
                        32..=47 => {
                            let at = 8192 + (i_ - 32) * 256;
                            b.wr(i).send().sge(piece(sources, at, 256)?.into_sge())?
                        }
                        _ => {
                            let k = i_ - 48;
                            let r = remote.slice(32 * 1024 + k as u64 * 512, 512)?;
                            b.wr(i).rdma_read(r).sge(dests.next().unwrap())?
                        }
                    }
                }
                assert_eq!(b.len(), 64);
                Ok(())
            })
            .unwrap();
    assert_eq!(wcs.len(), 64);
    let mut ids: Vec<u64> = wcs.iter().map(|c| c.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..64).collect::<Vec<_>>());
    for wc in wcs {
        let want = match wc.wr_id {
            0..=31 => WcOpcode::RDMA_WRITE,
            32..=47 => WcOpcode::SEND,
            _ => WcOpcode::RDMA_READ,
        };
        assert_wc(wc, wc.wr_id, want);
    }
    let rx = p.b.recv_cq.wait(16, WAIT).unwrap();
    for (k, wc) in rx.iter().enumerate() {
        assert_wc(wc, 1000 + k as u64, WcOpcode::RECV);
        assert_eq!(wc.byte_len, 256);
    }
    let b = p.b.mr.to_vec(..).unwrap();
    assert_eq!(&b[..8192], &src[..8192], "writes");
    assert_eq!(
        &b[16 * 1024..16 * 1024 + 4096],
        &src[8192..8192 + 4096],
        "sends"
    );
    let a = p.a.mr.to_vec(..).unwrap();
    assert_eq!(
        &a[48 * 1024..56 * 1024],
        &peer[32 * 1024..40 * 1024],
        "reads"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn sge_lists_gather_and_scatter_across_two_regions() {
    let mut p = Pair::new();
    let mut second = MemoryRegion::new(&p.pd, 4096, access_all()).unwrap();
    p.a.mr.write_at(0, &pattern(200, 4)).unwrap();
    second.write_at(0, &pattern(100, 90)).unwrap();
    let first = p.a.mr.to_vec(..200).unwrap();
    let other = second.to_vec(..100).unwrap();
    // Gather: A[100..200], second[0..100], A[0..100] → B[0..300).
    let remote = p.b.mr.remote(0..300).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                let sges = [
                    p.a.mr.sge(100..200)?,
                    second.sge(0..100)?,
                    p.a.mr.sge(0..100)?,
                ];
                b.wr(1).rdma_write(remote).sge_list(&sges)
            })
            .unwrap();
    assert_wc(&wcs[0], 1, WcOpcode::RDMA_WRITE);
    let want: Vec<u8> = [&first[100..200], &other[..], &first[0..100]].concat();
    assert_eq!(p.b.mr.to_vec(..300).unwrap(), &want[..]);
    assert!(p.b.mr.to_vec(300..).unwrap().iter().all(|&x| x == 0));

    // Scatter: an RDMA read of B[0..300) into second[1000..1150) and
    // A[5000..5150).
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                let sges = [second.sge_mut(1000..1150)?, p.a.mr.sge_mut(5000..5150)?];
                b.wr(2).rdma_read(remote).sge_list(&sges)
            })
            .unwrap();
    assert_wc(&wcs[0], 2, WcOpcode::RDMA_READ);
    assert_eq!(second.to_vec(1000..1150).unwrap(), &want[..150]);
    assert_eq!(p.a.mr.to_vec(5000..5150).unwrap(), &want[150..]);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn unsafe_complete_then_poll_and_a_dropped_batch_posts_nothing() {
    let mut p = Pair::new();
    p.a.mr.write_at(0, &[0xAB; 64]).unwrap();
    let remote = p.b.mr.remote(0..64).unwrap();
    {
        // Built, then dropped: aborted, nothing reaches the wire.
        let mut batch = p.a.qp.batch();
        batch
            .wr(1)
            .signaled()
            .rdma_write(remote)
            .sge(p.a.mr.sge(0..64).unwrap())
            .unwrap();
        assert_eq!(batch.len(), 1);
    }
    let mut none = Vec::new();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(p.a.send_cq.poll_into(&mut none, 16).unwrap(), 0, "{none:?}");
    assert!(
        p.b.mr.to_vec(..64).unwrap().iter().all(|&x| x == 0),
        "an aborted write landed"
    );

    // The QP is still usable: post with the unsafe complete and poll.
    let mut batch = p.a.qp.batch();
    batch
        .wr(2)
        .signaled()
        .rdma_write(remote)
        .sge(p.a.mr.sge(0..64).unwrap())
        .unwrap();
    // Unsignalled WRs complete silently.
    batch
        .wr(3)
        .rdma_write(remote)
        .sge(p.a.mr.sge(0..64).unwrap())
        .unwrap();
    // SAFETY: the MRs outlive the wait below.
    assert_eq!(unsafe { batch.complete() }.unwrap(), 2);
    let wcs = p.a.send_cq.wait(1, WAIT).unwrap();
    assert_wc(&wcs[0], 2, WcOpcode::RDMA_WRITE);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(p.a.send_cq.poll_into(&mut none, 16).unwrap(), 0, "{none:?}");
    assert_eq!(p.b.mr.to_vec(..64).unwrap(), &[0xAB; 64]);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn error_state_flushes_and_reset_reconnects() {
    let mut p = Pair::new();
    unsafe { p.b.qp.post_recv(40, &[p.b.mr.sge(0..64).unwrap()]).unwrap() };
    p.b.qp.to_error().unwrap();
    assert_eq!(p.b.qp.state().unwrap(), QpState::Err);
    let flushed = p.b.recv_cq.wait(1, WAIT).unwrap();
    assert_eq!(flushed[0].wr_id, 40);
    assert_eq!(flushed[0].status, WcStatus::WR_FLUSH_ERR);
    assert_eq!(flushed[0].status.to_string(), "Work Request Flushed Error");

    p.a.qp.reset().unwrap();
    p.b.qp.reset().unwrap();
    assert_eq!(p.a.qp.state().unwrap(), QpState::Reset);
    p.connect();
    p.a.mr.write_at(0, b"again!!!").unwrap();
    let remote = p.b.mr.remote(0..8).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(41).rdma_write(remote).sge(p.a.mr.sge(0..8)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 41, WcOpcode::RDMA_WRITE);
    assert_eq!(p.b.mr.to_vec(..8).unwrap(), b"again!!!");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn wrong_rkey_is_a_remote_access_error_then_flush_then_recovery() {
    let mut p = Pair::new();
    p.a.mr.write_at(0, &[0x5A; 64]).unwrap();
    let good = p.b.mr.remote(0..64).unwrap();
    let mut bad = good;
    bad.rkey ^= 0x00FF_0000;
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(50).rdma_write(bad).sge(p.a.mr.sge(0..64)?)?;
                b.wr(51).rdma_write(good).sge(p.a.mr.sge(0..64)?)?;
                b.wr(52).rdma_write(good).sge(p.a.mr.sge(0..64)?)
            })
            .unwrap();
    assert_eq!(wcs.len(), 3, "{wcs:?}");
    assert_eq!(wcs[0].wr_id, 50);
    assert_eq!(wcs[0].status, WcStatus::REM_ACCESS_ERR, "{:?}", wcs[0]);
    assert_eq!(wcs[0].status.to_string(), "remote access error");
    assert!(matches!(
        wcs[0].ok(),
        Err(Error::WorkCompletion { wr_id: 50, .. })
    ));
    for (wc, id) in wcs[1..].iter().zip([51, 52]) {
        assert_eq!(
            (wc.wr_id, wc.status),
            (id, WcStatus::WR_FLUSH_ERR),
            "{wc:?}"
        );
    }
    assert_eq!(p.a.qp.state().unwrap(), QpState::Err);
    assert!(
        p.b.mr.to_vec(..64).unwrap().iter().all(|&x| x == 0),
        "a flushed write landed"
    );

    // Recovery: RESET, then INIT → RTR → RTS again, and traffic.
    p.a.qp.reset().unwrap();
    p.b.qp.reset().unwrap();
    p.connect();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(53).rdma_write(good).sge(p.a.mr.sge(0..64)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 53, WcOpcode::RDMA_WRITE);
    assert_eq!(p.b.mr.to_vec(..64).unwrap(), &[0x5A; 64]);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn checks_fail_before_any_c_call() {
    let ops = SendOps::RDMA_WRITE;
    let mut p = Pair::with(QpCaps::default(), ops);
    // An op the QP was not created with.
    let err =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(1).send().sge(p.a.mr.sge(0..8)?)
            })
            .unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    // A range outside the region, at the limit and one past it.
    assert!(p.a.mr.sge(0..MR_LEN).is_ok());
    let err = p.a.mr.sge(0..MR_LEN + 1).unwrap_err();
    assert!(
        matches!(err, Error::OutOfRange { what: "range end", value, .. } if value == MR_LEN as u64 + 1)
    );
    // A write longer than the remote buffer.
    let remote = p.b.mr.remote(0..16).unwrap();
    let err =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(2).rdma_write(remote).sge(p.a.mr.sge(0..17)?)
            })
            .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                what: "work request length",
                ..
            }
        ),
        "{err}"
    );
    // More SGEs than the QP takes.
    let max = p.a.qp.caps().max_send_sge as usize;
    let err =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                let sges: Vec<Sge> = (0..=max).map(|i| p.a.mr.sge(i..i + 1).unwrap()).collect();
                b.wr(3).rdma_write(p.b.mr.remote(..)?).sge_list(&sges)
            })
            .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                what: "SGE count",
                ..
            }
        ),
        "{err}"
    );
    // None of it reached the device, and the QP still works.
    let mut none = Vec::new();
    assert_eq!(p.a.send_cq.poll_into(&mut none, 8).unwrap(), 0);
    p.a.mr.write_at(0, b"fine").unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(4).rdma_write(remote).sge(p.a.mr.sge(0..4)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 4, WcOpcode::RDMA_WRITE);
    assert_eq!(p.b.mr.to_vec(..4).unwrap(), b"fine");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_qp_created_through_the_raw_api_is_driven_by_from_raw() {
    let mut p = Pair::new();
    let mut cq = CompletionQueue::new(&p.ctx, 64).unwrap();
    let raw_cq = unsafe { ffi::ibv_cq_ex_to_cq(cq.as_ptr()) };
    let mut attr = ffi::ibv_qp_init_attr_ex {
        send_cq: raw_cq,
        recv_cq: raw_cq,
        cap: ffi::ibv_qp_cap {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        qp_type: ffi::IBV_QPT_RC,
        comp_mask: ffi::IBV_QP_INIT_ATTR_PD | ffi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        pd: p.pd.as_ptr(),
        send_ops_flags: u64::from(ffi::IBV_QP_EX_WITH_RDMA_WRITE),
        ..Default::default()
    };
    let raw = unsafe { ffi::ibv_create_qp_ex(p.ctx.as_ptr(), &mut attr) };
    let raw = std::ptr::NonNull::new(raw).expect("ibv_create_qp_ex");
    let caps = QpCaps {
        max_send_wr: attr.cap.max_send_wr,
        max_recv_wr: attr.cap.max_recv_wr,
        max_send_sge: attr.cap.max_send_sge,
        max_recv_sge: attr.cap.max_recv_sge,
        max_inline_data: attr.cap.max_inline_data,
    };
    let mut qp =
        unsafe { RcQp::from_raw(raw, &p.pd, &cq, &cq, caps, SendOps::RDMA_WRITE) }.unwrap();
    // Connect it to B in place of A.
    p.b.qp.reset().unwrap();
    let mine = qp.endpoint(0x77, &p.opts).unwrap();
    let theirs = p.b.qp.endpoint(0x88, &p.opts).unwrap();
    qp.connect(&theirs, 0x77, &p.opts).unwrap();
    p.b.qp.connect(&mine, 0x88, &p.opts).unwrap();
    p.a.mr.write_at(0, &pattern(32, 61)).unwrap();
    let remote = p.b.mr.remote(100..132).unwrap();
    let wcs = qp
        .post_and_wait(&mut cq, WAIT, |b| {
            b.wr(70).rdma_write(remote).sge(p.a.mr.sge(0..32)?)
        })
        .unwrap();
    assert_wc(&wcs[0], 70, WcOpcode::RDMA_WRITE);
    assert_eq!(wcs[0].qp_num, raw_qp_num(raw));
    assert_eq!(p.b.mr.to_vec(100..132).unwrap(), &pattern(32, 61)[..]);
    // The handle does not destroy what it did not create: the raw QP is
    // still alive and is destroyed here, once.
    drop(qp);
    assert_eq!(unsafe { ffi::ibv_destroy_qp(raw.as_ptr()) }, 0);
}

fn raw_qp_num(qp: std::ptr::NonNull<ffi::ibv_qp>) -> u32 {
    unsafe { (*qp.as_ptr()).qp_num }
}

/// Posts `n` signalled 8-byte writes from A into `remote`, ids `first`,
/// `first + 1`, ..., and gives them time to complete.
fn post_signaled_writes(p: &mut Pair, remote: RemoteBuf, first: u64, n: u64) {
    let mut batch = p.a.qp.batch();
    for i in 0..n {
        batch
            .wr(first + i)
            .signaled()
            .rdma_write(remote.slice(i * 8, 8).unwrap())
            .sge(p.a.mr.sge(0..8).unwrap())
            .unwrap();
    }
    // SAFETY: the memory the SGEs name is A's region, which lives as long
    // as `p`, past every completion the callers wait for.
    unsafe { batch.complete() }.unwrap();
    std::thread::sleep(Duration::from_millis(200));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn polling_for_more_than_is_there_never_yields_phantom_completions() {
    // Soft-RoCE's next_poll ends the poll itself when the CQ runs dry; a
    // poll that asked for more than was there used to leave the CQ one
    // past its producer, and later polls returned zeroed completions.
    let mut p = Pair::new();
    let remote = p.b.mr.remote(0..64).unwrap();
    let qpn = p.a.qp.qp_num();
    for round in 0..4u64 {
        post_signaled_writes(&mut p, remote, round * 10, round + 1);
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + WAIT;
        while (got.len() as u64) < round + 1 && std::time::Instant::now() < deadline {
            p.a.send_cq.poll_into(&mut got, 32).unwrap();
        }
        let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
        assert_eq!(
            ids,
            (0..=round).map(|i| round * 10 + i).collect::<Vec<_>>(),
            "{got:?}"
        );
        for wc in &got {
            assert_wc(wc, wc.wr_id, WcOpcode::RDMA_WRITE);
            assert_eq!(wc.qp_num, qpn);
        }
        let mut more = Vec::new();
        assert_eq!(
            p.a.send_cq.poll_into(&mut more, 32).unwrap(),
            0,
            "phantom: {more:?}"
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn c_code_polling_through_as_ptr_drains_the_cq_with_the_header_functions() {
    // The header's inline functions (through the sys layer's shims) on the
    // raw CQ, as C code given `as_ptr()` would poll it: `next_poll` until
    // ENOENT, then `end_poll`, twice in a row. On a soft-RoCE provider
    // that overruns the CQ (rdma-core 44 to 54, probed at run time) the
    // CQ's entries poll one completion per provider poll, so neither round
    // loses, repeats or invents a completion, and the handle polls on
    // after it.
    let mut p = Pair::new();
    let remote = p.b.mr.remote(0..64).unwrap();
    let qpn = p.a.qp.qp_num();
    let cq = p.a.send_cq.as_ptr();
    for round in 0..2u64 {
        post_signaled_writes(&mut p, remote, round * 10, 3);
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + WAIT;
        while got.len() < 3 && std::time::Instant::now() < deadline {
            let mut attr = ffi::ibv_poll_cq_attr::default();
            // SAFETY: the handle is live and not polling; the poll is ended
            // below whenever it was started.
            let mut rc = unsafe { ffi::ibv_start_poll(cq, &mut attr) };
            if rc == libc::ENOENT {
                continue;
            }
            assert_eq!(rc, 0, "ibv_start_poll");
            while rc == 0 {
                // SAFETY: a poll is in progress.
                unsafe {
                    got.push((
                        (*cq).wr_id,
                        (*cq).status,
                        ffi::ibv_wc_read_opcode(cq),
                        ffi::ibv_wc_read_qp_num(cq),
                    ));
                    rc = ffi::ibv_next_poll(cq);
                }
            }
            assert_eq!(rc, libc::ENOENT, "ibv_next_poll");
            // SAFETY: ends the poll started above.
            unsafe { ffi::ibv_end_poll(cq) };
        }
        let want: Vec<_> = (0..3)
            .map(|i| {
                (
                    round * 10 + i,
                    ffi::IBV_WC_SUCCESS,
                    ffi::IBV_WC_RDMA_WRITE,
                    qpn,
                )
            })
            .collect();
        assert_eq!(got, want);
        let mut more = Vec::new();
        assert_eq!(
            p.a.send_cq.poll_into(&mut more, 32).unwrap(),
            0,
            "phantom: {more:?}"
        );
    }
    // The handle polls what comes next.
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(99)
                    .rdma_write(remote.slice(0, 8).unwrap())
                    .sge(p.a.mr.sge(0..8).unwrap())
            })
            .unwrap();
    assert_eq!(wcs.len(), 1);
    assert_wc(&wcs[0], 99, WcOpcode::RDMA_WRITE);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_hot_loop_with_batch_flags_unbounded_remotes_and_sges_by_reference() {
    let mut p = Pair::new();
    const N: usize = 32;
    const MSG: usize = 64;
    let data = pattern(N * MSG, 9);
    p.a.mr.write_at(0, &data).unwrap();
    // What C has: one rkey, an address per write, an SGE array.
    let region = p.b.mr.remote(..).unwrap();
    let raddr: Vec<u64> = (0..N)
        .map(|i| region.addr + 8192 + (i * MSG) as u64)
        .collect();
    let sges: Vec<Sge> = (0..N)
        .map(|i| p.a.mr.sge(i * MSG..(i + 1) * MSG).unwrap())
        .collect();
    let mut b = p.a.qp.batch_with(SendFlags::SIGNALED);
    for (i, (sge, &addr)) in sges.iter().zip(&raddr).enumerate() {
        b.wr(100 + i as u64)
            .rdma_write(RemoteBuf::unbounded(addr, region.rkey))
            .sge(sge)
            .unwrap();
    }
    // SAFETY: both regions outlive the polls below.
    assert_eq!(unsafe { b.complete() }.unwrap(), N as u32);

    // Every WR was signalled by the batch's flags: N completions, read in
    // place.
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + WAIT;
    while seen.len() < N && std::time::Instant::now() < deadline {
        p.a.send_cq
            .poll_each(N - seen.len(), |wc| {
                seen.push((wc.wr_id(), wc.status(), wc.opcode(), wc.byte_len()))
            })
            .unwrap();
    }
    let want: Vec<_> = (0..N as u64)
        .map(|i| (100 + i, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE, MSG as u32))
        .collect();
    assert_eq!(seen, want);
    assert_eq!(p.b.mr.to_vec(8192..8192 + N * MSG).unwrap(), &data[..]);

    // Unbounded on this side, bounded by the responder's device: a write
    // past the end of the peer's region is a remote access error.
    let past = RemoteBuf::unbounded(region.addr + region.len - 32, region.rkey);
    let mut b = p.a.qp.batch_with(SendFlags::SIGNALED);
    b.wr(200).rdma_write(past).sge(sges[0]).unwrap();
    // SAFETY: as above.
    unsafe { b.complete() }.unwrap();
    let wcs = p.a.send_cq.wait(1, WAIT).unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (200, WcStatus::REM_ACCESS_ERR),
        "{:?}",
        wcs[0]
    );
    assert!(
        p.b.mr
            .to_vec(MR_LEN - 32..)
            .unwrap()
            .iter()
            .all(|&x| x == 0),
        "the refused write landed"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_limited_batch_is_checked_once_and_refuses_the_work_request_past_it() {
    const AT: usize = 16 * 1024;
    /// The k-th 8 bytes of `mr` to the k-th of `remote` from AT, under
    /// `id`, signalled when `last`.
    fn write<'m>(
        b: &mut WrBatch<'_, 'm, ReliableConnection>,
        mr: &'m MemoryRegion,
        remote: RemoteBuf,
        (id, k, last): (u64, usize, bool),
    ) -> Result<()> {
        let wr = b.wr(id);
        let wr = if last { wr.signaled() } else { wr };
        wr.rdma_write(remote.slice((AT + k * 8) as u64, 8)?)
            .sge(mr.sge(k * 8..k * 8 + 8)?)
    }

    let mut p = Pair::new();
    let depth = p.a.qp.caps().max_send_wr as usize;
    assert!(depth >= 8, "{depth}");
    let data = pattern(depth * 8, 5);
    p.a.mr.write_at(0, &data).unwrap();
    let remote = p.b.mr.remote(..).unwrap();

    // Limited below the queue: one write past the limit is refused before
    // the provider sees it, and the batch posts what it holds.
    let mut b = p.a.qp.batch();
    let err = b.limit(depth + 1).unwrap_err();
    assert!(
        matches!(err, Error::SendQueueFull { batch, depth: d } if batch as usize == depth + 1 && d as usize == depth),
        "{err}"
    );
    b.limit(8).unwrap();
    for k in 0..8 {
        write(&mut b, &p.a.mr, remote, (k as u64, k, k == 7)).unwrap();
    }
    let err = write(&mut b, &p.a.mr, remote, (8, 0, false)).unwrap_err();
    assert!(matches!(err, Error::BatchLimit { limit: 8 }), "{err}");
    assert_eq!(b.len(), 8);
    // SAFETY: both regions outlive the wait below.
    assert_eq!(unsafe { b.complete() }.unwrap(), 8);
    let wcs = p.a.send_cq.wait(1, WAIT).unwrap();
    assert_wc(&wcs[0], 7, WcOpcode::RDMA_WRITE);
    assert_eq!(p.b.mr.to_vec(AT..AT + 64).unwrap(), &data[..64]);

    // Limited to the whole queue: the queue fills, and the work request
    // past it is the full queue's error.
    let mut b = p.a.qp.batch();
    b.limit(depth).unwrap();
    for k in 0..depth {
        write(&mut b, &p.a.mr, remote, (100 + k as u64, k, k + 1 == depth)).unwrap();
    }
    let err = write(&mut b, &p.a.mr, remote, (0, 0, false)).unwrap_err();
    assert!(matches!(err, Error::SendQueueFull { .. }), "{err}");
    // SAFETY: as above.
    assert_eq!(unsafe { b.complete() }.unwrap() as usize, depth);
    let wcs = p.a.send_cq.wait(1, WAIT).unwrap();
    assert_wc(&wcs[0], 100 + depth as u64 - 1, WcOpcode::RDMA_WRITE);
    assert_eq!(p.b.mr.to_vec(AT..AT + depth * 8).unwrap(), &data[..]);
}

/// `len` bytes at `at` of `whole`.
fn piece(whole: SgeMut<'_>, at: usize, len: usize) -> Result<SgeMut<'_>> {
    Ok(whole.split_at(at as u32)?.1.split_at(len as u32)?.0)
}
