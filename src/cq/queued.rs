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
//!   its QP and its id) from the device: a CQ watches the QPs made on it
//!   with `BIND_MW` among their send ops, for their whole life (one load
//!   and a branch per poll call on a CQ without one). A send queue
//!   completes in order, so that completion also retires every bind queued
//!   before it, as libmlx5's own count does (`sq.tail`). It is noted when
//!   the poll reads it, before the callback sees it, with the count's
//!   epoch, and retired when the poll ends (or unwinds): a count emptied
//!   in between (a reset, a scoped post's end, the QP's drop, perhaps from
//!   code run when the poll ended) has a new epoch, and a bind counted
//!   since with the same id is not taken for it. A completion handed out
//!   again from the CQ's backlog is not noted again;
//! - a scoped post on the QP ([`QpEx::post_and_wait`](crate::QpEx::post_and_wait))
//!   has seen the completion of its last work request, which was queued
//!   after every counted bind;
//! - the QP is moved to RESET ([`QpEx::reset`](crate::QpEx::reset)), which
//!   empties the queue.
//!
//! A bind that fails moves the QP to ERR, and its completion (an error) and
//! the flushes behind it retire nothing here: the QP sends again only after
//! a RESET, which does. Until then the count errs on the side of less room.
//! A QP's drop empties its count (its destruction removes its completions
//! from the CQ).
//!
//! The CQ's places: each completion the device owes a CQ and no poll has
//! read yet takes one, and the device drops completions past its capacity
//! (an overrun). [`Watch::taken`] counts them: the binds counted on its
//! QPs, an `AsyncQp`'s operations in flight, a scoped post's batch while
//! it runs. Each takes its places before it posts, refused when they are
//! not there.

use super::PolledWc;
use crate::wc::WcOpcode;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Epochs, process-wide: one count's is never another's.
static NEXT_EPOCH: AtomicU64 = AtomicU64::new(1);

fn new_epoch() -> u64 {
    NEXT_EPOCH.fetch_add(1, Ordering::Relaxed)
}

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
    /// The count's epoch: new each time it is emptied (under the lock).
    epoch: AtomicU64,
}

