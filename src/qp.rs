//! Queue pairs with the extended work-request API (`ibv_create_qp_ex(3)`):
//! creation, state transitions, receives.

use crate::ah::{AhAttr, Grh};
use crate::cq::CompletionQueue;
use crate::error::{check, Error, Result};
use crate::ffi;
use crate::mr::{AccessFlags, Sge};
use crate::pd::ProtectionDomain;
use crate::port::{Gid, Mtu};
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

mod sealed {
    pub trait Sealed {}
}

/// A QP transport: the type parameter of [`QpEx`] that decides which
/// builders and setters a work request has.
pub trait Transport: sealed::Sealed + 'static {
    /// The man page's name, e.g. `RC`.
    const NAME: &'static str;
}

/// Reliable connected (`IBV_QPT_RC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rc {}
impl sealed::Sealed for Rc {}
impl Transport for Rc {
    const NAME: &'static str = "RC";
}

bitflags::bitflags! {
    /// The work-request builders a QP is created with
    /// (`ibv_qp_init_attr_ex.send_ops_flags`, `enum ibv_qp_create_send_ops_flags`).
    /// A builder whose op was not asked for is refused with
    /// [`Error::Unsupported`] before any C call.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SendOps: u64 {
        /// `ibv_wr_rdma_write`.
        const RDMA_WRITE = ffi::IBV_QP_EX_WITH_RDMA_WRITE as u64;
        /// `ibv_wr_rdma_write_imm`.
        const RDMA_WRITE_WITH_IMM = ffi::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM as u64;
        /// `ibv_wr_send`.
        const SEND = ffi::IBV_QP_EX_WITH_SEND as u64;
        /// `ibv_wr_send_imm`.
        const SEND_WITH_IMM = ffi::IBV_QP_EX_WITH_SEND_WITH_IMM as u64;
        /// `ibv_wr_rdma_read`.
        const RDMA_READ = ffi::IBV_QP_EX_WITH_RDMA_READ as u64;
        /// `ibv_wr_atomic_cmp_swp`.
        const ATOMIC_CMP_AND_SWP = ffi::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP as u64;
        /// `ibv_wr_atomic_fetch_add`.
        const ATOMIC_FETCH_AND_ADD = ffi::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD as u64;
        /// `ibv_wr_local_inv`.
        const LOCAL_INV = ffi::IBV_QP_EX_WITH_LOCAL_INV as u64;
        /// `ibv_wr_bind_mw`.
        const BIND_MW = ffi::IBV_QP_EX_WITH_BIND_MW as u64;
        /// `ibv_wr_send_inv`.
        const SEND_WITH_INV = ffi::IBV_QP_EX_WITH_SEND_WITH_INV as u64;
    }
}

impl SendOps {
    /// Writes, reads, sends (with and without immediate) and both atomics:
    /// the usual set for an RC QP.
    pub fn rc_default() -> Self {
        SendOps::RDMA_WRITE
            | SendOps::RDMA_WRITE_WITH_IMM
            | SendOps::SEND
            | SendOps::SEND_WITH_IMM
            | SendOps::RDMA_READ
            | SendOps::ATOMIC_CMP_AND_SWP
            | SendOps::ATOMIC_FETCH_AND_ADD
    }
}

/// Queue sizes (`struct ibv_qp_cap`): asked for at creation, and what the
/// QP actually got ([`QpEx::caps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WR.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        }
    }
}

/// The state of a QP (`enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpState {
    /// Just created, or reset.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error: outstanding work requests are flushed.
    Err,
    /// Another value.
    Other(u32),
}

impl QpState {
    fn from_raw(raw: u32) -> Self {
        match raw {
            ffi::IBV_QPS_RESET => QpState::Reset,
            ffi::IBV_QPS_INIT => QpState::Init,
            ffi::IBV_QPS_RTR => QpState::Rtr,
            ffi::IBV_QPS_RTS => QpState::Rts,
            ffi::IBV_QPS_SQD => QpState::Sqd,
            ffi::IBV_QPS_SQE => QpState::Sqe,
            ffi::IBV_QPS_ERR => QpState::Err,
            other => QpState::Other(other),
        }
    }
}

