//! UD QPs: the RESET → INIT → RTR → RTS path, UD addresses, receives
//! with their 40-byte GRH area.

use super::{check_psn, ConnectOptions, Mlx5SendOps, SendOps, UdQp};
use crate::addressing::ah::AddressHandle;
use crate::error::{check, Error, Result};
use crate::ffi;
use crate::mr::{recv_wr, Sge};
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;

/// The send ops a UD QP has (`ibv_wr_post(3)`: UD takes sends, with or
/// without immediate data, only).
pub(crate) const UD_SEND_OPS: SendOps = SendOps::SEND.union(SendOps::SEND_WITH_IMM);

use crate::addressing::grh::UD_GRH_BYTES;

/// Refuses, before any C call, what a UD QP cannot be created with: send
/// ops other than sends, and mlx5 send ops or create flags.
pub(crate) fn check_builder(send_ops: SendOps, mlx5_ops: Mlx5SendOps, flags: u32) -> Result<()> {
    let other = send_ops.difference(UD_SEND_OPS);
    if !other.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{other:?}: a UD QP has sends only (SEND, SEND_WITH_IMM; ibv_wr_post(3))"
        )));
    }
    if !mlx5_ops.is_empty() || flags != 0 {
        return Err(Error::InvalidArgument(format!(
            "mlx5 send ops {mlx5_ops:?} / create flags {flags:#x}: this crate makes UD QPs \
             with ibv_create_qp_ex only"
        )));
    }
    Ok(())
}

