//! CQ, QP (RC, UC, UD, DCI, DCT, XRC) and SRQ commands.

use super::bytes::In;
use super::cmd::{pdn_of, xrcdn_of, Cmd, MAX_CQE, NUM_COMP_VECTORS};
use super::errno::{refuse, Res};
use super::{events, qp_modify};
use crate::config::{self, debug};
use crate::model::events::SRQ_LIMIT_REACHED;
use crate::model::lock;
use crate::model::state::{Cq, Device, Qp, QpAttrs, QpKind, QpState, Rq, Sq, Srq, XrcSrq};

const QPT_RC: u8 = 2;
const QPT_UC: u8 = 3;
const QPT_UD: u8 = 4;
const QPT_XRC_SEND: u8 = 9;
const QPT_XRC_RECV: u8 = 10;
const QPT_DRIVER: u8 = 0xff;
const FLAG_TYPE_DCT: u32 = 1 << 4;
const FLAG_TYPE_DCI: u32 = 1 << 5;
const FLAG_DCI_STREAM: u32 = 1 << 11;
/// The CQ arm word before the first arm.
pub const ARM_SENTINEL: u32 = 0xffff_ffff;

/// Runs the CQ/QP/SRQ commands.
pub fn dispatch(cmd: &mut Cmd, ex: bool, code: u32, name: &str) -> Res<()> {
    match (ex, code) {
        (false, 18) => create_cq(cmd, false),
        (true, 18) => create_cq(cmd, true),
        (false, 20) => destroy_cq(cmd),
        (false, 24) => create_qp(cmd, false),
        (true, 24) => create_qp(cmd, true),
        (false, 25) => qp_modify::query_qp(cmd),
        (false, 26) => qp_modify::modify_qp(cmd, false),
        (true, 26) => qp_modify::modify_qp(cmd, true),
        (false, 27) => destroy_qp(cmd),
        (false, 32) => create_srq(cmd),
        (false, 33) => modify_srq(cmd),
        (false, 34) => query_srq(cmd),
        (false, 35) => destroy_srq(cmd),
        _ => Err(refuse(
            libc::EOPNOTSUPP,
            format_args!("{name} is not modelled"),
        )),
    }
}

fn create_cq(cmd: &mut Cmd, ex: bool) -> Res<()> {
    // Legacy: response, user_handle, cqe, comp_vector, comp_channel.
    // Extended: the same without `response`, then comp_mask, flags.
    let c = if ex {
        cmd.core.clone()
    } else {
        cmd.core.tail(8)
    };
    let user_handle = c.u64(0);
    let cqe = c.u32(8);
    let channel_fd = c.u32(16) as i32;
    // As uverbs' create_cq: a completion vector the context lacks.
    if c.u32(12) >= NUM_COMP_VECTORS {
        return Err(refuse(
            libc::EINVAL,
            format_args!("CREATE_CQ: comp_vector {}", c.u32(12)),
        ));
    }
    if ex && c.u32(20) != 0 {
        return Err(refuse(
            libc::EINVAL,
            format_args!("EX_CREATE_CQ: comp_mask {:#x}", c.u32(20)),
        ));
    }
    // IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION (1) is accepted (CQEs carry a
    // zero timestamp); IGNORE_OVERRUN (2) and anything else is not modelled.
    if ex && c.u32(24) & !1 != 0 {
        return Err(refuse(
            libc::EOPNOTSUPP,
            format_args!("EX_CREATE_CQ: flags {:#x}", c.u32(24)),
        ));
    }
    let u = &cmd.uhw;
    let buf = u.u64(0);
    let db = u.u64(8);
    let cqe_size = u.u32(16);
    if u.u16(22) & 1 != 0 {
        return Err(refuse(
            libc::EOPNOTSUPP,
            format_args!("CREATE_CQ: 128-byte CQE padding is not modelled"),
        ));
    }
    if u.u8(20) != 0 {
        return Err(refuse(
            libc::EOPNOTSUPP,
            format_args!("CREATE_CQ: CQE compression is not modelled"),
        ));
    }
    if cqe > MAX_CQE {
        return Err(refuse(
            libc::EINVAL,
            format_args!("CREATE_CQ: {cqe} CQEs > max_cqe {}", MAX_CQE),
        ));
    }
    let ncqe = cqe.wrapping_add(1);
    if !ncqe.is_power_of_two() || buf == 0 || db == 0 || !(cqe_size == 64 || cqe_size == 128) {
        return Err(refuse(
            libc::EINVAL,
            format_args!("CREATE_CQ: cqe {cqe} buf {buf:#x} db {db:#x} cqe_size {cqe_size}"),
        ));
    }
    let mut dev = lock();
    let channel = if channel_fd >= 0 {
        Some(dev.channels.get(&channel_fd).map(|c| c.0).ok_or_else(|| {
            refuse(
                libc::EINVAL,
                format_args!("CREATE_CQ: fd {channel_fd} is no completion channel"),
            )
        })?)
    } else {
        None
    };
    let h = dev.handle();
    let cqn = dev.cqn();
    // libmlx5 only ever writes the arm word (dbrec[1]); the device marks it
    // with a value no arm command produces (command bits 27:24 = 0xf), so
    // that the first arm (which may write 0) is seen as a change.
    // SAFETY: `db` is the CQ's doorbell record, 8 writable bytes that
    // libmlx5 allocated for the device before this command.
    unsafe { ((db + 4) as *mut u32).write_volatile(ARM_SENTINEL.to_be()) };
    dev.cqs.insert(
        h,
        Cq {
            ctx: cmd.fd,
            cqn,
            user_handle,
            buf,
            db,
            ncqe,
            cqe_size,
            pi: 0,
            channel,
            channel_read: channel.map(|_| channel_fd),
            async_events: 0,
            armed_seen: ARM_SENTINEL,
            comp_events: 0,
            overrun: false,
            overrun_reported: false,
            resize_unreported: (0, 0),
            last_solicited: None,
        },
    );
    debug!("CREATE_CQ cqn {cqn:#x} ncqe {ncqe} size {cqe_size}");
    cmd.out.u32(0, h);
    cmd.out.u32(4, cqe);
    if ex {
        let len = cmd.out.0.len() as u32;
        cmd.out.u32(12, len);
    }
    cmd.uhw_out.u32(0, cqn);
    Ok(())
}

