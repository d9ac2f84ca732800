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
    /// The send queue's depth (`max_send_wr`).
    depth: u32,
    /// Their ids, oldest first.
    ids: Mutex<VecDeque<u64>>,
    /// `ids.len()`, read without the lock.
    len: AtomicU32,
    /// `depth - len`: the room a batch on the QP opens with (one load,
    /// as the depth itself was).
    room: AtomicU32,
}

impl Queued {
    pub(crate) fn new(qp_num: u32, depth: u32) -> Arc<Self> {
        Arc::new(Queued {
            qp_num,
            depth,
            ids: Mutex::new(VecDeque::new()),
            len: AtomicU32::new(0),
            room: AtomicU32::new(depth),
        })
    }

    /// How many are queued (at most the send queue's depth).
    #[inline(always)]
    pub(crate) fn len(&self) -> u32 {
        self.len.load(Ordering::Acquire)
    }

    /// The send queue's room: its depth less the binds queued.
    #[inline(always)]
    pub(crate) fn room(&self) -> u32 {
        self.room.load(Ordering::Acquire)
    }

    /// Records the list's new length (under its lock).
    fn set_len(&self, len: usize) {
        let len = (len as u32).min(self.depth);
        self.len.store(len, Ordering::Release);
        self.room.store(self.depth - len, Ordering::Release);
    }

    fn ids(&self) -> MutexGuard<'_, VecDeque<u64>> {
        // Nothing panics while holding it; a poisoned list is still whole.
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts a bind with `wr_id`, before it is posted.
    pub(crate) fn push(&self, wr_id: u64) {
        let mut ids = self.ids();
        ids.push_back(wr_id);
        self.set_len(ids.len());
    }

    /// Takes back the bind just counted: the provider refused it and
    /// posted nothing of it.
    pub(crate) fn unpush(&self) {
        let mut ids = self.ids();
        ids.pop_back();
        self.set_len(ids.len());
    }

    /// The bind with `wr_id` completed: it and every one queued before it
    /// are done. An id not counted retires nothing.
    fn retire(&self, wr_id: u64) {
        let mut ids = self.ids();
        if let Some(at) = ids.iter().position(|&id| id == wr_id) {
            ids.drain(..=at);
            self.set_len(ids.len());
        }
    }

    /// Every bind counted is done (a later work request's completion was
    /// seen, or the queue was reset).
    pub(crate) fn clear(&self) {
        let mut ids = self.ids();
        ids.clear();
        self.set_len(0);
    }
}

/// What a CQ watches for: the [`Queued`] of the QPs that send on it and
/// have binds counted.
pub(crate) struct Watch {
    /// Whether `list` holds any: one load per poll call when not.
    on: AtomicBool,
    list: Mutex<Vec<Arc<Queued>>>,
    /// The CQ's capacity (as created or last resized): the binds counted
    /// on its QPs, each of whose completions is in the CQ or still to
    /// come, may not be more.
    capacity: AtomicU32,
}

impl Watch {
    pub(crate) fn new(capacity: u32) -> Self {
        Watch {
            on: AtomicBool::new(false),
            list: Mutex::new(Vec::new()),
            capacity: AtomicU32::new(capacity),
        }
    }

    /// The CQ's capacity.
    pub(crate) fn capacity(&self) -> u32 {
        self.capacity.load(Ordering::Relaxed)
    }

    /// Records the CQ's new capacity (a resize).
    pub(crate) fn set_capacity(&self, capacity: u32) {
        self.capacity.store(capacity, Ordering::Relaxed);
    }

    /// The binds counted on the QPs sending on this CQ: completions in it
    /// or still to come, which no poll has read yet.
    pub(crate) fn binds(&self) -> u32 {
        if !self.is_on() {
            return 0;
        }
        self.list().iter().map(|q| q.len()).sum()
    }

    fn list(&self) -> MutexGuard<'_, Vec<Arc<Queued>>> {
        self.list.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a poll must look for bind completions.
    #[inline(always)]
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Counts a bind with `wr_id` on `q` and watches `q`, unless the binds
    /// counted on this CQ's QPs fill it: then `Err((binds, capacity))`.
    /// Under the list's lock, so that binds on two QPs at once cannot both
    /// take its last place.
    pub(crate) fn admit(&self, q: &Arc<Queued>, wr_id: u64) -> Result<(), (u32, u32)> {
        let mut list = self.list();
        let on_cq: u32 = list.iter().map(|w| w.len()).sum();
        let capacity = self.capacity();
        if on_cq >= capacity {
            return Err((on_cq, capacity));
        }
        q.push(wr_id);
        if !list.iter().any(|w| Arc::ptr_eq(w, q)) {
            list.push(Arc::clone(q));
        }
        self.on.store(true, Ordering::Relaxed);
        Ok(())
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

impl super::CompletionQueue {
    /// How many completions of type 1 memory window binds
    /// ([`RcQp::bind_mw`](crate::RcQp::bind_mw),
    /// [`unbind_mw`](crate::RcQp::unbind_mw)) posted on the QPs sending on
    /// this CQ no poll has read yet: they are in the CQ or still to come.
    /// Each takes a place in the CQ until then, so a bind, a scoped post or
    /// a [`resize`](Self::resize) that would leave the device more
    /// completions than the CQ holds is refused with
    /// [`Error::OutOfRange`](crate::Error::OutOfRange): poll these first.
    #[inline]
    pub fn binds_in_flight(&self) -> u32 {
        self.inner.watch.binds()
    }
}
