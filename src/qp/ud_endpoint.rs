//! UD addresses to exchange: [`UdEndpoint`], what a peer needs to send to
//! a UD QP, its byte form, and [`UdDest`], the address handle and remote
//! QP made of a peer's.

use super::{versioned_form, ByteForm};
use super::{ConnectOptions, UdAddr, UdQp};
use crate::addressing::ah::{AddressHandle, AhAttr};
use crate::error::{Error, Result};
use crate::pd::ProtectionDomain;
use crate::port::Gid;
use crate::qp_state::QpState;
use std::fmt;

/// What a peer needs to send to a UD QP ([`UdQp::endpoint`]): its QP
/// number and Q_Key, and its port's LID and GID. The UD counterpart of an
/// RC [`Endpoint`](crate::Endpoint), with the Q_Key where that has a PSN:
/// a UD QP has no connection, so no sequence number is exchanged, and a
/// message is received only when it carries the QP's Q_Key.
///
/// Two wire forms, as an `Endpoint` has: the versioned byte form of
/// [`to_bytes`](Self::to_bytes), and, with the `serde` feature, a struct
/// of `qpn`, `qkey`, `lid` and `gid`; both refuse a QP number past 24
/// bits when reading. A peer makes a [`UdDest`] of it.
///
/// Two UD QPs, each sending to the other's endpoint (in two processes,
/// the bytes go over TCP or any other channel). Both are made ready with
/// one Q_Key, the service's: a receiver answering a message addresses
/// the reply by the completion ([`AhAttr::reply_to`], to its `src_qp`),
/// which does not carry the sender's Q_Key, so a server that replies to
/// whoever wrote needs to know it beforehand (or from the message).
///
/// ```no_run
/// use mlx5dv::*;
/// use std::time::Duration;
///
/// # fn main() -> Result<()> {
/// let ctx = Context::open_first()?;
/// let pd = ProtectionDomain::new(&ctx)?;
/// let mut cq = CompletionQueue::new(&ctx, 16)?;
/// // RoCE needs a GID to send from; InfiniBand within a subnet does not.
/// let opts = ConnectOptions::default().gid_index(ctx.default_gid_index(1)?);
/// let mut server = QpBuilder::ud(&pd, &cq, &cq).build()?;
/// let mut client = QpBuilder::ud(&pd, &cq, &cq).build()?;
/// const QKEY: u32 = 0x1111_1111; // the service's, on both sides
/// server.ready(opts.port, QKEY, 0)?;
/// client.ready(opts.port, QKEY, 0)?;
///
/// // The server sends its endpoint's bytes; the client reads them.
/// let wire = server.endpoint(&opts)?.to_bytes();
/// let peer = UdEndpoint::from_bytes(&wire)?;
///
/// let mut mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE)?;
/// let buf = mr.sge_mut(0..UD_GRH_BYTES + 64)?.into();
/// // SAFETY: `mr` outlives the receive's completion, waited for below.
/// unsafe { server.post_recv(1, &[buf])? };
///
/// let to = UdDest::new(&pd, &peer, &opts)?;
/// client.post_and_wait(&mut cq, Duration::from_secs(1), |b| {
///     b.wr(2, to.addr()).signaled().send().inline(b"hello")
/// })?;
/// let wc = cq.wait(1, Duration::from_secs(1))?[0].ok()?;
/// assert_eq!(wc.src_qp, Some(client.qp_num()));
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UdEndpoint {
    /// The QP number (24 bits).
    pub qpn: u32,
    /// The QP's Q_Key: what a message must carry to be received there.
    pub qkey: u32,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The port GID to address it by (RoCE, routed IB); zero when unused.
    pub gid: Gid,
}

/// The QP number and Q_Key in hex, as the crate's messages give them.
impl fmt::Debug for UdEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdEndpoint")
            .field("qpn", &format_args!("{:#x}", self.qpn))
            .field("qkey", &format_args!("{:#x}", self.qkey))
            .field("lid", &self.lid)
            .field("gid", &self.gid)
            .finish()
    }
}

impl UdEndpoint {
    /// The length of the byte form ([`to_bytes`](Self::to_bytes)).
    pub const BYTES: usize = 28;
    /// The version of the byte form this crate writes and reads.
    pub const VERSION: u8 = super::FORM_VERSION;

