//! DCTs: the targets DCIs address (`MLX5DV_DCTYPE_DCT`).

use super::{query_state, ConnectOptions, QpState};
use crate::addressing::ah::AhAttr;
use crate::cq::ffi_cq;
use crate::cq::{CompletionQueue, CqInner};
use crate::error::{check, Error, Result};
use crate::ffi;
use crate::pd::ProtectionDomain;
use crate::port::Gid;
use crate::srq::SharedReceiveQueue;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

/// An mlx5 DC target (`mlx5dv_create_qp(3)` with `MLX5DV_DCTYPE_DCT`):
/// receives what DCIs send to its DCT number with its access key; its
/// receives come from a [`SharedReceiveQueue`]. Destroyed on drop.
///
/// # DC, start to finish
///
/// The target side makes a `Dct`, moves it to RTR ([`ready`](Self::ready))
/// and sends its [`DctEndpoint`] ([`endpoint`](Self::endpoint)) to the
/// initiators; an initiator makes a DCI ([`QpBuilder::dci`](crate::QpBuilder::dci)),
/// moves it to RTS ([`DciQp::ready`](crate::DciQp::ready)), makes a
/// [`RemoteDct`](crate::RemoteDct) of the endpoint (an address handle
/// with the DCT's number and key) and addresses each work request with
/// its [`addr`](crate::RemoteDct::addr). The whole program, server and
/// client, is `examples/hello_dc.rs` (`cargo run --example hello_dc --
/// mlx5_0` on one host, `... -- mlx5_0 SERVER-ADDRESS` on another); the
/// project's tests run it on the software mlx5 device:
///
#[doc = concat!("```no_run\n", include_str!("../../examples/hello_dc.rs"), "```")]
///
/// ## Why the three kinds of QP are set up differently
///
/// | | made with | made ready with | why |
/// |---|---|---|---|
/// | RC QP | [`QpBuilder::rc`](crate::QpBuilder::rc) | [`RcQp::endpoint`](crate::RcQp::endpoint)`(psn, &opts)`, then [`connect_to`](crate::RcQp::connect_to)`(&peer, &opts)` | one peer: the two sides swap endpoints, and each one's first PSN is the peer's expected one, so it is given once, in the endpoint |
/// | DCI | [`QpBuilder::dci`](crate::QpBuilder::dci) | [`DciQp::ready`](crate::DciQp::ready)`(psn, &opts)` | no peer (each work request names its DCT), so nothing to connect to; a send queue, so a first PSN of its own (any 24-bit value: 0 will do), which no one needs to be told |
/// | DCT | `Dct::new` | [`Dct::ready`](Self::ready)`(&opts)` | no send queue and no receive queue of its own (an SRQ's), so no builder and no sizes; it only receives, so no PSN; RTR is its last state |
pub struct Dct {
    qp: NonNull<ffi::ibv_qp>,
    access_key: u64,
    /// The DCT's generation in its CQ's owners: a completion kept for it
    /// is dropped once it is destroyed.
    generation: u64,
    // Dropped after the DCT is destroyed.
    pd: ProtectionDomain,
    _cq: Arc<CqInner>,
    _srq: SharedReceiveQueue,
}

// SAFETY: a DCT is only modified, queried and destroyed, through
// thread-safe verbs calls.
unsafe impl Send for Dct {}
// SAFETY: as above.
unsafe impl Sync for Dct {}

