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
use crate::fabric;
use crate::fabric::wire::{Op, Packet, Reply, Request, Response, Transport};
use crate::model::state::{Device, QpKind};
use crate::model::wire::Source;

/// Receives what other hosts sent (at most `budget` datagrams): answers
/// go to their requester QPs, requests are served and answered.
pub fn receive(dev: &mut Device, budget: usize) -> usize {
    let Some(host) = fabric::joined() else {
        return 0;
    };
    let mut buf = Vec::new();
    let mut n = 0;
    while n < budget {
        let Some(len) = host.recv(&mut buf) else {
            break;
        };
        n += 1;
        match Packet::decode(&buf[..len]) {
            Some(Packet::Response(r)) => {
                if let Some(h) = dev.qp_by_qpn(r.dst_qpn) {
                    if let Some(q) = dev.qps.get_mut(&h) {
                        q.wire.replies.push(r);
                    }
                }
            }
            Some(Packet::Request(r)) => {
                let to = r.src_host;
                if let Some(resp) = respond(dev, r) {
                    reply::send(host, to, resp);
                }
            }
            None => debug!("a datagram of {len} bytes that is not a packet: dropped"),
        }
    }
    n
}

/// Serves a request from another host; the answer to send back, if any.
pub fn respond(dev: &mut Device, r: Request) -> Option<Response> {
    match r.transport {
        Transport::Ud => {
            let Op::Send { imm, data, .. } = &r.op else {
                return None;
            };
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
            if let Some(reply) = sender::dc_duplicate(dev, h, &src, r.psn) {
                return Some(reply::answer(&r, reply));
            }
            let reply = match sender::check_dc_key(dev, h, r.dc_key) {
                Ok(()) => serve_packet(dev, h, &r),
                Err(o) => reply::reply_of(Err(o)),
            };
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
    reply::reply_of(execute::serve(dev, peer, src, &r.op, r.solicited))
}
