//! rdma_cm on a real RDMA device (soft-RoCE in the test guest, with the
//! `rdma_ucm` module loaded): connect and accept with private data, data
//! over the connected QP checked byte for byte, reject, timeouts,
//! disconnect events, the drop of a connected id, the event channel's fd;
//! and rdma-core's `rping` against this crate's `rping` example, both
//! ways. (RoCE GID selection without rdma_cm is `tests/rxe_roce.rs`.)
//!
//! The address to use is `MLX5DV_TEST_CM_ADDR`, else the guest's
//! (`MLX5DV_VM_ADDR`), else the IPv4 address of the device's first RoCE v2
//! GID. Run by `scripts/test` in the guest with `MLX5DV_TEST_DEVICE=rxe0`
//! (built with `--features rdma-cm`); without that variable the tests are
//! ignored, and fail if forced to run.

#![cfg(feature = "rdma-cm")]
#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::cm::{CmId, ConnParam, EventChannel};
use mlx5dv::*;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};
use support::examples::example;
use support::rig;

const T: Duration = Duration::from_secs(20);
const LEN: usize = 4096;

/// The IP address of the device under test.
fn addr() -> IpAddr {
    for var in ["MLX5DV_TEST_CM_ADDR", "MLX5DV_VM_ADDR"] {
        if let Ok(a) = std::env::var(var) {
            return a
                .parse()
                .unwrap_or_else(|_| panic!("{var}={a:?} is no IP address"));
        }
    }
    let ctx = rig::open();
    ctx.gid_table()
        .expect("GID table")
        .iter()
        .filter(|e| e.gid_type == GidType::RoceV2)
        .find_map(|e| std::net::Ipv6Addr::from(e.gid.0).to_ipv4_mapped())
        .map(IpAddr::V4)
        .expect("no IPv4 RoCE v2 GID on the device: set MLX5DV_TEST_CM_ADDR")
}

fn at(port: u16) -> SocketAddr {
    SocketAddr::new(addr(), port)
}

/// A connection's verbs objects on an id's device; the QP drops before
/// the region (field order).
struct Side {
    qp: RcQp,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    mr: MemoryRegion,
}

fn side(id: &CmId) -> Side {
    let ctx = id.context().expect("context of the id");
    let pd = ProtectionDomain::new(&ctx).expect("PD");
    let send_cq = CompletionQueue::new(&ctx, 64).expect("send CQ");
    let recv_cq = CompletionQueue::new(&ctx, 64).expect("recv CQ");
    let qp = QpBuilder::rc(&pd, &send_cq, &recv_cq)
        .build()
        .expect("RC QP");
    let mr = MemoryRegion::new(&pd, LEN, rig::access_all()).expect("MR");
    Side {
        qp,
        send_cq,
        recv_cq,
        mr,
    }
}

/// A listener on `port`, bound before any client starts.
fn listener(port: u16) -> CmId {
    let l = CmId::new().expect("listening id");
    l.listen(at(port), 8).expect("rdma_listen");
    l
}

/// An active id with its route resolved to `port`.
fn resolved(port: u16) -> CmId {
    let id = CmId::new().expect("active id");
    id.resolve_addr(None, at(port), Duration::from_secs(5))
        .expect("rdma_resolve_addr");
    id.resolve_route(Duration::from_secs(5))
        .expect("rdma_resolve_route");
    id
}