impl Queued {
    pub(crate) fn new(qp_num: u32, depth: u32) -> Arc<Self> {
        Arc::new(Queued {
            qp_num,
            depth,
            ids: Mutex::new(VecDeque::new()),
            len: AtomicU32::new(0),
            room: AtomicU32::new(depth),
            epoch: AtomicU64::new(new_epoch()),
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

    fn push(&self, wr_id: u64) {
        let mut ids = self.ids();
        ids.push_back(wr_id);
        self.set_len(ids.len());
    }

    /// Takes back the newest: returns how many were taken back (0 or 1).
    fn unpush(&self) -> u32 {
        let mut ids = self.ids();
        let n = u32::from(ids.pop_back().is_some());
        self.set_len(ids.len());
        n
    }

    /// The bind with `wr_id`, counted in `epoch`, completed: it and every
    /// one queued before it are done. Returns how many that retired: none
    /// for an id not counted, or counted in another epoch.
    fn retire(&self, wr_id: u64, epoch: u64) -> u32 {
        let mut ids = self.ids();
        if self.epoch.load(Ordering::Acquire) != epoch {
            return 0;
        }
        match ids.iter().position(|&id| id == wr_id) {
            Some(at) => {
                ids.drain(..=at);
                self.set_len(ids.len());
                at as u32 + 1
            }
            None => 0,
        }
    }

    /// Every bind counted is done, or gone: a new epoch. Returns how many
    /// were counted.
    fn clear(&self) -> u32 {
        let mut ids = self.ids();
        let n = ids.len() as u32;
        ids.clear();
        self.set_len(0);
        self.epoch.store(new_epoch(), Ordering::Release);
        n
    }
}

/// A CQ's ledger: the [`Queued`] of the QPs made on it that can bind
/// (watched by its polls), and the places taken in it.
pub(crate) struct Watch {
    /// Whether `list` holds any: one load per poll call when not.
    on: AtomicBool,
    list: Mutex<Vec<Arc<Queued>>>,
    /// The CQ's places (high 32 bits) and those taken (low 32 bits), in
    /// one word so that a take and a resize's shrink cannot both pass:
    /// the places are the CQ's capacity as created, or its capacity less
    /// one after a resize (see [`shrink`](Self::shrink)); those taken are
    /// completions owed to the CQ that no poll has read yet (binds
    /// counted, an `AsyncQp`'s operations, a scoped post's batch while it
    /// runs), never more than the places.
    state: AtomicU64,
}

fn split(state: u64) -> (u32, u32) {
    ((state >> 32) as u32, state as u32)
}

fn join(places: u32, taken: u32) -> u64 {
    (u64::from(places) << 32) | u64::from(taken)
}

impl Watch {
    pub(crate) fn new(capacity: u32) -> Self {
        Watch {
            on: AtomicBool::new(false),
            list: Mutex::new(Vec::new()),
            state: AtomicU64::new(join(capacity, 0)),
        }
    }

    /// The places.
    pub(crate) fn places(&self) -> u32 {
        split(self.state.load(Ordering::Acquire)).0
    }

    /// Sets the places to `places`, if no more are taken: `Err(taken)`
    /// otherwise. A resize shrinks them before the CQ shrinks, so that no
    /// take can pass in between.
    pub(crate) fn shrink(&self, places: u32) -> Result<(), u32> {
        self.state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                let (_, taken) = split(s);
                (taken <= places).then(|| join(places, taken))
            })
            .map(drop)
            .map_err(|s| split(s).1)
    }

    /// Sets the places to `places`, at least as many as taken (a resize
    /// that grew the CQ, or failed and left it as it was).
    pub(crate) fn set_places(&self, places: u32) {
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                let (_, taken) = split(s);
                Some(join(places.max(taken), taken))
            });
    }

    /// The binds counted on the QPs sending on this CQ: completions in it
    /// or still to come, which no poll has read yet.
    pub(crate) fn binds(&self) -> u32 {
        if !self.is_on() {
            return 0;
        }
        self.list().iter().map(|q| q.len()).sum()
    }

    /// The places taken in the CQ.
    #[cfg(test)]
    pub(crate) fn taken(&self) -> u32 {
        split(self.state.load(Ordering::Acquire)).1
    }

    fn list(&self) -> MutexGuard<'_, Vec<Arc<Queued>>> {
        self.list.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a poll must look for bind completions.
    #[inline(always)]
    pub(crate) fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Watches `q`, a QP made on this CQ that can bind, for its life.
    /// Another count of the same QP number (a handle of the same QP, or of
    /// a QP since destroyed, that is no longer used: a handle that wraps a
    /// QP requires that no work request posted on it before is
    /// outstanding) is dropped, with its places.
    pub(crate) fn register(&self, q: &Arc<Queued>) {
        let mut list = self.list();
        if list.iter().any(|w| Arc::ptr_eq(w, q)) {
            return;
        }
        list.retain(|w| {
            let stale = w.qp_num == q.qp_num;
            if stale {
                self.give_back(w.clear());
            }
            !stale
        });
        list.push(Arc::clone(q));
        self.on.store(true, Ordering::Relaxed);
    }

    /// `q`'s QP was destroyed: its binds' completions went with it.
    pub(crate) fn unregister(&self, q: &Arc<Queued>) {
        let mut list = self.list();
        self.give_back(q.clear());
        list.retain(|w| !Arc::ptr_eq(w, q));
        self.on.store(!list.is_empty(), Ordering::Relaxed);
    }

    /// Takes `n` places, unless fewer are left: then `Err((taken,
    /// capacity))`.
    pub(crate) fn take(&self, n: u32) -> Result<(), (u32, u32)> {
        self.state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                let (places, taken) = split(s);
                taken
                    .checked_add(n)
                    .filter(|&after| after <= places)
                    .map(|after| join(places, after))
            })
            .map(drop)
            .map_err(|s| {
                let (places, taken) = split(s);
                (taken, places)
            })
    }

    /// Gives `n` places back.
    pub(crate) fn give_back(&self, n: u32) {
        if n != 0 {
            let _ = self
                .state
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                    let (places, taken) = split(s);
                    Some(join(places, taken.saturating_sub(n)))
                });
        }
    }

    /// Counts a bind with `wr_id` on `q` (registered here when its QP was
    /// made: a bind needs `BIND_MW`), with its place in the CQ;
    /// `Err((taken, capacity))` when none is left.
    pub(crate) fn admit(&self, q: &Queued, wr_id: u64) -> Result<(), (u32, u32)> {
        self.take(1)?;
        q.push(wr_id);
        Ok(())
    }

    /// Takes back the bind just admitted on `q`: the provider refused it.
    pub(crate) fn unadmit(&self, q: &Queued) {
        self.give_back(q.unpush());
    }

    /// Every bind counted on `q` is done: a later work request's
    /// completion was seen, or the queue reset.
    pub(crate) fn clear(&self, q: &Queued) {
        self.give_back(q.clear());
    }

    /// Notes `wc`, read from the device, if it is a successful bind
    /// completion of a QP watched here, with that QP's epoch.
    #[inline(never)]
    pub(crate) fn note(&self, seen: &mut Seen, wc: &PolledWc<'_>) {
        if wc.is_success() && wc.opcode() == WcOpcode::BIND_MW {
            let qp_num = wc.qp_num();
            if let Some(q) = self.list().iter().find(|q| q.qp_num == qp_num) {
                seen.push((Arc::clone(q), wc.wr_id(), q.epoch.load(Ordering::Acquire)));
            }
        }
    }

    /// Retires what `seen` noted, giving back the binds' places.
    pub(crate) fn retire(&self, seen: &mut Seen) {
        for (q, wr_id, epoch) in seen.drain(..) {
            self.give_back(q.retire(wr_id, epoch));
        }
    }
}

