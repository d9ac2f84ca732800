//! `rping`: rdma-core's `rping` (`rdmacm-utils`), written with `mlx5dv`'s
//! rdma_cm support, and wire-compatible with it: either side can be the C
//! tool.
//!
//! ```text
//! rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]           # server
//! rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]   # client
//!
//! # on soft-RoCE (rdma_ucm loaded), rdma-core's server and this client:
//! rping -s -a 10.99.0.1 &
//! cargo run --features rdma-cm --example rping -- -c -a 10.99.0.1 -C 10 -v -V
//! ```
//!
//! What it shares with the C tool, so that the two interoperate:
//!
//! - rdma_cm on port 7174 (`-p`), port space `RDMA_PS_TCP`, an RC QP,
//!   responder resources and initiator depth 1, 7 retries;
//! - the messages: a SEND of `struct rping_rdma_info` (16 bytes: buffer
//!   address as big-endian u64, rkey and size as big-endian u32) and the
//!   server's 16-byte "go ahead" SENDs;
//! - the loop, per ping: the client advertises its source buffer; the
//!   server RDMA-reads it and says go ahead; the client advertises its sink
//!   buffer; the server RDMA-writes what it read (up to its NUL) into it and
//!   says go ahead; the client (with `-V`) compares sink and source;
//! - the data: `"rdma-ping-%d: "` followed by letters cycling from `A` to
//!   `z`, starting one further each ping, NUL-terminated at `-S` bytes;
//! - the output: `ping data: ...` (client, `-v`), `server ping data: ...`
//!   (server, `-v`), `data mismatch!` (client, `-V`).
//!
//! Beyond the C tool, the server with `-V` also checks each ping against
//! the pattern the client sends, and refuses a ping larger than its `-S`.
//!
//! Exit status: 0 every ping went both ways (and checked out), or, for the
//! server, the client disconnected (also when the "go ahead" SEND it had
//! just been sent never completed: see `go_ahead`); 1 a connection, verbs
//! or data failure; 2 bad usage.

use mlx5dv::cm::{CmEventKind, CmId, ConnParam};
use mlx5dv::*;
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "\
Usage:
  rping -s [-vVd] [-S size] [-C count] [-a addr] [-p port]
  rping -c [-vVd] [-S size] [-C count] [-I addr] -a addr [-p port]
        -c              client side
        -I addr         source address to bind to for the client
        -s              server side (to bind to any IPv6 address use -a ::0)
        -v              display ping data to stdout
        -V              validate ping data
        -d              debug printfs
        -S size         ping data size (default 64)
        -C count        ping count times (default: until interrupted)
        -a addr         address
        -p port         port (default 7174)
        -h              this text
";

/// `sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT)` in rping.c:
/// `"0x7fffffff"` and `"rdma-ping-%d: "` with their NULs.
const MIN_SIZE: usize = 11 + 15;
const MAX_SIZE: usize = 64 * 1024 - 1;
/// `struct rping_rdma_info`.
const INFO_LEN: usize = 16;
/// How long a step may take before the run is given up.
const STEP: Duration = Duration::from_secs(10);

struct Cfg {
    server: bool,
    addr: Option<IpAddr>,
    source: Option<IpAddr>,
    port: u16,
    size: usize,
    count: u64,
    verbose: bool,
    validate: bool,
    debug: bool,
}

fn main() -> ExitCode {
    let cfg = match parse(std::env::args_os().skip(1)) {
        Ok(Some(c)) => c,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("rping: {msg}");
            eprintln!("Try 'rping -h'.");
            return ExitCode::from(2);
        }
    };
    let run = if cfg.server {
        server(&cfg)
    } else {
        client(&cfg)
    };
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "rping {}: {e}",
                if cfg.server { "server" } else { "client" }
            );
            ExitCode::from(1)
        }
    }
}

