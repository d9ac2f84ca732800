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
        let Some(channel) = self.channel().cloned() else {
            return Err(Error::InvalidArgument(format!(
                "wait_async on a CQ of {} that has no completion channel \
                 (create it with CompletionQueue::with_channel)",
                self.context().name()
            )));
        };
        let key = self.raw_cq().as_ptr() as usize;
        let mut out = Vec::new();
        loop {
            match self.poll_or_arm(max, |wc| out.push(WorkCompletion::from(wc))) {
                Ok(0) => {}
                Ok(_) => return Ok(out),
                // A poll that failed after handing some over: those are
                // returned (the error comes again with the next poll).
                Err(_) if !out.is_empty() => return Ok(out),
                Err(e) => return Err(e),
            }
            channel.clone().cq_event(key).await?;
        }
    }
}
