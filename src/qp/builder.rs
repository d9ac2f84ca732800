//! Creating QPs: `ibv_create_qp_ex(3)` for plain RC QPs, and
//! `mlx5dv_create_qp(3)` for DCIs and for RC QPs with mlx5 send ops.

use super::{DcInitiator, ReliableConnection, UnreliableDatagram};
use super::{DciStreams, Mlx5Info, Mlx5SendOps, QpCaps, QpEx, QpParts, SendOps, Transport};
use crate::cq::ffi_cq;
use crate::cq::CompletionQueue;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ffi;
use crate::pd::ProtectionDomain;
use crate::srq::SharedReceiveQueue;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// Creates a [`QpEx`]: choose the transport ([`QpBuilder::rc`],
/// [`QpBuilder::uc`], [`QpBuilder::dci`], ...), set sizes and send ops,
/// then [`build`](Self::build).
#[must_use = "a builder does nothing until build() is called"]
pub struct QpBuilder<'a, T: Transport> {
    pd: &'a ProtectionDomain,
    send_cq: &'a CompletionQueue,
    recv_cq: &'a CompletionQueue,
    pub(crate) caps: QpCaps,
    send_ops: SendOps,
    mlx5_ops: Mlx5SendOps,
    streams: Option<DciStreams>,
    /// `mlx5dv_qp_init_attr.create_flags`.
    mlx5_create_flags: u32,
    sq_sig_all: bool,
    /// The SRQ its receives come from ([`QpBuilder::srq`]).
    srq: Option<&'a SharedReceiveQueue>,
    _t: PhantomData<T>,
}

impl<T: Transport> std::fmt::Debug for QpBuilder<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QpBuilder")
            .field("transport", &T::NAME)
            .field("caps", &self.caps)
            .field("send_ops", &self.send_ops)
            .field("mlx5_send_ops", &self.mlx5_ops)
            .field("dci_streams", &self.streams)
            .field("mlx5_create_flags", &self.mlx5_create_flags)
            .field("sq_sig_all", &self.sq_sig_all)
            .field("srq", &self.srq)
            .finish()
    }
}

impl<'a, T: Transport> QpBuilder<'a, T> {
    pub(super) fn new(
        pd: &'a ProtectionDomain,
        send_cq: &'a CompletionQueue,
        recv_cq: &'a CompletionQueue,
        caps: QpCaps,
    ) -> Self {
        QpBuilder {
            pd,
            send_cq,
            recv_cq,
            caps,
            send_ops: SendOps::rc_default(),
            mlx5_ops: Mlx5SendOps::empty(),
            streams: None,
            mlx5_create_flags: 0,
            sq_sig_all: false,
            srq: None,
            _t: PhantomData,
        }
    }
}

impl<'a> QpBuilder<'a, ReliableConnection> {
    /// An RC QP in `pd` whose sends complete on `send_cq` and receives on
    /// `recv_cq` (which may be the same CQ), with [`QpCaps::default`] and
    /// [`SendOps::rc_default`].
    pub fn rc(
        pd: &'a ProtectionDomain,
        send_cq: &'a CompletionQueue,
        recv_cq: &'a CompletionQueue,
    ) -> Self {
        Self::new(pd, send_cq, recv_cq, QpCaps::default())
    }

    /// Takes the QP's receives from `srq` (`ibv_qp_init_attr_ex.srq`,
    /// `ibv_create_srq(3)`): the QP gets no receive queue of its own
    /// (`max_recv_wr` and `max_recv_sge` 0, whatever [`caps`](Self::caps)
    /// says), [`RcQp::post_recv`](crate::RcQp::post_recv) on it is refused,
    /// and what its peer sends lands in the SRQ's receives, completing on
    /// this builder's receive CQ with this QP's number
    /// ([`PolledWc::qp_num`](crate::PolledWc::qp_num)), so one SRQ can feed
    /// many QPs and each completion still says which one it came in on.
    ///
    /// The SRQ must be of the PD's device context (else
    /// [`Error::InvalidArgument`], before any C call). The QP keeps the SRQ
    /// alive: an SRQ is destroyed only after every QP on it
    /// (`ibv_destroy_srq` fails with `EBUSY` while one is left).
    ///
    /// A QP on an SRQ that enters ERR takes no more of its receives; mlx5
    /// devices then raise [`AsyncEvent::QpLastWqeReached`](crate::AsyncEvent::QpLastWqeReached)
    /// for it (so does the software device), after which it may be
    /// destroyed without losing a receive. Soft-RoCE of Linux 6.1 raises
    /// no such event: do not wait for it there.
    pub fn srq(&mut self, srq: &'a SharedReceiveQueue) -> &mut Self {
        self.srq = Some(srq);
        self
    }
}

