//! [`QpEx::into_direct`]'s refusal ([`IntoDirectError`]): the QP and the
//! CQ handed back, with why.

use super::transport::DirectTransport;
use crate::cq::CompletionQueue;
use crate::error::Error;
use crate::qp::QpEx;
use std::fmt;

/// [`QpEx::into_direct`]'s refusal: why, with the QP and the CQ it was
/// given, both handed back as they were, so that the cause can be mended
/// and the QP taken again (as `close(self) -> Result<(), (Self, Error)>`
/// gives a connection back in rusqlite).
///
/// `?` turns it into the crate's [`Error`] (the QP and the CQ are then
/// dropped):
///
/// ```no_run
/// # use mlx5dv::*;
/// use mlx5dv::direct::IntoDirectError;
///
/// # fn f(qp: RcQp, cq: CompletionQueue) -> Result<()> {
/// let direct = match qp.into_direct(cq) {
///     Ok(direct) => direct,
///     Err(refused) if refused.qp.state()? != QpState::Reset => {
///         // Connected (or posted) first: back to RESET, then take it.
///         let IntoDirectError { qp, cq, .. } = refused;
///         qp.reset()?;
///         qp.into_direct(cq)?
///     }
///     Err(refused) => return Err(refused.into()),
/// };
/// # drop(direct); Ok(()) }
/// ```
#[non_exhaustive]
pub struct IntoDirectError<T: DirectTransport> {
    /// The QP, as it was given.
    pub qp: QpEx<T>,
    /// The CQ, as it was given: every refusal of the QP (its state, its
    /// send queue's shape, no send queue at all) and of how the CQ is
    /// shared comes before `mlx5dv_init_obj` is asked for the CQ, so such
    /// a CQ is libmlx5's as before (it cleans a reset or destroyed QP's
    /// completions from it). Only a refusal of the CQ's own shape, or of
    /// the completions it holds, comes after: that CQ is then marked the
    /// application's (`mlx5dv_init_obj(3)`), and libmlx5 no longer cleans
    /// it; give it only to QPs whose completions are polled before they
    /// are reset or destroyed, or drop it ([`QpEx::into_direct`]).
    pub cq: CompletionQueue,
    /// Why it was refused.
    pub error: Error,
}

impl<T: DirectTransport> IntoDirectError<T> {
    /// The QP, the CQ and the error, by value.
    pub fn into_parts(self) -> (QpEx<T>, CompletionQueue, Error) {
        (self.qp, self.cq, self.error)
    }
}

impl<T: DirectTransport> fmt::Debug for IntoDirectError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntoDirectError")
            .field("qp", &self.qp)
            .field("cq", &self.cq)
            .field("error", &self.error)
            .finish()
    }
}

impl<T: DirectTransport> fmt::Display for IntoDirectError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl<T: DirectTransport> std::error::Error for IntoDirectError<T> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.error.source()
    }
}

impl<T: DirectTransport> From<IntoDirectError<T>> for Error {
    fn from(e: IntoDirectError<T>) -> Error {
        e.error
    }
}
