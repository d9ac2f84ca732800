//! The direct data path ([`mlx5dv::direct`]) between two programs: every
//! kind of WQE the direct path writes, posted by a direct QP in the test's
//! process to a plain verbs peer in another process, which checks what
//! arrived byte for byte.
//!
//! The test re-runs itself as the peer (as `rxe_mw_hosts` does): an RC QP
//! posted through libmlx5 (`ibv_post_recv`, `WrBatch`), or a DCT on an
//! SRQ, with one region. Over TCP the peer sends its endpoint and the
//! region's `RemoteBuf`; the test's direct QP (`DirectRc`, or a
//! `DirectDci` addressing the DCT through `RemoteDct` and `dc_addr`) posts
//! one batch of every kind — RDMA write, write with immediate, inline
//! write, send, send with immediate, inline send, RDMA read, atomic
//! compare-and-swap and fetch-and-add — and checks each completion
//! (status, opcode, `wr_id`, `byte_len`, `covers`, QP number) and what
//! its reads and atomics brought back. The peer checks its four receive
//! completions (opcode, immediate, length, QP number) and then its whole
//! region against the image the operations must have left, every byte of
//! it. A second round of batches of unsignalled writes wraps the direct
//! send queue several times, checked at the peer the same way.
//!
//! On the software mlx5 device (`scripts/mlx5-sim`) the two processes are
//! two hosts of its fabric; this counts as verified on hardware only from
//! a run on a ConnectX. `#[ignore]`d: run with
//! `MLX5DV_TEST_MLX5_DEVICE=mlx5_0 cargo test --test mlx5_hw_direct_hosts -- --ignored`;
//! without the variable it fails.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::direct::{DirectQp, DirectTransport, DirectWc};
use mlx5dv::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use support::hw::{open, DCI_PSN, DCT_KEY};
use support::process::{finish, start_peer, text};
use support::rig::{self, pattern, MR_LEN, WAIT};

/// The variable that makes the test binary the peer: `rc:PORT` or
/// `dc:PORT` (the test's TCP port).
const PEER_ENV: &str = "MLX5DV_TEST_DIRECT_PEER";
const LIMIT: Duration = Duration::from_secs(60);
/// Inline data asked for on the direct QP: inline WQEs of several blocks.
const INLINE: u32 = 128;

// Where each operation lands in the peer's region.
const WRITE_AT: usize = 0;
const WRITE_LEN: usize = 5000;
const WRITE_IMM_AT: usize = 8192;
const WRITE_IMM_LEN: usize = 3000;
const IMM_W: u32 = 0xdead_beef;
const INLINE_AT: usize = 12_288 + 3;
const READ_AT: usize = 16_384;
const READ_LEN: usize = 4096;
const CAS_AT: usize = 24_576;
const FA_AT: usize = CAS_AT + 8;
const CAS_OLD: u64 = 0x0102_0304_0506_0708;
const CAS_NEW: u64 = 0x1122_3344_5566_7788;
const FA_OLD: u64 = 0x8000_0000_ffff_fff0;
const FA_ADD: u64 = 0x0000_0001_0000_0020;
const SEND_AT: usize = 32_768;
const SEND_LEN: usize = 4000;
const SEND_IMM_AT: usize = 36_864;
const SEND_IMM_LEN: usize = 1000;
const IMM_S: u32 = 0x0102_0304;
const SEND_INLINE_AT: usize = 40_960;
const SEND_INLINE_LEN: usize = 60;
/// The receive a write with immediate consumes (its memory untouched).
const IMM_RX_AT: usize = 45_056;
/// The second round: `ROUND2_N` writes of `ROUND2_LEN` bytes from here.
const ROUND2_AT: usize = 49_152;
const ROUND2_LEN: usize = 64;
const ROUND2_BATCH: usize = 30;
const ROUND2_N: usize = 240;

/// The receives the peer posts, in order: (wr_id, at, len).
const RECEIVES: [(u64, usize, usize); 4] = [
    (71, IMM_RX_AT, 4096),
    (72, SEND_AT, 4096),
    (73, SEND_IMM_AT, 4096),
    (74, SEND_INLINE_AT, 4096),
];

