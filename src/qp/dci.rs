//! DCIs: the INIT → RTR → RTS path, DC addresses, stream recovery.

use super::{check_psn, ConnectOptions, DciQp, DctEndpoint};
use crate::addressing::ah::{AddressHandle, AhAttr};
use crate::error::{check, Error, Result};
use crate::ffi;
use crate::pd::ProtectionDomain;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;

/// Where a DCI work request goes (`mlx5dv_wr_set_dc_addr(3)`): the address
/// handle of the remote port, the remote DCT number and its DC access key.
///
/// Given to every work request of a DCI batch
/// ([`WrBatch::wr`](crate::WrBatch::wr) on a `DciQp`): a DCI work
/// request without one does not compile. The address handle must be of
/// the DCI's own protection domain (`ibv_create_ah(3)`; libmlx5 also
/// reads it as an mlx5 address handle of its device): a work request with
/// one of another PD, of the same device context or of another, is
/// refused with [`Error::InvalidArgument`](crate::Error::InvalidArgument)
/// before any C call (one pointer compare); a DCT number of more than 24
/// bits with [`Error::OutOfRange`](crate::Error::OutOfRange).
///
/// It borrows the address handle and holds its raw pointer, read once
/// here, so that a loop of work requests passes it on as C does. In the
/// scoped post ([`ScopedBatch::wr`](crate::ScopedBatch::wr)) the borrow
/// lasts until the device is done with the batch, as for a
/// [`UdAddr`](crate::UdAddr): libmlx5 copies the address vector into the
/// WQE when the work request is built, so a DCI would need it less, but
/// one rule for both holds whatever the provider does and costs nothing
/// at run time (see [`ScopedBatch`](crate::ScopedBatch#address-handles)).
#[derive(Clone, Copy)]
pub struct DcAddr<'a> {
    ah: NonNull<ffi::ibv_ah>,
    /// The AH's protection domain (a DCI takes addresses of its own PD
    /// only), or NULL for a DCT number past 24 bits.
    pd: *mut ffi::ibv_pd,
    remote_dctn: u32,
    remote_dc_key: u64,
    _ah: PhantomData<&'a AddressHandle>,
}

/// The largest DCT number: 24 bits.
pub(crate) const MAX_DCTN: u32 = super::MAX_24_BITS;

impl<'a> DcAddr<'a> {
    /// The DCT numbered `remote_dctn` (24 bits), with access key
    /// `remote_dc_key`, reached through `ah`. A number of more than 24
    /// bits is refused ([`Error::OutOfRange`](crate::Error::OutOfRange))
    /// by the work request that uses the address, before any C call
    /// (libmlx5 would OR it into the address vector's flag bits).
    #[inline]
    pub fn new(ah: &'a AddressHandle, remote_dctn: u32, remote_dc_key: u64) -> Self {
        let raw = ah.as_non_null();
        // An address with a DCT number of more than 24 bits gets no
        // PD: the work request's PD check (one compare, made anyway) then
        // refuses it, and the error says why.
        let pd = if remote_dctn > MAX_DCTN {
            std::ptr::null_mut()
        } else {
            // SAFETY: the AH is live (borrowed).
            unsafe { (*raw.as_ptr()).pd }
        };
        DcAddr {
            ah: raw,
            pd,
            remote_dctn,
            remote_dc_key,
            _ah: PhantomData,
        }
    }

    /// The raw address handle, valid while the borrow lives.
    #[inline]
    pub fn ah_ptr(&self) -> *mut ffi::ibv_ah {
        self.ah.as_ptr()
    }

    /// The protection domain of the address handle (NULL for a DCT
    /// number past 24 bits).
    #[inline]
    pub(crate) fn pd_ptr(&self) -> *mut ffi::ibv_pd {
        self.pd
    }

    /// The remote DCT number.
    #[inline]
    pub fn remote_dctn(&self) -> u32 {
        self.remote_dctn
    }

    /// The DCT's access key.
    #[inline]
    pub fn remote_dc_key(&self) -> u64 {
        self.remote_dc_key
    }
}

impl fmt::Debug for DcAddr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DcAddr")
            .field("ah", &self.ah)
            .field("remote_dctn", &format_args!("{:#x}", self.remote_dctn))
            .field("remote_dc_key", &format_args!("{:#x}", self.remote_dc_key))
            .finish()
    }
}

