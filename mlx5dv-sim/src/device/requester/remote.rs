//! The requester's side of the fabric.
//!
//! A requester whose work request goes to another host sends it as request
//! packets ([`wire::Request`], one per [`wire::CHUNK`] bytes), one at a
//! time, each acknowledged before the next (the send queue waits meanwhile,
//! as an RC send queue completes in order). An unanswered packet is sent
//! again after the QP's `timeout`, up to `retry_cnt` times, then the work
//! request fails with a transport retry error; a receiver-not-ready NAK is
//! retried after the responder's RNR timer, `rnr_retry` times. UC and UD
//! packets are not answered: their work requests complete once sent.
//!
//! The answers come in through the responder's
//! [`receive`](crate::device::responder::receive()), which hands them to
//! the QP ([`QpWire::replies`](crate::model::wire::QpWire::replies)).

use super::packets::packets;
use super::retry::rnr_timer_us;
use crate::config::{self, debug};
use crate::device::address::{connected_host, datagram_destination, elsewhere};
use crate::device::cq::syndrome as syn;
use crate::device::mem;
use crate::device::outcome::{Outcome, Requester};
use crate::device::responder::Datagram;
use crate::fabric::wire::{self, Op, Packet, Reply, Request, Transport};
use crate::fabric::{self, Host};
use crate::model::state::{Device, QpKind};
use crate::model::wire::{Finish, Inflight};
use crate::wqe::Wqe;
use std::time::{Duration, Instant};

/// `MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR`.
const RNR_RETRY_EXC: u8 = 0x16;

/// The QP's destination on the fabric for this WQE: `None` when it is this
/// host (the local path runs it), else the host (0: unroutable; nothing
/// answers there).
pub fn destination(dev: &Device, rq: &Requester, wqe: &Wqe) -> Option<u16> {
    let me = fabric::joined()?.id;
    if !wqe.body.reaches_a_peer() {
        return None;
    }
    let to = match rq.kind {
        QpKind::Rc | QpKind::Uc | QpKind::XrcIni => {
            connected_host(&dev.qps.get(&rq.handle)?.attrs.dest)
        }
        QpKind::Dci => return datagram_destination(wqe.body.av()?),
        // UD sends are routed by `execute::ud_send` (per datagram).
        QpKind::Ud | QpKind::Dct | QpKind::XrcTgt => return None,
    };
    elsewhere(to, me)
}

/// Sends a UD datagram `from` this host to QP `dst_qpn` of host `to`
/// (unanswered; lost if nothing is there).
pub fn send_datagram(
    dst_qpn: u32,
    qkey: u32,
    from: &Datagram,
    imm: Option<[u8; 4]>,
    data: &[u8],
    to: u16,
) {
    let Some(host) = fabric::joined() else {
        return;
    };
    let p = Request {
        src_host: host.id,
        src_qpn: from.src_qpn,
        dst_qpn,
        psn: 0,
        transport: Transport::Ud,
        // UD has no DC key: the field carries the datagram's route.
        dc_key: from.route.pack(),
        qkey,
        solicited: from.solicited,
        op: Op::Send {
            first: true,
            last: true,
            imm,
            inv: None,
            data: data.to_vec(),
        },
    };
    transmit(host, to, &Packet::Request(p));
}

/// Starts WQE `ci` of requester `rq` towards host `to`.
pub fn start(dev: &mut Device, rq: &Requester, ci: u16, wqe: &Wqe, to: u16) -> Outcome {
    let Some(host) = fabric::joined() else {
        return Outcome::Error(syn::LOCAL_QP_OP, "not on the fabric".into());
    };
    let (ops, dst, total) = match packets(dev, rq, wqe, true) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let av = wqe.body.av();
    let transport = match rq.kind {
        QpKind::Rc => Transport::Rc,
        QpKind::Uc => Transport::Uc,
        QpKind::Dci => Transport::Dc,
        QpKind::XrcIni => Transport::Xrc {
            srqn: wqe.xrc_srqn.unwrap_or(0),
        },
        QpKind::Ud | QpKind::Dct | QpKind::XrcTgt => {
            return Outcome::Error(syn::LOCAL_QP_OP, format!("{:?} here", rq.kind))
        }
    };
    if transport == Transport::Uc && matches!(ops[0], Op::Read { .. } | Op::Atomic { .. }) {
        return Outcome::Error(syn::LOCAL_QP_OP, "UC has no RDMA read or atomics".into());
    }
    let head = Request {
        src_host: host.id,
        src_qpn: rq.qpn,
        dst_qpn: match transport {
            Transport::Rc | Transport::Uc | Transport::Xrc { .. } => rq.dest_qpn,
            _ => av.map_or(0, |a| a.dctn),
        },
        psn: 0,
        transport,
        dc_key: av.map_or(0, |a| a.dc_key),
        qkey: rq.qkey,
        solicited: wqe.ctrl.solicited,
        op: Op::Read {
            rkey: 0,
            raddr: 0,
            len: 0,
        },
    };
    let q = dev.qps.get_mut(&rq.handle).expect("live QP");
    if transport == Transport::Uc {
        // Unanswered: sent once (a full queue at the receiver drops it,
        // as a congested wire would).
        for op in ops {
            let p = Request {
                psn: q.wire.next_psn,
                op,
                ..head.clone()
            };
            q.wire.next_psn = wire::next_psn(q.wire.next_psn);
            transmit(host, to, &Packet::Request(p));
        }
        return Outcome::Done(total);
    }
    let f = Inflight {
        ci,
        to,
        head,
        ops,
        next: 0,
        sent: None,
        not_before: None,
        attempts: 0,
        rnr: 0,
        got: Vec::new(),
        finish: dst.map_or(Finish::Nothing, Finish::Scatter),
        total,
    };
    q.wire.inflight = Some(Box::new(f));
    progress(dev, rq.handle)
}

