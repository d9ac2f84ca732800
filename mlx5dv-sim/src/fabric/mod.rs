//! The fabric: every device started under one `mlx5-sim` run is a host on
//! one simulated subnet, and packets between hosts travel as datagrams on
//! Unix sockets in the abstract namespace.
//!
//! A host's address is a number `id` (1 to 0xbfff), taken at the device's
//! first use by binding the socket `@mlx5dv-sim/<fabric>/<id>`: the first
//! free number wins, and the kernel frees it when the process ends (a host
//! that exits or crashes simply stops answering, as on a wire). On an
//! InfiniBand port the id is the port's LID and the low 16 bits of its port
//! GUID; on a RoCE port (`MLX5DV_SIM_ROCE=1`) it is in the port's MAC
//! address and IPv4 address, and so in each of its GIDs. Routing a packet
//! is reading the id back from the destination LID or GID.
//!
//! What travels is in [`wire`]; what the device does with it is in
//! `device::requester::remote` (a requester's packets) and
//! `device::responder` (a request at its QP).

pub mod outbox;
pub mod wire;
#[cfg(test)]
mod wire_props;

use crate::config::{self, debug};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// The first 48 bits of every host's node and port GUID (Mellanox's OUI).
const GUID_BASE: u64 = 0x0c42_a103_00b1_0000;
/// The interface identifier of a RoCE link-local GID, less the host id.
const ROCE_EUI64: [u8; 6] = [0x00, 0xc4, 0x2a, 0xff, 0xfe, 0x00];
/// The IPv4 network of the hosts' addresses on a RoCE port: 10.77.x.y.
const ROCE_NET: [u8; 2] = [10, 77];
/// The highest unicast LID.
pub const MAX_HOST: u16 = 0xbfff;
/// The Ethernet device named as every RoCE GID's netdev (it exists on every
/// Linux host, so `if_nametoindex` finds it).
pub const ROCE_NETDEV: &str = "lo";

/// This process's place on the fabric.
#[derive(Debug)]
pub struct Host {
    /// The host number (the LID on InfiniBand).
    pub id: u16,
    /// Port 1 is Ethernet (RoCE).
    pub roce: bool,
    fabric: String,
    sock: OwnedFd,
    pid: u32,
}

/// What [`Host::recv`] took off the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// A datagram of `len` bytes, now at the start of the buffer.
    Datagram {
        /// Its length.
        len: usize,
        /// The host that sent it, from the socket's address (`None`: no
        /// host of this fabric).
        from: Option<u16>,
    },
    /// A datagram longer than any packet (`len` bytes): dropped whole.
    TooLong {
        /// Its length.
        len: usize,
        /// The host that sent it (`None`: no host of this fabric).
        from: Option<u16>,
    },
}

/// A GID table entry of the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: [u8; 16],
    /// Its sysfs type text.
    pub kind: &'static str,
}

fn abstract_addr(fabric: &str, id: u16) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let name = format!("mlx5dv-sim/{fabric}/{id}");
    let bytes = name.as_bytes();
    let n = bytes.len().min(a.sun_path.len() - 1);
    // sun_path[0] stays 0: the abstract namespace.
    for (d, s) in a.sun_path[1..=n].iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + n;
    (a, len as libc::socklen_t)
}

impl Host {
    fn join() -> std::io::Result<Self> {
        let cfg = config::get();
        let pid = std::process::id();
        let fabric = cfg
            .fabric
            .clone()
            .unwrap_or_else(|| format!("private-{pid}"));
        // SAFETY: plain socket(2) call; the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_UNIX,
                libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor this function owns.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        for id in 1..=MAX_HOST {
            let (a, len) = abstract_addr(&fabric, id);
            // SAFETY: `a` is a valid sockaddr_un of `len` bytes.
            let r = unsafe { libc::bind(fd, (&a as *const libc::sockaddr_un).cast(), len) };
            if r == 0 {
                let size: libc::c_int = 1 << 20;
                for opt in [libc::SO_SNDBUF, libc::SO_RCVBUF] {
                    // SAFETY: setsockopt with a pointer to an int of its size.
                    unsafe {
                        libc::setsockopt(
                            fd,
                            libc::SOL_SOCKET,
                            opt,
                            (&size as *const libc::c_int).cast(),
                            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                        )
                    };
                }
                debug!("fabric {fabric}: this process is host {id}");
                return Ok(Self {
                    id,
                    roce: cfg.roce,
                    fabric,
                    sock,
                    pid,
                });
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EADDRINUSE) {
                return Err(e);
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            "every host number of the fabric is taken",
        ))
    }

    /// The port's LID (0 on RoCE, which has none).
    pub fn lid(&self) -> u16 {
        if self.roce {
            0
        } else {
            self.id
        }
    }

