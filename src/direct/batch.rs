//! The direct batch: WQEs written into the send queue, one doorbell for
//! all of them.

use super::sq::{Slot, Sq, DS, INLINE_SEG};
use super::DirectTransport;
use crate::error::{DirectError, Error, Result};
use crate::ffi;
use crate::mr::{NonEmptySge, RemoteBuf, Sge, SgeMut};
use crate::qp::{DcInitiator, QpState, ReliableConnection};
use crate::wr::SendFlags;
use std::marker::PhantomData;

/// What a direct RDMA write or send reads: an [`Sge`], or a
/// [`NonEmptySge`] ([`Sge::non_empty`]), for which the writer makes no
/// test for an empty entry (which it must write as no data segment: mlx5
/// reads a byte count of 0 as 2^31). Both borrow their region shared for
/// `'m`. Sealed: implemented for those two only.
pub trait WriteSource<'m>: Copy + source::Entry {}

impl<'m> WriteSource<'m> for Sge<'m> {}
impl<'m> WriteSource<'m> for NonEmptySge<'m> {}

mod source {
    use crate::ffi;
    use crate::mr::{NonEmptySge, Sge};

    /// The entry, and whether it is known to hold a byte.
    pub trait Entry {
        /// Whether every value holds at least one byte.
        #[doc(hidden)]
        const NON_EMPTY: bool;
        /// The entry as C sees it.
        #[doc(hidden)]
        fn raw(&self) -> &ffi::ibv_sge;
    }

    impl Entry for Sge<'_> {
        const NON_EMPTY: bool = false;
        #[inline(always)]
        fn raw(&self) -> &ffi::ibv_sge {
            self.as_raw()
        }
    }

    impl Entry for NonEmptySge<'_> {
        const NON_EMPTY: bool = true;
        #[inline(always)]
        fn raw(&self) -> &ffi::ibv_sge {
            self.as_raw()
        }
    }
}

/// Makes `'m` invariant, as in [`WrBatch`](crate::WrBatch).
type Invariant<'m> = fn(&'m ()) -> &'m ();

/// Work requests written straight into the send queue of a [`DirectQp`](super::DirectQp):
/// each method writes one WQE (control segment, then the segments its
/// operation needs) in place, and [`ring`](DirectBatch::ring) posts them
/// all with one doorbell-record update and one doorbell write.
///
/// Nothing reaches the device before `ring`: a batch dropped, forgotten
/// or abandoned on an error posts nothing (its WQEs are bytes in free
/// slots of the ring, which the next batch overwrites). A batch of a QP
/// not in RTS writes nothing: each work request is refused with
/// [`Error::QpNotReady`] ([`DirectQp::batch`](super::DirectQp::batch)).
///
/// Every WQE it writes is well formed by construction: its DS count is
/// the segments it wrote, each segment has its operation's layout, a
/// data segment comes only from a [`Sge`] (checked against its region, of
/// less than 2^31 bytes, never of length 0: mlx5 reads a byte count of 0
/// as 2^31, so an empty entry is written as no segment, as libmlx5 does),
/// and a WQE that does not fit the room left is refused before anything
/// is written ([`Error::SendQueueFull`], or [`Error::BatchLimit`] past the
/// batch's [`limit`](DirectBatch::limit)).
///
/// What the typed writers make impossible, at compile time:
///
/// An RDMA read into memory borrowed shared (the device writes it):
///
/// ```compile_fail,E0308
/// # use mlx5dv::*;
/// # use mlx5dv::direct::DirectRc;
/// # fn f(qp: &mut DirectRc, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
/// let mut b = qp.batch();
/// b.rdma_read(1, SendFlags::SIGNALED, remote, mr.sge(0..8)?)?; // ERROR: needs a SgeMut
/// # Ok(()) }
/// ```
///
/// Posting without waiting outside `unsafe` (its contract is the caller's):
///
/// ```compile_fail,E0133
/// # use mlx5dv::*;
/// # use mlx5dv::direct::DirectRc;
/// # fn f(qp: &mut DirectRc, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
/// let mut b = qp.batch();
/// b.rdma_write(1, SendFlags::SIGNALED, remote, mr.sge(0..8)?)?;
/// b.ring(); // ERROR: unsafe
/// # Ok(()) }
/// ```
///
/// Touching memory a scoped post's work request uses before it returns:
///
/// ```compile_fail,E0499
/// # use mlx5dv::*;
/// # use mlx5dv::direct::DirectRc;
/// # use std::time::Duration;
/// # fn f(qp: &mut DirectRc, mr: &mut MemoryRegion, remote: RemoteBuf) -> Result<()> {
/// qp.post_and_wait(Duration::from_secs(1), |b| {
///     b.rdma_read(1, SendFlags::empty(), remote, mr.sge_mut(0..8)?)?;
///     mr.fill(.., 0)?; // ERROR: the read's destination is borrowed until the post returns
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
///
/// A batch of another QP (here a leaked one's) put in place of a scoped
/// post's own, which the post would ring and then wait for on the wrong
/// CQ:
///
/// ```compile_fail,E0521
/// # use mlx5dv::*;
/// # use mlx5dv::direct::DirectRc;
/// # use std::time::Duration;
/// # fn f(qp: &mut DirectRc, other: DirectRc) -> Result<()> {
/// let leaked: &'static mut DirectRc = Box::leak(Box::new(other));
/// let theirs = leaked.batch();
/// qp.post_and_wait(Duration::from_secs(1), move |mine| {
///     drop(std::mem::replace(mine, theirs)); // ERROR: each batch's QP lifetime is its own
///     Ok(())
/// })?;
/// # Ok(()) }
/// ```
///
/// A transport the direct path does not write WQEs for:
///
/// ```compile_fail,E0599
/// # use mlx5dv::*;
/// # fn f(qp: UdQp, cq: CompletionQueue) -> Result<()> {
/// let direct = qp.into_direct(cq)?; // ERROR: UD is not a DirectTransport
/// # Ok(()) }
/// ```
#[must_use = "a direct batch posts nothing until it is rung"]
pub struct DirectBatch<'q, 'm, T: DirectTransport> {
    pub(super) sq: &'q mut Sq,
    /// What the writers need of the ring, copied here so that the stores
    /// into the ring (through raw pointers) do not make the compiler read
    /// them again from the `Sq` behind the reference.
    buf: *mut u8,
    slots: *mut Slot,
    /// The ring's bytes less one basic block (the ring's blocks less one,
    /// times 64): a block's byte offset in the ring is masked by it, and
    /// its slot's is a quarter of it (one 16-byte slot a 64-byte block).
    bmask: u32,
    /// The basic blocks this batch may still write: those free in the
    /// ring, or fewer after a [`limit`](DirectBatch::limit). Counted down
    /// by each WQE, so that within a limit the compiler can fold the test
    /// into the loop's own.
    left: u32,
    /// The work requests the batch was limited to in all (for the error
    /// past them), or `u32::MAX` when it was not.
    limited: u32,
    /// The most 16-byte units one WQE may take.
    max_units: u32,
    qpn8: u32,
    /// Whether the QP has DCI streams.
    streams: bool,
    /// The producer index of the next WQE (the ring's own moves at `ring`)
    /// in bits 48 to 63, the sequence number of the last work request
    /// written in bits 0 to 31 (bits 32 to 47: 0 when the batch starts,
    /// then at most a carry of the sequence number). One register moved
    /// by one addition a WQE, and written whole as the tag of its slot
    /// ([`Slot`]: `seq`, then `end` in the high 16 bits).
    state: u64,
    /// The first basic block of the last WQE written (valid once `seq`
    /// moved past the ring's `posted`).
    last: u16,
    /// `'q` invariant too: a batch of another QP (a leaked one's,
    /// `'static`) cannot be swapped into a scoped post's closure, which
    /// rings the batch it is left with and waits on its own CQ.
    _m: PhantomData<(Invariant<'m>, Invariant<'q>, T)>,
}

