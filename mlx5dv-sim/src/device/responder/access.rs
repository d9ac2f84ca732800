//! Step 3 of the responder: the key and the access. What memory a request
//! may reach: the responder QP's access flags allow the operation, and
//! the rkey, in the responder's PD, maps the range with that access.
//!
//! XRC first: an XRC target QP has no receive queue of its own; each
//! request names (in its XRC header) the XRC SRQ it lands in, which must
//! be in the target's XRC domain. That SRQ's receive WQEs, PD and CQ
//! serve the packet, and its completion carries the SRQ's user index.

use crate::config::debug;
use crate::device::cq::syndrome as syn;
use crate::device::mem::{self, Access};
use crate::device::outcome::Outcome;
use crate::model::state::{Device, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE};

/// Points the XRC target QP `tgt` at the XRC SRQ numbered `srqn` for the
/// packet at hand (its receives, and its PD for the memory checks). An
/// SRQ that is not there, not an XRC SRQ, or in another domain: the
/// request is refused as invalid (a NAK); the target stays as it is.
pub fn bind_xrc_srq(dev: &mut Device, tgt: u32, srqn: u32) -> Result<(), Outcome> {
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

/// Checks the responder QP's access flags and the rkey, returning host ranges.
///
/// A zero-length RDMA read or write reaches no memory, and its R_Key and
/// virtual address are not checked (IBA C9-88; rxe's `check_rkey` skips
/// them likewise): UCX's flush is a zero-length write with R_Key 0 and
/// address 0. The QP's access flags still are.
pub fn remote_ranges(
    dev: &Device,
    peer: u32,
    rkey: u32,
    raddr: u64,
    len: u64,
    acc: Access,
) -> Result<Vec<(u64, u64)>, Outcome> {
    let p = &dev.qps[&peer];
    let need = match acc {
        Access::RemoteRead => ACCESS_REMOTE_READ,
        Access::RemoteWrite => ACCESS_REMOTE_WRITE,
        Access::RemoteAtomic => ACCESS_REMOTE_ATOMIC,
        _ => 0,
    };
    if p.access & need != need {
        // The responder QP does not take this operation at all: a NAK
        // "invalid request" (IB spec 9.7.4.1.3), unlike a bad R_Key.
        return Err(Outcome::Error(
            syn::REMOTE_INVAL_REQ,
            format!(
                "QP {:#x} access flags {:#x} do not allow {acc:?}",
                p.qpn, p.access
            ),
        ));
    }
    if len == 0 && matches!(acc, Access::RemoteRead | Access::RemoteWrite) {
        return Ok(Vec::new());
    }
    mem::resolve(dev, rkey, raddr, len, p.pdn, acc)
        .map_err(|f| Outcome::Error(syn::REMOTE_ACCESS, f.0))
}
