//! The LD_PRELOAD interposer: libc entry points that libibverbs and libmlx5
//! reach through the PLT.
//!
//! With `MLX5DV_SIM` unset every function passes straight through to the
//! next definition (libc). With it set:
//! - `socket(AF_NETLINK, *, NETLINK_RDMA)` fails with EPROTONOSUPPORT, so
//!   libibverbs discovers devices from the sysfs tree named by `SYSFS_PATH`;
//! - `stat`/`open` of `/dev/infiniband/uverbs0` give a character device and
//!   a fresh command fd; `fstat`, `write`, `ioctl`, `mmap` and `close` of a
//!   command fd go to the fake kernel ([`crate::kernel`]).
//!
//! Other fds and paths pass through. The check on the hot path is one
//! atomic load (fd bitmap) or a short prefix compare (paths); no lock is
//! held across a pass-through call, and nothing allocates on that path.
//! The variadic functions (`open`, `openat`, `ioctl`) are C shims
//! (`csrc/variadic.c`) calling the `mlx5dv_sim_*` functions here.

use crate::config;
use crate::kernel;
/// Which fds are command fds (now [`crate::kernel::fds`]; the old path stays).
pub use crate::kernel::fds;
/// libc's own definitions (now [`crate::sys::real`]; the old path stays).
pub use crate::sys::real;
use libc::{c_char, c_int, c_uint, c_ulong, c_void, size_t, ssize_t};
use std::ffi::CStr;

extern "C" {
    fn mlx5dv_sim_variadic_anchor();
}

/// Keeps the C shim object linked into the library.
pub fn anchor() {
    // SAFETY: an empty C function.
    unsafe { mlx5dv_sim_variadic_anchor() };
}

const NETLINK_RDMA: c_int = 20;

fn enabled() -> bool {
    config::get().enabled
}

/// Whether `path` names the fake uverbs node.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn is_uverbs(path: *const c_char) -> bool {
    if path.is_null() || !enabled() {
        return false;
    }
    // SAFETY: non-null and NUL-terminated (caller contract).
    let p = unsafe { CStr::from_ptr(path) };
    p.to_bytes() == kernel::UVERBS_PATH.as_bytes()
}

/// A per-host file of the sysfs tree (node GUID, LID, GIDs: they differ
/// between the hosts of the fabric, while the tree is shared): opened as a
/// memory file holding this host's value. `None`: not such a file.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn per_host_file(path: *const c_char, flags: c_int) -> Option<c_int> {
    if path.is_null() || !enabled() || flags & libc::O_ACCMODE != libc::O_RDONLY {
        return None;
    }
    let root = config::get().sysfs.as_deref()?;
    // SAFETY: non-null and NUL-terminated (caller contract).
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    let rel = p
        .strip_prefix(root.trim_end_matches('/').as_bytes())?
        .strip_prefix(b"/class/infiniband/mlx5_0/")?;
    let text = crate::fabric::sysfs_file(std::str::from_utf8(rel).ok()?)?;
    // SAFETY: a NUL-terminated name; flags valid for memfd_create.
    let fd = unsafe { libc::memfd_create(c"mlx5dv-sim-sysfs".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is the memory file just made; `text` is readable.
    let n = unsafe { (real::write())(fd, text.as_ptr().cast(), text.len()) };
    // SAFETY: plain lseek on our own descriptor.
    if n != text.len() as isize || unsafe { libc::lseek(fd, 0, libc::SEEK_SET) } != 0 {
        // SAFETY: closing the descriptor made above.
        unsafe { (real::close())(fd) };
        return None;
    }
    Some(fd)
}

fn fill_chr_stat(buf: *mut libc::stat) {
    // SAFETY: `buf` is the caller's stat buffer, writable (stat contract);
    // a zeroed struct stat is valid.
    unsafe {
        std::ptr::write_bytes(buf, 0, 1);
        (*buf).st_mode = libc::S_IFCHR | 0o666;
        (*buf).st_rdev = libc::makedev(kernel::UVERBS_MAJOR, kernel::UVERBS_MINOR);
        (*buf).st_nlink = 1;
        (*buf).st_blksize = 4096;
    }
}

/// `open` (called by the C shim with the mode already read).
///
/// # Safety
/// As libc `open`.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_sim_open(path: *const c_char, flags: c_int, mode: c_uint) -> c_int {
    // SAFETY: `path` is the caller's C string.
    if unsafe { is_uverbs(path) } {
        anchor();
        return kernel::open_cmd_fd(flags);
    }
    // SAFETY: `path` is the caller's C string.
    if let Some(fd) = unsafe { per_host_file(path, flags) } {
        return fd;
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::open())(path, flags, mode) }
}

