//! Completion queues and typed work completions.
//!
//! Two ways to read completions:
//!
//! - [`CompletionQueue::poll_each`] hands each completion to a closure as a
//!   [`PolledWc`], a view of the CQ positioned on it whose accessors call the
//!   provider's readers (`ibv_wc_read_*`) directly: a closure pays for what
//!   it reads and nothing else, as the same loop written in C does.
//! - [`CompletionQueue::poll_into`], [`wait`](CompletionQueue::wait) and
//!   [`wait_into`](CompletionQueue::wait_into) collect owned
//!   [`WorkCompletion`]s, every field read.
//!
//! One concern a file (the status, opcode and flags types are in
//! `crate::wc`, below the errors that name them), each file naming only
//! those below it:
//!
//! - at the bottom, the types the handle is made of: the completion view
//!   (`polled_wc`), owned completions and their writers
//!   (`work_completion`, with `PolledWc`'s `Debug`), a completion as a
//!   scoped post keeps it (`raw_wc`), the ledger of binds and places
//!   (`queued`), the QPs on the CQ (`owners`), and the soft-RoCE
//!   workaround (`one_per_start`, `soft_roce_probe`);
//! - the handle itself, its creation and its drop (`handle`);
//! - above it, what the handle does: polling (`polling`), handing out the
//!   completions a scoped post kept for it (`backlog`), waiting (`wait`),
//!   its completion channel (`channel`), resizing (`resize`), and the XRC
//!   SRQs it keeps until it goes (`retired`).
//!
//! This file: the `entry!` macro through which the polls and readers
//! call the provider, the files, and what the crate uses of them.

/// Calls the poll entry `$entry` of a CQ (`NonNull<ibv_cq_ex>`) straight
/// from its `struct ibv_cq_ex`, as the header's inline functions do, with
/// the CQ and then the other arguments. To be used inside `unsafe`: the
/// CQ must be live and its entries checked non-NULL when the handle was
/// made (`check_poll_entries`; providers set them once, at creation).
macro_rules! entry {
    ($cq:expr, $entry:ident $(, $arg:expr)*) => {{
        let cq: *mut ffi::ibv_cq_ex = $cq.as_ptr();
        match (*cq).$entry {
            Some(f) => f(cq $(, $arg)*),
            None => std::hint::unreachable_unchecked(),
        }
    }};
}

mod backlog;
mod channel;
mod handle;
mod one_per_start;
mod owners;
mod polled_wc;
mod polling;
mod queued;
mod raw_wc;
mod resize;
mod retired;
mod soft_roce_probe;
#[cfg(test)]
mod tests;
mod wait;
mod work_completion;

pub use crate::wc::{WcFlags, WcOpcode, WcStatus};
pub use handle::CompletionQueue;
pub(crate) use handle::CqInner;
pub(crate) use owners::Owners;
pub use polled_wc::PolledWc;
pub(crate) use polling::{after_polls, ffi_cq, in_poll_callback, in_provider_poll};
pub(crate) use queued::Queued;
#[cfg(feature = "tokio")]
pub(crate) use queued::Watch;
pub(crate) use raw_wc::RawWc;
pub(crate) use wait::back_off;
pub(crate) use work_completion::write_wc_fields;
pub use work_completion::WorkCompletion;
