//! The command fd's memory file, whose pages are the context's UARs.
//!
//! A command fd is a memory file (`memfd_create`), grown to cover each UAR
//! page when UAR_OBJ_ALLOC hands out its offset: an `mmap` of the fd at a
//! UAR's offset gives a shared page of it whether the call reaches the
//! interposer or the kernel directly. UCX's memory hooks (libucm's default
//! "bistro" mode on x86-64) patch the code of the `mmap` that `dlsym`
//! finds, the interposer's, and call the `mmap` system call themselves:
//! libmlx5's UAR mappings then reach the kernel with this fd. Doorbells
//! and BlueFlame writes land in these pages and are ignored (the device
//! polls the doorbell records).

use super::errno::Errno;

/// A UAR page's size (`log_uar_size` 12 in GET_CONTEXT).
const UAR_PAGE: u64 = 4096;

/// A new, empty command file (`cloexec`: closed on exec); -1 and errno
/// on failure.
pub fn command_file(cloexec: bool) -> i32 {
    let flags = if cloexec { libc::MFD_CLOEXEC } else { 0 };
    // SAFETY: a NUL-terminated name and valid flags.
    unsafe { libc::memfd_create(c"mlx5dv-sim-uverbs0".as_ptr(), flags) }
}

/// Grows command fd `fd`'s file to cover the UAR page at `offset` (UAR
/// offsets only grow).
pub fn cover(fd: i32, offset: u64) -> Result<(), Errno> {
    let end = offset + UAR_PAGE;
    // SAFETY: plain ftruncate of a command fd, a memory file this module
    // made; the offsets only grow, so it only grows the file.
    if unsafe { libc::ftruncate(fd, end as libc::off_t) } != 0 {
        return Err(Errno(libc::ENOMEM));
    }
    Ok(())
}
