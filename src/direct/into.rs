//! Taking a QP and its send CQ for the direct path:
//! [`QpEx::into_direct`], and its checks of the queues libmlx5 gives.

use super::cq::Cqr;
use super::into_error::IntoDirectError;
use super::sq::{Slot, Sq, BB};
use super::{DirectQp, DirectTransport};
use crate::cq::CompletionQueue;
use crate::error::{Error, Result};
use crate::ffi;
use crate::qp::{QpCaps, QpEx, QpState};
use std::collections::VecDeque;
use std::ptr::NonNull;

fn refused(what: impl Into<String>) -> Error {
    Error::InvalidArgument(what.into())
}

// `into_direct`'s `Result` is as large as its `Ok` already.
const _: () = {
    use std::mem::size_of;
    assert!(
        size_of::<DirectQp<crate::ReliableConnection>>()
            >= size_of::<IntoDirectError<crate::ReliableConnection>>()
    );
    assert!(
        size_of::<DirectQp<crate::DcInitiator>>()
            >= size_of::<IntoDirectError<crate::DcInitiator>>()
    );
};

impl<T: DirectTransport> QpEx<T> {
    /// Takes this QP's send queue and `cq`, its send CQ, for the direct
    /// path ([module documentation](crate::direct)).
    ///
    /// # Errors
    ///
    /// A refusal gives the QP and the CQ back with its error
    /// ([`IntoDirectError`]), both as they were, so that the cause can be
    /// mended and the QP taken again. Refused ([`Error::InvalidArgument`])
    /// when: the QP is not in RESET (it may have been posted through
    /// libmlx5, whose send-queue indices the crate cannot read: take it
    /// before connecting it, or [`reset`](QpEx::reset) the QP given back
    /// and take it again); it has no send queue (made with `max_send_wr`
    /// 0); `cq` is not its send CQ, or is also its receive CQ, or another
    /// QP completes on it, or it keeps a dropped XRC SRQ (see
    /// [`SharedReceiveQueue`](crate::SharedReceiveQueue)); `cq` holds
    /// completions a scoped post kept; the QP was made with `sq_sig_all`;
    /// `cq` holds completions the device wrote and no one polled (poll
    /// them, or use a new CQ).
    /// [`Error::Unsupported`] when the provider is not mlx5
    /// (`mlx5dv_init_obj` fails) or its queues have a shape the crate does
    /// not write (a stride other than 64 bytes, more than 2^15 basic
    /// blocks, CQEs other than 64 or 128 bytes): no mlx5 device's.
    ///
    /// The CQ given back: every refusal but the last two kinds (the CQ's
    /// shape, the completions it holds) comes before `mlx5dv_init_obj` is
    /// asked for the CQ, which leaves it libmlx5's, as it was. After those
    /// two, `mlx5dv_init_obj` has marked it the application's: libmlx5 no
    /// longer cleans a reset or destroyed QP's completions from it, so a
    /// QP that is reset or destroyed with completions on it leaves them
    /// there. A later `into_direct` on that CQ refuses it while it holds
    /// any, and the direct poll skips a CQE of another QP with an error
    /// ([`Error::Direct`]), never taking it for its own.
    // The refusal holds the QP and the CQ by value, as the `DirectQp` it
    // would have been does (no smaller: asserted below), so boxing it would
    // not make the `Result` smaller.
    #[allow(clippy::result_large_err)]
    pub fn into_direct(self, cq: CompletionQueue) -> Result<DirectQp<T>, IntoDirectError<T>> {
        match self.take(&cq) {
            Ok((sq, cqr)) => Ok(DirectQp {
                sq,
                cq: cqr,
                backlog: VecDeque::new(),
                deferred: None,
                done: Vec::new(),
                qp: self,
                raw_cq: cq.raw_cq(),
                _cq: cq,
            }),
            Err(error) => Err(IntoDirectError {
                qp: self,
                cq,
                error,
            }),
        }
    }