fn destroy_cq(cmd: &mut Cmd) -> Res<()> {
    let h = cmd.core.u32(8);
    let mut dev = lock();
    if !matches!(dev.cqs.get(&h), Some(c) if c.ctx == cmd.fd) {
        return Err(refuse(libc::EINVAL, format_args!("DESTROY_CQ: handle {h}")));
    }
    if dev
        .qps
        .values()
        .any(|q| q.send_cq == Some(h) || q.recv_cq == Some(h))
        || dev.srqs.values().any(|s| s.xrc.is_some_and(|x| x.cq == h))
    {
        return Err(refuse(
            libc::EBUSY,
            format_args!("DESTROY_CQ: CQ {h} still has QPs"),
        ));
    }
    let cq = dev.cqs.remove(&h).expect("checked above");
    // Events count as reported once read: the unread ones are dropped.
    let handle = cq.user_handle.to_ne_bytes();
    let unread_comp = match (cq.channel_read, cq.channel) {
        (Some(r), Some(w)) => events::take_unread(r, w, 8, |e| e == handle),
        _ => 0,
    };
    let unread_async = match dev.contexts.get(&cq.ctx).and_then(|c| c.async_fd) {
        Some((r, w)) if cq.async_events > 0 => {
            events::take_unread(r, w, 16, |e| e[..8] == handle && e[8..12] == [0; 4])
        }
        _ => 0,
    };
    cmd.out
        .u32(0, cq.comp_events - unread_comp.min(cq.comp_events));
    cmd.out
        .u32(4, cq.async_events - unread_async.min(cq.async_events));
    Ok(())
}

fn cq_of(dev: &Device, fd: i32, h: u32, what: &str) -> Res<u32> {
    match dev.cqs.get(&h) {
        Some(c) if c.ctx == fd => Ok(h),
        _ => Err(refuse(
            libc::EINVAL,
            format_args!("CREATE_QP: unknown {what} CQ handle {h}"),
        )),
    }
}

