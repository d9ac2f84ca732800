//! Executing one parsed WQE on the device's tables: the requester side and,
//! for remote operations, the responder (another QP or DCT of this device).

use super::cq::syndrome as syn;
use super::mem::{self, Access, Fault};
use super::recv;
use super::remote;
use super::serve;
use super::ud_grh::{ud_recv, Route};
use crate::config::debug;
use crate::fabric::{self, wire::Op};
use crate::model::state::{Device, MkeyKind, QpKind};
use crate::model::wire::Source;
use crate::wqe::{Body, Data, Sge, Umr, Wqe};

/// How a WQE ended.
#[derive(Debug)]
pub enum Outcome {
    /// Success; the byte count for the CQE.
    Done(u32),
    /// A requester error with this syndrome (the QP, or the DCI stream,
    /// goes to error).
    Error(u8, String),
    /// Not now: the responder has no receive WQE (receiver-not-ready);
    /// its `min_rnr_timer` code says how long the requester waits before
    /// it retries.
    Stall(u8),
    /// Sent to another host: the answer is awaited (see `remote`).
    Pending,
}

/// The requester QP's view needed to execute.
#[derive(Debug, Clone, Copy)]
pub struct Requester {
    /// Handle.
    pub handle: u32,
    /// QPN.
    pub qpn: u32,
    /// Kind.
    pub kind: QpKind,
    /// PD number.
    pub pdn: u32,
    /// RC destination QPN.
    pub dest_qpn: u32,
    /// The QP's qkey (UD).
    pub qkey: u32,
}

fn local(f: Fault) -> Outcome {
    Outcome::Error(syn::LOCAL_PROT, f.0)
}

/// The bytes of the local data (gather list or inline), checked.
pub fn gather(dev: &Device, rq: &Requester, data: &Data) -> Result<Vec<u8>, Outcome> {
    match data {
        Data::Inline(b) => Ok(b.clone()),
        Data::Sges(sges) => {
            let mut out = Vec::new();
            for s in sges {
                let r = mem::resolve(
                    dev,
                    s.lkey,
                    s.addr,
                    u64::from(s.len),
                    rq.pdn,
                    Access::LocalRead,
                )
                .map_err(local)?;
                out.extend(mem::gather(&r));
            }
            Ok(out)
        }
    }
}

/// Host ranges of a scatter list, checked for local write (a local
/// protection error otherwise).
pub fn scatter_ranges(dev: &Device, pdn: u32, sges: &[Sge]) -> Result<Vec<(u64, u64)>, Outcome> {
    let mut out = Vec::new();
    for s in sges {
        out.extend(
            mem::resolve(
                dev,
                s.lkey,
                s.addr,
                u64::from(s.len),
                pdn,
                Access::LocalWrite,
            )
            .map_err(local)?,
        );
    }
    Ok(out)
}

/// The responder of a remote operation: handle of the peer QP or DCT.
fn responder(dev: &Device, rq: &Requester, wqe: &Wqe) -> Result<u32, Outcome> {
    match rq.kind {
        QpKind::Rc | QpKind::Uc | QpKind::XrcIni => {
            let h = dev.qp_by_qpn(rq.dest_qpn).ok_or_else(|| {
                Outcome::Error(syn::RETRY_EXC, format!("no QP {:#x} answers", rq.dest_qpn))
            })?;
            let p = &dev.qps[&h];
            if !p.state.receives() || p.kind != super::xrc::responder_kind(rq.kind) {
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
            let h = serve::ready_dct(dev, av.dctn).ok_or_else(|| {
                Outcome::Error(syn::RETRY_EXC, format!("no DCT {:#x} answers", av.dctn))
            })?;
            serve::check_dc_key(dev, h, av.dc_key)?;
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
            let (ops, dst, total) = remote::packets(dev, rq, wqe, false)?;
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
                super::xrc::bind(dev, peer, srqn)?;
            }
            let src = Source {
                host: fabric::joined().map_or(0, |h| h.id),
                qpn: rq.qpn,
            };
            let mut got = Vec::new();
            for op in &ops {
                match serve::serve(dev, peer, src, op, wqe.ctrl.solicited) {
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
    const MTU: usize = 4096;
    let len = data.len();
    if len > MTU {
        return Err(Outcome::Error(
            syn::LOCAL_LENGTH,
            format!("UD send of {len} bytes > MTU {MTU}"),
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
    if let Some(to) = remote::datagram_destination(av) {
        remote::send_datagram(av.dctn, qkey, &from, imm, data, to);
        return Ok(len as u32);
    }
    ud_deliver(dev, av.dctn, qkey, &from, imm, data);
    Ok(len as u32)
}

/// Where a datagram comes from: the sending host and QP, its route (GRH
/// or not), and whether it asks for a solicited event.
#[derive(Debug, Clone, Copy)]
pub struct Datagram {
    /// The sending host.
    pub src_host: u16,
    /// The sending QP.
    pub src_qpn: u32,
    /// Its route ([`Route`]).
    pub route: Route,
    /// Solicited event requested.
    pub solicited: bool,
}

/// Delivers a datagram to the UD QP `dst_qpn` of this host if it is ready,
/// its qkey matches and it has a receive posted; otherwise drops it, as
/// datagrams are. The data lands after 40 bytes of GRH area, which holds
/// the GRH when the datagram has one ([`ud_grh`](super::ud_grh)).
pub fn ud_deliver(
    dev: &mut Device,
    dst_qpn: u32,
    qkey: u32,
    from: &Datagram,
    imm: Option<[u8; 4]>,
    data: &[u8],
) {
    let ud = ud_recv(from.src_host, from.route, data.len(), imm.is_some());
    let (src_qpn, solicited) = (from.src_qpn, from.solicited);
    let msg = match imm {
        Some(i) => recv::Msg::SendImm(data, i),
        None => recv::Msg::Send(data),
    };
    let peer = dev
        .qps
        .iter()
        .find(|(_, q)| q.kind == QpKind::Ud && q.qpn == dst_qpn && q.state.receives())
        .map(|(h, q)| (*h, q.attrs.qkey));
    match peer {
        Some((h, peer_qkey)) if peer_qkey == qkey => {
            match recv::deliver(dev, h, src_qpn, msg, solicited, Some(&ud)) {
                Ok(()) => {}
                Err(o) => debug!("UD datagram to {dst_qpn:#x} dropped: {o:?}"),
            }
        }
        _ => debug!("UD datagram to {dst_qpn:#x} (qkey {qkey:#x}) dropped"),
    }
}

fn mkey_access(a: u8) -> u32 {
    use crate::model::state::*;
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
        return super::window::umr(dev, rq, u, access);
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
            crate::mkey::Layout::List(s) => s.len(),
            crate::mkey::Layout::Interleaved { entries, .. } => entries.len() + 1,
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
            crate::mkey::Layout::List(s) => s.iter().map(|e| e.lkey).collect(),
            crate::mkey::Layout::Interleaved { entries, .. } => {
                entries.iter().map(|e| e.key).collect()
            }
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
