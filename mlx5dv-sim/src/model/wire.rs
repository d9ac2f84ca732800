//! A QP's state on the fabric, kept with the QP: its PSNs, the request it
//! has in flight to another host, the answers it received, and (as a
//! responder) the answers it keeps for duplicates and the sends it is
//! reassembling. The device engine reads and writes it; the kernel's
//! commands create and reset it.

use crate::fabric::wire::{Op, Reply, Request, Response};
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
    /// Responder (DCT): the last answer to each DCI (at most
    /// [`MAX_SOURCES`], the oldest forgotten first).
    pub dc_last: BySource<(u32, Reply)>,
    /// Responder: the messages under way, by sender: a send's packets so
    /// far, a write's byte count (at most [`MAX_SOURCES`], the oldest
    /// forgotten first).
    pub open: BySource<Open>,
    /// Requester: the work request in flight.
    pub inflight: Option<Box<Inflight>>,
    /// Requester: answers received, not yet matched.
    pub replies: Vec<Response>,
}

/// The most senders a responder keeps state for at once (a DCT's answers
/// for duplicates, messages under way). A connected QP has one sender; a
/// DCT serves any number of DCIs, and one that sends to it from more than
/// this many at once finds the oldest forgotten: its duplicate is served
/// as new, its message's next packet refused as one without its first.
pub const MAX_SOURCES: usize = 64;

/// A table keyed by sender, bounded: at most [`MAX_SOURCES`] entries;
/// inserting a new sender into a full table forgets the one inserted
/// first.
#[derive(Debug)]
pub struct BySource<T> {
    entries: std::collections::VecDeque<(Source, T)>,
}

impl<T> Default for BySource<T> {
    fn default() -> Self {
        Self {
            entries: std::collections::VecDeque::new(),
        }
    }
}

impl<T> BySource<T> {
    /// The entry of `src`.
    pub fn get(&self, src: &Source) -> Option<&T> {
        self.entries.iter().find(|(s, _)| s == src).map(|(_, t)| t)
    }

    /// The entry of `src`, to change.
    pub fn get_mut(&mut self, src: &Source) -> Option<&mut T> {
        self.entries
            .iter_mut()
            .find(|(s, _)| s == src)
            .map(|(_, t)| t)
    }

    /// Sets `src`'s entry (a new sender in a full table forgets the
    /// oldest).
    pub fn insert(&mut self, src: Source, t: T) {
        if let Some(e) = self.get_mut(&src) {
            *e = t;
            return;
        }
        if self.entries.len() >= MAX_SOURCES {
            self.entries.pop_front();
        }
        self.entries.push_back((src, t));
    }

    /// Takes `src`'s entry out.
    pub fn remove(&mut self, src: &Source) -> Option<T> {
        let i = self.entries.iter().position(|(s, _)| s == src)?;
        self.entries.remove(i).map(|(_, t)| t)
    }

    /// How many senders have an entry.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no sender has one.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A message under way at a responder, between its first and last packet.
#[derive(Debug)]
pub enum Open {
    /// A send: its bytes so far, kept up to `room + 1` (the receive it
    /// lands in holds `room`; one byte more is enough to refuse it whole),
    /// and the whole length so far.
    Send {
        /// The bytes kept.
        kept: Vec<u8>,
        /// The room of the receive it will take, when its first packet came.
        room: usize,
        /// The message's length so far.
        len: u64,
    },
    /// An RDMA write: the bytes written so far (the length a write with
    /// immediate's receive completion reports).
    Write {
        /// Bytes written so far.
        len: u64,
    },
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
