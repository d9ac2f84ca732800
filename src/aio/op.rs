//! An operation of an `AsyncQp`: its posting (`send`, `write`, `read`,
//! `recv`), the future of its work request's completion and region, and
//! what dropping it leaves behind.

use super::buf::{IoBuf, IoBufMut};
use super::qp::{AsyncQp, BufResult, Inner, Shared};
use crate::cq::WorkCompletion;
use crate::error::{Error, Result};
use crate::mr::RemoteBuf;
use crate::qp::RcQp;
use std::any::Any;
use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

/// An operation of an [`AsyncQp`], posted when it was made: a future of
/// its completion and its region ([`BufResult`]).
///
/// Dropping it before it ends (cancelling it) leaves the region with the
/// `AsyncQp` until the device is done with it (see [`aio`](crate::aio)).
#[must_use = "the work request is posted; await it for its completion and its region"]
pub struct Op<B> {
    qp: Arc<Shared>,
    state: OpState<B>,
}

enum OpState<B> {
    /// Refused before posting: the region is still here.
    Refused(Error, B),
    Posted {
        id: u64,
        recv: bool,
        /// The wait for its CQ's event, when the CQ was found empty and
        /// armed.
        wait: Option<Pin<Box<dyn Future<Output = Result<()>> + Send>>>,
    },
    Ended,
}

// The region is never pinned: it is moved in and out whole.
impl<B> Unpin for Op<B> {}

impl<B: IoBuf> Op<B> {
    pub(super) fn refused(qp: &AsyncQp, e: Error, buf: B) -> Self {
        Op {
            qp: qp.0.clone(),
            state: OpState::Refused(e, buf),
        }
    }

    pub(super) fn posted(qp: &AsyncQp, inner: &mut Inner, id: u64, recv: bool, buf: B) -> Self {
        inner.insert(id, recv, Box::new(buf));
        Op {
            qp: qp.0.clone(),
            state: OpState::Posted {
                id,
                recv,
                wait: None,
            },
        }
    }
}

impl AsyncQp {
    /// Sends `buf[range]` (`IBV_WR_SEND`, signalled).
    pub fn send<B: IoBuf>(&self, buf: B, range: Range<usize>) -> Op<B> {
        self.post_send("AsyncQp::send", buf, move |qp, id, buf| {
            let sge = buf.region().sge(range)?;
            let mut batch = qp.batch();
            batch.wr(id).signaled().send().sge(sge)?;
            // SAFETY: the region is owned by the operation's entry in the
            // table (not by the future) until the device is done with it:
            // its completion or flush polled, the QP reset or destroyed
            // (see `Shared`'s Drop); moving it does not move its memory;
            // nothing writes it meanwhile (`IoBuf`). Room in the send
            // queue and the CQ was checked by `post_send`.
            Ok(unsafe { batch.complete() }.map(drop))
        })
    }

    /// Writes `buf[range]` into `remote` (`IBV_WR_RDMA_WRITE`, signalled).
    pub fn write<B: IoBuf>(&self, buf: B, range: Range<usize>, remote: RemoteBuf) -> Op<B> {
        self.post_send("AsyncQp::write", buf, move |qp, id, buf| {
            let sge = buf.region().sge(range)?;
            let mut batch = qp.batch();
            batch.wr(id).signaled().rdma_write(remote).sge(sge)?;
            // SAFETY: as in `send`.
            Ok(unsafe { batch.complete() }.map(drop))
        })
    }

    /// Reads `remote` into `buf[range]` (`IBV_WR_RDMA_READ`, signalled).
    pub fn read<B: IoBufMut>(&self, buf: B, range: Range<usize>, remote: RemoteBuf) -> Op<B> {
        self.post_send("AsyncQp::read", buf, move |qp, id, buf| {
            let sge = buf.region_mut().sge_mut(range)?;
            let mut batch = qp.batch();
            batch.wr(id).signaled().rdma_read(remote).sge(sge)?;
            // SAFETY: as in `send`; the region is owned by value
            // (`IoBufMut`): nothing else reads or writes it.
            Ok(unsafe { batch.complete() }.map(drop))
        })
    }

