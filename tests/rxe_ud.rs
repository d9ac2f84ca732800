//! UD traffic through the safe layer on a real RDMA device (soft-RoCE in
//! the test guest, or the software mlx5 device): two UD QPs on one device,
//! each work request addressed with an address handle towards port 1.
//! Every test checks the data byte for byte, each completion's status and
//! opcode, and what a UD receive reports (the sender's QP, the 40-byte
//! GRH area).
//!
//! Run by `scripts/test` with `MLX5DV_TEST_DEVICE` set; without it the
//! tests are ignored, and fail if forced to run.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use std::time::{Duration, Instant};
use support::rig::*;

const QKEY: u32 = 0x1111_1111;
/// Where each receive buffer starts in B's region (40 bytes of GRH area,
/// then the message).
const SLOT: usize = 8192;

/// One UD QP with its CQs and a region.
struct UdSide {
    qp: UdQp,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    mr: MemoryRegion,
}

/// Two UD QPs on one device, both in RTS, and an address handle towards
/// port 1 (with a GRH on RoCE).
struct UdPair {
    ctx: Context,
    pd: ProtectionDomain,
    opts: ConnectOptions,
    ah: AddressHandle,
    a: UdSide,
    b: UdSide,
}

fn ud_side(ctx: &Context, pd: &ProtectionDomain, qkey: u32) -> UdSide {
    let send_cq = CompletionQueue::new(ctx, 64).expect("send CQ");
    let recv_cq = CompletionQueue::new(ctx, 64).expect("recv CQ");
    let qp = QpBuilder::ud(pd, &send_cq, &recv_cq)
        .caps(QpCaps {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 2,
            max_recv_sge: 2,
            max_inline_data: 64,
        })
        .build()
        .expect("create UD QP");
    assert_eq!(qp.send_ops(), SendOps::SEND | SendOps::SEND_WITH_IMM);
    assert_eq!(qp.max_message(), None);
    qp.ready(1, qkey, 0x77).expect("UD QP to RTS");
    assert_eq!(qp.state().unwrap(), QpState::Rts);
    assert_eq!(qp.qkey().unwrap(), qkey);
    let mr = MemoryRegion::new(pd, 16 * SLOT, AccessFlags::LOCAL_WRITE).expect("register MR");
    UdSide {
        qp,
        send_cq,
        recv_cq,
        mr,
    }
}

impl UdPair {
    fn new(qkey_a: u32, qkey_b: u32) -> UdPair {
        let ctx = open();
        let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
        let opts = connect_options(&ctx);
        let port = ctx.query_port(1).unwrap();
        let gid = match opts.gid_index {
            Some(i) => ctx.gid(1, u32::from(i)).unwrap(),
            None => Gid::default(),
        };
        let ah = AddressHandle::new(&pd, &AhAttr::towards(port.lid, gid, &opts)).expect("AH");
        let a = ud_side(&ctx, &pd, qkey_a);
        let b = ud_side(&ctx, &pd, qkey_b);
        assert_eq!(a.qp.max_message(), Some(port.active_mtu.bytes()));
        UdPair {
            ctx,
            pd,
            opts,
            ah,
            a,
            b,
        }
    }

    /// Posts a receive of `len` bytes of message (plus the GRH area) at
    /// slot `i` of B's region.
    fn recv(&mut self, i: usize, len: usize) {
        let at = i * SLOT;
        let sge = self.b.mr.sge_mut(at..at + UD_GRH_BYTES + len).unwrap();
        unsafe { self.b.qp.post_recv(i as u64, &[sge.into()]).unwrap() };
    }

    /// Sends `data` from A to B with `imm` (if any) and Q_Key `qkey`,
    /// and checks the send's completion.
    fn send(&mut self, wr_id: u64, data: &[u8], imm: Option<u32>, qkey: u32) {
        self.a.mr.write_at(0, data).unwrap();
        let to = UdAddr::new(&self.ah, self.b.qp.qp_num(), qkey);
        let mr = &self.a.mr;
        let wcs = self
            .a
            .qp
            .post_and_wait(&mut self.a.send_cq, WAIT, |b| {
                let sge = mr.sge(0..data.len())?;
                match imm {
                    Some(imm) => b.wr(wr_id, to).send_imm(imm).sge(sge),
                    None => b.wr(wr_id, to).send().sge(sge),
                }
            })
            .unwrap();
        assert_eq!(wcs.len(), 1);
        assert_wc(&wcs[0], wr_id, WcOpcode::SEND);
    }