/// Sends a packet; `false` if the receiver's queue is full (try again).
fn transmit(host: &Host, to: u16, p: &Packet) -> bool {
    match host.send(to, &p.encode()) {
        Ok(sent) => sent,
        Err(e) => {
            // Nobody is there (the host is gone, or never was): the packet
            // is lost, as on a wire; the requester's timer runs.
            debug!("packet to host {to} lost: {e}");
            true
        }
    }
}

/// How long a requester waits for an answer before it sends again:
/// `4.096 µs × 2^timeout`, at least `MLX5DV_SIM_MIN_ACK_TIMEOUT_MS` (an
/// answer crosses two processes' schedulers), `None` for ever.
fn ack_timeout(timeout: u8) -> Option<Duration> {
    if timeout == 0 {
        return None;
    }
    let spec = Duration::from_nanos((4096.0 * f64::from(1u32 << timeout.min(31))) as u64);
    Some(spec.max(Duration::from_millis(config::get().min_ack_timeout_ms)))
}

/// Moves the work request in flight on QP `h` on: matches answers, sends
/// (again) what is due, and says whether it ended.
pub fn progress(dev: &mut Device, h: u32) -> Outcome {
    let Some(host) = fabric::joined() else {
        return Outcome::Error(syn::LOCAL_QP_OP, "not on the fabric".into());
    };
    let q = dev.qps.get_mut(&h).expect("live QP");
    let a = q.attrs;
    let Some(mut f) = q.wire.inflight.take() else {
        return Outcome::Error(syn::LOCAL_QP_OP, "no request in flight".into());
    };
    let now = Instant::now();
    for r in std::mem::take(&mut q.wire.replies) {
        // The packet in flight carries the QP's next PSN.
        if r.psn != q.wire.next_psn || f.sent.is_none() {
            continue; // stale: an answer to a packet already answered
        }
        match r.reply {
            Reply::Ack(data) => {
                let want = match &f.ops[f.next] {
                    Op::Read { len, .. } => *len as usize,
                    Op::Atomic { .. } => 8,
                    Op::Write { .. } | Op::Send { .. } => 0,
                };
                if data.len() != want {
                    // Not an answer to this packet: a read response of
                    // another length, data on a write's ACK. Dropped, as
                    // a malformed packet is; the timer sends again.
                    debug!(
                        "host {}: an ACK of {} bytes for a packet that takes {want}: dropped",
                        f.to,
                        data.len()
                    );
                    continue;
                }
                f.got.extend_from_slice(&data);
                f.next += 1;
                q.wire.next_psn = wire::next_psn(q.wire.next_psn);
                (f.sent, f.attempts, f.rnr) = (None, 0, 0);
                if f.next == f.ops.len() {
                    return finish(*f);
                }
            }
            Reply::Nak(s, why) => {
                if !syn::is_remote(s) {
                    // A NAK carries one of the three remote errors a
                    // responder reports (IBA 9.7.5.2.8: invalid request,
                    // remote access, remote operational); any other code
                    // is a malformed packet, dropped.
                    debug!("host {}: a NAK with syndrome {s:#x}: dropped", f.to);
                    continue;
                }
                q.wire.next_psn = wire::next_psn(q.wire.next_psn);
                let why: String = why.chars().take(MAX_WHY).collect();
                return Outcome::Error(s, format!("host {}: {why}", f.to));
            }
            Reply::Rnr(timer) => {
                // rnr_retry 7 retries for ever: the count saturates.
                f.rnr = f.rnr.saturating_add(1);
                if a.rnr_retry < 7 && f.rnr > a.rnr_retry {
                    return Outcome::Error(
                        RNR_RETRY_EXC,
                        format!(
                            "host {} QP {:#x}: receiver not ready after {} tries",
                            f.to, f.head.dst_qpn, f.rnr
                        ),
                    );
                }
                f.sent = None;
                f.not_before = Some(now + Duration::from_micros(rnr_timer_us(timer)));
            }
        }
    }
    if let (Some(t0), Some(limit)) = (f.sent, ack_timeout(a.timeout)) {
        if now.duration_since(t0) >= limit {
            f.attempts = f.attempts.saturating_add(1);
            if f.attempts > a.retry_cnt {
                return Outcome::Error(
                    syn::RETRY_EXC,
                    format!(
                        "no answer from host {} QP {:#x} after {} tries",
                        f.to, f.head.dst_qpn, f.attempts
                    ),
                );
            }
            f.sent = None;
        }
    }
    if f.sent.is_none() && f.not_before.is_none_or(|t| now >= t) {
        let p = Request {
            psn: q.wire.next_psn,
            op: f.ops[f.next].clone(),
            ..f.head.clone()
        };
        if transmit(host, f.to, &Packet::Request(p)) {
            f.sent = Some(now);
            f.not_before = None;
        }
    }
    q.wire.inflight = Some(f);
    Outcome::Pending
}

/// The most characters of a NAK's reason a requester keeps (for its log).
const MAX_WHY: usize = 200;

fn finish(f: Inflight) -> Outcome {
    if let Finish::Scatter(dst) = &f.finish {
        if f.got.len() as u64 != dst.iter().map(|r| r.1).sum::<u64>() {
            return Outcome::Error(
                syn::LOCAL_LENGTH,
                format!(
                    "host {} answered {} bytes for {}",
                    f.to,
                    f.got.len(),
                    f.total
                ),
            );
        }
        mem::scatter(dst, &f.got);
    }
    Outcome::Done(f.total)
}
