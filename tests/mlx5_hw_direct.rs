//! The direct data path ([`mlx5dv::direct`]) on mlx5 hardware: a
//! [`DirectQp`] talking to a normal RC QP of the crate on the same device.
//!
//! Every kind of WQE the direct path writes is posted and checked at the
//! peer byte for byte (RDMA write, write with immediate, inline write of
//! many lengths, send, send with immediate, inline send, RDMA read, atomic
//! compare-and-swap and fetch-and-add), with every completion's status,
//! opcode, `wr_id`, `byte_len` and `covers`. Then unsignalled work requests
//! (one CQE retiring many), batches wrapping the send queue many times,
//! error CQEs (remote access error, flush, retry exceeded) and the
//! `reset` + reconnect that follows them, the refusals of `into_direct`,
//! and the scoped post's empty, abandoned and timed-out batches.
//!
//! Then a direct DC initiator ([`DirectDci`]) sending to two DCTs, each on
//! an SRQ of its own: every kind of WQE again, checked at the DCT side's
//! memory and receive completions; one batch addressing both DCTs in turn;
//! a wrong DC key (the error CQE's status as libmlx5 reports it for the
//! same write through `WrBatch`) and the `reset` + `ready` that follow;
//! DCI streams, and a stream refused on a DCI without them; `dc_addr`
//! refusing another context's address handle; `into_direct` refusing a
//! DCI whose CQ is shared.
//!
//! This test needs an mlx5 (ConnectX) device: it runs only where one is
//! present, and what it checks counts as verified on hardware only from
//! such a run. It is `#[ignore]`d; run it with
//! `MLX5DV_TEST_MLX5_DEVICE=mlx5_0 cargo test --test mlx5_hw_direct -- --ignored`
//! (or under `scripts/mlx5-sim`, which provides a software mlx5_0).
//! Without the variable it fails.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::direct::{
    DirectDcAddr, DirectDci, DirectQp, DirectRc, DirectTransport, DirectWc, IntoDirectError,
};
use mlx5dv::*;
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use support::hw::{dci_streams_caps, local_port_ah, open, DCI_PSN, DCT_KEY};
use support::rig::{self, pattern, thread_cpu, Side, MR_LEN, WAIT};

/// The direct QP's send-queue size asked for (work requests).
const SEND_WR: u32 = 64;
/// Inline data asked for: enough for WQEs of several basic blocks.
const INLINE: u32 = 128;

/// A direct RC QP and its peer, a normal RC QP of the crate, on one device.
struct Rig {
    qp: DirectRc,
    /// The direct QP's receive CQ.
    _rq: CompletionQueue,
    /// What the direct side writes and sends from.
    src: MemoryRegion,
    /// Where the direct side's reads and atomics land.
    dst: MemoryRegion,
    peer: Side,
    /// The options the direct side connects with.
    opts: ConnectOptions,
    /// The options the peer connects with.
    peer_opts: ConnectOptions,
    _pd: ProtectionDomain,
    _ctx: Context,
    psn: u32,
}

fn direct_caps() -> QpCaps {
    QpCaps {
        max_send_wr: SEND_WR,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: INLINE,
    }
}

impl Rig {
    fn new() -> Rig {
        Self::with(|o| o)
    }

    /// A rig whose direct side connects with options `tweak` makes.
    fn with(tweak: impl FnOnce(ConnectOptions) -> ConnectOptions) -> Rig {
        let mut r = Self::build(tweak, false);
        r.connect();
        r
    }

    /// A rig whose direct QP is left in RESET, never connected.
    fn unconnected() -> Rig {
        Self::build(|o| o, false)
    }

    /// A rig whose direct CQ is on a completion channel
    /// (`CompletionQueue::with_channel`).
    fn with_channel(tweak: impl FnOnce(ConnectOptions) -> ConnectOptions) -> Rig {
        let mut r = Self::build(tweak, true);
        r.connect();
        r
    }

    fn build(tweak: impl FnOnce(ConnectOptions) -> ConnectOptions, channel: bool) -> Rig {
        let ctx = open();
        let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
        let peer_opts = rig::connect_options(&ctx);
        let opts = tweak(peer_opts);
        let cq = if channel {
            let ch = CompletionChannel::new(&ctx).expect("completion channel");
            CompletionQueue::with_channel(&ctx, 256, &ch).expect("send CQ on a channel")
        } else {
            CompletionQueue::new(&ctx, 256).expect("send CQ")
        };
        let rq = CompletionQueue::new(&ctx, 16).expect("recv CQ");
        let qp = QpBuilder::rc(&pd, &cq, &rq)
            .caps(direct_caps())
            .build()
            .expect("create RC QP");
        let qp = qp.into_direct(cq).expect("into_direct");
        assert_eq!(qp.outstanding(), 0);
        assert_eq!(qp.room(), qp.depth());
        assert!(qp.depth() >= SEND_WR, "{qp:?}");
        let peer = rig::side(&ctx, &pd, QpCaps::default(), SendOps::rc_default());
        let src = MemoryRegion::new(&pd, MR_LEN, rig::access_all()).expect("src MR");
        let dst = MemoryRegion::new(&pd, MR_LEN, rig::access_all()).expect("dst MR");
        Rig {
            qp,
            _rq: rq,
            src,
            dst,
            peer,
            opts,
            peer_opts,
            _pd: pd,
            _ctx: ctx,
            psn: 0x10,
        }
    }

    /// Connects both sides (from RESET), with endpoints exchanged anew.
    fn connect(&mut self) {
        self.psn = (self.psn + 0x100) & 0x00ff_ffff;
        let mine = self
            .qp
            .endpoint(self.psn, &self.opts)
            .expect("direct endpoint");
        let theirs = self
            .peer
            .qp
            .endpoint(self.psn + 0x55, &self.peer_opts)
            .expect("peer endpoint");
        self.qp
            .connect_to(&theirs, &self.opts)
            .expect("connect the direct QP");
        self.peer
            .qp
            .connect_to(&mine, &self.peer_opts)
            .expect("connect the peer");
        assert_eq!(self.qp.state().unwrap(), QpState::Rts);
        assert_eq!(self.peer.qp.state().unwrap(), QpState::Rts);
    }

    /// Resets both sides (dropping what their CQs hold of before) and
    /// connects them again.
    fn reconnect(&mut self) {
        self.qp.reset().expect("reset the direct QP");
        assert_eq!(self.qp.state().unwrap(), QpState::Reset);
        assert_eq!(self.qp.outstanding(), 0);
        assert_eq!(self.qp.room(), self.qp.depth());
        self.peer.qp.reset().expect("reset the peer");
        let mut sink = Vec::new();
        while self.peer.recv_cq.poll_into(&mut sink, 64).unwrap() > 0 {}
        while self.peer.send_cq.poll_into(&mut sink, 64).unwrap() > 0 {}
        self.connect();
    }

    /// A write of `len` bytes of `src` (from `at`) to the peer at `to`,
    /// checked there byte for byte: the data path works.
    fn write_works(&mut self, wr_id: u64, at: usize, to: usize, len: usize) {
        self.peer.mr.fill(.., 0).unwrap();
        let data = pattern(len, wr_id as u8);
        self.src.write_at(at, &data).unwrap();
        let remote = self.peer.mr.remote(to..to + len).unwrap();
        let sge = self.src.sge(at..at + len).unwrap();
        let qpn = self.qp.qp_num();
        let wcs = self
            .qp
            .post_and_wait(WAIT, |b| {
                b.rdma_write(wr_id, SendFlags::SIGNALED, remote, sge)
            })
            .unwrap();
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        check_wc(&wcs[0], wr_id, WcOpcode::RDMA_WRITE, 1, qpn);
        self.peer_holds(to, &data);
        assert_eq!(self.qp.outstanding(), 0);
    }

    /// The peer's region holds `data` at `at` and zeros elsewhere.
    #[track_caller]
    fn peer_holds(&self, at: usize, data: &[u8]) {
        let got = self.peer.mr.to_vec(..).unwrap();
        assert_eq!(
            &got[at..at + data.len()],
            data,
            "at {at}, {} bytes",
            data.len()
        );
        let stray = got[..at]
            .iter()
            .chain(&got[at + data.len()..])
            .position(|&b| b != 0);
        assert_eq!(
            stray,
            None,
            "a byte outside {at}..+{} was written",
            data.len()
        );
    }

    fn peer_recv(&mut self, wr_id: u64, range: std::ops::Range<usize>) {
        let sge = self.peer.mr.sge(range).unwrap();
        unsafe { self.peer.qp.post_recv(wr_id, &[sge]) }.expect("post a receive at the peer");
    }

    fn peer_wait_recv(&mut self) -> WorkCompletion {
        let wcs = self.peer.recv_cq.wait(1, WAIT).expect("the peer's receive");
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        wcs[0]
    }
}

/// A successful direct completion with these fields.
#[track_caller]
fn check_wc(wc: &DirectWc, wr_id: u64, opcode: WcOpcode, covers: u32, qpn: u32) {
    assert_eq!(wc.status, WcStatus::SUCCESS, "{wc:?}");
    assert!(wc.is_success(), "{wc:?}");
    wc.ok().unwrap();
    assert_eq!(wc.wr_id, wr_id, "{wc:?}");
    assert_eq!(wc.opcode, opcode, "{wc:?}");
    assert_eq!(wc.covers, covers, "{wc:?}");
    assert_eq!(wc.qp_num, qpn, "{wc:?}");
    assert_eq!((wc.syndrome, wc.vendor_err), (0, 0), "{wc:?}");
}

