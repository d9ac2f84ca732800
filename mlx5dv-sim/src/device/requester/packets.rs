//! A WQE as request packets: the operations it sends to its responder
//! (one packet per message on this host, one per [`wire::CHUNK`] bytes
//! to another host), and where the answers' bytes go.

use super::gather::{gather, scatter_ranges};
use crate::device::cq::syndrome as syn;
use crate::device::outcome::{Outcome, Requester};
use crate::fabric::wire::{self, Op};
use crate::model::state::Device;
use crate::wqe::{Body, Data, Wqe};

fn chunks(data: &[u8]) -> Vec<&[u8]> {
    if data.is_empty() {
        vec![data]
    } else {
        data.chunks(wire::CHUNK).collect()
    }
}

/// A WQE's request packets, the local ranges the answers' bytes go to
/// (reads, atomics) and the message length.
pub type Packets = (Vec<Op>, Option<Vec<(u64, u64)>>, u32);

/// The request packets of a WQE, and what to do with the answers.
/// `chunk`: split messages into packets of at most [`wire::CHUNK`] bytes
/// (else one packet per message, for the local path).
pub fn packets(dev: &Device, rq: &Requester, wqe: &Wqe, chunk: bool) -> Result<Packets, Outcome> {
    let imm = wqe.ctrl.imm.to_be_bytes();
    let split = |d: &[u8]| -> Vec<Vec<u8>> {
        if chunk {
            chunks(d).into_iter().map(<[u8]>::to_vec).collect()
        } else {
            vec![d.to_vec()]
        }
    };
    match &wqe.body {
        Body::RdmaWrite(r) | Body::RdmaWriteImm(r) => {
            let with_imm = matches!(wqe.body, Body::RdmaWriteImm(_));
            let data = gather(dev, rq, &r.data)?;
            let total = data.len() as u32;
            let parts = split(&data);
            let n = parts.len();
            let mut off = 0u64;
            let ops = parts
                .into_iter()
                .enumerate()
                .map(|(i, d)| {
                    let op = Op::Write {
                        first: i == 0,
                        rkey: r.rkey,
                        raddr: r.raddr.wrapping_add(off),
                        imm: (with_imm && i + 1 == n).then_some(imm),
                        total,
                        data: d,
                    };
                    off += match &op {
                        Op::Write { data, .. } => data.len() as u64,
                        _ => 0,
                    };
                    op
                })
                .collect();
            Ok((ops, None, total))
        }
        Body::RdmaRead(r) => {
            let Data::Sges(sges) = &r.data else {
                return Err(Outcome::Error(syn::LOCAL_QP_OP, "inline RDMA read".into()));
            };
            let dst = scatter_ranges(dev, rq.pdn, sges)?;
            let len: u64 = sges.iter().map(|s| u64::from(s.len)).sum();
            let step = if chunk {
                wire::CHUNK as u64
            } else {
                len.max(1)
            };
            let mut ops = Vec::new();
            let mut off = 0;
            loop {
                let l = (len - off).min(step);
                ops.push(Op::Read {
                    rkey: r.rkey,
                    raddr: r.raddr.wrapping_add(off),
                    len: l as u32,
                });
                off += l;
                if off >= len {
                    break;
                }
            }
            Ok((ops, Some(dst), len as u32))
        }
        Body::Send(m) | Body::SendImm(m) | Body::SendInv(m) => {
            let data = gather(dev, rq, &m.data)?;
            let total = data.len() as u32;
            let parts = split(&data);
            let n = parts.len();
            let ops = parts
                .into_iter()
                .enumerate()
                .map(|(i, d)| Op::Send {
                    first: i == 0,
                    last: i + 1 == n,
                    imm: matches!(wqe.body, Body::SendImm(_)).then_some(imm),
                    inv: matches!(wqe.body, Body::SendInv(_)).then(|| u32::from_be_bytes(imm)),
                    data: d,
                })
                .collect();
            Ok((ops, None, total))
        }
        Body::AtomicCs(a) | Body::AtomicFa(a) => {
            let dst = scatter_ranges(dev, rq.pdn, std::slice::from_ref(&a.local))?;
            let op = Op::Atomic {
                cs: matches!(wqe.body, Body::AtomicCs(_)),
                rkey: a.rkey,
                raddr: a.raddr,
                swap_add: a.swap_add,
                compare: a.compare,
            };
            Ok((vec![op], Some(dst), 8))
        }
        _ => Err(Outcome::Error(
            syn::LOCAL_QP_OP,
            format!("{} does not leave the host", wqe.body.name()),
        )),
    }
}
