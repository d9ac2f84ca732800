//! What travels between hosts: a request packet from a requester QP (or
//! DCI) to a responder QP (DCT, UD QP), and the responder's answer.
//!
//! A message longer than [`CHUNK`] bytes travels as several packets, each
//! with its own PSN and acknowledgement (the requester sends the next one
//! when the last is acknowledged). The encoding is private to the fabric
//! (both ends run the same library): little-endian fields, a version byte
//! first; a datagram that does not decode is dropped, as a corrupt packet.

/// The most payload bytes one packet carries.
pub const CHUNK: usize = 64 * 1024;
/// The largest datagram (payload and headers).
pub const MAX_DATAGRAM: usize = CHUNK + 512;
const VERSION: u8 = 2;

/// The PSN after `psn` (24 bits, wrapping).
pub fn next_psn(psn: u32) -> u32 {
    psn.wrapping_add(1) & 0xff_ffff
}

/// The transport a request travels on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Reliable connected.
    Rc,
    /// Unreliable connected (no answer).
    Uc,
    /// Dynamically connected (DCI to DCT).
    Dc,
    /// Unreliable datagram (no answer).
    Ud,
    /// XRC (initiator to target QP): answered as RC; the packet's XRC
    /// header names the SRQ it lands in.
    Xrc {
        /// The XRC SRQ number (XRCETH).
        srqn: u32,
    },
}

/// The operation of a request packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Part of an RDMA write (with immediate on its last packet).
    Write {
        /// First packet of the message.
        first: bool,
        /// R_Key.
        rkey: u32,
        /// Remote address of this packet's bytes.
        raddr: u64,
        /// Immediate data (last packet only).
        imm: Option<[u8; 4]>,
        /// The whole message's length (for the immediate's completion).
        total: u32,
        /// The bytes.
        data: Vec<u8>,
    },
    /// An RDMA read of `len` (at most [`CHUNK`]) bytes.
    Read {
        /// R_Key.
        rkey: u32,
        /// Remote address.
        raddr: u64,
        /// Length.
        len: u32,
    },
    /// Part of a send.
    Send {
        /// First packet of the message.
        first: bool,
        /// Last packet of the message.
        last: bool,
        /// Immediate data (send with immediate).
        imm: Option<[u8; 4]>,
        /// The R_Key to invalidate (send with invalidate).
        inv: Option<u32>,
        /// The bytes.
        data: Vec<u8>,
    },
    /// An 8-byte atomic.
    Atomic {
        /// Compare-and-swap (else fetch-and-add).
        cs: bool,
        /// R_Key.
        rkey: u32,
        /// Remote address.
        raddr: u64,
        /// Swap value or addend.
        swap_add: u64,
        /// Compare value.
        compare: u64,
    },
}

/// A request packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Sending host.
    pub src_host: u16,
    /// Sending QP (DCI).
    pub src_qpn: u32,
    /// Destination QP (DCT number, UD QP).
    pub dst_qpn: u32,
    /// Packet sequence number.
    pub psn: u32,
    /// Transport.
    pub transport: Transport,
    /// DC access key (DC).
    pub dc_key: u64,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Solicited event requested.
    pub solicited: bool,
    /// The operation.
    pub op: Op,
}

/// A responder's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Done; read data or an atomic's original value.
    Ack(Vec<u8>),
    /// Refused with this completion syndrome (the requester's error).
    Nak(u8, String),
    /// Receiver not ready: retry after the RNR timer of this code.
    Rnr(u8),
}

/// An answer packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The requester QP it answers.
    pub dst_qpn: u32,
    /// The PSN of the request it answers.
    pub psn: u32,
    /// The answer.
    pub reply: Reply,
}

/// A decoded datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packet {
    /// A request.
    Request(Request),
    /// An answer.
    Response(Response),
}

struct W(Vec<u8>);

impl W {
    fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    fn opt4(&mut self, v: Option<[u8; 4]>) -> &mut Self {
        match v {
            Some(b) => {
                self.u8(1);
                self.0.extend(b);
            }
            None => {
                self.u8(0).u32(0);
            }
        }
        self
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.u32(b.len() as u32);
        self.0.extend_from_slice(b);
        self
    }
}