    /// The GID A sends from (zero without a GRH).
    fn local_gid(&self) -> Gid {
        match self.opts.gid_index {
            Some(i) => self.ctx.gid(1, u32::from(i)).unwrap(),
            None => Gid::default(),
        }
    }
}

/// What a UD receive completion reports.
#[derive(Debug)]
struct Recv {
    wr_id: u64,
    status: WcStatus,
    opcode: WcOpcode,
    byte_len: u32,
    flags: WcFlags,
    imm: Option<u32>,
    src_qp: Option<u32>,
    slid: Option<u16>,
}

/// Polls `cq` for up to `n` receive completions, for at most `limit`.
fn receives(cq: &mut CompletionQueue, n: usize, limit: Duration) -> Vec<Recv> {
    let start = Instant::now();
    let mut got = Vec::new();
    while got.len() < n && start.elapsed() < limit {
        cq.poll_each(n - got.len(), |wc| {
            got.push(Recv {
                wr_id: wc.wr_id(),
                status: wc.status(),
                opcode: wc.opcode(),
                byte_len: wc.byte_len(),
                flags: wc.wc_flags(),
                imm: wc.imm(),
                src_qp: wc.src_qp(),
                slid: wc.slid(),
            })
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    got
}

/// Checks one UD receive at slot `r.wr_id`: its completion, its GRH area
/// and its message, byte for byte.
fn check_received(p: &UdPair, r: &Recv, data: &[u8], imm: Option<u32>) {
    assert_eq!(r.status, WcStatus::SUCCESS, "{r:?}");
    assert_eq!(r.opcode, WcOpcode::RECV, "{r:?}");
    assert_eq!(r.byte_len as usize, UD_GRH_BYTES + data.len(), "{r:?}");
    assert_eq!(r.imm, imm, "{r:?}");
    assert_eq!(r.src_qp, Some(p.a.qp.qp_num()), "{r:?}");
    let port = p.ctx.query_port(1).unwrap();
    assert_eq!(r.slid, Some(port.lid), "{r:?}");
    let at = r.wr_id as usize * SLOT;
    let buf = p.b.mr.to_vec(at..at + UD_GRH_BYTES + data.len()).unwrap();
    let (grh, msg) = ud_received(&buf, r.byte_len, r.flags).unwrap();
    assert_eq!(msg, data, "message of receive {}", r.wr_id);
    if port.link_layer == LinkLayer::Ethernet {
        // On RoCE every packet has a GRH (its IP header).
        let grh = grh.unwrap_or_else(|| panic!("no GRH on a RoCE receive: {r:?}"));
        assert_eq!(grh.sgid, p.local_gid(), "{grh:?}");
        assert_eq!(grh.dgid, p.local_gid(), "{grh:?}");
    } else {
        // Within an InfiniBand subnet, an AH without a GRH sends none.
        assert_eq!(p.opts.gid_index, None);
        assert_eq!(grh, None, "{r:?}");
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn send_and_send_with_immediate_reach_the_peer_with_the_senders_qp() {
    let mut p = UdPair::new(QKEY, QKEY);
    let one = pattern(700, 1);
    let two = pattern(33, 2);
    p.recv(0, 1024);
    p.recv(1, 1024);
    p.send(10, &one, None, QKEY);
    p.send(11, &two, Some(0xC0DE_0001), QKEY);
    let got = receives(&mut p.b.recv_cq, 2, WAIT);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!((got[0].wr_id, got[1].wr_id), (0, 1), "{got:?}");
    assert!(!got[0].flags.contains(WcFlags::WITH_IMM), "{got:?}");
    check_received(&p, &got[0], &one, None);
    check_received(&p, &got[1], &two, Some(0xC0DE_0001));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_message_of_exactly_the_mtu_is_received_and_one_byte_more_is_refused() {
    let mut p = UdPair::new(QKEY, QKEY);
    let mtu = p.a.qp.max_message().unwrap() as usize;
    p.recv(0, mtu);
    let data = pattern(mtu + 1, 5);
    p.a.mr.write_at(0, &data).unwrap();
    let to = UdAddr::new(&p.ah, p.b.qp.qp_num(), QKEY);
    let mr = &p.a.mr;
    let e =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(1, to).send().sge(mr.sge(0..mtu + 1)?)
            })
            .unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfRange {
                what: "UD message length",
                value,
                ..
            } if value == mtu as u64 + 1
        ),
        "{e:?}"
    );
    // Nothing was posted: the QP still sends, and a message of exactly
    // the MTU arrives whole.
    assert_eq!(p.a.qp.state().unwrap(), QpState::Rts);
    p.send(2, &data[..mtu], None, QKEY);
    let got = receives(&mut p.b.recv_cq, 1, WAIT);
    assert_eq!(got.len(), 1, "{got:?}");
    check_received(&p, &got[0], &data[..mtu], None);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_message_with_the_wrong_qkey_is_dropped_and_its_send_completes() {
    let mut p = UdPair::new(QKEY, 0x2222_2222);
    p.recv(0, 256);
    let data = pattern(100, 7);
    // The send succeeds (UD has no acknowledgement); the receiver drops it.
    p.send(1, &data, None, QKEY);
    let got = receives(&mut p.b.recv_cq, 1, Duration::from_secs(2));
    assert!(
        got.is_empty(),
        "a message with Q_Key {QKEY:#x} reached a QP of Q_Key 0x22222222: {got:?}"
    );
    // The receive is still there: the right Q_Key reaches it.
    p.send(2, &data, None, 0x2222_2222);
    let got = receives(&mut p.b.recv_cq, 1, WAIT);
    assert_eq!(got.len(), 1, "{got:?}");
    check_received(&p, &got[0], &data, None);
}

/// A work request's Q_Key with its high bit set means "the QP's own"
/// (InfiniBand's controlled Q_Keys; libmlx5 passes it to the device, which
/// applies the rule). A's own Q_Key is B's, so on an mlx5 device (here the
/// software device) the message is received. Soft-RoCE (rxe, Linux 6.1 in
/// the test guest) does not apply the rule: it sends the work request's
/// Q_Key as it is, and B drops the message.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_qkey_with_the_high_bit_sends_the_qps_own_on_mlx5() {
    let mut p = UdPair::new(0x3333_3333, 0x3333_3333);
    p.recv(0, 256);
    let data = pattern(64, 9);
    p.send(1, &data, None, 0x8000_0001);
    if p.ctx.is_mlx5() {
        let got = receives(&mut p.b.recv_cq, 1, WAIT);
        assert_eq!(got.len(), 1, "{got:?}");
        check_received(&p, &got[0], &data, None);
    } else {
        let got = receives(&mut p.b.recv_cq, 1, Duration::from_secs(2));
        assert!(
            got.is_empty(),
            "soft-RoCE applied the rule after all: {got:?}"
        );
        p.send(2, &data, None, 0x3333_3333);
        let got = receives(&mut p.b.recv_cq, 1, WAIT);
        assert_eq!(got.len(), 1, "{got:?}");
        check_received(&p, &got[0], &data, None);
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_receive_shorter_than_the_grh_area_is_refused() {
    let mut p = UdPair::new(QKEY, QKEY);
    let sge = p.b.mr.sge_mut(0..39).unwrap();
    let e = unsafe { p.b.qp.post_recv(1, &[sge.into()]) }.unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfRange {
                what: "UD receive length",
                value: 39,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("UD_GRH_BYTES"), "{e}");
    let e = unsafe { p.b.qp.post_recv(1, &[]) }.unwrap_err();
    assert!(matches!(e, Error::OutOfRange { value: 0, .. }), "{e:?}");
    // Exactly the GRH area is taken, and receives an empty message.
    p.recv(0, 0);
    p.send(3, &[], None, QKEY);
    let got = receives(&mut p.b.recv_cq, 1, WAIT);
    assert_eq!(got.len(), 1, "{got:?}");
    check_received(&p, &got[0], &[], None);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn what_a_ud_qp_cannot_do_is_refused_before_c() {
    let p = UdPair::new(QKEY, QKEY);
    let cq = CompletionQueue::new(&p.ctx, 4).unwrap();
    let e = QpBuilder::ud(&p.pd, &cq, &cq)
        .send_ops(SendOps::SEND | SendOps::RDMA_WRITE)
        .build()
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");

    // An address handle of another context of the same device.
    let other = open();
    let other_pd = ProtectionDomain::new(&other).unwrap();
    let attr = *p.ah.attr();
    let other_ah = AddressHandle::new(&other_pd, &attr).unwrap();
    let mut a = p.a;
    let mr = &a.mr;
    let to = UdAddr::new(&other_ah, p.b.qp.qp_num(), QKEY);
    let e =
        a.qp.post_and_wait(&mut a.send_cq, WAIT, |b| {
            b.wr(1, to).send().sge(mr.sge(0..8)?)
        })
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    // A QP number past 24 bits.
    let to = UdAddr::new(&p.ah, 0x0100_0000, QKEY);
    let e =
        a.qp.post_and_wait(&mut a.send_cq, WAIT, |b| b.wr(1, to).send().inline(b"x"))
            .unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e:?}");
    assert_eq!(a.qp.state().unwrap(), QpState::Rts);
}

/// An address handle of another protection domain of the QP's own
/// context (`ibv_create_ah(3)`: an address handle serves the QPs of its
/// PD) is refused with a typed error before any C call, in the scoped
/// post and in a batch: nothing is posted (no completion at A, nothing
/// received at B), the QP stays in RTS, and a send through an address
/// handle of its own PD, made before the call and outliving it, then
/// arrives whole.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn an_address_handle_of_another_pd_is_refused_and_the_qp_sends_on() {
    let mut p = UdPair::new(QKEY, QKEY);
    let second = ProtectionDomain::new(&p.ctx).expect("a second PD");
    let theirs = AddressHandle::new(&second, p.ah.attr()).expect("AH in the second PD");
    let other_pd = |e: &Error| {
        matches!(e, Error::InvalidArgument(m)
            if m.contains("is of another protection domain than the QP's (of the same device context)"))
    };
    p.recv(0, 256);
    let data = pattern(200, 6);
    p.a.mr.write_at(0, &data).unwrap();
    let to = UdAddr::new(&theirs, p.b.qp.qp_num(), QKEY);
    let mr = &p.a.mr;
    let e =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(1, to).send().sge(mr.sge(0..data.len())?)
            })
            .unwrap_err();
    assert!(other_pd(&e), "{e}");
    let mut b = p.a.qp.batch();
    let e = b.wr(2, to).send().inline(b"x").unwrap_err();
    assert!(other_pd(&e), "{e}");
    drop(b);
    assert_eq!(p.a.qp.state().unwrap(), QpState::Rts);
    let mut sent = 0;
    p.a.send_cq.poll_each(4, |_| sent += 1).unwrap();
    assert_eq!(sent, 0, "no send completed at A");
    let early = receives(&mut p.b.recv_cq, 1, Duration::from_millis(200));
    assert!(early.is_empty(), "nothing reached B: {early:?}");
    // Through the QP's own PD's address handle (`p.ah`, made before the
    // call, kept after it): the message arrives byte for byte.
    p.send(3, &data, None, QKEY);
    let got = receives(&mut p.b.recv_cq, 1, WAIT);
    assert_eq!(got.len(), 1, "{got:?}");
    check_received(&p, &got[0], &data, None);
    assert_eq!(p.a.qp.state().unwrap(), QpState::Rts);
}

/// B answers A through an address handle made from A's message
/// (`AhAttr::from_received`: its GRH area, flags and source LID), to the
/// completion's source QP; A receives the answer from B's QP.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_reply_goes_back_through_an_ah_made_from_the_received_message() {
    let mut p = UdPair::new(QKEY, QKEY);
    p.recv(0, 256);
    let data = pattern(100, 3);
    p.send(1, &data, None, QKEY);
    let got = receives(&mut p.b.recv_cq, 1, WAIT);
    assert_eq!(got.len(), 1, "{got:?}");
    check_received(&p, &got[0], &data, None);
    let area: [u8; UD_GRH_BYTES] = p.b.mr.to_vec(0..UD_GRH_BYTES).unwrap().try_into().unwrap();
    let attr = AhAttr::from_received(&p.ctx, 1, &area, got[0].flags, got[0].slid.unwrap())
        .expect("ibv_init_ah_from_wc");
    assert_eq!(
        attr.grh.is_some(),
        got[0].flags.contains(WcFlags::GRH),
        "{attr:?}"
    );
    if let Some(g) = attr.grh {
        assert_eq!(g.dgid, p.local_gid(), "{attr:?}");
    }
    let back = AddressHandle::new(&p.pd, &attr).expect("the reply's AH");
    // A's receive, at slot 0 of its region.
    let sge = p.a.mr.sge_mut(0..UD_GRH_BYTES + 256).unwrap();
    unsafe { p.a.qp.post_recv(7, &[sge.into()]).unwrap() };
    let reply = pattern(50, 4);
    p.b.mr.write_at(SLOT, &reply).unwrap();
    let to = UdAddr::new(&back, got[0].src_qp.unwrap(), QKEY);
    let mr = &p.b.mr;
    let wcs =
        p.b.qp
            .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                b.wr(2, to).send().sge(mr.sge(SLOT..SLOT + 50)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 2, WcOpcode::SEND);
    let at_a = receives(&mut p.a.recv_cq, 1, WAIT);
    assert_eq!(at_a.len(), 1, "{at_a:?}");
    let r = &at_a[0];
    assert_eq!(
        (r.wr_id, r.status, r.opcode),
        (7, WcStatus::SUCCESS, WcOpcode::RECV),
        "{r:?}"
    );
    assert_eq!(r.src_qp, Some(p.b.qp.qp_num()), "{r:?}");
    let buf = p.a.mr.to_vec(0..UD_GRH_BYTES + 50).unwrap();
    let (_, msg) = ud_received(&buf, r.byte_len, r.flags).unwrap();
    assert_eq!(msg, &reply[..]);
}

