//! `srq_pingpong`: rdma-core's `ibv_srq_pingpong`, written with `mlx5dv`,
//! and wire-compatible with it: either side can be the C tool. Several RC
//! QPs (`-q`) take their receives from one shared receive queue.
//!
//! ```text
//! srq_pingpong [-d DEV] [-i PORT] [-g GID] [-q QPS] [-s SIZE] [-n ITERS] ...          # server
//! srq_pingpong [-d DEV] [-i PORT] [-g GID] [-q QPS] [-s SIZE] [-n ITERS] ... HOST     # client
//!
//! # on soft-RoCE (rxe0, RoCE v2 GID at index 1), the C server and this client:
//! ibv_srq_pingpong -d rxe0 -g 1 &
//! cargo run --example srq_pingpong -- -d rxe0 -g 1 127.0.0.1
//! ```
//!
//! What it shares with the C tool, so that the two interoperate:
//!
//! - the TCP exchange on port 18515 (`-p`): the client sends 256 address
//!   messages (one per QP the C tool could have, `MAX_QP`; those past
//!   `-q` all zero), each `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, GID as 32
//!   hex digits in wire order) with its NUL, 52 bytes; the server connects
//!   its first `-q` QPs to the client's first `-q`, in order, and answers
//!   with its own 256; the client answers `"done"`. Both sides must use the
//!   same `-q`;
//! - the QPs: RC, path MTU 1024 (`-m`), RNR timer 12, timeout 14, 7
//!   retries, one outstanding send each, all on one SRQ of `-r` receives
//!   (posted before the exchange) and one CQ;
//! - the message flow: the client sends first, on every QP; a QP sends its
//!   next message once its previous send and a receive that arrived on it
//!   (the completion's QP number says which) have both completed, until
//!   `-n` messages of `-s` bytes were sent and received in all;
//! - the payload: every byte 0.
//!
//! Beyond the C tool, each received message is checked (its length and
//! every byte: `-c` asks for no more), and each receive has its own buffer
//! slot, posted again once it was checked, so that a slot is read only
//! while no receive is posted on it. With `-e` the loop sleeps on a
//! completion channel instead of polling.
//!
//! Exit status: 0 every message went both ways and checked out; 1 a verbs
//! call, a completion, the exchange or the data check failed; 2 bad usage.

mod common;

use common::pp::{self, line, Dest, SEND_WRID, STALL};
use common::{exit, flag, random_psn, val, Cli, Failure};
use mlx5dv::*;
use std::process::ExitCode;
use std::time::Instant;

const PROG: &str = "srq_pingpong";

/// The usage text.
fn usage() -> String {
    pp::usage(
        PROG,
        "ibv_srq_pingpong",
        &[
            line::PORT,
            line::IB_DEV,
            line::IB_PORT,
            line::SIZE,
            line::MTU,
            "  -q, --num-qp=NUM       number of QPs to use (default 16, at most 255)\n",
            line::RX_DEPTH,
            "  -n, --iters=ITERS      number of exchanges, over all QPs (default 1000)\n",
            line::SL,
            line::EVENTS,
            line::GID_IDX,
            "  -c, --chk              validate received buffers (always done)\n",
            line::HELP,
        ],
    )
}

/// The QPs the C tool's exchange always carries (`MAX_QP`).
const MAX_QP: usize = 256;
/// The payload byte of rdma-core's tool (its buffer is zeroed).
const PAYLOAD: u8 = 0;
/// A QP's outstanding work, as the C tool's `pending[]`.
const RECV: u8 = 1;
const SEND: u8 = 2;

/// The shared options', and this tool's own: QPs, and CQ events.
struct Config {
    pp: pp::Config,
    num_qp: usize,
    events: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(
        PROG,
        &usage(),
        &[
            &pp::options()[..],
            &[val('q', "num-qp"), flag('e', "events"), flag('c', "chk")],
        ]
        .concat(),
    );
    exit(PROG, run(&cli))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let num_qp: usize = cli.num_or("num-qp", 16);
    if num_qp == 0 {
        common::usage_error(PROG, "--num-qp must be at least 1");
    }
    if num_qp >= MAX_QP {
        common::usage_error(
            PROG,
            &format!("--num-qp {num_qp} must be less than {MAX_QP}"),
        );
    }
    let (ctx, pp) = pp::Config::open(PROG, cli, |rx_depth| {
        if num_qp > rx_depth as usize {
            return Err(Failure::Failed(format!(
                "rx_depth {rx_depth} is too small for {num_qp} QPs -- must have at least \
                 one receive per QP."
            )));
        }
        Ok(())
    })?;
    let cfg = Config {
        pp,
        num_qp,
        events: cli.flag("events"),
    };
    pingpong(&ctx, &cfg)
}

