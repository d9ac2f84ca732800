//! A host that lies on the fabric. A legitimate program (`tests/c/victim.c`,
//! rdma-core's API only) runs on the software device under the runner with
//! one QP whose peer is a host this test plays, bound to the fabric's socket
//! name as a device binds it; the test speaks the fabric's wire format
//! (`mlx5dv_sim::fabric::wire`) as its peer, and as a second host that is
//! not its peer, and checks what the victim saw: its memory byte for byte,
//! its completions (status, opcode, length), its QP's state, how long its
//! verbs commands waited and how much memory it took.
//!
//! These tests need rdma-core's development files and a C compiler.

use mlx5dv_sim::fabric::wire::{Op, Packet, Reply, Request, Response, Transport, MAX_DATAGRAM};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRng, TestRunner};
use std::io::{BufRead, BufReader};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod common;
use common::{compile_c, ensure_library, runner};

/// The host the victim's QP is connected to (this test plays it).
const PEER: u16 = 0x100;
/// Its QP number.
const PEER_QPN: u32 = 0x777;
/// A host of the same fabric that is not the victim's peer.
const LIAR: u16 = 0x101;
/// The longest a victim may take to say it is ready, or to end.
const DEADLINE: Duration = Duration::from_secs(60);

fn victim_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| compile_c("victim", &["victim.c"]))
}

/// A victim program running under the runner.
struct Victim {
    child: Child,
    lines: Receiver<String>,
    fabric: String,
    lid: u16,
    qpn: u32,
    rkey: u32,
    addr: u64,
    canary: u64,
    canary_rkey: u32,
}

/// What the victim printed at its end.
#[derive(Debug)]
struct Report {
    /// Every completion: (wr_id, status, opcode, byte_len, imm).
    wcs: Vec<[u64; 5]>,
    qp_state: u32,
    max_cmd: Duration,
    rss_growth_kb: i64,
    canary_ok: bool,
    mem: Vec<u8>,
    text: String,
}

fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(name).and_then(|w| w.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
}

fn num(line: &str, name: &str) -> u64 {
    field(line, name)
        .parse()
        .unwrap_or_else(|e| panic!("{name} in {line:?}: {e}"))
}

