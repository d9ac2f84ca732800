//! MODIFY_QP (legacy and extended) and QUERY_QP: the QP state machine with
//! the attributes each transition requires, and what QUERY_QP reports back.

use super::cmd::{Cmd, GID_TBL_LEN, MAX_QP_RD_ATOM};
use super::errno::{refuse, Res};
use crate::config::debug;
use crate::model::events::enter_err;
use crate::model::lock;
use crate::model::state::{QpKind, QpState};

const ATTR_STATE: u32 = 1;
const ATTR_ACCESS: u32 = 0x8;
const ATTR_PKEY: u32 = 0x10;
const ATTR_PORT: u32 = 0x20;
const ATTR_QKEY: u32 = 0x40;
const ATTR_AV: u32 = 0x80;
const ATTR_PATH_MTU: u32 = 0x100;
const ATTR_TIMEOUT: u32 = 0x200;
const ATTR_RETRY: u32 = 0x400;
const ATTR_RNR_RETRY: u32 = 0x800;
const ATTR_RQ_PSN: u32 = 0x1000;
const ATTR_MAX_RD_ATOMIC: u32 = 0x2000;
const ATTR_MIN_RNR: u32 = 0x8000;
const ATTR_SQ_PSN: u32 = 0x10000;
const ATTR_MAX_DEST_RD_ATOMIC: u32 = 0x20000;
const ATTR_DEST_QPN: u32 = 0x100000;

/// Attributes a transition must carry (IB spec 11.2.4.2, as the kernel's
/// `ib_modify_qp_is_ok` table has them) for RC, UC, UD, DC and XRC.
fn required(kind: QpKind, from: QpState, to: QpState) -> Option<u32> {
    use QpState::*;
    Some(match (from, to) {
        (_, Reset) | (_, Err) => 0,
        (Reset, Init) => match kind {
            QpKind::Rc | QpKind::Uc | QpKind::Dct | QpKind::XrcIni | QpKind::XrcTgt => {
                ATTR_PKEY | ATTR_PORT | ATTR_ACCESS
            }
            QpKind::Ud => ATTR_PKEY | ATTR_PORT | ATTR_QKEY,
            QpKind::Dci => ATTR_PKEY | ATTR_PORT,
        },
        (Init, Init) => 0,
        (Init, Rtr) => match kind {
            QpKind::Rc | QpKind::XrcTgt => {
                ATTR_AV
                    | ATTR_PATH_MTU
                    | ATTR_DEST_QPN
                    | ATTR_RQ_PSN
                    | ATTR_MAX_DEST_RD_ATOMIC
                    | ATTR_MIN_RNR
            }
            QpKind::Uc | QpKind::XrcIni => ATTR_AV | ATTR_PATH_MTU | ATTR_DEST_QPN | ATTR_RQ_PSN,
            QpKind::Dct => ATTR_PATH_MTU | ATTR_MIN_RNR,
            QpKind::Ud | QpKind::Dci => 0,
        },
        (Rtr, Rts) => match kind {
            QpKind::Rc | QpKind::XrcIni => {
                ATTR_SQ_PSN | ATTR_TIMEOUT | ATTR_RETRY | ATTR_RNR_RETRY | ATTR_MAX_RD_ATOMIC
            }
            QpKind::Dci => ATTR_TIMEOUT | ATTR_RETRY | ATTR_RNR_RETRY | ATTR_MAX_RD_ATOMIC,
            QpKind::Uc | QpKind::Ud => ATTR_SQ_PSN,
            QpKind::XrcTgt => ATTR_SQ_PSN | ATTR_TIMEOUT,
            QpKind::Dct => return None,
        },
        (Rts, Rts) | (Sqd, Rts) | (Sqe, Rts) | (Rts, Sqd) | (Sqd, Sqd) => 0,
        _ => return None,
    })
}

