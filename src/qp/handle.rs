//! The QP handle, [`QpEx`]: what it holds, its creation from the
//! builder's parts, its drop, and what every transport's QP does (state,
//! reset, the scoped post's entry). The transports' own calls are in
//! their files (`rc.rs`, `ud.rs`, ...).

use super::checks::{check_psn, check_retries, query_state, NO_PSN};
use super::ops::{self, WrOps};
use super::scope::ScopeIds;
use super::transport::{DcInitiator, ReliableConnection, Transport, UnreliableDatagram};
use crate::addressing::ConnectOptions;
use crate::cq::{CompletionQueue, CqInner};
use crate::error::{check, Error, Result};
use crate::ffi;
use crate::pd::ProtectionDomain;
use crate::qp_spec::{DciStreams, Mlx5SendOps, QpCaps, SendOps};
use crate::qp_state::{QpKind, QpState};
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

/// An RC queue pair ([`QpBuilder::rc`](crate::QpBuilder::rc)): `QpEx<ReliableConnection>`.
pub type RcQp = QpEx<ReliableConnection>;

/// An mlx5 DC initiator ([`QpBuilder::dci`](crate::QpBuilder::dci)): `QpEx<DcInitiator>`.
pub type DciQp = QpEx<DcInitiator>;

/// A UD queue pair ([`QpBuilder::ud`](crate::QpBuilder::ud)): `QpEx<UnreliableDatagram>`.
pub type UdQp = QpEx<UnreliableDatagram>;

use crate::cq::in_poll_callback;

/// What an mlx5 QP was created with.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mlx5Info {
    /// The mlx5 extension of the QP (`mlx5dv_qp_ex_from_ibv_qp_ex`), for
    /// QPs made with `mlx5dv_create_qp`.
    pub(crate) mqpx: Option<NonNull<ffi::mlx5dv_qp_ex>>,
    /// The mlx5 builders it was created with.
    pub(crate) ops: Mlx5SendOps,
    /// The device's `max_wr_memcpy_length` (0: memcpy not supported).
    pub(crate) max_memcpy: u64,
    /// DCI streams it was created with.
    pub(crate) streams: Option<DciStreams>,
    /// The 64-byte blocks of the QP's WQE, what a raw WQE may take
    /// (`wr::wqe_blocks` of its capabilities), worked out once. Here,
    /// copied into each batch, rather than behind a pointer the
    /// provider's calls might write through (the compiler would read it
    /// again at each work request).
    pub(crate) wqe_blocks: u32,
}

/// A queue pair with the extended work-request API. `T` is its transport
/// ([`ReliableConnection`], [`UnreliableConnection`](crate::UnreliableConnection), [`DcInitiator`],
/// ...); posting goes through [`QpEx::batch`].
///
/// Owned by one value (not cloneable): posting needs `&mut self`, so two
/// threads cannot interleave batches on one QP. It keeps its PD and CQs
/// alive, and is destroyed on drop.
pub struct QpEx<T: Transport> {
    pub(crate) qp: NonNull<ffi::ibv_qp>,
    pub(crate) qpx: NonNull<ffi::ibv_qp_ex>,
    pub(crate) mlx5: Mlx5Info,
    /// The provider entries the batch calls, resolved at creation.
    pub(crate) ops: Box<WrOps>,
    pub(crate) caps: QpCaps,
    pub(super) send_ops: SendOps,
    pub(super) owned: bool,
    /// The ids of the next scoped post ([`QpEx::post_and_wait`]).
    pub(crate) scope: ScopeIds,
    /// The PSN this QP's last [`QpEx::endpoint`] gave the peer
    /// ([`NO_PSN`] before any).
    pub(crate) local_psn: std::sync::atomic::AtomicU32,
    /// How many times [`QpEx::reset`] moved the QP to RESET: an owner that
    /// lends the QP out (`AsyncQp::with_qp`) sees by it that the work
    /// requests it tracks were ended.
    pub(crate) resets: std::sync::atomic::AtomicU64,
    /// The SRQ its receives come from ([`QpBuilder::srq`]); kept alive
    /// until after the QP is destroyed.
    pub(crate) srq: Option<crate::SharedReceiveQueue>,
    /// The largest message a send may carry: on a UD QP the port's active
    /// MTU, set when it is made ready ([`UdQp::ready`]); `u32::MAX` (no
    /// limit of the crate's) otherwise.
    pub(crate) max_message: std::sync::atomic::AtomicU32,
    /// The type 1 memory window binds queued on the send queue and not yet
    /// known done, which a batch leaves room for (see `crate::cq::Queued`).
    pub(crate) queued: Arc<crate::cq::Queued>,
    /// The QP's generation in its CQs' [`Owners`](crate::cq::Owners): a
    /// completion of it kept in a CQ's backlog is dropped once it is
    /// destroyed, as the provider cleans its CQs of the rest.
    pub(super) generation: u64,
    // Dropped after the QP is destroyed (fields drop after Drop::drop).
    pub(super) pd: ProtectionDomain,
    pub(super) send_cq: Arc<CqInner>,
    pub(super) _recv_cq: Arc<CqInner>,
    pub(super) _t: PhantomData<T>,
}

