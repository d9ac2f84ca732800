//! What rdma-core's pingpong tools (`ibv_rc_pingpong`, `ibv_srq_pingpong`)
//! share and the examples that speak their protocol share with them: the
//! 52-byte address message, the TCP exchange of one or more of them, one
//! signalled send, the check of a received message and the closing report.

use super::{connect_options, open_device, val, Cli, Failure, Opt};
use mlx5dv::*;
use std::io::{Read, Write};
use std::time::Duration;

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
    pub fn from_wire(msg: &[u8]) -> Result<Dest, Failure> {
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

/// Reads `n` address messages.
fn read_dests(s: &mut impl Read, n: usize) -> Result<Vec<Dest>, Failure> {
    let mut msg = [0u8; MSG_LEN];
    (0..n)
        .map(|i| {
            s.read_exact(&mut msg)
                .map_err(|e| format!("couldn't read remote address [{i}]: {e}"))?;
            Dest::from_wire(&msg)
        })
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
/// messages as `mine` has, connects its QPs to them with `connect` (so
/// that they are ready before the client's first send), sends `mine`,
/// reads the client's "done".
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

/// Posts one signalled send of `mr[..size]`, with id `wr_id`, through a
/// batch.
pub fn post_send(qp: &mut RcQp, mr: &MemoryRegion, size: usize, wr_id: u64) -> Result<(), Failure> {
    let mut batch = qp.batch();
    batch.wr(wr_id).signaled().send().sge(mr.sge(0..size)?)?;
    // SAFETY: the send buffer is never written after it was filled, and
    // lives until after the QP is destroyed (declared before it).
    unsafe { batch.complete()? };
    Ok(())
}

/// Checks message `n`, received into slot `slot` of `mr` (slots of `size`
/// bytes): `byte_len` bytes, each `payload`.
pub fn check_message(
    mr: &MemoryRegion,
    (slot, size): (usize, usize),
    byte_len: u32,
    n: u64,
    payload: u8,
) -> Result<(), Failure> {
    if byte_len as usize != size {
        return Err(Failure::Failed(format!(
            "message {n}: {byte_len} bytes received, {size} expected (use the same -s on both sides)"
        )));
    }
    // SAFETY: the slot's receive has completed and it is not posted again
    // until this check is done: the device does not write these bytes now
    // (it may write other slots, which this slice does not cover).
    let data = unsafe {
        std::slice::from_raw_parts((mr.addr() as usize + slot * size) as *const u8, size)
    };
    if let Some(at) = data.iter().position(|&b| b != payload) {
        return Err(Failure::Failed(format!(
            "message {n}: byte {at} is {:#04x}, expected {payload:#04x}",
            data[at]
        )));
    }
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
