//! `dma_memcpy`: the device copies memory to memory (`mlx5dv_wr_memcpy`),
//! batch after batch, then every byte of the copy is checked and the rate
//! reported in GB/s.
//!
//! ```text
//! dma_memcpy [-d DEV] [-s SIZE] [-n ITERS] [-b BATCH]
//!
//! cargo run --example dma_memcpy -- -d mlx5_0 -s 1048576 -n 1000
//! ```
//!
//! A memcpy work request runs on the send queue of an RC QP created with
//! [`Mlx5SendOps::MEMCPY`]; the QP must be in RTS, so it is connected to a
//! second QP on the same device, as in the crate's RC example. The source
//! holds `BATCH` slots of `SIZE` bytes with a pattern; each batch copies
//! slot i of the source to slot i of the destination, only its last work
//! request signalled (its completion opcode is `MLX5DV_WC_MEMCPY`). `SIZE`
//! is at most the device's `max_wr_memcpy_length`.
//!
//! Exit status: 0 the copies completed and checked out; 1 a verbs call, a
//! completion or the data check failed; 2 bad usage; 3 the device is not
//! an mlx5 device, or does not support memcpy (`max_wr_memcpy_length` 0),
//! or `SIZE` is above its limit: nothing was done.
//!
//! Verified only where an mlx5 device was present; on soft-RoCE it exits 3
//! before any mlx5 call, which is what the project's tests check.

mod common;

use common::{
    check_pattern, connect_options, exit, open_device, pattern, random_psn, require_mlx5, val, Cli,
    Failure,
};
use mlx5dv::*;
use std::process::ExitCode;
use std::time::Instant;

const PROG: &str = "dma_memcpy";
const USAGE: &str = "\
Usage: dma_memcpy [OPTIONS]

DMA memcpy between two memory regions on an mlx5 device (mlx5dv_wr_memcpy),
checked byte for byte.

Options:
  -d, --ib-dev=DEV       use RDMA device DEV (default: the first found)
  -i, --ib-port=PORT     use port PORT of the device (default 1)
  -g, --gid-idx=INDEX    local GID index (default on RoCE: the IPv4 RoCE v2 GID)
  -s, --size=SIZE        bytes per memcpy (default 65536, at most the
                         device's max_wr_memcpy_length)
  -n, --iters=ITERS      number of memcpy work requests (default 1000)
  -b, --batch=N          memcpys per batch, only the last signalled (default 16)
  -h, --help             this text

Exit status: 0 success, 1 failure, 2 bad usage, 3 not an mlx5 device or no
memcpy support (nothing done).
";

/// Batches in flight at once.
const IN_FLIGHT: u32 = 4;

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(
        PROG,
        USAGE,
        &[val('s', "size"), val('n', "iters"), val('b', "batch")],
    );
    cli.no_positional();
    exit(PROG, run(&cli))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let (size, iters, batch) = cli.size_iters_batch(65536, 1000, 16);
    let (ib_port, gid_index) = (cli.num_or("ib-port", 1), cli.num("gid-idx"));
    let ctx = open_device(cli.text("ib-dev"))?;
    require_mlx5(&ctx, "DMA memcpy needs mlx5 direct verbs")?;
    let max = ctx.mlx5_caps()?.max_wr_memcpy_length.unwrap_or(0);
    if max == 0 {
        return Err(Failure::Unsupported(format!(
            "{} does not support DMA memcpy (max_wr_memcpy_length is 0); nothing to do",
            ctx.name()
        )));
    }
    if size as u64 > max {
        return Err(Failure::Unsupported(format!(
            "{} copies at most {max} bytes per work request; -s {size} is more; nothing to do",
            ctx.name()
        )));
    }
    let opts = connect_options(&ctx, ib_port, gid_index, None)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let len = size
        .checked_mul(batch as usize)
        .ok_or("--size × --batch is too large".to_string())?;
    let mut src = MemoryRegion::new(&pd, len, access)?;
    let mut dst = MemoryRegion::new(&pd, len, access)?;
    let seed = (random_psn() % 251) as u8;
    src.write_at(0, &pattern(len, seed))?;

    // The memcpy QP and the peer that puts it in RTS. Declared after the
    // memory, so destroyed before it is deregistered.
    let depth = batch * IN_FLIGHT;
    let mut cq = CompletionQueue::new(&ctx, depth + 16)?;
    let peer_cq = CompletionQueue::new(&ctx, 16)?;
    let mut qp = QpBuilder::rc(&pd, &cq, &cq)
        .caps(QpCaps {
            max_send_wr: depth,
            ..QpCaps::default()
        })
        .send_ops(SendOps::RDMA_WRITE)
        .mlx5_send_ops(Mlx5SendOps::MEMCPY)
        .build()?;
    let peer = QpBuilder::rc(&pd, &peer_cq, &peer_cq).build()?;
    let (psn, peer_psn) = (random_psn(), random_psn());
    qp.connect(&peer.endpoint(peer_psn, &opts)?, psn, &opts)?;
    peer.connect(&qp.endpoint(psn, &opts)?, peer_psn, &opts)?;
    println!(
        "dma_memcpy: {} (max_wr_memcpy_length {max}), {iters} copies of {size} bytes in batches of {batch}",
        ctx.name()
    );

    let start = Instant::now();
    // The destination slots, one exclusive borrow of `dst` cut in pieces,
    // until every copy has completed.
    let slots: Vec<SgeMut<'_>> = dst.sge_mut(..)?.chunks(size as u32)?.collect();
    let mut posted = 0u64;
    let mut in_flight = 0u32;
    while posted < iters {
        if in_flight == IN_FLIGHT {
            wait_memcpy(&mut cq)?;
            in_flight -= 1;
        }
        let n = (iters - posted).min(u64::from(batch)) as usize;
        let mut b = qp.batch();
        // The send queue's room for all `n`, checked once.
        b.limit(n)?;
        for (i, &dest) in slots[..n].iter().enumerate() {
            let wr = b.wr(posted + i as u64);
            let wr = if i + 1 == n { wr.signaled() } else { wr };
            wr.memcpy(dest, src.sge(i * size..(i + 1) * size)?)?;
        }
        // SAFETY: `src` is not written after it was filled, `dst` is not
        // read until every completion has been polled below, and both
        // outlive the QP (declared before it).
        unsafe { b.complete()? };
        posted += n as u64;
        in_flight += 1;
    }
    for _ in 0..in_flight {
        wait_memcpy(&mut cq)?;
    }
    let secs = start.elapsed().as_secs_f64().max(1e-9);
    let bytes = size as f64 * posted as f64;
    println!(
        "dma_memcpy: {posted} copies, {} bytes in {secs:.3} s = {:.2} GB/s, {:.3} Mpps",
        bytes as u64,
        bytes / secs / 1e9,
        posted as f64 / secs / 1e6
    );
    match check_pattern(&dst.to_vec(..)?, seed) {
        None => {
            println!("dma_memcpy: all {len} bytes of the destination checked");
            Ok(())
        }
        Some(at) => Err(Failure::Failed(format!(
            "data check failed: byte {at} of the destination differs from the source"
        ))),
    }
}

/// Waits for one batch's completion and checks it is a memcpy's.
fn wait_memcpy(cq: &mut CompletionQueue) -> Result<(), Failure> {
    let wc = common::wait_ok(cq, 1)?[0];
    if wc.opcode != WcOpcode::MEMCPY {
        return Err(Failure::Failed(format!(
            "a memcpy completed with opcode {:?}: {wc:?}",
            wc.opcode
        )));
    }
    Ok(())
}
