//! `raw_wqe`: a send whose work-queue entry is written segment by segment
//! with [`mlx5dv::wqe::WqeBuilder`] (a control segment and a data segment,
//! in mlx5dv.h's layouts) and posted with `mlx5dv_wr_raw_wqe`, between two
//! sends built the usual way, in one batch.
//!
//! ```text
//! raw_wqe [-d DEV] [-g GID] [-s SIZE] [-n ROUNDS]
//!
//! cargo run --example raw_wqe -- -d mlx5_0
//! ```
//!
//! Two RC QPs on one device are connected to each other; the sender is
//! created with [`Mlx5SendOps::RAW_WQE`]. Each round, the receiver posts
//! three receives, and the sender posts one batch: a send (`ibv_wr_send`),
//! the raw WQE (`MLX5_OPCODE_SEND`, `MLX5_WQE_CTRL_CQ_UPDATE`, one data
//! segment), another send. The sender checks three completions (the raw
//! one has opcode `MLX5DV_WC_RAW_WQE`); the receiver checks that the three
//! messages arrived in order, each with its own pattern.
//!
//! The raw WQE asks for its completion itself: the driver ignores the work
//! request's flags for a raw WQE and sets only its index and signature.
//!
//! Exit status: 0 every round checked out; 1 a verbs call, a completion or
//! the data check failed; 2 bad usage; 3 the device is not an mlx5 device
//! (raw WQEs need mlx5 direct verbs) or its QPs do not take raw WQEs:
//! nothing was done.
//!
//! Verified only where an mlx5 device was present; on soft-RoCE it exits 3
//! before any mlx5 call, which is what the project's tests check.

mod common;

use common::{
    check_pattern, connect_options, exit, fill_pattern, open_device, random_psn, require_mlx5, val,
    Cli, Failure,
};
use mlx5dv::wqe::{Opcode, WqeBuilder};
use mlx5dv::*;
use std::process::ExitCode;

const PROG: &str = "raw_wqe";
const USAGE: &str = "\
Usage: raw_wqe [OPTIONS]

A send built from typed mlx5 WQE segments (mlx5dv_wr_raw_wqe), posted in
one batch between two ordinary sends, received and checked.

Options:
  -d, --ib-dev=DEV       use RDMA device DEV (default: the first found)
  -i, --ib-port=PORT     use port PORT of the device (default 1)
  -g, --gid-idx=INDEX    local GID index (default on RoCE: the IPv4 RoCE v2 GID)
  -s, --size=SIZE        bytes per message (default 256)
  -n, --iters=ROUNDS     rounds of three messages (default 10)
  -h, --help             this text

Exit status: 0 success, 1 failure, 2 bad usage, 3 not an mlx5 device
(nothing done).
";

/// Messages per round: send, raw WQE send, send.
const PER_ROUND: usize = 3;

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(PROG, USAGE, &[val('s', "size"), val('n', "iters")]);
    cli.no_positional();
    exit(PROG, run(&cli))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let size: usize = cli.num_or("size", 256);
    let rounds: u64 = cli.num_or("iters", 10);
    if size == 0 || rounds == 0 || size > u32::MAX as usize / 2 {
        common::usage_error(
            PROG,
            "--size and --iters must be at least 1 (size below 2 GiB)",
        );
    }
    let (ib_port, gid_index) = (cli.num_or("ib-port", 1), cli.num("gid-idx"));
    let ctx = open_device(cli.text("ib-dev"))?;
    require_mlx5(&ctx, "raw WQEs need mlx5 direct verbs")?;
    let opts = connect_options(&ctx, ib_port, gid_index, None)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let access = AccessFlags::LOCAL_WRITE;
    // Three slots each: the messages, and where they land.
    let mut src = MemoryRegion::new(&pd, size * PER_ROUND, access)?;
    let mut dst = MemoryRegion::new(&pd, size * PER_ROUND, access)?;
    for slot in 0..PER_ROUND {
        fill_pattern(
            &mut src.as_mut_slice()?[slot * size..(slot + 1) * size],
            slot as u8 + 1,
        );
    }
    // Declared after the memory, so destroyed before it is deregistered.
    let mut send_cq = CompletionQueue::new(&ctx, 64)?;
    let mut recv_cq = CompletionQueue::new(&ctx, 64)?;
    let mut sender = QpBuilder::rc(&pd, &send_cq, &send_cq)
        .send_ops(SendOps::SEND)
        .mlx5_send_ops(Mlx5SendOps::RAW_WQE)
        .build()?;
    let mut receiver = QpBuilder::rc(&pd, &recv_cq, &recv_cq).build()?;
    let (p1, p2) = (random_psn(), random_psn());
    sender.connect(&receiver.endpoint(p2, &opts)?, p1, &opts)?;
    receiver.connect(&sender.endpoint(p1, &opts)?, p2, &opts)?;

    // The middle message, as a raw WQE: a control segment (opcode, QP
    // number, "generate a completion") and one data segment (slot 1 of
    // the source). The driver fills in the WQE index and signature.
    let wqe = WqeBuilder::new(Opcode::Send, sender.qp_num())
        .signaled()
        .data_seg(size as u32, src.lkey(), src.addr() + size as u64)
        .build()?;
    println!(
        "raw_wqe: {}: {rounds} rounds of send, raw WQE send ({} bytes, DS {}), send; {size} bytes each",
        ctx.name(),
        wqe.as_bytes().len(),
        wqe.ds()
    );

    for round in 0..rounds {
        // No receive is posted now: clear what the last round received.
        dst.as_mut_slice()?.fill(0);
        for slot in 0..PER_ROUND {
            let sge = dst.sge(slot * size..(slot + 1) * size)?;
            // SAFETY: `dst` outlives the receiver (declared before it) and
            // is read only after the three receive completions below.
            unsafe { receiver.post_recv(slot as u64, &[sge])? };
        }
        let wcs = sender.post_and_wait(&mut send_cq, common::WAIT, |b| {
            b.wr(0).send().sge(src.sge(0..size)?)?;
            // SAFETY: the WQE names slot 1 of `src` by its lkey and
            // address; `src` is registered, is not written, and stays
            // borrowed by this call until the completions have arrived.
            unsafe { b.wr(1).raw_wqe(&wqe)? };
            b.wr(2).send().sge(src.sge(2 * size..3 * size)?)
        })?;
        let want = [WcOpcode::SEND, WcOpcode::RAW_WQE, WcOpcode::SEND];
        for (wc, (id, op)) in wcs.iter().zip(want.iter().enumerate()) {
            if !wc.status.is_success() || wc.wr_id != id as u64 || wc.opcode != *op {
                return Err(Failure::Failed(format!(
                    "round {round}: expected wr_id {id} to complete as {op:?}, got {wc:?}"
                )));
            }
        }
        for slot in 0..PER_ROUND {
            let wc = common::wait_ok(&mut recv_cq, 1)?[0];
            if wc.wr_id != slot as u64 || wc.byte_len as usize != size {
                return Err(Failure::Failed(format!(
                    "round {round}: receive {slot} out of order or short: {wc:?}"
                )));
            }
        }
        for slot in 0..PER_ROUND {
            let got = &dst.as_slice()?[slot * size..(slot + 1) * size];
            if let Some(at) = check_pattern(got, slot as u8 + 1) {
                return Err(Failure::Failed(format!(
                    "round {round}: message {slot} differs at byte {at}"
                )));
            }
        }
    }
    println!(
        "raw_wqe: {} messages received in order and checked, {rounds} of them from the raw WQE",
        rounds * PER_ROUND as u64
    );
    Ok(())
}