/// Polls the direct QP until `n` completions came, or fails at `WAIT`.
fn poll_n<T: DirectTransport>(qp: &mut DirectQp<T>, n: usize) -> Vec<DirectWc> {
    let mut wcs = Vec::new();
    let deadline = Instant::now() + WAIT;
    while wcs.len() < n {
        qp.poll(n - wcs.len(), |wc| wcs.push(wc)).expect("poll");
        assert!(Instant::now() < deadline, "only {wcs:?} of {n} came");
    }
    wcs
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn rdma_write_lands_byte_for_byte() {
    let mut r = Rig::new();
    for (i, &(at, to, len)) in [
        (0usize, 0usize, 1usize),
        (3, 100, 7),
        (64, 1000, 64),
        (100, 4096, 4096),
        (7, 9000, 30_000),
    ]
    .iter()
    .enumerate()
    {
        r.write_works(i as u64 + 1, at, to, len);
    }
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn rdma_write_imm_gives_the_peer_its_immediate() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    for (i, &(to, len, imm)) in [
        (0usize, 1usize, 0u32),
        (128, 256, 0xdead_beef),
        (5000, 3000, 0x0102_0304),
    ]
    .iter()
    .enumerate()
    {
        let wr_id = 40 + i as u64;
        r.peer.mr.fill(.., 0).unwrap();
        let data = pattern(len, i as u8 + 9);
        r.src.write_at(0, &data).unwrap();
        // The receive a write with immediate consumes; its memory is not
        // written.
        r.peer_recv(900 + i as u64, MR_LEN - 64..MR_LEN);
        let remote = r.peer.mr.remote(to..to + len).unwrap();
        let sge = r.src.sge(0..len).unwrap();
        let wcs =
            r.qp.post_and_wait(WAIT, |b| {
                b.rdma_write_imm(wr_id, SendFlags::SIGNALED, remote, imm, sge)
            })
            .unwrap();
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        check_wc(&wcs[0], wr_id, WcOpcode::RDMA_WRITE, 1, qpn);
        assert_eq!(wcs[0].byte_len, 0, "{:?}", wcs[0]);
        let rx = r.peer_wait_recv();
        assert_eq!(rx.status, WcStatus::SUCCESS, "{rx:?}");
        assert_eq!(rx.wr_id, 900 + i as u64, "{rx:?}");
        assert_eq!(rx.opcode, WcOpcode::RECV_RDMA_WITH_IMM, "{rx:?}");
        assert_eq!(rx.imm, Some(imm), "{rx:?}");
        assert_eq!(rx.byte_len as usize, len, "{rx:?}");
        r.peer_holds(to, &data);
    }
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn inline_writes_of_every_shape() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    let max = r.qp.caps().max_inline_data as usize;
    assert!(max >= INLINE as usize, "{:?}", r.qp.caps());
    // Lengths at each edge of the 16-byte units (12 bytes share the unit
    // of the byte count) and of the 64-byte basic blocks, up to the most.
    let mut lens = vec![0usize, 1, 11, 12, 13, 27, 28, 29, 44, 45, 60, 61, 76, 100];
    lens.push(max - 1);
    lens.push(max);
    for (i, &len) in lens.iter().enumerate() {
        let wr_id = 100 + i as u64;
        r.peer.mr.fill(.., 0).unwrap();
        let data = pattern(len, i as u8 + 1);
        let to = 64 * i + 3;
        let remote = r
            .peer
            .mr
            .remote(..)
            .unwrap()
            .slice(to as u64, len as u64)
            .unwrap();
        let wcs =
            r.qp.post_and_wait(WAIT, |b| {
                b.rdma_write_inline(wr_id, SendFlags::SIGNALED, remote, &data)
            })
            .unwrap_or_else(|e| panic!("inline write of {len} bytes: {e}"));
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        check_wc(&wcs[0], wr_id, WcOpcode::RDMA_WRITE, 1, qpn);
        r.peer_holds(to, &data);
    }

    // One byte more than the QP takes inline: refused, nothing posted.
    let remote = r.peer.mr.remote(0..max + 1).unwrap();
    let big = vec![1u8; max + 1];
    let e =
        r.qp.post_and_wait(WAIT, |b| {
            b.rdma_write_inline(1, SendFlags::SIGNALED, remote, &big)
        })
        .unwrap_err();
    assert!(
        matches!(e, Error::Direct(DirectError::InlineTooLong { .. })),
        "{e}"
    );
    assert_eq!(r.qp.outstanding(), 0);
    // Several inline WQEs of several basic blocks in one batch.
    r.peer.mr.fill(.., 0).unwrap();
    let datas: Vec<Vec<u8>> = (0..8).map(|i| pattern(max - i * 7, i as u8)).collect();
    let remote = r.peer.mr.remote(..).unwrap();
    let wcs =
        r.qp.post_and_wait(WAIT, |b| {
            for (i, d) in datas.iter().enumerate() {
                let to = (i * 256) as u64;
                b.rdma_write_inline(
                    i as u64,
                    SendFlags::empty(),
                    remote.slice(to, d.len() as u64)?,
                    d,
                )?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    check_wc(&wcs[0], 7, WcOpcode::RDMA_WRITE, 8, qpn);
    let got = r.peer.mr.to_vec(..).unwrap();
    for (i, d) in datas.iter().enumerate() {
        assert_eq!(&got[i * 256..i * 256 + d.len()], &d[..], "inline write {i}");
    }
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn sends_arrive_byte_for_byte() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    let max = r.qp.caps().max_inline_data as usize;
    #[derive(Debug, Clone, Copy)]
    enum Kind {
        Send,
        SendImm(u32),
        Inline,
    }
    let cases = [
        (Kind::Send, 1usize),
        (Kind::Send, 0),
        (Kind::Send, 33),
        (Kind::Send, 4096),
        (Kind::Send, 20_000),
        (Kind::SendImm(0xfeed_f00d), 0),
        (Kind::SendImm(7), 64),
        (Kind::SendImm(0x8000_0001), 5000),
        (Kind::Inline, 0),
        (Kind::Inline, 1),
        (Kind::Inline, 12),
        (Kind::Inline, 13),
        (Kind::Inline, 60),
        (Kind::Inline, max),
    ];
    for (i, &(kind, len)) in cases.iter().enumerate() {
        let wr_id = 200 + i as u64;
        let rx_id = 300 + i as u64;
        r.peer.mr.fill(.., 0).unwrap();
        let data = pattern(len, i as u8 + 17);
        r.src.write_at(64, &data).unwrap();
        r.peer_recv(rx_id, 0..MR_LEN);
        let sge = r.src.sge(64..64 + len).unwrap();
        let wcs =
            r.qp.post_and_wait(WAIT, |b| match kind {
                Kind::Send => b.send(wr_id, SendFlags::SIGNALED, sge),
                Kind::SendImm(imm) => b.send_imm(wr_id, SendFlags::SIGNALED, imm, sge),
                Kind::Inline => b.send_inline(wr_id, SendFlags::SIGNALED, &data),
            })
            .unwrap_or_else(|e| panic!("{kind:?} of {len} bytes: {e}"));
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        check_wc(&wcs[0], wr_id, WcOpcode::SEND, 1, qpn);
        assert_eq!(wcs[0].byte_len, 0, "{:?}", wcs[0]);
        let rx = r.peer_wait_recv();
        assert_eq!(rx.status, WcStatus::SUCCESS, "{kind:?} {len}: {rx:?}");
        assert_eq!(rx.wr_id, rx_id, "{rx:?}");
        assert_eq!(rx.opcode, WcOpcode::RECV, "{rx:?}");
        assert_eq!(rx.byte_len as usize, len, "{kind:?}: {rx:?}");
        let imm = match kind {
            Kind::SendImm(imm) => Some(imm),
            _ => None,
        };
        assert_eq!(rx.imm, imm, "{kind:?}: {rx:?}");
        r.peer_holds(0, &data);
    }
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn rdma_read_fetches_byte_for_byte() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    for (i, &(from, at, len)) in [
        (0usize, 0usize, 1usize),
        (8, 8, 8),
        (100, 3, 32),
        (1000, 64, 33),
        (4096, 0, 4096),
        (9, 17, 40_000),
    ]
    .iter()
    .enumerate()
    {
        let wr_id = 400 + i as u64;
        let data = pattern(len, i as u8 + 31);
        r.peer.mr.fill(.., 0).unwrap();
        r.peer.mr.write_at(from, &data).unwrap();
        r.dst.fill(.., 0).unwrap();
        let remote = r.peer.mr.remote(from..from + len).unwrap();
        let sge = r.dst.sge_mut(at..at + len).unwrap();
        let wcs =
            r.qp.post_and_wait(WAIT, |b| {
                b.rdma_read(wr_id, SendFlags::SIGNALED, remote, sge)
            })
            .unwrap();
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        check_wc(&wcs[0], wr_id, WcOpcode::RDMA_READ, 1, qpn);
        assert_eq!(wcs[0].byte_len as usize, len, "{:?}", wcs[0]);
        let got = r.dst.to_vec(..).unwrap();
        assert_eq!(&got[at..at + len], &data[..], "read {i}");
        assert!(got[..at].iter().chain(&got[at + len..]).all(|&b| b == 0));
    }
}

/// The 8 bytes an atomic left in `mr` at `at`. The software device (and
/// a ConnectX whose responder is in host-endianness mode, which the
/// kernel requires for `IBV_ATOMIC_HCA`) returns the old value in host
/// order, the order the peer's memory holds it in.
fn u64_at(mr: &MemoryRegion, at: usize) -> u64 {
    let mut b = [0u8; 8];
    mr.read_at(at, &mut b).unwrap();
    u64::from_ne_bytes(b)
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn atomics_return_the_old_value_and_update_the_peer() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    const V: u64 = 0x0102_0304_0506_0708;
    const W: u64 = 0x1122_3344_5566_7788;
    r.peer.mr.fill(.., 0).unwrap();
    r.peer.mr.write_at(64, &V.to_ne_bytes()).unwrap();
    let remote = r.peer.mr.remote(64..72).unwrap();

    // Compare-and-swap that matches: V comes back, W is there.
    r.dst.fill(.., 0xee).unwrap();
    let sge = r.dst.sge_mut(8..16).unwrap();
    let wcs =
        r.qp.post_and_wait(WAIT, |b| {
            b.atomic_cmp_swp(500, SendFlags::SIGNALED, remote, V, W, sge)
        })
        .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    check_wc(&wcs[0], 500, WcOpcode::COMP_SWAP, 1, qpn);
    assert_eq!(wcs[0].byte_len, 8, "{:?}", wcs[0]);
    assert_eq!(u64_at(&r.dst, 8), V);
    assert_eq!(u64_at(&r.peer.mr, 64), W);
    // Untouched around the 8 bytes.
    assert!(r.dst.to_vec(0..8).unwrap().iter().all(|&b| b == 0xee));
    assert!(r.dst.to_vec(16..24).unwrap().iter().all(|&b| b == 0xee));

    // Compare-and-swap that does not match: W comes back, W stays.
    let sge = r.dst.sge_mut(16..24).unwrap();
    let wcs =
        r.qp.post_and_wait(WAIT, |b| {
            b.atomic_cmp_swp(501, SendFlags::SIGNALED, remote, V, 0, sge)
        })
        .unwrap();
    check_wc(&wcs[0], 501, WcOpcode::COMP_SWAP, 1, qpn);
    assert_eq!(u64_at(&r.dst, 16), W);
    assert_eq!(u64_at(&r.peer.mr, 64), W);

    // Fetch-and-add, twice in one batch (the first unsignalled).
    let (a, b2) = r.dst.sge_mut(24..40).unwrap().split_at(8).unwrap();
    let wcs =
        r.qp.post_and_wait(WAIT, |b| {
            b.atomic_fetch_add(502, SendFlags::empty(), remote, 5, a)?;
            b.atomic_fetch_add(503, SendFlags::SIGNALED, remote, 0x1_0000_0000, b2)
        })
        .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    check_wc(&wcs[0], 503, WcOpcode::FETCH_ADD, 2, qpn);
    assert_eq!(wcs[0].byte_len, 8);
    assert_eq!(u64_at(&r.dst, 24), W);
    assert_eq!(u64_at(&r.dst, 32), W + 5);
    assert_eq!(u64_at(&r.peer.mr, 64), W + 5 + 0x1_0000_0000);

    // Wraps at 2^64.
    let sge = r.dst.sge_mut(40..48).unwrap();
    let wcs =
        r.qp.post_and_wait(WAIT, |b| {
            b.atomic_fetch_add(504, SendFlags::SIGNALED, remote, u64::MAX, sge)
        })
        .unwrap();
    check_wc(&wcs[0], 504, WcOpcode::FETCH_ADD, 1, qpn);
    assert_eq!(u64_at(&r.dst, 40), W + 5 + 0x1_0000_0000);
    assert_eq!(u64_at(&r.peer.mr, 64), W + 4 + 0x1_0000_0000);

    // Misaligned or mis-sized: refused before anything is written.
    let odd = r.peer.mr.remote(65..73).unwrap();
    let sge = r.dst.sge_mut(0..8).unwrap();
    let e =
        r.qp.post_and_wait(WAIT, |b| {
            b.atomic_fetch_add(1, SendFlags::empty(), odd, 1, sge)
        })
        .unwrap_err();
    assert!(
        matches!(e, Error::Direct(DirectError::AtomicUnaligned { .. })),
        "{e}"
    );
    let sge = r.dst.sge_mut(0..16).unwrap();
    let e =
        r.qp.post_and_wait(WAIT, |b| {
            b.atomic_fetch_add(1, SendFlags::empty(), remote, 1, sge)
        })
        .unwrap_err();
    assert!(
        matches!(e, Error::Direct(DirectError::AtomicLength { len: 16 })),
        "{e}"
    );
    assert_eq!(r.qp.outstanding(), 0);
    assert_eq!(u64_at(&r.peer.mr, 64), W + 4 + 0x1_0000_0000);
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn one_completion_retires_32_unsignalled_writes() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    let data = pattern(32 * 64, 5);
    r.src.write_at(0, &data).unwrap();
    r.peer.mr.fill(.., 0).unwrap();
    let remote = r.peer.mr.remote(..).unwrap();

    // Rung without waiting: only the last is signalled.
    let mut b = r.qp.batch();
    for i in 0..32u64 {
        let flags = if i == 31 {
            SendFlags::SIGNALED
        } else {
            SendFlags::empty()
        };
        let at = i as usize * 64;
        b.rdma_write(
            i,
            flags,
            remote.slice(at as u64 * 2, 64).unwrap(),
            r.src.sge(at..at + 64).unwrap(),
        )
        .unwrap();
    }
    assert_eq!(b.len(), 32);
    // `src` is neither written nor dropped until the completion below.
    let n = unsafe { b.ring() };
    assert_eq!(n, 32);
    assert_eq!(r.qp.outstanding(), 32);
    assert_eq!(r.qp.room(), r.qp.depth() - 32);
    let wcs = poll_n(&mut r.qp, 1);
    check_wc(&wcs[0], 31, WcOpcode::RDMA_WRITE, 32, qpn);
    assert_eq!(r.qp.outstanding(), 0);
    assert_eq!(r.qp.room(), r.qp.depth());
    // Nothing more comes.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(r.qp.poll(8, |wc| panic!("{wc:?}")).unwrap(), 0);
    let got = r.peer.mr.to_vec(..).unwrap();
    for i in 0..32 {
        assert_eq!(
            &got[i * 128..i * 128 + 64],
            &data[i * 64..i * 64 + 64],
            "write {i}"
        );
        assert!(got[i * 128 + 64..i * 128 + 128].iter().all(|&b| b == 0));
    }

    // The scoped post signals the last of a batch whose flags are all
    // empty.
    r.peer.mr.fill(.., 0).unwrap();
    let src = &r.src;
    let wcs =
        r.qp.post_and_wait(WAIT, |b| {
            for i in 0..32u64 {
                let at = i as usize * 64;
                b.rdma_write(
                    1000 + i,
                    SendFlags::empty(),
                    remote.slice(at as u64, 64)?,
                    src.sge(at..at + 64)?,
                )?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    check_wc(&wcs[0], 1031, WcOpcode::RDMA_WRITE, 32, qpn);
    assert_eq!(r.qp.outstanding(), 0);
    r.peer_holds(0, &data);
}

/// A batch held to 32 work requests by `limit` posts them (an empty entry
/// among them, written as no data segment) and refuses a 33rd, writing
/// nothing of it; the limit is checked against the send queue's room.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn a_limited_batch_posts_its_writes_and_refuses_one_more() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    let data = pattern(32 * 64, 11);
    r.src.write_at(0, &data).unwrap();
    r.peer.mr.fill(.., 0).unwrap();
    let remote = r.peer.mr.remote(..).unwrap();
    let depth = r.qp.depth() as usize;

    let mut b = r.qp.batch();
    assert!(matches!(
        b.limit(depth + 1),
        Err(Error::SendQueueFull { .. })
    ));
    b.limit(32).unwrap();
    let plan: Vec<_> = (0..32usize)
        .map(|i| {
            let len = if i == 5 { 0 } else { 64 };
            let at = i * 64;
            (
                remote.slice(at as u64, 64).unwrap(),
                r.src.sge(at..at + len).unwrap(),
            )
        })
        .collect();
    for (i, (to, src)) in plan.iter().enumerate() {
        b.rdma_write(i as u64, SendFlags::SIGNALED, *to, *src)
            .unwrap();
    }
    assert!(matches!(
        b.rdma_write(32, SendFlags::SIGNALED, plan[0].0, plan[0].1),
        Err(Error::BatchLimit { limit: 32 })
    ));
    assert_eq!((b.len(), b.room()), (32, 0));
    // `src` is neither written nor dropped until the completions below.
    assert_eq!(unsafe { b.ring() }, 32);
    let wcs = poll_n(&mut r.qp, 32);
    for (i, wc) in wcs.iter().enumerate() {
        check_wc(wc, i as u64, WcOpcode::RDMA_WRITE, 1, qpn);
    }
    assert_eq!(r.qp.outstanding(), 0);
    let got = r.peer.mr.to_vec(..32 * 64).unwrap();
    for i in 0..32 {
        let want: &[u8] = if i == 5 {
            &[0; 64]
        } else {
            &data[i * 64..i * 64 + 64]
        };
        assert_eq!(&got[i * 64..i * 64 + 64], want, "write {i}");
    }
}

/// `poll_into`: the completions a scoped post kept for the next poll come
/// first, then the CQ's, as many as the slice holds each time, every field
/// as `poll` gives it.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn poll_into_fills_slices_backlog_first() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    let data = pattern(32 * 64, 9);
    r.src.write_at(0, &data).unwrap();
    r.peer.mr.fill(.., 0).unwrap();
    let remote = r.peer.mr.remote(..).unwrap();
    fn write<'m>(
        b: &mut mlx5dv::direct::DirectBatch<'_, 'm, ReliableConnection>,
        src: &'m MemoryRegion,
        remote: RemoteBuf,
        i: u64,
    ) {
        let at = i as usize * 64;
        b.rdma_write(
            i,
            SendFlags::SIGNALED,
            remote.slice(at as u64, 64).unwrap(),
            src.sge(at..at + 64).unwrap(),
        )
        .unwrap();
    }
    // Four rung without waiting, then a scoped post, which reads their
    // completions before its own and keeps them.
    let mut b = r.qp.batch();
    for i in 0..4 {
        write(&mut b, &r.src, remote, i);
    }
    // `src` is neither written nor dropped until the completions below.
    assert_eq!(unsafe { b.ring() }, 4);
    let src = &r.src;
    let wcs =
        r.qp.post_and_wait(WAIT, |b| {
            b.rdma_write(
                100,
                SendFlags::empty(),
                remote.slice(4 * 64, 64)?,
                src.sge(4 * 64..5 * 64)?,
            )
        })
        .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    check_wc(&wcs[0], 100, WcOpcode::RDMA_WRITE, 1, qpn);
    let mut out = [DirectWc::default(); 3];
    assert_eq!(r.qp.poll_into(&mut out).unwrap(), 3);
    for (i, wc) in out.iter().enumerate() {
        check_wc(wc, i as u64, WcOpcode::RDMA_WRITE, 1, qpn);
    }
    assert_eq!(r.qp.poll_into(&mut out).unwrap(), 1);
    check_wc(&out[0], 3, WcOpcode::RDMA_WRITE, 1, qpn);
    assert_eq!(r.qp.poll_into(&mut out).unwrap(), 0);

    // 27 more, read into slices of 8 as they come.
    let mut b = r.qp.batch();
    for i in 5..32 {
        write(&mut b, &r.src, remote, i);
    }
    // As above.
    assert_eq!(unsafe { b.ring() }, 27);
    let mut out = [DirectWc::default(); 8];
    let mut next = 5;
    let deadline = Instant::now() + WAIT;
    while next < 32 {
        let n = r.qp.poll_into(&mut out).unwrap();
        assert!(n <= 8);
        for wc in &out[..n] {
            check_wc(wc, next, WcOpcode::RDMA_WRITE, 1, qpn);
            next += 1;
        }
        assert!(Instant::now() < deadline, "only up to {next} of 32 came");
    }
    assert_eq!(r.qp.outstanding(), 0);
    assert_eq!(r.qp.poll_into(&mut out).unwrap(), 0);
    r.peer_holds(0, &data);
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn scoped_batches_wrap_the_send_queue() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    let depth = r.qp.depth();
    let data = pattern(MR_LEN, 77);
    r.src.write_at(0, &data).unwrap();
    r.peer.mr.fill(.., 0).unwrap();
    let remote = r.peer.mr.remote(..).unwrap();
    let mut expected = vec![0u8; MR_LEN];
    let mut next = 0u64;
    // Batches of 1 to `depth` one-block writes, several times round.
    let mut k = 1u32;
    let mut posted = 0u32;
    while posted < 6 * depth {
        let first = next;
        let src = &r.src;
        let wcs =
            r.qp.post_and_wait(WAIT, |b| {
                for j in 0..k {
                    let wr = first + u64::from(j);
                    let at = ((wr * 97) % (MR_LEN as u64 - 64)) as usize;
                    let to = (wr % (MR_LEN as u64 / 64)) * 64;
                    b.rdma_write(
                        wr,
                        SendFlags::empty(),
                        remote.slice(to, 64)?,
                        src.sge(at..at + 64)?,
                    )?;
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("batch of {k} from {first}: {e}"));
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        check_wc(
            &wcs[0],
            first + u64::from(k) - 1,
            WcOpcode::RDMA_WRITE,
            k,
            qpn,
        );
        for j in 0..k {
            let wr = first + u64::from(j);
            let at = ((wr * 97) % (MR_LEN as u64 - 64)) as usize;
            let to = ((wr % (MR_LEN as u64 / 64)) * 64) as usize;
            expected[to..to + 64].copy_from_slice(&data[at..at + 64]);
        }
        assert_eq!(r.qp.outstanding(), 0);
        assert_eq!(r.qp.room(), depth);
        assert_eq!(
            r.peer.mr.to_vec(..).unwrap(),
            expected,
            "after batch from {first}"
        );
        next += u64::from(k);
        posted += k;
        k = k % depth + 7;
    }

    // A batch of exactly the queue; one more is refused as full, and the
    // refused batch posts nothing.
    let src = &r.src;
    let e =
        r.qp.post_and_wait(WAIT, |b| {
            for i in 0..=depth {
                b.rdma_write(
                    u64::from(i),
                    SendFlags::empty(),
                    remote.slice(0, 8)?,
                    src.sge(0..8)?,
                )?;
            }
            Ok(())
        })
        .unwrap_err();
    assert!(
        matches!(e, Error::SendQueueFull { batch, depth: d } if batch == depth + 1 && d == depth),
        "{e}"
    );
    assert_eq!(r.qp.outstanding(), 0);
    assert_eq!(r.peer.mr.to_vec(..).unwrap(), expected);
    let wcs =
        r.qp.post_and_wait(WAIT, |b| {
            for i in 0..depth {
                b.rdma_write(
                    u64::from(i),
                    SendFlags::empty(),
                    remote.slice(0, 8)?,
                    src.sge(0..8)?,
                )?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    check_wc(
        &wcs[0],
        u64::from(depth) - 1,
        WcOpcode::RDMA_WRITE,
        depth,
        qpn,
    );
    expected[..8].copy_from_slice(&data[..8]);
    assert_eq!(r.peer.mr.to_vec(..).unwrap(), expected);
}

/// Pipelined: batches rung while earlier ones run, mixing one-block
/// writes with inline writes of several blocks (so that WQEs straddle the
/// ring's end), every eighth work request and each batch's last
/// signalled; `room` drops by exactly the blocks written, each completion
/// retires exactly the work requests since the one before, and the peer
/// ends with what the writes wrote, in order.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn pipelined_batches_wrap_with_room_accounting() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    let depth = r.qp.depth();
    let max = r.qp.caps().max_inline_data as usize;
    let data = pattern(MR_LEN, 3);
    r.src.write_at(0, &data).unwrap();
    r.peer.mr.fill(.., 0).unwrap();
    let remote = r.peer.mr.remote(..).unwrap();
    let total = u64::from(depth) * 8 + 5;
    let slots = (MR_LEN / 256) as u64;
    // Work request `wr`: whether inline, its source offset and length, and
    // the basic blocks its WQE takes (control and remote-address segments,
    // then one data segment or the inline bytes after a 4-byte count).
    let shape = |wr: u64| -> (bool, usize, usize, u32) {
        let w = wr as usize;
        if wr % 3 == 1 {
            let len = 20 + (w * 13) % (max - 20);
            let units = 2 + (len as u32 + 4).div_ceil(16);
            (true, (w * 31) % (MR_LEN - max), len, units.div_ceil(4))
        } else {
            (false, (w * 97) % (MR_LEN - 200), 1 + w % 200, 1)
        }
    };
    // (wr_id, work requests since the previous signalled one).
    let mut signalled: VecDeque<(u64, u32)> = VecDeque::new();
    let mut next = 0u64;
    let mut retired = 0u64;
    let mut batches = 0u32;
    let mut full = 0u32;
    let deadline = Instant::now() + WAIT;
    while retired < total {
        assert!(
            Instant::now() < deadline,
            "stuck at {retired} of {total}: {:?}",
            r.qp
        );
        let room = r.qp.room();
        let want = 1 + u64::from(batches % 11);
        let (mut cnt, mut need) = (0u64, 0u32);
        while cnt < want && next + cnt < total && need + shape(next + cnt).3 <= room {
            need += shape(next + cnt).3;
            cnt += 1;
        }
        if cnt < want && next + cnt < total {
            full += 1;
        }
        if cnt > 0 {
            let mut b = r.qp.batch();
            let mut since = 0u32;
            for wr in next..next + cnt {
                let (inline, at, len, _) = shape(wr);
                let to = (wr % slots) * 256;
                let flags = if wr % 8 == 7 || wr + 1 == next + cnt {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::empty()
                };
                let dst = remote.slice(to, len as u64).unwrap();
                if inline {
                    b.rdma_write_inline(wr, flags, dst, &data[at..at + len])
                } else {
                    b.rdma_write(wr, flags, dst, r.src.sge(at..at + len).unwrap())
                }
                .unwrap_or_else(|e| panic!("wr {wr} (room {room}, need {need}): {e}"));
                since += 1;
                if flags.contains(SendFlags::SIGNALED) {
                    signalled.push_back((wr, since));
                    since = 0;
                }
            }
            assert_eq!(b.room(), room - need);
            // `src` is neither written nor dropped until every completion
            // is polled below.
            let n = unsafe { b.ring() };
            assert_eq!(u64::from(n), cnt);
            assert_eq!(r.qp.room(), room - need);
            next += cnt;
            batches += 1;
        }
        r.qp.poll(4, |wc| {
            let (id, covers) = signalled.pop_front().unwrap_or_else(|| panic!("{wc:?}"));
            check_wc(&wc, id, WcOpcode::RDMA_WRITE, covers, qpn);
            retired += u64::from(covers);
        })
        .unwrap();
        assert!(r.qp.room() <= depth);
        assert_eq!(u64::from(r.qp.outstanding()), next - retired);
    }
    assert!(signalled.is_empty(), "{signalled:?}");
    assert_eq!(r.qp.outstanding(), 0);
    assert_eq!(r.qp.room(), depth);
    assert!(batches > 8, "{batches} batches");
    eprintln!("{batches} batches; {full} times the ring was too full for the next; depth {depth}");
    // What the peer holds: every work request 0..total, in order.
    let mut want = vec![0u8; MR_LEN];
    for wr in 0..total {
        let (_, at, len, _) = shape(wr);
        let to = ((wr % slots) * 256) as usize;
        want[to..to + len].copy_from_slice(&data[at..at + len]);
    }
    assert_eq!(r.peer.mr.to_vec(..).unwrap(), want);
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn remote_access_error_flushes_the_rest_and_reset_recovers() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    r.peer.mr.fill(.., 0).unwrap();
    let good = r.peer.mr.remote(0..4096).unwrap();
    let mut bad = good.slice(0, 64).unwrap();
    bad.rkey ^= 0x00ab_cd00;
    let src = &r.src;
    let wcs =
        r.qp.post_and_wait(WAIT, |b| {
            b.rdma_write(10, SendFlags::SIGNALED, bad, src.sge(0..64)?)?;
            b.rdma_write(
                11,
                SendFlags::SIGNALED,
                good.slice(64, 64)?,
                src.sge(0..64)?,
            )?;
            b.rdma_write(
                12,
                SendFlags::SIGNALED,
                good.slice(128, 64)?,
                src.sge(0..64)?,
            )
        })
        .unwrap()
        .to_vec();
    assert_eq!(wcs.len(), 3, "{wcs:?}");
    for (wc, (id, status)) in wcs.iter().zip([
        (10, WcStatus::REM_ACCESS_ERR),
        (11, WcStatus::WR_FLUSH_ERR),
        (12, WcStatus::WR_FLUSH_ERR),
    ]) {
        assert_eq!(wc.wr_id, id, "{wc:?}");
        assert_eq!(wc.status, status, "{wc:?}");
        assert_eq!(wc.covers, 1, "{wc:?}");
        assert_eq!(wc.qp_num, qpn, "{wc:?}");
        assert_eq!(wc.opcode, WcOpcode::RDMA_WRITE, "{wc:?}");
        assert!(!wc.is_success());
        assert_eq!(wc.byte_len, 0);
        match wc.ok() {
            Err(Error::WorkCompletion {
                wr_id,
                qp_num,
                status: s,
                ..
            }) => {
                assert_eq!((wr_id, qp_num, s), (id, qpn, status));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_ne!(wcs[0].syndrome, 0, "{:?}", wcs[0]);
    let e = wcs[0].ok().unwrap_err();
    assert!(e.to_string().contains("work request 10"), "{e}");
    assert_eq!(r.qp.outstanding(), 0);
    assert_eq!(r.qp.state().unwrap(), QpState::Err);
    assert!(r.peer.mr.to_vec(..).unwrap().iter().all(|&b| b == 0));

    // RESET resynchronises the rings; new endpoints, and writes work
    // again (twice, so that the second runs from a producer index past 0).
    r.reconnect();
    r.write_works(20, 0, 100, 300);
    r.write_works(21, 8, 200, 64);

    // And again with unsignalled work requests before the failing one:
    // the error CQE retires them with it.
    let src = &r.src;
    r.peer.mr.fill(.., 0).unwrap();
    let good = r.peer.mr.remote(0..4096).unwrap();
    let wcs =
        r.qp.post_and_wait(WAIT, |b| {
            b.rdma_write(30, SendFlags::empty(), good.slice(0, 64)?, src.sge(0..64)?)?;
            b.rdma_write(31, SendFlags::empty(), good.slice(64, 64)?, src.sge(0..64)?)?;
            b.rdma_write(32, SendFlags::SIGNALED, bad, src.sge(0..64)?)?;
            b.rdma_write(
                33,
                SendFlags::SIGNALED,
                good.slice(128, 64)?,
                src.sge(0..64)?,
            )
        })
        .unwrap()
        .to_vec();
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].covers),
        (32, WcStatus::REM_ACCESS_ERR, 3),
        "{wcs:?}"
    );
    assert_eq!(
        (wcs[1].wr_id, wcs[1].status, wcs[1].covers),
        (33, WcStatus::WR_FLUSH_ERR, 1),
        "{wcs:?}"
    );
    let got = r.peer.mr.to_vec(..).unwrap();
    assert_eq!(&got[..64], &r.src.to_vec(0..64).unwrap()[..]);
    assert_eq!(&got[64..128], &r.src.to_vec(0..64).unwrap()[..]);
    assert!(got[128..].iter().all(|&b| b == 0));
    r.reconnect();
    r.write_works(40, 0, 0, 4096);
}

/// `QpNotReady` from a direct post, with its fields.
#[track_caller]
fn not_ready<V: std::fmt::Debug>(r: Result<V>, what: &str, qpn: u32, state: QpState) {
    match r {
        Err(Error::QpNotReady {
            what: w,
            qp_num,
            state: s,
            receive,
        }) => assert_eq!((w, qp_num, s, receive), (what, qpn, state, false)),
        other => panic!("expected QpNotReady ({what}, {state}), got {other:?}"),
    }
}

/// A direct QP never connected refuses every post at once: the scoped
/// post before its closure runs, a batch's writers before writing
/// anything, with `QpNotReady` naming RESET; nothing reaches the peer.
/// Connected, the same QP writes.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn a_never_connected_direct_qp_refuses_posts_at_once() {
    let mut r = Rig::unconnected();
    let qpn = r.qp.qp_num();
    assert_eq!(r.qp.state().unwrap(), QpState::Reset);
    r.peer.mr.fill(.., 0).unwrap();
    r.src.write_at(0, &pattern(64, 7)).unwrap();
    let remote = r.peer.mr.remote(0..64).unwrap();
    let src = &r.src;

    let t0 = Instant::now();
    let mut built = false;
    let res = r.qp.post_and_wait(WAIT, |b| {
        built = true;
        b.rdma_write(1, SendFlags::SIGNALED, remote, src.sge(0..64)?)
    });
    let took = t0.elapsed();
    let e = res.map(<[DirectWc]>::to_vec);
    let text = e.as_ref().map_err(ToString::to_string).unwrap_err();
    not_ready(e, "DirectQp::post_and_wait", qpn, QpState::Reset);
    assert!(text.contains("not connected"), "{text}");
    assert!(took < Duration::from_secs(1), "refused after {took:?}");
    assert!(!built, "the batch was built for a QP that cannot post");

    let t0 = Instant::now();
    let mut b = r.qp.batch();
    assert_eq!(b.room(), 0);
    not_ready(
        b.rdma_write(2, SendFlags::SIGNALED, remote, src.sge(0..64).unwrap()),
        "DirectQp::batch",
        qpn,
        QpState::Reset,
    );
    not_ready(b.limit(1), "DirectQp::batch", qpn, QpState::Reset);
    assert_eq!(unsafe { b.ring() }, 0);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_eq!(r.qp.outstanding(), 0);
    assert_eq!(r.qp.poll(8, |wc| panic!("{wc:?}")).unwrap(), 0);
    assert!(r.peer.mr.to_vec(..).unwrap().iter().all(|&b| b == 0));

    r.connect();
    r.write_works(3, 0, 128, 64);
}

/// After a work request fails (a write to a bad rkey), the device has
/// moved the QP to ERR: the next post is refused with `QpNotReady` naming
/// ERR, whichever way the failure was read (a scoped post, `wait`,
/// `poll_into`), instead of being posted and flushed. So is a post after
/// `to_error`. A reset and a new connection make it post again.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn a_post_after_a_failed_work_request_is_refused_until_reset() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    let good = r.peer.mr.remote(0..4096).unwrap();
    let mut bad = good.slice(0, 64).unwrap();
    bad.rkey ^= 0x00ab_cd00;
    let write = |qp: &mut DirectRc, id: u64, to: RemoteBuf, src: &MemoryRegion| {
        qp.post_and_wait(WAIT, |b| {
            b.rdma_write(id, SendFlags::SIGNALED, to, src.sge(0..64)?)
        })
        .map(<[DirectWc]>::to_vec)
    };

    // Read by a scoped post.
    let wcs = write(&mut r.qp, 1, bad, &r.src).unwrap();
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        [(1, WcStatus::REM_ACCESS_ERR)]
    );
    let t0 = Instant::now();
    let again = write(&mut r.qp, 2, good, &r.src);
    let text = again.as_ref().map_err(ToString::to_string).unwrap_err();
    not_ready(again, "DirectQp::post_and_wait", qpn, QpState::Err);
    assert!(text.contains("reset() it"), "{text}");
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    let mut b = r.qp.batch();
    not_ready(
        b.rdma_write(3, SendFlags::SIGNALED, good, r.src.sge(0..64).unwrap()),
        "DirectQp::batch",
        qpn,
        QpState::Err,
    );
    drop(b);
    assert_eq!(r.qp.outstanding(), 0);

    // Read by `wait`, after an unsafe ring.
    r.reconnect();
    let mut b = r.qp.batch();
    b.rdma_write(4, SendFlags::SIGNALED, bad, r.src.sge(0..64).unwrap())
        .unwrap();
    assert_eq!(unsafe { b.ring() }, 1);
    let mut seen = Vec::new();
    r.qp.wait(8, WAIT, |wc| seen.push((wc.wr_id, wc.status)))
        .unwrap();
    assert_eq!(seen, [(4, WcStatus::REM_ACCESS_ERR)]);
    let mut b = r.qp.batch();
    assert_eq!(b.room(), 0);
    not_ready(
        b.rdma_write(5, SendFlags::SIGNALED, good, r.src.sge(0..64).unwrap()),
        "DirectQp::batch",
        qpn,
        QpState::Err,
    );
    drop(b);
    not_ready(
        write(&mut r.qp, 6, good, &r.src),
        "DirectQp::post_and_wait",
        qpn,
        QpState::Err,
    );

    // Read by `poll_into`.
    r.reconnect();
    let mut b = r.qp.batch();
    b.rdma_write(7, SendFlags::SIGNALED, bad, r.src.sge(0..64).unwrap())
        .unwrap();
    assert_eq!(unsafe { b.ring() }, 1);
    let mut out = [DirectWc::default(); 8];
    let deadline = Instant::now() + WAIT;
    let n = loop {
        let n = r.qp.poll_into(&mut out).unwrap();
        if n > 0 {
            break n;
        }
        assert!(Instant::now() < deadline, "no completion");
    };
    assert_eq!(
        (n, out[0].wr_id, out[0].status),
        (1, 7, WcStatus::REM_ACCESS_ERR)
    );
    not_ready(
        write(&mut r.qp, 8, good, &r.src),
        "DirectQp::post_and_wait",
        qpn,
        QpState::Err,
    );

    // Moved to ERR by the program.
    r.reconnect();
    r.write_works(9, 0, 0, 64);
    r.qp.to_error().unwrap();
    not_ready(
        write(&mut r.qp, 10, good, &r.src),
        "DirectQp::post_and_wait",
        qpn,
        QpState::Err,
    );

    // Reset and connected again, it posts.
    r.reconnect();
    r.write_works(11, 0, 256, 64);
    assert_eq!(r.qp.outstanding(), 0);
}

/// A peer that stops answering (reset to RESET, so the device drops what
/// reaches it) makes the write fail with retry exceeded once its retries
/// are spent; the rest is flushed.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn unanswered_peer_gives_retry_exceeded() {
    // 4.096 us x 2^10 = 4 ms per try, two tries.
    let mut r = Rig::with(|o| o.timeout(10).retry_cnt(1));
    let qpn = r.qp.qp_num();
    r.write_works(1, 0, 0, 64);
    r.peer.qp.reset().unwrap();
    let remote = r.peer.mr.remote(0..4096).unwrap();
    let src = &r.src;
    let t0 = Instant::now();
    let wcs =
        r.qp.post_and_wait(WAIT, |b| {
            b.rdma_write(
                50,
                SendFlags::SIGNALED,
                remote.slice(0, 64)?,
                src.sge(0..64)?,
            )?;
            b.rdma_write(
                51,
                SendFlags::empty(),
                remote.slice(64, 64)?,
                src.sge(0..64)?,
            )?;
            b.rdma_write(
                52,
                SendFlags::SIGNALED,
                remote.slice(128, 64)?,
                src.sge(0..64)?,
            )
        })
        .unwrap()
        .to_vec();
    assert!(t0.elapsed() < WAIT, "{:?}", t0.elapsed());
    assert!(wcs.len() >= 2, "{wcs:?}");
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].covers, wcs[0].qp_num),
        (50, WcStatus::RETRY_EXC_ERR, 1, qpn),
        "{wcs:?}"
    );
    let last = wcs.last().unwrap();
    assert_eq!(
        (last.wr_id, last.status),
        (52, WcStatus::WR_FLUSH_ERR),
        "{wcs:?}"
    );
    assert_eq!(wcs.iter().map(|w| w.covers).sum::<u32>(), 3, "{wcs:?}");
    assert!(matches!(
        wcs[0].ok(),
        Err(Error::WorkCompletion {
            wr_id: 50,
            status: WcStatus::RETRY_EXC_ERR,
            ..
        })
    ));
    assert_eq!(r.qp.state().unwrap(), QpState::Err);
    assert_eq!(r.qp.outstanding(), 0);
    r.reconnect();
    r.write_works(60, 0, 512, 512);
}

/// Checks that `into_direct` refused with `InvalidArgument` saying `says`,
/// and returns the QP and the CQ it gave back.
fn refused<T: DirectTransport>(
    r: std::result::Result<DirectQp<T>, IntoDirectError<T>>,
    says: &str,
) -> (QpEx<T>, CompletionQueue) {
    let e = match r {
        Err(e) => e,
        Ok(qp) => panic!("expected a refusal saying {says:?}, got {qp:?}"),
    };
    let msg = e.to_string();
    assert!(msg.contains("into_direct"), "{msg}");
    assert!(msg.contains(says), "{msg:?} does not say {says:?}");
    let (qp, cq, error) = e.into_parts();
    assert!(
        matches!(error, Error::InvalidArgument(_)),
        "expected InvalidArgument saying {says:?}, got {error:?}"
    );
    assert_eq!(error.to_string(), msg);
    (qp, cq)
}

/// A refused `into_direct` gives the QP and the CQ back as they were: the
/// cause mended (the right CQ given; a connected QP reset, as the refusal
/// advises), the same QP is taken and writes to its peer.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn into_direct_gives_back_what_it_refuses_and_takes_it_once_mended() {
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let peer_opts = rig::connect_options(&ctx);
    let opts = peer_opts;
    let (scq, rq) = (
        CompletionQueue::new(&ctx, 256).unwrap(),
        CompletionQueue::new(&ctx, 16).unwrap(),
    );
    let qp = QpBuilder::rc(&pd, &scq, &rq)
        .caps(direct_caps())
        .build()
        .unwrap();
    let qpn = qp.qp_num();

    // Another QP's CQ: refused, and both come back.
    let stray = CompletionQueue::new(&ctx, 64).unwrap();
    let (qp, mut stray) = refused(qp.into_direct(stray), "not the QP's send CQ");
    assert_eq!(qp.qp_num(), qpn);
    let mut sink = Vec::new();
    assert_eq!(stray.poll_into(&mut sink, 8).unwrap(), 0);
    drop(stray);

    // Connected first: refused, with the advice to reset it.
    let peer = rig::side(&ctx, &pd, QpCaps::default(), SendOps::rc_default());
    let theirs = peer.qp.endpoint(0x77, &peer_opts).unwrap();
    qp.endpoint(0x66, &opts).unwrap();
    qp.connect_to(&theirs, &opts).unwrap();
    let (qp, scq) = refused(qp.into_direct(scq), "in RTS, not RESET");
    // Refused again, as often as asked: the advice is to reset it.
    let (qp, scq) = refused(
        qp.into_direct(scq),
        "reset() the QP this refusal gives back",
    );
    assert_eq!(qp.state().unwrap(), QpState::Rts);

    // Mended: reset, then taken, connected and written through.
    qp.reset().unwrap();
    let qp = qp.into_direct(scq).expect("into_direct once reset");
    assert_eq!(qp.qp_num(), qpn);
    assert_eq!(qp.state().unwrap(), QpState::Reset);
    assert_eq!(qp.outstanding(), 0);
    let src = MemoryRegion::new(&pd, MR_LEN, rig::access_all()).unwrap();
    let dst = MemoryRegion::new(&pd, MR_LEN, rig::access_all()).unwrap();
    let mut r = Rig {
        qp,
        _rq: rq,
        src,
        dst,
        peer,
        opts,
        peer_opts,
        _pd: pd,
        _ctx: ctx,
        psn: 0x10,
    };
    r.reconnect();
    r.write_works(1, 0, 64, 256);
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn into_direct_refusals() {
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let opts = rig::connect_options(&ctx);
    let cq = || CompletionQueue::new(&ctx, 64).unwrap();

    // Not in RESET: connected first.
    let (scq, rcq) = (cq(), cq());
    let qp = QpBuilder::rc(&pd, &scq, &rcq)
        .caps(direct_caps())
        .build()
        .unwrap();
    let other = rig::side(&ctx, &pd, QpCaps::default(), SendOps::rc_default());
    let theirs = other.qp.endpoint(0x77, &opts).unwrap();
    qp.endpoint(0x66, &opts).unwrap();
    qp.connect_to(&theirs, &opts).unwrap();
    refused(qp.into_direct(scq), "not RESET");

    // Not its send CQ.
    let (scq, rcq) = (cq(), cq());
    let qp = QpBuilder::rc(&pd, &scq, &rcq)
        .caps(direct_caps())
        .build()
        .unwrap();
    refused(qp.into_direct(cq()), "not the QP's send CQ");
    // Its receive CQ, which is not its send CQ either.
    let qp = QpBuilder::rc(&pd, &scq, &rcq)
        .caps(direct_caps())
        .build()
        .unwrap();
    refused(qp.into_direct(rcq), "not the QP's send CQ");

    // Receives on the same CQ.
    let scq = cq();
    let qp = QpBuilder::rc(&pd, &scq, &scq)
        .caps(direct_caps())
        .build()
        .unwrap();
    refused(qp.into_direct(scq), "receives complete on the same CQ");

    // Shared by another QP.
    let (scq, rcq) = (cq(), cq());
    let qp = QpBuilder::rc(&pd, &scq, &rcq)
        .caps(direct_caps())
        .build()
        .unwrap();
    let also = QpBuilder::rc(&pd, &scq, &rcq)
        .caps(direct_caps())
        .build()
        .unwrap();
    refused(qp.into_direct(scq), "other QPs complete on its CQ");
    drop(also);

    // sq_sig_all.
    let (scq, rcq) = (cq(), cq());
    let qp = QpBuilder::rc(&pd, &scq, &rcq)
        .caps(direct_caps())
        .sq_sig_all(true)
        .build()
        .unwrap();
    refused(qp.into_direct(scq), "sq_sig_all");

    // And the same QP shape without any of those is taken.
    let (scq, rcq) = (cq(), cq());
    let qp = QpBuilder::rc(&pd, &scq, &rcq)
        .caps(direct_caps())
        .build()
        .unwrap();
    let qp = qp.into_direct(scq).unwrap();
    assert_eq!(qp.state().unwrap(), QpState::Reset);
    assert_eq!(qp.outstanding(), 0);
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn scoped_post_empty_and_abandoned_batches_post_nothing() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    let depth = r.qp.depth();

    let wcs = r.qp.post_and_wait(WAIT, |_| Ok(())).unwrap();
    assert!(wcs.is_empty(), "{wcs:?}");
    assert_eq!((r.qp.outstanding(), r.qp.room()), (0, depth));

    // A closure that writes two WQEs and then fails: its error, nothing
    // posted.
    r.peer.mr.fill(.., 0).unwrap();
    r.src.write_at(0, &pattern(256, 1)).unwrap();
    let remote = r.peer.mr.remote(..).unwrap();
    let src = &r.src;
    let e =
        r.qp.post_and_wait(WAIT, |b| {
            b.rdma_write(
                1,
                SendFlags::SIGNALED,
                remote.slice(0, 64)?,
                src.sge(0..64)?,
            )?;
            b.rdma_write_inline(2, SendFlags::SIGNALED, remote.slice(64, 8)?, b"abandon!")?;
            assert_eq!(b.len(), 2);
            Err(Error::InvalidArgument("given up".into()))
        })
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m == "given up"),
        "{e}"
    );
    assert_eq!((r.qp.outstanding(), r.qp.room()), (0, depth));

    // A batch dropped unrung posts nothing either.
    let mut b = r.qp.batch();
    b.rdma_write(
        3,
        SendFlags::SIGNALED,
        remote.slice(128, 64).unwrap(),
        r.src.sge(0..64).unwrap(),
    )
    .unwrap();
    drop(b);
    assert_eq!((r.qp.outstanding(), r.qp.room()), (0, depth));

    // The next post is the only one that runs: one completion, covering
    // itself only, and the abandoned writes never reached the peer (RC
    // runs in order: they would have landed before it).
    let src = &r.src;
    let wcs =
        r.qp.post_and_wait(WAIT, |b| {
            b.rdma_write(
                4,
                SendFlags::empty(),
                remote.slice(256, 64)?,
                src.sge(0..64)?,
            )
        })
        .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    check_wc(&wcs[0], 4, WcOpcode::RDMA_WRITE, 1, qpn);
    r.peer_holds(256, &pattern(64, 1));
    // Nothing else completes later.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(r.qp.poll(8, |wc| panic!("{wc:?}")).unwrap(), 0);
}

