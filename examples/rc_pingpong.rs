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
//! With `--direct` (an mlx5 device) the sends go on mlx5's direct path
//! ([`mlx5dv::direct`]): the QP's send queue and send CQ are taken by the
//! crate before the QP is connected (`QpEx::into_direct`), each send's WQE
//! written and its CQE read by the crate, posted with the scoped
//! `post_and_wait`; the receives stay on libmlx5, on a CQ of their own. On
//! the wire nothing changes: the peer may be `ibv_rc_pingpong` or this
//! program without `--direct` (`tests/mlx5_hw_direct_examples.rs` runs
//! both ways against the C tool on the software mlx5 device). It polls:
//! `-e` does not go with it.
//!
//! Exit status: 0 every message went both ways and checked out; 1 a verbs
//! call, a completion, the exchange or the data check failed; 2 bad usage;
//! 3 `--direct` on a device that is not mlx5.

mod common;

use common::{exit, flag, pingpong, Cli, Failure};
use mlx5dv::*;
use std::process::ExitCode;

const PROG: &str = "rc_pingpong";

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(
        PROG,
        &pingpong::usage_with(PROG, "ibv_rc_pingpong", &[DIRECT_LINE]),
        &[&pingpong::options()[..], &[flag('D', "direct")]].concat(),
    );
    if cli.flag("direct") {
        common::refuse_with(PROG, "--direct", &[(cli.flag("events"), "-e")]);
    }
    exit(PROG, run(&cli))
}

/// The usage line of `--direct`.
const DIRECT_LINE: &str = concat!(
    "      --direct           the sends on mlx5's direct path (mlx5dv::direct:\n",
    "                         WQEs and CQEs handled by the crate); polls, no -e;\n",
    "                         exit status 3 on a device that is not mlx5\n",
);

fn run(cli: &Cli) -> Result<(), Failure> {
    // ConnectOptions' defaults are the C tool's RC attributes: RNR timer
    // 12, timeout 14, 7 retries.
    let (ctx, cfg) = pingpong::config(PROG, cli)?;
    if cli.flag("direct") {
        common::require_mlx5(&ctx, "--direct writes mlx5 WQEs")?;
        return pingpong::run_direct(&ctx, &cfg);
    }
    pingpong::run(&ctx, &cfg, |pd, cq| {
        QpBuilder::rc(pd, cq, cq)
            .caps(pingpong::caps(&cfg))
            .send_ops(SendOps::SEND)
            .build()
    })
}