/// rping's getopt string `a:I:p:C:S:scvVd`, read with lexopt: flags may
/// be grouped (`-vV`) and values attached (`-p7174`) or separate. `None`
/// for `-h` or `--help`.
fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<Cfg>, String> {
    use lexopt::Arg::{Long, Short, Value};
    let mut cfg = Cfg {
        server: false,
        addr: None,
        source: None,
        port: 7174,
        size: 64,
        count: 0,
        verbose: false,
        validate: false,
        debug: false,
    };
    let mut side = None;
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        let c = match arg {
            Short(c) => c,
            Long("help") => return Ok(None),
            Value(v) => return Err(format!("unexpected argument {v:?}")),
            Long(name) => return Err(format!("unknown option '--{name}'")),
        };
        if "aIpCS".contains(c) {
            let v = p.value().map_err(|_| format!("-{c} needs a value"))?;
            let v = v
                .into_string()
                .map_err(|v| format!("-{c}: {v:?} is not valid UTF-8"))?;
            let num = |what: &str| -> Result<u64, String> {
                v.parse().map_err(|_| format!("invalid {what} {v:?}"))
            };
            match c {
                'a' => cfg.addr = Some(resolve(&v)?),
                'I' => cfg.source = Some(resolve(&v)?),
                'p' => cfg.port = u16::try_from(num("port")?).map_err(|_| "invalid port")?,
                'C' => cfg.count = num("count")?,
                _ => {
                    let size = num("size")? as usize;
                    if !(MIN_SIZE..=MAX_SIZE).contains(&size) {
                        return Err(format!(
                            "Invalid size {size} (valid range is {MIN_SIZE} to {MAX_SIZE})"
                        ));
                    }
                    cfg.size = size;
                }
            }
            continue;
        }
        match c {
            's' => side = Some(true),
            'c' => side = Some(false),
            'v' => cfg.verbose = true,
            'V' => cfg.validate = true,
            'd' => cfg.debug = true,
            'h' => return Ok(None),
            _ => return Err(format!("unknown option '-{c}'")),
        }
    }
    cfg.server = side.ok_or("give -s (server) or -c (client)")?;
    if !cfg.server && cfg.addr.is_none() {
        return Err("the client needs the server's address (-a)".into());
    }
    Ok(Some(cfg))
}

/// An address or host name, as rping's `getaddrinfo`.
fn resolve(host: &str) -> Result<IpAddr, String> {
    if let Ok(ip) = host.parse() {
        return Ok(ip);
    }
    (host, 0)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(|a| a.ip())
        .ok_or(format!(
            "getaddrinfo failed - invalid hostname or IP address {host:?}"
        ))
}

/// Boxed errors: verbs, CM and data failures alike end the run.
type Res<T = ()> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The connection's verbs objects. Fields drop in order: the QP before the
/// memory its work requests used.
struct Conn {
    qp: RcQp,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    /// The 16-byte receive buffer (`recv_buf`).
    recv: MemoryRegion,
    /// The 16-byte send buffer (`send_buf`).
    send: MemoryRegion,
    /// The RDMA sink (`rdma_buf`): the server reads into it and writes from
    /// it; the client advertises it for the server's write.
    rdma: MemoryRegion,
    /// The client's RDMA source (`start_buf`).
    start: Option<MemoryRegion>,
    debug: bool,
}

impl Conn {
    /// rping's `rping_setup_qp` and `rping_setup_buffers` on the id's
    /// device.
    fn new(id: &CmId, cfg: &Cfg) -> Res<Self> {
        let ctx = id.context()?;
        let pd = ProtectionDomain::new(&ctx)?;
        let send_cq = CompletionQueue::new(&ctx, 32)?;
        let recv_cq = CompletionQueue::new(&ctx, 32)?;
        let qp = QpBuilder::rc(&pd, &send_cq, &recv_cq)
            .caps(QpCaps {
                max_send_wr: 16,
                max_recv_wr: 2,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            })
            .send_ops(SendOps::SEND | SendOps::RDMA_READ | SendOps::RDMA_WRITE)
            .build()?;
        let remote =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        let mut conn = Conn {
            qp,
            send_cq,
            recv_cq,
            recv: MemoryRegion::new(&pd, INFO_LEN, AccessFlags::LOCAL_WRITE)?,
            send: MemoryRegion::new(&pd, INFO_LEN, AccessFlags::LOCAL_WRITE)?,
            rdma: MemoryRegion::new(&pd, cfg.size, remote)?,
            start: if cfg.server {
                None
            } else {
                Some(MemoryRegion::new(&pd, cfg.size, remote)?)
            },
            debug: cfg.debug,
        };
        id.init_qp(&conn.qp)?;
        conn.post_recv()?;
        Ok(conn)
    }

    fn post_recv(&mut self) -> Res {
        let sge = self.recv.sge(..)?;
        // SAFETY: `recv` is dropped after the QP (field order), and read
        // only after this receive's completion has been polled; nothing
        // else writes it.
        unsafe { self.qp.post_recv(0, &[sge])? };
        Ok(())
    }

