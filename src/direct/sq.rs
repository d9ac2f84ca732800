//! The send queue taken from libmlx5: its ring of 64-byte basic blocks,
//! the indices the crate keeps for it, the segments of a WQE written in
//! place, and the doorbell.

use super::arch;
use crate::ffi;
use crate::wc::WcOpcode;
use std::ptr::NonNull;

/// `MLX5_SEND_WQE_BB`: the send queue's basic block.
pub(crate) const BB: usize = 64;
/// One data-segment unit (`MLX5_SEND_WQE_DS`): a WQE's DS count counts these.
pub(crate) const DS: usize = 16;
/// `MLX5_WQE_CTRL_CQ_UPDATE`: the WQE generates a CQE.
pub(crate) const CE: u8 = ffi::MLX5_WQE_CTRL_CQ_UPDATE as u8;
/// `MLX5_INLINE_SEG`: bit 31 of an inline segment's byte count.
pub(crate) const INLINE_SEG: u32 = ffi::MLX5_INLINE_SEG;

/// What the crate remembers of each posted WQE, in the slot of its first
/// basic block: what a CQE whose WQE counter names it stands for.
///
/// Laid out so that the second word is the batch's state
/// ([`DirectBatch`](super::DirectBatch)) as it is after the WQE, on a
/// little-endian machine: `seq` in its low 32 bits, `end` in its high 16
/// (the byte `opcode` is written over after).
#[derive(Clone, Copy, Default, Debug)]
#[repr(C)]
pub(crate) struct Slot {
    /// The caller's id.
    pub(crate) wr_id: u64,
    /// The sequence number of the work request (counted from the QP's
    /// first), so that a CQE knows how many it retires.
    pub(crate) seq: u32,
    /// The work-completion opcode of the WQE's operation (`IBV_WC_*`).
    pub(crate) opcode: u8,
    /// Whatever the state's bits 40 to 47 held.
    pub(crate) _pad: u8,
    /// The producer index just past the WQE.
    pub(crate) end: u16,
}

const _: () = {
    assert!(std::mem::size_of::<Slot>() == 16);
    assert!(std::mem::offset_of!(Slot, seq) == 8);
    assert!(std::mem::offset_of!(Slot, opcode) == 12);
    assert!(std::mem::offset_of!(Slot, end) == 14);
};

impl Slot {
    /// Writes the slot of a WQE: `wr_id`, `state` (the sequence number in
    /// bits 0 to 31, the end in bits 48 to 63) and `opcode`.
    ///
    /// # Safety
    /// `slot` is valid for writes and aligned.
    #[inline(always)]
    pub(crate) unsafe fn write(slot: *mut Slot, wr_id: u64, state: u64, opcode: u8) {
        if cfg!(target_endian = "little") {
            // SAFETY: the caller's promise; bytes 8 to 15 of the slot are
            // `seq`, `opcode`, `_pad` and `end`, plain integers: any bytes
            // are valid there, and on a little-endian machine the word's
            // low 32 bits land in `seq` and its high 16 in `end`.
            unsafe {
                std::ptr::addr_of_mut!((*slot).wr_id).write(wr_id);
                std::ptr::addr_of_mut!((*slot).seq)
                    .cast::<u64>()
                    .write(state);
                std::ptr::addr_of_mut!((*slot).opcode).write(opcode);
            }
        } else {
            // SAFETY: the caller's promise.
            unsafe {
                slot.write(Slot {
                    wr_id,
                    seq: state as u32,
                    opcode,
                    _pad: 0,
                    end: (state >> 48) as u16,
                })
            };
        }
    }
}

/// The send queue: libmlx5's buffer and doorbell, with the crate's own
/// indices. Nothing here is read from memory the device writes: the
/// consumer index moves only when a CQE retires WQEs.
pub(crate) struct Sq {
    /// `wqe_cnt` basic blocks.
    pub(crate) buf: NonNull<u8>,
    /// `wqe_cnt - 1` (a power of two less one).
    pub(crate) mask: u16,
    /// The basic blocks of the ring.
    pub(crate) wqe_cnt: u32,
    /// The producer index (16 bits, as the WQE counter of the control
    /// segment and of CQEs): the next WQE's first basic block.
    pub(crate) pi: u16,
    /// The consumer index: the first basic block not yet retired.
    pub(crate) ci: u16,
    /// Work requests posted (rung) and retired, counted.
    pub(crate) posted: u32,
    pub(crate) retired: u32,
    /// `dbrec[MLX5_SND_DBR]`.
    pub(crate) dbrec: NonNull<u32>,
    /// The doorbell (BlueFlame) register and its two halves' size.
    pub(crate) bf_reg: NonNull<u8>,
    pub(crate) bf_size: u32,
    pub(crate) bf_offset: u32,
    /// `qpn << 8`, the high 24 bits of every control segment's `qpn_ds`.
    pub(crate) qpn8: u32,
    /// The most basic blocks one WQE may take (from the QP's capabilities).
    pub(crate) max_blocks: u32,
    /// The most bytes of inline data a WQE may carry.
    pub(crate) max_inline: u32,
    /// One slot per basic block.
    pub(crate) slots: Box<[Slot]>,
    /// Whether the QP is a DCI with streams.
    pub(crate) streams: bool,
    /// The QP, whose libibverbs record of its state
    /// ([`recorded_state`](Self::recorded_state)) says whether it takes
    /// posts: live while this is (both are its `DirectQp`'s).
    pub(crate) qp: NonNull<ffi::ibv_qp>,
}

