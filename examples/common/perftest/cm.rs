//! perftest's exchanges over rdma_cm (`ib_write_bw -R`): the messages
//! of [`super`] as SENDs over an rdma_cm connection of their own.
//!
//! With `-R`, perftest makes two rdma_cm connections to the same port
//! (default 18515), both RC, port space `RDMA_PS_TCP`, without private
//! data, responder resources and initiator depth 0, 7 retries and 7 RNR
//! retries:
//!
//! - the *communication* connection ([`Comm`]), whose QP carries every
//!   exchange as one SEND into the peer's one pre-posted receive of 56
//!   bytes (`sizeof(struct pingpong_dest)`); each side posts its receive
//!   before connecting and posts it again as soon as a message has come,
//!   before it sends anything, so the peer's SEND always finds one;
//! - the *data* connection, the QP the test runs on: the server closes its
//!   first listener once the communication connection is accepted and
//!   listens on the same port again when the data connection is due; the
//!   client retries while it is not listening yet.
//!
//! After the versions, system data and MTU: a handshake of zeros
//! (`struct pingpong_dest`, 56 bytes, every field big-endian), the data
//! connection, a handshake of zeros again, three handshakes with each
//! side's data QP (with rdma_cm the CM connects the QPs: what counts is
//! the rkey and the address of the memory the peer writes to), the test,
//! the closing exchanges of [`super`]; then the client disconnects the
//! data connection and waits for its `RDMA_CM_EVENT_DISCONNECTED`; the
//! server disconnects it too. With rdma_cm the CM's path sets the data
//! QP's MTU: the MTU exchange only reports it.

use super::{Dest, Exchange, STEP};
use crate::common::Failure;
use mlx5dv::cm::{CmEventKind, CmId, ConnParam};
use mlx5dv::*;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// `sizeof(struct pingpong_dest)`: the largest message, and every receive.
pub const DEST_LEN: usize = 56;
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

/// The wire form of [`Dest`] over rdma_cm: the C struct, 56 bytes, every
/// field big-endian. With rdma_cm the CM connects the QPs; what counts is
/// the rkey and the address of the memory the peer writes to.
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

    /// `ctx_hand_shake`: the two sides' [`Dest`]s.
    pub fn hand_shake(&mut self, mine: &Dest, wait: Option<Duration>) -> Result<Dest, Failure> {
        let b = self.xchg(&mine.to_bytes(), "connection data", wait)?;
        Ok(Dest::from_bytes(&super::to_array(&b)))
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
}

impl Exchange for Comm {
    fn is_client(&self) -> bool {
        self.client
    }

    /// SENDs `data` (at most [`DEST_LEN`] bytes) and waits for its
    /// completion: one half of an exchange.
    fn send(&mut self, data: &[u8]) -> Result<(), Failure> {
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
    fn recv(&mut self, len: usize, what: &str, wait: Option<Duration>) -> Result<Vec<u8>, Failure> {
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
}
