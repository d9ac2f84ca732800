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

use common::srq_pingpong::{self as pingpong, Dest};
use common::{exit, flag, random_psn, val, Cli, Failure};
use mlx5dv::*;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const PROG: &str = "srq_pingpong";
const USAGE: &str = "\
Usage:
  srq_pingpong [OPTIONS]          start a server and wait for connection
  srq_pingpong [OPTIONS] HOST     connect to the server at HOST (start the
                                  server first: no retry, as ibv_srq_pingpong)

Wire-compatible with rdma-core's ibv_srq_pingpong.

Options:
  -p, --port=PORT        listen on/connect to TCP port PORT (default 18515)
  -d, --ib-dev=DEV       use RDMA device DEV (default: the first found)
  -i, --ib-port=PORT     use port PORT of the device (default 1)
  -s, --size=SIZE        size of the messages to exchange (default 4096)
  -m, --mtu=SIZE         path MTU (default 1024)
  -q, --num-qp=NUM       number of QPs to use (default 16, at most 255)
  -r, --rx-depth=DEPTH   number of receives to post at a time (default 500)
  -n, --iters=ITERS      number of exchanges, over all QPs (default 1000)
  -l, --sl=SL            service level (default 0)
  -e, --events           sleep on CQ events (default poll)
  -g, --gid-idx=INDEX    local port GID index (needed on RoCE)
  -c, --chk              validate received buffers (always done)
  -h, --help             this text

Exit status: 0 success, 1 failure, 2 bad usage.
";

/// The QPs the C tool's exchange always carries (`MAX_QP`).
const MAX_QP: usize = 256;
/// The payload byte of rdma-core's tool (its buffer is zeroed).
const PAYLOAD: u8 = 0;
/// The sends' work-request id; a receive's is its buffer slot.
const SEND_WRID: u64 = 1 << 32;
/// How long the loop waits without any completion before it gives up.
const STALL: Duration = Duration::from_secs(60);
/// A QP's outstanding work, as the C tool's `pending[]`.
const RECV: u8 = 1;
const SEND: u8 = 2;

/// The shared options', and this tool's own: QPs, and CQ events.
struct Config {
    pp: pingpong::Config,
    num_qp: usize,
    events: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(
        PROG,
        USAGE,
        &[
            &pingpong::options()[..],
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
    let (ctx, pp) = pingpong::Config::open(PROG, cli, |rx_depth| {
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
        post_recv(&srq, &recv_mr, slot, cfg.pp.size)?;
    }

    // This side's addresses, then the all-zero ones the C tool sends for
    // the QPs it does not have.
    let mut mine = vec![Dest::default(); MAX_QP];
    for (d, qp) in mine.iter_mut().zip(&qps) {
        *d = Dest::of(&qp.endpoint(random_psn(), &cfg.pp.opts)?);
        d.print("local");
    }
    let peers = match &cfg.pp.host {
        Some(host) => pingpong::client_exchange(host, cfg.pp.tcp_port, &mine)?,
        None => pingpong::server_exchange(cfg.pp.tcp_port, &mine, |peers| {
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
            pingpong::post_send(qp, &send_mr, cfg.pp.size, SEND_WRID)?;
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
            pingpong::check_message(&recv_mr, (slot, cfg.pp.size), wc.byte_len, rcnt, PAYLOAD)?;
            post_recv(&srq, &recv_mr, slot, cfg.pp.size)?;
            rcnt += 1;
            pending[i] &= !RECV;
        }
        if scnt < cfg.pp.iters && pending[i] == 0 {
            pingpong::post_send(&mut qps[i], &send_mr, cfg.pp.size, SEND_WRID)?;
            pending[i] = RECV | SEND;
        }
    }
    pingpong::report(cfg.pp.size, cfg.pp.iters, start.elapsed());
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

/// Posts the SRQ receive of buffer slot `slot`.
fn post_recv(
    srq: &SharedReceiveQueue,
    mr: &MemoryRegion,
    slot: usize,
    size: usize,
) -> Result<(), Failure> {
    let sge = mr.sge(slot * size..(slot + 1) * size)?;
    // SAFETY: the region lives until after the SRQ is destroyed (declared
    // before it); the slot is read only after this receive's completion
    // and before it is posted again.
    unsafe { srq.post_recv(slot as u64, &[sge])? };
    Ok(())
}
