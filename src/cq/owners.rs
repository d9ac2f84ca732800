//! Which QP a kept completion belongs to, across the QP's destruction.
//!
//! libmlx5 cleans a destroyed QP's completions out of its CQs
//! (`__mlx5_cq_clean` in `mlx5_destroy_qp`), so that a C program never
//! reads one, and the next QP given the same number is never credited with
//! it. Completions a scoped post took from the device for others wait in
//! the CQ handle's backlog, where the provider cannot clean them. So each
//! CQ knows the QPs (and DCTs) on it by number, each with a generation of
//! its own; a completion kept in the backlog is tagged with its QP's
//! generation, and one whose QP has since been destroyed is dropped when
//! the backlog is next read, as the provider would have dropped it. A
//! completion of a QP the CQ does not know (a QP made outside the crate)
//! is kept.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Generations, process-wide: a QP's is never another's.
static NEXT: AtomicU64 = AtomicU64::new(1);

/// The live QPs on one CQ: number → generation.
#[derive(Default)]
pub(crate) struct Owners(Mutex<HashMap<u32, u64>>);

impl Owners {
    fn map(&self) -> MutexGuard<'_, HashMap<u32, u64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new generation, for a QP made now.
    pub(crate) fn generation() -> u64 {
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// QP `qp_num` of generation `gen` is on this CQ.
    pub(crate) fn add(&self, qp_num: u32, gen: u64) {
        self.map().insert(qp_num, gen);
    }

    /// QP `qp_num` of generation `gen` was destroyed.
    pub(crate) fn remove(&self, qp_num: u32, gen: u64) {
        let mut map = self.map();
        if map.get(&qp_num) == Some(&gen) {
            map.remove(&qp_num);
        }
    }

    /// The generation of the live QP `qp_num` (0: none the CQ knows).
    pub(crate) fn of(&self, qp_num: u32) -> u64 {
        self.map().get(&qp_num).copied().unwrap_or(0)
    }

    /// Whether a completion of QP `qp_num` kept at generation `gen` is
    /// still its QP's: a QP the CQ did not know, or that QP still live.
    pub(crate) fn alive(&self, qp_num: u32, gen: u64) -> bool {
        gen == 0 || self.map().get(&qp_num) == Some(&gen)
    }
}
