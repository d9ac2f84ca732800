//! Executing one parsed WQE posted on a requester: on this host, where
//! its responder (another QP or DCT of this device) serves it through the
//! same [`serve`] as a packet from
//! another host, or sent to the host its destination names
//! ([`super::remote`]); and the WQEs that stay on the host (DMA memcpy,
//! UMR).

use super::gather::local;
use super::packets::packets;
use super::remote;
use crate::config::debug;
use crate::device::address::datagram_destination;
use crate::device::cq::syndrome as syn;
use crate::device::mem::{self, Access};
use crate::device::outcome::{Outcome, Requester};
use crate::device::responder::{
    bind_xrc_srq, check_dc_key, ready_dct, serve, ud_deliver, Datagram,
};
use crate::device::ud_grh::Route;
use crate::device::window;
use crate::fabric::{self, wire::Op};
use crate::mkey::Layout;
use crate::model::state::{
    Device, MkeyKind, QpKind, ACCESS_LOCAL_WRITE, ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ,
    ACCESS_REMOTE_WRITE,
};
use crate::model::wire::Source;
use crate::wqe::{Body, Umr, Wqe};

/// The kind of QP that answers requests from a QP of kind `requester`.
pub fn responder_kind(requester: QpKind) -> QpKind {
    match requester {
        QpKind::XrcIni => QpKind::XrcTgt,
        k => k,
    }
}

/// The responder of a remote operation: handle of the peer QP or DCT.
fn responder(dev: &Device, rq: &Requester, wqe: &Wqe) -> Result<u32, Outcome> {
    match rq.kind {
        QpKind::Rc | QpKind::Uc | QpKind::XrcIni => {
            let h = dev.qp_by_qpn(rq.dest_qpn).ok_or_else(|| {
                Outcome::Error(syn::RETRY_EXC, format!("no QP {:#x} answers", rq.dest_qpn))
            })?;
            let p = &dev.qps[&h];
            if !p.state.receives() || p.kind != responder_kind(rq.kind) {
                return Err(Outcome::Error(
                    syn::RETRY_EXC,
                    format!(
                        "QP {:#x} ({:?}, {:?}) does not answer",
                        p.qpn, p.kind, p.state
                    ),
                ));
            }
            Ok(h)
        }
        QpKind::Dci => {
            let av = wqe.body.av().ok_or_else(|| {
                Outcome::Error(syn::LOCAL_QP_OP, "DCI WQE without an address vector".into())
            })?;
            let h = ready_dct(dev, av.dctn).ok_or_else(|| {
                Outcome::Error(syn::RETRY_EXC, format!("no DCT {:#x} answers", av.dctn))
            })?;
            check_dc_key(dev, h, av.dc_key)?;
            Ok(h)
        }
        QpKind::Ud | QpKind::Dct | QpKind::XrcTgt => Err(Outcome::Error(
            syn::LOCAL_QP_OP,
            format!("{:?} cannot send", rq.kind),
        )),
    }
}

/// Executes `wqe` (at index `ci`) posted on the requester `rq`: on this
/// host, or sent to the host its destination names.
pub fn execute(dev: &mut Device, rq: &Requester, ci: u16, wqe: &Wqe) -> Outcome {
    if let Some(to) = remote::destination(dev, rq, wqe) {
        return remote::start(dev, rq, ci, wqe, to);
    }
    match run(dev, rq, wqe) {
        Ok(n) => Outcome::Done(n),
        Err(o) => o,
    }
}

