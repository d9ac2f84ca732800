//! RC QPs: interop; and for the connected transports (RC, UC) the
//! RESET → INIT → RTR → RTS path and receives.

use super::checks::{check_psn, NO_PSN};
use super::{ConnectOptions, Connected, Endpoint, Mlx5Info, QpCaps, QpEx, QpParts, RcQp, SendOps};
use crate::addressing::ah::AhAttr;
use crate::cq::CompletionQueue;
use crate::error::{check, Error, Result};
use crate::ffi;
use crate::mr::{recv_wr, AccessFlags, Sge};
use crate::pd::ProtectionDomain;
use std::ptr::NonNull;

impl RcQp {
    /// Wraps an RC QP created elsewhere (e.g. by another crate) so that
    /// this crate's batches can post on it. The handle does not destroy it.
    ///
    /// # Safety
    ///
    /// `qp` must be a live RC QP created with `ibv_create_qp_ex` and
    /// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` including `send_ops`, in `pd`, with
    /// `send_cq`/`recv_cq` as its CQs and `caps` no larger than what it got;
    /// nothing else may post on it while this handle lives; it must stay
    /// alive until this handle is dropped. No send work request posted on
    /// it before may still be outstanding (its completion, or a later
    /// one's, polled; or the QP reset), as the batches' bound on the send
    /// queue assumes an empty queue, and none carried an id with bit 63
    /// set (see [`WrBatch::complete`](crate::WrBatch::complete)).
    pub unsafe fn from_raw(
        qp: NonNull<ffi::ibv_qp>,
        pd: &ProtectionDomain,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: QpCaps,
        send_ops: SendOps,
    ) -> Result<Self> {
        // SAFETY: the caller promises a live extended QP.
        let qpx = unsafe { ffi::ibv_qp_to_qp_ex(qp.as_ptr()) };
        let qpx = NonNull::new(qpx).ok_or_else(|| {
            Error::InvalidArgument(
                "ibv_qp_to_qp_ex returned NULL: the QP was not created with send ops".into(),
            )
        })?;
        QpEx::assemble(QpParts {
            qp,
            qpx,
            mlx5: Mlx5Info::default(),
            caps,
            send_ops,
            owned: false,
            pd,
            send_cq,
            recv_cq,
        })
    }
}

