//! What an open batch holds ([`BatchState`]): what it copied of its QP,
//! its flags and its count; and what it records of its work requests: the
//! address handed to C after a builder ([`RawAddr`]), and whether one
//! consumes a receive at the peer ([`PeerReceive`]).

use super::flags::SendFlags;
use crate::error::Error;
use crate::ffi;
use crate::qp::{DcAddr, Mlx5Info, QpCaps, SendOps, UdAddr, WrOps};
use std::ptr::NonNull;

/// Makes `'m` invariant: a batch's memory lifetime can be neither shortened
/// nor lengthened by subtyping.
pub(super) type Invariant<'m> = fn(&'m ()) -> &'m ();

/// What a batch needs of its QP, copied at `batch()`.
pub(super) struct BatchState {
    pub(super) qpx: NonNull<ffi::ibv_qp_ex>,
    /// The QP's capabilities, copied: a value of the batch's own, which
    /// the provider's calls cannot change, so that a check against them
    /// (the inline data's length, the SGE count) is made once for a loop.
    pub(super) caps: QpCaps,
    pub(super) send_ops: SendOps,
    /// What an mlx5 QP was created with (mlx5 extension, ops, limits).
    pub(super) mlx5: Mlx5Info,
    /// The provider's entries, resolved at QP creation; they live in the
    /// QP, which the batch borrows mutably for its whole life.
    pub(super) ops: NonNull<WrOps>,
    /// The batch's flags: what every work request gets unless it adds its
    /// own.
    pub(super) flags: SendFlags,
    /// What the QP's `wr_flags` holds now: the batch's flags at first,
    /// then those of the last work request that wrote its own. A work
    /// request writes its flags only when they differ from these, so a run
    /// of work requests with the same flags writes them once.
    pub(super) wr_flags: SendFlags,
    /// WRs handed to the provider so far.
    pub(super) posted: usize,
    /// The last of them that consumes a receive at the peer, for the
    /// scoped post's timeout (which may then be the peer's "receiver not
    /// ready"): its index plus one, shifted left by 2, or'ed with its
    /// [`PeerReceive`]; 0 for none. Stored only by those work requests
    /// (see `last_peer_receive`).
    pub(super) peer_receive_mark: usize,
    /// How many the batch may hold: the send queue's depth
    /// (`max_send_wr`) less the type 1 binds still queued on it (see
    /// `crate::cq::Queued`), past which libmlx5 would build a work request
    /// over the last WQE it wrote, or less after [`WrBatch::limit`](crate::wr::WrBatch::limit).
    pub(super) room: usize,
    /// The room the send queue had when the batch opened, as `room` has it
    /// at first (so that, in a batch that is not limited, the compiler
    /// knows the two equal): its depth less the binds queued then.
    pub(super) depth: u32,
    /// The QP's context: an mkey must come from it.
    pub(super) ctx: *mut ffi::ibv_context,
    /// The QP's protection domain: a DC or UD address's address handle
    /// must be of it (`ibv_create_ah(3)`, `ibv_post_send(3)`), which also
    /// makes it of the QP's context.
    pub(super) pd: *mut ffi::ibv_pd,
    /// The largest message a send may carry (a UD QP's MTU; `u32::MAX`
    /// on the others).
    pub(super) max_message: u32,
}

impl BatchState {
    /// The QP's capabilities.
    #[inline(always)]
    pub(crate) fn caps(&self) -> &QpCaps {
        &self.caps
    }

    /// The error of a batch of `batch` work requests, more than its room:
    /// the batch's [`limit`](WrBatch::limit) where that is below the room
    /// the send queue had, else a full send queue (whose `depth` is that
    /// room: the depth less the binds queued). Built of integers where it
    /// is made (inlined), so that the caller's `?` knows it is an error
    /// and its loop keeps one counter.
    #[inline(always)]
    pub(super) fn no_room(&self, batch: u32) -> Error {
        let room = self.room as u32;
        if room < self.depth {
            Error::BatchLimit { limit: room }
        } else {
            Error::SendQueueFull {
                batch,
                depth: self.depth,
            }
        }
    }

    /// The batch's last work request that consumes a receive at the peer:
    /// what it is, and its position (from 1); `None` when none does.
    pub(super) fn last_peer_receive(&self) -> Option<(PeerReceive, usize)> {
        let kind = match self.peer_receive_mark & 3 {
            1 => PeerReceive::Send,
            2 => PeerReceive::WriteImm,
            _ => return None,
        };
        Some((kind, self.peer_receive_mark >> 2))
    }

    /// The provider's entries.
    #[inline]
    pub(super) fn ops(&self) -> &WrOps {
        // SAFETY: `ops` points into the QP the batch borrows mutably for its
        // whole life, and nothing writes to it meanwhile.
        unsafe { self.ops.as_ref() }
    }
}
/// Whether a work request consumes a receive at the peer, and so waits
/// for one there: a responder with none posted answers "receiver not
/// ready" (RNR), and the requester retries (`rnr_retry` times, for ever
/// at 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum PeerReceive {
    /// It does not (RDMA write and read, atomics, local operations).
    No = 0,
    /// A send (with immediate data or invalidation, or without).
    Send = 1,
    /// An RDMA write with immediate data.
    WriteImm = 2,
}

/// The address a work request's builder is followed by, as handed to C;
/// the borrow of what it names (an address handle) lives in the `Wr`'s
/// lifetime, and in a scoped batch for its `'m`.
#[derive(Clone, Copy)]
pub(crate) enum RawAddr {
    /// A DCI's `mlx5dv_wr_set_dc_addr` / `mlx5dv_wr_set_dc_addr_stream`.
    Dc(RawDc),
    /// An XRC initiator's `ibv_wr_set_xrc_srqn`: the remote SRQ number.
    Xrc(u32),
    /// A UD QP's `ibv_wr_set_ud_addr`.
    Ud(RawUd),
}

/// A UD address as handed to C.
#[derive(Clone, Copy)]
pub(crate) struct RawUd {
    pub(super) ah: *mut ffi::ibv_ah,
    /// The address handle's PD (NULL for a QP number past 24 bits).
    pub(super) pd: *mut ffi::ibv_pd,
    pub(super) remote_qpn: u32,
    pub(super) remote_qkey: u32,
}

impl RawUd {
    #[inline(always)]
    pub(super) fn new(addr: UdAddr<'_>) -> Self {
        RawUd {
            ah: addr.ah_ptr(),
            pd: addr.pd_ptr(),
            remote_qpn: addr.remote_qpn(),
            remote_qkey: addr.remote_qkey(),
        }
    }
}

/// A DC address as handed to C.
#[derive(Clone, Copy)]
pub(crate) struct RawDc {
    pub(super) ah: *mut ffi::ibv_ah,
    /// The address handle's PD (NULL for a DCT number past 24 bits).
    pub(super) pd: *mut ffi::ibv_pd,
    pub(super) remote_dctn: u32,
    pub(super) remote_dc_key: u64,
    pub(super) stream_id: Option<u16>,
}

impl RawDc {
    #[inline(always)]
    pub(super) fn new(addr: DcAddr<'_>, stream_id: Option<u16>) -> Self {
        RawDc {
            ah: addr.ah_ptr(),
            pd: addr.pd_ptr(),
            remote_dctn: addr.remote_dctn(),
            remote_dc_key: addr.remote_dc_key(),
            stream_id,
        }
    }
}
