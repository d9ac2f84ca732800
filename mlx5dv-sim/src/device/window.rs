//! Memory windows on the device: binding and invalidating them (UMR WQEs
//! on a window's mkey) and remote access through a bound window.
//!
//! Libmlx5 44 binds a window (`ibv_bind_mw` for type 1, `ibv_wr_bind_mw`
//! for type 2) and invalidates one (`ibv_wr_local_inv`, and a type 1 bind
//! of length 0) with one UMR WQE (`set_bind_wr`): the window's key in
//! `ctrl.imm`, its new tag, for a bind one KLM naming the region (its
//! lkey, the window's first address in it, the length), the window's
//! access, start address (0 when zero-based) and length; for type 2 the
//! QP it is bound to, `CHECK_FREE` on a bind and `CHECK_QPN` on an
//! invalidate. The device checks what the PRM says a bind needs: the
//! region is an MR of the QP's PD registered with `MW_BIND` (and local
//! write when the window grants remote write or atomic access), the range
//! lies within it; a failure completes with `MW_BIND_ERR`. Access through
//! a window is checked against its range and access and then translated
//! through the region's key, so a region deregistered under a bound
//! window is no longer reachable through it (the kernel's mlx5 driver
//! deregisters it; the access fails with a remote access error). Not
//! modelled: that a type 2 window is reached only through the QP it was
//! bound to.

use super::cq::syndrome as syn;
use super::outcome::{Outcome, Requester};
use crate::config::debug;
use crate::mkey::Layout;
use crate::model::state::{
    Device, MkeyKind, WindowMap, ACCESS_LOCAL_WRITE, ACCESS_MW_BIND, ACCESS_REMOTE_ATOMIC,
    ACCESS_REMOTE_WRITE,
};
use crate::wqe::Umr;

fn bind_err(what: String) -> Outcome {
    Outcome::Error(syn::MW_BIND_ERR, what)
}

/// A UMR WQE on the window `idx` (its PD already checked against the
/// QP's): a bind or an invalidate.
pub fn umr(dev: &mut Device, rq: &Requester, u: &Umr, access: u32) -> Result<(), Outcome> {
    let idx = u.mkey >> 8;
    let Some(MkeyKind::Window { type2, bound }) = dev.mkeys.get(&idx).map(|m| m.kind.clone())
    else {
        return Err(bind_err(format!("UMR on {:#x}, not a window", u.mkey)));
    };
    let current = dev.mkeys[&idx].key;
    if u.free == Some(true) {
        if u.check_qpn() {
            // A local invalidate (type 2 only): of the window's current
            // key, bound to this QP.
            if !type2 || current != u.mkey {
                return Err(bind_err(format!(
                    "local invalidate of {:#x}: the window's key is {current:#x} (type {})",
                    u.mkey,
                    if type2 { 2 } else { 1 }
                )));
            }
            if let Some(b) = bound {
                if b.qpn != rq.qpn {
                    return Err(bind_err(format!(
                        "local invalidate of {:#x} from QP {:#x}: bound to QP {:#x}",
                        u.mkey, rq.qpn, b.qpn
                    )));
                }
            }
        } else if type2 {
            return Err(bind_err(format!(
                "type 1 unbind of type 2 window {:#x}",
                u.mkey
            )));
        }
        let m = dev.mkeys.get_mut(&idx).expect("checked above");
        m.kind = MkeyKind::Window { type2, bound: None };
        if let Some(t) = u.tag {
            m.key = (idx << 8) | u32::from(t);
        }
        debug!("window {:#x}: unbound (now {:#x})", u.mkey, m.key);
        return Ok(());
    }
    if type2 && bound.is_some() && u.check_free() {
        return Err(bind_err(format!(
            "bind of type 2 window {:#x}, which is bound",
            u.mkey
        )));
    }
    let Some(Layout::List(klm)) = &u.layout else {
        return Err(bind_err(format!("bind of {:#x} without a KLM", u.mkey)));
    };
    let ([e], Some(len)) = (klm.as_slice(), u.len) else {
        return Err(bind_err(format!(
            "bind of {:#x}: {} KLMs, length {:?}",
            u.mkey,
            klm.len(),
            u.len
        )));
    };
    let Some(mr) = dev.key(e.lkey) else {
        return Err(bind_err(format!(
            "bind to key {:#x}, which is not valid",
            e.lkey
        )));
    };
    let MkeyKind::Mr { addr, len: mlen } = mr.kind else {
        return Err(bind_err(format!(
            "bind to {:#x}, not a memory region",
            e.lkey
        )));
    };
    if mr.pdn != rq.pdn {
        return Err(bind_err(format!(
            "bind to {:#x} of PD {} from a QP of PD {}",
            e.lkey, mr.pdn, rq.pdn
        )));
    }
    if mr.access & ACCESS_MW_BIND == 0 {
        return Err(bind_err(format!(
            "bind to {:#x}, registered without MW_BIND ({:#x})",
            e.lkey, mr.access
        )));
    }
    if access & (ACCESS_REMOTE_WRITE | ACCESS_REMOTE_ATOMIC) != 0
        && mr.access & ACCESS_LOCAL_WRITE == 0
    {
        return Err(bind_err(format!(
            "remote write window over {:#x}, registered without local write",
            e.lkey
        )));
    }
    let end = e.addr.checked_add(u64::from(e.len));
    if e.addr < addr
        || end.is_none_or(|end| end > addr.saturating_add(mlen))
        || u64::from(e.len) != len
    {
        return Err(bind_err(format!(
            "window {:#x}+{} outside the region {addr:#x}+{mlen} (length {len})",
            e.addr, e.len
        )));
    }
    let map = WindowMap {
        start: u.start_addr.unwrap_or(0),
        key: e.lkey,
        addr: e.addr,
        qpn: if type2 { rq.qpn } else { 0xff_ffff },
    };
    let m = dev.mkeys.get_mut(&idx).expect("checked above");
    m.kind = MkeyKind::Window {
        type2,
        bound: Some(map),
    };
    m.access = access;
    m.len = len;
    if let Some(t) = u.tag {
        m.key = (idx << 8) | u32::from(t);
    }
    debug!(
        "window {:#x} bound: {:#x}+{len} -> key {:#x} at {:#x}, access {access:#x}",
        m.key, map.start, map.key, map.addr
    );
    Ok(())
}

