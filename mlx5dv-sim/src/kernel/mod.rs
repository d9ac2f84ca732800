//! The fake uverbs kernel: what a `/dev/infiniband/uverbsN` fd answers.
//!
//! Legacy `write()` commands (the INVOKE_WRITE probe is refused, so
//! libibverbs falls back to them), the mlx5 driver ioctl methods libmlx5
//! needs (DEVX, UAR), and `mmap` of UAR pages. Every other ioctl is refused
//! with EPROTONOSUPPORT (never ENOTTY, which would turn off all ioctls).

pub mod bytes;
mod cmd;
mod devx;
pub mod errno;
mod events;
pub mod fds;
mod ioctl;
mod ioctl_call;
mod mw_cmds;
mod qp_modify;
mod queue_cmds;
mod rereg_mr;
mod resize_cq;
#[cfg(test)]
mod tests;
mod uar;
pub mod uverbs;
mod write_cmds;
mod xrc_cmds;

pub use crate::model::events::{enter_err, QP_LAST_WQE_REACHED, SRQ_LIMIT_REACHED};
pub use crate::model::lock;
pub use crate::model::state;
pub use crate::sys::raw::{close_raw, set_errno};
pub use errno::{injected, refuse, Errno, Res};
pub use uverbs::{
    close_cmd_fd, ioctl, mmap, open_cmd_fd, write, UVERBS_MAJOR, UVERBS_MINOR, UVERBS_PATH,
};
