//! The plain data of QPs: send ops, sizes, states, endpoints, options.

use super::{versioned_form, ByteForm, FORM_VERSION};
#[cfg(any(doc, test))]
use crate::error::Error;
use crate::error::Result;
use crate::ffi;
use crate::mr::AccessFlags;
use crate::port::{Gid, Mtu};

bitflags::bitflags! {
    /// The work-request builders a QP is created with
    /// (`ibv_qp_init_attr_ex.send_ops_flags`, `enum ibv_qp_create_send_ops_flags`).
    /// A builder whose op was not asked for is refused with
    /// [`Error::Unsupported`] before any C call.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SendOps: u64 {
        /// `ibv_wr_rdma_write`.
        const RDMA_WRITE = ffi::IBV_QP_EX_WITH_RDMA_WRITE as u64;
        /// `ibv_wr_rdma_write_imm`.
        const RDMA_WRITE_WITH_IMM = ffi::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM as u64;
        /// `ibv_wr_send`.
        const SEND = ffi::IBV_QP_EX_WITH_SEND as u64;
        /// `ibv_wr_send_imm`.
        const SEND_WITH_IMM = ffi::IBV_QP_EX_WITH_SEND_WITH_IMM as u64;
        /// `ibv_wr_rdma_read`.
        const RDMA_READ = ffi::IBV_QP_EX_WITH_RDMA_READ as u64;
        /// `ibv_wr_atomic_cmp_swp`.
        const ATOMIC_CMP_AND_SWP = ffi::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP as u64;
        /// `ibv_wr_atomic_fetch_add`.
        const ATOMIC_FETCH_AND_ADD = ffi::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD as u64;
        /// `ibv_wr_local_inv`.
        const LOCAL_INV = ffi::IBV_QP_EX_WITH_LOCAL_INV as u64;
        /// `ibv_wr_bind_mw` (type 2 windows, in a batch), and what
        /// [`QpEx::bind_mw`](crate::QpEx::bind_mw) (type 1, `ibv_bind_mw`)
        /// needs: libmlx5 sizes the send queue's slots for a bind only
        /// with it.
        const BIND_MW = ffi::IBV_QP_EX_WITH_BIND_MW as u64;
        /// `ibv_wr_send_inv`.
        const SEND_WITH_INV = ffi::IBV_QP_EX_WITH_SEND_WITH_INV as u64;
        /// `ibv_wr_atomic_write` (rdma-core's soft-RoCE provider; not
        /// libmlx5 44, whose QP creation refuses it).
        const ATOMIC_WRITE = ffi::IBV_QP_EX_WITH_ATOMIC_WRITE as u64;
        /// `ibv_wr_flush` (built with rdma-core 45 or later only).
        #[cfg(mlx5dv_ibv_wr_flush)]
        const FLUSH = ffi::IBV_QP_EX_WITH_FLUSH as u64;
    }
}

impl SendOps {
    /// Writes, reads, sends (with and without immediate) and both atomics:
    /// the usual set for an RC QP.
    pub fn rc_default() -> Self {
        SendOps::RDMA_WRITE
            | SendOps::RDMA_WRITE_WITH_IMM
            | SendOps::SEND
            | SendOps::SEND_WITH_IMM
            | SendOps::RDMA_READ
            | SendOps::ATOMIC_CMP_AND_SWP
            | SendOps::ATOMIC_FETCH_AND_ADD
    }
}

bitflags::bitflags! {
    /// The mlx5 builders a QP is created with
    /// (`mlx5dv_qp_init_attr.send_ops_flags`,
    /// `enum mlx5dv_qp_create_send_ops_flags`). Asking for any of them makes
    /// the QP with `mlx5dv_create_qp(3)`, which fails on a device or QP that
    /// does not support them.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Mlx5SendOps: u64 {
        /// `mlx5dv_wr_mr_interleaved` (RC only).
        const MR_INTERLEAVED = ffi::MLX5DV_QP_EX_WITH_MR_INTERLEAVED as u64;
        /// `mlx5dv_wr_mr_list` (RC only).
        const MR_LIST = ffi::MLX5DV_QP_EX_WITH_MR_LIST as u64;
        /// `mlx5dv_wr_raw_wqe`.
        const RAW_WQE = ffi::MLX5DV_QP_EX_WITH_RAW_WQE as u64;
        /// `mlx5dv_wr_memcpy` (RC or DCI; needs a non-zero
        /// `max_wr_memcpy_length`).
        const MEMCPY = ffi::MLX5DV_QP_EX_WITH_MEMCPY as u64;
    }
}