    /// The byte form, to send to the peers. Stable: a later release that
    /// changes it writes another version, which this one refuses.
    ///
    /// | offset | bytes | field |
    /// |---|---|---|
    /// | 0 | 1 | version: 2 |
    /// | 1 | 1 | form: 3 (a `UdEndpoint`'s; other types' forms have others) |
    /// | 2 | 2 | LID, big-endian |
    /// | 4 | 4 | QP number, big-endian (24 bits) |
    /// | 8 | 4 | Q_Key, big-endian |
    /// | 12 | 16 | GID, in wire order |
    ///
    /// ```
    /// use mlx5dv::{Gid, UdEndpoint};
    ///
    /// let e = UdEndpoint { qpn: 0x12, qkey: 0x1111_1111, lid: 3, gid: Gid::default() };
    /// let bytes = e.to_bytes();
    /// assert_eq!(bytes[..12], [2, 3, 0, 3, 0, 0, 0, 0x12, 0x11, 0x11, 0x11, 0x11]);
    /// assert_eq!(UdEndpoint::from_bytes(&bytes)?, e);
    /// # Ok::<(), mlx5dv::Error>(())
    /// ```
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0] = Self::VERSION;
        b[1] = ByteForm::UdEndpoint.tag();
        b[2..4].copy_from_slice(&self.lid.to_be_bytes());
        b[4..8].copy_from_slice(&self.qpn.to_be_bytes());
        b[8..12].copy_from_slice(&self.qkey.to_be_bytes());
        b[12..28].copy_from_slice(&self.gid.0);
        b
    }

    /// Reads the byte form of [`to_bytes`](Self::to_bytes): exactly
    /// [`BYTES`](Self::BYTES) bytes of version 2 and a `UdEndpoint`'s
    /// form byte, with a 24-bit QP number; anything else is refused
    /// (another type's byte form, such as an [`Endpoint`](crate::Endpoint)'s,
    /// as [`Error::WrongByteForm`](crate::Error::WrongByteForm)).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let b = versioned_form::<{ Self::BYTES }>(
            bytes,
            ByteForm::UdEndpoint,
            "UdEndpoint byte form length",
        )?;
        let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let qpn = word(4);
        super::check_24_bits("UdEndpoint QP number", qpn)?;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[12..28]);
        Ok(UdEndpoint {
            qpn,
            qkey: word(8),
            lid: u16::from_be_bytes([b[2], b[3]]),
            gid: Gid(gid),
        })
    }

    /// The path to this endpoint's port from the local port of `opts`:
    /// [`AhAttr::towards`] its LID and GID.
    pub fn ah_attr(&self, opts: &ConnectOptions) -> AhAttr {
        AhAttr::towards(self.lid, self.gid, opts)
    }
}

impl UdQp {
    /// What a peer needs to send to this QP: its number, its Q_Key (as
    /// [`qkey`](Self::qkey) reads it: call after [`ready`](Self::ready)),
    /// and the LID and GID (at `opts.gid_index`) of the port of `opts`,
    /// as [`RcQp::endpoint`](crate::RcQp::endpoint) gives an RC QP's.
    /// Send it to the peers ([`UdEndpoint::to_bytes`]); each makes a
    /// [`UdDest`] of it.
    ///
    /// On RoCE `opts.gid_index` must name the GID: an endpoint without one
    /// is refused ([`Error::InvalidArgument`](crate::Error::InvalidArgument)),
    /// as a peer could not address it.
    ///
    /// The QP has a Q_Key from [`ready`](Self::ready) (or
    /// [`ready_with`](Self::ready_with)) on, until it is
    /// [`reset`](crate::QpEx::reset): in RESET (before `ready`, after
    /// `reset`) and in ERR the endpoint is refused
    /// ([`Error::QpNotReady`](crate::Error::QpNotReady), saying to call
    /// `ready` first), as a peer sending with the Q_Key read then (0, or
    /// the one before the reset) would have every message dropped
    /// silently.
    pub fn endpoint(&self, opts: &ConnectOptions) -> Result<UdEndpoint> {
        let ctx = self.pd().context();
        let state = self.state()?;
        if matches!(state, QpState::Reset | QpState::Err | QpState::Other(_)) {
            return Err(Error::QpNotReady {
                what: crate::qp_state::UD_ENDPOINT,
                qp_num: self.qp_num(),
                state,
                receive: false,
            });
        }
        crate::addressing::roce::require_gid(ctx, opts)?;
        Ok(UdEndpoint {
            qpn: self.qp_num(),
            qkey: self.qkey()?,
            lid: ctx.query_port(opts.port)?.lid,
            gid: super::local_gid(ctx, opts)?,
        })
    }
}

/// Where UD work requests to a peer go, made from its [`UdEndpoint`]: an
/// address handle to its port, its QP number and its Q_Key. Keep one per
/// peer and address each work request with [`addr`](Self::addr).
///
/// See [`UdEndpoint`] for a whole exchange.
#[derive(Clone)]
#[must_use]
pub struct UdDest {
    ah: AddressHandle,
    remote_qpn: u32,
    remote_qkey: u32,
}

