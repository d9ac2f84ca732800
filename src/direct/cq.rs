//! The completion queue taken from libmlx5: CQEs parsed in place.

use super::arch;
use super::sq::{self, Idx, Sq};
use crate::error::{DirectError, Error, Result};
use crate::ffi;
use crate::wc::{WcOpcode, WcStatus};
use std::ptr::NonNull;

/// Byte offsets in a 64-byte CQE (`struct mlx5_cqe64`, `struct
/// mlx5_err_cqe` of mlx5dv.h).
mod off {
    pub(super) const BYTE_CNT: usize = 44;
    pub(super) const VENDOR_SYND: usize = 54;
    pub(super) const SYNDROME: usize = 55;
    pub(super) const SOP_DROP_QPN: usize = 56;
    pub(super) const WQE_COUNTER: usize = 60;
    pub(super) const OP_OWN: usize = 63;
}

/// A completion read from a direct CQ: every field of the CQE a send
/// completion has, with the work requests it retires.
///
/// A send queue's CQE names the WQE it completes by its index (the WQE
/// counter); the device completes a QP's WQEs in order, so one CQE also
/// retires every earlier WQE not yet retired (those posted without
/// [`SendFlags::SIGNALED`](crate::SendFlags::SIGNALED)):
/// [`covers`](Self::covers) counts them, this one included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectWc {
    /// The id of the work request the CQE names.
    pub wr_id: u64,
    /// Its status: the error CQE's syndrome mapped as libmlx5 maps it
    /// (`mlx5_handle_error_cqe`).
    pub status: WcStatus,
    /// The operation of the WQE.
    pub opcode: WcOpcode,
    /// Bytes the operation transferred, for an RDMA read (and 8 for an
    /// atomic); for a write or a send the device reports 0.
    pub byte_len: u32,
    /// The QP number the CQE carries.
    pub qp_num: u32,
    /// The error CQE's vendor syndrome (0 on success).
    pub vendor_err: u8,
    /// The error CQE's syndrome (`MLX5_CQE_SYNDROME_*`, 0 on success).
    pub syndrome: u8,
    /// The WQE's index in the send queue (16 bits).
    pub wqe_index: u16,
    /// How many work requests the CQE retires: this one and the unsignalled
    /// ones before it.
    pub covers: u32,
}

/// A placeholder to fill a slice for [`DirectQp::poll_into`](super::DirectQp::poll_into)
/// with: work request 0, status `IBV_WC_GENERAL_ERR` (so that an entry
/// no poll wrote is never taken for a success), every other field 0.
impl Default for DirectWc {
    fn default() -> Self {
        DirectWc {
            wr_id: 0,
            status: WcStatus::GENERAL_ERR,
            opcode: WcOpcode::from_raw(0),
            byte_len: 0,
            qp_num: 0,
            vendor_err: 0,
            syndrome: 0,
            wqe_index: 0,
            covers: 0,
        }
    }
}

impl DirectWc {
    /// Whether it succeeded.
    pub fn is_success(&self) -> bool {
        self.status.is_success()
    }

    /// `Ok` for a successful completion, else the typed error
    /// ([`Error::WorkCompletion`]).
    pub fn ok(&self) -> Result<()> {
        if self.status.is_success() {
            Ok(())
        } else {
            Err(Error::WorkCompletion {
                wr_id: self.wr_id,
                qp_num: self.qp_num,
                status: self.status,
                vendor_err: u32::from(self.vendor_err),
                kind: None,
            })
        }
    }
}

