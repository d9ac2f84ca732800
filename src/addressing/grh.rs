//! What a UD receive holds: the 40-byte GRH area the device writes at the
//! start of every UD receive buffer, and the message after it.

use crate::addressing::ah::{AhAttr, Grh};
use crate::cq::WorkCompletion;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ffi;
use crate::port::Gid;
use crate::wc::WcFlags;

/// The bytes at the start of every UD receive buffer that the device
/// fills with the packet's global route header, or leaves alone when the
/// packet had none (`ibv_post_recv(3)`: "the first 40 bytes of the buffer
/// of a UD receive are reserved for the GRH"). A receive's `byte_len`
/// counts them.
pub const UD_GRH_BYTES: usize = 40;

/// The global route header of a received UD message, read from the first
/// 40 bytes of its receive buffer (`struct ibv_grh`).
///
/// On InfiniBand these bytes are a GRH (IP version 6 layout); on RoCE v2
/// they are the IP header of the packet: an IPv6 header (the same layout),
/// or, for IPv4, a 20-byte IPv4 header in bytes 20 to 39, with bytes 0 to
/// 19 undefined. [`parse`](Self::parse) tells the two apart as libibverbs'
/// `ibv_init_ah_from_wc` does (version nibble, IPv4 header length and
/// checksum) and gives the IPv4 addresses as IPv4-mapped GIDs
/// (`::ffff:a.b.c.d`), the form a RoCE v2 GID table holds them in.
///
/// ```
/// use mlx5dv::ReceivedGrh;
///
/// let mut b = [0u8; 40];
/// b[0] = 0x60; // IP version 6
/// b[5] = 8; // payload length
/// b[6] = 0x1b; // next header: IBA transport
/// b[7] = 64; // hop limit
/// b[8..24].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
/// let g = ReceivedGrh::parse(&b)?;
/// assert_eq!((g.ip_version, g.payload_length, g.next_header, g.hop_limit), (6, 8, 0x1b, 64));
/// assert_eq!(g.sgid.0[15], 1);
/// # Ok::<(), mlx5dv::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceivedGrh {
    /// 6 for a GRH or an IPv6 header, 4 for an IPv4 header (RoCE v2).
    pub ip_version: u8,
    /// Traffic class (IPv4: the type of service byte).
    pub traffic_class: u8,
    /// Flow label (20 bits; 0 for IPv4).
    pub flow_label: u32,
    /// Bytes after this header (IPv4: the total length less its 20).
    pub payload_length: u16,
    /// Next header (0x1b, IBA transport, on InfiniBand; 17, UDP, on RoCE
    /// v2).
    pub next_header: u8,
    /// Hop limit (IPv4: time to live).
    pub hop_limit: u8,
    /// The sender's GID.
    pub sgid: Gid,
    /// The GID it was sent to.
    pub dgid: Gid,
}

impl ReceivedGrh {
    /// Reads the 40 bytes of a UD receive's GRH area. Refused
    /// ([`Error::InvalidArgument`]) when they hold neither a GRH (version
    /// 6) nor an IPv4 header.
    pub fn parse(b: &[u8; UD_GRH_BYTES]) -> Result<Self> {
        let be16 = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let v6 = b[0] >> 4 == 6;
        let ip4 = &b[20..40];
        let v4 = ip4[0] >> 4 == 4 && (!v6 || (ip4[0] & 0xf == 5 && ipv4_checksum_ok(ip4)));
        if v4 {
            let mapped = |a: &[u8]| {
                let mut g = [0u8; 16];
                g[10] = 0xff;
                g[11] = 0xff;
                g[12..].copy_from_slice(a);
                Gid(g)
            };
            return Ok(ReceivedGrh {
                ip_version: 4,
                traffic_class: ip4[1],
                flow_label: 0,
                payload_length: be16(22).saturating_sub(20),
                next_header: ip4[9],
                hop_limit: ip4[8],
                sgid: mapped(&ip4[12..16]),
                dgid: mapped(&ip4[16..20]),
            });
        }
        if !v6 {
            return Err(Error::InvalidArgument(format!(
                "UD receive GRH area: neither a GRH (IP version 6) nor an IPv4 header \
                 (first bytes {:02x} and, at 20, {:02x})",
                b[0], b[20]
            )));
        }
        let word = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let gid = |i: usize| {
            let mut g = [0u8; 16];
            g.copy_from_slice(&b[i..i + 16]);
            Gid(g)
        };
        Ok(ReceivedGrh {
            ip_version: 6,
            traffic_class: (word >> 20) as u8,
            flow_label: word & 0x000F_FFFF,
            payload_length: be16(4),
            next_header: b[6],
            hop_limit: b[7],
            sgid: gid(8),
            dgid: gid(24),
        })
    }
}

