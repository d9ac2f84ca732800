//! The soft-RoCE workaround: [`OnePerStart`] entries, which poll one
//! completion per `start_poll` / `end_poll` pair of the provider's.

use crate::ffi;
use std::ptr::NonNull;

/// The provider's own `start_poll` and `end_poll` of a CQ whose `next_poll`
/// and `end_poll` entries were replaced by [`next_poll_one_per_start`] and
/// [`end_poll_one_per_start`], which poll one completion per `start_poll` /
/// `end_poll` pair of the provider's: correct on every provider, and a CQ
/// polled through its entries (by
/// [`CompletionQueue::poll_each`](crate::CompletionQueue::poll_each), or by
/// C code given [`CompletionQueue::as_ptr`](crate::CompletionQueue::as_ptr))
/// never reaches the provider's `next_poll`. The poll loop is then the same
/// for every provider, with no test of which one it is.
///
/// Found through the CQ's `cq_context` (the application's pointer in
/// `struct ibv_cq`, which this crate does not otherwise use); owned by the
/// CQ's [`CqInner`](super::CqInner), freed after the CQ is destroyed.
pub(super) struct OnePerStart {
    start_poll: unsafe extern "C" fn(*mut ffi::ibv_cq_ex, *mut ffi::ibv_poll_cq_attr) -> i32,
    end_poll: unsafe extern "C" fn(*mut ffi::ibv_cq_ex),
    /// The provider's poll was ended by a `next_poll` whose `start_poll`
    /// found the CQ empty (or failed): the `end_poll` that follows has
    /// nothing to end. Only touched by a poll in progress, which holds the
    /// CQ's handle mutably (one thread).
    ended: std::cell::Cell<bool>,
}

impl OnePerStart {
    /// Replaces the `next_poll` and `end_poll` entries of `cq`, and points
    /// its `cq_context` at the returned value, which must outlive every
    /// poll of the CQ.
    ///
    /// # Safety
    /// `cq` is live, its entries were checked non-NULL, no poll of it is in
    /// progress, and nothing else uses its `cq_context`.
    pub(super) unsafe fn install(cq: NonNull<ffi::ibv_cq_ex>) -> OnePerStartPtr {
        let c = cq.as_ptr();
        // SAFETY: the caller's promises: a live CQ with its entries set.
        unsafe {
            // Held through a raw pointer from here on (not a `Box`, whose
            // moves would claim it unique while `cq_context` points at it).
            let this = NonNull::from(Box::leak(Box::new(OnePerStart {
                start_poll: (*c).start_poll.unwrap_unchecked(),
                end_poll: (*c).end_poll.unwrap_unchecked(),
                ended: std::cell::Cell::new(false),
            })));
            (*c).cq_context = this.as_ptr().cast();
            (*c).next_poll = Some(next_poll_one_per_start);
            (*c).end_poll = Some(end_poll_one_per_start);
            OnePerStartPtr(this)
        }
    }

    /// The value installed in `cq`.
    ///
    /// # Safety
    /// `cq` had [`OnePerStart::install`], and its value lives.
    unsafe fn of<'a>(cq: *mut ffi::ibv_cq_ex) -> &'a Self {
        // SAFETY: the caller's promise: `cq_context` points at it.
        unsafe { &*(*cq).cq_context.cast::<OnePerStart>() }
    }
}

/// The owner of a [`OnePerStart`] installed in a CQ's `cq_context`: frees
/// it when dropped (after the CQ is destroyed).
pub(crate) struct OnePerStartPtr(NonNull<OnePerStart>);

impl Drop for OnePerStartPtr {
    fn drop(&mut self) {
        // SAFETY: made by `Box::leak` in `install`, freed only here, once;
        // its CQ is destroyed (the field drops after the CQ), so no entry
        // reads it any more.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

/// `next_poll` of a [`OnePerStart`] CQ: ends the provider's poll and
/// starts the next one.
unsafe extern "C" fn next_poll_one_per_start(cq: *mut ffi::ibv_cq_ex) -> i32 {
    // SAFETY: installed only with its `OnePerStart`, which outlives every
    // poll; called within a poll, as `ibv_next_poll` is.
    unsafe {
        let this = OnePerStart::of(cq);
        (this.end_poll)(cq);
        let mut attr = ffi::ibv_poll_cq_attr::default();
        let rc = (this.start_poll)(cq, &mut attr);
        if rc != 0 {
            this.ended.set(true);
        }
        rc
    }
}

/// `end_poll` of a [`OnePerStart`] CQ: ends the provider's poll, unless a
/// `next_poll` already did.
unsafe extern "C" fn end_poll_one_per_start(cq: *mut ffi::ibv_cq_ex) {
    // SAFETY: as in `next_poll_one_per_start`.
    unsafe {
        let this = OnePerStart::of(cq);
        if !this.ended.replace(false) {
            (this.end_poll)(cq);
        }
    }
}
