//! `tokio_echo`: an RC echo server on tokio that serves several clients at
//! once, driven by completion events, and its client (feature `tokio`).
//!
//! The server accepts clients over TCP (the connection data is exchanged
//! there), gives each an RC QP and a CQ on ONE completion channel (one
//! reactor registration for all), and echoes every message a client sends
//! from the region it came in, in a task per client: no thread per
//! client, no spinning. Messages travel in owned regions
//! ([`mlx5dv::aio::AsyncQp`]): each operation takes its region and gives it
//! back with the completion. When a client says it is done (over TCP), the
//! server's receive then in flight is cancelled: its region stays with the
//! QP until the QP is destroyed, right after.
//!
//! ```text
//! cargo run --features tokio --example tokio_echo -- -d rxe0 -c 2      # server, 2 clients
//! cargo run --features tokio --example tokio_echo -- -d rxe0 SERVER    # a client
//! cargo run --features tokio --example tokio_echo -- -d rxe0 --loopback -c 4
//! ```
//!
//! A client started before its server prints that it waits, and tries
//! again for up to 10 s (no counterpart tool sets this time; the window
//! lets the two be started together).
//!
//! Each client sends `-n` messages of `-s` bytes (a pattern of its own per
//! round) and checks every echo byte for byte. Exit status: 0 success; 1 a
//! verbs call, a completion or the check failed; 2 bad usage.

mod common;

use common::{
    check_pattern, connect_options, exit, flag, gid_from_hex, gid_to_hex, open_device, pattern,
    random_psn, val, Cli, Failure,
};
use mlx5dv::aio::AsyncQp;
use mlx5dv::*;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

const PROG: &str = "tokio_echo";
const USAGE: &str = "\
Usage: tokio_echo [-d DEVICE] [-i PORT] [-g GID] [-p TCP] [-c CLIENTS] [-n ROUNDS] [-s SIZE]
       tokio_echo [options] SERVER          (a client)
       tokio_echo [options] --loopback      (the server and -c clients in one process)

An RC echo server on tokio: serves several clients at once, one task and
one QP each, all CQs on one completion channel; the client sends messages
and checks the echoes.

Options:
  -d, --ib-dev=DEVICE   the device (default: the first)
  -i, --ib-port=PORT    its port (default 1)
  -g, --gid-idx=INDEX   the GID index (default on RoCE: the IPv4 RoCE v2 GID)
  -p, --port=TCP        the server's TCP port (default 18518)
  -c, --clients=N       server: stop after N clients (default 0: serve for
                        ever); loopback: how many clients (default 3)
  -n, --iters=ROUNDS    messages per client (default 100)
  -s, --size=SIZE       bytes per message (default 4096)
      --loopback        run the server and the clients in this process
  -h, --help            this text

A client waits up to 10 s for its server to listen, and says so.

Exit status: 0 success, 1 failure, 2 bad usage.
";

/// How long a client keeps trying to reach its server. No tool is this
/// example's counterpart; the window lets a server and its client be
/// started together.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Entries of each CQ: a client's QP has at most one send and two
/// receives in flight.
const CQ_DEPTH: u32 = 16;

/// What both ends need.
#[derive(Clone)]
struct Setup {
    ctx: Context,
    pd: ProtectionDomain,
    opts: ConnectOptions,
    size: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(
        PROG,
        USAGE,
        &[
            val('p', "port"),
            val('c', "clients"),
            val('n', "iters"),
            val('s', "size"),
            flag('l', "loopback"),
        ],
    );
    let rt = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => return exit(PROG, Err(Failure::Failed(format!("tokio runtime: {e}")))),
    };
    exit(PROG, rt.block_on(run(cli)))
}