// SAFETY: the QP is used through verbs calls that are safe from any thread;
// posting needs `&mut self`, so one thread at a time builds a batch.
unsafe impl<T: Transport> Send for QpEx<T> {}
// SAFETY: `&self` methods are state transitions and queries, which the
// provider and kernel serialise; the batch state (`ops.open`) is only
// touched through `&mut self` or by a batch, which borrows the QP mutably.
unsafe impl<T: Transport> Sync for QpEx<T> {}

impl<T: Transport> Drop for QpEx<T> {
    fn drop(&mut self) {
        self.abort_if_leaked();
        if self.owned {
            let qp = self.qp;
            let (qp_num, generation) = (self.qp_num(), self.generation);
            let queued = Arc::clone(&self.queued);
            let parents = (
                self.pd.clone(),
                Arc::clone(&self.send_cq),
                Arc::clone(&self._recv_cq),
                self.srq.clone(),
            );
            // Dropped inside a poll callback, the QP is destroyed when the
            // poll ends: mlx5's ibv_destroy_qp takes the locks of the QP's
            // CQs, one of which the poll may hold on this thread.
            crate::cq::after_polls(Box::new(move || {
                // SAFETY: created by the handle being dropped and destroyed
                // once, here; no batch is alive (a batch borrows the QP
                // mutably, and a leaked one was aborted above); its PD,
                // CQs and SRQ are kept alive until after the call.
                let rc = unsafe { ffi::ibv_destroy_qp(qp.as_ptr()) };
                crate::error::report_destroy_failure(
                    "ibv_destroy_qp",
                    rc,
                    parents.0.context().name(),
                );
                if rc == 0 {
                    // Gone, and its completions with it (the provider
                    // cleaned its CQs): those kept in a backlog go too.
                    parents.1.owners.remove(qp_num, generation);
                    parents.2.owners.remove(qp_num, generation);
                    // Its binds' places in the send CQ too: the provider
                    // removed their completions (mlx5; soft-RoCE leaves a
                    // destroyed QP's completions in the CQ until polled,
                    // places the count no longer holds).
                    parents.1.watch.unregister(&queued);
                }
                drop(parents);
            }));
        }
    }
}

/// The parts a [`QpEx`] is assembled from.
pub(crate) struct QpParts<'a> {
    pub(crate) qp: NonNull<ffi::ibv_qp>,
    pub(crate) qpx: NonNull<ffi::ibv_qp_ex>,
    pub(crate) mlx5: Mlx5Info,
    pub(crate) caps: QpCaps,
    pub(crate) send_ops: SendOps,
    pub(crate) owned: bool,
    pub(crate) pd: &'a ProtectionDomain,
    pub(crate) send_cq: &'a CompletionQueue,
    pub(crate) recv_cq: &'a CompletionQueue,
}

