//! `rc_write`: RDMA writes in batches through [`WrBatch`], the data checked
//! at the target, bandwidth and message rate reported as perftest's
//! `ib_write_bw` does.
//!
//! ```text
//! rc_write [-d DEV] [-g GID] [-s SIZE] [-n ITERS] [-b BATCH]          # server (the target)
//! rc_write [-d DEV] [-g GID] [-s SIZE] [-n ITERS] [-b BATCH] HOST     # client (writes)
//! rc_write --loopback [-d DEV] [-s SIZE] [-n ITERS] [-b BATCH]        # both, in one process
//!
//! # two soft-RoCE guests (scripts/rxe-vm --hosts 2): guest 1 serves, guest 2 writes
//! rc_write -d rxe0 -g 1                 # in guest 1
//! rc_write -d rxe0 -g 1 10.99.0.1       # in guest 2
//! ```
//!
//! How it works:
//!
//! 1. Each side makes an RC QP; the server registers `BATCH` slots of
//!    `SIZE` bytes with remote write access. Over TCP (port 18516, `-p`)
//!    the client sends a `rc_write` line with its LID, QPN, PSN and GID
//!    and a seed; the server answers with its own and the address, rkey and
//!    length of its memory. Both connect their QPs.
//! 2. The client fills its own `BATCH` slots with a pattern made from the
//!    seed, then posts `ITERS` writes in batches of `BATCH` work requests:
//!    `qp.batch()`, one `wr(id).rdma_write(slot i of the server).sge(slot i)`
//!    per work request, only the batch's last one signalled, and
//!    `complete()` (`ibv_wr_complete`) posts the batch. Up to 4 batches are
//!    in flight; each signalled completion retires its batch (an RC send
//!    queue completes in order).
//! 3. The client reports bytes, iterations, MB/s (2^20 bytes) and Mpps, and
//!    sends `done`; the server checks every byte of its memory against the
//!    pattern and answers `ok` or where the first difference is; both print
//!    the verdict.
//!
//! Exit status: 0 the writes completed and the data checked out; 1 a verbs
//! call, a completion, the exchange or the data check failed; 2 bad usage.

mod common;

use common::{
    check_pattern, connect_options, exit, flag, open_device, pattern, random_psn, report_bw, val,
    Cli, Failure, Msg,
};
use mlx5dv::*;
use std::io::BufReader;
use std::process::ExitCode;
use std::time::Instant;

const PROG: &str = "rc_write";
const USAGE: &str = "\
Usage:
  rc_write [OPTIONS]               serve: be the target of the writes
  rc_write [OPTIONS] HOST          write to the server at HOST
  rc_write --loopback [OPTIONS]    both, two QPs in this process

Batched RDMA writes through mlx5dv's WrBatch, checked at the target.

Options:
  -p, --port=PORT        TCP port of the exchange (default 18516)
  -d, --ib-dev=DEV       use RDMA device DEV (default: the first found)
  -i, --ib-port=PORT     use port PORT of the device (default 1)
  -g, --gid-idx=INDEX    local GID index (default on RoCE: the first RoCE v2 GID)
  -m, --mtu=SIZE         path MTU (default: the port's active MTU)
  -s, --size=SIZE        bytes per write (default 65536)
  -n, --iters=ITERS      number of writes (default 5000)
  -b, --batch=N          writes per batch, only the last signalled (default 32)
      --loopback         run server and client in this process
  -h, --help             this text

Exit status: 0 success, 1 failure, 2 bad usage.
";

/// Batches in flight at once.
const IN_FLIGHT: u32 = 4;

/// The run's shape, from the command line.
#[derive(Clone, Copy)]
struct Shape {
    size: usize,
    iters: u64,
    batch: u32,
}

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(
        PROG,
        USAGE,
        &[
            val('p', "port"),
            val('m', "mtu"),
            val('s', "size"),
            val('n', "iters"),
            val('b', "batch"),
            flag('L', "loopback"),
        ],
    );
    exit(PROG, run(&cli))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let (size, iters, batch) = cli.size_iters_batch(65536, 5000, 32);
    let shape = Shape { size, iters, batch };
    let host = cli.host();
    if cli.flag("loopback") && host.is_some() {
        common::usage_error(PROG, "--loopback takes no host");
    }
    let ctx = open_device(cli.text("ib-dev"))?;
    let opts = connect_options(
        &ctx,
        cli.num_or("ib-port", 1),
        cli.num("gid-idx"),
        cli.mtu(),
    )?;
    let pd = ProtectionDomain::new(&ctx)?;
    let port: u16 = cli.num_or("port", 18516);
    println!(
        "rc_write: {} port {}, GID index {}, MTU {}, {} writes of {} bytes in batches of {}",
        ctx.name(),
        opts.port,
        common::gid_name(&opts),
        opts.mtu.bytes(),
        shape.iters,
        shape.size,
        shape.batch
    );
    if cli.flag("loopback") {
        loopback(&pd, &opts, shape)
    } else if let Some(host) = host {
        client(&pd, &opts, shape, host, port)
    } else {
        server(&pd, &opts, shape, port)
    }
}