impl Dct {
    /// Creates a DCT in `pd` completing on `cq`, receiving into `srq`,
    /// reachable with `dc_access_key`.
    pub fn new(
        pd: &ProtectionDomain,
        cq: &CompletionQueue,
        srq: &SharedReceiveQueue,
        dc_access_key: u64,
    ) -> Result<Self> {
        let ctx = pd.context();
        if !ctx.is_mlx5() {
            return Err(Error::Unsupported {
                what: format!(
                    "mlx5dv_create_qp (DCT): {} is not an mlx5 device",
                    ctx.name()
                ),
            });
        }
        if srq.is_xrc() {
            return Err(Error::InvalidArgument(
                "DCT: an XRC SRQ feeds XRC target QPs only (SharedReceiveQueue::new)".into(),
            ));
        }
        for (what, other) in [("CQ", cq.context()), ("SRQ", srq.pd().context())] {
            if other.as_ptr() != ctx.as_ptr() {
                return Err(Error::InvalidArgument(format!(
                    "DCT: the {what} belongs to {}, the PD to {}",
                    other.name(),
                    ctx.name()
                )));
            }
        }
        let mut attr = ffi::ibv_qp_init_attr_ex {
            send_cq: ffi_cq(cq),
            recv_cq: ffi_cq(cq),
            srq: srq.raw(),
            cap: ffi::ibv_qp_cap {
                max_send_wr: 0,
                max_recv_wr: 0,
                max_send_sge: 0,
                max_recv_sge: 0,
                max_inline_data: 0,
            },
            qp_type: ffi::IBV_QPT_DRIVER,
            comp_mask: ffi::IBV_QP_INIT_ATTR_PD,
            pd: pd.as_ptr(),
            ..Default::default()
        };
        let mut dv = ffi::mlx5dv_qp_init_attr {
            comp_mask: u64::from(ffi::MLX5DV_QP_INIT_ATTR_MASK_DC),
            ..Default::default()
        };
        dv.dc_init_attr.dc_type = ffi::MLX5DV_DCTYPE_DCT;
        dv.dc_init_attr.__bindgen_anon_1.dct_access_key = dc_access_key;
        // SAFETY: the context, PD, CQ and SRQ are live; both attribute
        // structs are initialised; NULL is handled.
        let qp = unsafe { ffi::mlx5dv_create_qp(ctx.as_ptr(), &mut attr, &mut dv) };
        let qp = NonNull::new(qp)
            .ok_or_else(|| Error::last_os("mlx5dv_create_qp", format!("DCT on {}", ctx.name())))?;
        let dct = Dct {
            qp,
            access_key: dc_access_key,
            generation: crate::cq::Owners::generation(),
            pd: pd.clone(),
            _cq: cq.share(),
            _srq: srq.clone(),
        };
        dct._cq.owners.add(dct.dctn(), dct.generation);
        Ok(dct)
    }

    /// The DCT number DCIs address ([`DcAddr::remote_dctn`](crate::DcAddr)).
    pub fn dctn(&self) -> u32 {
        // SAFETY: the QP is live.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    /// The DC access key DCIs must present.
    pub fn access_key(&self) -> u64 {
        self.access_key
    }

    /// What a DCI needs to reach this DCT: its number and access key, and
    /// the port's LID and (on RoCE) its GID at `opts.gid_index`, as
    /// [`RcQp::endpoint`](crate::RcQp::endpoint) gives an RC QP's. Send it
    /// to the initiators ([`DctEndpoint::to_bytes`]); each makes a
    /// [`RemoteDct`](crate::RemoteDct) of it.
    ///
    /// On RoCE `opts.gid_index` must name the GID (as for
    /// [`ready`](Self::ready)): an endpoint without one is refused.
    pub fn endpoint(&self, opts: &ConnectOptions) -> Result<DctEndpoint> {
        let ctx = self.pd.context();
        crate::addressing::roce::require_gid(ctx, opts)?;
        Ok(DctEndpoint {
            dctn: self.dctn(),
            dc_key: self.access_key,
            lid: ctx.query_port(opts.port)?.lid,
            gid: super::local_gid(ctx, opts)?,
        })
    }

    /// The raw QP, valid while this handle lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_qp {
        self.qp.as_ptr()
    }

    fn modify(&self, a: &mut ffi::ibv_qp_attr, mask: u32, to: &str) -> Result<()> {
        // SAFETY: the QP is live; `a` is initialised for every bit of `mask`.
        let rc = unsafe { ffi::ibv_modify_qp(self.as_ptr(), a, mask as i32) };
        check(rc, "ibv_modify_qp", || {
            format!(
                "DCT {:#x} on {} to {to}",
                self.dctn(),
                self.pd.context().name()
            )
        })
    }

