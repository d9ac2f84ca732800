//! How a QP connects: [`ConnectOptions`], the port, GID, path and
//! transport parameters of the RTR and RTS transitions.

use crate::access::AccessFlags;
use crate::port::Mtu;

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
