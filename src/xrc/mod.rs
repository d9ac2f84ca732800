//! XRC: extended reliable connection (`ibv_open_xrcd(3)`,
//! `ibv_create_srq_ex(3)` with `IBV_SRQT_XRC`, `ibv_create_qp_ex(3)` with
//! `IBV_QPT_XRC_SEND` / `IBV_QPT_XRC_RECV`).
//!
//! An [`XrcDomain`] holds XRC SRQs
//! ([`SharedReceiveQueue::new_xrc`](crate::SharedReceiveQueue::new_xrc))
//! and XRC target QPs ([`XrcTgtQp`](crate::XrcTgtQp)). An initiator ([`XrcIniQp`](crate::XrcIniQp),
//! [`QpBuilder::xrc_ini`](crate::QpBuilder::xrc_ini)) is connected to one
//! target, as an RC QP to its peer; each of its work requests names the
//! XRC SRQ it lands in ([`XrcSrqn`](crate::XrcSrqn)), which must be in the
//! target's domain. So one initiator reaches every SRQ of a remote domain,
//! and the receiving process keeps one SRQ per purpose instead of one
//! receive queue per peer.
//!
//! Soft-RoCE has no XRC: there [`XrcDomain::open`] and the initiator's
//! and target's creation are refused with
//! [`Error::Unsupported`](crate::Error::Unsupported) (the device's
//! `device_cap_flags` lack `IBV_DEVICE_XRC`), before any C call that
//! makes an object.

use crate::device::Context;
use crate::error::{Error, Result};
use crate::ffi;
use std::fmt;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::Arc;

/// An XRC domain (`ibv_open_xrcd(3)`): the container of XRC SRQs and XRC
/// target QPs. A cheap, cloneable handle; the domain is closed
/// (`ibv_close_xrcd`) when the last handle, SRQ and target QP made in it
/// are gone (a failure is reported as the crate reports every destroy
/// failure in drop).
#[derive(Clone)]
pub struct XrcDomain(pub(crate) Arc<XrcdInner>);

pub(crate) struct XrcdInner {
    xrcd: NonNull<ffi::ibv_xrcd>,
    // Dropped after the domain is closed.
    ctx: Context,
}

// SAFETY: the domain is used only through verbs calls that are
// thread-safe (object creation and closing lock in the provider and
// kernel).
unsafe impl Send for XrcdInner {}
// SAFETY: as above.
unsafe impl Sync for XrcdInner {}

impl Drop for XrcdInner {
    fn drop(&mut self) {
        // SAFETY: opened by this crate; every SRQ and target QP made in it
        // holds this Arc, so none is left; closed once.
        let rc = unsafe { ffi::ibv_close_xrcd(self.xrcd.as_ptr()) };
        crate::error::report_destroy_failure("ibv_close_xrcd", rc, self.ctx.name());
    }
}

impl XrcDomain {
    /// Opens a private XRC domain on `ctx` (no file: `fd` -1, `O_CREAT`).
    pub fn open(ctx: &Context) -> Result<Self> {
        Self::open_raw(ctx, -1, libc::O_CREAT, "a private domain")
    }

    /// Opens the XRC domain of `file` (`IBV_XRCD_INIT_ATTR_FD`): the
    /// contexts that open the same file share one domain, so that their
    /// SRQs and target QPs can serve one another's initiators. With
    /// `create` the domain is made when the file has none yet (`O_CREAT`);
    /// without it, a file with no domain is an error (`ENOENT`).
    pub fn open_file(ctx: &Context, file: &std::fs::File, create: bool) -> Result<Self> {
        let oflags = if create { libc::O_CREAT } else { 0 };
        Self::open_raw(ctx, file.as_raw_fd(), oflags, "the domain of a file")
    }

    fn open_raw(ctx: &Context, fd: i32, oflags: i32, what: &str) -> Result<Self> {
        require_xrc(ctx, "ibv_open_xrcd")?;
        let mut attr = ffi::ibv_xrcd_init_attr {
            comp_mask: ffi::IBV_XRCD_INIT_ATTR_FD | ffi::IBV_XRCD_INIT_ATTR_OFLAGS,
            fd,
            oflags,
        };
        // SAFETY: the context is open while `ctx` lives; `attr` is
        // initialised; `fd` is -1 or a file the caller keeps open for the
        // call. NULL is handled.
        let xrcd = unsafe { ffi::ibv_open_xrcd(ctx.as_ptr(), &mut attr) };
        let xrcd = NonNull::new(xrcd)
            .ok_or_else(|| Error::last_os("ibv_open_xrcd", format!("{what} on {}", ctx.name())))?;
        Ok(XrcDomain(Arc::new(XrcdInner {
            xrcd,
            ctx: ctx.clone(),
        })))
    }

    /// A domain over a fake `ibv_xrcd`, for the recording-provider tests:
    /// its closing reaches the fake's `close_xrcd`.
    #[cfg(test)]
    pub(crate) fn fake(ctx: &Context, xrcd: NonNull<ffi::ibv_xrcd>) -> Self {
        XrcDomain(Arc::new(XrcdInner {
            xrcd,
            ctx: ctx.clone(),
        }))
    }

    /// The raw domain, valid while this handle lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_xrcd {
        self.0.xrcd.as_ptr()
    }

    /// The context the domain was opened on.
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }
}

impl fmt::Debug for XrcDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("XrcDomain")
            .field("device", &self.0.ctx.name())
            .finish()
    }
}

/// Refuses XRC on a device whose capability flags lack `IBV_DEVICE_XRC`
/// (`ibv_query_device(3)`), before any XRC object is made.
pub(crate) fn require_xrc(ctx: &Context, what: &str) -> Result<()> {
    let mut attr = ffi::ibv_device_attr::default();
    // SAFETY: the context is open while `ctx` lives; `attr` is writable.
    let rc = unsafe { ffi::ibv_query_device(ctx.as_ptr(), &mut attr) };
    crate::error::check(rc, "ibv_query_device", || ctx.name().to_string())?;
    if attr.device_cap_flags & ffi::IBV_DEVICE_XRC == 0 {
        return Err(Error::Unsupported {
            what: format!(
                "{what}: {} has no XRC (device_cap_flags lack IBV_DEVICE_XRC)",
                ctx.name()
            ),
        });
    }
    Ok(())
}