/// MODIFY_QP / EX_MODIFY_QP.
pub fn modify_qp(cmd: &mut Cmd, ex: bool) -> Res<()> {
    let c = cmd.core.clone();
    let h = c.u32(64);
    let mask = c.u32(68);
    let mut dev = lock();
    let qp = match dev.qps.get_mut(&h) {
        Some(q) if q.ctx == cmd.fd => q,
        _ => return Err(refuse(libc::EINVAL, format_args!("MODIFY_QP: handle {h}"))),
    };
    let cur = if mask & 2 != 0 {
        QpState::from_u8(c.u8(97))
            .ok_or_else(|| refuse(libc::EINVAL, format_args!("MODIFY_QP: cur_qp_state")))?
    } else {
        qp.state
    };
    let to = if mask & ATTR_STATE != 0 {
        QpState::from_u8(c.u8(96)).ok_or_else(|| {
            refuse(
                libc::EINVAL,
                format_args!("MODIFY_QP: qp_state {}", c.u8(96)),
            )
        })?
    } else {
        cur
    };
    let need = required(qp.kind, cur, to).ok_or_else(|| {
        refuse(
            libc::EINVAL,
            format_args!("MODIFY_QP: {:?} {cur:?} -> {to:?}", qp.kind),
        )
    })?;
    if mask & need != need {
        return Err(refuse(
            libc::EINVAL,
            format_args!(
                "MODIFY_QP: {:?} {cur:?} -> {to:?} lacks attributes {:#x}",
                qp.kind,
                need & !mask
            ),
        ));
    }
    let a = &mut qp.attrs;
    if mask & ATTR_ACCESS != 0 {
        qp.access = c.u32(88);
    }
    if mask & ATTR_PKEY != 0 {
        a.pkey_index = c.u16(92);
    }
    if mask & ATTR_PORT != 0 {
        if c.u8(104) != 1 {
            return Err(refuse(
                libc::EINVAL,
                format_args!("MODIFY_QP: port {}", c.u8(104)),
            ));
        }
        a.port_num = 1;
    }
    if mask & ATTR_QKEY != 0 {
        a.qkey = c.u32(72);
    }
    if mask & ATTR_AV != 0 {
        // ib_uverbs_qp_dest: sgid_index @24, is_global @30, port_num @31.
        let (sgid, global, port) = (c.u8(24), c.u8(30), c.u8(31));
        if global != 0 && u32::from(sgid) >= GID_TBL_LEN {
            return Err(refuse(
                libc::EINVAL,
                format_args!("MODIFY_QP: AV sgid_index {sgid}"),
            ));
        }
        if port > 1 {
            return Err(refuse(
                libc::EINVAL,
                format_args!("MODIFY_QP: AV port {port}"),
            ));
        }
        if global == 0 && crate::config::get().roce {
            // A RoCE port routes by GID only (IB_UVERBS_QPF_GRH_REQUIRED):
            // the kernel refuses an AV without a GRH.
            return Err(refuse(
                libc::EINVAL,
                format_args!("MODIFY_QP: AV without a GRH on a RoCE port"),
            ));
        }
        a.dest.copy_from_slice(&c.0[0..32]);
    }
    let max_atomic = MAX_QP_RD_ATOM;
    if (mask & ATTR_MAX_RD_ATOMIC != 0 && u32::from(c.u8(101)) > max_atomic)
        || (mask & ATTR_MAX_DEST_RD_ATOMIC != 0 && u32::from(c.u8(102)) > max_atomic)
    {
        return Err(refuse(
            libc::EINVAL,
            format_args!(
                "MODIFY_QP: rd_atomic {}/{} > {max_atomic}",
                c.u8(101),
                c.u8(102)
            ),
        ));
    }
    if mask & ATTR_PATH_MTU != 0 {
        a.path_mtu = c.u8(98);
    }
    if mask & ATTR_TIMEOUT != 0 {
        a.timeout = c.u8(105);
    }
    if mask & ATTR_RETRY != 0 {
        a.retry_cnt = c.u8(106);
    }
    if mask & ATTR_RNR_RETRY != 0 {
        a.rnr_retry = c.u8(107);
    }
    if mask & ATTR_RQ_PSN != 0 {
        a.rq_psn = c.u32(76);
        qp.wire.epsn = a.rq_psn & 0xff_ffff;
    }
    if mask & ATTR_SQ_PSN != 0 {
        a.sq_psn = c.u32(80);
        qp.wire.next_psn = a.sq_psn & 0xff_ffff;
    }
    if mask & ATTR_MAX_RD_ATOMIC != 0 {
        a.max_rd_atomic = c.u8(101);
    }
    if mask & ATTR_MAX_DEST_RD_ATOMIC != 0 {
        a.max_dest_rd_atomic = c.u8(102);
    }
    if mask & ATTR_MIN_RNR != 0 {
        a.min_rnr_timer = c.u8(103);
    }
    if mask & ATTR_DEST_QPN != 0 {
        qp.dest_qpn = c.u32(84) & 0xff_ffff;
    }
    if to == QpState::Reset {
        if let Some(sq) = qp.sq.as_mut() {
            sq.ci = 0;
        }
        if let Some(rq) = qp.rq.as_mut() {
            rq.ci = 0;
        }
        qp.errored_streams.clear();
        qp.mmo = false;
        qp.wire.reset();
    }
    debug!(
        "MODIFY_QP qpn {:#x} {cur:?} -> {to:?} mask {mask:#x}",
        qp.qpn
    );
    let (kind, qpn) = (qp.kind, qp.qpn);
    if to == QpState::Err {
        // On an SRQ, with its last-WQE-reached event.
        enter_err(&mut dev, h);
    } else {
        qp.state = to;
    }
    if ex {
        let len = cmd.out.0.len() as u32;
        cmd.out.u32(4, len);
        if kind == QpKind::Dct && to == QpState::Rtr {
            cmd.uhw_out.u32(0, cmd.uhw_out.0.len().min(16) as u32);
            cmd.uhw_out.u32(4, qpn);
        }
    } else if kind == QpKind::Dct && to == QpState::Rtr {
        return Err(refuse(
            libc::EINVAL,
            format_args!("MODIFY_QP: a DCT reaches RTR through EX_MODIFY_QP only"),
        ));
    }
    Ok(())
}