    /// The node GUID (also the port GUID).
    pub fn node_guid(&self) -> u64 {
        GUID_BASE | u64::from(self.id)
    }

    /// The RoCE port's MAC address (locally administered).
    pub fn mac(&self) -> [u8; 6] {
        mac_of(self.id)
    }

    /// The RoCE port's IPv4 address.
    pub fn ipv4(&self) -> [u8; 4] {
        ipv4_of(self.id)
    }

    /// The port's active MTU in bytes: 4096 on InfiniBand, 1024 on RoCE
    /// (what QUERY_PORT reports; the largest UD datagram either way).
    pub fn mtu(&self) -> usize {
        if self.roce {
            1024
        } else {
            4096
        }
    }

    /// The port's GID table (8 entries; unused ones are zero).
    pub fn gids(&self) -> [GidEntry; 8] {
        gids_of(self.id, self.roce)
    }

    /// Sends one datagram to host `to`. `Ok(false)`: not now (its queue is
    /// full: try again later); an error: the host is gone or never was.
    pub fn send(&self, to: u16, bytes: &[u8]) -> std::io::Result<bool> {
        let (a, len) = abstract_addr(&self.fabric, to);
        // SAFETY: `bytes` is readable for its length; `a` a valid address.
        let n = unsafe {
            libc::sendto(
                self.sock.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_DONTWAIT,
                (&a as *const libc::sockaddr_un).cast(),
                len,
            )
        };
        if n >= 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => Ok(false),
            _ => Err(e),
        }
    }

    /// Receives one datagram if one is waiting: its length in `buf`, and
    /// the host that sent it, as the kernel says (the socket's bound name,
    /// `None` for a sender that is no host of this fabric). A datagram
    /// longer than [`wire::MAX_DATAGRAM`] is taken off the socket and
    /// reported as [`Received::TooLong`]: no prefix of it is served.
    pub fn recv(&self, buf: &mut Vec<u8>) -> Option<Received> {
        if buf.len() != wire::MAX_DATAGRAM {
            buf.resize(wire::MAX_DATAGRAM, 0);
        }
        // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
        let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        let mut alen = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
        // SAFETY: `buf` is writable for its length, `a` for `alen` bytes;
        // with MSG_TRUNC the result is the datagram's real length.
        let n = unsafe {
            libc::recvfrom(
                self.sock.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                (&mut a as *mut libc::sockaddr_un).cast(),
                &mut alen,
            )
        };
        let len = usize::try_from(n).ok()?;
        let from = self.host_of_addr(&a, alen);
        Some(if len > buf.len() {
            Received::TooLong { len, from }
        } else {
            Received::Datagram { len, from }
        })
    }

    /// The host whose socket has the name `a` (`alen` bytes): one of this
    /// fabric's, `@mlx5dv-sim/<fabric>/<id>`, exactly as
    /// [`abstract_addr`] makes it.
    fn host_of_addr(&self, a: &libc::sockaddr_un, alen: libc::socklen_t) -> Option<u16> {
        let path_len = (alen as usize).checked_sub(std::mem::size_of::<libc::sa_family_t>())?;
        let path = a.sun_path.get(..path_len)?;
        let (&first, name) = path.split_first()?;
        if first != 0 {
            return None;
        }
        let name: Vec<u8> = name.iter().map(|&c| c as u8).collect();
        let prefix = format!("mlx5dv-sim/{}/", self.fabric);
        let id = std::str::from_utf8(name.strip_prefix(prefix.as_bytes())?).ok()?;
        if id.is_empty() || id.starts_with(['0', '+']) {
            return None;
        }
        let id: u16 = id.parse().ok()?;
        (1..=MAX_HOST).contains(&id).then_some(id)
    }

    /// The socket, for the device thread's poll.
    pub fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

/// The port's active MTU in bytes ([`Host::mtu`]); InfiniBand's, 4096,
/// before this process has joined the fabric.
pub fn mtu() -> usize {
    joined().map_or(4096, Host::mtu)
}

/// The GID table (8 entries; unused ones are zero) of host `id`'s port,
/// RoCE or InfiniBand: every host's is made the same way, so a receiver
/// knows its sender's.
pub fn gids_of(id: u16, roce: bool) -> [GidEntry; 8] {
    let zero = GidEntry {
        gid: [0; 16],
        kind: "IB/RoCE v1",
    };
    let mut t = [zero; 8];
    let id_bytes = id.to_be_bytes();
    if roce {
        let mut ll = [0u8; 16];
        ll[0] = 0xfe;
        ll[1] = 0x80;
        ll[8..14].copy_from_slice(&ROCE_EUI64);
        ll[14..].copy_from_slice(&id_bytes);
        let mut v4 = [0u8; 16];
        v4[10] = 0xff;
        v4[11] = 0xff;
        v4[12..].copy_from_slice(&ipv4_of(id));
        t[0] = GidEntry {
            gid: ll,
            kind: "IB/RoCE v1",
        };
        t[1] = GidEntry {
            gid: ll,
            kind: "RoCE v2",
        };
        t[2] = GidEntry {
            gid: v4,
            kind: "IB/RoCE v1",
        };
        t[3] = GidEntry {
            gid: v4,
            kind: "RoCE v2",
        };
    } else {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8..].copy_from_slice(&(GUID_BASE | u64::from(id)).to_be_bytes());
        t[0].gid = g;
    }
    t
}