struct R<'a>(&'a [u8]);

impl R<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (h, t) = self.0.split_first_chunk::<N>()?;
        self.0 = t;
        Some(*h)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn flag(&mut self) -> Option<bool> {
        match self.u8()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
    fn opt4(&mut self) -> Option<Option<[u8; 4]>> {
        let some = self.flag()?;
        let b = self.take::<4>()?;
        // Absent: the 4 bytes are zero, as written (one encoding a packet).
        (some || b == [0; 4]).then_some(some.then_some(b))
    }
    fn bytes(&mut self) -> Option<Vec<u8>> {
        let n = self.u32()? as usize;
        if n > self.0.len() {
            return None;
        }
        let (h, t) = self.0.split_at(n);
        self.0 = t;
        Some(h.to_vec())
    }
}

fn transport_code(t: Transport) -> u8 {
    match t {
        Transport::Rc => 0,
        Transport::Uc => 1,
        Transport::Dc => 2,
        Transport::Ud => 3,
        Transport::Xrc { .. } => 4,
    }
}

impl Packet {
    /// The datagram's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = W(Vec::with_capacity(64));
        w.u8(VERSION);
        match self {
            Packet::Request(r) => {
                w.u8(0)
                    .u16(r.src_host)
                    .u32(r.src_qpn)
                    .u32(r.dst_qpn)
                    .u32(r.psn)
                    .u8(transport_code(r.transport));
                if let Transport::Xrc { srqn } = r.transport {
                    w.u32(srqn);
                }
                w.u64(r.dc_key).u32(r.qkey).u8(u8::from(r.solicited));
                match &r.op {
                    Op::Write {
                        first,
                        rkey,
                        raddr,
                        imm,
                        total,
                        data,
                    } => {
                        w.u8(0)
                            .u8(u8::from(*first))
                            .u32(*rkey)
                            .u64(*raddr)
                            .opt4(*imm)
                            .u32(*total);
                        w.bytes(data);
                    }
                    Op::Read { rkey, raddr, len } => {
                        w.u8(1).u32(*rkey).u64(*raddr).u32(*len);
                    }
                    Op::Send {
                        first,
                        last,
                        imm,
                        inv,
                        data,
                    } => {
                        w.u8(2)
                            .u8(u8::from(*first))
                            .u8(u8::from(*last))
                            .opt4(*imm)
                            .opt4(inv.map(u32::to_be_bytes));
                        w.bytes(data);
                    }
                    Op::Atomic {
                        cs,
                        rkey,
                        raddr,
                        swap_add,
                        compare,
                    } => {
                        w.u8(3)
                            .u8(u8::from(*cs))
                            .u32(*rkey)
                            .u64(*raddr)
                            .u64(*swap_add)
                            .u64(*compare);
                    }
                }
            }
            Packet::Response(r) => {
                w.u8(1).u32(r.dst_qpn).u32(r.psn);
                match &r.reply {
                    Reply::Ack(d) => {
                        w.u8(0).bytes(d);
                    }
                    Reply::Nak(s, why) => {
                        w.u8(1).u8(*s).bytes(why.as_bytes());
                    }
                    Reply::Rnr(t) => {
                        w.u8(2).u8(*t);
                    }
                }
            }
        }
        w.0
    }

    /// Decodes a datagram (`None`: not one of ours, or corrupt).
    pub fn decode(b: &[u8]) -> Option<Packet> {
        let mut r = R(b);
        if r.u8()? != VERSION {
            return None;
        }
        let p = match r.u8()? {
            0 => {
                let src_host = r.u16()?;
                let src_qpn = r.u32()?;
                let dst_qpn = r.u32()?;
                let psn = r.u32()?;
                let transport = match r.u8()? {
                    0 => Transport::Rc,
                    1 => Transport::Uc,
                    2 => Transport::Dc,
                    3 => Transport::Ud,
                    4 => Transport::Xrc { srqn: r.u32()? },
                    _ => return None,
                };
                let dc_key = r.u64()?;
                let qkey = r.u32()?;
                let solicited = r.flag()?;
                let op = match r.u8()? {
                    0 => Op::Write {
                        first: r.flag()?,
                        rkey: r.u32()?,
                        raddr: r.u64()?,
                        imm: r.opt4()?,
                        total: r.u32()?,
                        data: r.bytes()?,
                    },
                    1 => Op::Read {
                        rkey: r.u32()?,
                        raddr: r.u64()?,
                        len: r.u32()?,
                    },
                    2 => Op::Send {
                        first: r.flag()?,
                        last: r.flag()?,
                        imm: r.opt4()?,
                        inv: r.opt4()?.map(u32::from_be_bytes),
                        data: r.bytes()?,
                    },
                    3 => Op::Atomic {
                        cs: r.flag()?,
                        rkey: r.u32()?,
                        raddr: r.u64()?,
                        swap_add: r.u64()?,
                        compare: r.u64()?,
                    },
                    _ => return None,
                };
                Packet::Request(Request {
                    src_host,
                    src_qpn,
                    dst_qpn,
                    psn,
                    transport,
                    dc_key,
                    qkey,
                    solicited,
                    op,
                })
            }
            1 => {
                let dst_qpn = r.u32()?;
                let psn = r.u32()?;
                let reply = match r.u8()? {
                    0 => Reply::Ack(r.bytes()?),
                    1 => Reply::Nak(r.u8()?, String::from_utf8(r.bytes()?).ok()?),
                    2 => Reply::Rnr(r.u8()?),
                    _ => return None,
                };
                Packet::Response(Response {
                    dst_qpn,
                    psn,
                    reply,
                })
            }
            _ => return None,
        };
        r.0.is_empty().then_some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(op: Op) -> Packet {
        Packet::Request(Request {
            src_host: 3,
            src_qpn: 0x101,
            dst_qpn: 0x202,
            psn: 0xabcdef,
            transport: Transport::Dc,
            dc_key: 0x1122_3344_5566_7788,
            qkey: 0x8000_0000,
            solicited: true,
            op,
        })
    }

    #[test]
    fn every_packet_decodes_to_itself() {
        let packets = [
            req(Op::Write {
                first: true,
                rkey: 1,
                raddr: 2,
                imm: Some([1, 2, 3, 4]),
                total: 3,
                data: vec![9; 3],
            }),
            req(Op::Read {
                rkey: 1,
                raddr: 2,
                len: 77,
            }),
            req(Op::Send {
                first: true,
                last: false,
                imm: None,
                inv: Some(0x1234),
                data: vec![],
            }),
            req(Op::Atomic {
                cs: true,
                rkey: 5,
                raddr: 8,
                swap_add: u64::MAX,
                compare: 7,
            }),
            Packet::Request(Request {
                transport: Transport::Xrc { srqn: 0x41 },
                ..match req(Op::Send {
                    first: true,
                    last: true,
                    imm: Some([5, 6, 7, 8]),
                    inv: None,
                    data: vec![1, 2, 3],
                }) {
                    Packet::Request(r) => r,
                    Packet::Response(_) => unreachable!("req builds a request"),
                }
            }),
            Packet::Response(Response {
                dst_qpn: 4,
                psn: 5,
                reply: Reply::Ack(vec![1, 2]),
            }),
            Packet::Response(Response {
                dst_qpn: 4,
                psn: 5,
                reply: Reply::Nak(0x13, "why".into()),
            }),
            Packet::Response(Response {
                dst_qpn: 4,
                psn: 5,
                reply: Reply::Rnr(12),
            }),
        ];
        for p in packets {
            let b = p.encode();
            assert_eq!(Packet::decode(&b), Some(p.clone()));
            // Every truncation is refused, never misread.
            for n in 0..b.len() {
                assert_eq!(Packet::decode(&b[..n]), None, "{p:?} cut at {n}");
            }
        }
        assert_eq!(Packet::decode(&[2, 0]), None);
    }
}
