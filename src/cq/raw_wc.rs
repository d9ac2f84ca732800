//! A completion as a scoped post keeps it for the CQ's next polls:
//! [`RawWc`], every field the provider reported (the backlog, in
//! `backlog`, hands it out again).

use super::owners::Owners;
use super::polled_wc::PolledWc;
use super::work_completion::{imm_or_inv, WorkCompletion};
use crate::ffi;
use crate::wc::{WcFlags, WcOpcode, WcStatus};

impl From<&RawWc> for WorkCompletion {
    /// The completion a poll positioned on `wc` would read.
    #[inline]
    fn from(wc: &RawWc) -> Self {
        let flags = WcFlags::from_bits_retain(wc.wc_flags);
        let (imm, invalidated_rkey) = imm_or_inv(flags, || wc.imm_data);
        // As `Sender::of`: the sender of a receive only.
        let recv = wc.opcode & ffi::IBV_WC_RECV != 0;
        WorkCompletion {
            wr_id: wc.wr_id,
            status: WcStatus::from_raw(wc.status),
            opcode: WcOpcode::from_raw(wc.opcode),
            byte_len: wc.byte_len,
            imm,
            invalidated_rkey,
            qp_num: wc.qp_num,
            vendor_err: wc.vendor_err,
            wc_flags: flags,
            src_qp: wc.src_qp.filter(|_| recv),
            slid: wc.slid.filter(|_| recv),
            qp_kind: None,
        }
    }
}

/// Every field of one completion as the provider reports it: what a
/// scoped post keeps of a completion that is not its own. The sender
/// fields are `None` where the CQ has no reader for them, as
/// [`PolledWc::src_qp`] and the like say; replayed, the stand-in has a
/// reader exactly where the CQ had one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct RawWc {
    pub(crate) wr_id: u64,
    pub(crate) status: u32,
    pub(super) opcode: u32,
    pub(super) byte_len: u32,
    pub(super) wc_flags: u32,
    pub(super) imm_data: u32,
    pub(crate) qp_num: u32,
    pub(super) vendor_err: u32,
    pub(super) src_qp: Option<u32>,
    pub(super) slid: Option<u16>,
    pub(super) sl: Option<u8>,
    pub(super) dlid_path_bits: Option<u8>,
    /// Its QP's generation when it was kept (`owners`; 0 until then, and
    /// for a QP the CQ does not know).
    pub(crate) gen: u64,
}

impl RawWc {
    /// Tagged with its QP's generation now: it goes with its QP if that is
    /// destroyed before it is handed out.
    pub(crate) fn owned_by(mut self, owners: &Owners) -> Self {
        self.gen = owners.of(self.qp_num);
        self
    }

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
            src_qp: wc.src_qp(),
            slid: wc.slid(),
            sl: wc.sl(),
            dlid_path_bits: wc.dlid_path_bits(),
            gen: 0,
        }
    }

    /// A stand-in for the completion `wc` was read from: every field it
    /// holds, the shared field of the immediate and the invalidated rkey
    /// rebuilt from whichever it carries (0 when it holds neither).
    pub(crate) fn from_read(wc: &WorkCompletion) -> Self {
        RawWc {
            wr_id: wc.wr_id,
            status: wc.status.to_raw(),
            opcode: wc.opcode.to_raw(),
            byte_len: wc.byte_len,
            wc_flags: wc.wc_flags.bits(),
            imm_data: wc.imm.map(u32::to_be).or(wc.invalidated_rkey).unwrap_or(0),
            qp_num: wc.qp_num,
            vendor_err: wc.vendor_err,
            src_qp: wc.src_qp,
            slid: wc.slid,
            // Not in an owned completion: a poll of its reader reads none.
            sl: None,
            dlid_path_bits: None,
            gen: 0,
        }
    }
}
