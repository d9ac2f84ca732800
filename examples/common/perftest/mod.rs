//! perftest's protocol: what `ib_write_bw` says to its peer before, after
//! and around its RDMA writes, so that an example can run against it
//! either way round. Written from perftest 6.06 (`perftest_communication.c`,
//! `perftest_resources.c`, `write_bw.c`), the version Debian 12 ships as
//! `perftest 4.5+0.17`.
//!
//! perftest carries its exchanges one of two ways:
//!
//! - by default over one TCP connection (port 18515, `-p`), each message
//!   as bytes on the stream ([`tcp`]): `rc_write --perftest` and
//!   `dc_write --perftest` against `ib_write_bw` and `ib_write_bw -c DC`;
//! - with `-R`, as SENDs over an rdma_cm connection of their own (`cm`,
//!   feature `rdma-cm`): `rc_write -R` against `ib_write_bw -R`.
//!
//! Either way, every exchange is `ctx_xchg_data`'s: the client sends its
//! message first, the server reads it and answers with one as long. The
//! messages, in order:
//!
//! 1. the versions: 16 bytes, a NUL-padded string; perftest 6.06 exits
//!    when the peer's (read as `atof` reads it) is below 5.70;
//! 2. the "system data": the cycle buffer (perftest's page size) and the
//!    cache line size, 4 bytes each, big-endian; both sides then use the
//!    larger of each ([`SysData`]);
//! 3. the MTU: 2 bytes, the `enum ibv_mtu` value as decimal text and its
//!    NUL (`"3"` for 1024); both sides keep the smaller;
//! 4. the QPs' connection data (`struct pingpong_dest`, [`Dest`]: LID,
//!    QPN, PSN, the rkey and address of the memory the peer writes to,
//!    GID), in handshakes (`ctx_hand_shake`) whose form differs between
//!    the two ways (text over TCP, the C struct over rdma_cm);
//! 5. the test: the client writes; the server waits in its next handshake;
//! 6. a handshake when the client is done, the bandwidth reports
//!    (`xchg_bw_reports`, [`BwReport`]) and a closing handshake.
//!
//! The client writes `-n` times `-s` bytes, write `k` at offset
//! `(k mod slots) * stride` of the server's memory ([`Layout`]).
//!
//! perftest does not check what arrives, and fills its client's memory
//! with `rand()` bytes: what a target can check of perftest's writes is
//! [`check_target`]'s. Between two examples (each knows the other by the
//! name after its version number) the client then sends its seed and the
//! server checks every byte ([`answer_seed`], [`ask_verdict`]), before the
//! closing handshake; perftest never sees that message.

#![allow(dead_code)] // not every example uses every item

mod check;
#[cfg(feature = "rdma-cm")]
pub mod cm;
pub mod tcp;

pub use check::*;

use crate::common::Failure;
use mlx5dv::*;
use std::ops::Range;
use std::time::Duration;

/// perftest's port (`DEF_PORT`), for both ways of exchanging.
pub const DEFAULT_PORT: u16 = 18515;
/// The version this side announces: perftest's, which the peer needs to be
/// at least 5.70. What follows a space is for the peer to recognise this
/// program; perftest reads only the number.
pub const VERSION: &str = "6.06";
/// `MAX_VERSION`: the version message's size.
const VERSION_LEN: usize = 16;
/// The page size this side offers as its cycle buffer (perftest offers
/// `sysconf(_SC_PAGESIZE)`; both use the larger).
pub const CYCLE_BUFFER: u32 = 4096;
/// The cache line size this side offers (perftest's default; both use the
/// larger).
pub const CACHE_LINE: u32 = 64;
/// How long one exchange or connection step may take.
pub const STEP: Duration = Duration::from_secs(60);
/// The DC access key of perftest's DCTs (`DC_KEY` of
/// `perftest_resources.c`): its DCIs present it, and it is not exchanged.
pub const DC_KEY: u64 = 0xffee_ddcc;
/// What an example announces as its version: perftest's number, which
/// perftest reads, and the example's name, by which another run of it
/// knows it (`6.06 rc_write`).
pub fn version(prog: &str) -> String {
    format!("{VERSION} {prog}")
}

