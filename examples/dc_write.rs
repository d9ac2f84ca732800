//! `dc_write`: the EXAMPLE of `mlx5dv_wr_post(3)` made real. A DC target
//! (DCT) on the server, a DC initiator (DCI) on the client, and signalled
//! RDMA writes from the DCI to the DCT, each work request addressed with
//! `mlx5dv_wr_set_dc_addr` (the DCT's number and access key, through an
//! address handle) — or, with `--streams`, `mlx5dv_wr_set_dc_addr_stream`
//! over DCI streams.
//!
//! ```text
//! dc_write [-d DEV] [-g GID] [-s SIZE] [-n ITERS] [-b BATCH]                 # server: the DCT
//! dc_write [-d DEV] [-g GID] [-s SIZE] [-n ITERS] [-b BATCH] [--streams L] HOST   # client: the DCI
//! dc_write --loopback [-d DEV] [--streams L]                                 # both in one process
//! dc_write --direct [-d DEV] [--streams L] (HOST | --loopback)                # the DCI on mlx5's direct path
//! dc_write --perftest [-d DEV] [-i PORT] [-g|-x GID] [-s SIZE] [-n ITERS] [-p PORT] [HOST]
//!                                                    # perftest's exchange, against ib_write_bw -c DC
//! dc_write --perftest --direct [OPTIONS] HOST        # so, the DCI on mlx5's direct path
//!
//! cargo run --example dc_write -- --loopback -d mlx5_0
//!
//! # with perftest's DC mode, either way round
//! dc_write --perftest -d mlx5_0 -s 4096 -n 1000                     # server: a DCT
//! ib_write_bw -d mlx5_0 -c DC -s 4096 -n 1000 SERVER                # client: a DCI
//! ib_write_bw -d mlx5_0 -c DC -s 4096 -n 1000                       # or: server
//! dc_write --perftest -d mlx5_0 -s 4096 -n 1000 SERVER              #     client
//! ```
//!
//! The server makes an SRQ and a DCT on it (a DCT receives through an SRQ;
//! RDMA writes consume no receive), moves the DCT to RTR, and registers
//! `BATCH` slots of `SIZE` bytes with remote write access. Over TCP (port
//! 18517, `-p`) it tells the client its LID, GID, DCT number, DC access key
//! and the address, rkey and length of the memory. The client makes a DCI
//! (with 2^L streams with `--streams L`), moves it to RTS, makes an address
//! handle for the server's port, and posts `ITERS` writes in batches of
//! `BATCH`, only the last of each batch signalled; stream ids go round
//! robin. It reports MB/s and Mpps, says `done`, and the server checks every
//! byte of its memory against the pattern the client wrote. The client
//! says that it waits for its server and, as perftest's `ib_write_bw`
//! client does, tries once: with no server listening it fails at once.
//!
//! ## `--direct`: the DCI on mlx5's direct path
//!
//! With `--direct` (client or `--loopback`) the DCI is taken for
//! [`mlx5dv::direct`] before it is moved to RTS (`QpEx::into_direct`, its
//! CQ its own): the crate writes each WQE itself (control segment with
//! the stream id, the address vector copied once per target by
//! `DirectQp::dc_addr`, remote address, data) and reads each CQE, one
//! scoped `post_and_wait` a batch, which returns once the batch has
//! completed and checks that its completions retire all its writes. The
//! server is the same: a `--direct` client writes to a plain server, which
//! checks every byte (`tests/mlx5_hw_direct_examples.rs`, on the software
//! mlx5 device). With `--perftest` too, the direct DCI speaks perftest's
//! exchange and writes at perftest's offsets: its target may be
//! `ib_write_bw -c DC`'s DCT (the same tests run it against that and
//! against `dc_write --perftest`, which checks every byte).
//!
//! ## `--perftest`: against `ib_write_bw -c DC`
//!
//! With `--perftest` dc_write speaks perftest's default exchange (one TCP
//! connection, port 18515, `-p`; `examples/common/perftest/tcp.rs`), as
//! `ib_write_bw -c DC` does, either side. perftest's DC write test makes
//! on the server an SRQ and a DCT on it (access key `0xffeeddcc`, its
//! `DC_KEY`, which it does not exchange: dc_write's DCT and DCI use it
//! too), moved to RTR with the MTU the two agreed on; on the client a DCI
//! moved to RTS and, from the server's LID and GID, an address handle.
//! The server sends its DCT's number as its QPN (perftest's DCT has its
//! number only once it is in RTR, so perftest sends its connection data
//! again after: the client writes to the number of the last), with the
//! rkey and address of its memory; the client writes at perftest's
//! offsets, each work request addressed with `mlx5dv_wr_set_dc_addr`
//! (DCT number and key) and, with `--streams`, on DCI streams. What is
//! checked is what `rc_write --perftest` checks (its docs): between two
//! dc_writes every byte at the server; with perftest as client, that each
//! of its slots was written and nothing else; as client against perftest,
//! only the completions. Use the same `-s` on both sides, and a GID index
//! on both or on neither.
//!
//! Exit status: 0 the writes completed and the data checked out (as
//! client against perftest: completed); 1 a verbs call, a completion,
//! the exchange (a peer's message that is not perftest's) or the data
//! check failed; 2 bad usage;
//! 3 the device is not an mlx5 device (DCI/DCT need mlx5 direct verbs) or
//! lacks DCI streams: nothing was done.
//!
//! Verified only where an mlx5 device was present; on soft-RoCE it exits 3
//! before any mlx5 call, which is what the project's tests check.

