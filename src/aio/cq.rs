//! The async wait of a CQ on a channel.

use crate::cq::{CompletionQueue, WorkCompletion};
use crate::error::{Error, Result};

impl CompletionQueue {
    /// Awaits completions (feature `tokio`): returns up to `max` of them,
    /// at least one, asleep in the runtime while the CQ is empty (it polls,
    /// arms the CQ, polls again, then awaits its event on the channel's fd;
    /// see [`aio`](crate::aio)).
    ///
    /// Cancel-safe: it holds no completion across an await, so dropping the
    /// future loses none. Refused ([`Error::InvalidArgument`]) for a CQ
    /// without a channel and outside a tokio runtime; `max == 0` is
    /// [`Error::OutOfRange`]. For a deadline, wrap it in
    /// `tokio::time::timeout`.
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # async fn f(ctx: &Context) -> Result<()> {
    /// let channel = CompletionChannel::new(ctx)?;
    /// let mut cq = CompletionQueue::with_channel(ctx, 64, &channel)?;
    /// // ... a QP on it, work requests posted ...
    /// for wc in cq.wait_async(16).await? {
    ///     println!("{}: {}", wc.wr_id, wc.status);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_async(&mut self, max: usize) -> Result<Vec<WorkCompletion>> {
        if self.channel().is_none() {
            return Err(self.no_channel_for_async());
        }
        if max == 0 {
            return Err(Error::OutOfRange {
                what: "wait_async max",
                value: 0,
                limit: "at least 1".into(),
            });
        }
        let key = self.raw_cq().as_ptr() as usize;
        loop {
            let out = self.poll_some(max)?;
            if !out.is_empty() {
                return Ok(out);
            }
            // Arm (noting the CQ's count of events), then poll again: a
            // completion before the arm raises no event.
            let Some((channel, armed)) = self.arm_for_wait()? else {
                return Err(self.no_channel_for_async());
            };
            let out = self.poll_some(max)?;
            if !out.is_empty() {
                return Ok(out);
            }
            channel.cq_event(key, armed).await?;
        }
    }

    fn no_channel_for_async(&self) -> Error {
        Error::InvalidArgument(format!(
            "wait_async on a CQ of {} that has no completion channel \
             (create it with CompletionQueue::with_channel)",
            self.context().name()
        ))
    }

    /// Up to `max` completions, none when the CQ is empty. A poll that
    /// fails after handing some over returns those (the error comes again
    /// with the next poll).
    fn poll_some(&mut self, max: usize) -> Result<Vec<WorkCompletion>> {
        let mut out = Vec::new();
        match self.poll_each(max, |wc| out.push(WorkCompletion::from(wc))) {
            Err(e) if out.is_empty() => Err(e),
            _ => Ok(out),
        }
    }
}
