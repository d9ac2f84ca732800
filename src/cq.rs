//! Completion queues and typed work completions.
//!
//! Two ways to read completions:
//!
//! - [`CompletionQueue::poll_each`] hands each completion to a closure as a
//!   [`PolledWc`], a view of the CQ positioned on it whose accessors call the
//!   provider's readers (`ibv_wc_read_*`) directly: a closure pays for what
//!   it reads and nothing else, as the same loop written in C does.
//! - [`CompletionQueue::poll_into`], [`wait`](CompletionQueue::wait) and
//!   [`wait_into`](CompletionQueue::wait_into) collect owned
//!   [`WorkCompletion`]s, every field read.

use crate::channel::{cq_of, CompletionChannel};
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ffi;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::CStr;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Calls the poll entry `$entry` of a CQ (`NonNull<ibv_cq_ex>`) straight
/// from its `struct ibv_cq_ex`, as the header's inline functions do, with
/// the CQ and then the other arguments. To be used inside `unsafe`: the
/// CQ must be live and its entries checked non-NULL when the handle was
/// made (`check_poll_entries`; providers set them once, at creation).
macro_rules! entry {
    ($cq:expr, $entry:ident $(, $arg:expr)*) => {{
        let cq: *mut ffi::ibv_cq_ex = $cq.as_ptr();
        match (*cq).$entry {
            Some(f) => f(cq $(, $arg)*),
            None => std::hint::unreachable_unchecked(),
        }
    }};
}

/// Declares the named values of a `u32` newtype: one associated const each,
/// `from_raw` and `to_raw`, and `name()`, which maps a value back to its
/// const's name.
macro_rules! named_values {
    ($ty:ident { $($(#[$doc:meta])* $name:ident = $raw:path,)* }) => {
        impl $ty {
            $(
                $(#[$doc])*
                pub const $name: Self = Self($raw);
            )*

            /// The value of a raw `u32` (any value: one without a const is
            /// kept as it is).
            #[inline]
            pub const fn from_raw(raw: u32) -> Self {
                Self(raw)
            }

            /// The raw value.
            #[inline]
            pub const fn to_raw(self) -> u32 {
                self.0
            }

            /// The name of the const this value is, if any.
            const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( $raw => Some(stringify!($name)), )*
                    _ => None,
                }
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(name) => f.write_str(name),
                    None => f.debug_tuple(stringify!($ty)).field(&self.0).finish(),
                }
            }
        }
    };
}

/// The status of a work completion (`enum ibv_wc_status`).
///
/// The raw `u32` itself (`#[repr(transparent)]`): reading it from a
/// completion converts nothing. Every value rdma-core defines is an
/// associated const, usable as a `match` pattern; any other value the
/// provider reports is kept as it is ([`from_raw`](Self::from_raw)).
///
/// `Display` gives rdma-core's own text (`ibv_wc_status_str(3)`); `Debug`
/// the const's name (`REM_ACCESS_ERR`), or `WcStatus(n)` for another value.
///
/// ```
/// use mlx5dv::WcStatus;
///
/// fn retry(status: WcStatus) -> bool {
///     match status {
///         WcStatus::RETRY_EXC_ERR | WcStatus::RNR_RETRY_EXC_ERR => true,
///         _ => false,
///     }
/// }
/// assert!(retry(WcStatus::from_raw(mlx5dv::ffi::IBV_WC_RETRY_EXC_ERR)));
/// assert!(WcStatus::SUCCESS.is_success());
/// assert_eq!(format!("{:?}", WcStatus::WR_FLUSH_ERR), "WR_FLUSH_ERR");
/// assert_eq!(format!("{:?}", WcStatus::from_raw(99)), "WcStatus(99)");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct WcStatus(u32);

named_values!(WcStatus {
    /// `IBV_WC_SUCCESS`.
    SUCCESS = ffi::IBV_WC_SUCCESS,
    /// `IBV_WC_LOC_LEN_ERR`: local length error.
    LOC_LEN_ERR = ffi::IBV_WC_LOC_LEN_ERR,
    /// `IBV_WC_LOC_QP_OP_ERR`: local QP operation error.
    LOC_QP_OP_ERR = ffi::IBV_WC_LOC_QP_OP_ERR,
    /// `IBV_WC_LOC_EEC_OP_ERR`.
    LOC_EEC_OP_ERR = ffi::IBV_WC_LOC_EEC_OP_ERR,
    /// `IBV_WC_LOC_PROT_ERR`: local protection error.
    LOC_PROT_ERR = ffi::IBV_WC_LOC_PROT_ERR,
    /// `IBV_WC_WR_FLUSH_ERR`: flushed, the QP is in the error state.
    WR_FLUSH_ERR = ffi::IBV_WC_WR_FLUSH_ERR,
    /// `IBV_WC_MW_BIND_ERR`.
    MW_BIND_ERR = ffi::IBV_WC_MW_BIND_ERR,
    /// `IBV_WC_BAD_RESP_ERR`.
    BAD_RESP_ERR = ffi::IBV_WC_BAD_RESP_ERR,
    /// `IBV_WC_LOC_ACCESS_ERR`: local access error.
    LOC_ACCESS_ERR = ffi::IBV_WC_LOC_ACCESS_ERR,
    /// `IBV_WC_REM_INV_REQ_ERR`: remote invalid request.
    REM_INV_REQ_ERR = ffi::IBV_WC_REM_INV_REQ_ERR,
    /// `IBV_WC_REM_ACCESS_ERR`: remote access error (wrong rkey or rights).
    REM_ACCESS_ERR = ffi::IBV_WC_REM_ACCESS_ERR,
    /// `IBV_WC_REM_OP_ERR`: remote operation error.
    REM_OP_ERR = ffi::IBV_WC_REM_OP_ERR,
    /// `IBV_WC_RETRY_EXC_ERR`: transport retry counter exceeded.
    RETRY_EXC_ERR = ffi::IBV_WC_RETRY_EXC_ERR,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: receiver-not-ready retries exceeded.
    RNR_RETRY_EXC_ERR = ffi::IBV_WC_RNR_RETRY_EXC_ERR,
    /// `IBV_WC_LOC_RDD_VIOL_ERR`.
    LOC_RDD_VIOL_ERR = ffi::IBV_WC_LOC_RDD_VIOL_ERR,
    /// `IBV_WC_REM_INV_RD_REQ_ERR`.
    REM_INV_RD_REQ_ERR = ffi::IBV_WC_REM_INV_RD_REQ_ERR,
    /// `IBV_WC_REM_ABORT_ERR`.
    REM_ABORT_ERR = ffi::IBV_WC_REM_ABORT_ERR,
    /// `IBV_WC_INV_EECN_ERR`.
    INV_EECN_ERR = ffi::IBV_WC_INV_EECN_ERR,
    /// `IBV_WC_INV_EEC_STATE_ERR`.
    INV_EEC_STATE_ERR = ffi::IBV_WC_INV_EEC_STATE_ERR,
    /// `IBV_WC_FATAL_ERR`.
    FATAL_ERR = ffi::IBV_WC_FATAL_ERR,
    /// `IBV_WC_RESP_TIMEOUT_ERR`.
    RESP_TIMEOUT_ERR = ffi::IBV_WC_RESP_TIMEOUT_ERR,
    /// `IBV_WC_GENERAL_ERR`.
    GENERAL_ERR = ffi::IBV_WC_GENERAL_ERR,
    /// `IBV_WC_TM_ERR`: tag-matching error.
    TM_ERR = ffi::IBV_WC_TM_ERR,
    /// `IBV_WC_TM_RNDV_INCOMPLETE`: tag-matching rendezvous incomplete.
    TM_RNDV_INCOMPLETE = ffi::IBV_WC_TM_RNDV_INCOMPLETE,
});

impl WcStatus {
    /// Whether the work request succeeded.
    #[inline]
    pub const fn is_success(self) -> bool {
        self.0 == ffi::IBV_WC_SUCCESS
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: ibv_wc_status_str returns a static string for any value.
        let s = unsafe { CStr::from_ptr(ffi::ibv_wc_status_str(self.to_raw())) };
        f.write_str(&s.to_string_lossy())
    }
}

/// What a completed work request did (`enum ibv_wc_opcode`, with the mlx5
/// opcodes of `enum mlx5dv_wc_opcode`).
///
/// The raw `u32` itself (`#[repr(transparent)]`), like [`WcStatus`]: every
/// value rdma-core defines is an associated const, usable as a `match`
/// pattern; any other value is kept as it is. `Debug` gives the const's
/// name (`RDMA_WRITE`), or `WcOpcode(n)` for another value.
///
/// ```
/// use mlx5dv::WcOpcode;
///
/// let op = WcOpcode::from_raw(mlx5dv::ffi::MLX5DV_WC_MEMCPY);
/// assert_eq!(op, WcOpcode::MEMCPY);
/// assert!(matches!(op, WcOpcode::MEMCPY | WcOpcode::UMR));
/// assert_eq!(format!("{op:?}"), "MEMCPY");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct WcOpcode(u32);

named_values!(WcOpcode {
    /// A send (`IBV_WC_SEND`).
    SEND = ffi::IBV_WC_SEND,
    /// An RDMA write (`IBV_WC_RDMA_WRITE`).
    RDMA_WRITE = ffi::IBV_WC_RDMA_WRITE,
    /// An RDMA read (`IBV_WC_RDMA_READ`).
    RDMA_READ = ffi::IBV_WC_RDMA_READ,
    /// Atomic compare-and-swap (`IBV_WC_COMP_SWAP`).
    COMP_SWAP = ffi::IBV_WC_COMP_SWAP,
    /// Atomic fetch-and-add (`IBV_WC_FETCH_ADD`).
    FETCH_ADD = ffi::IBV_WC_FETCH_ADD,
    /// Memory window bind (`IBV_WC_BIND_MW`).
    BIND_MW = ffi::IBV_WC_BIND_MW,
    /// Local invalidate (`IBV_WC_LOCAL_INV`).
    LOCAL_INV = ffi::IBV_WC_LOCAL_INV,
    /// TSO send (`IBV_WC_TSO`).
    TSO = ffi::IBV_WC_TSO,
    /// Atomic write (`IBV_WC_ATOMIC_WRITE`).
    ATOMIC_WRITE = ffi::IBV_WC_ATOMIC_WRITE,
    /// A receive (`IBV_WC_RECV`).
    RECV = ffi::IBV_WC_RECV,
    /// A receive consumed by an RDMA write with immediate
    /// (`IBV_WC_RECV_RDMA_WITH_IMM`).
    RECV_RDMA_WITH_IMM = ffi::IBV_WC_RECV_RDMA_WITH_IMM,
    /// Tag matching: a tag added (`IBV_WC_TM_ADD`).
    TM_ADD = ffi::IBV_WC_TM_ADD,
    /// Tag matching: a tag deleted (`IBV_WC_TM_DEL`).
    TM_DEL = ffi::IBV_WC_TM_DEL,
    /// Tag matching: a sync (`IBV_WC_TM_SYNC`).
    TM_SYNC = ffi::IBV_WC_TM_SYNC,
    /// Tag matching: a tagged receive (`IBV_WC_TM_RECV`).
    TM_RECV = ffi::IBV_WC_TM_RECV,
    /// Tag matching: a receive without a tag (`IBV_WC_TM_NO_TAG`).
    TM_NO_TAG = ffi::IBV_WC_TM_NO_TAG,
    /// An mlx5 mkey registration: `mlx5dv_wr_mr_list` /
    /// `mlx5dv_wr_mr_interleaved` (`MLX5DV_WC_UMR` = `IBV_WC_DRIVER1`).
    UMR = ffi::MLX5DV_WC_UMR,
    /// An mlx5 raw WQE, whatever its opcode (`MLX5DV_WC_RAW_WQE` =
    /// `IBV_WC_DRIVER2`).
    RAW_WQE = ffi::MLX5DV_WC_RAW_WQE,
    /// An mlx5 DMA memcpy (`MLX5DV_WC_MEMCPY` = `IBV_WC_DRIVER3`).
    MEMCPY = ffi::MLX5DV_WC_MEMCPY,
});

bitflags::bitflags! {
    /// The flags of a work completion (`enum ibv_wc_flags`), as
    /// [`PolledWc::wc_flags`] reads them. Bits without a name are kept
    /// (`from_bits_retain`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct WcFlags: u32 {
        /// The receive buffer starts with a GRH (`IBV_WC_GRH`).
        const GRH = ffi::IBV_WC_GRH;
        /// The completion carries immediate data (`IBV_WC_WITH_IMM`).
        const WITH_IMM = ffi::IBV_WC_WITH_IMM;
        /// The IP checksum was verified (`IBV_WC_IP_CSUM_OK`).
        const IP_CSUM_OK = ffi::IBV_WC_IP_CSUM_OK;
        /// A received send with invalidate invalidated an rkey
        /// (`IBV_WC_WITH_INV`).
        const WITH_INV = ffi::IBV_WC_WITH_INV;
        /// Tag matching: a sync request (`IBV_WC_TM_SYNC_REQ`).
        const TM_SYNC_REQ = ffi::IBV_WC_TM_SYNC_REQ;
        /// Tag matching: the tag matched (`IBV_WC_TM_MATCH`).
        const TM_MATCH = ffi::IBV_WC_TM_MATCH;
        /// Tag matching: the data is valid (`IBV_WC_TM_DATA_VALID`).
        const TM_DATA_VALID = ffi::IBV_WC_TM_DATA_VALID;
    }
}

