//! A QP's scoped-post state ([`ScopeIds`]): what `crate::wr`'s scoped
//! posts keep on the QP between batches.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

/// The bit every scoped post's work request id has (see
/// [`WrBatch::complete`](crate::WrBatch::complete)'s rule on ids).
pub(crate) const SCOPED_ID_BIT: u64 = 1 << 63;

/// A QP's scoped-post state: where the next batch's ids start (below bit
/// 63, which each id also has), and a list reused for the caller's ids.
pub(crate) struct ScopeIds {
    pub(crate) next: u64,
    pub(crate) ids: Vec<u64>,
}

impl Default for ScopeIds {
    fn default() -> Self {
        let random = RandomState::new().build_hasher().finish();
        ScopeIds {
            next: random & !SCOPED_ID_BIT,
            ids: Vec::new(),
        }
    }
}
