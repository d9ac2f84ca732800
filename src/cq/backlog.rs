//! The backlog: completions a scoped post took from the device but did
//! not own ([`RawWc`], in `raw_wc`), kept for the next polls and handed
//! out through a stand-in CQ ([`Replay`]).

use super::{CompletionQueue, PolledWc, RawWc};
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
            // Taken only once `f` has returned: if it panics, the
            // completion stays first in the backlog, handed out again.
            let Some(&raw) = self.backlog.front() else {
                break;
            };
            stand_in.position(raw);
            let wc = PolledWc {
                // From the whole stand-in, whose readers reach past `ex`.
                cq: NonNull::from(&mut *stand_in).cast(),
                // What was kept of the sender is what was read.
                senders: true,
                _poll: PhantomData,
            };
            f(&wc);
            self.backlog.pop_front();
            n += 1;
        }
        n
    }

    /// Keeps completions that a scoped post polled but that were not its
    /// own, for the next polls (after any already kept).
    pub(crate) fn keep(&mut self, wcs: impl IntoIterator<Item = RawWc>) {
        let owners = &self.inner.owners;
        self.backlog
            .extend(wcs.into_iter().map(|w| w.owned_by(owners)));
    }

    /// Drops the kept completions of QPs destroyed since they were kept:
    /// the provider cleans a destroyed QP's completions out of its CQ, and
    /// a QP made later with the same number must not be credited with one.
    #[cold]
    #[inline(never)]
    pub(super) fn drop_dead(&mut self) {
        let owners = &self.inner.owners;
        self.backlog.retain(|w| owners.alive(w.qp_num, w.gen));
    }

    /// How many completions were taken from the device by a scoped post
    /// and wait for the next polls.
    pub fn backlog_len(&self) -> usize {
        let owners = &self.inner.owners;
        self.backlog
            .iter()
            .filter(|w| owners.alive(w.qp_num, w.gen))
            .count()
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
            cur: RawWc::default(),
        });
        r.ex.read_opcode = Some(replay_opcode);
        r.ex.read_vendor_err = Some(replay_vendor_err);
        r.ex.read_byte_len = Some(replay_byte_len);
        r.ex.read_imm_data = Some(replay_imm_data);
        r.ex.read_qp_num = Some(replay_qp_num);
        r.ex.read_wc_flags = Some(replay_wc_flags);
        r
    }

    /// Positions the stand-in on `raw`: its fields, and a reader for each
    /// sender field the CQ it was polled from had one for.
    fn position(&mut self, raw: RawWc) {
        self.ex.wr_id = raw.wr_id;
        self.ex.status = raw.status;
        self.ex.read_src_qp = raw.src_qp.map(|_| replay_src_qp as _);
        self.ex.read_slid = raw.slid.map(|_| replay_slid as _);
        self.ex.read_sl = raw.sl.map(|_| replay_sl as _);
        self.ex.read_dlid_path_bits = raw.dlid_path_bits.map(|_| replay_dlid_path_bits as _);
        self.cur = raw;
    }
}

/// The readers of a [`Replay`]: each returns one stored field (an
/// optional one is installed only where it is `Some`: 0 is never read).
macro_rules! replay_readers {
    ($($name:ident: $field:ident $(.$opt:ident())? -> $ty:ty;)*) => {$(
        unsafe extern "C" fn $name(cq: *mut ffi::ibv_cq_ex) -> $ty {
            // SAFETY: installed only in a `Replay`, whose first field is the
            // `ibv_cq_ex` this is called with (`repr(C)`): the pointer is
            // a pointer to the live `Replay`.
            unsafe { (*cq.cast::<Replay>()).cur.$field $(.$opt())? as $ty }
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
    replay_src_qp: src_qp.unwrap_or_default() -> u32;
    replay_slid: slid.unwrap_or_default() -> u32;
    replay_sl: sl.unwrap_or_default() -> u8;
    replay_dlid_path_bits: dlid_path_bits.unwrap_or_default() -> u8;
}
