//! Completion queues and typed work completions.

use crate::device::Context;
use crate::error::{Error, Result};
use crate::ffi;
use std::ffi::CStr;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The status of a work completion (`enum ibv_wc_status`).
///
/// `Display` gives rdma-core's own text (`ibv_wc_status_str(3)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcStatus {
    /// `IBV_WC_SUCCESS`.
    Success,
    /// `IBV_WC_LOC_LEN_ERR`: local length error.
    LocLenErr,
    /// `IBV_WC_LOC_QP_OP_ERR`: local QP operation error.
    LocQpOpErr,
    /// `IBV_WC_LOC_EEC_OP_ERR`.
    LocEecOpErr,
    /// `IBV_WC_LOC_PROT_ERR`: local protection error.
    LocProtErr,
    /// `IBV_WC_WR_FLUSH_ERR`: flushed, the QP is in the error state.
    WrFlushErr,
    /// `IBV_WC_MW_BIND_ERR`.
    MwBindErr,
    /// `IBV_WC_BAD_RESP_ERR`.
    BadRespErr,
    /// `IBV_WC_LOC_ACCESS_ERR`: local access error.
    LocAccessErr,
    /// `IBV_WC_REM_INV_REQ_ERR`: remote invalid request.
    RemInvReqErr,
    /// `IBV_WC_REM_ACCESS_ERR`: remote access error (wrong rkey or rights).
    RemAccessErr,
    /// `IBV_WC_REM_OP_ERR`: remote operation error.
    RemOpErr,
    /// `IBV_WC_RETRY_EXC_ERR`: transport retry counter exceeded.
    RetryExcErr,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: receiver-not-ready retries exceeded.
    RnrRetryExcErr,
    /// `IBV_WC_LOC_RDD_VIOL_ERR`.
    LocRddViolErr,
    /// `IBV_WC_REM_INV_RD_REQ_ERR`.
    RemInvRdReqErr,
    /// `IBV_WC_REM_ABORT_ERR`.
    RemAbortErr,
    /// `IBV_WC_INV_EECN_ERR`.
    InvEecnErr,
    /// `IBV_WC_INV_EEC_STATE_ERR`.
    InvEecStateErr,
    /// `IBV_WC_FATAL_ERR`.
    FatalErr,
    /// `IBV_WC_RESP_TIMEOUT_ERR`.
    RespTimeoutErr,
    /// `IBV_WC_GENERAL_ERR`.
    GeneralErr,
    /// Another value.
    Other(u32),
}

impl WcStatus {
    /// The status of a raw `enum ibv_wc_status` value.
    pub fn from_raw(raw: u32) -> Self {
        use WcStatus::*;
        match raw {
            ffi::IBV_WC_SUCCESS => Success,
            ffi::IBV_WC_LOC_LEN_ERR => LocLenErr,
            ffi::IBV_WC_LOC_QP_OP_ERR => LocQpOpErr,
            ffi::IBV_WC_LOC_EEC_OP_ERR => LocEecOpErr,
            ffi::IBV_WC_LOC_PROT_ERR => LocProtErr,
            ffi::IBV_WC_WR_FLUSH_ERR => WrFlushErr,
            ffi::IBV_WC_MW_BIND_ERR => MwBindErr,
            ffi::IBV_WC_BAD_RESP_ERR => BadRespErr,
            ffi::IBV_WC_LOC_ACCESS_ERR => LocAccessErr,
            ffi::IBV_WC_REM_INV_REQ_ERR => RemInvReqErr,
            ffi::IBV_WC_REM_ACCESS_ERR => RemAccessErr,
            ffi::IBV_WC_REM_OP_ERR => RemOpErr,
            ffi::IBV_WC_RETRY_EXC_ERR => RetryExcErr,
            ffi::IBV_WC_RNR_RETRY_EXC_ERR => RnrRetryExcErr,
            ffi::IBV_WC_LOC_RDD_VIOL_ERR => LocRddViolErr,
            ffi::IBV_WC_REM_INV_RD_REQ_ERR => RemInvRdReqErr,
            ffi::IBV_WC_REM_ABORT_ERR => RemAbortErr,
            ffi::IBV_WC_INV_EECN_ERR => InvEecnErr,
            ffi::IBV_WC_INV_EEC_STATE_ERR => InvEecStateErr,
            ffi::IBV_WC_FATAL_ERR => FatalErr,
            ffi::IBV_WC_RESP_TIMEOUT_ERR => RespTimeoutErr,
            ffi::IBV_WC_GENERAL_ERR => GeneralErr,
            other => Other(other),
        }
    }