impl Victim {
    /// Starts `victim KIND PEER PEER_QPN MS [post]` and waits until it is
    /// ready.
    fn start(kind: &str, ms: u32, post: bool) -> Self {
        ensure_library();
        let mut c = Command::new(runner());
        c.args(["--", victim_bin().to_str().expect("path")])
            .args([
                kind,
                &PEER.to_string(),
                &PEER_QPN.to_string(),
                &ms.to_string(),
            ])
            .args(post.then_some("post"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        let mut child = c.spawn().expect("run mlx5-sim");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        let ready = lines.recv_timeout(DEADLINE).expect("the victim is ready");
        assert!(ready.starts_with("ready "), "{ready}");
        Self {
            child,
            fabric: field(&ready, "fabric").to_string(),
            lid: num(&ready, "lid") as u16,
            qpn: num(&ready, "qpn") as u32,
            rkey: num(&ready, "rkey") as u32,
            addr: num(&ready, "addr"),
            canary: num(&ready, "canary"),
            canary_rkey: num(&ready, "canary_rkey") as u32,
            lines,
        }
    }

    /// Waits for the victim's end and reads its report.
    fn report(mut self) -> Report {
        let mut r = Report {
            wcs: Vec::new(),
            qp_state: u32::MAX,
            max_cmd: Duration::ZERO,
            rss_growth_kb: 0,
            canary_ok: false,
            mem: Vec::new(),
            text: String::new(),
        };
        let t0 = Instant::now();
        loop {
            let left = DEADLINE.saturating_sub(t0.elapsed());
            let Ok(l) = self.lines.recv_timeout(left) else {
                break;
            };
            r.text += &l;
            r.text.push('\n');
            if l.starts_with("wc ") {
                r.wcs
                    .push(["wr_id", "status", "opcode", "len", "imm"].map(|f| num(&l, f)));
            } else if l.starts_with("end ") {
                r.qp_state = num(&l, "qp_state") as u32;
                r.max_cmd = Duration::from_micros(num(&l, "max_cmd_us"));
                r.rss_growth_kb = num(&l, "rss_end_kb") as i64 - num(&l, "rss_start_kb") as i64;
                r.canary_ok = num(&l, "canary_ok") == 1;
            } else if let Some(hex) = l.strip_prefix("mem ") {
                r.mem = (0..hex.len() / 2)
                    .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
                    .collect();
                break;
            }
        }
        // SAFETY: kill(2) of the process group this test started.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
        assert_eq!(r.mem.len(), 256, "the victim's report:\n{}", r.text);
        assert!(
            r.canary_ok,
            "remote traffic changed memory no key grants\n{}",
            r.text
        );
        r
    }

    /// A host of the victim's fabric, bound as number `id`.
    fn host(&self, id: u16) -> Host {
        Host::bind(&self.fabric, id)
    }
}

/// A host of the victim's fabric, played by this test.
struct Host {
    sock: UnixDatagram,
    fabric: String,
}

fn addr(fabric: &str, id: u16) -> SocketAddr {
    SocketAddr::from_abstract_name(format!("mlx5dv-sim/{fabric}/{id}")).expect("abstract name")
}

impl Host {
    fn bind(fabric: &str, id: u16) -> Self {
        let sock = UnixDatagram::bind_addr(&addr(fabric, id)).expect("bind a host's name");
        sock.set_write_timeout(Some(Duration::from_secs(10)))
            .expect("write timeout");
        Self {
            sock,
            fabric: fabric.into(),
        }
    }

    fn send_raw(&self, to: u16, bytes: &[u8]) {
        self.sock
            .send_to_addr(bytes, &addr(&self.fabric, to))
            .expect("send a datagram to the victim");
    }

    fn send(&self, to: u16, p: &Packet) {
        self.send_raw(to, &p.encode());
    }

    /// The next packet within `t`, if any.
    fn recv(&self, t: Duration) -> Option<Packet> {
        self.sock.set_read_timeout(Some(t)).expect("read timeout");
        let mut b = vec![0; MAX_DATAGRAM];
        let n = self.sock.recv(&mut b).ok()?;
        Packet::decode(&b[..n])
    }
}

/// A request from `src` (host and QP) to the victim's QP.
fn request(v: &Victim, src_host: u16, psn: u32, transport: Transport, op: Op) -> Packet {
    Packet::Request(Request {
        src_host,
        src_qpn: PEER_QPN,
        dst_qpn: v.qpn,
        psn,
        transport,
        dc_key: 0,
        qkey: 0x1111_1111,
        solicited: false,
        op,
    })
}

fn write(v: &Victim, offset: u64, data: &[u8], imm: Option<[u8; 4]>) -> Op {
    Op::Write {
        first: true,
        rkey: v.rkey,
        raddr: v.addr + offset,
        imm,
        total: data.len() as u32,
        data: data.to_vec(),
    }
}

/// `IBV_QPS_RTS`, `IBV_QPS_ERR`.
const RTS: u32 = 3;
const ERR: u32 = 6;

/// A host that is not the victim's peer writes to it naming the peer as
/// its source: nothing lands, nothing is answered. The peer itself, with
/// the same packet, writes.
#[test]
fn a_host_that_names_another_as_its_source_is_not_served() {
    let v = Victim::start("rc", 1500, false);
    let (peer, liar) = (v.host(PEER), v.host(LIAR));
    liar.send(
        v.lid,
        &request(&v, PEER, 0, Transport::Rc, write(&v, 0, b"LIAR", None)),
    );
    std::thread::sleep(Duration::from_millis(100));
    peer.send(
        v.lid,
        &request(&v, PEER, 0, Transport::Rc, write(&v, 64, b"PEER", None)),
    );
    let ack = peer.recv(Duration::from_secs(10));
    assert!(
        matches!(&ack, Some(Packet::Response(Response { psn: 0, reply: Reply::Ack(d), .. })) if d.is_empty()),
        "the peer's write is acknowledged: {ack:?}"
    );
    assert_eq!(
        liar.recv(Duration::from_millis(200)),
        None,
        "the liar gets no answer"
    );
    let r = v.report();
    assert_eq!(&r.mem[..4], [0; 4], "{}", r.text);
    assert_eq!(&r.mem[64..68], b"PEER", "{}", r.text);
    assert_eq!(r.qp_state, RTS, "{}", r.text);
}

/// An ACK from a host that is not the peer, for the PSN the victim's write
/// waits on, does not complete it; the peer's NAK with a syndrome no NAK
/// carries (a flush) is dropped too; its remote access NAK fails the write
/// and puts the QP in ERR.
#[test]
fn answers_from_strangers_and_naks_of_no_remote_error_complete_nothing() {
    let v = Victim::start("rc", 2500, true);
    let (peer, liar) = (v.host(PEER), v.host(LIAR));
    let Some(Packet::Request(req)) = peer.recv(Duration::from_secs(10)) else {
        panic!("the victim's write reaches its peer");
    };
    assert!(matches!(
        req.op,
        Op::Write {
            rkey: 0x1234,
            raddr: 0x1000,
            ..
        }
    ));
    let answer = |reply| {
        Packet::Response(Response {
            dst_qpn: v.qpn,
            psn: req.psn,
            reply,
        })
    };
    liar.send(v.lid, &answer(Reply::Ack(Vec::new())));
    peer.send(v.lid, &answer(Reply::Nak(0x05, "flushed".into())));
    std::thread::sleep(Duration::from_millis(300));
    peer.send(v.lid, &answer(Reply::Nak(0x13, "no such key".into())));
    let r = v.report();
    // IBV_WC_REM_ACCESS_ERR = 10 (an error completion's opcode is undefined).
    assert_eq!(
        r.wcs.first().map(|w| (w[0], w[1])),
        Some((7, 10)),
        "{}",
        r.text
    );
    assert_eq!(r.qp_state, ERR, "{}", r.text);
}

/// A write with immediate whose packet claims a length it does not carry:
/// the receive completion reports the bytes written.
#[test]
fn a_write_with_immediate_reports_the_bytes_it_wrote() {
    let v = Victim::start("rc", 1500, false);
    let peer = v.host(PEER);
    let mut op = write(&v, 0, b"four", Some(0x0a0b_0c0du32.to_be_bytes()));
    if let Op::Write { total, .. } = &mut op {
        *total = 0xffff_fff0;
    }
    peer.send(v.lid, &request(&v, PEER, 0, Transport::Rc, op));
    assert!(peer.recv(Duration::from_secs(10)).is_some(), "answered");
    let r = v.report();
    // IBV_WC_RECV_RDMA_WITH_IMM = 129.
    assert_eq!(r.wcs, vec![[100, 0, 129, 4, 0x0a0b_0c0d]], "{}", r.text);
    assert_eq!(&r.mem[..4], b"four", "{}", r.text);
}

/// A datagram longer than any packet, whose first bytes are a valid write:
/// dropped whole, never served as its prefix; the write that follows at
/// the same PSN lands.
#[test]
fn an_over_long_datagram_is_dropped_not_cut() {
    let v = Victim::start("rc", 1500, false);
    let peer = v.host(PEER);
    // A write whose data fills the largest datagram exactly, then more.
    let head = request(&v, PEER, 0, Transport::Rc, write(&v, 0, &[], None)).encode();
    let fill = MAX_DATAGRAM - head.len();
    let mut long = request(
        &v,
        PEER,
        0,
        Transport::Rc,
        write(&v, 0, &vec![0xee; fill], None),
    )
    .encode();
    assert_eq!(long.len(), MAX_DATAGRAM);
    long.extend_from_slice(&[0xee; 4096]);
    peer.send_raw(v.lid, &long);
    std::thread::sleep(Duration::from_millis(200));
    peer.send(
        v.lid,
        &request(&v, PEER, 0, Transport::Rc, write(&v, 128, b"next", None)),
    );
    assert!(peer.recv(Duration::from_secs(10)).is_some(), "answered");
    let r = v.report();
    assert!(r.mem[..128].iter().all(|&b| b == 0), "{}", r.text);
    assert_eq!(&r.mem[128..132], b"next", "{}", r.text);
}

/// Thousands of answers nobody asked for (64 KiB each) cost the victim no
/// memory: none is kept.
#[test]
fn answers_nobody_asked_for_are_not_kept() {
    let v = Victim::start("rc", 6000, false);
    let peer = v.host(PEER);
    let ack = Packet::Response(Response {
        dst_qpn: v.qpn,
        psn: 5,
        reply: Reply::Ack(vec![0x55; 65536]),
    })
    .encode();
    for _ in 0..3000 {
        peer.send_raw(v.lid, &ack);
    }
    let r = v.report();
    assert!(
        r.rss_growth_kb < 32 * 1024,
        "3000 unsolicited answers of 64 KiB grew the victim by {} KiB\n{}",
        r.rss_growth_kb,
        r.text
    );
}

/// A peer that sends requests and never reads its answers fills its own
/// socket queue: the victim's device neither stalls on it (its verbs
/// commands go on at once) nor keeps answers without bound.
#[test]
fn a_peer_that_never_reads_does_not_stall_the_device() {
    let v = Victim::start("rc", 4000, false);
    let peer = v.host(PEER);
    for psn in 0..200u32 {
        let off = u64::from(psn % 16) * 8;
        peer.send(
            v.lid,
            &request(
                &v,
                PEER,
                psn,
                Transport::Rc,
                write(&v, off, &psn.to_le_bytes(), None),
            ),
        );
    }
    let r = v.report();
    // Each answer that found the queue full used to be waited for, 200 ms
    // each, with the device lock held: a verbs command waited 38 s. (A
    // command takes well under a millisecond; a busy machine's scheduler
    // can make it tens.)
    assert!(
        r.max_cmd < Duration::from_secs(1),
        "a verbs command waited {:?} while a peer did not read\n{}",
        r.max_cmd,
        r.text
    );
    // Every write landed (the last one at each offset).
    for i in 0..16u32 {
        let last = (199 - i) / 16 * 16 + i;
        let at = (i * 8) as usize;
        assert_eq!(
            &r.mem[at..at + 4],
            last.to_le_bytes(),
            "offset {at}\n{}",
            r.text
        );
    }
}

/// UC takes no reads and no atomics: both are dropped, the memory is as it
/// was and the QP stays in RTS; the write after them lands.
#[test]
fn uc_drops_reads_and_atomics_and_stays_ready() {
    let v = Victim::start("uc", 1500, false);
    let peer = v.host(PEER);
    let atomic = Op::Atomic {
        cs: false,
        rkey: v.rkey,
        raddr: v.addr,
        swap_add: 0x0101_0101,
        compare: 0,
    };
    let read = Op::Read {
        rkey: v.rkey,
        raddr: v.addr,
        len: 8,
    };
    peer.send(v.lid, &request(&v, PEER, 0, Transport::Uc, atomic));
    peer.send(v.lid, &request(&v, PEER, 1, Transport::Uc, read));
    std::thread::sleep(Duration::from_millis(200));
    peer.send(
        v.lid,
        &request(&v, PEER, 2, Transport::Uc, write(&v, 16, b"uc ok", None)),
    );
    let r = v.report();
    assert_eq!(&r.mem[..8], [0; 8], "{}", r.text);
    assert_eq!(&r.mem[16..21], b"uc ok", "{}", r.text);
    assert_eq!(r.qp_state, RTS, "{}", r.text);
    assert_eq!(
        peer.recv(Duration::from_millis(100)),
        None,
        "UC answers nothing"
    );
}

/// A UD datagram over the port's MTU (4096 on InfiniBand) is dropped: no
/// receive takes it and the QP stays in RTS; the next one is delivered.
#[test]
fn a_ud_datagram_over_the_mtu_is_dropped() {
    let v = Victim::start("ud", 1500, false);
    let peer = v.host(PEER);
    let send = |n: usize| Op::Send {
        first: true,
        last: true,
        imm: None,
        inv: None,
        data: vec![0x42; n],
    };
    peer.send(v.lid, &request(&v, PEER, 0, Transport::Ud, send(5000)));
    peer.send(v.lid, &request(&v, PEER, 0, Transport::Ud, send(100)));
    let r = v.report();
    // IBV_WC_RECV = 128; a UD receive counts the 40 bytes of GRH room.
    assert_eq!(r.wcs, vec![[100, 0, 128, 140, 0]], "{}", r.text);
    assert_eq!(r.qp_state, RTS, "{}", r.text);
}

/// Packets, made at random by proptest, from the victim's peer (most) and
/// from a host that is not its peer, to every transport: the victim's own
/// QP number or another, its rkey, the canary's or none, addresses in its
/// buffer, around it and anywhere, lengths up to past a packet, PSNs near
/// the expected one and anywhere, answers nobody asked for. The device
/// takes all of them without crashing, stalling or growing, and no byte
/// outside what the victim's key grants changes (the canary, registered
/// for local access only, stays as it was).
#[test]
fn random_packets_break_nothing() {
    let cases: usize = std::env::var("MLX5DV_SIM_FUZZ_PACKETS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    // An RC QP goes to ERR at its first invalid request or bad key (the
    // IB spec's class C errors) and drops the rest: UC and UD, which drop
    // such packets and go on, take the whole stream too.
    for (kind, seed) in [("rc", 1), ("uc", 2), ("ud", 3)] {
        random_packets(kind, seed, cases);
    }
}

fn random_packets(kind: &str, seed: u8, cases: usize) {
    let v = Victim::start(kind, 4000, false);
    let (peer, liar) = (v.host(PEER), v.host(LIAR));
    let (qpn, rkey, addr) = (v.qpn, v.rkey, v.addr);
    let (canary, canary_rkey) = (v.canary, v.canary_rkey);
    let qpns = prop_oneof![4 => Just(qpn), 1 => any::<u32>()];
    let rkeys = prop_oneof![4 => Just(rkey), 1 => Just(canary_rkey), 1 => any::<u32>()];
    let addrs = prop_oneof![
        4 => (0..65536u64).prop_map(move |o| addr + o),
        1 => (0..8192u64).prop_map(move |o| canary.wrapping_sub(4096) + o),
        1 => any::<u64>(),
    ];
    let data = prop_oneof![
        8 => proptest::collection::vec(any::<u8>(), 0..64),
        1 => proptest::collection::vec(any::<u8>(), 4096..4200),
        1 => (65530usize..65600).prop_map(|n| vec![0xab; n]),
    ];
    let imm = proptest::option::of(any::<[u8; 4]>());
    let op = prop_oneof![
        (
            any::<bool>(),
            rkeys.clone(),
            addrs.clone(),
            imm.clone(),
            any::<u32>(),
            data.clone()
        )
            .prop_map(|(first, rkey, raddr, imm, total, data)| Op::Write {
                first,
                rkey,
                raddr,
                imm,
                total,
                data
            }),
        (
            rkeys.clone(),
            addrs.clone(),
            prop_oneof![0..4200u32, any::<u32>()]
        )
            .prop_map(|(rkey, raddr, len)| Op::Read { rkey, raddr, len }),
        (
            any::<bool>(),
            any::<bool>(),
            imm,
            proptest::option::of(rkeys.clone()),
            data
        )
            .prop_map(|(first, last, imm, inv, data)| Op::Send {
                first,
                last,
                imm,
                inv,
                data
            }),
        (any::<bool>(), rkeys, addrs, any::<u64>(), any::<u64>()).prop_map(
            |(cs, rkey, raddr, swap_add, compare)| Op::Atomic {
                cs,
                rkey,
                raddr,
                swap_add,
                compare
            }
        ),
    ];
    let transport = prop_oneof![
        4 => Just(Transport::Rc),
        1 => Just(Transport::Uc),
        1 => Just(Transport::Dc),
        1 => Just(Transport::Ud),
        1 => any::<u32>().prop_map(|srqn| Transport::Xrc { srqn }),
    ];
    let request = (
        qpns.clone(),
        prop_oneof![4 => 0..64u32, 1 => any::<u32>()],
        transport,
        any::<u64>(),
        any::<bool>(),
        op,
    )
        .prop_map(move |(dst_qpn, psn, transport, dc_key, solicited, op)| {
            Packet::Request(Request {
                src_host: PEER,
                src_qpn: PEER_QPN,
                dst_qpn,
                psn,
                transport,
                dc_key,
                qkey: 0x1111_1111,
                solicited,
                op,
            })
        });
    let reply = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..16).prop_map(Reply::Ack),
        (any::<u8>(), ".{0,8}").prop_map(|(s, why)| Reply::Nak(s, why)),
        any::<u8>().prop_map(Reply::Rnr),
    ];
    let response = (qpns, 0..64u32, reply).prop_map(|(dst_qpn, psn, reply)| {
        Packet::Response(Response {
            dst_qpn,
            psn,
            reply,
        })
    });
    let packet = (prop_oneof![8 => request, 1 => response], 0..10u8);
    // A fixed seed: the same packets every run (a failure reproduces).
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &[seed; 32]),
    );
    for _ in 0..cases {
        let (p, who) = packet.new_tree(&mut runner).expect("a packet").current();
        // One packet in ten from the host that is not the peer.
        let from = if who == 0 { &liar } else { &peer };
        from.send(v.lid, &p);
    }
    let r = v.report();
    eprintln!(
        "the {kind} victim after {cases} random packets:\n{}",
        r.text
    );
    assert!(
        r.max_cmd < Duration::from_secs(1),
        "a verbs command waited {:?}\n{}",
        r.max_cmd,
        r.text
    );
    assert!(
        r.rss_growth_kb < 32 * 1024,
        "{cases} random packets grew the {kind} victim by {} KiB\n{}",
        r.rss_growth_kb,
        r.text
    );
}