mod common;
#[path = "common/perftest/mod.rs"]
mod perftest;
#[path = "dc_write/with_tcp.rs"]
mod with_tcp;

use common::{
    check_pattern, connect_options, exit, flag, open_device, pattern, random_psn, report_bw,
    require_mlx5, val, Cli, Failure, Msg,
};
use mlx5dv::*;
use std::io::BufReader;
use std::process::ExitCode;
use std::time::Duration;

const PROG: &str = "dc_write";
const USAGE: &str = "\
Usage:
  dc_write [OPTIONS]               serve: a DCT, the target of the writes
  dc_write [OPTIONS] HOST          a DCI writing to the server at HOST (start
                                   the server first: no retry, as ib_write_bw)
  dc_write --loopback [OPTIONS]    both, in this process
  dc_write --perftest [OPTIONS] [HOST]
                                   serve or write speaking perftest's default
                                   exchange (ib_write_bw -c DC), either side
  dc_write --perftest --direct [OPTIONS] HOST
                                   write so to HOST on mlx5's direct path

RDMA writes from an mlx5 DCI to a DCT (mlx5dv_wr_set_dc_addr), checked at
the target. With --perftest either side may be perftest's ib_write_bw -c DC,
which does not check the data and writes random bytes: as server dc_write
checks that each slot perftest writes was written and nothing else; as
client only the completions; between two dc_writes every byte.

  dc_write --perftest -d mlx5_0 -s 4096 -n 1000                  # server
  ib_write_bw -d mlx5_0 -c DC -s 4096 -n 1000 SERVER             # client