    /// The raw value.
    pub fn to_raw(self) -> u32 {
        use WcStatus::*;
        match self {
            Success => ffi::IBV_WC_SUCCESS,
            LocLenErr => ffi::IBV_WC_LOC_LEN_ERR,
            LocQpOpErr => ffi::IBV_WC_LOC_QP_OP_ERR,
            LocEecOpErr => ffi::IBV_WC_LOC_EEC_OP_ERR,
            LocProtErr => ffi::IBV_WC_LOC_PROT_ERR,
            WrFlushErr => ffi::IBV_WC_WR_FLUSH_ERR,
            MwBindErr => ffi::IBV_WC_MW_BIND_ERR,
            BadRespErr => ffi::IBV_WC_BAD_RESP_ERR,
            LocAccessErr => ffi::IBV_WC_LOC_ACCESS_ERR,
            RemInvReqErr => ffi::IBV_WC_REM_INV_REQ_ERR,
            RemAccessErr => ffi::IBV_WC_REM_ACCESS_ERR,
            RemOpErr => ffi::IBV_WC_REM_OP_ERR,
            RetryExcErr => ffi::IBV_WC_RETRY_EXC_ERR,
            RnrRetryExcErr => ffi::IBV_WC_RNR_RETRY_EXC_ERR,
            LocRddViolErr => ffi::IBV_WC_LOC_RDD_VIOL_ERR,
            RemInvRdReqErr => ffi::IBV_WC_REM_INV_RD_REQ_ERR,
            RemAbortErr => ffi::IBV_WC_REM_ABORT_ERR,
            InvEecnErr => ffi::IBV_WC_INV_EECN_ERR,
            InvEecStateErr => ffi::IBV_WC_INV_EEC_STATE_ERR,
            FatalErr => ffi::IBV_WC_FATAL_ERR,
            RespTimeoutErr => ffi::IBV_WC_RESP_TIMEOUT_ERR,
            GeneralErr => ffi::IBV_WC_GENERAL_ERR,
            Other(raw) => raw,
        }
    }