/// The CQ, and with `-e` the channel it raises its events on.
struct Completions {
    cq: CompletionQueue,
    channel: Option<CompletionChannel>,
}

impl Completions {
    fn new(ctx: &Context, cfg: &Config) -> Result<Completions, Failure> {
        let cqe = cfg.pp.rx_depth + cfg.num_qp as u32;
        if !cfg.events {
            let cq = CompletionQueue::new(ctx, cqe)?;
            return Ok(Completions { cq, channel: None });
        }
        let channel = CompletionChannel::new(ctx)?;
        let cq = CompletionQueue::with_channel(ctx, cqe, &channel)?;
        Ok(Completions {
            cq,
            channel: Some(channel),
        })
    }

    /// The next completion: polled, or with a channel, waited for asleep
    /// (arm, poll once more, then the event). Fails after [`STALL`]
    /// without any.
    fn next(&mut self, progress: (u64, u64, u64)) -> Result<WorkCompletion, Failure> {
        let since = Instant::now();
        loop {
            if let Some(wc) = common::poll_one(&mut self.cq)? {
                return Ok(wc);
            }
            if since.elapsed() > STALL {
                let (scnt, rcnt, iters) = progress;
                return Err(Failure::Failed(format!(
                    "no completion for {} s (sent {scnt}, received {rcnt} of {iters})",
                    STALL.as_secs()
                )));
            }
            match &self.channel {
                None => std::hint::spin_loop(),
                Some(channel) => {
                    self.cq.req_notify(false)?;
                    if let Some(wc) = common::poll_one(&mut self.cq)? {
                        return Ok(wc);
                    }
                    match channel.get_event(STALL) {
                        Ok(_) | Err(Error::Timeout { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
    }
}

fn pingpong(ctx: &Context, cfg: &Config) -> Result<(), Failure> {
    let pd = ProtectionDomain::new(ctx)?;
    // The memory: one send buffer (zeroes), and one receive slot per
    // posted receive.
    let send_mr = MemoryRegion::new(&pd, cfg.pp.size, AccessFlags::LOCAL_WRITE)?;
    let recv_len = cfg.pp.recv_len()?;
    let recv_mr = MemoryRegion::new(&pd, recv_len, AccessFlags::LOCAL_WRITE)?;
    let mut wcs = Completions::new(ctx, cfg)?;
    // Declared after the memory, so dropped (destroyed) before it; each
    // QP holds the SRQ, which goes after the last of them.
    let srq = SharedReceiveQueue::new(&pd, cfg.pp.rx_depth, 1)?;
    let mut qps = (0..cfg.num_qp)
        .map(|_| {
            let qp = QpBuilder::rc(&pd, &wcs.cq, &wcs.cq)
                .srq(&srq)
                .caps(QpCaps {
                    max_send_wr: 1,
                    max_send_sge: 1,
                    max_inline_data: 0,
                    ..QpCaps::default()
                })
                .send_ops(SendOps::SEND)
                .build()?;
            qp.to_init(cfg.pp.opts.port, cfg.pp.opts.access)?;
            Ok(qp)
        })
        .collect::<Result<Vec<RcQp>, Failure>>()?;
    for slot in 0..cfg.pp.rx_depth as usize {
        pp::post_srq_recv(&srq, &recv_mr, slot, cfg.pp.size)?;
    }

    // This side's addresses, then the all-zero ones the C tool sends for
    // the QPs it does not have.
    let mut mine = vec![Dest::default(); MAX_QP];
    for (d, qp) in mine.iter_mut().zip(&qps) {
        *d = Dest::of(&qp.endpoint(random_psn(), &cfg.pp.opts)?);
        d.print("local");
    }
    let peers = match &cfg.pp.host {
        Some(host) => pp::client_exchange(host, cfg.pp.tcp_port, &mine)?,
        None => pp::server_exchange(cfg.pp.tcp_port, &mine, |peers| {
            connect(&qps, cfg, &mine, peers)
        })?,
    };
    for p in &peers[..cfg.num_qp] {
        p.print("remote");
    }
    if cfg.pp.host.is_some() {
        connect(&qps, cfg, &mine, &peers)?;
    }

    // The loop of the C tool: a QP sends its next message when its
    // previous send and a receive of its own have both completed.
    let mut pending = vec![RECV; cfg.num_qp];
    if cfg.pp.host.is_some() {
        for (qp, p) in qps.iter_mut().zip(&mut pending) {
            post_send(qp, &send_mr, cfg.pp.size, SEND_WRID)?;
            *p |= SEND;
        }
    }
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    while rcnt < cfg.pp.iters || scnt < cfg.pp.iters {
        let wc = wcs.next((scnt, rcnt, cfg.pp.iters))?;
        if !wc.status.is_success() {
            return Err(Failure::Failed(format!(
                "failed status {} for wr_id {:#x}",
                wc.status, wc.wr_id
            )));
        }
        let i = qps
            .iter()
            .position(|qp| qp.qp_num() == wc.qp_num)
            .ok_or_else(|| format!("couldn't find QPN {:06x}", wc.qp_num))?;
        if wc.wr_id == SEND_WRID {
            scnt += 1;
            pending[i] &= !SEND;
        } else {
            let slot = wc.wr_id as usize;
            check_message(&recv_mr, (slot, cfg.pp.size), wc.byte_len, rcnt, PAYLOAD)?;
            pp::post_srq_recv(&srq, &recv_mr, slot, cfg.pp.size)?;
            rcnt += 1;
            pending[i] &= !RECV;
        }
        if scnt < cfg.pp.iters && pending[i] == 0 {
            post_send(&mut qps[i], &send_mr, cfg.pp.size, SEND_WRID)?;
            pending[i] = RECV | SEND;
        }
    }
    pp::report(cfg.pp.size, cfg.pp.iters, start.elapsed());
    println!(
        "{rcnt} messages of {} bytes received on {} QPs of one SRQ and checked (every byte \
         {PAYLOAD:#04x})",
        cfg.pp.size, cfg.num_qp
    );
    // The receives still posted are flushed when the SRQ is destroyed,
    // after its QPs, on drop, before the memory is deregistered.
    Ok(())
}

/// INIT → RTR → RTS: QP `i` towards the peer's QP `i`.
fn connect(qps: &[RcQp], cfg: &Config, mine: &[Dest], peers: &[Dest]) -> Result<(), Failure> {
    for ((qp, me), peer) in qps.iter().zip(mine).zip(peers) {
        qp.to_rtr(&peer.endpoint(), &cfg.pp.opts)?;
        qp.to_rts(me.psn, &cfg.pp.opts)?;
    }
    Ok(())
}

/// Posts one signalled send of `mr[..size]`, with id `wr_id`, through a
/// batch.
fn post_send(qp: &mut RcQp, mr: &MemoryRegion, size: usize, wr_id: u64) -> Result<(), Failure> {
    let mut batch = qp.batch();
    batch.wr(wr_id).signaled().send().sge(mr.sge(0..size)?)?;
    // SAFETY: the send buffer is never written after it was filled, and
    // lives until after the QP is destroyed (declared before it).
    unsafe { batch.complete()? };
    Ok(())
}

/// Checks message `n`, received into slot `slot` of `mr` (slots of `size`
/// bytes): `byte_len` bytes, each `payload`.
fn check_message(
    mr: &MemoryRegion,
    (slot, size): (usize, usize),
    byte_len: u32,
    n: u64,
    payload: u8,
) -> Result<(), Failure> {
    if byte_len as usize != size {
        return Err(Failure::Failed(format!(
            "message {n}: {byte_len} bytes received, {size} expected (use the same -s on both sides)"
        )));
    }
    // SAFETY: the slot's receive has completed and it is not posted again
    // until this check is done: the device does not write these bytes now
    // (it may write other slots, which this slice does not cover).
    let data = unsafe {
        std::slice::from_raw_parts((mr.addr() as usize + slot * size) as *const u8, size)
    };
    if let Some(at) = data.iter().position(|&b| b != payload) {
        return Err(Failure::Failed(format!(
            "message {n}: byte {at} is {:#04x}, expected {payload:#04x}",
            data[at]
        )));
    }
    Ok(())
}
