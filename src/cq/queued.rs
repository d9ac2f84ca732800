//! Work the safe API leaves in a send queue after the call that posted it:
//! type 1 memory window binds ([`QpEx::bind_mw`](crate::QpEx::bind_mw),
//! `unbind_mw`), which complete asynchronously, as in C. Every other safe
//! post waits for its completions, so that only these can take up a send
//! queue between two safe calls.
//!
//! A QP's [`Queued`] counts them, from just before each is posted until the
//! crate knows it done, and a batch on the QP opens with the send queue's
//! depth less that count as its room (`WrBatch`): libmlx5 counts its send
//! queue in work requests, each in a slot sized for the largest operation
//! the QP was created with, and a builder called on a full queue writes its
//! segments over the last WQE it built (rdma-core 44 to 65:
//! `_common_wqe_init` notes the overflow and returns, and the builder goes
//! on writing), which may be a bind the device has not run yet. (A bind
//! fits a slot only on a QP created with
//! [`SendOps::BIND_MW`](crate::SendOps::BIND_MW), which `bind_mw` requires.)
//!
//! The crate knows a bind done when
//! - a poll of the QP's send CQ, by any of the crate's polls, reads its
//!   successful completion ([`WcOpcode::BIND_MW`](crate::WcOpcode::BIND_MW),
//!   its QP and its id): the CQ watches the QPs whose count is not zero
//!   (one load and a branch per poll call otherwise). A send queue
//!   completes in order, so that completion also retires every bind queued
//!   before it, as libmlx5's own count does (`sq.tail`);
//! - a scoped post on the QP ([`QpEx::post_and_wait`](crate::QpEx::post_and_wait))
//!   has seen the completion of its last work request, which was queued
//!   after every counted bind;
//! - the QP is moved to RESET ([`QpEx::reset`](crate::QpEx::reset)), which
//!   empties the queue.
//!
//! A bind that fails moves the QP to ERR, and its completion (an error) and
//! the flushes behind it retire nothing here: the QP sends again only after
//! a RESET, which does. Until then the count errs on the side of less room.

use super::PolledWc;
use crate::wc::WcOpcode;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// The binds queued on one QP and not known done.
pub(crate) struct Queued {
    qp_num: u32,
    /// Their ids, oldest first.
    ids: Mutex<VecDeque<u64>>,
    /// `ids.len()`, read without the lock by a batch's opening.
    len: AtomicU32,
}

impl Queued {
    pub(crate) fn new(qp_num: u32) -> Arc<Self> {
        Arc::new(Queued {
            qp_num,
            ids: Mutex::new(VecDeque::new()),
            len: AtomicU32::new(0),
        })
    }

    /// How many are queued (at most the send queue's depth).
    #[inline(always)]
    pub(crate) fn len(&self) -> u32 {
        self.len.load(Ordering::Acquire)
    }

    fn ids(&self) -> MutexGuard<'_, VecDeque<u64>> {
        // Nothing panics while holding it; a poisoned list is still whole.
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a bind with `wr_id`, before it is posted.
    pub(crate) fn push(&self, wr_id: u64) {
        let mut ids = self.ids();
        ids.push_back(wr_id);
        self.len.store(ids.len() as u32, Ordering::Release);
    }

    /// Takes back the bind just counted: the provider refused it and
    /// posted nothing of it.
    pub(crate) fn unpush(&self) {
        let mut ids = self.ids();
        ids.pop_back();
        self.len.store(ids.len() as u32, Ordering::Release);
    }

    /// The bind with `wr_id` completed: it and every one queued before it
    /// are done. An id not counted retires nothing.
    fn retire(&self, wr_id: u64) {
        let mut ids = self.ids();
        if let Some(at) = ids.iter().position(|&id| id == wr_id) {
            ids.drain(..=at);
            self.len.store(ids.len() as u32, Ordering::Release);
        }
    }

    /// Every bind counted is done (a later work request's completion was
    /// seen, or the queue was reset).
    pub(crate) fn clear(&self) {
        let mut ids = self.ids();
        ids.clear();
        self.len.store(0, Ordering::Release);
    }
}

/// What a CQ watches for: the [`Queued`] of the QPs that send on it and
/// have binds counted.
#[derive(Default)]
pub(crate) struct Watch {
    /// Whether `list` holds any: one load per poll call when not.
    on: AtomicBool,
    list: Mutex<Vec<Arc<Queued>>>,
}

impl Watch {
    fn list(&self) -> MutexGuard<'_, Vec<Arc<Queued>>> {
        self.list.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a poll must look for bind completions.
    #[inline(always)]
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Watches `q` (once), which has a bind counted.
    pub(crate) fn add(&self, q: &Arc<Queued>) {
        let mut list = self.list();
        if !list.iter().any(|w| Arc::ptr_eq(w, q)) {
            list.push(Arc::clone(q));
        }
        self.on.store(true, Ordering::Relaxed);
    }

    /// Stops watching what has nothing counted left.
    pub(crate) fn prune(&self) {
        let mut list = self.list();
        list.retain(|q| q.len() != 0);
        self.on.store(!list.is_empty(), Ordering::Relaxed);
    }

    /// The QPs watched now.
    pub(crate) fn snapshot(&self) -> Vec<Arc<Queued>> {
        self.list().clone()
    }
}

/// The successful bind completions a watched poll read: (QP, id).
pub(crate) type Seen = Vec<(u32, u64)>;

/// Notes `wc` if it is a successful bind completion.
#[inline(never)]
pub(crate) fn note(seen: &mut Seen, wc: &PolledWc<'_>) {
    if wc.is_success() && wc.opcode() == WcOpcode::BIND_MW {
        seen.push((wc.qp_num(), wc.wr_id()));
    }
}

/// Retires what `seen` says completed, on the QPs `watched`.
pub(crate) fn retire(watched: &[Arc<Queued>], seen: &Seen) {
    for &(qp_num, wr_id) in seen {
        for q in watched.iter().filter(|q| q.qp_num == qp_num) {
            q.retire(wr_id);
        }
    }
}