    /// Whether the work request succeeded.
    pub fn is_success(self) -> bool {
        self == WcStatus::Success
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WcOpcode {
    /// A send (`IBV_WC_SEND`).
    Send,
    /// An RDMA write (`IBV_WC_RDMA_WRITE`).
    RdmaWrite,
    /// An RDMA read (`IBV_WC_RDMA_READ`).
    RdmaRead,
    /// Atomic compare-and-swap (`IBV_WC_COMP_SWAP`).
    CompSwap,
    /// Atomic fetch-and-add (`IBV_WC_FETCH_ADD`).
    FetchAdd,
    /// Memory window bind (`IBV_WC_BIND_MW`).
    BindMw,
    /// Local invalidate (`IBV_WC_LOCAL_INV`).
    LocalInv,
    /// TSO send (`IBV_WC_TSO`).
    Tso,
    /// Atomic write (`IBV_WC_ATOMIC_WRITE`).
    AtomicWrite,
    /// A receive (`IBV_WC_RECV`).
    Recv,
    /// A receive consumed by an RDMA write with immediate
    /// (`IBV_WC_RECV_RDMA_WITH_IMM`).
    RecvRdmaWithImm,
    /// An mlx5 mkey registration: `mlx5dv_wr_mr_list` /
    /// `mlx5dv_wr_mr_interleaved` (`MLX5DV_WC_UMR` = `IBV_WC_DRIVER1`).
    Umr,
    /// An mlx5 raw WQE, whatever its opcode (`MLX5DV_WC_RAW_WQE` =
    /// `IBV_WC_DRIVER2`).
    RawWqe,
    /// An mlx5 DMA memcpy (`MLX5DV_WC_MEMCPY` = `IBV_WC_DRIVER3`).
    Memcpy,
    /// Another value (tag matching, ...).
    Other(u32),
}

impl WcOpcode {
    /// The opcode of a raw value.
    pub fn from_raw(raw: u32) -> Self {
        use WcOpcode::*;
        match raw {
            ffi::IBV_WC_SEND => Send,
            ffi::IBV_WC_RDMA_WRITE => RdmaWrite,
            ffi::IBV_WC_RDMA_READ => RdmaRead,
            ffi::IBV_WC_COMP_SWAP => CompSwap,
            ffi::IBV_WC_FETCH_ADD => FetchAdd,
            ffi::IBV_WC_BIND_MW => BindMw,
            ffi::IBV_WC_LOCAL_INV => LocalInv,
            ffi::IBV_WC_TSO => Tso,
            ffi::IBV_WC_ATOMIC_WRITE => AtomicWrite,
            ffi::IBV_WC_RECV => Recv,
            ffi::IBV_WC_RECV_RDMA_WITH_IMM => RecvRdmaWithImm,
            ffi::MLX5DV_WC_UMR => Umr,
            ffi::MLX5DV_WC_RAW_WQE => RawWqe,
            ffi::MLX5DV_WC_MEMCPY => Memcpy,
            other => Other(other),
        }
    }
}

/// One work completion, read with the extended poll API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The `wr_id` the work request was posted with.
    pub wr_id: u64,
    /// Success, or why it failed.
    pub status: WcStatus,
    /// What it did. Only meaningful when `status` is `Success` (rdma-core
    /// does not define the opcode of failed completions).
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

/// A completion queue created with `ibv_create_cq_ex(3)` and polled with
/// the extended poll API (`ibv_start_poll`, `ibv_next_poll`,
/// `ibv_end_poll`).
///
/// A cheap, cloneable handle: several QPs may share it and several threads
/// may poll it (polls are serialised by a lock).
#[derive(Clone)]
pub struct CompletionQueue(pub(crate) Arc<CqInner>);

pub(crate) struct CqInner {
    pub(crate) cq: NonNull<ffi::ibv_cq_ex>,
    /// The provider's poll entries, resolved at creation.
    ops: PollOps,
    /// Poll one completion per `start_poll` / `end_poll` pair, never calling
    /// `next_poll` (see [`SOFT_ROCE_VENDOR_ID`]).
    one_per_poll: bool,
    poll_lock: Mutex<()>,
    owned: bool,
    capacity: u32,
    // Dropped after the CQ is destroyed.
    ctx: Context,
}

// SAFETY: the CQ is polled only under `poll_lock`; creation and destruction
// are thread-safe verbs calls.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: created by this crate; QPs using it hold this Arc, so
            // none is left; destroyed once.
            let rc = unsafe { ffi::ibv_destroy_cq(ffi::ibv_cq_ex_to_cq(self.cq.as_ptr())) };
            crate::report_destroy_failure("ibv_destroy_cq", rc, self.ctx.name());
        }
    }
}

type C = *mut ffi::ibv_cq_ex;

/// The vendor id soft-RoCE (rxe) reports. Its provider's `next_poll`, on
/// finding the CQ empty, already ends the poll (stores the consumer index
/// and unlocks), so the `end_poll` that ibv_create_cq_ex(3) then requires
/// advances and unlocks a second time and later polls return zeroed
/// completions (seen with rdma-core 44). On such devices a CQ polls one
/// completion per `start_poll` / `end_poll` pair, which is correct on every
/// provider.
const SOFT_ROCE_VENDOR_ID: u32 = 0x00FF_FFFF;

