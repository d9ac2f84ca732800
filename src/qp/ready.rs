//! Refusing a post on a QP whose state does not take it, before the
//! provider sees it: sends need RTS, receives INIT or later
//! (`ibv_modify_qp(3)`, `ibv_post_recv(3)`).
//!
//! The state is read from libibverbs' own record of it (`ibv_qp.state`),
//! which `ibv_modify_qp` and `ibv_query_qp` update at each call, whoever
//! makes it (this crate, librdmacm, a program through [`ffi`](crate::ffi)): a field
//! read, no system call, so that a post costs what C's does. The record
//! misses only the moves a device makes by itself, out of RTS into ERR or
//! SQE after a failed work request: it may show RTS for a QP in ERR, never
//! a QP that cannot post for one that can. So a post is refused only when
//! the record says so and `ibv_query_qp` then confirms it (the refusal's
//! path, never the post's); the refusal names the state the kernel gave.
//!
//! Which states refuse which posts:
//!
//! | state | receives | sends ([`WrBatch::complete`](crate::WrBatch::complete)) | sends of the safe posts |
//! |---|---|---|---|
//! | RESET | refused | refused | refused |
//! | INIT, RTR | posted | refused | refused |
//! | RTS | posted | posted | posted |
//! | ERR | posted (flushed) | posted (flushed) | refused |
//!
//! The direct path's posts ([`DirectQp`](crate::direct::DirectQp), safe
//! or not) take RTS only: SQD and SQE refuse them too.
//!
//! In ERR every work request is flushed, which `complete` keeps (a marker
//! posted in ERR, whose flush says that every earlier work request is
//! done, is a common way to drain a QP); a safe post, which posts to get
//! its work requests' results, refuses it instead of returning nothing but
//! flushes.

use super::{query_state, QpEx, Transport};
use crate::error::{Error, Result};
use crate::ffi;

/// What a post puts on a QP's queues.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Post {
    /// A receive (`ibv_post_recv`): INIT or later.
    Receive,
    /// Sends through [`WrBatch::complete`](crate::WrBatch::complete): RTS
    /// (ERR flushes them).
    Send,
    /// Sends of a safe post: RTS, ERR refused too.
    SafeSend,
    /// The direct path's posts ([`DirectQp`](crate::direct::DirectQp)),
    /// which write the WQEs themselves: RTS only.
    Direct,
}

impl Post {
    /// Whether a QP in `state` (`enum ibv_qp_state`) refuses this post:
    /// the table above, in one place for libibverbs' record and for the
    /// kernel's answer. A compare or two, `self` being a constant where it
    /// is inlined.
    #[inline(always)]
    fn refused_in(self, state: u32) -> bool {
        match self {
            Post::Receive => state == ffi::IBV_QPS_RESET,
            Post::Send => state < ffi::IBV_QPS_RTS,
            Post::SafeSend => state < ffi::IBV_QPS_RTS || state == ffi::IBV_QPS_ERR,
            Post::Direct => state != ffi::IBV_QPS_RTS,
        }
    }
}

/// Refuses `post` on `qp` ([`Error::QpNotReady`], naming `what`) when
/// libibverbs' record of its state refuses it and the kernel confirms it:
/// one compare when the record lets it through.
///
/// # Safety
///
/// `qp` is a live QP.
#[inline(always)]
pub(crate) unsafe fn refuse(qp: *mut ffi::ibv_qp, what: &'static str, post: Post) -> Result<()> {
    // SAFETY: the caller's promise.
    if post.refused_in(unsafe { recorded_state(qp) }) {
        // SAFETY: as above.
        return unsafe { confirm(qp, what, post) };
    }
    Ok(())
}

impl<T: Transport> QpEx<T> {
    /// Refuses the sends of a safe post ([`Error::QpNotReady`]) unless the
    /// QP is in RTS (or SQD or SQE, which this crate never moves it to).
    #[inline]
    pub(crate) fn ready_to_send(&self, what: &'static str) -> Result<()> {
        // SAFETY: the QP is live.
        unsafe { refuse(self.as_ptr(), what, Post::SafeSend) }
    }

    /// Refuses a receive ([`Error::QpNotReady`]) on a QP in RESET.
    #[inline]
    pub(crate) fn ready_to_receive(&self, what: &'static str) -> Result<()> {
        // SAFETY: the QP is live.
        unsafe { refuse(self.as_ptr(), what, Post::Receive) }
    }

    /// After a failed work request (a completion with an error status):
    /// asks the kernel for the QP's state, which updates libibverbs'
    /// record of it, so that the next safe post on a QP the failure moved
    /// to ERR is refused as such instead of being flushed.
    #[cold]
    #[inline(never)]
    pub(crate) fn note_failed_work_request(&self) {
        let _ = self.state();
    }
}

/// libibverbs' record of `qp`'s state (`enum ibv_qp_state`), as the last
/// `ibv_modify_qp` or `ibv_query_qp` through libibverbs left it.
///
/// # Safety
///
/// `qp` is a live QP.
#[inline(always)]
pub(crate) unsafe fn recorded_state(qp: *mut ffi::ibv_qp) -> u32 {
    // SAFETY: the caller's promise. libibverbs writes the field only in
    // `ibv_modify_qp` and `ibv_query_qp` of this QP, which safe code calls
    // through `&self` methods of the QP, never while a post holds it
    // mutably (libmlx5's own `post_recv` reads it so, unlocked).
    unsafe { (*qp).state }
}

/// The refusal's path: asks the kernel for the state (`ibv_query_qp`,
/// which also updates libibverbs' record) and refuses `post` when the
/// answer confirms the record; lets the post go on otherwise (a stale
/// record, or a failed query: the provider decides).
///
/// # Safety
///
/// `qp` is a live QP.
#[cold]
#[inline(never)]
unsafe fn confirm(qp: *mut ffi::ibv_qp, what: &'static str, post: Post) -> Result<()> {
    // SAFETY: the caller's promise.
    let Ok(state) = (unsafe { query_state(qp) }) else {
        return Ok(());
    };
    if !post.refused_in(state.to_raw()) {
        return Ok(());
    }
    Err(Error::QpNotReady {
        what,
        // SAFETY: the caller's promise; the number is set at creation.
        qp_num: unsafe { (*qp).qp_num },
        state,
        receive: post == Post::Receive,
    })
}

/// Why the provider refused a batch (`ibv_wr_complete` returned `EINVAL`)
/// when the QP's state explains it: `QP 0x… is in RESET (not connected):
/// …`, from `ibv_query_qp`, for RESET, INIT and RTR only (libmlx5 and
/// soft-RoCE take posts in ERR and SQE, so there the refusal had another
/// cause); `None` otherwise, or when the query fails.
///
/// # Safety
///
/// `qp` is a live QP.
#[cold]
#[inline(never)]
pub(crate) unsafe fn refusal_explained(qp: *mut ffi::ibv_qp) -> Option<String> {
    // SAFETY: the caller's promise.
    let state = unsafe { query_state(qp) }.ok()?;
    if !Post::Send.refused_in(state.to_raw()) {
        return None;
    }
    Some(format!(
        "QP {:#x} is in {}",
        // SAFETY: the caller's promise; the number is set at creation.
        unsafe { (*qp).qp_num },
        crate::qp_state::not_ready(state, false)
    ))
}
