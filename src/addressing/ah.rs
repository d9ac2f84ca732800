//! Address handles: the path to a remote port, for UD and DC work requests
//! (and the address vector of a connected QP's RTR transition).

use crate::addressing::ConnectOptions;
use crate::error::{Error, Result};
use crate::ffi;
use crate::pd::ProtectionDomain;
use crate::port::Gid;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

/// Where packets go: what `ibv_create_ah(3)` and the RTR transition of a
/// connected QP need to reach a remote port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AhAttr {
    /// The local port (from 1).
    pub port: u8,
    /// The remote LID (InfiniBand; 0 on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// The remote GID and the local GID index to send from. Required on
    /// RoCE; `None` on InfiniBand within a subnet.
    pub grh: Option<Grh>,
}

/// The global route header: RoCE and routed InfiniBand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grh {
    /// The remote GID.
    pub dgid: Gid,
    /// The local GID table index (pick a RoCE v2 entry of
    /// [`Context::gid_table`](crate::Context::gid_table) on RoCE).
    pub sgid_index: u8,
    /// Hop limit (1 stays on the local subnet; 64 is common).
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
}

impl AhAttr {
    /// The path from the local port of `opts` (and, on RoCE, its GID
    /// index) to the port with `lid` and `gid`, with the service level,
    /// hop limit, traffic class and flow label of `opts`: what a connected
    /// QP's RTR transition needs (RC, UC, XRC: the peer's
    /// [`Endpoint`](crate::Endpoint)), and what an address handle needs to
    /// reach a DCT (its [`DctEndpoint`](crate::DctEndpoint)) or a UD QP
    /// (its [`UdEndpoint`](crate::UdEndpoint);
    /// [`UdDest::new`](crate::UdDest::new) makes the address handle of
    /// it). To answer a UD message without an endpoint, take the path
    /// back from the message itself: [`AhAttr::from_received`].
    ///
    /// ```
    /// use mlx5dv::{AhAttr, ConnectOptions, Gid};
    ///
    /// // InfiniBand within a subnet: the LID only.
    /// let ib = AhAttr::towards(5, Gid::default(), &ConnectOptions::default());
    /// assert_eq!((ib.port, ib.dlid, ib.grh), (1, 5, None));
    /// // RoCE: a GRH to the peer's GID, from the local GID index.
    /// let gid = Gid::from("::ffff:10.0.0.2".parse::<std::net::Ipv6Addr>().unwrap());
    /// let roce = AhAttr::towards(0, gid, &ConnectOptions::default().gid_index(Some(1)));
    /// let grh = roce.grh.unwrap();
    /// assert_eq!((grh.dgid, grh.sgid_index, grh.hop_limit), (gid, 1, 64));
    /// ```
    ///
    /// `gid` is used only where `opts.gid_index` is set (RoCE, where it is
    /// required, or routed InfiniBand): without one the path has no
    /// global route header and `gid` is ignored, so on InfiniBand within
    /// a subnet pass the peer's GID if known or `Gid::default()`.
    pub fn towards(lid: u16, gid: Gid, opts: &ConnectOptions) -> Self {
        AhAttr {
            port: opts.port,
            dlid: lid,
            sl: opts.sl,
            grh: opts.gid_index.map(|sgid_index| Grh {
                dgid: gid,
                sgid_index,
                hop_limit: opts.hop_limit,
                traffic_class: opts.traffic_class,
                flow_label: opts.flow_label,
            }),
        }
    }

    pub(crate) fn to_raw(self) -> ffi::ibv_ah_attr {
        let mut a = ffi::ibv_ah_attr {
            dlid: self.dlid,
            sl: self.sl,
            port_num: self.port,
            ..Default::default()
        };
        if let Some(g) = self.grh {
            a.is_global = 1;
            a.grh = ffi::ibv_global_route {
                dgid: g.dgid.to_raw(),
                flow_label: g.flow_label,
                sgid_index: g.sgid_index,
                hop_limit: g.hop_limit,
                traffic_class: g.traffic_class,
            };
        }
        a
    }
}

/// An address handle (`ibv_create_ah(3)`), destroyed on drop.
#[derive(Clone)]
pub struct AddressHandle(Arc<AhInner>);

struct AhInner {
    ah: NonNull<ffi::ibv_ah>,
    attr: AhAttr,
    /// Created by this crate (destroyed on drop).
    owned: bool,
    // Dropped after the AH is destroyed.
    pd: ProtectionDomain,
}

// SAFETY: an ibv_ah is immutable after creation; the provider reads it
// when posting, from any thread.
unsafe impl Send for AhInner {}
// SAFETY: as above.
unsafe impl Sync for AhInner {}

