//! The parameters of a connect or accept (`struct rdma_conn_param`) and
//! the private-data limits.

use crate::error::{Error, Result};
use crate::ffi::cm;

/// Private data a connect request carries at most (rdma_connect(3),
/// `RDMA_PS_TCP`: 56 bytes).
pub const MAX_CONNECT_PRIVATE_DATA: usize = 56;
/// Private data an accept carries at most (the IB CM REP: 196 bytes).
pub const MAX_ACCEPT_PRIVATE_DATA: usize = 196;
/// Private data a reject carries at most (the IB CM REJ: 148 bytes).
pub const MAX_REJECT_PRIVATE_DATA: usize = 148;

/// The parameters of a connect or accept (`struct rdma_conn_param`):
/// private data, RDMA read depths, retry counts. Built with chained
/// setters; `Default` lets the CM choose the depths (the device's
/// maximum, bounded by the peer's) and retries 7 times.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub struct ConnParam {
    private_data: Vec<u8>,
    pub(super) responder_resources: u8,
    pub(super) initiator_depth: u8,
    retry_count: u8,
    rnr_retry_count: u8,
}

impl Default for ConnParam {
    fn default() -> Self {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: cm::RDMA_MAX_RESP_RES as u8,
            initiator_depth: cm::RDMA_MAX_INIT_DEPTH as u8,
            retry_count: 7,
            rnr_retry_count: 7,
        }
    }
}

impl ConnParam {
    /// The defaults (see the type).
    pub fn new() -> Self {
        Self::default()
    }

    /// Private data for the peer: at most [`MAX_CONNECT_PRIVATE_DATA`]
    /// bytes on a connect, [`MAX_ACCEPT_PRIVATE_DATA`] on an accept.
    pub fn private_data(mut self, data: &[u8]) -> Self {
        self.private_data = data.to_vec();
        self
    }

    /// RDMA reads and atomics this side accepts at once from the peer.
    pub fn responder_resources(mut self, n: u8) -> Self {
        self.responder_resources = n;
        self
    }

    /// RDMA reads and atomics this side issues at once to the peer.
    pub fn initiator_depth(mut self, n: u8) -> Self {
        self.initiator_depth = n;
        self
    }

    /// Transport retries (0..=7; ignored when accepting).
    pub fn retry_count(mut self, n: u8) -> Self {
        self.retry_count = n;
        self
    }

    /// RNR retries (0..=6; 7 = infinite).
    pub fn rnr_retry_count(mut self, n: u8) -> Self {
        self.rnr_retry_count = n;
        self
    }

    pub(super) fn check(&self, limit: usize, call: &str) -> Result<()> {
        if self.private_data.len() > limit {
            return Err(Error::OutOfRange {
                what: "rdma_cm private data length",
                value: self.private_data.len() as u64,
                limit: format!("at most {limit} bytes on {call}"),
            });
        }
        if self.retry_count > 7 || self.rnr_retry_count > 7 {
            return Err(Error::OutOfRange {
                what: "retry_count / rnr_retry_count",
                value: u64::from(self.retry_count.max(self.rnr_retry_count)),
                limit: "at most 7 (3-bit fields)".into(),
            });
        }
        Ok(())
    }

    /// The C struct; borrows `self`'s private data for the call.
    pub(super) fn to_raw(&self, qp_num: u32) -> cm::rdma_conn_param {
        cm::rdma_conn_param {
            private_data: self.private_data.as_ptr().cast(),
            private_data_len: self.private_data.len() as u8,
            responder_resources: self.responder_resources,
            initiator_depth: self.initiator_depth,
            flow_control: 1,
            retry_count: self.retry_count,
            rnr_retry_count: self.rnr_retry_count,
            srq: 0,
            qp_num,
        }
    }
}