fn create_qp(cmd: &mut Cmd, ex: bool) -> Res<()> {
    let c = if ex {
        cmd.core.clone()
    } else {
        cmd.core.tail(8)
    };
    // IB_UVERBS_QP_CREATE_BLOCK_MULTICAST_LOOPBACK (2) is accepted: there
    // is no multicast, so no loopback of it to block.
    if ex && (c.u32(48) != 0 || c.u32(52) & !2 != 0) {
        return Err(refuse(
            libc::EOPNOTSUPP,
            format_args!(
                "EX_CREATE_QP: comp_mask {:#x} create_flags {:#x}",
                c.u32(48),
                c.u32(52)
            ),
        ));
    }
    let user_handle = c.u64(0);
    let (pd, scq, rcq, srq_h) = (c.u32(8), c.u32(12), c.u32(16), c.u32(20));
    let (max_send_wr, max_recv_wr) = (c.u32(24), c.u32(28));
    let (max_send_sge, max_recv_sge, max_inline) = (c.u32(32), c.u32(36), c.u32(40));
    let sq_sig_all = c.u8(44) != 0;
    let qp_type = c.u8(45);
    let is_srq = c.u8(46) != 0;
    let u = cmd.uhw.clone();
    let flags = u.u32(28);
    let kind = match qp_type {
        QPT_RC => QpKind::Rc,
        QPT_UC => QpKind::Uc,
        QPT_UD => QpKind::Ud,
        QPT_XRC_SEND => QpKind::XrcIni,
        QPT_XRC_RECV => QpKind::XrcTgt,
        QPT_DRIVER if flags & FLAG_TYPE_DCI != 0 => QpKind::Dci,
        QPT_DRIVER if flags & FLAG_TYPE_DCT != 0 => QpKind::Dct,
        t => {
            return Err(refuse(
                libc::EOPNOTSUPP,
                format_args!("CREATE_QP: QP type {t} flags {flags:#x}"),
            ))
        }
    };
    let cfg = config::get();
    if max_inline > cfg.max_inline {
        return Err(refuse(
            libc::EINVAL,
            format_args!(
                "CREATE_QP: max_inline_data {max_inline} > {}",
                cfg.max_inline
            ),
        ));
    }
    if max_send_sge > 30 || max_recv_sge > 32 {
        return Err(refuse(
            libc::EINVAL,
            format_args!("CREATE_QP: max_send_sge {max_send_sge}, max_recv_sge {max_recv_sge}"),
        ));
    }
    let mut dev = lock();
    // An XRC target QP is created in an XRC domain (its handle where the
    // PD's would be), with no CQs and no queues of its own.
    let (pdn, xrcdn) = if kind == QpKind::XrcTgt {
        (0, Some(xrcdn_of(&dev, cmd.fd, pd, "CREATE_QP")?))
    } else {
        (pdn_of(&dev, cmd.fd, pd)?, None)
    };
    if is_srq && matches!(kind, QpKind::XrcIni | QpKind::XrcTgt) {
        return Err(refuse(
            libc::EINVAL,
            format_args!("CREATE_QP: an XRC QP takes no SRQ"),
        ));
    }
    let srq = if is_srq {
        match dev.srqs.get(&srq_h) {
            Some(s) if s.ctx == cmd.fd => Some(srq_h),
            _ => {
                return Err(refuse(
                    libc::EINVAL,
                    format_args!("CREATE_QP: SRQ handle {srq_h}"),
                ))
            }
        }
    } else {
        None
    };
    let recv_cq = match kind {
        QpKind::XrcIni | QpKind::XrcTgt => None,
        _ => Some(cq_of(&dev, cmd.fd, rcq, "receive")?),
    };
    let send_cq = match kind {
        QpKind::Dct | QpKind::XrcTgt => None,
        _ => Some(cq_of(&dev, cmd.fd, scq, "send")?),
    };
    let mut dci_streams = None;
    let (mut sq, mut rq, mut db, mut dc_key) = (None, None, 0, 0);
    if kind == QpKind::Dct {
        if srq.is_none() {
            return Err(refuse(
                libc::EINVAL,
                format_args!("CREATE_QP: a DCT needs an SRQ"),
            ));
        }
        dc_key = u.u64(40);
    } else if kind == QpKind::XrcTgt {
        // No queues: whatever buffer libmlx5 allocated is never read.
        db = u.u64(8);
    } else {
        let buf = u.u64(0);
        db = u.u64(8);
        let sq_cnt = u.u32(16);
        let rq_cnt = u.u32(20);
        let rq_shift = u.u32(24);
        if (buf == 0 && (sq_cnt != 0 || rq_cnt != 0))
            || sq_cnt > 1 << 16
            || rq_cnt > 1 << 15
            || db == 0
            || (sq_cnt != 0 && !sq_cnt.is_power_of_two())
            || (rq_cnt != 0 && !rq_cnt.is_power_of_two())
            || rq_shift > 16
        {
            return Err(refuse(
                libc::EINVAL,
                format_args!(
                    "CREATE_QP: buf {buf:#x} db {db:#x} sq {sq_cnt} rq {rq_cnt}<<{rq_shift}"
                ),
            ));
        }
        if rq_cnt != 0 {
            if srq.is_some() {
                return Err(refuse(
                    libc::EINVAL,
                    format_args!("CREATE_QP: both an RQ and an SRQ"),
                ));
            }
            rq = Some(Rq {
                buf,
                wqe_cnt: rq_cnt,
                wqe_shift: rq_shift,
                ci: 0,
            });
        }
        // A QP created with max_send_wr 0 has no send queue.
        sq = (sq_cnt != 0).then(|| Sq {
            buf: buf + (u64::from(rq_cnt) << rq_shift),
            wqe_cnt: sq_cnt,
            ci: 0,
        });
        if kind == QpKind::Dci && flags & FLAG_DCI_STREAM != 0 {
            let (conc, err) = (u.u8(52), u.u8(53));
            if conc > cfg.dci_streams.0 || err > cfg.dci_streams.1 {
                return Err(refuse(
                    libc::EINVAL,
                    format_args!("CREATE_QP: DCI streams {conc}/{err} beyond caps"),
                ));
            }
            dci_streams = Some((conc, err));
        }
    }
    let h = dev.handle();
    let qpn = dev.qpn();
    let uidx = u.u32(32) & 0xff_ffff;
    dev.qps.insert(
        h,
        Qp {
            ctx: cmd.fd,
            qpn,
            user_handle,
            kind,
            pdn,
            send_cq,
            recv_cq,
            srq,
            state: QpState::Reset,
            sq,
            rq,
            db,
            uidx,
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline,
            sq_sig_all,
            dest_qpn: 0,
            access: 0,
            dc_key,
            attrs: QpAttrs::default(),
            dci_streams,
            errored_streams: Vec::new(),
            mmo: false,
            events: 0,
            signature: flags & 1 != 0,
            waiting: None,
            wire: Default::default(),
            xrcdn,
            xrc_srq: None,
        },
    );
    debug!("CREATE_QP {kind:?} qpn {qpn:#x} uidx {uidx} sq {sq:?} rq {rq:?}");
    let o = &mut cmd.out;
    o.u32(0, h);
    o.u32(4, if kind == QpKind::Dct { 0 } else { qpn });
    o.u32(8, max_send_wr);
    o.u32(12, max_recv_wr);
    o.u32(16, max_send_sge);
    o.u32(20, max_recv_sge);
    o.u32(24, max_inline);
    if ex {
        let len = o.0.len() as u32;
        o.u32(36, len);
    }
    cmd.uhw_out.u32(0, u.u32(36)); // bfreg_index echoed
    Ok(())
}

