//! Resizing a CQ (`ibv_resize_cq(3)`).

use super::CompletionQueue;
use crate::error::{Error, Result};
use crate::ffi;

impl CompletionQueue {
    /// Changes how many completions the CQ holds to at least `cqe`
    /// (`ibv_resize_cq(3)`) and returns the new
    /// [`capacity`](Self::capacity), which the provider may round up (mlx5
    /// to a power of two, less one).
    ///
    /// Completions already in the CQ stay there, in order, and come out of
    /// the next polls; so do those the QPs add while the CQ is resized.
    /// The CQ must be able to hold them: a `cqe` below the completions not
    /// yet polled fails ([`Error::Verbs`], `EINVAL`, on the software device
    /// and on soft-RoCE), and it is the caller's part, as in C, not to make
    /// a CQ smaller than the work requests that may still complete on it
    /// (a CQ that overruns goes to error). Completions that a scoped post
    /// ([`QpEx::post_and_wait`](crate::QpEx::post_and_wait)) kept for later
    /// polls are already out of the CQ and not counted.
    ///
    /// Refused before C is called: a `cqe` of 0 or above the device's
    /// `max_cqe` ([`Error::OutOfRange`]), and a call inside a
    /// [`poll_each`](Self::poll_each) callback ([`Error::InvalidArgument`]:
    /// providers take the CQ's lock, which a poll in progress may hold).
    /// This handle's own polls cannot overlap it: they, too, take
    /// `&mut self`. A provider that cannot resize CQs fails with
    /// [`Error::Unsupported`].
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # fn f(ctx: &Context) -> Result<()> {
    /// let mut cq = CompletionQueue::new(ctx, 16)?;
    /// let capacity = cq.resize(1000)?;
    /// assert!(capacity >= 1000);
    /// assert_eq!(cq.capacity(), capacity);
    /// # Ok(()) }
    /// ```
    ///
    /// Not from inside a poll of the same CQ:
    ///
    /// ```compile_fail,E0501
    /// # use mlx5dv::*;
    /// # fn f(cq: &mut CompletionQueue) -> Result<()> {
    /// cq.poll_each(16, |_wc| { // ERROR: the poll borrows `cq`, which the callback needs mutably
    ///     let _ = cq.resize(64);
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn resize(&mut self, cqe: u32) -> Result<u32> {
        if crate::cq::in_provider_poll() {
            return Err(crate::cq::in_poll_callback(
                "ibv_resize_cq",
                &format!("a CQ of {}", self.context().name()),
            ));
        }
        let max = self
            .context()
            .query_device()
            .map_or(i32::MAX as u32, |a| a.max_cqe)
            .min(i32::MAX as u32);
        if cqe == 0 || cqe > max {
            return Err(Error::OutOfRange {
                what: "CQ entries",
                value: u64::from(cqe),
                limit: format!("1 to {max} (the device's max_cqe)"),
            });
        }
        // The places taken (binds counted on its QPs, an AsyncQp's
        // operations) are completions in it or still to come: a smaller CQ
        // would overrun. After a resize the CQ holds one fewer until a poll
        // reads the resize's own CQE (libmlx5 steps over it in software;
        // the device sees the consumer index move only when a poll ends),
        // so it is counted with one place less. Shrunk before the CQ
        // shrinks, atomically with every take: no bind or operation on
        // another thread gets in between.
        let watch = &self.inner.watch;
        let before = watch.places();
        if cqe - 1 < before {
            if let Err(taken) = watch.shrink(cqe - 1) {
                return Err(Error::OutOfRange {
                    what: "CQ entries",
                    value: u64::from(cqe),
                    limit: format!(
                        "at least {}: the places taken by {taken} completions no poll has \
                         read yet (memory window binds posted on its QPs, an AsyncQp's \
                         operations in flight), and one for the resize: poll them first",
                        taken + 1
                    ),
                });
            }
        }
        let cq = crate::cq::ffi_cq(self);
        // SAFETY: the CQ is live (this handle keeps it); no poll of it is
        // in progress (polls take `&mut self`, and none of another CQ is
        // on this thread); `cqe` fits an int (checked above).
        let rc = unsafe { ffi::ibv_resize_cq(cq, cqe as i32) };
        let context = || {
            format!(
                "{} to {cqe} entries on {}",
                self.capacity,
                self.context().name()
            )
        };
        if rc != 0 {
            // Left as it was: its places back.
            watch.set_places(before);
            if rc < 0 {
                return Err(Error::last_os("ibv_resize_cq", context()));
            }
            crate::error::check(rc, "ibv_resize_cq", context)?;
        }
        // SAFETY: as above; the provider set `cqe` to the new size.
        let now = unsafe { (*cq).cqe };
        self.capacity = u32::try_from(now).unwrap_or(cqe);
        watch.set_places(self.capacity.max(1) - 1);
        Ok(self.capacity)
    }
}
