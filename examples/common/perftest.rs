//! perftest's rdma_cm protocol: what `ib_write_bw -R` says on the wire, so
//! that an example can run against it either way round. Written from
//! perftest 6.06 (`perftest_communication.c`, `write_bw.c`), the version
//! Debian 12 ships as `perftest 4.5+0.17`.
//!
//! With `-R`, perftest makes two rdma_cm connections to the same port
//! (default 18515), both RC, port space `RDMA_PS_TCP`, without private
//! data, responder resources and initiator depth 0, 7 retries and 7 RNR
//! retries:
//!
//! - the *communication* connection ([`Comm`]), whose QP carries every
//!   exchange as one SEND into the peer's one pre-posted receive of 56
//!   bytes (`sizeof(struct pingpong_dest)`). In each exchange the client
//!   sends first and the server answers with as many bytes
//!   (`ctx_xchg_data`, `ctx_hand_shake`); each side posts its receive
//!   before connecting and posts it again as soon as a message has come,
//!   before it sends anything, so the peer's SEND always finds one;
//! - the *data* connection, the QP the test runs on: the server closes its
//!   first listener once the communication connection is accepted and
//!   listens on the same port again when the data connection is due; the
//!   client retries while it is not listening yet.
//!
//! The messages, in order (each both ways):
//!
//! 1. the versions: 16 bytes, a NUL-padded string; perftest 6.06 exits
//!    when the peer's (read as `atof` reads it) is below 5.70;
//! 2. the "system data": the cycle buffer (perftest's page size) and the
//!    cache line size, 4 bytes each, big-endian; both sides then use the
//!    larger of each;
//! 3. the MTU: 2 bytes, the `enum ibv_mtu` value as decimal text and its
//!    NUL (`"3"` for 1024); both sides keep the smaller (with rdma_cm the
//!    CM's path sets the data QP's MTU: the exchange only reports it);
//! 4. a handshake of zeros (`struct pingpong_dest`, 56 bytes, below);
//! 5. the data connection, then a handshake of zeros again;
//! 6. three handshakes with each side's data QP: QPN, rkey and the address
//!    of the memory the peer writes to;
//! 7. the test: the client writes; the server waits in its next handshake;
//! 8. a handshake when the client is done, the bandwidth reports
//!    (`xchg_bw_reports`: size, iterations, peak and average bandwidth in
//!    MB/s of 2^20 bytes and message rate in Mpps, 8 bytes each,
//!    big-endian, the numbers as IEEE doubles but for the first two), and
//!    the closing handshake;
//! 9. the client disconnects the data connection and waits for its
//!    `RDMA_CM_EVENT_DISCONNECTED`; the server disconnects it too.
//!
//! The client writes `-n` times `-s` bytes, write `k` at offset
//! `(k mod slots) * stride` of the server's memory: the stride is the size
//! rounded up to the cache line size, the slots as many as fit the cycle
//! buffer (one, at offset 0, when the size is above half the cycle
//! buffer). The server's memory is at least the larger of the size and the
//! cycle buffer ([`Layout`]).
//!
//! perftest does not check what arrives; nor can an example that runs
//! against it.