/// A send the peer has no receive for, with `rnr_retry` 7 (retry for
/// ever), never completes: the scoped post times out, moves the QP out of
/// the way (ERR and flushed, or RESET) and says so; `reset` and a new
/// connection make it work again.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn scoped_post_times_out_and_recovers() {
    let mut r = Rig::with(|o| o.rnr_retry(7));
    let qpn = r.qp.qp_num();
    r.write_works(1, 0, 0, 64);
    let src = &r.src;
    let t0 = Instant::now();
    let e =
        r.qp.post_and_wait(Duration::from_millis(300), |b| {
            b.send(70, SendFlags::SIGNALED, src.sge(0..64)?)
        })
        .unwrap_err();
    let took = t0.elapsed();
    match e {
        Error::Timeout {
            ref what,
            waited_ms,
        } => {
            assert!(waited_ms >= 300, "{e}");
            assert!(
                what.contains("moved to ERR") || what.contains("moved to RESET"),
                "{e}"
            );
        }
        other => panic!("expected a timeout, got {other}"),
    }
    assert!(took < WAIT, "{took:?}");
    let state = r.qp.state().unwrap();
    assert!(matches!(state, QpState::Err | QpState::Reset), "{state:?}");
    assert_eq!(r.qp.outstanding(), 0);
    assert_eq!(r.qp.room(), r.qp.depth());
    // The flush is kept for the next poll (none is dropped).
    let mut kept = Vec::new();
    r.qp.poll(16, |wc| kept.push((wc.wr_id, wc.status)))
        .unwrap();
    if e.to_string().contains("moved to ERR") {
        assert_eq!(kept, [(70, WcStatus::WR_FLUSH_ERR)]);
    } else {
        assert!(
            kept.iter().all(|&k| k == (70, WcStatus::WR_FLUSH_ERR)),
            "{kept:?}"
        );
    }

    r.reconnect();
    r.write_works(2, 0, 64, 128);
    // And the send, now with a receive.
    r.peer.mr.fill(.., 0).unwrap();
    r.peer_recv(5, 0..4096);
    let src = &r.src;
    let wcs =
        r.qp.post_and_wait(WAIT, |b| b.send(71, SendFlags::SIGNALED, src.sge(0..64)?))
            .unwrap();
    check_wc(&wcs[0], 71, WcOpcode::SEND, 1, qpn);
    let rx = r.peer_wait_recv();
    assert_eq!(
        (rx.status, rx.wr_id, rx.byte_len),
        (WcStatus::SUCCESS, 5, 64),
        "{rx:?}"
    );
    let sent = r.src.to_vec(0..64).unwrap();
    r.peer_holds(0, &sent);
}

