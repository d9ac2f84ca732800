//! The direct data path: the crate writes the WQEs of a QP's send queue
//! and reads the CQEs of its CQ itself, as UCX's `rc_mlx5` transport and
//! SPDK's mlx5 layer do, instead of calling libmlx5's `ibv_wr_*` builders
//! and `ibv_start_poll` readers; safely.
//!
//! ```no_run
//! use mlx5dv::*;
//! use std::time::Duration;
//!
//! # fn demo(ctx: &Context, peer: &Endpoint, remote: RemoteBuf) -> Result<()> {
//! let pd = ProtectionDomain::new(ctx)?;
//! let cq = CompletionQueue::new(ctx, 256)?; // this QP's send completions only
//! let rq = CompletionQueue::new(ctx, 16)?;
//! let qp = QpBuilder::rc(&pd, &cq, &rq).build()?; // in RESET, never posted
//! let mut qp = qp.into_direct(cq)?;
//! let opts = ConnectOptions::default().gid_index(ctx.default_gid_index(1)?); // RoCE: a GID
//! let _mine = qp.endpoint(0x1234, &opts)?; // sent to the peer
//! qp.connect_to(peer, &opts)?;
//!
//! let src = MemoryRegion::new(qp.pd(), 4096, AccessFlags::LOCAL_WRITE)?;
//! let wcs = qp.post_and_wait(Duration::from_secs(5), |b| {
//!     for i in 0..32u64 {
//!         b.rdma_write(i, SendFlags::empty(), remote.slice(i * 128, 128)?, src.sge(0..128)?)?;
//!     }
//!     Ok(())
//! })?;
//! assert_eq!(wcs.last().map(|wc| wc.covers), Some(32));
//! # Ok(()) }
//! ```
//!
//! ## When to choose it
//!
//! Through libmlx5 a work request costs the provider's builders and
//! setters (indirect calls, per-call checks, a lock if the QP has one) and
//! a completion its readers: about 135 and 210 instructions on libmlx5 44.
//! The direct path writes the same WQE bytes with a few stores and parses
//! a CQE with a few loads: on the software device an RC write costs 0.27
//! (every one signalled) to 0.30 (one in 32) of the instructions through
//! libmlx5, a DCI write 0.29 to 0.31 (from entries known not to be empty,
//! [`NonEmptySge`](crate::NonEmptySge), to the peer's memory named by an
//! address and an rkey, [`RemoteBuf::unbounded`](crate::RemoteBuf::unbounded);
//! from plain entries to checked slices, whose lengths each write is
//! tested against, 0.35 to 0.39), a completion read with
//! [`DirectQp::poll_into`] 0.38 (`scripts/bench-real`, the rows named
//! `direct`, in BENCHMARKS.md): 0.94 to 1.05 times the instructions of C
//! that fills the queues by hand, the scoped post with its sleep on the
//! channel 1.04.
//! Choose it for message rate on RC QPs and DCIs whose send completions
//! nothing else reads; stay with [`WrBatch`](crate::WrBatch) for
//! everything else (the other transports, memory windows, mkeys, DMA
//! memcpy, receive completions, CQs shared by several QPs, rdma_cm's
//! QPs). A direct CQ on a completion channel is armed by the crate
//! ([`DirectQp::req_notify`]), and its waits sleep there
//! ([`DirectQp::wait`]).
//!
//! A DCI is taken the same way ([`DirectDci`]); its work requests name
//! their target with [`DirectBatch::dc`] and a [`DirectDcAddr`] made once
//! per target ([`DirectQp::dc_addr`]).
//!
//! ## What it takes, and what it assumes of the device
//!
//! [`QpEx::into_direct`] takes an RC QP or a DCI that was never posted
//! (in RESET) and the CQ its sends complete on, which must be its own: no
//! other QP completes on it, an RC QP's receives complete on another CQ,
//! and nobody else
//! holds the CQ's handle (it is moved in). It gets libmlx5's queues with
//! `mlx5dv_init_obj(3)` (`MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ`), which also
//! marks the CQ as the application's (`MLX5_CQ_FLAGS_DV_OWNED` in
//! rdma-core's `providers/mlx5/mlx5.c`): libmlx5 no longer cleans it when
//! the QP is reset or destroyed (`__mlx5_cq_clean` returns early), so the
//! crate does ([`DirectQp::reset`]).
//!
//! The facts of the ConnectX programming model (the PRM, as mlx5dv.h and
//! libmlx5 encode it) it relies on:
//!
//! - A send WQE is a control segment (`struct mlx5_wqe_ctrl_seg`: opcode
//!   and WQE index in `opmod_idx_opcode`, QP number and the count of
//!   16-byte units in `qpn_ds`, the completion, solicited and fence bits in
//!   `fm_ce_se`, the immediate) followed by the segments of its opcode,
//!   and occupies `ceil(DS / 4)` 64-byte basic blocks of the ring
//!   (`MLX5_SEND_WQE_BB`), wrapping at its end (libmlx5's `qp.c`,
//!   `_mlx5_post_send`).
//! - A data segment's byte count of 0 means 2^31 bytes, so an empty entry
//!   is left out, as `mlx5_send_wr_set_sge` leaves it out; bit 31 of a
//!   byte count marks an inline segment (`MLX5_INLINE_SEG`).
//! - The device runs the WQEs up to the producer index in the send half of
//!   the doorbell record (`dbrec[MLX5_SND_DBR]`, big-endian, 16 bits), told
//!   by a 64-bit write of the first 8 bytes of the last control segment to
//!   the UAR's doorbell register; the record is written after the WQEs and
//!   before the register, with the barriers of `post_send_db`
//!   (listed below under "Barriers"). The direct path never copies a WQE into the BlueFlame
//!   buffer: a QP's register may be shared with other QPs (libmlx5 then
//!   takes a lock, `bf->need_lock`), and an 8-byte doorbell needs none.
//! - A CQE is the software's when its opcode (`op_own >> 4`) is not
//!   `MLX5_CQE_INVALID` and its owner bit (`op_own & 1`) is the parity of
//!   the pass over the ring (`get_sw_cqe` in `cq.c`); in a 128-byte entry
//!   the CQE is the second half. A requester CQE carries the WQE's opcode
//!   and QP number in `sop_drop_qpn` and the WQE's index in
//!   `wqe_counter`; the device completes a send queue's WQEs in order, so
//!   a CQE retires every WQE up to the one it names (libmlx5 sets
//!   `sq.tail` from `wqe_head[idx]` the same way, for every requester CQE,
//!   `mlx5_parse_cqe`; on a DCI with streams too: the direct path assumes
//!   of a stream DCI what libmlx5 and the crate's scoped posts through it
//!   assume, not yet checked on hardware). An error CQE
//!   (`MLX5_CQE_REQ_ERR`) carries a syndrome, mapped to
//!   [`WcStatus`](crate::WcStatus) as `mlx5_handle_error_cqe` maps it.
//! - The consumer index goes to the CQ's doorbell record
//!   (`dbrec[MLX5_CQ_SET_CI]`, 24 bits) after the CQEs are read
//!   (`update_cons_index`).
//! - Small RDMA read and atomic responses are written into the requester's
//!   CQE instead of its buffer (`MLX5_INLINE_SCATTER_32/64`) only on a QP
//!   whose every WQE is signalled (the kernel's
//!   `configure_requester_scat_cqe`): `into_direct` refuses a QP made
//!   with `sq_sig_all`.
//!
//! ## Barriers
//!
//! As rdma-core's `util/udma_barrier.h` defines them for libmlx5:
//! before the doorbell record, `udma_to_device_barrier` (x86-64: a
//! compiler barrier; aarch64: `dsb st`); around the doorbell write,
//! `mmio_wc_start` and `mmio_flush_writes` (x86-64: `sfence`; aarch64:
//! `dsb st`); after a CQE's owner bit, before its fields, a load barrier
//! (x86-64: a compiler barrier, as UCX's `ucs_memory_cpu_load_fence`,
//! loads being ordered with loads there; aarch64: `dsb ld`). Elsewhere a
//! full fence. The direct path is built for 64-bit targets only (the
//! doorbell is one 64-bit store).
//!
//! ## Safety
//!
//! Building a batch is safe: every WQE is written whole by a typed
//! method, in room the crate knows is free (the send queue's consumer
//! index moves only when a CQE retires WQEs: nothing the device writes is
//! read for it), and nothing reaches the device before the doorbell.
//! [`DirectQp::post_and_wait`] posts safely: it returns only when the
//! device is done with every work request of its batch (their completion,
//! or the QP moved to ERR and flushed, or to RESET), so the borrows of the
//! batch's memory end only then. [`DirectBatch::ring`] posts without
//! waiting and is `unsafe`, with the contract of
//! [`WrBatch::complete`](crate::WrBatch::complete).
//!
//! Both post only on a QP in RTS: on one never connected, or in RESET,
//! INIT, RTR, SQD, SQE or ERR, they refuse with [`Error::QpNotReady`]
//! before a WQE is written, as libmlx5's path refuses. The state is
//! looked at once a batch, in libibverbs' record of it (no system call);
//! the poll that reads a completion with an error status (after which the
//! device has moved the QP to ERR, unseen by the record) asks the kernel
//! ([`DirectQp::batch`] says more).
//!
//! Nothing a peer sends reaches the parser: a send queue's CQEs are the
//! local device's. The fields it reads are at fixed offsets inside the
//! 64-byte CQE, and a WQE counter is used only after it is checked to name
//! an outstanding WQE, in a requester CQE (`MLX5_CQE_REQ`,
//! `MLX5_CQE_REQ_ERR`) carrying the QP's own number: any other (a
//! responder's, another QP's) is skipped with an error
//! ([`Error::Direct`]), never taken for a completion of this QP.