/// What the peer's region must hold after the first round, given the
/// inline write's length.
fn image(inline_len: usize) -> Vec<u8> {
    let mut m = vec![0u8; MR_LEN];
    let mut put = |at: usize, b: &[u8]| m[at..at + b.len()].copy_from_slice(b);
    put(WRITE_AT, &pattern(WRITE_LEN, 1));
    put(WRITE_IMM_AT, &pattern(WRITE_IMM_LEN, 2));
    put(INLINE_AT, &pattern(inline_len, 3));
    put(READ_AT, &pattern(READ_LEN, 4));
    put(CAS_AT, &CAS_NEW.to_ne_bytes());
    put(FA_AT, &FA_OLD.wrapping_add(FA_ADD).to_ne_bytes());
    put(SEND_AT, &pattern(SEND_LEN, 5));
    put(SEND_IMM_AT, &pattern(SEND_IMM_LEN, 6));
    put(SEND_INLINE_AT, &pattern(SEND_INLINE_LEN, 7));
    m
}

/// The region before the first round: what reads and atomics find.
fn initial() -> Vec<u8> {
    let mut m = vec![0u8; MR_LEN];
    m[READ_AT..READ_AT + READ_LEN].copy_from_slice(&pattern(READ_LEN, 4));
    m[CAS_AT..CAS_AT + 8].copy_from_slice(&CAS_OLD.to_ne_bytes());
    m[FA_AT..FA_AT + 8].copy_from_slice(&FA_OLD.to_ne_bytes());
    m
}

/// The direct side's source: what it writes and sends, where the peer
/// must find it.
fn source(inline_len: usize) -> Vec<u8> {
    let mut m = vec![0u8; MR_LEN];
    let mut put = |at: usize, b: &[u8]| m[at..at + b.len()].copy_from_slice(b);
    put(WRITE_AT, &pattern(WRITE_LEN, 1));
    put(WRITE_IMM_AT, &pattern(WRITE_IMM_LEN, 2));
    put(INLINE_AT, &pattern(inline_len, 3));
    put(SEND_AT, &pattern(SEND_LEN, 5));
    put(SEND_IMM_AT, &pattern(SEND_IMM_LEN, 6));
    put(ROUND2_AT, &pattern(ROUND2_N * ROUND2_LEN, 8));
    m
}

/// The first byte where `got` differs from `want`, for a failure message.
#[track_caller]
fn assert_image(got: &[u8], want: &[u8], what: &str) {
    if let Some(i) = got.iter().zip(want).position(|(a, b)| a != b) {
        panic!(
            "{what}: byte {i} is {:#04x}, not {:#04x} ({} bytes differ)",
            got[i],
            want[i],
            got.iter().zip(want).filter(|(a, b)| a != b).count()
        );
    }
    assert_eq!(got.len(), want.len(), "{what}");
}

fn read_byte(tcp: &mut TcpStream, what: &str) -> u8 {
    let mut b = [0u8; 1];
    tcp.read_exact(&mut b)
        .unwrap_or_else(|e| panic!("waiting for {what}: {e}"));
    b[0]
}

/// The peer's receive side, RC or DCT: its receive CQ and the QP number
/// its receive completions carry.
struct Receiver<'a> {
    cq: &'a mut CompletionQueue,
    qp_num: u32,
}

impl Receiver<'_> {
    /// The four receive completions of the first round, each checked.
    fn check_receives(&mut self) {
        let mut got = Vec::new();
        let deadline = Instant::now() + WAIT;
        while got.len() < RECEIVES.len() {
            let wcs = self.cq.wait(RECEIVES.len() - got.len(), WAIT).unwrap();
            got.extend(wcs.iter().copied());
            assert!(Instant::now() < deadline, "only {got:?} came");
        }
        let want = [
            (WcOpcode::RECV_RDMA_WITH_IMM, WRITE_IMM_LEN, Some(IMM_W)),
            (WcOpcode::RECV, SEND_LEN, None),
            (WcOpcode::RECV, SEND_IMM_LEN, Some(IMM_S)),
            (WcOpcode::RECV, SEND_INLINE_LEN, None),
        ];
        for (rx, ((wr_id, ..), (opcode, len, imm))) in got.iter().zip(RECEIVES.iter().zip(want)) {
            assert_eq!(rx.status, WcStatus::SUCCESS, "{rx:?}");
            assert_eq!(rx.wr_id, *wr_id, "{rx:?}");
            assert_eq!(rx.opcode, opcode, "{rx:?}");
            assert_eq!(rx.byte_len as usize, len, "{rx:?}");
            assert_eq!(rx.imm, imm, "{rx:?}");
            assert_eq!(rx.qp_num, self.qp_num, "{rx:?}");
        }
    }
}

