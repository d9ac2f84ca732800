//! Whether the soft-RoCE provider's `end_poll` overruns after a `next_poll`
//! that found the CQ empty: asked of the provider itself, once a process.
//!
//! rdma-core 44 to 54's rxe provider advances its consumer index in
//! `next_poll` before it looks for a completion; on finding none it stores
//! that index and unlocks, and the `end_poll` that ibv_create_cq_ex(3)
//! requires next advances and stores it once more: one past the producer,
//! so the next `start_poll` returns a completion that was never written
//! (rdma-core commit b78b414e, "rxe: fix completion queue consumer index
//! overrun", in 55). The provider has no version to ask at run time:
//! libibverbs loads any provider built for its private ABI (34 in every
//! release from 44 to 56), and distributions backport fixes. So the first
//! soft-RoCE CQ of the process runs the sequence the fix is about on a
//! completion of its own:
//!
//! 1. a PD, an extended CQ and an RC QP on it; the QP to INIT, one receive
//!    posted, the QP to ERR: the receive is flushed, one completion;
//! 2. `start_poll` (that completion), `next_poll` (ENOENT), `end_poll`;
//! 3. `start_poll` again: ENOENT from a fixed provider; a completion from
//!    one that overran.
//!
//! A probe that cannot tell (a call failed, no completion within a second,
//! more than one) answers "overruns": the workaround it selects
//! ([`OnePerStart`](super::one_per_start::OnePerStart)) is correct on
//! every provider, the standard poll loop only on a fixed one.

use crate::ffi;
use std::ptr::NonNull;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The answer, for every soft-RoCE context of the process: one provider
/// library serves them all.
static OVERRUNS: OnceLock<bool> = OnceLock::new();

/// How long the flushed receive may take to complete.
const WAIT: Duration = Duration::from_secs(1);

/// The probe's receive.
const PROBE_WR_ID: u64 = 0x6d6c_7835_7072_6f62;

/// Whether the soft-RoCE provider of `ctx` overruns its CQ in an
/// `end_poll` after an empty `next_poll` (true also when the probe could
/// not tell). Probes on the first call only.
///
/// # Safety
/// `ctx` is an open soft-RoCE context.
pub(super) unsafe fn end_poll_overruns(ctx: NonNull<ffi::ibv_context>) -> bool {
    // SAFETY: the caller's promise.
    *OVERRUNS.get_or_init(|| unsafe { probe(ctx) }.unwrap_or(true))
}

/// Calls `f` when dropped: the probe's resources are released on every path.
struct Release<F: FnMut()>(F);

impl<F: FnMut()> Drop for Release<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Runs the sequence; `None` when it cannot tell.
///
/// # Safety
/// `ctx` is an open context.
unsafe fn probe(ctx: NonNull<ffi::ibv_context>) -> Option<bool> {
    let ctx = ctx.as_ptr();
    // SAFETY: `ctx` is open (the caller's promise); each object
    // is made from the one before it and released, in reverse order, by the
    // guards declared after it; every struct handed over is initialised and
    // lives across its call; the poll calls follow ibv_create_cq_ex(3)
    // (an `end_poll` after each successful `start_poll`).
    unsafe {
        let pd = NonNull::new(ffi::ibv_alloc_pd(ctx))?;
        let _pd = Release(|| {
            ffi::ibv_dealloc_pd(pd.as_ptr());
        });
        let mut cq_attr = ffi::ibv_cq_init_attr_ex {
            cqe: 4,
            ..Default::default()
        };
        let cq = NonNull::new(ffi::ibv_create_cq_ex(ctx, &mut cq_attr))?;
        let _cq = Release(|| {
            ffi::ibv_destroy_cq(ffi::ibv_cq_ex_to_cq(cq.as_ptr()));
        });
        let base_cq = ffi::ibv_cq_ex_to_cq(cq.as_ptr());
        let mut qp_attr = ffi::ibv_qp_init_attr {
            send_cq: base_cq,
            recv_cq: base_cq,
            cap: ffi::ibv_qp_cap {
                max_send_wr: 1,
                max_recv_wr: 1,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::IBV_QPT_RC,
            ..Default::default()
        };
        let qp = NonNull::new(ffi::ibv_create_qp(pd.as_ptr(), &mut qp_attr))?;
        let _qp = Release(|| {
            ffi::ibv_destroy_qp(qp.as_ptr());
        });
        let mut init = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: 0,
            ..Default::default()
        };
        let mask = ffi::IBV_QP_STATE
            | ffi::IBV_QP_PKEY_INDEX
            | ffi::IBV_QP_PORT
            | ffi::IBV_QP_ACCESS_FLAGS;
        if ffi::ibv_modify_qp(qp.as_ptr(), &mut init, mask as i32) != 0 {
            return None;
        }
        let mut wr = ffi::ibv_recv_wr {
            wr_id: PROBE_WR_ID,
            ..Default::default()
        };
        let mut bad = std::ptr::null_mut();
        if ffi::ibv_post_recv(qp.as_ptr(), &mut wr, &mut bad) != 0 {
            return None;
        }
        let mut err = ffi::ibv_qp_attr {
            qp_state: ffi::IBV_QPS_ERR,
            ..Default::default()
        };
        if ffi::ibv_modify_qp(qp.as_ptr(), &mut err, ffi::IBV_QP_STATE as i32) != 0 {
            return None;
        }

        let c = cq.as_ptr();
        let mut attr = ffi::ibv_poll_cq_attr::default();
        let deadline = Instant::now() + WAIT;
        loop {
            match ffi::ibv_start_poll(c, &mut attr) {
                0 => break,
                libc::ENOENT if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                _ => return None,
            }
        }
        let ours = (*c).wr_id == PROBE_WR_ID;
        let next = ffi::ibv_next_poll(c);
        ffi::ibv_end_poll(c);
        if !ours || next != libc::ENOENT {
            return None;
        }
        match ffi::ibv_start_poll(c, &mut attr) {
            libc::ENOENT => Some(false),
            0 => {
                ffi::ibv_end_poll(c);
                Some(true)
            }
            _ => None,
        }
    }
}
