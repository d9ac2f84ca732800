//! UC traffic through the safe layer on an RDMA device (soft-RoCE in the
//! test guest, or the software mlx5 device): two UC QPs on one device
//! connected to each other. Every test checks the data byte for byte and
//! each completion's status and opcode; the UC cases that differ from RC
//! (a write to a bad rkey, a send without a receive: both dropped at the
//! receiver, successful at the sender) are checked by what arrives after
//! them.
//!
//! Run by `scripts/test` with `MLX5DV_TEST_DEVICE` set; without that
//! variable the tests are ignored, and fail if forced to run.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use std::time::Duration;
use support::rig::*;

/// One side: a UC QP with its own CQs and a region.
struct UcSide {
    qp: UcQp,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    mr: MemoryRegion,
}

/// Two UC QPs on one device, connected to each other.
struct UcPair {
    _pd: ProtectionDomain,
    opts: ConnectOptions,
    a: UcSide,
    b: UcSide,
}

fn uc_side(ctx: &Context, pd: &ProtectionDomain) -> UcSide {
    let send_cq = CompletionQueue::new(ctx, 64).expect("send CQ");
    let recv_cq = CompletionQueue::new(ctx, 64).expect("recv CQ");
    let qp = QpBuilder::uc(pd, &send_cq, &recv_cq)
        .build()
        .expect("create UC QP");
    assert_eq!(qp.send_ops(), SendOps::uc_default());
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mr = MemoryRegion::new(pd, MR_LEN, access).expect("register MR");
    UcSide {
        qp,
        send_cq,
        recv_cq,
        mr,
    }
}

impl UcPair {
    fn new() -> UcPair {
        let ctx = open();
        let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
        // The RC rig's options: their retry and read attributes are not
        // given to a UC QP (the kernel would refuse them).
        let opts = connect_options(&ctx).access(AccessFlags::REMOTE_WRITE);
        let a = uc_side(&ctx, &pd);
        let b = uc_side(&ctx, &pd);
        let ea = a.qp.endpoint(0x1111, &opts).expect("endpoint A");
        let eb = b.qp.endpoint(0x2222, &opts).expect("endpoint B");
        a.qp.connect_to(&eb, &opts).expect("connect A");
        b.qp.connect_to(&ea, &opts).expect("connect B");
        assert_eq!(a.qp.state().unwrap(), QpState::Rts);
        assert_eq!(b.qp.state().unwrap(), QpState::Rts);
        UcPair {
            _pd: pd,
            opts,
            a,
            b,
        }
    }
}