/// One work completion, read with the extended poll API.
///
/// An owned copy of every field, made by [`CompletionQueue::poll_into`] and
/// [`CompletionQueue::wait`], or from a [`PolledWc`] with
/// `WorkCompletion::from(wc)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The `wr_id` the work request was posted with.
    pub wr_id: u64,
    /// Success, or why it failed.
    pub status: WcStatus,
    /// What it did. Only meaningful when `status` is
    /// [`SUCCESS`](WcStatus::SUCCESS) (rdma-core does not define the opcode
    /// of failed completions).
    pub opcode: WcOpcode,
    /// Bytes received (receives) or transferred.
    pub byte_len: u32,
    /// The immediate data in host byte order, when the completion carries
    /// one (`IBV_WC_WITH_IMM`).
    pub imm: Option<u32>,
    /// The rkey a received send-with-invalidate invalidated
    /// (`IBV_WC_WITH_INV`).
    pub invalidated_rkey: Option<u32>,
    /// The local QP number.
    pub qp_num: u32,
    /// The provider's vendor error code (0 on success).
    pub vendor_err: u32,
}

impl WorkCompletion {
    /// `Ok(self)` when successful, else [`Error::WorkCompletion`].
    pub fn ok(self) -> Result<Self> {
        if self.status.is_success() {
            Ok(self)
        } else {
            Err(Error::WorkCompletion {
                wr_id: self.wr_id,
                qp_num: self.qp_num,
                status: self.status,
                vendor_err: self.vendor_err,
            })
        }
    }
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
        WorkCompletion {
            wr_id: wc.wr_id(),
            status: wc.status(),
            opcode: wc.opcode(),
            byte_len: wc.byte_len(),
            imm,
            invalidated_rkey,
            qp_num: wc.qp_num(),
            vendor_err: wc.vendor_err(),
        }
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

/// The most `poll_into` reserves before polling.
const POLL_INTO_RESERVE: usize = 64;

/// Writes every field of the completion `wc` is positioned on into `slot`,
/// each right after it is read ([`WorkCompletion::from`] reads the same).
///
/// # Safety
/// `slot` is valid for writes of a `WorkCompletion`.
#[inline(always)]
unsafe fn write_wc(slot: *mut WorkCompletion, wc: &PolledWc<'_>) {
    // SAFETY: the caller's promise; with the two fields written here,
    // every field is written.
    unsafe {
        write_wc_fields(slot, wc);
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
#[inline(always)]
pub(crate) unsafe fn write_wc_fields(slot: *mut WorkCompletion, wc: &PolledWc<'_>) {
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
        std::ptr::addr_of_mut!((*slot).status).write(wc.status());
        std::ptr::addr_of_mut!((*slot).opcode).write(wc.opcode());
        std::ptr::addr_of_mut!((*slot).byte_len).write(wc.byte_len());
        std::ptr::addr_of_mut!((*slot).vendor_err).write(wc.vendor_err());
    }
}

/// The immediate (in host order) or the invalidated rkey a completion with
/// `flags` carries in its shared field, read by `raw` only when it has one.
#[inline]
fn imm_or_inv(flags: WcFlags, raw: impl FnOnce() -> u32) -> (Option<u32>, Option<u32>) {
    if flags.contains(WcFlags::WITH_IMM) {
        (Some(u32::from_be(raw())), None)
    } else if flags.contains(WcFlags::WITH_INV) {
        (None, Some(raw()))
    } else {
        (None, None)
    }
}

/// The completion a poll of [`CompletionQueue::poll_each`] is positioned
/// on: a view of the CQ, not a copy.
///
/// Each accessor reads one field when called, through the provider's
/// reader (the `ibv_wc_read_*` of ibv_create_cq_ex(3), resolved once when
/// the CQ was made), so a callback costs what it reads. The view lives only
/// as long as the callback it is handed to: the CQ moves on to the next
/// completion when the callback returns. [`WorkCompletion::from`] copies
/// every field.
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
    cq: NonNull<ffi::ibv_cq_ex>,
    // Borrows the poll of `CompletionQueue::poll_each`; not Send, not Sync:
    // it stands for a poll in progress on this thread.
    _poll: PhantomData<(&'p mut (), *mut ())>,
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

    /// What the work request did (`ibv_wc_read_opcode`). Only meaningful
    /// for a successful completion.
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        // SAFETY: a provider entry of this live CQ, called while it is
        // positioned on a completion.
        WcOpcode(unsafe { entry!(self.cq, read_opcode) })
    }

    /// Bytes received or transferred (`ibv_wc_read_byte_len`).
    #[inline]
    pub fn byte_len(&self) -> u32 {
        // SAFETY: as in `opcode`; the CQ reports byte_len (WC_FLAGS, or
        // the promise of `CompletionQueue::from_raw`).
        unsafe { entry!(self.cq, read_byte_len) }
    }

    /// The completion's flags (`ibv_wc_read_wc_flags`).
    #[inline]
    pub fn wc_flags(&self) -> WcFlags {
        // SAFETY: as in `opcode`.
        WcFlags::from_bits_retain(unsafe { entry!(self.cq, read_wc_flags) })
    }

    /// The immediate data in host byte order, when the completion carries
    /// one (`IBV_WC_WITH_IMM`; reads the flags, then
    /// `ibv_wc_read_imm_data`).
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
    /// `ibv_wc_read_invalidated_rkey`).
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
            })
        }
    }

    /// The CQ, positioned on this completion: for the `ibv_wc_read_*`
    /// readers this view does not wrap (`ibv_wc_read_completion_ts`, ...,
    /// which need the matching `IBV_WC_EX_WITH_*` flag at creation: see
    /// [`CompletionQueue::from_raw`]). Valid for reading this completion
    /// while the callback runs; starting, advancing or ending the poll
    /// through it is not allowed. For a completion handed out from the
    /// backlog, it is a stand-in whose only entries are the readers this
    /// view calls.
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

