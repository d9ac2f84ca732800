//! The file-descriptor calls the completion channel, the async events and
//! the connection manager share: non-blocking mode, `poll(2)` with a
//! deadline, `errno`.

use crate::clock::Mono;
use crate::error::{Error, Result};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

/// Clears `errno`, so that a C call that fails without setting it is not
/// taken for the failure before it.
pub(crate) fn clear_errno() {
    // SAFETY: `__errno_location` returns this thread's errno.
    unsafe { *libc::__errno_location() = 0 };
}

/// Puts `fd` in non-blocking mode (`O_NONBLOCK`, `fcntl(2)`).
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>, what: impl FnOnce() -> String) -> Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: `fd` is open (borrowed); F_GETFL takes no argument.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    let rc = if flags < 0 {
        flags
    } else {
        // SAFETY: as above; F_SETFL takes the flags.
        unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) }
    };
    if rc < 0 {
        return Err(Error::last_os("fcntl", format!("O_NONBLOCK on {}", what())));
    }
    Ok(())
}

/// Sleeps in `poll(2)` until `fd` is readable or `deadline` passes
/// (`None`: never); returns whether it is readable (`false` on timeout and
/// on `EINTR`), or the errno of a failed `poll`.
pub(crate) fn poll_readable(
    fd: BorrowedFd<'_>,
    deadline: Option<Instant>,
) -> std::result::Result<bool, i32> {
    let timeout_ms = match deadline {
        None => -1,
        // Rounded up: a wait never ends before its deadline.
        Some(d) => timeout_ms(d.saturating_duration_since(Instant::now())),
    };
    poll_for(fd, timeout_ms)
}

/// [`poll_readable`] with the deadline on the waits' clock and the clock
/// read by the caller: `now`, taken no later than this call (a `now`
/// taken earlier only makes the sleep end later, never before
/// `deadline`).
pub(crate) fn poll_readable_at(
    fd: BorrowedFd<'_>,
    deadline: Option<Mono>,
    now: Mono,
) -> std::result::Result<bool, i32> {
    let timeout_ms = match deadline {
        None => -1,
        // Rounded up: a wait never ends before its deadline.
        Some(d) => ns_to_timeout_ms(now.until(d)),
    };
    poll_for(fd, timeout_ms)
}

/// Whether `fd` is readable now (`poll(2)` with no timeout); `true` when
/// the look fails, so that the caller reads and meets the error there
/// (but `false` on `EINTR`, which `poll` returns only when it found
/// nothing ready).
pub(crate) fn readable_now(fd: BorrowedFd<'_>) -> bool {
    poll_for(fd, 0).unwrap_or(true)
}

/// `poll(2)` for readability, `timeout_ms` as poll takes it.
fn poll_for(fd: BorrowedFd<'_>, timeout_ms: i32) -> std::result::Result<bool, i32> {
    let mut pfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid, writable pollfd; the fd is open (borrowed).
    let rc = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
    if rc < 0 {
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        return if errno == libc::EINTR {
            Ok(false)
        } else {
            Err(errno)
        };
    }
    Ok(rc > 0)
}

/// `left` as a `poll(2)` timeout: whole milliseconds, rounded up, at most
/// `i32::MAX`.
fn timeout_ms(left: Duration) -> i32 {
    // In 64 bits (a 128-bit division costs a call): whole seconds, then
    // the rest rounded up to a millisecond.
    let ms = left
        .as_secs()
        .saturating_mul(1000)
        .saturating_add(u64::from(left.subsec_nanos().div_ceil(1_000_000)));
    i32::try_from(ms).unwrap_or(i32::MAX)
}

/// `ns` nanoseconds as a `poll(2)` timeout, as [`timeout_ms`].
fn ns_to_timeout_ms(ns: u64) -> i32 {
    i32::try_from(ns.div_ceil(1_000_000)).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::undocumented_unsafe_blocks)]

    use super::*;
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};

    #[test]
    fn poll_timeouts_round_up_and_saturate() {
        assert_eq!(timeout_ms(Duration::ZERO), 0);
        assert_eq!(timeout_ms(Duration::from_nanos(1)), 1);
        assert_eq!(timeout_ms(Duration::from_micros(1500)), 2);
        assert_eq!(timeout_ms(Duration::from_millis(7)), 7);
        assert_eq!(timeout_ms(Duration::from_secs(u64::MAX)), i32::MAX);
        assert_eq!(timeout_ms(Duration::new(u64::MAX, 999_999_999)), i32::MAX);
        assert_eq!(timeout_ms(Duration::new(2, 1)), 2001);
        assert_eq!(timeout_ms(Duration::new(2, 999_000_001)), 3000);
        assert_eq!(timeout_ms(Duration::from_millis(i32::MAX as u64)), i32::MAX);
        assert_eq!(
            timeout_ms(Duration::from_millis(i32::MAX as u64 - 1)),
            i32::MAX - 1
        );
        assert_eq!(ns_to_timeout_ms(0), 0);
        assert_eq!(ns_to_timeout_ms(1), 1);
        assert_eq!(ns_to_timeout_ms(1_000_000), 1);
        assert_eq!(ns_to_timeout_ms(1_000_001), 2);
        assert_eq!(ns_to_timeout_ms(2_999_000_001), 3000);
        assert_eq!(ns_to_timeout_ms(i32::MAX as u64 * 1_000_000), i32::MAX);
        assert_eq!(ns_to_timeout_ms(i32::MAX as u64 * 1_000_000 + 1), i32::MAX);
        assert_eq!(ns_to_timeout_ms(u64::MAX), i32::MAX);
    }

    #[test]
    fn poll_readable_sleeps_until_the_deadline_then_sees_data() {
        let mut fds = [0; 2];
        // SAFETY: a writable array of two fds.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both were just opened and are owned here.
        let (r, w) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        set_nonblocking(r.as_fd(), || "a pipe".into()).unwrap();
        let start = Instant::now();
        let ready = poll_readable(r.as_fd(), Some(start + Duration::from_millis(50))).unwrap();
        assert!(!ready);
        assert!(start.elapsed() >= Duration::from_millis(50));
        // On the waits' clock, the same.
        let now = Mono::now();
        let ready = poll_readable_at(r.as_fd(), now.after(Duration::from_millis(30)), now).unwrap();
        assert!(!ready);
        assert!(now.elapsed() >= Duration::from_millis(30));
        assert!(!readable_now(r.as_fd()));
        // SAFETY: one byte from a valid buffer into an open pipe.
        assert_eq!(
            unsafe { libc::write(w.as_raw_fd(), b"x".as_ptr().cast(), 1) },
            1
        );
        assert!(poll_readable(r.as_fd(), None).unwrap());
        assert!(poll_readable_at(r.as_fd(), None, Mono::now()).unwrap());
        assert!(readable_now(r.as_fd()));
        // SAFETY: F_GETFL on an open fd.
        let flags = unsafe { libc::fcntl(r.as_raw_fd(), libc::F_GETFL) };
        assert_ne!(flags & libc::O_NONBLOCK, 0);
    }
}
