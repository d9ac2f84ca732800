//! Waiting: [`CompletionQueue::poll_into`], [`wait`](CompletionQueue::wait),
//! [`wait_into`](CompletionQueue::wait_into), the wait's buffer, and what
//! a wait does while the CQ is empty.

use super::work_completion::write_wc;
use super::{CompletionQueue, WorkCompletion};
use crate::error::{Error, Result};
use std::time::{Duration, Instant};

/// The most `poll_into` reserves before polling.
const POLL_INTO_RESERVE: usize = 64;

impl CompletionQueue {
    /// Moves up to `max` completions into `out` and returns how many
    /// ([`poll_each`](Self::poll_each), every field of each read into a
    /// [`WorkCompletion`]).
    ///
    /// Room for up to 64 is reserved first (more grows as they come, so a
    /// `max` of `usize::MAX` on an empty CQ allocates little); each field
    /// is then written into its place in `out` as it is read, as C writes
    /// `wc->field = ibv_wc_read_field(cq)`, so nothing is held across the
    /// next read.
    pub fn poll_into(&mut self, out: &mut Vec<WorkCompletion>, max: usize) -> Result<usize> {
        // One loop for a CQ that reads senders and one for a CQ that does
        // not: neither tests it per completion.
        if self.reads_senders() {
            self.poll_into_as::<true>(out, max)
        } else {
            self.poll_into_as::<false>(out, max)
        }
    }

    /// [`poll_into`](Self::poll_into), reading the sender of each receive
    /// or not.
    #[inline(always)]
    fn poll_into_as<const SENDERS: bool>(
        &mut self,
        out: &mut Vec<WorkCompletion>,
        max: usize,
    ) -> Result<usize> {
        // At most the backlog and what the CQ holds come out of one poll;
        // reserved up to a bound, whatever `max` says.
        out.reserve(
            max.min(self.backlog.len() + self.capacity as usize)
                .min(POLL_INTO_RESERVE),
        );
        // The length, the room and the place kept in locals (registers)
        // across the loop, the vector's length set once after it.
        let (mut len, mut cap, mut base) = (out.len(), out.capacity(), out.as_mut_ptr());
        let polled = self.poll_each(
            max,
            #[inline(always)]
            |wc| {
                if len == cap {
                    // SAFETY: the first `len` slots are written whole.
                    unsafe { out.set_len(len) };
                    out.reserve(1);
                    (cap, base) = (out.capacity(), out.as_mut_ptr());
                }
                // SAFETY: `len` is below the capacity: the slot is in `out`'s
                // allocation and uninitialised; written whole, it is counted
                // (nothing between the write and the count can unwind: the
                // readers are the provider's C functions).
                unsafe { write_wc::<SENDERS>(base.add(len), wc) };
                len += 1;
            },
        );
        // SAFETY: the first `len` slots were written whole, within the
        // capacity.
        unsafe { out.set_len(len) };
        polled
    }

