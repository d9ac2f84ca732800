//! The ping-pong of rdma-core's `ibv_rc_pingpong` and `ibv_uc_pingpong`,
//! for any connected transport (RC, UC): the command line, the TCP
//! exchange of addresses, the QP's connection and the message loop that
//! `examples/rc_pingpong.rs` and `examples/uc_pingpong.rs` share. What
//! differs, the QP, each passes in.

use super::{connect_options, flag, open_device, random_psn, val, Cli, Failure};
use mlx5dv::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The options both tools take besides `-d`, `-i`, `-g`.
pub const OPTIONS: &[super::Opt] = &[
    val('p', "port"),
    val('s', "size"),
    val('m', "mtu"),
    val('r', "rx-depth"),
    val('n', "iters"),
    val('l', "sl"),
    flag('e', "events"),
    flag('c', "chk"),
];

/// The usage text of `prog`, the port of rdma-core's `tool`.
pub fn usage(prog: &str, tool: &str) -> String {
    format!(
        "\
Usage:
  {prog} [OPTIONS]          start a server and wait for connection
  {prog} [OPTIONS] HOST     connect to the server at HOST (start the
                                 server first: no retry, as {tool})

Wire-compatible with rdma-core's {tool}.

{OPTION_LINES}
Exit status: 0 success, 1 failure, 2 bad usage.
"
    )
}

/// The option lines of the usage text.
const OPTION_LINES: &str = "\
Options:
  -p, --port=PORT        listen on/connect to TCP port PORT (default 18515)
  -d, --ib-dev=DEV       use RDMA device DEV (default: the first found)
  -i, --ib-port=PORT     use port PORT of the device (default 1)
  -s, --size=SIZE        size of the messages to exchange (default 4096)
  -m, --mtu=SIZE         path MTU (default 1024)
  -r, --rx-depth=DEPTH   number of receives to post at a time (default 500)
  -n, --iters=ITERS      number of exchanges (default 1000)
  -l, --sl=SL            service level (default 0)
  -e, --events           sleep on CQ events (default: poll)
  -g, --gid-idx=INDEX    local port GID index (needed on RoCE)
  -c, --chk              the C tools' data validation: the client zeroes
                         the first byte of each page of its buffer; each
                         side takes 0 or 0x7b there (with a C peer that
                         gives -c, give it here too)
  -h, --help             this text
";

/// The size of the exchange message, with its NUL:
/// `sizeof "0000:000000:000000:00000000000000000000000000000000"`.
const MSG_LEN: usize = 52;
/// The payload byte of rdma-core's tools.
const PAYLOAD: u8 = 0x7b;
/// The send's work-request id; a receive's is its buffer slot.
const SEND_WRID: u64 = 1 << 32;
/// How long the loop waits without any completion before it gives up.
const STALL: Duration = Duration::from_secs(60);

/// What the two sides exchange (`struct pingpong_dest`).
struct Dest {
    lid: u16,
    qpn: u32,
    psn: u32,
    gid: Gid,
}

impl Dest {
    /// The 52 bytes rdma-core sends: `"%04x:%06x:%06x:%s"` and a NUL.
    fn to_wire(&self) -> [u8; MSG_LEN] {
        let text = format!(
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn,
            self.psn,
            super::gid_to_hex(self.gid)
        );
        let mut msg = [0u8; MSG_LEN];
        msg[..text.len()].copy_from_slice(text.as_bytes());
        msg
    }

    /// Reads what `sscanf(msg, "%x:%x:%x:%s")` reads.
    fn from_wire(msg: &[u8]) -> Result<Dest, Failure> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end]).unwrap_or("");
        let bad = || Failure::Failed(format!("bad address message from the peer: {text:?}"));
        let mut parts = text.splitn(4, ':');
        let mut hex = || u32::from_str_radix(parts.next().unwrap_or(""), 16).map_err(|_| bad());
        let (lid, qpn, psn) = (hex()?, hex()?, hex()?);
        let gid = parts.next().and_then(super::gid_from_hex).ok_or_else(bad)?;
        Ok(Dest {
            lid: u16::try_from(lid).map_err(|_| bad())?,
            qpn,
            psn,
            gid,
        })
    }

    fn print(&self, who: &str) {
        println!(
            "  {who} address:{} LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
            if who == "local" { " " } else { "" },
            self.lid,
            self.qpn,
            self.psn,
            self.gid
        );
    }
}

