//! Raw access the model needs below any of its objects: words and bytes
//! of the memory the program shares with the device (doorbell records,
//! queue buffers), closing a descriptor the model owns, and errno.

use super::real;

/// Reads `len` bytes of device-visible queue memory (SQ/RQ/CQ buffers).
///
/// # Safety
/// `addr..addr+len` must be mapped and readable (a queue buffer whose
/// address and size the create command gave).
pub unsafe fn read_raw(addr: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: caller contract; the destination is our own buffer.
    unsafe { std::ptr::copy(addr as *const u8, v.as_mut_ptr(), len) };
    v
}

/// Loads a big-endian u32 doorbell record word with acquire ordering.
///
/// # Safety
/// `addr` must be a mapped, 4-byte aligned doorbell record.
pub unsafe fn load_be32_acquire(addr: u64) -> u32 {
    // SAFETY: caller contract; the word is shared with C code that writes it
    // with plain stores after a barrier, so an atomic load is the right view.
    let w = unsafe { std::sync::atomic::AtomicU32::from_ptr(addr as *mut u32) };
    u32::from_be(w.load(std::sync::atomic::Ordering::Acquire))
}

/// Closes an fd the device owns (pipe ends), bypassing the interposer.
pub fn close_raw(fd: i32) {
    // SAFETY: `fd` is a descriptor this module opened and still owns.
    unsafe { (real::close())(fd) };
}

/// Sets errno.
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}
