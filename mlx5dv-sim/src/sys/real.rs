//! The next definition of each interposed libc function, found once with
//! `dlsym(RTLD_NEXT, name)` and cached.

use std::ffi::CStr;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A lazily resolved pointer to the next definition of a libc symbol.
pub struct Next {
    name: &'static CStr,
    addr: AtomicUsize,
}

impl Next {
    /// A cache for `name` (resolved on first use).
    pub const fn new(name: &'static CStr) -> Self {
        Self {
            name,
            addr: AtomicUsize::new(0),
        }
    }

    /// The address of the next definition; aborts the process when there is
    /// none (libc always has these symbols, so this is a broken install).
    pub fn get(&self) -> usize {
        let a = self.addr.load(Ordering::Acquire);
        if a != 0 {
            return a;
        }
        // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name has no
        // preconditions; it returns null or a symbol address.
        let p = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
        if p.is_null() {
            let msg = b"mlx5dv-sim: dlsym(RTLD_NEXT) found no libc symbol\n";
            // SAFETY: writing a static buffer to fd 2 via the raw syscall
            // (not the interposed `write`); abort() never returns.
            unsafe {
                libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len());
                libc::abort();
            }
        }
        self.addr.store(p as usize, Ordering::Release);
        p as usize
    }
}

/// Declares a cached next-symbol and a typed accessor for it.
macro_rules! next_fn {
    ($vis:vis $getter:ident, $sym:literal, $ty:ty) => {
        /// The next definition (libc's) of the function of this name.
        $vis fn $getter() -> $ty {
            static NEXT: $crate::sys::real::Next =
                $crate::sys::real::Next::new($sym);
            let addr = NEXT.get();
            // SAFETY: `addr` is the non-null address dlsym returned for the
            // libc function named `$sym`, whose C prototype `$ty` spells.
            unsafe { std::mem::transmute::<usize, $ty>(addr) }
        }
    };
}

type OpenFn = unsafe extern "C" fn(*const libc::c_char, libc::c_int, libc::c_uint) -> libc::c_int;
type OpenatFn = unsafe extern "C" fn(
    libc::c_int,
    *const libc::c_char,
    libc::c_int,
    libc::c_uint,
) -> libc::c_int;
type IoctlFn = unsafe extern "C" fn(libc::c_int, libc::c_ulong, *mut libc::c_void) -> libc::c_int;
type StatFn = unsafe extern "C" fn(*const libc::c_char, *mut libc::stat) -> libc::c_int;
type FstatFn = unsafe extern "C" fn(libc::c_int, *mut libc::stat) -> libc::c_int;
type CloseFn = unsafe extern "C" fn(libc::c_int) -> libc::c_int;
type WriteFn =
    unsafe extern "C" fn(libc::c_int, *const libc::c_void, libc::size_t) -> libc::ssize_t;
type AccessFn = unsafe extern "C" fn(*const libc::c_char, libc::c_int) -> libc::c_int;
type FaccessatFn =
    unsafe extern "C" fn(libc::c_int, *const libc::c_char, libc::c_int, libc::c_int) -> libc::c_int;
type SocketFn = unsafe extern "C" fn(libc::c_int, libc::c_int, libc::c_int) -> libc::c_int;
type MmapFn = unsafe extern "C" fn(
    *mut libc::c_void,
    libc::size_t,
    libc::c_int,
    libc::c_int,
    libc::c_int,
    libc::off_t,
) -> *mut libc::c_void;

next_fn!(pub open, c"open", OpenFn);
next_fn!(pub openat, c"openat", OpenatFn);
next_fn!(pub ioctl, c"ioctl", IoctlFn);
next_fn!(pub stat, c"stat", StatFn);
next_fn!(pub stat64, c"stat64", StatFn);
next_fn!(pub fstat, c"fstat", FstatFn);
next_fn!(pub fstat64, c"fstat64", FstatFn);
next_fn!(pub close, c"close", CloseFn);
next_fn!(pub write, c"write", WriteFn);
next_fn!(pub socket, c"socket", SocketFn);
next_fn!(pub mmap, c"mmap", MmapFn);
next_fn!(pub mmap64, c"mmap64", MmapFn);
next_fn!(pub access, c"access", AccessFn);
next_fn!(pub euidaccess, c"euidaccess", AccessFn);
next_fn!(pub eaccess, c"eaccess", AccessFn);
next_fn!(pub faccessat, c"faccessat", FaccessatFn);