/// `struct pingpong_dest`: a QP's connection data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dest {
    /// The port's LID (0 on RoCE).
    pub lid: u32,
    /// RDMA reads in flight (the peer's `max_rd_atomic`).
    pub out_reads: u32,
    /// The QP's number (a DCT's number on a DC server).
    pub qpn: u32,
    /// The QP's first packet sequence number.
    pub psn: u32,
    /// The rkey of the memory the peer writes to.
    pub rkey: u32,
    /// The address of the memory the peer writes to.
    pub vaddr: u64,
    /// The GID (zero without one: InfiniBand without `-x`).
    pub gid: [u8; 16],
    /// An SRQ number (XRC and DC only; not read by a DC writer).
    pub srqn: u32,
    /// The GID index (not read by the peer).
    pub gid_index: i32,
}

impl Dest {
    /// This side's connection data: QP `qpn` sending from `psn` on the
    /// port and GID of `opts`, and the memory `mr` the peer writes to.
    pub fn local(
        ctx: &Context,
        opts: &ConnectOptions,
        qpn: u32,
        psn: u32,
        mr: &MemoryRegion,
    ) -> Result<Dest, Failure> {
        let gid = match opts.gid_index {
            Some(i) => ctx.gid(opts.port, u32::from(i))?.0,
            None => [0; 16],
        };
        Ok(Dest {
            lid: u32::from(ctx.query_port(opts.port)?.lid),
            out_reads: 1,
            qpn,
            psn,
            rkey: mr.rkey(),
            vaddr: mr.addr(),
            gid,
            srqn: 0,
            gid_index: opts.gid_index.map_or(-1, i32::from),
        })
    }

    /// The peer's RC QP as the crate connects to it; a LID beyond 16 bits
    /// is refused.
    pub fn endpoint(&self) -> Result<Endpoint, Failure> {
        Ok(Endpoint {
            lid: self.lid16()?,
            qpn: self.qpn,
            psn: self.psn,
            gid: Gid(self.gid),
        })
    }

    /// The LID, which must fit 16 bits.
    pub fn lid16(&self) -> Result<u16, Failure> {
        u16::try_from(self.lid).map_err(|_| {
            Failure::Failed(format!(
                "the peer's LID {:#x} is beyond 16 bits: not perftest's connection data",
                self.lid
            ))
        })
    }

    /// The memory the peer offers, `len` bytes of it.
    pub fn remote(&self, len: usize) -> RemoteBuf {
        RemoteBuf {
            addr: self.vaddr,
            rkey: self.rkey,
            len: len as u64,
        }
    }

    /// perftest's line for it (`ctx_print_pingpong_data` of a write test).
    pub fn print(&self, side: &str) {
        println!(
            " {side} address: LID {:#04x} QPN {:#06x} PSN {:#06x} RKey {:#08x} VAddr {:#016x}",
            self.lid, self.qpn, self.psn, self.rkey, self.vaddr
        );
        let gid: Vec<String> = self.gid.iter().map(|b| format!("{b:02}")).collect();
        println!(" GID: {}", gid.join(":"));
    }
}

/// The cycle buffer and cache line size both sides use (the larger of each
/// side's), and where write `k` goes.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// Bytes per write.
    pub size: usize,
    /// Distinct offsets the writes cycle through.
    pub slots: u64,
    /// Bytes between two slots.
    pub stride: usize,
    /// Bytes of the target's memory the writes may reach: the larger of
    /// the size and the cycle buffer (`BUFF_SIZE`).
    pub len: usize,
}

impl Layout {
    /// perftest's layout of writes of `size` bytes (`increase_rem_addr`):
    /// a stride of the size rounded up to the cache line (`INC`), as many
    /// slots as fit the cycle buffer; all at 0 when the size is above half
    /// the cycle buffer.
    pub fn new(size: usize, sys: SysData) -> Layout {
        let cycle = sys.cycle_buffer as usize;
        let line = (sys.cache_line as usize).max(1);
        let len = size.max(cycle);
        if size > cycle / 2 {
            return Layout {
                size,
                slots: 1,
                stride: 0,
                len,
            };
        }
        let stride = size.div_ceil(line).max(1) * line;
        Layout {
            size,
            slots: (cycle / stride).max(1) as u64,
            stride,
            len,
        }
    }