fn destroy_qp(cmd: &mut Cmd) -> Res<()> {
    let h = cmd.core.u32(8);
    let mut dev = lock();
    match dev.qps.get(&h) {
        Some(q) if q.ctx == cmd.fd => {}
        _ => return Err(refuse(libc::EINVAL, format_args!("DESTROY_QP: handle {h}"))),
    }
    let qp = dev.qps.remove(&h).expect("checked above");
    // As the kernel: the events the program has not read are dropped and
    // not reported (libibverbs waits for as many acknowledgements as
    // reported).
    let handle = qp.user_handle.to_ne_bytes();
    let unread = match dev.contexts.get(&qp.ctx).and_then(|c| c.async_fd) {
        Some((r, w)) if qp.events > 0 => events::take_unread(r, w, 16, |e| {
            let ty = u32::from_ne_bytes(e[8..12].try_into().expect("4 bytes"));
            e[..8] == handle && matches!(ty, 1..=7 | 16)
        }),
        _ => 0,
    };
    cmd.out.u32(0, qp.events - unread.min(qp.events));
    Ok(())
}

fn create_srq(cmd: &mut Cmd) -> Res<()> {
    let c = &cmd.core;
    let req = SrqRequest {
        user_handle: c.u64(8),
        pd: c.u32(16),
        max_wr: c.u32(20),
        max_sge: c.u32(24),
        limit: c.u32(28),
    };
    new_srq(cmd, &req, |_| Ok(None))
}

/// The core fields of CREATE_SRQ and CREATE_XSRQ.
#[derive(Clone, Copy)]
pub(super) struct SrqRequest {
    pub user_handle: u64,
    pub pd: u32,
    pub max_wr: u32,
    pub max_sge: u32,
    pub limit: u32,
}