/// One side's QP, CQ and memory (`batch` slots of `size` bytes).
struct Side {
    // Fields drop in order: the QP is destroyed before the memory it
    // reads is deregistered.
    qp: QpEx<Rc>,
    cq: CompletionQueue,
    mr: MemoryRegion,
    psn: u32,
}

impl Side {
    fn new(pd: &ProtectionDomain, shape: Shape) -> Result<Side, Failure> {
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr = MemoryRegion::new(pd, shape.size * shape.batch as usize, access)?;
        let depth = shape.batch * IN_FLIGHT;
        let cq = CompletionQueue::new(pd.context(), depth + 16)?;
        let qp = QpBuilder::rc(pd, &cq, &cq)
            .caps(QpCaps {
                max_send_wr: depth,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            })
            .send_ops(SendOps::RDMA_WRITE)
            .build()?;
        Ok(Side {
            qp,
            cq,
            mr,
            psn: random_psn(),
        })
    }

    fn endpoint(&self, opts: &ConnectOptions) -> Result<Endpoint, Failure> {
        Ok(self.qp.endpoint(self.psn, opts)?)
    }

    fn connect(&self, peer: &Endpoint, opts: &ConnectOptions) -> Result<(), Failure> {
        Ok(self.qp.connect(peer, self.psn, opts)?)
    }
}

/// The `rc_write` line: a QP's endpoint, plus any extra numbers.
fn endpoint_msg(e: &Endpoint) -> Msg {
    Msg::new("rc_write")
        .num("lid", u64::from(e.lid))
        .num("qpn", u64::from(e.qpn))
        .num("psn", u64::from(e.psn))
        .gid("gid", e.gid)
}

fn endpoint_of(m: &Msg) -> Result<Endpoint, Failure> {
    let field = |k| -> Result<u32, Failure> {
        u32::try_from(m.get(k)?).map_err(|_| Failure::Failed(format!("{k} out of range")))
    };
    Ok(Endpoint {
        lid: field("lid")? as u16,
        qpn: field("qpn")?,
        psn: field("psn")?,
        gid: m.get_gid("gid")?,
    })
}

fn server(
    pd: &ProtectionDomain,
    opts: &ConnectOptions,
    shape: Shape,
    port: u16,
) -> Result<(), Failure> {
    let side = Side::new(pd, shape)?;
    println!("rc_write: waiting for a client on TCP port {port}");
    let mut stream = common::accept_one(port)?;
    let mut rd = BufReader::new(stream.try_clone()?);
    let hello = Msg::recv(&mut rd, "rc_write")?;
    let peer = endpoint_of(&hello)?;
    let seed = hello.get("seed")? as u8;
    side.connect(&peer, opts)?;
    let remote = side.mr.remote(..)?;
    endpoint_msg(&side.endpoint(opts)?)
        .num("addr", remote.addr)
        .num("rkey", u64::from(remote.rkey))
        .num("len", remote.len)
        .send(&mut stream)?;
    let done = Msg::recv(&mut rd, "done")?;
    // The client has seen the completion of its last write: every write has
    // landed, and no more come. Check every byte.
    common::answer_check(
        PROG,
        &mut stream,
        &side.mr.to_vec(..)?,
        seed,
        done.get("writes")?,
    )
}