/// What a peer needs to connect to a QP, exchanged out of band (the
/// LID/QPN/PSN/GID that `ibv_rc_pingpong` sends over TCP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The QP number.
    pub qpn: u32,
    /// The first packet sequence number (24 bits).
    pub psn: u32,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The port GID to address it by (RoCE, routed IB); zero when unused.
    pub gid: Gid,
}

/// How to connect an RC QP: the local port and GID, and the transport
/// parameters of the RTR and RTS transitions. `Default` gives the values
/// rdma-core's examples use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectOptions {
    /// The local port (from 1).
    pub port: u8,
    /// The local GID index to send from: required on RoCE (pick a RoCE v2
    /// entry), `None` on InfiniBand.
    pub gid_index: Option<u8>,
    /// Path MTU.
    pub mtu: Mtu,
    /// Service level.
    pub sl: u8,
    /// What remote peers may do to this QP's memory.
    pub access: AccessFlags,
    /// Local ACK timeout: 4.096 µs × 2^timeout (0 = infinite).
    pub timeout: u8,
    /// Transport retries before `RetryExcErr` (0..=7).
    pub retry_cnt: u8,
    /// RNR retries before `RnrRetryExcErr` (0..=6; 7 = infinite).
    pub rnr_retry: u8,
    /// RNR NAK timer code for incoming sends with no receive posted.
    pub min_rnr_timer: u8,
    /// Outstanding RDMA reads/atomics this QP issues.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA reads/atomics this QP accepts.
    pub max_dest_rd_atomic: u8,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            port: 1,
            gid_index: None,
            mtu: Mtu::Mtu1024,
            sl: 0,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
        }
    }
}

/// Creates a [`QpEx`]: set the sizes and send ops, then [`build`](Self::build).
#[must_use = "a builder does nothing until build() is called"]
pub struct QpBuilder<'a, T: Transport> {
    pd: &'a ProtectionDomain,
    send_cq: &'a CompletionQueue,
    recv_cq: &'a CompletionQueue,
    caps: QpCaps,
    send_ops: SendOps,
    sq_sig_all: bool,
    _t: PhantomData<T>,
}

impl<'a> QpBuilder<'a, Rc> {
    /// An RC QP in `pd` whose sends complete on `send_cq` and receives on
    /// `recv_cq` (which may be the same CQ), with [`QpCaps::default`] and
    /// [`SendOps::rc_default`].
    pub fn rc(
        pd: &'a ProtectionDomain,
        send_cq: &'a CompletionQueue,
        recv_cq: &'a CompletionQueue,
    ) -> Self {
        QpBuilder {
            pd,
            send_cq,
            recv_cq,
            caps: QpCaps::default(),
            send_ops: SendOps::rc_default(),
            sq_sig_all: false,
            _t: PhantomData,
        }
    }
}

