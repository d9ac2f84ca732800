//! A QP's state on the fabric, kept with the QP: its PSNs, the request it
//! has in flight to another host, the answers it received, and (as a
//! responder) the answers it keeps for duplicates and the sends it is
//! reassembling. The device engine reads and writes it; the kernel's
//! commands create and reset it.

use crate::fabric::wire::{Op, Reply, Request, Response};
use std::collections::HashMap;
use std::time::Instant;

/// Who sent a request: host and QP (DCI), for the responder's
/// reassembly of a send and its completion's source QPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Source {
    /// The sending host.
    pub host: u16,
    /// The sending QP.
    pub qpn: u32,
}

/// A QP's state on the wire.
#[derive(Debug, Default)]
pub struct QpWire {
    /// Requester: the PSN of the next packet (`sq_psn` at RTS).
    pub next_psn: u32,
    /// Responder: the PSN expected next (`rq_psn` at RTR).
    pub epsn: u32,
    /// Responder (RC): the last answer, sent again for a duplicate.
    pub last: Option<(u32, Reply)>,
    /// Responder (DCT): the last answer to each DCI.
    pub dc_last: HashMap<Source, (u32, Reply)>,
    /// Responder: the packets of a send received so far, by sender.
    pub partial: HashMap<Source, Vec<u8>>,
    /// Requester: the work request in flight.
    pub inflight: Option<Box<Inflight>>,
    /// Requester: answers received, not yet matched.
    pub replies: Vec<Response>,
}

impl QpWire {
    /// Forgets everything of the connection (the QP went to RESET).
    pub fn reset(&mut self) {
        *self = Self::default();
    }
}

/// What a finished request does locally with the answers' bytes.
#[derive(Debug)]
pub enum Finish {
    /// Nothing (writes, sends).
    Nothing,
    /// Scatter the read data (or an atomic's original value) here.
    Scatter(Vec<(u64, u64)>),
}

/// A work request in flight to another host.
#[derive(Debug)]
pub struct Inflight {
    /// The WQE index it is for.
    pub ci: u16,
    /// The host it goes to.
    pub to: u16,
    /// The fields every packet of it carries (its `op` and `psn` aside).
    pub head: Request,
    /// Its packets' operations, in order.
    pub ops: Vec<Op>,
    /// The packet in flight (an index into `ops`).
    pub next: usize,
    /// When the current packet went out (`None`: not yet).
    pub sent: Option<Instant>,
    /// Not before this instant (an RNR NAK's timer).
    pub not_before: Option<Instant>,
    /// Times the current packet went unanswered.
    pub attempts: u8,
    /// RNR NAKs for the current packet.
    pub rnr: u8,
    /// The answers' bytes so far.
    pub got: Vec<u8>,
    /// What to do with them at the end.
    pub finish: Finish,
    /// The message length (the completion's byte count).
    pub total: u32,
}