/// Where a WQE goes, as [`DirectBatch::reserve`] found it.
#[derive(Clone, Copy)]
struct At {
    /// Its control segment.
    ctrl: *mut u8,
    /// The ring's unit (16 bytes) it starts at.
    first: u32,
    /// Its byte offset in the ring.
    offset: u32,
    /// Its 16-byte units, a DCI's datagram segment included.
    units: u32,
    /// Its basic blocks.
    blocks: u32,
}

/// The control-segment flags (`fm_ce_se`) of a work request's
/// [`SendFlags`]: `IBV_SEND_FENCE` (1) → `MLX5_WQE_CTRL_FENCE` (0x80),
/// `IBV_SEND_SIGNALED` (2) → `MLX5_WQE_CTRL_CQ_UPDATE` (8),
/// `IBV_SEND_SOLICITED` (4) → `MLX5_WQE_CTRL_SOLICITED` (2); other bits
/// are ignored.
#[inline(always)]
fn fm_ce_se(flags: SendFlags) -> u8 {
    // Shifts and masks, not a table: where the flags are chosen by a test
    // (`if last { SIGNALED } else { empty() }`), the compiler knows which
    // bits may be set and folds this to one shift of the test's result;
    // a table's load it could not fold.
    let f = flags.bits();
    (((f & 1) << 7) | ((f & 2) << 2) | ((f & 4) >> 1)) as u8
}

const _: () = {
    assert!(ffi::IBV_SEND_FENCE == 1 && ffi::MLX5_WQE_CTRL_FENCE == 0x80);
    assert!(ffi::IBV_SEND_SIGNALED == 2 && ffi::MLX5_WQE_CTRL_CQ_UPDATE == 8);
    assert!(ffi::IBV_SEND_SOLICITED == 4 && ffi::MLX5_WQE_CTRL_SOLICITED == 2);
};

/// Writes `v` big-endian at `p`.
///
/// # Safety
/// `p` is valid for 8 bytes, 8-aligned.
#[inline(always)]
unsafe fn be64(p: *mut u8, v: u64) {
    // SAFETY: the caller's promise.
    unsafe { p.cast::<u64>().write(v.to_be()) }
}

/// Writes `v` big-endian at `p`.
///
/// # Safety
/// `p` is valid for 4 bytes, 4-aligned.
#[inline(always)]
unsafe fn be32(p: *mut u8, v: u32) {
    // SAFETY: the caller's promise.
    unsafe { p.cast::<u32>().write(v.to_be()) }
}

/// The refusal of a WQE of too many units for the DS field or the QP's
/// WQE size. Built inline from plain values, as every refusal of the
/// writers: a refusal formatted or allocated by a call would leave the
/// compiler unsure the call returned an error, and it would keep the
/// whole batch live across that call, in memory rather than in registers.
#[inline(always)]
fn too_many_units(units: u32, max_units: u32) -> Error {
    // DS is 6 bits of qpn_ds: a longer WQE cannot be described.
    Error::Direct(DirectError::TooManyUnits {
        units,
        max: max_units,
        by_ds_field: max_units == u32::from(crate::wqe::MAX_DS),
    })
}

