//! The scoped direct post: [`DirectQp::post_and_wait`].

use super::{DirectBatch, DirectQp, DirectTransport, DirectWc, Step, SPINS};
use crate::clock::Mono;
use crate::error::{Error, Result};
use std::time::{Duration, Instant};

/// How long a scoped post waits for the flush after moving its QP to ERR.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

impl<T: DirectTransport> DirectQp<T> {
    /// Posts the work requests `build` adds to the batch it is given, with
    /// one doorbell, and waits for their completions: when it returns (with
    /// them, or with any error) the device no longer uses the memory of any
    /// of them, so the borrows of that memory end only then.
    ///
    /// The batch's last work request is signalled whatever its flags; the
    /// completions returned are those of the batch's signalled work
    /// requests, and any error completion, in order, the last one covering
    /// the end of the batch. Completions of work requests posted before
    /// (with [`DirectBatch::ring`]) that arrive meanwhile are kept for the
    /// next [`poll`](Self::poll).
    ///
    /// When its completions do not come within `timeout` (counted from
    /// the first poll that finds none), it moves the QP to ERR and waits a
    /// bounded time for the flush; failing that it moves the QP to RESET,
    /// after which the device runs nothing of it, and returns
    /// [`Error::Timeout`]. If even RESET is refused it aborts the process:
    /// the memory could not be released safely.
    ///
    /// `build` returning an error (or panicking) posts nothing.
    ///
    /// # Errors
    ///
    /// Refused before `build` runs, with nothing posted and the QP left as
    /// it is: [`Error::QpNotReady`] when the QP is not in RTS (never
    /// connected, or in RESET, INIT, RTR, SQD, SQE, or ERR, where a failed
    /// work request of an earlier post or [`to_error`](Self::to_error)
    /// left it; see [`batch`](Self::batch) for how the state is known);
    /// [`Error::InvalidArgument`] inside a
    /// [`poll_each`](crate::CompletionQueue::poll_each) callback, where
    /// the RESET it may need is refused. Then `build`'s own error, a
    /// timeout ([`Error::Timeout`], above), or a CQE that cannot be
    /// trusted ([`Error::Direct`]). A work request that fails is not an
    /// error of the post: its completion, with its status, is among those
    /// returned (and the QP is in ERR: the next post is refused).
    ///
    /// No completion is dropped by an error after the post: those of the
    /// batch it had read, and the flushes after its move to ERR (or what
    /// came before RESET), are kept, in order, for the next
    /// [`poll`](Self::poll) or [`wait`](Self::wait) (none is returned or
    /// appended to `out` with the error).
    pub fn post_and_wait<'m, F>(&mut self, timeout: Duration, build: F) -> Result<&[DirectWc]>
    where
        F: for<'q> FnOnce(&mut DirectBatch<'q, 'm, T>) -> Result<()>,
    {
        let mut done = std::mem::take(&mut self.done);
        done.clear();
        let r = self.post_and_wait_into(timeout, &mut done, build);
        self.done = done;
        r?;
        Ok(&self.done)
    }