/// Sources known not to be empty (`Sge::non_empty`) go to the peer as
/// the plain entries do: an RDMA write to a checked slice and to the
/// peer's memory named by address and rkey, and a send, the peer's memory
/// checked byte for byte and every completion's status and opcode.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn writes_and_sends_of_non_empty_sources_reach_the_peer() {
    let mut r = Rig::new();
    let qpn = r.qp.qp_num();
    let data = pattern(192, 9);
    r.src.write_at(0, &data).unwrap();
    r.peer.mr.fill(.., 0).unwrap();
    r.peer_recv(5, 2048..2112);
    let Rig { qp, peer, src, .. } = &mut r;
    let to = peer.mr.remote(0..64).unwrap();
    let far = RemoteBuf::unbounded(peer.mr.remote(512..576).unwrap().addr, to.rkey);
    let wcs = qp
        .post_and_wait(WAIT, |b| {
            let e = |at: usize| {
                src.sge(at..at + 64)
                    .map(|s| s.non_empty().expect("64 bytes"))
            };
            b.rdma_write(1, SendFlags::SIGNALED, to, e(0)?)?;
            b.rdma_write(2, SendFlags::SIGNALED, far, e(64)?)?;
            b.send(3, SendFlags::SIGNALED, e(128)?)
        })
        .unwrap()
        .to_vec();
    assert_eq!(wcs.len(), 3, "{wcs:?}");
    check_wc(&wcs[0], 1, WcOpcode::RDMA_WRITE, 1, qpn);
    check_wc(&wcs[1], 2, WcOpcode::RDMA_WRITE, 1, qpn);
    check_wc(&wcs[2], 3, WcOpcode::SEND, 1, qpn);
    let rx = r.peer_wait_recv();
    assert_eq!(
        (rx.status, rx.wr_id, rx.byte_len),
        (WcStatus::SUCCESS, 5, 64)
    );
    let got = r.peer.mr.to_vec(..).unwrap();
    assert_eq!(&got[..64], &data[..64]);
    assert_eq!(&got[512..576], &data[64..128]);
    assert_eq!(&got[2048..2112], &data[128..]);
    assert!(got[64..512].iter().all(|&b| b == 0));
}

