//! Step 4 of the responder: executing the request. What a QP (or DCT) does
//! with an RDMA write, read, send or atomic that reaches it, from a QP of
//! this host or from another host. Both paths call [`serve`], so a remote
//! peer meets the same checks, the same completions and the same errors
//! as a local one. A send (or a write with immediate) takes a receive
//! WQE ([`super::deliver`]).

use super::access::remote_ranges;
use super::deliver::{deliver, ready, room, Msg};
use crate::config::debug;
use crate::device::cq::syndrome as syn;
use crate::device::mem::{self, Access};
use crate::device::outcome::Outcome;
use crate::fabric::wire::{Op, CHUNK};
use crate::model::events::{async_event, enter_err};
use crate::model::state::{Device, QpKind, QpState};
use crate::model::wire::{Open, Source};

/// `IBV_EVENT_QP_REQ_ERR`: the responder saw an invalid request.
const QP_REQ_ERR: u32 = 2;
/// `IBV_EVENT_QP_ACCESS_ERR`: the responder saw a remote access violation.
const QP_ACCESS_ERR: u32 = 3;

/// Serves one request packet `op` on the responder QP or DCT `peer`:
/// the bytes of the answer (read data, an atomic's original value), or the
/// outcome the requester sees (a NAK's syndrome, or receiver-not-ready).
///
/// A connected responder (RC, UC) that NAKs an invalid request or a remote
/// access error goes to the error state, as the IB spec's class C errors
/// do (its posted receives are flushed), and its context gets the
/// affiliated async event (`IBV_EVENT_QP_REQ_ERR`, `IBV_EVENT_QP_ACCESS_ERR`);
/// a DCT serves on. A UC responder drops a request it refuses (a remote
/// access error, an invalid request such as a packet whose message's first
/// packet was lost) silently and stays as it was (UC has no NAK to send,
/// and the message is lost, as soft-RoCE drops it).
pub fn serve(
    dev: &mut Device,
    peer: u32,
    src: Source,
    op: &Op,
    solicited: bool,
) -> Result<Vec<u8>, Outcome> {
    let r = run(dev, peer, src, op, solicited);
    class_c(dev, peer, &r);
    r
}

/// [`serve`] for a packet from another host: a read packet asks for at
/// most one answer packet's worth (its requester cuts a longer read), so
/// that the answer, and the copy kept for a duplicate, never hold more; a
/// longer one is an invalid request. (The local path runs a whole read in
/// one step.)
pub fn serve_from_wire(
    dev: &mut Device,
    peer: u32,
    src: Source,
    op: &Op,
    solicited: bool,
) -> Result<Vec<u8>, Outcome> {
    let r = match op {
        Op::Read { len, .. } if *len as usize > CHUNK => Err(Outcome::Error(
            syn::REMOTE_INVAL_REQ,
            format!("a read of {len} bytes in one packet (at most {CHUNK})"),
        )),
        _ => return serve(dev, peer, src, op, solicited),
    };
    class_c(dev, peer, &r);
    r
}

/// A connected responder's class C errors: ERR and the async event.
fn class_c(dev: &mut Device, peer: u32, r: &Result<Vec<u8>, Outcome>) {
    if let Err(Outcome::Error(s, why)) = r {
        let event = match *s {
            syn::REMOTE_ACCESS => Some(QP_ACCESS_ERR),
            syn::REMOTE_INVAL_REQ => Some(QP_REQ_ERR),
            _ => None,
        };
        if let (Some(event), Some(q)) = (event, dev.qps.get_mut(&peer)) {
            // UC has no NAK: whatever it refuses is dropped.
            let dropped = q.kind == QpKind::Uc;
            if matches!(q.kind, QpKind::Rc | QpKind::Uc) && !dropped && q.state != QpState::Err {
                debug!("QP {:#x} -> ERR (responder of a NAK: {why})", q.qpn);
                let (ctx, handle) = (q.ctx, q.user_handle);
                let w = dev.contexts.get(&ctx).and_then(|c| c.async_fd);
                if w.is_some_and(|(_, w)| async_event(w, handle, event)) {
                    if let Some(q) = dev.qps.get_mut(&peer) {
                        q.events += 1;
                    }
                }
                enter_err(dev, peer);
            }
        }
    }
}

