//! Ports, MTUs and GIDs.

use crate::error::{Error, Result};
use crate::ffi;
use std::fmt;
use std::net::Ipv6Addr;

/// The path MTU (`enum ibv_mtu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = ffi::IBV_MTU_256,
    /// 512 bytes.
    Mtu512 = ffi::IBV_MTU_512,
    /// 1024 bytes.
    Mtu1024 = ffi::IBV_MTU_1024,
    /// 2048 bytes.
    Mtu2048 = ffi::IBV_MTU_2048,
    /// 4096 bytes.
    Mtu4096 = ffi::IBV_MTU_4096,
}

impl Mtu {
    /// The MTU in bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The MTU of this many bytes (256, 512, 1024, 2048 or 4096).
    pub fn from_bytes(bytes: u32) -> Result<Self> {
        match bytes {
            256 => Ok(Mtu::Mtu256),
            512 => Ok(Mtu::Mtu512),
            1024 => Ok(Mtu::Mtu1024),
            2048 => Ok(Mtu::Mtu2048),
            4096 => Ok(Mtu::Mtu4096),
            _ => Err(Error::OutOfRange {
                what: "MTU in bytes",
                value: u64::from(bytes),
                limit: "one of 256, 512, 1024, 2048, 4096".into(),
            }),
        }
    }

    /// The MTU of a raw `enum ibv_mtu` value (1..=5).
    pub fn from_raw(raw: u32) -> Result<Self> {
        match raw {
            ffi::IBV_MTU_256 => Ok(Mtu::Mtu256),
            ffi::IBV_MTU_512 => Ok(Mtu::Mtu512),
            ffi::IBV_MTU_1024 => Ok(Mtu::Mtu1024),
            ffi::IBV_MTU_2048 => Ok(Mtu::Mtu2048),
            ffi::IBV_MTU_4096 => Ok(Mtu::Mtu4096),
            _ => Err(Error::OutOfRange {
                what: "enum ibv_mtu",
                value: u64::from(raw),
                limit: "IBV_MTU_256 (1) to IBV_MTU_4096 (5)".into(),
            }),
        }
    }
}

/// The logical port state (`enum ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PortState {
    /// `IBV_PORT_NOP`.
    Nop,
    /// `IBV_PORT_DOWN`.
    Down,
    /// `IBV_PORT_INIT`.
    Init,
    /// `IBV_PORT_ARMED`.
    Armed,
    /// `IBV_PORT_ACTIVE`: traffic can flow.
    Active,
    /// `IBV_PORT_ACTIVE_DEFER`.
    ActiveDefer,
    /// A value this crate does not know.
    Other(u32),
}

impl PortState {
    fn from_raw(raw: u32) -> Self {
        match raw {
            ffi::IBV_PORT_NOP => PortState::Nop,
            ffi::IBV_PORT_DOWN => PortState::Down,
            ffi::IBV_PORT_INIT => PortState::Init,
            ffi::IBV_PORT_ARMED => PortState::Armed,
            ffi::IBV_PORT_ACTIVE => PortState::Active,
            ffi::IBV_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
            other => PortState::Other(other),
        }
    }
}

/// The link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LinkLayer {
    /// InfiniBand: addressed by LID.
    InfiniBand,
    /// Ethernet (RoCE): addressed by GID.
    Ethernet,
    /// Not reported.
    Unspecified,
}

/// A port's attributes (`struct ibv_port_attr`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PortAttr {
    /// The port number (from 1).
    pub port: u8,
    /// Logical state.
    pub state: PortState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU in use.
    pub active_mtu: Mtu,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// Entries in the GID table.
    pub gid_tbl_len: i32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// The link layer.
    pub link_layer: LinkLayer,
}

impl PortAttr {
    pub(crate) fn from_raw(port: u8, a: &ffi::ibv_port_attr) -> Self {
        let link_layer = match u32::from(a.link_layer) {
            ffi::IBV_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
            ffi::IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            _ => LinkLayer::Unspecified,
        };
        PortAttr {
            port,
            state: PortState::from_raw(a.state),
            max_mtu: Mtu::from_raw(a.max_mtu).unwrap_or(Mtu::Mtu256),
            active_mtu: Mtu::from_raw(a.active_mtu).unwrap_or(Mtu::Mtu256),
            lid: a.lid,
            gid_tbl_len: a.gid_tbl_len,
            max_msg_sz: a.max_msg_sz,
            link_layer,
        }
    }
}

/// A 128-bit GID, in network byte order (as on the wire).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// Whether every byte is 0 (an unused table entry).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    pub(crate) fn to_raw(self) -> ffi::ibv_gid {
        ffi::ibv_gid { raw: self.0 }
    }
}

impl fmt::Display for Gid {
    /// IPv6 notation (`::ffff:10.99.0.1` for a RoCE v2 GID of an IPv4
    /// address).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ip = Ipv6Addr::from(self.0);
        match ip.to_ipv4_mapped() {
            Some(v4) => write!(f, "::ffff:{v4}"),
            None => write!(f, "{ip}"),
        }
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(ip: Ipv6Addr) -> Self {
        Gid(ip.octets())
    }
}

/// The kind of a GID table entry (`enum ibv_gid_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1 (Ethernet, not routable).
    RoceV1,
    /// RoCE v2 (UDP/IP, routable).
    RoceV2,
    /// A value this crate does not know.
    Other(u32),
}

/// One entry of the GID table (`struct ibv_gid_entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the port's table: what `sgid_index` takes.
    pub index: u32,
    /// The port (from 1).
    pub port: u32,
    /// IB, RoCE v1 or RoCE v2.
    pub gid_type: GidType,
    /// The network interface behind it (0 for IB).
    pub ndev_ifindex: u32,
}

impl GidEntry {
    pub(crate) fn from_raw(e: &ffi::ibv_gid_entry) -> Self {
        let gid_type = match e.gid_type {
            ffi::IBV_GID_TYPE_IB => GidType::Ib,
            ffi::IBV_GID_TYPE_ROCE_V1 => GidType::RoceV1,
            ffi::IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
            other => GidType::Other(other),
        };
        GidEntry {
            // SAFETY: every bit pattern of the union is a valid byte array.
            gid: Gid(unsafe { e.gid.raw }),
            index: e.gid_index,
            port: e.port_num,
            gid_type,
            ndev_ifindex: e.ndev_ifindex,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mtu_bytes_round_trip_and_reject_other_sizes() {
        for m in [
            Mtu::Mtu256,
            Mtu::Mtu512,
            Mtu::Mtu1024,
            Mtu::Mtu2048,
            Mtu::Mtu4096,
        ] {
            assert_eq!(Mtu::from_bytes(m.bytes()).unwrap(), m);
            assert_eq!(Mtu::from_raw(m as u32).unwrap(), m);
        }
        assert_eq!(Mtu::Mtu1024.bytes(), 1024);
        for bad in [0, 255, 1000, 8192, u32::MAX] {
            assert!(matches!(
                Mtu::from_bytes(bad),
                Err(Error::OutOfRange { .. })
            ));
        }
        for bad in [0, 6, u32::MAX] {
            assert!(matches!(Mtu::from_raw(bad), Err(Error::OutOfRange { .. })));
        }
    }

    #[test]
    fn roce_v2_gid_of_an_ipv4_address_prints_mapped() {
        let g = Gid::from("::ffff:10.99.0.1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(g.to_string(), "::ffff:10.99.0.1");
        assert!(!g.is_zero());
        assert!(Gid::default().is_zero());
        let ib = Gid::from("fe80::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ib.to_string(), "fe80::1");
    }
}