/// Where a UD work request goes (`ibv_wr_set_ud_addr(3)`): the address
/// handle of the remote port, the remote QP number and its Q_Key.
///
/// Given to every work request of a UD batch
/// ([`WrBatch::wr`](crate::WrBatch::wr) on a `UdQp`): a UD work request
/// without one does not compile. The address handle must be of the QP's
/// own protection domain (`ibv_create_ah(3)`, `ibv_post_send(3)`: make it
/// with the QP's [`pd`](crate::QpEx::pd)): a work request with one of
/// another PD, of the same device context or of another, is refused with
/// [`Error::InvalidArgument`](crate::Error::InvalidArgument) before any C
/// call (one pointer compare); a QP number of more than 24 bits with
/// [`Error::OutOfRange`](crate::Error::OutOfRange).
///
/// It borrows the address handle. In the scoped post
/// ([`ScopedBatch::wr`](crate::ScopedBatch::wr)) the borrow lasts until
/// the device is done with the batch (the device reads the address handle
/// when it sends: soft-RoCE looks it up then), so that one made or dropped
/// in the closure does not compile; with [`WrBatch`](crate::WrBatch) it
/// lasts while the work request is built, and
/// [`complete`](crate::WrBatch::complete)'s `# Safety` keeps the address
/// handle alive until the completion.
///
/// A `remote_qkey` with its high bit set (0x8000_0000 and above) asks the
/// device to send the QP's own Q_Key instead (the InfiniBand rule for
/// controlled Q_Keys): the software device applies it; soft-RoCE does not
/// (it sends the work request's Q_Key as it is).
///
/// ```no_run
/// # use mlx5dv::*;
/// # fn f(qp: &mut UdQp, ah: &AddressHandle, mr: &MemoryRegion) -> Result<()> {
/// let to = UdAddr::new(ah, 0x1234, 0x1111_1111);
/// let mut batch = qp.batch();
/// batch.wr(1, to).signaled().send().sge(mr.sge(0..64)?)?;
/// batch.wr(2, to).send_imm(7).inline(b"hi")?;
/// // SAFETY: `mr` outlives the completions, polled later.
/// unsafe { batch.complete()? };
/// # Ok(()) }
/// ```
///
/// A UD work request without its address does not compile:
///
/// ```compile_fail,E0061
/// # use mlx5dv::*;
/// # fn f(qp: &mut UdQp, mr: &MemoryRegion) -> Result<()> {
/// let mut batch = qp.batch();
/// batch.wr(1).send().sge(mr.sge(..)?)?; // ERROR: no UdAddr
/// # Ok(()) }
/// ```
///
/// nor in the scoped form:
///
/// ```compile_fail,E0061
/// # use mlx5dv::*;
/// # use std::time::Duration;
/// # fn f(qp: &mut UdQp, cq: &mut CompletionQueue, mr: &MemoryRegion) -> Result<()> {
/// qp.post_and_wait(cq, Duration::from_secs(1), |b| {
///     b.wr(1).send().sge(mr.sge(..)?) // ERROR: no UdAddr
/// })?;
/// # Ok(()) }
/// ```
///
/// UD has no RDMA write (the transport is not [`RemoteWrite`](crate::RemoteWrite)):
///
/// ```compile_fail,E0599
/// # use mlx5dv::*;
/// # fn f(qp: &mut UdQp, to: UdAddr<'_>, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
/// let mut batch = qp.batch();
/// batch.wr(1, to).rdma_write(remote).sge(mr.sge(..)?)?; // ERROR: not on UD
/// # Ok(()) }
/// ```
///
/// no RDMA write with immediate:
///
/// ```compile_fail,E0599
/// # use mlx5dv::*;
/// # fn f(qp: &mut UdQp, to: UdAddr<'_>, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
/// let mut batch = qp.batch();
/// batch.wr(1, to).rdma_write_imm(remote, 1).sge(mr.sge(..)?)?; // ERROR: not on UD
/// # Ok(()) }
/// ```
///
/// no RDMA read:
///
/// ```compile_fail,E0599
/// # use mlx5dv::*;
/// # fn f(qp: &mut UdQp, to: UdAddr<'_>, mr: &mut MemoryRegion, remote: RemoteBuf) -> Result<()> {
/// let mut batch = qp.batch();
/// batch.wr(1, to).rdma_read(remote).sge(mr.sge_mut(..)?)?; // ERROR: not on UD
/// # Ok(()) }
/// ```
///
/// and no atomics:
///
/// ```compile_fail,E0599
/// # use mlx5dv::*;
/// # fn f(qp: &mut UdQp, to: UdAddr<'_>, mr: &mut MemoryRegion, remote: RemoteBuf) -> Result<()> {
/// let mut batch = qp.batch();
/// batch.wr(1, to).atomic_fetch_add(remote, 1).sge(mr.sge_mut(0..8)?)?; // ERROR: not on UD
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0599
/// # use mlx5dv::*;
/// # fn f(qp: &mut UdQp, to: UdAddr<'_>, mr: &mut MemoryRegion, remote: RemoteBuf) -> Result<()> {
/// let mut batch = qp.batch();
/// batch.wr(1, to).atomic_cmp_swp(remote, 0, 1).sge(mr.sge_mut(0..8)?)?; // ERROR: not on UD
/// # Ok(()) }
/// ```
#[derive(Clone, Copy)]
pub struct UdAddr<'a> {
    ah: NonNull<ffi::ibv_ah>,
    /// The AH's protection domain, or NULL for a QP number past 24 bits
    /// (refused by the work request's PD check, whose error says why).
    pd: *mut ffi::ibv_pd,
    remote_qpn: u32,
    remote_qkey: u32,
    _ah: PhantomData<&'a AddressHandle>,
}

impl<'a> UdAddr<'a> {
    /// The UD QP numbered `remote_qpn` (24 bits) with Q_Key `remote_qkey`,
    /// reached through `ah`.
    #[inline]
    pub fn new(ah: &'a AddressHandle, remote_qpn: u32, remote_qkey: u32) -> Self {
        let raw = ah.as_non_null();
        let pd = if remote_qpn > super::MAX_24_BITS {
            std::ptr::null_mut()
        } else {
            // SAFETY: the AH is live (borrowed).
            unsafe { (*raw.as_ptr()).pd }
        };
        UdAddr {
            ah: raw,
            pd,
            remote_qpn,
            remote_qkey,
            _ah: PhantomData,
        }
    }

