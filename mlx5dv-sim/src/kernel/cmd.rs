//! What every command handler works on: one decoded legacy command
//! ([`Cmd`]), the device's limits the handlers check against, and the
//! look-ups of the handles a command names.

use super::bytes::{In, Out};
use super::errno::{refuse, Res};
use crate::model::state::Device;

/// One decoded command.
pub struct Cmd {
    /// Owning command fd.
    pub fd: i32,
    /// Core request (after the headers).
    pub core: In,
    /// Driver (mlx5 UHW) request.
    pub uhw: In,
    /// Core response.
    pub out: Out,
    /// Driver response.
    pub uhw_out: Out,
    /// Where the core response goes (0: nowhere).
    pub(super) resp_ptr: u64,
    /// Where the driver response goes (0: nowhere).
    pub(super) uhw_ptr: u64,
}

impl Cmd {
    /// Writes the responses to the caller's buffers.
    pub(super) fn commit(&self) {
        // SAFETY: the caller of write() gave these response buffers with
        // these lengths (out_words, provider_out_words).
        unsafe {
            if self.resp_ptr != 0 {
                self.out.copy_to(self.resp_ptr);
            }
            if self.uhw_ptr != 0 {
                self.uhw_out.copy_to(self.uhw_ptr);
            }
        }
    }
}

/// `num_comp_vectors` of GET_CONTEXT (CREATE_CQ refuses a vector beyond).
pub const NUM_COMP_VECTORS: u32 = 4;

/// `max_cqe` of QUERY_DEVICE (CREATE_CQ refuses more).
pub const MAX_CQE: u32 = (1 << 22) - 1;

/// `gid_tbl_len` of port 1 (the sysfs tree has as many GIDs).
pub const GID_TBL_LEN: u32 = 8;
/// `max_qp_rd_atom` and `max_qp_init_rd_atom`.
pub const MAX_QP_RD_ATOM: u32 = 16;

/// The PD number of PD handle `h` owned by `fd`.
pub fn pdn_of(dev: &Device, fd: i32, h: u32) -> Res<u32> {
    match dev.pds.get(&h) {
        Some(p) if p.ctx == fd => Ok(p.pdn),
        _ => Err(refuse(libc::EINVAL, format_args!("unknown PD handle {h}"))),
    }
}

/// The domain number of XRCD handle `h` of context `fd`.
pub fn xrcdn_of(dev: &Device, fd: i32, h: u32, what: &str) -> Res<u32> {
    match dev.xrcds.get(&h) {
        Some(x) if x.ctx == fd => Ok(x.xrcdn),
        _ => Err(refuse(
            libc::EINVAL,
            format_args!("{what}: unknown XRCD handle {h}"),
        )),
    }
}