impl AhAttr {
    /// The path back to the sender of a UD message received on `port` of
    /// `ctx` (`ibv_init_ah_from_wc(3)`): from the receive buffer's GRH
    /// area, the completion's flags (a GRH is read only with
    /// [`WcFlags::GRH`]) and the sender's LID
    /// ([`PolledWc::slid`](crate::PolledWc::slid)). On RoCE the message
    /// must have come with its GRH; the local GID index is the one whose
    /// GID the message was sent to. Make the reply's address handle of it
    /// with [`AddressHandle::new`](crate::AddressHandle::new), and address
    /// the reply to the completion's
    /// [`src_qp`](crate::PolledWc::src_qp).
    ///
    /// A completion does not carry the sender's Q_Key: the reply's
    /// [`UdAddr`](crate::UdAddr) needs the one the sender's QP was made
    /// ready with, which the two sides agree on beforehand (one Q_Key
    /// for the whole service, as in [`UdEndpoint`](crate::UdEndpoint)'s
    /// example) or which the sender tells in its message or its
    /// endpoint ([`UdEndpoint::qkey`](crate::UdEndpoint::qkey)).
    ///
    /// From a [`WorkCompletion`](crate::WorkCompletion), whose `slid` is
    /// an `Option`, and a receive buffer of any length:
    /// [`reply_to`](Self::reply_to).
    pub fn from_received(
        ctx: &Context,
        port: u8,
        grh_area: &[u8; UD_GRH_BYTES],
        flags: WcFlags,
        slid: u16,
    ) -> Result<Self> {
        let mut wc = ffi::ibv_wc {
            wc_flags: (flags & WcFlags::GRH).bits(),
            slid,
            ..Default::default()
        };
        let mut grh = ffi::ibv_grh::default();
        // SAFETY: `ibv_grh` is 40 bytes of plain data (the layout checks
        // say so), as many as the area has.
        unsafe {
            std::ptr::copy_nonoverlapping(
                grh_area.as_ptr(),
                std::ptr::addr_of_mut!(grh).cast::<u8>(),
                UD_GRH_BYTES,
            )
        };
        let mut raw = ffi::ibv_ah_attr::default();
        // SAFETY: the context is open; the three structs are initialised
        // and writable for the call.
        let rc =
            unsafe { ffi::ibv_init_ah_from_wc(ctx.as_ptr(), port, &mut wc, &mut grh, &mut raw) };
        if rc != 0 {
            return Err(Error::last_os(
                "ibv_init_ah_from_wc",
                format!(
                    "port {port} of {}, wc_flags {flags:?}, slid {slid}",
                    ctx.name()
                ),
            ));
        }
        Ok(AhAttr {
            port: raw.port_num,
            dlid: raw.dlid,
            sl: raw.sl,
            grh: (raw.is_global != 0).then_some(Grh {
                // SAFETY: every bit pattern of the union is a valid
                // `raw` array.
                dgid: Gid(unsafe { raw.grh.dgid.raw }),
                sgid_index: raw.grh.sgid_index,
                hop_limit: raw.grh.hop_limit,
                traffic_class: raw.grh.traffic_class,
                flow_label: raw.grh.flow_label,
            }),
        })
    }

    /// [`from_received`](Self::from_received) of a UD receive's
    /// completion `wc` (its flags and sender's LID) and the start of its
    /// receive buffer, `received`: at least the [`UD_GRH_BYTES`] (40) of
    /// the GRH area (the whole buffer will do; the rest is not read). A
    /// shorter slice is refused ([`Error::OutOfRange`]), and so is a
    /// completion that is not a received message's (one without a source
    /// LID: a send's, [`Error::InvalidArgument`]), before any C call.
    /// Address the reply to `wc.src_qp`, with the sender's Q_Key (see
    /// `from_received`).
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # use std::time::Duration;
    /// # fn f(ctx: &Context, pd: &ProtectionDomain, cq: &mut CompletionQueue,
    /// #      mr: &MemoryRegion, qkey: u32) -> Result<()> {
    /// let wc = cq.wait(1, Duration::from_secs(1))?[0].ok()?;
    /// let received = mr.to_vec(0..wc.byte_len as usize)?; // GRH area, then the message
    /// let back = AddressHandle::new(pd, &AhAttr::reply_to(ctx, 1, &wc, &received)?)?;
    /// let to = UdAddr::new(&back, wc.src_qp.unwrap_or_default(), qkey);
    /// # let _ = to; Ok(()) }
    /// ```
    pub fn reply_to(ctx: &Context, port: u8, wc: &WorkCompletion, received: &[u8]) -> Result<Self> {
        let Some(area) = received.first_chunk::<UD_GRH_BYTES>() else {
            return Err(Error::OutOfRange {
                what: "AhAttr::reply_to receive buffer length",
                value: received.len() as u64,
                limit: format!(
                    "at least UD_GRH_BYTES ({UD_GRH_BYTES}): the GRH area at the start of \
                     every UD receive"
                ),
            });
        };
        let Some(slid) = wc.slid else {
            return Err(Error::InvalidArgument(format!(
                "AhAttr::reply_to: work request {} on QP {:#x} ({:?}) has no source LID: \
                 reply to a receive's completion, read on a CQ a UD QP receives on (or \
                 one that CompletionQueue::read_senders was called for)",
                wc.wr_id, wc.qp_num, wc.opcode
            )));
        };
        Self::from_received(ctx, port, area, wc.wc_flags, slid)
    }
}