impl<T: Transport> QpEx<T> {
    /// Assembles a QP and checks, once, that the provider filled every
    /// function-table entry a batch may call for what it was created with.
    /// On failure an owned QP is destroyed (by Drop).
    pub(crate) fn assemble(p: QpParts<'_>) -> Result<Self> {
        let ops = match Self::resolve_ops(p.qpx, &p.mlx5, p.send_ops, p.pd.context().name()) {
            Ok(ops) => ops,
            Err(e) => {
                if p.owned {
                    // SAFETY: created by our caller for this QpEx, never
                    // shared; destroyed once.
                    unsafe { ffi::ibv_destroy_qp(p.qp.as_ptr()) };
                }
                return Err(e);
            }
        };
        let qp = QpEx {
            ops: Box::new(WrOps {
                depth: p.caps.max_send_wr,
                mqpx: p.mlx5.mqpx.map_or(std::ptr::null_mut(), NonNull::as_ptr),
                ..ops
            }),
            qp: p.qp,
            qpx: p.qpx,
            mlx5: Mlx5Info {
                wqe_blocks: crate::qp_spec::wqe_blocks(&p.caps),
                ..p.mlx5
            },
            caps: p.caps,
            send_ops: p.send_ops,
            owned: p.owned,
            scope: Default::default(),
            local_psn: std::sync::atomic::AtomicU32::new(NO_PSN),
            resets: std::sync::atomic::AtomicU64::new(0),
            srq: None,
            max_message: std::sync::atomic::AtomicU32::new(u32::MAX),
            queued: crate::cq::Queued::new(
                // SAFETY: the QP is live.
                unsafe { (*p.qp.as_ptr()).qp_num },
                p.caps.max_send_wr,
            ),
            generation: crate::cq::Owners::generation(),
            pd: p.pd.clone(),
            send_cq: p.send_cq.share(),
            _recv_cq: p.recv_cq.share(),
            _t: PhantomData,
        };
        let qp_num = qp.qp_num();
        qp.send_cq.owners.add(qp_num, qp.generation);
        qp._recv_cq.owners.add(qp_num, qp.generation);
        if p.send_ops.contains(SendOps::BIND_MW) {
            // Its binds' completions are looked for by every poll of its
            // send CQ, for its whole life.
            qp.send_cq.watch.register(&qp.queued);
        }
        Ok(qp)
    }

    /// Resolves, once, the provider's function-table entries a batch may
    /// call for what the QP was created with (see [`ops`]).
    fn resolve_ops(
        qpx: NonNull<ffi::ibv_qp_ex>,
        mlx5: &Mlx5Info,
        send_ops: SendOps,
        device: &str,
    ) -> Result<WrOps> {
        let want = ops::Wanted {
            send_ops,
            mlx5_ops: mlx5.ops,
            dc: T::DC,
            ud: T::QP_TYPE == ffi::IBV_QPT_UD,
            streams: mlx5.streams.is_some(),
            xrc: T::QP_TYPE == ffi::IBV_QPT_XRC_SEND,
        };
        // SAFETY: `qpx` is the live extended QP and `mqpx` its mlx5
        // extension, made with the flags `want` describes.
        unsafe { WrOps::resolve(qpx.as_ref(), mlx5.mqpx.map(|m| &*m.as_ptr()), &want) }.map_err(
            |missing| Error::Unsupported {
                what: format!(
                    "the provider of {device} left these entries NULL: {}",
                    missing.join(", ")
                ),
            },
        )
    }

    /// The QP's kind, for [`WorkCompletion::ok_for`](crate::WorkCompletion::ok_for)
    /// of a completion polled from a CQ (a scoped post's completions carry
    /// it already). An RC QP connected through rdma_cm is
    /// [`QpKind::Rc`] here too.
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # use std::time::Duration;
    /// # fn f(qp: &UdQp, cq: &mut CompletionQueue) -> Result<()> {
    /// let wc = cq.wait(1, Duration::from_secs(1))?[0];
    /// // On error, the text gives a UD QP's causes (UD_GRH_BYTES) and
    /// // recovery (ready(port, qkey, psn)).
    /// wc.ok_for(qp.kind())?;
    /// # Ok(()) }
    /// ```
    pub const fn kind(&self) -> QpKind {
        T::KIND
    }

