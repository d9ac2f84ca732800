//! UC QPs (`IBV_QPT_UC`): the transport, its builder and its send ops.
//!
//! A UC QP connects to one peer QP as an RC QP does (the same
//! [`connect_to`](crate::QpEx::connect_to), [`endpoint`](crate::QpEx::endpoint)
//! and [`post_recv`](crate::QpEx::post_recv), with fewer attributes), but
//! nothing it sends is acknowledged or retried.

use super::builder::QpBuilder;
use super::{sealed, Connected, Mlx5SendOps, QpEx, RemoteWrite, SendOps, Transport};
use crate::cq::CompletionQueue;
use crate::error::Result;
use crate::ffi;
use crate::pd::ProtectionDomain;

/// Unreliable connection (`IBV_QPT_UC`): the transport of a [`UcQp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnreliableConnection {}
impl sealed::Sealed for UnreliableConnection {}
impl Transport for UnreliableConnection {
    const NAME: &'static str = "UC";
    const KIND: crate::QpKind = crate::QpKind::Uc;
    const DC: bool = false;
    const QP_TYPE: ffi::ibv_qp_type = ffi::IBV_QPT_UC;
    const SEND_OPS: SendOps = SendOps::uc_default();
    const MLX5_SEND_OPS: Mlx5SendOps = Mlx5SendOps::empty();
}
impl RemoteWrite for UnreliableConnection {}
impl Connected for UnreliableConnection {
    const RELIABLE: bool = false;
}

/// A UC queue pair ([`QpBuilder::uc`]): `QpEx<UnreliableConnection>`.
///
/// It connects to one peer QP like an [`RcQp`](crate::RcQp)
/// ([`endpoint`](QpEx::endpoint), [`connect_to`](QpEx::connect_to), with
/// the same [`Endpoint`](crate::Endpoint) and
/// [`ConnectOptions`](crate::ConnectOptions); of the options, RTR takes
/// the address, path MTU, peer QP number and PSN, RTS the PSN: the
/// timeouts, retry counts and read/atomic depths are not given to a UC
/// QP) and takes receives ([`post_recv`](QpEx::post_recv)).
///
/// # What UC does not do
///
/// Nothing is acknowledged: a send work request completes once its
/// packets have left, whatever becomes of them at the peer. So, unlike
/// RC:
///
/// - a send, send with immediate or RDMA write with immediate that finds
///   no receive posted at the peer is dropped there (no receiver-not-ready
///   NAK, no retry), and the sender's completion is a success;
/// - an RDMA write to a bad rkey or outside the peer's region completes
///   successfully at the sender; the peer drops it, and its QP stays in
///   RTS (the IB spec's responder class E error for UC without an SRQ:
///   silently dropped), so later messages still arrive;
/// - a lost packet loses its whole message; nothing is retried.
///
/// # Send ops
///
/// [`SendOps::uc_default`]: send, send with immediate, RDMA write, RDMA
/// write with immediate, the only ones a UC QP may be built with here;
/// [`QpBuilder::build`] refuses any other with
/// [`Error::Unsupported`](crate::Error::Unsupported) before any C call.
/// UC has no RDMA read or atomics (there are no UC packets for them); it
/// has no send with invalidate either: libmlx5 accepts that flag on a UC
/// QP, but the IB spec defines the invalidating SEND packets for RC (and
/// XRC) only. No mlx5 builders are taken.
///
/// A UC work request has no RDMA read:
///
/// ```compile_fail,E0599
/// # use mlx5dv::*;
/// # fn f(qp: &mut UcQp, mr: &mut MemoryRegion, remote: RemoteBuf) -> Result<()> {
/// let mut batch = qp.batch();
/// batch.wr(1).rdma_read(remote).sge(mr.sge_mut(0..8)?)?; // ERROR: UC has no RDMA read
/// # Ok(()) }
/// ```
///
/// nor atomics:
///
/// ```compile_fail,E0599
/// # use mlx5dv::*;
/// # fn f(qp: &mut UcQp, mr: &mut MemoryRegion, remote: RemoteBuf) -> Result<()> {
/// let mut batch = qp.batch();
/// batch.wr(1).atomic_fetch_add(remote, 1).sge(mr.sge_mut(0..8)?)?; // ERROR: UC has no atomics
/// # Ok(()) }
/// ```
///
/// Its writes and sends compile as an RC QP's do:
///
/// ```no_run
/// # use mlx5dv::*;
/// # fn f(qp: &mut UcQp, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
/// let mut batch = qp.batch();
/// batch.wr(1).signaled().rdma_write(remote).sge(mr.sge(0..64)?)?;
/// batch.wr(2).rdma_write_imm(remote, 7).sge(mr.sge(0..64)?)?;
/// batch.wr(3).send_imm(9).inline(b"done")?;
/// // SAFETY: `mr` stays registered and untouched until the completions
/// // have been polled.
/// unsafe { batch.complete()? };
/// # Ok(()) }
/// ```
pub type UcQp = QpEx<UnreliableConnection>;

