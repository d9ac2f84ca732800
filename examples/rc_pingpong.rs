//! `rc_pingpong`: rdma-core's `ibv_rc_pingpong`, written with `mlx5dv`, and
//! wire-compatible with it: either side can be the C tool.
//!
//! ```text
//! rc_pingpong [-d DEV] [-i PORT] [-g GID] [-s SIZE] [-n ITERS] ...          # server
//! rc_pingpong [-d DEV] [-i PORT] [-g GID] [-s SIZE] [-n ITERS] ... HOST     # client
//!
//! # on soft-RoCE (rxe0, RoCE v2 GID at index 1), the C server and this client:
//! ibv_rc_pingpong -d rxe0 -g 1 &
//! cargo run --example rc_pingpong -- -d rxe0 -g 1 127.0.0.1
//! ```
//!
//! What it shares with the C tool, so that the two interoperate:
//!
//! - the TCP exchange on port 18515 (`-p`): the client connects and sends
//!   `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, GID as 32 hex digits in wire
//!   order) with its terminating NUL, 52 bytes; the server connects its QP
//!   and answers with its own; the client answers `"done"` (5 bytes);
//! - the client tries the server once: it prints that it waits for a
//!   server at HOST:PORT, and when none listens fails at once (exit 1),
//!   as the C client's "Couldn't connect to HOST:PORT" does: start the
//!   server first;
//! - the QP: RC, path MTU 1024 (`-m`), RNR timer 12, timeout 14, 7 retries,
//!   one outstanding send, `-r` receives posted before the exchange;
//! - the message flow: the client sends first; each side sends its next
//!   message once its previous send and a receive have both completed,
//!   until it has sent and received `-n` messages of `-s` bytes;
//! - the payload: every byte `0x7b`.
//!
//! Beyond the C tool, each received message is checked: its length and
//! every byte.
//!
//! Sends go through the extended work-request API ([`QpEx::batch`], one
//! signalled send per batch); receives through [`QpEx::post_recv`], one
//! buffer slot per posted receive, so that a slot is read only while no
//! receive is posted on it.
//!
//! Exit status: 0 every message went both ways and checked out; 1 a verbs
//! call, a completion, the exchange or the data check failed; 2 bad usage.

mod common;

use common::pingpong::{self, Config, Dest};
use common::{exit, random_psn, Cli, Failure};
use mlx5dv::*;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const PROG: &str = "rc_pingpong";
const USAGE: &str = "\
Usage:
  rc_pingpong [OPTIONS]          start a server and wait for connection
  rc_pingpong [OPTIONS] HOST     connect to the server at HOST (start the
                                 server first: no retry, as ibv_rc_pingpong)

Wire-compatible with rdma-core's ibv_rc_pingpong.

Options:
  -p, --port=PORT        listen on/connect to TCP port PORT (default 18515)
  -d, --ib-dev=DEV       use RDMA device DEV (default: the first found)
  -i, --ib-port=PORT     use port PORT of the device (default 1)
  -s, --size=SIZE        size of the messages to exchange (default 4096)
  -m, --mtu=SIZE         path MTU (default 1024)
  -r, --rx-depth=DEPTH   number of receives to post at a time (default 500)
  -n, --iters=ITERS      number of exchanges (default 1000)
  -l, --sl=SL            service level (default 0)
  -g, --gid-idx=INDEX    local port GID index (needed on RoCE)
  -h, --help             this text

Exit status: 0 success, 1 failure, 2 bad usage.
";

/// The payload byte of rdma-core's tool.
const PAYLOAD: u8 = 0x7b;
/// The send's work-request id; a receive's is its buffer slot.
const SEND_WRID: u64 = 1 << 32;
/// How long the loop waits without any completion before it gives up.
const STALL: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(PROG, USAGE, &pingpong::options());
    exit(PROG, run(&cli))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let (ctx, cfg) = Config::open(PROG, cli, |_| Ok(()))?;
    pingpong(&ctx, &cfg)
}

