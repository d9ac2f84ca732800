//! `ioctl(RDMA_VERBS_IOCTL)`: the attribute framing and the mlx5 driver
//! methods (DEVX general commands and objects, UAR objects).
//!
//! Core (non-driver) objects and methods, including the INVOKE_WRITE probe,
//! are answered EPROTONOSUPPORT: libibverbs then uses the legacy write
//! commands. ENOTTY is never the answer to `RDMA_VERBS_IOCTL` (it would
//! disable every ioctl, DEVX included); only to other requests.

use super::bytes::{In, Out};
use super::state::Uar;
use super::{devx, injected, lock, refuse, Res};
use crate::config::debug;

/// `_IOWR(0x1b, 1, struct ib_uverbs_ioctl_hdr)`.
pub const RDMA_VERBS_IOCTL: libc::c_ulong = 0xc018_1b01;
const HDR: usize = 24;
const ATTR: usize = 16;
const VALID_OUTPUT: u16 = 2;
const NS: u16 = 1 << 12;

const OBJ_DEVX: u16 = NS;
const OBJ_DEVX_OBJ: u16 = NS + 1;
const OBJ_UAR: u16 = NS + 8;

/// One attribute of the call, with where it sits in the caller's array.
#[derive(Debug, Clone, Copy)]
pub struct Attr {
    /// Attribute id.
    pub id: u16,
    /// Length (pointer attributes).
    pub len: u16,
    /// The data word (inline data, pointer, or handle).
    pub data: u64,
    slot: u64,
}

/// A decoded ioctl call.
pub struct Call {
    /// The command fd.
    pub fd: i32,
    attrs: Vec<Attr>,
}

impl Call {
    /// The attribute `id`.
    pub fn attr(&self, id: u16) -> Option<Attr> {
        self.attrs.iter().copied().find(|a| a.id == id)
    }
    /// A PTR_IN attribute's bytes (inline when 8 bytes or fewer).
    pub fn ptr_in(&self, id: u16) -> Res<In> {
        let a = self.attr(id).ok_or_else(|| {
            refuse(
                libc::EINVAL,
                format_args!("ioctl: missing attribute {id:#x}"),
            )
        })?;
        if a.len <= 8 {
            let b = a.data.to_le_bytes();
            return Ok(In(b[..usize::from(a.len)].to_vec()));
        }
        // SAFETY: a PTR_IN attribute longer than 8 bytes points to `len`
        // readable bytes (the uverbs ioctl contract).
        Ok(unsafe { In::copy_from(a.data, usize::from(a.len)) })
    }
    /// Writes a PTR_OUT attribute (cut to its length) and marks it valid.
    pub fn ptr_out(&self, id: u16, out: &Out) -> Res<()> {
        let a = self.attr(id).ok_or_else(|| {
            refuse(
                libc::EINVAL,
                format_args!("ioctl: missing attribute {id:#x}"),
            )
        })?;
        let mut o = out.clone();
        o.0.resize(usize::from(a.len), 0);
        // SAFETY: a PTR_OUT attribute points to `len` writable bytes; the
        // flags word lies in the caller's attribute array.
        unsafe {
            o.copy_to(a.data);
            let flags = (a.slot + 4) as *mut u16;
            flags.write_unaligned(flags.read_unaligned() | VALID_OUTPUT);
        }
        Ok(())
    }
    /// Stores a new object handle into an IDR_NEW attribute's data word.
    pub fn idr_new(&self, id: u16, handle: u32) -> Res<()> {
        let a = self.attr(id).ok_or_else(|| {
            refuse(
                libc::EINVAL,
                format_args!("ioctl: missing attribute {id:#x}"),
            )
        })?;
        // SAFETY: the data word lies in the caller's attribute array.
        unsafe { ((a.slot + 8) as *mut u64).write_unaligned(u64::from(handle)) };
        Ok(())
    }
}

