//! DCTs: the targets DCIs address (`MLX5DV_DCTYPE_DCT`).

use super::{ffi_cq, query_state, ConnectOptions, QpState};
use crate::ah::AhAttr;
use crate::cq::{CompletionQueue, CqInner};
use crate::error::{check, Error, Result};
use crate::ffi;
use crate::pd::ProtectionDomain;
use crate::srq::SharedReceiveQueue;
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

/// An mlx5 DC target (`mlx5dv_create_qp(3)` with `MLX5DV_DCTYPE_DCT`):
/// receives what DCIs send to its DCT number with its access key; its
/// receives come from a [`SharedReceiveQueue`]. Destroyed on drop.
pub struct Dct {
    qp: NonNull<ffi::ibv_qp>,
    access_key: u64,
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
            srq: srq.as_ptr(),
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
        Ok(Dct {
            qp,
            access_key: dc_access_key,
            pd: pd.clone(),
            _cq: cq.share(),
            _srq: srq.clone(),
        })
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
    /// address vector on the local port (with the GID index on RoCE).
    pub fn ready(&self, opts: &ConnectOptions) -> Result<()> {
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
        let parents = (self.pd.clone(), Arc::clone(&self._cq), self._srq.clone());
        // Dropped inside a poll callback, the DCT is destroyed when the poll
        // ends (mlx5's ibv_destroy_qp takes its CQ's lock: see `QpEx`).
        crate::cq::after_polls(Box::new(move || {
            // SAFETY: created by the handle being dropped and destroyed once,
            // here; its PD, CQ and SRQ are kept alive until after the call.
            let rc = unsafe { ffi::ibv_destroy_qp(qp.as_ptr()) };
            crate::error::report_destroy_failure("ibv_destroy_qp", rc, parents.0.context().name());
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
