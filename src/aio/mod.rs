//! Async completions and an owned-buffer async post, on tokio (feature
//! `tokio`).
//!
//! ## Waiting for completions
//!
//! [`CompletionQueue::wait_async`] awaits completions of a CQ made on a
//! [`CompletionChannel`](crate::CompletionChannel)
//! ([`CompletionQueue::with_channel`]), asleep in the runtime: it polls,
//! arms the CQ, polls again, and only then awaits the channel's fd. Each
//! channel is registered once with the reactor of each runtime that waits
//! on it (tokio's `AsyncFd`, made by the first async wait on that runtime;
//! a wait moved to another runtime takes that one's), shared by the CQs on
//! the channel; events are read into the channel's per-CQ
//! bookkeeping, so a task waiting on one CQ ends on that CQ's event,
//! whichever task (or blocking thread) read it. Every task waiting on the
//! channel is woken when its fd becomes readable; the first to run reads
//! the events, the others find theirs (or none, and wait again).
//!
//! No memory is borrowed by a wait: dropping it at any await point loses
//! nothing (it returns only once it has polled completions, and polls none
//! it does not return).
//!
//! ## Posting: the memory is owned, not borrowed
//!
//! A future can be dropped at any await point, or leaked with
//! `mem::forget`, and its destructor is not guaranteed to run: an async
//! post cannot borrow the memory the device uses (`'m`) across an await,
//! as the blocking [`QpEx::post_and_wait`](crate::QpEx::post_and_wait)
//! does. So the async post follows tokio-uring's owned-buffer model:
//! [`AsyncQp`]'s operations take the region by value ([`IoBuf`]: a
//! [`MemoryRegion`], a `Box` of one, or an `Arc` of one for memory the
//! device only reads) and give it back with the completion. The work
//! request is posted when the operation is made; the region then belongs
//! to the `AsyncQp`'s table of work requests in flight, not to the future:
//!
//! - awaited to the end, the operation returns the region with the
//!   completion;
//! - dropped before that (cancelled: a `select!`, a timeout, a task
//!   aborted), the region stays in the table until the device is done with
//!   it: until its completion or flush is polled (by any later operation
//!   or wait on the `AsyncQp`, or [`AsyncQp::poll`]), the QP is moved to
//!   RESET ([`AsyncQp::reset`]) or destroyed; then it is dropped;
//! - leaked (`mem::forget`): the table, not the future, holds the region;
//!   and since the leaked future's handle of the `AsyncQp` is never
//!   dropped, the QP is never destroyed and the region never freed (a
//!   leak, never a use after free);
//! - the `AsyncQp` dropped (its last handle: each operation holds one)
//!   destroys the QP first, and only then drops the regions still in the
//!   table; should the destroy fail, they are leaked rather than freed
//!   under a QP the kernel kept.
//!
//! An operation ends only when the device no longer uses its memory: when
//! its completion (or flush) has been polled, or the QP was reset. When
//! neither can be had (the CQ cannot be polled and the QP cannot be
//! reset), it does not end: cancel it (a timeout), and the region goes
//! with the QP.
//!
//! Why this model and not another: a future that blocks in its `Drop`
//! until the device is done would stall the runtime's thread and still be
//! unsound, as `Drop` need not run; an unsafe async post would leave every
//! caller to prove what the type system cannot. Owning the memory makes
//! cancellation, leaks and panics safe by construction, at the price of an
//! `Arc` or a move per operation (the region, not its bytes). Memory the
//! device writes (receives, RDMA-read destinations) must be owned by value
//! ([`IoBufMut`]): nothing else can see it while the device may write it.
//! `tests/rxe_tokio.rs` drops, times out and leaks operations in flight
//! and checks that their regions stay held until the completion, the
//! flush or the reset.

mod buf;
mod cq;
mod op;
mod qp;

pub use buf::{IoBuf, IoBufMut};
pub use op::Op;
pub use qp::{AsyncQp, BufResult};

#[cfg(doc)]
use crate::{CompletionQueue, MemoryRegion};