fn run(
    dev: &mut Device,
    peer: u32,
    src: Source,
    op: &Op,
    solicited: bool,
) -> Result<Vec<u8>, Outcome> {
    match op {
        Op::Write {
            first,
            rkey,
            raddr,
            imm,
            total: _,
            data,
        } => {
            let dst = remote_ranges(
                dev,
                peer,
                *rkey,
                *raddr,
                data.len() as u64,
                Access::RemoteWrite,
            )?;
            // The data lands before the receive's completion is written
            // (a program that polls it reads the data at once); a write
            // with immediate that finds no receive is refused whole
            // (receiver not ready), as rxe checks for the receive first.
            if imm.is_some() {
                ready(dev, peer)?;
            }
            // The length a write with immediate's receive reports is what
            // this message wrote, counted packet by packet: never the
            // length a packet claims. A packet after the first of a write
            // whose first never came (lost on UC) is refused before it
            // writes anything.
            let w = &mut dev.qps.get_mut(&peer).expect("live responder").wire;
            let before = match (w.open.remove(&src), *first) {
                (_, true) => 0,
                (Some(Open::Write { len }), false) => len,
                (_, false) => {
                    return Err(Outcome::Error(
                        syn::REMOTE_INVAL_REQ,
                        "a write's middle packet without its first".into(),
                    ))
                }
            };
            mem::scatter(&dst, data);
            let w = &mut dev.qps.get_mut(&peer).expect("live responder").wire;
            let len = before + data.len() as u64;
            let Some(imm) = imm else {
                w.open.insert(src, Open::Write { len });
                return Ok(Vec::new());
            };
            let msg = Msg::WriteImm {
                len: u32::try_from(len).unwrap_or(u32::MAX),
                imm: *imm,
            };
            deliver(dev, peer, src.qpn, msg, solicited, None)?;
            Ok(Vec::new())
        }
        Op::Read { rkey, raddr, len } => {
            let from = remote_ranges(
                dev,
                peer,
                *rkey,
                *raddr,
                u64::from(*len),
                Access::RemoteRead,
            )?;
            Ok(mem::gather(&from))
        }
        Op::Send {
            first,
            last,
            imm,
            inv,
            data,
        } => send(dev, peer, src, (*first, *last), *imm, *inv, data, solicited),
        Op::Atomic {
            cs,
            rkey,
            raddr,
            swap_add,
            compare,
        } => {
            if raddr % 8 != 0 {
                return Err(Outcome::Error(
                    syn::REMOTE_INVAL_REQ,
                    format!("atomic at unaligned {raddr:#x}"),
                ));
            }
            let tgt = remote_ranges(dev, peer, *rkey, *raddr, 8, Access::RemoteAtomic)?;
            let [(addr, 8)] = tgt.as_slice() else {
                return Err(Outcome::Error(
                    syn::REMOTE_INVAL_REQ,
                    "atomic target split across mkey entries".into(),
                ));
            };
            // atomic_cap IBV_ATOMIC_HCA: the mlx5 kernel driver reports it
            // only with the responder in host-endianness mode
            // (atomic_req_8B_endianness_mode), which mlx5 core sets; the
            // 8 bytes are a host-order number, and the original value comes
            // back in host order.
            let old_bytes = mem::gather(&[(*addr, 8)]);
            let old = u64::from_ne_bytes(old_bytes[..8].try_into().expect("8 bytes"));
            let new = match cs {
                true if old == *compare => *swap_add,
                true => old,
                false => old.wrapping_add(*swap_add),
            };
            mem::scatter(&[(*addr, 8)], &new.to_ne_bytes());
            Ok(old_bytes)
        }
    }
}

/// A send's packet: kept until its last packet, which consumes a receive.
/// The first packet needs a receive posted (receiver not ready otherwise,
/// as a ConnectX answers a send's first packet), and the message is kept
/// only up to one byte more than that receive holds: enough for the last
/// packet's delivery to refuse it whole, and no more memory than the
/// responder's own buffer, however many packets a sender sends.
#[allow(clippy::too_many_arguments)]
fn send(
    dev: &mut Device,
    peer: u32,
    src: Source,
    (first, last): (bool, bool),
    imm: Option<[u8; 4]>,
    inv: Option<u32>,
    data: &[u8],
    solicited: bool,
) -> Result<Vec<u8>, Outcome> {
    let room = if first {
        Some(usize::try_from(room(dev, peer)?).unwrap_or(usize::MAX))
    } else {
        None
    };
    let w = &mut dev.qps.get_mut(&peer).expect("live responder").wire;
    let (mut kept, room, mut len) = match (room, w.open.remove(&src)) {
        (Some(room), _) => (Vec::new(), room, 0u64),
        (None, Some(Open::Send { kept, room, len })) => (kept, room, len),
        (None, _) => {
            return Err(Outcome::Error(
                syn::REMOTE_INVAL_REQ,
                "a send's middle packet without its first".into(),
            ))
        }
    };
    let take = data
        .len()
        .min(room.saturating_add(1).saturating_sub(kept.len()));
    kept.extend_from_slice(&data[..take]);
    len += data.len() as u64;
    if !last {
        w.open.insert(src, Open::Send { kept, room, len });
        return Ok(Vec::new());
    }
    let msg = match (imm, inv) {
        (_, Some(rkey)) => Msg::SendInv(&kept, rkey.to_be_bytes()),
        (Some(imm), None) => Msg::SendImm(&kept, imm),
        (None, None) => Msg::Send(&kept),
    };
    match deliver(dev, peer, src.qpn, msg, solicited, None) {
        Ok(()) => Ok(Vec::new()),
        Err(o) => {
            if matches!(o, Outcome::Stall(_)) {
                // Receiver not ready: the requester sends the last packet
                // again after the RNR timer; keep what came before it.
                kept.truncate(kept.len() - take);
                let len = len - data.len() as u64;
                let w = &mut dev.qps.get_mut(&peer).expect("live responder").wire;
                w.open.insert(src, Open::Send { kept, room, len });
            }
            Err(o)
        }
    }
}
