//! Owned completions: [`WorkCompletion`], every field of a completion
//! read, and the writers that fill one in place as a poll reads it.

use super::polled_wc::PolledWc;
use super::{WcFlags, WcOpcode, WcStatus};
use crate::error::{Error, Result};
use crate::ffi;
use std::fmt;

/// One work completion, read with the extended poll API.
///
/// An owned copy of every field, made by
/// [`CompletionQueue::poll_into`](crate::CompletionQueue::poll_into) and
/// [`CompletionQueue::wait`](crate::CompletionQueue::wait), or from a
/// [`PolledWc`] with `WorkCompletion::from(wc)`.
///
/// A receive says who sent it: [`src_qp`](Self::src_qp),
/// [`slid`](Self::slid) and whether the buffer starts with a GRH
/// ([`wc_flags`](Self::wc_flags)), what a UD server needs to answer
/// (with the GRH, the fields of `struct ibv_wc` that
/// `ibv_init_ah_from_wc(3)` reads but the service level: read it, and the
/// DLID path bits, with [`PolledWc::sl`] and
/// [`PolledWc::dlid_path_bits`] in a poll, where wanted; kept out of this
/// copy, which every poll writes whole).
///
/// Of a failed completion (`status` other than
/// [`SUCCESS`](WcStatus::SUCCESS)), only `wr_id`, `status`, `qp_num` and
/// `vendor_err` are defined (ibv_poll_cq(3): "If the completion status is
/// other than IBV_WC_SUCCESS, only the following attributes are valid:
/// wr_id, status, qp_num, and vendor_err"); the others hold whatever the
/// provider left there. `Debug` shows them as `undefined` then, rather than
/// a value that looks meaningful:
///
/// ```
/// use mlx5dv::{WcFlags, WcOpcode, WcStatus, WorkCompletion};
///
/// let wc = WorkCompletion {
///     wr_id: 7,
///     status: WcStatus::REM_ACCESS_ERR,
///     opcode: WcOpcode::SEND,
///     byte_len: 0,
///     imm: None,
///     invalidated_rkey: None,
///     qp_num: 0x1a2,
///     vendor_err: 0x88,
///     wc_flags: WcFlags::empty(),
///     src_qp: None,
///     slid: None,
///     qp_kind: None,
/// };
/// let text = format!("{wc:?}");
/// assert!(text.contains("opcode: undefined") && !text.contains("SEND"), "{text}");
/// assert!(wc.ok().unwrap_err().to_string().contains("rkey"));
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The `wr_id` the work request was posted with.
    pub wr_id: u64,
    /// Success, or why it failed.
    pub status: WcStatus,
    /// What it did. Undefined unless `status` is
    /// [`SUCCESS`](WcStatus::SUCCESS): ibv_poll_cq(3) leaves the opcode of
    /// a failed completion undefined (providers leave a stale or zero
    /// value, which reads as [`WcOpcode::SEND`]), so a failed RDMA write
    /// may show any opcode here.
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred. Undefined unless `status`
    /// is [`SUCCESS`](WcStatus::SUCCESS).
    pub byte_len: u32,
    /// The immediate data in host byte order, when the completion carries
    /// one (`IBV_WC_WITH_IMM`). Undefined unless `status` is
    /// [`SUCCESS`](WcStatus::SUCCESS).
    pub imm: Option<u32>,
    /// The rkey a received send-with-invalidate invalidated
    /// (`IBV_WC_WITH_INV`). Undefined unless `status` is
    /// [`SUCCESS`](WcStatus::SUCCESS).
    pub invalidated_rkey: Option<u32>,
    /// The local QP number.
    pub qp_num: u32,
    /// The provider's vendor error code (0 on success).
    pub vendor_err: u32,
    /// The completion's flags (`ibv_wc_read_wc_flags`): on a UD receive,
    /// [`WcFlags::GRH`] says whether the first
    /// [`UD_GRH_BYTES`](crate::UD_GRH_BYTES) of the buffer hold the
    /// sender's GRH. Undefined unless `status` is
    /// [`SUCCESS`](WcStatus::SUCCESS).
    pub wc_flags: WcFlags,
    /// The QP number of the sender of a received message
    /// (`ibv_wc_read_src_qp`): on a UD (or XRC) receive, the remote QP to
    /// answer. `None` for a send-side completion (its opcode without the
    /// `IBV_WC_RECV` bit), on a CQ that does not read senders (none is read
    /// unless a UD QP receives on the CQ or
    /// [`CompletionQueue::read_senders`](crate::CompletionQueue::read_senders)
    /// was called: four reads a receive that an RC program does not need),
    /// and where the CQ has no reader for it (one made elsewhere without
    /// `IBV_WC_EX_WITH_SRC_QP`:
    /// [`CompletionQueue::from_raw`](crate::CompletionQueue::from_raw)).
    /// Undefined unless `status` is [`SUCCESS`](WcStatus::SUCCESS).
    pub src_qp: Option<u32>,
    /// The LID of the sender's port (`ibv_wc_read_slid`; 0 on RoCE), the
    /// `dlid` of an address handle back; `None` as for
    /// [`src_qp`](Self::src_qp).
    pub slid: Option<u16>,
    /// The kind of the QP the work request was posted on, where the crate
    /// knew it when it read the completion: a scoped post's completions
    /// ([`QpEx::post_and_wait`](crate::QpEx::post_and_wait)) carry their
    /// QP's; `None` for one polled from a CQ, which QPs of any kind may
    /// share ([`ok_for`](Self::ok_for) names the kind then). It makes
    /// [`ok`](Self::ok)'s error text that kind's
    /// ([`WcStatus::hint_for`]).
    pub qp_kind: Option<crate::QpKind>,
}

