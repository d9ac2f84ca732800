//! One work request of a batch: its flags ([`Wr`]), its builder, and its
//! data ([`Op`]), handed to the provider whole once every check has passed.

use super::flags::SendFlags;
use super::state::{BatchState, Invariant, PeerReceive, RawAddr};
use crate::error::{Error, Result};
use crate::ffi;
use crate::mr::{RemoteBuf, Sge, SgeMut};
use crate::qp::{RemoteReadAtomic, RemoteWrite, SendOps, Transport, WrOps};
use std::borrow::Borrow;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// One work request being built: flags, then a builder.
#[must_use = "a work request is added only when its data is given"]
pub struct Wr<'b, 'm, T: Transport> {
    pub(super) state: &'b mut BatchState,
    pub(super) wr_id: u64,
    pub(super) flags: SendFlags,
    /// The address set after the builder (DCI batches only).
    pub(super) addr: Option<RawAddr>,
    /// Whether it consumes a receive at the peer: set by its builder.
    pub(super) peer_receive: PeerReceive,
    pub(super) _p: PhantomData<(Invariant<'m>, T)>,
}

impl<T: Transport> std::fmt::Debug for Wr<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wr")
            .field("wr_id", &self.wr_id)
            .field("flags", &self.flags)
            .field("address", &self.addr.is_some())
            .finish()
    }
}

impl<T: Transport, K> std::fmt::Debug for Op<'_, '_, T, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Op")
            .field("wr", &self.wr)
            .field("remote", &self.remote)
            .finish()
    }
}

impl<'b, 'm, T: Transport> Wr<'b, 'm, T> {
    /// Adds `flags` to the batch's. Only the flags [`SendFlags`] defines
    /// are kept (`IBV_SEND_INLINE` is set by [`Op::inline`] itself).
    #[inline]
    pub fn flags(mut self, flags: SendFlags) -> Self {
        self.flags |= flags.intersection(SendFlags::PER_WR);
        self
    }

    /// Requests a completion for this work request.
    #[inline]
    pub fn signaled(self) -> Self {
        self.flags(SendFlags::SIGNALED)
    }

    /// Waits for earlier reads and atomics first (`IBV_SEND_FENCE`).
    #[inline]
    pub fn fence(self) -> Self {
        self.flags(SendFlags::FENCE)
    }

    /// Solicited event at the receiver.
    #[inline]
    pub fn solicited(self) -> Self {
        self.flags(SendFlags::SOLICITED)
    }

    #[inline]
    fn op<K>(mut self, kind: OpKind, remote: Option<RemoteBuf>) -> Op<'b, 'm, T, K> {
        self.peer_receive = match kind {
            OpKind::Send | OpKind::SendImm(_) | OpKind::SendInv(_) => PeerReceive::Send,
            OpKind::WriteImm(_) => PeerReceive::WriteImm,
            _ => PeerReceive::No,
        };
        Op {
            wr: self,
            kind,
            remote,
            _k: PhantomData,
        }
    }

    /// A send (`ibv_wr_send`): consumes a receive at the peer.
    #[inline]
    pub fn send(self) -> Op<'b, 'm, T, Source> {
        self.op(OpKind::Send, None)
    }

    /// A send that also invalidates `rkey` at the receiver
    /// (`ibv_wr_send_inv`): an MR, memory window or mkey created with remote
    /// invalidation. The receive completion reports the rkey
    /// ([`WorkCompletion::invalidated_rkey`](crate::WorkCompletion)).
    /// Needs [`SendOps::SEND_WITH_INV`].
    pub fn send_inv(self, rkey: u32) -> Op<'b, 'm, T, Source> {
        self.op(OpKind::SendInv(rkey), None)
    }

    /// A send with 32-bit immediate data (`ibv_wr_send_imm`), given in host
    /// byte order.
    #[inline]
    pub fn send_imm(self, imm: u32) -> Op<'b, 'm, T, Source> {
        self.op(OpKind::SendImm(imm.to_be()), None)
    }
}

