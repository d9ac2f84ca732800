//! The backlog: completions a scoped post took from the device but did
//! not own ([`RawWc`]), kept for the next polls and handed out through a
//! stand-in CQ ([`Replay`]).

use super::work_completion::imm_or_inv;
use super::{CompletionQueue, PolledWc, WcFlags, WcOpcode, WcStatus, WorkCompletion};
use crate::ffi;
use std::marker::PhantomData;
use std::ptr::NonNull;

impl CompletionQueue {
    /// Hands up to `max` completions of the backlog to `f`, through a
    /// stand-in CQ whose readers return the stored fields; returns how many.
    #[cold]
    #[inline(never)]
    pub(super) fn replay<F>(&mut self, max: usize, mut f: F) -> usize
    where
        F: FnMut(&PolledWc<'_>),
    {
        let mut stand_in = Replay::new();
        let mut n = 0;
        while n < max {
            let Some(raw) = self.backlog.pop_front() else {
                break;
            };
            stand_in.ex.wr_id = raw.wr_id;
            stand_in.ex.status = raw.status;
            stand_in.cur = raw;
            let wc = PolledWc {
                // From the whole stand-in, whose readers reach past `ex`.
                cq: NonNull::from(&mut *stand_in).cast(),
                _poll: PhantomData,
            };
            f(&wc);
            n += 1;
        }
        n
    }

    /// Keeps completions that a scoped post polled but that were not its
    /// own, for the next polls (after any already kept).
    pub(crate) fn keep(&mut self, wcs: impl IntoIterator<Item = RawWc>) {
        self.backlog.extend(wcs);
    }

    /// How many completions were taken from the device by a scoped post
    /// and wait for the next polls.
    pub fn backlog_len(&self) -> usize {
        self.backlog.len()
    }
}

impl From<&RawWc> for WorkCompletion {
    /// The completion a poll positioned on `wc` would read.
    #[inline]
    fn from(wc: &RawWc) -> Self {
        let flags = WcFlags::from_bits_retain(wc.wc_flags);
        let (imm, invalidated_rkey) = imm_or_inv(flags, || wc.imm_data);
        WorkCompletion {
            wr_id: wc.wr_id,
            status: WcStatus::from_raw(wc.status),
            opcode: WcOpcode::from_raw(wc.opcode),
            byte_len: wc.byte_len,
            imm,
            invalidated_rkey,
            qp_num: wc.qp_num,
            vendor_err: wc.vendor_err,
        }
    }
}

/// Every field of one completion as the provider reports it: what a
/// scoped post keeps of a completion that is not its own.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawWc {
    pub(crate) wr_id: u64,
    pub(crate) status: u32,
    opcode: u32,
    byte_len: u32,
    wc_flags: u32,
    imm_data: u32,
    pub(crate) qp_num: u32,
    vendor_err: u32,
}

impl RawWc {
    /// Every field of `wc` (the opcode, immediate and the like are read
    /// whatever the status, as stored values only).
    #[inline]
    pub(crate) fn of(wc: &PolledWc<'_>) -> Self {
        RawWc {
            wr_id: wc.wr_id(),
            status: wc.status().to_raw(),
            opcode: wc.opcode().to_raw(),
            byte_len: wc.byte_len(),
            wc_flags: wc.wc_flags().bits(),
            imm_data: wc.imm_data_raw(),
            qp_num: wc.qp_num(),
            vendor_err: wc.vendor_err(),
        }
    }

    /// A stand-in for the send completion `wc` was read from: its flags
    /// are rebuilt from the immediate or the invalidated rkey it carries,
    /// and the shared field is 0 when it holds neither. A send completion
    /// (a scoped post's all are) carries no other flag (GRH, checksum and
    /// tag-matching flags are receive-side); one that did would lose it.
    pub(crate) fn from_read(wc: &WorkCompletion) -> Self {
        let mut flags = WcFlags::empty();
        flags.set(WcFlags::WITH_IMM, wc.imm.is_some());
        flags.set(WcFlags::WITH_INV, wc.invalidated_rkey.is_some());
        RawWc {
            wr_id: wc.wr_id,
            status: wc.status.to_raw(),
            opcode: wc.opcode.to_raw(),
            byte_len: wc.byte_len,
            wc_flags: flags.bits(),
            imm_data: wc.imm.map(u32::to_be).or(wc.invalidated_rkey).unwrap_or(0),
            qp_num: wc.qp_num,
            vendor_err: wc.vendor_err,
        }
    }
}

/// A stand-in `struct ibv_cq_ex` positioned on one stored completion: the
/// fields and readers a [`PolledWc`] uses, and nothing else (its poll
/// entries are NULL: a replayed completion is not part of a poll of the
/// device).
#[repr(C)]
struct Replay {
    /// First, so that a pointer to it is a pointer to the whole.
    ex: ffi::ibv_cq_ex,
    cur: RawWc,
}

impl Replay {
    fn new() -> Box<Self> {
        // SAFETY: every field of `ibv_cq_ex` is an integer, a raw pointer,
        // an optional function pointer or plain C data, for all of which
        // all-zero bytes are a valid value (NULL, None, 0).
        let ex: ffi::ibv_cq_ex = unsafe { std::mem::MaybeUninit::zeroed().assume_init() };
        let mut r = Box::new(Replay {
            ex,
            cur: RawWc {
                wr_id: 0,
                status: 0,
                opcode: 0,
                byte_len: 0,
                wc_flags: 0,
                imm_data: 0,
                qp_num: 0,
                vendor_err: 0,
            },
        });
        r.ex.read_opcode = Some(replay_opcode);
        r.ex.read_vendor_err = Some(replay_vendor_err);
        r.ex.read_byte_len = Some(replay_byte_len);
        r.ex.read_imm_data = Some(replay_imm_data);
        r.ex.read_qp_num = Some(replay_qp_num);
        r.ex.read_wc_flags = Some(replay_wc_flags);
        r
    }
}

/// The readers of a [`Replay`]: each returns one stored field.
macro_rules! replay_readers {
    ($($name:ident: $field:ident -> $ty:ty;)*) => {$(
        unsafe extern "C" fn $name(cq: *mut ffi::ibv_cq_ex) -> $ty {
            // SAFETY: installed only in a `Replay`, whose first field is the
            // `ibv_cq_ex` this is called with (`repr(C)`): the pointer is
            // a pointer to the live `Replay`.
            unsafe { (*cq.cast::<Replay>()).cur.$field as $ty }
        }
    )*};
}

replay_readers! {
    replay_opcode: opcode -> ffi::ibv_wc_opcode;
    replay_vendor_err: vendor_err -> u32;
    replay_byte_len: byte_len -> u32;
    replay_imm_data: imm_data -> ffi::__be32;
    replay_qp_num: qp_num -> u32;
    replay_wc_flags: wc_flags -> ::std::os::raw::c_uint;
}
