//! A UD datagram at its responder: delivered to the UD QP it names if that
//! QP is ready, its qkey matches and it has a receive posted; otherwise
//! dropped, unanswered, as datagrams are.

use super::deliver::{deliver, Msg};
use crate::config::debug;
use crate::device::ud_grh::{ud_recv, Route};
use crate::model::state::{Device, QpKind};

/// Where a datagram comes from: the sending host and QP, its route (GRH
/// or not), and whether it asks for a solicited event.
#[derive(Debug, Clone, Copy)]
pub struct Datagram {
    /// The sending host.
    pub src_host: u16,
    /// The sending QP.
    pub src_qpn: u32,
    /// Its route ([`Route`]).
    pub route: Route,
    /// Solicited event requested.
    pub solicited: bool,
}

/// Delivers a datagram to the UD QP `dst_qpn` of this host if it is ready,
/// its qkey matches and it has a receive posted; otherwise drops it, as
/// datagrams are. The data lands after 40 bytes of GRH area, which holds
/// the GRH when the datagram has one ([`ud_grh`](crate::device::ud_grh)).
pub fn ud_deliver(
    dev: &mut Device,
    dst_qpn: u32,
    qkey: u32,
    from: &Datagram,
    imm: Option<[u8; 4]>,
    data: &[u8],
) {
    let ud = ud_recv(from.src_host, from.route, data.len(), imm.is_some());
    let (src_qpn, solicited) = (from.src_qpn, from.solicited);
    let msg = match imm {
        Some(i) => Msg::SendImm(data, i),
        None => Msg::Send(data),
    };
    let peer = dev
        .qps
        .iter()
        .find(|(_, q)| q.kind == QpKind::Ud && q.qpn == dst_qpn && q.state.receives())
        .map(|(h, q)| (*h, q.attrs.qkey));
    match peer {
        Some((h, peer_qkey)) if peer_qkey == qkey => {
            match deliver(dev, h, src_qpn, msg, solicited, Some(&ud)) {
                Ok(()) => {}
                Err(o) => debug!("UD datagram to {dst_qpn:#x} dropped: {o:?}"),
            }
        }
        _ => debug!("UD datagram to {dst_qpn:#x} (qkey {qkey:#x}) dropped"),
    }
}