/// On a CQ with a completion channel, the waits learn that their deadline
/// passed from their sleep on the channel (which read the clock for its
/// own timeout) rather than from a clock read of their own: a scoped post
/// whose send never completes (no receive at the peer, `rnr_retry` 7)
/// times out no earlier than its timeout and not long after, asleep the
/// while, and recovers as without a channel; then a `wait` with nothing
/// to come times out the same way.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn waits_on_a_channel_time_out_at_their_deadline_asleep() {
    // On a thread of its own, so that a wait that never ends fails the
    // test instead of hanging it.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut r = Rig::with_channel(|o| o.rnr_retry(7));
        r.write_works(1, 0, 0, 64);
        let (cpu0, t0) = (thread_cpu(), Instant::now());
        let src = &r.src;
        let scoped =
            r.qp.post_and_wait(Duration::from_millis(300), |b| {
                b.send(70, SendFlags::SIGNALED, src.sge(0..64)?)
            })
            .map(|w| w.to_vec());
        let scoped = (scoped, thread_cpu() - cpu0, t0.elapsed());
        let state = r.qp.state().unwrap();
        assert_eq!(r.qp.outstanding(), 0);
        // The flush is kept for the next poll (none is dropped).
        r.qp.poll(16, |wc| {
            assert_eq!((wc.wr_id, wc.status), (70, WcStatus::WR_FLUSH_ERR))
        })
        .unwrap();
        r.reconnect();
        r.write_works(2, 0, 64, 128);
        // Nothing outstanding: a wait sleeps to its deadline.
        let (cpu0, t0) = (thread_cpu(), Instant::now());
        let waited =
            r.qp.wait(1, Duration::from_millis(200), |wc| panic!("{wc:?}"));
        let waited = (waited, thread_cpu() - cpu0, t0.elapsed());
        // And the QP still works.
        r.write_works(3, 0, 512, 64);
        tx.send((scoped, state, waited)).unwrap();
    });
    let ((scoped, cpu, took), state, (waited, wcpu, wtook)) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the waits ended within 20 s");
    match scoped {
        Err(
            ref e @ Error::Timeout {
                ref what,
                waited_ms,
            },
        ) => {
            assert!(waited_ms >= 300, "{e}");
            assert!(
                what.contains("moved to ERR") || what.contains("moved to RESET"),
                "{e}"
            );
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(took >= Duration::from_millis(300), "{took:?}");
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert!(
        cpu < Duration::from_millis(150),
        "{cpu:?} of CPU time in {took:?}"
    );
    assert!(matches!(state, QpState::Err | QpState::Reset), "{state:?}");
    assert!(
        matches!(waited, Err(Error::Timeout { waited_ms, .. }) if waited_ms >= 200),
        "{waited:?}"
    );
    assert!(wtook >= Duration::from_millis(200), "{wtook:?}");
    assert!(wtook < Duration::from_secs(2), "{wtook:?}");
    assert!(
        wcpu < Duration::from_millis(100),
        "{wcpu:?} of CPU time in {wtook:?}"
    );
}

/// A scoped post sleeps on the channel even when a completion of work
/// posted before it (with `ring`) comes while it waits and is kept for the
/// next poll: such a completion once made its every idle round return at
/// once, so that it re-armed the CQ and polled without sleeping until its
/// own completion came (a core busy for the whole wait). Here that
/// completion comes 600 ms late (a send waiting for the peer's receive);
/// the waiting thread must use far less CPU time than that.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn a_scoped_post_sleeps_while_an_earlier_completion_waits_for_the_next_poll() {
    let mut r = Rig::with_channel(|o| o.rnr_retry(7));
    let qpn = r.qp.qp_num();
    let data = pattern(100, 3);
    r.src.write_at(0, &data).unwrap();
    let Rig { qp, peer, src, .. } = &mut r;
    let remote = peer.mr.remote(1024..1124).unwrap();
    let (cpu, took, got, posted, done) = std::thread::scope(|s| {
        let late = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(600));
            let sge = peer.mr.sge(0..100).unwrap();
            // The send's completion cannot come before this receive.
            let posted = Instant::now();
            unsafe { peer.qp.post_recv(5, &[sge]) }.expect("the late receive");
            posted
        });
        // An RDMA write posted outside the scoped post: its completion
        // comes at once, while the scoped post waits.
        let mut b = qp.batch();
        b.rdma_write(1, SendFlags::SIGNALED, remote, src.sge(0..100).unwrap())
            .unwrap();
        // SAFETY: `src` outlives its completion, read below.
        assert_eq!(unsafe { b.ring() }, 1);
        let (cpu0, t0) = (thread_cpu(), Instant::now());
        let got = qp
            .post_and_wait(WAIT, |b| b.send(2, SendFlags::SIGNALED, src.sge(0..100)?))
            .expect("the scoped send")
            .to_vec();
        let done = Instant::now();
        (
            thread_cpu() - cpu0,
            done - t0,
            got,
            late.join().unwrap(),
            done,
        )
    });
    assert_eq!(got.len(), 1, "{got:?}");
    check_wc(&got[0], 2, WcOpcode::SEND, 1, qpn);
    assert!(
        done >= posted,
        "the send completed before its receive was posted"
    );
    assert!(
        cpu < Duration::from_millis(150),
        "the scoped post used {cpu:?} of CPU time in {took:?}: it did not sleep"
    );
    // The earlier write's completion was kept for the next poll.
    let mut kept = Vec::new();
    r.qp.poll(4, |wc| kept.push(wc)).unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    check_wc(&kept[0], 1, WcOpcode::RDMA_WRITE, 1, qpn);
    let rx = r.peer_wait_recv();
    assert_eq!(
        (rx.status, rx.wr_id, rx.byte_len),
        (WcStatus::SUCCESS, 5, 100)
    );
    let got = r.peer.mr.to_vec(..).unwrap();
    assert_eq!(&got[..100], &data[..]);
    assert_eq!(&got[1024..1124], &data[..]);
}

/// A wait on a direct CQ with a completion channel sleeps on the channel
/// (the crate arms the CQ with its own consumer index) and ends with its
/// completion: a send that waits for the peer's receive, posted 300 ms
/// later from another thread, completes, and `wait` (then the scoped
/// post) returns it. A direct CQ without a channel cannot be armed.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn waits_sleep_on_the_channel_and_end_with_their_completion() {
    let mut plain = Rig::new();
    assert!(matches!(
        plain.qp.req_notify(false),
        Err(Error::InvalidArgument(ref m)) if m.contains("no completion channel")
    ));
    drop(plain);

    let mut r = Rig::with_channel(|o| o.rnr_retry(7));
    let qpn = r.qp.qp_num();
    // An explicit arm, then a completion: the CQ's event comes on its
    // channel (the arm doorbell the crate wrote took).
    r.qp.req_notify(false)
        .expect("arm a direct CQ on a channel");
    r.write_works(1, 0, 0, 64);
    let channel = r.qp.channel().expect("the CQ's channel").clone();
    assert_eq!(
        channel.cq_count(),
        1,
        "only the direct CQ is on the channel"
    );
    let _event = channel
        .get_event(WAIT)
        .expect("the event of the armed direct CQ");
    // Armed again (the arm sequence number moved with the event read),
    // and again an event; a solicited-only arm is taken too.
    r.qp.req_notify(false).expect("arm it again");
    r.write_works(2, 0, 0, 64);
    let _event = channel.get_event(WAIT).expect("the second event");
    r.qp.req_notify(true)
        .expect("arm it for solicited completions");
    for round in 0..3u64 {
        r.peer.mr.fill(.., 0).unwrap();
        let data = pattern(100, round as u8 + 7);
        r.src.write_at(0, &data).unwrap();
        let Rig { qp, peer, src, .. } = &mut r;
        let t0 = Instant::now();
        let got = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(300));
                let sge = peer.mr.sge(0..4096).unwrap();
                unsafe { peer.qp.post_recv(10 + round, &[sge]) }.expect("the late receive");
            });
            if round < 2 {
                let mut b = qp.batch();
                b.send(20 + round, SendFlags::SIGNALED, src.sge(0..100).unwrap())
                    .unwrap();
                // SAFETY: `src` outlives the wait below, which returns its
                // completion.
                assert_eq!(unsafe { b.ring() }, 1);
                let mut got = Vec::new();
                let n = qp
                    .wait(4, WAIT, |wc| got.push(wc))
                    .expect("the send's completion");
                assert_eq!(n, 1);
                got
            } else {
                qp.post_and_wait(WAIT, |b| {
                    b.send(20 + round, SendFlags::SIGNALED, src.sge(0..100)?)
                })
                .expect("the scoped send")
                .to_vec()
            }
        });
        let took = t0.elapsed();
        assert_eq!(got.len(), 1, "{got:?}");
        check_wc(&got[0], 20 + round, WcOpcode::SEND, 1, qpn);
        assert!(
            took >= Duration::from_millis(250),
            "round {round}: {took:?}"
        );
        assert!(took < WAIT, "round {round}: {took:?}");
        let rx = r.peer_wait_recv();
        assert_eq!(
            (rx.status, rx.wr_id, rx.byte_len),
            (WcStatus::SUCCESS, 10 + round, 100),
            "{rx:?}"
        );
        r.peer_holds(0, &data);
    }
    // Nothing is left to come: a wait times out.
    let e =
        r.qp.wait(1, Duration::from_millis(200), |_| {})
            .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
}