/// DCI streams (`struct mlx5dv_dci_streams`): a DCI with
/// `MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS` runs 2^`log_num_concurent` streams
/// at once, of which 2^`log_num_errored` may be in error before the whole QP
/// is. Stream ids go from 0 to 2^`log_num_concurent` - 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DciStreams {
    /// log2 of the concurrent streams (the man page's spelling).
    pub log_num_concurent: u8,
    /// log2 of the streams that may be in error.
    pub log_num_errored: u8,
}

impl DciStreams {
    /// How many stream ids there are: 2^`log_num_concurent`.
    pub fn num_streams(&self) -> u32 {
        1u32.checked_shl(u32::from(self.log_num_concurent))
            .unwrap_or(0)
    }
}

/// Queue sizes (`struct ibv_qp_cap`): asked for at creation
/// ([`QpBuilder::caps`](crate::QpBuilder::caps)), and what the QP actually
/// got ([`QpEx::caps`](crate::QpEx::caps)).
///
/// `Default` asks for:
///
/// | field | default | meaning |
/// |---|---|---|
/// | [`max_send_wr`](Self::max_send_wr) | 128 | work requests the send queue holds |
/// | [`max_recv_wr`](Self::max_recv_wr) | 128 | receives the receive queue holds (0 on a DCI, or with an SRQ) |
/// | [`max_send_sge`](Self::max_send_sge) | 4 | scatter/gather entries of one send work request |
/// | [`max_recv_sge`](Self::max_recv_sge) | 4 | scatter/gather entries of one receive |
/// | [`max_inline_data`](Self::max_inline_data) | 64 | bytes one send may carry inline |
///
/// Each is a minimum: the provider may give more, and what it gives is
/// what the QP holds to. mlx5 rounds the queue depths up to a power of
/// two, and sizes the send WQE for the scatter/gather entries and reports
/// the inline room that size leaves, so asking for `max_inline_data` 0
/// gives 12 there. Read the values the QP got back with
/// [`QpEx::caps`](crate::QpEx::caps), not from what was asked; a value
/// above the device's limits ([`DeviceAttr`](crate::DeviceAttr)) fails
/// the creation.
///
/// ```
/// use mlx5dv::QpCaps;
///
/// let c = QpCaps::default();
/// assert_eq!((c.max_send_wr, c.max_recv_wr), (128, 128));
/// assert_eq!((c.max_send_sge, c.max_recv_sge, c.max_inline_data), (4, 4, 64));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send WR.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        }
    }
}

pub use crate::qp_state::{QpKind, QpState};

/// What a peer needs to connect to a QP, exchanged out of band (the
/// LID/QPN/PSN/GID that `ibv_rc_pingpong` sends over TCP).
///
/// Two wire forms: the versioned byte form of [`to_bytes`](Self::to_bytes),
/// and, with the `serde` feature, `Serialize`/`Deserialize` as a struct of
/// `qpn`, `psn`, `lid` and `gid` (the GID as IPv6 text in human-readable
/// formats, 16 bytes in binary ones). Both refuse a QP number or PSN past
/// 24 bits when reading.
///
/// ```
/// # #[cfg(feature = "serde")] {
/// use mlx5dv::{Endpoint, Gid};
///
/// let gid = "::ffff:10.99.0.1".parse::<std::net::Ipv6Addr>().unwrap();
/// let e = Endpoint { qpn: 0x11, psn: 0xabcdef, lid: 0, gid: Gid::from(gid) };
/// let json = serde_json::to_string(&e).unwrap();
/// assert_eq!(json, r#"{"qpn":17,"psn":11259375,"lid":0,"gid":"::ffff:10.99.0.1"}"#);
/// assert_eq!(serde_json::from_str::<Endpoint>(&json).unwrap(), e);
/// # }
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// The QP number.
    pub qpn: u32,
    /// The first packet sequence number (24 bits).
    pub psn: u32,
    /// The port's LID (InfiniBand; 0 on RoCE).
    pub lid: u16,
    /// The port GID to address it by (RoCE, routed IB); zero when unused.
    pub gid: Gid,
}

/// The QP number and PSN in hex, as the crate's messages give them.
impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("qpn", &format_args!("{:#x}", self.qpn))
            .field("psn", &format_args!("{:#x}", self.psn))
            .field("lid", &self.lid)
            .field("gid", &self.gid)
            .finish()
    }
}