    /// The raw address handle, valid while the borrow lives.
    #[inline]
    pub fn ah_ptr(&self) -> *mut ffi::ibv_ah {
        self.ah.as_ptr()
    }

    /// The protection domain of the address handle (NULL for a QP number
    /// past 24 bits).
    #[inline]
    pub(crate) fn pd_ptr(&self) -> *mut ffi::ibv_pd {
        self.pd
    }

    /// The remote QP number.
    #[inline]
    pub fn remote_qpn(&self) -> u32 {
        self.remote_qpn
    }

    /// The remote QP's Q_Key.
    #[inline]
    pub fn remote_qkey(&self) -> u32 {
        self.remote_qkey
    }
}

impl fmt::Debug for UdAddr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UdAddr")
            .field("ah", &self.ah)
            .field("remote_qpn", &format_args!("{:#x}", self.remote_qpn))
            .field("remote_qkey", &format_args!("{:#x}", self.remote_qkey))
            .finish()
    }
}

impl UdQp {
    /// RESET → INIT → RTR → RTS for a UD QP, which has no peer: INIT on
    /// `port` (P_Key index 0) with Q_Key `qkey`, the Q_Key a message must
    /// carry to be received here; RTR; RTS sending from packet sequence
    /// number `sq_psn` (any 24-bit value). The attribute masks are those
    /// ibv_modify_qp(3) lists for UD: INIT = state, P_Key index, port,
    /// Q_Key; RTR = state; RTS = state, SQ PSN.
    ///
    /// It also reads the port's active MTU: a UD message is at most one
    /// packet, so a send of more bytes is refused from then on
    /// ([`Error::OutOfRange`], before any C call;
    /// [`max_message`](Self::max_message) says how many).
    ///
    /// The port is a parameter of its own, not [`ConnectOptions`]: a UD QP
    /// has no peer and no path, so it takes nothing else of them (the
    /// path, the GID and the retry parameters are the sender's, in each
    /// [`UdDest`](crate::UdDest)). Where the same options are given to
    /// [`endpoint`](Self::endpoint) and [`UdDest::new`](crate::UdDest::new),
    /// [`ready_with`](Self::ready_with) takes the port from them.
    pub fn ready(&self, port: u8, qkey: u32, sq_psn: u32) -> Result<()> {
        check_psn(sq_psn)?;
        let mtu = self.pd().context().query_port(port)?.active_mtu.bytes();
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qkey,
            ..Default::default()
        };
        let mask = ffi::IBV_QP_STATE | ffi::IBV_QP_PKEY_INDEX | ffi::IBV_QP_PORT | ffi::IBV_QP_QKEY;
        self.modify(&mut a, mask, "INIT")?;
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RTR,
            ..Default::default()
        };
        self.modify(&mut a, ffi::IBV_QP_STATE, "RTR")?;
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RTS,
            sq_psn,
            ..Default::default()
        };
        self.modify(&mut a, ffi::IBV_QP_STATE | ffi::IBV_QP_SQ_PSN, "RTS")?;
        self.max_message.store(mtu, Relaxed);
        Ok(())
    }

    /// [`ready`](Self::ready) on the port of `opts`
    /// ([`ConnectOptions::port`]), the options this side also gives
    /// [`endpoint`](Self::endpoint) and [`UdDest::new`](crate::UdDest::new);
    /// nothing else of them is used.
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # fn f(ctx: &Context, qp: &UdQp) -> Result<()> {
    /// let mut opts = ConnectOptions::default(); // port 1
    /// opts.gid_index = ctx.default_gid_index(opts.port)?;
    /// qp.ready_with(&opts, 0x1111_1111, 0)?;
    /// let me = qp.endpoint(&opts)?; // the same port
    /// # Ok(()) }
    /// ```
    pub fn ready_with(&self, opts: &ConnectOptions, qkey: u32, sq_psn: u32) -> Result<()> {
        self.ready(opts.port, qkey, sq_psn)
    }

    /// The QP's Q_Key (`ibv_query_qp(3)` of `IBV_QP_QKEY`): what
    /// [`ready`](Self::ready) set.
    pub fn qkey(&self) -> Result<u32> {
        let mut attr = ffi::ibv_qp_attr::default();
        let mut init = ffi::ibv_qp_init_attr::default();
        // SAFETY: the QP is live; both out-structs are writable.
        let rc = unsafe {
            ffi::ibv_query_qp(self.as_ptr(), &mut attr, ffi::IBV_QP_QKEY as i32, &mut init)
        };
        check(rc, "ibv_query_qp", || self.describe())?;
        Ok(attr.qkey)
    }

    /// The largest message a send may carry: the active MTU of the port
    /// [`ready`](Self::ready) found, in bytes; `None` before `ready`.
    pub fn max_message(&self) -> Option<u32> {
        match self.max_message.load(Relaxed) {
            u32::MAX => None,
            n => Some(n),
        }
    }

    /// Posts one receive of the given SGEs (`ibv_post_recv(3)`); its
    /// completion carries `wr_id`. As
    /// [`RcQp::post_recv`](crate::RcQp::post_recv), with one rule more:
    /// the first [`UD_GRH_BYTES`] (40) bytes of the SGEs take the
    /// message's global route header (or nothing, when it had none), so
    /// SGEs of fewer bytes in all are refused ([`Error::OutOfRange`],
    /// before any C call). The message follows them;
    /// [`ud_received`](crate::ud_received) splits the two.
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # fn f(qp: &mut UdQp, mr: &mut MemoryRegion) -> Result<()> {
    /// let buf = mr.sge_mut(0..40 + 1024)?.into();
    /// // SAFETY: `mr` stays registered and untouched until the receive's
    /// // completion has been polled.
    /// unsafe { qp.post_recv(1, &[buf])? };
    /// # Ok(()) }
    /// ```
    ///
    /// # Safety
    ///
    /// As for [`RcQp::post_recv`](crate::RcQp::post_recv): the regions
    /// stay registered and their memory is not read or written through
    /// other references until the receive's completion (or its flush) has
    /// been polled, the QP has been moved to RESET, or it has been
    /// destroyed; `wr_id` is below 2^63.
    pub unsafe fn post_recv(&mut self, wr_id: u64, sges: &[Sge<'_>]) -> Result<()> {
        let total: u64 = sges.iter().map(|s| u64::from(s.length())).sum();
        if total < UD_GRH_BYTES as u64 {
            return Err(Error::OutOfRange {
                what: "UD receive length",
                value: total,
                limit: format!(
                    "at least UD_GRH_BYTES ({UD_GRH_BYTES}): the GRH area at the start of \
                     every UD receive"
                ),
            });
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ud_qp_takes_sends_only() {
        assert!(check_builder(UD_SEND_OPS, Mlx5SendOps::empty(), 0).is_ok());
        assert!(check_builder(SendOps::SEND, Mlx5SendOps::empty(), 0).is_ok());
        for other in [
            SendOps::RDMA_WRITE,
            SendOps::RDMA_READ,
            SendOps::ATOMIC_FETCH_AND_ADD,
            SendOps::SEND_WITH_INV,
            SendOps::rc_default(),
        ] {
            let e = check_builder(other | SendOps::SEND, Mlx5SendOps::empty(), 0).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
        }
        assert!(check_builder(UD_SEND_OPS, Mlx5SendOps::RAW_WQE, 0).is_err());
        assert!(check_builder(UD_SEND_OPS, Mlx5SendOps::empty(), 1).is_err());
    }
}
