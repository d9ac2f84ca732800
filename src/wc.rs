//! The status, opcode and flags of a work completion: `u32` newtypes
//! with named values, and a bitflags set.

use crate::ffi;
use std::ffi::CStr;
use std::fmt;

/// Declares the named values of a `u32` newtype: one associated const each,
/// `from_raw` and `to_raw`, and `name()`, which maps a value back to its
/// const's name.
macro_rules! named_values {
    ($ty:ident { $($(#[$doc:meta])* $name:ident = $raw:path,)* }) => {
        impl $ty {
            $(
                $(#[$doc])*
                pub const $name: Self = Self($raw);
            )*

            /// The value of a raw `u32` (any value: one without a const is
            /// kept as it is).
            #[inline]
            pub const fn from_raw(raw: u32) -> Self {
                Self(raw)
            }

            /// The raw value.
            #[inline]
            pub const fn to_raw(self) -> u32 {
                self.0
            }

            /// The name of the const this value is, if any.
            const fn name(self) -> Option<&'static str> {
                match self.0 {
                    $( $raw => Some(stringify!($name)), )*
                    _ => None,
                }
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(name) => f.write_str(name),
                    None => f.debug_tuple(stringify!($ty)).field(&self.0).finish(),
                }
            }
        }
    };
}

/// The status of a work completion (`enum ibv_wc_status`).
///
/// The raw `u32` itself (`#[repr(transparent)]`): reading it from a
/// completion converts nothing. Every value rdma-core defines is an
/// associated const, usable as a `match` pattern; any other value the
/// provider reports is kept as it is ([`from_raw`](Self::from_raw)).
///
/// `Display` gives rdma-core's own text (`ibv_wc_status_str(3)`); `Debug`
/// the const's name (`REM_ACCESS_ERR`), or `WcStatus(n)` for another value.
///
/// ```
/// use mlx5dv::WcStatus;
///
/// fn retry(status: WcStatus) -> bool {
///     match status {
///         WcStatus::RETRY_EXC_ERR | WcStatus::RNR_RETRY_EXC_ERR => true,
///         _ => false,
///     }
/// }
/// assert!(retry(WcStatus::from_raw(mlx5dv::ffi::IBV_WC_RETRY_EXC_ERR)));
/// assert!(WcStatus::SUCCESS.is_success());
/// assert_eq!(format!("{:?}", WcStatus::WR_FLUSH_ERR), "WR_FLUSH_ERR");
/// assert_eq!(format!("{:?}", WcStatus::from_raw(99)), "WcStatus(99)");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct WcStatus(pub(crate) u32);

named_values!(WcStatus {
    /// `IBV_WC_SUCCESS`.
    SUCCESS = ffi::IBV_WC_SUCCESS,
    /// `IBV_WC_LOC_LEN_ERR`: local length error.
    LOC_LEN_ERR = ffi::IBV_WC_LOC_LEN_ERR,
    /// `IBV_WC_LOC_QP_OP_ERR`: local QP operation error.
    LOC_QP_OP_ERR = ffi::IBV_WC_LOC_QP_OP_ERR,
    /// `IBV_WC_LOC_EEC_OP_ERR`.
    LOC_EEC_OP_ERR = ffi::IBV_WC_LOC_EEC_OP_ERR,
    /// `IBV_WC_LOC_PROT_ERR`: local protection error.
    LOC_PROT_ERR = ffi::IBV_WC_LOC_PROT_ERR,
    /// `IBV_WC_WR_FLUSH_ERR`: flushed, the QP is in the error state.
    WR_FLUSH_ERR = ffi::IBV_WC_WR_FLUSH_ERR,
    /// `IBV_WC_MW_BIND_ERR`.
    MW_BIND_ERR = ffi::IBV_WC_MW_BIND_ERR,
    /// `IBV_WC_BAD_RESP_ERR`.
    BAD_RESP_ERR = ffi::IBV_WC_BAD_RESP_ERR,
    /// `IBV_WC_LOC_ACCESS_ERR`: local access error.
    LOC_ACCESS_ERR = ffi::IBV_WC_LOC_ACCESS_ERR,
    /// `IBV_WC_REM_INV_REQ_ERR`: remote invalid request.
    REM_INV_REQ_ERR = ffi::IBV_WC_REM_INV_REQ_ERR,
    /// `IBV_WC_REM_ACCESS_ERR`: remote access error (wrong rkey or rights).
    REM_ACCESS_ERR = ffi::IBV_WC_REM_ACCESS_ERR,
    /// `IBV_WC_REM_OP_ERR`: remote operation error.
    REM_OP_ERR = ffi::IBV_WC_REM_OP_ERR,
    /// `IBV_WC_RETRY_EXC_ERR`: transport retry counter exceeded.
    RETRY_EXC_ERR = ffi::IBV_WC_RETRY_EXC_ERR,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: receiver-not-ready retries exceeded.
    RNR_RETRY_EXC_ERR = ffi::IBV_WC_RNR_RETRY_EXC_ERR,
    /// `IBV_WC_LOC_RDD_VIOL_ERR`.
    LOC_RDD_VIOL_ERR = ffi::IBV_WC_LOC_RDD_VIOL_ERR,
    /// `IBV_WC_REM_INV_RD_REQ_ERR`.
    REM_INV_RD_REQ_ERR = ffi::IBV_WC_REM_INV_RD_REQ_ERR,
    /// `IBV_WC_REM_ABORT_ERR`.
    REM_ABORT_ERR = ffi::IBV_WC_REM_ABORT_ERR,
    /// `IBV_WC_INV_EECN_ERR`.
    INV_EECN_ERR = ffi::IBV_WC_INV_EECN_ERR,
    /// `IBV_WC_INV_EEC_STATE_ERR`.
    INV_EEC_STATE_ERR = ffi::IBV_WC_INV_EEC_STATE_ERR,
    /// `IBV_WC_FATAL_ERR`.
    FATAL_ERR = ffi::IBV_WC_FATAL_ERR,
    /// `IBV_WC_RESP_TIMEOUT_ERR`.
    RESP_TIMEOUT_ERR = ffi::IBV_WC_RESP_TIMEOUT_ERR,
    /// `IBV_WC_GENERAL_ERR`.
    GENERAL_ERR = ffi::IBV_WC_GENERAL_ERR,
    /// `IBV_WC_TM_ERR`: tag-matching error.
    TM_ERR = ffi::IBV_WC_TM_ERR,
    /// `IBV_WC_TM_RNDV_INCOMPLETE`: tag-matching rendezvous incomplete.
    TM_RNDV_INCOMPLETE = ffi::IBV_WC_TM_RNDV_INCOMPLETE,
});

impl WcStatus {
    /// Whether the work request succeeded.
    #[inline]
    pub const fn is_success(self) -> bool {
        self.0 == ffi::IBV_WC_SUCCESS
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: ibv_wc_status_str returns a static string for any value.
        let s = unsafe { CStr::from_ptr(ffi::ibv_wc_status_str(self.to_raw())) };
        f.write_str(&s.to_string_lossy())
    }
}

/// What a completed work request did (`enum ibv_wc_opcode`, with the mlx5
/// opcodes of `enum mlx5dv_wc_opcode`).
///
/// The raw `u32` itself (`#[repr(transparent)]`), like [`WcStatus`]: every
/// value rdma-core defines is an associated const, usable as a `match`
/// pattern; any other value is kept as it is. `Debug` gives the const's
/// name (`RDMA_WRITE`), or `WcOpcode(n)` for another value.
///
/// ```
/// use mlx5dv::WcOpcode;
///
/// let op = WcOpcode::from_raw(mlx5dv::ffi::MLX5DV_WC_MEMCPY);
/// assert_eq!(op, WcOpcode::MEMCPY);
/// assert!(matches!(op, WcOpcode::MEMCPY | WcOpcode::UMR));
/// assert_eq!(format!("{op:?}"), "MEMCPY");
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct WcOpcode(pub(crate) u32);

named_values!(WcOpcode {
    /// A send (`IBV_WC_SEND`).
    SEND = ffi::IBV_WC_SEND,
    /// An RDMA write (`IBV_WC_RDMA_WRITE`).
    RDMA_WRITE = ffi::IBV_WC_RDMA_WRITE,
    /// An RDMA read (`IBV_WC_RDMA_READ`).
    RDMA_READ = ffi::IBV_WC_RDMA_READ,
    /// Atomic compare-and-swap (`IBV_WC_COMP_SWAP`).
    COMP_SWAP = ffi::IBV_WC_COMP_SWAP,
    /// Atomic fetch-and-add (`IBV_WC_FETCH_ADD`).
    FETCH_ADD = ffi::IBV_WC_FETCH_ADD,
    /// Memory window bind (`IBV_WC_BIND_MW`).
    BIND_MW = ffi::IBV_WC_BIND_MW,
    /// Local invalidate (`IBV_WC_LOCAL_INV`).
    LOCAL_INV = ffi::IBV_WC_LOCAL_INV,
    /// TSO send (`IBV_WC_TSO`).
    TSO = ffi::IBV_WC_TSO,
    /// Atomic write (`IBV_WC_ATOMIC_WRITE`).
    ATOMIC_WRITE = ffi::IBV_WC_ATOMIC_WRITE,
    /// A receive (`IBV_WC_RECV`).
    RECV = ffi::IBV_WC_RECV,
    /// A receive consumed by an RDMA write with immediate
    /// (`IBV_WC_RECV_RDMA_WITH_IMM`).
    RECV_RDMA_WITH_IMM = ffi::IBV_WC_RECV_RDMA_WITH_IMM,
    /// Tag matching: a tag added (`IBV_WC_TM_ADD`).
    TM_ADD = ffi::IBV_WC_TM_ADD,
    /// Tag matching: a tag deleted (`IBV_WC_TM_DEL`).
    TM_DEL = ffi::IBV_WC_TM_DEL,
    /// Tag matching: a sync (`IBV_WC_TM_SYNC`).
    TM_SYNC = ffi::IBV_WC_TM_SYNC,
    /// Tag matching: a tagged receive (`IBV_WC_TM_RECV`).
    TM_RECV = ffi::IBV_WC_TM_RECV,
    /// Tag matching: a receive without a tag (`IBV_WC_TM_NO_TAG`).
    TM_NO_TAG = ffi::IBV_WC_TM_NO_TAG,
    /// An mlx5 mkey registration: `mlx5dv_wr_mr_list` /
    /// `mlx5dv_wr_mr_interleaved` (`MLX5DV_WC_UMR` = `IBV_WC_DRIVER1`).
    UMR = ffi::MLX5DV_WC_UMR,
    /// An mlx5 raw WQE, whatever its opcode (`MLX5DV_WC_RAW_WQE` =
    /// `IBV_WC_DRIVER2`).
    RAW_WQE = ffi::MLX5DV_WC_RAW_WQE,
    /// An mlx5 DMA memcpy (`MLX5DV_WC_MEMCPY` = `IBV_WC_DRIVER3`).
    MEMCPY = ffi::MLX5DV_WC_MEMCPY,
});

bitflags::bitflags! {
    /// The flags of a work completion (`enum ibv_wc_flags`), as
    /// [`PolledWc::wc_flags`] reads them. Bits without a name are kept
    /// (`from_bits_retain`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct WcFlags: u32 {
        /// The receive buffer starts with a GRH (`IBV_WC_GRH`).
        const GRH = ffi::IBV_WC_GRH;
        /// The completion carries immediate data (`IBV_WC_WITH_IMM`).
        const WITH_IMM = ffi::IBV_WC_WITH_IMM;
        /// The IP checksum was verified (`IBV_WC_IP_CSUM_OK`).
        const IP_CSUM_OK = ffi::IBV_WC_IP_CSUM_OK;
        /// A received send with invalidate invalidated an rkey
        /// (`IBV_WC_WITH_INV`).
        const WITH_INV = ffi::IBV_WC_WITH_INV;
        /// Tag matching: a sync request (`IBV_WC_TM_SYNC_REQ`).
        const TM_SYNC_REQ = ffi::IBV_WC_TM_SYNC_REQ;
        /// Tag matching: the tag matched (`IBV_WC_TM_MATCH`).
        const TM_MATCH = ffi::IBV_WC_TM_MATCH;
        /// Tag matching: the data is valid (`IBV_WC_TM_DATA_VALID`).
        const TM_DATA_VALID = ffi::IBV_WC_TM_DATA_VALID;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn status_round_trips_and_prints_rdma_cores_text() {
        for raw in 0..=ffi::IBV_WC_TM_RNDV_INCOMPLETE + 1 {
            assert_eq!(WcStatus::from_raw(raw).to_raw(), raw);
        }
        assert_eq!(WcStatus::SUCCESS.to_string(), "success");
        assert_eq!(WcStatus::REM_ACCESS_ERR.to_string(), "remote access error");
        assert_eq!(
            WcStatus::WR_FLUSH_ERR.to_string(),
            "Work Request Flushed Error"
        );
    }

    #[test]
    fn status_and_opcode_are_the_raw_u32_with_named_consts() {
        assert_eq!(std::mem::size_of::<WcStatus>(), 4);
        assert_eq!(std::mem::size_of::<Option<WcStatus>>(), 8);
        assert_eq!(std::mem::size_of::<WcOpcode>(), 4);
        assert_eq!(WcStatus::SUCCESS.to_raw(), ffi::IBV_WC_SUCCESS);
        assert_eq!(WcStatus::LOC_PROT_ERR.to_raw(), ffi::IBV_WC_LOC_PROT_ERR);
        assert_eq!(WcStatus::GENERAL_ERR.to_raw(), ffi::IBV_WC_GENERAL_ERR);
        assert_eq!(WcOpcode::RDMA_WRITE.to_raw(), ffi::IBV_WC_RDMA_WRITE);
        assert_eq!(WcOpcode::ATOMIC_WRITE.to_raw(), ffi::IBV_WC_ATOMIC_WRITE);
        assert_eq!(
            WcOpcode::RECV_RDMA_WITH_IMM.to_raw(),
            ffi::IBV_WC_RECV_RDMA_WITH_IMM
        );
        assert!(WcStatus::SUCCESS.is_success());
        assert!(!WcStatus::from_raw(1).is_success());
        // Usable in patterns, unknown values included.
        let kind = |s: WcStatus| match s {
            WcStatus::SUCCESS => "ok",
            WcStatus::RETRY_EXC_ERR | WcStatus::RNR_RETRY_EXC_ERR => "retry",
            _ => "other",
        };
        assert_eq!(kind(WcStatus::from_raw(ffi::IBV_WC_SUCCESS)), "ok");
        assert_eq!(
            kind(WcStatus::from_raw(ffi::IBV_WC_RNR_RETRY_EXC_ERR)),
            "retry"
        );
        assert_eq!(kind(WcStatus::from_raw(77)), "other");
        // Every status rdma-core defines has its own name, and so has every
        // opcode: no two consts share a value.
        let names: HashSet<_> = (0..=ffi::IBV_WC_TM_RNDV_INCOMPLETE)
            .map(|raw| WcStatus::from_raw(raw).name().expect("a named status"))
            .collect();
        assert_eq!(names.len(), ffi::IBV_WC_TM_RNDV_INCOMPLETE as usize + 1);
        let ops: HashSet<_> = (0..=0x1_0000)
            .filter_map(|raw| WcOpcode::from_raw(raw).name())
            .collect();
        assert_eq!(ops.len(), 19);
    }

    #[test]
    fn debug_prints_the_consts_name_or_the_number() {
        assert_eq!(format!("{:?}", WcStatus::SUCCESS), "SUCCESS");
        assert_eq!(
            format!("{:?}", WcStatus::REM_INV_RD_REQ_ERR),
            "REM_INV_RD_REQ_ERR"
        );
        assert_eq!(format!("{:?}", WcStatus::from_raw(1000)), "WcStatus(1000)");
        assert_eq!(
            format!("{:?}", WcOpcode::RECV_RDMA_WITH_IMM),
            "RECV_RDMA_WITH_IMM"
        );
        assert_eq!(format!("{:?}", WcOpcode::RAW_WQE), "RAW_WQE");
        assert_eq!(
            format!("{:?}", WcOpcode::from_raw(0xFFFF)),
            "WcOpcode(65535)"
        );
        assert_eq!(
            format!("{:#x?}", WcOpcode::from_raw(0xFFFF)),
            "WcOpcode(\n    0xffff,\n)"
        );
    }

    #[test]
    fn mlx5_opcodes_are_the_driver_opcodes() {
        assert_eq!(WcOpcode::from_raw(ffi::IBV_WC_DRIVER1), WcOpcode::UMR);
        assert_eq!(WcOpcode::from_raw(ffi::IBV_WC_DRIVER2), WcOpcode::RAW_WQE);
        assert_eq!(WcOpcode::from_raw(ffi::IBV_WC_DRIVER3), WcOpcode::MEMCPY);
        assert_eq!(WcOpcode::from_raw(ffi::IBV_WC_RECV), WcOpcode::RECV);
        assert_eq!(WcOpcode::from_raw(0xFFFF).to_raw(), 0xFFFF);
        assert_ne!(WcOpcode::from_raw(0xFFFF), WcOpcode::MEMCPY);
    }
}