impl fmt::Debug for PolledWc<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&WorkCompletion::from(self), f)
    }
}

/// A completion queue created with `ibv_create_cq_ex(3)` and polled with
/// the extended poll API (`ibv_start_poll`, `ibv_next_poll`,
/// `ibv_end_poll`).
///
/// One handle polls the CQ: polling takes `&mut self`, so the compiler
/// keeps two polls of one CQ apart, and a poll costs no lock of this
/// crate (the provider's own, held from `ibv_start_poll` to `ibv_end_poll`,
/// is the one C pays too). Several QPs may complete on the CQ: they are
/// built with `&CompletionQueue` and keep the CQ alive (it is destroyed
/// when the handle and the last of them are dropped). To poll one CQ from
/// several threads, share the handle in a `Mutex`:
///
/// ```no_run
/// # fn demo(cq: mlx5dv::CompletionQueue) {
/// use std::sync::{Arc, Mutex};
///
/// let cq = Arc::new(Mutex::new(cq));
/// let poller = {
///     let cq = Arc::clone(&cq);
///     std::thread::spawn(move || {
///         let mut cq = cq.lock().unwrap();
///         cq.poll_each(16, |wc| println!("{}: {}", wc.wr_id(), wc.status()))
///     })
/// };
/// # let _ = poller.join();
/// # }
/// ```
pub struct CompletionQueue {
    /// The CQ (also in `inner`): read from the handle itself by a poll.
    cq: NonNull<ffi::ibv_cq_ex>,
    /// The attribute `start_poll` is given: zero, input only. Kept here,
    /// at hand beside the CQ, rather than made afresh on each poll.
    attr: ffi::ibv_poll_cq_attr,
    /// Completions taken from the CQ by a scoped post
    /// ([`QpEx::post_and_wait`](crate::QpEx::post_and_wait)) that were not
    /// its own: handed out, oldest first, by the next polls, before any
    /// new completion of the device.
    backlog: VecDeque<RawWc>,
    /// What the last [`wait`](CompletionQueue::wait) (or scoped post)
    /// returned: its room is reused by the next.
    completions: Vec<WorkCompletion>,
    inner: Arc<CqInner>,
}

/// What keeps a CQ alive: the handle's and each QP's share of it.
pub(crate) struct CqInner {
    pub(crate) cq: NonNull<ffi::ibv_cq_ex>,
    owned: bool,
    capacity: u32,
    // Dropped after the CQ is destroyed.
    one_per_start: Option<OnePerStartPtr>,
    /// The channel the CQ's events go to: dropped after the CQ is
    /// destroyed (a channel outlives its CQs).
    channel: Option<CompletionChannel>,
    ctx: Context,
}

// SAFETY: the CQ is polled only through `&mut CompletionQueue` (one thread
// at a time); what `&self` reaches (the pointer, the capacity, the context)
// is read-only, and creation and destruction are thread-safe verbs calls.
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}
// SAFETY: a shared `CqInner` is only read (QPs give its pointer to verbs
// calls); its `OnePerStart`, whose `Cell` a poll sets, is touched only by
// polls, which hold the CQ's handle mutably (one thread at a time); the CQ
// is destroyed by the last owner.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        if self.owned {
            if let Some(channel) = &self.channel {
                // SAFETY: attached when made; destroyed next. Its events
                // are acknowledged, or ibv_destroy_cq would wait for ever.
                unsafe { channel.detach(cq_of(self.cq)) };
            }
            // SAFETY: created by this crate; the handle and every QP using
            // it hold this Arc, so none is left; destroyed once.
            let rc = unsafe { ffi::ibv_destroy_cq(ffi::ibv_cq_ex_to_cq(self.cq.as_ptr())) };
            crate::report_destroy_failure("ibv_destroy_cq", rc, self.ctx.name());
        }
    }
}

mod soft_roce_probe;

/// The vendor id soft-RoCE (rxe) reports. Its provider's `next_poll`, on
/// finding the CQ empty, already ends the poll (stores the consumer index
/// and unlocks), and in rdma-core 44 to 54 it has advanced that index
/// first, so the `end_poll` that ibv_create_cq_ex(3) then requires
/// advances it past the last completion and later polls return zeroed
/// completions (fixed in 55). A soft-RoCE CQ made by
/// [`CompletionQueue::new`] gets [`OnePerStart`] entries when the provider
/// in use does that, as the first such CQ of the process finds out by
/// running the sequence ([`soft_roce_probe`]).
const SOFT_ROCE_VENDOR_ID: u32 = 0x00FF_FFFF;

/// The provider's own `start_poll` and `end_poll` of a CQ whose
/// `next_poll` and `end_poll` entries were replaced by
/// [`next_poll_one_per_start`] and [`end_poll_one_per_start`], which poll
/// one completion per `start_poll` / `end_poll` pair of the provider's:
/// correct on every provider, and a CQ polled through its entries (by
/// [`CompletionQueue::poll_each`], or by C code given
/// [`CompletionQueue::as_ptr`]) never reaches the provider's `next_poll`.
/// The poll loop is then the same for every provider, with no test of
/// which one it is.
///
/// Found through the CQ's `cq_context` (the application's pointer in
/// `struct ibv_cq`, which this crate does not otherwise use); owned by the
/// CQ's [`CqInner`], freed after the CQ is destroyed.
struct OnePerStart {
    start_poll: unsafe extern "C" fn(*mut ffi::ibv_cq_ex, *mut ffi::ibv_poll_cq_attr) -> i32,
    end_poll: unsafe extern "C" fn(*mut ffi::ibv_cq_ex),
    /// The provider's poll was ended by a `next_poll` whose `start_poll`
    /// found the CQ empty (or failed): the `end_poll` that follows has
    /// nothing to end. Only touched by a poll in progress, which holds the
    /// CQ's handle mutably (one thread).
    ended: std::cell::Cell<bool>,
}

impl OnePerStart {
    /// Replaces the `next_poll` and `end_poll` entries of `cq`, and points
    /// its `cq_context` at the returned value, which must outlive every
    /// poll of the CQ.
    ///
    /// # Safety
    /// `cq` is live, its entries were checked non-NULL, no poll of it is in
    /// progress, and nothing else uses its `cq_context`.
    unsafe fn install(cq: NonNull<ffi::ibv_cq_ex>) -> OnePerStartPtr {
        let c = cq.as_ptr();
        // SAFETY: the caller's promises: a live CQ with its entries set.
        unsafe {
            // Held through a raw pointer from here on (not a `Box`, whose
            // moves would claim it unique while `cq_context` points at it).
            let this = NonNull::from(Box::leak(Box::new(OnePerStart {
                start_poll: (*c).start_poll.unwrap_unchecked(),
                end_poll: (*c).end_poll.unwrap_unchecked(),
                ended: std::cell::Cell::new(false),
            })));
            (*c).cq_context = this.as_ptr().cast();
            (*c).next_poll = Some(next_poll_one_per_start);
            (*c).end_poll = Some(end_poll_one_per_start);
            OnePerStartPtr(this)
        }
    }

    /// The value installed in `cq`.
    ///
    /// # Safety
    /// `cq` had [`OnePerStart::install`], and its value lives.
    unsafe fn of<'a>(cq: *mut ffi::ibv_cq_ex) -> &'a Self {
        // SAFETY: the caller's promise: `cq_context` points at it.
        unsafe { &*(*cq).cq_context.cast::<OnePerStart>() }
    }
}

/// The owner of a [`OnePerStart`] installed in a CQ's `cq_context`: frees
/// it when dropped (after the CQ is destroyed).
pub(crate) struct OnePerStartPtr(NonNull<OnePerStart>);

