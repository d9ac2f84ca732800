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

/// The end of most [`WcStatus::hint`]s: the state the failed work request
/// left its QP in, and the way back.
macro_rules! reconnect {
    () => {
        "; the QP is now in the error state and flushes every later work request: RC, \
         UC, DCI, UD: reset() it, then connect_to (RC, UC) or ready (DCI, UD) again; XRC: \
         reset() the initiator, then connect; a DCT or an XRC target has no reset(): make \
         a new one; through rdma_cm: a new CmId"
    };
}

impl WcStatus {
    /// Whether the work request succeeded.
    #[inline]
    pub const fn is_success(self) -> bool {
        self.0 == ffi::IBV_WC_SUCCESS
    }

    /// Why a work request usually fails with this status, in this crate's
    /// terms, and what to do next; `None` for [`SUCCESS`](Self::SUCCESS)
    /// and for a value rdma-core does not define.
    ///
    /// The causes are those of the InfiniBand specification and
    /// ibv_poll_cq(3), as mlx5 and soft-RoCE report them. After most
    /// errors the QP is in the error state, and every work request still
    /// queued on it completes with [`WR_FLUSH_ERR`](Self::WR_FLUSH_ERR):
    /// the first completion with another status says what went wrong.
    /// [`Error::WorkCompletion`](crate::Error::WorkCompletion)'s text ends
    /// with this hint, or with [`hint_for`](Self::hint_for) the QP's kind
    /// where the crate knows it.
    ///
    /// ```
    /// use mlx5dv::WcStatus;
    ///
    /// let hint = WcStatus::REM_ACCESS_ERR.hint().unwrap_or_default();
    /// assert!(hint.contains("rkey") && hint.contains("REMOTE_WRITE"));
    /// assert!(WcStatus::WR_FLUSH_ERR.hint().is_some_and(|h| h.contains("reset()")));
    /// assert_eq!(WcStatus::SUCCESS.hint(), None);
    /// assert_eq!(WcStatus::from_raw(99).hint(), None);
    /// ```
    pub const fn hint(self) -> Option<&'static str> {
        Some(match self {
            Self::LOC_LEN_ERR => concat!(
                "on a receive, the message that arrived was longer than the receive's \
                 scatter list (post_recv, SharedReceiveQueue::post_recv, AsyncQp::recv): \
                 post receives as long as the peer's longest send (on UD, plus the 40-byte \
                 GRH before it: UD_GRH_BYTES); on a send, the message was longer than the \
                 port's maximum message size",
                reconnect!()
            ),
            Self::LOC_QP_OP_ERR => concat!(
                "the device found the work request inconsistent with its QP: more \
                 scatter/gather entries or inline bytes than the QP was created for \
                 (caps()), an operation its transport or send ops do not take, an address \
                 handle of another protection domain, or a malformed raw WQE (soft-RoCE \
                 also reports a receive whose memory it refused so: see LOC_PROT_ERR)",
                reconnect!()
            ),
            Self::LOC_PROT_ERR => concat!(
                "a local scatter/gather entry names memory not valid for the operation: the \
                 destination of an RDMA read, an atomic or a receive in a MemoryRegion \
                 registered without AccessFlags::LOCAL_WRITE, a region (lkey or mkey) of \
                 another ProtectionDomain than the QP's, or one deregistered meanwhile; \
                 register it with LOCAL_WRITE in the QP's protection domain",
                reconnect!()
            ),
            Self::WR_FLUSH_ERR => {
                "the work request did not run: its QP was in the error state, because an \
                 earlier work request failed (the first completion with another status \
                 says why) or the QP was stopped (to_error, a post_and_wait that timed \
                 out, an AsyncQp reset); RC, UC, DCI, UD: reset() it, then connect_to \
                 (RC, UC) or ready (DCI, UD) again; XRC: reset() the initiator, then \
                 connect; a DCT or an XRC target has no reset(): make a new one; through \
                 rdma_cm: a new CmId; then post again"
            }
            Self::MW_BIND_ERR => concat!(
                "binding a memory window failed: the region was registered without \
                 AccessFlags::MW_BIND, the window and the region are in different \
                 protection domains, or the rights asked exceed the region's",
                reconnect!()
            ),
            Self::BAD_RESP_ERR => concat!(
                "the responder answered with an unexpected transport opcode: usually the \
                 endpoint this QP was connected to is stale (the peer's QP was reset and \
                 reconnected elsewhere, or two QPs were connected to the same peer QP); \
                 exchange endpoints again",
                reconnect!()
            ),
            Self::LOC_ACCESS_ERR => concat!(
                "an incoming RDMA write with immediate hit this side's memory without the \
                 rights: the peer's RemoteBuf names a region here registered without \
                 AccessFlags::REMOTE_WRITE, or reaches past its end (reported on the \
                 receive it consumed)",
                reconnect!()
            ),
            Self::REM_INV_REQ_ERR => concat!(
                "the responder refused the request as invalid: a send longer than the \
                 receive the peer posted (the peer sees LOC_LEN_ERR), an RDMA request \
                 longer than 2^31 bytes, an operation the peer's QP does not accept (its \
                 ConnectOptions::access lacks REMOTE_WRITE, REMOTE_READ or REMOTE_ATOMIC: \
                 soft-RoCE reports that so), or a send with invalidate of an rkey the peer \
                 cannot invalidate",
                reconnect!()
            ),
            Self::REM_ACCESS_ERR => concat!(
                "the peer's device refused access to its memory: a wrong or stale rkey (a \
                 memory window invalidated or bound anew), a range outside the region or \
                 window, no REMOTE_WRITE, REMOTE_READ or REMOTE_ATOMIC access for the \
                 operation, or on DC a remote_dc_key other than the DCT's DC key",
                reconnect!()
            ),
            Self::REM_OP_ERR => concat!(
                "the responder could not complete the operation: usually the receive the \
                 peer posted for this send was bad (memory without LOCAL_WRITE, of another \
                 protection domain, deregistered) or the peer's QP failed meanwhile; look \
                 at the peer's receive completion, which says why",
                reconnect!()
            ),
            Self::RETRY_EXC_ERR => concat!(
                "the peer did not answer within ConnectOptions::timeout and retry_cnt \
                 retries: on a first work request, the Endpoint given to connect_to (XRC: \
                 connect) is wrong (QP number, LID, GID, PSN) or so are the local port and gid_index, the \
                 peer's QP is not connected (not yet in RTR/RTS), or the path is down \
                 (link, RoCE address, an MTU larger than the path's); after others \
                 succeeded, the peer's QP went away (reset, destroyed, process gone); \
                 on DC, the DcAddr names a DCT that does not answer it: a wrong DCT \
                 number, remote_dc_key or address handle, or a DCT not yet ready",
                reconnect!()
            ),
            Self::RNR_RETRY_EXC_ERR => concat!(
                "the peer had no receive posted for a send (or an RDMA write with \
                 immediate) through all ConnectOptions::rnr_retry retries: post receives \
                 at the peer before this side sends (post_recv, \
                 SharedReceiveQueue::post_recv, AsyncQp::recv), or raise rnr_retry (7: \
                 retry for ever) or the peer's min_rnr_timer",
                reconnect!()
            ),
            Self::LOC_EEC_OP_ERR
            | Self::LOC_RDD_VIOL_ERR
            | Self::REM_INV_RD_REQ_ERR
            | Self::INV_EECN_ERR
            | Self::INV_EEC_STATE_ERR => {
                "a status of reliable datagram (RD) transport, which neither mlx5 nor \
                 soft-RoCE implements and this crate does not use: a provider fault or a \
                 corrupted completion; report it with the vendor error"
            }
            Self::REM_ABORT_ERR => concat!(
                "the responder aborted the operation (per the InfiniBand specification, a \
                 responder fed from a shared receive queue); look at the peer's side for \
                 its error",
                reconnect!()
            ),
            Self::FATAL_ERR => {
                "the device hit a fatal error (hardware, firmware, or a lost QP or CQ \
                 context): read the async events (Context::async_events: QpFatal, CqErr, \
                 DeviceFatal) and the kernel log; destroy and recreate the QP, and after \
                 DeviceFatal open the device again"
            }
            Self::RESP_TIMEOUT_ERR => concat!(
                "the response to a request did not come in time (mlx5 and soft-RoCE report \
                 a peer that does not answer as RETRY_EXC_ERR): check the peer and the \
                 path as for RETRY_EXC_ERR",
                reconnect!()
            ),
            Self::GENERAL_ERR => concat!(
                "an error the provider has no other status for (mlx5 reports every CQE \
                 syndrome it does not map so): the vendor error is the device's own \
                 syndrome, to look up in its documentation; also read the async events \
                 (Context::async_events)",
                reconnect!()
            ),
            Self::TM_ERR => {
                "a tag-matching operation on a tag-matching shared receive queue (posted \
                 through ffi: ibv_post_srq_ops) failed; the vendor error says why"
            }
            Self::TM_RNDV_INCOMPLETE => {
                "tag matching: a rendezvous request matched a tagged receive, but the \
                 device did not fetch its data; the application completes the rendezvous \
                 in software (rdma-core's tag-matching documentation)"
            }
            _ => return None,
        })
    }

    /// [`hint`](Self::hint) for a work request of a QP whose kind is
    /// known: causes that cannot happen on that kind are left out, and the
    /// way back out of the error state is that kind's
    /// ([`QpKind::recovery`](crate::QpKind::recovery)). `None` where
    /// [`hint`](Self::hint) is.
    ///
    /// ```
    /// use mlx5dv::{QpKind, WcStatus};
    ///
    /// let ud = WcStatus::LOC_LEN_ERR.hint_for(QpKind::Ud).unwrap_or_default();
    /// assert!(ud.contains("UD_GRH_BYTES") && ud.contains("ready(port, qkey, psn)"));
    /// let dci = WcStatus::REM_ACCESS_ERR.hint_for(QpKind::Dci).unwrap_or_default();
    /// assert!(dci.contains("DC key") && dci.contains("memory window"));
    /// ```
    pub fn hint_for(self, kind: crate::QpKind) -> Option<String> {
        use crate::QpKind;
        let generic = self.hint()?;
        let back = kind.recovery();
        let in_err = "; the QP is in ERR";
        Some(match (self, kind) {
            (Self::LOC_LEN_ERR, QpKind::Ud) => format!(
                "the message that arrived was longer than the receive's scatter list less \
                 the 40-byte GRH the device writes first (UD_GRH_BYTES): post UD receives \
                 of UD_GRH_BYTES plus the peer's longest send{in_err}: {back}"
            ),
            (Self::REM_ACCESS_ERR, QpKind::Dci) => format!(
                "the DCT refused access: the DcAddr's remote_dc_key is not the DCT's DC \
                 key, or a wrong or stale rkey (a memory window invalidated or \
                 bound anew), a range past the region, or no remote access{in_err}: {back}"
            ),
            (Self::REM_ACCESS_ERR, QpKind::Rc | QpKind::Uc | QpKind::Xrc | QpKind::RdmaCm) => {
                format!(
                    "the peer refused the access: a wrong or stale rkey (a memory window \
                     invalidated or bound anew), a range past the region or window, or no \
                     REMOTE_WRITE/READ/ATOMIC access for the op; check the peer's \
                     RemoteBuf{in_err}: {back}"
                )
            }
            (Self::WR_FLUSH_ERR, _) => format!(
                "the work request did not run: its QP was in the error state, because an \
                 earlier work request failed (the first completion with another status \
                 says why) or the QP was stopped; {back}, then post again"
            ),
            _ => match generic.strip_suffix(reconnect!()) {
                Some(cause) => format!("{cause}{in_err}: {back}"),
                None => generic.to_owned(),
            },
        })
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
    fn every_error_status_has_a_hint_and_success_none() {
        assert_eq!(WcStatus::SUCCESS.hint(), None);
        assert_eq!(
            WcStatus::from_raw(ffi::IBV_WC_TM_RNDV_INCOMPLETE + 1).hint(),
            None
        );
        for raw in 1..=ffi::IBV_WC_TM_RNDV_INCOMPLETE {
            let status = WcStatus::from_raw(raw);
            let hint = status
                .hint()
                .unwrap_or_else(|| panic!("no hint for {status:?}"));
            assert!(hint.len() > 80, "{status:?}: {hint}");
            // A hint adds to rdma-core's text rather than repeating it.
            assert!(!hint.starts_with(&status.to_string()), "{status:?}: {hint}");
        }
        // The errors that leave the QP in ERR say how to get it back.
        for status in [
            WcStatus::LOC_LEN_ERR,
            WcStatus::LOC_QP_OP_ERR,
            WcStatus::LOC_PROT_ERR,
            WcStatus::WR_FLUSH_ERR,
            WcStatus::REM_INV_REQ_ERR,
            WcStatus::REM_ACCESS_ERR,
            WcStatus::REM_OP_ERR,
            WcStatus::RETRY_EXC_ERR,
            WcStatus::RNR_RETRY_EXC_ERR,
            WcStatus::GENERAL_ERR,
        ] {
            let hint = status.hint().unwrap();
            // Only the kinds with a reset() are offered it.
            assert!(!hint.contains("DCT, UD"), "{status:?}: {hint}");
            assert!(
                hint.contains(crate::qp_state::ANY_RECOVERY),
                "{status:?}: {hint}"
            );
            // Each kind's own hint names its way back, and only that.
            for kind in KINDS {
                let hint = status.hint_for(kind).unwrap();
                assert!(
                    hint.contains(kind.recovery()),
                    "{kind:?} {status:?}: {hint}"
                );
                assert!(
                    !hint.contains("ready for a DCI"),
                    "{kind:?} {status:?}: {hint}"
                );
            }
        }
        for kind in KINDS {
            assert_eq!(WcStatus::SUCCESS.hint_for(kind), None);
        }
    }

    const KINDS: [crate::QpKind; 7] = [
        crate::QpKind::Rc,
        crate::QpKind::Uc,
        crate::QpKind::Xrc,
        crate::QpKind::Dci,
        crate::QpKind::Dct,
        crate::QpKind::Ud,
        crate::QpKind::RdmaCm,
    ];

    #[test]
    fn a_retry_exceeded_hint_names_the_rc_method() {
        let hint = WcStatus::RETRY_EXC_ERR.hint().unwrap();
        assert!(
            hint.contains("the Endpoint given to connect_to (XRC: connect) is wrong"),
            "{hint}"
        );
    }

    #[test]
    fn a_ud_receive_too_short_names_the_grh_and_ready() {
        let ud = WcStatus::LOC_LEN_ERR.hint_for(crate::QpKind::Ud).unwrap();
        for word in ["40-byte GRH", "UD_GRH_BYTES", "ready(port, qkey, psn)"] {
            assert!(ud.contains(word), "{word}: {ud}");
        }
        assert!(!ud.contains("connect"), "{ud}");
        // Without the kind, the hint still names the GRH for UD.
        let any = WcStatus::LOC_LEN_ERR.hint().unwrap();
        assert!(
            any.contains("UD_GRH_BYTES") && any.contains("ready (DCI, UD)"),
            "{any}"
        );
        let rc = WcStatus::LOC_LEN_ERR.hint_for(crate::QpKind::Rc).unwrap();
        assert!(rc.contains("connect_to") && !rc.contains("ready"), "{rc}");
    }

    #[test]
    fn remote_access_hints_are_short_and_fit_the_kind() {
        use crate::QpKind;
        let dci = WcStatus::REM_ACCESS_ERR.hint_for(QpKind::Dci).unwrap();
        for word in [
            "remote_dc_key",
            "DC key",
            "rkey",
            "memory window",
            "ready(psn",
        ] {
            assert!(dci.contains(word), "{word}: {dci}");
        }
        let rc = WcStatus::REM_ACCESS_ERR.hint_for(QpKind::Rc).unwrap();
        for word in [
            "rkey",
            "memory window",
            "REMOTE_WRITE",
            "RemoteBuf",
            "connect_to",
        ] {
            assert!(rc.contains(word), "{word}: {rc}");
        }
        assert!(!rc.contains("DC"), "{rc}");
        let xrc = WcStatus::REM_ACCESS_ERR.hint_for(QpKind::Xrc).unwrap();
        assert!(xrc.contains("connect(remote"), "{xrc}");
        for (kind, hint) in [(QpKind::Rc, &rc), (QpKind::Dci, &dci)] {
            assert!(hint.len() <= 300, "{kind:?}: {} chars: {hint}", hint.len());
        }
        // The kind-blind hint is short too (before its way back), and
        // lists memory windows and the DC key among the causes.
        let any = WcStatus::REM_ACCESS_ERR.hint().unwrap();
        let cause = any.split("; the QP is now").next().unwrap();
        assert!(cause.len() <= 300, "{} chars: {cause}", cause.len());
        assert!(
            any.contains("memory window") && any.contains("DC key"),
            "{any}"
        );
    }

    #[test]
    fn hints_name_the_usual_causes_in_the_crates_terms() {
        let has = |s: WcStatus, words: &[&str]| {
            let hint = s.hint().unwrap();
            for w in words {
                assert!(hint.contains(w), "{s:?} lacks {w:?}: {hint}");
            }
        };
        has(
            WcStatus::REM_ACCESS_ERR,
            &[
                "rkey",
                "memory window",
                "REMOTE_WRITE",
                "REMOTE_READ",
                "remote_dc_key",
            ],
        );
        has(WcStatus::LOC_PROT_ERR, &["LOCAL_WRITE", "ProtectionDomain"]);
        has(WcStatus::WR_FLUSH_ERR, &["first completion", "to_error"]);
        has(
            WcStatus::RETRY_EXC_ERR,
            &["Endpoint", "QP number", "PSN", "RTR", "retry_cnt"],
        );
        has(
            WcStatus::RNR_RETRY_EXC_ERR,
            &["post_recv", "ConnectOptions::rnr_retry", "min_rnr_timer"],
        );
        has(WcStatus::LOC_LEN_ERR, &["post_recv"]);
        has(WcStatus::REM_INV_REQ_ERR, &["ConnectOptions::access"]);
        has(WcStatus::GENERAL_ERR, &["vendor error"]);
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
