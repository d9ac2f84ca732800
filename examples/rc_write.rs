//! `rc_write`: RDMA writes in batches through [`WrBatch`], the data checked
//! at the target, bandwidth and message rate reported as perftest's
//! `ib_write_bw` does.
//!
//! ```text
//! rc_write [-d DEV] [-g GID] [-s SIZE] [-n ITERS] [-b BATCH]          # server (the target)
//! rc_write [-d DEV] [-g GID] [-s SIZE] [-n ITERS] [-b BATCH] HOST     # client (writes)
//! rc_write --direct [-d DEV] [-g GID] [-s SIZE] [-n ITERS] [-b BATCH] HOST
//!                                                                     # client, mlx5's direct path
//! rc_write --loopback [-d DEV] [-s SIZE] [-n ITERS] [-b BATCH]        # both, in one process
//! rc_write -R [-d DEV] [-s SIZE] [-n ITERS] [-b BATCH] [HOST]         # perftest's rdma_cm protocol
//! rc_write --perftest [-d DEV] [-i PORT] [-g|-x GID] [-s SIZE] [-n ITERS] [-p PORT] [HOST]
//!                                                                     # perftest's default (TCP) exchange
//! rc_write --perftest --direct [OPTIONS] HOST                         # so, on mlx5's direct path
//!
//! # two soft-RoCE guests (scripts/rxe-vm --hosts 2): guest 1 serves, guest 2 writes
//! rc_write -d rxe0 -g 1                 # in guest 1
//! rc_write -d rxe0 -g 1 10.99.0.1       # in guest 2
//!
//! # with perftest, either way round (rdma_ucm loaded)
//! rc_write -R -d rxe0                   # in guest 1
//! ib_write_bw -R -d rxe0 10.99.0.1      # in guest 2
//!
//! # with perftest's default exchange, either way round
//! rc_write --perftest -d rxe0 -x 1 -s 4096 -n 1000                  # in guest 1
//! ib_write_bw -d rxe0 -x 1 -s 4096 -n 1000 10.99.0.1                # in guest 2
//! ib_write_bw -d rxe0 -x 1 -s 4096 -n 1000                          # or: in guest 1
//! rc_write --perftest -d rxe0 -x 1 -s 4096 -n 1000 10.99.0.1        #     in guest 2
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
//! 3. The client reports bytes, iterations, MB/s (2^20 bytes) and Mpps,
//!    and its message rate in writes per second, and sends `done`; the
//!    server checks every byte of its memory against the pattern and
//!    answers `ok` or where the first difference is; both print the
//!    verdict.
//!
//! ## `--direct`: the client on mlx5's direct path
//!
//! With `--direct` (client or `--loopback`; an mlx5 device) the writer's
//! QP is taken for [`mlx5dv::direct`] before it is connected
//! (`QpEx::into_direct`, its send CQ its own, its receives on another
//! CQ): the crate writes the WQEs into the send queue itself and reads
//! the CQEs itself, instead of libmlx5's `ibv_wr_*` builders and CQ
//! readers. Each batch goes through `DirectQp::post_and_wait`, the safe
//! scoped post: the batch's writes, one doorbell, and the wait for the
//! batch's completion, so one batch is in flight at a time (not
//! [`IN_FLIGHT`]). Everything else is as without it: the same TCP
//! exchange and the same slots, so a `--direct` client writes to a plain
//! `rc_write` server, which checks every byte as before. Both kinds of
//! client print their message rate (`writes/s`) and which path they took,
//! so the two can be compared on the same device and shape.
//!
//! With `--perftest` too, the direct client speaks perftest's exchange
//! (below) and writes at perftest's offsets: its peer may be perftest's
//! `ib_write_bw` server, whose QP is an ordinary verbs QP
//! (`tests/mlx5_hw_direct_examples.rs` runs it against `ib_write_bw` and
//! against `rc_write --perftest`, which checks every byte, on the
//! software mlx5 device).
//!
//! ## `-R`: perftest's rdma_cm protocol
//!
//! With `-R` (`--rdma_cm`, feature `rdma-cm`) rc_write speaks what
//! perftest's `ib_write_bw -R` speaks (perftest 6.06, Debian 12's
//! `perftest 4.5+0.17`; the protocol is described in
//! `examples/common/perftest.rs`), on perftest's port 18515 (`-p`): either
//! side can be `ib_write_bw -R`. Both QPs, the exchanges' and the writes',
//! are connected by rdma_cm (the CM chooses device, port, GID and path MTU
//! from the address: `-g` and `-i` do not apply; `-d` names the device the
//! address must be on). The exchanges go as SENDs over their own QP: the
//! versions (rc_write announces `6.06 rc_write`), the cycle buffer and
//! cache line sizes, the MTU, the QPs' connection data (the rkey and
//! address of the server's memory); then the client writes, as above but
//! at perftest's offsets (write `k` at `(k mod slots) * stride`, the
//! stride the size rounded up to the cache line, as many slots as fit the
//! cycle buffer), and the two exchange bandwidth reports; the server
//! prints the client's. Use the same `-s` on both sides, as with perftest.
//!
//! perftest does not check the data: as client against `ib_write_bw -R` a
//! run checks that every write completed, not what arrived; as server it
//! checks what `--perftest` checks (below). Between two rc_writes (each
//! recognises the other by its version) the client then sends its seed
//! and the server checks every byte the writes covered and answers,
//! before the closing exchange; perftest never sees that message.
//!
//! ## `--perftest`: perftest's default exchange
//!
//! With `--perftest` rc_write speaks what `ib_write_bw` speaks without
//! `-R`: one TCP connection on perftest's port 18515 (`-p`), over which
//! the two exchange the versions, cycle buffer and cache line sizes, the
//! MTU (both use the smaller), then each side's connection data as
//! perftest's text (LID, QPN, PSN, rkey, address and, where the side has a
//! GID index, the GID: `examples/common/perftest/tcp.rs`), three times;
//! each side connects its RC QP itself, to the MTU agreed on and the GID
//! index of `-g` or, as perftest spells it, `-x` (default on RoCE: the
//! IPv4 RoCE v2 GID; perftest's default may be another, so give `-x` to
//! both). Both sides must both have a GID index or both not (InfiniBand
//! without `-x`): perftest reads the one form of the text its own index
//! implies, and rc_write says which side differs. The client writes at
//! perftest's offsets, as with `-R`, and the two exchange bandwidth
//! reports. Use the same `-s` on both sides.
//!
//! What is checked, at the server (the target), which fills its memory
//! with `0xff` bytes before the writes:
//!
//! - against another `rc_write --perftest`: every byte the writes covered
//!   holds the client's pattern and every other byte is untouched; the
//!   client sends its seed after the reports and the server answers with
//!   the verdict, which both print;
//! - against `ib_write_bw` as client: perftest fills its memory with
//!   `rand()` bytes and says nothing of them, so their values cannot be
//!   checked; the server checks that every byte outside perftest's slots
//!   is untouched and that each slot no longer holds only `0xff` (a write
//!   landed there; not checked for writes under 4 bytes, which random
//!   bytes fill with `0xff` too often);
//! - as client against `ib_write_bw` as server: nothing at the target
//!   (perftest checks nothing): only that every write completed.
//!
//! Exit status: 0 the writes completed and the data checked out (or, as
//! client against perftest, the run completed); 1 a verbs call, a
//! completion, the exchange (a peer's message that is not perftest's) or
//! the data check failed; 2 bad usage; 3 `--direct` on a device that is
//! not mlx5.

