//! The provider's work-request entries, resolved once when a QP is made.
//!
//! The header's `ibv_wr_*` / `mlx5dv_wr_*` functions are one indirect call
//! through `qp->wr_*`. The batch makes that same call, through plain Rust
//! function pointers copied here after each entry it may use was found
//! non-NULL: no shim in between, no check per call. Entries of ops the QP was
//! not created with get a no-op stand-in that is never called (the batch
//! refuses those ops before calling anything).

use crate::ffi;
use std::ffi::c_void;

type Q = *mut ffi::ibv_qp_ex;
type M = *mut ffi::mlx5dv_qp_ex;

macro_rules! entries {
    ($( $(#[$doc:meta])* $field:ident : fn($($ty:ty),*) ; )*) => {
        /// The entries the batch calls, copied from `ibv_qp_ex` and
        /// `mlx5dv_qp_ex`.
        pub(crate) struct WrOps {
            pub(crate) start: unsafe extern "C" fn(Q),
            pub(crate) complete: unsafe extern "C" fn(Q) -> i32,
            pub(crate) abort: unsafe extern "C" fn(Q),
            /// The send queue's depth (`max_send_wr`), for the error of a
            /// refused batch: kept here, beside the entry whose failure it
            /// explains, so that a batch needs nothing else of the QP
            /// after its last work request.
            pub(crate) depth: u32,
            /// The QP's mlx5 extension (NULL without one), the first
            /// argument of the mlx5 entries: read at each call with them.
            pub(crate) mqpx: M,
            /// Whether a batch was started (`wr_start`) and not yet
            /// completed or aborted. Only a batch that was leaked
            /// (`mem::forget`) leaves it set when the next one opens: the
            /// provider still holds the send queue's lock for it, so the
            /// next batch aborts it first instead of waiting on that lock
            /// for ever; so do a move to RESET (which resets the send
            /// queue's indices under the leaked batch) and the QP's drop.
            /// Atomic: a RESET through `&self` may run on several threads
            /// at once. [`BATCH_CLOSED`],
            /// `BATCH_OPEN`, or `BATCH_ABORTING` while one thread aborts a
            /// leaked batch (the others wait for it to finish).
            pub(crate) open: std::sync::atomic::AtomicU8,
            $( $(#[$doc])* pub(crate) $field: unsafe extern "C" fn($($ty),*), )*
        }

        /// Stand-ins for the entries of ops the QP was not created with.
        mod noop {
            use super::*;
            $(
                #[allow(clippy::too_many_arguments)]
                pub(super) unsafe extern "C" fn $field($(_: $ty),*) {}
            )*
        }
    };
}

entries! {
    set_sge: fn(Q, u32, u64, u32);
    set_sge_list: fn(Q, usize, *const ffi::ibv_sge);
    set_inline_data: fn(Q, *mut c_void, usize);
    rdma_write: fn(Q, u32, u64);
    rdma_write_imm: fn(Q, u32, u64, ffi::__be32);
    send: fn(Q);
    send_imm: fn(Q, ffi::__be32);
    send_inv: fn(Q, u32);
    rdma_read: fn(Q, u32, u64);
    atomic_cmp_swp: fn(Q, u32, u64, u64, u64);
    atomic_fetch_add: fn(Q, u32, u64, u64);
    local_inv: fn(Q, u32);
    atomic_write: fn(Q, u32, u64, *const c_void);
    set_xrc_srqn: fn(Q, u32);
    bind_mw: fn(Q, *mut ffi::ibv_mw, u32, *const ffi::ibv_mw_bind_info);
    set_ud_addr: fn(Q, *mut ffi::ibv_ah, u32, u32);
    set_dc_addr: fn(M, *mut ffi::ibv_ah, u32, u64);
    set_dc_addr_stream: fn(M, *mut ffi::ibv_ah, u32, u64, u16);
    memcpy: fn(M, u32, u64, u32, u64, usize);
    mr_list: fn(M, *mut ffi::mlx5dv_mkey, u32, u16, *mut ffi::ibv_sge);
    mr_interleaved: fn(M, *mut ffi::mlx5dv_mkey, u32, u32, u16, *mut ffi::mlx5dv_mr_interleaved);
    raw_wqe: fn(M, *const c_void);
}

/// What the QP was created with, deciding which entries are required.
pub(crate) struct Wanted {
    pub(crate) send_ops: super::SendOps,
    pub(crate) mlx5_ops: super::Mlx5SendOps,
    pub(crate) dc: bool,
    /// A UD QP: every work request takes `wr_set_ud_addr`.
    pub(crate) ud: bool,
    pub(crate) streams: bool,
    /// An XRC initiator: every work request names the remote SRQ.
    pub(crate) xrc: bool,
}

/// The entry when it is needed (noting it missing when NULL), else the
/// stand-in.
fn take<F>(
    entry: Option<F>,
    needed: bool,
    name: &'static str,
    noop: F,
    missing: &mut Vec<&'static str>,
) -> F {
    match (needed, entry) {
        (true, Some(f)) => f,
        (true, None) => {
            missing.push(name);
            noop
        }
        (false, _) => noop,
    }
}

impl WrOps {
    /// Copies the entries out of the provider's tables; every entry `want`
    /// needs must be non-NULL, else the names of the missing ones.
    ///
    /// # Safety
    /// `q` is a live extended QP and `m`, when given, its live mlx5
    /// extension made with the flags `want` describes (the mlx5 table grew
    /// over releases: only entries of requested ops are read).
    pub(crate) unsafe fn resolve(
        q: &ffi::ibv_qp_ex,
        m: Option<&ffi::mlx5dv_qp_ex>,
        want: &Wanted,
    ) -> Result<WrOps, Vec<&'static str>> {
        use super::{Mlx5SendOps as X, SendOps as S};
        let mut missing = Vec::new();
        // The always-needed entries have no stand-ins.
        let (Some(start), Some(complete), Some(abort)) = (q.wr_start, q.wr_complete, q.wr_abort)
        else {
            return Err(vec!["wr_start, wr_complete or wr_abort"]);
        };
        macro_rules! generic {
            ($needed:expr, $entry:ident, $noop:ident) => {
                take(
                    q.$entry,
                    $needed,
                    stringify!($entry),
                    noop::$noop,
                    &mut missing,
                )
            };
        }
        macro_rules! mlx5 {
            ($needed:expr, $entry:ident, $noop:ident) => {{
                let needed = $needed;
                // Read only when needed (see # Safety).
                let entry = if needed {
                    m.and_then(|d| d.$entry)
                } else {
                    None
                };
                take(entry, needed, stringify!($entry), noop::$noop, &mut missing)
            }};
        }
        let (s, x) = (want.send_ops, want.mlx5_ops);
        if (want.dc || !x.is_empty()) && m.is_none() {
            missing.push("the mlx5dv_qp_ex extension");
        }
        let ops = WrOps {
            start,
            complete,
            abort,
            depth: 0,
            mqpx: std::ptr::null_mut(),
            open: std::sync::atomic::AtomicU8::new(BATCH_CLOSED),
            set_sge: generic!(true, wr_set_sge, set_sge),
            set_sge_list: generic!(true, wr_set_sge_list, set_sge_list),
            set_inline_data: generic!(true, wr_set_inline_data, set_inline_data),
            rdma_write: generic!(s.contains(S::RDMA_WRITE), wr_rdma_write, rdma_write),
            rdma_write_imm: generic!(
                s.contains(S::RDMA_WRITE_WITH_IMM),
                wr_rdma_write_imm,
                rdma_write_imm
            ),
            send: generic!(s.contains(S::SEND), wr_send, send),
            send_imm: generic!(s.contains(S::SEND_WITH_IMM), wr_send_imm, send_imm),
            send_inv: generic!(s.contains(S::SEND_WITH_INV), wr_send_inv, send_inv),
            rdma_read: generic!(s.contains(S::RDMA_READ), wr_rdma_read, rdma_read),
            atomic_cmp_swp: generic!(
                s.contains(S::ATOMIC_CMP_AND_SWP),
                wr_atomic_cmp_swp,
                atomic_cmp_swp
            ),
            atomic_fetch_add: generic!(
                s.contains(S::ATOMIC_FETCH_AND_ADD),
                wr_atomic_fetch_add,
                atomic_fetch_add
            ),
            local_inv: generic!(s.contains(S::LOCAL_INV), wr_local_inv, local_inv),
            atomic_write: generic!(s.contains(S::ATOMIC_WRITE), wr_atomic_write, atomic_write),
            set_xrc_srqn: generic!(want.xrc, wr_set_xrc_srqn, set_xrc_srqn),
            bind_mw: generic!(s.contains(S::BIND_MW), wr_bind_mw, bind_mw),
            set_ud_addr: generic!(want.ud, wr_set_ud_addr, set_ud_addr),
            set_dc_addr: mlx5!(want.dc, wr_set_dc_addr, set_dc_addr),
            set_dc_addr_stream: mlx5!(
                want.dc && want.streams,
                wr_set_dc_addr_stream,
                set_dc_addr_stream
            ),
            memcpy: mlx5!(x.contains(X::MEMCPY), wr_memcpy, memcpy),
            mr_list: mlx5!(x.contains(X::MR_LIST), wr_mr_list, mr_list),
            mr_interleaved: mlx5!(
                x.contains(X::MR_INTERLEAVED),
                wr_mr_interleaved,
                mr_interleaved
            ),
            raw_wqe: mlx5!(x.contains(X::RAW_WQE), wr_raw_wqe, raw_wqe),
        };
        if missing.is_empty() {
            Ok(ops)
        } else {
            Err(missing)
        }
    }
}

/// The states of a QP's batch mark (`WrOps::open`): no batch started
/// and not finalised.
pub(crate) const BATCH_CLOSED: u8 = 0;
/// A batch was started (`wr_start`) and not yet completed or aborted.
pub(crate) const BATCH_OPEN: u8 = 1;
/// A thread is aborting a leaked batch.
pub(crate) const BATCH_ABORTING: u8 = 2;