fn client(
    pd: &ProtectionDomain,
    opts: &ConnectOptions,
    shape: Shape,
    host: &str,
    port: u16,
) -> Result<(), Failure> {
    let mut side = Side::new(pd, shape)?;
    let seed = (random_psn() % 251) as u8;
    let mut stream = common::connect_retry(host, port)?;
    let mut rd = BufReader::new(stream.try_clone()?);
    endpoint_msg(&side.endpoint(opts)?)
        .num("seed", u64::from(seed))
        .send(&mut stream)?;
    let reply = Msg::recv(&mut rd, "rc_write")?;
    side.connect(&endpoint_of(&reply)?, opts)?;
    let remote = RemoteBuf {
        addr: reply.get("addr")?,
        rkey: reply.get("rkey")? as u32,
        len: reply.get("len")?,
    };
    if remote.len < side.mr.len() as u64 {
        return Err(Failure::Failed(format!(
            "the server offers {} bytes, this run needs {} (use the same -s and -b on both sides)",
            remote.len,
            side.mr.len()
        )));
    }
    side.mr.write_at(0, &pattern(side.mr.len(), seed))?;
    let (iters, elapsed) = write_all(&mut side, remote, shape)?;
    report_bw(shape.size, iters, elapsed);
    Msg::new("done").num("writes", iters).send(&mut stream)?;
    common::await_check(PROG, &mut rd, side.mr.len() as u64)
}

fn loopback(pd: &ProtectionDomain, opts: &ConnectOptions, shape: Shape) -> Result<(), Failure> {
    let target = Side::new(pd, shape)?;
    let mut writer = Side::new(pd, shape)?;
    target.connect(&writer.endpoint(opts)?, opts)?;
    writer.connect(&target.endpoint(opts)?, opts)?;
    let seed = (random_psn() % 251) as u8;
    writer.mr.write_at(0, &pattern(writer.mr.len(), seed))?;
    let (iters, elapsed) = write_all(&mut writer, target.mr.remote(..)?, shape)?;
    report_bw(shape.size, iters, elapsed);
    common::report_check(
        PROG,
        check_pattern(&target.mr.to_vec(..)?, seed),
        target.mr.len(),
        iters,
    )
}

/// Posts `shape.iters` writes of slot i of `side` to slot i of `remote`,
/// `shape.batch` per batch with only the last one signalled, up to
/// [`IN_FLIGHT`] batches outstanding. Returns the writes done and the time
/// they took, from the first post to the last completion.
fn write_all(
    side: &mut Side,
    remote: RemoteBuf,
    shape: Shape,
) -> Result<(u64, std::time::Duration), Failure> {
    let size = shape.size;
    let mut posted = 0u64;
    let mut in_flight = 0u32;
    let start = Instant::now();
    while posted < shape.iters {
        if in_flight == IN_FLIGHT {
            common::wait_ok(&mut side.cq, 1)?;
            in_flight -= 1;
        }
        let n = (shape.iters - posted).min(u64::from(shape.batch)) as usize;
        let mut batch = side.qp.batch();
        for i in 0..n {
            let wr = batch.wr(posted + i as u64);
            // Only the batch's last work request asks for a completion.
            let wr = if i + 1 == n { wr.signaled() } else { wr };
            wr.rdma_write(remote.slice((i * size) as u64, size as u64)?)
                .sge(side.mr.sge(i * size..(i + 1) * size)?)?;
        }
        // SAFETY: the writes read `side.mr`, which is not written again
        // after it was filled and outlives the QP (Side drops the QP
        // first); every batch's completion is awaited below before returning.
        unsafe { batch.complete()? };
        posted += n as u64;
        in_flight += 1;
    }
    common::wait_ok(&mut side.cq, in_flight as usize)?;
    Ok((posted, start.elapsed()))
}
