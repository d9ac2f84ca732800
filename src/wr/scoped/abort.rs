//! The scoped post's last resorts: the abort should a panic unwind while
//! its work requests may still run, or should its QP be impossible to
//! stop; and the error that says what it did to stop it.

use crate::error::Error;
use std::io::Write;

/// Aborts the process if dropped: held (and forgotten at the end) across
/// the part of a scoped post where a panic would otherwise unwind past
/// work requests the device still runs.
pub(super) struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    #[cold]
    fn drop(&mut self) {
        abort_with(format_args!(
            "a panic inside a scoped post while its work requests may still run; \
             aborting, since their memory cannot be released safely"
        ));
    }
}

/// Says why on stderr, without a panic should stderr be closed (nothing
/// may unwind where this is called), and aborts the process.
#[cold]
pub(crate) fn abort_with(why: std::fmt::Arguments<'_>) -> ! {
    let _ = writeln!(std::io::stderr(), "mlx5dv: {why}");
    std::process::abort();
}

/// `cause`, with what the scoped post did after it added to its text.
pub(crate) fn said_with(cause: Error, how: &str) -> Error {
    match cause {
        Error::Timeout { what, waited_ms } => Error::Timeout {
            what: format!("{what}; {how}"),
            waited_ms,
        },
        Error::Verbs {
            call,
            context,
            source,
        } => Error::Verbs {
            call,
            context: format!("{context}; {how}"),
            source,
        },
        other => other,
    }
}