/// Creates an SRQ from `req` and the mlx5 UHW (`mlx5_ib_create_srq`:
/// buf_addr, db_addr, flags, uidx); `xrc` checks, under the device lock,
/// what makes it an XRC SRQ (`None`: a basic one).
pub(super) fn new_srq(
    cmd: &mut Cmd,
    req: &SrqRequest,
    xrc: impl FnOnce(&Device) -> Res<Option<XrcSrq>>,
) -> Res<()> {
    let SrqRequest {
        user_handle,
        pd,
        max_wr,
        max_sge,
        limit,
    } = *req;
    let u: &In = &cmd.uhw;
    let (buf, db, uidx) = (u.u64(0), u.u64(8), u.u32(24) & 0xff_ffff);
    if buf == 0 || db == 0 || max_sge > 31 || max_wr > (1 << 15) - 1 {
        return Err(refuse(
            libc::EINVAL,
            format_args!("CREATE_SRQ: buf {buf:#x} db {db:#x} max_wr {max_wr} max_sge {max_sge}"),
        ));
    }
    let wqe_cnt = (max_wr + 1).next_power_of_two();
    let desc = (16 + 16 * max_sge).max(32).next_power_of_two();
    let mut dev = lock();
    let pdn = pdn_of(&dev, cmd.fd, pd)?;
    let xrc = xrc(&dev)?;
    let h = dev.handle();
    let srqn = dev.srqn();
    dev.srqs.insert(
        h,
        Srq {
            ctx: cmd.fd,
            srqn,
            pdn,
            buf,
            db,
            wqe_shift: desc.trailing_zeros(),
            wqe_cnt,
            max_sge: (desc - 16) / 16,
            consumed: 0,
            head: 0,
            uidx,
            user_handle,
            limit,
            events: 0,
            xrc,
        },
    );
    debug!("CREATE_SRQ srqn {srqn:#x} wqes {wqe_cnt} stride {desc} xrc {xrc:?}");
    cmd.out.u32(0, h);
    cmd.out.u32(4, wqe_cnt - 1);
    cmd.out.u32(8, (desc - 16) / 16);
    cmd.out.u32(12, srqn);
    cmd.uhw_out.u32(0, srqn);
    Ok(())
}

fn srq_mut<'a>(dev: &'a mut Device, fd: i32, h: u32, what: &str) -> Res<&'a mut Srq> {
    match dev.srqs.get_mut(&h) {
        Some(s) if s.ctx == fd => Ok(s),
        _ => Err(refuse(libc::EINVAL, format_args!("{what}: SRQ handle {h}"))),
    }
}

fn modify_srq(cmd: &mut Cmd) -> Res<()> {
    let (h, mask, limit) = (cmd.core.u32(0), cmd.core.u32(4), cmd.core.u32(12));
    let mut dev = lock();
    let s = srq_mut(&mut dev, cmd.fd, h, "MODIFY_SRQ")?;
    if mask & !2 != 0 {
        return Err(refuse(
            libc::EOPNOTSUPP,
            format_args!("MODIFY_SRQ: attr_mask {mask:#x} (only IBV_SRQ_LIMIT is modelled)"),
        ));
    }
    if mask & 2 != 0 {
        if limit >= s.wqe_cnt {
            return Err(refuse(
                libc::EINVAL,
                format_args!("MODIFY_SRQ: limit {limit} of an SRQ of {}", s.wqe_cnt - 1),
            ));
        }
        // Armed: one IBV_EVENT_SRQ_LIMIT_REACHED when fewer receives remain.
        s.limit = limit;
    }
    Ok(())
}

fn query_srq(cmd: &mut Cmd) -> Res<()> {
    let h = cmd.core.u32(8);
    let mut dev = lock();
    let s = srq_mut(&mut dev, cmd.fd, h, "QUERY_SRQ")?;
    let (wr, sge, limit) = (s.wqe_cnt - 1, s.max_sge, s.limit);
    cmd.out.u32(0, wr);
    cmd.out.u32(4, sge);
    cmd.out.u32(8, limit);
    Ok(())
}

fn destroy_srq(cmd: &mut Cmd) -> Res<()> {
    let h = cmd.core.u32(8);
    let mut dev = lock();
    srq_mut(&mut dev, cmd.fd, h, "DESTROY_SRQ")?;
    if dev.qps.values().any(|q| q.srq == Some(h)) {
        return Err(refuse(
            libc::EBUSY,
            format_args!("DESTROY_SRQ: SRQ {h} still has QPs"),
        ));
    }
    let s = dev.srqs.remove(&h).expect("checked above");
    for q in dev.qps.values_mut() {
        if q.xrc_srq == Some(h) {
            q.xrc_srq = None;
        }
    }
    let handle = s.user_handle.to_ne_bytes();
    let unread = match dev.contexts.get(&s.ctx).and_then(|c| c.async_fd) {
        Some((r, w)) if s.events > 0 => events::take_unread(r, w, 16, |e| {
            e[..8] == handle && e[8..12] == SRQ_LIMIT_REACHED.to_ne_bytes()
        }),
        _ => 0,
    };
    cmd.out.u32(0, s.events - unread.min(s.events));
    Ok(())
}