/// Decodes and runs one ioctl.
///
/// # Safety
/// See [`super::ioctl`].
pub unsafe fn dispatch(fd: i32, req: libc::c_ulong, arg: *mut u8) -> Res<()> {
    if req != RDMA_VERBS_IOCTL {
        // Other requests (isatty's TCGETS...): ENOTTY, as a char device
        // without them answers. Never for RDMA_VERBS_IOCTL itself.
        return Err(refuse(
            libc::ENOTTY,
            format_args!("ioctl request {req:#x} on a uverbs fd"),
        ));
    }
    // SAFETY: the header is readable (caller contract).
    let hdr = unsafe { In::copy_from(arg as u64, HDR) };
    let (length, object, method, num) = (hdr.u16(0), hdr.u16(2), hdr.u16(4), hdr.u16(6));
    if usize::from(length) != HDR + ATTR * usize::from(num) {
        return Err(refuse(
            libc::EINVAL,
            format_args!("ioctl: length {length} for {num} attributes"),
        ));
    }
    // SAFETY: the attribute array follows the header (caller contract).
    let raw = unsafe { In::copy_from(arg as u64 + HDR as u64, ATTR * usize::from(num)) };
    let attrs = (0..usize::from(num))
        .map(|i| Attr {
            id: raw.u16(i * ATTR),
            len: raw.u16(i * ATTR + 2),
            data: raw.u64(i * ATTR + 8),
            slot: arg as u64 + (HDR + i * ATTR) as u64,
        })
        .collect();
    let call = Call { fd, attrs };
    if object < NS && method < NS {
        debug!("ioctl core object {object} method {method}: EPROTONOSUPPORT (write fallback)");
        return Err(super::Errno(libc::EPROTONOSUPPORT));
    }
    let known: &[u16] = match (object, method) {
        (OBJ_DEVX, m) if m == NS => &[NS, NS + 1],
        (OBJ_DEVX_OBJ, m) if m == NS || m == NS + 2 => &[NS, NS + 1, NS + 2],
        (OBJ_DEVX_OBJ, m) if m == NS + 1 => &[NS],
        (OBJ_UAR, m) if m == NS => &[NS, NS + 1, NS + 2, NS + 3, NS + 4],
        (OBJ_UAR, m) if m == NS + 1 => &[NS],
        _ => &[],
    };
    if let Some(a) = call.attrs.iter().find(|a| !known.contains(&a.id)) {
        if !known.is_empty() {
            return Err(refuse(
                libc::EINVAL,
                format_args!(
                    "ioctl object {object:#x} method {method:#x}: unknown attribute {:#x}",
                    a.id
                ),
            ));
        }
    }
    match (object, method) {
        (OBJ_DEVX, m) if m == NS => {
            injected("DEVX_GENERAL_CMD")?;
            devx::general(&call)
        }
        (OBJ_DEVX_OBJ, m) if m == NS => devx::obj_create(&call),
        (OBJ_DEVX_OBJ, m) if m == NS + 1 => devx::obj_destroy(&call),
        (OBJ_DEVX_OBJ, m) if m == NS + 2 => devx::obj_modify(&call),
        (OBJ_UAR, m) if m == NS => uar_alloc(&call),
        (OBJ_UAR, m) if m == NS + 1 => uar_destroy(&call),
        _ => Err(refuse(
            libc::EOPNOTSUPP,
            format_args!("ioctl object {object:#x} method {method:#x} is not modelled"),
        )),
    }
}

fn uar_alloc(call: &Call) -> Res<()> {
    injected("UAR_OBJ_ALLOC")?;
    let ty = call.attr(NS + 1).map_or(0, |a| a.data);
    if ty > 1 {
        return Err(refuse(
            libc::EINVAL,
            format_args!("UAR_OBJ_ALLOC: type {ty}"),
        ));
    }
    let mut dev = lock();
    let h = dev.handle();
    let off = dev.uar_offset();
    let page_id = (off >> 12) as u32;
    dev.uars.insert(
        h,
        Uar {
            ctx: call.fd,
            mmap_offset: off,
        },
    );
    drop(dev);
    call.idr_new(NS, h)?;
    let mut o = Out::new(8);
    o.u64(0, off);
    call.ptr_out(NS + 2, &o)?;
    let mut l = Out::new(4);
    l.u32(0, 4096);
    call.ptr_out(NS + 3, &l)?;
    let mut p = Out::new(4);
    p.u32(0, page_id);
    call.ptr_out(NS + 4, &p)?;
    debug!("UAR_OBJ_ALLOC type {ty} -> handle {h} offset {off:#x}");
    Ok(())
}

fn uar_destroy(call: &Call) -> Res<()> {
    let h = call.attr(NS).map_or(0, |a| a.data) as u32;
    let mut dev = lock();
    match dev.uars.get(&h) {
        Some(u) if u.ctx == call.fd => {
            dev.uars.remove(&h);
            Ok(())
        }
        _ => Err(refuse(
            libc::EINVAL,
            format_args!("UAR_OBJ_DESTROY: handle {h}"),
        )),
    }
}