/// What the command line asked for.
pub struct Config {
    tcp_port: u16,
    size: usize,
    rx_depth: u32,
    iters: u64,
    host: Option<String>,
    opts: ConnectOptions,
    /// `-e`: sleep on a completion channel rather than poll.
    events: bool,
    /// `-c`: the C tools' page-start bytes (see [`OPTION_LINES`]).
    chk: bool,
}

/// Reads the command line and opens the device.
pub fn config(prog: &str, cli: &Cli) -> Result<(Context, Config), Failure> {
    let ib_port: u8 = cli.num_or("ib-port", 1);
    let size: usize = cli.num_or("size", 4096);
    let rx_depth: u32 = cli.num_or("rx-depth", 500);
    if size == 0 || rx_depth == 0 || ib_port == 0 {
        super::usage_error(prog, "--size, --rx-depth and --ib-port must be at least 1");
    }
    let host = cli.host().map(str::to_string);
    // As the C tools: MTU 1024 unless -m, GID only with -g.
    let mtu = cli.mtu().unwrap_or(Mtu::Mtu1024);
    let (gid_index, sl) = (cli.num("gid-idx"), cli.num_or("sl", 0));
    let (tcp_port, iters) = (cli.num_or("port", 18515), cli.num_or("iters", 1000));
    let ctx = open_device(cli.text("ib-dev"))?;
    let mut opts = connect_options(&ctx, ib_port, None, Some(mtu))?;
    opts.gid_index = gid_index;
    opts.sl = sl;
    opts.access = AccessFlags::empty();
    let cfg = Config {
        tcp_port,
        size,
        rx_depth,
        iters,
        host,
        opts,
        events: cli.flag("events"),
        chk: cli.flag("chk"),
    };
    Ok((ctx, cfg))
}

