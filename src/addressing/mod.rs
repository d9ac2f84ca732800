//! Addressing: where a QP's packets go and how a connection is set up,
//! below the QPs that use it. The GID table's choice on RoCE ([`roce`]),
//! address handles ([`ah`]), the global route header of a received UD
//! message ([`grh`]), and [`ConnectOptions`] ([`options`]).

pub(crate) mod ah;
pub(crate) mod grh;
pub(crate) mod options;
pub(crate) mod roce;

pub use options::ConnectOptions;