/// A DCT as a DCI reaches it: an address handle for its port, its DCT
/// number and its access key, made from the [`DctEndpoint`] the target
/// sent ([`Dct::endpoint`](crate::Dct::endpoint)). Its [`addr`](Self::addr)
/// is what each DCI work request takes.
///
/// ```no_run
/// # use mlx5dv::*;
/// # use std::time::Duration;
/// # fn f(pd: &ProtectionDomain, dci: &mut DciQp, cq: &mut CompletionQueue,
/// #      bytes: &[u8], src: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
/// let opts = ConnectOptions::default().gid_index(pd.context().default_gid_index(1)?);
/// let target = RemoteDct::new(pd, &DctEndpoint::from_bytes(bytes)?, &opts)?;
/// dci.post_and_wait(cq, Duration::from_secs(5), |b| {
///     b.wr(1, target.addr()).rdma_write(remote).sge(src.sge(0..64)?)
/// })?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct RemoteDct {
    ah: AddressHandle,
    endpoint: DctEndpoint,
}

impl RemoteDct {
    /// The DCT of `endpoint`, reached from the port (and, on RoCE, the
    /// source GID index) of `opts` (`ibv_create_ah(3)`: the endpoint's LID
    /// on InfiniBand, its GID with a global route header where
    /// `opts.gid_index` is set, as it must be on RoCE). `pd` is the
    /// protection domain of the DCIs that send to it: a DCI refuses an
    /// address handle of another.
    pub fn new(
        pd: &ProtectionDomain,
        endpoint: &DctEndpoint,
        opts: &ConnectOptions,
    ) -> Result<Self> {
        super::check_24_bits("DCT number", endpoint.dctn)?;
        crate::addressing::roce::require_gid(pd.context(), opts)?;
        let ah = AddressHandle::new(pd, &AhAttr::towards(endpoint.lid, endpoint.gid, opts))?;
        Ok(RemoteDct {
            ah,
            endpoint: *endpoint,
        })
    }

    /// The address of each work request to this DCT.
    #[inline]
    pub fn addr(&self) -> DcAddr<'_> {
        DcAddr::new(&self.ah, self.endpoint.dctn, self.endpoint.dc_key)
    }

    /// The address handle.
    pub fn ah(&self) -> &AddressHandle {
        &self.ah
    }

    /// The endpoint it was made from.
    pub fn endpoint(&self) -> &DctEndpoint {
        &self.endpoint
    }
}

impl DciQp {
    /// RESET → INIT → RTR → RTS for a DCI, which has no single peer: the
    /// port, path MTU and the retry parameters of `opts`, sending from
    /// packet sequence number `sq_psn`: the first PSN of its send queue,
    /// any 24-bit value (0 will do). Unlike an RC QP's, no peer needs to
    /// know it: a DCT takes it from the DCI's packets. (The attribute
    /// masks are those mlx5 accepts for a DCI: INIT = port and P_Key
    /// index; RTR = path MTU; RTS = timeout, retries, SQ PSN, outstanding
    /// reads/atomics.) Why a DCI, a DCT and an RC QP are made ready
    /// differently: [`Dct`](crate::Dct#why-the-three-kinds-of-qp-are-set-up-differently).
    pub fn ready(&self, sq_psn: u32, opts: &ConnectOptions) -> Result<()> {
        check_psn(sq_psn)?;
        super::check_retries(opts)?;
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: opts.port,
            ..Default::default()
        };
        let mask = ffi::IBV_QP_STATE | ffi::IBV_QP_PKEY_INDEX | ffi::IBV_QP_PORT;
        self.modify(&mut a, mask, "INIT")?;
        let mut a = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_RTR,
            path_mtu: opts.mtu as u32,
            ..Default::default()
        };
        self.modify(&mut a, ffi::IBV_QP_STATE | ffi::IBV_QP_PATH_MTU, "RTR")?;
        self.rts_from_rtr(sq_psn, opts)
    }

    /// Resets an errored DCI stream so that it can be used again
    /// (`mlx5dv_dci_stream_id_reset(3)`). Refused with
    /// [`Error::Unsupported`] on a DCI created without DCI streams.
    pub fn dci_stream_id_reset(&self, stream_id: u16) -> Result<()> {
        if self.mlx5.streams.is_none() {
            return Err(Error::Unsupported {
                what: format!(
                    "mlx5dv_dci_stream_id_reset: {} was created without DCI streams",
                    self.describe()
                ),
            });
        }
        // SAFETY: the QP is a live DCI created with DCI streams.
        let rc = unsafe { ffi::mlx5dv_dci_stream_id_reset(self.as_ptr(), stream_id) };
        check(rc, "mlx5dv_dci_stream_id_reset", || {
            format!("{} stream {stream_id}", self.describe())
        })
    }
}