/// Whether a send with invalidate may invalidate the window `rkey` at a
/// responder of PD `pdn`: a bound type 2 window of that PD.
pub fn remotely_invalidable(dev: &Device, pdn: u32, rkey: u32) -> bool {
    dev.key(rkey).is_some_and(|m| {
        m.pdn == pdn
            && matches!(
                m.kind,
                MkeyKind::Window {
                    type2: true,
                    bound: Some(_)
                }
            )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::mem::{resolve, Access};
    use crate::mkey::Sge;
    use crate::model::state::{Mkey, QpKind, ACCESS_REMOTE_READ};

    const PD: u32 = 3;
    const MR: u32 = 0x1111;
    const MW: u32 = 0x2222;
    const BASE: u64 = 0x10_0000;

    fn rq(qpn: u32) -> Requester {
        Requester {
            handle: 1,
            qpn,
            kind: QpKind::Rc,
            pdn: PD,
            dest_qpn: 0,
            qkey: 0,
        }
    }

    /// A device with an MR of `access` over `BASE..BASE+4096` and a free
    /// window of type `type2`.
    fn device(access: u32, type2: bool) -> Device {
        let mut dev = Device::default();
        let mk = |key, access, len, kind| Mkey {
            ctx: 0,
            key,
            pdn: PD,
            access,
            len,
            kind,
        };
        let mr = MkeyKind::Mr {
            addr: BASE,
            len: 4096,
        };
        dev.mkeys.insert(MR >> 8, mk(MR, access, 4096, mr));
        let mw = MkeyKind::Window { type2, bound: None };
        dev.mkeys.insert(MW >> 8, mk(MW, 0, 0, mw));
        dev
    }

    /// What libmlx5's `set_bind_wr` asks: bind `len` bytes from `addr`
    /// with the new tag `tag`.
    fn bind(type2: bool, tag: u8, addr: u64, len: u32) -> Umr {
        Umr {
            mkey: MW,
            flags: 0,
            mkey_mask: 0,
            klm_octowords: 4,
            free: Some(false),
            tag: Some(tag),
            qpn: type2.then_some(0x77),
            access: Some(0),
            start_addr: Some(addr),
            len: Some(u64::from(len)),
            layout: Some(Layout::List(vec![Sge {
                lkey: MR,
                addr,
                len,
            }])),
        }
    }

    fn invalidate(mkey: u32) -> Umr {
        Umr {
            mkey,
            flags: crate::wqe::layout::umr_ctrl::FLAG_CHECK_QPN,
            free: Some(true),
            tag: Some(0),
            layout: None,
            start_addr: None,
            len: None,
            access: None,
            ..bind(true, 0, 0, 0)
        }
    }

    fn rw() -> u32 {
        ACCESS_REMOTE_READ | ACCESS_REMOTE_WRITE
    }

    #[test]
    fn a_bound_window_reaches_its_range_only_with_its_access() {
        let mut dev = device(ACCESS_LOCAL_WRITE | ACCESS_MW_BIND, false);
        let key = MW & !0xff | 0x23;
        // Not bound: nothing.
        assert!(resolve(&dev, MW, BASE, 8, PD, Access::RemoteRead).is_err());
        umr(
            &mut dev,
            &rq(9),
            &bind(false, 0x23, BASE + 1024, 1024),
            ACCESS_REMOTE_READ,
        )
        .unwrap();
        assert_eq!(
            resolve(&dev, key, BASE + 1024, 1024, PD, Access::RemoteRead).unwrap(),
            vec![(BASE + 1024, 1024)]
        );
        // The old key, past the end, before the start, write, as an lkey.
        assert!(resolve(&dev, MW, BASE + 1024, 8, PD, Access::RemoteRead).is_err());
        assert!(resolve(&dev, key, BASE + 2040, 16, PD, Access::RemoteRead).is_err());
        assert!(resolve(&dev, key, BASE + 1020, 8, PD, Access::RemoteRead).is_err());
        assert!(resolve(&dev, key, BASE + 1024, 8, PD, Access::RemoteWrite).is_err());
        assert!(resolve(&dev, key, BASE + 1024, 8, PD, Access::LocalRead).is_err());
        assert!(resolve(&dev, key, BASE + 1024, 8, PD + 1, Access::RemoteRead).is_err());
        // The region deregistered: the window reaches nothing.
        dev.mkeys.remove(&(MR >> 8));
        assert!(resolve(&dev, key, BASE + 1024, 8, PD, Access::RemoteRead).is_err());
    }

    #[test]
    fn a_bind_needs_mw_bind_and_a_range_within_the_region() {
        let bind_err = |access: u32, win: u32, umr_: Umr| {
            let mut dev = device(access, true);
            match umr(&mut dev, &rq(0x77), &umr_, win) {
                Err(Outcome::Error(s, _)) => s,
                other => panic!("{other:?}"),
            }
        };
        let ok = ACCESS_LOCAL_WRITE | ACCESS_MW_BIND;
        let s = bind_err(ACCESS_LOCAL_WRITE, rw(), bind(true, 1, BASE, 64));
        assert_eq!(s, syn::MW_BIND_ERR, "no MW_BIND");
        let s = bind_err(ACCESS_MW_BIND, rw(), bind(true, 1, BASE, 64));
        assert_eq!(s, syn::MW_BIND_ERR, "remote write without local write");
        let s = bind_err(ok, rw(), bind(true, 1, BASE + 4000, 200));
        assert_eq!(s, syn::MW_BIND_ERR, "past the region");
        let s = bind_err(ok, rw(), bind(true, 1, BASE - 8, 64));
        assert_eq!(s, syn::MW_BIND_ERR, "before the region");
        // A read-only window over a region without local write is fine.
        let mut dev = device(ACCESS_MW_BIND, true);
        umr(
            &mut dev,
            &rq(0x77),
            &bind(true, 1, BASE, 64),
            ACCESS_REMOTE_READ,
        )
        .unwrap();
    }

    #[test]
    fn a_type2_window_is_invalidated_by_its_qp_with_its_key() {
        let mut dev = device(ACCESS_LOCAL_WRITE | ACCESS_MW_BIND, true);
        let key = MW & !0xff | 0x05;
        let mut b = bind(true, 0x05, BASE, 4096);
        b.flags = crate::wqe::layout::umr_ctrl::FLAG_CHECK_FREE;
        umr(&mut dev, &rq(0x77), &b, rw()).unwrap();
        // Bound: a second bind with CHECK_FREE is refused.
        assert!(umr(&mut dev, &rq(0x77), &b, rw()).is_err());
        assert!(resolve(&dev, key, BASE, 4096, PD, Access::RemoteWrite).is_ok());
        assert!(remotely_invalidable(&dev, PD, key));
        // Another QP, or a stale key, may not invalidate it.
        assert!(umr(&mut dev, &rq(0x78), &invalidate(key), 0).is_err());
        assert!(umr(&mut dev, &rq(0x77), &invalidate(MW), 0).is_err());
        umr(&mut dev, &rq(0x77), &invalidate(key), 0).unwrap();
        assert!(resolve(&dev, key, BASE, 8, PD, Access::RemoteRead).is_err());
        assert!(!remotely_invalidable(&dev, PD, key));
        // Free again: it binds.
        umr(&mut dev, &rq(0x77), &b, rw()).unwrap();
    }
}