    /// Posts a receive into `buf[range]` (`ibv_post_recv`).
    pub fn recv<B: IoBufMut>(&self, buf: B, range: Range<usize>) -> Op<B> {
        let mut inner = self.0.lock();
        if let Err(e) = inner
            .room(true)
            .and_then(|()| inner.qp().ready_to_receive("AsyncQp::recv"))
            .and_then(|()| inner.take_place(true))
        {
            return Op::refused(self, e, buf);
        }
        let id = inner.take_id();
        let posted = buf.region().sge(range).and_then(|sge| {
            // SAFETY: as in `send`; the region is owned by value
            // (`IoBufMut`): nothing else reads or writes it until the
            // receive's completion, flush, or the QP's reset or destroy.
            // The id has bit 63, as the contract's "below 2^63" reserves
            // for the crate's own operations: the ids of this QP's
            // operations, which are the only posts on it (the handle owns
            // the QP, and `with_qp` lends it shared, which cannot post),
            // and which take each completion by id and QP number. Not
            // inside a poll callback.
            unsafe { inner.qp_mut().post_recv(id, &[sge]) }
        });
        // ibv_post_recv posts none of a list it fails on.
        match posted {
            Ok(()) => Op::posted(self, &mut inner, id, true, buf),
            Err(e) => {
                inner.give_places(true, 1);
                Op::refused(self, e, buf)
            }
        }
    }

    /// Posts one work request on the send queue: `build` builds and
    /// completes it. Its outer error means nothing was posted; its inner
    /// one is that of `ibv_wr_complete`, after which the work request may
    /// have been posted.
    fn post_send<B: IoBuf>(
        &self,
        what: &'static str,
        buf: B,
        build: impl FnOnce(&mut RcQp, u64, &mut B) -> Result<Result<()>>,
    ) -> Op<B> {
        let mut inner = self.0.lock();
        if let Err(e) = inner
            .room(false)
            .and_then(|()| inner.qp().ready_to_send(what))
            .and_then(|()| inner.take_place(false))
        {
            return Op::refused(self, e, buf);
        }
        let id = inner.take_id();
        let mut buf = buf;
        // A full queue refused by `ibv_wr_complete` posted nothing only on
        // a provider that rolls the batch back (mlx5); elsewhere it is
        // "maybe posted", as any other error of it.
        let rolls_back = inner.qp().pd().context().is_mlx5();
        // Nothing posted: the place is given back.
        let refused = |inner: &mut Inner, e, buf| {
            inner.give_places(false, 1);
            Op::refused(self, e, buf)
        };
        match build(inner.qp_mut(), id, &mut buf) {
            Err(e) => refused(&mut inner, e, buf),
            Ok(Err(e @ Error::SendQueueFull { .. })) if rolls_back => refused(&mut inner, e, buf),
            // Refused before the provider saw it: nothing posted.
            Ok(Err(e @ Error::QpNotReady { .. })) => refused(&mut inner, e, buf),
            Ok(Ok(())) => Op::posted(self, &mut inner, id, false, buf),
            Ok(Err(e)) => {
                // Maybe posted: held until the QP is reset.
                let op = Op::posted(self, &mut inner, id, false, buf);
                inner.stop(self.0.qp_num);
                if let Some(entry) = inner.table.get_mut(&id) {
                    if entry.result.is_some() {
                        entry.result = Some(Err(e));
                    }
                }
                op
            }
        }
    }
}