/// Nothing arrives on `cq` within a while (what a dropped message leaves).
fn nothing_arrives(cq: &mut CompletionQueue) {
    std::thread::sleep(Duration::from_millis(300));
    let mut got = Vec::new();
    cq.poll_into(&mut got, 4).unwrap();
    assert!(got.is_empty(), "a dropped message completed: {got:?}");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn uc_rdma_write_lands_byte_for_byte() {
    let mut p = UcPair::new();
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
    // No acknowledgement: the sender's completion does not wait for the
    // data to land, so wait for it here.
    let want = |b: &UcSide| b.mr.to_vec(1024..1024 + 4096).unwrap() == data;
    let deadline = std::time::Instant::now() + WAIT;
    while !want(&p.b) {
        assert!(
            std::time::Instant::now() < deadline,
            "the write never landed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let b = p.b.mr.to_vec(..).unwrap();
    assert!(b[..1024].iter().all(|&x| x == 0), "bytes before changed");
    assert!(
        b[1024 + 4096..].iter().all(|&x| x == 0),
        "bytes after changed"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn uc_write_with_immediate_and_sends_fill_posted_receives() {
    let mut p = UcPair::new();
    let data = pattern(3000, 9);
    p.a.mr.write_at(0, &data).unwrap();
    unsafe {
        p.b.qp.post_recv(21, &[]).unwrap();
        p.b.qp
            .post_recv(22, &[p.b.mr.sge(8192..12288).unwrap()])
            .unwrap();
        p.b.qp
            .post_recv(23, &[p.b.mr.sge(16384..20480).unwrap()])
            .unwrap();
    }
    let remote = p.b.mr.remote(0..3000).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(1)
                    .rdma_write_imm(remote, 0xDEAD_BEEF)
                    .sge(p.a.mr.sge(0..3000)?)?;
                b.wr(2).send().sge(p.a.mr.sge(0..1000)?)?;
                b.wr(3).send_imm(42).sge(p.a.mr.sge(1000..3000)?)
            })
            .unwrap();
    assert_eq!(wcs.len(), 3);
    assert_wc(&wcs[0], 1, WcOpcode::RDMA_WRITE);
    assert_wc(&wcs[1], 2, WcOpcode::SEND);
    assert_wc(&wcs[2], 3, WcOpcode::SEND);
    let rx = p.b.recv_cq.wait(3, WAIT).unwrap().to_vec();
    assert_wc(&rx[0], 21, WcOpcode::RECV_RDMA_WITH_IMM);
    assert_eq!((rx[0].imm, rx[0].byte_len), (Some(0xDEAD_BEEF), 3000));
    assert_wc(&rx[1], 22, WcOpcode::RECV);
    assert_eq!((rx[1].imm, rx[1].byte_len), (None, 1000));
    assert_wc(&rx[2], 23, WcOpcode::RECV);
    assert_eq!((rx[2].imm, rx[2].byte_len), (Some(42), 2000));
    for wc in &rx {
        assert_eq!(wc.qp_num, p.b.qp.qp_num());
    }
    assert_eq!(p.b.mr.to_vec(..3000).unwrap(), &data[..]);
    assert_eq!(p.b.mr.to_vec(8192..9192).unwrap(), &data[..1000]);
    assert_eq!(p.b.mr.to_vec(16384..18384).unwrap(), &data[1000..]);
    assert!(p.b.mr.to_vec(9192..16384).unwrap().iter().all(|&x| x == 0));
    assert!(p.b.mr.to_vec(18384..).unwrap().iter().all(|&x| x == 0));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn uc_send_without_a_receive_is_dropped_not_retried() {
    let mut p = UcPair::new();
    let first = pattern(256, 1);
    let second = pattern(256, 2);
    p.a.mr.write_at(0, &first).unwrap();
    p.a.mr.write_at(256, &second).unwrap();
    // No receive posted at B: the sender still completes successfully.
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(1).send().sge(p.a.mr.sge(0..256)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 1, WcOpcode::SEND);
    nothing_arrives(&mut p.b.recv_cq);
    // The first send is gone (not held for a receive): the next receive
    // gets the second.
    unsafe {
        p.b.qp
            .post_recv(9, &[p.b.mr.sge(0..4096).unwrap()])
            .unwrap()
    };
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(2).send().sge(p.a.mr.sge(256..512)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 2, WcOpcode::SEND);
    let rx = p.b.recv_cq.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], 9, WcOpcode::RECV);
    assert_eq!(rx[0].byte_len, 256);
    assert_eq!(p.b.mr.to_vec(..256).unwrap(), &second[..]);
    assert_eq!(p.b.qp.state().unwrap(), QpState::Rts);
    assert_eq!(p.a.qp.state().unwrap(), QpState::Rts);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn uc_write_to_a_bad_rkey_succeeds_at_the_sender_and_is_dropped() {
    let mut p = UcPair::new();
    let data = pattern(512, 5);
    p.a.mr.write_at(0, &data).unwrap();
    let good = p.b.mr.remote(0..512).unwrap();
    let bad = RemoteBuf {
        rkey: good.rkey ^ 0x00AB_CD00,
        ..good
    };
    // Past the end of B's region, with its own rkey: dropped too.
    let outside = RemoteBuf {
        addr: good.addr + MR_LEN as u64 - 256,
        ..good
    };
    unsafe { p.b.qp.post_recv(5, &[]).unwrap() };
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(1).rdma_write(bad).sge(p.a.mr.sge(0..512)?)?;
                b.wr(2).rdma_write_imm(bad, 7).sge(p.a.mr.sge(0..512)?)?;
                b.wr(3).rdma_write(outside).sge(p.a.mr.sge(0..512)?)
            })
            .unwrap();
    assert_eq!(wcs.len(), 3);
    assert_wc(&wcs[0], 1, WcOpcode::RDMA_WRITE);
    assert_wc(&wcs[1], 2, WcOpcode::RDMA_WRITE);
    assert_wc(&wcs[2], 3, WcOpcode::RDMA_WRITE);
    nothing_arrives(&mut p.b.recv_cq);
    assert!(
        p.b.mr.to_vec(..).unwrap().iter().all(|&x| x == 0),
        "a dropped write landed"
    );
    // B's QP did not go to ERR: a good write with immediate lands, in the
    // receive the dropped one did not take.
    assert_eq!(p.b.qp.state().unwrap(), QpState::Rts);
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(4).rdma_write_imm(good, 8).sge(p.a.mr.sge(0..512)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 4, WcOpcode::RDMA_WRITE);
    let rx = p.b.recv_cq.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], 5, WcOpcode::RECV_RDMA_WITH_IMM);
    assert_eq!((rx[0].imm, rx[0].byte_len), (Some(8), 512));
    assert_eq!(p.b.mr.to_vec(..512).unwrap(), &data[..]);
    assert_eq!(p.b.qp.state().unwrap(), QpState::Rts);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn uc_refuses_reads_atomics_and_invalidate_before_c() {
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let cq = CompletionQueue::new(&ctx, 16).unwrap();
    for op in [
        SendOps::RDMA_READ,
        SendOps::ATOMIC_CMP_AND_SWP,
        SendOps::ATOMIC_FETCH_AND_ADD,
        SendOps::SEND_WITH_INV,
        SendOps::LOCAL_INV,
        SendOps::BIND_MW,
    ] {
        let err = QpBuilder::uc(&pd, &cq, &cq)
            .send_ops(SendOps::uc_default() | op)
            .build()
            .unwrap_err();
        match &err {
            Error::Unsupported { what } => {
                assert!(what.contains("UC QP"), "{op:?}: {what}");
                assert!(what.contains(&format!("{op:?}")), "{op:?}: {what}");
            }
            e => panic!("{op:?}: {e:?}"),
        }
    }
    // A smaller set of UC ops is taken.
    let qp = QpBuilder::uc(&pd, &cq, &cq)
        .send_ops(SendOps::RDMA_WRITE)
        .build()
        .unwrap();
    assert_eq!(qp.send_ops(), SendOps::RDMA_WRITE);
    assert_eq!(qp.state().unwrap(), QpState::Reset);
    // connect_to without an endpoint is refused, leaving it in RESET.
    let opts = connect_options(&ctx);
    let peer = qp.endpoint(1, &opts).unwrap();
    let other = QpBuilder::uc(&pd, &cq, &cq).build().unwrap();
    assert!(matches!(
        other.connect_to(&peer, &opts),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(other.state().unwrap(), QpState::Reset);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn uc_connects_step_by_step_and_again_after_reset() {
    let mut p = UcPair::new();
    let opts = p.opts;
    // RESET, then INIT → RTR → RTS by hand on both sides.
    p.a.qp.reset().unwrap();
    p.b.qp.reset().unwrap();
    let ea = p.a.qp.endpoint(0x33, &opts).unwrap();
    let eb = p.b.qp.endpoint(0x44, &opts).unwrap();
    for (qp, remote, psn) in [(&p.a.qp, &eb, 0x33), (&p.b.qp, &ea, 0x44)] {
        qp.to_init(opts.port, opts.access).unwrap();
        assert_eq!(qp.state().unwrap(), QpState::Init);
        qp.to_rtr(remote, &opts).unwrap();
        assert_eq!(qp.state().unwrap(), QpState::Rtr);
        qp.to_rts(psn, &opts).unwrap();
        assert_eq!(qp.state().unwrap(), QpState::Rts);
    }
    let msg = pattern(64, 4);
    unsafe { p.b.qp.post_recv(1, &[p.b.mr.sge(0..64).unwrap()]).unwrap() };
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| b.wr(1).send().inline(&msg))
            .unwrap();
    assert_wc(&wcs[0], 1, WcOpcode::SEND);
    let rx = p.b.recv_cq.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], 1, WcOpcode::RECV);
    assert_eq!(rx[0].byte_len, 64);
    assert_eq!(p.b.mr.to_vec(..64).unwrap(), &msg[..]);
}
