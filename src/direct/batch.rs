//! The direct batch: WQEs written into the send queue, one doorbell for
//! all of them.

use super::sq::{Slot, Sq, CE, DS, FENCE, INLINE_SEG, SE};
use super::DirectTransport;
use crate::error::{Error, Result};
use crate::ffi;
use crate::mr::{RemoteBuf, Sge, SgeMut};
use crate::wr::SendFlags;
use std::marker::PhantomData;

/// Makes `'m` invariant, as in [`WrBatch`](crate::WrBatch).
type Invariant<'m> = fn(&'m ()) -> &'m ();

/// Work requests written straight into the send queue of a [`DirectQp`](super::DirectQp):
/// each method writes one WQE (control segment, then the segments its
/// operation needs) in place, and [`ring`](DirectBatch::ring) posts them
/// all with one doorbell-record update and one doorbell write.
///
/// Nothing reaches the device before `ring`: a batch dropped, forgotten
/// or abandoned on an error posts nothing (its WQEs are bytes in free
/// slots of the ring, which the next batch overwrites).
///
/// Every WQE it writes is well formed by construction: its DS count is
/// the segments it wrote, each segment has its operation's layout, a
/// data segment comes only from a [`Sge`] (checked against its region, of
/// less than 2^31 bytes, never of length 0: mlx5 reads a byte count of 0
/// as 2^31, so an empty entry is written as no segment, as libmlx5 does),
/// and a WQE that does not fit the room left is refused before anything
/// is written ([`Error::SendQueueFull`]).
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
/// ```compile_fail,E0502
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
    /// The producer index of the next WQE (the ring's own moves at `ring`).
    pub(super) pi: u16,
    /// Work requests written.
    pub(super) n: u32,
    /// The control segment of the last WQE written.
    pub(super) last: *mut u8,
    _m: PhantomData<(Invariant<'m>, T)>,
}

/// The control-segment flags of a work request's [`SendFlags`]
/// (`FENCE`, `SIGNALED`, `SOLICITED`; others are ignored).
#[inline(always)]
fn fm_ce_se(flags: SendFlags) -> u8 {
    let mut f = 0;
    if flags.contains(SendFlags::SIGNALED) {
        f |= CE;
    }
    if flags.contains(SendFlags::SOLICITED) {
        f |= SE;
    }
    if flags.contains(SendFlags::FENCE) {
        f |= FENCE;
    }
    f
}

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

/// The remote side of a work request, checked: `len` bytes fit it.
fn check_remote(remote: &RemoteBuf, len: u64, what: &'static str) -> Result<()> {
    if len > remote.len {
        return Err(Error::OutOfRange {
            what,
            value: len,
            limit: format!("at most the remote buffer's {} bytes", remote.len),
        });
    }
    Ok(())
}

impl<'q, 'm, T: DirectTransport> DirectBatch<'q, 'm, T> {
    pub(super) fn new(sq: &'q mut Sq) -> Self {
        let pi = sq.pi;
        DirectBatch {
            sq,
            pi,
            n: 0,
            last: std::ptr::null_mut(),
            _m: PhantomData,
        }
    }

    /// Work requests written so far.
    pub fn len(&self) -> u32 {
        self.n
    }

    /// Whether no work request was written.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Basic blocks (64 bytes) still free in the send queue for this
    /// batch: an RDMA write or send of one entry, or an atomic, takes one.
    pub fn room(&self) -> u32 {
        let sq = &*self.sq;
        sq.wqe_cnt - u32::from(self.pi.wrapping_sub(sq.ci))
    }

