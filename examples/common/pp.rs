//! What rdma-core's pingpong tools (`ibv_rc_pingpong`, `ibv_uc_pingpong`,
//! `ibv_srq_pingpong`, `ibv_ud_pingpong`, `ibv_xsrq_pingpong`) have in
//! common, and so the examples that speak their protocol: the usage text
//! and the option lines that read the same, the shared options and what
//! they say, the address message (`struct pingpong_dest`) and the TCP
//! exchange of one or more of them, and the closing report.

use super::{connect_options, open_device, val, Cli, Failure, Opt};
use mlx5dv::*;
use std::io::{Read, Write};
use std::time::Duration;

/// The sends' work-request id; a receive's is its buffer slot.
pub const SEND_WRID: u64 = 1 << 32;
/// How long a loop waits without any completion before it gives up.
pub const STALL: Duration = Duration::from_secs(60);

/// The usage text of `prog`, the port of rdma-core's `tool`: how to start
/// a server and a client (which tries its server once), then `options`,
/// the option lines.
pub fn usage(prog: &str, tool: &str, options: &[&str]) -> String {
    // The client's second line lines up under "connect".
    let indent = " ".repeat(prog.len() + 22);
    format!(
        "\
Usage:
  {prog} [OPTIONS]          start a server and wait for connection
  {prog} [OPTIONS] HOST     connect to the server at HOST (start the
{indent}server first: no retry, as {tool})

Wire-compatible with rdma-core's {tool}.

Options:
{}
Exit status: 0 success, 1 failure, 2 bad usage.
",
        options.concat()
    )
}

/// The option lines that read the same in each tool's usage text.
pub mod line {
    pub const PORT: &str =
        "  -p, --port=PORT        listen on/connect to TCP port PORT (default 18515)\n";
    pub const IB_DEV: &str =
        "  -d, --ib-dev=DEV       use RDMA device DEV (default: the first found)\n";
    pub const IB_PORT: &str = "  -i, --ib-port=PORT     use port PORT of the device (default 1)\n";
    pub const SIZE: &str =
        "  -s, --size=SIZE        size of the messages to exchange (default 4096)\n";
    pub const MTU: &str = "  -m, --mtu=SIZE         path MTU (default 1024)\n";
    pub const RX_DEPTH: &str =
        "  -r, --rx-depth=DEPTH   number of receives to post at a time (default 500)\n";
    pub const ITERS: &str = "  -n, --iters=ITERS      number of exchanges (default 1000)\n";
    pub const SL: &str = "  -l, --sl=SL            service level (default 0)\n";
    pub const EVENTS: &str = "  -e, --events           sleep on CQ events (default poll)\n";
    pub const GID_IDX: &str = "  -g, --gid-idx=INDEX    local port GID index (needed on RoCE)\n";
    pub const HELP: &str = "  -h, --help             this text\n";
}

/// The options the C tools share besides `-d`, `-i` and `-g`
/// ([`Cli::parse_with_device`]): `-p -s -m -r -n -l`.
pub fn options() -> [Opt; 6] {
    [
        val('p', "port"),
        val('s', "size"),
        val('m', "mtu"),
        val('r', "rx-depth"),
        val('n', "iters"),
        val('l', "sl"),
    ]
}

/// What the shared options say, with the C tools' defaults, and the
/// connection options they make.
pub struct Config {
    pub tcp_port: u16,
    pub size: usize,
    pub rx_depth: u32,
    pub iters: u64,
    pub host: Option<String>,
    pub opts: ConnectOptions,
}