    /// The QP number (on a DCI too; a DCT's is its DCT number).
    pub fn qp_num(&self) -> u32 {
        // SAFETY: the QP is live.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    /// The mlx5 builders it was created with (empty for a QP made with
    /// `ibv_create_qp_ex`).
    pub fn mlx5_send_ops(&self) -> Mlx5SendOps {
        self.mlx5.ops
    }

    /// The sizes the QP got (at least what was asked).
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The SRQ its receives come from ([`QpBuilder::srq`](crate::QpBuilder::srq)), if any.
    pub fn srq(&self) -> Option<&crate::SharedReceiveQueue> {
        self.srq.as_ref()
    }

    /// The builders it was created with.
    pub fn send_ops(&self) -> SendOps {
        self.send_ops
    }

    /// The raw QP, valid while this handle lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_qp {
        self.qp.as_ptr()
    }

    /// The raw extended QP, valid while this handle lives.
    pub fn as_qp_ex_ptr(&self) -> *mut ffi::ibv_qp_ex {
        self.qpx.as_ptr()
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// Whether `cq` is the CQ this QP's receives complete on.
    pub(crate) fn recv_cq_is(&self, cq: &CompletionQueue) -> bool {
        self._recv_cq.cq.as_ptr() == cq.as_ptr()
    }

    /// Whether `cq` is the CQ this QP's sends complete on.
    pub fn completes_on(&self, cq: &CompletionQueue) -> bool {
        self.send_cq.cq.as_ptr() == cq.as_ptr()
    }

    /// The current state (`ibv_query_qp(3)`).
    pub fn state(&self) -> Result<QpState> {
        // SAFETY: the QP is live.
        unsafe { query_state(self.as_ptr()) }
            .map_err(|rc| Error::verbs("ibv_query_qp", rc, self.describe()))
    }

    pub(crate) fn describe(&self) -> String {
        format!(
            "{} QP {:#x} on {}",
            T::NAME,
            self.qp_num(),
            self.pd.context().name()
        )
    }

    pub(crate) fn modify(&self, attr: &mut ffi::ibv_qp_attr, mask: u32, to: &str) -> Result<()> {
        // SAFETY: the QP is live; `attr` is initialised for every bit of
        // `mask`.
        let rc = unsafe { ffi::ibv_modify_qp(self.as_ptr(), attr, mask as i32) };
        check(rc, "ibv_modify_qp", || {
            format!("{} to {to}", self.describe())
        })
    }

    /// RTR → RTS, sending from packet sequence number `sq_psn` (the same
    /// attributes for RC and DCI).
    pub(crate) fn rts_from_rtr(&self, sq_psn: u32, opts: &ConnectOptions) -> Result<()> {
        check_psn(sq_psn)?;
        check_retries(opts)?;
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RTS,
            timeout: opts.timeout,
            retry_cnt: opts.retry_cnt,
            rnr_retry: opts.rnr_retry,
            sq_psn,
            max_rd_atomic: opts.max_rd_atomic,
            ..Default::default()
        };
        let mask = ffi::IBV_QP_STATE
            | ffi::IBV_QP_TIMEOUT
            | ffi::IBV_QP_RETRY_CNT
            | ffi::IBV_QP_RNR_RETRY
            | ffi::IBV_QP_SQ_PSN
            | ffi::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut a, mask, "RTS")
    }

    /// Moves the QP to ERR: outstanding work requests complete with
    /// [`WcStatus::WR_FLUSH_ERR`](crate::WcStatus::WR_FLUSH_ERR).
    pub fn to_error(&self) -> Result<()> {
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_ERR,
            ..Default::default()
        };
        self.modify(&mut a, ffi::IBV_QP_STATE, "ERR")
    }

    /// Moves the QP to RESET, from which it can be connected again.
    ///
    /// Refused ([`Error::InvalidArgument`]) inside a
    /// [`poll_each`](crate::CompletionQueue::poll_each) callback: mlx5
    /// cleans the QP's CQs on this transition, under the lock the poll
    /// holds, and would wait for ever.
    pub fn reset(&self) -> Result<()> {
        if crate::cq::in_provider_poll() {
            return Err(in_poll_callback("ibv_modify_qp to RESET", &self.describe()));
        }
        // mlx5 resets the send queue's indices; a leaked batch's abort
        // after that would restore its stale ones.
        self.abort_if_leaked();
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RESET,
            ..Default::default()
        };
        self.modify(&mut a, ffi::IBV_QP_STATE, "RESET")?;
        self.resets
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // The queue is empty: no bind counted is left in it (and a bind
        // completion read before, not yet retired, retires nothing now).
        self.send_cq.watch.clear(&self.queued);
        Ok(())
    }

    /// Counts a type 1 bind with `wr_id` as queued, before it is posted,
    /// and has the send CQ's polls look for its completion; refused
    /// ([`Error::SendQueueFull`]) when the binds already queued fill the
    /// send queue.
    pub(crate) fn queue_bind(&self, wr_id: u64) -> Result<()> {
        let (queued, depth) = (self.queued.len(), self.ops.depth);
        if queued >= depth {
            return Err(Error::SendQueueFull {
                batch: 1,
                depth: depth - queued.min(depth),
            });
        }
        // Each bind's completion takes a place in the send CQ until a poll
        // reads it: the binds counted on its QPs fill it at most.
        self.send_cq
            .watch
            .admit(&self.queued, wr_id)
            .map_err(|(on_cq, capacity)| Error::OutOfRange {
                what: "memory window binds in flight on the send CQ",
                value: u64::from(on_cq) + 1,
                limit: format!(
                    "at most its capacity ({capacity}): poll the completions of the binds \
                     posted before"
                ),
            })
    }

    /// Takes back the bind [`queue_bind`](Self::queue_bind) just counted:
    /// the provider refused it and posted nothing of it.
    pub(crate) fn unqueue_bind(&self) {
        self.send_cq.watch.unadmit(&self.queued);
    }

    /// Marks every type 1 bind counted on the send queue done (the queue
    /// was reset, or a later work request's completion seen), and stops
    /// the send CQ's watch for them.
    #[inline]
    pub(crate) fn forget_queued(&self) {
        if self.queued.len() != 0 {
            self.send_cq.watch.clear(&self.queued);
        }
    }
}