/// A UD QP's endpoint is refused (`QpNotReady`, saying to call `ready`)
/// before `ready`, in ERR and after `reset`, when the QP has no Q_Key to give (a
/// peer sending with the Q_Key read then, 0 or the old one, is dropped
/// silently); from INIT on it names the Q_Key `ready` set.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_ud_endpoint_is_refused_until_ready_and_after_reset() {
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
    let opts = connect_options(&ctx);
    let cq = CompletionQueue::new(&ctx, 16).expect("CQ");
    let qp = QpBuilder::ud(&pd, &cq, &cq).build().expect("create UD QP");
    let refused = |qp: &UdQp, state: QpState| {
        let err = qp.endpoint(&opts).unwrap_err();
        assert!(
            matches!(err, Error::QpNotReady { state: s, .. } if s == state),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("UdQp::endpoint"), "{text}");
        assert!(text.contains("ready"), "{text}");
        assert!(text.contains("Q_Key"), "{text}");
    };
    refused(&qp, QpState::Reset);
    qp.ready_with(&opts, QKEY, 0).expect("ready");
    let e = qp.endpoint(&opts).expect("endpoint in RTS");
    assert_eq!((e.qpn, e.qkey), (qp.qp_num(), QKEY));
    qp.to_error().expect("to ERR");
    refused(&qp, QpState::Err);
    qp.reset().expect("reset");
    refused(&qp, QpState::Reset);
    qp.ready_with(&opts, 0x2222_2222, 0).expect("ready again");
    assert_eq!(qp.endpoint(&opts).expect("endpoint").qkey, 0x2222_2222);
}

