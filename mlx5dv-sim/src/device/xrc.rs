//! XRC on the responder: an XRC target QP has no receive queue of its own;
//! each request names (in its XRC header) the XRC SRQ it lands in, which
//! must be in the target's XRC domain. That SRQ's receive WQEs, PD and CQ
//! serve the packet, and its completion carries the SRQ's user index.

use super::cq::syndrome as syn;
use super::exec::Outcome;
use crate::config::debug;
use crate::model::state::{Device, QpKind};

/// The kind of QP that answers requests from a QP of kind `requester`.
pub fn responder_kind(requester: QpKind) -> QpKind {
    match requester {
        QpKind::XrcIni => QpKind::XrcTgt,
        k => k,
    }
}

/// Points the XRC target QP `tgt` at the XRC SRQ numbered `srqn` for the
/// packet at hand (its receives, and its PD for the memory checks). An
/// SRQ that is not there, not an XRC SRQ, or in another domain: the
/// request is refused as invalid (a NAK); the target stays as it is.
pub fn bind(dev: &mut Device, tgt: u32, srqn: u32) -> Result<(), Outcome> {
    let xrcdn = dev.qps.get(&tgt).and_then(|q| q.xrcdn);
    let found = dev
        .srqs
        .iter()
        .find(|(_, s)| s.srqn == srqn && s.xrc.is_some_and(|x| Some(x.xrcdn) == xrcdn))
        .map(|(h, s)| (*h, s.pdn));
    let Some((h, pdn)) = found else {
        return Err(Outcome::Error(
            syn::REMOTE_INVAL_REQ,
            format!("no XRC SRQ {srqn:#x} in the target's domain {xrcdn:?}"),
        ));
    };
    let q = dev.qps.get_mut(&tgt).expect("live XRC target");
    debug!("XRC target {:#x}: packet for SRQ {srqn:#x}", q.qpn);
    q.xrc_srq = Some(h);
    q.pdn = pdn;
    Ok(())
}
