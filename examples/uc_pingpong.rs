//! `uc_pingpong`: rdma-core's `ibv_uc_pingpong`, written with `mlx5dv`, and
//! wire-compatible with it: either side can be the C tool.
//!
//! ```text
//! uc_pingpong [-d DEV] [-i PORT] [-g GID] [-s SIZE] [-n ITERS] ...          # server
//! uc_pingpong [-d DEV] [-i PORT] [-g GID] [-s SIZE] [-n ITERS] ... HOST     # client
//!
//! # on soft-RoCE (rxe0, RoCE v2 GID at index 1), the C server and this client:
//! ibv_uc_pingpong -d rxe0 -g 1 &
//! cargo run --example uc_pingpong -- -d rxe0 -g 1 127.0.0.1
//! ```
//!
//! What it shares with the C tool, so that the two interoperate:
//!
//! - the TCP exchange on port 18515 (`-p`): the client connects and sends
//!   `"%04x:%06x:%06x:%s"` (LID, QPN, PSN, GID as 32 hex digits in wire
//!   order) with its terminating NUL, 52 bytes; the server connects its QP
//!   and answers with its own; the client answers `"done"` (5 bytes);
//! - the client tries the server once, and fails at once (exit 1) when none
//!   listens: start the server first;
//! - the QP: UC ([`QpBuilder::uc`]), path MTU 1024 (`-m`); RTR with the
//!   peer's address, QPN and PSN, RTS with the PSN only (UC has no RNR
//!   timer, timeout or retries); one outstanding send, `-r` receives
//!   posted before the exchange;
//! - the message flow: the client sends first; each side sends its next
//!   message once its previous send and a receive have both completed,
//!   until it has sent and received `-n` messages of `-s` bytes;
//! - the payload: every byte `0x7b` (with `-c` on the client, the first
//!   byte of each page 0, as the C client writes it);
//! - the output: the local and remote address lines, then the bytes and
//!   iterations per second.
//!
//! UC is unacknowledged: a message that finds no receive posted at the
//! peer, or is lost, is gone, and the loop, which waits for every message,
//! would stall; the server posts its receives and connects before it
//! answers the client, so the client's first send finds them, and each
//! side reposts a receive as soon as one completes. Beyond the C tool,
//! each received message is checked: its length and every byte.
//!
//! `-e` sleeps on a completion channel instead of polling.
//!
//! Exit status: 0 every message went both ways and checked out; 1 a verbs
//! call, a completion, the exchange or the data check failed (or no
//! completion came for 60 s); 2 bad usage.

mod common;

use common::{exit, pingpong, Cli, Failure};
use mlx5dv::*;
use std::process::ExitCode;

const PROG: &str = "uc_pingpong";

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(
        PROG,
        &pingpong::usage(PROG, "ibv_uc_pingpong"),
        &pingpong::options(),
    );
    exit(PROG, run(&cli))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let (ctx, cfg) = pingpong::config(PROG, cli)?;
    pingpong::run(&ctx, &cfg, |pd, cq| {
        QpBuilder::uc(pd, cq, cq)
            .caps(pingpong::caps(&cfg))
            .send_ops(SendOps::SEND)
            .build()
    })
}