/// The provider's poll entries (`struct ibv_cq_ex`), copied once when the
/// CQ is made after each was found non-NULL, and called directly: the
/// header's `ibv_start_poll` / `ibv_wc_read_*` are this same single
/// indirect call.
struct PollOps {
    start_poll: unsafe extern "C" fn(C, *mut ffi::ibv_poll_cq_attr) -> i32,
    next_poll: unsafe extern "C" fn(C) -> i32,
    end_poll: unsafe extern "C" fn(C),
    read_opcode: unsafe extern "C" fn(C) -> ffi::ibv_wc_opcode,
    read_vendor_err: unsafe extern "C" fn(C) -> u32,
    read_byte_len: unsafe extern "C" fn(C) -> u32,
    read_imm_data: unsafe extern "C" fn(C) -> ffi::__be32,
    read_qp_num: unsafe extern "C" fn(C) -> u32,
    read_wc_flags: unsafe extern "C" fn(C) -> u32,
}

impl PollOps {
    /// # Safety
    /// `cq` is a live extended CQ.
    unsafe fn resolve(cq: NonNull<ffi::ibv_cq_ex>, device: &str) -> Result<Self> {
        // SAFETY: the caller's promise.
        let c = unsafe { cq.as_ref() };
        match (
            c.start_poll,
            c.next_poll,
            c.end_poll,
            c.read_opcode,
            c.read_vendor_err,
            c.read_byte_len,
            c.read_imm_data,
            c.read_qp_num,
            c.read_wc_flags,
        ) {
            (
                Some(start_poll),
                Some(next_poll),
                Some(end_poll),
                Some(read_opcode),
                Some(read_vendor_err),
                Some(read_byte_len),
                Some(read_imm_data),
                Some(read_qp_num),
                Some(read_wc_flags),
            ) => Ok(PollOps {
                start_poll,
                next_poll,
                end_poll,
                read_opcode,
                read_vendor_err,
                read_byte_len,
                read_imm_data,
                read_qp_num,
                read_wc_flags,
            }),
            _ => Err(Error::Unsupported {
                what: format!(
                    "the provider of {device} left an extended-CQ poll entry NULL \
                     (start/next/end_poll, read_opcode, read_vendor_err, read_byte_len, \
                     read_imm_data, read_qp_num or read_wc_flags)"
                ),
            }),
        }
    }
}

/// What the CQ reports for each completion.
const WC_FLAGS: u64 = ffi::IBV_WC_EX_WITH_BYTE_LEN as u64
    | ffi::IBV_WC_EX_WITH_IMM as u64
    | ffi::IBV_WC_EX_WITH_QP_NUM as u64;

impl CompletionQueue {
    /// Creates a CQ with room for at least `cqe` completions.
    pub fn new(ctx: &Context, cqe: u32) -> Result<Self> {
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
        // SAFETY: a live extended CQ.
        let ops = match unsafe { PollOps::resolve(cq, ctx.name()) } {
            Ok(ops) => ops,
            Err(e) => {
                // SAFETY: created above, not shared; destroyed once.
                unsafe { ffi::ibv_destroy_cq(ffi::ibv_cq_ex_to_cq(cq.as_ptr())) };
                return Err(e);
            }
        };
        let one_per_poll = ctx
            .query_device()
            .is_ok_and(|a| a.vendor_id == SOFT_ROCE_VENDOR_ID);
        Ok(CompletionQueue(Arc::new(CqInner {
            cq,
            ops,
            one_per_poll,
            poll_lock: Mutex::new(()),
            owned: true,
            capacity: u32::try_from(capacity).unwrap_or(cqe),
            ctx: ctx.clone(),
        })))
    }

