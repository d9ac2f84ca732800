//! RESIZE_CQ (legacy write 19): the CQ moves to a new buffer.
//!
//! `ib_uverbs_resize_cq`: `response, cq_handle, cqe`, then the driver's
//! `mlx5_ib_resize_cq` (`buf_addr`, `cqe_size`); the response is `cqe`.
//! As a ConnectX does (and the kernel's `mlx5_ib_resize_cq` for a user
//! CQ): the device writes a RESIZE CQE into the old buffer at its producer
//! index and goes on in the new buffer one index later. libmlx5
//! (`mlx5_cq_resize_copy_cqes`) then copies the CQEs the program has not
//! polled, from its consumer index up to the RESIZE CQE, into the new
//! buffer at the same indices (each one later) and steps over the RESIZE
//! CQE, so that no completion is lost.

use super::cmd::{Cmd, MAX_CQE};
use super::errno::{refuse, Res};
use crate::config::debug;
use crate::model::lock;
use std::sync::atomic::{fence, AtomicU8, Ordering};

/// `MLX5_CQE_RESIZE_CQ`: the opcode of the CQE that ends the old buffer.
const OPCODE_RESIZE_CQ: u8 = 5;

/// RESIZE_CQ: a new buffer of `cqe + 1` (rounded up to a power of two)
/// entries. Refused (EINVAL) when the new size is out of range or cannot
/// hold the CQEs not yet polled and the RESIZE CQE (the CQ holds `cqe`
/// entries, as CREATE_CQ's overrun check reads it); a CQE size other than
/// the CQ's is not modelled (EOPNOTSUPP).
pub fn resize_cq(cmd: &mut Cmd) -> Res<()> {
    let c = cmd.core.tail(8);
    let (h, cqe) = (c.u32(0), c.u32(4));
    let buf = cmd.uhw.u64(0);
    let cqe_size = u32::from(cmd.uhw.u16(8));
    if cqe == 0 || cqe > MAX_CQE {
        return Err(refuse(
            libc::EINVAL,
            format_args!("RESIZE_CQ: {cqe} CQEs (1 to max_cqe {MAX_CQE})"),
        ));
    }
    let ncqe = (cqe + 1).next_power_of_two();
    let mut dev = lock();
    // A ConnectX has long executed what was posted before the command
    // reaches it: so does the device here, so that the completions it
    // counts against the new size are all there.
    crate::device::engine::step_locked(&mut dev);
    let cq = match dev.cqs.get_mut(&h) {
        Some(cq) if cq.ctx == cmd.fd => cq,
        _ => return Err(refuse(libc::EINVAL, format_args!("RESIZE_CQ: handle {h}"))),
    };
    if ncqe == cq.ncqe {
        // As the kernel: the same size is no change.
        cmd.out.u32(0, ncqe - 1);
        return Ok(());
    }
    if cqe_size != cq.cqe_size {
        return Err(refuse(
            libc::EOPNOTSUPP,
            format_args!(
                "RESIZE_CQ: CQE size {cqe_size} (the CQ's is {}): not modelled",
                cq.cqe_size
            ),
        ));
    }
    if buf == 0 || !buf.is_multiple_of(64) {
        return Err(refuse(
            libc::EINVAL,
            format_args!("RESIZE_CQ: buffer {buf:#x}"),
        ));
    }
    // Not counting earlier RESIZE CQEs the program stepped over and has
    // not yet told the device of (its doorbell record, at its next poll).
    let unpolled = cq.used();
    // The RESIZE CQE takes an index too: libmlx5 steps over it but tells
    // the device (the doorbell record) only at its next poll.
    if unpolled + 1 > ncqe - 1 {
        return Err(refuse(
            libc::EINVAL,
            format_args!(
                "RESIZE_CQ: {unpolled} CQEs not polled do not fit in {} entries",
                ncqe - 1
            ),
        ));
    }
    let size = u64::from(cq.cqe_size);
    let slot = u64::from(crate::cqe::slot(cq.pi, cq.ncqe));
    // In 128-byte CQEs the mlx5_cqe64 is the second half.
    let base = cq.buf + slot * size + (size - 64);
    let owner = u8::from(crate::cqe::owner_bit(cq.pi, cq.ncqe));
    // SAFETY: `base..base + 64` lies in the CQ's current buffer (slot <
    // ncqe); the program does not own the slot (it is past the producer
    // index, and the ring never fills: at most ncqe - 1 CQEs are
    // outstanding). op_own is stored last, with release ordering, as for
    // every CQE.
    unsafe {
        std::ptr::write_bytes(base as *mut u8, 0, 63);
        fence(Ordering::Release);
        AtomicU8::from_ptr((base + 63) as *mut u8)
            .store(OPCODE_RESIZE_CQ << 4 | owner, Ordering::Release);
    }
    debug!(
        "RESIZE_CQ cqn {:#x}: {} -> {ncqe} entries at {buf:#x} (pi {}, {unpolled} not polled)",
        cq.cqn, cq.ncqe, cq.pi
    );
    cq.resize_written();
    cq.pi = cq.pi.wrapping_add(1);
    cq.buf = buf;
    cq.ncqe = ncqe;
    cmd.out.u32(0, ncqe - 1);
    Ok(())
}