async fn run(cli: Cli) -> Result<(), Failure> {
    let (ib_port, gid_index) = (cli.num_or("ib-port", 1u8), cli.num("gid-idx"));
    let size = cli.num_or("size", 4096usize).max(1);
    let port = cli.num_or("port", 18518u16);
    let rounds = cli.num_or("iters", 100u64);
    let loopback = cli.flag("loopback");
    if loopback {
        cli.no_positional();
    }
    let clients = cli.num_or("clients", if loopback { 3usize } else { 0 });
    let host = cli.host();
    let ctx = open_device(cli.text("ib-dev"))?;
    let opts = connect_options(&ctx, ib_port, gid_index, None)?;
    let setup = Setup {
        pd: ProtectionDomain::new(&ctx)?,
        ctx,
        opts,
        size,
    };
    if loopback {
        let clients = clients.max(1);
        let listener = listen(port).await?;
        let server = tokio::spawn(serve(setup.clone(), listener, clients));
        // Clients on one channel of their own, all at once.
        let channel = CompletionChannel::new(&setup.ctx)?;
        let mut tasks = tokio::task::JoinSet::new();
        for id in 0..clients {
            let (setup, channel) = (setup.clone(), channel.clone());
            tasks.spawn(client(setup, channel, "127.0.0.1".into(), port, rounds, id));
        }
        while let Some(r) = tasks.join_next().await {
            r.map_err(|e| format!("a client task: {e}"))??;
        }
        return server.await.map_err(|e| format!("the server task: {e}"))?;
    }
    match host {
        None => {
            let listener = listen(port).await?;
            serve(setup, listener, clients).await
        }
        Some(host) => {
            let channel = CompletionChannel::new(&setup.ctx)?;
            client(setup, channel, host.into(), port, rounds, 0).await
        }
    }
}

async fn listen(port: u16) -> Result<TcpListener, Failure> {
    TcpListener::bind(("0.0.0.0", port))
        .await
        .map_err(|e| Failure::Failed(format!("cannot listen on TCP port {port}: {e}")))
}

// --------------------------------------------------------------- server

/// Serves clients, each in a task of its own, until `max` have been served
/// (0: for ever).
async fn serve(setup: Setup, listener: TcpListener, max: usize) -> Result<(), Failure> {
    // One channel for every client's CQ: one fd on the reactor.
    let channel = CompletionChannel::new(&setup.ctx)?;
    println!(
        "{PROG}: serving on TCP port {}, device {}, GID index {}",
        listener.local_addr()?.port(),
        setup.ctx.name(),
        common::gid_name(&setup.opts)
    );
    let mut tasks = tokio::task::JoinSet::new();
    let mut accepted = 0;
    while max == 0 || accepted < max {
        let (stream, peer) = listener.accept().await?;
        accepted += 1;
        let (setup, channel) = (setup.clone(), channel.clone());
        tasks.spawn(async move {
            let r = serve_one(setup, channel, stream).await;
            match &r {
                Ok(n) => println!("{PROG}: client {peer}: {n} messages echoed"),
                Err(e) => eprintln!("{PROG}: client {peer}: {e}"),
            }
            r
        });
        // Reap the finished ones as we go.
        while let Some(r) = tasks.try_join_next() {
            r.map_err(|e| format!("a server task: {e}"))??;
        }
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|e| format!("a server task: {e}"))??;
    }
    println!("{PROG}: served {accepted} clients");
    Ok(())
}

/// Echoes one client's messages until it says it is done.
async fn serve_one(
    setup: Setup,
    channel: CompletionChannel,
    stream: TcpStream,
) -> Result<u64, Failure> {
    let (qp, mut lines, mut wr) = connect(&setup, &channel, stream, false).await?;
    let new_region = || MemoryRegion::new(&setup.pd, setup.size, AccessFlags::LOCAL_WRITE);
    // A receive is always posted: the next message may come while this
    // one is echoed.
    let mut spare = new_region()?;
    let mut next = qp.recv(new_region()?, 0..setup.size);
    wr.write_all(b"ready\n").await?;
    let mut echoed = 0;
    loop {
        let (wc, msg) = tokio::select! {
            done = &mut next => done,
            // The client is done (or gone): `next`, in flight, is dropped
            // with the QP below; its region stays with the QP until then.
            _ = lines.next_line() => break,
        };
        let len = wc?.byte_len as usize;
        next = qp.recv(spare, 0..setup.size);
        let (wc, msg) = qp.send(msg, 0..len).await;
        wc?;
        spare = msg;
        echoed += 1;
    }
    Ok(echoed)
}

// --------------------------------------------------------------- client