impl<T: Transport> QpBuilder<'_, T> {
    /// Queue sizes to ask for.
    pub fn caps(&mut self, caps: QpCaps) -> &mut Self {
        self.caps = caps;
        self
    }

    /// The builders the QP must support.
    pub fn send_ops(&mut self, ops: SendOps) -> &mut Self {
        self.send_ops = ops;
        self
    }

    /// Signal a completion for every send WR, whatever its flags.
    pub fn sq_sig_all(&mut self, on: bool) -> &mut Self {
        self.sq_sig_all = on;
        self
    }

    /// Creates the QP (`ibv_create_qp_ex(3)`), in the RESET state.
    pub fn build(&self) -> Result<QpEx<T>> {
        let ctx = self.pd.context();
        for (what, cq) in [("send CQ", self.send_cq), ("receive CQ", self.recv_cq)] {
            if cq.context().as_ptr() != ctx.as_ptr() {
                return Err(Error::InvalidArgument(format!(
                    "the {what} belongs to {}, the PD to {}",
                    cq.context().name(),
                    ctx.name()
                )));
            }
        }
        let c = self.caps;
        let mut attr = ffi::ibv_qp_init_attr_ex {
            send_cq: ffi_cq(self.send_cq),
            recv_cq: ffi_cq(self.recv_cq),
            cap: ffi::ibv_qp_cap {
                max_send_wr: c.max_send_wr,
                max_recv_wr: c.max_recv_wr,
                max_send_sge: c.max_send_sge,
                max_recv_sge: c.max_recv_sge,
                max_inline_data: c.max_inline_data,
            },
            qp_type: ffi::IBV_QPT_RC,
            sq_sig_all: i32::from(self.sq_sig_all),
            comp_mask: ffi::IBV_QP_INIT_ATTR_PD | ffi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
            pd: self.pd.as_ptr(),
            send_ops_flags: self.send_ops.bits(),
            ..Default::default()
        };
        // SAFETY: the context, PD and CQs are live (held by `self`); `attr`
        // is initialised; NULL is handled.
        let qp = unsafe { ffi::ibv_create_qp_ex(ctx.as_ptr(), &mut attr) };
        let what = || {
            format!(
                "{} QP, {:?}, send ops {:?}, on {}",
                T::NAME,
                c,
                self.send_ops,
                ctx.name()
            )
        };
        let qp = NonNull::new(qp).ok_or_else(|| Error::last_os("ibv_create_qp_ex", what()))?;
        // SAFETY: the QP was created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, so
        // it has an extended QP.
        let qpx = unsafe { ffi::ibv_qp_to_qp_ex(qp.as_ptr()) };
        let Some(qpx) = NonNull::new(qpx) else {
            // SAFETY: created above, not shared; destroyed once.
            unsafe { ffi::ibv_destroy_qp(qp.as_ptr()) };
            return Err(Error::Unsupported {
                what: format!("ibv_qp_to_qp_ex: no extended QP for {}", what()),
            });
        };
        let qp = QpEx {
            qp,
            qpx,
            caps: QpCaps {
                max_send_wr: attr.cap.max_send_wr,
                max_recv_wr: attr.cap.max_recv_wr,
                max_send_sge: attr.cap.max_send_sge,
                max_recv_sge: attr.cap.max_recv_sge,
                max_inline_data: attr.cap.max_inline_data,
            },
            send_ops: self.send_ops,
            owned: true,
            pd: self.pd.clone(),
            send_cq: self.send_cq.clone(),
            recv_cq: self.recv_cq.clone(),
            _t: PhantomData,
        };
        qp.check_entries()?;
        Ok(qp)
    }
}

fn ffi_cq(cq: &CompletionQueue) -> *mut ffi::ibv_cq {
    // SAFETY: a pure pointer cast of a live extended CQ.
    unsafe { ffi::ibv_cq_ex_to_cq(cq.as_ptr()) }
}

/// A queue pair with the extended work-request API. `T` is its transport
/// ([`Rc`]); posting goes through [`QpEx::batch`].
///
/// Owned by one value (not cloneable): posting needs `&mut self`, so two
/// threads cannot interleave batches on one QP. It keeps its PD and CQs
/// alive, and is destroyed on drop.
pub struct QpEx<T: Transport> {
    pub(crate) qp: NonNull<ffi::ibv_qp>,
    pub(crate) qpx: NonNull<ffi::ibv_qp_ex>,
    caps: QpCaps,
    send_ops: SendOps,
    owned: bool,
    // Dropped after the QP is destroyed (fields drop after Drop::drop).
    pd: ProtectionDomain,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    _t: PhantomData<T>,
}

// SAFETY: the QP is used through verbs calls that are safe from any thread;
// posting needs `&mut self`, so one thread at a time builds a batch.
unsafe impl<T: Transport> Send for QpEx<T> {}
// SAFETY: `&self` methods are state transitions and queries, which the
// provider and kernel serialise.
unsafe impl<T: Transport> Sync for QpEx<T> {}

impl<T: Transport> Drop for QpEx<T> {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: created by this value and destroyed once; no batch is
            // alive (a batch borrows the QP mutably).
            let rc = unsafe { ffi::ibv_destroy_qp(self.qp.as_ptr()) };
            crate::report_destroy_failure("ibv_destroy_qp", rc, self.pd.context().name());
        }
    }
}