/// The peer: a plain RC QP (`rc`) or a DCT on an SRQ (`dc`) and a region
/// the test's direct QP writes, reads and sends into; checks every byte.
fn play_peer(kind: &str, port: u16) {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).expect("connect to the test");
    tcp.set_read_timeout(Some(LIMIT)).expect("read timeout");
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
    let opts = rig::connect_options(&ctx);
    let mut mr = MemoryRegion::new(&pd, MR_LEN, rig::access_all()).expect("register MR");
    mr.write_at(0, &initial()).unwrap();
    let mut recv_cq = CompletionQueue::new(&ctx, 64).expect("recv CQ");
    // Kept alive to the end: the QP, its send CQ, the SRQ.
    let _keep: (
        Option<RcQp>,
        Option<CompletionQueue>,
        Option<(Dct, SharedReceiveQueue)>,
    );
    let qp_num;
    if kind == "rc" {
        let send_cq = CompletionQueue::new(&ctx, 64).expect("send CQ");
        let mut qp = QpBuilder::rc(&pd, &send_cq, &recv_cq)
            .build()
            .expect("create RC QP");
        let ours = qp.endpoint(0x2222, &opts).expect("endpoint");
        tcp.write_all(&ours.to_bytes()).unwrap();
        tcp.write_all(&mr.remote(..).unwrap().to_bytes()).unwrap();
        let mut theirs = [0; Endpoint::BYTES];
        tcp.read_exact(&mut theirs).expect("the test's endpoint");
        let theirs = Endpoint::from_bytes(&theirs).expect("an endpoint");
        qp.connect_to(&theirs, &opts).expect("connect");
        // Receives need INIT or later: posted once connected, before the
        // test is told the peer is ready.
        for (wr_id, at, len) in RECEIVES {
            let sge = mr.sge(at..at + len).unwrap();
            unsafe { qp.post_recv(wr_id, &[sge]) }.expect("post a receive");
        }
        qp_num = qp.qp_num();
        _keep = (Some(qp), Some(send_cq), None);
    } else {
        let srq = SharedReceiveQueue::new(&pd, 64, 1).expect("SRQ");
        let dct = Dct::new(&pd, &recv_cq, &srq, DCT_KEY).expect("create DCT");
        dct.ready(&opts).expect("DCT to RTR");
        for (wr_id, at, len) in RECEIVES {
            let sge = mr.sge(at..at + len).unwrap();
            unsafe { srq.post_recv(wr_id, &[sge]) }.expect("post a receive to the SRQ");
        }
        let ep = dct.endpoint(&opts).expect("DCT endpoint");
        tcp.write_all(&ep.to_bytes()).unwrap();
        tcp.write_all(&mr.remote(..).unwrap().to_bytes()).unwrap();
        qp_num = dct.dctn();
        _keep = (None, None, Some((dct, srq)));
    }
    tcp.write_all(b"r").unwrap();
    // Round 1: the test posted every kind and checked its completions.
    let mut len = [0u8; 4];
    tcp.read_exact(&mut len).expect("round 1 done");
    let inline_len = u32::from_be_bytes(len) as usize;
    Receiver {
        cq: &mut recv_cq,
        qp_num,
    }
    .check_receives();
    assert_image(&mr.to_vec(..).unwrap(), &image(inline_len), "round 1");
    tcp.write_all(b"1").unwrap();
    // Round 2: the wrapped batches of writes.
    assert_eq!(read_byte(&mut tcp, "round 2"), b'2');
    let mut want = image(inline_len);
    let data = pattern(ROUND2_N * ROUND2_LEN, 8);
    want[ROUND2_AT..ROUND2_AT + data.len()].copy_from_slice(&data);
    assert_image(&mr.to_vec(..).unwrap(), &want, "round 2");
    tcp.write_all(b"2").unwrap();
    // Stay until the test is done (end of file).
    let _ = tcp.read(&mut [0; 1]);
    println!("peer ({kind}): both rounds checked, every byte of {MR_LEN}");
}

