//! The LD_PRELOAD interposer: libc entry points that libibverbs and libmlx5
//! reach through the PLT.
//!
//! With `MLX5DV_SIM` unset every function passes straight through to the
//! next definition (libc). With it set:
//! - `socket(AF_NETLINK, *, NETLINK_RDMA)` fails with EPROTONOSUPPORT, so
//!   libibverbs discovers devices from the sysfs tree named by `SYSFS_PATH`;
//! - `stat`/`access`/`open` of `/dev/infiniband/uverbs0` give a character
//!   device, read-write for everyone, and a fresh command fd; `fstat`,
//!   `write`, `ioctl`, `mmap` and `close` of a command fd go to the fake
//!   kernel ([`crate::kernel`]);
//! - reading the device's files of the sysfs tree gives this host's node
//!   GUID, LID and GIDs, and the device's files under the real `/sys` are
//!   the tree's.
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

/// A file of the device's sysfs directory, as a path relative to that
/// directory (`ports/1/lid`), given a path relative to the tree's root: the
/// device's class link (`class/infiniband/mlx5_0/...`) or the PCI
/// function's directory it leads to (`devices/.../infiniband/mlx5_0/...`).
fn device_relative(rel: &[u8]) -> Option<&str> {
    let in_dev = match rel.strip_prefix(b"class/infiniband/mlx5_0/") {
        Some(r) => r,
        None => {
            let r = rel.strip_prefix(b"devices/")?;
            const DIR: &[u8] = b"/infiniband/mlx5_0/";
            let at = r.windows(DIR.len()).position(|w| w == DIR)?;
            &r[at + DIR.len()..]
        }
    };
    std::str::from_utf8(in_dev).ok()
}

/// A memory file holding `text`, read from its start.
fn memory_file(text: &str) -> Option<c_int> {
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

/// A file of the device's sysfs tree opened read-only: `None` when `path`
/// is not one the device answers (the caller passes it through).
///
/// - A per-host file (node GUID, LID, GIDs: they differ between the hosts
///   of the fabric, while the tree is shared), by any of its paths in the
///   tree: a memory file holding this host's value.
/// - The device's files under the real `/sys` (`/sys/class/infiniband/
///   mlx5_0/...`, `/sys/class/infiniband_verbs/...`), which programs read
///   without `SYSFS_PATH` (rdma-core's tests read P_Keys there, UCX the
///   device's NUMA node and local CPUs): the tree's file, as if the tree
///   were mounted there.
///
/// # Safety
/// `path` is null or a NUL-terminated string.
unsafe fn sysfs_file(path: *const c_char, flags: c_int) -> Option<c_int> {
    if path.is_null() || !enabled() || flags & libc::O_ACCMODE != libc::O_RDONLY {
        return None;
    }
    let root = config::get().sysfs.as_deref()?.trim_end_matches('/');
    // SAFETY: non-null and NUL-terminated (caller contract).
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    if let Some(rel) = p
        .strip_prefix(root.as_bytes())
        .and_then(|r| r.strip_prefix(b"/"))
    {
        return memory_file(&crate::fabric::sysfs_file(device_relative(rel)?)?);
    }
    let rel = p.strip_prefix(b"/sys/").filter(|_| root != "/sys")?;
    if !rel.starts_with(b"class/infiniband/mlx5_0/") && !rel.starts_with(b"class/infiniband_verbs/")
    {
        return None;
    }
    if let Some(text) = device_relative(rel).and_then(crate::fabric::sysfs_file) {
        return memory_file(&text);
    }
    let mut in_tree = Vec::with_capacity(root.len() + rel.len() + 2);
    in_tree.extend_from_slice(root.as_bytes());
    in_tree.push(b'/');
    in_tree.extend_from_slice(rel);
    let in_tree = std::ffi::CString::new(in_tree).ok()?;
    // SAFETY: a NUL-terminated path; the caller's flags, read-only.
    Some(unsafe { (real::open())(in_tree.as_ptr(), flags, 0) })
}

/// `access`-family answer for the fake node: a character device of mode
/// 0666, so read and write are allowed, execute is not.
fn uverbs_access(mode: c_int) -> c_int {
    if mode & libc::X_OK != 0 {
        kernel::set_errno(libc::EACCES);
        return -1;
    }
    0
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
    if let Some(fd) = unsafe { sysfs_file(path, flags) } {
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
        if let Some(fd) = unsafe { sysfs_file(path, flags) } {
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

/// `access`: the fake node is readable and writable (UCX checks it before
/// it opens the device).
///
/// # Safety
/// As libc `access`.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: `path` is the caller's C string.
    if unsafe { is_uverbs(path) } {
        return uverbs_access(mode);
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::access())(path, mode) }
}

/// `euidaccess`: as `access`, with the effective ids.
///
/// # Safety
/// As glibc `euidaccess`.
#[no_mangle]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: `path` is the caller's C string.
    if unsafe { is_uverbs(path) } {
        return uverbs_access(mode);
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::euidaccess())(path, mode) }
}

/// `eaccess` (glibc's other name for `euidaccess`).
///
/// # Safety
/// As glibc `eaccess`.
#[no_mangle]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: `path` is the caller's C string.
    if unsafe { is_uverbs(path) } {
        return uverbs_access(mode);
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::eaccess())(path, mode) }
}

/// `faccessat`: the fake node's path is absolute, so `dirfd` does not
/// matter; the flags (`AT_EACCESS`, `AT_SYMLINK_NOFOLLOW`) change nothing
/// for it. (glibc exports no `faccessat2`: its `faccessat` makes that
/// system call.)
///
/// # Safety
/// As libc `faccessat`.
#[no_mangle]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: `path` is the caller's C string.
    if unsafe { is_uverbs(path) } {
        return uverbs_access(mode);
    }
    // SAFETY: forwarding the caller's arguments to libc.
    unsafe { (real::faccessat())(dirfd, path, mode, flags) }
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