/// The status of an error CQE's syndrome (`mlx5_handle_error_cqe`).
pub(crate) fn status_of(syndrome: u8) -> WcStatus {
    match u32::from(syndrome) {
        ffi::MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR => WcStatus::LOC_LEN_ERR,
        ffi::MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR => WcStatus::LOC_QP_OP_ERR,
        ffi::MLX5_CQE_SYNDROME_LOCAL_PROT_ERR => WcStatus::LOC_PROT_ERR,
        ffi::MLX5_CQE_SYNDROME_WR_FLUSH_ERR => WcStatus::WR_FLUSH_ERR,
        ffi::MLX5_CQE_SYNDROME_MW_BIND_ERR => WcStatus::MW_BIND_ERR,
        ffi::MLX5_CQE_SYNDROME_BAD_RESP_ERR => WcStatus::BAD_RESP_ERR,
        ffi::MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR => WcStatus::LOC_ACCESS_ERR,
        ffi::MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR => WcStatus::REM_INV_REQ_ERR,
        ffi::MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR => WcStatus::REM_ACCESS_ERR,
        ffi::MLX5_CQE_SYNDROME_REMOTE_OP_ERR => WcStatus::REM_OP_ERR,
        ffi::MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR => WcStatus::RETRY_EXC_ERR,
        ffi::MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR => WcStatus::RNR_RETRY_EXC_ERR,
        ffi::MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR => WcStatus::REM_ABORT_ERR,
        _ => WcStatus::GENERAL_ERR,
    }
}

/// The CQ ring: libmlx5's buffer and consumer-index record, with the
/// crate's consumer index.
#[derive(Clone, Copy)]
pub(crate) struct Cqr {
    /// `cqe_cnt` entries of `cqe_size` bytes.
    pub(crate) buf: NonNull<u8>,
    /// `cqe_cnt - 1`.
    pub(crate) mask: u32,
    /// `cqe_cnt` (a power of two): the owner bit of pass `n` is `n & 1`.
    pub(crate) cqe_cnt: u32,
    /// The entry size, 64 or 128 bytes (a multiply by it costs one
    /// instruction with the size in memory, where a shift by its log needs
    /// the shift count in one particular register).
    pub(crate) entry: usize,
    /// Where the 64-byte CQE starts in an entry: 0, or 64 in a 128-byte
    /// entry (its second half, as libmlx5 reads it).
    pub(crate) cqe64_at: usize,
    /// The consumer index (24 bits are reported to the device).
    pub(crate) ci: u32,
    /// `dbrec[MLX5_CQ_SET_CI]` (the arm record follows it).
    pub(crate) dbrec: NonNull<u32>,
    /// The CQ number and the UAR page its arm doorbell goes to.
    pub(crate) cqn: u32,
    pub(crate) uar: *mut u8,
}

/// The arm word's index in a CQ's doorbell record (`MLX5_CQ_ARM_DB` of
/// libmlx5's `mlx5.h`; `MLX5_CQ_SET_CI`, the consumer index, is word 0).
const ARM_DB: usize = 1;

/// What one poll step found.
pub(crate) enum Step {
    /// No CQE the device handed over.
    Empty,
    /// A completion.
    Wc(DirectWc),
}

impl Cqr {
    /// The 64-byte CQE at consumer index `ci`.
    #[inline(always)]
    fn cqe(&self, ci: u32) -> *const u8 {
        let at = ((ci & self.mask) as usize) * self.entry;
        // SAFETY: the entry `ci & mask` lies inside the ring.
        unsafe { self.buf.as_ptr().add(at + self.cqe64_at) }
    }

    /// Reads the next CQE if the device has handed it over
    /// ([`handed_over`](Self::handed_over)), and retires the WQEs it covers
    /// from `sq`.
    /// An error completion updates `qp`'s recorded state ([`slow_step`]).
    #[inline(always)]
    pub(crate) fn step(&mut self, sq: &mut Idx, qp: NonNull<ffi::ibv_qp>) -> Result<Step> {
        let Some((cqe, op_own)) = self.take() else {
            return Ok(Step::Empty);
        };
        if op_own & 0xfc != 0 {
            let (r, moved) = slow_step(cqe, op_own, *sq, qp);
            *sq = moved;
            return r.map(Step::Wc);
        }
        good(cqe, sq).map(Step::Wc)
    }

