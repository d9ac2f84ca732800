//! What the direct path writes WQEs for: its transports
//! ([`DirectTransport`]: RC, DCI), and a DC target's address as a DCI's
//! WQE carries it ([`DirectDcAddr`]).

use crate::qp::{DcInitiator, ReliableConnection, Transport};
use std::fmt;

mod sealed {
    pub trait Sealed {}
}

/// A transport the direct path writes WQEs for: RC, DCI.
pub trait DirectTransport: Transport + sealed::Sealed {
    /// Whether the QP has a receive queue of its own (whose CQ must be
    /// another than the direct one).
    #[doc(hidden)]
    const RECV: bool;
}

impl sealed::Sealed for ReliableConnection {}
impl DirectTransport for ReliableConnection {
    const RECV: bool = true;
}
impl sealed::Sealed for DcInitiator {}
impl DirectTransport for DcInitiator {
    const RECV: bool = false;
}

/// A DC target's address as a direct DCI writes it into each WQE: the
/// address vector (`struct mlx5_wqe_av`) of an address handle, with the
/// DCT number and DC key ([`DirectQp::dc_addr`](super::DirectQp::dc_addr)). A copy: the address
/// handle may go once it is made.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DirectDcAddr {
    pub(super) words: [u64; 6],
}

impl DirectDcAddr {
    #[inline(always)]
    pub(crate) fn words(&self) -> &[u64; 6] {
        &self.words
    }
}

impl fmt::Debug for DirectDcAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectDcAddr").finish_non_exhaustive()
    }
}
