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
//! receive is posted on it. The loop is `examples/common/pingpong.rs`,
//! shared with `uc_pingpong` (`ibv_uc_pingpong`).
//!
//! Exit status: 0 every message went both ways and checked out; 1 a verbs
//! call, a completion, the exchange or the data check failed; 2 bad usage.

mod common;

use common::{exit, pingpong, Cli, Failure};
use mlx5dv::*;
use std::process::ExitCode;

const PROG: &str = "rc_pingpong";

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(
        PROG,
        &pingpong::usage(PROG, "ibv_rc_pingpong"),
        &pingpong::options(),
    );
    exit(PROG, run(&cli))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    // ConnectOptions' defaults are the C tool's RC attributes: RNR timer
    // 12, timeout 14, 7 retries.
    let (ctx, cfg) = pingpong::config(PROG, cli)?;
    pingpong::run(&ctx, &cfg, |pd, cq| {
        QpBuilder::rc(pd, cq, cq)
            .caps(pingpong::caps(&cfg))
            .send_ops(SendOps::SEND)
            .build()
    })
}
