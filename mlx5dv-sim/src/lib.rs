//! A software mlx5 device for the real libibverbs and libmlx5.
//!
//! Built as a cdylib, this crate is an `LD_PRELOAD` interposer
//! ([`interpose`]) that gives a process a ConnectX-6 named `mlx5_0`: a fake
//! uverbs kernel ([`kernel`]) answers the commands libibverbs and libmlx5
//! send, and a device engine ([`device`]) executes the work requests
//! libmlx5 writes into send queues, on the process's own memory, writing
//! the completions libmlx5 polls. The unmodified libraries run their whole
//! user-space data path. Start programs under it with the `mlx5-sim`
//! runner (`scripts/mlx5-sim -- CMD`); see the README for the environment
//! variables, and for what is modelled and what is not. What the model
//! does is our reading of the device, not the device.
//!
//! ## Module map
//!
//! Lowest first; each module uses only those of its own line or of an
//! earlier one (a lower layer).
//!
//! 1. `config`, `sys`: the settings from the environment, and the
//!    process's own system calls without the interposer (libc's
//!    definitions, raw reads of the memory shared with the program).
//! 2. `mkey`, `wqe`, `cqe`, `fabric`: the formats the device reads and
//!    writes (mkey layouts, send-queue WQEs, CQEs) and the fabric between
//!    the hosts (its packets, the hosts and their addresses).
//! 3. `model`: the object model, the device's state (contexts, PDs, keys,
//!    CQs, QPs, SRQs, each QP's side of the fabric), the one lock over it,
//!    and the async events.
//! 4. `device`: the device engine, which runs what is posted on the model's
//!    queues: the requester, the responder (a pipeline, one step a file,
//!    in device/responder/), and the loop.
//! 5. `kernel`: the fake uverbs kernel, whose commands make and change the
//!    model; it reaches the engine through two functions only, the one
//!    that starts it (device::ensure_running) and, for RESIZE_CQ, one step
//!    (device::engine::step_locked: what was posted before the command has
//!    run, as on a ConnectX).
//! 6. `interpose`: the `LD_PRELOAD` entry points, which hand the calls on
//!    the fake device node to the kernel.

#![deny(missing_docs)]
#![cfg_attr(not(test), deny(clippy::undocumented_unsafe_blocks))]

// The interposer's `struct stat` and variadic-call assumptions, and the
// uverbs ABI structs it reads, are those of 64-bit Linux.
#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
compile_error!("mlx5dv-sim supports 64-bit Linux only");

pub mod config;
pub mod cqe;
pub mod device;
pub mod fabric;
pub mod interpose;
pub mod kernel;
pub mod mkey;
pub mod model;
pub mod sys;
pub mod wqe;