mod arch;
mod batch;
mod cq;
mod into;
mod into_error;
mod scoped;
mod sq;
#[cfg(test)]
mod tests;
mod transport;

pub use batch::{DcWr, DirectBatch, WriteSource};
pub use cq::DirectWc;
pub use into_error::IntoDirectError;
pub use transport::{DirectDcAddr, DirectTransport};

use crate::channel::Slept;
use crate::clock::Mono;
use crate::cq::CompletionQueue;
use crate::error::{Error, Result};
use crate::ffi;
use crate::mr::Sge;
use crate::qp::{
    ConnectOptions, Connected, DcAddr, DcInitiator, Endpoint, QpCaps, QpEx, QpState,
    ReliableConnection,
};
use cq::{Cqr, Step};
use sq::Sq;
use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

/// An RC QP on the direct path.
pub type DirectRc = DirectQp<ReliableConnection>;

/// A DC initiator on the direct path.
pub type DirectDci = DirectQp<DcInitiator>;

/// A QP whose send queue and send CQ the crate drives itself
/// ([`QpEx::into_direct`]): posts through [`DirectQp::batch`] or
/// [`DirectQp::post_and_wait`], completions through [`DirectQp::poll`].
/// See the [module documentation](crate::direct).
pub struct DirectQp<T: DirectTransport> {
    pub(crate) sq: Sq,
    cq: Cqr,
    /// Completions a scoped post read that were not its own: handed out
    /// first by the next poll.
    backlog: VecDeque<DirectWc>,
    /// What the last scoped post returned.
    done: Vec<DirectWc>,
    /// An error [`DirectQp::poll_into`] met after completions it returned:
    /// the next poll returns it first (boxed: the QP stays small, and the
    /// error is rare).
    deferred: Option<Box<Error>>,
    // Dropped in this order: the QP, then its CQ.
    qp: QpEx<T>,
    _cq: CompletionQueue,
    /// `_cq` as a `struct ibv_cq`, what its channel knows it by (taken
    /// once: a wait names it twice).
    raw_cq: std::ptr::NonNull<ffi::ibv_cq>,
}