impl Drop for OnePerStartPtr {
    fn drop(&mut self) {
        // SAFETY: made by `Box::leak` in `install`, freed only here, once;
        // its CQ is destroyed (the field drops after the CQ), so no entry
        // reads it any more.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// `next_poll` of a [`OnePerStart`] CQ: ends the provider's poll and
/// starts the next one.
unsafe extern "C" fn next_poll_one_per_start(cq: *mut ffi::ibv_cq_ex) -> i32 {
    // SAFETY: installed only with its `OnePerStart`, which outlives every
    // poll; called within a poll, as `ibv_next_poll` is.
    unsafe {
        let this = OnePerStart::of(cq);
        (this.end_poll)(cq);
        let mut attr = ffi::ibv_poll_cq_attr::default();
        let rc = (this.start_poll)(cq, &mut attr);
        if rc != 0 {
            this.ended.set(true);
        }
        rc
    }
}

/// `end_poll` of a [`OnePerStart`] CQ: ends the provider's poll, unless a
/// `next_poll` already did.
unsafe extern "C" fn end_poll_one_per_start(cq: *mut ffi::ibv_cq_ex) {
    // SAFETY: as in `next_poll_one_per_start`.
    unsafe {
        let this = OnePerStart::of(cq);
        if !this.ended.replace(false) {
            (this.end_poll)(cq);
        }
    }
}

/// Checks, once, that the provider filled every poll entry of `cq` a poll
/// calls: the hot path then calls them straight from `struct ibv_cq_ex`,
/// as the header's `ibv_start_poll` / `ibv_wc_read_*` do.
///
/// # Safety
/// `cq` is a live extended CQ.
unsafe fn check_poll_entries(cq: NonNull<ffi::ibv_cq_ex>, device: &str) -> Result<()> {
    // SAFETY: the caller's promise.
    let c = unsafe { cq.as_ref() };
    let filled = c.start_poll.is_some()
        && c.next_poll.is_some()
        && c.end_poll.is_some()
        && c.read_opcode.is_some()
        && c.read_vendor_err.is_some()
        && c.read_byte_len.is_some()
        && c.read_imm_data.is_some()
        && c.read_qp_num.is_some()
        && c.read_wc_flags.is_some();
    if filled {
        Ok(())
    } else {
        Err(Error::Unsupported {
            what: format!(
                "the provider of {device} left an extended-CQ poll entry NULL \
                 (start/next/end_poll, read_opcode, read_vendor_err, read_byte_len, \
                 read_imm_data, read_qp_num or read_wc_flags)"
            ),
        })
    }
}

/// What the CQ reports for each completion.
const WC_FLAGS: u64 = ffi::IBV_WC_EX_WITH_BYTE_LEN as u64
    | ffi::IBV_WC_EX_WITH_IMM as u64
    | ffi::IBV_WC_EX_WITH_QP_NUM as u64;

impl CompletionQueue {
    /// Creates a CQ with room for at least `cqe` completions. Its waits
    /// poll (spinning, then yielding, then sleeping 50 µs at a time): see
    /// [`with_channel`](Self::with_channel) for a CQ whose waits sleep in
    /// the kernel.
    pub fn new(ctx: &Context, cqe: u32) -> Result<Self> {
        Self::create(ctx, cqe, None)
    }

    /// Creates a CQ, on `channel` when given (of `ctx`).
    pub(crate) fn create(
        ctx: &Context,
        cqe: u32,
        channel: Option<&CompletionChannel>,
    ) -> Result<Self> {
        if cqe == 0 || cqe > i32::MAX as u32 {
            return Err(Error::OutOfRange {
                what: "CQ entries",
                value: u64::from(cqe),
                limit: format!("1 to {} (and the device's max_cqe)", i32::MAX),
            });
        }
        let mut attr = ffi::ibv_cq_init_attr_ex {
            cqe,
            wc_flags: WC_FLAGS,
            channel: channel.map_or(std::ptr::null_mut(), CompletionChannel::as_ptr),
            ..Default::default()
        };
        // SAFETY: the context is open; `attr` is a valid, initialised
        // attribute struct; NULL is handled.
        let cq = unsafe { ffi::ibv_create_cq_ex(ctx.as_ptr(), &mut attr) };
        let cq = NonNull::new(cq).ok_or_else(|| {
            Error::last_os(
                "ibv_create_cq_ex",
                format!("{cqe} entries on {}", ctx.name()),
            )
        })?;
        // SAFETY: `cq` is a live CQ; `cqe` is the capacity it got.
        let capacity = unsafe { (*ffi::ibv_cq_ex_to_cq(cq.as_ptr())).cqe };
        let mut inner = CqInner {
            cq,
            owned: true,
            capacity: u32::try_from(capacity).unwrap_or(cqe),
            one_per_start: None,
            channel: channel.cloned(),
            ctx: ctx.clone(),
        };
        if let Some(channel) = channel {
            // SAFETY: just created on `channel`, and not armed; `inner`
            // detaches it before destroying it.
            unsafe { channel.attach(cq_of(cq)) };
        }
        // SAFETY: a live extended CQ (destroyed by `inner` on failure).
        unsafe { check_poll_entries(cq, ctx.name()) }?;
        let soft_roce = ctx
            .query_device()
            .is_ok_and(|a| a.vendor_id == SOFT_ROCE_VENDOR_ID);
        let overruns = || match NonNull::new(ctx.as_ptr()) {
            // SAFETY: an open context, of a soft-RoCE device.
            Some(c) => unsafe { soft_roce_probe::end_poll_overruns(c) },
            None => true,
        };
        if soft_roce && overruns() {
            // SAFETY: just created and checked; nothing polls it yet, and
            // `cq_context` is unused (NULL at creation).
            inner.one_per_start = Some(unsafe { OnePerStart::install(cq) });
        }
        Ok(CompletionQueue {
            cq,
            attr: ffi::ibv_poll_cq_attr::default(),
            backlog: VecDeque::new(),
            completions: Vec::new(),
            inner: Arc::new(inner),
        })
    }

    /// Wraps an extended CQ created elsewhere; the handle does not destroy it.
    ///
    /// # Safety
    ///
    /// `cq` must be a live CQ of `ctx`, created with `ibv_create_cq_ex` with
    /// at least `IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
    /// IBV_WC_EX_WITH_QP_NUM` in its `wc_flags`, polled by nobody else,
    /// its poll entries left as the provider set them, and kept alive
    /// until this handle and the QPs made with it are dropped.
    /// Fails with [`Error::Unsupported`] when the provider left a poll
    /// entry NULL. The handle polls as ibv_create_cq_ex(3) says; for a
    /// soft-RoCE CQ use [`CompletionQueue::new`], which works around that
    /// provider's `next_poll` (the device is not queried here).
    pub unsafe fn from_raw(ctx: &Context, cq: NonNull<ffi::ibv_cq_ex>) -> Result<Self> {
        // SAFETY: the caller promises a live CQ.
        unsafe { check_poll_entries(cq, ctx.name()) }?;
        // SAFETY: as above.
        let capacity = unsafe { (*ffi::ibv_cq_ex_to_cq(cq.as_ptr())).cqe };
        Ok(CompletionQueue {
            cq,
            attr: ffi::ibv_poll_cq_attr::default(),
            backlog: VecDeque::new(),
            completions: Vec::new(),
            inner: Arc::new(CqInner {
                cq,
                owned: false,
                capacity: u32::try_from(capacity).unwrap_or(0),
                one_per_start: None,
                channel: None,
                ctx: ctx.clone(),
            }),
        })
    }

    /// Whether this CQ polls one completion per `start_poll` / `end_poll`
    /// pair of its provider: a CQ of a soft-RoCE provider whose `next_poll`
    /// overruns the CQ when it finds it empty (rdma-core 44 to 54), as the
    /// first soft-RoCE CQ of the process found out. Its `next_poll` and
    /// `end_poll` entries are then the crate's, which C code given
    /// [`as_ptr`](Self::as_ptr) calls too. False on every other CQ.
    pub fn polls_one_completion_per_start(&self) -> bool {
        self.inner.one_per_start.is_some()
    }

    /// The raw extended CQ, valid while this handle lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_cq_ex {
        self.cq.as_ptr()
    }

    /// How many completions the CQ holds (at least what was asked).
    pub fn capacity(&self) -> u32 {
        self.inner.capacity
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The completion channel the CQ's events go to, if it was created on
    /// one ([`with_channel`](Self::with_channel)).
    pub fn channel(&self) -> Option<&CompletionChannel> {
        self.inner.channel.as_ref()
    }

    /// A share of the CQ that keeps it alive (held by the QPs that complete
    /// on it).
    pub(crate) fn share(&self) -> Arc<CqInner> {
        Arc::clone(&self.inner)
    }

    /// Polls up to `max` completions, oldest first, handing each to `f`;
    /// returns how many it handed over. `Ok(0)` when the CQ is empty.
    ///
    /// The extended poll of ibv_create_cq_ex(3) (`ibv_start_poll`,
    /// `ibv_next_poll`, `ibv_end_poll`) with nothing in between but `f`:
    /// `f` reads what it needs through the [`PolledWc`] accessors, each a
    /// direct call of the provider's reader, and nothing is copied or
    /// converted that it does not ask for. The view cannot leave `f`: the
    /// CQ moves on when `f` returns. The poll is ended on every path: after
    /// `max` completions, when the CQ runs empty, on an error of the
    /// provider (returned, after the completions already handed over) and
    /// when `f` panics. `f` cannot reach the CQ (it is borrowed for the
    /// poll), so it cannot start a poll of it within this one. Since the
    /// provider may hold the CQ's lock meanwhile (mlx5 does), a QP dropped
    /// in `f` is destroyed when the poll ends, and [`QpEx::reset`](crate::QpEx::reset)
    /// is refused in `f`.
    ///
    /// Completions a scoped post ([`QpEx::post_and_wait`](crate::QpEx::post_and_wait))
    /// took from the device but did not own are handed out first, oldest
    /// first, before the device is polled again ([`backlog_len`](Self::backlog_len)).
    ///
    /// ```no_run
    /// # fn demo(cq: &mut mlx5dv::CompletionQueue) -> mlx5dv::Result<()> {
    /// let (mut bytes, mut failed) = (0u64, Vec::new());
    /// let n = cq.poll_each(32, |wc| {
    ///     if wc.is_success() {
    ///         bytes += u64::from(wc.byte_len());
    ///     } else {
    ///         failed.push((wc.wr_id(), wc.status()));
    ///     }
    /// })?;
    /// println!("{n} completions, {bytes} bytes, failed: {failed:?}");
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn poll_each<F>(&mut self, max: usize, f: F) -> Result<usize>
    where
        F: FnMut(&PolledWc<'_>),
    {
        if !self.backlog.is_empty() {
            return Ok(self.replay(max, f));
        }
        self.poll_provider(max, f)
    }

    /// [`poll_each`](Self::poll_each) of the device's completions only,
    /// leaving the backlog alone.
    #[inline(always)]
    pub(crate) fn poll_provider<F>(&mut self, max: usize, mut f: F) -> Result<usize>
    where
        F: FnMut(&PolledWc<'_>),
    {
        if max == 0 {
            return Ok(0);
        }
        let cq = self.cq;
        let wc = PolledWc {
            cq,
            _poll: PhantomData,
        };
        // SAFETY: the CQ is live, its entries were checked at creation, and
        // no poll of it is in progress (`&mut self`); `attr` is ours,
        // writable, and zero (`start_poll` only reads it).
        let rc = unsafe { entry!(cq, start_poll, &mut self.attr) };
        if rc != 0 {
            return if rc == libc::ENOENT {
                Ok(0)
            } else {
                Err(poll_failed(cq, "ibv_start_poll", rc))
            };
        }
        let poll = EndPoll::new(cq);
        // Written as `f; while n < max { next_poll; f }`, the count is one
        // register, the same at every exit, and the back edge is the test
        // of the count (no copy of it, no extra jump). `f` is inlined
        // twice.
        f(&wc);
        let mut n = 1;
        while n < max {
            // SAFETY: a poll is in progress (ended by `poll`, not by `f`,
            // which cannot reach the CQ).
            let rc = unsafe { entry!(cq, next_poll) };
            if rc != 0 {
                if rc == libc::ENOENT {
                    drop(poll);
                    return Ok(n);
                }
                // The error path ends the poll itself: nothing of `poll`
                // has to be kept for it.
                std::mem::forget(poll);
                return Err(next_poll_failed(cq, rc));
            }
            f(&wc);
            n += 1;
        }
        drop(poll);
        Ok(max)
    }

    /// Hands up to `max` completions of the backlog to `f`, through a
    /// stand-in CQ whose readers return the stored fields; returns how many.
    #[cold]
    #[inline(never)]
    fn replay<F>(&mut self, max: usize, mut f: F) -> usize
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

    /// Moves up to `max` completions into `out` and returns how many
    /// ([`poll_each`](Self::poll_each), every field of each read into a
    /// [`WorkCompletion`]).
    ///
    /// Room for up to 64 is reserved first (more grows as they come, so a
    /// `max` of `usize::MAX` on an empty CQ allocates little); each field
    /// is then written into its place in `out` as it is read, as C writes
    /// `wc->field = ibv_wc_read_field(cq)`, so nothing is held across the
    /// next read.
    pub fn poll_into(&mut self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize> {
        // At most the backlog and what the CQ holds come out of one poll;
        // reserved up to a bound, whatever `max` says.
        out.reserve(
            max.min(self.backlog.len() + self.inner.capacity as usize)
                .min(POLL_INTO_RESERVE),
        );
        self.poll_each(max, |wc| {
            if out.len() == out.capacity() {
                out.reserve(1);
            }
            let len = out.len();
            // SAFETY: `len` is below the capacity: the slot is in `out`'s
            // allocation and uninitialised; written whole, it is counted.
            unsafe {
                write_wc(out.as_mut_ptr().add(len), wc);
                out.set_len(len + 1);
            }
        })
    }

    /// Polls until `n` completions have arrived or `timeout` has passed,
    /// and returns them in arrival order. On timeout, the error says how
    /// many of the `n` came (use [`wait_into`](Self::wait_into) or
    /// [`poll_into`](Self::poll_into) to keep partial results).
    ///
    /// The completions are kept in the CQ's own buffer, which the next
    /// wait reuses: a loop of waits allocates nothing once the buffer has
    /// grown to its largest `n`. They borrow the CQ until you are done
    /// with them; copy them out (`.to_vec()`, or `wait_into` a vector of
    /// yours) to keep them past the next call on the CQ.
    ///
    /// While the CQ is empty, a CQ made on a channel
    /// ([`with_channel`](Self::with_channel)) is armed and the wait sleeps
    /// in the kernel until its event or the timeout; any other spins, then
    /// yields, then sleeps 50 µs at a time. The timeout counts from the
    /// first poll that finds the CQ empty: a wait whose completions are
    /// already there reads no clock.
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # use std::time::Duration;
    /// # fn f(cq: &mut CompletionQueue) -> Result<()> {
    /// for wc in cq.wait(2, Duration::from_secs(5))? {
    ///     let wc = wc.ok()?; // an error status becomes an Err
    ///     println!("{} done: {} bytes", wc.wr_id, wc.byte_len);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait(&mut self, n: usize, timeout: Duration) -> Result<&[WorkCompletion]> {
        let mut out = self.take_completions();
        let r = self.wait_into(&mut out, n, timeout);
        let wcs = self.give_completions(out);
        r?;
        Ok(wcs)
    }

    /// The buffer of [`wait`](Self::wait), emptied, for a wait or scoped
    /// post to fill and give back (`completions`).
    #[inline]
    pub(crate) fn take_completions(&mut self) -> Vec<WorkCompletion> {
        let mut out = std::mem::take(&mut self.completions);
        out.clear();
        out
    }

    /// Gives back the buffer [`take_completions`](Self::take_completions)
    /// lent, and returns what it holds.
    #[inline]
    pub(crate) fn give_completions(&mut self, out: Vec<WorkCompletion>) -> &[WorkCompletion] {
        self.completions = out;
        &self.completions
    }

    /// Like [`wait`](Self::wait), but appends to `out`, which keeps what
    /// arrived even on timeout.
    pub fn wait_into(
        &mut self,
        out: &mut Vec<WorkCompletion>,
        n: usize,
        timeout: Duration,
    ) -> Result<()> {
        // The clock is read once a poll has found the CQ empty, not before.
        let mut clock: Option<(Instant, Option<Instant>)> = None;
        let mut got = 0;
        let mut idle_rounds = 0u32;
        while got < n {
            let k = self.poll_into(out, n - got)?;
            got += k;
            if k > 0 {
                idle_rounds = 0;
                continue;
            }
            let (start, deadline) = *clock.get_or_insert_with(|| {
                let start = Instant::now();
                (start, start.checked_add(timeout))
            });
            if start.elapsed() >= timeout {
                return Err(Error::Timeout {
                    what: format!(
                        "{n} completions on {} ({got} arrived)",
                        self.inner.ctx.name()
                    ),
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
            got += self.idle(&mut idle_rounds, deadline, |cq| cq.poll_into(out, n - got))?;
        }
        Ok(())
    }

    /// What a wait does when a poll found nothing. On a CQ with a channel:
    /// arm, poll again with `poll`, then sleep in the kernel until an event
    /// or `deadline` ([`sleep_on_channel`](Self::sleep_on_channel)).
    /// Without one: spin briefly, then back off ([`back_off`]). Returns what
    /// `poll` found (0 when it was not called).
    #[inline]
    pub(crate) fn idle<F>(
        &mut self,
        rounds: &mut u32,
        deadline: Option<Instant>,
        poll: F,
    ) -> Result<usize>
    where
        F: FnOnce(&mut CompletionQueue) -> Result<usize>,
    {
        if self.inner.channel.is_some() {
            return self.sleep_on_channel(deadline, poll);
        }
        back_off(rounds);
        Ok(0)
    }
}

/// Spins briefly, then yields, then sleeps 50 µs at a time, so that a wait
/// on a CQ without a channel does not burn a core for long.
pub(crate) fn back_off(rounds: &mut u32) {
    // Saturating: a wait of days must not overflow (and panic, unwinding
    // out of a scoped post whose work requests still run).
    *rounds = rounds.saturating_add(1);
    if *rounds < 1000 {
        std::hint::spin_loop();
    } else if *rounds < 2000 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// The error of a failed `start_poll` / `next_poll` of `cq`, naming its
/// device (found through the CQ, so that a poll keeps nothing else at hand
/// for its errors).
#[cold]
#[inline(never)]
fn poll_failed(cq: NonNull<ffi::ibv_cq_ex>, call: &'static str, rc: i32) -> Error {
    // SAFETY: `cq` is live; its context and the context's device, when
    // set, are live too.
    let device = unsafe {
        let ctx = (*cq.as_ptr()).context;
        if ctx.is_null() || (*ctx).device.is_null() {
            "an unnamed device".to_string()
        } else {
            crate::device::device_name((*ctx).device)
        }
    };
    Error::verbs(call, rc, device)
}

/// Ends the poll `next_poll` failed in, and returns its error.
#[cold]
#[inline(never)]
fn next_poll_failed(cq: NonNull<ffi::ibv_cq_ex>, rc: i32) -> Error {
    // SAFETY: called instead of dropping the `EndPoll` of the poll in
    // progress: it ends that poll once.
    unsafe { entry!(cq, end_poll) };
    leave_poll();
    poll_failed(cq, "ibv_next_poll", rc)
}

/// Ends the poll in progress on a CQ when dropped (`ibv_end_poll`): on
/// every return of a poll, and when its callback panics. Made right after
/// a successful `start_poll`; while it lives, this thread is inside a
/// provider poll ([`in_provider_poll`]).
struct EndPoll(NonNull<ffi::ibv_cq_ex>);

impl EndPoll {
    #[inline(always)]
    fn new(cq: NonNull<ffi::ibv_cq_ex>) -> Self {
        // Through `with`, not `LocalKey::set`, which goes through a call
        // that the compiler does not always inline.
        POLLS.with(|p| p.set(p.get() + 1));
        EndPoll(cq)
    }
}

impl Drop for EndPoll {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: made right after a successful start_poll of this live CQ,
        // whose entries were checked at creation, and dropped once: it ends
        // that poll.
        unsafe { entry!(self.0, end_poll) }
        leave_poll();
    }
}

// A provider may hold a CQ's lock from `start_poll` to `end_poll` (mlx5
// does), and some verbs calls take the locks of a QP's CQs (mlx5's
// `ibv_destroy_qp`, and `ibv_modify_qp` to RESET, which clean the CQs of
// the QP's entries). Made from inside a poll callback on the thread that
// holds the lock, such a call would wait for ever on itself. The crate
// therefore counts, per thread, the provider polls in progress: a QP
// dropped meanwhile is destroyed when the outermost poll ends, and a reset
// is refused ([`in_provider_poll`]).
thread_local! {
    /// Provider polls in progress on this thread, plus [`DEFERRED_BIT`]
    /// when destructions wait for the last of them to end.
    static POLLS: Cell<u32> = const { Cell::new(0) };
    /// What waits for the end of this thread's polls.
    static DEFERRED: RefCell<Vec<Box<dyn FnOnce()>>> = const { RefCell::new(Vec::new()) };
}

/// Set in [`POLLS`] while [`DEFERRED`] holds work.
const DEFERRED_BIT: u32 = 1 << 31;

#[inline(always)]
fn leave_poll() {
    let left = POLLS.with(|p| {
        let left = p.get() - 1;
        p.set(left);
        left
    });
    if left == DEFERRED_BIT {
        run_deferred();
    }
}

#[cold]
#[inline(never)]
fn run_deferred() {
    POLLS.set(0);
    // One at a time: a destruction that drops the last share of a CQ (or
    // anything else) runs with the list released.
    while let Some(f) = DEFERRED.with(|d| d.borrow_mut().pop()) {
        f();
    }
}

/// Whether this thread is inside a provider poll of some CQ (a
/// [`CompletionQueue::poll_each`] callback, at any depth).
pub(crate) fn in_provider_poll() -> bool {
    POLLS.get() & !DEFERRED_BIT != 0
}

/// Runs `f` when this thread's provider polls have all ended (at once when
/// none is in progress).
pub(crate) fn after_polls(f: Box<dyn FnOnce()>) {
    if !in_provider_poll() {
        f();
        return;
    }
    DEFERRED.with(|d| d.borrow_mut().push(f));
    POLLS.set(POLLS.get() | DEFERRED_BIT);
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

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("device", &self.inner.ctx.name())
            .field("capacity", &self.inner.capacity)
            .field("channel", &self.inner.channel.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::undocumented_unsafe_blocks)]

    use super::*;
    use std::collections::HashSet;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    #[test]
    fn back_off_saturates_instead_of_overflowing() {
        // A wait of 2^32 idle rounds (days) must not panic in a build with
        // overflow checks: it would unwind out of a scoped post.
        let mut rounds = u32::MAX - 1;
        back_off(&mut rounds);
        back_off(&mut rounds);
        assert_eq!(rounds, u32::MAX);
    }

    #[test]
    fn status_round_trips_and_prints_rdma_cores_text() {
        for raw in 0..=ffi::IBV_WC_TM_RNDV_INCOMPLETE + 1 {
            assert_eq!(WcStatus::from_raw(raw).to_raw(), raw);
        }
        assert_eq!(WcStatus::SUCCESS.to_string(), "success");
        assert_eq!(WcStatus::REM_ACCESS_ERR.to_string(), "remote access error");
        assert_eq!(
            WcStatus::WR_FLUSH_ERR.to_string(),
            "Work Request Flushed Error"
        );
    }

    #[test]
    fn status_and_opcode_are_the_raw_u32_with_named_consts() {
        assert_eq!(std::mem::size_of::<WcStatus>(), 4);
        assert_eq!(std::mem::size_of::<Option<WcStatus>>(), 8);
        assert_eq!(std::mem::size_of::<WcOpcode>(), 4);
        assert_eq!(WcStatus::SUCCESS.to_raw(), ffi::IBV_WC_SUCCESS);
        assert_eq!(WcStatus::LOC_PROT_ERR.to_raw(), ffi::IBV_WC_LOC_PROT_ERR);
        assert_eq!(WcStatus::GENERAL_ERR.to_raw(), ffi::IBV_WC_GENERAL_ERR);
        assert_eq!(WcOpcode::RDMA_WRITE.to_raw(), ffi::IBV_WC_RDMA_WRITE);
        assert_eq!(WcOpcode::ATOMIC_WRITE.to_raw(), ffi::IBV_WC_ATOMIC_WRITE);
        assert_eq!(
            WcOpcode::RECV_RDMA_WITH_IMM.to_raw(),
            ffi::IBV_WC_RECV_RDMA_WITH_IMM
        );
        assert!(WcStatus::SUCCESS.is_success());
        assert!(!WcStatus::from_raw(1).is_success());
        // Usable in patterns, unknown values included.
        let kind = |s: WcStatus| match s {
            WcStatus::SUCCESS => "ok",
            WcStatus::RETRY_EXC_ERR | WcStatus::RNR_RETRY_EXC_ERR => "retry",
            _ => "other",
        };
        assert_eq!(kind(WcStatus::from_raw(ffi::IBV_WC_SUCCESS)), "ok");
        assert_eq!(
            kind(WcStatus::from_raw(ffi::IBV_WC_RNR_RETRY_EXC_ERR)),
            "retry"
        );
        assert_eq!(kind(WcStatus::from_raw(77)), "other");
        // Every status rdma-core defines has its own name, and so has every
        // opcode: no two consts share a value.
        let names: HashSet<_> = (0..=ffi::IBV_WC_TM_RNDV_INCOMPLETE)
            .map(|raw| WcStatus::from_raw(raw).name().expect("a named status"))
            .collect();
        assert_eq!(names.len(), ffi::IBV_WC_TM_RNDV_INCOMPLETE as usize + 1);
        let ops: HashSet<_> = (0..=0x1_0000)
            .filter_map(|raw| WcOpcode::from_raw(raw).name())
            .collect();
        assert_eq!(ops.len(), 19);
    }

    #[test]
    fn debug_prints_the_consts_name_or_the_number() {
        assert_eq!(format!("{:?}", WcStatus::SUCCESS), "SUCCESS");
        assert_eq!(
            format!("{:?}", WcStatus::REM_INV_RD_REQ_ERR),
            "REM_INV_RD_REQ_ERR"
        );
        assert_eq!(format!("{:?}", WcStatus::from_raw(1000)), "WcStatus(1000)");
        assert_eq!(
            format!("{:?}", WcOpcode::RECV_RDMA_WITH_IMM),
            "RECV_RDMA_WITH_IMM"
        );
        assert_eq!(format!("{:?}", WcOpcode::RAW_WQE), "RAW_WQE");
        assert_eq!(
            format!("{:?}", WcOpcode::from_raw(0xFFFF)),
            "WcOpcode(65535)"
        );
        assert_eq!(
            format!("{:#x?}", WcOpcode::from_raw(0xFFFF)),
            "WcOpcode(\n    0xffff,\n)"
        );
    }

    #[test]
    fn mlx5_opcodes_are_the_driver_opcodes() {
        assert_eq!(WcOpcode::from_raw(ffi::IBV_WC_DRIVER1), WcOpcode::UMR);
        assert_eq!(WcOpcode::from_raw(ffi::IBV_WC_DRIVER2), WcOpcode::RAW_WQE);
        assert_eq!(WcOpcode::from_raw(ffi::IBV_WC_DRIVER3), WcOpcode::MEMCPY);
        assert_eq!(WcOpcode::from_raw(ffi::IBV_WC_RECV), WcOpcode::RECV);
        assert_eq!(WcOpcode::from_raw(0xFFFF).to_raw(), 0xFFFF);
        assert_ne!(WcOpcode::from_raw(0xFFFF), WcOpcode::MEMCPY);
    }

    // ----- polling a scripted provider -----

    /// One completion the scripted CQ serves.
    #[derive(Clone, Copy)]
    struct Cqe {
        wr_id: u64,
        status: u32,
        opcode: u32,
        byte_len: u32,
        flags: u32,
        /// Big-endian on the wire, as `read_imm_data` returns it.
        imm_data: u32,
        qp_num: u32,
        vendor_err: u32,
    }

    fn cqe(wr_id: u64) -> Cqe {
        Cqe {
            wr_id,
            status: ffi::IBV_WC_SUCCESS,
            opcode: ffi::IBV_WC_RDMA_WRITE,
            byte_len: 64 + wr_id as u32,
            flags: 0,
            imm_data: 0,
            qp_num: 0x100 + wr_id as u32,
            vendor_err: 0,
        }
    }

    /// A provider CQ with a queue of completions, served as a real
    /// provider does: `start_poll` positions on the oldest unconsumed one,
    /// `next_poll` consumes it and moves on, `end_poll` consumes the one
    /// positioned on. Every entry is logged; an entry called out of order
    /// (a reader or `next_poll` outside a poll, a `start_poll` inside one)
    /// is logged as a violation.
    #[repr(C)]
    struct ScriptCq {
        cq: ffi::ibv_cq_ex,
        cqes: Vec<Cqe>,
        /// The oldest unconsumed completion.
        head: usize,
        in_poll: bool,
        /// The `n`-th `start_poll` from now (1: the next) returns this
        /// errno instead of polling.
        start_err: Option<(u32, i32)>,
        /// `next_poll` fails with this when moving to this index.
        next_err: Option<(usize, i32)>,
        log: Vec<&'static str>,
    }

    unsafe fn script<'a>(cq: *mut ffi::ibv_cq_ex) -> &'a mut ScriptCq {
        unsafe { &mut *cq.cast::<ScriptCq>() }
    }

    impl ScriptCq {
        fn position(&mut self) {
            let c = self.cqes[self.head];
            self.cq.wr_id = c.wr_id;
            self.cq.status = c.status;
        }

        fn read(&mut self, entry: &'static str) -> Cqe {
            self.log.push(entry);
            if !self.in_poll || self.head >= self.cqes.len() {
                self.log.push("VIOLATION: read outside a poll");
                return cqe(u64::MAX);
            }
            self.cqes[self.head]
        }
    }

    unsafe extern "C" fn start_poll(
        cq: *mut ffi::ibv_cq_ex,
        attr: *mut ffi::ibv_poll_cq_attr,
    ) -> i32 {
        let s = unsafe { script(cq) };
        s.log.push("start_poll");
        if s.in_poll {
            s.log.push("VIOLATION: start_poll inside a poll");
        }
        if unsafe { (*attr).comp_mask } != 0 {
            s.log.push("VIOLATION: comp_mask");
        }
        if let Some((nth, e)) = s.start_err {
            if nth == 1 {
                s.start_err = None;
                return e;
            }
            s.start_err = Some((nth - 1, e));
        }
        if s.head == s.cqes.len() {
            return libc::ENOENT;
        }
        s.in_poll = true;
        s.position();
        0
    }

    unsafe extern "C" fn next_poll(cq: *mut ffi::ibv_cq_ex) -> i32 {
        let s = unsafe { script(cq) };
        s.log.push("next_poll");
        if !s.in_poll {
            s.log.push("VIOLATION: next_poll outside a poll");
        }
        if let Some((at, e)) = s.next_err {
            if at == s.head + 1 {
                s.next_err = None;
                return e;
            }
        }
        s.head += 1;
        if s.head == s.cqes.len() {
            return libc::ENOENT;
        }
        s.position();
        0
    }

    unsafe extern "C" fn end_poll(cq: *mut ffi::ibv_cq_ex) {
        let s = unsafe { script(cq) };
        s.log.push("end_poll");
        if !s.in_poll {
            s.log.push("VIOLATION: end_poll outside a poll");
        }
        s.in_poll = false;
        s.head = (s.head + 1).min(s.cqes.len());
    }

    unsafe extern "C" fn read_opcode(cq: *mut ffi::ibv_cq_ex) -> ffi::ibv_wc_opcode {
        unsafe { script(cq) }.read("read_opcode").opcode
    }
    unsafe extern "C" fn read_vendor_err(cq: *mut ffi::ibv_cq_ex) -> u32 {
        unsafe { script(cq) }.read("read_vendor_err").vendor_err
    }
    unsafe extern "C" fn read_byte_len(cq: *mut ffi::ibv_cq_ex) -> u32 {
        unsafe { script(cq) }.read("read_byte_len").byte_len
    }
    unsafe extern "C" fn read_imm_data(cq: *mut ffi::ibv_cq_ex) -> ffi::__be32 {
        unsafe { script(cq) }.read("read_imm_data").imm_data
    }
    unsafe extern "C" fn read_qp_num(cq: *mut ffi::ibv_cq_ex) -> u32 {
        unsafe { script(cq) }.read("read_qp_num").qp_num
    }
    unsafe extern "C" fn read_wc_flags(cq: *mut ffi::ibv_cq_ex) -> u32 {
        unsafe { script(cq) }.read("read_wc_flags").flags
    }

    /// A handle over a scripted CQ; field order is drop order.
    struct Fx {
        cq: CompletionQueue,
        raw: Box<ScriptCq>,
        _ctx: Box<ffi::ibv_context>,
        _dev: Box<ffi::ibv_device>,
    }

    impl Fx {
        fn new(cqes: Vec<Cqe>) -> Fx {
            Self::with(cqes, false)
        }

        /// `one_per_start`: the CQ gets the entries a soft-RoCE CQ gets.
        fn with(cqes: Vec<Cqe>, one_per_start: bool) -> Fx {
            let mut dev: Box<ffi::ibv_device> = Box::default();
            for (d, s) in dev.name.iter_mut().zip(b"fake0") {
                *d = *s as _;
            }
            let mut ctx: Box<ffi::ibv_context> = Box::default();
            ctx.device = &mut *dev;
            let context = Context::fake(NonNull::from(&mut *ctx), "fake0", false);
            let mut raw = Box::new(ScriptCq {
                cq: ffi::ibv_cq_ex {
                    context: &mut *ctx,
                    cqe: 64,
                    start_poll: Some(start_poll),
                    next_poll: Some(next_poll),
                    end_poll: Some(end_poll),
                    read_opcode: Some(read_opcode),
                    read_vendor_err: Some(read_vendor_err),
                    read_byte_len: Some(read_byte_len),
                    read_imm_data: Some(read_imm_data),
                    read_qp_num: Some(read_qp_num),
                    read_wc_flags: Some(read_wc_flags),
                    ..Default::default()
                },
                cqes,
                head: 0,
                in_poll: false,
                start_err: None,
                next_err: None,
                log: Vec::new(),
            });
            let ptr = NonNull::from(&mut raw.cq);
            let mut cq = unsafe { CompletionQueue::from_raw(&context, ptr) }.unwrap();
            if one_per_start {
                Arc::get_mut(&mut cq.inner).unwrap().one_per_start =
                    Some(unsafe { OnePerStart::install(ptr) });
            }
            Fx {
                cq,
                raw,
                _ctx: ctx,
                _dev: dev,
            }
        }

        /// The entries called since the last call, checked for violations.
        fn log(&mut self) -> Vec<&'static str> {
            let log = std::mem::take(&mut self.raw.log);
            assert!(!log.iter().any(|e| e.starts_with("VIOLATION")), "{log:?}");
            log
        }
    }

    fn ids(n: u64) -> Vec<Cqe> {
        (0..n).map(cqe).collect()
    }

    #[test]
    fn every_accessor_returns_what_the_provider_reported() {
        let cqes = vec![
            Cqe {
                wr_id: 0xFEDC_BA98_7654_3210,
                status: ffi::IBV_WC_SUCCESS,
                opcode: ffi::IBV_WC_RECV_RDMA_WITH_IMM,
                byte_len: 0xF000_0001,
                flags: ffi::IBV_WC_WITH_IMM | ffi::IBV_WC_GRH,
                imm_data: 0x1234_5678u32.to_be(),
                qp_num: 0x00FF_FFFE,
                vendor_err: 0,
            },
            Cqe {
                wr_id: 7,
                status: ffi::IBV_WC_SUCCESS,
                opcode: ffi::IBV_WC_RECV,
                byte_len: 0,
                flags: ffi::IBV_WC_WITH_INV,
                imm_data: 0xDEAD_BEEF,
                qp_num: 3,
                vendor_err: 0,
            },
            Cqe {
                wr_id: 8,
                status: ffi::IBV_WC_REM_ACCESS_ERR,
                opcode: 0xABCD,
                byte_len: 5,
                flags: 0x8000_0000,
                imm_data: 0x5555_5555,
                qp_num: 4,
                vendor_err: 0x8765_4321,
            },
        ];
        let mut fx = Fx::new(cqes.clone());
        let mut seen = Vec::new();
        let n = fx
            .cq
            .poll_each(8, |wc| {
                seen.push((
                    wc.wr_id(),
                    wc.status(),
                    wc.is_success(),
                    wc.opcode(),
                    wc.byte_len(),
                    wc.wc_flags(),
                    wc.imm(),
                    wc.invalidated_rkey(),
                    wc.qp_num(),
                    wc.vendor_err(),
                    wc.as_ptr(),
                ))
            })
            .unwrap();
        assert_eq!(n, 3);
        let cq = &mut fx.raw.cq as *mut ffi::ibv_cq_ex;
        assert_eq!(
            seen,
            [
                (
                    0xFEDC_BA98_7654_3210,
                    WcStatus::SUCCESS,
                    true,
                    WcOpcode::RECV_RDMA_WITH_IMM,
                    0xF000_0001,
                    WcFlags::WITH_IMM | WcFlags::GRH,
                    Some(0x1234_5678),
                    None,
                    0x00FF_FFFE,
                    0,
                    cq,
                ),
                (
                    7,
                    WcStatus::SUCCESS,
                    true,
                    WcOpcode::RECV,
                    0,
                    WcFlags::WITH_INV,
                    None,
                    Some(0xDEAD_BEEF),
                    3,
                    0,
                    cq,
                ),
                (
                    8,
                    WcStatus::REM_ACCESS_ERR,
                    false,
                    WcOpcode::from_raw(0xABCD),
                    5,
                    WcFlags::from_bits_retain(0x8000_0000),
                    None,
                    None,
                    4,
                    0x8765_4321,
                    cq,
                ),
            ]
        );
        fx.log();

        // WorkCompletion::from reads the same, every field.
        let mut fx = Fx::new(cqes);
        let mut owned = Vec::new();
        let mut errors = Vec::new();
        fx.cq
            .poll_each(8, |wc| {
                owned.push(WorkCompletion::from(wc));
                errors.push(wc.ok().map_err(|e| e.to_string()));
            })
            .unwrap();
        let want: Vec<_> = seen
            .iter()
            .map(|s| WorkCompletion {
                wr_id: s.0,
                status: s.1,
                opcode: s.3,
                byte_len: s.4,
                imm: s.6,
                invalidated_rkey: s.7,
                qp_num: s.8,
                vendor_err: s.9,
            })
            .collect();
        assert_eq!(owned, want);
        assert_eq!(
            errors,
            [
                Ok(()),
                Ok(()),
                Err(
                    "work request 8 on QP 0x4 completed with remote access error \
                     (vendor error 0x87654321)"
                        .to_string()
                )
            ]
        );
        assert_eq!(format!("{:?}", owned[0].opcode), "RECV_RDMA_WITH_IMM");
        fx.log();
    }

    #[test]
    fn each_accessor_reads_only_what_it_needs() {
        let mut imm = cqe(1);
        imm.flags = ffi::IBV_WC_WITH_IMM;
        let mut fx = Fx::new(vec![cqe(0), imm]);
        let mut ids = Vec::new();
        fx.cq
            .poll_each(2, |wc| ids.push((wc.wr_id(), wc.status())))
            .unwrap();
        assert_eq!(ids, [(0, WcStatus::SUCCESS), (1, WcStatus::SUCCESS)]);
        // wr_id and status are fields of the CQ: no reader is called.
        assert_eq!(fx.log(), ["start_poll", "next_poll", "end_poll"]);

        let mut fx = Fx::new(vec![cqe(0), imm]);
        let mut got = Vec::new();
        fx.cq.poll_each(2, |wc| got.push(wc.imm())).unwrap();
        assert_eq!(got, [None, Some(0)]);
        // The immediate is read only when the flags say there is one.
        assert_eq!(
            fx.log(),
            [
                "start_poll",
                "read_wc_flags",
                "next_poll",
                "read_wc_flags",
                "read_imm_data",
                "end_poll"
            ]
        );

        let mut fx = Fx::new(vec![cqe(0)]);
        fx.cq
            .poll_each(1, |wc| {
                wc.opcode();
                wc.byte_len();
                wc.qp_num();
                wc.vendor_err();
            })
            .unwrap();
        assert_eq!(
            fx.log(),
            [
                "start_poll",
                "read_opcode",
                "read_byte_len",
                "read_qp_num",
                "read_vendor_err",
                "end_poll"
            ]
        );
    }

    #[test]
    fn max_is_honoured_and_the_rest_stays_for_the_next_poll() {
        let mut fx = Fx::new(ids(5));
        let mut got = Vec::new();
        assert_eq!(fx.cq.poll_each(2, |wc| got.push(wc.wr_id())).unwrap(), 2);
        assert_eq!(got, [0, 1]);
        // No next_poll after the max-th completion.
        assert_eq!(fx.log(), ["start_poll", "next_poll", "end_poll"]);

        assert_eq!(fx.cq.poll_each(1, |wc| got.push(wc.wr_id())).unwrap(), 1);
        assert_eq!(fx.log(), ["start_poll", "end_poll"]);

        // Fewer than max: the poll stops at ENOENT from next_poll.
        assert_eq!(fx.cq.poll_each(32, |wc| got.push(wc.wr_id())).unwrap(), 2);
        assert_eq!(got, [0, 1, 2, 3, 4]);
        assert_eq!(
            fx.log(),
            ["start_poll", "next_poll", "next_poll", "end_poll"]
        );

        // max 0 polls nothing: no entry is called.
        let mut fx = Fx::new(ids(1));
        assert_eq!(fx.cq.poll_each(0, |_| panic!("called")).unwrap(), 0);
        assert_eq!(fx.log(), Vec::<&str>::new());
    }

    #[test]
    fn an_empty_cq_is_zero_and_its_poll_is_not_ended() {
        let mut fx = Fx::new(Vec::new());
        assert_eq!(fx.cq.poll_each(32, |_| panic!("called")).unwrap(), 0);
        // ibv_create_cq_ex(3): no ibv_end_poll after ENOENT from start_poll.
        assert_eq!(fx.log(), ["start_poll"]);
        let mut out = Vec::new();
        assert_eq!(fx.cq.poll_into(&mut out, 32).unwrap(), 0);
        assert!(out.is_empty());
        assert_eq!(fx.log(), ["start_poll"]);
    }

    #[test]
    fn a_start_poll_error_is_returned_without_ending_a_poll() {
        let mut fx = Fx::new(ids(2));
        fx.raw.start_err = Some((1, libc::EIO));
        let e = fx.cq.poll_each(32, |_| panic!("called")).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EIO));
        assert!(
            e.to_string().starts_with("ibv_start_poll failed (fake0)"),
            "{e}"
        );
        assert_eq!(fx.log(), ["start_poll"]);
        // The completions are still there.
        let mut out = Vec::new();
        assert_eq!(fx.cq.poll_into(&mut out, 32).unwrap(), 2);
    }

    #[test]
    fn a_next_poll_error_ends_the_poll_and_is_returned() {
        let mut fx = Fx::new(ids(5));
        fx.raw.next_err = Some((2, libc::EIO));
        let mut got = Vec::new();
        let e = fx.cq.poll_each(32, |wc| got.push(wc.wr_id())).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EIO));
        assert!(
            e.to_string().starts_with("ibv_next_poll failed (fake0)"),
            "{e}"
        );
        // The completions before the error were handed over.
        assert_eq!(got, [0, 1]);
        assert_eq!(
            fx.log(),
            ["start_poll", "next_poll", "next_poll", "end_poll"]
        );
        // poll_into keeps what it read before the error.
        let mut fx = Fx::new(ids(5));
        fx.raw.next_err = Some((3, libc::EAGAIN));
        let mut out = Vec::new();
        assert!(fx.cq.poll_into(&mut out, 32).is_err());
        let ids: Vec<_> = out.iter().map(|c| c.wr_id).collect();
        assert_eq!(ids, [0, 1, 2]);
        assert_eq!(fx.log().last(), Some(&"end_poll"));
    }

    #[test]
    fn a_panicking_callback_ends_the_poll_and_the_cq_still_polls() {
        let mut fx = Fx::new(ids(4));
        let mut got = Vec::new();
        let r = catch_unwind(AssertUnwindSafe(|| {
            fx.cq.poll_each(32, |wc| {
                got.push(wc.wr_id());
                assert!(wc.wr_id() < 1, "stop at {}", wc.wr_id());
            })
        }));
        assert!(r.is_err());
        assert_eq!(got, [0, 1]);
        assert_eq!(fx.log(), ["start_poll", "next_poll", "end_poll"]);
        // The panic ended the poll; the next one goes on with what the
        // provider has left.
        assert_eq!(fx.cq.poll_each(32, |wc| got.push(wc.wr_id())).unwrap(), 2);
        assert_eq!(got, [0, 1, 2, 3]);
        assert_eq!(
            fx.log(),
            ["start_poll", "next_poll", "next_poll", "end_poll"]
        );
    }

    #[test]
    fn one_per_start_pairs_every_completion_with_its_own_start_and_end() {
        let mut fx = Fx::with(ids(3), true);
        let mut got = Vec::new();
        let n = fx
            .cq
            .poll_each(32, |wc| got.push((wc.wr_id(), wc.byte_len())))
            .unwrap();
        assert_eq!(n, 3);
        assert_eq!(got, [(0, 64), (1, 65), (2, 66)]);
        let (s, r, e_) = ("start_poll", "read_byte_len", "end_poll");
        // The provider's next_poll is never called (see OnePerStart); the
        // last start_poll finds the CQ empty and is not ended.
        assert_eq!(fx.log(), [s, r, e_, s, r, e_, s, r, e_, s]);

        // max: no start_poll after the max-th completion.
        let mut fx = Fx::with(ids(3), true);
        let mut out = Vec::new();
        assert_eq!(fx.cq.poll_into(&mut out, 2).unwrap(), 2);
        assert_eq!(out.len(), 2);
        assert_eq!(
            fx.log()
                .iter()
                .filter(|e| e.ends_with("_poll"))
                .collect::<Vec<_>>(),
            [&s, &e_, &s, &e_]
        );

        // A start_poll error after the first completion (reported as the
        // error of the next_poll it stands in) ends nothing more and is
        // returned.
        let mut fx = Fx::with(ids(3), true);
        fx.raw.start_err = Some((2, libc::EIO));
        let mut got = Vec::new();
        let e = fx.cq.poll_each(32, |wc| got.push(wc.wr_id())).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EIO));
        assert!(
            e.to_string().starts_with("ibv_next_poll failed (fake0)"),
            "{e}"
        );
        assert_eq!(got, [0]);
        assert_eq!(fx.log(), [s, e_, s]);

