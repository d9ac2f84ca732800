//! The send queue a WQE is read from: the QP's kind and what else of the
//! QP the parser checks a WQE against.

/// The type of the QP whose send queue holds the WQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QpKind {
    /// Reliable connected.
    Rc,
    /// Unreliable connected: no RDMA read, atomics or memcpy.
    Uc,
    /// DC initiator (`IBV_QPT_DRIVER`, `MLX5DV_DCTYPE_DCI`).
    Dci,
    /// DC target: has no send queue; every WQE is refused.
    Dct,
    /// Unreliable datagram.
    Ud,
    /// XRC initiator (`IBV_QPT_XRC_SEND`): as RC, with an XRC segment
    /// (the remote SRQ number) after the control segment.
    XrcIni,
}

/// What the parser needs to know of the QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpView {
    /// The QP number (24 bits).
    pub qpn: u32,
    /// The QP type.
    pub kind: QpKind,
    /// The QP's `max_inline_data` as libmlx5 computed it
    /// (`qp->max_inline_data`): libmlx5 writes that value into the
    /// `cap.max_inline_data` of the CREATE_QP command.
    pub max_inline: u32,
    /// The QP's gather entries per WQE (`qp->sq.max_gs`): the
    /// `cap.max_send_sge` of the CREATE_QP command.
    pub max_send_sge: u32,
    /// WQEBBs in the send queue (`sq_wqe_count`).
    pub sq_wqe_cnt: u32,
    /// The largest WQE in bytes (`max_sq_desc_sz`, e.g. 1024; 63 DS cap it
    /// at 1008).
    pub max_wqe_size: u32,
    /// A DCI created with DCI streams (stream channel ids allowed).
    pub dci_streams: bool,
    /// The QP was created with `MLX5_QP_FLAG_SIGNATURE` (libmlx5 built with
    /// `MLX5_QP_SIGNATURE`): WQE signatures are checked.
    pub signature: bool,
    /// The WQEBB counter (mod 2^16) at which the device found the WQE; when
    /// `Some`, the WQE index must equal it.
    pub expected_wqe_index: Option<u16>,
}