mod common;
#[path = "common/perftest/mod.rs"]
mod perftest;
#[cfg(feature = "rdma-cm")]
#[path = "rc_write/with_cm.rs"]
mod with_cm;
#[path = "rc_write/with_tcp.rs"]
mod with_tcp;

use common::{
    check_pattern, connect_options, exit, flag, open_device, pattern, random_psn, report_bw, val,
    Cli, Failure, Msg,
};
use mlx5dv::*;
use std::io::BufReader;
use std::process::ExitCode;

const PROG: &str = "rc_write";
const USAGE: &str = "\
Usage:
  rc_write [OPTIONS]               serve: be the target of the writes
  rc_write [OPTIONS] HOST          write to the server at HOST
  rc_write --direct [OPTIONS] HOST
                                   write to the server at HOST (a plain
                                   rc_write) on mlx5's direct path
  rc_write --loopback [OPTIONS]    both, two QPs in this process
  rc_write -R [OPTIONS] [HOST]     serve or write through rdma_cm, speaking
                                   perftest's protocol (ib_write_bw -R)
  rc_write --perftest [OPTIONS] [HOST]
                                   serve or write speaking perftest's default
                                   TCP exchange (ib_write_bw without -R)
  rc_write --perftest --direct [OPTIONS] HOST
                                   write so to HOST (ib_write_bw or another
                                   rc_write --perftest) on mlx5's direct path

