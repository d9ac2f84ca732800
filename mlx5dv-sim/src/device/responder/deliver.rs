//! Step 4 of the responder, for a message that takes a receive WQE (a
//! send, a write with immediate): consuming RQ and SRQ WQEs, scattering
//! sends into them, and the responder completions.

use crate::config::debug;
use crate::device::cq::{self, opcode, syndrome as syn, Cqe};
use crate::device::mem::{self, Access};
use crate::device::outcome::Outcome;
use crate::device::ud_grh::{UdRecv, GRH_BYTES};
use crate::device::window::remotely_invalidable;
use crate::model::events::{async_event, enter_err, SRQ_LIMIT_REACHED};
use crate::model::state::{Device, MkeyKind, QpKind};
use crate::sys::raw::{load_be32_acquire, read_raw};

/// `MLX5_INVALID_LKEY`: ends a receive WQE's scatter list early.
const INVALID_LKEY: u32 = 0x100;

/// What arrives at the responder.
#[derive(Debug, Clone, Copy)]
pub enum Msg<'a> {
    /// A send.
    Send(&'a [u8]),
    /// A send with immediate (raw wire bytes).
    SendImm(&'a [u8], [u8; 4]),
    /// A send with invalidate (the rkey, raw wire bytes).
    SendInv(&'a [u8], [u8; 4]),
    /// The receive side of an RDMA write with immediate.
    WriteImm {
        /// Bytes written.
        len: u32,
        /// Immediate (raw wire bytes).
        imm: [u8; 4],
    },
}

/// A receive WQE found for the message.
struct Slot {
    index: u16,
    sges: Vec<(u32, u64, u32)>,
    srq: Option<u32>,
}

fn read_sges(addr: u64, max: usize) -> Vec<(u32, u64, u32)> {
    // SAFETY: the receive WQE lies inside the RQ/SRQ buffer given at
    // creation (index < wqe_cnt, stride 1 << wqe_shift ≥ 16 * max).
    let raw = unsafe { read_raw(addr, 16 * max) };
    let mut out = Vec::new();
    for s in raw.chunks_exact(16) {
        let len = u32::from_be_bytes(s[0..4].try_into().expect("4"));
        let lkey = u32::from_be_bytes(s[4..8].try_into().expect("4"));
        let a = u64::from_be_bytes(s[8..16].try_into().expect("8"));
        if lkey == INVALID_LKEY {
            break;
        }
        out.push((lkey, a, len));
    }
    out
}

fn find_slot(dev: &Device, peer: u32) -> Option<Slot> {
    let p = &dev.qps[&peer];
    // An XRC target receives through the SRQ its packet names.
    if let Some(sh) = p.srq.or(p.xrc_srq) {
        let s = &dev.srqs[&sh];
        // SAFETY: the SRQ doorbell record from CREATE_SRQ (the WQE counter).
        let posted = unsafe { load_be32_acquire(s.db) } as u16;
        if posted == s.consumed {
            return None;
        }
        let addr = s.buf + (u64::from(s.head & (s.wqe_cnt as u16 - 1)) << s.wqe_shift);
        return Some(Slot {
            index: s.head,
            sges: read_sges(addr + 16, s.max_sge as usize),
            srq: Some(sh),
        });
    }
    let rq = p.rq?;
    // SAFETY: word 0 of the QP doorbell record is the RQ producer counter.
    let posted = unsafe { load_be32_acquire(p.db) } as u16;
    if posted == rq.ci {
        return None;
    }
    let idx = rq.ci & (rq.wqe_cnt as u16 - 1);
    let mut addr = rq.buf + (u64::from(idx) << rq.wqe_shift);
    let mut stride = 1usize << rq.wqe_shift;
    if p.signature {
        addr += 16;
        stride -= 16;
    }
    Some(Slot {
        index: rq.ci,
        sges: read_sges(addr, (stride / 16).min(p.max_recv_sge.max(1) as usize)),
        srq: None,
    })
}

fn consume(dev: &mut Device, peer: u32, slot: &Slot) {
    if let Some(sh) = slot.srq {
        let s = dev.srqs.get_mut(&sh).expect("SRQ of a live QP");
        let addr = s.buf + (u64::from(s.head & (s.wqe_cnt as u16 - 1)) << s.wqe_shift);
        // SAFETY: the consumed SRQ WQE's next segment (bytes 2..4: next_wqe_index).
        let next = unsafe { read_raw(addr, 4) };
        s.head = u16::from_be_bytes([next[2], next[3]]);
        s.consumed = s.consumed.wrapping_add(1);
        if s.limit > 0 {
            // SAFETY: the SRQ doorbell record (the WQE counter).
            let posted = unsafe { load_be32_acquire(s.db) } as u16;
            let left = u32::from(posted.wrapping_sub(s.consumed));
            if left < s.limit {
                s.limit = 0;
                let (ctx, handle) = (s.ctx, s.user_handle);
                let written = match dev.contexts.get(&ctx).and_then(|c| c.async_fd) {
                    Some((_, w)) => async_event(w, handle, SRQ_LIMIT_REACHED),
                    None => false,
                };
                if written {
                    if let Some(s) = dev.srqs.get_mut(&sh) {
                        s.events += 1;
                    }
                }
            }
        }
    } else if let Some(rq) = dev.qps.get_mut(&peer).and_then(|q| q.rq.as_mut()) {
        rq.ci = rq.ci.wrapping_add(1);
    }
}

/// Writes the responder completion `c` of a receive taken from `slot`: to
/// the QP's receive CQ, or for an XRC SRQ to the SRQ's CQ.
fn complete(dev: &mut Device, peer: u32, slot: &Slot, c: Cqe) {
    let xrc_cq = slot
        .srq
        .and_then(|s| dev.srqs.get(&s))
        .and_then(|s| s.xrc)
        .map(|x| x.cq);
    let Some(h) = xrc_cq.or(dev.qps[&peer].recv_cq) else {
        return;
    };
    if let Some(cq) = dev.cqs.get_mut(&h) {
        if cq::push(cq, &c).is_err() {
            debug!("responder completion lost: CQ {:#x} overrun", cq.cqn);
        }
    }
}

/// Whether a send with invalidate may invalidate `rkey` at a responder of
/// PD `pdn`: an indirect mkey of that PD created with remote invalidation.
fn check_invalidate(dev: &Device, pdn: u32, rkey: u32) -> Result<(), Outcome> {
    match dev.key(rkey) {
        Some(m)
            if m.pdn == pdn
                && matches!(
                    m.kind,
                    MkeyKind::Indirect {
                        remote_invalidate: true,
                        ..
                    }
                ) =>
        {
            Ok(())
        }
        _ if remotely_invalidable(dev, pdn, rkey) => Ok(()),
        _ => Err(Outcome::Error(
            syn::REMOTE_INVAL_REQ,
            format!("send with invalidate of {rkey:#x}, which the responder cannot invalidate"),
        )),
    }
}

/// Invalidates the mkey `rkey` (it becomes free, mapping nothing).
fn invalidate(dev: &mut Device, rkey: u32) {
    if let Some(m) = dev.mkeys.get_mut(&(rkey >> 8)) {
        match &mut m.kind {
            MkeyKind::Indirect { layout, .. } => *layout = None,
            MkeyKind::Window { bound, .. } => *bound = None,
            MkeyKind::Mr { .. } => return,
        }
        debug!("mkey {rkey:#x} invalidated by a send with invalidate");
    }
}

/// Whether the responder QP/DCT `peer` has a receive posted: receiver not
/// ready (with its RNR timer) if not.
pub fn ready(dev: &Device, peer: u32) -> Result<(), Outcome> {
    match find_slot(dev, peer) {
        Some(_) => Ok(()),
        None => Err(not_ready(dev, peer)),
    }
}

/// The room (bytes) of the receive a message to `peer` would take now;
/// receiver not ready if none is posted.
pub fn room(dev: &Device, peer: u32) -> Result<u64, Outcome> {
    match find_slot(dev, peer) {
        Some(slot) => Ok(slot.sges.iter().map(|s| u64::from(s.2)).sum()),
        None => Err(not_ready(dev, peer)),
    }
}

/// Receiver not ready: the requester retries after `peer`'s RNR timer.
fn not_ready(dev: &Device, peer: u32) -> Outcome {
    Outcome::Stall(dev.qps[&peer].attrs.min_rnr_timer)
}

/// Delivers `msg` from QP `src_qpn` to the responder QP/DCT `peer`; a UD
/// receive (`ud`) starts with the 40-byte GRH area, written when the
/// datagram had a GRH, and reports it and the sender's LID.
pub fn deliver(
    dev: &mut Device,
    peer: u32,
    src_qpn: u32,
    msg: Msg<'_>,
    solicited: bool,
    ud: Option<&UdRecv>,
) -> Result<(), Outcome> {
    let grh = if ud.is_some() { GRH_BYTES as u64 } else { 0 };
    let Some(slot) = find_slot(dev, peer) else {
        return Err(not_ready(dev, peer));
    };
    let p = &dev.qps[&peer];
    let (pdn, qpn, mut uidx) = (p.pdn, p.qpn, p.uidx);
    // libmlx5 finds an XRC SRQ's completions by the SRQ's user index.
    if let Some(s) = slot.srq.and_then(|s| dev.srqs.get(&s)) {
        if s.xrc.is_some() {
            uidx = s.uidx;
        }
    }
    let mut c = Cqe {
        sop_qpn: qpn,
        wqe_counter: slot.index,
        uidx,
        rqpn: src_qpn,
        solicited,
        grh: ud.is_some_and(|u| u.grh.is_some()),
        slid: ud.map(|u| u.slid),
        ..Cqe::default()
    };
    let data: &[u8] = match msg {
        Msg::Send(d) => {
            c.opcode = opcode::RESP_SEND;
            d
        }
        Msg::SendImm(d, imm) => {
            c.opcode = opcode::RESP_SEND_IMM;
            c.imm = imm;
            d
        }
        Msg::SendInv(d, rkey) => {
            c.opcode = opcode::RESP_SEND_INV;
            c.imm = rkey;
            d
        }
        Msg::WriteImm { len, imm } => {
            c.opcode = opcode::RESP_WR_IMM;
            c.imm = imm;
            c.byte_cnt = len;
            consume(dev, peer, &slot);
            complete(dev, peer, &slot, c);
            return Ok(());
        }
    };
    c.byte_cnt = (data.len() as u64 + grh) as u32;
    if let Msg::SendInv(_, rkey) = msg {
        check_invalidate(dev, pdn, u32::from_be_bytes(rkey))?;
    }
    let room: u64 = slot.sges.iter().map(|s| u64::from(s.2)).sum();
    let mut fail = |dev: &mut Device, s: u8, why: String, req: u8| {
        c.opcode = opcode::RESP_ERR;
        c.syndrome = s;
        consume(dev, peer, &slot);
        complete(dev, peer, &slot, c);
        // A connected reliable responder goes to ERR (class C); a DCT
        // serves on, and UC and UD, which have no NAK, drop the message
        // and go on, as rxe does: the receive completes in error.
        let stays = [QpKind::Dct, QpKind::Uc, QpKind::Ud];
        if dev.qps.get(&peer).is_some_and(|q| !stays.contains(&q.kind)) {
            enter_err(dev, peer);
        }
        Err(Outcome::Error(req, why))
    };
    if data.len() as u64 + grh > room {
        let why = format!(
            "send of {} bytes (+{grh} of GRH room) into a receive of {room}",
            data.len()
        );
        return fail(dev, syn::LOCAL_LENGTH, why, syn::REMOTE_INVAL_REQ);
    }
    // UD: the first 40 bytes of the scatter list are the GRH area: the
    // GRH goes there when the datagram has one; without, the device
    // leaves them as they are.
    let with_grh;
    let (data, mut skip) = match ud.and_then(|u| u.grh) {
        Some(g) => {
            with_grh = [&g[..], data].concat();
            (&with_grh[..], 0)
        }
        None => (data, grh),
    };
    let mut ranges = Vec::new();
    let mut left = data.len() as u64;
    for &(lkey, addr, len) in &slot.sges {
        if left == 0 {
            break;
        }
        let (addr, len) = {
            let s = skip.min(u64::from(len));
            skip -= s;
            (addr + s, u64::from(len) - s)
        };
        let l = len.min(left);
        if l == 0 {
            continue;
        }
        match mem::resolve(dev, lkey, addr, l, pdn, Access::LocalWrite) {
            Ok(r) => ranges.extend(r),
            Err(f) => return fail(dev, syn::LOCAL_PROT, f.0, syn::REMOTE_OP),
        }
        left -= l;
    }
    mem::scatter(&ranges, data);
    if let Msg::SendInv(_, rkey) = msg {
        invalidate(dev, u32::from_be_bytes(rkey));
    }
    consume(dev, peer, &slot);
    complete(dev, peer, &slot, c);
    Ok(())
}