/// The remote side of a work request, checked: `len` bytes fit it.
#[inline(always)]
fn check_remote(remote: &RemoteBuf, len: u64, what: &'static str) -> Result<()> {
    if len > remote.len {
        return Err(Error::Direct(DirectError::RemoteTooShort {
            what,
            len,
            remote_len: remote.len,
        }));
    }
    Ok(())
}

/// Where a DCI's work request goes: the address vector as the WQE's
/// datagram segment carries it, and the DCI stream.
#[derive(Clone, Copy)]
pub(super) struct Route {
    av: Av,
    stream: Option<u16>,
}

/// A DCI's address vector (48 bytes, the WQE's datagram segment), on
/// x86-64 as three 16-byte vectors: read from the
/// [`DirectDcAddr`](super::DirectDcAddr) where the compiler can hoist the
/// loads out of a loop of work requests (it did not hoist the six 8-byte
/// loads of the words), kept in vector registers (not the general ones
/// the writers need), and written with three stores. Elsewhere the six
/// words.
#[derive(Clone, Copy)]
struct Av(AvParts);

#[cfg(target_arch = "x86_64")]
type AvParts = [std::arch::x86_64::__m128i; 3];
#[cfg(not(target_arch = "x86_64"))]
type AvParts = [u64; 6];

impl Av {
    #[inline(always)]
    fn load(words: &[u64; 6]) -> Av {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE2 is part of x86-64; each load reads 16 bytes of
        // `words` (unaligned loads).
        let parts = unsafe {
            use std::arch::x86_64::{__m128i, _mm_loadu_si128};
            let p = words.as_ptr().cast::<__m128i>();
            [
                _mm_loadu_si128(p),
                _mm_loadu_si128(p.add(1)),
                _mm_loadu_si128(p.add(2)),
            ]
        };
        #[cfg(not(target_arch = "x86_64"))]
        let parts = *words;
        Av(parts)
    }

    /// Writes the 48 bytes at `p`.
    ///
    /// # Safety
    /// `p` is valid for 48 bytes of writes, 16-aligned.
    #[inline(always)]
    unsafe fn store(self, p: *mut u8) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's promise (stores of 16 bytes each).
        unsafe {
            use std::arch::x86_64::{__m128i, _mm_storeu_si128};
            let p = p.cast::<__m128i>();
            for (i, v) in self.0.into_iter().enumerate() {
                _mm_storeu_si128(p.add(i), v);
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        // SAFETY: as above.
        unsafe {
            let p = p.cast::<u64>();
            for (i, w) in self.0.into_iter().enumerate() {
                p.add(i).write(w);
            }
        }
    }
}

impl<'q, 'm, T: DirectTransport> DirectBatch<'q, 'm, T> {
    /// A batch of `sq`; of no room unless `ready`: the QP is in RTS
    /// (libibverbs' record of its state, read by the caller without a
    /// call: a call before the writers' loop would cost registers in it).
    /// A writer refused for room then names the state
    /// ([`no_room_for`](Self::no_room_for)).
    #[inline(always)]
    pub(super) fn new(sq: &'q mut Sq, ready: bool) -> Self {
        let state = (u64::from(sq.pi) << 48) | u64::from(sq.posted);
        DirectBatch {
            buf: sq.buf.as_ptr(),
            slots: sq.slots.as_mut_ptr(),
            bmask: u32::from(sq.mask) << 6,
            // No room on a QP not in RTS: every writer is refused.
            left: if ready { sq.room() } else { 0 },
            limited: u32::MAX,
            max_units: (sq.max_blocks * 4).min(u32::from(crate::wqe::MAX_DS)),
            qpn8: sq.qpn8,
            streams: sq.streams,
            sq,
            state,
            last: 0,
            _m: PhantomData,
        }
    }

    /// Work requests written so far.
    pub fn len(&self) -> u32 {
        self.seq().wrapping_sub(self.sq.posted)
    }

    /// Whether no work request was written.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Basic blocks (64 bytes) still free in the send queue for this
    /// batch (within its [`limit`](Self::limit), if it has one): an RDMA
    /// write or send of one entry, or an atomic, takes one on an RC QP,
    /// two on a DCI.
    pub fn room(&self) -> u32 {
        self.left
    }

    /// The basic blocks of a work request as [`limit`](Self::limit)
    /// counts them: one on an RC QP, two on a DCI (its datagram segment
    /// takes three of the eight units).
    const WR_BLOCKS: u32 = if T::DC { 2 } else { 1 };