/// The successful bind completions a watched poll read: (its QP's count,
/// id, the count's epoch then).
pub(crate) type Seen = Vec<(Arc<Queued>, u64, u64)>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_taken_up_to_the_capacity_and_given_back() {
        let w = Watch::new(4);
        assert_eq!(w.take(3), Ok(()));
        assert_eq!(w.take(2), Err((3, 4)));
        assert_eq!(w.take(1), Ok(()));
        assert_eq!(w.take(1), Err((4, 4)));
        w.give_back(2);
        assert_eq!(w.taken(), 2);
        // More given back than taken leaves none, never a wrapped count.
        w.give_back(9);
        assert_eq!(w.taken(), 0);
        assert_eq!(w.take(5), Err((0, 4)));
        assert_eq!(w.take(u32::MAX), Err((0, 4)));
    }

    #[test]
    fn binds_take_places_and_leave_room_until_retired_in_their_epoch() {
        let w = Watch::new(3);
        let q = Queued::new(0x10, 8);
        w.register(&q);
        assert!(w.is_on());
        for id in [7, 8, 9] {
            w.admit(&q, id).unwrap();
        }
        assert_eq!((q.len(), q.room(), w.binds(), w.taken()), (3, 5, 3, 3));
        assert_eq!(w.admit(&q, 10), Err((3, 3)));
        assert_eq!(q.len(), 3, "a refused bind is not counted");
        // A completion noted in the current epoch retires its bind and
        // those before it.
        let epoch = q.epoch.load(Ordering::Acquire);
        let mut seen: Seen = vec![(Arc::clone(&q), 8, epoch)];
        w.retire(&mut seen);
        assert!(seen.is_empty());
        assert_eq!((q.len(), w.taken()), (1, 1));
        // The count emptied (a reset), then a bind with an id seen before:
        // an older note retires nothing.
        w.clear(&q);
        assert_eq!((q.len(), w.taken()), (0, 0));
        w.admit(&q, 9).unwrap();
        let mut stale: Seen = vec![(Arc::clone(&q), 9, epoch)];
        w.retire(&mut stale);
        assert_eq!((q.len(), w.taken()), (1, 1));
        // A refused post takes back the bind it counted.
        w.admit(&q, 11).unwrap();
        w.unadmit(&q);
        assert_eq!((q.len(), w.taken()), (1, 1));
        // The QP's drop: its binds' places come back, and it is not
        // watched any more.
        w.unregister(&q);
        assert_eq!((w.taken(), w.binds()), (0, 0));
        assert!(!w.is_on());
    }
}