/// Checks a direct completion's fields.
#[track_caller]
fn check_wc(wc: &DirectWc, wr_id: u64, opcode: WcOpcode, byte_len: u32, qpn: u32) {
    assert_eq!(wc.status, WcStatus::SUCCESS, "{wc:?}");
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len, wc.covers, wc.qp_num),
        (wr_id, opcode, byte_len, 1, qpn),
        "{wc:?}"
    );
    assert_eq!((wc.syndrome, wc.vendor_err), (0, 0), "{wc:?}");
}

/// The completions of the first round: one per work request, in order.
fn check_round1(wcs: &[DirectWc], qpn: u32) {
    let want = [
        (1, WcOpcode::RDMA_WRITE, 0),
        (2, WcOpcode::RDMA_WRITE, 0),
        (3, WcOpcode::RDMA_WRITE, 0),
        (4, WcOpcode::SEND, 0),
        (5, WcOpcode::SEND, 0),
        (6, WcOpcode::SEND, 0),
        (7, WcOpcode::RDMA_READ, READ_LEN as u32),
        (8, WcOpcode::COMP_SWAP, 8),
        (9, WcOpcode::FETCH_ADD, 8),
    ];
    assert_eq!(wcs.len(), want.len(), "{wcs:?}");
    for (wc, (wr_id, opcode, len)) in wcs.iter().zip(want) {
        check_wc(wc, wr_id, opcode, len, qpn);
    }
}

/// Every kind of work request, one each, all signalled, on the writer
/// `$w` (re-evaluated for each: `b` or `b.dc(&addr)`).
macro_rules! every_kind {
    ($w:expr, $remote:expr, $src:expr, $dst:expr, $inline:expr) => {{
        let (remote, src, inline) = ($remote, $src, $inline);
        let s = SendFlags::SIGNALED;
        let at = |a: usize, l: usize| remote.slice(a as u64, l as u64);
        let (read, atomics) = $dst.split_at(READ_LEN as u32)?;
        let (cas, fa) = atomics.split_at(8)?;
        let part = |a: usize, l: usize| src.sge(a..a + l);
        $w.rdma_write(1, s, at(WRITE_AT, WRITE_LEN)?, part(WRITE_AT, WRITE_LEN)?)?;
        $w.rdma_write_imm(
            2,
            s,
            at(WRITE_IMM_AT, WRITE_IMM_LEN)?,
            IMM_W,
            part(WRITE_IMM_AT, WRITE_IMM_LEN)?,
        )?;
        $w.rdma_write_inline(3, s, at(INLINE_AT, inline.len())?, inline)?;
        $w.send(4, s, part(SEND_AT, SEND_LEN)?)?;
        $w.send_imm(5, s, IMM_S, part(SEND_IMM_AT, SEND_IMM_LEN)?)?;
        $w.send_inline(6, s, &pattern(SEND_INLINE_LEN, 7))?;
        $w.rdma_read(7, s, at(READ_AT, READ_LEN)?, read)?;
        $w.atomic_cmp_swp(8, s, at(CAS_AT, 8)?, CAS_OLD, CAS_NEW, cas)?;
        $w.atomic_fetch_add(9, s, at(FA_AT, 8)?, FA_ADD, fa)
    }};
}

