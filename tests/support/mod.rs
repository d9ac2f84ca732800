//! Test support shared by the integration tests.

pub mod recorder;
pub mod rig;
