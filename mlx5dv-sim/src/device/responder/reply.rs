//! Step 5 of the responder: the reply. The answer an outcome makes (an ACK
//! with its bytes, an RNR NAK, a NAK with the requester's syndrome), kept
//! for a duplicate of the packet, and sent back to the requester's host.

use crate::config::debug;
use crate::device::cq::syndrome as syn;
use crate::device::outcome::Outcome;
use crate::fabric::wire::{next_psn, Packet, Reply, Request, Response};
use crate::fabric::Host;
use crate::model::state::Device;
use crate::model::wire::Source;
use std::time::Duration;

/// The answer a responder's outcome makes: an ACK with its bytes, an RNR
/// NAK, or a NAK with the requester's syndrome.
pub fn reply_of(r: Result<Vec<u8>, Outcome>) -> Reply {
    match r {
        Ok(bytes) => Reply::Ack(bytes),
        Err(Outcome::Stall(t)) => Reply::Rnr(t),
        Err(Outcome::Error(s, why)) => Reply::Nak(s, why),
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

/// How long a responder waits for room in a requester's full queue.
const ANSWER_PATIENCE: Duration = Duration::from_millis(200);

/// Sends an answer. A full queue at the requester (its device thread is
/// behind) is waited for, up to `ANSWER_PATIENCE` (200 ms), rather than the answer
/// dropped: a requester resends an unanswered request, but once this
/// process has ended (a pingpong's last message received, its QPs
/// destroyed) nothing answers it, and the requester's work request would
/// fail with retry exceeded for a message that arrived, which an RDMA
/// fabric, lossless, does not do.
pub fn send(host: &Host, to: u16, resp: Response) {
    match host.send_patiently(to, &Packet::Response(resp).encode(), ANSWER_PATIENCE) {
        Ok(true) => {}
        Ok(false) => debug!("answer to host {to}: its queue stayed full; lost"),
        Err(e) => debug!("answer to host {to} lost: {e}"),
    }
}