    /// Starts a WQE of `units` 16-byte units: checks the room, writes the
    /// control segment and notes the slot. Returns the WQE's first unit.
    #[inline(always)]
    fn begin(
        &mut self,
        wr_id: u64,
        opcode: u32,
        units: u32,
        flags: SendFlags,
        imm: u32,
    ) -> Result<u32> {
        let sq: &mut Sq = &mut *self.sq;
        let blocks = units.div_ceil(4);
        let used = u32::from(self.pi.wrapping_sub(sq.ci));
        if units > u32::from(crate::wqe::MAX_DS) {
            // DS is 6 bits of qpn_ds: a longer WQE cannot be described.
            return Err(Error::OutOfRange {
                what: "the WQE's 16-byte units",
                value: u64::from(units),
                limit: format!("at most {} (the DS field)", crate::wqe::MAX_DS),
            });
        }
        if blocks > sq.max_blocks || used + blocks > sq.wqe_cnt {
            return Err(Error::SendQueueFull {
                batch: self.n + 1,
                depth: sq.wqe_cnt,
            });
        }
        let idx = self.pi;
        let first = u32::from(idx) * 4;
        let ctrl = sq.unit(first);
        // SAFETY: `ctrl` starts a free basic block of the ring (room checked
        // above: the device does not read it until a doorbell names it);
        // 16 bytes, 16-aligned.
        unsafe {
            be32(ctrl, (u32::from(idx) << 8) | opcode);
            be32(ctrl.add(4), sq.qpn8 | units);
            // signature, stream id (0), fm_ce_se.
            ctrl.add(8)
                .cast::<u32>()
                .write(u32::from_ne_bytes([0, 0, 0, fm_ce_se(flags)]));
            ctrl.add(12).cast::<u32>().write(imm);
        }
        let end = idx.wrapping_add(blocks as u16);
        sq.slots[usize::from(idx & sq.mask)] = Slot {
            wr_id,
            seq: sq.posted.wrapping_add(self.n + 1),
            end,
            opcode: opcode as u8,
        };
        self.pi = end;
        self.n += 1;
        self.last = ctrl;
        Ok(first)
    }

    /// Writes a remote-address segment at unit `u`.
    #[inline(always)]
    fn raddr(&self, u: u32, remote: &RemoteBuf) {
        let p = self.sq.unit(u);
        // SAFETY: a unit of the WQE `begin` reserved.
        unsafe {
            be64(p, remote.addr);
            be32(p.add(8), remote.rkey);
            p.add(12).cast::<u32>().write(0);
        }
    }

    /// Writes a data segment at unit `u`.
    #[inline(always)]
    fn data(&self, u: u32, len: u32, lkey: u32, addr: u64) {
        let p = self.sq.unit(u);
        // SAFETY: a unit of the WQE `begin` reserved.
        unsafe {
            be32(p, len);
            be32(p.add(4), lkey);
            be64(p.add(8), addr);
        }
    }

