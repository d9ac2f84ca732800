//! What the examples share: the command line (getopt's conventions, in
//! [`cli`]), exit codes, opening the device and choosing its GID, the TCP
//! exchange of connection data, a data pattern, completion waits and the
//! throughput report.
//!
//! Each example includes this file with `mod common;`; not every example
//! uses every item.

#![allow(dead_code)]

mod cli;
pub mod pingpong;
pub mod pp;

#[allow(unused_imports)] // not every example uses every item
pub use cli::{flag, prog, refuse_with, usage_error, val, Cli, Kind, Opt};

use mlx5dv::*;
use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Exit status: a verbs call, a completion or the data check failed.
pub const EXIT_FAILURE: u8 = 1;
/// Exit status: bad usage.
pub const EXIT_USAGE: u8 = 2;
/// Exit status: the device cannot do what the example shows (it is not an
/// mlx5 device, or lacks the capability); nothing was done.
pub const EXIT_UNSUPPORTED: u8 = 3;

/// How an example ends when it does not succeed.
#[derive(Debug)]
pub enum Failure {
    /// Exit 1 with this message.
    Failed(String),
    /// Exit 3 with this message: the device cannot do it.
    Unsupported(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Failed(m) | Failure::Unsupported(m) => f.write_str(m),
        }
    }
}

impl From<Error> for Failure {
    /// The crate's `Unsupported` (a capability the device lacks) exits 3,
    /// everything else 1.
    fn from(e: Error) -> Self {
        match e {
            Error::Unsupported { .. } => Failure::Unsupported(e.to_string()),
            e => Failure::Failed(e.to_string()),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::Failed(e.to_string())
    }
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure::Failed(s)
    }
}

/// What every example's `main` returns: its outcome as an exit status,
/// with the reason on standard error.
pub fn exit(prog: &str, r: Result<(), Failure>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Failed(m)) => {
            eprintln!("{prog}: {m}");
            ExitCode::from(EXIT_FAILURE)
        }
        Err(Failure::Unsupported(m)) => {
            eprintln!("{prog}: {m}");
            ExitCode::from(EXIT_UNSUPPORTED)
        }
    }
}

// -------------------------------------------------------------- device

/// Opens the device named by `-d`, or the first one rdma-core lists (as
/// rdma-core's tools do).
pub fn open_device(name: Option<&str>) -> Result<Context, Failure> {
    let ctx = match name {
        Some(n) => Context::open(n)?,
        None => Context::open_first()?,
    };
    Ok(ctx)
}

/// Refuses a device without the mlx5 direct-verbs API (exit 3), before any
/// mlx5 call: `"<dev> is not an mlx5 device (<why>); nothing to do"`.
pub fn require_mlx5(ctx: &Context, why: &str) -> Result<(), Failure> {
    if ctx.is_mlx5() {
        Ok(())
    } else {
        Err(Failure::Unsupported(format!(
            "{} is not an mlx5 device ({why}); nothing to do",
            ctx.name()
        )))
    }
}

/// The connection options for port `port` of `ctx`: the GID index given
/// with `-g`, or on RoCE (Ethernet link layer) the port's RoCE v2 GID of
/// an IPv4 address, else its first RoCE v2 GID
/// ([`Context::default_gid_index`]); `mtu` or the port's active MTU. Fails
/// when the port is not active.
pub fn connect_options(
    ctx: &Context,
    port: u8,
    gid_index: Option<u8>,
    mtu: Option<Mtu>,
) -> Result<ConnectOptions, Failure> {
    let attr = ctx.query_port(port)?;
    if attr.state != PortState::Active {
        return Err(Failure::Failed(format!(
            "port {port} of {} is {:?}, not active",
            ctx.name(),
            attr.state
        )));
    }
    // On RoCE, unless -g names one: the RoCE v2 GID of an IPv4 address
    // (::ffff:a.b.c.d), routable wherever the address is, else the first
    // RoCE v2 GID; on InfiniBand none.
    let gid_index = match gid_index {
        Some(i) => Some(i),
        None => ctx.default_gid_index(port)?,
    };
    Ok(ConnectOptions::default()
        .port(port)
        .gid_index(gid_index)
        .mtu(mtu.unwrap_or(attr.active_mtu)))
}