    /// The next CQE if the device has handed it over, taken: the consumer
    /// index moved past it and its fields readable (after
    /// [`arch::from_device`]). It is one of two kinds: a plain successful
    /// requester CQE (`op_own & 0xfc == 0`), read by [`good`], or any other,
    /// read by [`slow_step`].
    #[inline(always)]
    pub(crate) fn take(&mut self) -> Option<(*const u8, u8)> {
        let (cqe, op_own) = self.handed_over()?;
        arch::from_device();
        self.ci = self.ci.wrapping_add(1);
        Some((cqe, op_own))
    }

    /// The CQE at the consumer index and its `op_own`, when the device has
    /// handed it over: its opcode is not `MLX5_CQE_INVALID` and its owner
    /// bit equals the pass over the ring (`ci / cqe_cnt`, odd or even):
    /// libmlx5's `get_sw_cqe`, the PRM's ownership rule. Its other fields
    /// are read only after [`arch::from_device`].
    #[inline(always)]
    fn handed_over(&self) -> Option<(*const u8, u8)> {
        let cqe = self.cqe(self.ci);
        // SAFETY: a byte of the ring; the device writes it (volatile).
        let op_own = unsafe { cqe.add(off::OP_OWN).read_volatile() };
        let pass = u8::from(self.ci & self.cqe_cnt != 0);
        (op_own >> 4 != ffi::MLX5_CQE_INVALID as u8 && (op_own & 1) == pass)
            .then_some((cqe, op_own))
    }

    /// Whether a CQE is there to read (the device handed it over).
    #[inline]
    pub(crate) fn ready(&self) -> bool {
        self.handed_over().is_some()
    }

    /// Consumes every CQE the device has handed over without reading it:
    /// after a reset, the CQEs of the QP's earlier work (its WQEs are gone).
    pub(crate) fn drop_handed_over(&mut self) {
        while self.ready() {
            self.ci = self.ci.wrapping_add(1);
        }
    }

    /// Arms the CQ for its next completion past the consumer index (or its
    /// next solicited or error one), as libmlx5's `mlx5_arm_cq` does with
    /// its own consumer index: the arm record (`dbrec[MLX5_CQ_ARM_DB]`),
    /// then the 64-bit doorbell to the UAR (`MLX5_CQ_DOORBELL`). `events`
    /// is the CQ's count of events read: the arm sequence number is its
    /// low two bits, as libmlx5's `arm_sn` (one more per event).
    pub(crate) fn arm(&self, events: u64, solicited_only: bool) {
        let sn = (events & 3) as u32;
        let cmd = if solicited_only {
            ffi::MLX5_CQ_DB_REQ_NOT_SOL
        } else {
            ffi::MLX5_CQ_DB_REQ_NOT
        };
        let db = (sn << 28) | cmd | (self.ci & 0x00ff_ffff);
        // SAFETY: the CQ's doorbell record (two words: consumer index, then
        // arm) and the context's CQ UAR page, mapped while the context
        // lives; the doorbell register is 8-byte aligned in it.
        unsafe {
            self.dbrec.as_ptr().add(ARM_DB).write_volatile(db.to_be());
            arch::wc_start();
            self.uar
                .add(ffi::MLX5_CQ_DOORBELL as usize)
                .cast::<u64>()
                .write_volatile(((u64::from(db) << 32) | u64::from(self.cqn)).to_be());
            arch::flush_writes();
        }
    }

    /// [`step`](Self::step) on the send queue's own indices.
    #[inline(always)]
    pub(crate) fn step_sq(&mut self, sq: &mut Sq) -> Result<Step> {
        let mut idx = sq.idx();
        let r = self.step(&mut idx, sq.qp);
        sq.put(idx);
        r
    }

    /// Tells the device the consumer index (`update_cons_index`), so that
    /// it may reuse the entries before it.
    #[inline(always)]
    pub(crate) fn publish(&self) {
        arch::to_device();
        // SAFETY: libmlx5's CQ doorbell record, live while the CQ is; only
        // this ring writes its consumer half.
        unsafe {
            self.dbrec
                .as_ptr()
                .write_volatile((self.ci & 0x00ff_ffff).to_be())
        };
    }
}