    /// Holds the batch to `n` more work requests, and checks now that the
    /// send queue has room for them ([`Error::SendQueueFull`] if not), and
    /// the batch's earlier limit ([`Error::BatchLimit`]); on an error the
    /// batch is unchanged. As [`WrBatch::limit`](crate::WrBatch::limit).
    ///
    /// Each work request is counted as one basic block on an RC QP, two on
    /// a DCI: what every writer's WQE takes but the inline ones with more
    /// data than fits in the rest of those blocks, which take as many more
    /// of the limit as they need. Past the limit a work request is refused
    /// before anything of it is written ([`Error::BatchLimit`]), and the
    /// batch stays open. Within it, the send queue's room is not tested
    /// again: when `n` is the trip count of the loop that fills the batch,
    /// the compiler folds the per-work-request test into the loop's own.
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # use mlx5dv::direct::DirectRc;
    /// # fn f(qp: &mut DirectRc, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
    /// let plan: Vec<(RemoteBuf, Sge<'_>)> = (0..32usize)
    ///     .map(|i| Ok((remote.slice(i as u64 * 64, 64)?, mr.sge(i * 64..(i + 1) * 64)?)))
    ///     .collect::<Result<_>>()?;
    /// let mut b = qp.batch();
    /// b.limit(plan.len())?;
    /// for (i, (to, src)) in plan.iter().enumerate() {
    ///     b.rdma_write(i as u64, SendFlags::SIGNALED, *to, *src)?;
    /// }
    /// // SAFETY: the memory stays registered and untouched until the
    /// // completions are polled.
    /// unsafe { b.ring() };
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn limit(&mut self, n: usize) -> Result<()> {
        let blocks = u32::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(Self::WR_BLOCKS));
        match blocks {
            Some(blocks) if blocks <= self.left => {
                self.left = blocks;
                self.limited = self.len() + n as u32;
                Ok(())
            }
            _ => Err(self.no_room_for(n.min(u32::MAX as usize) as u32)),
        }
    }

    /// The refusal of `n` more work requests than the batch has room
    /// for: a QP not in RTS, past its limit, or a full send queue.
    #[inline(always)]
    fn no_room_for(&self, n: u32) -> Error {
        let state = self.sq.recorded_state();
        if state != ffi::IBV_QPS_RTS {
            Error::QpNotReady {
                what: "DirectQp::batch",
                qp_num: self.qpn8 >> 8,
                state: QpState::from_raw(state),
                receive: false,
            }
        } else if self.limited != u32::MAX {
            Error::BatchLimit {
                limit: self.limited,
            }
        } else {
            Error::SendQueueFull {
                batch: self.len().saturating_add(n),
                depth: self.sq.wqe_cnt,
            }
        }
    }

    /// The producer index of the next WQE.
    #[inline(always)]
    pub(super) fn pi(&self) -> u16 {
        (self.state >> 48) as u16
    }

    /// The sequence number of the last work request written.
    #[inline(always)]
    fn seq(&self) -> u32 {
        self.state as u32
    }

    /// The address of the 16-byte unit `unit` of the ring (taken modulo
    /// the ring).
    #[inline(always)]
    fn at(&self, unit: u32) -> *mut u8 {
        let offset = (unit << 4) & (self.bmask | 63);
        // SAFETY: masked, the unit lies inside the ring.
        unsafe { self.buf.add(offset as usize) }
    }

    /// The control segment of the WQE starting at basic block `idx`.
    #[inline(always)]
    fn ctrl_of(&self, idx: u16) -> *mut u8 {
        self.block(u32::from(idx))
    }

    /// Basic block `b` of the ring, taken modulo the ring.
    #[inline(always)]
    fn block(&self, b: u32) -> *mut u8 {
        // SAFETY: masked, the block lies inside the ring.
        unsafe { self.buf.add(((b << 6) & self.bmask) as usize) }
    }

    /// The slot of the block at byte offset `offset` (masked) of the ring.
    #[inline(always)]
    fn slot_at(&self, offset: u32) -> *mut Slot {
        const _: () = assert!(super::sq::BB == 4 * std::mem::size_of::<Slot>());
        // SAFETY: a block's offset over 64 is its index, below the ring's
        // blocks, the slots' number; a slot is a quarter of a block.
        unsafe { self.slots.byte_add((offset >> 2) as usize) }
    }

    /// Unit `k` of the WQE whose control segment is `ctrl`, unit `first`
    /// of the ring: the first four are in its first basic block; later
    /// ones may wrap to the ring's start.
    #[inline(always)]
    fn seg(&self, ctrl: *mut u8, first: u32, k: u32) -> *mut u8 {
        if k < 4 {
            // SAFETY: the WQE's first basic block holds units 0..4.
            unsafe { ctrl.add(k as usize * DS) }
        } else {
            // Unit k % 4 of the WQE's block k / 4 (a block is contiguous;
            // the ring wraps between blocks).
            let block = self.block((first >> 2) + (k >> 2));
            // SAFETY: inside that block.
            unsafe { block.add((k & 3) as usize * DS) }
        }
    }

