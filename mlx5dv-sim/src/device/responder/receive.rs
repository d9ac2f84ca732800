//! Step 1 of the responder: the packet. Takes what other hosts sent from
//! the fabric and decodes it: an answer goes to its requester QP; a
//! request runs through the responder's steps ([`respond`]), in order:
//! the sender and PSN ([`super::sender`]), the key and access
//! ([`super::access`]), the execution ([`super::execute`]), the reply
//! ([`super::reply`]). UD datagrams are delivered or dropped, unanswered
//! ([`super::datagram`]).

use super::datagram::{ud_deliver, Datagram};
use super::{access, execute, reply, sender};
use crate::config::debug;
use crate::device::ud_grh::Route;
use crate::fabric::wire::{Op, Packet, Reply, Request, Response, Transport};
use crate::fabric::{self, Received};
use crate::model::state::{Device, QpKind};
use crate::model::wire::Source;

/// Receives what other hosts sent (at most `budget` datagrams): answers
/// go to their requester QPs, requests are served and answered.
///
/// The sender is the host the socket names (the kernel's word, which no
/// packet can change): a datagram from no host of the fabric, or a request
/// whose source field names another host than the one that sent it, is
/// dropped, as is a datagram longer than any packet (never cut to a
/// prefix) and one that does not decode.
pub fn receive(dev: &mut Device, budget: usize) -> usize {
    let Some(host) = fabric::joined() else {
        return 0;
    };
    // One buffer of the largest datagram for the device thread's life:
    // each step reads into it (zeroing 64 KiB a step costs an idle debug
    // build more than the rest of its step).
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with_borrow_mut(|buf| receive_into(dev, host, buf, budget))
}

fn receive_into(dev: &mut Device, host: &fabric::Host, buf: &mut Vec<u8>, budget: usize) -> usize {
    let mut n = 0;
    while n < budget {
        let Some(got) = host.recv(buf) else {
            break;
        };
        n += 1;
        let (len, from) = match got {
            Received::Datagram {
                len,
                from: Some(from),
            } => (len, from),
            Received::Datagram { len, from: None } => {
                debug!("a datagram of {len} bytes from no host of the fabric: dropped");
                continue;
            }
            Received::TooLong { len, from } => {
                debug!("a datagram of {len} bytes (longer than any packet) from {from:?}: dropped");
                continue;
            }
        };
        match Packet::decode(&buf[..len]) {
            Some(Packet::Response(r)) => answer_in(dev, from, r),
            Some(Packet::Request(r)) if r.src_host != from => debug!(
                "a request from host {from} that says it is from host {}: dropped",
                r.src_host
            ),
            Some(Packet::Request(r)) => {
                if let Some(resp) = respond(dev, r) {
                    reply::send(host, from, resp);
                }
            }
            None => debug!("a datagram of {len} bytes that is not a packet: dropped"),
        }
    }
    n
}

/// An answer from host `from`: kept for its requester QP if that QP has a
/// packet in flight to `from` with the answer's PSN; dropped otherwise (a
/// late duplicate, or an answer nobody asked for). At most one answer a
/// QP waits to be matched ([`QpWire::replies`](crate::model::wire::QpWire::replies)).
fn answer_in(dev: &mut Device, from: u16, r: Response) {
    let Some(q) = dev.qp_by_qpn(r.dst_qpn).and_then(|h| dev.qps.get_mut(&h)) else {
        debug!(
            "an answer for QP {:#x}, which is not here: dropped",
            r.dst_qpn
        );
        return;
    };
    let asked = q
        .wire
        .inflight
        .as_ref()
        .is_some_and(|f| f.to == from && f.sent.is_some() && r.psn == q.wire.next_psn);
    if !asked || q.wire.replies.len() >= MAX_REPLIES {
        debug!(
            "an answer from host {from} for QP {:#x} PSN {:#x}, which it did not ask for: dropped",
            r.dst_qpn, r.psn
        );
        return;
    }
    q.wire.replies.push(r);
}

/// The most answers a QP keeps unmatched: its one packet in flight has one
/// answer (a duplicate of it may come too).
const MAX_REPLIES: usize = 2;

/// Serves a request from another host; the answer to send back, if any.
pub fn respond(dev: &mut Device, r: Request) -> Option<Response> {
    match r.transport {
        Transport::Ud => {
            let Op::Send { imm, data, .. } = &r.op else {
                debug!("a UD packet that is not a send: dropped");
                return None;
            };
            let mtu = fabric::mtu();
            if data.len() > mtu {
                // No wire carries a datagram over the MTU; a sender's
                // device fails such a send itself (local length error).
                debug!("a UD datagram of {} bytes > MTU {mtu}: dropped", data.len());
                return None;
            }
            let from = Datagram {
                src_host: r.src_host,
                src_qpn: r.src_qpn,
                route: Route::unpack(r.dc_key),
                solicited: r.solicited,
            };
            ud_deliver(dev, r.dst_qpn, r.qkey, &from, *imm, data);
            None
        }
        Transport::Uc => {
            if matches!(r.op, Op::Read { .. } | Op::Atomic { .. }) {
                // UC has no reads or atomics: an opcode it does not take
                // is dropped silently (IBA 9.6.1.1; rxe drops it too), and
                // the QP stays as it was.
                debug!("an RDMA read or atomic on UC QP {:#x}: dropped", r.dst_qpn);
                return None;
            }
            let h = sender::connected(dev, &r, QpKind::Uc)?;
            let _ = serve_packet(dev, h, &r);
            None
        }
        Transport::Rc | Transport::Xrc { .. } => {
            let kind = match r.transport {
                Transport::Rc => QpKind::Rc,
                _ => QpKind::XrcTgt,
            };
            let h = sender::connected(dev, &r, kind)?;
            if let Err(again) = sender::in_sequence(dev, h, &r) {
                return again.map(|reply| reply::answer(&r, reply));
            }
            let reply = serve_packet(dev, h, &r);
            reply::record(dev, h, r.psn, &reply);
            Some(reply::answer(&r, reply))
        }
        Transport::Dc => {
            let Some(h) = sender::ready_dct(dev, r.dst_qpn) else {
                debug!(
                    "packet for DCT {:#x}, which does not answer: dropped",
                    r.dst_qpn
                );
                return None;
            };
            let src = Source {
                host: r.src_host,
                qpn: r.src_qpn,
            };
            // The key first: a sender without it is answered, and leaves
            // nothing behind (no duplicate's answer it could evict others'
            // with).
            if let Err(o) = sender::check_dc_key(dev, h, r.dc_key) {
                return Some(reply::answer(&r, reply::reply_of(Err(o))));
            }
            if let Some(reply) = sender::dc_duplicate(dev, h, &src, r.psn) {
                return Some(reply::answer(&r, reply));
            }
            let reply = serve_packet(dev, h, &r);
            reply::record_dc(dev, h, src, r.psn, &reply);
            Some(reply::answer(&r, reply))
        }
    }
}

/// Steps 3 to 5 for one packet of a connected QP or DCT `peer`: the XRC
/// SRQ it names (XRC), its execution, and the reply that makes.
fn serve_packet(dev: &mut Device, peer: u32, r: &Request) -> Reply {
    let src = Source {
        host: r.src_host,
        qpn: r.src_qpn,
    };

    if let Transport::Xrc { srqn } = r.transport {
        if let Err(o) = access::bind_xrc_srq(dev, peer, srqn) {
            return reply::reply_of(Err(o));
        }
    }
    reply::reply_of(execute::serve_from_wire(dev, peer, src, &r.op, r.solicited))
}