impl WorkCompletion {
    /// `Ok(self)` when successful, else [`Error::WorkCompletion`], whose
    /// text gives the causes and recovery of [`qp_kind`](Self::qp_kind)
    /// where it is known.
    pub fn ok(self) -> Result<Self> {
        if self.status.is_success() {
            Ok(self)
        } else {
            Err(Error::WorkCompletion {
                wr_id: self.wr_id,
                qp_num: self.qp_num,
                status: self.status,
                vendor_err: self.vendor_err,
                kind: self.qp_kind,
            })
        }
    }

    /// [`ok`](Self::ok) for a completion of a QP of `kind` (one read from a
    /// CQ, whose [`qp_kind`](Self::qp_kind) is `None`): the error's text
    /// gives that kind's causes and recovery ([`WcStatus::hint_for`]).
    ///
    /// ```
    /// use mlx5dv::{QpKind, WcFlags, WcOpcode, WcStatus, WorkCompletion};
    ///
    /// let wc = WorkCompletion {
    ///     wr_id: 3,
    ///     status: WcStatus::LOC_LEN_ERR,
    ///     opcode: WcOpcode::RECV,
    ///     byte_len: 0,
    ///     imm: None,
    ///     invalidated_rkey: None,
    ///     qp_num: 0x1a2,
    ///     vendor_err: 0,
    ///     wc_flags: WcFlags::empty(),
    ///     src_qp: None,
    ///     slid: None,
    ///     qp_kind: None,
    /// };
    /// let text = wc.ok_for(QpKind::Ud).unwrap_err().to_string();
    /// assert!(text.contains("UD_GRH_BYTES") && text.contains("ready(port, qkey, psn)"));
    /// ```
    pub fn ok_for(self, kind: crate::QpKind) -> Result<Self> {
        self.ok().map_err(|e| e.with_qp_kind(kind))
    }
}

impl fmt::Debug for WorkCompletion {
    /// Every field of a successful completion; of a failed one, the fields
    /// ibv_poll_cq(3) defines, and the others as `undefined`. The QP
    /// number and vendor error in hex, as the error messages give them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.status.is_success() {
            return debug_failed(f, self.wr_id, self.status, self.qp_num, self.vendor_err);
        }
        f.debug_struct("WorkCompletion")
            .field("wr_id", &self.wr_id)
            .field("status", &self.status)
            .field("opcode", &self.opcode)
            .field("byte_len", &self.byte_len)
            .field("imm", &self.imm)
            .field("invalidated_rkey", &self.invalidated_rkey)
            .field("qp_num", &format_args!("{:#x}", self.qp_num))
            .field("vendor_err", &format_args!("{:#x}", self.vendor_err))
            .field("wc_flags", &self.wc_flags)
            .field("src_qp", &self.src_qp.map(Hex))
            .field("slid", &self.slid)
            .finish()
    }
}

impl fmt::Debug for PolledWc<'_> {
    /// As [`WorkCompletion`]'s: every field of a successful completion; of
    /// a failed one, only the fields ibv_poll_cq(3) defines are read, and
    /// the others shown as `undefined`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.status();
        if status.is_success() {
            fmt::Debug::fmt(&WorkCompletion::from(self), f)
        } else {
            debug_failed(f, self.wr_id(), status, self.qp_num(), self.vendor_err())
        }
    }
}

/// A QP number in hex, as the error messages give them.
struct Hex(u32);

