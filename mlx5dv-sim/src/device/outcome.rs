//! What the engine's steps hand each other: how a WQE (or a request at
//! the responder) ended, and the requester QP a WQE runs for.

use crate::model::state::QpKind;

/// How a WQE ended.
#[derive(Debug)]
pub enum Outcome {
    /// Success; the byte count for the CQE.
    Done(u32),
    /// A requester error with this syndrome (the QP, or the DCI stream,
    /// goes to error).
    Error(u8, String),
    /// Not now: the responder has no receive WQE (receiver-not-ready);
    /// its `min_rnr_timer` code says how long the requester waits before
    /// it retries.
    Stall(u8),
    /// Sent to another host: the answer is awaited (see
    /// `requester::remote`).
    Pending,
}

/// The requester QP's view needed to execute.
#[derive(Debug, Clone, Copy)]
pub struct Requester {
    /// Handle.
    pub handle: u32,
    /// QPN.
    pub qpn: u32,
    /// Kind.
    pub kind: QpKind,
    /// PD number.
    pub pdn: u32,
    /// RC destination QPN.
    pub dest_qpn: u32,
    /// The QP's qkey (UD).
    pub qkey: u32,
}
