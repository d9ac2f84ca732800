//! Memory windows: ALLOC_MW and DEALLOC_MW (legacy writes 14 and 16).
//!
//! `ib_uverbs_alloc_mw`: `response, pd_handle, mw_type` (1 or 2); the
//! response is `mw_handle, rkey`. As the kernel's `mlx5_ib_alloc_mw`, a
//! window is a free mkey of the PD (its rkey reaches nothing until a bind,
//! a UMR WQE, maps it). DEALLOC_MW takes `mw_handle`; libibverbs tries the
//! ioctl method first and falls back to this write when it is refused.

use super::cmd::{pdn_of, Cmd};
use super::errno::{refuse, Res};
use crate::config::debug;
use crate::model::lock;
use crate::model::state::MkeyKind;

/// ALLOC_MW: a free window of type 1 or 2 in a PD.
pub fn alloc_mw(cmd: &mut Cmd) -> Res<()> {
    let pd = cmd.core.u32(8);
    let mw_type = cmd.core.u8(12);
    if mw_type != 1 && mw_type != 2 {
        return Err(refuse(
            libc::EINVAL,
            format_args!("ALLOC_MW: type {mw_type}"),
        ));
    }
    let mut dev = lock();
    let pdn = pdn_of(&dev, cmd.fd, pd)?;
    let kind = MkeyKind::Window {
        type2: mw_type == 2,
        bound: None,
    };
    let (h, key) = dev.add_keyed(cmd.fd, pdn, 0, 0, kind);
    debug!("ALLOC_MW type {mw_type} key {key:#x} pd {pdn}");
    cmd.out.u32(0, h);
    cmd.out.u32(4, key);
    Ok(())
}

/// DEALLOC_MW: the window is gone (bound or not).
pub fn dealloc_mw(cmd: &mut Cmd) -> Res<()> {
    let h = cmd.core.u32(0);
    let mut dev = lock();
    let idx = match dev.mr_handles.get(&h) {
        Some(&idx)
            if dev
                .mkeys
                .get(&idx)
                .is_some_and(|m| m.ctx == cmd.fd && matches!(m.kind, MkeyKind::Window { .. })) =>
        {
            idx
        }
        _ => return Err(refuse(libc::EINVAL, format_args!("DEALLOC_MW: handle {h}"))),
    };
    dev.mr_handles.remove(&h);
    dev.mkeys.remove(&idx);
    debug!("DEALLOC_MW handle {h}");
    Ok(())
}
