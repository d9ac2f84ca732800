//! The fake device node, `/dev/infiniband/uverbs0`: what `open`, `write`,
//! `ioctl`, `mmap` and `close` of a command fd do (the calls the
//! interposer hands over). Each `write` is one legacy command
//! (`write_cmds.rs`), each `ioctl` one method (`ioctl.rs`).

use super::errno::Errno;
use super::{fds, uar, write_cmds};
use crate::config::debug;
use crate::model::lock;
use crate::model::state::{self, Context};
use crate::sys::raw::{close_raw, set_errno};
use crate::sys::real;

/// The char device's major number and the fake uverbs minor.
pub const UVERBS_MAJOR: u32 = 231;
/// Minor of `uverbs0`.
pub const UVERBS_MINOR: u32 = 192;
/// The fake device node.
pub const UVERBS_PATH: &str = "/dev/infiniband/uverbs0";

/// Opens a new command fd (`open("/dev/infiniband/uverbs0")`).
///
/// The fd is a memory file (`kernel/uar.rs`) whose pages at the UAR
/// offsets are the UARs, so that an `mmap` of it works whether it reaches
/// the interposer ([`mmap`]) or the kernel directly.
pub fn open_cmd_fd(flags: i32) -> i32 {
    let fd = uar::command_file(flags & libc::O_CLOEXEC != 0);
    if fd < 0 {
        return fd;
    }
    if !fds::mark(fd) {
        // SAFETY: closing the fd just opened.
        unsafe { (real::close())(fd) };
        set_errno(libc::EMFILE);
        return -1;
    }
    lock().contexts.insert(
        fd,
        Context {
            async_fd: None,
            devx: false,
            alive: false,
        },
    );
    debug!("open uverbs0 -> fd {fd}");
    fd
}

/// Closes a command fd: destroys what its context still owns.
pub fn close_cmd_fd(fd: i32) {
    let mut dev = lock();
    if let Some(ctx) = dev.contexts.remove(&fd) {
        if let Some((_, w)) = ctx.async_fd {
            close_raw(w);
        }
    }
    dev.channels.retain(|_, (w, owner)| {
        if *owner == fd {
            close_raw(*w);
            false
        } else {
            true
        }
    });
    dev.pds.retain(|_, o| o.ctx != fd);
    dev.mkeys.retain(|_, o| o.ctx != fd);
    dev.cqs.retain(|_, o| o.ctx != fd);
    dev.qps.retain(|_, o| o.ctx != fd);
    dev.srqs.retain(|_, o| o.ctx != fd);
    dev.uars.retain(|_, o| o.ctx != fd);
    dev.ahs.retain(|_, o| *o != fd);
    let mkeys: Vec<u32> = dev.mkeys.keys().copied().collect();
    dev.devx.retain(|_, o| match o {
        state::DevxObj::Mkey(k) => mkeys.contains(&(*k >> 8)),
    });
    let live: Vec<u32> = dev.mkeys.keys().copied().collect();
    dev.mr_handles.retain(|_, idx| live.contains(idx));
    drop(dev);
    debug!("close uverbs fd {fd}");
    // A program that closes its device (often just before it exits) waits
    // for its answers still waiting for room at their requesters (each at
    // most the outbox's patience), with the device lock released: its
    // last message's ACK must not die with the process.
    if let Some(h) = crate::fabric::joined() {
        crate::fabric::outbox::drain(h);
    }
}

/// A `write()` on a command fd: one uverbs command.
///
/// # Safety
/// `buf..buf+len` must be readable; the response pointers inside the
/// command must be writable for the lengths the command gives (the
/// libibverbs contract with the kernel).
pub unsafe fn write(fd: i32, buf: *const u8, len: usize) -> isize {
    // SAFETY: forwarded caller contract.
    match unsafe { write_cmds::dispatch(fd, buf, len) } {
        Ok(()) => len as isize,
        Err(Errno(e)) => {
            set_errno(e);
            -1
        }
    }
}

/// An `ioctl()` on a command fd.
///
/// # Safety
/// For `RDMA_VERBS_IOCTL`, `arg` must point to a valid ioctl header and
/// attribute array, with the pointers inside valid for their lengths.
pub unsafe fn ioctl(fd: i32, req: libc::c_ulong, arg: *mut u8) -> i32 {
    // SAFETY: forwarded caller contract.
    match unsafe { super::ioctl::dispatch(fd, req, arg) } {
        Ok(()) => 0,
        Err(Errno(e)) => {
            set_errno(e);
            -1
        }
    }
}

/// An `mmap()` of a command fd: UAR pages become shared pages of the fd's
/// memory file (doorbells and BlueFlame writes land there and are ignored;
/// the device polls the doorbell records instead). An `mmap` system call
/// made without the interposer maps the same pages (see [`open_cmd_fd`]).
///
/// # Safety
/// As `mmap(2)`: `addr` is a placement hint the caller may rely on only as
/// mmap allows (no MAP_FIXED is passed on).
pub unsafe fn mmap(
    fd: i32,
    addr: *mut libc::c_void,
    len: usize,
    prot: i32,
    offset: i64,
) -> *mut libc::c_void {
    let known = lock()
        .uars
        .values()
        .any(|u| u.ctx == fd && u.mmap_offset == offset as u64);
    if !known {
        debug!("mmap of uverbs fd {fd} at unknown offset {offset:#x}");
        set_errno(libc::EINVAL);
        return libc::MAP_FAILED;
    }
    // SAFETY: a shared mapping of our own memory file, within its size
    // (uar::cover grew it when the UAR was allocated); `addr` is a hint.
    unsafe {
        (real::mmap())(
            addr,
            len,
            prot | libc::PROT_READ,
            libc::MAP_SHARED,
            fd,
            offset,
        )
    }
}
