//! Event queues: completion channels and async-event fds are pipes the
//! program reads. The kernel counts an event as reported when the program
//! *reads* it, and drops a destroyed object's unread events; libibverbs
//! then waits at destroy until the program has acknowledged as many events
//! as were reported. The model does the same: at destroy it takes the
//! object's unread events out of the pipe (through a second, non-blocking
//! open of the same pipe, `/proc/self/fd/N`, so that it never blocks) and
//! reports the events written minus those.

use crate::config::debug;
use crate::sys::raw::close_raw;
use crate::sys::real;

/// Removes from the pipe whose read end is `read_fd` (write end
/// `write_fd`) the unread events of `size` bytes for which `mine` holds,
/// putting the others back in order; returns how many were removed.
pub fn take_unread(read_fd: i32, write_fd: i32, size: usize, mine: impl Fn(&[u8]) -> bool) -> u32 {
    let path = format!("/proc/self/fd/{read_fd}\0");
    // SAFETY: a NUL-terminated path; the result is a new fd we own.
    let fd = unsafe {
        (real::open())(
            path.as_ptr().cast(),
            libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        debug!(
            "cannot reopen event pipe {read_fd}: {}",
            std::io::Error::last_os_error()
        );
        return 0;
    }
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        // SAFETY: reading into our own buffer from our own non-blocking fd.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n <= 0 {
            break;
        }
        pending.extend_from_slice(&buf[..n as usize]);
    }
    close_raw(fd);
    let mut removed = 0;
    let mut keep = Vec::with_capacity(pending.len());
    for ev in pending.chunks(size) {
        if ev.len() == size && mine(ev) {
            removed += 1;
        } else {
            keep.extend_from_slice(ev);
        }
    }
    if !keep.is_empty() {
        // SAFETY: `write_fd` is the device's write end of the pipe; `keep`
        // is our buffer (at most what the pipe held, so it fits again).
        let n = unsafe { (real::write())(write_fd, keep.as_ptr().cast(), keep.len()) };
        if n != keep.len() as isize {
            debug!("events lost putting them back into pipe {read_fd}");
        }
    }
    removed
}