impl<T: Transport> QpEx<T> {
    /// Wraps a QP created elsewhere (e.g. by another crate) so that this
    /// crate's batches can post on it. The handle does not destroy it.
    ///
    /// # Safety
    ///
    /// `qp` must be a live QP of transport `T` created with
    /// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` including `send_ops`, in `pd`, with
    /// `send_cq`/`recv_cq` as its CQs and `caps` no larger than what it got;
    /// nothing else may post on it while this handle lives; it must stay
    /// alive until this handle is dropped.
    pub unsafe fn from_raw(
        qp: NonNull<ffi::ibv_qp>,
        pd: &ProtectionDomain,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        caps: QpCaps,
        send_ops: SendOps,
    ) -> Result<Self> {
        // SAFETY: the caller promises an extended QP.
        let qpx = unsafe { ffi::ibv_qp_to_qp_ex(qp.as_ptr()) };
        let qpx = NonNull::new(qpx).ok_or_else(|| {
            Error::InvalidArgument(
                "ibv_qp_to_qp_ex returned NULL: the QP was not created with send ops".into(),
            )
        })?;
        let qp = QpEx {
            qp,
            qpx,
            caps,
            send_ops,
            owned: false,
            pd: pd.clone(),
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            _t: PhantomData,
        };
        qp.check_entries()?;
        Ok(qp)
    }

    /// Checks, once, that the provider filled the function-table entries
    /// the batch calls: start/complete/abort, the data setters, and the
    /// builder of every op in `send_ops`. The batch then never calls a
    /// NULL entry.
    fn check_entries(&self) -> Result<()> {
        // SAFETY: `qpx` is the live extended QP.
        let q = unsafe { self.qpx.as_ref() };
        let mut missing = Vec::new();
        let mut need = |present: bool, name: &'static str| {
            if !present {
                missing.push(name);
            }
        };
        need(q.wr_start.is_some(), "wr_start");
        need(q.wr_complete.is_some(), "wr_complete");
        need(q.wr_abort.is_some(), "wr_abort");
        need(q.wr_set_sge.is_some(), "wr_set_sge");
        need(q.wr_set_sge_list.is_some(), "wr_set_sge_list");
        need(q.wr_set_inline_data.is_some(), "wr_set_inline_data");
        let ops = self.send_ops;
        let checks = [
            (
                SendOps::RDMA_WRITE,
                q.wr_rdma_write.is_some(),
                "wr_rdma_write",
            ),
            (
                SendOps::RDMA_WRITE_WITH_IMM,
                q.wr_rdma_write_imm.is_some(),
                "wr_rdma_write_imm",
            ),
            (SendOps::SEND, q.wr_send.is_some(), "wr_send"),
            (
                SendOps::SEND_WITH_IMM,
                q.wr_send_imm.is_some(),
                "wr_send_imm",
            ),
            (SendOps::RDMA_READ, q.wr_rdma_read.is_some(), "wr_rdma_read"),
            (
                SendOps::ATOMIC_CMP_AND_SWP,
                q.wr_atomic_cmp_swp.is_some(),
                "wr_atomic_cmp_swp",
            ),
            (
                SendOps::ATOMIC_FETCH_AND_ADD,
                q.wr_atomic_fetch_add.is_some(),
                "wr_atomic_fetch_add",
            ),
            (SendOps::LOCAL_INV, q.wr_local_inv.is_some(), "wr_local_inv"),
            (SendOps::BIND_MW, q.wr_bind_mw.is_some(), "wr_bind_mw"),
            (
                SendOps::SEND_WITH_INV,
                q.wr_send_inv.is_some(),
                "wr_send_inv",
            ),
        ];
        for (op, present, name) in checks {
            if ops.contains(op) {
                need(present, name);
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(Error::Unsupported {
                what: format!(
                    "the provider of {} left these ibv_qp_ex entries NULL: {}",
                    self.pd.context().name(),
                    missing.join(", ")
                ),
            })
        }
    }

    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        // SAFETY: the QP is live.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    /// The sizes the QP got (at least what was asked).
    pub fn caps(&self) -> QpCaps {
        self.caps
    }

    /// The builders it was created with.
    pub fn send_ops(&self) -> SendOps {
        self.send_ops
    }