/// `openat` (called by the C shim).
///
/// # Safety
/// As libc `openat`.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_sim_openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: c_uint,
) -> c_int {
    // SAFETY: `path` is the caller's C string.
    if unsafe { is_uverbs(path) } {
        return kernel::open_cmd_fd(flags);
    }
    // SAFETY: `path` is the caller's C string; a relative path is left
    // alone unless it is relative to the working directory.
    if dirfd == libc::AT_FDCWD || unsafe { path.as_ref() }.is_some_and(|c| *c == b'/' as c_char) {
        // SAFETY: as above.
        if let Some(fd) = unsafe { per_host_file(path, flags) } {
            return fd;
        }
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::openat())(dirfd, path, flags, mode) }
}

/// `ioctl` (called by the C shim).
///
/// # Safety
/// As libc `ioctl`.
#[no_mangle]
pub unsafe extern "C" fn mlx5dv_sim_ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    if fds::is_fake(fd) {
        // SAFETY: the caller's ioctl argument, as the uverbs ABI defines it.
        return unsafe { kernel::ioctl(fd, request, arg.cast()) };
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::ioctl())(fd, request, arg) }
}

/// `socket`: NETLINK_RDMA sockets fail so that sysfs discovery is used.
///
/// # Safety
/// As libc `socket`.
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    if domain == libc::AF_NETLINK && protocol == NETLINK_RDMA && enabled() {
        kernel::set_errno(libc::EPROTONOSUPPORT);
        return -1;
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::socket())(domain, ty, protocol) }
}

/// `stat`.
///
/// # Safety
/// As libc `stat`.
#[no_mangle]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: `path` is the caller's C string.
    if unsafe { is_uverbs(path) } {
        fill_chr_stat(buf);
        return 0;
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::stat())(path, buf) }
}

/// `stat64` (the same struct on 64-bit Linux).
///
/// # Safety
/// As libc `stat64`.
#[no_mangle]
pub unsafe extern "C" fn stat64(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: `path` is the caller's C string.
    if unsafe { is_uverbs(path) } {
        fill_chr_stat(buf);
        return 0;
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::stat64())(path, buf) }
}

/// `__xstat` (glibc before 2.33 routes `stat` here).
///
/// # Safety
/// As glibc `__xstat`.
#[no_mangle]
pub unsafe extern "C" fn __xstat(_ver: c_int, path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: same contract as stat; on 64-bit Linux the versioned struct
    // is `struct stat`.
    unsafe { stat(path, buf) }
}

/// `fstat`.
///
/// # Safety
/// As libc `fstat`.
#[no_mangle]
pub unsafe extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    if fds::is_fake(fd) {
        fill_chr_stat(buf);
        return 0;
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::fstat())(fd, buf) }
}

/// `fstat64`.
///
/// # Safety
/// As libc `fstat64`.
#[no_mangle]
pub unsafe extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat) -> c_int {
    if fds::is_fake(fd) {
        fill_chr_stat(buf);
        return 0;
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::fstat64())(fd, buf) }
}

/// `__fxstat` (glibc before 2.33).
///
/// # Safety
/// As glibc `__fxstat`.
#[no_mangle]
pub unsafe extern "C" fn __fxstat(_ver: c_int, fd: c_int, buf: *mut libc::stat) -> c_int {
    // SAFETY: same contract as fstat.
    unsafe { fstat(fd, buf) }
}

/// `write`: a uverbs command on a command fd.
///
/// # Safety
/// As libc `write`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    if fds::is_fake(fd) {
        // SAFETY: the caller's buffer of `count` bytes, a uverbs command.
        return unsafe { kernel::write(fd, buf.cast(), count) };
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::write())(fd, buf, count) }
}

/// `close`: a command fd's context is torn down.
///
/// # Safety
/// As libc `close`.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fds::unmark(fd) {
        kernel::close_cmd_fd(fd);
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::close())(fd) }
}

/// `mmap`: UAR pages of a command fd.
///
/// # Safety
/// As libc `mmap`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    if fds::is_fake(fd) {
        // SAFETY: the caller's mmap arguments; `addr` is only a hint.
        return unsafe { kernel::mmap(fd, addr, len, prot, off) };
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::mmap())(addr, len, prot, flags, fd, off) }
}

/// `mmap64` (the same as `mmap` on 64-bit Linux).
///
/// # Safety
/// As libc `mmap64`.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    if fds::is_fake(fd) {
        // SAFETY: the caller's mmap arguments; `addr` is only a hint.
        return unsafe { kernel::mmap(fd, addr, len, prot, off) };
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::mmap64())(addr, len, prot, flags, fd, off) }
}
