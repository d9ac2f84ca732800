//! The device engine: finds posted work by polling the doorbell records,
//! runs it, writes completions.
//!
//! A free-running thread calls [`step`] (unless `MLX5DV_SIM_THREAD=0`);
//! tests that want determinism call the exported `mlx5dv_sim_step()`
//! themselves. One step runs every WQE posted so far on every QP, flushes
//! the queues of QPs in error, and writes completion events for armed CQs.
//!
//! Its parts, lowest first (each uses only those before it):
//!
//! - the pieces both sides use: [`outcome`] (how a WQE or a request
//!   ended), [`trace`], [`cq`] (writing CQEs and completion events),
//!   [`mem`] (memory through keys), [`ud_grh`], [`address`] (which host a
//!   destination names), [`window`] (memory windows);
//! - [`responder`]: a request that reaches a QP, from this host or from
//!   another, step by step in the order they happen;
//! - [`requester`]: a WQE posted on a send queue, run here (its responder
//!   through [`responder::serve`]) or sent to another host;
//! - [`engine`]: the loop over the queues, and the device thread.

pub mod address;
pub mod cq;
pub mod engine;
pub mod mem;
pub mod outcome;
pub mod requester;
pub mod responder;
pub mod trace;
pub mod ud_grh;
pub mod window;

pub use engine::{ensure_running, mlx5dv_sim_step, step, step_locked};
