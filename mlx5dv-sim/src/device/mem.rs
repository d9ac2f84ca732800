//! Memory the device reads and writes: key checks (PD, access, bounds) on
//! every access, translation through indirect mkeys, and the raw copies.
//!
//! The memory belongs to the program under test and C code may write it at
//! any time, so it is only ever reached through raw pointers (never a Rust
//! reference), after the key tables said the range is registered.

use crate::config::debug;
use crate::mkey;
use crate::model::state::{
    Device, MkeyKind, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
};

/// The raw reads, now in [`crate::sys::raw`] (their old path here stays).
pub use crate::sys::raw::{load_be32_acquire, read_raw};

/// What an access wants to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Local read (gather, memcpy source): always allowed by a valid key.
    LocalRead,
    /// Local write (scatter, read response, memcpy destination).
    LocalWrite,
    /// Remote read (RDMA read target).
    RemoteRead,
    /// Remote write (RDMA write / send target memory through an rkey).
    RemoteWrite,
    /// Remote atomic.
    RemoteAtomic,
}

impl Access {
    fn needs(self) -> u32 {
        match self {
            Access::LocalRead => 0,
            Access::LocalWrite => ACCESS_LOCAL_WRITE,
            Access::RemoteRead => ACCESS_REMOTE_READ,
            Access::RemoteWrite => ACCESS_REMOTE_WRITE,
            Access::RemoteAtomic => ACCESS_REMOTE_ATOMIC,
        }
    }
    /// The access an indirect mkey's entries are reached with.
    fn inner(self) -> Access {
        match self {
            Access::LocalRead | Access::RemoteRead => Access::LocalRead,
            _ => Access::LocalWrite,
        }
    }
}

/// Why an access was refused (the caller picks the syndrome: local
/// protection for its own keys, remote access for the peer's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault(pub String);

/// Nesting limit of indirect mkeys.
const MAX_DEPTH: u32 = 8;