impl Config {
    /// Reads the shared options (a size, receive depth or port of 0 is bad
    /// usage, exit 2), runs `check` on the receive depth (a tool's own
    /// checks, made before the device as the C tool makes them), opens the
    /// device (`-d`, else the first) and makes the connection options as
    /// the C tools do: MTU 1024 unless `-m`, a GID only with `-g`, the SL
    /// of `-l`, no remote access.
    pub fn open(
        prog: &str,
        cli: &Cli,
        check: impl FnOnce(u32) -> Result<(), Failure>,
    ) -> Result<(Context, Config), Failure> {
        let ib_port: u8 = cli.num_or("ib-port", 1);
        let size: usize = cli.num_or("size", 4096);
        let rx_depth: u32 = cli.num_or("rx-depth", 500);
        if size == 0 || rx_depth == 0 || ib_port == 0 {
            super::usage_error(prog, "--size, --rx-depth and --ib-port must be at least 1");
        }
        // Every value read (and refused, exit 2) before the device is opened.
        let host = cli.host().map(str::to_string);
        let (gid_index, sl) = (cli.num("gid-idx"), cli.num_or("sl", 0));
        let (tcp_port, iters) = (cli.num_or("port", 18515), cli.num_or("iters", 1000));
        let mtu = cli.mtu().unwrap_or(Mtu::Mtu1024);
        check(rx_depth)?;
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
        };
        Ok((ctx, cfg))
    }

    /// The bytes of one receive slot per posted receive (`-s` × `-r`).
    pub fn recv_len(&self) -> Result<usize, Failure> {
        self.size
            .checked_mul(self.rx_depth as usize)
            .ok_or_else(|| Failure::Failed("--size × --rx-depth is too large".into()))
    }
}

/// The size of one address message, with its NUL:
/// `sizeof "0000:000000:000000:00000000000000000000000000000000"`.
pub const MSG_LEN: usize = 52;

/// What the two sides exchange for each QP (`struct pingpong_dest`).
#[derive(Clone, Copy, Default)]
pub struct Dest {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub gid: Gid,
}

impl Dest {
    /// This side of a QP, from its endpoint.
    pub fn of(e: &Endpoint) -> Dest {
        Dest {
            lid: e.lid,
            qpn: e.qpn,
            psn: e.psn,
            gid: e.gid,
        }
    }

    /// The peer's endpoint, to connect a QP to.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            qpn: self.qpn,
            psn: self.psn,
            lid: self.lid,
            gid: self.gid,
        }
    }

    /// The 52 bytes rdma-core sends: `"%04x:%06x:%06x:%s"` and a NUL.
    pub fn to_wire(self) -> [u8; MSG_LEN] {
        to_wire(&format!(
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn,
            self.psn,
            super::gid_to_hex(self.gid)
        ))
    }

    /// Reads what `sscanf(msg, "%x:%x:%x:%s")` reads.
    pub fn from_wire(msg: &[u8]) -> Result<Dest, Failure> {
        let (lid, [qpn, psn], gid) = from_wire(msg)?;
        Ok(Dest { lid, qpn, psn, gid })
    }

    /// The C tools' line: `"  local address:  LID 0x%04x, QPN 0x%06x,
    /// PSN 0x%06x, GID %s"` (`remote address: ` for the peer's).
    pub fn print(&self, who: &str) {
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

/// An address message of `N` bytes: `text` and NULs.
pub fn to_wire<const N: usize>(text: &str) -> [u8; N] {
    let mut msg = [0u8; N];
    msg[..text.len()].copy_from_slice(text.as_bytes());
    msg
}

/// Reads what `sscanf(msg, "%x:...:%x:%s")` reads from an address message
/// (up to its NUL): the LID, the `H` hex numbers after it, and the GID as
/// 32 hex digits.
pub fn from_wire<const H: usize>(msg: &[u8]) -> Result<(u16, [u32; H], Gid), Failure> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    let text = std::str::from_utf8(&msg[..end]).unwrap_or("");
    let bad = || Failure::Failed(format!("bad address message from the peer: {text:?}"));
    let mut parts = text.splitn(H + 2, ':');
    let mut hex = || u32::from_str_radix(parts.next().unwrap_or(""), 16).map_err(|_| bad());
    let lid = u16::try_from(hex()?).map_err(|_| bad())?;
    let mut fields = [0u32; H];
    for f in &mut fields {
        *f = hex()?;
    }
    let gid = parts.next().and_then(super::gid_from_hex).ok_or_else(bad)?;
    Ok((lid, fields, gid))
}

