//! `ioctl(RDMA_VERBS_IOCTL)`: the attribute framing and the mlx5 driver
//! methods (DEVX general commands and objects, UAR objects).
//!
//! Core (non-driver) objects and methods, including the INVOKE_WRITE probe,
//! are answered EPROTONOSUPPORT: libibverbs then uses the legacy write
//! commands. ENOTTY is never the answer to `RDMA_VERBS_IOCTL` (it would
//! disable every ioctl, DEVX included); only to other requests.

use super::bytes::{In, Out};
use super::devx;
use super::errno::{injected, refuse, Errno, Res};
use super::ioctl_call::{Attr, Call};
use crate::config::debug;
use crate::model::lock;
use crate::model::state::Uar;

/// `_IOWR(0x1b, 1, struct ib_uverbs_ioctl_hdr)`.
pub const RDMA_VERBS_IOCTL: libc::c_ulong = 0xc018_1b01;
const HDR: usize = 24;
const ATTR: usize = 16;
const NS: u16 = 1 << 12;

const OBJ_DEVX: u16 = NS;
const OBJ_DEVX_OBJ: u16 = NS + 1;
const OBJ_UAR: u16 = NS + 8;

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
        return Err(Errno(libc::EPROTONOSUPPORT));
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
    super::uar::cover(call.fd, off)?;
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
