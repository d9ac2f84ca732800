//! Which host of the fabric a QP's destination (connected QPs) or an
//! address vector (DCI, UD) names, as the requester routes a packet and
//! the responder checks where one came from.

use crate::fabric;
use crate::wqe::Av;

/// The host a connected QP's destination (`ib_uverbs_qp_dest`, as RTR set
/// it: dgid @0, dlid @20, is_global @30) names.
pub fn connected_host(d: &[u8; 32]) -> Option<u16> {
    if d[30] != 0 {
        fabric::host_of_gid(d[0..16].try_into().expect("16 bytes"))
    } else {
        fabric::host_of_lid(u16::from_ne_bytes([d[20], d[21]]))
    }
}

/// `to`, or `None` when it is this host `me`; an unknown host is 0.
pub fn elsewhere(to: Option<u16>, me: u16) -> Option<u16> {
    match to {
        Some(h) if h == me => None,
        Some(h) => Some(h),
        None => Some(0),
    }
}

/// The host an address vector (DCI, UD) names, `None` for this host.
pub fn datagram_destination(av: &Av) -> Option<u16> {
    let host = fabric::joined()?;
    let me = host.id;
    // On RoCE libmlx5 leaves the AV's GRH bit clear (every packet has a
    // GRH there) and the destination is always its GID.
    let to = if av.grh || host.roce {
        fabric::host_of_gid(&av.rgid)
    } else {
        fabric::host_of_lid(av.rlid)
    };
    elsewhere(to, me)
}
