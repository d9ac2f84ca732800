//! A memory window between two processes: the test re-runs itself as the
//! owner of the memory, which binds a type 2 window over its region and
//! sends the window's `RemoteBuf` (with its QP's `Endpoint`) over TCP; the
//! test writes and reads through the window, byte for byte, then the
//! owner invalidates it locally and the next write fails with a remote
//! access error. Under one `scripts/mlx5-sim` the two processes are two
//! hosts of the software device's fabric; in the soft-RoCE guest they
//! share its rxe device.
//!
//! Run by `scripts/test` with `MLX5DV_TEST_DEVICE` set; without it the
//! test is ignored, and fails if forced to run.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use support::process::{finish, start_peer, text};
use support::rig::{self, pattern, WAIT};

const OWNER_ENV: &str = "MLX5DV_TEST_MW_OWNER_PORT";
const LIMIT: Duration = Duration::from_secs(60);
const LEN: usize = 8192;

struct Side {
    qp: RcQp,
    cq: CompletionQueue,
    mr: MemoryRegion,
    opts: ConnectOptions,
}

impl Side {
    fn new(access: AccessFlags) -> Side {
        let ctx = rig::open();
        let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
        let cq = CompletionQueue::new(&ctx, 64).expect("create CQ");
        let qp = QpBuilder::rc(&pd, &cq, &cq)
            .send_ops(SendOps::rc_default() | SendOps::BIND_MW | SendOps::LOCAL_INV)
            .build()
            .expect("create RC QP");
        let mr = MemoryRegion::new(&pd, LEN, access).expect("register MR");
        let opts = rig::connect_options(&ctx);
        Side { qp, cq, mr, opts }
    }
}

/// The owner: binds a window over 1024..5120 of its region, hands it out,
/// checks what the test wrote, fills the range for the test's read, then
/// invalidates the window when told.
fn play_owner(port: u16) {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect to the test");
    tcp.set_read_timeout(Some(LIMIT)).expect("read timeout");
    let mut side = Side::new(AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND);
    let mut mw = MemoryWindow::new(side.mr.pd(), MwType::Type2).expect("alloc a type 2 window");
    let rw = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let bind = MwBind::new(&side.mr, 1024..5120, rw).expect("bind");
    // A bind needs RTS: connect first, then bind and send the window.
    let ours = side.qp.endpoint(0x3000, &side.opts).expect("endpoint");
    tcp.write_all(&ours.to_bytes()).expect("send the endpoint");
    let mut theirs = [0; Endpoint::BYTES];
    tcp.read_exact(&mut theirs).expect("the test's endpoint");
    let endpoint = Endpoint::from_bytes(&theirs).expect("an endpoint");
    side.qp.connect_to(&endpoint, &side.opts).expect("connect");
    let mut remote = None;
    let wcs = side
        .qp
        .post_and_wait(&mut side.cq, WAIT, |b| {
            remote = Some(b.wr(1).signaled().bind_mw(&mut mw, &bind)?);
            Ok(())
        })
        .expect("bind the window");
    assert_eq!(
        (wcs[0].status, wcs[0].opcode),
        (WcStatus::SUCCESS, WcOpcode::BIND_MW)
    );
    let remote = remote.unwrap();
    tcp.write_all(&remote.to_bytes()).expect("send the window");
    // The test wrote: check, then fill for its read.
    tcp.read_exact(&mut [0; 1]).expect("the test wrote");
    let bytes = side.mr.to_vec(..).expect("to_vec");
    assert_eq!(&bytes[1024..5120], &pattern(4096, 3)[..], "the write");
    assert!(bytes[..1024].iter().chain(&bytes[5120..]).all(|&x| x == 0));
    side.mr
        .write_at(1024, &pattern(4096, 99))
        .expect("write_at");
    tcp.write_all(b"f").expect("say filled");
    // The test read: invalidate.
    tcp.read_exact(&mut [0; 1]).expect("the test read");
    let wcs = side
        .qp
        .post_and_wait(&mut side.cq, WAIT, |b| {
            b.wr(2).signaled().local_inv(remote.rkey)
        })
        .expect("invalidate");
    assert_eq!(
        (wcs[0].status, wcs[0].opcode),
        (WcStatus::SUCCESS, WcOpcode::LOCAL_INV)
    );
    tcp.write_all(b"i").expect("say invalidated");
    // Stay until the test is done (end of file).
    let _ = tcp.read(&mut [0; 1]);
    assert!(side.mr.to_vec(1024..5120).unwrap() == pattern(4096, 99));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_window_serves_a_peer_process_until_it_is_invalidated() {
    if let Ok(port) = std::env::var(OWNER_ENV) {
        play_owner(port.parse().expect("a TCP port"));
        return;
    }
    let test = "a_window_serves_a_peer_process_until_it_is_invalidated";
    let (child, mut tcp) = start_peer(
        test,
        &[],
        OWNER_ENV,
        |port| port.to_string(),
        LIMIT,
        "the owner",
    );
    let mut side = Side::new(AccessFlags::LOCAL_WRITE);
    let ours = side.qp.endpoint(0x4000, &side.opts).expect("endpoint");
    let mut theirs = [0; Endpoint::BYTES];
    tcp.read_exact(&mut theirs).expect("the owner's endpoint");
    tcp.write_all(&ours.to_bytes()).expect("send the endpoint");
    let endpoint = Endpoint::from_bytes(&theirs).expect("an endpoint");
    side.qp.connect_to(&endpoint, &side.opts).expect("connect");
    let mut window = [0; RemoteBuf::BYTES];
    tcp.read_exact(&mut window).expect("the window");
    let window = RemoteBuf::from_bytes(&window).expect("a remote buffer");
    assert_eq!(window.len, 4096);

    side.mr.write_at(0, &pattern(4096, 3)).unwrap();
    let wcs = side
        .qp
        .post_and_wait(&mut side.cq, WAIT, |b| {
            b.wr(1).rdma_write(window).sge(side.mr.sge(0..4096)?)
        })
        .unwrap();
    rig::assert_wc(&wcs[0], 1, WcOpcode::RDMA_WRITE);
    tcp.write_all(b"w").unwrap();
    tcp.read_exact(&mut [0; 1]).expect("filled");
    let wcs = side
        .qp
        .post_and_wait(&mut side.cq, WAIT, |b| {
            b.wr(2).rdma_read(window).sge(side.mr.sge_mut(4096..8192)?)
        })
        .unwrap();
    rig::assert_wc(&wcs[0], 2, WcOpcode::RDMA_READ);
    assert_eq!(side.mr.to_vec(4096..8192).unwrap(), pattern(4096, 99));
    tcp.write_all(b"r").unwrap();
    tcp.read_exact(&mut [0; 1]).expect("invalidated");
    let wcs = side
        .qp
        .post_and_wait(&mut side.cq, WAIT, |b| {
            b.wr(3).rdma_write(window).sge(side.mr.sge(0..64)?)
        })
        .unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (3, WcStatus::REM_ACCESS_ERR),
        "{:?}",
        wcs[0]
    );
    drop(tcp);
    let out = finish(child, "the owner", LIMIT);
    assert!(out.status.success(), "the owner failed: {}", text(&out));
}