/// Reads one address message of `N` bytes: the `i`th of several, or with
/// `None` the only one.
pub fn read_wire<const N: usize>(s: &mut impl Read, i: Option<usize>) -> Result<[u8; N], Failure> {
    let mut msg = [0u8; N];
    s.read_exact(&mut msg).map_err(|e| match i {
        Some(i) => format!("couldn't read remote address [{i}]: {e}"),
        None => format!("couldn't read the remote address: {e}"),
    })?;
    Ok(msg)
}

/// Reads `n` address messages (numbered in errors when more than one).
fn read_dests(s: &mut impl Read, n: usize) -> Result<Vec<Dest>, Failure> {
    (0..n)
        .map(|i| Dest::from_wire(&read_wire::<MSG_LEN>(s, (n > 1).then_some(i))?))
        .collect()
}

/// Writes one address message per entry of `mine`.
fn write_dests(s: &mut impl Write, mine: &[Dest]) -> Result<(), Failure> {
    for d in mine {
        s.write_all(&d.to_wire())?;
    }
    Ok(())
}

/// The client's side of the exchange (`pp_client_exch_dest`): one attempt
/// to reach the server, as the C client makes; sends an address message
/// for each of `mine`, reads as many of the server's, says "done".
pub fn client_exchange(host: &str, port: u16, mine: &[Dest]) -> Result<Vec<Dest>, Failure> {
    let mut s = super::connect_to_server(host, port, super::Wait::Once)?;
    write_dests(&mut s, mine)?;
    let peers = read_dests(&mut s, mine.len())?;
    s.write_all(b"done\0")?;
    Ok(peers)
}

/// The server's side (`pp_server_exch_dest`): reads as many address
/// messages as `mine` has, connects its QPs to them (or makes its address
/// handle) with `connect` (so that they are ready before the client's
/// first send), sends `mine`, reads the client's "done".
pub fn server_exchange(
    port: u16,
    mine: &[Dest],
    connect: impl FnOnce(&[Dest]) -> Result<(), Failure>,
) -> Result<Vec<Dest>, Failure> {
    let mut s = super::accept_one(port)?;
    let peers = read_dests(&mut s, mine.len())?;
    connect(&peers)?;
    write_dests(&mut s, mine)?;
    // The client's "done"; the C client closes right after it.
    let done = super::read_some(&mut s, MSG_LEN)?;
    if !done.starts_with(b"done") {
        return Err(Failure::Failed(format!(
            "expected \"done\" from the client, got {:?}",
            String::from_utf8_lossy(&done)
        )));
    }
    Ok(peers)
}

/// The exchange of one address message each way: as the client when
/// `host` is given, else as the server, which first runs `connect` on the
/// peer's. Returns the peer's.
pub fn exchange_one(
    host: Option<&str>,
    port: u16,
    me: Dest,
    connect: impl FnOnce(&Dest) -> Result<(), Failure>,
) -> Result<Dest, Failure> {
    let peers = match host {
        Some(host) => client_exchange(host, port, &[me])?,
        None => server_exchange(port, &[me], |peers| connect(&peers[0]))?,
    };
    Ok(peers[0])
}

/// Posts the receive of buffer slot `slot` (slots of `size` bytes of
/// `mr`) on the SRQ. The callers declare the region before the SRQ, so
/// that it lives until after the SRQ is destroyed, and read a slot, if at
/// all, only after its receive's completion and before it is posted again.
pub fn post_srq_recv(
    srq: &SharedReceiveQueue,
    mr: &MemoryRegion,
    slot: usize,
    size: usize,
) -> Result<(), Failure> {
    let sge = mr.sge(slot * size..(slot + 1) * size)?;
    // SAFETY: as the callers keep it (above): the region outlives the SRQ,
    // and the device writes the slot only while no one reads it.
    unsafe { srq.post_recv(slot as u64, &[sge])? };
    Ok(())
}

/// The C tools' closing lines: bytes both ways in Mbit/s, and µs per
/// iteration.
pub fn report(size: usize, iters: u64, elapsed: Duration) {
    let secs = elapsed.as_secs_f64();
    let usec = secs * 1e6;
    let bytes = size as u64 * iters * 2;
    println!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {secs:.2} seconds = {:.2} usec/iter",
        usec / iters as f64
    );
}
