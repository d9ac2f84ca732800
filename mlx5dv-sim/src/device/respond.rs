//! The responder's side of the fabric: what the device does with a request
//! packet from another host, before [`super::serve`] runs it. It checks
//! what an HCA checks first: the QP exists and is in RTR, RTS or SQD; an RC
//! or UC packet comes from the host and QP the responder is connected to,
//! and (RC) carries the PSN it expects (a duplicate of the last packet is
//! answered again, anything else is dropped); a DC packet names a DCT in
//! RTR and its key. UD datagrams are delivered or dropped, unanswered.

use super::cq::syndrome as syn;
use super::exec::{self, Outcome};
use super::serve;
use crate::config::debug;
use crate::fabric::wire::{next_psn, Op, Reply, Request, Response, Transport};
use crate::model::state::{Device, QpKind};
use crate::model::wire::Source;

/// The connected QP a request is for, if it is there, ready, and
/// connected to the sender.
fn connected(dev: &Device, r: &Request, kind: QpKind) -> Option<u32> {
    let h = dev.qp_by_qpn(r.dst_qpn)?;
    let q = &dev.qps[&h];
    if q.kind != kind || !q.state.receives() {
        debug!(
            "packet for QP {:#x} ({:?}, {:?}) dropped",
            r.dst_qpn, q.kind, q.state
        );
        return None;
    }
    let from = super::remote::connected_host(&q.attrs.dest);
    if q.dest_qpn != r.src_qpn || from != Some(r.src_host) {
        debug!(
            "packet for QP {:#x} from host {} QP {:#x}, not its peer: dropped",
            r.dst_qpn, r.src_host, r.src_qpn
        );
        return None;
    }
    Some(h)
}

fn answer(r: &Request, reply: Reply) -> Response {
    Response {
        dst_qpn: r.src_qpn,
        psn: r.psn,
        reply,
    }
}

fn serve_packet(dev: &mut Device, peer: u32, r: &Request) -> Reply {
    let src = Source {
        host: r.src_host,
        qpn: r.src_qpn,
    };
    if let Transport::Xrc { srqn } = r.transport {
        if let Err(o) = super::xrc::bind(dev, peer, srqn) {
            return reply_of(Err(o));
        }
    }
    reply_of(serve::serve(dev, peer, src, &r.op, r.solicited))
}

/// The answer a responder's outcome makes: an ACK with its bytes, an RNR
/// NAK, or a NAK with the requester's syndrome.
fn reply_of(r: Result<Vec<u8>, Outcome>) -> Reply {
    match r {
        Ok(bytes) => Reply::Ack(bytes),
        Err(Outcome::Stall(t)) => Reply::Rnr(t),
        Err(Outcome::Error(s, why)) => Reply::Nak(s, why),
        Err(o) => Reply::Nak(syn::REMOTE_OP, format!("{o:?}")),
    }
}

/// Serves a request from another host; the answer to send back, if any.
pub fn respond(dev: &mut Device, r: Request) -> Option<Response> {
    match r.transport {
        Transport::Ud => {
            let Op::Send { imm, data, .. } = &r.op else {
                return None;
            };
            let from = exec::Datagram {
                src_host: r.src_host,
                src_qpn: r.src_qpn,
                route: super::ud_grh::Route::unpack(r.dc_key),
                solicited: r.solicited,
            };
            exec::ud_deliver(dev, r.dst_qpn, r.qkey, &from, *imm, data);
            None
        }
        Transport::Uc => {
            let h = connected(dev, &r, QpKind::Uc)?;
            let _ = serve_packet(dev, h, &r);
            None
        }
        Transport::Rc | Transport::Xrc { .. } => {
            let kind = match r.transport {
                Transport::Rc => QpKind::Rc,
                _ => QpKind::XrcTgt,
            };
            let h = connected(dev, &r, kind)?;
            let w = &dev.qps[&h].wire;
            if r.psn != w.epsn {
                // A duplicate of the last packet (its answer was lost or
                // late) is answered again; anything else is out of
                // sequence and dropped.
                return match &w.last {
                    Some((p, reply)) if *p == r.psn => Some(answer(&r, reply.clone())),
                    _ => {
                        debug!(
                            "QP {:#x}: PSN {:#x}, expected {:#x}: dropped",
                            r.dst_qpn, r.psn, w.epsn
                        );
                        None
                    }
                };
            }
            let reply = serve_packet(dev, h, &r);
            if !matches!(reply, Reply::Rnr(_)) {
                let w = &mut dev.qps.get_mut(&h).expect("live QP").wire;
                w.epsn = next_psn(r.psn);
                w.last = Some((r.psn, reply.clone()));
            }
            Some(answer(&r, reply))
        }
        Transport::Dc => {
            let Some(h) = serve::ready_dct(dev, r.dst_qpn) else {
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
            let dct = &dev.qps[&h];
            if let Some((p, reply)) = dct.wire.dc_last.get(&src) {
                if *p == r.psn {
                    return Some(answer(&r, reply.clone()));
                }
            }
            let reply = match serve::check_dc_key(dev, h, r.dc_key) {
                Ok(()) => serve_packet(dev, h, &r),
                Err(o) => reply_of(Err(o)),
            };
            if !matches!(reply, Reply::Rnr(_)) {
                let w = &mut dev.qps.get_mut(&h).expect("live DCT").wire;
                w.dc_last.insert(src, (r.psn, reply.clone()));
            }
            Some(answer(&r, reply))
        }
    }
}