impl<'b, 'm, T: RemoteWrite> Wr<'b, 'm, T> {
    /// An RDMA write into the peer's `remote` memory (`ibv_wr_rdma_write`).
    #[inline]
    pub fn rdma_write(self, remote: RemoteBuf) -> Op<'b, 'm, T, Source> {
        self.op(OpKind::Write, Some(remote))
    }

    /// An RDMA write with immediate data (`ibv_wr_rdma_write_imm`): also
    /// consumes a receive at the peer, whose completion carries `imm`
    /// (host byte order here and there).
    #[inline]
    pub fn rdma_write_imm(self, remote: RemoteBuf, imm: u32) -> Op<'b, 'm, T, Source> {
        self.op(OpKind::WriteImm(imm.to_be()), Some(remote))
    }
}

impl<'b, 'm, T: RemoteReadAtomic> Wr<'b, 'm, T> {
    /// An RDMA read of the peer's `remote` memory into the SGEs
    /// (`ibv_wr_rdma_read`).
    #[inline]
    pub fn rdma_read(self, remote: RemoteBuf) -> Op<'b, 'm, T, Destination> {
        self.op(OpKind::Read, Some(remote))
    }

    /// Atomic compare-and-swap of the 8 bytes at `remote`
    /// (`ibv_wr_atomic_cmp_swp`): if they equal `compare` they become
    /// `swap`; the old value lands in the 8-byte SGE.
    #[inline]
    pub fn atomic_cmp_swp(
        self,
        remote: RemoteBuf,
        compare: u64,
        swap: u64,
    ) -> Op<'b, 'm, T, Atomic> {
        self.op(OpKind::CmpSwp { compare, swap }, Some(remote))
    }

    /// Atomic fetch-and-add on the 8 bytes at `remote`
    /// (`ibv_wr_atomic_fetch_add`); the old value lands in the 8-byte SGE.
    #[inline]
    pub fn atomic_fetch_add(self, remote: RemoteBuf, add: u64) -> Op<'b, 'm, T, Atomic> {
        self.op(OpKind::FetchAdd { add }, Some(remote))
    }
}

/// Marks ops whose data is a source: SGEs or inline data.
#[derive(Debug)]
pub enum Source {}
/// Marks ops whose data is a destination: SGEs only (RDMA read).
#[derive(Debug)]
pub enum Destination {}
/// Marks atomics: one 8-byte SGE for the old value.
#[derive(Debug)]
pub enum Atomic {}

#[derive(Clone, Copy)]
enum OpKind {
    Send,
    SendImm(u32),
    SendInv(u32),
    Write,
    WriteImm(u32),
    Read,
    CmpSwp { compare: u64, swap: u64 },
    FetchAdd { add: u64 },
}

impl OpKind {
    #[inline(always)]
    fn needs(self) -> (SendOps, &'static str) {
        match self {
            OpKind::Send => (SendOps::SEND, "send"),
            OpKind::SendImm(_) => (SendOps::SEND_WITH_IMM, "send with immediate"),
            OpKind::SendInv(_) => (SendOps::SEND_WITH_INV, "send with invalidate"),
            OpKind::Write => (SendOps::RDMA_WRITE, "RDMA write"),
            OpKind::WriteImm(_) => (SendOps::RDMA_WRITE_WITH_IMM, "RDMA write with immediate"),
            OpKind::Read => (SendOps::RDMA_READ, "RDMA read"),
            OpKind::CmpSwp { .. } => (SendOps::ATOMIC_CMP_AND_SWP, "atomic compare-and-swap"),
            OpKind::FetchAdd { .. } => (SendOps::ATOMIC_FETCH_AND_ADD, "atomic fetch-and-add"),
        }
    }
}