// ---------------------------------------------------------------------
// DC initiators on the direct path: a `DirectDci` sending to DCTs (each on
// an SRQ of its own) on the same device.
// ---------------------------------------------------------------------

/// The DC key of the second DCT (the first has `DCT_KEY`).
const DCT_KEY_2: u64 = DCT_KEY ^ 0x00ff_0000_0000_ff00;

fn dci_caps() -> QpCaps {
    QpCaps {
        max_send_wr: SEND_WR,
        max_recv_wr: 0,
        max_send_sge: 1,
        max_recv_sge: 0,
        max_inline_data: INLINE,
    }
}

/// A DC target: a DCT receiving into an SRQ of its own, completing on a CQ
/// of its own, and the memory DCIs write, read and send into.
struct Target {
    dct: Dct,
    srq: SharedReceiveQueue,
    recv_cq: CompletionQueue,
    mr: MemoryRegion,
    key: u64,
}

impl Target {
    fn new(ctx: &Context, pd: &ProtectionDomain, opts: &ConnectOptions, key: u64) -> Target {
        let recv_cq = CompletionQueue::new(ctx, 64).expect("DCT CQ");
        let srq = SharedReceiveQueue::new(pd, 64, 1).expect("SRQ");
        let dct = Dct::new(pd, &recv_cq, &srq, key).expect("create DCT");
        dct.ready(opts).expect("DCT to RTR");
        let mr = MemoryRegion::new(pd, MR_LEN, rig::access_all()).expect("DCT MR");
        Target {
            dct,
            srq,
            recv_cq,
            mr,
            key,
        }
    }

    /// Posts a receive of `range` of the target's memory to its SRQ.
    fn post_recv(&self, wr_id: u64, range: std::ops::Range<usize>) {
        let sge = self.mr.sge(range).unwrap();
        unsafe { self.srq.post_recv(wr_id, &[sge]) }.expect("post a receive to the SRQ");
    }

    /// The next receive completion, checked to be a success of the DCT.
    #[track_caller]
    fn wait_recv(&mut self, wr_id: u64, opcode: WcOpcode) -> WorkCompletion {
        let wcs = self.recv_cq.wait(1, WAIT).expect("the DCT's receive");
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        let rx = wcs[0];
        assert_eq!(rx.status, WcStatus::SUCCESS, "{rx:?}");
        assert_eq!(rx.wr_id, wr_id, "{rx:?}");
        assert_eq!(rx.opcode, opcode, "{rx:?}");
        assert_eq!(rx.qp_num, self.dct.dctn(), "{rx:?}");
        rx
    }

    /// The target's memory holds `data` at `at` and zeros elsewhere.
    #[track_caller]
    fn holds(&self, at: usize, data: &[u8]) {
        let got = self.mr.to_vec(..).unwrap();
        assert_eq!(
            &got[at..at + data.len()],
            data,
            "at {at}, {} bytes",
            data.len()
        );
        let stray = got[..at]
            .iter()
            .chain(&got[at + data.len()..])
            .position(|&b| b != 0);
        assert_eq!(
            stray,
            None,
            "a byte outside {at}..+{} was written",
            data.len()
        );
    }

    #[track_caller]
    fn untouched(&self) {
        assert!(
            self.mr.to_vec(..).unwrap().iter().all(|&b| b == 0),
            "the memory of DCT {:#x} was written",
            self.dct.dctn()
        );
    }
}

/// A direct DCI (ready) and two DC targets, all on one device and PD, with
/// an address handle to the local port.
struct DcRig {
    dci: DirectDci,
    /// The direct addresses of the two DCTs.
    addr: [DirectDcAddr; 2],
    t: [Target; 2],
    /// What the DCI writes and sends from.
    src: MemoryRegion,
    /// Where its reads and atomics land.
    dst: MemoryRegion,
    ah: AddressHandle,
    opts: ConnectOptions,
    pd: ProtectionDomain,
    ctx: Context,
}

impl DcRig {
    /// The rig, with a DCI created with `streams` (log_num_concurent,
    /// log_num_errored) when given.
    fn new(streams: Option<DciStreams>) -> DcRig {
        let ctx = open();
        let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
        let opts = rig::connect_options(&ctx);
        let cq = CompletionQueue::new(&ctx, 256).expect("DCI CQ");
        let mut b = QpBuilder::dci(&pd, &cq);
        b.caps(dci_caps());
        if let Some(s) = streams {
            b.dci_streams(s.log_num_concurent, s.log_num_errored);
        }
        let dci = b.build().expect("create DCI");
        let dci = dci.into_direct(cq).expect("into_direct of a DCI");
        assert_eq!(dci.state().unwrap(), QpState::Reset);
        assert_eq!((dci.outstanding(), dci.room()), (0, dci.depth()));
        assert!(dci.depth() >= SEND_WR, "{dci:?}");
        dci.ready(DCI_PSN, &opts).expect("DCI to RTS");
        assert_eq!(dci.state().unwrap(), QpState::Rts);
        let t = [
            Target::new(&ctx, &pd, &opts, DCT_KEY),
            Target::new(&ctx, &pd, &opts, DCT_KEY_2),
        ];
        let ah = AddressHandle::new(&pd, &local_port_ah(&ctx, &opts).expect("AH attr"))
            .expect("create AH");
        let addr = [0, 1].map(|i| {
            dci.dc_addr(&DcAddr::new(&ah, t[i].dct.dctn(), t[i].key))
                .expect("dc_addr")
        });
        assert_ne!(addr[0], addr[1]);
        let src = MemoryRegion::new(&pd, MR_LEN, rig::access_all()).expect("src MR");
        let dst = MemoryRegion::new(&pd, MR_LEN, rig::access_all()).expect("dst MR");
        DcRig {
            dci,
            addr,
            t,
            src,
            dst,
            ah,
            opts,
            pd,
            ctx,
        }
    }

    fn zero_targets(&mut self) {
        for t in &mut self.t {
            t.mr.fill(.., 0).unwrap();
        }
    }

