//! An SRQ's limit, the "low watermark" (`ibv_modify_srq(3)` with
//! `IBV_SRQ_LIMIT`, `ibv_query_srq(3)`), and telling its events apart.

use super::SharedReceiveQueue;
use crate::async_event::AsyncEvent;
use crate::error::{check, Error, Result};
use crate::ffi;

/// What `ibv_query_srq(3)` reports of an SRQ ([`SharedReceiveQueue::query`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SrqAttr {
    /// Receives it holds.
    pub max_wr: u32,
    /// SGEs per receive.
    pub max_sge: u32,
    /// The armed limit; 0 when the limit event is not (or no longer)
    /// armed.
    pub srq_limit: u32,
}

impl SharedReceiveQueue {
    /// Arms the limit event (`ibv_modify_srq(3)` with `IBV_SRQ_LIMIT`):
    /// once fewer than `srq_limit` receives are left in the SRQ, the device
    /// raises one [`AsyncEvent::SrqLimitReached`] on its context's
    /// [`async_events`](crate::Context::async_events) ([`is`](Self::is)
    /// tells it from another SRQ's) and disarms the limit ([`limit`](Self::limit)
    /// reads 0 again).
    ///
    /// The event is one-shot: post more receives and arm again after each
    /// one, or no other comes.
    ///
    /// `srq_limit` is from 1 (0 arms nothing: `ibv_query_srq(3)` reads 0
    /// as "not armed") to [`max_wr`](Self::max_wr); anything else is
    /// refused with [`Error::OutOfRange`] before the device is asked.
    /// On the software device and on soft-RoCE the device checks the limit
    /// as it consumes a receive: a limit above the receives posted now
    /// raises the event when the next receive is used, not at once.
    pub fn arm_limit(&self, srq_limit: u32) -> Result<()> {
        if srq_limit == 0 || srq_limit > self.max_wr() {
            return Err(Error::OutOfRange {
                what: "SRQ limit",
                value: u64::from(srq_limit),
                limit: format!(
                    "from 1 (0 arms nothing) to {} (the SRQ's max_wr)",
                    self.max_wr()
                ),
            });
        }
        let mut attr = ffi::ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit,
        };
        // SAFETY: the SRQ is live; `attr` is initialised for IBV_SRQ_LIMIT.
        let rc = unsafe { ffi::ibv_modify_srq(self.raw(), &mut attr, ffi::IBV_SRQ_LIMIT as i32) };
        check(rc, "ibv_modify_srq", || {
            format!("SRQ {} limit {srq_limit}", self.handle())
        })
    }

    /// Its attributes as the device reports them now (`ibv_query_srq(3)`).
    pub fn query(&self) -> Result<SrqAttr> {
        let mut attr = ffi::ibv_srq_attr::default();
        // SAFETY: the SRQ is live; `attr` is writable.
        let rc = unsafe { ffi::ibv_query_srq(self.raw(), &mut attr) };
        check(rc, "ibv_query_srq", || format!("SRQ {}", self.handle()))?;
        Ok(SrqAttr {
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            srq_limit: attr.srq_limit,
        })
    }

    /// The armed limit ([`arm_limit`](Self::arm_limit)), 0 when not armed
    /// (never armed, or its event was raised): `ibv_query_srq(3)`.
    pub fn limit(&self) -> Result<u32> {
        Ok(self.query()?.srq_limit)
    }

    /// Its kernel handle (`struct ibv_srq`'s `handle`): what
    /// [`AsyncEvent::SrqLimitReached`] and [`AsyncEvent::SrqErr`] name.
    pub fn handle(&self) -> u32 {
        // SAFETY: the SRQ is live; `handle` is set at creation and never
        // written after.
        unsafe { (*self.raw()).handle }
    }

    /// Whether `event` is about this SRQ: an
    /// [`SrqLimitReached`](AsyncEvent::SrqLimitReached) or
    /// [`SrqErr`](AsyncEvent::SrqErr) naming its [`handle`](Self::handle).
    /// Handles are unique within a device context: ask the SRQs of the
    /// context whose [`async_events`](crate::Context::async_events) gave
    /// the event.
    pub fn is(&self, event: &AsyncEvent) -> bool {
        match *event {
            AsyncEvent::SrqLimitReached { srq_handle } | AsyncEvent::SrqErr { srq_handle } => {
                srq_handle == self.handle()
            }
            _ => false,
        }
    }
}