/// QUERY_QP.
pub fn query_qp(cmd: &mut Cmd) -> Res<()> {
    let h = cmd.core.u32(8);
    let dev = lock();
    let qp = match dev.qps.get(&h) {
        Some(q) if q.ctx == cmd.fd => q,
        _ => return Err(refuse(libc::EINVAL, format_args!("QUERY_QP: handle {h}"))),
    };
    let a = qp.attrs;
    let o = &mut cmd.out;
    o.bytes(0, &a.dest);
    o.u32(64, qp.max_send_wr);
    // The receive queue as built, as mlx5_ib_query_qp reports it (rq
    // wqe_cnt, and the SGEs a WQE stride holds); none with an SRQ.
    let rq = qp.rq.as_ref();
    o.u32(68, rq.map_or(0, |r| r.wqe_cnt));
    o.u32(72, qp.max_send_sge);
    o.u32(76, rq.map_or(0, |r| (1 << r.wqe_shift) / 16));
    o.u32(80, qp.max_inline);
    o.u32(84, a.qkey);
    o.u32(88, a.rq_psn);
    o.u32(92, a.sq_psn);
    o.u32(96, qp.dest_qpn);
    o.u32(100, qp.access);
    o.u16(104, a.pkey_index);
    o.u8(108, qp.state as u8);
    o.u8(109, qp.state as u8);
    o.u8(110, a.path_mtu);
    o.u8(111, 0); // path_mig_state: IBV_MIG_MIGRATED
    o.u8(113, a.max_rd_atomic);
    o.u8(114, a.max_dest_rd_atomic);
    o.u8(115, a.min_rnr_timer);
    o.u8(116, a.port_num);
    o.u8(117, a.timeout);
    o.u8(118, a.retry_cnt);
    o.u8(119, a.rnr_retry);
    o.u8(122, u8::from(qp.sq_sig_all));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xrc_transitions_need_the_spec_attributes() {
        use QpState::*;
        let init = ATTR_PKEY | ATTR_PORT | ATTR_ACCESS;
        assert_eq!(required(QpKind::XrcIni, Reset, Init), Some(init));
        assert_eq!(required(QpKind::XrcTgt, Reset, Init), Some(init));
        // The initiator has no responder resources, the target no send
        // queue to retry.
        let ini_rtr = required(QpKind::XrcIni, Init, Rtr).unwrap();
        assert_eq!(ini_rtr & (ATTR_MAX_DEST_RD_ATOMIC | ATTR_MIN_RNR), 0);
        let tgt_rtr = required(QpKind::XrcTgt, Init, Rtr).unwrap();
        assert_eq!(tgt_rtr, required(QpKind::Rc, Init, Rtr).unwrap());
        assert_eq!(
            required(QpKind::XrcTgt, Rtr, Rts),
            Some(ATTR_SQ_PSN | ATTR_TIMEOUT)
        );
        assert_eq!(
            required(QpKind::XrcIni, Rtr, Rts),
            required(QpKind::Rc, Rtr, Rts)
        );
    }

    #[test]
    fn rc_transitions_need_the_spec_attributes() {
        use QpState::*;
        assert_eq!(
            required(QpKind::Rc, Reset, Init),
            Some(ATTR_PKEY | ATTR_PORT | ATTR_ACCESS)
        );
        let rtr = required(QpKind::Rc, Init, Rtr).unwrap();
        assert_ne!(rtr & ATTR_DEST_QPN, 0);
        assert_ne!(rtr & ATTR_AV, 0);
        assert_eq!(required(QpKind::Rc, Reset, Rts), None);
        assert_eq!(required(QpKind::Dct, Rtr, Rts), None);
        assert_eq!(
            required(QpKind::Dci, Reset, Init),
            Some(ATTR_PKEY | ATTR_PORT)
        );
        assert_eq!(required(QpKind::Rc, Rts, Err), Some(0));
    }
}