    /// The raw QP, valid while this handle lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_qp {
        self.qp.as_ptr()
    }

    /// The raw extended QP, valid while this handle lives.
    pub fn as_qp_ex_ptr(&self) -> *mut ffi::ibv_qp_ex {
        self.qpx.as_ptr()
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The CQ sends complete on.
    pub fn send_cq(&self) -> &CompletionQueue {
        &self.send_cq
    }

    /// The CQ receives complete on.
    pub fn recv_cq(&self) -> &CompletionQueue {
        &self.recv_cq
    }

    /// The current state (`ibv_query_qp(3)`).
    pub fn state(&self) -> Result<QpState> {
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
        check(rc, "ibv_query_qp", || self.describe())?;
        Ok(QpState::from_raw(attr.qp_state))
    }

    fn describe(&self) -> String {
        format!(
            "{} QP {:#x} on {}",
            T::NAME,
            self.qp_num(),
            self.pd.context().name()
        )
    }

    fn modify(&self, attr: &mut ffi::ibv_qp_attr, mask: u32, to: &str) -> Result<()> {
        // SAFETY: the QP is live; `attr` is initialised for every bit of
        // `mask`.
        let rc = unsafe { ffi::ibv_modify_qp(self.as_ptr(), attr, mask as i32) };
        check(rc, "ibv_modify_qp", || {
            format!("{} to {to}", self.describe())
        })
    }

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

    /// INIT → RTR towards `remote`.
    pub fn to_rtr(&self, remote: &Endpoint, opts: &ConnectOptions) -> Result<()> {
        check_psn(remote.psn)?;
        let av = AhAttr {
            port: opts.port,
            dlid: remote.lid,
            sl: opts.sl,
            grh: opts.gid_index.map(|sgid_index| Grh {
                dgid: remote.gid,
                sgid_index,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            }),
        };
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
        let mask = ffi::IBV_QP_STATE
            | ffi::IBV_QP_AV
            | ffi::IBV_QP_PATH_MTU
            | ffi::IBV_QP_DEST_QPN
            | ffi::IBV_QP_RQ_PSN
            | ffi::IBV_QP_MAX_DEST_RD_ATOMIC
            | ffi::IBV_QP_MIN_RNR_TIMER;
        self.modify(&mut a, mask, "RTR")
    }

    /// RTR → RTS, sending from packet sequence number `sq_psn`.
    pub fn to_rts(&self, sq_psn: u32, opts: &ConnectOptions) -> Result<()> {
        check_psn(sq_psn)?;
        if opts.retry_cnt > 7 || opts.rnr_retry > 7 {
            return Err(Error::OutOfRange {
                what: "retry_cnt / rnr_retry",
                value: u64::from(opts.retry_cnt.max(opts.rnr_retry)),
                limit: "at most 7 (3-bit fields)".into(),
            });
        }
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RTS,
            timeout: opts.timeout,
            retry_cnt: opts.retry_cnt,
            rnr_retry: opts.rnr_retry,
            sq_psn,
            max_rd_atomic: opts.max_rd_atomic,
            ..Default::default()
        };
        let mask = ffi::IBV_QP_STATE
            | ffi::IBV_QP_TIMEOUT
            | ffi::IBV_QP_RETRY_CNT
            | ffi::IBV_QP_RNR_RETRY
            | ffi::IBV_QP_SQ_PSN
            | ffi::IBV_QP_MAX_QP_RD_ATOMIC;
        self.modify(&mut a, mask, "RTS")
    }

    /// RESET → INIT → RTR → RTS: connects to `remote`, sending from
    /// `local_psn` (the PSN this side gave the peer in its [`Endpoint`]).
    pub fn connect(&self, remote: &Endpoint, local_psn: u32, opts: &ConnectOptions) -> Result<()> {
        self.to_init(opts.port, opts.access)?;
        self.to_rtr(remote, opts)?;
        self.to_rts(local_psn, opts)
    }

    /// This QP's side of the exchange: its number, `psn`, and the port's
    /// LID and GID at `opts.gid_index`.
    pub fn endpoint(&self, psn: u32, opts: &ConnectOptions) -> Result<Endpoint> {
        check_psn(psn)?;
        let ctx = self.pd.context();
        let port = ctx.query_port(opts.port)?;
        let gid = match opts.gid_index {
            Some(i) => ctx.gid(opts.port, u32::from(i))?,
            None => Gid::default(),
        };
        Ok(Endpoint {
            qpn: self.qp_num(),
            psn,
            lid: port.lid,
            gid,
        })
    }

    /// Moves the QP to ERR: outstanding work requests complete with
    /// `WrFlushErr`.
    pub fn to_error(&self) -> Result<()> {
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_ERR,
            ..Default::default()
        };
        self.modify(&mut a, ffi::IBV_QP_STATE, "ERR")
    }

    /// Moves the QP to RESET, from which it can be connected again.
    pub fn reset(&self) -> Result<()> {
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RESET,
            ..Default::default()
        };
        self.modify(&mut a, ffi::IBV_QP_STATE, "RESET")
    }

    /// Posts one receive of the given SGEs (`ibv_post_recv(3)`); its
    /// completion carries `wr_id`.
    ///
    /// # Safety
    ///
    /// The device writes the received data into the SGEs' memory after this
    /// returns: the regions must stay registered and their memory must not
    /// be read or written through other references until the receive's
    /// completion (or its flush) has been polled.
    pub unsafe fn post_recv(&mut self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        if sges.len() > self.caps.max_recv_sge as usize {
            return Err(Error::OutOfRange {
                what: "receive SGE count",
                value: sges.len() as u64,
                limit: format!("at most {} (the QP's max_recv_sge)", self.caps.max_recv_sge),
            });
        }
        let mut wr = ffi::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: Sge::as_raw_slice(sges).as_ptr() as *mut ffi::ibv_sge,
            num_sge: sges.len() as i32,
        };
        let mut bad = std::ptr::null_mut();
        // SAFETY: the QP is live; `wr` and its SGE list are valid for the
        // call; the memory's lifetime is the caller's promise.
        let rc = unsafe { ffi::ibv_post_recv(self.as_ptr(), &mut wr, &mut bad) };
        check(rc, "ibv_post_recv", || {
            format!("{} wr_id {wr_id}", self.describe())
        })
    }
}