impl fmt::Debug for Hex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// The `Debug` form of a failed completion (of a [`WorkCompletion`] or a
/// [`PolledWc`]): the fields ibv_poll_cq(3) defines when the status is not
/// success, and the others as `undefined`, in the order of the struct.
pub(super) fn debug_failed(
    f: &mut fmt::Formatter<'_>,
    wr_id: u64,
    status: WcStatus,
    qp_num: u32,
    vendor_err: u32,
) -> fmt::Result {
    let undefined = format_args!("undefined");
    f.debug_struct("WorkCompletion")
        .field("wr_id", &wr_id)
        .field("status", &status)
        .field("opcode", &undefined)
        .field("byte_len", &undefined)
        .field("imm", &undefined)
        .field("invalidated_rkey", &undefined)
        .field("qp_num", &format_args!("{qp_num:#x}"))
        .field("vendor_err", &format_args!("{vendor_err:#x}"))
        .field("wc_flags", &undefined)
        .field("src_qp", &undefined)
        .field("slid", &undefined)
        .finish()
}

impl From<&PolledWc<'_>> for WorkCompletion {
    /// Reads every field of the completion the poll is positioned on.
    #[inline]
    fn from(wc: &PolledWc<'_>) -> Self {
        // The immediate and the invalidated rkey share the CQE field
        // (`ibv_wc_read_invalidated_rkey` reads it with read_imm_data): one
        // flags read decides which it is.
        let flags = wc.wc_flags();
        let (imm, invalidated_rkey) = imm_or_inv(flags, || wc.imm_data_raw());
        let opcode = wc.opcode();
        let sender = Sender::of(opcode, wc);
        WorkCompletion {
            wr_id: wc.wr_id(),
            status: wc.status(),
            opcode,
            byte_len: wc.byte_len(),
            imm,
            invalidated_rkey,
            qp_num: wc.qp_num(),
            vendor_err: wc.vendor_err(),
            wc_flags: flags,
            src_qp: sender.src_qp,
            slid: sender.slid,
            qp_kind: None,
        }
    }
}

/// Writes every field of the completion `wc` is positioned on into `slot`,
/// each right after it is read ([`WorkCompletion::from`] reads the same).
///
/// # Safety
/// `slot` is valid for writes of a `WorkCompletion`.
#[inline(always)]
pub(super) unsafe fn write_wc<const SENDERS: bool>(slot: *mut WorkCompletion, wc: &PolledWc<'_>) {
    // SAFETY: the caller's promise; with the two fields written here,
    // every field is written.
    unsafe {
        write_wc_fields::<SENDERS>(slot, wc);
        std::ptr::addr_of_mut!((*slot).wr_id).write(wc.wr_id());
        std::ptr::addr_of_mut!((*slot).qp_num).write(wc.qp_num());
    }
}

/// Writes the fields of the completion `wc` is positioned on into `slot`,
/// each right after it is read, but for `wr_id` and `qp_num` (the caller
/// writes those).
///
/// # Safety
/// `slot` is valid for writes of a `WorkCompletion`.
///
/// `SENDERS`: whether the CQ reads the sender of a receive
/// ([`CompletionQueue::read_senders`](super::CompletionQueue::read_senders)),
/// known to the caller once a poll, so that the loop does not test it.
#[inline(always)]
pub(crate) unsafe fn write_wc_fields<const SENDERS: bool>(
    slot: *mut WorkCompletion,
    wc: &PolledWc<'_>,
) {
    // The fields written here and by the callers: a field added to
    // `WorkCompletion` fails this pattern until it is written too (its
    // readers count it initialised).
    let _every_field = |w: WorkCompletion| {
        let WorkCompletion {
            wr_id: _,
            qp_num: _,
            imm: _,
            invalidated_rkey: _,
            status: _,
            opcode: _,
            byte_len: _,
            vendor_err: _,
            wc_flags: _,
            src_qp: _,
            slid: _,
            qp_kind: _,
        } = w;
    };
    let flags = wc.wc_flags();
    // SAFETY: the caller's promise.
    unsafe {
        let imm = std::ptr::addr_of_mut!((*slot).imm);
        let inv = std::ptr::addr_of_mut!((*slot).invalidated_rkey);
        // As `imm_or_inv`, each branch writing its own.
        if flags.contains(WcFlags::WITH_IMM) {
            imm.write(Some(u32::from_be(wc.imm_data_raw())));
            inv.write(None);
        } else if flags.contains(WcFlags::WITH_INV) {
            imm.write(None);
            inv.write(Some(wc.imm_data_raw()));
        } else {
            imm.write(None);
            inv.write(None);
        }
        std::ptr::addr_of_mut!((*slot).wc_flags).write(flags);
        std::ptr::addr_of_mut!((*slot).status).write(wc.status());
        let opcode = wc.opcode();
        std::ptr::addr_of_mut!((*slot).opcode).write(opcode);
        std::ptr::addr_of_mut!((*slot).byte_len).write(wc.byte_len());
        std::ptr::addr_of_mut!((*slot).vendor_err).write(wc.vendor_err());
        if SENDERS && opcode.to_raw() & ffi::IBV_WC_RECV != 0 {
            write_sender(slot, wc);
        } else {
            // As `Sender::of`: nothing read. Written in place (a `Sender`
            // made here would go through the stack).
            std::ptr::addr_of_mut!((*slot).src_qp).write(None);
            std::ptr::addr_of_mut!((*slot).slid).write(None);
        }
        std::ptr::addr_of_mut!((*slot).qp_kind).write(None);
    }
}