Options:
  -p, --port=PORT        TCP port of the exchange (default 18517; with
                         --perftest 18515)
  -d, --ib-dev=DEV       use RDMA device DEV (default: the first found)
  -i, --ib-port=PORT     use port PORT of the device (default 1)
  -g, -x, --gid-idx=INDEX
                         local GID index (default on RoCE: the IPv4 RoCE v2 GID)
  -m, --mtu=SIZE         path MTU (default: the port's active MTU)
  -s, --size=SIZE        bytes per write (default 65536)
  -n, --iters=ITERS      number of writes (default 5000)
  -b, --batch=N          writes per batch, only the last signalled (default 32)
      --streams=L        use 2^L DCI streams (mlx5dv_wr_set_dc_addr_stream)
      --loopback         run server and client in this process
      --perftest         perftest's default exchange (TCP), as ib_write_bw -c DC
      --direct           the DCI (client or --loopback) posts on mlx5's direct
                         path (mlx5dv::direct: WQEs and CQEs handled by the
                         crate), one scoped post a batch
  -h, --help             this text

Exit status: 0 success, 1 failure, 2 bad usage, 3 not an mlx5 device or no
DCI streams (nothing done).
";

/// The DC access key the DCT is created with; the DCI presents it.
const DC_KEY: u64 = 0x1ee7_c0de;
/// Batches in flight at once.
const IN_FLIGHT: u32 = 4;

#[derive(Clone, Copy)]
struct Shape {
    size: usize,
    iters: u64,
    batch: u32,
    /// log2 of the DCI streams, if any.
    streams: Option<u8>,
    /// `--direct`: the DCI on the direct path.
    direct: bool,
}

impl Shape {
    /// The memory of `batch` slots of `size` bytes.
    fn slots_len(self) -> usize {
        self.size * self.batch as usize
    }

    /// Where write `k` goes without `--perftest`: slot `k mod batch` (its
    /// place in its batch).
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
            val('S', "streams"),
            flag('L', "loopback"),
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
    let shape = Shape {
        size,
        iters,
        batch,
        streams: cli.num("streams"),
        direct: cli.flag("direct"),
    };
    if shape.streams.is_some_and(|l| l > 15) {
        common::usage_error(PROG, "--streams is log2 of the stream count: at most 15");
    }
    let host = cli.host();
    if cli.flag("loopback") && host.is_some() {
        common::usage_error(PROG, "--loopback takes no host");
    }
    let perftest = cli.flag("perftest");
    if perftest {
        common::refuse_with(PROG, "--perftest", &[(cli.flag("loopback"), "--loopback")]);
    }
    if shape.direct && host.is_none() && !cli.flag("loopback") {
        common::usage_error(
            PROG,
            "--direct is the DCI's: give the server's HOST, or --loopback \
             (the server needs no option)",
        );
    }
    let (ib_port, gid_index, mtu) = (cli.num_or("ib-port", 1), cli.num("gid-idx"), cli.mtu());
    let port: u16 = cli.num_or(
        "port",
        if perftest {
            perftest::DEFAULT_PORT
        } else {
            18517
        },
    );
    let ctx = open_device(cli.text("ib-dev"))?;
    // Before anything else: on a device without mlx5 direct verbs, exit 3.
    require_mlx5(&ctx, "DCI/DCT need mlx5 direct verbs")?;
    if let Some(log) = shape.streams {
        check_streams(&ctx, log)?;
    }
    let opts = connect_options(&ctx, ib_port, gid_index, mtu)?;
    let pd = ProtectionDomain::new(&ctx)?;
    println!(
        "dc_write: {} port {}, GID index {}, {} writes of {} bytes in batches of {}, {}",
        ctx.name(),
        opts.port,
        common::gid_name(&opts),
        shape.iters,
        shape.size,
        shape.batch,
        match shape.streams {
            Some(l) => format!("{} DCI streams", 1u32 << l),
            None => "no DCI streams".into(),
        }
    );
    if perftest {
        with_tcp::run(&pd, opts, shape, host, port)
    } else if cli.flag("loopback") {
        let target = Target::new(&pd, &opts, shape.slots_len(), DC_KEY)?;
        let info = target.info()?;
        let seed = (random_psn() % 251) as u8;
        let iters = initiate(&pd, &opts, shape, &info, seed)?;
        common::report_check(
            PROG,
            check_pattern(&target.mr.to_vec(..)?, seed),
            target.mr.len(),
            iters,
        )
    } else if let Some(host) = host {
        client(&pd, &opts, shape, host, port)
    } else {
        server(&pd, &opts, shape, port)
    }
}

/// Exit 3 unless the device has 2^`log` DCI streams.
fn check_streams(ctx: &Context, log: u8) -> Result<(), Failure> {
    match ctx.mlx5_caps()?.dci_streams_caps {
        Some(c) if c.max_log_num_concurent >= log => Ok(()),
        Some(c) => Err(Failure::Unsupported(format!(
            "{} has at most 2^{} DCI streams, 2^{log} asked for; nothing to do",
            ctx.name(),
            c.max_log_num_concurent
        ))),
        None => Err(Failure::Unsupported(format!(
            "{} does not report DCI streams (dci_streams_caps); nothing to do",
            ctx.name()
        ))),
    }
}

/// What the client needs to reach the DCT and its memory.
struct DctInfo {
    lid: u16,
    gid: Gid,
    dctn: u32,
    dc_key: u64,
    remote: RemoteBuf,
}

/// The server's side: a DCT and the memory it exposes.
struct Target {
    // Fields drop in order: the DCT goes before the memory.
    dct: Dct,
    mr: MemoryRegion,
    opts: ConnectOptions,
}

impl Target {
    /// A DCT reachable with `dc_key`, ready, and `len` bytes of memory.
    fn new(
        pd: &ProtectionDomain,
        opts: &ConnectOptions,
        len: usize,
        dc_key: u64,
    ) -> Result<Target, Failure> {
        let ctx = pd.context();
        let cq = CompletionQueue::new(ctx, 16)?;
        let srq = SharedReceiveQueue::new(pd, 16, 1)?;
        let dct = Dct::new(pd, &cq, &srq, dc_key)?;
        dct.ready(opts)?;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr = MemoryRegion::new(pd, len, access)?;
        Ok(Target {
            dct,
            mr,
            opts: *opts,
        })
    }

    fn info(&self) -> Result<DctInfo, Failure> {
        let ctx = self.mr.pd().context();
        let opts = &self.opts;
        Ok(DctInfo {
            lid: ctx.query_port(opts.port)?.lid,
            gid: match opts.gid_index {
                Some(i) => ctx.gid(opts.port, u32::from(i))?,
                None => Gid::default(),
            },
            dctn: self.dct.dctn(),
            dc_key: self.dct.access_key(),
            remote: self.mr.remote(..)?,
        })
    }
}

fn server(
    pd: &ProtectionDomain,
    opts: &ConnectOptions,
    shape: Shape,
    port: u16,
) -> Result<(), Failure> {
    let target = Target::new(pd, opts, shape.slots_len(), DC_KEY)?;
    let info = target.info()?;
    println!(
        "dc_write: DCT {:#x} ready; waiting for a client on TCP port {port}",
        info.dctn
    );
    let mut stream = common::accept_one(port)?;
    let mut rd = BufReader::new(stream.try_clone()?);
    let hello = Msg::recv(&mut rd, "dc_write")?;
    let seed = hello.get("seed")? as u8;
    Msg::new("dc_write")
        .num("lid", u64::from(info.lid))
        .gid("gid", info.gid)
        .num("dctn", u64::from(info.dctn))
        .num("key", info.dc_key)
        .num("addr", info.remote.addr)
        .num("rkey", u64::from(info.remote.rkey))
        .num("len", info.remote.len)
        .send(&mut stream)?;
    let done = Msg::recv(&mut rd, "done")?;
    common::answer_check(
        PROG,
        &mut stream,
        &target.mr.to_vec(..)?,
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
    let seed = (random_psn() % 251) as u8;
    // As perftest's client (`ethernet_client_connect`): one attempt.
    let mut stream = common::connect_to_server(host, port, common::Wait::Once)?;
    let mut rd = BufReader::new(stream.try_clone()?);
    Msg::new("dc_write")
        .num("seed", u64::from(seed))
        .send(&mut stream)?;
    let m = Msg::recv(&mut rd, "dc_write")?;
    let info = DctInfo {
        lid: m.get("lid")? as u16,
        gid: m.get_gid("gid")?,
        dctn: m.get("dctn")? as u32,
        dc_key: m.get("key")?,
        remote: RemoteBuf {
            addr: m.get("addr")?,
            rkey: m.get("rkey")? as u32,
            len: m.get("len")?,
        },
    };
    let iters = initiate(pd, opts, shape, &info, seed)?;
    Msg::new("done").num("writes", iters).send(&mut stream)?;
    common::await_check(PROG, &mut rd, info.remote.len as u64)
}

/// The client's side without `--perftest`: a DCI writing the pattern of
/// `seed` to the DCT of `info`, write `k` to slot `k mod BATCH`. Returns
/// how many writes completed.
fn initiate(
    pd: &ProtectionDomain,
    opts: &ConnectOptions,
    shape: Shape,
    info: &DctInfo,
    seed: u8,
) -> Result<u64, Failure> {
    let len = shape.slots_len();
    if info.remote.len < len as u64 {
        return Err(Failure::Failed(format!(
            "the server offers {} bytes, this run needs {len} (use the same -s and -b on both sides)",
            info.remote.len
        )));
    }
    let mut ini = AnyInitiator::new(pd, opts, len, shape)?;
    ini.src_mut().write_at(0, &pattern(len, seed))?;
    let (posted, elapsed) = ini.write(info, shape, |k| shape.slot(k))?;
    report_bw(shape.size, posted, elapsed);
    Ok(posted)
}

/// The client's side, its DCI on libmlx5's builders or, with `--direct`,
/// on the direct path.
// One per program: boxing a variant would buy nothing.
#[allow(clippy::large_enum_variant)]
enum AnyInitiator {
    Verbs(Initiator),
    Direct(DirectInitiator),
}

impl AnyInitiator {
    /// A DCI moved to RTS and `len` bytes of source memory, on the direct
    /// path with `--direct`.
    fn new(
        pd: &ProtectionDomain,
        opts: &ConnectOptions,
        len: usize,
        shape: Shape,
    ) -> Result<AnyInitiator, Failure> {
        Ok(if shape.direct {
            AnyInitiator::Direct(DirectInitiator::new(pd, opts, len, shape)?)
        } else {
            AnyInitiator::Verbs(Initiator::new(pd, opts, len, shape)?)
        })
    }

    /// The DCI's number and first PSN, its options and its memory (what a
    /// perftest exchange sends of it).
    fn parts(&self) -> (u32, u32, &ConnectOptions, &MemoryRegion) {
        match self {
            AnyInitiator::Verbs(i) => (i.dci.qp_num(), i.psn, &i.opts, &i.src),
            AnyInitiator::Direct(i) => (i.dci.qp_num(), i.psn, &i.opts, &i.src),
        }
    }

    fn src_mut(&mut self) -> &mut MemoryRegion {
        match self {
            AnyInitiator::Verbs(i) => &mut i.src,
            AnyInitiator::Direct(i) => &mut i.src,
        }
    }

    /// Writes `shape.iters` times to the DCT of `info`, write `k` from and
    /// to `offset(k)`: [`Initiator::write`] or [`DirectInitiator::write`].
    fn write(
        &mut self,
        info: &DctInfo,
        shape: Shape,
        offset: impl Fn(u64) -> usize,
    ) -> Result<(u64, Duration), Failure> {
        match self {
            AnyInitiator::Verbs(i) => i.write(info, shape, offset),
            AnyInitiator::Direct(i) => i.write(info, shape, offset),
        }
    }
}

/// The client's side: a DCI, ready, and its source memory.
struct Initiator {
    // Fields drop in order: the DCI goes before the CQ and the memory it
    // reads.
    dci: DciQp,
    cq: CompletionQueue,
    src: MemoryRegion,
    psn: u32,
    opts: ConnectOptions,
}

impl Initiator {
    /// A DCI (with 2^L streams with `--streams L`) moved to RTS, and `len`
    /// bytes of source memory.
    fn new(
        pd: &ProtectionDomain,
        opts: &ConnectOptions,
        len: usize,
        shape: Shape,
    ) -> Result<Initiator, Failure> {
        let ctx = pd.context();
        let src = MemoryRegion::new(pd, len, AccessFlags::LOCAL_WRITE)?;
        let cq = CompletionQueue::new(ctx, shape.batch * IN_FLIGHT + 16)?;
        let dci = dci_builder(pd, &cq, shape.batch * IN_FLIGHT, shape)?.build()?;
        let psn = random_psn();
        dci.ready(psn, opts)?;
        Ok(Initiator {
            dci,
            cq,
            src,
            psn,
            opts: *opts,
        })
    }

    /// Posts `shape.iters` writes to the DCT of `info`, write `k` from and
    /// to `offset(k)`, in batches of `shape.batch`, only the last of each
    /// signalled; stream ids go round robin. Returns the writes done and
    /// the time they took.
    fn write(
        &mut self,
        info: &DctInfo,
        shape: Shape,
        offset: impl Fn(u64) -> usize,
    ) -> Result<(u64, Duration), Failure> {
        let pd = self.src.pd();
        let ah = AddressHandle::new(pd, &AhAttr::towards(info.lid, info.gid, &self.opts))?;
        println!(
            "dc_write: DCI {:#x} ready; writing to DCT {:#x} (key {:#x})",
            self.dci.qp_num(),
            info.dctn,
            info.dc_key
        );
        let streams = shape.streams.map(|l| 1u32 << l);
        let (dci, src, size) = (&mut self.dci, &self.src, shape.size);
        common::post_batches(
            &mut self.cq,
            shape.iters,
            shape.batch,
            IN_FLIGHT,
            |first, n| {
                let addr = DcAddr::new(&ah, info.dctn, info.dc_key);
                let mut batch = dci.batch();
                for i in 0..n {
                    let id = first + i as u64;
                    // Each work request names its DCT: mlx5dv_wr_set_dc_addr, or
                    // mlx5dv_wr_set_dc_addr_stream on stream `id mod streams`.
                    let wr = match streams {
                        Some(s) => batch.wr_stream(id, addr, (id % u64::from(s)) as u16),
                        None => batch.wr(id, addr),
                    };
                    let wr = if i + 1 == n { wr.signaled() } else { wr };
                    let off = offset(id);
                    wr.rdma_write(info.remote.slice(off as u64, size as u64)?)
                        .sge(src.sge(off..off + size)?)?;
                }
                // SAFETY: the writes read `src`, which is not written again
                // after it was filled and outlives the DCI (dropped after it);
                // post_batches awaits every batch's completion before
                // returning.
                unsafe { batch.complete()? };
                Ok(())
            },
        )
    }
}

/// The client's side on the direct path: a DCI taken for
/// [`mlx5dv::direct`], ready, and its source memory.
struct DirectInitiator {
    // Fields drop in order: the DCI (and its CQ) goes before the memory it
    // reads.
    dci: direct::DirectDci,
    src: MemoryRegion,
    psn: u32,
    opts: ConnectOptions,
}

impl DirectInitiator {
    /// A DCI (with 2^L streams with `--streams L`) taken for the direct
    /// path in RESET, then moved to RTS, and `len` bytes of source memory.
    /// Its send queue holds one batch: `post_and_wait` has one in flight.
    fn new(
        pd: &ProtectionDomain,
        opts: &ConnectOptions,
        len: usize,
        shape: Shape,
    ) -> Result<DirectInitiator, Failure> {
        let ctx = pd.context();
        let src = MemoryRegion::new(pd, len, AccessFlags::LOCAL_WRITE)?;
        let cq = CompletionQueue::new(ctx, shape.batch + 16)?;
        let dci = dci_builder(pd, &cq, shape.batch, shape)?.build()?;
        let dci = dci.into_direct(cq).map_err(Error::from)?;
        let psn = random_psn();
        dci.ready(psn, opts)?;
        Ok(DirectInitiator {
            dci,
            src,
            psn,
            opts: *opts,
        })
    }

    /// Posts `shape.iters` writes to the DCT of `info`, write `k` from and
    /// to offset `offset(k)`, one scoped post a batch (only its last work
    /// request signalled); stream ids go round robin. Returns the writes
    /// done and the time they took.
    fn write(
        &mut self,
        info: &DctInfo,
        shape: Shape,
        offset: impl Fn(u64) -> usize,
    ) -> Result<(u64, Duration), Failure> {
        let pd = self.src.pd();
        let ah = AddressHandle::new(pd, &AhAttr::towards(info.lid, info.gid, &self.opts))?;
        // The address vector, DCT number and key, copied once.
        let to = self
            .dci
            .dc_addr(&DcAddr::new(&ah, info.dctn, info.dc_key))?;
        println!(
            "dc_write: DCI {:#x} ready on the direct path; writing to DCT {:#x} (key {:#x})",
            self.dci.qp_num(),
            info.dctn,
            info.dc_key
        );
        let streams = shape.streams.map(|l| 1u64 << l);
        let (dci, src, size) = (&mut self.dci, &self.src, shape.size);
        let start = std::time::Instant::now();
        let mut done = 0u64;
        while done < shape.iters {
            let n = (shape.iters - done).min(u64::from(shape.batch));
            let wcs = dci.post_and_wait(common::WAIT, |b| {
                for k in done..done + n {
                    let off = offset(k);
                    let wr = match streams {
                        Some(s) => b.dc_stream(&to, (k % s) as u16),
                        None => b.dc(&to),
                    };
                    wr.rdma_write(
                        k,
                        SendFlags::empty(),
                        info.remote.slice(off as u64, size as u64)?,
                        src.sge(off..off + size)?,
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

/// The DCI's builder: `depth` RDMA writes of one entry, with 2^L streams
/// with `--streams L`.
fn dci_builder<'a>(
    pd: &'a ProtectionDomain,
    cq: &'a CompletionQueue,
    depth: u32,
    shape: Shape,
) -> Result<QpBuilder<'a, DcInitiator>, Failure> {
    let mut builder = QpBuilder::dci(pd, cq);
    builder
        .caps(QpCaps {
            max_send_wr: depth,
            max_recv_wr: 0,
            max_send_sge: 1,
            max_recv_sge: 0,
            max_inline_data: 0,
        })
        .send_ops(SendOps::RDMA_WRITE);
    if let Some(log) = shape.streams {
        let errored = pd
            .context()
            .mlx5_caps()?
            .dci_streams_caps
            .map_or(0, |c| c.max_log_num_errored.min(log));
        builder.dci_streams(log, errored);
    }
    Ok(builder)
}
