//! `ud_pingpong`: rdma-core's `ibv_ud_pingpong`, written with `mlx5dv`, and
//! wire-compatible with it: either side can be the C tool.
//!
//! ```text
//! ud_pingpong [-d DEV] [-i PORT] [-g GID] [-s SIZE] [-n ITERS] ...          # server
//! ud_pingpong [-d DEV] [-i PORT] [-g GID] [-s SIZE] [-n ITERS] ... HOST     # client
//!
//! # on soft-RoCE (rxe0, RoCE v2 GID at index 1), the C server and this client:
//! ibv_ud_pingpong -d rxe0 -g 1 &
//! cargo run --example ud_pingpong -- -d rxe0 -g 1 127.0.0.1
//! ```
//!
//! What it shares with the C tool, so that the two interoperate:
//!
//! - the TCP exchange on port 18515 (`-p`): the client connects and sends
//!   `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, GID as 32 hex digits in wire
//!   order) with its terminating NUL, 52 bytes; the server makes its
//!   address handle and answers with its own; the client answers `"done"`;
//! - the QP: UD, Q_Key 0x11111111, one outstanding send, `-r` receives of
//!   `-s` bytes plus the 40-byte GRH area; messages of at most the port's
//!   active MTU (a larger `-s` is refused, as the C tool refuses it);
//! - the address handle: to the peer's LID, with a GRH (hop limit 1, from
//!   GID index `-g`) when the peer sent a GID with a non-zero interface id;
//! - the message flow: the client sends first; each side sends its next
//!   message once its previous send and a receive have both completed,
//!   until it has sent and received `-n` messages of `-s` bytes;
//! - the payload: every byte `0x7b`, and each side sends back the last
//!   message it received (the C tool sends and receives in one buffer);
//!   with `-c` the client zeroes the first byte of each page of its
//!   message and, at the end, checks that the last message it received
//!   still has them, printing "invalid data in page N" for each that does
//!   not (this one then exits 1).
//!
//! Beyond the C tool, each received message is checked: its length, every
//! byte (`0x7b`, or 0 at the start of a page where a `-c` client zeroed
//! it), the sender's QP number in the completion, and, when the message
//! came with a GRH, that its source GID is the one the peer gave.
//!
//! Exit status: 0 every message went both ways and checked out; 1 a verbs
//! call, a completion, the exchange or the data check failed; 2 bad usage.

mod common;

use common::pp::{self, line, Dest, SEND_WRID, STALL};
use common::{exit, flag, open_device, random_psn, val, Cli, Failure};
use mlx5dv::*;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const PROG: &str = "ud_pingpong";

/// The usage text.
fn usage() -> String {
    pp::usage(
        PROG,
        "ibv_ud_pingpong",
        &[
            line::PORT,
            line::IB_DEV,
            line::IB_PORT,
            concat!(
                "  -s, --size=SIZE        size of the messages to exchange (default 1024;\n",
                "                         at most the port's active MTU)\n",
            ),
            line::RX_DEPTH,
            line::ITERS,
            line::SL,
            line::EVENTS,
            line::GID_IDX,
            concat!(
                "  -c, --chk              validate received buffer (client: the pages its\n",
                "                         message started with)\n",
            ),
            line::HELP,
        ],
    )
}

/// The Q_Key of rdma-core's tool.
const QKEY: u32 = 0x1111_1111;
/// The payload byte of rdma-core's tool.
const PAYLOAD: u8 = 0x7b;
/// The page size `-c` marks pages of (the C tool's `sysconf`).
const PAGE: usize = 4096;

/// Whether the peer's GID has a non-zero interface id (its last 8 bytes):
/// the C tool's test for "address it with a GRH".
fn global(peer: &Dest) -> bool {
    peer.gid.0[8..] != [0; 8]
}

