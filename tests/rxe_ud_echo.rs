//! A UD echo server in two processes, written the obvious way: one CQ for
//! sends and receives; post a receive, `wait` for it, learn the sender
//! from the completion (`src_qp`, `slid`, the GRH flag), make an address
//! handle back and answer with `post_and_wait`, whose polls keep the
//! receives that come meanwhile in the CQ's backlog (the server's CQ is
//! on a completion channel, whose event says when the second message has
//! arrived, so that the first answer's wait is sure to poll it). The
//! client reaches
//! the server through the server's `UdEndpoint`, sent over TCP, made into
//! a `UdDest`. Under one `scripts/mlx5-sim` the two processes are two
//! hosts of the software device's fabric; in the soft-RoCE guest they
//! share its rxe device.
//!
//! Run by `scripts/test` with `MLX5DV_TEST_DEVICE` set; without it the
//! tests are ignored, and fail if forced to run.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::process::{finish, start_peer, text};
use support::rig::{self, pattern, WAIT};

const SERVER_ENV: &str = "MLX5DV_TEST_UD_ECHO_PORT";
const LIMIT: Duration = Duration::from_secs(60);
/// The Q_Key of the echo protocol: both sides receive with it.
const QKEY: u32 = 0x1111_1111;
/// Messages, each echoed.
const MESSAGES: usize = 3;
/// How long the server waits for the event of the second message's
/// arrival.
const ARRIVAL: Duration = Duration::from_secs(30);
const LEN: usize = 256;
/// A receive slot: the GRH area, then the message.
const SLOT: usize = UD_GRH_BYTES + LEN;

/// One UD QP completing sends and receives on one CQ, in RTS.
struct Side {
    ctx: Context,
    pd: ProtectionDomain,
    /// The CQ's completion channel, where it has one.
    channel: Option<CompletionChannel>,
    cq: CompletionQueue,
    qp: UdQp,
    mr: MemoryRegion,
    opts: ConnectOptions,
}

impl Side {
    /// A side whose CQ is on a completion channel if `channel`.
    fn new(channel: bool) -> Side {
        let ctx = rig::open();
        let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
        let channel = channel.then(|| CompletionChannel::new(&ctx).expect("create a channel"));
        let cq = match &channel {
            Some(ch) => CompletionQueue::with_channel(&ctx, 64, ch),
            None => CompletionQueue::new(&ctx, 64),
        }
        .expect("create CQ");
        // The same CQ for both queues, as `QpBuilder::ud` allows.
        let qp = QpBuilder::ud(&pd, &cq, &cq).build().expect("create UD QP");
        qp.ready(1, QKEY, 0).expect("UD QP to RTS");
        let mr = MemoryRegion::new(&pd, MESSAGES * SLOT + LEN, AccessFlags::LOCAL_WRITE)
            .expect("register MR");
        let opts = rig::connect_options(&ctx);
        Side {
            ctx,
            pd,
            channel,
            cq,
            qp,
            mr,
            opts,
        }
    }

    /// Posts the receive of slot `i`.
    fn recv(&mut self, i: usize) {
        let sge = self.mr.sge_mut(i * SLOT..(i + 1) * SLOT).unwrap();
        unsafe { self.qp.post_recv(i as u64, &[sge.into()]).unwrap() };
    }

    /// The message a receive completion `wc` of slot `i` delivered, with
    /// its GRH area.
    fn received(&self, i: usize, wc: &WorkCompletion) -> ([u8; UD_GRH_BYTES], Vec<u8>) {
        rig::assert_wc(wc, i as u64, WcOpcode::RECV);
        let buf = self.mr.to_vec(i * SLOT..(i + 1) * SLOT).unwrap();
        let (_, msg) = ud_received(&buf, wc.byte_len, wc.wc_flags).expect("a UD message");
        let area = *buf.first_chunk::<UD_GRH_BYTES>().unwrap();
        (area, msg.to_vec())
    }

    /// The GID this side sends from (zero without a GRH).
    fn gid(&self) -> Gid {
        match self.opts.gid_index {
            Some(i) => self.ctx.gid(1, u32::from(i)).unwrap(),
            None => Gid::default(),
        }
    }
}