/// The RoCE port's IPv4 address of host `id`.
pub fn ipv4_of(id: u16) -> [u8; 4] {
    let [hi, lo] = id.to_be_bytes();
    [ROCE_NET[0], ROCE_NET[1], hi, lo]
}

/// The MAC address of host `id`.
pub fn mac_of(id: u16) -> [u8; 6] {
    let [hi, lo] = id.to_be_bytes();
    [0x02, 0xc4, 0x2a, 0x00, hi, lo]
}

/// The host a destination LID names, if any.
pub fn host_of_lid(lid: u16) -> Option<u16> {
    (1..=MAX_HOST).contains(&lid).then_some(lid)
}

/// The host a destination GID names, if any: an InfiniBand port GID, a
/// RoCE link-local GID or a RoCE IPv4-mapped GID of the fabric.
pub fn host_of_gid(gid: &[u8; 16]) -> Option<u16> {
    let id = u16::from_be_bytes([gid[14], gid[15]]);
    let link_local = gid[0] == 0xfe && gid[1] == 0x80 && gid[2..8] == [0; 6];
    let ib = link_local && gid[8..14] == GUID_BASE.to_be_bytes()[..6];
    let roce_v1 = link_local && gid[8..14] == ROCE_EUI64;
    let v4 = gid[..10] == [0; 10] && gid[10..12] == [0xff, 0xff] && gid[12..14] == ROCE_NET;
    (ib || roce_v1 || v4)
        .then_some(id)
        .filter(|id| (1..=MAX_HOST).contains(id))
}

/// Formats a GID as sysfs does (eight groups of four hex digits).
pub fn gid_text(g: &[u8; 16]) -> String {
    let groups: Vec<String> = g
        .chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect();
    groups.join(":")
}

/// Formats a GUID as sysfs does.
pub fn guid_text(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

static HOST: Mutex<Option<&'static Host>> = Mutex::new(None);

/// This process's host, joining the fabric on first use (a child made by
/// `fork` joins as a host of its own).
pub fn host() -> Option<&'static Host> {
    let mut g = HOST.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if let Some(h) = *g {
        if h.pid == pid {
            return Some(h);
        }
    }
    match Host::join() {
        Ok(h) => {
            // Leaked on purpose: the host lives as long as the process
            // (a forked child's copy of its parent's is left alone).
            let h: &'static Host = Box::leak(Box::new(h));
            *g = Some(h);
            Some(h)
        }
        Err(e) => {
            eprintln!("mlx5dv-sim: cannot join the fabric: {e}");
            None
        }
    }
}

/// The host, if this process has joined the fabric already (never joins).
pub fn joined() -> Option<&'static Host> {
    let g = HOST.lock().unwrap_or_else(|e| e.into_inner());
    g.filter(|h| h.pid == std::process::id())
}