    /// Starts a WQE of `units` 16-byte units (the control segment and the
    /// operation's own; a DCI's datagram segment adds 3): checks the room, writes the
    /// control segment (and a DCI's datagram segment) and notes the slot.
    /// Returns the control segment and its unit; the operation's segments
    /// start at unit 1, or 4 after a datagram segment.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn begin(
        &mut self,
        wr_id: u64,
        opcode: u32,
        units: u32,
        flags: SendFlags,
        imm: u32,
        route: Option<Route>,
    ) -> Result<(*mut u8, u32)> {
        let at = self.reserve(units, &route)?;
        self.commit(&at, wr_id, opcode, flags, imm, route);
        Ok((at.ctrl, at.first))
    }

    /// The checks of [`begin`](Self::begin) and the WQE's place, nothing
    /// written: the operation's segments may be written before
    /// [`commit`](Self::commit) writes its control segment (which keeps
    /// what they read from the caller's memory from being held across the
    /// control segment's writing: fewer registers).
    #[inline(always)]
    fn reserve(&self, units: u32, route: &Option<Route>) -> Result<At> {
        let units = units + if route.is_some() { 3 } else { 0 };
        let blocks = (units + 3) >> 2;
        // A WQE of one basic block fits any QP's WQE, one of two any
        // DCI's (its datagram segment alone takes three units: `into_direct`
        // takes no DCI whose WQEs are smaller): for the operations whose
        // size is known (most), the first test folds away.
        let always_fits = if T::DC { 8 } else { 4 };
        if units > always_fits && units > self.max_units {
            return Err(too_many_units(units, self.max_units));
        }
        if blocks > self.left {
            return Err(self.no_room_for(1));
        }
        if let Some(Route {
            stream: Some(_), ..
        }) = route
        {
            if !self.streams {
                return Err(Error::Direct(DirectError::NoStreams));
            }
        }
        // The WQE's byte offset in the ring, straight from the state's
        // producer index (bits 48 to 63, so 42 to 57 are its offset).
        let offset = (self.state >> 42) as u32 & self.bmask;
        Ok(At {
            // SAFETY: masked, a block of the ring.
            ctrl: unsafe { self.buf.add(offset as usize) },
            first: offset >> 4,
            offset,
            units,
            blocks,
        })
    }

    /// Writes the control segment (and a DCI's datagram segment) of the
    /// WQE [`reserve`](Self::reserve) placed, notes its slot and moves the
    /// producer index past it.
    #[inline(always)]
    fn commit(
        &mut self,
        at: &At,
        wr_id: u64,
        opcode: u32,
        flags: SendFlags,
        imm: u32,
        route: Option<Route>,
    ) {
        let At {
            ctrl,
            offset,
            units,
            blocks,
            ..
        } = *at;
        let idx = self.pi();
        let stream = match route {
            Some(Route {
                stream: Some(s), ..
            }) => s,
            _ => 0,
        };
        let [s_hi, s_lo] = stream.to_be_bytes();
        // SAFETY: `ctrl` starts a free basic block of the ring (room checked
        // by `reserve`: the device does not read it until a doorbell names
        // it); 16 bytes, 16-aligned.
        unsafe {
            // The WQE index (the producer index) in bits 8 to 23.
            // (The same value two ways: on a DCI the index is at hand
            // for its WQE's second block, elsewhere the state's bits are
            // one instruction fewer.)
            let idx8 = if T::DC {
                u32::from(idx) << 8
            } else {
                (self.state >> 40) as u32 & 0x00ff_ff00
            };
            be32(ctrl, idx8 | opcode);
            be32(ctrl.add(4), self.qpn8 | units);
            // Signature, DCI stream id, fm_ce_se, then the immediate (big
            // endian already): one 8-byte store.
            let [i0, i1, i2, i3] = imm.to_ne_bytes();
            ctrl.add(8).cast::<u64>().write(u64::from_ne_bytes([
                0,
                s_hi,
                s_lo,
                fm_ce_se(flags),
                i0,
                i1,
                i2,
                i3,
            ]));
        }
        if let Some(r) = route {
            // SAFETY: units 1..4 of the WQE, in its first basic block.
            unsafe { r.av.store(ctrl.add(DS)) };
        }
        // The producer index past the WQE, and the next sequence number.
        let next = self.state.wrapping_add((u64::from(blocks) << 48) | 1);
        // Mapped here, where `opcode` is a constant: the poll reads the
        // completion's opcode as it is.
        let wc_opcode = super::sq::wc_opcode(opcode as u8).to_raw() as u8;
        // SAFETY: the slot of the WQE's block, inside the slot array (one
        // per basic block of the ring).
        unsafe { Slot::write(self.slot_at(offset), wr_id, next, wc_opcode) };
        // The later blocks of a WQE start none: their slots say so (an
        // end at the block itself), so that a stale slot left there by an
        // abandoned batch is never taken for an outstanding WQE.
        if blocks > 1 {
            for b in 1..blocks {
                let at = (offset + (b << 6)) & self.bmask;
                // SAFETY: the slot of a block of the ring.
                unsafe { (*self.slot_at(at)).end = idx.wrapping_add(b as u16) };
            }
        }
        self.state = next;
        self.left -= blocks;
        self.last = idx;
    }

    /// Writes a remote-address segment at `p`.
    #[inline(always)]
    fn raddr(p: *mut u8, remote: &RemoteBuf) {
        // SAFETY: a unit of the WQE `begin` (or `reserve`) reserved.
        unsafe {
            be64(p, remote.addr);
            // The rkey, then 4 reserved bytes of 0: one 8-byte store.
            be64(p.add(8), u64::from(remote.rkey) << 32);
        }
    }

    /// Writes a data segment at `p`.
    #[inline(always)]
    fn data(p: *mut u8, len: u32, lkey: u32, addr: u64) {
        // SAFETY: a unit of the WQE `begin` (or `reserve`) reserved.
        unsafe {
            be32(p, len);
            be32(p.add(4), lkey);
            be64(p.add(8), addr);
        }
    }

    /// Writes an inline segment of `data` from unit `u` of the ring,
    /// across the ring's end if it gets there.
    fn inline(&self, u: u32, data: &[u8]) {
        let head = self.at(u);
        // SAFETY: the units `begin` reserved for the segment: 4 bytes of
        // byte count, then the data, within `inline_units(len)` units.
        unsafe { be32(head, data.len() as u32 | INLINE_SEG) };
        // The data follows the 4-byte count: 12 bytes in the first unit,
        // then whole units (each unit contiguous, the ring wrapping only
        // between units).
        let (first, rest) = data.split_at(data.len().min(DS - 4));
        // SAFETY: as above.
        unsafe { std::ptr::copy_nonoverlapping(first.as_ptr(), head.add(4), first.len()) };
        for (i, chunk) in rest.chunks(DS).enumerate() {
            let p = self.at(u + 1 + i as u32);
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), p, chunk.len()) };
        }
    }

    /// The units of an inline segment of `len` bytes (none for 0).
    fn inline_units(&self, len: usize) -> Result<u32> {
        let max = self.sq.max_inline;
        if len > max as usize {
            return Err(Error::Direct(DirectError::InlineTooLong {
                len: len as u64,
                max,
            }));
        }
        Ok(if len == 0 {
            0
        } else {
            (len as u32 + 4).div_ceil(DS as u32)
        })
    }

    /// The first unit of the operation's own segments.
    #[inline(always)]
    fn body(route: &Option<Route>) -> u32 {
        if route.is_some() {
            4
        } else {
            1
        }
    }

    /// An operation with a remote address and a local entry (write, read).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn op_remote(
        &mut self,
        route: Option<Route>,
        wr_id: u64,
        opcode: u32,
        flags: SendFlags,
        imm: u32,
        remote: &RemoteBuf,
        sge: &ffi::ibv_sge,
        non_empty: bool,
        what: &'static str,
    ) -> Result<()> {
        let len = sge.length;
        if non_empty {
            // A known non-empty entry: only a longer one is refused.
            if u64::from(len) > remote.len {
                check_remote(remote, u64::from(len), what)?;
            }
        } else if u64::from(len).wrapping_sub(1) >= remote.len {
            // One test for the common case, an entry of 1 byte up to the
            // remote buffer's length (in 64 bits: an empty entry fails it
            // whatever the remote buffer's length); a longer one is refused.
            check_remote(remote, u64::from(len), what)?;
        }
        let ctrl = self.remote_wqe(route, wr_id, opcode, flags, imm, remote, sge)?;
        if !non_empty && len == 0 {
            // An empty entry is no data segment (mlx5 reads a byte count
            // of 0 as 2^31; libmlx5's `mlx5_send_wr_set_sge` leaves it out
            // too): the WQE one unit shorter, set after it was written,
            // so that the common WQE's size stays a constant.
            Self::set_units(ctrl, Self::body(&route) + 1);
        }
        Ok(())
    }

    /// Sets the DS count of the WQE whose control segment is `ctrl`, written.
    #[inline(always)]
    fn set_units(ctrl: *mut u8, units: u32) {
        // SAFETY: byte 7 of a control segment `begin` (or `commit`) wrote: the low byte
        // of qpn_ds (big-endian), the DS count (6 bits; `units` is below
        // 64, as `begin` or `reserve` checked for a larger WQE).
        unsafe { ctrl.add(7).write(units as u8) }
    }

    /// The WQE of [`op_remote`](Self::op_remote), its data segment
    /// included; returns its control segment.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn remote_wqe(
        &mut self,
        route: Option<Route>,
        wr_id: u64,
        opcode: u32,
        flags: SendFlags,
        imm: u32,
        remote: &RemoteBuf,
        sge: &ffi::ibv_sge,
    ) -> Result<*mut u8> {
        let k = Self::body(&route);
        let at = self.reserve(3, &route)?;
        Self::raddr(self.seg(at.ctrl, at.first, k), remote);
        // An empty entry's unit is written too, then left past the WQE's
        // DS count (the device does not read it), inside its last basic
        // block.
        Self::data(
            self.seg(at.ctrl, at.first, k + 1),
            sge.length,
            sge.lkey,
            sge.addr,
        );
        self.commit(&at, wr_id, opcode, flags, imm, route);
        Ok(at.ctrl)
    }

    #[inline(always)]
    fn op_write_inline(
        &mut self,
        route: Option<Route>,
        wr_id: u64,
        flags: SendFlags,
        remote: &RemoteBuf,
        data: &[u8],
    ) -> Result<()> {
        check_remote(remote, data.len() as u64, "the RDMA write's length")?;
        let inl = self.inline_units(data.len())?;
        let k = Self::body(&route);
        let (ctrl, first) =
            self.begin(wr_id, ffi::MLX5_OPCODE_RDMA_WRITE, 2 + inl, flags, 0, route)?;
        Self::raddr(self.seg(ctrl, first, k), remote);
        if inl != 0 {
            self.inline(first + k + 1, data);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn op_send(
        &mut self,
        route: Option<Route>,
        wr_id: u64,
        opcode: u32,
        flags: SendFlags,
        imm: u32,
        sge: &ffi::ibv_sge,
        non_empty: bool,
    ) -> Result<()> {
        let len = sge.length;
        let k = Self::body(&route);
        let has_data = non_empty || len != 0;
        let (ctrl, first) =
            self.begin(wr_id, opcode, 1 + u32::from(has_data), flags, imm, route)?;
        if has_data {
            Self::data(self.seg(ctrl, first, k), len, sge.lkey, sge.addr);
        }
        Ok(())
    }

    #[inline(always)]
    fn op_send_inline(
        &mut self,
        route: Option<Route>,
        wr_id: u64,
        flags: SendFlags,
        data: &[u8],
    ) -> Result<()> {
        let inl = self.inline_units(data.len())?;
        let k = Self::body(&route);
        let (_, first) = self.begin(wr_id, ffi::MLX5_OPCODE_SEND, 1 + inl, flags, 0, route)?;
        if inl != 0 {
            self.inline(first + k, data);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn op_atomic(
        &mut self,
        route: Option<Route>,
        wr_id: u64,
        opcode: u32,
        flags: SendFlags,
        remote: &RemoteBuf,
        swap_add: u64,
        compare: u64,
        dst: &SgeMut<'m>,
    ) -> Result<()> {
        if dst.length() != 8 {
            return Err(Error::Direct(DirectError::AtomicLength {
                len: dst.length(),
            }));
        }
        if remote.len < 8 {
            return Err(Error::Direct(DirectError::AtomicRemoteTooShort {
                remote_len: remote.len,
            }));
        }
        if remote.addr % 8 != 0 {
            return Err(Error::Direct(DirectError::AtomicUnaligned {
                addr: remote.addr,
            }));
        }
        let k = Self::body(&route);
        let (ctrl, first) = self.begin(wr_id, opcode, 4, flags, 0, route)?;
        Self::raddr(self.seg(ctrl, first, k), remote);
        let p = self.seg(ctrl, first, k + 1);
        // SAFETY: a unit of the WQE `begin` reserved (struct
        // mlx5_wqe_atomic_seg: swap_add, then compare).
        unsafe {
            be64(p, swap_add);
            be64(p.add(8), compare);
        }
        Self::data(self.seg(ctrl, first, k + 2), 8, dst.lkey(), dst.addr());
        Ok(())
    }
}

/// The writers, written once for an RC batch and a DCI's addressed work
/// request: `[$recv]` is the receiver, `$batch` the batch it writes into
/// and `$route` the DCI route (`None` on RC). Each writes one WQE: the
/// control segment, a DCI's datagram segment and the operation's (an RDMA
/// write's or read's first, after the checks, then the control segment).
macro_rules! writers {
    ([$($recv:tt)+], $batch:expr, $route:expr) => {
        /// An RDMA write of `src` into the peer's `remote` memory
        /// (`MLX5_OPCODE_RDMA_WRITE`): control, (datagram,) remote-address
        /// and data segments (no data segment for an empty `src`). `src`
        /// is an [`Sge`], or a [`NonEmptySge`], for which no test for an
        /// empty entry is made.
        #[inline]
        pub fn rdma_write<S: WriteSource<'m>>(
            $($recv)+,
            wr_id: u64,
            flags: SendFlags,
            remote: RemoteBuf,
            src: S,
        ) -> Result<()> {
            let what = "the RDMA write's length";
            let op = ffi::MLX5_OPCODE_RDMA_WRITE;
            let raw = src.raw();
            $batch.op_remote($route, wr_id, op, flags, 0, &remote, raw, S::NON_EMPTY, what)
        }

        /// An RDMA write with 32-bit immediate data, in host byte order
        /// (`MLX5_OPCODE_RDMA_WRITE_IMM`): it consumes a receive at the
        /// peer.
        #[inline]
        pub fn rdma_write_imm<S: WriteSource<'m>>(
            $($recv)+,
            wr_id: u64,
            flags: SendFlags,
            remote: RemoteBuf,
            imm: u32,
            src: S,
        ) -> Result<()> {
            let what = "the RDMA write's length";
            let op = ffi::MLX5_OPCODE_RDMA_WRITE_IMM;
            let (imm, raw) = (imm.to_be(), src.raw());
            $batch.op_remote($route, wr_id, op, flags, imm, &remote, raw, S::NON_EMPTY, what)
        }

        /// An RDMA write of `data`, copied into the WQE (inline): the
        /// memory need not be registered and is free again when this
        /// returns. At most the QP's `max_inline_data` bytes.
        pub fn rdma_write_inline(
            $($recv)+,
            wr_id: u64,
            flags: SendFlags,
            remote: RemoteBuf,
            data: &[u8],
        ) -> Result<()> {
            $batch.op_write_inline($route, wr_id, flags, &remote, data)
        }

        /// A send of `src` (`MLX5_OPCODE_SEND`): it consumes a receive at
        /// the peer.
        #[inline]
        pub fn send<S: WriteSource<'m>>(
            $($recv)+,
            wr_id: u64,
            flags: SendFlags,
            src: S,
        ) -> Result<()> {
            let op = ffi::MLX5_OPCODE_SEND;
            $batch.op_send($route, wr_id, op, flags, 0, src.raw(), S::NON_EMPTY)
        }

        /// A send with 32-bit immediate data, in host byte order
        /// (`MLX5_OPCODE_SEND_IMM`).
        #[inline]
        pub fn send_imm<S: WriteSource<'m>>(
            $($recv)+,
            wr_id: u64,
            flags: SendFlags,
            imm: u32,
            src: S,
        ) -> Result<()> {
            let op = ffi::MLX5_OPCODE_SEND_IMM;
            $batch.op_send($route, wr_id, op, flags, imm.to_be(), src.raw(), S::NON_EMPTY)
        }

        /// A send of `data`, copied into the WQE (inline).
        pub fn send_inline($($recv)+, wr_id: u64, flags: SendFlags, data: &[u8]) -> Result<()> {
            $batch.op_send_inline($route, wr_id, flags, data)
        }

        /// An RDMA read of the peer's `remote` memory into `dst`
        /// (`MLX5_OPCODE_RDMA_READ`), which stays exclusively borrowed
        /// until the completion: control, (datagram,) remote-address and
        /// data segments.
        #[inline]
        pub fn rdma_read(
            $($recv)+,
            wr_id: u64,
            flags: SendFlags,
            remote: RemoteBuf,
            dst: SgeMut<'m>,
        ) -> Result<()> {
            let what = "the RDMA read's length";
            let op = ffi::MLX5_OPCODE_RDMA_READ;
            $batch.op_remote($route, wr_id, op, flags, 0, &remote, dst.as_raw(), false, what)
        }

        /// Atomic compare-and-swap of the 8 bytes at `remote` (8-aligned),
        /// the old value landing in `dst` (8 bytes) as the device writes
        /// it: in host byte order on a device whose atomics are
        /// `IBV_ATOMIC_HCA` (mlx5's kernel driver sets the device's 8-byte
        /// atomic responses to host endianness where it can), as through
        /// libmlx5 (`MLX5_OPCODE_ATOMIC_CS`): control, (datagram,)
        /// remote-address, atomic and data segments.
        #[inline]
        pub fn atomic_cmp_swp(
            $($recv)+,
            wr_id: u64,
            flags: SendFlags,
            remote: RemoteBuf,
            compare: u64,
            swap: u64,
            dst: SgeMut<'m>,
        ) -> Result<()> {
            let op = ffi::MLX5_OPCODE_ATOMIC_CS;
            $batch.op_atomic($route, wr_id, op, flags, &remote, swap, compare, &dst)
        }

        /// Atomic fetch-and-add of `add` to the 8 bytes at `remote`
        /// (8-aligned), the old value landing in `dst` (8 bytes)
        /// (`MLX5_OPCODE_ATOMIC_FA`).
        #[inline]
        pub fn atomic_fetch_add(
            $($recv)+,
            wr_id: u64,
            flags: SendFlags,
            remote: RemoteBuf,
            add: u64,
            dst: SgeMut<'m>,
        ) -> Result<()> {
            let op = ffi::MLX5_OPCODE_ATOMIC_FA;
            $batch.op_atomic($route, wr_id, op, flags, &remote, add, 0, &dst)
        }
    };
}