/// `opts`' GID index for printing: the number, or `none` (InfiniBand).
pub fn gid_name(opts: &ConnectOptions) -> String {
    opts.gid_index.map_or("none".into(), |i| i.to_string())
}

/// A random 24-bit packet sequence number.
pub fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    (h.finish() & 0x00ff_ffff) as u32
}

// ------------------------------------------------------------ exchange

/// How long a client waits for its server to listen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// One attempt per address of the host, as rdma-core's
    /// `ibv_rc_pingpong` (`pp_client_exch_dest`) and perftest's
    /// `ib_write_bw` (`ethernet_client_connect`) make: when nothing
    /// listens, the client fails at once.
    Once,
    /// Attempts again every 200 ms until the server listens or this much
    /// time has passed: for an example without a counterpart tool, whose
    /// server and client may be started together.
    Retry(Duration),
}

/// How long [`connect_retry`] keeps trying to reach the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// Connects to `host:port`, retrying until the server listens, for at
/// most [`CONNECT_TIMEOUT`]: [`connect_to_server`] with
/// [`Wait::Retry`].
pub fn connect_retry(host: &str, port: u16) -> Result<TcpStream, Failure> {
    connect_to_server(host, port, Wait::Retry(CONNECT_TIMEOUT))
}

/// Connects to the server at `host:port`, waiting for it as `wait` says,
/// and says once, on standard output, that it waits:
/// `"<prog>: waiting for a server at HOST:PORT"`. With [`Wait::Once`]
/// before its attempt (which may take long to be refused or time out);
/// with [`Wait::Retry`] when its first attempt failed, with for how long.
pub fn connect_to_server(host: &str, port: u16, wait: Wait) -> Result<TcpStream, Failure> {
    let prog = prog();
    let waiting = format!("{prog}: waiting for a server at {host}:{port}");
    let window = match wait {
        Wait::Once => {
            println!("{waiting}");
            return TcpStream::connect((host, port))
                .map_err(|e| Failure::Failed(format!("cannot connect to {host}:{port}: {e}")));
        }
        Wait::Retry(window) => window,
    };
    let deadline = Instant::now() + window;
    let mut said = false;
    loop {
        match TcpStream::connect((host, port)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                return Err(Failure::Failed(format!(
                    "no server at {host}:{port} within {window:?}: {e}"
                )))
            }
            Err(_) => {
                if !said {
                    println!("{waiting} (for up to {window:?})");
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Listens on `port` of every IPv4 address and accepts one client; the
/// listening socket is closed once the client is in.
pub fn accept_one(port: u16) -> Result<TcpStream, Failure> {
    let listener = TcpListener::bind(("0.0.0.0", port))
        .map_err(|e| format!("cannot listen on TCP port {port}: {e}"))?;
    let (stream, _) = listener.accept()?;
    Ok(stream)
}

/// A line of `key=value` words, the examples' own exchange format
/// (numbers in hex), e.g. `rc_write lid=0 qpn=11 psn=3a2f1c gid=... `.
pub struct Msg {
    kind: String,
    fields: HashMap<String, String>,
}

impl Msg {
    /// An empty message of this kind (its first word).
    pub fn new(kind: &str) -> Msg {
        Msg {
            kind: kind.into(),
            fields: HashMap::new(),
        }
    }

    /// Adds a number, written in hex.
    pub fn num(mut self, key: &str, v: u64) -> Msg {
        self.fields.insert(key.into(), format!("{v:x}"));
        self
    }

    /// Adds a GID, written as 32 hex digits.
    pub fn gid(mut self, key: &str, g: Gid) -> Msg {
        self.fields.insert(key.into(), gid_to_hex(g));
        self
    }

    /// Sends the message as one line.
    pub fn send(&self, s: &mut TcpStream) -> Result<(), Failure> {
        let mut keys: Vec<&String> = self.fields.keys().collect();
        keys.sort();
        let mut line = self.kind.clone();
        for k in keys {
            line += &format!(" {k}={}", self.fields[k]);
        }
        line.push('\n');
        s.write_all(line.as_bytes())?;
        Ok(())
    }

    /// Reads one message of kind `kind`.
    pub fn recv(r: &mut BufReader<TcpStream>, kind: &str) -> Result<Msg, Failure> {
        let mut line = String::new();
        if r.read_line(&mut line)? == 0 {
            return Err(Failure::Failed(format!(
                "the peer closed the connection before sending '{kind}'"
            )));
        }
        let mut words = line.split_whitespace();
        if words.next() != Some(kind) {
            return Err(Failure::Failed(format!(
                "expected a '{kind}' message, got {:?}",
                line.trim_end()
            )));
        }
        let fields = words
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Ok(Msg {
            kind: kind.into(),
            fields,
        })
    }

    /// A number field.
    pub fn get(&self, key: &str) -> Result<u64, Failure> {
        self.fields
            .get(key)
            .and_then(|v| u64::from_str_radix(v, 16).ok())
            .ok_or_else(|| {
                Failure::Failed(format!("'{}' message without a valid {key}", self.kind))
            })
    }

    /// A GID field.
    pub fn get_gid(&self, key: &str) -> Result<Gid, Failure> {
        self.fields
            .get(key)
            .and_then(|v| gid_from_hex(v))
            .ok_or_else(|| {
                Failure::Failed(format!("'{}' message without a valid {key}", self.kind))
            })
    }
}

/// A GID as 32 hex digits, its bytes in wire order: what rdma-core's
/// `gid_to_wire_gid` writes.
pub fn gid_to_hex(g: Gid) -> String {
    g.0.iter().map(|b| format!("{b:02x}")).collect()
}

/// The inverse of [`gid_to_hex`] (`wire_gid_to_gid`).
pub fn gid_from_hex(s: &str) -> Option<Gid> {
    if s.len() != 32 || !s.is_ascii() {
        return None;
    }
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(Gid(g))
}

/// Reads up to `max` bytes: what the peer sent before it closed or paused.
pub fn read_some(s: &mut impl Read, max: usize) -> Result<Vec<u8>, Failure> {
    let mut buf = vec![0u8; max];
    let n = s.read(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

// ----------------------------------------------------------------- data

/// A recognisable pattern: byte i is (i * 7 + seed) mod 251.
pub fn fill_pattern(buf: &mut [u8], seed: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = ((i * 7 + seed as usize) % 251) as u8;
    }
}

/// `len` bytes of the pattern of `seed` (see [`fill_pattern`]), to copy
/// into a region peers may write, which is not handed out as a slice
/// (`MemoryRegion::write_at`).
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    let mut v = vec![0; len];
    fill_pattern(&mut v, seed);
    v
}

/// The offset of the first byte of `buf` that breaks the pattern of
/// `seed`, if any.
pub fn check_pattern(buf: &[u8], seed: u8) -> Option<usize> {
    buf.iter()
        .enumerate()
        .position(|(i, &b)| b != ((i * 7 + seed as usize) % 251) as u8)
}

/// How long the examples wait for one completion before they give up
/// (soft-RoCE under emulation is slow).
pub const WAIT: Duration = Duration::from_secs(30);

/// Checks the completions of a scoped direct post of the `n` work
/// requests from `first` on: each succeeded, and together they retire all
/// `n` (the unsignalled ones included: [`direct::DirectWc::covers`]).
pub fn check_covered(wcs: &[direct::DirectWc], first: u64, n: u64) -> Result<(), Failure> {
    let mut covered = 0u64;
    for wc in wcs {
        wc.ok().map_err(|e| format!("{e} ({wc:?})"))?;
        covered += u64::from(wc.covers);
    }
    if covered != n {
        return Err(Failure::Failed(format!(
            "work requests {first}..{}: the completions retired {covered} of {n} ({wcs:?})",
            first + n
        )));
    }
    Ok(())
}

/// The target's end of a write run, after the writer's `done`: checks
/// every byte of `mem` against the pattern of `seed`, tells the writer
/// (`ok`, or `bad` and the offset), and prints the verdict.
pub fn answer_check(
    prog: &str,
    stream: &mut TcpStream,
    mem: &[u8],
    seed: u8,
    writes: u64,
) -> Result<(), Failure> {
    let verdict = check_pattern(mem, seed);
    match verdict {
        None => Msg::new("ok").send(stream)?,
        Some(at) => Msg::new("bad").num("offset", at as u64).send(stream)?,
    }
    report_check(prog, verdict, mem.len(), writes)
}

/// The writer's end: reads the target's verdict.
pub fn await_check(prog: &str, rd: &mut BufReader<TcpStream>, len: u64) -> Result<(), Failure> {
    let mut line = String::new();
    rd.read_line(&mut line)?;
    match line.split_whitespace().next() {
        Some("ok") => {
            println!("{prog}: the server checked its {len} bytes: all as written");
            Ok(())
        }
        _ => Err(Failure::Failed(format!(
            "the server's check failed: {}",
            line.trim_end()
        ))),
    }
}

/// Prints the target's verdict: `None`, every byte as written, or the
/// offset of the first that is not.
pub fn report_check(
    prog: &str,
    verdict: Option<usize>,
    len: usize,
    writes: u64,
) -> Result<(), Failure> {
    match verdict {
        None => {
            println!("{prog}: {writes} writes received; all {len} bytes of the target checked");
            Ok(())
        }
        Some(at) => Err(Failure::Failed(format!(
            "data check failed: byte {at} of the target differs from what was written"
        ))),
    }
}

/// Polls one completion, if there is one.
///
/// One per call, on purpose: the soft-RoCE provider of rdma-core releases
/// before the fix of linux-rdma/rdma-core#1617 mishandles a poll whose
/// `ibv_next_poll` finds the queue empty (its `ibv_end_poll` then skips a
/// queue entry and a later poll reads an empty one). Asking for one
/// completion at a time never calls `ibv_next_poll`.
pub fn poll_one(cq: &mut CompletionQueue) -> Result<Option<WorkCompletion>, Failure> {
    let mut out = Vec::with_capacity(1);
    cq.poll_into(&mut out, 1)?;
    Ok(out.pop())
}

/// Waits for `n` completions on `cq`, at most [`WAIT`] for each, and checks
/// that each succeeded.
pub fn wait_ok(cq: &mut CompletionQueue, n: usize) -> Result<Vec<WorkCompletion>, Failure> {
    let mut wcs = Vec::with_capacity(n);
    for _ in 0..n {
        // `wait` with 1 polls one completion at a time (see `poll_one`).
        let wc = cq.wait(1, WAIT)?[0];
        wc.ok().map_err(|e| format!("{e} ({wc:?})"))?;
        wcs.push(wc);
    }
    Ok(wcs)
}

/// Posts `iters` work requests in batches of at most `batch`, at most
/// `in_flight` batches outstanding: `post(first, n)` posts one batch, work
/// requests `first..first + n`, only its last signalled (an RC or DC send
/// queue completes in order, so that completion retires the batch).
/// Waits for every batch's completion on `cq`, each checked. Returns the
/// work requests done and the time from the first post to the last
/// completion.
pub fn post_batches(
    cq: &mut CompletionQueue,
    iters: u64,
    batch: u32,
    in_flight: u32,
    mut post: impl FnMut(u64, usize) -> Result<(), Failure>,
) -> Result<(u64, Duration), Failure> {
    let mut posted = 0u64;
    let mut outstanding = 0u32;
    let start = Instant::now();
    while posted < iters {
        if outstanding == in_flight {
            wait_ok(cq, 1)?;
            outstanding -= 1;
        }
        let n = (iters - posted).min(u64::from(batch)) as usize;
        post(posted, n)?;
        posted += n as u64;
        outstanding += 1;
    }
    wait_ok(cq, outstanding as usize)?;
    Ok((posted, start.elapsed()))
}

/// Prints the summary line of a throughput run, as perftest's
/// `ib_write_bw` does (MB = 2^20 bytes).
pub fn report_bw(size: usize, iters: u64, elapsed: Duration) {
    let secs = elapsed.as_secs_f64().max(1e-9);
    let bytes = size as f64 * iters as f64;
    println!(" #bytes     #iterations    BW average[MB/sec]    MsgRate[Mpps]");
    println!(
        " {:<10} {:<14} {:<21.2} {:.6}",
        size,
        iters,
        bytes / secs / 1048576.0,
        iters as f64 / secs / 1e6
    );
}