    /// RESET → INIT → RTR: ready to receive. INIT takes the port and the
    /// remote access of `opts`; RTR the path MTU, the RNR timer and an
    /// address vector on the local port (with the GID index on RoCE,
    /// where a connection without one is refused before the DCT is
    /// touched).
    pub fn ready(&self, opts: &ConnectOptions) -> Result<()> {
        crate::addressing::roce::require_gid(self.pd.context(), opts)?;
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: opts.port,
            qp_access_flags: opts.access.bits(),
            ..Default::default()
        };
        let mask = ffi::IBV_QP_STATE
            | ffi::IBV_QP_PKEY_INDEX
            | ffi::IBV_QP_PORT
            | ffi::IBV_QP_ACCESS_FLAGS;
        self.modify(&mut a, mask, "INIT")?;
        // An address vector on the local port: its LID, and on RoCE its own
        // GID at the index the options name.
        let ctx = self.pd.context();
        let gid = super::local_gid(ctx, opts)?;
        let av = AhAttr::towards(ctx.query_port(opts.port)?.lid, gid, opts);
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RTR,
            path_mtu: opts.mtu as u32,
            min_rnr_timer: opts.min_rnr_timer,
            ah_attr: av.to_raw(),
            ..Default::default()
        };
        let mask =
            ffi::IBV_QP_STATE | ffi::IBV_QP_AV | ffi::IBV_QP_PATH_MTU | ffi::IBV_QP_MIN_RNR_TIMER;
        self.modify(&mut a, mask, "RTR")
    }

    /// The current state.
    pub fn state(&self) -> Result<QpState> {
        // SAFETY: the QP is live.
        unsafe { query_state(self.as_ptr()) }
            .map_err(|rc| Error::verbs("ibv_query_qp", rc, format!("DCT {:#x}", self.dctn())))
    }
}

impl Drop for Dct {
    fn drop(&mut self) {
        let qp = self.qp;
        let (dctn, generation) = (self.dctn(), self.generation);
        let parents = (self.pd.clone(), Arc::clone(&self._cq), self._srq.clone());
        // Dropped inside a poll callback, the DCT is destroyed when the poll
        // ends (mlx5's ibv_destroy_qp takes its CQ's lock: see `QpEx`).
        crate::cq::after_polls(Box::new(move || {
            // SAFETY: created by the handle being dropped and destroyed once,
            // here; its PD, CQ and SRQ are kept alive until after the call.
            let rc = unsafe { ffi::ibv_destroy_qp(qp.as_ptr()) };
            crate::error::report_destroy_failure("ibv_destroy_qp", rc, parents.0.context().name());
            if rc == 0 {
                // Its completions kept in the CQ's backlog go with it.
                parents.1.owners.remove(dctn, generation);
            }
            drop(parents);
        }));
    }
}

impl fmt::Debug for Dct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dct")
            .field("dctn", &format_args!("{:#x}", self.dctn()))
            .finish()
    }
}

/// What a DCI needs to reach a DCT ([`Dct::endpoint`]): the DCT number,
/// its DC access key, and its port's LID and GID. The DC counterpart of an
/// RC [`Endpoint`](crate::Endpoint), with no PSN: a DCT serves many DCIs
/// and takes each one's sequence from the first packet of its DC
/// connection, so no PSN is exchanged.
///
/// Two wire forms, as an `Endpoint` has: the versioned byte form of
/// [`to_bytes`](Self::to_bytes), and, with the `serde` feature, a struct
/// of `dctn`, `dc_key`, `lid` and `gid`; both refuse a DCT number past 24
/// bits when reading.
///
/// ```
/// use mlx5dv::{DctEndpoint, Gid};
///
/// let e = DctEndpoint { dctn: 0x12, dc_key: 0x1ee7_c0de, lid: 1, gid: Gid::default() };
/// assert_eq!(DctEndpoint::from_bytes(&e.to_bytes())?, e);
/// # Ok::<(), mlx5dv::Error>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DctEndpoint {
    /// The DCT number (24 bits).
    pub dctn: u32,
    /// The DC access key the DCT was created with.
    pub dc_key: u64,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The port GID to address it by (RoCE, routed IB); zero when unused.
    pub gid: Gid,
}