/// The QP's sizes, as the C tools ask: one send, `rx_depth` receives.
pub fn caps(cfg: &Config) -> QpCaps {
    QpCaps {
        max_send_wr: 1,
        max_recv_wr: cfg.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// Runs the ping-pong on the QP `make_qp` builds (in RESET, on the one CQ
/// it is given, with [`caps`]).
pub fn run<T: Connected>(
    ctx: &Context,
    cfg: &Config,
    make_qp: impl FnOnce(&ProtectionDomain, &CompletionQueue) -> Result<QpEx<T>>,
) -> Result<(), Failure> {
    let pd = ProtectionDomain::new(ctx)?;
    // The memory: one send buffer, and one receive slot per posted receive.
    let mut send_mr = MemoryRegion::new(&pd, cfg.size, AccessFlags::LOCAL_WRITE)?;
    send_mr.as_mut_slice()?.fill(PAYLOAD);
    if cfg.chk && cfg.host.is_some() {
        // What the C client does with -c: byte i / page_size % 1, a zero,
        // at the start of each page.
        for b in send_mr.as_mut_slice()?.iter_mut().step_by(page_size()) {
            *b = 0;
        }
    }
    let recv_len = cfg
        .size
        .checked_mul(cfg.rx_depth as usize)
        .ok_or("--size × --rx-depth is too large".to_string())?;
    let recv_mr = MemoryRegion::new(&pd, recv_len, AccessFlags::LOCAL_WRITE)?;
    let channel = if cfg.events {
        Some(CompletionChannel::new(ctx)?)
    } else {
        None
    };
    let mut cq = match &channel {
        Some(ch) => CompletionQueue::with_channel(ctx, cfg.rx_depth + 2, ch)?,
        None => CompletionQueue::new(ctx, cfg.rx_depth + 2)?,
    };
    // Declared after the memory, so dropped (destroyed) before it.
    let mut qp = make_qp(&pd, &cq)?;
    qp.to_init(cfg.opts.port, cfg.opts.access)?;
    for slot in 0..cfg.rx_depth as usize {
        post_recv(&mut qp, &recv_mr, slot, cfg.size)?;
    }

    let me = {
        let e = qp.endpoint(random_psn(), &cfg.opts)?;
        Dest {
            lid: e.lid,
            qpn: e.qpn,
            psn: e.psn,
            gid: e.gid,
        }
    };
    me.print("local");
    let peer = match &cfg.host {
        Some(host) => client_exchange(host, cfg.tcp_port, &me)?,
        None => server_exchange(&qp, cfg, &me)?,
    };
    peer.print("remote");
    if cfg.host.is_some() {
        connect(&qp, cfg, &me, &peer)?;
    }

    // The loop of the C tools: a send goes out when the previous send and
    // a receive have both completed.
    const RECV: u8 = 1;
    const SEND: u8 = 2;
    let mut pending = RECV;
    if cfg.host.is_some() {
        post_send(&mut qp, &send_mr, cfg.size)?;
        pending |= SEND;
    }
    // What arrives with -c: the C client zeroes the first byte of each
    // page of its buffer, which is also where it receives, so the C
    // server, which receives into the buffer it sends from too, echoes
    // those zeros, until a message from this program (all 0x7b)
    // overwrites them: either byte is right there.
    let page_starts = if cfg.chk {
        PageStarts::ZeroOrPayload
    } else {
        PageStarts::Payload
    };
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    let mut last_progress = Instant::now();
    while rcnt < cfg.iters || scnt < cfg.iters {
        let wc = if cfg.events {
            // Sleeps on the channel while the CQ is empty.
            cq.wait(1, STALL)
                .map_err(|e| stalled(e.to_string(), scnt, rcnt, cfg))?[0]
        } else {
            let Some(wc) = super::poll_one(&mut cq)? else {
                if last_progress.elapsed() > STALL {
                    return Err(stalled("no completion".into(), scnt, rcnt, cfg));
                }
                std::hint::spin_loop();
                continue;
            };
            wc
        };
        last_progress = Instant::now();
        if !wc.status.is_success() {
            return Err(Failure::Failed(format!(
                "failed status {} for wr_id {:#x}",
                wc.status, wc.wr_id
            )));
        }
        if wc.wr_id == SEND_WRID {
            scnt += 1;
            pending &= !SEND;
        } else {
            let slot = wc.wr_id as usize;
            let m = Message {
                slot,
                size: cfg.size,
                byte_len: wc.byte_len,
                n: rcnt,
                page_starts,
            };
            check_message(&recv_mr, &m)?;
            post_recv(&mut qp, &recv_mr, slot, cfg.size)?;
            rcnt += 1;
            pending &= !RECV;
        }
        if scnt < cfg.iters && pending == 0 {
            post_send(&mut qp, &send_mr, cfg.size)?;
            pending = RECV | SEND;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let usec = secs * 1e6;
    let bytes = cfg.size as u64 * cfg.iters * 2;
    println!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{} iters in {secs:.2} seconds = {:.2} usec/iter",
        cfg.iters,
        usec / cfg.iters as f64
    );
    println!(
        "{rcnt} messages of {} bytes received and checked (every byte {PAYLOAD:#04x}{})",
        cfg.size,
        match page_starts {
            PageStarts::Payload => "",
            PageStarts::ZeroOrPayload => " but the first of each page, 0 or that",
        }
    );
    // The receives still posted are flushed when the QP is destroyed, on
    // drop, before the memory is deregistered.
    Ok(())
}

/// The error of a loop that waited [`STALL`] for a completion.
fn stalled(why: String, scnt: u64, rcnt: u64, cfg: &Config) -> Failure {
    Failure::Failed(format!(
        "{why} for {} s (sent {scnt}, received {rcnt} of {})",
        STALL.as_secs(),
        cfg.iters
    ))
}

/// The system's page size, what the C tools' `-c` counts in.
fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096).max(1)
}

/// The client's side of the exchange: sends its address, reads the
/// server's, says "done".
fn client_exchange(host: &str, port: u16, me: &Dest) -> Result<Dest, Failure> {
    // As the C client: one attempt, no retry (`pp_client_exch_dest`).
    let mut s = super::connect_to_server(host, port, super::Wait::Once)?;
    s.write_all(&me.to_wire())?;
    let mut msg = [0u8; MSG_LEN];
    s.read_exact(&mut msg)
        .map_err(|e| format!("couldn't read the remote address: {e}"))?;
    s.write_all(b"done\0")?;
    Dest::from_wire(&msg)
}

/// The server's side: reads the client's address, connects the QP (so it
/// is ready before the client's first send), sends its own, reads "done".
fn server_exchange<T: Connected>(qp: &QpEx<T>, cfg: &Config, me: &Dest) -> Result<Dest, Failure> {
    let mut s: TcpStream = super::accept_one(cfg.tcp_port)?;
    let mut msg = [0u8; MSG_LEN];
    s.read_exact(&mut msg)
        .map_err(|e| format!("couldn't read the remote address: {e}"))?;
    let peer = Dest::from_wire(&msg)?;
    connect(qp, cfg, me, &peer)?;
    s.write_all(&me.to_wire())?;
    // The client's "done"; the C client closes right after it.
    let done = super::read_some(&mut s, MSG_LEN)?;
    if !done.starts_with(b"done") {
        return Err(Failure::Failed(format!(
            "expected \"done\" from the client, got {:?}",
            String::from_utf8_lossy(&done)
        )));
    }
    Ok(peer)
}

/// INIT → RTR → RTS towards the peer (RTR and RTS with the transport's
/// attributes: for UC, no RNR timer, timeout or retries).
fn connect<T: Connected>(
    qp: &QpEx<T>,
    cfg: &Config,
    me: &Dest,
    peer: &Dest,
) -> Result<(), Failure> {
    let remote = Endpoint {
        qpn: peer.qpn,
        psn: peer.psn,
        lid: peer.lid,
        gid: peer.gid,
    };
    qp.to_rtr(&remote, &cfg.opts)?;
    qp.to_rts(me.psn, &cfg.opts)?;
    Ok(())
}

/// Posts the receive of buffer slot `slot`.
fn post_recv<T: Connected>(
    qp: &mut QpEx<T>,
    mr: &MemoryRegion,
    slot: usize,
    size: usize,
) -> Result<(), Failure> {
    let sge = mr.sge(slot * size..(slot + 1) * size)?;
    // SAFETY: the region lives until after the QP is destroyed (declared
    // before it); the slot is read only after this receive's completion and
    // before it is posted again.
    unsafe { qp.post_recv(slot as u64, &[sge])? };
    Ok(())
}

/// Posts one signalled send of the send buffer, through a batch.
fn post_send<T: Connected>(
    qp: &mut QpEx<T>,
    mr: &MemoryRegion,
    size: usize,
) -> Result<(), Failure> {
    let mut batch = qp.batch();
    batch
        .wr(SEND_WRID)
        .signaled()
        .send()
        .sge(mr.sge(0..size)?)?;
    // SAFETY: the send buffer is never written after it was filled, and
    // lives until after the QP is destroyed (declared before it).
    unsafe { batch.complete()? };
    Ok(())
}

/// What the first byte of each page of a received message holds.
#[derive(Clone, Copy, PartialEq)]
enum PageStarts {
    /// The payload byte, as every other (no `-c`).
    Payload,
    /// 0 (what the C client writes with `-c`, and the C server echoes)
    /// or the payload byte.
    ZeroOrPayload,
}

/// A received message to check.
struct Message {
    slot: usize,
    size: usize,
    byte_len: u32,
    /// Its number, for the error.
    n: u64,
    page_starts: PageStarts,
}

/// Checks the message received into its slot: its length and every byte.
fn check_message(mr: &MemoryRegion, m: &Message) -> Result<(), Failure> {
    let (n, size) = (m.n, m.size);
    if m.byte_len as usize != size {
        return Err(Failure::Failed(format!(
            "message {n}: {} bytes received, {size} expected (use the same -s on both sides)",
            m.byte_len
        )));
    }
    // SAFETY: the slot's receive has completed and it is not posted again
    // until this check is done: the device does not write these bytes now
    // (it may write other slots, which this slice does not cover).
    let data = unsafe {
        std::slice::from_raw_parts((mr.addr() as usize + m.slot * size) as *const u8, size)
    };
    let page = page_size();
    let ok = |i: usize, b: u8| match m.page_starts {
        PageStarts::ZeroOrPayload if i % page == 0 => b == 0 || b == PAYLOAD,
        _ => b == PAYLOAD,
    };
    if let Some(at) = (0..size).find(|&i| !ok(i, data[i])) {
        return Err(Failure::Failed(format!(
            "message {n}: byte {at} is {:#04x}, expected {PAYLOAD:#04x}{}",
            data[at],
            if at % page == 0 && data[at] == 0 {
                " (the peer's -c zeroes the first byte of each page: give -c here too)"
            } else {
                ""
            }
        )));
    }
    Ok(())
}