impl<B: IoBuf> Future for Op<B> {
    type Output = BufResult<B>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<BufResult<B>> {
        let this = self.get_mut();
        let (id, recv, wait) = match &mut this.state {
            OpState::Posted { id, recv, wait } => (*id, *recv, wait),
            OpState::Refused(..) => {
                let OpState::Refused(e, buf) = std::mem::replace(&mut this.state, OpState::Ended)
                else {
                    unreachable!()
                };
                return Poll::Ready((Err(e), buf));
            }
            OpState::Ended => panic!("an mlx5dv Op polled after it ended"),
        };
        loop {
            {
                let mut inner = this.qp.lock();
                let qp_num = this.qp.qp_num;
                let mut done = take_done(&mut inner, id);
                if done.is_none() && wait.is_none() && inner.broken.is_none() {
                    // Poll, arm, poll again (a completion before the arm
                    // raises no event), then wait for the CQ's event. A
                    // failed poll stops the QP, which ends the operations.
                    let _ = inner.progress(qp_num);
                    done = take_done(&mut inner, id);
                    if done.is_none() {
                        let cq = inner.cq_of(recv);
                        let key = cq.raw_cq().as_ptr() as usize;
                        match cq.arm_for_wait() {
                            Ok(Some((channel, armed))) => {
                                let _ = inner.progress(qp_num);
                                done = take_done(&mut inner, id);
                                if done.is_none() {
                                    *wait = Some(Box::pin(channel.cq_event(key, armed)));
                                }
                            }
                            // No event can be had: see `no_event`.
                            Ok(None) => unreachable!("AsyncQp::new checked the CQs' channels"),
                            Err(e) => {
                                no_event(&mut inner, qp_num, id, e);
                                continue;
                            }
                        }
                    }
                }
                if let Some((result, buf)) = done {
                    // This operation may have taken the CQ's event that
                    // others waited for too: while any still waits, the
                    // CQs are armed again and polled, so that each is
                    // handed its completion or raises a new event.
                    if inner
                        .table
                        .values()
                        .any(|e| e.result.is_none() && !e.abandoned)
                    {
                        inner.rearm(qp_num);
                    }
                    this.state = OpState::Ended;
                    let buf = *buf.downcast::<B>().expect("an operation's own region");
                    return Poll::Ready((result, buf));
                }
                // Woken by whoever hands it its completion (another
                // operation's poll, a reset), or by its CQ's event.
                if let Some(entry) = inner.table.get_mut(&id) {
                    entry.waker = Some(cx.waker().clone());
                }
            }
            let Some(w) = wait else {
                return Poll::Pending; // stopped: see `Inner::broken`
            };
            match w.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                // The event: poll again (the CQ is the truth).
                Poll::Ready(Ok(())) => *wait = None,
                Poll::Ready(Err(e)) => {
                    *wait = None;
                    no_event(&mut this.qp.lock(), this.qp.qp_num, id, e);
                }
            }
        }
    }
}

/// The wait for the CQ's event failed (no runtime, the reactor's error, a
/// failed arm): no event can be had, so the QP is stopped (RESET, after
/// the completions already there are handed to their operations) and
/// operation `id`, unless it completed meanwhile, ends with the error.
fn no_event(inner: &mut Inner, qp_num: u32, id: u64, e: Error) {
    inner.stop(qp_num);
    if let Some(entry) = inner.table.get_mut(&id) {
        if matches!(
            entry.result,
            Some(Err(Error::WorkCompletion {
                status: crate::cq::WcStatus::WR_FLUSH_ERR,
                ..
            }))
        ) {
            entry.result = Some(Err(e));
        }
    }
}

/// The result and region of operation `id`, once the device is done.
fn take_done(inner: &mut Inner, id: u64) -> Option<(Result<WorkCompletion>, Box<dyn Any + Send>)> {
    inner.table.get(&id)?.result.as_ref()?;
    let entry = inner.table.remove(&id)?;
    Some((entry.result?, entry.buf))
}

impl<B> Drop for Op<B> {
    fn drop(&mut self) {
        let OpState::Posted { id, .. } = self.state else {
            return;
        };
        let mut inner = self.qp.lock();
        let Some(entry) = inner.table.get_mut(&id) else {
            return;
        };
        if entry.result.is_some() {
            // Done: the region goes now, once the table is unlocked (a
            // region whose drop panics leaves the table whole).
            let gone = inner.table.remove(&id);
            drop(inner);
            drop(gone);
        } else {
            // In flight: the table keeps the region until the device is
            // done with it.
            entry.abandoned = true;
            entry.waker = None;
        }
    }
}

impl<B> fmt::Debug for Op<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            OpState::Refused(e, _) => format!("refused: {e}"),
            OpState::Posted { id, .. } => format!("posted as work request {id}"),
            OpState::Ended => "ended".into(),
        };
        f.debug_struct("Op").field("state", &state).finish()
    }
}
