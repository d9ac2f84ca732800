//! How a command fails: the errno its system call returns, logged with
//! the reason, and the failures `MLX5DV_SIM_FAIL_CMD` injects.

use crate::config::{self, debug};

/// A failed command: the errno the system call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

/// Command result.
pub type Res<T> = Result<T, Errno>;

/// Logs why a command is refused (debug) and builds the error.
pub fn refuse(errno: i32, why: std::fmt::Arguments<'_>) -> Errno {
    debug!(
        "refused ({}): {}",
        std::io::Error::from_raw_os_error(errno),
        why
    );
    Errno(errno)
}

/// Fault injection: refuse command `name` when `MLX5DV_SIM_FAIL_CMD` says so.
pub fn injected(name: &str) -> Res<()> {
    match config::get().injected_failure(name) {
        Some(e) => Err(refuse(e, format_args!("{name}: injected failure"))),
        None => Ok(()),
    }
}