    /// Polls until `n` completions have arrived or `timeout` has passed,
    /// and returns them in arrival order. On timeout (or any error), the
    /// error says how many of the `n` came, and those are not lost: they
    /// are kept for the next poll, which hands them out first
    /// ([`backlog_len`](Self::backlog_len); [`wait_into`](Self::wait_into)
    /// appends them to a vector of yours instead).
    ///
    /// The completions are kept in the CQ's own buffer, which the next
    /// wait reuses: a loop of waits allocates nothing once the buffer has
    /// grown to its largest `n`. They borrow the CQ until you are done
    /// with them; copy them out (`.to_vec()`, or `wait_into` a vector of
    /// yours) to keep them past the next call on the CQ.
    ///
    /// While the CQ is empty, a CQ made on a channel
    /// ([`with_channel`](Self::with_channel)) is armed and the wait sleeps
    /// in the kernel until its event or the timeout; any other spins, then
    /// yields, then sleeps 50 µs at a time. The timeout counts from the
    /// first poll that finds the CQ empty: a wait whose completions are
    /// already there reads no clock.
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # use std::time::Duration;
    /// # fn f(cq: &mut CompletionQueue) -> Result<()> {
    /// for wc in cq.wait(2, Duration::from_secs(5))? {
    ///     let wc = wc.ok()?; // an error status becomes an Err
    ///     println!("{} done: {} bytes", wc.wr_id, wc.byte_len);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait(&mut self, n: usize, timeout: Duration) -> Result<&[WorkCompletion]> {
        let mut out = self.take_completions();
        let r = self.wait_into(&mut out, n, timeout);
        if r.is_err() {
            // What did arrive is not lost with the error: the next poll
            // hands it out first.
            self.keep(out.drain(..).map(|wc| super::RawWc::from_read(&wc)));
        }
        let wcs = self.give_completions(out);
        r?;
        Ok(wcs)
    }

    /// The buffer of [`wait`](Self::wait), emptied, for a wait or scoped
    /// post to fill and give back (`completions`).
    #[inline]
    pub(crate) fn take_completions(&mut self) -> Vec<WorkCompletion> {
        let mut out = std::mem::take(&mut self.completions);
        out.clear();
        out
    }

    /// Gives back the buffer [`take_completions`](Self::take_completions)
    /// lent, and returns what it holds.
    #[inline]
    pub(crate) fn give_completions(&mut self, out: Vec<WorkCompletion>) -> &[WorkCompletion] {
        self.completions = out;
        &self.completions
    }

    /// Like [`wait`](Self::wait), but appends to `out`, which keeps what
    /// arrived even on timeout.
    pub fn wait_into(
        &mut self,
        out: &mut Vec<WorkCompletion>,
        n: usize,
        timeout: Duration,
    ) -> Result<()> {
        // The clock is read once a poll has found the CQ empty, not before.
        let mut clock: Option<(Instant, Option<Instant>)> = None;
        let mut got = 0;
        let mut idle_rounds = 0u32;
        while got < n {
            let k = self.poll_into(out, n - got)?;
            got += k;
            if k > 0 {
                idle_rounds = 0;
                continue;
            }
            let (start, deadline) = *clock.get_or_insert_with(|| {
                let start = Instant::now();
                (start, start.checked_add(timeout))
            });
            if start.elapsed() >= timeout {
                return Err(Error::Timeout {
                    what: timeout_what(n, got, self.inner.ctx.name(), self.capacity),
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
            got += self.idle(&mut idle_rounds, deadline, |cq| cq.poll_into(out, n - got))?;
        }
        Ok(())
    }

    /// What a wait does when a poll found nothing. On a CQ with a channel:
    /// arm, poll again with `poll`, then sleep in the kernel until an event
    /// or `deadline` ([`sleep_on_channel`](Self::sleep_on_channel)).
    /// Without one: spin briefly, then back off ([`back_off`]). Returns what
    /// `poll` found (0 when it was not called).
    #[inline]
    pub(crate) fn idle<F>(
        &mut self,
        rounds: &mut u32,
        deadline: Option<Instant>,
        poll: F,
    ) -> Result<usize>
    where
        F: FnOnce(&mut CompletionQueue) -> Result<usize>,
    {
        if self.inner.channel.is_some() {
            return self.sleep_on_channel(deadline, poll);
        }
        back_off(rounds);
        Ok(0)
    }
}

/// What a wait that timed out awaited ([`Error::Timeout`]'s `what`): the
/// completions, how many arrived, and the cause a plain timeout hides. A
/// CQ that overran (more completions than its capacity before they were
/// polled, as unsafe batches of more work requests than it holds can
/// make) stops taking completions, and the device says so only with an
/// asynchronous event, which libibverbs does not show on the CQ itself:
/// the text names it, and where to read it.
#[cold]
fn timeout_what(n: usize, got: usize, device: &str, capacity: u32) -> String {
    format!(
        "{} on {device} ({got} arrived); if more work requests completed on the CQ than it \
         holds (capacity {capacity}) before they were polled, it overran and takes no more: \
         see Context::async_events for a CqErr",
        crate::error::count(n as u64, "completion"),
    )
}

/// Spins briefly, then yields, then sleeps 50 µs at a time, so that a wait
/// on a CQ without a channel does not burn a core for long.
#[inline]
pub(crate) fn back_off(rounds: &mut u32) {
    // Saturating: a wait of days must not overflow (and panic, unwinding
    // out of a scoped post whose work requests still run).
    *rounds = rounds.saturating_add(1);
    if *rounds < 1000 {
        std::hint::spin_loop();
    } else if *rounds < 2000 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_names_a_cq_overrun_and_where_to_see_it() {
        let e = Error::Timeout {
            what: timeout_what(20, 3, "mlx5_0", 16),
            waited_ms: 3000,
        };
        assert_eq!(
            e.to_string(),
            "timed out after 3000 ms waiting for 20 completions on mlx5_0 (3 arrived); if \
             more work requests completed on the CQ than it holds (capacity 16) before they \
             were polled, it overran and takes no more: see Context::async_events for a CqErr"
        );
    }

    #[test]
    fn back_off_saturates_instead_of_overflowing() {
        // A wait of 2^32 idle rounds (days) must not panic in a build with
        // overflow checks: it would unwind out of a scoped post.
        let mut rounds = u32::MAX - 1;
        back_off(&mut rounds);
        back_off(&mut rounds);
        assert_eq!(rounds, u32::MAX);
    }
}