Batched RDMA writes through mlx5dv's WrBatch (with --direct, its direct
path), checked at the target. The writer prints its rate in writes/s.

With -R or --perftest, either side may be perftest's ib_write_bw (-R).
perftest does not check the data, and writes random bytes: as client
against it only the completions are checked; as server rc_write checks
that each slot perftest writes was written and every other byte left
alone; between two rc_writes the server checks every byte.

  rc_write --perftest -d rxe0 -x 1 -s 4096 -n 1000            # server
  ib_write_bw -d rxe0 -x 1 -s 4096 -n 1000 SERVER             # client
  ib_write_bw -d rxe0 -x 1 -s 4096 -n 1000                    # or: server
  rc_write --perftest -d rxe0 -x 1 -s 4096 -n 1000 SERVER     #     client

Options:
  -p, --port=PORT        TCP port of the exchange (default 18516; with
                         --perftest 18515; with -R the rdma_cm port, 18515)
  -d, --ib-dev=DEV       use RDMA device DEV (default: the first found;
                         with -R: the one rdma_cm finds for the address)
  -i, --ib-port=PORT     use port PORT of the device (default 1; not with -R)
  -g, -x, --gid-idx=INDEX
                         local GID index (default on RoCE: the IPv4 RoCE v2
                         GID; not with -R)
  -m, --mtu=SIZE         path MTU (default: the port's active MTU; with -R
                         only offered in the exchange: the CM sets it)
  -s, --size=SIZE        bytes per write (default 65536)
  -n, --iters=ITERS      number of writes (default 5000)
  -b, --batch=N          writes per batch, only the last signalled (default 32)
      --loopback         run server and client in this process
      --direct           the writer (client or --loopback) posts on mlx5's
                         direct path (mlx5dv::direct: WQEs and CQEs handled
                         by the crate), one scoped post_and_wait per batch,
                         so one batch in flight (without it: up to 4); the
                         server needs no option. Not with -R
  -R, --rdma_cm          connect through rdma_cm, as perftest's -R
      --perftest         perftest's default exchange (TCP), as ib_write_bw
  -h, --help             this text

Exit status: 0 success, 1 failure, 2 bad usage, 3 --direct on a device
that is not mlx5.
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

impl Shape {
    /// The memory of `batch` slots of `size` bytes.
    fn slots_len(self) -> usize {
        self.size * self.batch as usize
    }