fn check_psn(psn: u32) -> Result<()> {
    if psn > 0x00FF_FFFF {
        return Err(Error::OutOfRange {
            what: "PSN",
            value: u64::from(psn),
            limit: "at most 0xffffff (24 bits)".into(),
        });
    }
    Ok(())
}

impl<T: Transport> fmt::Debug for QpEx<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QpEx")
            .field("transport", &T::NAME)
            .field("qp_num", &format_args!("{:#x}", self.qp_num()))
            .field("caps", &self.caps)
            .field("send_ops", &self.send_ops)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_is_24_bits() {
        assert!(check_psn(0).is_ok());
        assert!(check_psn(0x00FF_FFFF).is_ok());
        assert!(matches!(
            check_psn(0x0100_0000),
            Err(Error::OutOfRange {
                what: "PSN",
                value: 0x0100_0000,
                ..
            })
        ));
        assert!(check_psn(u32::MAX).is_err());
    }

    #[test]
    fn qp_states_map_from_the_c_values() {
        assert_eq!(QpState::from_raw(ffi::IBV_QPS_RESET), QpState::Reset);
        assert_eq!(QpState::from_raw(ffi::IBV_QPS_RTS), QpState::Rts);
        assert_eq!(QpState::from_raw(ffi::IBV_QPS_ERR), QpState::Err);
        assert_eq!(QpState::from_raw(99), QpState::Other(99));
    }

    #[test]
    fn default_send_ops_are_the_rc_set() {
        let ops = SendOps::rc_default();
        assert!(ops.contains(SendOps::RDMA_WRITE | SendOps::RDMA_READ | SendOps::SEND));
        assert!(!ops.contains(SendOps::BIND_MW));
        assert_eq!(
            SendOps::RDMA_WRITE.bits(),
            u64::from(ffi::IBV_QP_EX_WITH_RDMA_WRITE)
        );
    }
}