/// Reads the CQEs the device has handed over into `out`, up to its
/// length, retiring their WQEs from `sq`: how many it wrote, and the error
/// of a CQE it skipped (which ends the poll). Each kind of CQE stores its
/// own completion: joined before the store, the completions of both would
/// be merged field by field, at a cost to the common kind. An error
/// completion updates `qp`'s recorded state ([`slow_step`]).
#[inline(always)]
pub(crate) fn poll_into(
    cq: &mut Cqr,
    sq: &mut Idx,
    out: &mut [DirectWc],
    qp: NonNull<ffi::ibv_qp>,
) -> (usize, Result<()>) {
    let mut n = 0;
    while n < out.len() {
        let Some((cqe, op_own)) = cq.take() else {
            break;
        };
        if op_own & 0xfc == 0 {
            match good(cqe, sq) {
                Ok(wc) => out[n] = wc,
                Err(e) => return (n, Err(e)),
            }
        } else {
            let (res, moved) = slow_step(cqe, op_own, *sq, qp);
            *sq = moved;
            match res {
                Ok(wc) => out[n] = wc,
                Err(e) => return (n, Err(e)),
            }
        }
        n += 1;
    }
    (n, Ok(()))
}

/// A plain successful requester CQE (opcode `MLX5_CQE_REQ`, no data
/// scattered into it), taken ([`Cqr::take`]): its completion, the WQEs it
/// covers retired from `sq`.
#[inline(always)]
pub(crate) fn good(cqe: *const u8, sq: &mut Idx) -> Result<DirectWc> {
    // SAFETY: the CQE is the software's now (owner bit checked, fields
    // read after the barrier); fixed offsets inside its 64 bytes.
    let (qpn_word, counter) = unsafe {
        (
            u32::from_be(cqe.add(off::SOP_DROP_QPN).cast::<u32>().read_volatile()),
            u16::from_be(cqe.add(off::WQE_COUNTER).cast::<u16>().read_volatile()),
        )
    };
    let qp_num = qpn_word & 0x00ff_ffff;
    let (slot, covers) = retire(sq, counter, qp_num)?;
    let opcode = WcOpcode::from_raw(u32::from(slot.opcode));
    let byte_len = match opcode {
        WcOpcode::RDMA_READ => {
            // SAFETY: as above.
            let raw = unsafe { cqe.add(off::BYTE_CNT).cast::<u32>().read_volatile() };
            u32::from_be(raw)
        }
        WcOpcode::COMP_SWAP | WcOpcode::FETCH_ADD => 8,
        _ => 0,
    };
    Ok(DirectWc {
        wr_id: slot.wr_id,
        status: WcStatus::SUCCESS,
        opcode,
        byte_len,
        qp_num,
        vendor_err: 0,
        syndrome: 0,
        wqe_index: counter,
        covers,
    })
}

/// The slot of the WQE a CQE's counter names and how many work requests
/// the CQE retires; retires them. The CQE must carry the QP's own number
/// (`qp_num`), and the WQE must start a work request posted and not
/// retired: the counter in [ci, pi) of the send queue, its slot's sequence
/// number among the outstanding ones and its end within (counter, pi].
#[inline(always)]
fn retire(sq: &mut Idx, counter: u16, qp_num: u32) -> Result<(sq::Slot, u32)> {
    // SAFETY: masked, the slot is inside the slot array (one per basic
    // block of the ring).
    let slot = unsafe { sq.slots.add(usize::from(counter & sq.mask)) };
    // Each field read where it is needed (the checks first), so that
    // fewer values are live at once.
    // SAFETY: as above.
    let seq = unsafe { std::ptr::addr_of!((*slot).seq).read() };
    let covers = seq.wrapping_sub(sq.retired);
    // One exit for every refusal (which it was is sorted out there).
    if counter.wrapping_sub(sq.ci) >= sq.pi.wrapping_sub(sq.ci)
        || covers.wrapping_sub(1) >= sq.outstanding()
        || qp_num != sq.qpn
    {
        return Err(not_outstanding(sq, counter, qp_num));
    }
    // SAFETY: as above.
    let end = unsafe { std::ptr::addr_of!((*slot).end).read() };
    if end.wrapping_sub(counter).wrapping_sub(1) >= sq.pi.wrapping_sub(counter) {
        return Err(not_outstanding(sq, counter, qp_num));
    }
    sq.retired = seq;
    sq.ci = end;
    // SAFETY: as above.
    Ok((unsafe { *slot }, covers))
}