    /// [`post_and_wait`](Self::post_and_wait), appending the completions
    /// to `out`.
    pub fn post_and_wait_into<'m, F>(
        &mut self,
        timeout: Duration,
        out: &mut Vec<DirectWc>,
        build: F,
    ) -> Result<()>
    where
        F: for<'q> FnOnce(&mut DirectBatch<'q, 'm, T>) -> Result<()>,
    {
        if crate::cq::in_provider_poll() {
            // Its fallback, RESET, is refused there: it could only abort.
            return Err(crate::cq::in_poll_callback(
                "a scoped direct post",
                &self.qp.describe(),
            ));
        }
        self.ready_to_post("DirectQp::post_and_wait")?;
        let start = self.sq.posted;
        let own: *const super::sq::Sq = &self.sq;
        // In RTS: `ready_to_post` let it go on.
        let mut batch = DirectBatch::new(&mut self.sq, true);
        build(&mut batch)?;
        if !std::ptr::eq(&*batch.sq, own) {
            // Not reachable (the batch's lifetimes are invariant, so no
            // other batch fits here); a guard all the same: another QP's
            // batch is dropped unposted.
            return Err(Error::InvalidArgument(
                "a scoped direct post's batch was replaced by another QP's; nothing was posted"
                    .into(),
            ));
        }
        if batch.is_empty() {
            return Ok(());
        }
        batch.signal_last();
        // SAFETY: this function returns only when the device is done with
        // every work request of the batch (below), and the batch's memory
        // stays borrowed (`'m`) until it returns.
        let n = unsafe { batch.ring() };
        let end = start.wrapping_add(n);
        let first = out.len();
        // The clock at the first poll that found nothing, and the deadline.
        let mut clock: Option<(Mono, Option<Mono>)> = None;
        let mut idle = 0u32;
        // Whether the last sleep on the channel ran to the deadline.
        let mut expired = false;
        loop {
            if self.cq.ready() {
                match self.wait_step(start, out) {
                    Ok(_) => {
                        idle = 0;
                        if self.sq.retired == end {
                            return Ok(());
                        }
                    }
                    Err(e) => {
                        return Err(self.stop(start, end, out, first, e));
                    }
                }
                continue;
            }
            let (t0, deadline) = *clock.get_or_insert_with(|| {
                let t0 = Mono::now();
                (t0, t0.after(timeout))
            });
            if idle < SPINS {
                // The idle polls: a look at one owner byte and a pause each.
                crate::cq::back_off(&mut idle);
                continue;
            }
            if self.past(expired, t0, timeout) {
                let e = Error::Timeout {
                    what: format!(
                        "{} of direct QP {:#x} ({} retired)",
                        crate::error::count(u64::from(n), "work request"),
                        self.qp_num(),
                        self.sq.retired.wrapping_sub(start).min(n)
                    ),
                    waited_ms: t0.elapsed().as_millis() as u64,
                };
                return Err(self.stop(start, end, out, first, e));
            }
            match self.idle(&mut idle, deadline) {
                Ok(e) => expired = e,
                Err(e) => return Err(self.stop(start, end, out, first, e)),
            }
        }
    }

    /// Reads one CQE: a completion that retires work requests after
    /// `start` goes to `out`, an earlier one to the backlog. Whether it
    /// read one.
    fn wait_step(&mut self, start: u32, out: &mut Vec<DirectWc>) -> Result<bool> {
        let r = self.cq.step_sq(&mut self.sq);
        self.cq.publish();
        match r? {
            Step::Empty => Ok(false),
            Step::Wc(wc) => {
                // It retired work requests up to `retired`: the batch's
                // when the last of them is after `start`.
                if self.sq.retired.wrapping_sub(start) as i32 > 0 {
                    out.push(wc);
                } else {
                    self.backlog.push_back(wc);
                }
                Ok(true)
            }
        }
    }

    /// After a timeout or a failed poll: ERR and the flush, or RESET; then
    /// the error, saying which. The completions the post read
    /// (`out[first..]`) and those of the flush go to the backlog, for the
    /// next poll: none is dropped.
    #[cold]
    #[inline(never)]
    fn stop(
        &mut self,
        start: u32,
        end: u32,
        out: &mut Vec<DirectWc>,
        first: usize,
        cause: Error,
    ) -> Error {
        self.backlog.extend(out.drain(first..));
        let to_err = self.qp.to_error();
        let deadline = Instant::now()
            + if to_err.is_ok() {
                FLUSH_WAIT
            } else {
                Duration::ZERO
            };
        let mut idle = 0u32;
        let mut flushed = Vec::new();
        while self.sq.retired != end && Instant::now() < deadline {
            match self.wait_step(start, &mut flushed) {
                Ok(true) => idle = 0,
                _ => crate::cq::back_off(&mut idle),
            }
            self.backlog.extend(flushed.drain(..));
        }
        let how = if self.sq.retired == end {
            "the QP was moved to ERR and the rest flushed".to_string()
        } else {
            match self.qp.reset() {
                Ok(()) => {
                    // What came before the QP reached RESET is kept too;
                    // then the rings start again.
                    while self.cq.ready() {
                        let _ = self.wait_step(start, &mut flushed);
                    }
                    self.backlog.extend(flushed.drain(..));
                    self.resync();
                    "the QP was moved to RESET: the device runs nothing more of it".into()
                }
                Err(e) => crate::wr::abort_with(format_args!(
                    "direct QP {:#x}: a scoped batch may still be running and the QP cannot \
                     be reset ({e}); aborting, since its memory cannot be released safely",
                    self.qp_num()
                )),
            }
        };
        crate::wr::said_with(cause, &how)
    }
}
