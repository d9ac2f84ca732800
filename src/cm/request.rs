//! A peer's connect request: accept or reject (the methods of
//! [`ConnectRequest`], which is defined in `handles.rs`).

use super::handles::{CmEvent, CmId, ConnectRequest};
use super::id::{show, CmQpAttr};
use super::kind::CmEventKind;
use super::param::{ConnParam, MAX_ACCEPT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA};
use super::steps::Awaiting;
use crate::error::{Error, Result};
use crate::ffi::cm;
use crate::qp::RcQp;
use std::sync::atomic::Ordering;
use std::time::Duration;

impl ConnectRequest {
    pub(crate) fn new(id: CmId, private_data: Vec<u8>, conn: &cm::rdma_conn_param) -> Self {
        ConnectRequest {
            id,
            private_data,
            responder_resources: conn.responder_resources,
            initiator_depth: conn.initiator_depth,
        }
    }

    /// The new id: its [`context`](CmId::context) is the device to make
    /// the connection's PD, CQs, MRs and QP on.
    pub fn id(&self) -> &CmId {
        &self.id
    }

    /// The private data of the request (up to 56 bytes, zero-padded).
    pub fn private_data(&self) -> &[u8] {
        &self.private_data
    }

    /// The RDMA reads the peer accepts at once (its responder resources).
    pub fn peer_responder_resources(&self) -> u8 {
        self.responder_resources
    }

    /// The RDMA reads the peer issues at once (its initiator depth).
    pub fn peer_initiator_depth(&self) -> u8 {
        self.initiator_depth
    }

    /// Accepts with `qp` (on the id's device, in RESET or INIT): moves it
    /// to RTR with the CM's attributes, answers the peer (`rdma_accept(3)`),
    /// waits up to `timeout` for `RDMA_CM_EVENT_ESTABLISHED`, and only then
    /// moves it to RTS. Returns the connected id.
    ///
    /// Until the connection is established the QP sends nothing: a failed
    /// or timed-out accept leaves it in ERR, never in RTS.
    pub fn accept(self, qp: &RcQp, param: &ConnParam, timeout: Duration) -> Result<CmId> {
        let (id, what, rts, step) = self.accept_start(qp, param)?;
        let ev = id.expect(step, CmEventKind::Established, &what, timeout);
        accept_finish(id, qp, param, rts, ev)
    }

    /// Checks, moves `qp` to RTR with the CM's attributes, asks the CM
    /// for the RTS attributes, then answers the peer (`rdma_accept`); the
    /// caller awaits `ESTABLISHED` and calls [`accept_finish`]. The RTS
    /// attributes are the fallback should the CM refuse them at
    /// `ESTABLISHED` (it does once the peer has begun to disconnect).
    /// They are asked for before the answer, as rdma_cm itself moves a QP
    /// it manages to RTR and RTS before answering (the CM gives the same
    /// attributes before and after it): once the answer is out, the peer
    /// may connect and disconnect before the next call (seen with a client
    /// that drops its id as soon as `connect` returns, on a loaded
    /// machine), and the CM then refuses them. A failure after the checks
    /// moves the QP to ERR.
    pub(super) fn accept_start(
        self,
        qp: &RcQp,
        param: &ConnParam,
    ) -> Result<(CmId, String, CmQpAttr, Awaiting)> {
        param.check(MAX_ACCEPT_PRIVATE_DATA, "rdma_accept")?;
        let id = self.id;
        id.check_qp(qp)?;
        let what = format!("rdma_accept from {}", show(id.peer_addr()));
        let result = (|| {
            id.init_if_reset(qp)?;
            id.to_rtr(qp, param)?;
            let rts = id.rts_attr(param)?;
            let mut raw = param.to_raw(qp.qp_num());
            let ((), step) = id.ask(CmEventKind::Established, || {
                // SAFETY: the id is live; `raw` and its private data are
                // valid for the call.
                let rc = unsafe { cm::rdma_accept(id.raw(), &mut raw) };
                if rc != 0 {
                    return Err(Error::last_os("rdma_accept", what.clone()));
                }
                Ok(())
            })?;
            Ok((rts, step))
        })();
        match result {
            Ok((rts, step)) => Ok((id, what, rts, step)),
            Err(e) => {
                let _ = qp.to_error();
                Err(e)
            }
        }
    }

    /// Rejects the request (`rdma_reject(3)`) with up to
    /// [`MAX_REJECT_PRIVATE_DATA`] bytes of private data for the peer.
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        if private_data.len() > MAX_REJECT_PRIVATE_DATA {
            return Err(Error::OutOfRange {
                what: "rdma_cm private data length",
                value: private_data.len() as u64,
                limit: format!("at most {MAX_REJECT_PRIVATE_DATA} bytes on rdma_reject"),
            });
        }
        // SAFETY: the id is live; the data is valid for the call.
        let rc = unsafe {
            cm::rdma_reject(
                self.id.raw(),
                private_data.as_ptr().cast(),
                private_data.len() as u8,
            )
        };
        if rc != 0 {
            return Err(Error::last_os("rdma_reject", format!("{:?}", self.id)));
        }
        Ok(())
    }
}

/// Ends an accept on `ev`, the checked `ESTABLISHED` event (or the error
/// in its place): RTS and the connected id, or the error with the QP in
/// ERR.
pub(super) fn accept_finish(
    id: CmId,
    qp: &RcQp,
    param: &ConnParam,
    early: CmQpAttr,
    ev: Result<CmEvent>,
) -> Result<CmId> {
    // The CM's RTS attributes as of now; when it refuses them (the peer
    // has begun to disconnect already), those it gave before
    // `rdma_accept`.
    let rts = |_| id.rts_attr(param).or(Ok::<_, Error>(early));
    match ev.and_then(rts).and_then(|rts| rts.apply(qp)) {
        Ok(()) => {
            id.connected.store(true, Ordering::Relaxed);
            Ok(id)
        }
        Err(e) => {
            let _ = qp.to_error();
            Err(e)
        }
    }
}