    /// Waits for the peer's next 16-byte message, then posts the next
    /// receive; `None` when the id reported a disconnect instead.
    fn recv_info(&mut self, id: &CmId) -> Res<Option<(u64, u32, u32)>> {
        let wc = loop {
            match self.recv_cq.wait(1, Duration::from_millis(200)) {
                Ok(wcs) => break wcs[0].ok()?,
                Err(Error::Timeout { .. }) => {
                    if let Some(ev) = id.try_get_event()? {
                        if self.debug {
                            println!("cma_event type {}", ev.kind());
                        }
                        if ev.kind() == CmEventKind::Disconnected {
                            return Ok(None);
                        }
                    }
                }
                Err(e) => return Err(e.into()),
            }
        };
        if wc.byte_len as usize != INFO_LEN {
            return Err(format!("Received bogus data, size {}", wc.byte_len).into());
        }
        let b = self.recv.to_vec(..)?;
        self.post_recv()?;
        let addr = u64::from_be_bytes(b[0..8].try_into().expect("8 bytes"));
        let rkey = u32::from_be_bytes(b[8..12].try_into().expect("4 bytes"));
        let len = u32::from_be_bytes(b[12..16].try_into().expect("4 bytes"));
        if self.debug {
            println!("Received rkey {rkey:x} addr {addr:x} len {len} from peer");
        }
        Ok(Some((addr, rkey, len)))
    }

    /// SENDs the send buffer (16 bytes) and waits for its completion.
    fn send_info(&mut self, info: Option<(u64, u32, u32)>) -> Res {
        if let Some((addr, rkey, len)) = info {
            let mut b = [0u8; INFO_LEN];
            b[0..8].copy_from_slice(&addr.to_be_bytes());
            b[8..12].copy_from_slice(&rkey.to_be_bytes());
            b[12..16].copy_from_slice(&len.to_be_bytes());
            self.send.write_at(0, &b)?;
        }
        let send = &self.send;
        let wcs = self.qp.post_and_wait(&mut self.send_cq, STEP, |b| {
            b.wr(1).send().sge(send.sge(..)?)
        })?;
        wcs[0].ok()?;
        Ok(())
    }
}

/// The ping's data: `"rdma-ping-%d: "`, then letters from `start` cycling
/// through `A`..=`z`, NUL-terminated at `size` bytes.
fn ping_data(ping: u64, start: u8, size: usize) -> Vec<u8> {
    let mut b = format!("rdma-ping-{}: ", ping as i32).into_bytes();
    b.truncate(size - 1);
    let mut c = start;
    while b.len() < size {
        b.push(c);
        c = if c >= 122 { 65 } else { c + 1 };
    }
    b[size - 1] = 0;
    b
}

/// The text of a NUL-terminated buffer.
fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// rping's connection parameters.
fn conn_param() -> ConnParam {
    ConnParam::new()
        .responder_resources(1)
        .initiator_depth(1)
        .retry_count(7)
        .rnr_retry_count(7)
}

fn client(cfg: &Cfg) -> Res {
    let dst = SocketAddr::new(cfg.addr.expect("checked by parse"), cfg.port);
    let id = CmId::new()?;
    let src = cfg.source.map(|ip| SocketAddr::new(ip, 0));
    id.resolve_addr(src, dst, Duration::from_millis(2000))?;
    id.resolve_route(Duration::from_millis(2000))?;
    let mut conn = Conn::new(&id, cfg)?;
    id.connect(&conn.qp, &conn_param(), STEP)?;
    if cfg.debug {
        println!("rdma_connect successful");
    }
    let mut start = 65u8;
    let mut ping = 0u64;
    while cfg.count == 0 || ping < cfg.count {
        let data = ping_data(ping, start, cfg.size);
        start = if start >= 122 { 65 } else { start + 1 };
        let src = conn.start.as_mut().expect("a client has a source buffer");
        src.write_at(0, &data)?;
        let (addr, rkey) = (src.addr(), src.rkey());
        conn.send_info(Some((addr, rkey, cfg.size as u32)))?;
        // The server read the source and says go ahead.
        if conn.recv_info(&id)?.is_none() {
            eprintln!("client DISCONNECT EVENT...");
            return Ok(());
        }
        let (addr, rkey) = (conn.rdma.addr(), conn.rdma.rkey());
        conn.send_info(Some((addr, rkey, cfg.size as u32)))?;
        // The server wrote the sink and says so.
        if conn.recv_info(&id)?.is_none() {
            eprintln!("client DISCONNECT EVENT...");
            return Ok(());
        }
        let got = conn.rdma.to_vec(..)?;
        if cfg.validate && got != data {
            return Err("data mismatch!".into());
        }
        if cfg.verbose {
            println!("ping data: {}", c_str(&got));
        }
        ping += 1;
    }
    id.disconnect()?;
    conn.qp.to_error()?;
    Ok(())
}

