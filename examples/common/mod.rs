//! What the examples share: the command line (rdma-core's conventions,
//! parsed by hand), exit codes, opening the device and choosing its GID,
//! the TCP exchange of connection data, a data pattern, completion waits
//! and the throughput report.
//!
//! Each example includes this file with `mod common;`; not every example
//! uses every item.

#![allow(dead_code)]

use mlx5dv::*;
use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::str::FromStr;
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

// ------------------------------------------------------------------ CLI

/// One option: `-s`/`--size`, with a value or not.
#[derive(Clone, Copy)]
pub struct Opt {
    /// The one-letter form, e.g. `'s'` for `-s`.
    pub short: char,
    /// The long form without dashes, e.g. `"size"`.
    pub long: &'static str,
    /// Whether it takes a value (`-s 4096`, `-s4096`, `--size=4096`).
    pub value: bool,
}

/// An option that takes a value.
pub const fn val(short: char, long: &'static str) -> Opt {
    Opt {
        short,
        long,
        value: true,
    }
}

/// An option without a value.
pub const fn flag(short: char, long: &'static str) -> Opt {
    Opt {
        short,
        long,
        value: false,
    }
}

/// A parsed command line.
pub struct Cli {
    prog: &'static str,
    values: HashMap<&'static str, String>,
    flags: Vec<&'static str>,
    /// The arguments that are not options (the server's host name).
    pub positional: Vec<String>,
}

impl Cli {
    /// Parses `std::env::args()` against `opts`. `-h`/`--help` prints
    /// `usage` and exits 0; an unknown option or a missing value prints the
    /// reason and exits 2.
    pub fn parse(prog: &'static str, usage: &str, opts: &[Opt]) -> Cli {
        let args: Vec<String> = std::env::args().skip(1).collect();
        match Self::parse_from(prog, opts, &args) {
            Ok(Some(cli)) => cli,
            Ok(None) => {
                print!("{usage}");
                std::process::exit(0);
            }
            Err(m) => usage_error(prog, &m),
        }
    }

    /// [`Cli::parse`] with the device options every traffic example takes,
    /// `-d`/`--ib-dev`, `-i`/`--ib-port` and `-g`/`--gid-idx`, before `extra`.
    pub fn parse_with_device(prog: &'static str, usage: &str, extra: &[Opt]) -> Cli {
        let mut opts = vec![val('d', "ib-dev"), val('i', "ib-port"), val('g', "gid-idx")];
        opts.extend_from_slice(extra);
        Self::parse(prog, usage, &opts)
    }

    /// `-s` (bytes per work request), `-n` (work requests) and `-b`
    /// (work requests per batch), or these defaults; exits 2 unless each
    /// is at least 1 and the size below 4 GiB (a work request's length).
    pub fn size_iters_batch(&self, size: usize, iters: u64, batch: u32) -> (usize, u64, u32) {
        let r = (
            self.num_or("size", size),
            self.num_or("iters", iters),
            self.num_or("batch", batch),
        );
        if r.0 == 0 || r.1 == 0 || r.2 == 0 || r.0 > u32::MAX as usize {
            usage_error(
                self.prog,
                "--size, --iters and --batch must be at least 1 (size below 4 GiB)",
            );
        }
        r
    }