/// Both rounds on the direct QP `$qp`, each work request written with the
/// writer `$w` makes of the batch `$b` (`b`, or `b.dc(&addr)`): round 1
/// (every kind, its completions and what its read and atomics brought
/// back checked here, the rest at the peer), then round 2 (batches of
/// unsignalled writes wrapping the send queue); the peer's verdict of each.
macro_rules! both_rounds {
    ($tcp:expr, $qp:expr, $remote:expr, $src:expr, $dst:expr, $inline_len:expr, |$b:ident| $w:expr) => {{
        let (tcp, remote, inline_len) = ($tcp, $remote, $inline_len);
        let qpn = $qp.qp_num();
        let inline = pattern(inline_len, 3);
        let wcs = $qp
            .post_and_wait(WAIT, |$b| {
                every_kind!(
                    $w,
                    remote,
                    &$src,
                    $dst.sge_mut(0..READ_LEN + 16)?,
                    &inline[..]
                )
            })
            .expect("round 1")
            .to_vec();
        check_round1(&wcs, qpn);
        let mut back = vec![0xee; MR_LEN];
        back[..READ_LEN].copy_from_slice(&pattern(READ_LEN, 4));
        back[READ_LEN..READ_LEN + 8].copy_from_slice(&CAS_OLD.to_ne_bytes());
        back[READ_LEN + 8..READ_LEN + 16].copy_from_slice(&FA_OLD.to_ne_bytes());
        let got = $dst.to_vec(..).unwrap();
        assert_image(&got, &back, "what the read and atomics brought back");
        tcp.write_all(&(inline_len as u32).to_be_bytes()).unwrap();
        verdict(tcp, b'1');
        round2(&mut $qp, |qp, first| {
            qp.post_and_wait(WAIT, |$b| {
                for j in first..first + ROUND2_BATCH {
                    let at = ROUND2_AT + j * ROUND2_LEN;
                    let last = j == first + ROUND2_BATCH - 1;
                    let flags = if last {
                        SendFlags::SIGNALED
                    } else {
                        SendFlags::empty()
                    };
                    let to = remote.slice(at as u64, ROUND2_LEN as u64)?;
                    $w.rdma_write(j as u64, flags, to, $src.sge(at..at + ROUND2_LEN)?)?;
                }
                Ok(())
            })
            .map(<[DirectWc]>::to_vec)
        });
        tcp.write_all(b"2").unwrap();
        verdict(tcp, b'2');
    }};
}

/// Round 2: `ROUND2_N` writes in batches of `ROUND2_BATCH`, only each
/// batch's last signalled (its completion covers the batch), through a
/// send queue of about 64: the ring wraps several times.
fn round2<T: DirectTransport>(
    qp: &mut DirectQp<T>,
    mut post: impl FnMut(&mut DirectQp<T>, usize) -> Result<Vec<DirectWc>>,
) {
    let qpn = qp.qp_num();
    for first in (0..ROUND2_N).step_by(ROUND2_BATCH) {
        let wcs = post(qp, first).unwrap_or_else(|e| panic!("batch from {first}: {e}"));
        assert_eq!(wcs.len(), 1, "{wcs:?}");
        let last = (first + ROUND2_BATCH - 1) as u64;
        let wc = &wcs[0];
        assert_eq!(wc.status, WcStatus::SUCCESS, "{wc:?}");
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.covers, wc.qp_num),
            (last, WcOpcode::RDMA_WRITE, ROUND2_BATCH as u32, qpn),
            "{wc:?}"
        );
        assert_eq!(qp.outstanding(), 0);
    }
}

/// Reads the peer's word that it checked round `round`.
#[track_caller]
fn verdict(tcp: &mut TcpStream, round: u8) {
    let got = read_byte(tcp, "the peer's verdict");
    assert_eq!(got, round, "the peer's verdict of round {}", round as char);
}

/// Runs the test's side `side` against a peer process of `kind` (or, in
/// that process, plays the peer): a failure on either side fails the test
/// with the peer's output.
fn with_peer(kind: &str, test: &str, side: fn(&mut TcpStream)) {
    if peer_here() {
        return;
    }
    let (child, mut tcp) = start_peer(
        test,
        &[],
        PEER_ENV,
        |port| format!("{kind}:{port}"),
        LIMIT,
        "the peer",
    );
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| side(&mut tcp)));
    // End of file: the peer leaves (or, on a failure, sees the end early).
    drop(tcp);
    let out = finish(child, "the peer", LIMIT);
    if let Err(e) = ran {
        eprintln!("the peer's side: {}", text(&out));
        std::panic::resume_unwind(e);
    }
    assert!(out.status.success(), "the peer failed: {}", text(&out));
    let done = format!("peer ({kind}): both rounds checked");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains(&done),
        "{}",
        text(&out)
    );
}

/// If this process is the peer, plays it and says so.
fn peer_here() -> bool {
    match std::env::var(PEER_ENV) {
        Ok(v) => {
            let (kind, port) = v.split_once(':').expect("KIND:PORT");
            play_peer(kind, port.parse().expect("a TCP port"));
            true
        }
        Err(_) => false,
    }
}

