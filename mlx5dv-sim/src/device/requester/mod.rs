//! The requester: a WQE posted on a send queue. [`execute`](execute::execute)
//! runs it: on this host, where its responder serves it at once
//! ([`crate::device::responder::serve`]), or as request packets to the host
//! its destination names ([`remote`]), which answers later. Lowest first:
//! [`gather`] (the WQE's own memory), [`packets`] (the WQE as request
//! packets), [`retry`] (timers), [`remote`], [`execute`].

pub mod execute;
pub mod gather;
pub mod packets;
pub mod remote;
pub mod retry;