impl<'a> QpBuilder<'a, UnreliableDatagram> {
    /// A UD QP (`IBV_QPT_UD`) in `pd` whose sends complete on `send_cq`
    /// and receives on `recv_cq` (which may be the same CQ), with
    /// [`QpCaps::default`] and the send ops a UD QP has:
    /// [`SendOps::SEND`] and [`SendOps::SEND_WITH_IMM`] (any other is
    /// refused by [`build`](Self::build) with
    /// [`Error::InvalidArgument`], before any C call). After `build`,
    /// [`UdQp::ready`](crate::UdQp::ready) (or
    /// [`ready_with`](crate::UdQp::ready_with)) moves it to RTS.
    ///
    /// With one CQ for both or two, a receive's completion says who sent
    /// it: [`WorkCompletion`](crate::WorkCompletion) (from
    /// [`CompletionQueue::wait`](crate::CompletionQueue::wait) and the
    /// polls) and [`PolledWc`](crate::PolledWc) (in
    /// [`poll_each`](crate::CompletionQueue::poll_each)) carry the sender's
    /// QP number (`src_qp`), its LID (`slid`) and whether the buffer starts
    /// with its GRH (`wc_flags`' [`WcFlags::GRH`](crate::WcFlags::GRH)),
    /// which is what an answer needs
    /// ([`AhAttr::from_received`](crate::AhAttr::from_received)); a
    /// receive a scoped post polled meanwhile on a shared CQ keeps them in
    /// the CQ's backlog. To be reached, a UD QP hands out its
    /// [`UdEndpoint`](crate::UdEndpoint)
    /// ([`UdQp::endpoint`](crate::UdQp::endpoint)), which the sender makes
    /// into a [`UdDest`](crate::UdDest).
    pub fn ud(
        pd: &'a ProtectionDomain,
        send_cq: &'a CompletionQueue,
        recv_cq: &'a CompletionQueue,
    ) -> Self {
        // A UD server answers each sender: its CQ's owned completions
        // read them.
        recv_cq.read_senders();
        let mut b = Self::new(pd, send_cq, recv_cq, QpCaps::default());
        b.send_ops = super::ud::UD_SEND_OPS;
        b
    }
}

impl<'a> QpBuilder<'a, DcInitiator> {
    /// An mlx5 DCI (`IBV_QPT_DRIVER`, `MLX5DV_DCTYPE_DCI`) in `pd`: a send
    /// queue that reaches any DCT, each work request addressed with a
    /// [`DcAddr`](crate::DcAddr) (a [`RemoteDct`](crate::RemoteDct)'s
    /// [`addr`](crate::RemoteDct::addr)). It has no receive queue. After
    /// [`build`](Self::build), [`DciQp::ready`](crate::DciQp::ready)
    /// moves it to RTS. A whole DCI and DCT program is under
    /// [`Dct`](crate::Dct#dc-start-to-finish) (`examples/hello_dc.rs`).
    pub fn dci(pd: &'a ProtectionDomain, send_cq: &'a CompletionQueue) -> Self {
        let caps = QpCaps {
            max_recv_wr: 0,
            max_recv_sge: 0,
            ..QpCaps::default()
        };
        Self::new(pd, send_cq, send_cq, caps)
    }

    /// Creates the DCI with DCI streams
    /// (`MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS`): 2^`log_num_concurent`
    /// concurrent streams, 2^`log_num_errored` of which may be in error.
    /// Bounded by the device's `dci_streams_caps`.
    pub fn dci_streams(&mut self, log_num_concurent: u8, log_num_errored: u8) -> &mut Self {
        self.streams = Some(DciStreams {
            log_num_concurent,
            log_num_errored,
        });
        self
    }
}

