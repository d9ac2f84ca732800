//! Flush (`ibv_wr_flush`, `ibv_wr_post(3)` of rdma-core 45 and later):
//! makes the peer's earlier writes to a range or a region global or
//! persistent. Built only where this build's rdma-core headers have it
//! (cfg `mlx5dv_ibv_wr_flush`, set by build.rs); the pre-generated bindings
//! are of rdma-core 44, which has none.

use super::{SendFlags, Wr};
use crate::error::{Error, Result};
use crate::ffi;
use crate::mr::RemoteBuf;
use crate::qp::{ReliableConnection, SendOps};

/// Where the flushed data must be placed (`enum ibv_placement_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushPlacement {
    /// Visible to every agent of the peer (`IBV_FLUSH_GLOBAL`).
    Global,
    /// In persistent memory (`IBV_FLUSH_PERSISTENT`).
    Persistent,
}

/// What the flush covers (`enum ibv_selectivity_level`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushLevel {
    /// The remote buffer's range (`IBV_FLUSH_RANGE`).
    Range,
    /// The whole region of the rkey (`IBV_FLUSH_MR`).
    Region,
}

impl Wr<'_, '_, ReliableConnection> {
    /// Flushes `remote` at the peer (`ibv_wr_flush`): its earlier writes
    /// there reach `placement` before this work request completes. The
    /// peer's region must allow it (`IBV_ACCESS_FLUSH_GLOBAL` /
    /// `IBV_ACCESS_FLUSH_PERSISTENT`), else a remote access error. Needs
    /// `SendOps::FLUSH`, rdma-core 45 or later at build time, and a
    /// provider with the builder (soft-RoCE from Linux 6.2); a QP whose
    /// provider left it unset refuses it with [`Error::Unsupported`].
    #[inline]
    pub fn flush(
        self,
        remote: RemoteBuf,
        placement: FlushPlacement,
        level: FlushLevel,
    ) -> Result<()> {
        // SAFETY: the live extended QP of the open batch.
        let entry = unsafe { (*self.state.qpx.as_ptr()).wr_flush };
        if !self.state.send_ops.contains(SendOps::FLUSH) || entry.is_none() {
            return Err(Error::Unsupported {
                what: "flush: the QP was not created with FLUSH in its send ops, or its \
                       provider has no flush"
                    .into(),
            });
        }
        let len = usize::try_from(remote.len).map_err(|_| Error::OutOfRange {
            what: "flush length",
            value: remote.len,
            limit: format!("at most {}", usize::MAX),
        })?;
        let placement = match placement {
            FlushPlacement::Global => ffi::IBV_FLUSH_GLOBAL,
            FlushPlacement::Persistent => ffi::IBV_FLUSH_PERSISTENT,
        } as u8;
        let level = match level {
            FlushLevel::Range => ffi::IBV_FLUSH_RANGE,
            FlushLevel::Region => ffi::IBV_FLUSH_MR,
        } as u8;
        let (rkey, raddr) = (remote.rkey, remote.addr);
        self.commit(
            SendFlags::empty(),
            #[inline(always)]
            |q, _| {
                if let Some(f) = entry {
                    // SAFETY: the live extended QP of an open batch; its
                    // provider's flush builder, read non-NULL above.
                    unsafe { f(q, rkey, raddr, len, placement, level) }
                }
            },
        )
    }
}