impl Endpoint {
    /// The length of the byte form ([`to_bytes`](Self::to_bytes)).
    pub const BYTES: usize = 28;
    /// The version of the byte form this crate writes and reads.
    pub const VERSION: u8 = FORM_VERSION;

    /// The byte form, to send to the peer (over TCP, in a CM's private
    /// data, in a file). Stable: a later release that changes it writes
    /// another version, which this one refuses rather than misreads.
    ///
    /// | offset | bytes | field |
    /// |---|---|---|
    /// | 0 | 1 | version: 2 |
    /// | 1 | 1 | form: 1 (an `Endpoint`'s; other types' forms have others) |
    /// | 2 | 2 | LID, big-endian |
    /// | 4 | 4 | QP number, big-endian (24 bits) |
    /// | 8 | 4 | PSN, big-endian (24 bits) |
    /// | 12 | 16 | GID, in wire order |
    ///
    /// ```
    /// use mlx5dv::{Endpoint, Gid};
    ///
    /// let e = Endpoint { qpn: 0x11, psn: 0xabcdef, lid: 0, gid: Gid([0; 16]) };
    /// let bytes = e.to_bytes();
    /// assert_eq!(bytes[..12], [2, 1, 0, 0, 0, 0, 0, 0x11, 0, 0xab, 0xcd, 0xef]);
    /// assert_eq!(Endpoint::from_bytes(&bytes)?, e);
    /// # Ok::<(), mlx5dv::Error>(())
    /// ```
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0] = Self::VERSION;
        b[1] = ByteForm::Endpoint.tag();
        b[2..4].copy_from_slice(&self.lid.to_be_bytes());
        b[4..8].copy_from_slice(&self.qpn.to_be_bytes());
        b[8..12].copy_from_slice(&self.psn.to_be_bytes());
        b[12..28].copy_from_slice(&self.gid.0);
        b
    }

    /// Reads the byte form of [`to_bytes`](Self::to_bytes): exactly
    /// [`BYTES`](Self::BYTES) bytes of version 2 and an `Endpoint`'s form
    /// byte, with a 24-bit QP number and PSN; anything else is refused
    /// (another type's byte form, such as a [`RemoteBuf`](crate::RemoteBuf)'s,
    /// as [`Error::WrongByteForm`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let b = versioned_form::<{ Self::BYTES }>(
            bytes,
            ByteForm::Endpoint,
            "Endpoint byte form length",
        )?;
        let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let (qpn, psn) = (word(4), word(8));
        super::check_24_bits("Endpoint QP number", qpn)?;
        super::check_24_bits("Endpoint PSN", psn)?;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[12..28]);
        Ok(Endpoint {
            qpn,
            psn,
            lid: u16::from_be_bytes([b[2], b[3]]),
            gid: Gid(gid),
        })
    }
}