fn pattern(seed: u8) -> Vec<u8> {
    (0..LEN)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn connect_and_accept_carry_private_data_and_the_qp_carries_data() {
    rig::device_name();
    let l = listener(7401);
    let server = thread::spawn(move || {
        let req = l.get_request(Some(T)).expect("connect request");
        assert!(
            req.private_data().starts_with(b"hello from the client"),
            "{:?}",
            req.private_data()
        );
        let mut s = side(req.id());
        req.id().init_qp(&s.qp).expect("INIT before accept");
        let sge = s.mr.sge(0..LEN).unwrap();
        unsafe { s.qp.post_recv(7, &[sge]).expect("post_recv") };
        let id = req
            .accept(&s.qp, &ConnParam::new().private_data(b"welcome"), T)
            .expect("accept");
        assert!(id.is_connected());
        assert_eq!(s.qp.state().unwrap(), QpState::Rts);
        let wc = s.recv_cq.wait(1, T).expect("receive")[0];
        assert_eq!(wc.status, WcStatus::SUCCESS);
        assert_eq!(wc.wr_id, 7);
        assert_eq!(wc.byte_len as usize, LEN);
        assert_eq!(s.mr.to_vec(..).unwrap(), pattern(1), "the bytes sent");
        // The client writes into the server's region next, then says so.
        let sge = s.mr.sge(0..8).unwrap();
        unsafe { s.qp.post_recv(8, &[sge]).expect("post_recv") };
        let remote = s.mr.remote(..).unwrap();
        (id, s, remote)
    });
    let id = resolved(7401);
    let mut c = side(&id);
    let reply = id
        .connect(
            &c.qp,
            &ConnParam::new().private_data(b"hello from the client"),
            T,
        )
        .expect("connect");
    assert!(reply.starts_with(b"welcome"), "{reply:?}");
    assert_eq!(c.qp.state().unwrap(), QpState::Rts);
    c.mr.write_at(0, &pattern(1)).unwrap();
    let mr = &c.mr;
    let wcs =
        c.qp.post_and_wait(&mut c.send_cq, T, |b| b.wr(1).send().sge(mr.sge(..)?))
            .expect("send");
    assert_eq!(wcs[0].status, WcStatus::SUCCESS);
    let (sid, mut s, remote) = server.join().expect("server thread");
    // An RDMA write into the server's memory, then a send to say it is done.
    c.mr.write_at(0, &pattern(2)).unwrap();
    let mr = &c.mr;
    c.qp.post_and_wait(&mut c.send_cq, T, |b| {
        b.wr(2).rdma_write(remote).sge(mr.sge(..)?)?;
        b.wr(3).send().sge(mr.sge(0..8)?)
    })
    .expect("write and send");
    s.recv_cq.wait(1, T).expect("the done message")[0]
        .ok()
        .unwrap();
    assert_eq!(s.mr.to_vec(8..).unwrap(), pattern(2)[8..].to_vec());
    id.disconnect().expect("disconnect");
    sid.wait_disconnected(T)
        .expect("the server sees the disconnect");
    id.wait_disconnected(T)
        .expect("the client sees its disconnect");
    assert!(!sid.is_connected());
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_rejected_request_reports_the_reason_and_private_data() {
    rig::device_name();
    let l = listener(7402);
    let server = thread::spawn(move || {
        let req = l.get_request(Some(T)).expect("connect request");
        req.reject(b"not today").expect("reject");
        l
    });
    let id = resolved(7402);
    let c = side(&id);
    let e = id
        .connect(&c.qp, &ConnParam::new(), T)
        .expect_err("a rejected connect");
    match &e {
        Error::Rejected {
            reason,
            private_data,
            ..
        } => {
            assert_eq!(*reason, 28, "consumer reject: {e}");
            assert!(private_data.starts_with(b"not today"), "{private_data:?}");
        }
        other => panic!("not a rejection: {other}"),
    }
    assert!(e.to_string().contains("rejected"), "{e}");
    assert_eq!(c.qp.state().unwrap(), QpState::Err, "the QP is stopped");
    drop(server.join().unwrap());
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn dropping_an_undecided_request_rejects_it() {
    rig::device_name();
    let l = listener(7403);
    let server = thread::spawn(move || {
        drop(l.get_request(Some(T)).expect("connect request"));
        l
    });
    let id = resolved(7403);
    let c = side(&id);
    let e = id.connect(&c.qp, &ConnParam::new(), T).unwrap_err();
    assert!(
        matches!(e, Error::Rejected { .. } | Error::Cm { .. }),
        "{e}"
    );
    drop(server.join().unwrap());
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn connecting_where_nothing_listens_is_refused() {
    rig::device_name();
    let id = resolved(7499);
    let c = side(&id);
    let e = id.connect(&c.qp, &ConnParam::new(), T).unwrap_err();
    match &e {
        Error::Rejected { reason, .. } => {
            assert_eq!(*reason, 8, "invalid service id: {e}");
            assert!(e.to_string().contains("nothing listens"), "{e}");
        }
        Error::Cm { event, .. } => assert_eq!(*event, "RDMA_CM_EVENT_UNREACHABLE", "{e}"),
        other => panic!("{other}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn waits_time_out() {
    rig::device_name();
    let l = listener(7404);
    let start = Instant::now();
    let e = l.get_request(Some(Duration::from_millis(300))).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(start.elapsed() >= Duration::from_millis(300));
    assert!(start.elapsed() < Duration::from_secs(5));
    assert!(l.channel().try_get_event().unwrap().is_none());
    let e = l.wait_disconnected(Duration::from_millis(100)).unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");

    // An address in the subnet that nobody has: resolution fails (the
    // neighbour never answers) within its timeout and a second.
    let ip = match addr() {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            IpAddr::from([o[0], o[1], o[2], o[3].wrapping_add(100)])
        }
        v6 => v6,
    };
    let id = CmId::new().unwrap();
    let start = Instant::now();
    let r = id
        .resolve_addr(None, SocketAddr::new(ip, 7404), Duration::from_millis(500))
        .and_then(|()| id.resolve_route(Duration::from_millis(500)));
    if let Err(e) = r {
        assert!(matches!(e, Error::Cm { .. } | Error::Timeout { .. }), "{e}");
    } else {
        // rxe resolves any address of its subnet at once (no ARP needed
        // for the route); connecting then finds no one.
        let c = side(&id);
        let e = id
            .connect(&c.qp, &ConnParam::new(), Duration::from_secs(30))
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::Cm { .. } | Error::Timeout { .. } | Error::Rejected { .. }
            ),
            "{e}"
        );
    }
    assert!(start.elapsed() < Duration::from_secs(60));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn dropping_a_connected_id_disconnects_the_peer() {
    rig::device_name();
    let l = listener(7405);
    let server = thread::spawn(move || {
        let req = l.get_request(Some(T)).expect("connect request");
        let s = side(req.id());
        let id = req.accept(&s.qp, &ConnParam::new(), T).expect("accept");
        id.wait_disconnected(T)
            .expect("the client's drop disconnects");
        drop(s);
        drop(id);
        l
    });
    let id = resolved(7405);
    let c = side(&id);
    id.connect(&c.qp, &ConnParam::new(), T).expect("connect");
    // The id's handle goes first; its QP, PD and context (which keep the
    // rdma_cm id itself alive) after.
    drop(id);
    drop(server.join().unwrap());
    drop(c);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn one_channel_serves_many_ids_and_its_fd_polls_readable() {
    rig::device_name();
    let ch = EventChannel::new().unwrap();
    let l = CmId::with_channel(&ch).unwrap();
    l.listen(at(7406), 8).unwrap();
    let a = CmId::with_channel(&ch).unwrap();
    // a's address resolution reports on the same channel; the listener's
    // blocking wait would keep it for a.
    a.resolve_addr(None, at(7406), Duration::from_secs(5))
        .unwrap();
    a.resolve_route(Duration::from_secs(5)).unwrap();
    let client = thread::spawn(move || {
        let c = side(&a);
        let r = a.connect(&c.qp, &ConnParam::new().private_data(b"x"), T);
        (a, c, r)
    });
    // The client's blocking connect reads this channel too (its answer
    // comes on it): it may read the listener's request first and keep it
    // for the listener, so the fd is not watched here but below, where no
    // one else reads it.
    let req = l.get_request(Some(T)).expect("the request");
    assert_eq!(req.private_data()[0], b'x');
    let s = side(req.id());
    let sid = req.accept(&s.qp, &ConnParam::new(), T).expect("accept");
    let (a, _c, r) = client.join().unwrap();
    r.expect("connect");
    assert_ne!(a.key(), l.key());
    drop(sid);
    // Wait for the fd, as an event loop would (a's disconnect comes on the
    // shared channel; nothing else reads it now), then take the event.
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&ch.as_fd()),
        events: libc::POLLIN,
        revents: 0,
    };
    let ready = unsafe { libc::poll(&mut pfd, 1, 20_000) };
    assert_eq!(ready, 1, "the channel's fd turns readable");
    a.wait_disconnected(T).expect("the peer's drop disconnects");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn bad_input_is_refused_before_any_c_call() {
    rig::device_name();
    let id = CmId::new().unwrap();
    let e = id.context().unwrap_err();
    assert!(e.to_string().contains("resolve an address first"), "{e}");
    // librdmacm's rdma_disconnect and rdma_resolve_route reach the id's
    // device, NULL before an address is resolved: refused, not a crash.
    let e = id.disconnect().unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = id.resolve_route(Duration::from_secs(1)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let id = resolved(7407);
    let c = side(&id);
    let e = id
        .connect(&c.qp, &ConnParam::new().private_data(&[0; 57]), T)
        .unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    let e = id
        .connect(&c.qp, &ConnParam::new().retry_count(8), T)
        .unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    assert_eq!(c.qp.state().unwrap(), QpState::Reset, "the QP is untouched");
}

// ---- rdma-core's rping against the example ----

/// A finished process's standard output, then its standard error.
fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `server` and, once it listens, `client`; returns both outputs.
fn pair(server: &mut Command, client: &mut Command) -> (String, String) {
    let srv = server
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {server:?}: {e} (rdmacm-utils installed?)"));
    let mut client_out = None;
    for _ in 0..30 {
        thread::sleep(Duration::from_millis(500));
        let out = client.output().expect("client");
        if out.status.success() {
            client_out = Some(out);
            break;
        }
        let text = String::from_utf8_lossy(&out.stderr).into_owned();
        // Retry only while the server is not listening yet.
        if !(text.contains("REJECTED") || text.contains("rejected") || text.contains("UNREACHABLE"))
        {
            panic!(
                "{client:?} failed: {text}{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
    let client_out = client_out.unwrap_or_else(|| panic!("{client:?} never connected"));
    let srv = srv.wait_with_output().expect("server");
    let s = text(&srv);
    assert!(srv.status.success(), "{server:?} failed: {s}");
    (s, String::from_utf8_lossy(&client_out.stdout).into_owned())
}

fn check_pings(out: &str, prefix: &str, count: usize) {
    for ping in 0..count {
        let line = format!("{prefix}rdma-ping-{ping}: ");
        assert!(out.contains(&line), "no {line:?} in {out}");
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rping_example_client_against_rdma_core_rping_server() {
    rig::device_name();
    let a = addr().to_string();
    let (server, client) = pair(
        Command::new("rping").args(["-s", "-v", "-S", "100", "-a", &a, "-p", "7410"]),
        Command::new(example("rping")).args([
            "-c", "-v", "-V", "-C", "10", "-S", "100", "-a", &a, "-p", "7410",
        ]),
    );
    check_pings(&client, "ping data: ", 10);
    check_pings(&server, "server ping data: ", 10);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rdma_core_rping_client_against_rping_example_server() {
    rig::device_name();
    let a = addr().to_string();
    let (server, client) = pair(
        Command::new(example("rping"))
            .args(["-s", "-v", "-V", "-S", "100", "-a", &a, "-p", "7411"]),
        Command::new("rping").args([
            "-c", "-v", "-V", "-C", "10", "-S", "100", "-a", &a, "-p", "7411",
        ]),
    );
    check_pings(&client, "ping data: ", 10);
    check_pings(&server, "server ping data: ", 10);
}

/// rping's 16-byte `struct rping_rdma_info`: address, rkey, length, all
/// big-endian.
fn rping_info(addr: u64, rkey: u32, len: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&addr.to_be_bytes());
    b[8..12].copy_from_slice(&rkey.to_be_bytes());
    b[12..16].copy_from_slice(&len.to_be_bytes());
    b
}

/// The example server's last "go ahead" SEND can fail to complete although
/// the client is done: a client that got every ping and left at once may
/// never acknowledge it (soft-RoCE reports a receive before it sends the
/// acknowledgement). Like rping's C server, the example then ends with the
/// client's disconnect, not with the SEND's timeout. Here a client runs
/// one ping by rping's protocol but posts no receive for that last SEND,
/// so it cannot complete, and disconnects once the echo has arrived.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn the_rping_example_server_ends_at_a_disconnect_that_leaves_its_last_send_unacknowledged() {
    rig::device_name();
    const PING: usize = 100;
    const SINK: usize = 1024;
    const RECV: usize = 2048;
    const SEND: usize = 3072;
    let a = addr().to_string();
    let server = Command::new(example("rping"))
        .args(["-s", "-v", "-S", "100", "-a", &a, "-p", "7418"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the rping example");
    let param = ConnParam::new()
        .responder_resources(1)
        .initiator_depth(1)
        .retry_count(7)
        .rnr_retry_count(7);
    let mut tries = 0;
    let (id, mut c) = loop {
        thread::sleep(Duration::from_millis(500));
        let id = resolved(7418);
        let mut c = side(&id);
        id.init_qp(&c.qp).expect("INIT before the receive");
        let sge = c.mr.sge(RECV..RECV + 16).unwrap();
        unsafe { c.qp.post_recv(1, &[sge]).expect("post_recv") };
        match id.connect(&c.qp, &param, T) {
            Ok(_) => break (id, c),
            Err(e) if tries < 30 => {
                tries += 1;
                eprintln!("not listening yet: {e}");
            }
            Err(e) => panic!("the example server never accepted: {e}"),
        }
    };
    let mut ping = b"rdma-ping-0: ".to_vec();
    ping.extend((0..).map(|i| b'A' + i % 26).take(PING - 1 - ping.len()));
    ping.push(0);
    c.mr.write_at(0, &ping).unwrap();
    let send = |c: &mut Side, info: [u8; 16]| {
        c.mr.write_at(SEND, &info).unwrap();
        let mr = &c.mr;
        let wcs =
            c.qp.post_and_wait(&mut c.send_cq, T, |b| {
                b.wr(2).send().sge(mr.sge(SEND..SEND + 16)?)
            })
            .expect("send the buffer's address");
        assert_eq!(wcs[0].status, WcStatus::SUCCESS);
    };
    // The source: the server reads it, then says go ahead.
    let base = c.mr.addr();
    let rkey = c.mr.rkey();
    send(&mut c, rping_info(base, rkey, PING as u32));
    let wc = c.recv_cq.wait(1, T).expect("the first go ahead")[0];
    assert_eq!((wc.status, wc.byte_len), (WcStatus::SUCCESS, 16));
    // The sink, with no receive posted for the go ahead after the write.
    send(&mut c, rping_info(base + SINK as u64, rkey, PING as u32));
    let start = Instant::now();
    while c.mr.to_vec(SINK..SINK + PING).unwrap() != ping {
        assert!(start.elapsed() < T, "the server's echo never arrived");
        thread::sleep(Duration::from_millis(10));
    }
    // The echo's bytes land before the write's acknowledgement leaves:
    // give the server's write its completion before leaving.
    thread::sleep(Duration::from_millis(200));
    id.disconnect().expect("disconnect");
    c.qp.to_error().expect("the client's QP to ERR");
    let out = server.wait_with_output().expect("the example server");
    let said = text(&out);
    assert!(out.status.success(), "the server failed: {said}");
    assert!(
        said.contains("server ping data: rdma-ping-0: ABCDEFGHIJ"),
        "{said}"
    );
    assert!(said.contains("server DISCONNECT EVENT..."), "{said}");
    drop(id);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn the_psn_is_given_once_and_the_path_options_reach_the_qp() {
    let ctx = rig::open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let mut a = rig::side(&ctx, &pd, QpCaps::default(), SendOps::rc_default());
    let b = rig::side(&ctx, &pd, QpCaps::default(), SendOps::rc_default());
    let opts = rig::connect_options(&ctx)
        .traffic_class(96)
        .flow_label(0x12345)
        .hop_limit(9);

    // connect_to needs an endpoint first; connect refuses another PSN.
    let eb = b.qp.endpoint(0x200, &opts).unwrap();
    let e = a.qp.connect_to(&eb, &opts).unwrap_err();
    assert!(e.to_string().contains("endpoint("), "{e}");
    let ea = a.qp.endpoint(0x100, &opts).unwrap();
    let e = a.qp.connect(&eb, 0x101, &opts).unwrap_err();
    assert!(e.to_string().contains("differs"), "{e}");
    assert_eq!(a.qp.state().unwrap(), QpState::Reset);
    let e =
        a.qp.connect_to(&eb, &opts.flow_label(0x10_0000))
            .unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfRange {
                what: "flow_label",
                ..
            }
        ),
        "{e}"
    );

    // The endpoints travel in their byte form.
    let eb = Endpoint::from_bytes(&eb.to_bytes()).unwrap();
    let ea = Endpoint::from_bytes(&ea.to_bytes()).unwrap();
    a.qp.connect_to(&eb, &opts).expect("connect A");
    b.qp.connect_to(&ea, &opts).expect("connect B");

    let mut attr = ffi::ibv_qp_attr::default();
    let mut init = ffi::ibv_qp_init_attr::default();
    let rc = unsafe {
        ffi::ibv_query_qp(
            a.qp.as_ptr(),
            &mut attr,
            (ffi::IBV_QP_AV | ffi::IBV_QP_SQ_PSN | ffi::IBV_QP_RQ_PSN) as i32,
            &mut init,
        )
    };
    assert_eq!(rc, 0, "ibv_query_qp");
    assert_eq!(attr.sq_psn, 0x100, "A sends from the PSN its endpoint gave");
    assert_eq!(attr.rq_psn, 0x200, "and expects B's");
    if opts.gid_index.is_some() {
        assert_eq!(attr.ah_attr.is_global, 1);
        assert_eq!(attr.ah_attr.grh.traffic_class, 96);
        assert_eq!(attr.ah_attr.grh.flow_label, 0x12345);
        // On RoCE the kernel takes the hop limit from the IP route.
        if ctx.query_port(1).unwrap().link_layer != LinkLayer::Ethernet {
            assert_eq!(attr.ah_attr.grh.hop_limit, 9);
        }
    }

    // And the connection carries data.
    a.mr.write_at(0, b"over the connect_to path").unwrap();
    let remote = b.mr.remote(0..24).unwrap();
    let mr = &a.mr;
    a.qp.post_and_wait(&mut a.send_cq, T, |w| {
        w.wr(1).rdma_write(remote).sge(mr.sge(0..24)?)
    })
    .expect("write");
    assert_eq!(b.mr.to_vec(0..24).unwrap(), b"over the connect_to path");
}

// ------------------------------------------------------------ async (tokio)

/// A current-thread runtime: every task of a test shares one thread, so a
/// wait that blocked instead of sleeping in the runtime would hang the
/// test (and fail it at the timeout).
#[cfg(feature = "tokio")]
fn one_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The server and the client as two tasks on one thread, both ids on one
/// event channel: each task's wait ends on its own id's event whichever
/// task read it; the connection then carries data, checked byte for byte;
/// the disconnect reaches both through the async waits.
#[cfg(feature = "tokio")]
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn async_connect_and_accept_share_one_channel_and_one_thread() {
    rig::device_name();
    let ch = EventChannel::new().unwrap();
    let l = CmId::with_channel(&ch).unwrap();
    l.listen(at(7411), 8).unwrap();
    let a = CmId::with_channel(&ch).unwrap();
    let rt = one_thread();
    let ((sid, mut s), mut c) = rt.block_on(async {
        let server = async {
            let req = l.get_request_async().await.expect("connect request");
            assert_eq!(req.private_data()[..5], *b"async");
            let mut s = side(req.id());
            req.id().init_qp(&s.qp).unwrap();
            let sge = s.mr.sge(0..LEN).unwrap();
            unsafe { s.qp.post_recv(9, &[sge]).expect("post_recv") };
            let id = req
                .accept_async(&s.qp, &ConnParam::new().private_data(b"ok"))
                .await
                .expect("accept_async");
            (id, s)
        };
        let client = async {
            let t = Duration::from_secs(5);
            a.resolve_addr_async(None, at(7411), t)
                .await
                .expect("resolve_addr_async");
            a.resolve_route_async(t).await.expect("resolve_route_async");
            let c = side(&a);
            let reply = a
                .connect_async(&c.qp, &ConnParam::new().private_data(b"async"))
                .await
                .expect("connect_async");
            assert!(reply.starts_with(b"ok"), "{reply:?}");
            c
        };
        let both = async { tokio::join!(server, client) };
        tokio::time::timeout(T, both)
            .await
            .expect("connected within the time")
    });
    assert!(sid.is_connected() && a.is_connected());
    assert_eq!(c.qp.state().unwrap(), QpState::Rts);
    assert_eq!(s.qp.state().unwrap(), QpState::Rts);
    c.mr.write_at(0, &pattern(9)).unwrap();
    let mr = &c.mr;
    let wcs =
        c.qp.post_and_wait(&mut c.send_cq, T, |b| b.wr(1).send().sge(mr.sge(..)?))
            .expect("send");
    assert_eq!(wcs[0].status, WcStatus::SUCCESS);
    let wc = s.recv_cq.wait(1, T).expect("receive")[0];
    assert_eq!(
        (wc.status, wc.wr_id, wc.byte_len as usize),
        (WcStatus::SUCCESS, 9, LEN)
    );
    assert_eq!(s.mr.to_vec(..).unwrap(), pattern(9), "the bytes sent");
    rt.block_on(async {
        a.disconnect().unwrap();
        let both =
            async { tokio::join!(sid.wait_disconnected_async(), a.wait_disconnected_async()) };
        let (x, y) = tokio::time::timeout(T, both)
            .await
            .expect("disconnected within the time");
        x.expect("the server sees the disconnect");
        y.expect("the client sees its own");
    });
    assert!(!sid.is_connected());
}

/// A blocking thread and a task on one channel: the thread's connect reads
/// the listener's connect request (it comes on the same fd) and keeps it,
/// and the task awaiting the request is woken for it.
#[cfg(feature = "tokio")]
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_blocking_reader_wakes_the_task_whose_event_it_read() {
    rig::device_name();
    let ch = EventChannel::new().unwrap();
    let l = CmId::with_channel(&ch).unwrap();
    l.listen(at(7412), 8).unwrap();
    let a = CmId::with_channel(&ch).unwrap();
    a.resolve_addr(None, at(7412), Duration::from_secs(5))
        .unwrap();
    a.resolve_route(Duration::from_secs(5)).unwrap();
    let rt = one_thread();
    let got = rt.block_on(async {
        let waiting = tokio::spawn(async move {
            let req = l.get_request_async().await.expect("the request");
            let data = req.private_data().to_vec();
            req.reject(b"no").unwrap();
            (l, data)
        });
        // The task is parked on the fd before the connect starts.
        tokio::task::yield_now().await;
        let client = thread::spawn(move || {
            let c = side(&a);
            let r = a.connect(&c.qp, &ConnParam::new().private_data(b"from a thread"), T);
            (a, c, r)
        });
        let (l, data) = tokio::time::timeout(T, waiting)
            .await
            .expect("the task was woken")
            .unwrap();
        let (_a, _c, r) = client.join().unwrap();
        (l, data, r)
    });
    let (_l, data, r) = got;
    assert!(data.starts_with(b"from a thread"), "{data:?}");
    match r {
        Err(Error::Rejected { private_data, .. }) => {
            assert!(private_data.starts_with(b"no"), "{private_data:?}")
        }
        other => panic!("{other:?}"),
    }
}

/// The async waits end with the CM's errors, typed as the blocking ones:
/// a connect where nothing listens, and a wait outside a runtime.
#[cfg(feature = "tokio")]
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn async_waits_end_with_the_cms_errors() {
    rig::device_name();
    let rt = one_thread();
    rt.block_on(async {
        let id = CmId::new().unwrap();
        let t = Duration::from_secs(5);
        id.resolve_addr_async(None, at(7498), t).await.unwrap();
        id.resolve_route_async(t).await.unwrap();
        let c = side(&id);
        let r = tokio::time::timeout(
            Duration::from_secs(60),
            id.connect_async(&c.qp, &ConnParam::new()),
        )
        .await
        .expect("the CM ends the connect");
        match r.unwrap_err() {
            Error::Rejected { reason, .. } => assert_eq!(reason, 8),
            Error::Cm { event, .. } => assert_eq!(event, "RDMA_CM_EVENT_UNREACHABLE"),
            other => panic!("{other}"),
        }
        assert_eq!(
            c.qp.state().unwrap(),
            QpState::Err,
            "a failed connect leaves the QP in ERR"
        );
    });
    // Outside a runtime: refused, not a panic.
    let l = listener(7413);
    let fut = l.get_request_async();
    let e = poll_once(fut).expect("ready at once").unwrap_err();
    assert!(e.to_string().contains("outside a tokio runtime"), "{e}");
}

/// Polls a future once with a waker that does nothing.
#[cfg(feature = "tokio")]
fn poll_once<F: std::future::Future>(f: F) -> Option<F::Output> {
    use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
    fn clone(_: *const ()) -> RawWaker {
        RawWaker::new(std::ptr::null(), &VTABLE)
    }
    fn noop(_: *const ()) {}
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, noop, noop, noop);
    let waker = unsafe { Waker::from_raw(RawWaker::new(std::ptr::null(), &VTABLE)) };
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(&waker)) {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

/// An accept cancelled after `rdma_accept` went out (its future polled
/// once, then dropped) leaves the server's QP short of RTS: in ERR, so
/// that none of its work requests runs and, from then on, the peer
/// reaches nothing through it, whether or not the client saw the accept.
/// (Between `rdma_accept` and the cancellation the connection is an
/// accepted one: the QP, in RTR, answers the peer within the access its
/// regions grant.)
#[cfg(feature = "tokio")]
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_cancelled_accept_leaves_the_qp_short_of_rts() {
    rig::device_name();
    let l = listener(7414);
    let (tx, rx) = std::sync::mpsc::channel::<RemoteBuf>();
    let client = thread::spawn(move || {
        let id = resolved(7414);
        let mut c = side(&id);
        let r = id.connect(&c.qp, &ConnParam::new(), T);
        // Connected or not, once the accept was cancelled the server's
        // memory is out of reach (the region is sent after the cancel).
        let read = r.is_ok().then(|| {
            let remote = rx.recv_timeout(T).expect("the server's region");
            let into = c.mr.sge_mut(0..64).unwrap();
            c.qp.post_and_wait(&mut c.send_cq, T, |b| b.wr(1).rdma_read(remote).sge(into))
                .map(|w| w[0].status)
        });
        (r.map(drop), read, id, c)
    });
    let req = l.get_request(Some(T)).expect("connect request");
    let s = side(req.id());
    let mut server_mr = s.mr;
    server_mr.write_at(0, b"secret").unwrap();
    let rt = one_thread();
    rt.block_on(async {
        // Polled once (rdma_accept is sent, the wait for ESTABLISHED
        // begins), then dropped.
        let param = ConnParam::new();
        let mut accept = std::pin::pin!(req.accept_async(&s.qp, &param));
        let first = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::future::Future::poll(accept.as_mut(), cx))
        })
        .await;
        if let std::task::Poll::Ready(r) = first {
            panic!("the accept ended at its first poll: {:?}", r.map(drop));
        }
    });
    let state = s.qp.state().unwrap();
    assert_eq!(
        state,
        QpState::Err,
        "a cancelled accept left the QP in {state:?}"
    );
    // The client, if it connected, tries to read only now.
    let _ = tx.send(server_mr.remote(0..64).unwrap());
    let (r, read, _id, _c) = client.join().unwrap();
    match read {
        None => assert!(r.is_err()),
        Some(status) => assert!(
            !matches!(status, Ok(WcStatus::SUCCESS)),
            "the client read the server's memory through a cancelled accept: {status:?}"
        ),
    }
}

/// A cancelled `resolve_addr_async` (polled once, then dropped) leaves its
/// answer to come late: the id's next wait, for its own step, must not
/// take it (it would end with "unexpected event" and leave its own answer
/// to the wait after it).
#[cfg(feature = "tokio")]
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn the_late_answer_of_a_cancelled_step_goes_to_no_later_wait() {
    rig::device_name();
    let l = listener(7415);
    let id = CmId::new().unwrap();
    let rt = one_thread();
    rt.block_on(async {
        let mut resolve =
            std::pin::pin!(id.resolve_addr_async(None, at(7415), Duration::from_secs(5)));
        let first = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::future::Future::poll(resolve.as_mut(), cx))
        })
        .await;
        assert!(first.is_pending(), "resolved at the first poll");
    });
    // The address is resolved by now (a local one); its event is unread.
    thread::sleep(Duration::from_millis(500));
    id.resolve_route(Duration::from_secs(5))
        .expect("the route's own answer, not the cancelled step's");
    let c = side(&id);
    let server = thread::spawn(move || {
        let req = l.get_request(Some(T)).expect("request");
        let s = side(req.id());
        let sid = req.accept(&s.qp, &ConnParam::new(), T).expect("accept");
        (sid, s)
    });
    id.connect(&c.qp, &ConnParam::new(), T)
        .expect("connect after the cancelled step");
    let _ = server.join().unwrap();
}

/// When the new id of a connect request cannot be taken over (here: no fd
/// left for its event channel), that is the listening id's error. The
/// active id on the same channel, whose blocking connect happened to read
/// the request, goes on waiting for its own answer (the rejection the
/// failed take-over caused). Runs itself in a child process, whose fd
/// limit it lowers.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_request_that_cannot_be_taken_over_is_the_listeners_error() {
    rig::device_name();
    const CHILD: &str = "MLX5DV_TEST_CM_NOFILE_CHILD";
    if std::env::var_os(CHILD).is_none() {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "a_request_that_cannot_be_taken_over_is_the_listeners_error",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .output()
            .expect("run the child");
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "the child failed:\n{text}");
        assert!(text.contains("1 passed"), "{text}");
        return;
    }
    let ch = EventChannel::new().unwrap();
    let l = CmId::with_channel(&ch).unwrap();
    l.listen(at(7416), 8).unwrap();
    let a = CmId::with_channel(&ch).unwrap();
    a.resolve_addr(None, at(7416), Duration::from_secs(5))
        .unwrap();
    a.resolve_route(Duration::from_secs(5)).unwrap();
    let c = side(&a);
    // No fd left: the request's own event channel cannot be made.
    let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) }, 0);
    // read_dir's own fd was counted: `open - 1` are open now.
    let none_left = libc::rlimit {
        rlim_cur: open - 1,
        ..old
    };
    assert_eq!(
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &none_left) },
        0
    );
    // Only this thread reads the channel: it reads the request first.
    let r = a.connect(&c.qp, &ConnParam::new(), T);
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) }, 0);
    match r {
        Err(Error::Rejected { .. }) | Err(Error::Cm { .. }) => {}
        other => panic!("the active id's connect ended with {other:?}, not its own answer"),
    }
    let e = l.get_request(Some(T)).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EMFILE), "{e}");
}