    /// Parses `args`; `Ok(None)` when help was asked for.
    fn parse_from(
        prog: &'static str,
        opts: &[Opt],
        args: &[String],
    ) -> Result<Option<Cli>, String> {
        let mut cli = Cli {
            prog,
            values: HashMap::new(),
            flags: Vec::new(),
            positional: Vec::new(),
        };
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if arg == "-h" || arg == "--help" {
                return Ok(None);
            }
            let (opt, inline) = if let Some(long) = arg.strip_prefix("--") {
                if long.is_empty() {
                    cli.positional.extend(it.by_ref().cloned());
                    break;
                }
                let (name, inline) = match long.split_once('=') {
                    Some((n, v)) => (n, Some(v.to_string())),
                    None => (long, None),
                };
                let opt = opts
                    .iter()
                    .find(|o| o.long == name)
                    .ok_or_else(|| format!("unknown option '--{name}'"))?;
                (opt, inline)
            } else if let Some(short) = arg.strip_prefix('-').filter(|s| !s.is_empty()) {
                let mut chars = short.chars();
                let c = chars.next().unwrap_or('-');
                let rest: String = chars.collect();
                let opt = opts
                    .iter()
                    .find(|o| o.short == c)
                    .ok_or_else(|| format!("unknown option '-{c}'"))?;
                (opt, (!rest.is_empty()).then_some(rest))
            } else {
                cli.positional.push(arg.clone());
                continue;
            };
            if opt.value {
                let v = match inline {
                    Some(v) => v,
                    None => it
                        .next()
                        .cloned()
                        .ok_or_else(|| format!("option '--{}' needs a value", opt.long))?,
                };
                cli.values.insert(opt.long, v);
            } else if inline.is_some() {
                return Err(format!("option '--{}' takes no value", opt.long));
            } else {
                cli.flags.push(opt.long);
            }
        }
        Ok(Some(cli))
    }

    /// Whether the flag was given.
    pub fn flag(&self, long: &str) -> bool {
        self.flags.contains(&long)
    }

    /// The option's text, if given.
    pub fn text(&self, long: &str) -> Option<&str> {
        self.values.get(long).map(String::as_str)
    }

    /// The option's number (decimal, or hex with `0x`, as `strtoul` with
    /// base 0 reads it), if given; exits 2 when it is not a number.
    pub fn num<T: TryFrom<u64>>(&self, long: &str) -> Option<T> {
        let text = self.text(long)?;
        let parsed = parse_u64(text).and_then(|v| T::try_from(v).ok());
        Some(parsed.unwrap_or_else(|| {
            usage_error(
                self.prog,
                &format!("--{long}: '{text}' is not a valid number here"),
            )
        }))
    }

    /// The option's number, or `default`.
    pub fn num_or<T: TryFrom<u64>>(&self, long: &str, default: T) -> T {
        self.num(long).unwrap_or(default)
    }

    /// The server's host: `None` for a server, `Some` for a client; exits 2
    /// on more than one.
    pub fn host(&self) -> Option<&str> {
        match self.positional.as_slice() {
            [] => None,
            [h] => Some(h),
            _ => usage_error(self.prog, "at most one host name"),
        }
    }

    /// Exits 2 when a host name was given: for examples that take none.
    pub fn no_positional(&self) {
        if let Some(p) = self.positional.first() {
            usage_error(self.prog, &format!("unexpected argument '{p}'"));
        }
    }

    /// The MTU option (`-m`), one of 256 .. 4096; exits 2 on another value.
    pub fn mtu(&self) -> Option<Mtu> {
        let bytes: u32 = self.num("mtu")?;
        Some(Mtu::from_bytes(bytes).unwrap_or_else(|_| {
            usage_error(self.prog, "--mtu must be 256, 512, 1024, 2048 or 4096")
        }))
    }
}

/// Prints the reason and the hint, and exits 2.
pub fn usage_error(prog: &str, msg: &str) -> ! {
    eprintln!("{prog}: {msg}");
    eprintln!("Try '{prog} -h'.");
    std::process::exit(i32::from(EXIT_USAGE));
}

fn parse_u64(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => u64::from_str(s).ok(),
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
/// with `-g`, or on RoCE (Ethernet link layer) the port's first RoCE v2
/// GID of an IPv4 address, else its first RoCE v2 GID; `mtu` or the port's active MTU. Fails when the port is not
/// active.
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
    let gid_index = match gid_index {
        Some(i) => Some(i),
        None if attr.link_layer == LinkLayer::Ethernet => {
            // Prefer a RoCE v2 GID of an IPv4 address (::ffff:a.b.c.d),
            // routable wherever the address is; then any RoCE v2 GID.
            let table = ctx.gid_table()?;
            let v2 = |e: &&GidEntry| {
                e.port == u32::from(port) && e.gid_type == GidType::RoceV2 && !e.gid.is_zero()
            };
            let ipv4 = |e: &&GidEntry| std::net::Ipv6Addr::from(e.gid.0).to_ipv4_mapped().is_some();
            let e = table
                .iter()
                .filter(v2)
                .find(ipv4)
                .or_else(|| table.iter().find(v2))
                .ok_or_else(|| {
                    format!(
                        "{} port {port} has no RoCE v2 GID: give one with -g",
                        ctx.name()
                    )
                })?;
            Some(u8::try_from(e.index).map_err(|_| format!("GID index {} too large", e.index))?)
        }
        None => None,
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

/// How long a client keeps trying to reach its server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);

/// Connects to `host:port`, retrying until the server listens, for at
/// most [`CONNECT_TIMEOUT`].
pub fn connect_retry(host: &str, port: u16) -> Result<TcpStream, Failure> {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        match TcpStream::connect((host, port)) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => {
                return Err(Failure::Failed(format!(
                    "cannot connect to {host}:{port} within {} s: {e}",
                    CONNECT_TIMEOUT.as_secs()
                )))
            }
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
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