struct Config {
    tcp_port: u16,
    ib_port: u8,
    size: usize,
    rx_depth: u32,
    iters: u64,
    sl: u8,
    gid_index: Option<u8>,
    events: bool,
    chk: bool,
    host: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(
        PROG,
        &usage(),
        &[
            val('p', "port"),
            val('s', "size"),
            val('r', "rx-depth"),
            val('n', "iters"),
            val('l', "sl"),
            flag('e', "events"),
            flag('c', "chk"),
        ],
    );
    exit(PROG, run(&cli))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let cfg = Config {
        tcp_port: cli.num_or("port", 18515),
        ib_port: cli.num_or("ib-port", 1),
        size: cli.num_or("size", 1024),
        rx_depth: cli.num_or("rx-depth", 500),
        iters: cli.num_or("iters", 1000),
        sl: cli.num_or("sl", 0),
        gid_index: cli.num("gid-idx"),
        events: cli.flag("events"),
        chk: cli.flag("chk"),
        host: cli.host().map(str::to_string),
    };
    if cfg.rx_depth == 0 || cfg.ib_port == 0 {
        common::usage_error(PROG, "--rx-depth and --ib-port must be at least 1");
    }
    let ctx = open_device(cli.text("ib-dev"))?;
    let mtu = ctx.query_port(cfg.ib_port)?.active_mtu.bytes() as usize;
    if cfg.size > mtu {
        return Err(Failure::Failed(format!(
            "Requested size larger than port MTU ({mtu})"
        )));
    }
    pingpong(&ctx, &cfg)
}

/// One completion, as the loop reads it.
struct Wc {
    wr_id: u64,
    status: WcStatus,
    byte_len: u32,
    flags: WcFlags,
    src_qp: Option<u32>,
}