/// The send queue's indices a poll reads and moves, copied out of the
/// [`Sq`] for the length of a poll (so that they stay in registers while
/// the caller's closure stores its completions) and put back after.
#[derive(Clone, Copy)]
pub(crate) struct Idx {
    pub(crate) slots: *const Slot,
    pub(crate) mask: u16,
    pub(crate) pi: u16,
    pub(crate) ci: u16,
    pub(crate) posted: u32,
    pub(crate) retired: u32,
    /// The QP's number: a CQE naming another is not this QP's.
    pub(crate) qpn: u32,
}

impl Idx {
    /// Work requests posted and not yet retired by a CQE.
    #[inline(always)]
    pub(crate) fn outstanding(&self) -> u32 {
        self.posted.wrapping_sub(self.retired)
    }
}

impl Sq {
    /// The indices a poll uses.
    #[inline(always)]
    pub(crate) fn idx(&self) -> Idx {
        Idx {
            slots: self.slots.as_ptr(),
            mask: self.mask,
            pi: self.pi,
            ci: self.ci,
            posted: self.posted,
            retired: self.retired,
            qpn: self.qpn8 >> 8,
        }
    }

    /// Puts back what a poll moved.
    #[inline(always)]
    pub(crate) fn put(&mut self, idx: Idx) {
        self.ci = idx.ci;
        self.retired = idx.retired;
    }

    /// Basic blocks free: the ring less what is posted and not retired.
    /// libibverbs' record of the QP's state (`enum ibv_qp_state`): a load.
    #[inline(always)]
    pub(crate) fn recorded_state(&self) -> u32 {
        // SAFETY: the QP is live while this is (`qp`).
        unsafe { crate::qp::recorded_state(self.qp.as_ptr()) }
    }

    #[inline]
    pub(crate) fn room(&self) -> u32 {
        self.wqe_cnt - u32::from(self.pi.wrapping_sub(self.ci))
    }

    /// Work requests posted and not yet retired by a CQE.
    #[inline]
    pub(crate) fn outstanding(&self) -> u32 {
        self.posted.wrapping_sub(self.retired)
    }

    /// Rings the doorbell for the WQEs up to `pi`: the doorbell record,
    /// then the first eight bytes of the last WQE's control segment to the
    /// doorbell register, as libmlx5's `post_send_db` does (without its
    /// BlueFlame copy: see the module's documentation).
    ///
    /// # Safety
    /// Every WQE in `[self.pi, pi)` is written whole, and `last` is the
    /// control segment of the last of them.
    #[inline(always)]
    pub(crate) unsafe fn ring(&mut self, pi: u16, last: *const u8) {
        arch::to_device();
        // SAFETY: the doorbell record is libmlx5's, live while the QP is;
        // only this ring writes its send half.
        unsafe { self.dbrec.as_ptr().write_volatile(u32::from(pi).to_be()) };
        self.pi = pi;
        arch::wc_start();
        // SAFETY: `last` is 8-byte aligned (a control segment starts a
        // basic block); the register is the QP's, mapped while it lives,
        // and `bf_offset` is 0 or `bf_size`, inside its two halves.
        unsafe {
            let word = last.cast::<u64>().read();
            self.bf_reg
                .as_ptr()
                .add(self.bf_offset as usize)
                .cast::<u64>()
                .write_volatile(word);
        }
        arch::flush_writes();
        self.bf_offset ^= self.bf_size;
    }
}

/// The work-completion opcode of a requester CQE, from the WQE's opcode
/// (as libmlx5's `handle_good_req`).
#[inline(always)]
pub(crate) fn wc_opcode(wqe_opcode: u8) -> WcOpcode {
    match u32::from(wqe_opcode) {
        ffi::MLX5_OPCODE_RDMA_WRITE | ffi::MLX5_OPCODE_RDMA_WRITE_IMM => WcOpcode::RDMA_WRITE,
        ffi::MLX5_OPCODE_SEND | ffi::MLX5_OPCODE_SEND_IMM | ffi::MLX5_OPCODE_SEND_INVAL => {
            WcOpcode::SEND
        }
        ffi::MLX5_OPCODE_RDMA_READ => WcOpcode::RDMA_READ,
        ffi::MLX5_OPCODE_ATOMIC_CS => WcOpcode::COMP_SWAP,
        ffi::MLX5_OPCODE_ATOMIC_FA => WcOpcode::FETCH_ADD,
        // The writers write no other opcode.
        _ => WcOpcode::from_raw(u32::from(u8::MAX)),
    }
}