/// A peer that answers the victim's write with receiver-not-ready 300
/// times (its `rnr_retry` is 7: retry for ever), then acknowledges it: the
/// write completes (the device once counted the NAKs in a byte and its
/// thread died at the 256th).
#[test]
fn three_hundred_rnr_naks_then_an_ack_complete_the_write() {
    let v = Victim::start("rc", 20000, true);
    let peer = v.host(PEER);
    let mut naks = 0;
    let t0 = Instant::now();
    while naks <= 300 {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "after {naks} RNR NAKs"
        );
        let Some(Packet::Request(req)) = peer.recv(Duration::from_secs(5)) else {
            panic!("the victim sends its write again after RNR NAK {naks}");
        };
        // RNR timer code 1: 10 µs.
        let reply = if naks < 300 {
            Reply::Rnr(1)
        } else {
            Reply::Ack(Vec::new())
        };
        peer.send(
            v.lid,
            &Packet::Response(Response {
                dst_qpn: v.qpn,
                psn: req.psn,
                reply,
            }),
        );
        naks += 1;
    }
    let r = v.report();
    // IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE = 1.
    assert_eq!(
        r.wcs.first().map(|w| (w[0], w[1], w[2])),
        Some((7, 0, 1)),
        "{}",
        r.text
    );
    assert_eq!(r.qp_state, RTS, "{}", r.text);
}

