//! Memory regions: registered memory the device may read and write.
//!
//! One concern a file: the region, its registration and range checks
//! (`region`); scatter/gather entries made of it (`sge`); what a peer
//! needs to reach it (`remote`); reading and writing its contents
//! (`contents`, with the volatile copies of `volatile`); re-registration
//! (`rereg`).

mod contents;
mod region;
mod remote;
mod rereg;
mod sge;
#[cfg(test)]
mod tests;
mod volatile;

pub use crate::access::AccessFlags;
pub use region::MemoryRegion;
pub(crate) use region::{range_within, PEER_WRITES};
pub use remote::RemoteBuf;
pub(crate) use sge::recv_wr;
pub use sge::{NonEmptySge, Sge, SgeMut};