    /// Wraps an extended CQ created elsewhere; the handle does not destroy it.
    ///
    /// # Safety
    ///
    /// `cq` must be a live CQ of `ctx`, created with `ibv_create_cq_ex` with
    /// at least `IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
    /// IBV_WC_EX_WITH_QP_NUM` in its `wc_flags`, polled by nobody else, and
    /// kept alive until this handle, its clones and the QPs made with it
    /// are dropped.
    /// Fails with [`Error::Unsupported`] when the provider left a poll
    /// entry NULL. The handle polls as ibv_create_cq_ex(3) says; for a
    /// soft-RoCE CQ use [`CompletionQueue::new`], which works around that
    /// provider's `next_poll` (the device is not queried here).
    pub unsafe fn from_raw(ctx: &Context, cq: NonNull<ffi::ibv_cq_ex>) -> Result<Self> {
        // SAFETY: the caller promises a live CQ.
        let capacity = unsafe { (*ffi::ibv_cq_ex_to_cq(cq.as_ptr())).cqe };
        Ok(CompletionQueue(Arc::new(CqInner {
            cq,
            // SAFETY: as above.
            ops: unsafe { PollOps::resolve(cq, ctx.name()) }?,
            one_per_poll: false,
            poll_lock: Mutex::new(()),
            owned: false,
            capacity: u32::try_from(capacity).unwrap_or(0),
            ctx: ctx.clone(),
        })))
    }