/// UC: a send's last packet, and a write's, whose first packet never came
/// (lost: UC packets are not resent) are dropped, the memory as it was and
/// the QP in RTS; the whole send after them lands.
#[test]
fn uc_drops_a_message_whose_first_packet_was_lost() {
    let v = Victim::start("uc", 1500, false);
    let peer = v.host(PEER);
    let tail = Op::Send {
        first: false,
        last: true,
        imm: None,
        inv: None,
        data: b"tail".to_vec(),
    };
    let mut write_tail = write(&v, 32, b"tail", Some([0, 0, 0, 9]));
    if let Op::Write { first, .. } = &mut write_tail {
        *first = false;
    }
    peer.send(v.lid, &request(&v, PEER, 0, Transport::Uc, tail));
    peer.send(v.lid, &request(&v, PEER, 1, Transport::Uc, write_tail));
    std::thread::sleep(Duration::from_millis(200));
    let whole = Op::Send {
        first: true,
        last: true,
        imm: None,
        inv: None,
        data: b"whole".to_vec(),
    };
    peer.send(v.lid, &request(&v, PEER, 2, Transport::Uc, whole));
    let r = v.report();
    assert_eq!(&r.mem[32..36], [0; 4], "{}", r.text);
    // IBV_WC_RECV = 128: only the whole send, into the first receive.
    assert_eq!(r.wcs, vec![[100, 0, 128, 5, 0]], "{}", r.text);
    assert_eq!(r.qp_state, RTS, "{}", r.text);
}