// SAFETY: the rings are reached only through `&mut self`; `&self` methods
// read the indices or make verbs calls, which are thread-safe; `raw_cq`
// is the address of the CQ `_cq` owns, never dereferenced here: only the
// channel's registry key (the channel is thread-safe).
unsafe impl<T: DirectTransport> Send for DirectQp<T> {}
// SAFETY: as above.
unsafe impl<T: DirectTransport> Sync for DirectQp<T> {}

/// Idle polls, each with a pause, before a wait arms its CQ and sleeps on
/// its channel (or backs off, without one). The clock is not read during
/// them: they take microseconds, nothing beside a timeout of any length.
const SPINS: u32 = 64;

impl<T: DirectTransport> DirectQp<T> {
    /// A batch of work requests written straight into the send queue; see
    /// [`DirectBatch`].
    ///
    /// # Errors
    ///
    /// The QP's state is looked at here, once for the batch: on a QP not
    /// in RTS (never connected, or in RESET, INIT, RTR, SQD, SQE or ERR,
    /// where a failed work request or [`to_error`](Self::to_error) left
    /// it) the batch takes nothing. Each of its writers, and its
    /// [`limit`](DirectBatch::limit), returns [`Error::QpNotReady`] before
    /// writing anything, its [`room`](DirectBatch::room) is 0, and
    /// [`ring`](DirectBatch::ring) posts nothing.
    ///
    /// The state is libibverbs' record of it (`ibv_qp.state`), which every
    /// `ibv_modify_qp(3)` and `ibv_query_qp(3)` of the QP updates, read
    /// without a system call and without a call at all (the writers' loop
    /// keeps its registers). The device moves a QP to ERR by itself after
    /// a failed work request, unseen by the record: the poll that reads
    /// that failure's completion asks the kernel then (`ibv_query_qp`),
    /// as libmlx5's path does, so the next batch sees ERR.
    #[inline]
    pub fn batch<'m>(&mut self) -> DirectBatch<'_, 'm, T> {
        // SAFETY: the QP is live.
        let ready = unsafe { crate::qp::recorded_state(self.qp.as_ptr()) } == ffi::IBV_QPS_RTS;
        DirectBatch::new(&mut self.sq, ready)
    }

    /// Refuses a post ([`Error::QpNotReady`], naming `what`) unless the QP
    /// is in RTS: a compare of libibverbs' record of the state when the
    /// post may go on; the kernel's answer (`ibv_query_qp`, which names
    /// the state) only before a refusal.
    #[inline(always)]
    pub(crate) fn ready_to_post(&self, what: &'static str) -> Result<()> {
        if self.sq.recorded_state() != ffi::IBV_QPS_RTS {
            // SAFETY: the QP is live.
            return unsafe { crate::qp::refuse(self.qp.as_ptr(), what, crate::qp::Post::Direct) };
        }
        Ok(())
    }

    /// Reads up to `max` completions, oldest first, handing each to `f`.
    /// Returns how many it read. A CQE that cannot be trusted (not a send
    /// completion of this QP, which the device does not write here, or
    /// naming no outstanding work request) is skipped with an error
    /// ([`Error::Direct`]) after the completions before it.
    /// [`poll_into`](Self::poll_into) is the same into a slice.
    ///
    /// If `f` panics, the completion it was given is not marked read: a
    /// later poll hands it out again, first (the work requests it retires
    /// stay outstanding until then, so no memory is given back early). The
    /// completions handed over before it are read, and not handed out
    /// again.
    #[inline]
    pub fn poll(&mut self, max: usize, mut f: impl FnMut(DirectWc)) -> Result<usize> {
        if let Some(e) = self.deferred.take() {
            return Err(*e);
        }
        let mut n = 0;
        while n < max {
            // Handed out before it is taken: if `f` panics, it stays.
            let Some(&wc) = self.backlog.front() else {
                break;
            };
            f(wc);
            self.backlog.pop_front();
            n += 1;
        }
        let start = n;
        let mut r = Ok(());
        // The rings' indices in locals for the loop (the closure's stores
        // cannot then be taken to alias them), put back after.
        let mut cq = self.cq;
        let mut idx = self.sq.idx();
        // The two kinds of CQE each hand their completion to `f`: joined
        // before the call, the completions of both would be merged field by
        // field, at a cost to the common kind.
        while n < max {
            let Some((cqe, op_own)) = cq.take() else {
                break;
            };
            if op_own & 0xfc == 0 {
                match cq::good(cqe, &mut idx) {
                    Ok(wc) => f(wc),
                    Err(e) => {
                        r = Err(e);
                        break;
                    }
                }
            } else {
                let (res, moved) = cq::slow_step(cqe, op_own, idx, self.sq.qp);
                idx = moved;
                match res {
                    Ok(wc) => f(wc),
                    Err(e) => {
                        r = Err(e);
                        break;
                    }
                }
            }
            // Handed over: read, and retiring its work requests. Stored at
            // once, so that a panic of `f` at a later completion hands out
            // none of those before it again (the next poll, which reads
            // that one again, publishes the consumer index).
            self.sq.put(idx);
            self.cq.ci = cq.ci;
            n += 1;
        }
        self.sq.put(idx);
        self.cq.ci = cq.ci;
        if n > start || r.is_err() {
            self.cq.publish();
        }
        r.map(|()| n)
    }

    /// Reads completions into `out`, oldest first: as many as the CQ
    /// holds, up to `out.len()`. Returns how many it wrote (`out[..n]`).
    ///
    /// The same completions as [`poll`](Self::poll), in the form of
    /// `ibv_poll_cq(3)`: written into a slice, which costs fewer
    /// instructions per completion than a closure that stores each
    /// (`scripts/bench-real`, the `direct` poll rows). A CQE that cannot be
    /// trusted (not a send completion of this QP, or naming no
    /// outstanding work request: [`Error::Direct`]) is skipped with an
    /// error: returned at once when no completion came before it in this
    /// call, else by the next call (of `poll_into` or `poll`), so that the
    /// completions before it are returned first.
    ///
    /// ```no_run
    /// # use mlx5dv::direct::{DirectRc, DirectWc};
    /// # fn f(qp: &mut DirectRc) -> mlx5dv::Result<()> {
    /// let mut wcs = [DirectWc::default(); 32];
    /// let n = qp.poll_into(&mut wcs)?;
    /// for wc in &wcs[..n] {
    ///     wc.ok()?;
    /// }
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn poll_into(&mut self, out: &mut [DirectWc]) -> Result<usize> {
        if self.deferred.is_some() || !self.backlog.is_empty() {
            return self.poll_into_slow(out);
        }
        let mut cq = self.cq;
        let mut idx = self.sq.idx();
        let (n, r) = cq::poll_into(&mut cq, &mut idx, out, self.sq.qp);
        self.sq.put(idx);
        self.cq.ci = cq.ci;
        if n > 0 || r.is_err() {
            self.cq.publish();
        }
        self.defer_after(n, r)
    }

    /// `poll_into` with a deferred error or a backlog to hand out first.
    #[cold]
    #[inline(never)]
    fn poll_into_slow(&mut self, out: &mut [DirectWc]) -> Result<usize> {
        if let Some(e) = self.deferred.take() {
            return Err(*e);
        }
        let mut n = 0;
        let r = self.poll(out.len(), |wc| {
            // `poll` hands out at most `out.len()`.
            if let Some(slot) = out.get_mut(n) {
                *slot = wc;
                n += 1;
            }
        });
        self.defer_after(n, r.map(|_| ()))
    }

    /// `Ok(n)`, or the error: at once after no completion, else kept for
    /// the next poll.
    #[inline(always)]
    fn defer_after(&mut self, n: usize, r: Result<()>) -> Result<usize> {
        match r {
            Ok(()) => Ok(n),
            Err(e) => self.defer(n, e),
        }
    }

    #[cold]
    #[inline(never)]
    fn defer(&mut self, n: usize, e: Error) -> Result<usize> {
        if n == 0 {
            return Err(e);
        }
        self.deferred = Some(Box::new(e));
        Ok(n)
    }

    /// Arms the CQ: its next completion (with `solicited_only`, its next
    /// solicited or error one) raises one event on the channel the CQ was
    /// created on ([`CompletionQueue::with_channel`]), as
    /// `ibv_req_notify_cq(3)` does, with the direct path's own consumer
    /// index (libmlx5's is not kept: its arm would be stale). Completions
    /// already there raise none: arm, poll, then wait for the event (or
    /// use [`wait`](Self::wait), which does that). Refused
    /// ([`Error::InvalidArgument`]) on a CQ without a channel.
    pub fn req_notify(&mut self, solicited_only: bool) -> Result<()> {
        self.arm(solicited_only).map(drop)
    }

    /// The completion channel the CQ's events go to, if it was created on
    /// one.
    pub fn channel(&self) -> Option<&crate::CompletionChannel> {
        self._cq.channel()
    }

    fn arm(&self, solicited_only: bool) -> Result<crate::channel::EventCount> {
        let Some(channel) = self._cq.channel() else {
            return Err(Error::InvalidArgument(format!(
                "req_notify on the direct CQ of {}: the CQ has no completion channel \
                 (create it with CompletionQueue::with_channel)",
                self.qp.describe()
            )));
        };
        self.armable()?;
        Ok(channel.arm_with(self.raw_cq, |events| self.cq.arm(events, solicited_only)))
    }

    /// Refuses to arm a CQ whose UAR libmlx5 did not give.
    fn armable(&self) -> Result<()> {
        if self.cq.uar.is_null() {
            return Err(Error::Unsupported {
                what: "arming a direct CQ: libmlx5 gave no CQ UAR".into(),
            });
        }
        Ok(())
    }

    /// Waits up to `timeout` for completions and hands up to `max` of them
    /// to `f`, as [`poll`](Self::poll); returns how many (at least one).
    /// On a CQ with a completion channel it sleeps on the channel between
    /// polls (arm, poll again, then sleep until the CQ's event); without
    /// one it backs off (spinning, then yielding, then sleeping 50 µs).
    /// [`Error::Timeout`] when none came.
    pub fn wait(
        &mut self,
        max: usize,
        timeout: Duration,
        mut f: impl FnMut(DirectWc),
    ) -> Result<usize> {
        let start = Mono::now();
        let deadline = start.after(timeout);
        let mut idle = 0u32;
        let mut expired = false;
        loop {
            let n = self.poll(max, &mut f)?;
            if n > 0 || max == 0 {
                return Ok(n);
            }
            if idle >= SPINS && self.past(expired, start, timeout) {
                return Err(Error::Timeout {
                    what: format!("a completion of direct {}", self.qp.describe()),
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
            expired = self.idle(&mut idle, deadline)?;
        }
    }

    /// Whether a wait that started at `start` is past its `timeout`:
    /// `expired` when its last sleep on the channel ran to the deadline
    /// (that sleep read the clock: no other read), else, on a CQ without
    /// a channel (whose waits never sleep on one), the clock read here.
    #[inline]
    pub(crate) fn past(&self, expired: bool, start: Mono, timeout: Duration) -> bool {
        expired || (self._cq.channel().is_none() && start.elapsed() >= timeout)
    }

    /// Between polls that found nothing: after `SPINS` of them (each a
    /// pause), sleeps on the CQ's channel until its event or `deadline`
    /// (arming it first, and not sleeping when a CQE came before the arm
    /// took), or backs off without a channel.
    ///
    /// Completions kept for the next poll (the backlog) do not end the
    /// sleep: `wait` hands them out before it comes here, and the scoped
    /// post keeps there those it does not wait for.
    ///
    /// Returns whether its look at the channel found `deadline` passed
    /// without the CQ's event (after sleeping there, or at once when the
    /// deadline had already passed or another thread was reading the
    /// channel): the caller's wait has timed out once a last poll finds
    /// nothing ([`past`](Self::past)).
    pub(crate) fn idle(&mut self, idle: &mut u32, deadline: Option<Mono>) -> Result<bool> {
        let channel = match self._cq.channel() {
            Some(channel) if *idle >= SPINS => channel,
            _ => {
                crate::cq::back_off(idle);
                return Ok(false);
            }
        };
        self.armable()?;
        let cq = &self.cq;
        let slept = channel.arm_and_sleep(
            self.raw_cq,
            deadline,
            |events| cq.arm(events, false),
            || cq.ready(),
        )?;
        Ok(slept == Slept::Expired)
    }

    /// Basic blocks (64 bytes) free in the send queue.
    pub fn room(&self) -> u32 {
        self.sq.room()
    }

    /// Work requests posted and not yet retired by a completion.
    pub fn outstanding(&self) -> u32 {
        self.sq.outstanding()
    }

    /// The send queue's size in basic blocks.
    pub fn depth(&self) -> u32 {
        self.sq.wqe_cnt
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.qp.qp_num()
    }

    /// The sizes the QP got.
    pub fn caps(&self) -> QpCaps {
        self.qp.caps()
    }

    /// The current state (`ibv_query_qp(3)`).
    pub fn state(&self) -> Result<QpState> {
        self.qp.state()
    }

    /// Moves the QP to ERR: outstanding work requests complete with
    /// [`WcStatus::WR_FLUSH_ERR`](crate::WcStatus::WR_FLUSH_ERR).
    pub fn to_error(&self) -> Result<()> {
        self.qp.to_error()
    }

    /// The protection domain.
    pub fn pd(&self) -> &crate::ProtectionDomain {
        self.qp.pd()
    }

    /// Moves the QP to RESET, after which the device runs nothing of it,
    /// and starts its send queue again from index 0, as the device does:
    /// CQEs still in the CQ from before are dropped (libmlx5 does not clean
    /// a CQ the application owns; this does what its cleaning would), and
    /// every outstanding work request counts as ended. Then the QP can be
    /// connected again ([`connect_to`](Self::connect_to)).
    pub fn reset(&mut self) -> Result<()> {
        self.qp.reset()?;
        self.resync();
        Ok(())
    }

    /// After the QP reached RESET: drops the CQEs before it and restarts
    /// the send queue's indices.
    fn resync(&mut self) {
        // An error `poll_into` kept for the next poll was of a CQE before
        // the reset: not the new rings'.
        self.deferred = None;
        self.cq.drop_handed_over();
        self.cq.publish();
        self.sq.pi = 0;
        self.sq.ci = 0;
        self.sq.retired = self.sq.posted;
        self.sq.bf_offset = 0;
    }
}

impl<T: DirectTransport + Connected> DirectQp<T> {
    /// This QP's side of the exchange ([`QpEx::endpoint`]).
    pub fn endpoint(&self, psn: u32, opts: &ConnectOptions) -> Result<Endpoint> {
        self.qp.endpoint(psn, opts)
    }

    /// RESET → INIT → RTR → RTS towards `remote` ([`QpEx::connect_to`]).
    pub fn connect_to(&self, remote: &Endpoint, opts: &ConnectOptions) -> Result<()> {
        self.qp.connect_to(remote, opts)
    }

    /// Posts a receive to the QP's own receive queue (through libmlx5:
    /// receives complete on the QP's receive CQ, which libmlx5 polls).
    ///
    /// # Safety
    /// As [`QpEx::post_recv`].
    pub unsafe fn post_recv(&mut self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        // SAFETY: the caller's promise.
        unsafe { self.qp.post_recv(wr_id, sges) }
    }
}

impl DirectQp<DcInitiator> {
    /// RESET → INIT → RTR → RTS, as [`QpEx::ready`] of a DCI.
    pub fn ready(&self, sq_psn: u32, opts: &ConnectOptions) -> Result<()> {
        self.qp.ready(sq_psn, opts)
    }

    /// The address a direct DCI work request is sent to, from a DC
    /// address ([`DcAddr`]): the address handle's address vector
    /// (`mlx5dv_init_obj(MLX5DV_OBJ_AH)`) with the DCT number and DC key,
    /// as `mlx5dv_wr_set_dc_addr` writes them into the WQE. Refused
    /// ([`Error::InvalidArgument`]) when the address handle is not of the
    /// DCI's protection domain (of another device context, or another PD
    /// of its own), as a work request of [`WrBatch`](crate::WrBatch) is;
    /// a DCT number past 24 bits with [`Error::OutOfRange`].
    pub fn dc_addr(&self, addr: &DcAddr<'_>) -> Result<DirectDcAddr> {
        crate::qp::check_24_bits("remote DCT number", addr.remote_dctn())?;
        if addr.pd_ptr() != self.qp.pd().as_ptr() {
            return Err(Error::InvalidArgument(format!(
                "dc_addr on {}: the address handle {}",
                self.qp.describe(),
                crate::addressing::ah::not_of_the_qps_pd(
                    addr.pd_ptr(),
                    self.qp.pd().context().as_ptr(),
                    "DCI"
                )
            )));
        }
        let mut dvah = ffi::mlx5dv_ah::default();
        let mut obj = ffi::mlx5dv_obj::default();
        obj.ah.in_ = addr.ah_ptr();
        obj.ah.out = &mut dvah;
        // SAFETY: a live AH (borrowed by `addr`); the out-struct is
        // writable.
        let rc = unsafe { ffi::mlx5dv_init_obj(&mut obj, u64::from(ffi::MLX5DV_OBJ_AH)) };
        if rc != 0 || dvah.av.is_null() {
            return Err(Error::Unsupported {
                what: format!("mlx5dv_init_obj of an address handle failed ({rc})"),
            });
        }
        // SAFETY: libmlx5's address vector of the live AH, 48 bytes.
        let mut av: ffi::mlx5_wqe_av = unsafe { dvah.av.read() };
        av.dqp_dct |= (addr.remote_dctn() | ffi::MLX5_EXTENDED_UD_AV).to_be();
        av.key.dc_key = addr.remote_dc_key().to_be();
        // SAFETY: `mlx5_wqe_av` is 48 bytes of plain data.
        let words: [u64; 6] = unsafe { std::mem::transmute(av) };
        Ok(DirectDcAddr { words })
    }
}

impl<T: DirectTransport> fmt::Debug for DirectQp<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectQp")
            .field("transport", &T::NAME)
            .field("qp_num", &format_args!("{:#x}", self.qp_num()))
            .field("depth", &self.sq.wqe_cnt)
            .field("outstanding", &self.sq.outstanding())
            .finish()
    }
}