fn pingpong(ctx: &Context, cfg: &Config) -> Result<(), Failure> {
    let pd = ProtectionDomain::new(ctx)?;
    // The memory: one send buffer, and one receive slot per posted receive.
    let mut send_mr = MemoryRegion::new(&pd, cfg.size, AccessFlags::LOCAL_WRITE)?;
    send_mr.as_mut_slice()?.fill(PAYLOAD);
    let recv_len = cfg.recv_len()?;
    let recv_mr = MemoryRegion::new(&pd, recv_len, AccessFlags::LOCAL_WRITE)?;
    let mut cq = CompletionQueue::new(ctx, cfg.rx_depth + 2)?;
    // Declared after the memory, so dropped (destroyed) before it.
    let mut qp = QpBuilder::rc(&pd, &cq, &cq)
        .caps(QpCaps {
            max_send_wr: 1,
            max_recv_wr: cfg.rx_depth,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        })
        .send_ops(SendOps::SEND)
        .build()?;
    qp.to_init(cfg.opts.port, cfg.opts.access)?;
    for slot in 0..cfg.rx_depth as usize {
        post_recv(&mut qp, &recv_mr, slot, cfg.size)?;
    }

    let me = Dest::of(&qp.endpoint(random_psn(), &cfg.opts)?);
    me.print("local");
    let peers = match &cfg.host {
        Some(host) => pingpong::client_exchange(host, cfg.tcp_port, &[me])?,
        None => pingpong::server_exchange(cfg.tcp_port, &[me], |peers| {
            connect(&qp, cfg, &me, &peers[0])
        })?,
    };
    let peer = peers[0];
    peer.print("remote");
    if cfg.host.is_some() {
        connect(&qp, cfg, &me, &peer)?;
    }

    // The loop of pp_rc_pingpong: a send goes out when the previous send
    // and a receive have both completed.
    const RECV: u8 = 1;
    const SEND: u8 = 2;
    let mut pending = RECV;
    if cfg.host.is_some() {
        pingpong::post_send(&mut qp, &send_mr, cfg.size, SEND_WRID)?;
        pending |= SEND;
    }
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    let mut last_progress = Instant::now();
    while rcnt < cfg.iters || scnt < cfg.iters {
        let Some(wc) = common::poll_one(&mut cq)? else {
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
                "failed status {} for wr_id {:#x}",
                wc.status, wc.wr_id
            )));
        }
        if wc.wr_id == SEND_WRID {
            scnt += 1;
            pending &= !SEND;
        } else {
            let slot = wc.wr_id as usize;
            pingpong::check_message(&recv_mr, (slot, cfg.size), wc.byte_len, rcnt, PAYLOAD)?;
            post_recv(&mut qp, &recv_mr, slot, cfg.size)?;
            rcnt += 1;
            pending &= !RECV;
        }
        if scnt < cfg.iters && pending == 0 {
            pingpong::post_send(&mut qp, &send_mr, cfg.size, SEND_WRID)?;
            pending = RECV | SEND;
        }
    }
    pingpong::report(cfg.size, cfg.iters, start.elapsed());
    println!(
        "{rcnt} messages of {} bytes received and checked (every byte {PAYLOAD:#04x})",
        cfg.size
    );
    // The receives still posted are flushed when the QP is destroyed, on
    // drop, before the memory is deregistered.
    Ok(())
}

/// INIT → RTR → RTS towards the peer.
fn connect(qp: &RcQp, cfg: &Config, me: &Dest, peer: &Dest) -> Result<(), Failure> {
    qp.to_rtr(&peer.endpoint(), &cfg.opts)?;
    qp.to_rts(me.psn, &cfg.opts)?;
    Ok(())
}

/// Posts the receive of buffer slot `slot`.
fn post_recv(qp: &mut RcQp, mr: &MemoryRegion, slot: usize, size: usize) -> Result<(), Failure> {
    let sge = mr.sge(slot * size..(slot + 1) * size)?;
    // SAFETY: the region lives until after the QP is destroyed (declared
    // before it); the slot is read only after this receive's completion and
    // before it is posted again.
    unsafe { qp.post_recv(slot as u64, &[sge])? };
    Ok(())
}