/// The RC writers.
impl<'m> DirectBatch<'_, 'm, ReliableConnection> {
    writers!([&mut self], self, None);
}

/// A DCI work request's target: [`DirectBatch::dc`] or
/// [`DirectBatch::dc_stream`]. Its writers are those of an RC batch, each
/// adding one work request to the batch, addressed to the target.
#[must_use = "a work request is added only by one of its writers"]
pub struct DcWr<'b, 'q, 'm> {
    batch: &'b mut DirectBatch<'q, 'm, DcInitiator>,
    route: Route,
}

impl<'q, 'm> DirectBatch<'q, 'm, DcInitiator> {
    /// A work request to the DC target `to` ([`DirectDcAddr`](super::DirectDcAddr)).
    #[inline]
    pub fn dc<'b>(&'b mut self, to: &'b super::DirectDcAddr) -> DcWr<'b, 'q, 'm> {
        DcWr {
            batch: self,
            route: Route {
                av: Av::load(to.words()),
                stream: None,
            },
        }
    }

    /// A work request to the DC target `to` on DCI stream `stream_id`
    /// (the control segment's `dci_stream_channel_id`, as
    /// `mlx5dv_wr_set_dc_addr_stream` writes it), for a DCI created with
    /// [`dci_streams`](crate::QpBuilder::dci_streams); on another the
    /// writer refuses it ([`DirectError::NoStreams`]).
    #[inline]
    pub fn dc_stream<'b>(
        &'b mut self,
        to: &'b super::DirectDcAddr,
        stream_id: u16,
    ) -> DcWr<'b, 'q, 'm> {
        DcWr {
            batch: self,
            route: Route {
                av: Av::load(to.words()),
                stream: Some(stream_id),
            },
        }
    }
}