/// The local data of a work request, as handed to C.
enum Data<'a> {
    Sge(&'a ffi::ibv_sge),
    List(&'a [ffi::ibv_sge]),
    Inline(&'a [u8]),
}

impl Data<'_> {
    /// Bytes in all.
    #[inline(always)]
    fn len(&self) -> u64 {
        match self {
            Data::Sge(s) => u64::from(s.length),
            Data::List(l) => l.iter().map(|s| u64::from(s.length)).sum(),
            Data::Inline(d) => d.len() as u64,
        }
    }
}

/// A work request with its builder chosen; its data comes next, and adds
/// it to the batch. `K` ([`Source`], [`Destination`], [`Atomic`]) decides
/// which data it takes.
#[must_use = "a work request is added only when its data is given"]
pub struct Op<'b, 'm, T: Transport, K> {
    wr: Wr<'b, 'm, T>,
    kind: OpKind,
    remote: Option<RemoteBuf>,
    _k: PhantomData<K>,
}

impl<'m, T: Transport> Op<'_, 'm, T, Source> {
    /// One SGE of local memory for the device to read, given by value or
    /// by reference (`&Sge`: then its fields are read only when the
    /// provider's setter is called, as C reads `sge->lkey` there, which
    /// keeps registers free in a loop).
    #[inline(always)]
    pub fn sge(self, sge: impl Borrow<Sge<'m>>) -> Result<()> {
        let sge = sge.borrow();
        let raw = &Sge::as_raw_slice(std::slice::from_ref(sge))[0];
        self.post(Data::Sge(raw))
    }

    /// Several SGEs, gathered in order; at most the QP's `max_send_sge`.
    #[inline]
    pub fn sge_list(self, sges: &[Sge<'m>]) -> Result<()> {
        self.post_list(Sge::as_raw_slice(sges))
    }
}

impl<'m, T: Transport> Op<'_, 'm, T, Destination> {
    /// One SGE of local memory for the device to write, by value or by
    /// reference: an [`SgeMut`], which holds its region exclusively
    /// borrowed for `'m`, so nothing reads the memory while the device
    /// writes it.
    #[inline(always)]
    pub fn sge(self, sge: impl Borrow<SgeMut<'m>>) -> Result<()> {
        self.post(Data::Sge(sge.borrow().as_raw()))
    }

    /// Several SGEs, scattered in order; at most the QP's `max_send_sge`.
    #[inline]
    pub fn sge_list(self, sges: &[SgeMut<'m>]) -> Result<()> {
        self.post_list(SgeMut::as_raw_slice(sges))
    }
}

impl<'m, T: Transport> Op<'_, 'm, T, Atomic> {
    /// The one 8-byte SGE the old value lands in (an [`SgeMut`]: the device
    /// writes it). An atomic has exactly one SGE, so there is no
    /// `sge_list` here.
    #[inline(always)]
    pub fn sge(self, sge: impl Borrow<SgeMut<'m>>) -> Result<()> {
        self.post(Data::Sge(sge.borrow().as_raw()))
    }
}