/// The refusal of a CQE [`retire`] does not take: another QP's, or one
/// naming no outstanding WQE.
#[inline(always)]
fn not_outstanding(sq: &Idx, counter: u16, qp_num: u32) -> Error {
    if qp_num != sq.qpn {
        return Error::Direct(DirectError::ForeignCqe {
            qp_num,
            own: sq.qpn,
        });
    }
    Error::Direct(DirectError::CqeNotOutstanding {
        counter,
        ci: sq.ci,
        pi: sq.pi,
    })
}

/// Every CQE but a plain successful requester one: error CQEs, a
/// requester CQE with data scattered into it, CQEs that do not belong on
/// a send CQ.
///
/// After an error completion the device has moved the QP (`qp`, live) to
/// ERR by itself (or, on a DCI with streams, maybe only the stream),
/// which libibverbs' record of its state does not see: while the record
/// says RTS, the kernel is asked (`ibv_query_qp`, which updates the
/// record), so that the next post is refused as the QP's state says, as
/// libmlx5's path does (`QpEx::note_failed_work_request`). Once the
/// record says ERR, the flushes that follow ask nothing.
#[cold]
#[inline(never)]
pub(crate) fn slow_step(
    cqe: *const u8,
    op_own: u8,
    mut sq: Idx,
    qp: NonNull<ffi::ibv_qp>,
) -> (Result<DirectWc>, Idx) {
    let r = slow_step_in(cqe, op_own, &mut sq);
    if r.as_ref().is_ok_and(|wc| !wc.is_success()) {
        // SAFETY: the caller's promise: `qp` is live.
        if unsafe { crate::qp::recorded_state(qp.as_ptr()) } == ffi::IBV_QPS_RTS {
            // SAFETY: as above.
            let _ = unsafe { crate::qp::query_state(qp.as_ptr()) };
        }
    }
    (r, sq)
}

#[inline(always)]
fn slow_step_in(cqe: *const u8, op_own: u8, sq: &mut Idx) -> Result<DirectWc> {
    let opcode = op_own >> 4;
    // SAFETY: as in `Cqr::step`: the CQE is the software's.
    let (qpn_word, counter, syndrome, vendor) = unsafe {
        (
            u32::from_be(cqe.add(off::SOP_DROP_QPN).cast::<u32>().read_volatile()),
            u16::from_be(cqe.add(off::WQE_COUNTER).cast::<u16>().read_volatile()),
            cqe.add(off::SYNDROME).read_volatile(),
            cqe.add(off::VENDOR_SYND).read_volatile(),
        )
    };
    let (status, syndrome, vendor) = match u32::from(opcode) {
        // Requester scatter-to-CQE (`MLX5_INLINE_SCATTER_32/64`), which
        // `into_direct` refuses (it comes only with sq_sig_all): the read's
        // data is in the CQE, not its buffer. Never success.
        ffi::MLX5_CQE_REQ => (WcStatus::GENERAL_ERR, 0, 0),
        ffi::MLX5_CQE_REQ_ERR => (status_of(syndrome), syndrome, vendor),
        // A responder CQE (a receive's, or its error or flush) or any
        // other: this CQ completes the send queue of one QP only
        // (`into_direct`).
        _ => return Err(Error::Direct(DirectError::StrayCqe { op_own })),
    };
    let qp_num = qpn_word & 0x00ff_ffff;
    let (slot, covers) = retire(sq, counter, qp_num)?;
    Ok(DirectWc {
        wr_id: slot.wr_id,
        status,
        opcode: WcOpcode::from_raw(u32::from(slot.opcode)),
        byte_len: 0,
        qp_num,
        vendor_err: vendor,
        syndrome,
        wqe_index: counter,
        covers,
    })
}