    /// Writes an inline segment of `data` from unit `u`, across the ring's
    /// end if it gets there.
    fn inline(&self, u: u32, data: &[u8]) {
        let sq = &*self.sq;
        let head = sq.unit(u);
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
            let p = sq.unit(u + 1 + i as u32);
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), p, chunk.len()) };
        }
    }

    /// The units of an inline segment of `len` bytes (none for 0).
    fn inline_units(&self, len: usize) -> Result<u32> {
        let max = self.sq.max_inline;
        if len > max as usize {
            return Err(Error::OutOfRange {
                what: "inline data",
                value: len as u64,
                limit: format!("at most the QP's max_inline_data, {max} bytes"),
            });
        }
        Ok(if len == 0 {
            0
        } else {
            (len as u32 + 4).div_ceil(DS as u32)
        })
    }

    /// An operation with a remote address and a local source entry.
    #[inline(always)]
    fn remote_from(
        &mut self,
        wr_id: u64,
        opcode: u32,
        flags: SendFlags,
        imm: u32,
        remote: &RemoteBuf,
        src: &Sge<'m>,
    ) -> Result<()> {
        let len = src.length();
        check_remote(remote, u64::from(len), "the RDMA write's length")?;
        let units = 2 + u32::from(len != 0);
        let u = self.begin(wr_id, opcode, units, flags, imm)?;
        self.raddr(u + 1, remote);
        if len != 0 {
            self.data(u + 2, len, src.lkey(), src.addr());
        }
        Ok(())
    }

    /// An RDMA write of `src` into the peer's `remote` memory
    /// (`MLX5_OPCODE_RDMA_WRITE`): control, remote-address and data
    /// segments, one basic block.
    #[inline]
    pub fn rdma_write(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote: RemoteBuf,
        src: Sge<'m>,
    ) -> Result<()> {
        self.remote_from(wr_id, ffi::MLX5_OPCODE_RDMA_WRITE, flags, 0, &remote, &src)
    }

    /// An RDMA write with 32-bit immediate data, in host byte order
    /// (`MLX5_OPCODE_RDMA_WRITE_IMM`): it consumes a receive at the peer.
    #[inline]
    pub fn rdma_write_imm(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote: RemoteBuf,
        imm: u32,
        src: Sge<'m>,
    ) -> Result<()> {
        self.remote_from(
            wr_id,
            ffi::MLX5_OPCODE_RDMA_WRITE_IMM,
            flags,
            imm.to_be(),
            &remote,
            &src,
        )
    }

    /// An RDMA write of `data`, copied into the WQE (inline): the memory
    /// need not be registered and is free again when this returns. At most
    /// the QP's `max_inline_data` bytes.
    pub fn rdma_write_inline(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote: RemoteBuf,
        data: &[u8],
    ) -> Result<()> {
        check_remote(&remote, data.len() as u64, "the RDMA write's length")?;
        let inl = self.inline_units(data.len())?;
        let u = self.begin(wr_id, ffi::MLX5_OPCODE_RDMA_WRITE, 2 + inl, flags, 0)?;
        self.raddr(u + 1, &remote);
        if inl != 0 {
            self.inline(u + 2, data);
        }
        Ok(())
    }

    /// A send of `src` (`MLX5_OPCODE_SEND`): it consumes a receive at the
    /// peer.
    #[inline]
    pub fn send(&mut self, wr_id: u64, flags: SendFlags, src: Sge<'m>) -> Result<()> {
        self.send_op(wr_id, ffi::MLX5_OPCODE_SEND, flags, 0, &src)
    }

    /// A send with 32-bit immediate data, in host byte order
    /// (`MLX5_OPCODE_SEND_IMM`).
    #[inline]
    pub fn send_imm(&mut self, wr_id: u64, flags: SendFlags, imm: u32, src: Sge<'m>) -> Result<()> {
        self.send_op(wr_id, ffi::MLX5_OPCODE_SEND_IMM, flags, imm.to_be(), &src)
    }

    #[inline(always)]
    fn send_op(
        &mut self,
        wr_id: u64,
        opcode: u32,
        flags: SendFlags,
        imm: u32,
        src: &Sge<'m>,
    ) -> Result<()> {
        let len = src.length();
        let u = self.begin(wr_id, opcode, 1 + u32::from(len != 0), flags, imm)?;
        if len != 0 {
            self.data(u + 1, len, src.lkey(), src.addr());
        }
        Ok(())
    }

    /// A send of `data`, copied into the WQE (inline).
    pub fn send_inline(&mut self, wr_id: u64, flags: SendFlags, data: &[u8]) -> Result<()> {
        let inl = self.inline_units(data.len())?;
        let u = self.begin(wr_id, ffi::MLX5_OPCODE_SEND, 1 + inl, flags, 0)?;
        if inl != 0 {
            self.inline(u + 1, data);
        }
        Ok(())
    }
}

impl<'q, 'm, T: super::DirectReadAtomic> DirectBatch<'q, 'm, T> {
    /// An RDMA read of the peer's `remote` memory into `dst`
    /// (`MLX5_OPCODE_RDMA_READ`), which stays exclusively borrowed until
    /// the completion: control, remote-address and data segments.
    #[inline]
    pub fn rdma_read(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote: RemoteBuf,
        dst: SgeMut<'m>,
    ) -> Result<()> {
        let len = dst.length();
        check_remote(&remote, u64::from(len), "the RDMA read's length")?;
        let units = 2 + u32::from(len != 0);
        let u = self.begin(wr_id, ffi::MLX5_OPCODE_RDMA_READ, units, flags, 0)?;
        self.raddr(u + 1, &remote);
        if len != 0 {
            self.data(u + 2, len, dst.lkey(), dst.addr());
        }
        Ok(())
    }

