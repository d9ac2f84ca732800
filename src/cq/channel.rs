//! A CQ on a completion channel: creating it on a channel, its id, arming it,
//! the race-free step of an event loop and the wait's sleep.

use super::handle::cq_of;
use super::{CompletionQueue, PolledWc};
use crate::channel::{CompletionChannel, CqId, EventCount};
use crate::clock::Mono;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ffi;
use std::ptr::NonNull;
use std::time::Instant;

impl CompletionQueue {
    /// Creates a CQ with room for at least `cqe` completions whose events
    /// go to `channel` (`ibv_create_cq_ex(3)` with its `channel`). The CQ
    /// holds the channel alive.
    ///
    /// [`wait`](Self::wait), [`wait_into`](Self::wait_into) and
    /// [`QpEx::post_and_wait`](crate::QpEx::post_and_wait) on it sleep in
    /// the kernel (`poll(2)` on the channel) when the CQ is empty, instead
    /// of spinning: they poll, arm the CQ, poll again and only then sleep,
    /// so no completion is missed. `channel` must be of the same context
    /// ([`Error::InvalidArgument`] otherwise).
    pub fn with_channel(ctx: &Context, cqe: u32, channel: &CompletionChannel) -> Result<Self> {
        if channel.context().as_ptr() != ctx.as_ptr() {
            return Err(Error::InvalidArgument(format!(
                "a CQ on {} cannot use a completion channel of another context ({})",
                ctx.name(),
                channel.context().name()
            )));
        }
        CompletionQueue::create(ctx, cqe, Some(channel))
    }

    /// The CQ's id, which the events naming it carry ([`CqEvent::cq`](crate::CqEvent::cq),
    /// [`AsyncEvent::CqErr`](crate::AsyncEvent::CqErr)).
    pub fn id(&self) -> CqId {
        // SAFETY: the CQ is live while `self` is.
        unsafe { CqId::of(self.raw_cq().as_ptr()) }
    }

    /// Arms the CQ: its next completion (with `solicited_only`, its next
    /// solicited one: a receive of a send with
    /// [`SendFlags::SOLICITED`](crate::SendFlags::SOLICITED), or any
    /// failed completion) raises one event on its channel
    /// (`ibv_req_notify_cq(3)`).
    ///
    /// Completions already in the CQ raise none: arm, then poll, then wait
    /// for the event ([`CompletionChannel::get_event`]). Refused
    /// ([`Error::InvalidArgument`]) for a CQ without a channel.
    pub fn req_notify(&mut self, solicited_only: bool) -> Result<()> {
        let Some(channel) = self.channel() else {
            return Err(self.no_channel("req_notify"));
        };
        // SAFETY: the CQ is live and was attached to its channel when made.
        unsafe { channel.arm(self.raw_cq(), solicited_only) }.map(drop)
    }

    /// Arms the CQ for a wait of this crate's for its event: returns its
    /// channel and the count of its events before the arm, which the wait
    /// ends past. `None` for a CQ without a channel.
    pub(crate) fn arm_for_wait(&mut self) -> Result<Option<(CompletionChannel, EventCount)>> {
        let Some(channel) = self.channel().cloned() else {
            return Ok(None);
        };
        // SAFETY: the CQ is live and was attached to its channel when made.
        let armed = unsafe { channel.arm(self.raw_cq(), false) }?;
        Ok(Some((channel, armed)))
    }

    /// One step of an event loop over a CQ with a channel (on `epoll`, an
    /// async runtime, or [`CompletionChannel::get_event`]), free of the
    /// race between polling and arming: polls up to `max` completions into
    /// `f` ([`poll_each`](Self::poll_each)); when there were none, arms the
    /// CQ for its next completion and polls once more, since a completion
    /// that came before the arm raises no event.
    ///
    /// Returns how many completions it handed over. `Ok(0)` means the CQ is
    /// empty and armed: wait for the channel (its fd readable, then
    /// [`CompletionChannel::try_get_event`] until `None`), and call again.
    /// Refused before any C call on a CQ without a channel
    /// ([`Error::InvalidArgument`]) and for `max == 0`
    /// ([`Error::OutOfRange`]: nothing could be handed over, and the CQ
    /// would be armed for a completion left unpolled).
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # use std::time::Duration;
    /// # fn demo(cq: &mut CompletionQueue, channel: &CompletionChannel) -> Result<()> {
    /// loop {
    ///     let n = cq.poll_or_arm(16, |wc| println!("{}: {}", wc.wr_id(), wc.status()))?;
    ///     if n > 0 {
    ///         break;
    ///     }
    ///     // Asleep until the CQ's event (an event loop would wait for the fd).
    ///     match channel.get_event(Duration::from_secs(1)) {
    ///         Ok(_) | Err(Error::Timeout { .. }) => {}
    ///         Err(e) => return Err(e),
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn poll_or_arm<F>(&mut self, max: usize, mut f: F) -> Result<usize>
    where
        F: FnMut(&PolledWc<'_>),
    {
        if max == 0 {
            return Err(Error::OutOfRange {
                what: "poll_or_arm max",
                value: 0,
                limit: "at least 1".into(),
            });
        }
        if self.channel().is_none() {
            return Err(self.no_channel("poll_or_arm"));
        }
        let n = self.poll_each(max, &mut f)?;
        if n > 0 {
            return Ok(n);
        }
        self.req_notify(false)?;
        self.poll_each(max, f)
    }

    /// The error of a channel operation asked of a CQ without a channel.
    fn no_channel(&self, what: &str) -> Error {
        Error::InvalidArgument(format!(
            "{what} on a CQ of {} that has no completion channel \
             (create it with CompletionQueue::with_channel)",
            self.context().name()
        ))
    }

    /// What a wait does on a CQ with a channel when a poll found nothing:
    /// arms the CQ, polls once more with `poll` (a completion that came
    /// before the arm raises no event) and, when that finds nothing
    /// either, sleeps until the CQ's event or `deadline`. Returns what the
    /// second poll returned (0 after a sleep, whether an event came or
    /// not: the caller polls again and checks its time).
    #[cold]
    #[inline(never)]
    pub(crate) fn sleep_on_channel<F>(
        &mut self,
        deadline: Option<Instant>,
        poll: F,
    ) -> Result<usize>
    where
        F: FnOnce(&mut CompletionQueue) -> Result<usize>,
    {
        let Some((channel, armed)) = self.arm_for_wait()? else {
            return Ok(0);
        };
        let k = poll(self)?;
        if k > 0 {
            return Ok(k);
        }
        // On the channel's clock: never before `deadline` (none past it
        // on that clock: never).
        channel.wait_notified(self.raw_cq(), armed, deadline.and_then(Mono::of))?;
        Ok(0)
    }

    /// The CQ as a `struct ibv_cq`.
    pub(crate) fn raw_cq(&self) -> NonNull<ffi::ibv_cq> {
        let cq = NonNull::new(self.as_ptr()).expect("a CompletionQueue's CQ is not NULL");
        cq_of(cq)
    }
}