/// The connection of an RC or UC QP ([`Connected`]); a UC QP takes the same
/// calls, with fewer attributes (see [`UcQp`](crate::UcQp)).
impl<T: Connected> QpEx<T> {
    /// RESET → INIT on `port`, allowing `access` from remote peers.
    pub fn to_init(&self, port: u8, access: AccessFlags) -> Result<()> {
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qp_access_flags: access.bits(),
            ..Default::default()
        };
        let mask = ffi::IBV_QP_STATE
            | ffi::IBV_QP_PKEY_INDEX
            | ffi::IBV_QP_PORT
            | ffi::IBV_QP_ACCESS_FLAGS;
        self.modify(&mut a, mask, "INIT")
    }

    /// INIT → RTR towards `remote`. On a RoCE port, `opts` must name a
    /// source GID ([`ConnectOptions::gid_index`]): without one this is
    /// refused with an error that says how to choose it. A UC QP is given
    /// neither `max_dest_rd_atomic` nor `min_rnr_timer` (it has no reads
    /// and sends no RNR NAK).
    pub fn to_rtr(&self, remote: &Endpoint, opts: &ConnectOptions) -> Result<()> {
        check_psn(remote.psn)?;
        crate::addressing::roce::require_gid(self.pd.context(), opts)?;
        let av = AhAttr::towards(remote.lid, remote.gid, opts);
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RTR,
            path_mtu: opts.mtu as u32,
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: opts.max_dest_rd_atomic,
            min_rnr_timer: opts.min_rnr_timer,
            ah_attr: av.to_raw(),
            ..Default::default()
        };
        let mut mask = ffi::IBV_QP_STATE
            | ffi::IBV_QP_AV
            | ffi::IBV_QP_PATH_MTU
            | ffi::IBV_QP_DEST_QPN
            | ffi::IBV_QP_RQ_PSN;
        if T::RELIABLE {
            mask |= ffi::IBV_QP_MAX_DEST_RD_ATOMIC | ffi::IBV_QP_MIN_RNR_TIMER;
        }
        self.modify(&mut a, mask, "RTR")
    }

    /// RTR → RTS, sending from packet sequence number `sq_psn`. A UC QP is
    /// given the PSN only (no timeout, retry counts or `max_rd_atomic`:
    /// nothing is acknowledged or retried).
    pub fn to_rts(&self, sq_psn: u32, opts: &ConnectOptions) -> Result<()> {
        if T::RELIABLE {
            self.rts_from_rtr(sq_psn, opts)
        } else {
            super::uc::unreliable_rts(self, sq_psn)
        }
    }

    /// RESET → INIT → RTR → RTS: connects to `remote`, sending from the
    /// PSN this QP's [`endpoint`](Self::endpoint) gave the peer, so the PSN
    /// is given once. Refused when `endpoint` was not called.
    ///
    /// Every input is checked before the QP is touched, so a refused
    /// `connect_to` leaves it in RESET.
    pub fn connect_to(&self, remote: &Endpoint, opts: &ConnectOptions) -> Result<()> {
        let psn = self.local_psn.load(std::sync::atomic::Ordering::Relaxed);
        if psn == NO_PSN {
            return Err(Error::InvalidArgument(format!(
                "connect_to on {}: no endpoint() was made of this QP, so the peer has no \
                 PSN of it; call endpoint(psn, ..) and send its result to the peer first",
                self.describe()
            )));
        }
        self.connect(remote, psn, opts)
    }

    /// RESET → INIT → RTR → RTS: connects to `remote`, sending from
    /// `local_psn`, which must be the PSN this side gave the peer: when
    /// [`endpoint`](Self::endpoint) was called, a different one is refused
    /// (the peer would drop every packet). [`connect_to`](Self::connect_to)
    /// takes it from the endpoint.
    ///
    /// Every input is checked before the QP is touched, so a refused
    /// `connect` leaves it in RESET.
    pub fn connect(&self, remote: &Endpoint, local_psn: u32, opts: &ConnectOptions) -> Result<()> {
        check_psn(remote.psn)?;
        check_psn(local_psn)?;
        let given = self.local_psn.load(std::sync::atomic::Ordering::Relaxed);
        if given != NO_PSN && given != local_psn {
            return Err(Error::InvalidArgument(format!(
                "connect on {}: local PSN {local_psn:#x} differs from the PSN {given:#x} its \
                 endpoint() gave the peer (use connect_to, which takes it from there)",
                self.describe()
            )));
        }
        super::check_retries(opts)?;
        crate::addressing::roce::require_gid(self.pd.context(), opts)?;
        self.to_init(opts.port, opts.access)?;
        self.to_rtr(remote, opts)?;
        self.to_rts(local_psn, opts)
    }

    /// This QP's side of the exchange: its number, `psn`, and the port's
    /// LID and GID at `opts.gid_index`. The QP keeps `psn` as the one it
    /// sends from ([`connect_to`](Self::connect_to)).
    pub fn endpoint(&self, psn: u32, opts: &ConnectOptions) -> Result<Endpoint> {
        check_psn(psn)?;
        let ctx = self.pd.context();
        crate::addressing::roce::require_gid(ctx, opts)?;
        self.local_psn
            .store(psn, std::sync::atomic::Ordering::Relaxed);
        let port = ctx.query_port(opts.port)?;
        let gid = super::local_gid(ctx, opts)?;
        Ok(Endpoint {
            qpn: self.qp_num(),
            psn,
            lid: port.lid,
            gid,
        })
    }

    /// Posts one receive of the given SGEs (`ibv_post_recv(3)`); its
    /// completion carries `wr_id`.
    ///
    /// The device writes the buffers: take each from
    /// [`MemoryRegion::sge_mut`](crate::MemoryRegion::sge_mut) (an
    /// exclusive borrow; `.into()` makes it the [`Sge`] this takes) of a
    /// region registered with `LOCAL_WRITE` (without it the receive
    /// completes with `LOC_PROT_ERR`). This call being `unsafe`, the
    /// borrow ends when it returns; the `# Safety` rules below take over
    /// until the completion.
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # fn f(qp: &mut RcQp, mr: &mut MemoryRegion) -> Result<()> {
    /// let buf = mr.sge_mut(0..4096)?.into();
    /// // SAFETY: `mr` stays registered and untouched until the receive's
    /// // completion has been polled.
    /// unsafe { qp.post_recv(1, &[buf])? };
    /// # Ok(()) }
    /// ```
    ///
    /// Receives are taken from INIT on (so they can be posted before the
    /// QP is connected, as they usually are); a QP in RESET refuses them
    /// with [`Error::QpNotReady`], and nothing is posted. (libmlx5 refuses
    /// them too; soft-RoCE would queue them.)
    ///
    /// A QP made on a shared receive queue ([`QpBuilder::srq`](crate::QpBuilder::srq))
    /// has no receive queue: its receives are refused with
    /// [`Error::InvalidArgument`] (post them to the SRQ).
    ///
    /// # Safety
    ///
    /// The device writes the received data into the SGEs' memory after this
    /// returns: the regions must stay registered and their memory must not
    /// be read or written through other references until the receive's
    /// completion (or its flush) has been polled, the QP has been moved to
    /// RESET, or it has been destroyed. `wr_id` is below 2^63: ids with bit
    /// 63 are those of the scoped post and of the `tokio` feature's
    /// operations, which a completion carrying one could be taken for (see
    /// [`WrBatch::complete`](crate::WrBatch::complete)).
    ///
    /// Called inside a [`poll_each`](crate::CompletionQueue::poll_each)
    /// callback of the QP's receive CQ, the receive queue must have room
    /// for it (fewer than `max_recv_wr` receives outstanding): libmlx5 takes
    /// that CQ's lock to find the queue full, and the poll holds it on this
    /// thread, so a full queue would wait for ever instead of failing.
    pub unsafe fn post_recv(&mut self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        if self.srq.is_some() {
            return Err(Error::InvalidArgument(format!(
                "ibv_post_recv on {}: its receives come from its SRQ (ibv_create_qp(3)); \
                 post them with SharedReceiveQueue::post_recv",
                self.describe()
            )));
        }
        self.ready_to_receive("ibv_post_recv")?;
        let mut wr = recv_wr(wr_id, sges, self.caps.max_recv_sge, "the QP's max_recv_sge")?;
        let mut bad = std::ptr::null_mut();
        // SAFETY: the QP is live; `wr` and its SGE list are valid for the
        // call; the memory's lifetime is the caller's promise.
        let rc = unsafe { ffi::ibv_post_recv(self.as_ptr(), &mut wr, &mut bad) };
        check(rc, "ibv_post_recv", || {
            format!("{} wr_id {wr_id}", self.describe())
        })
    }
}