fn run(dev: &mut Device, rq: &Requester, wqe: &Wqe) -> Result<u32, Outcome> {
    match &wqe.body {
        Body::Nop => Ok(0),
        b if b.reaches_a_peer() => {
            let (ops, dst, total) = packets(dev, rq, wqe, false)?;
            if rq.kind == QpKind::Ud {
                let Some(Op::Send { imm, data, .. }) = ops.first() else {
                    return Err(Outcome::Error(
                        syn::LOCAL_QP_OP,
                        format!("{} on a UD QP", wqe.body.name()),
                    ));
                };
                return ud_send(dev, rq, wqe, *imm, data);
            }
            // UC is unanswered: whatever becomes of the message at the
            // responder (nobody there, no receive posted, a bad rkey, an
            // error there), the sender is not told, and its work request
            // completes; the rest of a dropped message is lost with it.
            let uc = rq.kind == QpKind::Uc;
            let peer = match responder(dev, rq, wqe) {
                Err(_) if uc => return Ok(total),
                p => p?,
            };
            if let Some(srqn) = wqe.xrc_srqn {
                bind_xrc_srq(dev, peer, srqn)?;
            }
            let src = Source {
                host: fabric::joined().map_or(0, |h| h.id),
                qpn: rq.qpn,
            };
            let mut got = Vec::new();
            for op in &ops {
                match serve(dev, peer, src, op, wqe.ctrl.solicited) {
                    Err(_) if uc => return Ok(total),
                    r => got.extend(r?),
                }
            }
            if let Some(dst) = dst {
                mem::scatter(&dst, &got);
            }
            Ok(total)
        }
        Body::Mmo(m) => {
            let cfg = crate::config::get();
            if !cfg.dma_mmo {
                return Err(Outcome::Error(
                    syn::LOCAL_QP_OP,
                    "DMA MMO is not enabled".into(),
                ));
            }
            let max = if cfg.log_dma_mmo_max_size == 0 {
                1u64 << 31
            } else {
                1u64 << cfg.log_dma_mmo_max_size
            };
            if u64::from(m.src.len) > max {
                return Err(Outcome::Error(
                    syn::LOCAL_LENGTH,
                    format!("memcpy of {} > {max}", m.src.len),
                ));
            }
            mem::resolve(
                dev,
                m.opaque_lkey,
                m.opaque_addr,
                64,
                rq.pdn,
                Access::LocalWrite,
            )
            .map_err(local)?;
            let src = mem::resolve(
                dev,
                m.src.lkey,
                m.src.addr,
                u64::from(m.src.len),
                rq.pdn,
                Access::LocalRead,
            )
            .map_err(local)?;
            let dst = mem::resolve(
                dev,
                m.dst.lkey,
                m.dst.addr,
                u64::from(m.dst.len),
                rq.pdn,
                Access::LocalWrite,
            )
            .map_err(local)?;
            let data = mem::gather(&src);
            mem::scatter(&dst, &data);
            Ok(m.src.len)
        }
        Body::Umr(u) => umr(dev, rq, u).map(|()| 0),
        // Every other operation reaches a peer (the first arm).
        b => Err(Outcome::Error(
            syn::LOCAL_QP_OP,
            format!("{} has no local meaning", b.name()),
        )),
    }
}

/// A UD send: delivered to the UD QP the AV names if it is ready, its qkey
/// matches and it has a receive posted; otherwise dropped, as datagrams
/// are. The sender completes either way (only a message longer than the
/// path MTU fails it).
fn ud_send(
    dev: &mut Device,
    rq: &Requester,
    wqe: &Wqe,
    imm: Option<[u8; 4]>,
    data: &[u8],
) -> Result<u32, Outcome> {
    let mtu = crate::fabric::mtu();
    let len = data.len();
    if len > mtu {
        return Err(Outcome::Error(
            syn::LOCAL_LENGTH,
            format!("UD send of {len} bytes > MTU {mtu}"),
        ));
    }
    let av = wqe
        .body
        .av()
        .ok_or_else(|| Outcome::Error(syn::LOCAL_QP_OP, "UD send without an AV".into()))?;
    // A qkey with its high bit set means the sending QP's own qkey.
    let qkey = if av.qkey() & 0x8000_0000 != 0 {
        rq.qkey
    } else {
        av.qkey()
    };
    let me = fabric::host();
    let route = Route::of(av, crate::config::get().roce);
    let from = Datagram {
        src_host: me.map_or(1, |h| h.id),
        src_qpn: rq.qpn,
        route,
        solicited: wqe.ctrl.solicited,
    };
    if let Some(to) = datagram_destination(av) {
        remote::send_datagram(av.dctn, qkey, &from, imm, data, to);
        return Ok(len as u32);
    }
    ud_deliver(dev, av.dctn, qkey, &from, imm, data);
    Ok(len as u32)
}