/// The host ranges `(addr, len)` that `len` bytes at `addr` through `key`
/// cover, after checking the key exists, belongs to PD `pdn`, allows
/// `access`, and maps the whole range.
pub fn resolve(
    dev: &Device,
    key: u32,
    addr: u64,
    len: u64,
    pdn: u32,
    access: Access,
) -> Result<Vec<(u64, u64)>, Fault> {
    let mut out = Vec::new();
    resolve_into(dev, key, addr, len, pdn, access, 0, &mut out)?;
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn resolve_into(
    dev: &Device,
    key: u32,
    addr: u64,
    len: u64,
    pdn: u32,
    access: Access,
    depth: u32,
    out: &mut Vec<(u64, u64)>,
) -> Result<(), Fault> {
    if depth > MAX_DEPTH {
        return Err(Fault(format!(
            "key {key:#x}: indirect mkeys nested deeper than {MAX_DEPTH}"
        )));
    }
    let m = dev
        .key(key)
        .ok_or_else(|| Fault(format!("key {key:#x} is not valid")))?;
    if m.pdn != pdn {
        return Err(Fault(format!(
            "key {key:#x} is in PD {}, the access in PD {pdn}",
            m.pdn
        )));
    }
    let need = access.needs();
    if m.access & need != need {
        return Err(Fault(format!(
            "key {key:#x} (access {:#x}) does not allow {access:?}",
            m.access
        )));
    }
    if len == 0 {
        return Ok(());
    }
    match &m.kind {
        MkeyKind::Mr {
            addr: start,
            len: mlen,
        } => {
            let end = addr
                .checked_add(len)
                .ok_or_else(|| Fault(format!("key {key:#x}: {addr:#x}+{len} overflows")))?;
            if addr < *start || end > start.saturating_add(*mlen) {
                return Err(Fault(format!(
                    "key {key:#x}: {addr:#x}+{len} outside the MR {start:#x}+{mlen}"
                )));
            }
            out.push((addr, len));
            Ok(())
        }
        MkeyKind::Window { bound: None, .. } => {
            Err(Fault(format!("memory window {key:#x} is not bound")))
        }
        MkeyKind::Window { bound: Some(b), .. } => {
            // An rkey only: peers reach the region through it.
            if matches!(access, Access::LocalRead | Access::LocalWrite) {
                return Err(Fault(format!("memory window {key:#x} used as an lkey")));
            }
            let offset = addr.checked_sub(b.start);
            match offset {
                Some(o) if o.checked_add(len).is_some_and(|end| end <= m.len) => resolve_into(
                    dev,
                    b.key,
                    b.addr + o,
                    len,
                    pdn,
                    access.inner(),
                    depth + 1,
                    out,
                ),
                _ => Err(Fault(format!(
                    "memory window {key:#x}: {addr:#x}+{len} outside {:#x}+{}",
                    b.start, m.len
                ))),
            }
        }
        MkeyKind::Indirect { layout: None, .. } => {
            Err(Fault(format!("mkey {key:#x} is free (not configured)")))
        }
        MkeyKind::Indirect {
            layout: Some(l), ..
        } => {
            let pieces =
                mkey::translate(l, addr, len).map_err(|e| Fault(format!("mkey {key:#x}: {e}")))?;
            for p in pieces {
                resolve_into(
                    dev,
                    p.key,
                    p.addr,
                    p.len,
                    pdn,
                    access.inner(),
                    depth + 1,
                    out,
                )?;
            }
            Ok(())
        }
    }
}

/// Copies between this process's memory and a buffer of the device with
/// `process_vm_readv`/`process_vm_writev` on itself, so that a registered
/// range the program has since unmapped (a use-after-free of an MR's
/// memory) fails the copy instead of faulting the device: the HCA would
/// have written to the pages the MR still pins, which the program can no
/// longer see either. Returns false when the range was not mapped.
fn vm_copy(write: bool, remote: u64, local: *mut u8, len: usize) -> bool {
    let l = libc::iovec {
        iov_base: local.cast(),
        iov_len: len,
    };
    let r = libc::iovec {
        iov_base: remote as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` is our own buffer of `len` bytes; the kernel checks
    // the remote range and fails with EFAULT instead of faulting.
    let n = unsafe {
        if write {
            libc::process_vm_writev(libc::getpid(), &l, 1, &r, 1, 0)
        } else {
            libc::process_vm_readv(libc::getpid(), &l, 1, &r, 1, 0)
        }
    };
    if n == len as isize {
        return true;
    }
    let e = std::io::Error::last_os_error();
    if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) {
        // No process_vm_* here (seccomp, old kernel): plain copies.
        // SAFETY: `resolve` checked the range lies in a registered region
        // the program keeps mapped while registered (the verbs contract).
        unsafe {
            if write {
                std::ptr::copy(local, remote as *mut u8, len);
            } else {
                std::ptr::copy(remote as *const u8, local, len);
            }
        }
        return true;
    }
    debug!("registered memory {remote:#x}+{len} is not mapped any more: {e}");
    false
}

/// Reads the host ranges into one buffer (unmapped pieces read as zero).
pub fn gather(ranges: &[(u64, u64)]) -> Vec<u8> {
    let total: u64 = ranges.iter().map(|r| r.1).sum();
    let mut v = vec![0u8; total as usize];
    let mut at = 0usize;
    for &(a, l) in ranges {
        if l != 0 {
            vm_copy(false, a, v[at..].as_mut_ptr(), l as usize);
        }
        at += l as usize;
    }
    v
}

/// Writes `data` over the host ranges (up to the shorter of the two).
pub fn scatter(ranges: &[(u64, u64)], data: &[u8]) {
    let mut buf = data.to_vec();
    let mut off = 0usize;
    for &(a, l) in ranges {
        let l = (l as usize).min(buf.len() - off);
        if l != 0 {
            vm_copy(true, a, buf[off..].as_mut_ptr(), l);
        }
        off += l;
        if off == buf.len() {
            break;
        }
    }
}
