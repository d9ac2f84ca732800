//! The scoped post's wait for the end of its batch: polling (`Waiting`)
//! until its last completion, the timeout, and stopping the QP when that
//! end cannot be seen.

use super::abort::{abort_with, said_with};
use super::Waiting;
use crate::cq::{back_off, CompletionQueue};
use crate::error::{Error, Result};
use crate::qp::{QpEx, Transport};
use crate::wr::PeerReceive;
use std::time::{Duration, Instant};

/// How long a scoped post that has moved its QP to ERR waits for the flush
/// of its work requests before it moves the QP to RESET.
const FLUSH_WAIT: Duration = Duration::from_secs(5);

impl<T: Transport> QpEx<T> {
    /// Polls until the scoped batch's last completion has come; on timeout
    /// or a failed poll, stops the QP ([`stop`](Self::stop)). The clock is
    /// read once a poll has found none of the batch's completions.
    pub(super) fn wait_scoped(
        &self,
        cq: &mut CompletionQueue,
        w: &mut Waiting<'_>,
        timeout: Duration,
    ) -> Result<()> {
        let mut clock: Option<(Instant, Option<Instant>)> = None;
        let mut idle = 0u32;
        while !w.done {
            let before = w.out.len();
            match w.poll(cq) {
                // Its own came: poll on. Others only (or none) start the
                // clock, so a CQ busy with other QPs' completions cannot
                // hold the timeout off.
                Ok(_) if w.out.len() > before => {
                    idle = 0;
                    continue;
                }
                Ok(_) => {}
                Err(e) => return Err(self.stop(cq, w, e)),
            }
            let (start, deadline) = *clock.get_or_insert_with(|| {
                let start = Instant::now();
                (start, start.checked_add(timeout))
            });
            if start.elapsed() >= timeout {
                let arrived = w.out.len() - w.start;
                // Completions come in order: a work request that needs a
                // receive at the peer and has not completed may be the one
                // the rest wait behind.
                let stuck = match w.peer_receive {
                    Some((kind, position)) if position > arrived => kind,
                    _ => PeerReceive::No,
                };
                let e = Error::Timeout {
                    what: format!(
                        "{} of QP {:#x} ({arrived} arrived)",
                        crate::error::count(w.ids.len() as u64, "completion"),
                        w.qp_num,
                    ) + receiver_not_ready(stuck, w.dc),
                    waited_ms: start.elapsed().as_millis() as u64,
                };
                return Err(self.stop(cq, w, e));
            }
            match cq.idle(&mut idle, deadline, |cq| w.poll(cq)) {
                Ok(0) => {}
                Ok(_) => idle = 0,
                Err(e) => return Err(self.stop(cq, w, e)),
            }
        }
        Ok(())
    }

    /// Makes sure the device runs nothing more of a scoped batch whose end
    /// was not seen: ERR, then the flush awaited for a bounded time, then
    /// RESET. Returns `cause`, with what was done said in it.
    #[cold]
    #[inline(never)]
    pub(super) fn stop(
        &self,
        cq: &mut CompletionQueue,
        w: &mut Waiting<'_>,
        cause: Error,
    ) -> Error {
        let to_err = self.to_error();
        // A QP that cannot go to ERR (soft-RoCE refuses RESET → ERR) flushes
        // nothing: straight to RESET then.
        let wait = if to_err.is_ok() {
            FLUSH_WAIT
        } else {
            Duration::ZERO
        };
        let deadline = Instant::now() + wait;
        let mut idle = 0u32;
        while !w.done && Instant::now() < deadline {
            let polled = match w.poll(cq) {
                // On a CQ with a channel: arm, poll, sleep until the flush.
                Ok(0) => cq.idle(&mut idle, Some(deadline), |cq| w.poll(cq)),
                other => other,
            };
            match polled {
                Ok(0) => {}
                Ok(_) => idle = 0,
                Err(_) => back_off(&mut idle),
            }
        }
        let how = if w.done {
            "the QP was moved to ERR and the rest flushed".to_string()
        } else {
            // A QP already in RESET (which cannot go to ERR) is not moved
            // anywhere by the RESET below: said so.
            let in_reset = to_err.is_err() && matches!(self.state(), Ok(crate::qp::QpState::Reset));
            match self.reset() {
                Ok(()) if in_reset => "the provider may have queued the batch before \
                                       refusing it: the QP, in RESET, was reset again to \
                                       discard it"
                    .to_string(),
                Ok(()) => match &to_err {
                    Ok(()) => "the QP was moved to RESET: the device runs nothing more of \
                               it (the flush after ERR did not come)"
                        .to_string(),
                    Err(e) => format!(
                        "the QP was moved to RESET: the device runs nothing more of it \
                         (the move to ERR was refused: {e})"
                    ),
                },
                Err(e) => abort_with(format_args!(
                    "QP {:#x}: a scoped batch may still be running and the QP cannot be \
                     reset ({e}); aborting, since its memory cannot be released safely",
                    w.qp_num
                )),
            }
        };
        said_with(cause, &how)
    }
}

/// What a scoped post's timeout adds when a work request of it that
/// needs a receive at the peer has not completed: with none posted there,
/// the peer answers "receiver not ready", and at `rnr_retry` 7 (the
/// default) the requester retries for ever, so the wait (and every work
/// request behind that one) ends only with its timeout.
fn receiver_not_ready(stuck: PeerReceive, dc: bool) -> &'static str {
    match (stuck, dc) {
        (PeerReceive::No, _) => "",
        (PeerReceive::Send, false) => {
            "; a send of the batch has not completed, and a send waits for a receive \
             at the peer: the peer may have no receive posted (receiver not ready): with \
             rnr_retry 7 (the default) the send is retried for ever; post a receive at \
             the peer first, or set ConnectOptions::rnr_retry below 7 to get \
             RNR_RETRY_EXC_ERR"
        }
        (PeerReceive::WriteImm, false) => {
            "; an RDMA write with immediate of the batch has not completed, and it waits \
             for a receive at the peer: the peer may have no receive posted (receiver not \
             ready): with rnr_retry 7 (the default) it is retried for ever; post a \
             receive at the peer first, or set ConnectOptions::rnr_retry below 7 to get \
             RNR_RETRY_EXC_ERR"
        }
        (_, true) => {
            "; a send (or RDMA write with immediate) of the batch has not completed, and \
             it waits for a receive at the DCT: the DCT's shared receive queue may be \
             empty (receiver not ready): with rnr_retry 7 (the default) it is retried for \
             ever; post receives to the DCT's SharedReceiveQueue first, or set \
             ConnectOptions::rnr_retry below 7 to get RNR_RETRY_EXC_ERR"
        }
    }
}