/// The server: sends its endpoint, then echoes `MESSAGES` messages to
/// whoever sent them, learning the sender from each receive's completion.
fn serve(port: u16) {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect to the client");
    tcp.set_read_timeout(Some(LIMIT)).expect("read timeout");
    let mut s = Side::new(true);
    for i in 0..MESSAGES {
        s.recv(i);
    }
    let me = s.qp.endpoint(&s.opts).expect("endpoint");
    assert_eq!((me.qpn, me.qkey), (s.qp.qp_num(), QKEY));
    tcp.write_all(&me.to_bytes()).expect("send the endpoint");
    let mut client = [0; UdEndpoint::BYTES];
    tcp.read_exact(&mut client).expect("the client's endpoint");
    let client = UdEndpoint::from_bytes(&client).expect("a UD endpoint");
    tcp.read_exact(&mut [0; 1]).expect("sent");

    let mut answered = Vec::new();
    for i in 0..MESSAGES {
        let wc = if i == 0 {
            let wc = first_receive(&mut s.cq);
            second_arrives(&mut s, &mut tcp);
            wc
        } else {
            s.cq.wait(1, WAIT).expect("a receive")[0]
        };
        let (area, msg) = s.received(i, &wc);
        assert_eq!(msg, pattern(LEN, i as u8), "message {i}");
        // The sender, from the completion alone.
        let src_qp = wc.src_qp.expect("a receive's source QP");
        let slid = wc.slid.expect("a receive's source LID");
        assert_eq!((src_qp, slid), (client.qpn, client.lid), "{wc:?}");
        let back =
            AhAttr::from_received(&s.ctx, 1, &area, wc.wc_flags, slid).expect("the path back");
        let ah = AddressHandle::new(&s.pd, &back).expect("the AH back");
        s.mr.write_at(MESSAGES * SLOT, &msg).unwrap();
        let mr = &s.mr;
        let wcs =
            s.qp.post_and_wait(&mut s.cq, WAIT, |b| {
                b.wr(100 + i as u64, UdAddr::new(&ah, src_qp, QKEY))
                    .signaled()
                    .send()
                    .sge(mr.sge(MESSAGES * SLOT..MESSAGES * SLOT + LEN)?)
            })
            .expect("answer");
        assert_eq!(wcs.len(), 1);
        rig::assert_wc(&wcs[0], 100 + i as u64, WcOpcode::SEND);
        assert_eq!(wcs[0].src_qp, None, "a send has no sender: {:?}", wcs[0]);
        answered.push(s.cq.backlog_len());
    }
    // The second message came while the first answer was being waited
    // for: that wait kept it for the next, which answered it all the same.
    assert_eq!(
        answered[0], 1,
        "the second receive was not kept: {answered:?}"
    );
    tcp.write_all(b"d").expect("say done");
    let _ = tcp.read(&mut [0; 1]);
}

