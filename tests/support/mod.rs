//! Test support shared by the integration tests.

pub mod hw;
pub mod recorder;
pub mod rig;