fn pingpong(ctx: &Context, cfg: &Config) -> Result<(), Failure> {
    let pd = ProtectionDomain::new(ctx)?;
    let slot_len = UD_GRH_BYTES + cfg.size;
    // The memory: one send buffer, and one receive slot (GRH area and
    // message) per posted receive.
    let mut send_mr = MemoryRegion::new(&pd, cfg.size.max(1), AccessFlags::LOCAL_WRITE)?;
    let mut message = vec![PAYLOAD; cfg.size];
    if cfg.chk && cfg.host.is_some() {
        for b in message.iter_mut().step_by(PAGE) {
            *b = 0;
        }
    }
    let recv_len = slot_len
        .checked_mul(cfg.rx_depth as usize)
        .ok_or("--size × --rx-depth is too large".to_string())?;
    let mut recv_mr = MemoryRegion::new(&pd, recv_len, AccessFlags::LOCAL_WRITE)?;
    let channel = if cfg.events {
        Some(CompletionChannel::new(ctx)?)
    } else {
        None
    };
    let mut cq = match &channel {
        Some(ch) => CompletionQueue::with_channel(ctx, cfg.rx_depth + 1, ch)?,
        None => CompletionQueue::new(ctx, cfg.rx_depth + 1)?,
    };
    // Declared after the memory, so dropped (destroyed) before it.
    let mut qp = QpBuilder::ud(&pd, &cq, &cq)
        .caps(QpCaps {
            max_send_wr: 1,
            max_recv_wr: cfg.rx_depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        })
        .send_ops(SendOps::SEND)
        .build()?;
    let me = Dest {
        lid: ctx.query_port(cfg.ib_port)?.lid,
        qpn: qp.qp_num(),
        psn: random_psn(),
        gid: match cfg.gid_index {
            Some(i) => ctx.gid(cfg.ib_port, u32::from(i))?,
            None => Gid::default(),
        },
    };
    // A UD QP has no peer: it can be ready (RTS) before the exchange.
    qp.ready(cfg.ib_port, QKEY, me.psn)?;
    for slot in 0..cfg.rx_depth as usize {
        post_recv(&mut qp, &mut recv_mr, slot, slot_len)?;
    }
    println!(
        "  local address:  LID {:#06x}, QPN {:#08x}, PSN {:#08x}: GID {}",
        me.lid, me.qpn, me.psn, me.gid
    );
    // The server makes its address handle before it answers, so that it
    // is ready before the client's first send.
    let mut dest = None;
    let peer = pp::exchange_one(cfg.host.as_deref(), cfg.tcp_port, me, |peer| {
        dest = Some(ud_dest(&pd, cfg, peer)?);
        Ok(())
    })?;
    let dest = match dest {
        Some(dest) => dest,
        None => ud_dest(&pd, cfg, &peer)?,
    };
    peer.print("remote");
    let to = dest.addr();

    // The loop of ibv_ud_pingpong: a send goes out when the previous send
    // and a receive have both completed.
    const RECV: u8 = 1;
    const SEND: u8 = 2;
    let mut pending = RECV;
    if cfg.host.is_some() {
        post_send(&mut qp, to, &mut send_mr, &message)?;
        pending |= SEND;
    }
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    let mut last_progress = Instant::now();
    while rcnt < cfg.iters || scnt < cfg.iters {
        let Some(wc) = poll(&mut cq, channel.as_ref())? else {
            if last_progress.elapsed() > STALL {
                return Err(Failure::Failed(format!(
                    "no completion for {} s (sent {scnt}, received {rcnt} of {})",
                    STALL.as_secs(),
                    cfg.iters
                )));
            }
            std::hint::spin_loop();
            continue;
        };
        last_progress = Instant::now();
        if !wc.status.is_success() {
            return Err(Failure::Failed(format!(
                "Failed status {} for wr_id {:#x}",
                wc.status, wc.wr_id
            )));
        }
        if wc.wr_id == SEND_WRID {
            scnt += 1;
            pending &= !SEND;
        } else {
            let slot = wc.wr_id as usize;
            let at = slot * slot_len;
            let buf = recv_mr.to_vec(at..at + slot_len)?;
            message = check_message(&buf, &wc, cfg.size, &peer, rcnt)?;
            post_recv(&mut qp, &mut recv_mr, slot, slot_len)?;
            rcnt += 1;
            pending &= !RECV;
        }
        if scnt < cfg.iters && pending == 0 {
            post_send(&mut qp, to, &mut send_mr, &message)?;
            pending = RECV | SEND;
        }
    }
    pp::report(cfg.size, cfg.iters, start.elapsed());
    if cfg.chk && cfg.host.is_some() {
        let bad: Vec<usize> = (0..cfg.size)
            .step_by(PAGE)
            .filter(|&i| message[i] != 0)
            .collect();
        for page in &bad {
            println!("invalid data in page {}", page / PAGE);
        }
        if !bad.is_empty() {
            return Err(Failure::Failed("the -c check failed".into()));
        }
    }
    println!(
        "{rcnt} messages of {} bytes received and checked (every byte {PAYLOAD:#04x}, \
         source QP {:#08x})",
        cfg.size, peer.qpn
    );
    // The receives still posted are flushed when the QP is destroyed, on
    // drop, before the memory is deregistered.
    Ok(())
}

/// Where the sends go: the peer's UD endpoint, from the C tool's text (its
/// LID, QP number and GID; the Q_Key is the tool's), through an address
/// handle made as the C tool makes it: to the peer's LID at service level
/// `-l`, with a GRH (hop limit 1, from GID index `-g` or 0) when the peer
/// sent a GID with a non-zero interface id.
fn ud_dest(pd: &ProtectionDomain, cfg: &Config, peer: &Dest) -> Result<UdDest, Failure> {
    let endpoint = UdEndpoint {
        qpn: peer.qpn,
        qkey: QKEY,
        lid: peer.lid,
        gid: peer.gid,
    };
    let opts = ConnectOptions::default()
        .port(cfg.ib_port)
        .sl(cfg.sl)
        .gid_index(global(peer).then_some(cfg.gid_index.unwrap_or(0)))
        .hop_limit(1);
    Ok(UdDest::new(pd, &endpoint, &opts)?)
}