/// Whether the 20-byte IPv4 header `h` carries a correct checksum.
fn ipv4_checksum_ok(h: &[u8]) -> bool {
    let mut sum: u32 = h
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// Splits what a UD receive wrote into `buf` (the receive's buffer, from
/// its start) into its global route header and its message, from the
/// receive completion's `byte_len` (which counts the 40-byte GRH area)
/// and its flags: the header is there iff the completion has
/// [`WcFlags::GRH`] (always on RoCE; on InfiniBand when the sender's
/// address handle had one). A `byte_len` below 40 or past `buf` is
/// refused ([`Error::OutOfRange`]).
///
/// ```
/// use mlx5dv::{ud_received, WcFlags};
///
/// let mut buf = vec![0u8; 40 + 5];
/// buf[40..].copy_from_slice(b"hello");
/// let (grh, msg) = ud_received(&buf, 45, WcFlags::empty())?;
/// assert_eq!((grh, msg), (None, &b"hello"[..]));
/// # Ok::<(), mlx5dv::Error>(())
/// ```
pub fn ud_received(
    buf: &[u8],
    byte_len: u32,
    flags: WcFlags,
) -> Result<(Option<ReceivedGrh>, &[u8])> {
    let len = byte_len as usize;
    if len < UD_GRH_BYTES || len > buf.len() {
        return Err(Error::OutOfRange {
            what: "UD receive byte_len",
            value: u64::from(byte_len),
            limit: format!(
                "{UD_GRH_BYTES} (the GRH area) to {} (the buffer's length)",
                buf.len()
            ),
        });
    }
    let grh = match buf.first_chunk::<UD_GRH_BYTES>() {
        Some(area) if flags.contains(WcFlags::GRH) => Some(ReceivedGrh::parse(area)?),
        _ => None,
    };
    Ok((grh, &buf[UD_GRH_BYTES..len]))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 header from 10.0.0.1 to 10.0.0.2, UDP, TTL 64, with its
    /// checksum, in bytes 20..40.
    fn ipv4_area(payload: u16) -> [u8; 40] {
        let mut b = [0xAAu8; 40];
        let tot = (payload + 20).to_be_bytes();
        let h = [
            0x45, 0x02, tot[0], tot[1], 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        b[20..].copy_from_slice(&h);
        let mut sum: u32 = b[20..]
            .chunks_exact(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        b[30..32].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        b
    }

    #[test]
    fn an_ipv4_header_is_read_with_mapped_gids() {
        let g = ReceivedGrh::parse(&ipv4_area(8 + 12)).unwrap();
        assert_eq!(g.ip_version, 4);
        assert_eq!((g.traffic_class, g.next_header, g.hop_limit), (2, 17, 64));
        assert_eq!(g.payload_length, 20);
        assert_eq!(
            g.sgid.0,
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1]
        );
        assert_eq!(g.dgid.0[12..], [10, 0, 0, 2]);
    }

    #[test]
    fn a_grh_is_read_field_by_field() {
        let mut b = [0u8; 40];
        b[..4].copy_from_slice(&0x6123_4567u32.to_be_bytes());
        b[4..6].copy_from_slice(&300u16.to_be_bytes());
        b[6] = 0x1b;
        b[7] = 1;
        b[8..24].copy_from_slice(&[1; 16]);
        b[24..40].copy_from_slice(&[2; 16]);
        let g = ReceivedGrh::parse(&b).unwrap();
        assert_eq!(
            g,
            ReceivedGrh {
                ip_version: 6,
                traffic_class: 0x12,
                flow_label: 0x3_4567,
                payload_length: 300,
                next_header: 0x1b,
                hop_limit: 1,
                sgid: Gid([1; 16]),
                dgid: Gid([2; 16]),
            }
        );
    }

    #[test]
    fn a_version_6_grh_with_a_bad_ipv4_checksum_at_20_stays_a_grh() {
        let mut b = ipv4_area(0);
        b[0] = 0x60;
        b[31] ^= 1; // checksum broken
        assert_eq!(ReceivedGrh::parse(&b).unwrap().ip_version, 6);
        let mut b = ipv4_area(0);
        b[0] = 0x60;
        assert_eq!(ReceivedGrh::parse(&b).unwrap().ip_version, 4);
    }

    #[test]
    fn neither_header_is_refused() {
        assert!(matches!(
            ReceivedGrh::parse(&[0; 40]),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn ud_received_splits_and_checks_the_length() {
        let mut buf = ipv4_area(4).to_vec();
        buf.extend_from_slice(b"abcd");
        let (grh, msg) = ud_received(&buf, 44, WcFlags::GRH).unwrap();
        assert_eq!(grh.unwrap().ip_version, 4);
        assert_eq!(msg, b"abcd");
        let (grh, msg) = ud_received(&buf, 42, WcFlags::empty()).unwrap();
        assert_eq!((grh, msg), (None, &b"ab"[..]));
        for bad in [39, 45] {
            assert!(matches!(
                ud_received(&buf, bad, WcFlags::GRH),
                Err(Error::OutOfRange {
                    what: "UD receive byte_len",
                    ..
                })
            ));
        }
    }
}