use crate::common::Failure;
use mlx5dv::cm::{CmEventKind, CmId, ConnParam};
use mlx5dv::*;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// perftest's port (`DEF_PORT`).
pub const DEFAULT_PORT: u16 = 18515;
/// The version this side announces: perftest's, which the peer needs to be
/// at least 5.70. What follows a space is for the peer to recognise this
/// program; perftest reads only the number.
pub const VERSION: &str = "6.06";
/// `MAX_VERSION`: the version message's size.
const VERSION_LEN: usize = 16;
/// `sizeof(struct pingpong_dest)`: the largest message, and every receive.
pub const DEST_LEN: usize = 56;
/// The page size this side offers as its cycle buffer (perftest offers
/// `sysconf(_SC_PAGESIZE)`; both use the larger).
pub const CYCLE_BUFFER: u32 = 4096;
/// The cache line size this side offers (perftest's default; both use the
/// larger).
pub const CACHE_LINE: u32 = 64;
/// How long one exchange, connection step or the data connection's
/// arrival may take.
pub const STEP: Duration = Duration::from_secs(60);
/// How long a client tries to reach its server's first (exchange)
/// connection: one attempt, as perftest's `rdma_client_connect` makes.
pub const CONNECT_WITHIN: Duration = Duration::ZERO;
/// How long a client keeps trying to reach the data connection, which the
/// server listens for only after the exchanges: about a second, as
/// perftest's `retry_rdma_connect` (10 attempts 100 ms apart).
pub const DATA_CONNECT_WITHIN: Duration = Duration::from_secs(1);

/// rdma_cm's parameters for both of perftest's connections (an RDMA write
/// test): no RDMA reads either way, 7 retries, 7 RNR retries.
pub fn conn_param() -> ConnParam {
    ConnParam::new()
        .responder_resources(0)
        .initiator_depth(0)
        .retry_count(7)
        .rnr_retry_count(7)
}