impl<'m, T: Transport, K> Op<'_, 'm, T, K> {
    /// An SGE list, after checking its length against `max_send_sge`.
    #[inline]
    fn post_list(self, raw: &[ffi::ibv_sge]) -> Result<()> {
        let max = self.wr.state.caps().max_send_sge;
        if raw.len() > max as usize {
            return Err(Error::OutOfRange {
                what: "SGE count",
                value: raw.len() as u64,
                limit: too_many_sges(max),
            });
        }
        self.post(Data::List(raw))
    }

    /// Checks and hands the whole work request to the provider. Always
    /// inlined: the op and the kind of data are then constants in the
    /// caller, and each check folds into one compare there (the errors are
    /// made out of line).
    #[inline(always)]
    fn post(self, data: Data<'_>) -> Result<()> {
        let Op {
            wr, kind, remote, ..
        } = self;
        let (op, name) = kind.needs();
        if !wr.state.send_ops.contains(op) {
            return Err(Error::Unsupported {
                what: not_in_send_ops(name),
            });
        }
        // The data's length is read only where a check needs it: for a
        // remote buffer of unknown length the compare folds away, and with
        // it the read (the provider's setter reads the SGE itself).
        if let Some(RawAddr::Ud(_)) = wr.addr {
            // A UD message is one packet: at most the port's MTU.
            let len = data.len();
            if len > u64::from(wr.state.max_message) {
                return Err(Error::OutOfRange {
                    what: "UD message length",
                    value: len,
                    limit: longer_than_mtu(wr.state.max_message),
                });
            }
        }
        if let (OpKind::CmpSwp { .. } | OpKind::FetchAdd { .. }, Some(r)) = (kind, remote) {
            let len = data.len();
            if len != 8 || r.addr % 8 != 0 {
                return Err(Error::InvalidArgument(bad_atomic(len, r.addr)));
            }
        }
        if let Some(r) = remote {
            let len = data.len();
            if len > r.len {
                return Err(Error::OutOfRange {
                    what: "work request length",
                    value: len,
                    limit: longer_than_remote(r.len),
                });
            }
        }
        let extra = match data {
            Data::Inline(_) => SendFlags::INLINE,
            _ => SendFlags::empty(),
        };
        let (rkey, raddr) = remote.map_or((0, 0), |r| (r.rkey, r.addr));
        wr.commit(
            extra,
            #[inline(always)]
            |q, ops| {
                // SAFETY: `q` is the live extended QP of an open batch; `ops`
                // are its provider's entries, and the builder's is a real one
                // (resolved non-NULL at creation for every op in send_ops, and
                // `op` is in send_ops); the SGE list and inline data are valid
                // for the calls (the provider copies inline data and the SGE
                // entries during them).
                unsafe {
                    match kind {
                        OpKind::Send => (ops.send)(q),
                        OpKind::SendImm(imm) => (ops.send_imm)(q, imm),
                        OpKind::SendInv(rkey) => (ops.send_inv)(q, rkey),
                        OpKind::Write => (ops.rdma_write)(q, rkey, raddr),
                        OpKind::WriteImm(imm) => (ops.rdma_write_imm)(q, rkey, raddr, imm),
                        OpKind::Read => (ops.rdma_read)(q, rkey, raddr),
                        OpKind::CmpSwp { compare, swap } => {
                            (ops.atomic_cmp_swp)(q, rkey, raddr, compare, swap)
                        }
                        OpKind::FetchAdd { add } => (ops.atomic_fetch_add)(q, rkey, raddr, add),
                    }
                    match data {
                        Data::Sge(s) => (ops.set_sge)(q, s.lkey, s.addr, s.length),
                        Data::List(l) => (ops.set_sge_list)(q, l.len(), l.as_ptr()),
                        Data::Inline(d) => (ops.set_inline_data)(q, d.as_ptr() as *mut _, d.len()),
                    }
                }
            },
        )
    }
}

impl<T: Transport> Wr<'_, '_, T> {
    /// Hands one whole work request to the provider: its wr_id and flags
    /// (plus `extra`), then `build` (the builder and its setters), then the
    /// DC address on a DCI. Every check has passed before this is called,
    /// except the stream id, checked here first.
    #[inline(always)]
    pub(super) fn commit(
        self,
        extra: SendFlags,
        build: impl FnOnce(*mut ffi::ibv_qp_ex, &WrOps),
    ) -> Result<()> {
        self.commit_as(extra, Addressed::Yes, build)
    }

