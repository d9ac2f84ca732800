//! What a UD receive learns of its sender: the global route header the
//! device writes into the first 40 bytes of the receive buffer, with
//! `IBV_WC_GRH` in the completion (on RoCE always: every packet has one,
//! its IP header; on InfiniBand when the sender's address vector has a
//! GRH), and the sender's LID for the completion's `slid`.
//!
//! The GRH's parameters travel with the datagram as its [`Route`] (the
//! fabric's `dc_key` field, which UD does not use otherwise); the receiver
//! builds the header from it, from the sending host's GID table and its
//! own: a RoCE v2 IPv4-mapped source GID gives an IPv4 header in bytes 20
//! to 39 (bytes 0 to 19 zero; a ConnectX leaves them undefined), any other
//! GID an IPv6-layout GRH (IP version 6), as rdma-core's
//! `ibv_init_ah_from_wc` reads them.

use crate::fabric;
use crate::wqe::Av;

/// The bytes of the GRH area of a UD receive.
pub const GRH_BYTES: usize = 40;

/// The route of one datagram: whether it has a GRH and the GRH fields the
/// sender's address vector gave. Packed in 64 bits for the fabric: bit 63
/// the GRH, 47:40 the source GID index, 39:32 the traffic class, 31:24 the
/// hop limit, 19:0 the flow label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// A GRH is sent.
    pub grh: bool,
    /// The sender's GID index.
    pub sgid_index: u8,
    /// Traffic class.
    pub tclass: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
}

impl Route {
    /// The route a UD send with address vector `av` takes from a port
    /// that is RoCE (`roce`) or InfiniBand.
    pub fn of(av: &Av, roce: bool) -> Self {
        Route {
            grh: av.grh || roce,
            sgid_index: av.sgid_index,
            tclass: av.tclass,
            hop_limit: av.hop_limit,
            flow_label: av.flow_label & 0xf_ffff,
        }
    }

    /// The 64-bit form carried by the fabric.
    pub fn pack(self) -> u64 {
        (u64::from(self.grh) << 63)
            | (u64::from(self.sgid_index) << 40)
            | (u64::from(self.tclass) << 32)
            | (u64::from(self.hop_limit) << 24)
            | u64::from(self.flow_label & 0xf_ffff)
    }

    /// Reads [`pack`](Self::pack)'s form.
    pub fn unpack(v: u64) -> Self {
        Route {
            grh: v >> 63 != 0,
            sgid_index: (v >> 40) as u8,
            tclass: (v >> 32) as u8,
            hop_limit: (v >> 24) as u8,
            flow_label: (v & 0xf_ffff) as u32,
        }
    }
}

/// What the responder writes for a UD receive besides the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdRecv {
    /// The sender's LID (0 on RoCE).
    pub slid: u16,
    /// The GRH area's bytes, when the datagram had a GRH.
    pub grh: Option<[u8; GRH_BYTES]>,
}

/// The UD receive of a datagram of `len` message bytes (`imm`: with
/// immediate data) from host `src_host` by `route`, at this host.
pub fn ud_recv(src_host: u16, route: Route, len: usize, imm: bool) -> UdRecv {
    let me = fabric::host();
    let roce = crate::config::get().roce;
    let slid = if roce { 0 } else { src_host };
    if !route.grh {
        return UdRecv { slid, grh: None };
    }
    let i = usize::from(route.sgid_index) % 8;
    let sgid = fabric::gids_of(src_host, roce)[i].gid;
    let dgid = match me {
        Some(h) => h.gids()[i].gid,
        None => sgid,
    };
    // What follows the network header: on RoCE v2 a UDP header; then
    // BTH, DETH, the immediate, the message and the ICRC.
    let transport = 12 + 8 + if imm { 4 } else { 0 } + len + 4;
    let v2 = roce && fabric::gids_of(src_host, roce)[i].kind == "RoCE v2";
    let v4 = sgid[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    let grh = if v2 && v4 {
        ipv4_area(&route, &sgid, &dgid, 20 + 8 + transport)
    } else {
        let next_header = if v2 { 17 } else { 0x1b };
        let payload = if v2 { 8 + transport } else { transport };
        ipv6_area(&route, &sgid, &dgid, next_header, payload)
    };
    UdRecv {
        slid,
        grh: Some(grh),
    }
}

/// A GRH (or RoCE v2 IPv6 header): IP version 6.
fn ipv6_area(r: &Route, sgid: &[u8; 16], dgid: &[u8; 16], next: u8, payload: usize) -> [u8; 40] {
    let mut b = [0u8; GRH_BYTES];
    let word = (6u32 << 28) | (u32::from(r.tclass) << 20) | (r.flow_label & 0xf_ffff);
    b[..4].copy_from_slice(&word.to_be_bytes());
    b[4..6].copy_from_slice(&(payload as u16).to_be_bytes());
    b[6] = next;
    b[7] = r.hop_limit;
    b[8..24].copy_from_slice(sgid);
    b[24..].copy_from_slice(dgid);
    b
}

/// A RoCE v2 IPv4 header in bytes 20 to 39, with its checksum.
fn ipv4_area(r: &Route, sgid: &[u8; 16], dgid: &[u8; 16], total: usize) -> [u8; 40] {
    let mut b = [0u8; GRH_BYTES];
    let h = &mut b[20..];
    h[0] = 0x45;
    h[1] = r.tclass;
    h[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    h[6] = 0x40; // don't fragment
    h[8] = r.hop_limit;
    h[9] = 17; // UDP
    h[12..16].copy_from_slice(&sgid[12..]);
    h[16..20].copy_from_slice(&dgid[12..]);
    let mut sum: u32 = h
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_packs_and_unpacks() {
        let r = Route {
            grh: true,
            sgid_index: 3,
            tclass: 0x12,
            hop_limit: 64,
            flow_label: 0xa_bcde,
        };
        assert_eq!(Route::unpack(r.pack()), r);
        let none = Route { grh: false, ..r };
        assert_eq!(Route::unpack(none.pack()), none);
    }

    #[test]
    fn an_ipv4_area_has_a_valid_checksum_and_the_mapped_addresses() {
        let r = Route {
            grh: true,
            sgid_index: 3,
            tclass: 0,
            hop_limit: 64,
            flow_label: 0,
        };
        let mut s = [0u8; 16];
        s[10] = 0xff;
        s[11] = 0xff;
        s[12..].copy_from_slice(&[10, 99, 0, 1]);
        let mut d = s;
        d[15] = 2;
        let b = ipv4_area(&r, &s, &d, 100);
        assert_eq!(b[..20], [0; 20]);
        let h = &b[20..];
        assert_eq!((h[0], h[8], h[9]), (0x45, 64, 17));
        assert_eq!(h[12..16], [10, 99, 0, 1]);
        assert_eq!(h[16..20], [10, 99, 0, 2]);
        let mut sum: u32 = h
            .chunks_exact(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
    }

    #[test]
    fn an_ipv6_area_is_a_grh() {
        let r = Route {
            grh: true,
            sgid_index: 0,
            tclass: 0x12,
            hop_limit: 1,
            flow_label: 0x3_4567,
        };
        let b = ipv6_area(&r, &[1; 16], &[2; 16], 0x1b, 300);
        assert_eq!(b[..4], 0x6123_4567u32.to_be_bytes());
        assert_eq!(b[4..8], [1, 44, 0x1b, 1]);
        assert_eq!(b[8..24], [1; 16]);
        assert_eq!(b[24..], [2; 16]);
    }
}