fn server(cfg: &Cfg) -> Res {
    let ip = cfg.addr.unwrap_or(IpAddr::from([0, 0, 0, 0]));
    let listener = CmId::new()?;
    listener.listen(SocketAddr::new(ip, cfg.port), 3)?;
    let req = listener.get_request(None)?;
    if cfg.debug {
        println!("connect request from {:?}", req.id().peer_addr());
    }
    let mut conn = Conn::new(req.id(), cfg)?;
    let id = req.accept(&conn.qp, &conn_param(), STEP)?;
    let mut start = 65u8;
    let mut ping = 0u64;
    loop {
        // The client's source buffer.
        let Some((addr, rkey, len)) = conn.recv_info(&id)? else {
            eprintln!("server DISCONNECT EVENT...");
            break;
        };
        let len = len as usize;
        if len > cfg.size {
            return Err(format!(
                "the client's ping is {len} bytes, more than this server's -S {}",
                cfg.size
            )
            .into());
        }
        let remote = RemoteBuf {
            addr,
            len: len as u64,
            rkey,
        };
        let rdma = &mut conn.rdma;
        let wcs = conn.qp.post_and_wait(&mut conn.send_cq, STEP, |b| {
            b.wr(2).rdma_read(remote).sge(rdma.sge_mut(..len)?)
        })?;
        wcs[0].ok()?;
        let got = conn.rdma.to_vec(..len)?;
        if cfg.verbose {
            println!("server ping data: {}", c_str(&got));
        }
        if cfg.validate && got != ping_data(ping, start, len) {
            return Err(format!("data mismatch in ping {ping}").into());
        }
        start = if start >= 122 { 65 } else { start + 1 };
        ping += 1;
        if !go_ahead(&mut conn, &id)? {
            break;
        }
        // The client's sink buffer.
        let Some((addr, rkey, sink_len)) = conn.recv_info(&id)? else {
            eprintln!("server DISCONNECT EVENT...");
            break;
        };
        // rping writes what it read, up to and with its NUL.
        let n = got.iter().position(|&c| c == 0).map_or(len, |p| p + 1);
        let n = n.min(sink_len as usize);
        let remote = RemoteBuf {
            addr,
            len: sink_len.into(),
            rkey,
        };
        let rdma = &conn.rdma;
        let wcs = conn.qp.post_and_wait(&mut conn.send_cq, STEP, |b| {
            b.wr(3).rdma_write(remote).sge(rdma.sge(..n)?)
        })?;
        wcs[0].ok()?;
        if !go_ahead(&mut conn, &id)? {
            break;
        }
    }
    conn.qp.to_error()?;
    drop(id);
    Ok(())
}

/// The server's "go ahead" SEND; `false` when it did not complete because
/// the client has disconnected.
///
/// rping's C server posts this SEND and waits for the client's next message
/// or its disconnect, never for the SEND's own completion. That completion
/// can fail to come although the client got the message: the responder may
/// report the receive before it acknowledges it, and a client that leaves
/// at once (after its last ping) moves its QP to ERR before the
/// acknowledgement goes out; this side then retransmits into a QP that
/// answers nothing until its retries run out. Waited for here, such a SEND
/// ends in a timeout or a retry error: an error only if the client is still
/// connected.
fn go_ahead(conn: &mut Conn, id: &CmId) -> Res<bool> {
    let Err(e) = conn.send_info(None) else {
        return Ok(true);
    };
    // A client that left has sent its disconnect request well before a
    // SEND's wait times out or its retries run out.
    match id.wait_disconnected(Duration::from_millis(200)) {
        Ok(()) => {
            eprintln!("server DISCONNECT EVENT...");
            Ok(false)
        }
        Err(_) => Err(e),
    }
}