    /// `into_direct`'s checks, and the queues libmlx5 gives.
    fn take(&self, cq: &CompletionQueue) -> Result<(Sq, Cqr)> {
        let what = self.describe();
        if !self.completes_on(cq) {
            return Err(refused(format!(
                "into_direct on {what}: the CQ given is not the QP's send CQ"
            )));
        }
        if T::RECV && self.recv_cq_is(cq) {
            return Err(refused(format!(
                "into_direct on {what}: its receives complete on the same CQ; the direct \
                 CQ reads send completions only (create the QP with a receive CQ of its own)"
            )));
        }
        // The handle's share and this QP's (a DCI, without a receive queue,
        // holds its one CQ as both): no other QP.
        if cq.shares() != if T::RECV { 2 } else { 3 } {
            return Err(refused(format!(
                "into_direct on {what}: other QPs complete on its CQ (or hold it); the \
                 direct CQ must be this QP's alone"
            )));
        }
        if cq.has_backlog() {
            return Err(refused(format!(
                "into_direct on {what}: the CQ holds completions not yet handed out"
            )));
        }
        // A type 1 bind not seen complete may still be in the ring, where
        // the direct path would write its own WQEs.
        let binds = self.queued.len();
        if binds != 0 {
            return Err(refused(format!(
                "into_direct on {what}: {binds} memory window bind(s) posted with bind_mw \
                 have not been seen complete; poll their completions first"
            )));
        }
        // A dropped XRC SRQ's share is gone, but its receives may still
        // complete here (`CqInner::retire`).
        if cq.retired_srqs() != 0 {
            return Err(refused(format!(
                "into_direct on {what}: the CQ keeps XRC SRQs dropped with receives \
                 posted, whose completions may still come (use a new CQ)"
            )));
        }
        let mut attr = ffi::ibv_qp_attr::default();
        let mut init = ffi::ibv_qp_init_attr::default();
        // SAFETY: the QP is live; both out-structs are writable.
        let rc = unsafe {
            ffi::ibv_query_qp(
                self.as_ptr(),
                &mut attr,
                ffi::IBV_QP_STATE as i32,
                &mut init,
            )
        };
        if rc != 0 {
            return Err(Error::verbs("ibv_query_qp", rc, what));
        }
        if attr.qp_state != ffi::IBV_QPS_RESET {
            return Err(refused(format!(
                "into_direct on {what}: the QP is in {}, not RESET; take it before \
                 connecting it, or reset() the QP this refusal gives back \
                 (IntoDirectError::qp) and take it again",
                QpState::from_raw(attr.qp_state)
            )));
        }
        if init.sq_sig_all != 0 {
            return Err(refused(format!(
                "into_direct on {what}: the QP was made with sq_sig_all, with which the \
                 device may write small read responses into the CQE"
            )));
        }
        if self.caps().max_send_wr == 0 {
            return Err(refused(format!(
                "into_direct on {what}: a QP without a send queue cannot take the direct \
                 path (it was made with max_send_wr 0)"
            )));
        }
        // The QP alone first: `mlx5dv_init_obj` of a CQ marks it the
        // application's (libmlx5 then no longer cleans a reset or destroyed
        // QP's CQEs from it), so every refusal of the send queue comes
        // before the CQ is asked for.
        let mut dvqp = ffi::mlx5dv_qp::default();
        let mut obj = ffi::mlx5dv_obj::default();
        obj.qp.in_ = self.as_ptr();
        obj.qp.out = &mut dvqp;
        // SAFETY: a live QP; the out-struct is writable and outlives the
        // call.
        let rc = unsafe { ffi::mlx5dv_init_obj(&mut obj, u64::from(ffi::MLX5DV_OBJ_QP)) };
        init_obj_result(rc, &what)?;
        let mut sq = Self::take_sq(&dvqp, self.qp, self.caps(), &what)?;
        sq.streams = self.mlx5.streams.is_some();
        let mut dvcq = ffi::mlx5dv_cq::default();
        let mut obj = ffi::mlx5dv_obj::default();
        obj.cq.in_ = crate::cq::ffi_cq(cq);
        obj.cq.out = &mut dvcq;
        // SAFETY: a live CQ; the out-struct is writable and outlives the
        // call.
        let rc = unsafe { ffi::mlx5dv_init_obj(&mut obj, u64::from(ffi::MLX5DV_OBJ_CQ)) };
        init_obj_result(rc, &what)?;
        let cqr = take_cq(&dvcq, &what)?;
        Ok((sq, cqr))
    }