/// How to connect an RC QP: the local port and GID, the path (MTU, service
/// level, and on RoCE or routed InfiniBand the global route header's
/// traffic class, flow label and hop limit), and the transport parameters
/// of the RTR and RTS transitions. `Default` gives the values rdma-core's
/// examples use (`ibv_rc_pingpong`):
///
/// | field | default | meaning |
/// |---|---|---|
/// | [`port`](Self::port) | 1 | the local port (from 1) |
/// | [`gid_index`](Self::gid_index) | `None` | the local GID to send from: required on RoCE (`Context::default_gid_index`), `None` on InfiniBand within a subnet |
/// | [`mtu`](Self::mtu) | [`Mtu::Mtu1024`] | the path MTU |
/// | [`sl`](Self::sl) | 0 | the service level |
/// | [`traffic_class`](Self::traffic_class) | 0 | the global route header's traffic class (RoCE: the IP DSCP and ECN bits) |
/// | [`flow_label`](Self::flow_label) | 0 | the global route header's flow label (20 bits) |
/// | [`hop_limit`](Self::hop_limit) | 64 | the global route header's hop limit (InfiniBand routing) |
/// | [`access`](Self::access) | `LOCAL_WRITE \| REMOTE_WRITE \| REMOTE_READ \| REMOTE_ATOMIC` | what remote peers may do through this QP (`qp_access_flags`) |
/// | [`timeout`](Self::timeout) | 14 | local ACK timeout, 4.096 µs × 2^14 ≈ 67 ms per try (0: wait for ever) |
/// | [`retry_cnt`](Self::retry_cnt) | 7 | retries of an unanswered packet before `RETRY_EXC_ERR` |
/// | [`rnr_retry`](Self::rnr_retry) | 7 | retries after the peer's "receiver not ready" before `RNR_RETRY_EXC_ERR`; 7 means for ever |
/// | [`min_rnr_timer`](Self::min_rnr_timer) | 12 | how long a peer is told to wait when this QP has no receive posted: code 12 is 0.64 ms |
/// | [`max_rd_atomic`](Self::max_rd_atomic) | 1 | RDMA reads and atomics this QP has outstanding at once |
/// | [`max_dest_rd_atomic`](Self::max_dest_rd_atomic) | 1 | RDMA reads and atomics from the peer this QP serves at once |
///
/// `rnr_retry` 7 retries for ever (the InfiniBand specification's value
/// for "infinite"): a send (or RDMA write with immediate) to a peer that
/// has no receive posted waits until a receive is posted there, and a
/// [`post_and_wait`](crate::QpEx::post_and_wait) of it ends with its
/// timeout (whose text says that the receiver may not be ready). With
/// 0 to 6 the send fails instead, after that many retries, with
/// [`WcStatus::RNR_RETRY_EXC_ERR`](crate::WcStatus::RNR_RETRY_EXC_ERR).
/// Post receives before the peer sends, or set a lower `rnr_retry` to be
/// told.
///
/// ```
/// use mlx5dv::{AccessFlags, ConnectOptions, Mtu};
///
/// let o = ConnectOptions::default();
/// assert_eq!((o.port, o.gid_index, o.mtu, o.sl), (1, None, Mtu::Mtu1024, 0));
/// assert_eq!((o.traffic_class, o.flow_label, o.hop_limit), (0, 0, 64));
/// let all = AccessFlags::LOCAL_WRITE
///     | AccessFlags::REMOTE_WRITE
///     | AccessFlags::REMOTE_READ
///     | AccessFlags::REMOTE_ATOMIC;
/// assert_eq!(o.access, all);
/// assert_eq!((o.timeout, o.retry_cnt, o.rnr_retry, o.min_rnr_timer), (14, 7, 7, 12));
/// assert_eq!((o.max_rd_atomic, o.max_dest_rd_atomic), (1, 1));
/// ```
///
/// Fields will be added in later releases (it is `#[non_exhaustive]`):
/// start from [`ConnectOptions::default`] and chain the setters (or assign
/// fields):
///
/// ```
/// use mlx5dv::{ConnectOptions, Mtu};
///
/// let opts = ConnectOptions::default()
///     .gid_index(Some(1))
///     .mtu(Mtu::Mtu4096)
///     .traffic_class(106);
/// assert_eq!(opts.hop_limit, 64);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectOptions {
    /// The local port (from 1).
    pub port: u8,
    /// The local GID index to send from: required on RoCE
    /// ([`Context::default_gid_index`](crate::Context::default_gid_index),
    /// [`gid_index_for_ip`](crate::Context::gid_index_for_ip) or
    /// [`gid_index_for_netdev`](crate::Context::gid_index_for_netdev)
    /// choose one), `None` on InfiniBand within a subnet.
    pub gid_index: Option<u8>,
    /// Path MTU.
    pub mtu: Mtu,
    /// Service level.
    pub sl: u8,
    /// Traffic class of the global route header (RoCE: the IP DSCP and
    /// ECN bits).
    pub traffic_class: u8,
    /// Flow label of the global route header (20 bits).
    pub flow_label: u32,
    /// Hop limit of the global route header (InfiniBand routing; on RoCE
    /// the kernel sets the IP TTL from its route to the peer instead).
    pub hop_limit: u8,
    /// What remote peers may do to this QP's memory.
    pub access: AccessFlags,
    /// Local ACK timeout: 4.096 µs × 2^timeout (0 = infinite).
    pub timeout: u8,
    /// Transport retries before `RETRY_EXC_ERR` (0..=7).
    pub retry_cnt: u8,
    /// RNR retries before `RNR_RETRY_EXC_ERR` (0..=6; 7 = for ever).
    pub rnr_retry: u8,
    /// RNR NAK timer code for incoming sends with no receive posted.
    pub min_rnr_timer: u8,
    /// Outstanding RDMA reads/atomics this QP issues.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA reads/atomics this QP accepts.
    pub max_dest_rd_atomic: u8,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            port: 1,
            gid_index: None,
            mtu: Mtu::Mtu1024,
            sl: 0,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
        }
    }
}

impl ConnectOptions {
    /// The local port (from 1). Default 1.
    pub fn port(mut self, port: u8) -> Self {
        self.port = port;
        self
    }