impl UdDest {
    /// The address handle ([`AddressHandle::new`] in `pd`) of the path
    /// from the local port of `opts` to `peer` ([`UdEndpoint::ah_attr`]:
    /// with a global route header from `opts.gid_index` when it is set),
    /// and the peer's QP number and Q_Key. On RoCE `opts.gid_index` must
    /// be set: without it the path has no GRH, and the address handle is
    /// refused before any C call
    /// ([`Error::InvalidArgument`](crate::Error::InvalidArgument)).
    ///
    /// `pd` is the protection domain of the UD QPs that send to the peer:
    /// a QP refuses an address handle of another
    /// ([`UdAddr`](crate::UdAddr)).
    pub fn new(pd: &ProtectionDomain, peer: &UdEndpoint, opts: &ConnectOptions) -> Result<Self> {
        crate::addressing::roce::require_gid(pd.context(), opts)?;
        let ah = AddressHandle::new(pd, &peer.ah_attr(opts))?;
        Ok(UdDest {
            ah,
            remote_qpn: peer.qpn,
            remote_qkey: peer.qkey,
        })
    }

    /// The address of a work request to the peer
    /// ([`WrBatch::wr`](crate::WrBatch::wr) on a [`UdQp`]).
    #[inline]
    pub fn addr(&self) -> UdAddr<'_> {
        UdAddr::new(&self.ah, self.remote_qpn, self.remote_qkey)
    }

    /// The address handle.
    pub fn ah(&self) -> &AddressHandle {
        &self.ah
    }

    /// The peer's QP number.
    pub fn remote_qpn(&self) -> u32 {
        self.remote_qpn
    }

    /// The peer's Q_Key.
    pub fn remote_qkey(&self) -> u32 {
        self.remote_qkey
    }
}

impl fmt::Debug for UdDest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdDest")
            .field("ah", &self.ah)
            .field("remote_qpn", &format_args!("{:#x}", self.remote_qpn))
            .field("remote_qkey", &format_args!("{:#x}", self.remote_qkey))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ud_endpoint_round_trips_and_bad_forms_are_refused() {
        let e = UdEndpoint {
            qpn: 0xab_cdef,
            qkey: 0x8000_0011,
            lid: 0x42,
            gid: Gid([7; 16]),
        };
        let b = e.to_bytes();
        assert_eq!(
            b[..12],
            [2, 3, 0, 0x42, 0, 0xab, 0xcd, 0xef, 0x80, 0, 0, 0x11]
        );
        assert_eq!(b[12..], [7; 16]);
        assert_eq!(UdEndpoint::from_bytes(&b).unwrap(), e);
        assert_eq!(
            format!("{e:?}"),
            "UdEndpoint { qpn: 0xabcdef, qkey: 0x80000011, lid: 66, \
             gid: Gid(707:707:707:707:707:707:707:707) }"
        );
        // Wrong lengths.
        for len in [0, 1, 27, 29, 64] {
            let mut v = b.to_vec();
            v.resize(len, 0);
            assert!(
                matches!(UdEndpoint::from_bytes(&v), Err(Error::OutOfRange { .. })),
                "{len}"
            );
        }
        // Another version, a form byte no type has.
        for (at, v) in [(0, 0), (0, 1), (0, 3), (0, 0xff), (1, 0), (1, 9)] {
            let mut bad = b;
            bad[at] = v;
            let err = UdEndpoint::from_bytes(&bad).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
            assert!(err.to_string().contains("UdEndpoint"), "{err}");
        }
        // A QP number past 24 bits.
        let mut wide = b;
        wide[4] = 1;
        let err = UdEndpoint::from_bytes(&wide).unwrap_err();
        assert!(err.to_string().contains("UdEndpoint QP number"), "{err}");
        // Garbage of the right length.
        let garbage: Vec<u8> = (0..28u8).map(|i| i.wrapping_mul(37) ^ 0xa5).collect();
        assert!(UdEndpoint::from_bytes(&garbage).is_err());
    }

    #[test]
    fn a_ud_endpoints_path_is_towards_its_lid_and_gid() {
        let e = UdEndpoint {
            qpn: 1,
            qkey: 2,
            lid: 9,
            gid: Gid([3; 16]),
        };
        let ib = e.ah_attr(&ConnectOptions::default().sl(4));
        assert_eq!((ib.port, ib.dlid, ib.sl, ib.grh), (1, 9, 4, None));
        let roce = e.ah_attr(&ConnectOptions::default().gid_index(Some(1)).port(2));
        let grh = roce.grh.unwrap();
        assert_eq!((roce.port, grh.dgid, grh.sgid_index), (2, Gid([3; 16]), 1));
    }
}
