//! The CQE producer: owner bit, slot, op_own written last with release;
//! completion events on armed CQs.

use crate::config::debug;
use crate::model::state::Cq;
use crate::sys::raw::load_be32_acquire;
use std::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};

/// CQEs the device tried to write (for `MLX5DV_SIM_FAIL_CQ_OVERRUN`).
static CQES: AtomicU64 = AtomicU64::new(0);

/// CQE opcodes (`op_own >> 4`).
pub mod opcode {
    /// Requester completion.
    pub const REQ: u8 = 0;
    /// Responder: RDMA write with immediate.
    pub const RESP_WR_IMM: u8 = 1;
    /// Responder: send.
    pub const RESP_SEND: u8 = 2;
    /// Responder: send with immediate.
    pub const RESP_SEND_IMM: u8 = 3;
    /// Responder: send with invalidate.
    pub const RESP_SEND_INV: u8 = 4;
    /// Requester error.
    pub const REQ_ERR: u8 = 13;
    /// Responder error.
    pub const RESP_ERR: u8 = 14;
}

/// CQE syndromes (`MLX5_CQE_SYNDROME_*`).
pub mod syndrome {
    /// Local length error.
    pub const LOCAL_LENGTH: u8 = 0x01;
    /// Local QP operation error.
    pub const LOCAL_QP_OP: u8 = 0x02;
    /// Local protection error.
    pub const LOCAL_PROT: u8 = 0x04;
    /// Work request flushed.
    pub const WR_FLUSH: u8 = 0x05;
    /// Memory window bind error.
    pub const MW_BIND_ERR: u8 = 0x06;
    /// Remote invalid request.
    pub const REMOTE_INVAL_REQ: u8 = 0x12;
    /// Remote access error.
    pub const REMOTE_ACCESS: u8 = 0x13;
    /// Remote operation error.
    pub const REMOTE_OP: u8 = 0x14;
    /// Transport retry counter exceeded.
    pub const RETRY_EXC: u8 = 0x15;

    /// Whether `s` is a syndrome a NAK may carry to a requester: the three
    /// remote errors a responder reports (IBA 9.7.5.2.8: invalid request,
    /// remote access, remote operational).
    pub fn is_remote(s: u8) -> bool {
        matches!(s, REMOTE_INVAL_REQ | REMOTE_ACCESS | REMOTE_OP)
    }
}

/// The fields of one completion (the 64-byte `mlx5_cqe64` image).
#[derive(Debug, Clone, Copy, Default)]
pub struct Cqe {
    /// CQE opcode (`op_own >> 4`).
    pub opcode: u8,
    /// `sop_drop_qpn` / `s_wqe_opcode_qpn`: WQE opcode << 24 | QPN.
    pub sop_qpn: u32,
    /// WQE counter.
    pub wqe_counter: u16,
    /// User index (cqe_version 1).
    pub uidx: u32,
    /// Byte count.
    pub byte_cnt: u32,
    /// Immediate / invalidated rkey (raw wire bytes).
    pub imm: [u8; 4],
    /// `flags_rqpn`: the remote QPN on a responder completion.
    pub rqpn: u32,
    /// Error syndrome (error CQEs).
    pub syndrome: u8,
    /// Vendor syndrome (error CQEs).
    pub vendor_syndrome: u8,
    /// Solicited event requested (responder).
    pub solicited: bool,
    /// A GRH is in the receive buffer (UD responder).
    pub grh: bool,
    /// The sender's LID (UD responder); 1 where not given.
    pub slid: Option<u16>,
}

impl Cqe {
    /// The 64-byte image (with `op_own` apart), through the [`crate::cqe`]
    /// encoders.
    pub fn encode(&self, owner: bool) -> crate::cqe::CqeImage {
        let qpn = self.sop_qpn & 0xff_ffff;
        let wqe_opcode = (self.sop_qpn >> 24) as u8;
        match self.opcode {
            opcode::REQ => crate::cqe::Requester {
                wqe_opcode,
                qpn,
                wqe_counter: self.wqe_counter,
                user_index: self.uidx,
                byte_cnt: self.byte_cnt,
                timestamp: 0,
            }
            .encode(owner),
            opcode::REQ_ERR | opcode::RESP_ERR => crate::cqe::ErrorCqe {
                responder: self.opcode == opcode::RESP_ERR,
                syndrome: self.syndrome,
                vendor_err_synd: self.vendor_syndrome,
                wqe_opcode,
                qpn,
                wqe_counter: self.wqe_counter,
                user_index: self.uidx,
            }
            .encode(owner),
            op => crate::cqe::Responder {
                kind: match op {
                    opcode::RESP_WR_IMM => crate::cqe::RespKind::WriteImm,
                    opcode::RESP_SEND_IMM => crate::cqe::RespKind::SendImm,
                    opcode::RESP_SEND_INV => crate::cqe::RespKind::SendInv,
                    _ => crate::cqe::RespKind::Send,
                },
                qpn,
                user_index: self.uidx,
                wqe_counter: self.wqe_counter,
                byte_cnt: self.byte_cnt,
                imm_inval_pkey: u32::from_be_bytes(self.imm),
                src_qpn: self.rqpn,
                slid: self.slid.unwrap_or(1),
                grh: self.grh,
                solicited: self.solicited,
                ..Default::default()
            }
            .encode(owner),
        }
    }
}

