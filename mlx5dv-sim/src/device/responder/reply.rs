//! Step 5 of the responder: the reply. The answer an outcome makes (an ACK
//! with its bytes, an RNR NAK, a NAK with the requester's syndrome), kept
//! for a duplicate of the packet, and sent back to the requester's host.

use crate::device::cq::syndrome as syn;
use crate::device::outcome::Outcome;
use crate::fabric::wire::{next_psn, Packet, Reply, Request, Response};
use crate::fabric::{outbox, Host};
use crate::model::state::Device;
use crate::model::wire::Source;

/// The answer a responder's outcome makes: an ACK with its bytes, an RNR
/// NAK, or a NAK with the requester's syndrome.
pub fn reply_of(r: Result<Vec<u8>, Outcome>) -> Reply {
    match r {
        Ok(bytes) => Reply::Ack(bytes),
        Err(Outcome::Stall(t)) => Reply::Rnr(t),
        // A NAK names one of the remote errors; anything else the
        // responder ran into is an operational error to the requester.
        Err(Outcome::Error(s, why)) if syn::is_remote(s) => Reply::Nak(s, why),
        Err(Outcome::Error(_, why)) => Reply::Nak(syn::REMOTE_OP, why),
        Err(o) => Reply::Nak(syn::REMOTE_OP, format!("{o:?}")),
    }
}

/// The response that carries `reply` to the sender of `r`.
pub fn answer(r: &Request, reply: Reply) -> Response {
    Response {
        dst_qpn: r.src_qpn,
        psn: r.psn,
        reply,
    }
}

/// RC, XRC: QP `h` served the packet of PSN `psn` (unless it was not
/// ready): it expects the next, and keeps `reply` for a duplicate.
pub fn record(dev: &mut Device, h: u32, psn: u32, reply: &Reply) {
    if !matches!(reply, Reply::Rnr(_)) {
        let w = &mut dev.qps.get_mut(&h).expect("live QP").wire;
        w.epsn = next_psn(psn);
        w.last = Some((psn, reply.clone()));
    }
}

/// DC: DCT `h` keeps `reply` for a duplicate of `src`'s packet `psn`
/// (unless it was not ready).
pub fn record_dc(dev: &mut Device, h: u32, src: Source, psn: u32, reply: &Reply) {
    if !matches!(reply, Reply::Rnr(_)) {
        let w = &mut dev.qps.get_mut(&h).expect("live DCT").wire;
        w.dc_last.insert(src, (psn, reply.clone()));
    }
}

/// Sends an answer to host `to`: at once, or, when its queue is full,
/// left waiting in the fabric's outbox (tried again after each step,
/// with the device lock released; see [`crate::fabric::outbox`]). Never
/// waits itself: the device step that calls it holds the device lock.
pub fn send(host: &Host, to: u16, resp: Response) {
    outbox::send_or_keep(host, to, Packet::Response(resp).encode());
}