/// The client connects, sends and disconnects before the server has read
/// `RDMA_CM_EVENT_ESTABLISHED`: the accept still ends connected (its QP in
/// RTS with the attributes the CM gave when it accepted; the CM refuses
/// them once the peer's disconnect has come), the send landed byte for
/// byte, and the disconnect follows.
#[cfg(feature = "tokio")]
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn an_accept_whose_peer_has_already_disconnected_still_ends_connected() {
    rig::device_name();
    let l = listener(7417);
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    let (sent, wait_sent) = std::sync::mpsc::channel::<()>();
    let client = thread::spawn(move || {
        let id = resolved(7417);
        let mut c = side(&id);
        wait_go.recv().unwrap();
        id.connect(&c.qp, &ConnParam::new(), T).expect("connect");
        c.mr.write_at(0, &pattern(5)).unwrap();
        let mr = &c.mr;
        let wcs =
            c.qp.post_and_wait(&mut c.send_cq, T, |b| b.wr(1).send().sge(mr.sge(..)?))
                .expect("send");
        assert_eq!(wcs[0].status, WcStatus::SUCCESS);
        id.disconnect().expect("disconnect");
        sent.send(()).unwrap();
        (id, c)
    });
    go.send(()).unwrap();
    let req = l.get_request(Some(T)).expect("connect request");
    let mut s = side(req.id());
    req.id().init_qp(&s.qp).unwrap();
    let sge = s.mr.sge(0..LEN).unwrap();
    unsafe { s.qp.post_recv(3, &[sge]).expect("post_recv") };
    let rt = one_thread();
    let sid = rt.block_on(async {
        let param = ConnParam::new();
        let mut accept = std::pin::pin!(req.accept_async(&s.qp, &param));
        let first = std::future::poll_fn(|cx| {
            std::task::Poll::Ready(std::future::Future::poll(accept.as_mut(), cx))
        })
        .await;
        assert!(first.is_pending(), "accepted at the first poll");
        // The client's send and disconnect, before ESTABLISHED is read.
        wait_sent
            .recv_timeout(T)
            .expect("the client sent and disconnected");
        tokio::time::timeout(T, accept)
            .await
            .expect("the accept ended")
            .expect("the accept ended connected")
    });
    let wc = s.recv_cq.wait(1, T).expect("the client's send")[0];
    assert_eq!(
        (wc.status, wc.wr_id, wc.byte_len as usize),
        (WcStatus::SUCCESS, 3, LEN)
    );
    assert_eq!(s.mr.to_vec(..).unwrap(), pattern(5), "the bytes sent");
    sid.wait_disconnected(T).expect("the client's disconnect");
    let _ = client.join().unwrap();
}
