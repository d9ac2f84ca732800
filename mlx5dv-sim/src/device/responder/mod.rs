//! The responder: what the device does with a request that reaches one of
//! its QPs or DCTs, from another host (a packet from the fabric) or from a
//! QP of this host (the requester calls [`serve`] directly). The steps, in
//! the order they happen, each a file:
//!
//! 1. [`receive`](mod@receive): the packet, taken from the fabric and decoded; an answer
//!    goes to its requester, a request through the steps below
//!    ([`receive::respond`] strings them together).
//! 2. [`sender`]: the sender and the PSN: the QP is there and ready, the
//!    packet comes from its peer with the PSN it expects (duplicates are
//!    answered again), a DC packet carries the DCT's key.
//! 3. [`access`]: the key and the access: the XRC SRQ a packet names, the
//!    responder QP's access flags, the rkey in its PD.
//! 4. [`execute`](mod@execute): the operation: write, read, atomic, send; a message
//!    that takes a receive WQE goes through [`deliver`]; a UD datagram
//!    through [`datagram`].
//! 5. [`reply`]: the answer (ACK, RNR NAK, NAK), kept for duplicates and
//!    sent back.

// 1. The packet.
pub mod receive;

// 2. The sender and the PSN.
pub mod sender;

// 3. The key and the access.
pub mod access;

// 4. The execution.
pub mod execute;

// 4, for a message that takes a receive WQE (a send, a write with
// immediate).
pub mod deliver;

// 4, for a UD datagram (no sender check before it, no reply after).
pub mod datagram;

// 5. The reply.
pub mod reply;

pub use access::bind_xrc_srq;
pub use datagram::{ud_deliver, Datagram};
pub use execute::serve;
pub use receive::{receive, respond};
pub use sender::{check_dc_key, ready_dct};