    /// The offset of write `k` in the target's memory.
    pub fn offset(&self, k: u64) -> usize {
        (k % self.slots) as usize * self.stride
    }

    /// The byte ranges `writes` writes cover, in ascending order.
    pub fn written(&self, writes: u64) -> impl Iterator<Item = Range<usize>> + '_ {
        (0..writes.min(self.slots)).map(|k| self.offset(k)..self.offset(k) + self.size)
    }
}

/// The "system data" of `check_sys_data`.
#[derive(Clone, Copy, Debug)]
pub struct SysData {
    /// The cycle buffer: the span the writes cycle through.
    pub cycle_buffer: u32,
    /// The cache line size: the writes' alignment.
    pub cache_line: u32,
}

/// A bandwidth report (`struct bw_report_data`, the fields
/// `xchg_bw_reports` exchanges).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BwReport {
    /// Bytes per write.
    pub size: u64,
    /// Writes done.
    pub iters: u64,
    /// Peak bandwidth, MB/s (2^20 bytes).
    pub bw_peak: f64,
    /// Average bandwidth, MB/s (2^20 bytes).
    pub bw_avg: f64,
    /// Message rate, millions per second.
    pub msg_rate: f64,
}

impl BwReport {
    /// The report of `iters` writes of `size` bytes in `elapsed`; the peak
    /// is the average (this side does not time each write).
    pub fn new(size: usize, iters: u64, elapsed: Duration) -> BwReport {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let bw = size as f64 * iters as f64 / secs / 1048576.0;
        BwReport {
            size: size as u64,
            iters,
            bw_peak: bw,
            bw_avg: bw,
            msg_rate: iters as f64 / secs / 1e6,
        }
    }

    /// Prints it as perftest does (`RESULT_FMT`, `REPORT_FMT`).
    pub fn print(&self) {
        let line = "-".repeat(87);
        println!("{line}");
        println!(
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        );
        println!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}            {:<7.6}",
            self.size, self.iters, self.bw_peak, self.bw_avg, self.msg_rate
        );
        println!("{line}");
    }
}

/// What the opening exchanges settle.
pub struct Peer {
    /// The peer's version text (`6.06`, or `6.06 rc_write` from an example).
    pub version: String,
    /// Both sides' cycle buffer and cache line size.
    pub sys: SysData,
    /// The smaller of the two MTUs.
    pub mtu: Mtu,
}

impl Peer {
    /// Whether the peer announced itself as the example `prog`.
    pub fn is(&self, prog: &str) -> bool {
        self.version.split_whitespace().nth(1) == Some(prog)
    }
}

/// One way of carrying perftest's exchanges (`ctx_xchg_data`): the
/// client sends first, the server answers with as many bytes.
pub trait Exchange {
    /// Whether this end is the client's.
    fn is_client(&self) -> bool;

    /// Sends one message (at most 56 bytes).
    fn send(&mut self, data: &[u8]) -> Result<(), Failure>;

    /// Receives the peer's message of `len` bytes, waiting at most `wait`
    /// (`None`: until the peer goes away). `what` names it in errors.
    fn recv(&mut self, len: usize, what: &str, wait: Option<Duration>) -> Result<Vec<u8>, Failure>;

    /// One exchange of as many bytes each way.
    fn xchg(
        &mut self,
        mine: &[u8],
        what: &str,
        wait: Option<Duration>,
    ) -> Result<Vec<u8>, Failure> {
        if self.is_client() {
            self.send(mine)?;
            self.recv(mine.len(), what, wait)
        } else {
            let theirs = self.recv(mine.len(), what, wait)?;
            self.send(mine)?;
            Ok(theirs)
        }
    }

    /// One exchange of a big-endian 8-byte number.
    fn xchg_u64(&mut self, v: u64, what: &str) -> Result<u64, Failure> {
        let b = self.xchg(&v.to_be_bytes(), what, Some(STEP))?;
        Ok(u64::from_be_bytes(to_array(&b)))
    }

