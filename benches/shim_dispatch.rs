//! What a call through the compiled C shims costs on the posting path.
//!
//! A batch of 32 RDMA writes (start, 32 × {rdma_write, set_sge}, complete)
//! is posted against a null provider whose entries store their arguments
//! into a 64-byte slot of a ring, as a real provider writes a WQE. The same
//! batch is posted twice: through the `ffi` functions (Rust → C shim →
//! provider) and through the provider's function pointers directly (what C
//! code gets from the header's static-inline functions). The ratio is the
//! shims' overhead.
//!
//! ```text
//! cargo bench --bench shim_dispatch
//! ```

#![allow(clippy::undocumented_unsafe_blocks)]

use mlx5dv::ffi;
use std::hint::black_box;
use std::time::{Duration, Instant};

const BATCH: usize = 32;
const RING: usize = 256;

/// A QP whose entries write into a ring of 64-byte slots.
#[repr(C)]
struct NullQp {
    ibv: ffi::ibv_qp_ex,
    ring: Box<[[u64; 8]; RING]>,
    head: usize,
}

unsafe fn slot(qp: *mut ffi::ibv_qp_ex) -> &'static mut [u64; 8] {
    let q = unsafe { &mut *(qp as *mut NullQp) };
    let i = q.head % RING;
    unsafe { &mut *(&mut q.ring[i] as *mut [u64; 8]) }
}

unsafe extern "C" fn wr_start(qp: *mut ffi::ibv_qp_ex) {
    unsafe { (*(qp as *mut NullQp)).head = 0 };
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ffi::ibv_qp_ex, rkey: u32, remote_addr: u64) {
    let s = unsafe { slot(qp) };
    s[0] = unsafe { (*qp).wr_id };
    s[1] = u64::from(unsafe { (*qp).wr_flags });
    s[2] = u64::from(rkey);
    s[3] = remote_addr;
}

unsafe extern "C" fn wr_set_sge(qp: *mut ffi::ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let s = unsafe { slot(qp) };
    s[4] = u64::from(lkey);
    s[5] = addr;
    s[6] = u64::from(length);
    unsafe { (*(qp as *mut NullQp)).head += 1 };
}

unsafe extern "C" fn wr_complete(qp: *mut ffi::ibv_qp_ex) -> i32 {
    unsafe { (*(qp as *mut NullQp)).head as i32 - BATCH as i32 }
}

fn null_qp() -> Box<NullQp> {
    let mut qp = Box::new(NullQp {
        ibv: Default::default(),
        ring: Box::new([[0; 8]; RING]),
        head: 0,
    });
    qp.ibv.wr_start = Some(wr_start);
    qp.ibv.wr_rdma_write = Some(wr_rdma_write);
    qp.ibv.wr_set_sge = Some(wr_set_sge);
    qp.ibv.wr_complete = Some(wr_complete);
    qp
}

fn batch_through_shims(qp: *mut ffi::ibv_qp_ex) {
    unsafe {
        ffi::ibv_wr_start(qp);
        for i in 0..BATCH as u64 {
            (*qp).wr_id = i;
            (*qp).wr_flags = ffi::IBV_SEND_SIGNALED;
            ffi::ibv_wr_rdma_write(qp, 0x1234, 0x10_0000 + i * 64);
            ffi::ibv_wr_set_sge(qp, 0x5678, 0x20_0000 + i * 64, 64);
        }
        assert_eq!(ffi::ibv_wr_complete(qp), 0);
    }
}

fn batch_direct(qp: *mut ffi::ibv_qp_ex) {
    unsafe {
        let q = &*qp;
        let (start, write, sge, complete) = (
            q.wr_start.unwrap(),
            q.wr_rdma_write.unwrap(),
            q.wr_set_sge.unwrap(),
            q.wr_complete.unwrap(),
        );
        start(qp);
        for i in 0..BATCH as u64 {
            (*qp).wr_id = i;
            (*qp).wr_flags = ffi::IBV_SEND_SIGNALED;
            write(qp, 0x1234, 0x10_0000 + i * 64);
            sge(qp, 0x5678, 0x20_0000 + i * 64, 64);
        }
        assert_eq!(complete(qp), 0);
    }
}

/// The best of several timed rounds, in nanoseconds per work request.
fn ns_per_wr(post: fn(*mut ffi::ibv_qp_ex), qp: *mut ffi::ibv_qp_ex) -> f64 {
    let rounds = 20;
    let batches = 20_000;
    let mut best = Duration::MAX;
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..batches {
            post(black_box(qp));
        }
        best = best.min(t.elapsed());
    }
    best.as_nanos() as f64 / (batches * BATCH) as f64
}

fn main() {
    let mut qp = null_qp();
    let p = &mut qp.ibv as *mut ffi::ibv_qp_ex;
    batch_through_shims(p);
    assert_eq!(qp.ring[BATCH - 1][3], 0x10_0000 + (BATCH as u64 - 1) * 64);
    let direct = ns_per_wr(batch_direct, p);
    let shims = ns_per_wr(batch_through_shims, p);
    println!("RDMA write + SGE, batches of {BATCH}, null provider (best of 20 rounds):");
    println!("  provider pointers directly: {direct:6.2} ns/WR");
    println!("  through the C shims:        {shims:6.2} ns/WR");
    println!("  ratio shims/direct:         {:6.3}", shims / direct);
}