    /// The local GID index to send from (required on RoCE). Default
    /// `None` (InfiniBand within a subnet).
    pub fn gid_index(mut self, gid_index: Option<u8>) -> Self {
        self.gid_index = gid_index;
        self
    }

    /// The path MTU. Default [`Mtu::Mtu1024`].
    pub fn mtu(mut self, mtu: Mtu) -> Self {
        self.mtu = mtu;
        self
    }

    /// The service level. Default 0.
    pub fn sl(mut self, sl: u8) -> Self {
        self.sl = sl;
        self
    }

    /// The traffic class of the global route header. Default 0.
    pub fn traffic_class(mut self, traffic_class: u8) -> Self {
        self.traffic_class = traffic_class;
        self
    }

    /// The flow label of the global route header (20 bits). Default 0.
    pub fn flow_label(mut self, flow_label: u32) -> Self {
        self.flow_label = flow_label;
        self
    }

    /// The hop limit of the global route header. Default 64.
    pub fn hop_limit(mut self, hop_limit: u8) -> Self {
        self.hop_limit = hop_limit;
        self
    }

    /// What remote peers may do to this QP's memory. Default
    /// `LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC`.
    pub fn access(mut self, access: AccessFlags) -> Self {
        self.access = access;
        self
    }

    /// The local ACK timeout: 4.096 µs × 2^timeout (0 = infinite).
    /// Default 14 (≈ 67 ms).
    pub fn timeout(mut self, timeout: u8) -> Self {
        self.timeout = timeout;
        self
    }

    /// Transport retries (0..=7) before `RETRY_EXC_ERR`. Default 7.
    pub fn retry_cnt(mut self, retry_cnt: u8) -> Self {
        self.retry_cnt = retry_cnt;
        self
    }

    /// Retries after the peer answered "receiver not ready" (no receive
    /// posted), before `RNR_RETRY_EXC_ERR`: 0..=6, or 7 for ever.
    /// Default 7: a send to a peer that never posts a receive waits for
    /// ever (a scoped post until its timeout); below 7 it fails with
    /// [`WcStatus::RNR_RETRY_EXC_ERR`](crate::WcStatus::RNR_RETRY_EXC_ERR).
    pub fn rnr_retry(mut self, rnr_retry: u8) -> Self {
        self.rnr_retry = rnr_retry;
        self
    }

    /// The RNR NAK timer code: how long a peer is told to wait before it
    /// retries a send this QP had no receive for. Default 12 (0.64 ms).
    pub fn min_rnr_timer(mut self, min_rnr_timer: u8) -> Self {
        self.min_rnr_timer = min_rnr_timer;
        self
    }

    /// Outstanding RDMA reads/atomics this QP issues. Default 1.
    pub fn max_rd_atomic(mut self, max_rd_atomic: u8) -> Self {
        self.max_rd_atomic = max_rd_atomic;
        self
    }

    /// Outstanding RDMA reads/atomics this QP accepts. Default 1.
    pub fn max_dest_rd_atomic(mut self, max_dest_rd_atomic: u8) -> Self {
        self.max_dest_rd_atomic = max_dest_rd_atomic;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_byte_form_round_trips_and_refuses_what_it_cannot_read() {
        let e = Endpoint {
            qpn: 0x00ab_cdef,
            psn: 0x12_3456,
            lid: 0x0102,
            gid: Gid([7; 16]),
        };
        let b = e.to_bytes();
        assert_eq!(b.len(), Endpoint::BYTES);
        assert_eq!(b[..4], [2, 1, 1, 2]);
        assert_eq!(Endpoint::from_bytes(&b).unwrap(), e);
        assert!(Endpoint::from_bytes(&b[..27]).is_err());
        let mut v3 = b;
        v3[0] = 3;
        let err = Endpoint::from_bytes(&v3).unwrap_err().to_string();
        assert!(err.contains("version 3"), "{err}");
        let mut big = b;
        big[4] = 1; // QP number over 24 bits
        assert!(matches!(
            Endpoint::from_bytes(&big),
            Err(Error::OutOfRange { .. })
        ));
    }

    #[test]
    fn connect_options_setters_set_their_field() {
        let o = ConnectOptions::default()
            .gid_index(Some(3))
            .traffic_class(106)
            .flow_label(5)
            .hop_limit(2)
            .sl(1);
        assert_eq!(
            (
                o.gid_index,
                o.traffic_class,
                o.flow_label,
                o.hop_limit,
                o.sl
            ),
            (Some(3), 106, 5, 2, 1)
        );
        assert_eq!(ConnectOptions::default().hop_limit, 64);
    }
}