impl<T: Transport> fmt::Debug for QpEx<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QpEx")
            .field("transport", &T::NAME)
            .field("qp_num", &format_args!("{:#x}", self.qp_num()))
            .field("caps", &self.caps)
            .field("send_ops", &self.send_ops)
            .field("mlx5_send_ops", &self.mlx5.ops)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_is_24_bits() {
        assert!(check_psn(0).is_ok());
        assert!(check_psn(0x00FF_FFFF).is_ok());
        assert!(matches!(
            check_psn(0x0100_0000),
            Err(Error::OutOfRange {
                what: "PSN",
                value: 0x0100_0000,
                ..
            })
        ));
        assert!(check_psn(u32::MAX).is_err());
    }

    #[test]
    fn qp_states_map_from_the_c_values() {
        assert_eq!(QpState::from_raw(ffi::IBV_QPS_RESET), QpState::Reset);
        assert_eq!(QpState::from_raw(ffi::IBV_QPS_RTS), QpState::Rts);
        assert_eq!(QpState::from_raw(ffi::IBV_QPS_ERR), QpState::Err);
        assert_eq!(QpState::from_raw(99), QpState::Other(99));
    }

    #[test]
    fn default_send_ops_are_the_rc_set() {
        let ops = SendOps::rc_default();
        assert!(ops.contains(SendOps::RDMA_WRITE | SendOps::RDMA_READ | SendOps::SEND));
        assert!(!ops.contains(SendOps::BIND_MW));
        assert_eq!(
            SendOps::RDMA_WRITE.bits(),
            u64::from(ffi::IBV_QP_EX_WITH_RDMA_WRITE)
        );
    }
}