/// The DCI writers, each adding one work request to its target.
impl<'m> DcWr<'_, '_, 'm> {
    writers!([self], self.batch, Some(self.route));
}

impl<T: DirectTransport> DirectBatch<'_, '_, T> {
    /// Posts the batch: one doorbell-record update and one doorbell write
    /// for all its WQEs. Returns how many work requests it posted.
    ///
    /// # Safety
    /// The memory of every work request of the batch (the regions its
    /// [`Sge`]s and [`SgeMut`]s name) must stay allocated, registered, and
    /// unused by this program in the way the device uses it (not written,
    /// for a source; not read or written, for a destination), until this
    /// QP's [`poll`](super::DirectQp::poll) has returned a completion that
    /// covers the work request ([`DirectWc::covers`](super::DirectWc::covers)),
    /// or the QP was [`reset`](super::DirectQp::reset) or destroyed (a
    /// `DirectQp` dropped inside a [`poll_each`](crate::CompletionQueue::poll_each)
    /// callback is destroyed when that poll ends, not before). The
    /// lifetime `'m` does not hold it: it ends when the batch does. The
    /// safe way is [`DirectQp::post_and_wait`](super::DirectQp::post_and_wait).
    #[inline]
    pub unsafe fn ring(self) -> u32 {
        let n = self.len();
        if n != 0 {
            let last = self.ctrl_of(self.last);
            let (seq, pi) = (self.seq(), self.pi());
            let sq = &mut *self.sq;
            sq.posted = seq;
            // SAFETY: every WQE in [sq.pi, self.pi) was written whole by
            // this batch, `last` the last one's control segment.
            unsafe { sq.ring(pi, last) };
        }
        n
    }

    /// Sets the completion flag of the batch's last WQE (the scoped post
    /// needs the completion of its last work request).
    pub(super) fn signal_last(&mut self) {
        if !self.is_empty() {
            // SAFETY: the last WQE's control segment, in a slot of the
            // ring this batch wrote and has not rung.
            unsafe { *self.ctrl_of(self.last).add(11) |= super::sq::CE };
        }
    }
}

impl<T: DirectTransport> std::fmt::Debug for DirectBatch<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectBatch")
            .field("len", &self.len())
            .field("room", &self.room())
            .finish()
    }
}