/// The DCT number and key in hex, as the crate's messages give them.
impl fmt::Debug for DctEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DctEndpoint")
            .field("dctn", &format_args!("{:#x}", self.dctn))
            .field("dc_key", &format_args!("{:#x}", self.dc_key))
            .field("lid", &self.lid)
            .field("gid", &self.gid)
            .finish()
    }
}

impl DctEndpoint {
    /// The length of the byte form ([`to_bytes`](Self::to_bytes)).
    pub const BYTES: usize = 32;
    /// The version of the byte form this crate writes and reads.
    pub const VERSION: u8 = super::FORM_VERSION;

    /// The byte form, to send to the initiators. Stable: a later release
    /// that changes it writes another version, which this one refuses.
    ///
    /// | offset | bytes | field |
    /// |---|---|---|
    /// | 0 | 1 | version: 2 |
    /// | 1 | 1 | form: 2 (a `DctEndpoint`'s; other types' forms have others) |
    /// | 2 | 2 | LID, big-endian |
    /// | 4 | 4 | DCT number, big-endian (24 bits) |
    /// | 8 | 8 | DC access key, big-endian |
    /// | 16 | 16 | GID, in wire order |
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0] = Self::VERSION;
        b[1] = super::ByteForm::DctEndpoint.tag();
        b[2..4].copy_from_slice(&self.lid.to_be_bytes());
        b[4..8].copy_from_slice(&self.dctn.to_be_bytes());
        b[8..16].copy_from_slice(&self.dc_key.to_be_bytes());
        b[16..32].copy_from_slice(&self.gid.0);
        b
    }

    /// Reads the byte form of [`to_bytes`](Self::to_bytes): exactly
    /// [`BYTES`](Self::BYTES) bytes of version 2 and a `DctEndpoint`'s
    /// form byte, with a 24-bit DCT number; anything else is refused
    /// (another type's byte form as [`Error::WrongByteForm`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let b = super::versioned_form::<{ Self::BYTES }>(
            bytes,
            super::ByteForm::DctEndpoint,
            "DctEndpoint byte form length",
        )?;
        let dctn = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        super::check_24_bits("DctEndpoint DCT number", dctn)?;
        let mut key = [0u8; 8];
        key.copy_from_slice(&b[8..16]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[16..32]);
        Ok(DctEndpoint {
            dctn,
            dc_key: u64::from_be_bytes(key),
            lid: u16::from_be_bytes([b[2], b[3]]),
            gid: Gid(gid),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dct_endpoint_round_trips_and_bad_forms_are_refused() {
        let e = DctEndpoint {
            dctn: 0xab_cdef,
            dc_key: 0x0123_4567_89ab_cdef,
            lid: 0x42,
            gid: Gid([7; 16]),
        };
        let b = e.to_bytes();
        assert_eq!(
            b[..16],
            [2, 2, 0, 0x42, 0, 0xab, 0xcd, 0xef, 1, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]
        );
        assert_eq!(DctEndpoint::from_bytes(&b).unwrap(), e);
        assert_eq!(
            format!("{e:?}"),
            "DctEndpoint { dctn: 0xabcdef, dc_key: 0x123456789abcdef, lid: 66, gid: Gid(707:707:707:707:707:707:707:707) }"
        );
        assert!(matches!(
            DctEndpoint::from_bytes(&b[..31]),
            Err(Error::OutOfRange { .. })
        ));
        let mut v3 = b;
        v3[0] = 3;
        assert!(matches!(
            DctEndpoint::from_bytes(&v3),
            Err(Error::InvalidArgument(_))
        ));
        let mut wide = b;
        wide[4] = 1;
        assert!(matches!(
            DctEndpoint::from_bytes(&wide),
            Err(Error::OutOfRange { .. })
        ));
    }
}
