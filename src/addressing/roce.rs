//! RoCE addressing: which GID table entry a connection sends from.
//!
//! On RoCE (an Ethernet port) every packet carries a global route header,
//! so a QP's RTR transition and an address handle need a source GID index
//! (`sgid_index`). The GID table has an entry per IP address of the port's
//! netdev and per RoCE version; the routable choice for an IPv4 network is
//! the RoCE v2 entry of the IPv4-mapped address (`::ffff:a.b.c.d`).

use crate::addressing::ConnectOptions;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::port::{Gid, GidEntry, GidType, LinkLayer};
use std::net::{IpAddr, Ipv6Addr};

/// The GID of an IP address: IPv4 as its IPv4-mapped IPv6 address.
pub(crate) fn gid_of(ip: IpAddr) -> Gid {
    match ip {
        IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
        IpAddr::V6(v6) => Gid(v6.octets()),
    }
}

fn is_ipv4_mapped(g: &Gid) -> bool {
    Ipv6Addr::from(g.0).to_ipv4_mapped().is_some()
}

fn index_u8(e: &GidEntry) -> Result<u8> {
    u8::try_from(e.index).map_err(|_| Error::OutOfRange {
        what: "GID index",
        value: u64::from(e.index),
        limit: "at most 255 (ibv_ah_attr.grh.sgid_index is 8 bits)".into(),
    })
}

impl Context {
    /// The entries of `port`'s GID table, as text for an error message.
    fn describe_gids(&self, port: u8) -> String {
        match self.gid_table() {
            Ok(t) => {
                let rows: Vec<String> = t
                    .iter()
                    .filter(|e| e.port == u32::from(port))
                    .map(|e| format!("{} {} {:?}", e.index, e.gid, e.gid_type))
                    .collect();
                if rows.is_empty() {
                    "the table is empty".into()
                } else {
                    format!("the table has: {}", rows.join("; "))
                }
            }
            Err(e) => format!("the table could not be read: {e}"),
        }
    }

    /// The GID index of the local IP address `ip` on `port`, of type
    /// `gid_type` ([`GidType::RoceV2`] for a routable connection): the
    /// entry whose GID is `ip` (an IPv4 address as `::ffff:a.b.c.d`). The
    /// error lists the table and says what to do when there is none.
    pub fn gid_index_for_ip(&self, port: u8, ip: IpAddr, gid_type: GidType) -> Result<u8> {
        let want = gid_of(ip);
        let table = self.gid_table()?;
        match table
            .iter()
            .find(|e| e.port == u32::from(port) && e.gid == want && e.gid_type == gid_type)
        {
            Some(e) => index_u8(e),
            None => Err(Error::InvalidArgument(format!(
                "no {gid_type:?} GID for {ip} on port {port} of {}: is {ip} an address of \
                 the port's netdev (ip addr add {ip}/.. dev <netdev>)? {}",
                self.name(),
                self.describe_gids(port)
            ))),
        }
    }

    /// The GID index of `port` on the network interface `netdev` (e.g.
    /// `eth0`), of type `gid_type`; of several (one per IP address), the
    /// IPv4-mapped one first.
    pub fn gid_index_for_netdev(&self, port: u8, netdev: &str, gid_type: GidType) -> Result<u8> {
        let name = std::ffi::CString::new(netdev)
            .map_err(|_| Error::InvalidArgument(format!("netdev name {netdev:?} has a NUL")))?;
        // SAFETY: a NUL-terminated string, read during the call.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(Error::last_os(
                "if_nametoindex",
                format!("no network interface {netdev:?}"),
            ));
        }
        let table = self.gid_table()?;
        let of_netdev = || {
            table.iter().filter(|e| {
                e.port == u32::from(port) && e.ndev_ifindex == ifindex && e.gid_type == gid_type
            })
        };
        match of_netdev()
            .find(|e| is_ipv4_mapped(&e.gid))
            .or_else(|| of_netdev().next())
        {
            Some(e) => index_u8(e),
            None => Err(Error::InvalidArgument(format!(
                "no {gid_type:?} GID on {netdev} for port {port} of {}: is {netdev} the \
                 port's netdev (rdma link show), and does it have an IP address? {}",
                self.name(),
                self.describe_gids(port)
            ))),
        }
    }

    /// The source GID a connection on `port` uses by default: `None` on
    /// InfiniBand (within a subnet no GID is needed); on RoCE the RoCE v2
    /// entry of an IPv4 address (routable), else the first RoCE v2 entry,
    /// else an error saying how to give the port one.
    pub fn default_gid_index(&self, port: u8) -> Result<Option<u8>> {
        if self.query_port(port)?.link_layer != LinkLayer::Ethernet {
            return Ok(None);
        }
        let table = self.gid_table()?;
        let v2 = || {
            table.iter().filter(|e| {
                e.port == u32::from(port) && e.gid_type == GidType::RoceV2 && !e.gid.is_zero()
            })
        };
        match v2()
            .find(|e| is_ipv4_mapped(&e.gid))
            .or_else(|| v2().next())
        {
            Some(e) => index_u8(e).map(Some),
            None => Err(Error::InvalidArgument(format!(
                "port {port} of {} is RoCE but has no RoCE v2 GID: give its netdev an IP \
                 address (ip addr add <addr>/<len> dev <netdev>), or pick a RoCE v1 entry \
                 with gid_index_for_netdev; {}",
                self.name(),
                self.describe_gids(port)
            ))),
        }
    }
}

/// Refuses, with the fix, a connection on a RoCE port without a source
/// GID (which the kernel would refuse with a bare `EINVAL` at RTR).
pub(crate) fn require_gid(ctx: &Context, opts: &ConnectOptions) -> Result<()> {
    // A port that cannot be queried is left to the call that uses it,
    // which reports it.
    let roce = ctx
        .query_port(opts.port)
        .is_ok_and(|p| p.link_layer == LinkLayer::Ethernet);
    if opts.gid_index.is_some() || !roce {
        return Ok(());
    }
    let suggestion = match ctx.default_gid_index(opts.port) {
        Ok(Some(i)) => {
            let gid = ctx
                .gid(opts.port, u32::from(i))
                .map_or_else(|_| "?".into(), |g| g.to_string());
            format!("Context::default_gid_index gives {i} ({gid}, RoCE v2)")
        }
        Ok(None) => String::new(),
        Err(e) => e.to_string(),
    };
    Err(Error::InvalidArgument(format!(
        "port {} of {} is RoCE (Ethernet link layer): a connection needs a source GID; \
         set ConnectOptions::gid_index (Context::default_gid_index, gid_index_for_ip or \
         gid_index_for_netdev choose one): {suggestion}",
        opts.port,
        ctx.name()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gid_of_an_ipv4_address_is_ipv4_mapped() {
        let g = gid_of("10.99.0.1".parse().unwrap());
        assert_eq!(g.to_string(), "::ffff:10.99.0.1");
        assert!(is_ipv4_mapped(&g));
        let g6 = gid_of("fe80::1".parse().unwrap());
        assert_eq!(g6.to_string(), "fe80::1");
        assert!(!is_ipv4_mapped(&g6));
    }
}