/// Why a CQE could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overrun;

/// Writes one CQE into `cq` (or reports an overrun: the consumer index
/// shows the CQ full).
pub fn push(cq: &mut Cq, cqe: &Cqe) -> Result<(), Overrun> {
    if cq.overrun {
        return Err(Overrun);
    }
    let used = cq.used();
    let nth = CQES.fetch_add(1, Ordering::Relaxed) + 1;
    let injected = crate::config::get().fail_cq_overrun == Some(nth);
    // The CQ holds the `cqe` entries CREATE_CQ reported (ncqe - 1): the
    // stricter reading, so that a program relying on the spare slot of the
    // power-of-two ring is caught.
    if used >= cq.ncqe - 1 || injected {
        debug!(
            "CQ {:#x} overrun (pi {}, {used} not consumed)",
            cq.cqn, cq.pi
        );
        cq.overrun = true;
        return Err(Overrun);
    }
    let slot = u64::from(crate::cqe::slot(cq.pi, cq.ncqe));
    let size = u64::from(cq.cqe_size);
    // In 128-byte CQEs the mlx5_cqe64 is the second half.
    let base = cq.buf + slot * size + (size - 64);
    let img = cqe.encode(crate::cqe::owner_bit(cq.pi, cq.ncqe));
    // SAFETY: `base..base+64` lies inside the CQ buffer given at CREATE_CQ
    // (slot < ncqe, cqe_size bytes each). Bytes 0..63 are written first, then
    // op_own with release ordering so the consumer, which reads op_own with
    // an acquire barrier, sees the complete CQE.
    unsafe {
        std::ptr::copy_nonoverlapping(img.head.as_ptr(), base as *mut u8, 63);
        fence(Ordering::Release);
        AtomicU8::from_ptr((base + 63) as *mut u8).store(img.op_own, Ordering::Release);
    }
    super::trace::cqe(cq.cqn, cq.pi, &img.to_bytes());
    debug!(
        "CQE #{} on CQ {:#x}: opcode {} syndrome {:#x} wqe_counter {} qpn {:#x}",
        cq.pi,
        cq.cqn,
        cqe.opcode,
        cqe.syndrome,
        cqe.wqe_counter,
        cqe.sop_qpn & 0xff_ffff
    );
    if cqe.solicited || cqe.opcode == opcode::REQ_ERR || cqe.opcode == opcode::RESP_ERR {
        cq.last_solicited = Some(cq.pi);
    }
    cq.pi = cq.pi.wrapping_add(1);
    Ok(())
}

/// Queues `IBV_EVENT_CQ_ERR` (`ib_uverbs_async_event_desc{element =
/// user_handle, event_type = 0}`) on `async_w` for a CQ that overran.
pub fn report_overrun(cq: &mut Cq, async_w: i32) {
    if !cq.overrun || cq.overrun_reported {
        return;
    }
    cq.overrun_reported = true;
    let mut desc = [0u8; 16];
    desc[..8].copy_from_slice(&cq.user_handle.to_ne_bytes());
    // SAFETY: `async_w` is the non-blocking write end of the context's
    // async-event pipe, owned by the device; `desc` is 16 readable bytes.
    let n = unsafe { crate::sys::real::write()(async_w, desc.as_ptr().cast(), desc.len()) };
    if n == 16 {
        cq.async_events += 1;
    } else {
        debug!("async event for CQ {:#x} lost", cq.cqn);
    }
}

/// Writes a completion event for `cq` if it is armed and has a CQE past
/// the armed consumer index (a solicited or error one, when armed for
/// solicited completions only) (`ib_uverbs_comp_event_desc{cq_handle = user_handle}`).
pub fn maybe_event(cq: &mut Cq) {
    let Some(w) = cq.channel else { return };
    // SAFETY: word 1 of the CQ doorbell record is the arm word
    // (`sn << 28 | cmd | ci`).
    let arm = unsafe { load_be32_acquire(cq.db + 4) };
    if arm == cq.armed_seen {
        return;
    }
    let ci = arm & 0xff_ffff;
    let pending = (cq.pi.wrapping_sub(ci)) & 0xff_ffff;
    if pending == 0 {
        return;
    }
    // MLX5_CQ_DB_REQ_NOT_SOL (command 1): only a solicited or an error
    // CQE past the armed consumer index fires.
    if (arm >> 24) & 0xf == 1 {
        let fired = cq
            .last_solicited
            .is_some_and(|p| (p.wrapping_sub(ci) & 0xff_ffff) < pending);
        if !fired {
            return;
        }
    }
    cq.armed_seen = arm;
    let desc = cq.user_handle.to_ne_bytes();
    // SAFETY: `w` is the non-blocking write end of the channel's pipe,
    // owned by the device; `desc` is 8 readable bytes.
    let n = unsafe { crate::sys::real::write()(w, desc.as_ptr().cast(), desc.len()) };
    if n == 8 {
        cq.comp_events += 1;
    } else {
        debug!("completion event for CQ {:#x} lost (pipe full)", cq.cqn);
    }
}