/// Writes the sender fields of the receive `wc` is positioned on into
/// `slot`: out of the poll loop's way (a UD server's path; inlined, the
/// four reads made the per-completion writer too large to inline into
/// the loop).
///
/// # Safety
/// `slot` is valid for writes of a `WorkCompletion`.
#[cold]
#[inline(never)]
unsafe fn write_sender(slot: *mut WorkCompletion, wc: &PolledWc<'_>) {
    let sender = Sender::read(wc);
    // SAFETY: the caller's promise.
    unsafe {
        std::ptr::addr_of_mut!((*slot).src_qp).write(sender.src_qp);
        std::ptr::addr_of_mut!((*slot).slid).write(sender.slid);
    }
}

/// The sender fields of a completion: read for a receive (an opcode with
/// the `IBV_WC_RECV` bit, as verbs.h says to test) on a CQ that reads
/// senders ([`CompletionQueue::read_senders`](super::CompletionQueue::read_senders)),
/// `None` for a send-side completion, whose CQE has no sender, and on
/// other CQs (nothing is read then).
#[derive(Clone, Copy, Default)]
pub(super) struct Sender {
    pub(super) src_qp: Option<u32>,
    pub(super) slid: Option<u16>,
}

impl Sender {
    #[inline(always)]
    pub(super) fn of(opcode: WcOpcode, wc: &PolledWc<'_>) -> Self {
        if !wc.senders || opcode.to_raw() & ffi::IBV_WC_RECV == 0 {
            return Sender::default();
        }
        Self::read(wc)
    }

    /// The four reads, out of the poll loop's way: inlined, they made the
    /// per-completion writer too large to inline into the loop, which
    /// then paid a call and its saved registers for every completion
    /// (about 40 instructions each), senders read or not.
    #[cold]
    #[inline(never)]
    pub(super) fn read(wc: &PolledWc<'_>) -> Self {
        Sender {
            src_qp: wc.src_qp(),
            slid: wc.slid(),
        }
    }
}

/// The immediate (in host order) or the invalidated rkey a completion with
/// `flags` carries in its shared field, read by `raw` only when it has one.
#[inline]
pub(super) fn imm_or_inv(flags: WcFlags, raw: impl FnOnce() -> u32) -> (Option<u32>, Option<u32>) {
    if flags.contains(WcFlags::WITH_IMM) {
        (Some(u32::from_be(raw())), None)
    } else if flags.contains(WcFlags::WITH_INV) {
        (None, Some(raw()))
    } else {
        (None, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wc(status: WcStatus) -> WorkCompletion {
        WorkCompletion {
            wr_id: 5,
            status,
            opcode: WcOpcode::SEND,
            byte_len: 4096,
            imm: Some(0x1234),
            invalidated_rkey: None,
            qp_num: 0x11,
            vendor_err: 0x81,
            wc_flags: WcFlags::WITH_IMM | WcFlags::GRH,
            src_qp: Some(0xabc),
            slid: Some(3),
            qp_kind: None,
        }
    }

    #[test]
    fn debug_of_a_failed_completion_shows_no_opcode_value() {
        let text = format!("{:?}", wc(WcStatus::REM_ACCESS_ERR));
        assert_eq!(
            text,
            "WorkCompletion { wr_id: 5, status: REM_ACCESS_ERR, opcode: undefined, \
             byte_len: undefined, imm: undefined, invalidated_rkey: undefined, qp_num: 0x11, \
             vendor_err: 0x81, wc_flags: undefined, src_qp: undefined, slid: undefined }"
        );
        for value in ["SEND", "4096", "4660", "0xabc", "GRH"] {
            assert!(!text.contains(value), "{value}: {text}");
        }
    }

    #[test]
    fn debug_of_a_successful_completion_shows_every_field() {
        let ok = wc(WcStatus::SUCCESS);
        assert_eq!(
            format!("{ok:?}"),
            "WorkCompletion { wr_id: 5, status: SUCCESS, opcode: SEND, byte_len: 4096, \
             imm: Some(4660), invalidated_rkey: None, qp_num: 0x11, vendor_err: 0x81, \
             wc_flags: WcFlags(GRH | WITH_IMM), src_qp: Some(0xabc), slid: Some(3) }"
        );
        // The formatter's flags reach the other fields, as a derived Debug's do.
        assert!(format!("{ok:#x?}").contains("byte_len: 0x1000,"));
    }
}