    /// Where write `k` goes without `-R`: slot `k mod batch` (its place in
    /// its batch).
    fn slot(self, k: u64) -> usize {
        (k % u64::from(self.batch)) as usize * self.size
    }
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
            flag('R', "rdma_cm"),
            flag('P', "perftest"),
            flag('D', "direct"),
            // perftest's spelling of -g (--gid-index).
            val('x', "gid-idx"),
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
    if cli.flag("perftest") {
        common::refuse_with(
            PROG,
            "--perftest",
            &[
                (cli.flag("loopback"), "--loopback"),
                (cli.flag("rdma_cm"), "-R"),
            ],
        );
    }
    let direct = cli.flag("direct");
    if direct {
        common::refuse_with(PROG, "--direct", &[(cli.flag("rdma_cm"), "-R")]);
        if host.is_none() && !cli.flag("loopback") {
            common::usage_error(
                PROG,
                "--direct is the writer's: give the server's HOST, or --loopback \
                 (the server needs no option)",
            );
        }
    }
    if cli.flag("rdma_cm") {
        common::refuse_with(
            PROG,
            "-R",
            &[
                (cli.flag("loopback"), "--loopback"),
                (cli.text("gid-idx").is_some(), "-g/-x"),
                (cli.text("ib-port").is_some(), "-i"),
            ],
        );
        #[cfg(feature = "rdma-cm")]
        return with_cm::run(cli, shape, host);
        #[cfg(not(feature = "rdma-cm"))]
        common::usage_error(
            PROG,
            "-R needs rc_write built with the rdma-cm feature (--features rdma-cm)",
        );
    }
    let ctx = open_device(cli.text("ib-dev"))?;
    if direct {
        // Before anything is printed, as the mlx5-only examples refuse.
        common::require_mlx5(&ctx, "--direct writes mlx5 WQEs")?;
    }
    let opts = connect_options(
        &ctx,
        cli.num_or("ib-port", 1),
        cli.num("gid-idx"),
        cli.mtu(),
    )?;
    let pd = ProtectionDomain::new(&ctx)?;
    let perftest = cli.flag("perftest");
    let port: u16 = cli.num_or(
        "port",
        if perftest {
            perftest::DEFAULT_PORT
        } else {
            18516
        },
    );
    println!(
        "rc_write: {} port {}, GID index {}, MTU {}, {} writes of {} bytes in batches of {}{}",
        ctx.name(),
        opts.port,
        common::gid_name(&opts),
        opts.mtu.bytes(),
        shape.iters,
        shape.size,
        shape.batch,
        if direct { ", direct path" } else { "" }
    );
    if perftest {
        with_tcp::run(&pd, opts, shape, host, port, direct)
    } else if cli.flag("loopback") {
        loopback(&pd, &opts, shape, direct)
    } else if let Some(host) = host {
        client(&pd, &opts, shape, host, port, direct)
    } else {
        server(&pd, &opts, shape, port)
    }
}

/// One side's QP, CQ and memory (`batch` slots of `size` bytes, or with
/// `-R` the span perftest's writes cover).
struct Side {
    // Fields drop in order: the QP is destroyed before the memory it
    // reads is deregistered.
    qp: RcQp,
    cq: CompletionQueue,
    mr: MemoryRegion,
    psn: u32,
}

impl Side {
    /// `len` bytes of memory; a send queue for [`IN_FLIGHT`] batches.
    fn new(pd: &ProtectionDomain, len: usize, shape: Shape) -> Result<Side, Failure> {
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr = MemoryRegion::new(pd, len, access)?;
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
    let side = Side::new(pd, shape.slots_len(), shape)?;
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
    direct: bool,
) -> Result<(), Failure> {
    let mut side = Writer::new(pd, shape.slots_len(), shape, direct)?;
    let seed = (random_psn() % 251) as u8;
    // One attempt, as perftest's ib_write_bw makes (ethernet_client_connect).
    let mut stream = common::connect_to_server(host, port, common::Wait::Once)?;
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
    let len = side.mr().len();
    if remote.len < len as u64 {
        return Err(Failure::Failed(format!(
            "the server offers {} bytes, this run needs {len} (use the same -s and -b on both sides)",
            remote.len,
        )));
    }
    side.mr_mut().write_at(0, &pattern(len, seed))?;
    let (iters, elapsed) = side.write(remote, shape, |k| shape.slot(k))?;
    report_bw(shape.size, iters, elapsed);
    report_rate(iters, elapsed, &side.path());
    Msg::new("done").num("writes", iters).send(&mut stream)?;
    common::await_check(PROG, &mut rd, len as u64)
}

fn loopback(
    pd: &ProtectionDomain,
    opts: &ConnectOptions,
    shape: Shape,
    direct: bool,
) -> Result<(), Failure> {
    let target = Side::new(pd, shape.slots_len(), shape)?;
    let mut writer = Writer::new(pd, shape.slots_len(), shape, direct)?;
    target.connect(&writer.endpoint(opts)?, opts)?;
    writer.connect(&target.endpoint(opts)?, opts)?;
    let seed = (random_psn() % 251) as u8;
    let len = writer.mr().len();
    writer.mr_mut().write_at(0, &pattern(len, seed))?;
    let (iters, elapsed) = writer.write(target.mr.remote(..)?, shape, |k| shape.slot(k))?;
    report_bw(shape.size, iters, elapsed);
    report_rate(iters, elapsed, &writer.path());
    common::report_check(
        PROG,
        check_pattern(&target.mr.to_vec(..)?, seed),
        target.mr.len(),
        iters,
    )
}

/// The message rate of a run, and the path its writes took.
fn report_rate(iters: u64, elapsed: std::time::Duration, path: &str) {
    let secs = elapsed.as_secs_f64().max(1e-9);
    println!(
        "{PROG}: {iters} writes in {:.3} ms: {:.0} writes/s ({path})",
        secs * 1e3,
        iters as f64 / secs
    );
}

/// The writer of a client or `--loopback` run: through libmlx5's
/// builders ([`Side`]), or on the direct path ([`DirectSide`]).
// One per program: boxing a variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Writer {
    Verbs(Side),
    Direct(DirectSide),
}