    /// [`commit`](Self::commit), for a builder that may finish its WQE by
    /// itself (`addressed` says whether the DC address follows it).
    #[inline(always)]
    pub(super) fn commit_as(
        mut self,
        extra: SendFlags,
        addressed: Addressed,
        build: impl FnOnce(*mut ffi::ibv_qp_ex, &WrOps),
    ) -> Result<()> {
        // A work request that finds the send queue full is built over the
        // last WQE libmlx5 wrote (rdma-core 44); with the batch within its
        // room (the queue's depth less the type 1 binds still queued, the
        // only safe work left in a queue between calls), none does, and libmlx5 never takes the send CQ's lock to check
        // (which a poll of that CQ may hold on this thread). By value: the
        // batch's state must not escape the caller's loop.
        if self.state.posted >= self.state.room {
            // Here the count is the room: the batch would be one more.
            return Err(self.state.no_room(self.state.room as u32 + 1));
        }
        if let Addressed::No = addressed {
            // libmlx5 finishes these WQEs in the builder, with no address
            // segment: a DC setter after it would write its address over
            // the finished WQE and, its setter count left from the previous
            // work request, finish it a second time (skipping a send-queue
            // slot whose stale WQE the device would then run).
            self.addr = None;
        }
        if let Some(RawAddr::Xrc(srqn)) = self.addr {
            crate::qp::check_24_bits("XRC SRQ number", srqn)?;
        }
        // One compare each: an address handle of the QP's PD (the same PD
        // is the same context), with a 24-bit number (an address with a
        // wider one has no PD).
        if let Some(RawAddr::Ud(ud)) = self.addr {
            if ud.pd != self.state.pd {
                return Err(bad_ud_addr(ud.remote_qpn, ud.pd, self.state.qpx));
            }
        }
        if let Some(RawAddr::Dc(dc)) = self.addr {
            if dc.pd != self.state.pd {
                return Err(bad_dc_addr(dc.remote_dctn, dc.pd, self.state.qpx));
            }
            if dc.stream_id.is_some() && self.state.mlx5.streams.is_none() {
                return Err(Error::Unsupported { what: no_streams() });
            }
        }
        let q = self.state.qpx.as_ptr();
        // INLINE only where the data is inline (`extra`), whatever the
        // batch's flags say.
        let flags = self.flags.difference(SendFlags::INLINE) | extra;
        // Written only when they differ from what wr_flags holds (the
        // batch's flags, or the last work request's own): a compile-time
        // decision when the batch is opened in the same function with
        // constant flags, one compare per work request otherwise, and one
        // write for a run of work requests with the same flags (`.signaled()`
        // on each).
        let own = flags != self.state.wr_flags;
        // SAFETY: `q` is the live extended QP of an open batch, borrowed
        // mutably through `self.state`.
        unsafe {
            (*q).wr_id = self.wr_id;
            if own {
                (*q).wr_flags = flags.bits();
            }
        }
        self.state.wr_flags = flags;
        let ops = self.state.ops();
        build(q, ops);
        if let Some(RawAddr::Xrc(srqn)) = self.addr {
            // SAFETY: an XRC initiator's entry, resolved non-NULL at
            // creation; `q` is its live extended QP in an open batch.
            unsafe { (ops.set_xrc_srqn)(q, srqn) };
        }
        if let Some(RawAddr::Ud(ud)) = self.addr {
            // SAFETY: a UD QP's wr_set_ud_addr entry was resolved non-NULL
            // at creation; the address handle is borrowed for the Wr's
            // lifetime (in the scoped post, until the device is done) and
            // belongs to the QP's PD (checked above).
            unsafe { (ops.set_ud_addr)(q, ud.ah, ud.remote_qpn, ud.remote_qkey) }
        }
        if let Some(RawAddr::Dc(dc)) = self.addr {
            // SAFETY: a DCI has its mlx5 extension (`ops.mqpx`: QP creation
            // refuses a DCI without it), whose DC setters were resolved
            // non-NULL at creation (the stream setter when it has
            // streams, and only then can `stream_id` be Some here); the
            // address handle is borrowed for the Wr's lifetime (in the
            // scoped post, until the device is done) and belongs to the
            // DCI's PD (checked above).
            unsafe {
                match dc.stream_id {
                    None => (ops.set_dc_addr)(ops.mqpx, dc.ah, dc.remote_dctn, dc.remote_dc_key),
                    Some(id) => (ops.set_dc_addr_stream)(
                        ops.mqpx,
                        dc.ah,
                        dc.remote_dctn,
                        dc.remote_dc_key,
                        id,
                    ),
                }
            }
        }
        if self.peer_receive != PeerReceive::No {
            // A constant after inlining: a store for the work requests
            // that consume a receive at the peer, nothing for the others.
            self.state.peer_receive_mark =
                (self.state.posted + 1) << 2 | self.peer_receive as usize;
        }
        self.state.posted += 1;
        Ok(())
    }
}

