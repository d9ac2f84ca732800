//! The work-request batch: `ibv_wr_start` → per WR: attributes, one
//! builder, its data → `ibv_wr_complete`, as in `ibv_wr_post(3)`.
//!
//! ```no_run
//! # use mlx5dv::*;
//! # fn demo(qp: &mut RcQp, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! let mut batch = qp.batch();
//! batch.wr(1).signaled().rdma_write(remote).sge(mr.sge(0..64)?)?;
//! batch.wr(2).send().inline(b"done")?;
//! // SAFETY: `mr` stays registered and untouched until the write's
//! // completion has been polled.
//! unsafe { batch.complete()? };
//! # Ok(()) }
//! ```
//!
//! Each work request is handed to the provider whole, in its last step
//! (`sge`, `sge_list`, `inline`): the builder and the setters are called
//! together, after every check has passed, so no half-built work request
//! ever reaches C. The rules of the man page are types:
//!
//! Data cannot be given before a builder:
//!
//! ```compile_fail,E0599
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp, mr: &MemoryRegion) -> Result<()> {
//! let mut batch = qp.batch();
//! batch.wr(1).sge(mr.sge(..)?)?; // ERROR: no builder chosen: no `sge` here
//! # Ok(()) }
//! ```
//!
//! A work request cannot be left half-built across `complete`:
//!
//! ```compile_fail,E0505
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! let mut batch = qp.batch();
//! let half = batch.wr(1).rdma_write(remote);
//! unsafe { batch.complete()? }; // ERROR: `half` still borrows the batch
//! half.sge(mr.sge(..)?)?;
//! # Ok(()) }
//! ```
//!
//! A batch completes once:
//!
//! ```compile_fail,E0382
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp) -> Result<()> {
//! let batch = qp.batch();
//! unsafe { batch.complete()? };
//! unsafe { batch.complete()? }; // ERROR: moved by the first complete
//! # Ok(()) }
//! ```
//!
//! Two batches cannot be open on one QP:
//!
//! ```compile_fail,E0499
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp) {
//! let a = qp.batch();
//! let b = qp.batch(); // ERROR: the QP is already borrowed by `a`
//! drop((a, b));
//! # }
//! ```
//!
//! Inline data cannot be given to an RDMA read (it has a destination, not
//! a source):
//!
//! ```compile_fail,E0599
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp, remote: RemoteBuf) -> Result<()> {
//! let mut batch = qp.batch();
//! batch.wr(1).rdma_read(remote).inline(b"x")?; // ERROR: a read has no inline data
//! # Ok(()) }
//! ```
//!
//! On a DCI every work request needs its DC address
//! (`mlx5dv_wr_set_dc_addr`): there is no `wr` without one.
//!
//! ```compile_fail,E0061
//! # use mlx5dv::*;
//! # fn f(qp: &mut DciQp, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! let mut batch = qp.batch();
//! batch.wr(1).rdma_write(remote).sge(mr.sge(..)?)?; // ERROR: no DcAddr
//! # Ok(()) }
//! ```
//!
//! The RC-only builders (`mr_list`, `mr_interleaved`, `raw_wqe`) do not
//! exist on a DCI work request:
//!
//! ```compile_fail,E0599
//! # use mlx5dv::*;
//! # fn f(qp: &mut DciQp, addr: DcAddr<'_>, mkey: &Mkey, mr: &MemoryRegion) -> Result<()> {
//! let mut batch = qp.batch();
//! batch.wr(1, addr).mr_list(mkey, AccessFlags::LOCAL_WRITE, &[mr.sge(..)?])?; // ERROR: RC only
//! # Ok(()) }
//! ```
//!
//! A DCI work request with its address compiles:
//!
//! ```no_run
//! # use mlx5dv::*;
//! # fn f(qp: &mut DciQp, ah: &AddressHandle, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! let addr = DcAddr::new(ah, 0x1234, 0xC0FFEE);
//! let mut batch = qp.batch();
//! batch.wr(1, addr).signaled().rdma_write(remote).sge(mr.sge(..)?)?;
//! batch.wr_stream(2, addr, 1).send().inline(b"hi")?;
//! // SAFETY: `mr` outlives the completions, polled later.
//! unsafe { batch.complete()? };
//! # Ok(()) }
//! ```
//!
//! In the scoped form ([`QpEx::post_and_wait`]), memory a work request
//! uses stays borrowed until the device is done with it: after a write
//! from `src` is added, `src` cannot be changed, even within the closure
//! that added it (the borrow lasts past the closure, to the completion):
//!
//! ```compile_fail,E0502
//! # use mlx5dv::*;
//! # use std::time::Duration;
//! # fn f(qp: &mut RcQp, cq: &mut CompletionQueue, src: &mut MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! qp.post_and_wait(cq, Duration::from_secs(1), |b| {
//!     b.wr(1).rdma_write(remote).sge(src.sge(0..8)?)?;
//!     src.fill(0..8, 1) // ERROR: the posted write still borrows `src`
//! })?;
//! # Ok(()) }
//! ```
//!
//! Memory the device writes (RDMA read, atomic and memcpy destinations) is
//! named by an [`SgeMut`], which borrows its region
//! exclusively: nothing may read it while the device writes it.
//!
//! ```compile_fail,E0277
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp, mr: &MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! let mut batch = qp.batch();
//! batch.wr(1).rdma_read(remote).sge(mr.sge(0..8)?)?; // ERROR: a read's destination is an SgeMut, not an Sge
//! # Ok(()) }
//! ```
//!
//! An atomic has exactly one 8-byte SGE: there is no `sge_list` for it.
//!
//! ```compile_fail,E0599
//! # use mlx5dv::*;
//! # fn f(qp: &mut RcQp, mr: &mut MemoryRegion, remote: RemoteBuf) -> Result<()> {
//! let (lo, hi) = mr.sge_mut(0..8)?.split_at(4)?;
//! let mut batch = qp.batch();
//! batch.wr(1).atomic_fetch_add(remote, 1).sge_list(&[lo, hi])?; // ERROR: one SGE only
//! # Ok(()) }
//! ```
//!
//! Dropping a batch without completing it aborts it (`ibv_wr_abort`):
//! nothing of it is posted.
//!
//! Flags: [`QpEx::batch_with`] sets the flags of every work request of a
//! batch once (C's `qpx->wr_flags = ...` before its loop); [`Wr::flags`]
//! and its shorthands add flags to one work request. A work request's
//! flags are written before its builder when they differ from what the
//! QP's `wr_flags` holds (the batch's, or those the previous work request
//! wrote), so a loop of work requests with the same flags writes them at
//! most once.

#[cfg(doc)]
use crate::mr::SgeMut;
#[cfg(doc)]
use crate::qp::QpEx;

mod atomic_write;
mod batch;
mod bind;
mod flags;
#[cfg(mlx5dv_ibv_wr_flush)]
mod flush;
mod mlx5;
mod op;
mod scoped;
mod state;
#[cfg(test)]
mod tests;
mod xrc;

pub use batch::WrBatch;
pub use flags::SendFlags;
#[cfg(mlx5dv_ibv_wr_flush)]
pub use flush::{FlushLevel, FlushPlacement};
pub use mlx5::{MemcpyOp, MrInterleaved};
pub(crate) use op::Addressed;
pub use op::{Atomic, Destination, Op, Source, Wr};
pub use scoped::ScopedBatch;
pub(crate) use scoped::{abort_with, said_with};
pub(crate) use state::PeerReceive;
