//! The object model: the device's state as the kernel's commands make it
//! and the device engine runs it (contexts, PDs, keys, CQs, QPs, SRQs,
//! each QP's side of the fabric), the one lock over it, and the async
//! events either side raises. It knows neither the commands nor the
//! engine: both sit above it.

pub mod events;
pub mod lock;
pub mod state;
pub mod wire;

pub use lock::lock;