impl SendOps {
    /// Send, send with immediate, RDMA write and RDMA write with immediate:
    /// every op a UC QP may have (see [`UcQp`]).
    pub const fn uc_default() -> Self {
        SendOps::SEND
            .union(SendOps::SEND_WITH_IMM)
            .union(SendOps::RDMA_WRITE)
            .union(SendOps::RDMA_WRITE_WITH_IMM)
    }
}

impl<'a> QpBuilder<'a, UnreliableConnection> {
    /// A UC QP in `pd` whose sends complete on `send_cq` and receives on
    /// `recv_cq` (which may be the same CQ), with
    /// [`QpCaps::default`](crate::QpCaps::default) and
    /// [`SendOps::uc_default`]. Made with `ibv_create_qp_ex`.
    pub fn uc(
        pd: &'a ProtectionDomain,
        send_cq: &'a CompletionQueue,
        recv_cq: &'a CompletionQueue,
    ) -> Self {
        let mut b = Self::new(pd, send_cq, recv_cq, Default::default());
        b.send_ops(SendOps::uc_default());
        b
    }
}

/// RTR → RTS of a UC QP: the send PSN only (IB spec 11.2.4.2; the kernel
/// refuses a UC QP's RTS with retry or read attributes).
pub(super) fn unreliable_rts<T: Connected>(qp: &QpEx<T>, sq_psn: u32) -> Result<()> {
    super::check_psn(sq_psn)?;
    let mut a = ffi::ibv_qp_attr {
        qp_state: ffi::IBV_QPS_RTS,
        sq_psn,
        ..Default::default()
    };
    qp.modify(&mut a, ffi::IBV_QP_STATE | ffi::IBV_QP_SQ_PSN, "RTS")
}

#[cfg(test)]
mod tests {
    use super::super::builder::check_transport_ops;
    use super::*;
    use crate::error::Error;

    #[test]
    fn uc_takes_its_four_ops_and_refuses_every_other() {
        let uc = SendOps::uc_default();
        assert!(check_transport_ops::<UnreliableConnection>(uc, Mlx5SendOps::empty()).is_ok());
        assert!(
            check_transport_ops::<UnreliableConnection>(SendOps::SEND, Mlx5SendOps::empty())
                .is_ok()
        );
        for op in [
            SendOps::RDMA_READ,
            SendOps::ATOMIC_CMP_AND_SWP,
            SendOps::ATOMIC_FETCH_AND_ADD,
            SendOps::SEND_WITH_INV,
            SendOps::LOCAL_INV,
            SendOps::BIND_MW,
        ] {
            let e = check_transport_ops::<UnreliableConnection>(uc | op, Mlx5SendOps::empty())
                .unwrap_err();
            let Error::Unsupported { what } = e else {
                panic!("{op:?}: {e:?}")
            };
            assert!(
                what.contains("UC QP") && what.contains(&format!("{op:?}")),
                "{what}"
            );
        }
        for op in Mlx5SendOps::all().iter() {
            assert!(matches!(
                check_transport_ops::<UnreliableConnection>(uc, op),
                Err(Error::Unsupported { .. })
            ));
        }
    }

    #[test]
    fn rc_still_takes_every_op() {
        assert!(check_transport_ops::<super::super::ReliableConnection>(
            SendOps::all(),
            Mlx5SendOps::all()
        )
        .is_ok());
        assert_eq!(
            SendOps::uc_default().bits(),
            u64::from(
                ffi::IBV_QP_EX_WITH_SEND
                    | ffi::IBV_QP_EX_WITH_SEND_WITH_IMM
                    | ffi::IBV_QP_EX_WITH_RDMA_WRITE
                    | ffi::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
            )
        );
    }
}
