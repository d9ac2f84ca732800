//! The plain data of QPs: endpoints (the send ops and sizes a QP is made
//! with are `crate::qp_spec`'s, the options of a connection
//! `crate::addressing`'s).

use super::{versioned_form, ByteForm, FORM_VERSION};
#[cfg(any(doc, test))]
use crate::error::Error;
use crate::error::Result;
use crate::port::Gid;

/// What a peer needs to connect to a QP, exchanged out of band (the
/// LID/QPN/PSN/GID that `ibv_rc_pingpong` sends over TCP).
///
/// Two wire forms: the versioned byte form of [`to_bytes`](Self::to_bytes),
/// and, with the `serde` feature, `Serialize`/`Deserialize` as a struct of
/// `qpn`, `psn`, `lid` and `gid` (the GID as IPv6 text in human-readable
/// formats, 16 bytes in binary ones). Both refuse a QP number or PSN past
/// 24 bits when reading.
///
/// ```
/// # #[cfg(feature = "serde")] {
/// use mlx5dv::{Endpoint, Gid};
///
/// let gid = "::ffff:10.99.0.1".parse::<std::net::Ipv6Addr>().unwrap();
/// let e = Endpoint { qpn: 0x11, psn: 0xabcdef, lid: 0, gid: Gid::from(gid) };
/// let json = serde_json::to_string(&e).unwrap();
/// assert_eq!(json, r#"{"qpn":17,"psn":11259375,"lid":0,"gid":"::ffff:10.99.0.1"}"#);
/// assert_eq!(serde_json::from_str::<Endpoint>(&json).unwrap(), e);
/// # }
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The QP number.
    pub qpn: u32,
    /// The first packet sequence number (24 bits).
    pub psn: u32,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The port GID to address it by (RoCE, routed IB); zero when unused.
    pub gid: Gid,
}

/// The QP number and PSN in hex, as the crate's messages give them.
impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("qpn", &format_args!("{:#x}", self.qpn))
            .field("psn", &format_args!("{:#x}", self.psn))
            .field("lid", &self.lid)
            .field("gid", &self.gid)
            .finish()
    }
}

impl Endpoint {
    /// The length of the byte form ([`to_bytes`](Self::to_bytes)).
    pub const BYTES: usize = 28;
    /// The version of the byte form this crate writes and reads.
    pub const VERSION: u8 = FORM_VERSION;

    /// The byte form, to send to the peer (over TCP, in a CM's private
    /// data, in a file). Stable: a later release that changes it writes
    /// another version, which this one refuses rather than misreads.
    ///
    /// | offset | bytes | field |
    /// |---|---|---|
    /// | 0 | 1 | version: 2 |
    /// | 1 | 1 | form: 1 (an `Endpoint`'s; other types' forms have others) |
    /// | 2 | 2 | LID, big-endian |
    /// | 4 | 4 | QP number, big-endian (24 bits) |
    /// | 8 | 4 | PSN, big-endian (24 bits) |
    /// | 12 | 16 | GID, in wire order |
    ///
    /// ```
    /// use mlx5dv::{Endpoint, Gid};
    ///
    /// let e = Endpoint { qpn: 0x11, psn: 0xabcdef, lid: 0, gid: Gid([0; 16]) };
    /// let bytes = e.to_bytes();
    /// assert_eq!(bytes[..12], [2, 1, 0, 0, 0, 0, 0, 0x11, 0, 0xab, 0xcd, 0xef]);
    /// assert_eq!(Endpoint::from_bytes(&bytes)?, e);
    /// # Ok::<(), mlx5dv::Error>(())
    /// ```
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0] = Self::VERSION;
        b[1] = ByteForm::Endpoint.tag();
        b[2..4].copy_from_slice(&self.lid.to_be_bytes());
        b[4..8].copy_from_slice(&self.qpn.to_be_bytes());
        b[8..12].copy_from_slice(&self.psn.to_be_bytes());
        b[12..28].copy_from_slice(&self.gid.0);
        b
    }

    /// Reads the byte form of [`to_bytes`](Self::to_bytes): exactly
    /// [`BYTES`](Self::BYTES) bytes of version 2 and an `Endpoint`'s form
    /// byte, with a 24-bit QP number and PSN; anything else is refused
    /// (another type's byte form, such as a [`RemoteBuf`](crate::RemoteBuf)'s,
    /// as [`Error::WrongByteForm`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let b = versioned_form::<{ Self::BYTES }>(
            bytes,
            ByteForm::Endpoint,
            "Endpoint byte form length",
        )?;
        let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let (qpn, psn) = (word(4), word(8));
        super::check_24_bits("Endpoint QP number", qpn)?;
        super::check_24_bits("Endpoint PSN", psn)?;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[12..28]);
        Ok(Endpoint {
            qpn,
            psn,
            lid: u16::from_be_bytes([b[2], b[3]]),
            gid: Gid(gid),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_byte_form_round_trips_and_refuses_what_it_cannot_read() {
        let e = Endpoint {
            qpn: 0x00ab_cdef,
            psn: 0x12_3456,
            lid: 0x0102,
            gid: Gid([7; 16]),
        };
        let b = e.to_bytes();
        assert_eq!(b.len(), Endpoint::BYTES);
        assert_eq!(b[..4], [2, 1, 1, 2]);
        assert_eq!(Endpoint::from_bytes(&b).unwrap(), e);
        assert!(Endpoint::from_bytes(&b[..27]).is_err());
        let mut v3 = b;
        v3[0] = 3;
        let err = Endpoint::from_bytes(&v3).unwrap_err().to_string();
        assert!(err.contains("version 3"), "{err}");
        let mut big = b;
        big[4] = 1; // QP number over 24 bits
        assert!(matches!(
            Endpoint::from_bytes(&big),
            Err(Error::OutOfRange { .. })
        ));
    }
}