    /// A write of `len` bytes of `src` (from `at`) to target `ti` at `to`,
    /// checked there byte for byte (and the other target untouched).
    fn write_works(&mut self, ti: usize, wr_id: u64, at: usize, to: usize, len: usize) {
        self.zero_targets();
        let data = pattern(len, wr_id as u8);
        self.src.write_at(at, &data).unwrap();
        let remote = self.t[ti].mr.remote(to..to + len).unwrap();
        let sge = self.src.sge(at..at + len).unwrap();
        let addr = self.addr[ti];
        let qpn = self.dci.qp_num();
        let wcs = self
            .dci
            .post_and_wait(WAIT, |b| {
                b.dc(&addr)
                    .rdma_write(wr_id, SendFlags::SIGNALED, remote, sge)
            })
            .unwrap_or_else(|e| panic!("DC write {wr_id} of {len} bytes: {e}"));
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        check_wc(&wcs[0], wr_id, WcOpcode::RDMA_WRITE, 1, qpn);
        assert_eq!(wcs[0].byte_len, 0, "{:?}", wcs[0]);
        self.t[ti].holds(to, &data);
        self.t[1 - ti].untouched();
        assert_eq!(self.dci.outstanding(), 0);
    }
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dci_rdma_write_lands_at_the_dct_byte_for_byte() {
    let mut r = DcRig::new(None);
    for (i, &(at, to, len)) in [
        (0usize, 0usize, 1usize),
        (3, 100, 7),
        (64, 1000, 64),
        (100, 4096, 4096),
        (7, 9000, 30_000),
    ]
    .iter()
    .enumerate()
    {
        r.write_works(i % 2, i as u64 + 1, at, to, len);
    }
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dci_rdma_write_imm_and_inline_writes() {
    let mut r = DcRig::new(None);
    let qpn = r.dci.qp_num();
    for (i, &(to, len, imm)) in [
        (0usize, 1usize, 0u32),
        (128, 256, 0xdead_beef),
        (5000, 3000, 0x0102_0304),
    ]
    .iter()
    .enumerate()
    {
        let ti = i % 2;
        let wr_id = 40 + i as u64;
        let rx_id = 900 + i as u64;
        r.zero_targets();
        let data = pattern(len, i as u8 + 9);
        r.src.write_at(0, &data).unwrap();
        // The receive a write with immediate consumes; its memory is not
        // written.
        r.t[ti].post_recv(rx_id, MR_LEN - 64..MR_LEN);
        let remote = r.t[ti].mr.remote(to..to + len).unwrap();
        let sge = r.src.sge(0..len).unwrap();
        let addr = r.addr[ti];
        let wcs = r
            .dci
            .post_and_wait(WAIT, |b| {
                b.dc(&addr)
                    .rdma_write_imm(wr_id, SendFlags::SIGNALED, remote, imm, sge)
            })
            .unwrap();
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        check_wc(&wcs[0], wr_id, WcOpcode::RDMA_WRITE, 1, qpn);
        let rx = r.t[ti].wait_recv(rx_id, WcOpcode::RECV_RDMA_WITH_IMM);
        assert_eq!(rx.imm, Some(imm), "{rx:?}");
        assert_eq!(rx.byte_len as usize, len, "{rx:?}");
        r.t[ti].holds(to, &data);
        r.t[1 - ti].untouched();
    }

    // Inline writes at each edge of the 16-byte units and 64-byte blocks
    // (a DCI's WQE has the 48-byte datagram segment before them).
    let max = r.dci.caps().max_inline_data as usize;
    assert!(max >= INLINE as usize, "{:?}", r.dci.caps());
    let lens = [
        0usize,
        1,
        11,
        12,
        13,
        28,
        29,
        44,
        45,
        60,
        61,
        100,
        max - 1,
        max,
    ];
    for (i, &len) in lens.iter().enumerate() {
        let ti = i % 2;
        let wr_id = 100 + i as u64;
        r.zero_targets();
        let data = pattern(len, i as u8 + 1);
        let to = 64 * i + 3;
        let remote = r.t[ti]
            .mr
            .remote(..)
            .unwrap()
            .slice(to as u64, len as u64)
            .unwrap();
        let addr = r.addr[ti];
        let wcs = r
            .dci
            .post_and_wait(WAIT, |b| {
                b.dc(&addr)
                    .rdma_write_inline(wr_id, SendFlags::SIGNALED, remote, &data)
            })
            .unwrap_or_else(|e| panic!("inline DC write of {len} bytes: {e}"));
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        check_wc(&wcs[0], wr_id, WcOpcode::RDMA_WRITE, 1, qpn);
        r.t[ti].holds(to, &data);
        r.t[1 - ti].untouched();
    }
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dci_sends_arrive_through_the_srq_byte_for_byte() {
    let mut r = DcRig::new(None);
    let qpn = r.dci.qp_num();
    let max = r.dci.caps().max_inline_data as usize;
    #[derive(Debug, Clone, Copy)]
    enum Kind {
        Send,
        SendImm(u32),
        Inline,
    }
    let cases = [
        (Kind::Send, 1usize),
        (Kind::Send, 0),
        (Kind::Send, 33),
        (Kind::Send, 4096),
        (Kind::Send, 20_000),
        (Kind::SendImm(0xfeed_f00d), 0),
        (Kind::SendImm(7), 64),
        (Kind::SendImm(0x8000_0001), 5000),
        (Kind::Inline, 0),
        (Kind::Inline, 1),
        (Kind::Inline, 12),
        (Kind::Inline, 13),
        (Kind::Inline, 60),
        (Kind::Inline, max),
    ];
    for (i, &(kind, len)) in cases.iter().enumerate() {
        let ti = i % 2;
        let wr_id = 200 + i as u64;
        let rx_id = 300 + i as u64;
        r.zero_targets();
        let data = pattern(len, i as u8 + 17);
        r.src.write_at(64, &data).unwrap();
        r.t[ti].post_recv(rx_id, 0..MR_LEN);
        let sge = r.src.sge(64..64 + len).unwrap();
        let addr = r.addr[ti];
        let wcs = r
            .dci
            .post_and_wait(WAIT, |b| {
                let wr = b.dc(&addr);
                match kind {
                    Kind::Send => wr.send(wr_id, SendFlags::SIGNALED, sge),
                    Kind::SendImm(imm) => wr.send_imm(wr_id, SendFlags::SIGNALED, imm, sge),
                    Kind::Inline => wr.send_inline(wr_id, SendFlags::SIGNALED, &data),
                }
            })
            .unwrap_or_else(|e| panic!("{kind:?} of {len} bytes: {e}"));
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        check_wc(&wcs[0], wr_id, WcOpcode::SEND, 1, qpn);
        assert_eq!(wcs[0].byte_len, 0, "{:?}", wcs[0]);
        let rx = r.t[ti].wait_recv(rx_id, WcOpcode::RECV);
        assert_eq!(rx.byte_len as usize, len, "{kind:?}: {rx:?}");
        let imm = match kind {
            Kind::SendImm(imm) => Some(imm),
            _ => None,
        };
        assert_eq!(rx.imm, imm, "{kind:?}: {rx:?}");
        r.t[ti].holds(0, &data);
        r.t[1 - ti].untouched();
    }
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dci_rdma_read_and_atomics() {
    let mut r = DcRig::new(None);
    let qpn = r.dci.qp_num();
    for (i, &(from, at, len)) in [
        (0usize, 0usize, 1usize),
        (8, 8, 8),
        (100, 3, 32),
        (1000, 64, 33),
        (4096, 0, 4096),
        (9, 17, 40_000),
    ]
    .iter()
    .enumerate()
    {
        let ti = i % 2;
        let wr_id = 400 + i as u64;
        let data = pattern(len, i as u8 + 31);
        r.zero_targets();
        r.t[ti].mr.write_at(from, &data).unwrap();
        r.dst.fill(.., 0).unwrap();
        let remote = r.t[ti].mr.remote(from..from + len).unwrap();
        let sge = r.dst.sge_mut(at..at + len).unwrap();
        let addr = r.addr[ti];
        let wcs = r
            .dci
            .post_and_wait(WAIT, |b| {
                b.dc(&addr)
                    .rdma_read(wr_id, SendFlags::SIGNALED, remote, sge)
            })
            .unwrap();
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        check_wc(&wcs[0], wr_id, WcOpcode::RDMA_READ, 1, qpn);
        assert_eq!(wcs[0].byte_len as usize, len, "{:?}", wcs[0]);
        let got = r.dst.to_vec(..).unwrap();
        assert_eq!(&got[at..at + len], &data[..], "read {i}");
        assert!(got[..at].iter().chain(&got[at + len..]).all(|&b| b == 0));
        r.t[ti].holds(from, &data);
    }

    const V: u64 = 0x0102_0304_0506_0708;
    const W: u64 = 0x1122_3344_5566_7788;
    r.zero_targets();
    r.t[1].mr.write_at(64, &V.to_ne_bytes()).unwrap();
    let remote = r.t[1].mr.remote(64..72).unwrap();
    let addr = r.addr[1];

    // Compare-and-swap that matches: V comes back, W is there.
    r.dst.fill(.., 0xee).unwrap();
    let sge = r.dst.sge_mut(8..16).unwrap();
    let wcs = r
        .dci
        .post_and_wait(WAIT, |b| {
            b.dc(&addr)
                .atomic_cmp_swp(500, SendFlags::SIGNALED, remote, V, W, sge)
        })
        .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    check_wc(&wcs[0], 500, WcOpcode::COMP_SWAP, 1, qpn);
    assert_eq!(wcs[0].byte_len, 8, "{:?}", wcs[0]);
    assert_eq!(u64_at(&r.dst, 8), V);
    assert_eq!(u64_at(&r.t[1].mr, 64), W);
    assert!(r.dst.to_vec(0..8).unwrap().iter().all(|&b| b == 0xee));
    assert!(r.dst.to_vec(16..24).unwrap().iter().all(|&b| b == 0xee));

    // Compare-and-swap that does not match: W comes back, W stays.
    let sge = r.dst.sge_mut(16..24).unwrap();
    let wcs = r
        .dci
        .post_and_wait(WAIT, |b| {
            b.dc(&addr)
                .atomic_cmp_swp(501, SendFlags::SIGNALED, remote, V, 0, sge)
        })
        .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    check_wc(&wcs[0], 501, WcOpcode::COMP_SWAP, 1, qpn);
    assert_eq!(u64_at(&r.dst, 16), W);
    assert_eq!(u64_at(&r.t[1].mr, 64), W);

    // Fetch-and-add, twice in one batch (the first unsignalled).
    let (a, b2) = r.dst.sge_mut(24..40).unwrap().split_at(8).unwrap();
    let wcs = r
        .dci
        .post_and_wait(WAIT, |b| {
            b.dc(&addr)
                .atomic_fetch_add(502, SendFlags::empty(), remote, 5, a)?;
            b.dc(&addr)
                .atomic_fetch_add(503, SendFlags::SIGNALED, remote, 0x1_0000_0000, b2)
        })
        .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    check_wc(&wcs[0], 503, WcOpcode::FETCH_ADD, 2, qpn);
    assert_eq!(wcs[0].byte_len, 8);
    assert_eq!(u64_at(&r.dst, 24), W);
    assert_eq!(u64_at(&r.dst, 32), W + 5);
    assert_eq!(u64_at(&r.t[1].mr, 64), W + 5 + 0x1_0000_0000);
    // Only those 8 bytes of the target changed; the other is untouched.
    let mut want = vec![0u8; MR_LEN];
    want[64..72].copy_from_slice(&(W + 5 + 0x1_0000_0000).to_ne_bytes());
    assert_eq!(r.t[1].mr.to_vec(..).unwrap(), want);
    r.t[0].untouched();
    assert_eq!(r.dci.outstanding(), 0);
}

/// One batch addressing the two DCTs in turn: unsignalled writes retired
/// by the batch's last completion, then signalled sends and sends with
/// immediate, each received by its own DCT's SRQ.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn one_dci_batch_addresses_two_dcts_in_turn() {
    let mut r = DcRig::new(None);
    let qpn = r.dci.qp_num();
    let data = pattern(MR_LEN, 41);
    r.src.write_at(0, &data).unwrap();
    r.zero_targets();
    let remotes = [r.t[0].mr.remote(..).unwrap(), r.t[1].mr.remote(..).unwrap()];
    // Write i goes to DCT i % 2, at (i / 2) * 256, `100 + i` bytes from
    // `src` at i * 97.
    let shape = |i: u64| (((i / 2) * 256), (i * 97) as usize, 100 + i as usize);
    let addrs = r.addr;
    let src = &r.src;
    let wcs = r
        .dci
        .post_and_wait(WAIT, |b| {
            for i in 0..24u64 {
                let (to, at, len) = shape(i);
                let ti = (i % 2) as usize;
                b.dc(&addrs[ti]).rdma_write(
                    i,
                    SendFlags::empty(),
                    remotes[ti].slice(to, len as u64)?,
                    src.sge(at..at + len)?,
                )?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    check_wc(&wcs[0], 23, WcOpcode::RDMA_WRITE, 24, qpn);
    let mut want = [vec![0u8; MR_LEN], vec![0u8; MR_LEN]];
    for i in 0..24u64 {
        let (to, at, len) = shape(i);
        let to = to as usize;
        want[(i % 2) as usize][to..to + len].copy_from_slice(&data[at..at + len]);
    }
    for (ti, (t, want)) in r.t.iter().zip(&want).enumerate() {
        assert_eq!(&t.mr.to_vec(..).unwrap(), want, "DCT {ti}");
    }

    // Sends in turn, every one signalled: one completion each, in order,
    // and each DCT receives its own.
    r.zero_targets();
    for k in 0..3u64 {
        for ti in 0..2 {
            let at = (k as usize) * 1024;
            r.t[ti].post_recv(700 + k * 2 + ti as u64, at..at + 1024);
        }
    }
    let src = &r.src;
    let wcs = r
        .dci
        .post_and_wait(WAIT, |b| {
            for i in 0..6u64 {
                let ti = (i % 2) as usize;
                let sge = src.sge(i as usize * 50..i as usize * 50 + 10 + i as usize)?;
                if i % 4 == 1 {
                    b.dc(&addrs[ti])
                        .send_imm(i, SendFlags::SIGNALED, 0x5000 + i as u32, sge)?;
                } else {
                    b.dc(&addrs[ti]).send(i, SendFlags::SIGNALED, sge)?;
                }
            }
            Ok(())
        })
        .unwrap()
        .to_vec();
    assert_eq!(wcs.len(), 6, "{wcs:?}");
    for (i, wc) in wcs.iter().enumerate() {
        check_wc(wc, i as u64, WcOpcode::SEND, 1, qpn);
    }
    let mut want = [vec![0u8; MR_LEN], vec![0u8; MR_LEN]];
    for i in 0..6u64 {
        let ti = (i % 2) as usize;
        let k = i / 2;
        let rx = r.t[ti].wait_recv(700 + k * 2 + ti as u64, WcOpcode::RECV);
        let len = 10 + i as usize;
        assert_eq!(rx.byte_len as usize, len, "{rx:?}");
        let imm = (i % 4 == 1).then_some(0x5000 + i as u32);
        assert_eq!(rx.imm, imm, "{rx:?}");
        let at = (k as usize) * 1024;
        let from = i as usize * 50;
        want[ti][at..at + len].copy_from_slice(&data[from..from + len]);
    }
    for (ti, (t, want)) in r.t.iter_mut().zip(&want).enumerate() {
        assert_eq!(&t.mr.to_vec(..).unwrap(), want, "DCT {ti}");
        let mut more = Vec::new();
        assert_eq!(t.recv_cq.poll_into(&mut more, 8).unwrap(), 0, "{more:?}");
    }
}

/// A DCI write whose DC key is not the DCT's: the direct path's error CQE
/// has the status libmlx5 reports for the same write (posted through
/// `WrBatch` on another DCI first), names the work request, and the rest
/// of the batch is flushed; `reset` + `ready` make the DCI work again.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dci_wrong_dc_key_fails_as_through_libmlx5_and_reset_recovers() {
    let mut r = DcRig::new(None);
    let qpn = r.dci.qp_num();
    r.zero_targets();
    r.src.write_at(0, &pattern(256, 3)).unwrap();
    let remote = r.t[0].mr.remote(0..256).unwrap();
    let wrong = DcAddr::new(&r.ah, r.t[0].dct.dctn(), DCT_KEY ^ 1);

    // Through libmlx5 (WrBatch), on a DCI of its own.
    let (status, vendor_err) = {
        let mut cq = CompletionQueue::new(&r.ctx, 16).unwrap();
        let mut dci = QpBuilder::dci(&r.pd, &cq)
            .caps(dci_caps())
            .build()
            .expect("create DCI");
        dci.ready(DCI_PSN, &r.opts).unwrap();
        let src = &r.src;
        let wcs = dci
            .post_and_wait(&mut cq, WAIT, |b| {
                b.wr(9, wrong)
                    .rdma_write(remote.slice(0, 64)?)
                    .sge(src.sge(0..64)?)
            })
            .unwrap();
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        assert_eq!(wcs[0].wr_id, 9, "{wcs:?}");
        // (An error completion's opcode is undefined through libibverbs.)
        assert_eq!(wcs[0].qp_num, dci.qp_num(), "{wcs:?}");
        assert!(!wcs[0].status.is_success(), "{wcs:?}");
        (wcs[0].status, wcs[0].vendor_err)
    };
    eprintln!("a wrong DC key through libmlx5: {status:?} (vendor error {vendor_err:#x})");
    r.t[0].untouched();

    let bad = r.dci.dc_addr(&wrong).unwrap();
    let good = r.addr;
    let src = &r.src;
    let wcs = r
        .dci
        .post_and_wait(WAIT, |b| {
            b.dc(&good[0]).rdma_write(
                10,
                SendFlags::empty(),
                remote.slice(0, 64)?,
                src.sge(0..64)?,
            )?;
            b.dc(&bad).rdma_write(
                11,
                SendFlags::SIGNALED,
                remote.slice(64, 64)?,
                src.sge(0..64)?,
            )?;
            b.dc(&good[0]).rdma_write(
                12,
                SendFlags::SIGNALED,
                remote.slice(128, 64)?,
                src.sge(0..64)?,
            )?;
            b.dc(&good[1]).rdma_write(
                13,
                SendFlags::SIGNALED,
                r.t[1].mr.remote(0..64)?,
                src.sge(0..64)?,
            )
        })
        .unwrap()
        .to_vec();
    assert_eq!(wcs.len(), 3, "{wcs:?}");
    // The error CQE names the failing work request and retires the
    // unsignalled good one before it.
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status, wcs[0].covers, wcs[0].qp_num),
        (11, status, 2, qpn),
        "{wcs:?}"
    );
    assert_eq!(wcs[0].opcode, WcOpcode::RDMA_WRITE, "{wcs:?}");
    assert_eq!(u32::from(wcs[0].vendor_err), vendor_err, "{wcs:?}");
    assert_ne!(wcs[0].syndrome, 0, "{wcs:?}");
    assert_eq!(wcs[0].byte_len, 0, "{wcs:?}");
    match wcs[0].ok() {
        Err(e @ Error::WorkCompletion { .. }) => {
            assert!(e.to_string().contains("work request 11"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    for (wc, id) in wcs[1..].iter().zip([12, 13]) {
        assert_eq!(
            (wc.wr_id, wc.status, wc.covers, wc.qp_num, wc.opcode),
            (id, WcStatus::WR_FLUSH_ERR, 1, qpn, WcOpcode::RDMA_WRITE),
            "{wcs:?}"
        );
    }
    assert_eq!(r.dci.outstanding(), 0);
    assert_eq!(r.dci.state().unwrap(), QpState::Err);
    // The good write before it landed; nothing else did.
    r.t[0].holds(0, &pattern(64, 3));
    r.t[1].untouched();

    r.dci.reset().expect("reset the DCI");
    assert_eq!(r.dci.state().unwrap(), QpState::Reset);
    assert_eq!((r.dci.outstanding(), r.dci.room()), (0, r.dci.depth()));
    r.dci.ready(DCI_PSN, &r.opts).expect("DCI to RTS again");
    r.write_works(0, 20, 0, 100, 300);
    r.write_works(1, 21, 8, 200, 64);
}

/// A DCI with DCI streams: work requests on two stream ids (to both DCTs)
/// in one batch land; and a stream on a DCI without streams is refused by
/// the writer, before anything is written.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dci_streams_and_their_refusal_without_streams() {
    // Without streams: refused before anything is written.
    let mut r = DcRig::new(None);
    r.zero_targets();
    r.src.write_at(0, &pattern(256, 5)).unwrap();
    let remote = r.t[0].mr.remote(0..256).unwrap();
    let addr = r.addr[0];
    let depth = r.dci.depth();
    {
        let mut b = r.dci.batch();
        let e = b
            .dc_stream(&addr, 0)
            .rdma_write(
                1,
                SendFlags::SIGNALED,
                remote.slice(0, 64).unwrap(),
                r.src.sge(0..64).unwrap(),
            )
            .unwrap_err();
        assert!(matches!(e, Error::Direct(DirectError::NoStreams)), "{e}");
        assert!(b.is_empty(), "{b:?}");
        assert_eq!(b.room(), depth);
    }
    let src = &r.src;
    let e = r
        .dci
        .post_and_wait(WAIT, |b| {
            b.dc(&addr).rdma_write(
                2,
                SendFlags::SIGNALED,
                remote.slice(0, 64)?,
                src.sge(0..64)?,
            )?;
            b.dc_stream(&addr, 1).rdma_write(
                3,
                SendFlags::SIGNALED,
                remote.slice(64, 64)?,
                src.sge(0..64)?,
            )
        })
        .unwrap_err();
    assert!(matches!(e, Error::Direct(DirectError::NoStreams)), "{e}");
    assert!(e.to_string().contains("dci_streams"), "{e}");
    assert_eq!((r.dci.outstanding(), r.dci.room()), (0, r.dci.depth()));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(r.dci.poll(8, |wc| panic!("{wc:?}")).unwrap(), 0);
    r.t[0].untouched();
    r.write_works(0, 4, 0, 512, 64);
    drop(r);

    // With streams.
    let ctx = open();
    let Some(caps) = dci_streams_caps(&ctx) else {
        return;
    };
    drop(ctx);
    let conc = caps.max_log_num_concurent.min(2);
    let streams = DciStreams {
        log_num_concurent: conc,
        log_num_errored: caps.max_log_num_errored.min(1).min(conc),
    };
    let mut r = DcRig::new(Some(streams));
    let qpn = r.dci.qp_num();
    let last = (streams.num_streams() - 1) as u16;
    assert!(last >= 1, "{streams:?}");
    let data = pattern(4096, 23);
    r.src.write_at(0, &data).unwrap();
    r.zero_targets();
    let remotes = [r.t[0].mr.remote(..).unwrap(), r.t[1].mr.remote(..).unwrap()];
    let addrs = r.addr;
    let src = &r.src;
    // Work request i: DCT i % 2, stream 0 or `last` in turn, 200 bytes at
    // i * 256.
    let wcs = r
        .dci
        .post_and_wait(WAIT, |b| {
            for i in 0..16u64 {
                let ti = (i % 2) as usize;
                let stream = if (i / 2) % 2 == 0 { 0 } else { last };
                let at = i as usize * 256;
                let flags = if i % 4 == 3 {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::empty()
                };
                b.dc_stream(&addrs[ti], stream).rdma_write(
                    i,
                    flags,
                    remotes[ti].slice(at as u64, 200)?,
                    src.sge(at..at + 200)?,
                )?;
            }
            Ok(())
        })
        .unwrap()
        .to_vec();
    assert_eq!(wcs.len(), 4, "{wcs:?}");
    for (k, wc) in wcs.iter().enumerate() {
        check_wc(wc, k as u64 * 4 + 3, WcOpcode::RDMA_WRITE, 4, qpn);
    }
    let mut want = [vec![0u8; MR_LEN], vec![0u8; MR_LEN]];
    for i in 0..16usize {
        let at = i * 256;
        want[i % 2][at..at + 200].copy_from_slice(&data[at..at + 200]);
    }
    for (ti, (t, want)) in r.t.iter().zip(&want).enumerate() {
        assert_eq!(&t.mr.to_vec(..).unwrap(), want, "DCT {ti}");
    }

    // A send on each stream, received.
    r.zero_targets();
    for (i, stream) in [0, last].into_iter().enumerate() {
        let wr_id = 60 + i as u64;
        r.t[0].post_recv(wr_id, 0..MR_LEN);
        let sge = r.src.sge(100..400).unwrap();
        let wcs = r
            .dci
            .post_and_wait(WAIT, |b| {
                b.dc_stream(&addrs[0], stream)
                    .send(wr_id, SendFlags::SIGNALED, sge)
            })
            .unwrap();
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        check_wc(&wcs[0], wr_id, WcOpcode::SEND, 1, qpn);
        let rx = r.t[0].wait_recv(wr_id, WcOpcode::RECV);
        assert_eq!(rx.byte_len, 300, "{rx:?}");
        r.t[0].holds(0, &data[100..400]);
    }
    r.t[1].untouched();
}

/// `dc_addr` refuses an address handle of another device context (a
/// second open of the same device), and one of another protection domain
/// of the DCI's own context, as a DCI work request does.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dc_addr_refuses_an_address_handle_of_another_context() {
    let r = DcRig::new(None);
    let other = open();
    assert_ne!(other.as_ptr(), r.ctx.as_ptr());
    let pd = ProtectionDomain::new(&other).unwrap();
    let opts = rig::connect_options(&other);
    let ah = AddressHandle::new(&pd, &local_port_ah(&other, &opts).unwrap()).unwrap();
    let e = r
        .dci
        .dc_addr(&DcAddr::new(&ah, r.t[0].dct.dctn(), DCT_KEY))
        .unwrap_err();
    match &e {
        Error::InvalidArgument(msg) => {
            assert!(msg.contains("another device context"), "{msg}")
        }
        other => panic!("expected InvalidArgument, got {other}"),
    }
    let second = ProtectionDomain::new(&r.ctx).unwrap();
    let ah2 = AddressHandle::new(&second, r.ah.attr()).unwrap();
    let e = r
        .dci
        .dc_addr(&DcAddr::new(&ah2, r.t[0].dct.dctn(), DCT_KEY))
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("another protection domain")),
        "{e}"
    );
    // One of the DCI's PD is taken, and equals the rig's.
    let same = r
        .dci
        .dc_addr(&DcAddr::new(&r.ah, r.t[0].dct.dctn(), DCT_KEY))
        .unwrap();
    assert_eq!(same, r.addr[0]);
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn into_direct_refusals_of_dcis() {
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let opts = rig::connect_options(&ctx);
    let cq = || CompletionQueue::new(&ctx, 64).unwrap();
    let dci = |cq: &CompletionQueue| {
        QpBuilder::dci(&pd, cq)
            .caps(dci_caps())
            .build()
            .expect("create DCI")
    };

    // Shared with another DCI.
    let scq = cq();
    let qp = dci(&scq);
    let also = dci(&scq);
    refused(qp.into_direct(scq), "other QPs complete on its CQ");
    drop(also);

    // Shared with a DCT (its receives complete there).
    let scq = cq();
    let qp = dci(&scq);
    let srq = SharedReceiveQueue::new(&pd, 16, 1).unwrap();
    let dct = Dct::new(&pd, &scq, &srq, DCT_KEY).unwrap();
    refused(qp.into_direct(scq), "other QPs complete on its CQ");
    drop(dct);

    // Not its CQ.
    let scq = cq();
    let qp = dci(&scq);
    refused(qp.into_direct(cq()), "not the QP's send CQ");

    // Not in RESET.
    let scq = cq();
    let qp = dci(&scq);
    qp.ready(DCI_PSN, &opts).unwrap();
    refused(qp.into_direct(scq), "not RESET");

    // The same shape without any of those is taken, and the QP that shared
    // the CQ, once gone, no longer stands in the way.
    let scq = cq();
    let qp = dci(&scq);
    let also = dci(&scq);
    drop(also);
    let qp = qp.into_direct(scq).unwrap();
    assert_eq!(qp.state().unwrap(), QpState::Reset);
    assert_eq!(qp.outstanding(), 0);
}

/// The send-queue buffer of a QP (`mlx5dv_init_obj(MLX5DV_OBJ_QP)`).
fn sq_buf(qp: *mut mlx5dv::ffi::ibv_qp) -> *const u8 {
    let mut dvqp = mlx5dv::ffi::mlx5dv_qp::default();
    let mut obj = mlx5dv::ffi::mlx5dv_obj::default();
    obj.qp.in_ = qp;
    obj.qp.out = &mut dvqp;
    let rc =
        unsafe { mlx5dv::ffi::mlx5dv_init_obj(&mut obj, u64::from(mlx5dv::ffi::MLX5DV_OBJ_QP)) };
    assert_eq!(rc, 0, "mlx5dv_init_obj");
    assert_eq!(dvqp.sq.stride, 64);
    dvqp.sq.buf.cast::<u8>().cast_const()
}

/// The WQEs of a batch, from the start of a send queue, as the device
/// reads them: each WQE's DS units, `meaningful` bytes of each (the rest
/// of an inline segment's last unit is padding), the QP number masked out.
fn wqes_of(buf: *const u8, meaningful: &[Option<usize>]) -> Vec<Vec<u8>> {
    let mut at = 0usize;
    let mut out = Vec::new();
    for m in meaningful {
        let ctrl = unsafe { std::slice::from_raw_parts(buf.add(at), 64) };
        let ds = usize::from(ctrl[7] & 0x3f);
        let mut w = unsafe { std::slice::from_raw_parts(buf.add(at), ds * 16) }.to_vec();
        w[4..7].fill(0);
        if let Some(m) = m {
            assert!(*m <= w.len(), "{m} of {ds} units");
            w.truncate(*m);
        }
        out.push(w);
        at += ds.div_ceil(4) * 64;
    }
    out
}

/// The same DCI work requests posted through libmlx5 (`WrBatch`) on one
/// fresh DCI and through the direct path on another: the WQEs in their
/// send queues are the same bytes (but for the QP number), and both land.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dci_wqes_match_libmlx5s_byte_for_byte() {
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let opts = rig::connect_options(&ctx);
    let mut t = Target::new(&ctx, &pd, &opts, DCT_KEY);
    let ah = AddressHandle::new(&pd, &local_port_ah(&ctx, &opts).unwrap()).unwrap();
    let dc = DcAddr::new(&ah, t.dct.dctn(), DCT_KEY);
    let mut src = MemoryRegion::new(&pd, 4096, rig::access_all()).unwrap();
    src.write_at(0, &pattern(4096, 61)).unwrap();
    let mut dst = MemoryRegion::new(&pd, 4096, rig::access_all()).unwrap();
    let remote = t.mr.remote(..).unwrap();
    let inl_w = pattern(20, 1);
    let inl_s = pattern(13, 2);
    // Every op, signalled; the inline segment's meaningful bytes: control
    // 16, datagram 48, remote address 16 (for the write), count 4, data.
    let meaningful = [
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        Some(16 + 48 + 16 + 4 + inl_w.len()),
        Some(16 + 48 + 4 + inl_s.len()),
    ];
    let mut rings = Vec::new();
    for direct in [false, true] {
        t.mr.fill(.., 0).unwrap();
        t.mr.write_at(2048, &7u64.to_ne_bytes()).unwrap();
        // The write with immediate's, then the three sends'.
        for k in 0..4 {
            let at = 3072 + k * 256;
            t.post_recv(80 + k as u64, at..at + 256);
        }
        let mut cq = CompletionQueue::new(&ctx, 64).unwrap();
        let mut dci = QpBuilder::dci(&pd, &cq).caps(dci_caps()).build().unwrap();
        let buf = sq_buf(dci.as_ptr());
        let qpn = dci.qp_num();
        let (a, rest) = dst.sge_mut(0..192).unwrap().split_at(8).unwrap();
        let (b2, rest) = rest.split_at(8).unwrap();
        let (_, rd) = rest.split_at(48).unwrap();
        let s = |r: std::ops::Range<usize>| src.sge(r).unwrap();
        let sig = SendFlags::SIGNALED;
        let (n, ring) = if direct {
            let mut d = dci.into_direct(cq).unwrap();
            d.ready(DCI_PSN, &opts).unwrap();
            let to = d.dc_addr(&dc).unwrap();
            let wcs = d
                .post_and_wait(WAIT, |b| {
                    b.dc(&to)
                        .rdma_write(1, sig, remote.slice(0, 64)?, s(0..64))?;
                    b.dc(&to)
                        .rdma_write_imm(2, sig, remote.slice(64, 32)?, 0xabcd, s(64..96))?;
                    b.dc(&to).send(3, sig, s(100..150))?;
                    b.dc(&to).send_imm(4, sig, 0x1234_5678, s(200..210))?;
                    b.dc(&to).rdma_read(5, sig, remote.slice(128, 128)?, rd)?;
                    b.dc(&to)
                        .atomic_cmp_swp(6, sig, remote.slice(2048, 8)?, 7, 9, a)?;
                    b.dc(&to)
                        .atomic_fetch_add(7, sig, remote.slice(2048, 8)?, 3, b2)?;
                    b.dc(&to)
                        .rdma_write_inline(8, sig, remote.slice(512, 20)?, &inl_w)?;
                    b.dc(&to).send_inline(9, sig, &inl_s)
                })
                .unwrap()
                .to_vec();
            for (i, wc) in wcs.iter().enumerate() {
                let op = [
                    WcOpcode::RDMA_WRITE,
                    WcOpcode::RDMA_WRITE,
                    WcOpcode::SEND,
                    WcOpcode::SEND,
                    WcOpcode::RDMA_READ,
                    WcOpcode::COMP_SWAP,
                    WcOpcode::FETCH_ADD,
                    WcOpcode::RDMA_WRITE,
                    WcOpcode::SEND,
                ][i];
                check_wc(wc, i as u64 + 1, op, 1, qpn);
            }
            // Read while the direct QP lives: its drop frees the ring.
            (wcs.len(), wqes_of(buf, &meaningful))
        } else {
            dci.ready(DCI_PSN, &opts).unwrap();
            let wcs = dci
                .post_and_wait(&mut cq, WAIT, |b| {
                    b.wr(1, dc)
                        .signaled()
                        .rdma_write(remote.slice(0, 64)?)
                        .sge(s(0..64))?;
                    b.wr(2, dc)
                        .signaled()
                        .rdma_write_imm(remote.slice(64, 32)?, 0xabcd)
                        .sge(s(64..96))?;
                    b.wr(3, dc).signaled().send().sge(s(100..150))?;
                    b.wr(4, dc)
                        .signaled()
                        .send_imm(0x1234_5678)
                        .sge(s(200..210))?;
                    b.wr(5, dc)
                        .signaled()
                        .rdma_read(remote.slice(128, 128)?)
                        .sge(rd)?;
                    b.wr(6, dc)
                        .signaled()
                        .atomic_cmp_swp(remote.slice(2048, 8)?, 7, 9)
                        .sge(a)?;
                    b.wr(7, dc)
                        .signaled()
                        .atomic_fetch_add(remote.slice(2048, 8)?, 3)
                        .sge(b2)?;
                    b.wr(8, dc)
                        .signaled()
                        .rdma_write(remote.slice(512, 20)?)
                        .inline(&inl_w)?;
                    b.wr(9, dc).signaled().send().inline(&inl_s)
                })
                .unwrap()
                .to_vec();
            for (i, wc) in wcs.iter().enumerate() {
                assert_eq!(
                    (wc.status, wc.wr_id, wc.qp_num),
                    (WcStatus::SUCCESS, i as u64 + 1, qpn),
                    "{wcs:?}"
                );
            }
            (wcs.len(), wqes_of(buf, &meaningful))
        };
        assert_eq!(n, 9);
        rings.push(ring);
        // What landed: the writes, the sends' receives, the atomics'
        // result (7 swapped for 9, then 3 added).
        let got = t.mr.to_vec(..).unwrap();
        let sent = src.to_vec(..).unwrap();
        assert_eq!(&got[0..96], &sent[0..96]);
        assert_eq!(&got[512..532], &inl_w[..]);
        assert_eq!(u64::from_ne_bytes(got[2048..2056].try_into().unwrap()), 12);
        let rx = t.wait_recv(80, WcOpcode::RECV_RDMA_WITH_IMM);
        assert_eq!((rx.byte_len, rx.imm), (32, Some(0xabcd)), "{rx:?}");
        assert!(got[3072..3328].iter().all(|&b| b == 0));
        for (k, (want, imm)) in [
            (&sent[100..150], None),
            (&sent[200..210], Some(0x1234_5678)),
            (&inl_s[..], None),
        ]
        .into_iter()
        .enumerate()
        {
            let rx = t.wait_recv(81 + k as u64, WcOpcode::RECV);
            assert_eq!((rx.byte_len as usize, rx.imm), (want.len(), imm), "{rx:?}");
            let at = 3072 + (k + 1) * 256;
            assert_eq!(&got[at..at + want.len()], want);
        }
        assert_eq!(&dst.to_vec(64..192).unwrap()[..], &got[128..256]);
        let rx = t.recv_cq.poll_into(&mut Vec::new(), 8).unwrap();
        assert_eq!(rx, 0);
    }
    assert_eq!((rings[0].len(), rings[1].len()), (9, 9));
    // Control, datagram (3 units), remote address, data: 6 units; a send
    // has no remote address, an atomic one more unit; inline data takes
    // its 4-byte count and bytes in whole units.
    let ds: Vec<u8> = rings[1].iter().map(|w| w[7] & 0x3f).collect();
    assert_eq!(ds, [6, 6, 5, 5, 6, 7, 7, 7, 6], "{ds:?}");
    for (i, (lib, dir)) in rings[0].iter().zip(&rings[1]).enumerate() {
        assert_eq!(lib, dir, "WQE {} (wr_id {}): libmlx5 vs direct", i, i + 1);
    }
}