impl<T: Transport> QpBuilder<'_, T> {
    /// Queue sizes to ask for. For more than 4 list entries or 3
    /// interleaved entries per mkey registration, raise `max_inline_data`
    /// (the WQE size follows it): `16 × entries - 4` bytes for a list,
    /// `16 × (entries + 1) - 4` for an interleaved layout.
    pub fn caps(&mut self, caps: QpCaps) -> &mut Self {
        self.caps = caps;
        self
    }

    /// Sizes the WQE for mkey registrations of up to `list_entries` list
    /// entries and `interleaved_entries` interleaved entries
    /// (mlx5dv_wr_post(3): more than 4 list or 3 interleaved entries need
    /// a larger WQE, "done using the max_inline_data attribute"): raises
    /// `max_inline_data` to `16 × list_entries - 4` and
    /// `16 × (interleaved_entries + 1) - 4` where that is more.
    pub fn mkey_entries(&mut self, list_entries: u16, interleaved_entries: u16) -> &mut Self {
        let list = (16 * u32::from(list_entries)).saturating_sub(4);
        let interleaved = (16 * (u32::from(interleaved_entries) + 1)).saturating_sub(4);
        self.caps.max_inline_data = self.caps.max_inline_data.max(list).max(interleaved);
        self
    }

    /// The generic builders the QP must support.
    pub fn send_ops(&mut self, ops: SendOps) -> &mut Self {
        self.send_ops = ops;
        self
    }

    /// The mlx5 builders the QP must support; any makes the QP with
    /// `mlx5dv_create_qp`, on mlx5 devices only.
    pub fn mlx5_send_ops(&mut self, ops: Mlx5SendOps) -> &mut Self {
        self.mlx5_ops = ops;
        self
    }

    /// Creates the QP with `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`: small
    /// received data always goes to the receive buffer, never into the CQE
    /// (needed when receive SGEs are zero-based mkey offsets). mlx5 only:
    /// the QP is made with `mlx5dv_create_qp`.
    pub fn disable_scatter_to_cqe(&mut self) -> &mut Self {
        self.mlx5_create_flags |= ffi::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE;
        self
    }

    /// Whether the QP must be made with `mlx5dv_create_qp`.
    fn mlx5_path(&self) -> bool {
        T::DC || !self.mlx5_ops.is_empty() || self.mlx5_create_flags != 0
    }

    /// Signal a completion for every send WR, whatever its flags.
    pub fn sq_sig_all(&mut self, on: bool) -> &mut Self {
        self.sq_sig_all = on;
        self
    }

    fn describe(&self) -> String {
        let mut s = format!(
            "{} QP, {:?}, send ops {:?}",
            T::NAME,
            self.caps,
            self.send_ops
        );
        if !self.mlx5_ops.is_empty() {
            s += &format!(", mlx5 send ops {:?}", self.mlx5_ops);
        }
        if let Some(st) = self.streams {
            s += &format!(", {st:?}");
        }
        if self.mlx5_create_flags != 0 {
            s += &format!(", mlx5 create flags {:#x}", self.mlx5_create_flags);
        }
        if self.srq.is_some() {
            s += ", on an SRQ";
        }
        s + &format!(", on {}", self.pd.context().name())
    }

    /// Checks what can be checked before any C call.
    fn check(&self, ctx: &Context) -> Result<()> {
        if T::QP_TYPE == ffi::IBV_QPT_XRC_SEND {
            crate::xrc::require_xrc(ctx, &self.describe())?;
        }
        for (what, cq) in [("send CQ", self.send_cq), ("receive CQ", self.recv_cq)] {
            if cq.context().as_ptr() != ctx.as_ptr() {
                return Err(Error::InvalidArgument(format!(
                    "the {what} belongs to {}, the PD to {}",
                    cq.context().name(),
                    ctx.name()
                )));
            }
        }
        if let Some(srq) = self.srq {
            if srq.is_xrc() {
                return Err(Error::InvalidArgument(format!(
                    "an XRC SRQ feeds XRC target QPs only, not a {} QP (SharedReceiveQueue::new)",
                    T::NAME
                )));
            }
            let other = srq.pd().context();
            if other.as_ptr() != ctx.as_ptr() {
                return Err(Error::InvalidArgument(format!(
                    "the SRQ belongs to {}, the PD to {}",
                    other.name(),
                    ctx.name()
                )));
            }
        }
        check_transport_ops::<T>(self.send_ops, self.mlx5_ops)?;
        let rc_only = Mlx5SendOps::MR_LIST | Mlx5SendOps::MR_INTERLEAVED;
        if T::DC && self.mlx5_ops.intersects(rc_only) {
            return Err(Error::InvalidArgument(format!(
                "{:?} are RC-only builders (mlx5dv_wr_post(3)); a {} cannot have them",
                self.mlx5_ops & rc_only,
                T::NAME
            )));
        }
        if T::QP_TYPE == ffi::IBV_QPT_UD {
            super::ud::check_builder(self.send_ops, self.mlx5_ops, self.mlx5_create_flags)?;
        }
        if let Some(st) = self.streams {
            // Stream ids are 16 bits: 2^16 streams at most. (The device's
            // own limits, dci_streams_caps, are checked by the device.)
            if st.log_num_concurent > 16 || st.log_num_errored > 16 {
                return Err(Error::OutOfRange {
                    what: "DCI streams log_num_concurent / log_num_errored",
                    value: u64::from(st.log_num_errored.max(st.log_num_concurent)),
                    limit: "at most 16 each (stream ids are 16 bits)".into(),
                });
            }
        }
        if self.mlx5_path() && !ctx.is_mlx5() {
            return Err(Error::Unsupported {
                what: format!(
                    "mlx5dv_create_qp ({}): {} is not an mlx5 device",
                    self.describe(),
                    ctx.name()
                ),
            });
        }
        Ok(())
    }

    /// Creates the QP, in the RESET state: with `mlx5dv_create_qp` for a
    /// DCI or when mlx5 send ops were asked for, else with
    /// `ibv_create_qp_ex`. A QP that does not support a requested op fails
    /// with [`Error::Unsupported`] naming what was asked.
    pub fn build(&self) -> Result<QpEx<T>> {
        let ctx = self.pd.context();
        self.check(ctx)?;
        crate::qp_spec::check_atomic_write(ctx, self.send_ops)?;
        let max_memcpy = if self.mlx5_ops.contains(Mlx5SendOps::MEMCPY) {
            let max = ctx.mlx5_caps()?.max_wr_memcpy_length.unwrap_or(0);
            if max == 0 {
                return Err(Error::Unsupported {
                    what: format!(
                        "memcpy on {}: max_wr_memcpy_length is 0 (mlx5dv_wr_post(3): \
                         the device doesn't support memcpy operations)",
                        ctx.name()
                    ),
                });
            }
            max
        } else {
            0
        };
        let mut c = self.caps;
        if self.srq.is_some() {
            // No receive queue of its own (ibv_create_qp(3): ignored with
            // an SRQ); recorded as 0, so nothing sizes receives by it.
            c.max_recv_wr = 0;
            c.max_recv_sge = 0;
        }
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
            qp_type: T::QP_TYPE,
            sq_sig_all: i32::from(self.sq_sig_all),
            comp_mask: ffi::IBV_QP_INIT_ATTR_PD | ffi::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
            pd: self.pd.as_ptr(),
            send_ops_flags: self.send_ops.bits(),
            srq: self
                .srq
                .map_or(std::ptr::null_mut(), SharedReceiveQueue::raw),
            ..Default::default()
        };
        let mlx5_path = self.mlx5_path();
        let (call, qp) = if mlx5_path {
            let mut dv = self.dv_attr();
            // SAFETY: the context, PD and CQs are live (held by `self`); both
            // attribute structs are initialised; NULL is handled.
            let qp = unsafe { ffi::mlx5dv_create_qp(ctx.as_ptr(), &mut attr, &mut dv) };
            ("mlx5dv_create_qp", qp)
        } else {
            // SAFETY: as above.
            let qp = unsafe { ffi::ibv_create_qp_ex(ctx.as_ptr(), &mut attr) };
            ("ibv_create_qp_ex", qp)
        };
        let qp = NonNull::new(qp).ok_or_else(|| {
            crate::qp_spec::name_refused_ops(Error::last_os(call, self.describe()), self.send_ops)
        })?;
        // SAFETY: the QP was created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, so
        // it has an extended QP.
        let qpx = NonNull::new(unsafe { ffi::ibv_qp_to_qp_ex(qp.as_ptr()) });
        let mqpx = match qpx {
            Some(q) if mlx5_path => {
                // SAFETY: a live extended QP made by mlx5dv_create_qp.
                NonNull::new(unsafe { ffi::mlx5dv_qp_ex_from_ibv_qp_ex(q.as_ptr()) })
            }
            _ => None,
        };
        let Some(qpx) = qpx.filter(|_| !mlx5_path || mqpx.is_some()) else {
            // SAFETY: created above, not shared; destroyed once.
            unsafe { ffi::ibv_destroy_qp(qp.as_ptr()) };
            return Err(Error::Unsupported {
                what: format!("{call} gave no extended QP for {}", self.describe()),
            });
        };
        if self.srq.is_some() {
            attr.cap.max_recv_wr = 0;
            attr.cap.max_recv_sge = 0;
        }
        let mut qp = QpEx::assemble(QpParts {
            qp,
            qpx,
            mlx5: Mlx5Info {
                mqpx,
                ops: self.mlx5_ops,
                max_memcpy,
                streams: self.streams,
                // Set by `assemble`, from the capabilities.
                wqe_blocks: 0,
            },
            caps: QpCaps {
                max_send_wr: attr.cap.max_send_wr,
                max_recv_wr: attr.cap.max_recv_wr,
                max_send_sge: attr.cap.max_send_sge,
                max_recv_sge: attr.cap.max_recv_sge,
                max_inline_data: attr.cap.max_inline_data,
            },
            send_ops: self.send_ops,
            owned: true,
            pd: self.pd,
            send_cq: self.send_cq,
            recv_cq: self.recv_cq,
        })?;
        qp.srq = self.srq.cloned();
        Ok(qp)
    }

    /// The `struct mlx5dv_qp_init_attr` for this QP.
    fn dv_attr(&self) -> ffi::mlx5dv_qp_init_attr {
        let mut dv = ffi::mlx5dv_qp_init_attr::default();
        if self.mlx5_create_flags != 0 {
            dv.comp_mask |= u64::from(ffi::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS);
            dv.create_flags = self.mlx5_create_flags;
        }
        if !self.mlx5_ops.is_empty() {
            dv.comp_mask |= u64::from(ffi::MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS);
            dv.send_ops_flags = self.mlx5_ops.bits();
        }
        if T::DC {
            dv.comp_mask |= u64::from(ffi::MLX5DV_QP_INIT_ATTR_MASK_DC);
            dv.dc_init_attr.dc_type = ffi::MLX5DV_DCTYPE_DCI;
            if let Some(st) = self.streams {
                dv.comp_mask |= u64::from(ffi::MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS);
                dv.dc_init_attr.__bindgen_anon_1.dci_streams = ffi::mlx5dv_dci_streams {
                    log_num_concurent: st.log_num_concurent,
                    log_num_errored: st.log_num_errored,
                };
            }
        }
        dv
    }
}

/// Refuses the builders that a QP of transport `T` cannot have
/// ([`Transport::SEND_OPS`], [`Transport::MLX5_SEND_OPS`]).
pub(super) fn check_transport_ops<T: Transport>(ops: SendOps, mlx5: Mlx5SendOps) -> Result<()> {
    let extra = ops - T::SEND_OPS;
    let extra_mlx5 = mlx5 - T::MLX5_SEND_OPS;
    if extra.is_empty() && extra_mlx5.is_empty() {
        return Ok(());
    }
    Err(Error::Unsupported {
        what: format!(
            "{} on a {} QP: it takes only {:?} and mlx5 {:?}",
            if extra.is_empty() {
                format!("mlx5 send ops {extra_mlx5:?}")
            } else {
                format!("send ops {extra:?}")
            },
            T::NAME,
            T::SEND_OPS,
            T::MLX5_SEND_OPS,
        ),
    })
}
