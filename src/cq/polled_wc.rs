//! The completion view: [`PolledWc`], the CQ positioned on the completion
//! a poll hands over, whose accessors call the provider's readers. Its
//! `Debug` form, an owned copy's, is with `WorkCompletion`'s in
//! `work_completion`.

use super::{WcFlags, WcOpcode, WcStatus};
use crate::error::{Error, Result};
use crate::ffi;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// The completion a poll of
/// [`CompletionQueue::poll_each`](crate::CompletionQueue::poll_each) is
/// positioned on: a view of the CQ, not a copy.
///
/// Each accessor reads one field when called, through the provider's reader
/// (the `ibv_wc_read_*` of ibv_create_cq_ex(3), resolved once when the CQ
/// was made), so a callback costs what it reads. The view lives only as long
/// as the callback it is handed to: the CQ moves on to the next completion
/// when the callback returns.
/// [`WorkCompletion::from`](crate::WorkCompletion::from) copies every field.
///
/// Keeping the view past its callback is a compile error:
///
/// ```compile_fail,E0521
/// # fn demo(cq: &mut mlx5dv::CompletionQueue) -> mlx5dv::Result<()> {
/// let mut last = None;
/// cq.poll_each(1, |wc| last = Some(wc))?; // ERROR: `wc` escapes the closure
/// # Ok(())
/// # }
/// ```
///
/// What it reads can be kept:
///
/// ```no_run
/// # fn demo(cq: &mut mlx5dv::CompletionQueue) -> mlx5dv::Result<()> {
/// let mut last = None;
/// cq.poll_each(1, |wc| last = Some((wc.wr_id(), mlx5dv::WorkCompletion::from(wc))))?;
/// # Ok(())
/// # }
/// ```
pub struct PolledWc<'p> {
    pub(super) cq: NonNull<ffi::ibv_cq_ex>,
    /// Whether an owned copy reads the sender of a receive
    /// ([`CompletionQueue::read_senders`](super::CompletionQueue::read_senders)).
    pub(super) senders: bool,
    // Borrows the poll of `CompletionQueue::poll_each`; not Send, not Sync:
    // it stands for a poll in progress on this thread.
    pub(super) _poll: PhantomData<(&'p mut (), *mut ())>,
}