/// Whether a work request's WQE takes the DC address of a DCI.
#[derive(Clone, Copy)]
pub(crate) enum Addressed {
    /// It does: the address setter follows the builder.
    Yes,
    /// It does not: a local operation (DMA memcpy, local invalidate) whose
    /// builder finishes the WQE.
    No,
}

impl<T: Transport> Op<'_, '_, T, Source> {
    /// Inline data: copied into the work request while it is built, so it
    /// need not stay alive. At most the QP's `max_inline_data` bytes; sets
    /// `IBV_SEND_INLINE` (which soft-RoCE requires for inline data).
    #[inline]
    pub fn inline(self, data: &[u8]) -> Result<()> {
        let max = self.wr.state.caps().max_inline_data;
        if data.len() > max as usize {
            return Err(Error::OutOfRange {
                what: "inline data length",
                value: data.len() as u64,
                limit: inline_too_long(max),
            });
        }
        self.post(Data::Inline(data))
    }
}

// The errors of the posting path. Their text is made out of line, so that
// each check in the caller's loop stays one compare; the variant is built
// at the check, so the caller's `?` knows it is an error.

#[cold]
#[inline(never)]
fn not_in_send_ops(name: &str) -> String {
    format!("{name}: the QP was not created with it in its send ops")
}

#[cold]
#[inline(never)]
fn bad_atomic(len: u64, addr: u64) -> String {
    format!(
        "atomics take one 8-byte SGE and an 8-byte aligned remote address \
         (got {len} bytes, remote address {addr:#x})"
    )
}

#[cold]
#[inline(never)]
fn longer_than_remote(remote_len: u64) -> String {
    format!("at most {remote_len} (the remote buffer's length)")
}

#[cold]
#[inline(never)]
fn too_many_sges(max: u32) -> String {
    format!("at most {max} (the QP's max_send_sge)")
}

#[cold]
#[inline(never)]
fn inline_too_long(max: u32) -> String {
    format!("at most {max} (the QP's max_inline_data)")
}

#[cold]
#[inline(never)]
fn bad_dc_addr(remote_dctn: u32, ah_pd: *mut ffi::ibv_pd, qpx: NonNull<ffi::ibv_qp_ex>) -> Error {
    if remote_dctn > crate::qp::MAX_DCTN {
        return crate::qp::past_24_bits("remote DCT number", remote_dctn);
    }
    Error::InvalidArgument(format!(
        "mlx5dv_wr_set_dc_addr: the DC address's address handle {}",
        crate::addressing::ah::not_of_the_qps_pd(ah_pd, qp_context(qpx), "DCI")
    ))
}

/// The context of a batch's QP, read where an error is made (not kept
/// in the batch's loop for it).
fn qp_context(qpx: NonNull<ffi::ibv_qp_ex>) -> *mut ffi::ibv_context {
    // SAFETY: the live extended QP of an open batch; its first field is
    // the QP, whose context is read.
    unsafe { (*qpx.as_ptr()).qp_base.context }
}

#[cold]
#[inline(never)]
fn longer_than_mtu(mtu: u32) -> String {
    format!("at most {mtu} (the port's active MTU: a UD message is one packet)")
}

#[cold]
#[inline(never)]
fn bad_ud_addr(remote_qpn: u32, ah_pd: *mut ffi::ibv_pd, qpx: NonNull<ffi::ibv_qp_ex>) -> Error {
    if remote_qpn > crate::qp::MAX_24_BITS {
        return crate::qp::past_24_bits("remote QP number", remote_qpn);
    }
    Error::InvalidArgument(format!(
        "ibv_wr_set_ud_addr: the UD address's address handle {}",
        crate::addressing::ah::not_of_the_qps_pd(ah_pd, qp_context(qpx), "QP")
    ))
}

#[cold]
#[inline(never)]
fn no_streams() -> String {
    "mlx5dv_wr_set_dc_addr_stream: the DCI was created without DCI streams".into()
}