/// Connects a new id to `dst`, trying again while the server is not
/// listening yet (rejected, unreachable, timed out), for at most `within`.
/// `make` builds, on each new id's device, what the connection needs; `qp`
/// finds its QP. Returns them with the connected id.
pub fn connect_retry<T>(
    dst: SocketAddr,
    within: Duration,
    mut make: impl FnMut(&CmId) -> Result<T, Failure>,
    qp: impl Fn(&T) -> &RcQp,
) -> Result<(T, CmId), Failure> {
    let deadline = Instant::now() + within;
    loop {
        let id = CmId::new()?;
        let attempt = id
            .resolve_addr(None, dst, Duration::from_secs(2))
            .and_then(|()| id.resolve_route(Duration::from_secs(2)));
        let err = match attempt {
            Ok(()) => {
                let made = make(&id)?;
                match id.connect(qp(&made), &conn_param(), STEP) {
                    Ok(_) => return Ok((made, id)),
                    Err(e) => e,
                }
            }
            Err(e) => e,
        };
        let again = matches!(
            err,
            Error::Rejected { .. } | Error::Cm { .. } | Error::Timeout { .. }
        );
        if !again || Instant::now() >= deadline {
            return Err(Failure::Failed(if within.is_zero() {
                format!("cannot connect to {dst} through rdma_cm: {err}")
            } else {
                format!(
                    "cannot connect to {dst} through rdma_cm within {} ms: {err}",
                    within.as_millis()
                )
            }));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Listens on `port` of every address, takes one connect request (waiting
/// at most `wait`; `None`: for ever), builds what the connection needs on
/// its device with `make` and accepts it with the QP `qp` finds. The
/// listener is closed before returning, as perftest closes it, so the port
/// can be listened on again.
pub fn accept_one<T>(
    port: u16,
    wait: Option<Duration>,
    make: impl FnOnce(&CmId) -> Result<T, Failure>,
    qp: impl Fn(&T) -> &RcQp,
) -> Result<(T, CmId), Failure> {
    let listener = CmId::new()?;
    listener.listen(SocketAddr::from(([0, 0, 0, 0], port)), 1)?;
    let req = listener.get_request(wait)?;
    let made = make(req.id())?;
    let id = req.accept(qp(&made), &conn_param(), STEP)?;
    drop(listener);
    Ok((made, id))
}

/// Waits up to `within` for `RDMA_CM_EVENT_DISCONNECTED` of `id` (the
/// peer's answer to this side's disconnect, or its own), passing over its
/// other events.
pub fn await_disconnect(id: &CmId, within: Duration) -> Result<(), Failure> {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if id.get_event(Some(left))?.kind() == CmEventKind::Disconnected {
            return Ok(());
        }
    }
}

/// `struct pingpong_dest`: a QP's connection data, 56 bytes, every field
/// big-endian. With rdma_cm the CM connects the QPs; what counts is the
/// rkey and the address of the memory the peer writes to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dest {
    /// The port's LID (0 on RoCE).
    pub lid: u32,
    /// RDMA reads in flight (reads only).
    pub out_reads: u32,
    /// The data QP's number.
    pub qpn: u32,
    /// A packet sequence number (unused with rdma_cm: the CM chooses).
    pub psn: u32,
    /// The rkey of the memory the peer writes to.
    pub rkey: u32,
    /// The address of the memory the peer writes to.
    pub vaddr: u64,
    /// The GID (printed only).
    pub gid: [u8; 16],
    /// An SRQ number (XRC and DC only).
    pub srqn: u32,
    /// The GID index (not read by the peer).
    pub gid_index: i32,
}

impl Dest {
    /// The wire form: the C struct's layout (4 bytes of padding before
    /// `vaddr`), each field big-endian.
    pub fn to_bytes(self) -> [u8; DEST_LEN] {
        let mut b = [0u8; DEST_LEN];
        b[0..4].copy_from_slice(&self.lid.to_be_bytes());
        b[4..8].copy_from_slice(&self.out_reads.to_be_bytes());
        b[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        b[12..16].copy_from_slice(&self.psn.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b[32..48].copy_from_slice(&self.gid);
        b[48..52].copy_from_slice(&self.srqn.to_be_bytes());
        b[52..56].copy_from_slice(&self.gid_index.to_be_bytes());
        b
    }

    /// Reads the fields perftest reads (`rdma_read_keys`): all but `srqn`
    /// and `gid_index`.
    pub fn from_bytes(b: &[u8; DEST_LEN]) -> Dest {
        let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Dest {
            lid: u32_at(0),
            out_reads: u32_at(4),
            qpn: u32_at(8),
            psn: u32_at(12),
            rkey: u32_at(16),
            vaddr: u64::from_be_bytes(b[24..32].try_into().expect("8 bytes")),
            gid: b[32..48].try_into().expect("16 bytes"),
            srqn: 0,
            gid_index: 0,
        }
    }

    /// This side's connection data: the data QP `qp` of `id`, and the
    /// memory `mr` the peer writes to.
    pub fn of(id: &CmId, qp: &RcQp, mr: &MemoryRegion, psn: u32) -> Result<Dest, Failure> {
        let lid = id.context()?.query_port(id.port_num())?.lid;
        let gid = match id.local_addr() {
            Some(SocketAddr::V4(a)) => a.ip().to_ipv6_mapped().octets(),
            Some(SocketAddr::V6(a)) => a.ip().octets(),
            None => [0; 16],
        };
        Ok(Dest {
            lid: u32::from(lid),
            out_reads: 1,
            qpn: qp.qp_num(),
            psn,
            rkey: mr.rkey(),
            vaddr: mr.addr(),
            gid,
            ..Dest::default()
        })
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

    /// The byte ranges `writes` writes cover.
    pub fn written(&self, writes: u64) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
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

/// The communication QP's objects. Fields drop in order: the QP before the
/// memory its work requests use.
pub struct CommQp {
    qp: RcQp,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    recv: MemoryRegion,
    send: MemoryRegion,
}

impl CommQp {
    /// The QP and its two 56-byte buffers on `id`'s device, in INIT with
    /// its receive posted (before connecting, as perftest does).
    pub fn new(id: &CmId) -> Result<CommQp, Failure> {
        let ctx = id.context()?;
        let pd = ProtectionDomain::new(&ctx)?;
        let send_cq = CompletionQueue::new(&ctx, 4)?;
        let recv_cq = CompletionQueue::new(&ctx, 4)?;
        let qp = QpBuilder::rc(&pd, &send_cq, &recv_cq)
            .caps(QpCaps {
                max_send_wr: 2,
                max_recv_wr: 2,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            })
            .send_ops(SendOps::SEND)
            .build()?;
        let mut c = CommQp {
            qp,
            send_cq,
            recv_cq,
            recv: MemoryRegion::new(&pd, DEST_LEN, AccessFlags::LOCAL_WRITE)?,
            send: MemoryRegion::new(&pd, DEST_LEN, AccessFlags::LOCAL_WRITE)?,
        };
        id.init_qp(&c.qp)?;
        c.post_recv()?;
        Ok(c)
    }

    /// The QP, for the CM to connect.
    pub fn qp(&self) -> &RcQp {
        &self.qp
    }

    fn post_recv(&mut self) -> Result<(), Failure> {
        let sge = self.recv.sge(..)?;
        // SAFETY: `recv` is dropped after the QP (field order) and read
        // only after this receive's completion has been polled; nothing
        // else writes it.
        unsafe { self.qp.post_recv(0, &[sge])? };
        Ok(())
    }
}

/// The communication connection: perftest's exchanges over SEND and
/// RECV. Fields drop in order: the QP and its memory, then the id (which
/// disconnects).
pub struct Comm {
    c: CommQp,
    id: CmId,
    client: bool,
}

impl Comm {
    /// The client's end: connects to `dst` ([`CONNECT_WITHIN`]: once, as
    /// perftest's client does; its server must be started first).
    pub fn connect(dst: SocketAddr) -> Result<Comm, Failure> {
        let (c, id) = connect_retry(dst, CONNECT_WITHIN, CommQp::new, CommQp::qp)?;
        Ok(Comm {
            c,
            id,
            client: true,
        })
    }

    /// The server's end: waits for a client on `port`.
    pub fn accept(port: u16) -> Result<Comm, Failure> {
        let (c, id) = accept_one(port, None, CommQp::new, CommQp::qp)?;
        Ok(Comm {
            c,
            id,
            client: false,
        })
    }

    /// The connection's id.
    pub fn id(&self) -> &CmId {
        &self.id
    }

    /// SENDs `data` (at most [`DEST_LEN`] bytes) and waits for its
    /// completion: one half of an exchange.
    pub fn send(&mut self, data: &[u8]) -> Result<(), Failure> {
        self.c.send.write_at(0, data)?;
        let send = &self.c.send;
        let wcs = self.c.qp.post_and_wait(&mut self.c.send_cq, STEP, |b| {
            b.wr(5).send().sge(send.sge(..data.len())?)
        })?;
        wcs[0].ok()?;
        Ok(())
    }

    /// Waits for the peer's message of `len` bytes (at most `wait`; `None`:
    /// until the peer disconnects), then posts the receive again: the other
    /// half.
    pub fn recv(
        &mut self,
        len: usize,
        what: &str,
        wait: Option<Duration>,
    ) -> Result<Vec<u8>, Failure> {
        let deadline = wait.map(|w| Instant::now() + w);
        let wc = loop {
            match self.c.recv_cq.wait(1, Duration::from_millis(200)) {
                Ok(wcs) => break wcs[0],
                Err(Error::Timeout { .. }) => {
                    if let Some(ev) = self.id.try_get_event()? {
                        if ev.kind() == CmEventKind::Disconnected {
                            return Err(Failure::Failed(format!(
                                "the peer disconnected while this side waited for its {what}"
                            )));
                        }
                    }
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Err(Failure::Failed(format!(
                            "no {what} from the peer within {} s",
                            wait.unwrap_or_default().as_secs()
                        )));
                    }
                }
                Err(e) => return Err(e.into()),
            }
        };
        let wc = wc.ok()?;
        if wc.byte_len as usize != len {
            return Err(Failure::Failed(format!(
                "the peer's {what} is {} bytes, not {len}: not perftest's protocol",
                wc.byte_len
            )));
        }
        let data = self.c.recv.to_vec(..len)?;
        self.c.post_recv()?;
        Ok(data)
    }

    /// One exchange of as many bytes each way (`ctx_xchg_data`): the
    /// client sends first, the server answers.
    pub fn xchg(
        &mut self,
        mine: &[u8],
        what: &str,
        wait: Option<Duration>,
    ) -> Result<Vec<u8>, Failure> {
        if self.client {
            self.send(mine)?;
            self.recv(mine.len(), what, wait)
        } else {
            let theirs = self.recv(mine.len(), what, wait)?;
            self.send(mine)?;
            Ok(theirs)
        }
    }

    /// `ctx_hand_shake`: the two sides' [`Dest`]s.
    pub fn hand_shake(&mut self, mine: &Dest, wait: Option<Duration>) -> Result<Dest, Failure> {
        let b = self.xchg(&mine.to_bytes(), "connection data", wait)?;
        Ok(Dest::from_bytes(
            b.as_slice().try_into().expect("DEST_LEN bytes"),
        ))
    }

    /// The data QPs' connection data, exchanged three times as perftest
    /// does (once, again "on the remote side", and once more "after moving
    /// the QP to RTR"), both printed; returns the peer's.
    pub fn connection_data(&mut self, mine: &Dest) -> Result<Dest, Failure> {
        let theirs = self.hand_shake(mine, Some(STEP))?;
        mine.print("local");
        self.hand_shake(mine, Some(STEP))?;
        theirs.print("remote");
        self.hand_shake(mine, Some(STEP))
    }

    /// `exchange_versions` and `check_version_compatibility`: sends
    /// `ours` (at most 15 bytes), returns the peer's; refuses a peer below
    /// 5.70, as perftest does.
    pub fn exchange_versions(&mut self, ours: &str) -> Result<String, Failure> {
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
    pub fn check_sys_data(&mut self, ours: SysData) -> Result<SysData, Failure> {
        let mut num = |v: u32, what| -> Result<u32, Failure> {
            let b = self.xchg(&v.to_be_bytes(), what, Some(STEP))?;
            let theirs = i32::from_be_bytes(b.as_slice().try_into().expect("4 bytes"));
            Ok(u32::try_from(theirs).unwrap_or(0).max(v))
        };
        Ok(SysData {
            cycle_buffer: num(ours.cycle_buffer, "cycle buffer size")?,
            cache_line: num(ours.cache_line, "cache line size")?,
        })
    }

    /// `check_mtu`: the smaller of the two sides' MTUs.
    pub fn check_mtu(&mut self, ours: Mtu) -> Result<Mtu, Failure> {
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
    pub fn xchg_bw_reports(&mut self, ours: &BwReport) -> Result<BwReport, Failure> {
        let mut word = |v: u64, what| -> Result<u64, Failure> {
            let b = self.xchg(&v.to_be_bytes(), what, Some(STEP))?;
            Ok(u64::from_be_bytes(
                b.as_slice().try_into().expect("8 bytes"),
            ))
        };
        let size = word(ours.size, "report (size)")?;
        let iters = word(ours.iters, "report (iterations)")?;
        let peak = word(ours.bw_peak.to_bits(), "report (peak bandwidth)")?;
        let avg = word(ours.bw_avg.to_bits(), "report (average bandwidth)")?;
        let rate = word(ours.msg_rate.to_bits(), "report (message rate)")?;
        Ok(BwReport {
            size,
            iters,
            bw_peak: f64::from_bits(peak),
            bw_avg: f64::from_bits(avg),
            msg_rate: f64::from_bits(rate),
        })
    }
}

/// The number at the start of `s`, as C's `atof` reads a version
/// (`"6.06 rc_write"` is 6.06); 0 when there is none.
fn atof(s: &str) -> f64 {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    s[..end].parse().unwrap_or(0.0)
}