impl PolledWc<'_> {
    /// The `wr_id` the work request was posted with (`ibv_cq_ex.wr_id`).
    #[inline]
    pub fn wr_id(&self) -> u64 {
        // SAFETY: the CQ is live and positioned on a completion while the
        // view exists (see `poll_each`); the provider wrote the field.
        unsafe { (*self.cq.as_ptr()).wr_id }
    }

    /// Success, or why it failed (`ibv_cq_ex.status`).
    #[inline]
    pub fn status(&self) -> WcStatus {
        // SAFETY: as in `wr_id`.
        WcStatus(unsafe { (*self.cq.as_ptr()).status })
    }

    /// Whether the work request succeeded.
    #[inline]
    pub fn is_success(&self) -> bool {
        self.status().is_success()
    }

    /// What the work request did (`ibv_wc_read_opcode`). Undefined unless
    /// the completion succeeded (ibv_poll_cq(3): of a failed completion
    /// only the `wr_id`, status, QP number and vendor error are valid).
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        // SAFETY: a provider entry of this live CQ, called while it is
        // positioned on a completion.
        WcOpcode(unsafe { entry!(self.cq, read_opcode) })
    }

    /// Bytes received or transferred (`ibv_wc_read_byte_len`). Undefined
    /// unless the completion succeeded.
    #[inline]
    pub fn byte_len(&self) -> u32 {
        // SAFETY: as in `opcode`; the CQ reports byte_len (WC_FLAGS, or
        // the promise of `CompletionQueue::from_raw`).
        unsafe { entry!(self.cq, read_byte_len) }
    }

    /// The completion's flags (`ibv_wc_read_wc_flags`). Undefined unless
    /// the completion succeeded.
    #[inline]
    pub fn wc_flags(&self) -> WcFlags {
        // SAFETY: as in `opcode`.
        WcFlags::from_bits_retain(unsafe { entry!(self.cq, read_wc_flags) })
    }

    /// The immediate data in host byte order, when the completion carries
    /// one (`IBV_WC_WITH_IMM`; reads the flags, then
    /// `ibv_wc_read_imm_data`). Undefined unless the completion
    /// succeeded.
    #[inline]
    pub fn imm(&self) -> Option<u32> {
        if self.wc_flags().contains(WcFlags::WITH_IMM) {
            Some(u32::from_be(self.imm_data_raw()))
        } else {
            None
        }
    }

    /// The rkey a received send-with-invalidate invalidated
    /// (`IBV_WC_WITH_INV`; reads the flags, then
    /// `ibv_wc_read_invalidated_rkey`). Undefined unless the completion
    /// succeeded.
    #[inline]
    pub fn invalidated_rkey(&self) -> Option<u32> {
        if self.wc_flags().contains(WcFlags::WITH_INV) {
            Some(self.imm_data_raw())
        } else {
            None
        }
    }

    /// The local QP number (`ibv_wc_read_qp_num`).
    #[inline]
    pub fn qp_num(&self) -> u32 {
        // SAFETY: as in `byte_len`.
        unsafe { entry!(self.cq, read_qp_num) }
    }

    /// The QP number of the sender of a received message
    /// (`ibv_wc_read_src_qp`): on a UD (or XRC) receive, the remote QP.
    /// `None` where the CQ has no reader for it: one made elsewhere without
    /// `IBV_WC_EX_WITH_SRC_QP`
    /// ([`CompletionQueue::from_raw`](crate::CompletionQueue::from_raw)). A
    /// completion handed out from the backlog of a scoped post reads what
    /// the device reported, as a fresh poll does. Undefined unless the
    /// status is success.
    #[inline]
    pub fn src_qp(&self) -> Option<u32> {
        // SAFETY: the CQ is live and positioned on a completion (see
        // `byte_len`); the reader is the provider's, read from the CQ.
        unsafe { (*self.cq.as_ptr()).read_src_qp.map(|f| f(self.cq.as_ptr())) }
    }

    /// The LID of the sender's port (`ibv_wc_read_slid`; 0 on RoCE);
    /// `None` as for [`src_qp`](Self::src_qp).
    #[inline]
    pub fn slid(&self) -> Option<u16> {
        // SAFETY: as in `src_qp`. A LID has 16 bits (the reader returns
        // them in a u32).
        unsafe {
            (*self.cq.as_ptr())
                .read_slid
                .map(|f| f(self.cq.as_ptr()) as u16)
        }
    }

    /// The service level of a received message (`ibv_wc_read_sl`);
    /// `None` as for [`src_qp`](Self::src_qp).
    #[inline]
    pub fn sl(&self) -> Option<u8> {
        // SAFETY: as in `src_qp`.
        unsafe { (*self.cq.as_ptr()).read_sl.map(|f| f(self.cq.as_ptr())) }
    }

    /// The path bits of the local LID a received message was sent to
    /// (`ibv_wc_read_dlid_path_bits`; 0 on RoCE); `None` as for
    /// [`src_qp`](Self::src_qp).
    #[inline]
    pub fn dlid_path_bits(&self) -> Option<u8> {
        // SAFETY: as in `src_qp`.
        unsafe {
            (*self.cq.as_ptr())
                .read_dlid_path_bits
                .map(|f| f(self.cq.as_ptr()))
        }
    }

    /// The provider's vendor error code, 0 on success
    /// (`ibv_wc_read_vendor_err`).
    #[inline]
    pub fn vendor_err(&self) -> u32 {
        // SAFETY: as in `opcode`.
        unsafe { entry!(self.cq, read_vendor_err) }
    }

    /// `Ok(())` when successful, else [`Error::WorkCompletion`] (reads
    /// the QP number and vendor error only then).
    #[inline]
    pub fn ok(&self) -> Result<()> {
        let status = self.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(Error::WorkCompletion {
                wr_id: self.wr_id(),
                qp_num: self.qp_num(),
                status,
                vendor_err: self.vendor_err(),
                kind: None,
            })
        }
    }

    /// [`ok`](Self::ok) for a completion of a QP of `kind`: the error's
    /// text gives that kind's causes and recovery
    /// ([`WcStatus::hint_for`](crate::WcStatus::hint_for)).
    #[inline]
    pub fn ok_for(&self, kind: crate::QpKind) -> Result<()> {
        self.ok().map_err(|e| e.with_qp_kind(kind))
    }

    /// The CQ, positioned on this completion: for the `ibv_wc_read_*`
    /// readers this view does not wrap (`ibv_wc_read_completion_ts`, ...,
    /// which need the matching `IBV_WC_EX_WITH_*` flag at creation: see
    /// [`CompletionQueue::from_raw`](crate::CompletionQueue::from_raw)).
    /// Valid for reading this completion while the callback runs; starting,
    /// advancing or ending the poll through it is not allowed. For a
    /// completion handed out from the backlog, it is a stand-in whose only
    /// entries are the readers this view calls.
    #[inline]
    pub fn as_ptr(&self) -> *mut ffi::ibv_cq_ex {
        self.cq.as_ptr()
    }

    /// The raw CQE field of the immediate and the invalidated rkey
    /// (`ibv_wc_read_imm_data`), whatever the flags say.
    #[inline]
    pub(crate) fn imm_data_raw(&self) -> u32 {
        // SAFETY: as in `byte_len` (the CQ reports the immediate).
        unsafe { entry!(self.cq, read_imm_data) }
    }
}