/// The content of a per-host file of the sysfs tree, given its path
/// relative to the device directory (`class/infiniband/mlx5_0/`).
pub fn sysfs_file(rel: &str) -> Option<String> {
    let per_host = matches!(rel, "node_guid" | "sys_image_guid" | "ports/1/lid")
        || rel.starts_with("ports/1/gids/");
    if !per_host {
        return None;
    }
    let h = host()?;
    Some(
        match rel {
            "node_guid" | "sys_image_guid" => guid_text(h.node_guid()),
            "ports/1/lid" => format!("{:#x}", h.lid()),
            _ => {
                let i: usize = rel["ports/1/gids/".len()..].parse().ok()?;
                gid_text(&h.gids().get(i)?.gid)
            }
        } + "\n",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gids_route_back_to_their_host() {
        for roce in [false, true] {
            let h = Host {
                id: 0x1234,
                roce,
                fabric: "t".into(),
                // SAFETY: a fresh descriptor for the test's host.
                sock: unsafe { OwnedFd::from_raw_fd(libc::dup(0)) },
                pid: 0,
            };
            for e in h.gids().iter().filter(|e| e.gid != [0; 16]) {
                assert_eq!(host_of_gid(&e.gid), Some(0x1234), "{}", gid_text(&e.gid));
            }
        }
        assert_eq!(host_of_gid(&[0; 16]), None);
        assert_eq!(host_of_lid(0), None);
        assert_eq!(host_of_lid(0xc000), None);
        assert_eq!(host_of_lid(7), Some(7));
    }

    /// A host of fabric `fabric` bound to `id`, as `Host::join` binds one.
    fn test_host(fabric: &str, id: u16) -> Host {
        // SAFETY: plain socket(2) call; the result is checked.
        let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK, 0) };
        assert!(fd >= 0);
        let (a, len) = abstract_addr(fabric, id);
        // SAFETY: `a` is a valid sockaddr_un of `len` bytes.
        let r = unsafe { libc::bind(fd, (&a as *const libc::sockaddr_un).cast(), len) };
        assert_eq!(r, 0, "bind {id}: {}", std::io::Error::last_os_error());
        Host {
            id,
            roce: false,
            fabric: fabric.into(),
            // SAFETY: a fresh descriptor this test owns.
            sock: unsafe { OwnedFd::from_raw_fd(fd) },
            pid: 0,
        }
    }

    #[test]
    fn the_sender_is_the_socket_that_sent() {
        let fabric = format!("sender-{}", std::process::id());
        let (a, b) = (test_host(&fabric, 1), test_host(&fabric, 2));
        let mut buf = Vec::new();
        a.send(2, b"from a").unwrap();
        assert_eq!(
            b.recv(&mut buf),
            Some(Received::Datagram {
                len: 6,
                from: Some(1)
            })
        );
        // A socket with no name, and one named in another fabric: no host.
        let (to, len) = abstract_addr(&fabric, 2);
        let other = test_host(&format!("{fabric}-other"), 1);
        // SAFETY: plain socket(2) call; the result is checked.
        let anon = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0) };
        assert!(anon >= 0);
        // SAFETY: a fresh descriptor this test owns.
        let anon = unsafe { OwnedFd::from_raw_fd(anon) };
        for fd in [anon.as_raw_fd(), other.fd()] {
            // SAFETY: a valid buffer and address of `len` bytes.
            let n = unsafe {
                libc::sendto(
                    fd,
                    b"x".as_ptr().cast(),
                    1,
                    0,
                    (&to as *const libc::sockaddr_un).cast(),
                    len,
                )
            };
            assert_eq!(n, 1);
            assert_eq!(
                b.recv(&mut buf),
                Some(Received::Datagram { len: 1, from: None })
            );
        }
        // Longer than any packet: reported whole, as too long.
        let long = vec![7u8; wire::MAX_DATAGRAM + 10];
        assert!(a.send(2, &long).unwrap());
        assert_eq!(
            b.recv(&mut buf),
            Some(Received::TooLong {
                len: wire::MAX_DATAGRAM + 10,
                from: Some(1)
            })
        );
        assert_eq!(b.recv(&mut buf), None);
    }

    #[test]
    fn an_answer_to_a_full_queue_waits_in_the_outbox_not_in_the_sender() {
        let fabric = format!("outbox-{}", std::process::id());
        let (a, b) = (test_host(&fabric, 1), test_host(&fabric, 2));
        // Fill B's queue (net.unix.max_dgram_qlen datagrams).
        let mut queued = 0;
        while a.send(2, b"request").unwrap() {
            queued += 1;
            assert!(queued < 100_000, "the queue never fills");
        }
        // Answers to B return at once, and wait, up to the per-host bound.
        let t0 = std::time::Instant::now();
        for i in 0..outbox::MAX_PER_HOST + 8 {
            outbox::send_or_keep(&a, 2, format!("answer {i}").into_bytes());
        }
        assert!(
            t0.elapsed() < std::time::Duration::from_millis(50),
            "{:?}",
            t0.elapsed()
        );
        assert_eq!(outbox::waiting(), outbox::MAX_PER_HOST);
        // B reads two: the two oldest answers go in, in order.
        let mut buf = Vec::new();
        for _ in 0..2 {
            assert!(b.recv(&mut buf).is_some());
        }
        assert_eq!(outbox::flush(&a), outbox::MAX_PER_HOST - 2);
        let mut got = Vec::new();
        while let Some(Received::Datagram { len, .. }) = b.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..len]).into_owned());
        }
        assert_eq!(got[got.len() - 2..], ["answer 0", "answer 1"]);
        // After its patience, an answer still waiting is dropped, not sent.
        std::thread::sleep(outbox::PATIENCE + std::time::Duration::from_millis(20));
        assert_eq!(outbox::flush(&a), 0);
        assert_eq!(b.recv(&mut buf), None);
    }

    #[test]
    fn sysfs_texts() {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[15] = 1;
        assert_eq!(gid_text(&g), "fe80:0000:0000:0000:0000:0000:0000:0001");
        assert_eq!(guid_text(GUID_BASE | 2), "0c42:a103:00b1:0002");
    }
}
