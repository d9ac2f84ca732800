//! Socket addresses between Rust and C (`struct sockaddr_in`,
//! `struct sockaddr_in6`).

use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// A socket address laid out for C: a `sockaddr_storage` with its length.
pub(crate) struct RawAddr {
    storage: libc::sockaddr_storage,
}

impl RawAddr {
    pub(crate) fn new(addr: SocketAddr) -> Self {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr {
                        s_addr: u32::from_ne_bytes(a.ip().octets()),
                    },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for
                // every sockaddr type.
                unsafe {
                    std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin)
                };
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr {
                        s6_addr: a.ip().octets(),
                    },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: as above.
                unsafe {
                    std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6)
                };
            }
        }
        RawAddr { storage }
    }

    /// The address as `struct sockaddr *` for librdmacm (which reads it
    /// only during the call).
    pub(crate) fn as_mut_ptr(&mut self) -> *mut crate::ffi::cm::sockaddr {
        (&mut self.storage as *mut libc::sockaddr_storage).cast()
    }
}

/// Reads a C socket address: IPv4 and IPv6; `None` for another family or
/// an unset one.
///
/// # Safety
///
/// `sa` points to a socket address readable for the size its family has
/// (librdmacm's `struct rdma_addr` members are `sockaddr_storage`-sized).
pub(crate) unsafe fn from_raw(sa: *const crate::ffi::cm::sockaddr) -> Option<SocketAddr> {
    // SAFETY: the caller's promise; the family is the first field.
    let family = i32::from(unsafe { (*sa).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in>()) };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let sin6 = unsafe { std::ptr::read_unaligned(sa.cast::<libc::sockaddr_in6>()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                u32::from_be(sin6.sin6_flowinfo),
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_addresses_round_trip_through_c() {
        for a in [
            "10.99.0.1:7174".parse::<SocketAddr>().unwrap(),
            "[fe80::1]:4791".parse().unwrap(),
            "0.0.0.0:0".parse().unwrap(),
        ] {
            let mut raw = RawAddr::new(a);
            // SAFETY: a sockaddr_storage just written.
            let back = unsafe { from_raw(raw.as_mut_ptr()) };
            assert_eq!(back, Some(a));
        }
    }
}