impl Writer {
    /// `len` bytes of memory and a QP, on the direct path when `direct`.
    fn new(
        pd: &ProtectionDomain,
        len: usize,
        shape: Shape,
        direct: bool,
    ) -> Result<Writer, Failure> {
        Ok(if direct {
            Writer::Direct(DirectSide::new(pd, len, shape)?)
        } else {
            Writer::Verbs(Side::new(pd, len, shape)?)
        })
    }

    /// The QP's number and the PSN it sends from.
    fn qpn_psn(&self) -> (u32, u32) {
        match self {
            Writer::Verbs(s) => (s.qp.qp_num(), s.psn),
            Writer::Direct(d) => (d.qp.qp_num(), d.psn),
        }
    }

    fn endpoint(&self, opts: &ConnectOptions) -> Result<Endpoint, Failure> {
        match self {
            Writer::Verbs(s) => s.endpoint(opts),
            Writer::Direct(d) => Ok(d.qp.endpoint(d.psn, opts)?),
        }
    }

    /// Connects to `peer`, sending from the side's PSN (on the direct
    /// path `connect_to` sends from the PSN its QP's `endpoint` gave: it is
    /// given here, for the perftest exchange, which sends the PSN without
    /// an `endpoint`; giving it again after one is harmless).
    fn connect(&self, peer: &Endpoint, opts: &ConnectOptions) -> Result<(), Failure> {
        match self {
            Writer::Verbs(s) => s.connect(peer, opts),
            Writer::Direct(d) => {
                d.qp.endpoint(d.psn, opts)?;
                Ok(d.qp.connect_to(peer, opts)?)
            }
        }
    }

    fn mr(&self) -> &MemoryRegion {
        match self {
            Writer::Verbs(s) => &s.mr,
            Writer::Direct(d) => &d.mr,
        }
    }

    fn mr_mut(&mut self) -> &mut MemoryRegion {
        match self {
            Writer::Verbs(s) => &mut s.mr,
            Writer::Direct(d) => &mut d.mr,
        }
    }

    /// Writes `shape.iters` writes, write `k` from offset `offset(k)` of
    /// the memory to the same offset of `remote`; returns the writes done
    /// and their time.
    fn write(
        &mut self,
        remote: RemoteBuf,
        shape: Shape,
        offset: impl Fn(u64) -> usize,
    ) -> Result<(u64, std::time::Duration), Failure> {
        match self {
            Writer::Verbs(s) => write_all(s, remote, shape, offset),
            Writer::Direct(d) => d.write_all(remote, shape, offset),
        }
    }

    /// The path its writes take, for the rate line.
    fn path(&self) -> String {
        match self {
            Writer::Verbs(_) => {
                format!("libmlx5's ibv_wr_* builders, up to {IN_FLIGHT} batches in flight")
            }
            Writer::Direct(_) => "direct path, one scoped post_and_wait per batch".to_string(),
        }
    }
}

