//! Which file descriptors are fake uverbs command fds: a lock-free bitmap,
//! so the pass-through path of `write`, `close`, `ioctl`, `mmap` and `fstat`
//! costs one atomic load.

use std::sync::atomic::{AtomicU64, Ordering};

/// Fds at or above this are never fake (the fake ones are the lowest free
/// fds, opened by libibverbs).
const MAX_FD: usize = 1 << 16;

static BITS: [AtomicU64; MAX_FD / 64] = [const { AtomicU64::new(0) }; MAX_FD / 64];

fn slot(fd: i32) -> Option<(usize, u64)> {
    let fd = usize::try_from(fd).ok().filter(|&f| f < MAX_FD)?;
    Some((fd / 64, 1u64 << (fd % 64)))
}

/// Whether `fd` is a fake command fd.
#[inline]
pub fn is_fake(fd: i32) -> bool {
    slot(fd).is_some_and(|(w, b)| BITS[w].load(Ordering::Acquire) & b != 0)
}

/// Marks `fd` fake; false when it is out of the bitmap's range.
pub fn mark(fd: i32) -> bool {
    match slot(fd) {
        Some((w, b)) => {
            BITS[w].fetch_or(b, Ordering::AcqRel);
            true
        }
        None => false,
    }
}

/// Clears `fd`; returns whether it was fake.
pub fn unmark(fd: i32) -> bool {
    slot(fd).is_some_and(|(w, b)| BITS[w].fetch_and(!b, Ordering::AcqRel) & b != 0)
}
