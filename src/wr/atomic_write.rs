//! Atomic write (`ibv_wr_atomic_write`, `ibv_wr_post(3)`): 8 bytes written
//! at the peer as one, with no local memory named.

use super::{SendFlags, Wr};
use crate::error::{Error, Result};
use crate::mr::RemoteBuf;
use crate::qp::{RemoteReadAtomic, SendOps};

impl<T: RemoteReadAtomic> Wr<'_, '_, T> {
    /// Writes the 8 bytes `data` at `remote`, at once as seen by the peer's
    /// other accesses (`ibv_wr_atomic_write`, IBTA atomic write). `remote`
    /// must be at least 8 bytes and 8-byte aligned ([`Error::InvalidArgument`]
    /// otherwise, before any C call), in a region the peer registered with
    /// [`REMOTE_WRITE`](crate::AccessFlags::REMOTE_WRITE) (else a remote
    /// access error completes the work request). Signalled,
    /// it completes with [`WcOpcode::ATOMIC_WRITE`](crate::WcOpcode::ATOMIC_WRITE).
    ///
    /// Needs [`SendOps::ATOMIC_WRITE`] in the QP's send ops, which a QP is
    /// created with only on a device that claims atomic write
    /// (`IB_UVERBS_DEVICE_ATOMIC_WRITE` in `device_cap_flags_ex`: soft-RoCE
    /// from Linux 6.2) and whose provider has the builder (libmlx5 44 has
    /// none); elsewhere [`QpBuilder::build`](crate::QpBuilder::build) fails
    /// with [`Error::Unsupported`] naming atomic write, as on the software
    /// device and on soft-RoCE under Linux 6.1. The provider
    /// copies `data` into the work request during the call (rdma-core's
    /// rxe does), so nothing stays borrowed.
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # use std::time::Duration;
    /// # fn f(qp: &mut RcQp, cq: &mut CompletionQueue, flag: RemoteBuf) -> Result<()> {
    /// qp.post_and_wait(cq, Duration::from_secs(5), |b| {
    ///     b.wr(1).atomic_write(flag, &7u64.to_le_bytes())
    /// })?;
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn atomic_write(self, remote: RemoteBuf, data: &[u8; 8]) -> Result<()> {
        if !self.state.send_ops.contains(SendOps::ATOMIC_WRITE) {
            return Err(Error::Unsupported {
                what: "atomic write: the QP was not created with ATOMIC_WRITE in its send ops"
                    .into(),
            });
        }
        if remote.len < 8 || remote.addr % 8 != 0 {
            return Err(Error::InvalidArgument(format!(
                "atomic write takes an 8-byte aligned remote buffer of at least 8 bytes \
                 (got {} bytes at {:#x})",
                remote.len, remote.addr
            )));
        }
        let (rkey, raddr) = (remote.rkey, remote.addr);
        let data = data.as_ptr();
        self.commit(
            SendFlags::empty(),
            #[inline(always)]
            |q, ops| {
                // SAFETY: the live extended QP of an open batch; wr_atomic_write
                // was resolved non-NULL at creation since ATOMIC_WRITE is in its
                // send ops; `data` points to 8 bytes valid during the call,
                // which the provider copies.
                unsafe { (ops.atomic_write)(q, rkey, raddr, data.cast()) }
            },
        )
    }
}