    /// The raw extended CQ, valid while this handle lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_cq_ex {
        self.0.cq.as_ptr()
    }

    /// How many completions the CQ holds (at least what was asked).
    pub fn capacity(&self) -> u32 {
        self.0.capacity
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.0.ctx
    }

    /// Moves up to `max` completions into `out` and returns how many.
    pub fn poll_into(&self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize> {
        if max == 0 {
            return Ok(0);
        }
        let _guard = self.0.poll_lock.lock().unwrap_or_else(|p| p.into_inner());
        let cq = self.as_ptr();
        let ops = &self.0.ops;
        let mut attr = ffi::ibv_poll_cq_attr::default();
        // SAFETY: the CQ is live and polled only under the lock held above;
        // `ops` are its provider's entries.
        let rc = unsafe { (ops.start_poll)(cq, &mut attr) };
        if rc == libc::ENOENT {
            return Ok(0);
        }
        crate::error::check(rc, "ibv_start_poll", || self.0.ctx.name().to_string())?;
        let mut n = 0;
        if self.0.one_per_poll {
            // One completion per start/end pair (see SOFT_ROCE_VENDOR_ID).
            loop {
                // SAFETY: a poll is in progress and positioned on a completion.
                out.push(unsafe { read_current(cq, ops) });
                n += 1;
                // SAFETY: ends this poll; the next one starts afresh.
                unsafe { (ops.end_poll)(cq) };
                if n == max {
                    return Ok(n);
                }
                // SAFETY: the CQ is live and we hold the lock.
                match unsafe { (ops.start_poll)(cq, &mut attr) } {
                    0 => {}
                    libc::ENOENT => return Ok(n),
                    rc => return Err(Error::verbs("ibv_start_poll", rc, self.0.ctx.name())),
                }
            }
        }
        loop {
            // SAFETY: a poll is in progress and positioned on a completion.
            out.push(unsafe { read_current(cq, ops) });
            n += 1;
            if n == max {
                break;
            }
            // SAFETY: a poll is in progress.
            let rc = unsafe { (ops.next_poll)(cq) };
            if rc == libc::ENOENT {
                break;
            }
            if rc != 0 {
                // SAFETY: ends the poll that start_poll began.
                unsafe { (ops.end_poll)(cq) };
                return Err(Error::verbs("ibv_next_poll", rc, self.0.ctx.name()));
            }
        }
        // SAFETY: ends the poll that start_poll began.
        unsafe { (ops.end_poll)(cq) };
        Ok(n)
    }

    /// Polls until `n` completions have arrived or `timeout` has passed.
    /// Returns them in arrival order; on timeout, the error says how many
    /// of the `n` came (those are lost to the caller: use
    /// [`poll_into`](Self::poll_into) to keep partial results).
    pub fn wait(&self, n: usize, timeout: Duration) -> Result<Vec<WorkCompletion>> {
        let mut out = Vec::with_capacity(n);
        self.wait_into(&mut out, n, timeout)?;
        Ok(out)
    }

    /// Like [`wait`](Self::wait), but appends to `out`, which keeps what
    /// arrived even on timeout.
    pub fn wait_into(
        &self,
        out: &mut Vec<WorkCompletion>,
        n: usize,
        timeout: Duration,
    ) -> Result<()> {
        let start = Instant::now();
        let mut got = 0;
        let mut idle_rounds = 0u32;
        while got < n {
            let k = self.poll_into(out, n - got)?;
            got += k;
            if k > 0 {
                idle_rounds = 0;
                continue;
            }
            if start.elapsed() >= timeout {
                return Err(Error::Timeout {
                    what: format!("{n} completions on {} ({got} arrived)", self.0.ctx.name()),
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
            // Spin briefly, then back off so a slow peer does not burn a core.
            idle_rounds += 1;
            if idle_rounds < 1000 {
                std::hint::spin_loop();
            } else if idle_rounds < 2000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        Ok(())
    }
}

/// Reads the completion the poll is positioned on.
///
/// # Safety
/// A poll on `cq` is in progress and positioned on a completion, the CQ
/// was created with [`WC_FLAGS`], and `ops` are its entries.
#[inline(always)]
unsafe fn read_current(cq: *mut ffi::ibv_cq_ex, ops: &PollOps) -> WorkCompletion {
    // SAFETY: the caller's promise; each reader only reads the current
    // completion.
    unsafe {
        let status = WcStatus::from_raw((*cq).status);
        let wc_flags = (ops.read_wc_flags)(cq);
        // The immediate and the invalidated rkey share the CQE field
        // (`ibv_wc_read_invalidated_rkey` reads it with read_imm_data).
        let (imm, invalidated_rkey) = if wc_flags & ffi::IBV_WC_WITH_IMM != 0 {
            (Some(u32::from_be((ops.read_imm_data)(cq))), None)
        } else if wc_flags & ffi::IBV_WC_WITH_INV != 0 {
            (None, Some((ops.read_imm_data)(cq)))
        } else {
            (None, None)
        };
        WorkCompletion {
            wr_id: (*cq).wr_id,
            status,
            opcode: WcOpcode::from_raw((ops.read_opcode)(cq)),
            byte_len: (ops.read_byte_len)(cq),
            imm,
            invalidated_rkey,
            qp_num: (ops.read_qp_num)(cq),
            vendor_err: (ops.read_vendor_err)(cq),
        }
    }
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("device", &self.0.ctx.name())
            .field("capacity", &self.0.capacity)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trips_and_prints_rdma_cores_text() {
        for raw in 0..=ffi::IBV_WC_TM_RNDV_INCOMPLETE + 1 {
            assert_eq!(WcStatus::from_raw(raw).to_raw(), raw);
        }
        assert_eq!(WcStatus::Success.to_string(), "success");
        assert_eq!(WcStatus::RemAccessErr.to_string(), "remote access error");
        assert_eq!(
            WcStatus::WrFlushErr.to_string(),
            "Work Request Flushed Error"
        );
    }

    #[test]
    fn mlx5_opcodes_are_the_driver_opcodes() {
        assert_eq!(WcOpcode::from_raw(ffi::IBV_WC_DRIVER1), WcOpcode::Umr);
        assert_eq!(WcOpcode::from_raw(ffi::IBV_WC_DRIVER2), WcOpcode::RawWqe);
        assert_eq!(WcOpcode::from_raw(ffi::IBV_WC_DRIVER3), WcOpcode::Memcpy);
        assert_eq!(WcOpcode::from_raw(ffi::IBV_WC_RECV), WcOpcode::Recv);
        assert_eq!(WcOpcode::from_raw(0xFFFF), WcOpcode::Other(0xFFFF));
    }
}