    /// The opening exchanges: the versions (`ours`, at most 15 bytes), the
    /// system data and the MTU (`mtu`, this side's).
    fn settle(&mut self, ours: &str, mtu: Mtu) -> Result<Peer, Failure> {
        let version = self.exchange_versions(ours)?;
        let sys = self.check_sys_data(SysData {
            cycle_buffer: CYCLE_BUFFER,
            cache_line: CACHE_LINE,
        })?;
        let mtu = self.check_mtu(mtu)?;
        Ok(Peer { version, sys, mtu })
    }

    /// `exchange_versions` and `check_version_compatibility`: sends
    /// `ours`, returns the peer's; refuses a peer below 5.70, as perftest
    /// does.
    fn exchange_versions(&mut self, ours: &str) -> Result<String, Failure> {
        let mut v = [0u8; VERSION_LEN];
        let n = ours.len().min(VERSION_LEN - 1);
        v[..n].copy_from_slice(&ours.as_bytes()[..n]);
        let theirs = self.xchg(&v, "version", Some(STEP))?;
        let end = theirs.iter().position(|&b| b == 0).unwrap_or(theirs.len());
        let theirs = String::from_utf8_lossy(&theirs[..end]).into_owned();
        if atof(&theirs) < 5.70 {
            return Err(Failure::Failed(format!(
                "the peer's version {theirs:?} is older than 5.70, which perftest refuses"
            )));
        }
        Ok(theirs)
    }

    /// `check_sys_data`: both sides' cycle buffer and cache line size,
    /// the larger of each.
    fn check_sys_data(&mut self, ours: SysData) -> Result<SysData, Failure> {
        let mut num = |v: u32, what| -> Result<u32, Failure> {
            let b = self.xchg(&v.to_be_bytes(), what, Some(STEP))?;
            let theirs = i32::from_be_bytes(to_array(&b));
            Ok(u32::try_from(theirs).unwrap_or(0).max(v))
        };
        Ok(SysData {
            cycle_buffer: num(ours.cycle_buffer, "cycle buffer size")?,
            cache_line: num(ours.cache_line, "cache line size")?,
        })
    }

    /// `check_mtu`: the smaller of the two sides' MTUs.
    fn check_mtu(&mut self, ours: Mtu) -> Result<Mtu, Failure> {
        let code = ours as u32;
        let text = [b'0' + code as u8, 0];
        let b = self.xchg(&text, "MTU", Some(STEP))?;
        let theirs = std::str::from_utf8(&b[..1])
            .ok()
            .and_then(|t| t.parse::<u32>().ok())
            .and_then(|c| Mtu::from_raw(c).ok());
        Ok(match theirs {
            Some(t) if (t as u32) < code => t,
            _ => ours,
        })
    }

    /// `xchg_bw_reports`: each side's bandwidth report.
    fn xchg_bw_reports(&mut self, ours: &BwReport) -> Result<BwReport, Failure> {
        Ok(BwReport {
            size: self.xchg_u64(ours.size, "report (size)")?,
            iters: self.xchg_u64(ours.iters, "report (iterations)")?,
            bw_peak: f64::from_bits(
                self.xchg_u64(ours.bw_peak.to_bits(), "report (peak bandwidth)")?,
            ),
            bw_avg: f64::from_bits(
                self.xchg_u64(ours.bw_avg.to_bits(), "report (average bandwidth)")?,
            ),
            msg_rate: f64::from_bits(
                self.xchg_u64(ours.msg_rate.to_bits(), "report (message rate)")?,
            ),
        })
    }
}

/// `b` as an array of `N` bytes: every caller has received exactly `N`
/// ([`Exchange::recv`] checks the length).
pub(crate) fn to_array<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    a.copy_from_slice(&b[..N]);
    a
}

/// The number at the start of `s`, as C's `atof` reads a version
/// (`"6.06 rc_write"` is 6.06); 0 when there is none.
fn atof(s: &str) -> f64 {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    s[..end].parse().unwrap_or(0.0)
}

/// A random seed for the writer's pattern.
pub fn seed() -> u8 {
    (crate::common::random_psn() % 251) as u8
}