        // A panicking callback ends its own poll.
        let mut fx = Fx::with(ids(3), true);
        let r = catch_unwind(AssertUnwindSafe(|| {
            fx.cq.poll_each(32, |wc| assert_ne!(wc.wr_id(), 1))
        }));
        assert!(r.is_err());
        assert_eq!(fx.log(), [s, e_, s, e_]);
        assert_eq!(
            fx.cq.poll_each(32, |wc| assert_eq!(wc.wr_id(), 2)).unwrap(),
            1
        );
    }

    #[test]
    fn threads_sharing_one_cq_in_a_mutex_share_out_every_completion() {
        const N: u64 = 600;
        let Fx {
            cq,
            mut raw,
            _ctx,
            _dev,
        } = Fx::new(ids(N));
        let cq = std::sync::Mutex::new(cq);
        let got = std::thread::scope(|s| {
            let workers: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let mut mine = Vec::new();
                        loop {
                            let n = cq
                                .lock()
                                .unwrap()
                                .poll_each(7, |wc| {
                                    mine.push(wc.wr_id());
                                    std::thread::yield_now();
                                })
                                .unwrap();
                            if n == 0 {
                                return mine;
                            }
                        }
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().unwrap())
                .collect::<Vec<_>>()
        });
        // Each thread saw its completions in order, and together they saw
        // each exactly once.
        for mine in &got {
            assert!(mine.windows(2).all(|w| w[0] < w[1]), "{mine:?}");
        }
        let mut all: Vec<u64> = got.concat();
        all.sort_unstable();
        assert_eq!(all, (0..N).collect::<Vec<_>>());
        // The provider saw well-formed polls only (the scripted CQ logs a
        // VIOLATION for a poll started inside another), each ended once.
        drop(cq);
        let log = std::mem::take(&mut raw.log);
        assert!(!log.iter().any(|e| e.starts_with("VIOLATION")), "{log:?}");
        let ends = log.iter().filter(|e| **e == "end_poll").count();
        assert_eq!(ends, (N as usize).div_ceil(7));
    }

    #[test]
    fn a_polls_errors_name_the_device_of_its_cq() {
        // Through the CQ's context and device; a CQ without them still
        // gets an error.
        let mut fx = Fx::new(ids(1));
        fx.raw.start_err = Some((1, libc::EIO));
        let e = fx.cq.poll_each(1, |_| {}).unwrap_err();
        assert!(e.to_string().contains("(fake0)"), "{e}");
        fx.raw.cq.context = std::ptr::null_mut();
        fx.raw.start_err = Some((1, libc::EIO));
        let e = fx.cq.poll_each(1, |_| {}).unwrap_err();
        assert!(e.to_string().contains("(an unnamed device)"), "{e}");
        assert_eq!(e.errno(), Some(libc::EIO));
    }
}
