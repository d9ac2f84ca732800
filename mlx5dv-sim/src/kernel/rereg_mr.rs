//! REREG_MR, and the access check REG_MR and REREG_MR share.
//!
//! `ib_uverbs_rereg_mr` (legacy write 11): `response, mr_handle, flags,
//! start, length, hca_va, pd_handle, access_flags`; the response is `lkey,
//! rkey`. The kernel's checks (`ib_uverbs_rereg_mr`, `ib_check_mr_access`)
//! come first, in its order; the MR keeps its key (mlx5 may hand out a new
//! one; libibverbs reads whichever the response gives).

use super::cmd::{pdn_of, Cmd};
use super::errno::{refuse, Res};
use crate::config::debug;
use crate::model::lock;
use crate::model::state::MkeyKind;

/// `IB_MR_REREG_TRANS`: a new address and length.
const REREG_TRANS: u32 = 1;
/// `IB_MR_REREG_PD`: a new PD.
const REREG_PD: u32 = 2;
/// `IB_MR_REREG_ACCESS`: new access flags.
const REREG_ACCESS: u32 = 4;

/// The access flags of REG_MR and REREG_MR: the defined `IBV_ACCESS_*`
/// bits (0x3ff) and the optional range (0x3ff00000, which the kernel may
/// ignore); anything else is EINVAL, and so is remote write or atomic
/// without local write, as in the kernel's `ib_check_mr_access`.
/// Zero-based and on-demand MRs are not modelled (EOPNOTSUPP).
pub fn check_mr_access(name: &str, access: u32) -> Res<()> {
    if access & !(0x3ff | 0x3ff0_0000) != 0 {
        return Err(refuse(
            libc::EINVAL,
            format_args!("{name}: unknown access bits {access:#x}"),
        ));
    }
    if access & (0x20 | 0x40) != 0 {
        return Err(refuse(
            libc::EOPNOTSUPP,
            format_args!("{name}: zero-based and on-demand MRs are not modelled ({access:#x})"),
        ));
    }
    if access & (0x2 | 0x8) != 0 && access & 0x1 == 0 {
        return Err(refuse(
            libc::EINVAL,
            format_args!("{name}: remote write without local write"),
        ));
    }
    Ok(())
}

/// The translation of REG_MR and REREG_MR: an IOVA other than the address
/// is not modelled; an empty or wrapping range is EINVAL.
pub fn check_mr_range(name: &str, start: u64, length: u64, iova: u64) -> Res<()> {
    if iova != start {
        return Err(refuse(
            libc::EOPNOTSUPP,
            format_args!("{name}: iova {iova:#x} != address {start:#x} is not modelled"),
        ));
    }
    if length == 0 || start.checked_add(length).is_none() {
        return Err(refuse(
            libc::EINVAL,
            format_args!("{name}: {start:#x}+{length}"),
        ));
    }
    Ok(())
}

/// REREG_MR: a new translation, PD or access flags for a registered MR.
pub fn rereg_mr(cmd: &mut Cmd) -> Res<()> {
    let c = &cmd.core;
    let (h, flags) = (c.u32(8), c.u32(12));
    let (start, length, iova) = (c.u64(16), c.u64(24), c.u64(32));
    let (pd, access) = (c.u32(40), c.u32(44));
    if flags == 0 {
        return Err(refuse(libc::EINVAL, format_args!("REREG_MR: no flags")));
    }
    if flags & !(REREG_TRANS | REREG_PD | REREG_ACCESS) != 0 {
        return Err(refuse(
            libc::EOPNOTSUPP,
            format_args!("REREG_MR: flags {flags:#x}"),
        ));
    }
    if flags & REREG_TRANS != 0 {
        check_mr_range("REREG_MR", start, length, iova)?;
    }
    if flags & REREG_ACCESS != 0 {
        check_mr_access("REREG_MR", access)?;
    }
    let mut dev = lock();
    let idx = match dev.mr_handles.get(&h) {
        Some(&idx) if dev.mkeys.get(&idx).is_some_and(|m| m.ctx == cmd.fd) => idx,
        _ => return Err(refuse(libc::EINVAL, format_args!("REREG_MR: handle {h}"))),
    };
    let pdn = if flags & REREG_PD != 0 {
        Some(pdn_of(&dev, cmd.fd, pd)?)
    } else {
        None
    };
    let Some(mkey) = dev.mkeys.get_mut(&idx) else {
        return Err(refuse(libc::EINVAL, format_args!("REREG_MR: handle {h}")));
    };
    if let Some(pdn) = pdn {
        mkey.pdn = pdn;
    }
    if flags & REREG_ACCESS != 0 {
        mkey.access = access;
    }
    if flags & REREG_TRANS != 0 {
        mkey.len = length;
        mkey.kind = MkeyKind::Mr {
            addr: start,
            len: length,
        };
    }
    let key = mkey.key;
    debug!(
        "REREG_MR key {key:#x} flags {flags:#x}: pd {} access {:#x} {:?}",
        mkey.pdn, mkey.access, mkey.kind
    );
    cmd.out.u32(0, key);
    cmd.out.u32(4, key);
    Ok(())
}