fn mkey_access(a: u8) -> u32 {
    let mut f = 0;
    if a & (1 << 3) != 0 {
        f |= ACCESS_LOCAL_WRITE;
    }
    if a & (1 << 4) != 0 {
        f |= ACCESS_REMOTE_READ;
    }
    if a & (1 << 5) != 0 {
        f |= ACCESS_REMOTE_WRITE;
    }
    if a & (1 << 6) != 0 {
        f |= ACCESS_REMOTE_ATOMIC;
    }
    f
}

fn umr(dev: &mut Device, rq: &Requester, u: &Umr) -> Result<(), Outcome> {
    let idx = u.mkey >> 8;
    let Some(m) = dev.mkeys.get(&idx) else {
        return Err(Outcome::Error(
            syn::LOCAL_PROT,
            format!("UMR on unknown mkey {:#x}", u.mkey),
        ));
    };
    if m.key & 0xff != u.mkey & 0xff && u.tag.is_none() {
        return Err(Outcome::Error(
            syn::LOCAL_PROT,
            format!("UMR on mkey {:#x}: tag is {:#x}", u.mkey, m.key & 0xff),
        ));
    }
    if m.pdn != rq.pdn {
        return Err(Outcome::Error(
            syn::LOCAL_PROT,
            format!(
                "UMR on mkey {:#x} of PD {} from a QP of PD {}",
                u.mkey, m.pdn, rq.pdn
            ),
        ));
    }
    if let MkeyKind::Window { .. } = m.kind {
        let access = u.access.map_or(0, mkey_access);
        return window::umr(dev, rq, u, access);
    }
    let MkeyKind::Indirect {
        layout,
        max_entries,
        ..
    } = &m.kind
    else {
        return Err(Outcome::Error(
            syn::LOCAL_PROT,
            format!("UMR on {:#x}, a memory region", u.mkey),
        ));
    };
    if u.check_free() && layout.is_some() {
        return Err(Outcome::Error(
            syn::LOCAL_PROT,
            format!("UMR CHECK_FREE on mkey {:#x}, which is in use", u.mkey),
        ));
    }
    let max_entries = *max_entries;
    if let Some(l) = &u.layout {
        let n = match l {
            Layout::List(s) => s.len(),
            Layout::Interleaved { entries, .. } => entries.len() + 1,
        };
        if n as u32 > max_entries {
            return Err(Outcome::Error(
                syn::LOCAL_LENGTH,
                format!("UMR of {n} entries on an mkey of {max_entries}"),
            ));
        }
        // Every entry's key must be valid now (the device checks KLMs at
        // access time too; this catches dangling keys early).
        let keys: Vec<u32> = match l {
            Layout::List(s) => s.iter().map(|e| e.lkey).collect(),
            Layout::Interleaved { entries, .. } => entries.iter().map(|e| e.key).collect(),
        };
        for k in keys {
            if dev.key(k).is_none_or(|e| e.pdn != rq.pdn) {
                return Err(Outcome::Error(
                    syn::LOCAL_PROT,
                    format!("UMR entry key {k:#x} is not valid in PD {}", rq.pdn),
                ));
            }
        }
    }
    let m = dev.mkeys.get_mut(&idx).expect("checked above");
    let MkeyKind::Indirect { layout, .. } = &mut m.kind else {
        unreachable!()
    };
    if let Some(t) = u.tag {
        m.key = (idx << 8) | u32::from(t);
    }
    if let Some(a) = u.access {
        m.access = mkey_access(a);
    }
    match u.free {
        Some(true) => *layout = None,
        Some(false) | None => {
            if let Some(l) = &u.layout {
                m.len = l.len();
                *layout = Some(l.clone());
            }
        }
    }
    if let Some(len) = u.len {
        m.len = len;
    }
    debug!(
        "UMR mkey {:#x}: free {:?} access {:#x} len {}",
        m.key, u.free, m.access, m.len
    );
    Ok(())
}
