//! Test support shared by the integration tests.

pub mod examples;
pub mod fakes;
pub mod hw;
pub mod process;
pub mod recorder;
pub mod rig;
pub mod table;