    /// The send queue libmlx5 gives for `qp` (live while the `Sq` is).
    pub(super) fn take_sq(
        dv: &ffi::mlx5dv_qp,
        qp: NonNull<ffi::ibv_qp>,
        caps: QpCaps,
        what: &str,
    ) -> Result<Sq> {
        // SAFETY: `qp` is live; its number is set at creation.
        let qpn = unsafe { (*qp.as_ptr()).qp_num };
        let cnt = dv.sq.wqe_cnt;
        let unsupported = |why: String| Error::Unsupported {
            what: format!("the direct path on {what}: {why}"),
        };
        if cnt == 0 {
            return Err(refused(format!(
                "into_direct on {what}: a QP without a send queue cannot take the direct path"
            )));
        }
        if dv.sq.stride as usize != BB {
            return Err(unsupported(format!(
                "a send-queue stride of {} bytes (64 expected)",
                dv.sq.stride
            )));
        }
        // A DCI's WQEs take two basic blocks at least (control, datagram,
        // remote address, data: the writers count on it).
        if !cnt.is_power_of_two() || cnt > 1 << 15 || (T::DC && cnt < 2) {
            return Err(unsupported(format!(
                "a send queue of {cnt} basic blocks (a power of two up to 2^15 expected, \
                 two at least for a DCI)"
            )));
        }
        let (Some(buf), Some(dbrec), Some(reg)) = (
            NonNull::new(dv.sq.buf.cast::<u8>()),
            NonNull::new(dv.dbrec),
            NonNull::new(dv.bf.reg.cast::<u8>()),
        ) else {
            return Err(unsupported("libmlx5 gave a null queue pointer".into()));
        };
        Ok(Sq {
            buf,
            mask: (cnt - 1) as u16,
            wqe_cnt: cnt,
            pi: 0,
            ci: 0,
            posted: 0,
            retired: 0,
            // SAFETY: the record is two 32-bit words: receive, then send
            // (`MLX5_SND_DBR`).
            dbrec: unsafe { dbrec.add(ffi::MLX5_SND_DBR as usize) },
            bf_reg: reg,
            bf_size: dv.bf.size,
            bf_offset: 0,
            qpn8: qpn << 8,
            // The largest WQE the QP's capabilities allow, as libmlx5
            // sizes its send WQE: control, a DCI's datagram segment, remote
            // address and atomic segments, then the larger of the inline
            // data (with its count) and the data segments.
            max_blocks: {
                let overhead = 16 + if T::DC { 48 } else { 0 } + 32;
                let body = (caps.max_inline_data + 4).max(caps.max_send_sge.max(1) * 16);
                (overhead + body).div_ceil(64).clamp(1, cnt)
            },
            max_inline: caps.max_inline_data,
            slots: vec![Slot::default(); cnt as usize].into_boxed_slice(),
            streams: false,
            qp,
        })
    }
}

/// `mlx5dv_init_obj`'s return code as a result.
fn init_obj_result(rc: i32, what: &str) -> Result<()> {
    if rc == 0 {
        return Ok(());
    }
    Err(Error::Unsupported {
        what: format!(
            "mlx5dv_init_obj on {what} failed ({}): the direct path needs an mlx5 device",
            std::io::Error::from_raw_os_error(rc.abs())
        ),
    })
}

pub(super) fn take_cq(dv: &ffi::mlx5dv_cq, what: &str) -> Result<Cqr> {
    let unsupported = |why: String| Error::Unsupported {
        what: format!("the direct path on {what}: {why}"),
    };
    let entry = match dv.cqe_size {
        n @ (64 | 128) => n as usize,
        n => {
            return Err(unsupported(format!(
                "CQEs of {n} bytes (64 or 128 expected)"
            )))
        }
    };
    if !dv.cqe_cnt.is_power_of_two() || dv.cqe_cnt > 1 << 23 {
        return Err(unsupported(format!("a CQ of {} entries", dv.cqe_cnt)));
    }
    let (Some(buf), Some(dbrec)) = (NonNull::new(dv.buf.cast::<u8>()), NonNull::new(dv.dbrec))
    else {
        return Err(unsupported("libmlx5 gave a null CQ pointer".into()));
    };
    // libmlx5's consumer index of a CQ never polled is 0; a CQ polled
    // before continues from where the device's record says.
    // SAFETY: the CQ's doorbell record (`MLX5_CQ_SET_CI` first), live.
    let ci = u32::from_be(unsafe { dbrec.as_ptr().read_volatile() }) & 0x00ff_ffff;
    let cqr = Cqr {
        cqn: dv.cqn,
        uar: dv.cq_uar.cast::<u8>(),
        buf,
        mask: dv.cqe_cnt - 1,
        cqe_cnt: dv.cqe_cnt,
        entry,
        cqe64_at: (dv.cqe_size as usize) - 64,
        ci,
        dbrec,
    };
    // A CQE the device handed over at the consumer index is one no one
    // polled: another QP's (a dead one's, left on a CQ libmlx5 no longer
    // cleans), which the direct reader would take for its own.
    if cqr.ready() {
        return Err(refused(format!(
            "into_direct on {what}: the CQ holds completions not yet polled; poll them (or \
             use a new CQ) first"
        )));
    }
    Ok(cqr)
}