/// Sends `rounds` messages and checks each echo.
async fn client(
    setup: Setup,
    channel: CompletionChannel,
    host: String,
    port: u16,
    rounds: u64,
    id: usize,
) -> Result<(), Failure> {
    let stream = connect_retry(&host, port).await?;
    let (qp, mut lines, mut wr) = connect(&setup, &channel, stream, true).await?;
    // The server has its receive posted.
    match lines.next_line().await? {
        Some(l) if l == "ready" => {}
        other => return Err(Failure::Failed(format!("expected 'ready', got {other:?}"))),
    }
    let size = setup.size;
    let mut out = MemoryRegion::new(&setup.pd, size, AccessFlags::LOCAL_WRITE)?;
    let mut back = MemoryRegion::new(&setup.pd, size, AccessFlags::LOCAL_WRITE)?;
    let start = Instant::now();
    for round in 0..rounds {
        let seed = (round as usize * 31 + id * 7) as u8;
        out.write_at(0, &pattern(size, seed))?;
        let echo = qp.recv(back, 0..size); // posted before the send
        let (wc, o) = qp.send(out, 0..size).await;
        wc?;
        let (wc, b) = echo.await;
        let len = wc?.byte_len as usize;
        let got = b.to_vec(..len)?;
        if len != size || check_pattern(&got, seed).is_some() {
            return Err(Failure::Failed(format!(
                "client {id}: round {round}: the echo ({len} bytes) differs from the message"
            )));
        }
        (out, back) = (o, b);
    }
    let took = start.elapsed();
    wr.write_all(b"done\n").await?;
    println!(
        "{PROG}: client {id}: {rounds} echoes of {size} B checked, {:.1} us per round trip",
        took.as_secs_f64() * 1e6 / rounds.max(1) as f64
    );
    Ok(())
}

/// Connects to the server, retrying for up to [`CONNECT_TIMEOUT`]; says
/// once, when its first attempt failed, that it waits.
async fn connect_retry(host: &str, port: u16) -> Result<TcpStream, Failure> {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    let mut said = false;
    loop {
        match TcpStream::connect((host, port)).await {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                return Err(Failure::Failed(format!(
                    "no server at {host}:{port} within {CONNECT_TIMEOUT:?}: {e}"
                )))
            }
            Err(_) => {
                if !said {
                    println!(
                        "{PROG}: waiting for a server at {host}:{port} (for up to {CONNECT_TIMEOUT:?})"
                    );
                    said = true;
                }
                tokio::time::sleep(Duration::from_millis(200)).await
            }
        }
    }
}

// ------------------------------------------------------------- exchange

/// Makes a QP with one CQ on `channel`, exchanges endpoints over `stream`
/// (the client speaks first), connects, and returns the QP as an
/// `AsyncQp` with the stream's halves.
async fn connect(
    setup: &Setup,
    channel: &CompletionChannel,
    stream: TcpStream,
    speak_first: bool,
) -> Result<(AsyncQp, Lines<BufReader<OwnedReadHalf>>, OwnedWriteHalf), Failure> {
    let cq = CompletionQueue::with_channel(&setup.ctx, CQ_DEPTH, channel)?;
    let qp = QpBuilder::rc(&setup.pd, &cq, &cq).build()?;
    let psn = random_psn();
    let local = qp.endpoint(psn, &setup.opts)?;
    let line = format!(
        "echo qpn={:x} psn={:x} lid={:x} gid={}\n",
        local.qpn,
        local.psn,
        local.lid,
        gid_to_hex(local.gid)
    );
    let (rd, mut wr) = stream.into_split();
    let mut lines = BufReader::new(rd).lines();
    if speak_first {
        wr.write_all(line.as_bytes()).await?;
    }
    let theirs = lines.next_line().await?.ok_or_else(|| {
        Failure::Failed("the peer closed the connection before its endpoint".into())
    })?;
    if !speak_first {
        wr.write_all(line.as_bytes()).await?;
    }
    let remote = parse_endpoint(&theirs)?;
    qp.connect_to(&remote, &setup.opts)?; // sending from `psn`, given to endpoint
    let qp = AsyncQp::new(qp, cq, None)?;
    Ok((qp, lines, wr))
}

/// Reads `echo qpn=.. psn=.. lid=.. gid=..` (numbers in hex).
fn parse_endpoint(line: &str) -> Result<Endpoint, Failure> {
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
            .ok_or_else(|| Failure::Failed(format!("no {key} in the peer's endpoint {line:?}")))
    };
    let num = |key: &str| {
        field(key).and_then(|v| {
            u32::from_str_radix(v, 16)
                .map_err(|_| Failure::Failed(format!("bad {key} in {line:?}")))
        })
    };
    Ok(Endpoint {
        qpn: num("qpn")?,
        psn: num("psn")?,
        lid: num("lid")? as u16,
        gid: gid_from_hex(field("gid")?).ok_or_else(|| format!("bad gid in {line:?}"))?,
    })
}
