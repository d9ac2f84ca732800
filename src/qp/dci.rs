//! DCIs: the INIT → RTR → RTS path, DC addresses, stream recovery.

use super::{check_psn, ConnectOptions, Dci, QpEx};
use crate::ah::AddressHandle;
use crate::error::{check, Error, Result};
use crate::ffi;

/// Where a DCI work request goes (`mlx5dv_wr_set_dc_addr(3)`): the address
/// handle of the remote port, the remote DCT number and its DC access key.
///
/// Given to every work request of a DCI batch
/// ([`WrBatch::wr`](crate::WrBatch::wr) on a `QpEx<Dci>`): a DCI work
/// request without one does not compile.
#[derive(Debug, Clone, Copy)]
pub struct DcAddr<'a> {
    /// The path to the DCT's port.
    pub ah: &'a AddressHandle,
    /// The remote DCT number (24 bits).
    pub remote_dctn: u32,
    /// The DCT's access key.
    pub remote_dc_key: u64,
}

impl QpEx<Dci> {
    /// RESET → INIT → RTR → RTS for a DCI, which has no single peer: the
    /// port, path MTU and the retry parameters of `opts`, sending from
    /// packet sequence number `sq_psn`. (The attribute masks are those
    /// mlx5 accepts for a DCI: INIT = port and P_Key index; RTR = path
    /// MTU; RTS = timeout, retries, SQ PSN, outstanding reads/atomics.)
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