/// A wait that times out names the other cause of missing completions,
/// a CQ that overran (which only the asynchronous events show), with the
/// CQ's capacity.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_wait_that_times_out_names_a_cq_overrun() {
    let ctx = open();
    let mut cq = CompletionQueue::new(&ctx, 16).expect("CQ");
    let capacity = cq.capacity();
    let err = cq.wait(2, Duration::from_millis(20)).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let text = err.to_string();
    for said in [
        "waiting for 2 completions",
        "(0 arrived)",
        &format!("(capacity {capacity})"),
        "overran",
        "Context::async_events",
        "CqErr",
    ] {
        assert!(text.contains(said), "{said}: {text}");
    }
}

/// `AhAttr::reply_to` makes the reply's path of a received message's
/// `WorkCompletion` and its buffer (the GRH area and the message), as
/// `from_received` does of the parts; a buffer shorter than the GRH area
/// and a send's completion are refused before any C call.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_reply_path_is_made_of_a_received_work_completion() {
    let mut p = UdPair::new(QKEY, QKEY);
    p.recv(0, 64);
    p.a.mr.write_at(SLOT, &pattern(32, 5)).unwrap();
    let to = UdAddr::new(&p.ah, p.b.qp.qp_num(), QKEY);
    let mr = &p.a.mr;
    let sent =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(1, to).send().sge(mr.sge(SLOT..SLOT + 32)?)
            })
            .unwrap()
            .to_vec();
    let wc = p.b.recv_cq.wait(1, WAIT).unwrap()[0].ok().unwrap();
    assert_eq!(wc.src_qp, Some(p.a.qp.qp_num()));
    let received = p.b.mr.to_vec(0..wc.byte_len as usize).unwrap();
    let attr = AhAttr::reply_to(&p.ctx, 1, &wc, &received).expect("reply_to");
    let area: [u8; UD_GRH_BYTES] = received[..UD_GRH_BYTES].try_into().unwrap();
    let parts = AhAttr::from_received(&p.ctx, 1, &area, wc.wc_flags, wc.slid.unwrap()).unwrap();
    assert_eq!(attr, parts);
    AddressHandle::new(&p.pd, &attr).expect("the reply's AH");
    let short = AhAttr::reply_to(&p.ctx, 1, &wc, &received[..UD_GRH_BYTES - 1]).unwrap_err();
    assert!(
        matches!(short, Error::OutOfRange { value: 39, .. }),
        "{short:?}"
    );
    let send = AhAttr::reply_to(&p.ctx, 1, &sent[0], &received).unwrap_err();
    assert!(matches!(send, Error::InvalidArgument(_)), "{send:?}");
    assert!(send.to_string().contains("has no source LID"), "{send}");
}