    /// Atomic compare-and-swap of the 8 bytes at `remote` (8-aligned),
    /// the old value landing in `dst` (8 bytes) as the device writes it:
    /// in host byte order on a device whose atomics are `IBV_ATOMIC_HCA`
    /// (mlx5's kernel driver sets the device's 8-byte atomic responses to
    /// host endianness where it can), as through libmlx5
    /// (`MLX5_OPCODE_ATOMIC_CS`): control, remote-address, atomic and data
    /// segments, one basic block.
    #[inline]
    pub fn atomic_cmp_swp(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote: RemoteBuf,
        compare: u64,
        swap: u64,
        dst: SgeMut<'m>,
    ) -> Result<()> {
        self.atomic(
            wr_id,
            ffi::MLX5_OPCODE_ATOMIC_CS,
            flags,
            &remote,
            swap,
            compare,
            &dst,
        )
    }

    /// Atomic fetch-and-add of `add` to the 8 bytes at `remote`
    /// (8-aligned), the old value landing in `dst` (8 bytes)
    /// (`MLX5_OPCODE_ATOMIC_FA`).
    #[inline]
    pub fn atomic_fetch_add(
        &mut self,
        wr_id: u64,
        flags: SendFlags,
        remote: RemoteBuf,
        add: u64,
        dst: SgeMut<'m>,
    ) -> Result<()> {
        self.atomic(
            wr_id,
            ffi::MLX5_OPCODE_ATOMIC_FA,
            flags,
            &remote,
            add,
            0,
            &dst,
        )
    }

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn atomic(
        &mut self,
        wr_id: u64,
        opcode: u32,
        flags: SendFlags,
        remote: &RemoteBuf,
        swap_add: u64,
        compare: u64,
        dst: &SgeMut<'m>,
    ) -> Result<()> {
        if dst.length() != 8 {
            return Err(Error::OutOfRange {
                what: "the atomic's local entry length",
                value: u64::from(dst.length()),
                limit: "exactly 8 bytes".into(),
            });
        }
        check_remote(remote, 8, "the atomic's remote length")?;
        if remote.addr % 8 != 0 {
            return Err(Error::InvalidArgument(format!(
                "an atomic's remote address must be 8-byte aligned: {:#x}",
                remote.addr
            )));
        }
        let u = self.begin(wr_id, opcode, 4, flags, 0)?;
        self.raddr(u + 1, remote);
        let p = self.sq.unit(u + 2);
        // SAFETY: a unit of the WQE `begin` reserved (struct
        // mlx5_wqe_atomic_seg: swap_add, then compare).
        unsafe {
            be64(p, swap_add);
            be64(p.add(8), compare);
        }
        self.data(u + 3, 8, dst.lkey(), dst.addr());
        Ok(())
    }
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
    /// QP's [`poll`](super::DirectQp::poll) has returned a completion that covers
    /// the work request ([`DirectWc::covers`](super::DirectWc::covers)), or
    /// the QP was [`reset`](super::DirectQp::reset) or dropped. The lifetime `'m`
    /// does not hold it: it ends when the batch does. The safe way is
    /// [`DirectQp::post_and_wait`](super::DirectQp::post_and_wait).
    pub unsafe fn ring(self) -> u32 {
        let n = self.n;
        if n != 0 {
            let sq = &mut *self.sq;
            sq.posted = sq.posted.wrapping_add(n);
            // SAFETY: every WQE in [sq.pi, self.pi) was written whole by
            // this batch, `last` the last one's control segment.
            unsafe { sq.ring(self.pi, self.last) };
        }
        n
    }

    /// Sets the completion flag of the batch's last WQE (the scoped post
    /// needs the completion of its last work request).
    pub(super) fn signal_last(&mut self) {
        if !self.last.is_null() {
            // SAFETY: the last WQE's control segment, in a slot of the
            // ring this batch wrote and has not rung.
            unsafe { *self.last.add(11) |= CE };
        }
    }
}

impl<T: DirectTransport> std::fmt::Debug for DirectBatch<'_, '_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectBatch")
            .field("len", &self.n)
            .field("room", &self.room())
            .finish()
    }
}