/// The writer on mlx5's direct path: an RC QP taken with
/// `QpEx::into_direct` before it was connected, its send CQ its own (its
/// receives, which this run never posts, complete on another), and the
/// memory it writes from (`batch` slots, or perftest's layout).
struct DirectSide {
    // Fields drop in order: the QP (and its CQs) before the memory its
    // writes read.
    qp: direct::DirectRc,
    mr: MemoryRegion,
    psn: u32,
}

impl DirectSide {
    /// `len` bytes of memory and a send queue for one batch:
    /// `post_and_wait` has one in flight.
    fn new(pd: &ProtectionDomain, len: usize, shape: Shape) -> Result<DirectSide, Failure> {
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr = MemoryRegion::new(pd, len, access)?;
        let cq = CompletionQueue::new(pd.context(), shape.batch + 16)?;
        let rq = CompletionQueue::new(pd.context(), 1)?;
        let qp = QpBuilder::rc(pd, &cq, &rq)
            .caps(QpCaps {
                max_send_wr: shape.batch,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            })
            .send_ops(SendOps::RDMA_WRITE)
            .build()?;
        // In RESET, never posted: the direct path takes its send queue and
        // `cq`.
        let qp = qp.into_direct(cq).map_err(Error::from)?;
        Ok(DirectSide {
            qp,
            mr,
            psn: random_psn(),
        })
    }

    /// [`write_all`] on the direct path: each batch of `shape.batch`
    /// writes (write `k` from offset `offset(k)` to the same offset of
    /// `remote`, unsignalled but the last) is written into the send queue
    /// by the crate and posted with one doorbell by `post_and_wait`, which
    /// returns when the batch has completed: the borrow of the slots ends
    /// only then, so no `unsafe` is needed. Every completion is checked,
    /// and that the batch's completions retire all of its writes.
    fn write_all(
        &mut self,
        remote: RemoteBuf,
        shape: Shape,
        offset: impl Fn(u64) -> usize,
    ) -> Result<(u64, std::time::Duration), Failure> {
        let size = shape.size;
        let (qp, mr) = (&mut self.qp, &self.mr);
        let mut done = 0u64;
        let start = std::time::Instant::now();
        while done < shape.iters {
            let n = (shape.iters - done).min(u64::from(shape.batch));
            let wcs = qp.post_and_wait(common::WAIT, |b| {
                for k in done..done + n {
                    let at = offset(k);
                    b.rdma_write(
                        k,
                        SendFlags::empty(),
                        remote.slice(at as u64, size as u64)?,
                        mr.sge(at..at + size)?,
                    )?;
                }
                Ok(())
            })?;
            common::check_covered(wcs, done, n)?;
            done += n;
        }
        Ok((done, start.elapsed()))
    }
}

/// Posts `shape.iters` writes, write `k` from offset `offset(k)` of `side`
/// to the same offset of `remote`, `shape.batch` per batch with only the
/// last one signalled, up to [`IN_FLIGHT`] batches outstanding. Returns the
/// writes done and the time they took, from the first post to the last
/// completion.
fn write_all(
    side: &mut Side,
    remote: RemoteBuf,
    shape: Shape,
    offset: impl Fn(u64) -> usize,
) -> Result<(u64, std::time::Duration), Failure> {
    let size = shape.size;
    let (qp, mr) = (&mut side.qp, &side.mr);
    common::post_batches(
        &mut side.cq,
        shape.iters,
        shape.batch,
        IN_FLIGHT,
        |first, n| {
            let mut batch = qp.batch();
            // The send queue's room for all `n`, checked once.
            batch.limit(n)?;
            for i in 0..n {
                let k = first + i as u64;
                let at = offset(k);
                let wr = batch.wr(k);
                // Only the batch's last work request asks for a completion.
                let wr = if i + 1 == n { wr.signaled() } else { wr };
                wr.rdma_write(remote.slice(at as u64, size as u64)?)
                    .sge(mr.sge(at..at + size)?)?;
            }
            // SAFETY: the writes read `side.mr`, which is not written again
            // after it was filled and outlives the QP (Side drops the QP
            // first); post_batches awaits every batch's completion before
            // returning.
            unsafe { batch.complete()? };
            Ok(())
        },
    )
}