/// Polls one completion (one per call: see `common::poll_one`); with a
/// channel, arms the CQ and sleeps until its event when there is none.
fn poll(
    cq: &mut CompletionQueue,
    channel: Option<&CompletionChannel>,
) -> Result<Option<Wc>, Failure> {
    let mut got = None;
    let read = |wc: &PolledWc<'_>| Wc {
        wr_id: wc.wr_id(),
        status: wc.status(),
        byte_len: wc.byte_len(),
        flags: wc.wc_flags(),
        src_qp: wc.src_qp(),
    };
    let Some(ch) = channel else {
        cq.poll_each(1, |wc| got = Some(read(wc)))?;
        return Ok(got);
    };
    if cq.poll_or_arm(1, |wc| got = Some(read(wc)))? == 0 {
        match ch.get_event(Duration::from_secs(1)) {
            Ok(_) | Err(Error::Timeout { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(got)
}

/// Posts the receive of buffer slot `slot` (GRH area and message).
fn post_recv(qp: &mut UdQp, mr: &mut MemoryRegion, slot: usize, len: usize) -> Result<(), Failure> {
    // Memory the device writes: named by an `SgeMut`, as a receive's is.
    let sge = mr.sge_mut(slot * len..(slot + 1) * len)?.into();
    // SAFETY: the region lives until after the QP is destroyed (declared
    // before it); the slot is read only after this receive's completion and
    // before it is posted again.
    unsafe { qp.post_recv(slot as u64, &[sge])? };
    Ok(())
}

/// Posts one signalled send of `message` to `to`, through a batch.
fn post_send(
    qp: &mut UdQp,
    to: UdAddr<'_>,
    mr: &mut MemoryRegion,
    message: &[u8],
) -> Result<(), Failure> {
    // No send is in flight (the previous one has completed): the buffer
    // may be written.
    mr.write_at(0, message)?;
    let mut batch = qp.batch();
    batch
        .wr(SEND_WRID, to)
        .signaled()
        .send()
        .sge(mr.sge(0..message.len())?)?;
    // SAFETY: the send buffer is written again only after this send's
    // completion, and lives until after the QP is destroyed (declared
    // before it).
    unsafe { batch.complete()? };
    Ok(())
}

/// Checks the message received in `buf` (GRH area and message) and
/// returns it.
fn check_message(
    buf: &[u8],
    wc: &Wc,
    size: usize,
    peer: &Dest,
    n: u64,
) -> Result<Vec<u8>, Failure> {
    let fail = |what: String| Err(Failure::Failed(format!("message {n}: {what}")));
    if wc.byte_len as usize != UD_GRH_BYTES + size {
        return fail(format!(
            "{} bytes received with the GRH area, {} expected (use the same -s on both sides)",
            wc.byte_len,
            UD_GRH_BYTES + size
        ));
    }
    if wc.src_qp.is_some_and(|q| q != peer.qpn) {
        return fail(format!(
            "from QP {:#x}, not the peer's {:#x}",
            wc.src_qp.unwrap_or(0),
            peer.qpn
        ));
    }
    let (grh, msg) = ud_received(buf, wc.byte_len, wc.flags)?;
    if let Some(g) = grh {
        if global(peer) && g.sgid != peer.gid {
            return fail(format!(
                "its GRH's source GID {} is not the peer's {}",
                g.sgid, peer.gid
            ));
        }
    }
    let bad = msg
        .iter()
        .enumerate()
        .find(|&(i, &b)| b != PAYLOAD && !(b == 0 && i % PAGE == 0));
    if let Some((at, b)) = bad {
        return fail(format!("byte {at} is {b:#04x}, expected {PAYLOAD:#04x}"));
    }
    Ok(msg.to_vec())
}