fn direct_caps(recv: bool) -> QpCaps {
    QpCaps {
        max_send_wr: 64,
        max_recv_wr: if recv { 4 } else { 0 },
        max_send_sge: 1,
        max_recv_sge: u32::from(recv),
        max_inline_data: INLINE,
    }
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn direct_rc_every_wqe_kind_reaches_a_peer_process() {
    with_peer(
        "rc",
        "direct_rc_every_wqe_kind_reaches_a_peer_process",
        rc_side,
    );
}

/// The test's side of the RC test: a direct RC QP.
fn rc_side(tcp: &mut TcpStream) {
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
    let opts = rig::connect_options(&ctx);
    let cq = CompletionQueue::new(&ctx, 256).expect("send CQ");
    let rq = CompletionQueue::new(&ctx, 16).expect("recv CQ");
    let qp = QpBuilder::rc(&pd, &cq, &rq)
        .caps(direct_caps(true))
        .build()
        .expect("create RC QP");
    let mut qp = qp.into_direct(cq).expect("into_direct");
    let inline_len = qp.caps().max_inline_data as usize;
    assert!(inline_len >= INLINE as usize, "{:?}", qp.caps());
    let mut src = MemoryRegion::new(&pd, MR_LEN, rig::access_all()).expect("src MR");
    src.write_at(0, &source(inline_len)).unwrap();
    let mut dst = MemoryRegion::new(&pd, MR_LEN, rig::access_all()).expect("dst MR");
    dst.fill(.., 0xee).unwrap();

    let mut theirs = [0; Endpoint::BYTES];
    tcp.read_exact(&mut theirs).expect("the peer's endpoint");
    let theirs = Endpoint::from_bytes(&theirs).expect("an endpoint");
    let mut remote = [0; RemoteBuf::BYTES];
    tcp.read_exact(&mut remote).expect("the peer's region");
    let remote = RemoteBuf::from_bytes(&remote).expect("a remote buffer");
    assert_eq!(remote.len, MR_LEN as u64);
    let ours = qp.endpoint(0x1111, &opts).expect("endpoint");
    tcp.write_all(&ours.to_bytes()).unwrap();
    qp.connect_to(&theirs, &opts)
        .expect("connect the direct QP");
    assert_eq!(read_byte(tcp, "the peer ready"), b'r');

    both_rounds!(tcp, qp, remote, src, dst, inline_len, |b| b);
}

#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn direct_dci_every_wqe_kind_reaches_a_dct_in_a_peer_process() {
    with_peer(
        "dc",
        "direct_dci_every_wqe_kind_reaches_a_dct_in_a_peer_process",
        dci_side,
    );
}

/// The test's side of the DC test: a direct DCI.
fn dci_side(tcp: &mut TcpStream) {
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
    let opts = rig::connect_options(&ctx);
    let cq = CompletionQueue::new(&ctx, 256).expect("DCI CQ");
    let dci = QpBuilder::dci(&pd, &cq)
        .caps(direct_caps(false))
        .build()
        .expect("create DCI");
    let mut dci = dci.into_direct(cq).expect("into_direct of a DCI");
    dci.ready(DCI_PSN, &opts).expect("DCI to RTS");
    let inline_len = dci.caps().max_inline_data as usize;
    assert!(inline_len >= INLINE as usize, "{:?}", dci.caps());
    let mut src = MemoryRegion::new(&pd, MR_LEN, rig::access_all()).expect("src MR");
    src.write_at(0, &source(inline_len)).unwrap();
    let mut dst = MemoryRegion::new(&pd, MR_LEN, rig::access_all()).expect("dst MR");
    dst.fill(.., 0xee).unwrap();

    let mut ep = [0; DctEndpoint::BYTES];
    tcp.read_exact(&mut ep).expect("the DCT's endpoint");
    let ep = DctEndpoint::from_bytes(&ep).expect("a DCT endpoint");
    let mut remote = [0; RemoteBuf::BYTES];
    tcp.read_exact(&mut remote).expect("the peer's region");
    let remote = RemoteBuf::from_bytes(&remote).expect("a remote buffer");
    let target = RemoteDct::new(&pd, &ep, &opts).expect("RemoteDct");
    let addr = dci.dc_addr(&target.addr()).expect("dc_addr");
    assert_eq!(read_byte(tcp, "the peer ready"), b'r');

    both_rounds!(tcp, dci, remote, src, dst, inline_len, |b| b.dc(&addr));
}
