//! Raw WQEs (`mlx5dv_wr_raw_wqe`) on mlx5 hardware, mixed with normal work
//! requests on one RC QP.
//!
//! Ported from rdma-core's `tests/test_mlx5_raw_wqe.py` (`RawWqeTest`); the
//! test names the original it ports and keeps its assertions. One more
//! test, not a port, posts a gather list that mixes an inline segment with
//! pointer segments, as UCX does. Data is
//! checked byte for byte, and every completion's status, `wr_id` and opcode
//! (`IBV_WC_DRIVER2` for a raw WQE, whatever its opcode, as
//! mlx5dv_wr_post(3) says).
//!
//! This test needs an mlx5 (ConnectX) device: it runs only where one is
//! present, and what it checks counts as verified on hardware only from
//! such a run. It is `#[ignore]`d; run it with
//! `MLX5DV_TEST_MLX5_DEVICE=mlx5_0 cargo test --test mlx5_hw_raw_wqe -- --ignored`.
//! Without the variable it fails. Where the device refuses a QP with the
//! raw WQE builder as unsupported (where the original skips), it fails
//! naming that, unless `MLX5DV_TEST_ALLOW_MISSING_CAPS=1` is set: then it
//! prints that line and returns.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::wqe::{Opcode, WqeBuilder};
use mlx5dv::*;
use support::hw::*;
use support::rig::{assert_wc, WAIT};

/// Iterations (`self.iters` in `RawWqeTest.setUp`): more than the send
/// queue holds, so the WQEs wrap around it.
const ITERS: u64 = 10;

/// Ports `test_mixed_raw_wqe_traffic`: on RC QPs with a send queue of 4
/// (`Mlx5RawWqeResources.create_qp_cap`), ten sends alternate between a raw
/// WQE (control segment: `MLX5_OPCODE_SEND`, `MLX5_WQE_CTRL_CQ_UPDATE`, DS
/// 3; two data segments, each half of the client's region) and a normal
/// signalled send of the whole region. The client's region is refilled
/// before each (`s` before a raw WQE, `c` before a normal send); every
/// send completes (a raw WQE with `IBV_WC_DRIVER2`), the server receives
/// the whole region, and its memory then holds exactly that fill.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn mixed_raw_wqe_traffic() {
    let ctx = open();
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 0,
    };
    let Some(mut p) = RcPair::new(&ctx, caps, SendOps::SEND, Mlx5SendOps::RAW_WQE, MSG) else {
        return;
    };
    let (client, server) = (&mut p.a, &mut p.b);

    let half = (MSG / 2) as u32;
    let (lkey, addr) = (client.mr.lkey(), client.mr.addr());
    let wqe = WqeBuilder::new(Opcode::Send, client.qp.qp_num())
        .signaled()
        .data_seg(half, lkey, addr)
        .data_seg(half, lkey, addr + u64::from(half))
        .build()
        .unwrap();
    assert_eq!(wqe.ds(), 3, "{wqe:?}");

    for i in 0..ITERS {
        let raw = i % 2 == 0;
        let fill_byte = if raw { b's' } else { b'c' };
        fill(&mut client.mr, .., fill_byte);
        server.mr.fill(.., 0).unwrap();
        unsafe {
            server
                .qp
                .post_recv(100 + i, &[server.mr.sge(0..MSG).unwrap()])
        }
        .unwrap();

        let mr = &client.mr;
        let wcs = client
            .qp
            .post_and_wait(&mut client.send_cq, WAIT, |b| {
                if raw {
                    // The WQE names the client's region, which is borrowed
                    // (`mr`) and unchanged until post_and_wait has its
                    // completion.
                    unsafe { b.wr(i).raw_wqe(&wqe) }
                } else {
                    b.wr(i).send().sge(mr.sge(0..MSG)?)
                }
            })
            .unwrap_or_else(|e| panic!("iteration {i} (raw: {raw}): {e}"));
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        let opcode = if raw {
            WcOpcode::RAW_WQE
        } else {
            WcOpcode::SEND
        };
        assert_wc(&wcs[0], i, opcode);

        let rx = server.recv_cq.wait(1, WAIT).unwrap();
        assert_wc(&rx[0], 100 + i, WcOpcode::RECV);
        assert_eq!(rx[0].byte_len as usize, MSG, "{:?}", rx[0]);
        let got = server.mr.to_vec(..).unwrap();
        assert!(
            got.iter().all(|&b| b == fill_byte),
            "iteration {i} (raw: {raw}): the server received {:?}, expected {MSG} x {:?}",
            String::from_utf8_lossy(&got),
            fill_byte as char
        );
    }
}

/// Not a port: a send whose data segments are an inline header segment
/// then two pointer segments, as UCX's `am_zcopy` writes them on
/// `rc_mlx5` (libmlx5 itself never mixes the two; the PRM allows any
/// sequence). The message is the header followed by each pointer
/// segment's bytes in WQE order: the second segment names bytes that come
/// before the first's in the client's region, so an order that followed
/// the addresses would show. The server receives exactly that, byte for
/// byte, and nothing past it.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn inline_header_then_two_pointer_segments() {
    let ctx = open();
    let caps = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let Some(mut p) = RcPair::new(&ctx, caps, SendOps::SEND, Mlx5SendOps::RAW_WQE, MSG) else {
        return;
    };
    let (client, server) = (&mut p.a, &mut p.b);

    let payload: Vec<u8> = (0..MSG).map(|i| (i * 7 + 3) as u8).collect();
    client.mr.write_at(0, &payload).unwrap();
    let header = b"am-hdr:0123456789";
    let (first, second) = (600..900, 100..300);
    let (lkey, addr) = (client.mr.lkey(), client.mr.addr());
    let seg = |r: &std::ops::Range<usize>| (r.len() as u32, lkey, addr + r.start as u64);
    let ((l1, k1, a1), (l2, k2, a2)) = (seg(&first), seg(&second));
    let wqe = WqeBuilder::new(Opcode::Send, client.qp.qp_num())
        .signaled()
        .inline_data_seg(header)
        .data_seg(l1, k1, a1)
        .data_seg(l2, k2, a2)
        .build()
        .unwrap();
    // Control, the header (4 + 17 bytes: two units), two pointers.
    assert_eq!(wqe.ds(), 1 + 2 + 2, "{wqe:?}");

    server.mr.fill(.., 0).unwrap();
    unsafe { server.qp.post_recv(7, &[server.mr.sge(0..MSG).unwrap()]) }.unwrap();
    let wcs = client
        .qp
        .post_and_wait(&mut client.send_cq, WAIT, |b| {
            // The WQE names the client's region, which is borrowed and
            // unchanged until post_and_wait has its completion.
            unsafe { b.wr(1).raw_wqe(&wqe) }
        })
        .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_wc(&wcs[0], 1, WcOpcode::RAW_WQE);

    let mut want = header.to_vec();
    want.extend_from_slice(&payload[first]);
    want.extend_from_slice(&payload[second]);
    let rx = server.recv_cq.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], 7, WcOpcode::RECV);
    assert_eq!(rx[0].byte_len as usize, want.len(), "{:?}", rx[0]);
    let got = server.mr.to_vec(..).unwrap();
    assert_eq!(&got[..want.len()], &want[..], "the message");
    assert!(
        got[want.len()..].iter().all(|&b| b == 0),
        "bytes past the message were written"
    );
}
