//! Step 2 of the responder: the sender. The QP a packet names exists and
//! is in RTR, RTS or SQD; an RC or UC packet comes from the host and QP
//! the responder is connected to, and (RC, XRC) carries the PSN it
//! expects: a duplicate of the last packet is answered again, anything
//! else is dropped; a DC packet names a DCT in RTR, and its key.

use crate::config::debug;
use crate::device::address::connected_host;
use crate::device::cq::syndrome as syn;
use crate::device::outcome::Outcome;
use crate::fabric::wire::{Reply, Request};
use crate::model::state::{Device, QpKind, QpState};
use crate::model::wire::Source;

/// The connected QP a request is for, if it is there, ready, and
/// connected to the sender.
pub fn connected(dev: &Device, r: &Request, kind: QpKind) -> Option<u32> {
    let h = dev.qp_by_qpn(r.dst_qpn)?;
    let q = &dev.qps[&h];
    if q.kind != kind || !q.state.receives() {
        debug!(
            "packet for QP {:#x} ({:?}, {:?}) dropped",
            r.dst_qpn, q.kind, q.state
        );
        return None;
    }
    let from = connected_host(&q.attrs.dest);
    if q.dest_qpn != r.src_qpn || from != Some(r.src_host) {
        debug!(
            "packet for QP {:#x} from host {} QP {:#x}, not its peer: dropped",
            r.dst_qpn, r.src_host, r.src_qpn
        );
        return None;
    }
    Some(h)
}

/// RC, XRC: whether `r` carries the PSN that QP `h` expects (`Ok`: serve
/// it). A duplicate of the last packet (its answer was lost or late) gets
/// that answer again, `Err(Some(reply))`; anything else is out of
/// sequence and dropped, `Err(None)`.
pub fn in_sequence(dev: &Device, h: u32, r: &Request) -> Result<(), Option<Reply>> {
    let w = &dev.qps[&h].wire;
    if r.psn == w.epsn {
        return Ok(());
    }
    match &w.last {
        Some((p, reply)) if *p == r.psn => Err(Some(reply.clone())),
        _ => {
            debug!(
                "QP {:#x}: PSN {:#x}, expected {:#x}: dropped",
                r.dst_qpn, r.psn, w.epsn
            );
            Err(None)
        }
    }
}

/// The DCT numbered `dctn`, if it is in RTR (the only state in which a
/// DCT answers).
pub fn ready_dct(dev: &Device, dctn: u32) -> Option<u32> {
    dev.qps
        .iter()
        .find(|(_, q)| q.kind == QpKind::Dct && q.qpn == dctn && q.state == QpState::Rtr)
        .map(|(h, _)| *h)
}

/// A DC request's key against the DCT `dct`'s: a remote access error if
/// they differ.
pub fn check_dc_key(dev: &Device, dct: u32, key: u64) -> Result<(), Outcome> {
    let q = &dev.qps[&dct];
    if q.dc_key == key {
        Ok(())
    } else {
        Err(Outcome::Error(
            syn::REMOTE_ACCESS,
            format!("DC key {key:#x} does not match DCT {:#x}", q.qpn),
        ))
    }
}

/// DC: the answer DCT `h` gave to `src`'s last packet, if `psn` is that
/// packet's again (a duplicate).
pub fn dc_duplicate(dev: &Device, h: u32, src: &Source, psn: u32) -> Option<Reply> {
    match dev.qps[&h].wire.dc_last.get(src) {
        Some((p, reply)) if *p == psn => Some(reply.clone()),
        _ => None,
    }
}