/// The first receive's completion, polled without arming the CQ (as a
/// wait on a CQ with a channel does), so that no event of it is raised.
fn first_receive(cq: &mut CompletionQueue) -> WorkCompletion {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    while got.is_empty() {
        assert!(Instant::now() < deadline, "no first receive in {WAIT:?}");
        cq.poll_into(&mut got, 1).expect("poll");
        if got.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    got[0]
}

/// With the first receive taken (and none after it in the CQ: the client
/// sends its second message only when told), waits until the second
/// message's receive completion is in the CQ, without taking it: the CQ
/// armed, the client told to send, then the event of the arrival, so that
/// the first answer's `post_and_wait` polls that receive (and keeps it).
fn second_arrives(s: &mut Side, tcp: &mut TcpStream) {
    let channel = s.channel.clone().expect("the server's CQ has a channel");
    // The CQ was not armed before (`first_receive`): no event can be
    // waiting; were one there, it is dropped, so that the one awaited is
    // the second receive's.
    while channel.try_get_event().expect("read the channel").is_some() {}
    s.cq.req_notify(false).expect("arm the CQ");
    tcp.write_all(b"g").expect("say go");
    let event = channel
        .get_event(ARRIVAL)
        .expect("the second message's arrival");
    assert_eq!(event.cq(), s.cq.id());
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_ud_echo_server_with_one_cq_answers_each_sender_from_its_completion() {
    if let Ok(port) = std::env::var(SERVER_ENV) {
        serve(port.parse().expect("a TCP port"));
        return;
    }
    let test = "a_ud_echo_server_with_one_cq_answers_each_sender_from_its_completion";
    let (child, mut tcp) = start_peer(
        test,
        &[],
        SERVER_ENV,
        |port| port.to_string(),
        LIMIT,
        "the server",
    );

    // Whatever happens to the client, the server's output is shown.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| client(&mut tcp)));
    drop(tcp);
    let out = finish(child, "the server", LIMIT);
    if let Err(panic) = outcome {
        eprintln!("the server: {}", text(&out));
        std::panic::resume_unwind(panic);
    }
    assert!(out.status.success(), "the server failed: {}", text(&out));
}

/// The client: sends its messages to the server's endpoint and checks
/// each echo, byte for byte, and who sent it.
fn client(tcp: &mut TcpStream) {
    let mut c = Side::new(false);
    for i in 0..MESSAGES {
        c.recv(i);
    }
    let mut server = [0; UdEndpoint::BYTES];
    tcp.read_exact(&mut server).expect("the server's endpoint");
    let server = UdEndpoint::from_bytes(&server).expect("a UD endpoint");
    assert_eq!(server.qkey, QKEY);
    let me = c.qp.endpoint(&c.opts).expect("endpoint");
    tcp.write_all(&me.to_bytes()).expect("send the endpoint");
    let to = UdDest::new(&c.pd, &server, &c.opts).expect("the server's UdDest");
    assert_eq!((to.remote_qpn(), to.remote_qkey()), (server.qpn, QKEY));

    let send = |c: &mut Side, i: usize| {
        c.mr.write_at(MESSAGES * SLOT, &pattern(LEN, i as u8))
            .unwrap();
        let mr = &c.mr;
        let wcs =
            c.qp.post_and_wait(&mut c.cq, WAIT, |b| {
                b.wr(100 + i as u64, to.addr())
                    .signaled()
                    .send()
                    .sge(mr.sge(MESSAGES * SLOT..MESSAGES * SLOT + LEN)?)
            })
            .expect("send");
        rig::assert_wc(&wcs[0], 100 + i as u64, WcOpcode::SEND);
    };
    let check_echo = |c: &mut Side, i: usize| {
        let wc = c.cq.wait(1, WAIT).expect("an echo")[0];
        let (_, msg) = c.received(i, &wc);
        assert_eq!(msg, pattern(LEN, i as u8), "echo {i}");
        assert_eq!(wc.src_qp, Some(server.qpn), "{wc:?}");
        assert_eq!(wc.slid, Some(server.lid), "{wc:?}");
        assert_eq!(
            wc.wc_flags.contains(WcFlags::GRH),
            c.opts.gid_index.is_some()
        );
    };
    // Two messages, the second when the server says (it has taken the
    // first and waits for the second's arrival), then one after their
    // echoes.
    send(&mut c, 0);
    tcp.write_all(b"s").expect("say sent");
    tcp.read_exact(&mut [0; 1]).expect("go");
    send(&mut c, 1);
    check_echo(&mut c, 0);
    check_echo(&mut c, 1);
    send(&mut c, 2);
    check_echo(&mut c, 2);
    tcp.read_exact(&mut [0; 1]).expect("done");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn ready_with_takes_the_port_from_the_options() {
    let ctx = rig::open();
    let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
    let cq = CompletionQueue::new(&ctx, 8).expect("create CQ");
    let qp = QpBuilder::ud(&pd, &cq, &cq).build().expect("create UD QP");
    // A port the device does not have: refused, the QP left in RESET.
    let mut bad = rig::connect_options(&ctx);
    bad.port = 99;
    assert!(qp.ready_with(&bad, QKEY, 5).is_err());
    assert_eq!(qp.state().unwrap(), QpState::Reset);
    assert_eq!(qp.max_message(), None);
    // The options' port: RTS, with the Q_Key and that port's MTU.
    let opts = rig::connect_options(&ctx);
    qp.ready_with(&opts, QKEY, 5).expect("UD QP to RTS");
    assert_eq!(qp.state().unwrap(), QpState::Rts);
    assert_eq!(qp.qkey().unwrap(), QKEY);
    let mtu = ctx.query_port(opts.port).unwrap().active_mtu.bytes();
    assert_eq!(qp.max_message(), Some(mtu));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_ud_qps_endpoint_names_its_qp_qkey_and_port() {
    let s = Side::new(false);
    let e = s.qp.endpoint(&s.opts).expect("endpoint");
    let port = s.ctx.query_port(1).unwrap();
    assert_eq!(e.qpn, s.qp.qp_num());
    assert_eq!(e.qkey, QKEY);
    assert_eq!(e.lid, port.lid);
    assert_eq!(e.gid, s.gid());
    assert_eq!(UdEndpoint::from_bytes(&e.to_bytes()).unwrap(), e);
}