impl Drop for AhInner {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: created by this crate; destroyed once, when no handle is
        // left.
        let rc = unsafe { ffi::ibv_destroy_ah(self.ah.as_ptr()) };
        crate::error::report_destroy_failure("ibv_destroy_ah", rc, self.pd.context().name());
    }
}

impl AddressHandle {
    /// Creates an address handle in `pd`.
    pub fn new(pd: &ProtectionDomain, attr: &AhAttr) -> Result<Self> {
        if attr.port == 0 {
            return Err(Error::OutOfRange {
                what: "port number",
                value: 0,
                limit: "ports are numbered from 1".into(),
            });
        }
        let mut raw = attr.to_raw();
        // libmlx5 (mlx5_create_ah) returns NULL for a port past the
        // device's without setting errno: a stale one (EPROTONOSUPPORT,
        // which libibverbs leaves after an ioctl the kernel lacks, before
        // the write command it falls back to) would read as "not
        // supported"; errno 0 is reported as EIO.
        crate::fd::clear_errno();
        // SAFETY: the PD is live and `raw` initialised; NULL is handled.
        let ah = unsafe { ffi::ibv_create_ah(pd.as_ptr(), &mut raw) };
        let ah = NonNull::new(ah).ok_or_else(|| {
            Error::last_os(
                "ibv_create_ah",
                format!("{attr:?} on {}", pd.context().name()),
            )
        })?;
        Ok(AddressHandle(Arc::new(AhInner {
            ah,
            attr: *attr,
            owned: true,
            pd: pd.clone(),
        })))
    }

    /// Wraps an address handle created elsewhere (another crate, or C) in
    /// `pd`, described by `attr`; the handle does not destroy it. Nothing is
    /// read from `ah`: `attr` is only what [`attr`](Self::attr) returns.
    ///
    /// # Safety
    ///
    /// `ah` must be a live address handle of `pd` that stays alive until
    /// this handle, its clones and every work request that names it (until
    /// its completion) are gone.
    pub unsafe fn from_raw(pd: &ProtectionDomain, ah: NonNull<ffi::ibv_ah>, attr: AhAttr) -> Self {
        AddressHandle(Arc::new(AhInner {
            ah,
            attr,
            owned: false,
            pd: pd.clone(),
        }))
    }

    /// A handle over a fake `ibv_ah`, for the recording-provider tests.
    #[cfg(test)]
    pub(crate) unsafe fn fake(pd: &ProtectionDomain, ah: NonNull<ffi::ibv_ah>) -> Self {
        AddressHandle(Arc::new(AhInner {
            ah,
            attr: AhAttr {
                port: 1,
                dlid: 0,
                sl: 0,
                grh: None,
            },
            owned: false,
            pd: pd.clone(),
        }))
    }

    /// The raw handle, valid while this handle lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_ah {
        self.0.ah.as_ptr()
    }

    /// The raw handle, as non-NULL.
    pub(crate) fn as_non_null(&self) -> NonNull<ffi::ibv_ah> {
        self.0.ah
    }

    /// What it was created with.
    pub fn attr(&self) -> &AhAttr {
        &self.0.attr
    }
}

/// Why an address handle whose PD is not a QP's is refused for its work
/// requests, and what to do instead, after "the address handle": read
/// only to say so (the check itself compares the PDs alone). `ah_pd` is
/// the address handle's PD (`ibv_ah.pd`, live while the address handle
/// is: NULL only for one wrapped with no PD), `ctx` the QP's context; `qp`
/// names the QP ("QP", "DCI").
#[cold]
pub(crate) fn not_of_the_qps_pd(
    ah_pd: *mut ffi::ibv_pd,
    ctx: *mut ffi::ibv_context,
    qp: &str,
) -> String {
    // SAFETY: a PD that is not NULL is the live PD of a live address
    // handle (an `AddressHandle` holds its PD; `from_raw`'s promise); its
    // context is read.
    let ah_ctx = (!ah_pd.is_null()).then(|| unsafe { (*ah_pd).context });
    let which = if ah_ctx == Some(ctx) {
        format!("is of another protection domain than the {qp}'s (of the same device context)")
    } else {
        format!("belongs to another device context than the {qp}'s")
    };
    format!(
        "{which}; an address handle serves the QPs of its own protection domain only \
         (ibv_create_ah(3), ibv_post_send(3)): make it with AddressHandle::new(qp.pd(), ..) \
         of the {qp} that sends"
    )
}

impl fmt::Debug for AddressHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AddressHandle").field(&self.0.attr).finish()
    }
}
