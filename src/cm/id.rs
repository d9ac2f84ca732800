//! CM ids (`rdma_create_id(3)`): address and route resolution, listen,
//! connect, accept, reject, disconnect; the QP moved through its states
//! with the attributes the CM gives (`rdma_init_qp_attr(3)`). The methods
//! of [`CmId`], which is defined in `handles.rs`.

use super::addr::{self, RawAddr};
use super::handles::{CmEvent, CmId, ConnectRequest, EventChannel, IdInner};
use super::kind::{CmEventKind, CmIdKey};
use super::param::{ConnParam, MAX_CONNECT_PRIVATE_DATA};
use super::steps::Awaiting;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ffi;
use crate::ffi::cm;
use crate::qp::{QpState, RcQp};
use std::fmt;
use std::net::SocketAddr;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The next key of a CM id; never reused in a process.
static NEXT_KEY: AtomicU64 = AtomicU64::new(1);

fn next_key() -> CmIdKey {
    CmIdKey(NEXT_KEY.fetch_add(1, Ordering::Relaxed))
}

impl CmId {
    /// A new id on its own event channel.
    pub fn new() -> Result<Self> {
        Self::with_channel(&EventChannel::new()?)
    }

    /// A new id whose events arrive on `channel`.
    pub fn with_channel(channel: &EventChannel) -> Result<Self> {
        let key = next_key();
        let mut id = std::ptr::null_mut();
        // SAFETY: the channel is live; `id` is writable; the context is a
        // number, never dereferenced.
        let rc = unsafe {
            cm::rdma_create_id(
                channel.as_ptr(),
                &mut id,
                key.0 as usize as *mut libc::c_void,
                cm::RDMA_PS_TCP,
            )
        };
        let id = match NonNull::new(id) {
            Some(id) if rc == 0 => id,
            _ => return Err(Error::last_os("rdma_create_id", "RDMA_PS_TCP")),
        };
        Ok(CmId::wrap(id, key, channel.clone()))
    }

    fn wrap(id: NonNull<cm::rdma_cm_id>, key: CmIdKey, channel: EventChannel) -> Self {
        CmId {
            inner: Arc::new(IdInner { id, key, channel }),
            connected: AtomicBool::new(false),
        }
    }

    /// Takes ownership of the new id of a connect request, moving it to an
    /// event channel of its own.
    ///
    /// # Safety
    ///
    /// `raw` is the id of a connect request event that has been
    /// acknowledged, owned by no one else.
    pub(crate) unsafe fn adopt_request(raw: NonNull<cm::rdma_cm_id>) -> Result<Self> {
        let key = next_key();
        // SAFETY: the caller's promise; the context is ours to set.
        unsafe { (*raw.as_ptr()).context = key.0 as usize as *mut libc::c_void };
        let channel = EventChannel::new().and_then(|ch| {
            // SAFETY: both are live; the id's only event is acknowledged.
            let rc = unsafe { cm::rdma_migrate_id(raw.as_ptr(), ch.as_ptr()) };
            if rc != 0 {
                return Err(Error::last_os("rdma_migrate_id", "a connect request's id"));
            }
            Ok(ch)
        });
        match channel {
            Ok(ch) => Ok(CmId::wrap(raw, key, ch)),
            Err(e) => {
                // SAFETY: owned by no one; destroyed once (this rejects the
                // request).
                unsafe { cm::rdma_destroy_id(raw.as_ptr()) };
                Err(e)
            }
        }
    }

    pub(super) fn raw(&self) -> *mut cm::rdma_cm_id {
        self.inner.id.as_ptr()
    }

    /// The raw id, valid while this handle lives.
    pub fn as_ptr(&self) -> *mut cm::rdma_cm_id {
        self.raw()
    }

    /// The number its events carry ([`CmEvent::id`]).
    pub fn key(&self) -> CmIdKey {
        self.inner.key
    }

    /// The channel its events arrive on.
    pub fn channel(&self) -> &EventChannel {
        &self.inner.channel
    }

    /// The next event of this id, waiting at most `timeout` (`None`: for
    /// ever).
    ///
    /// A `RDMA_CM_EVENT_DISCONNECTED` of a connected id read here is
    /// answered with `rdma_disconnect` (the IB CM's DREP), which completes
    /// the peer's disconnect; the id is then no longer connected.
    ///
    /// The late answer of a step whose wait ended without it (a
    /// [`resolve_addr`](Self::resolve_addr) that timed out, an async call
    /// dropped) is not returned: it is no answer to anything asked now.
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<CmEvent> {
        let what = format!("an rdma_cm event of {self:?}");
        let ev = self
            .inner
            .channel
            .next_matching(Some(self.key()), timeout, &what)?;
        Ok(self.answer(ev))
    }

    /// Asks for a step's answer with `ask` (the C call), the step begun
    /// first (see `cm::steps`); the step is forgotten when `ask` fails.
    pub(super) fn ask<T>(
        &self,
        want: CmEventKind,
        ask: impl FnOnce() -> Result<T>,
    ) -> Result<(T, Awaiting)> {
        let step = Awaiting::begin(&self.inner.channel, self.key(), want);
        match ask() {
            Ok(t) => Ok((t, step)),
            Err(e) => {
                step.not_asked();
                Err(e)
            }
        }
    }

    /// Answers a peer's disconnect read for this id (see
    /// [`get_event`](Self::get_event)).
    pub(super) fn answer(&self, ev: CmEvent) -> CmEvent {
        if ev.kind == CmEventKind::Disconnected && self.connected.swap(false, Ordering::Relaxed) {
            // SAFETY: the id is live; a failure (already answered) leaves
            // nothing to undo.
            unsafe { cm::rdma_disconnect(self.raw()) };
        }
        ev
    }

    /// The next event of this id if one is there now (answered as by
    /// [`get_event`](Self::get_event)).
    pub fn try_get_event(&self) -> Result<Option<CmEvent>> {
        match self.get_event(Some(Duration::ZERO)) {
            Ok(ev) => Ok(Some(ev)),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Binds to a local address (`rdma_bind_addr(3)`); port 0 picks one.
    /// Binding to an address of an RDMA device's netdev also binds the id
    /// to that device.
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        let mut raw = RawAddr::new(addr);
        // SAFETY: the id is live; the address is valid for the call.
        let rc = unsafe { cm::rdma_bind_addr(self.raw(), raw.as_mut_ptr()) };
        if rc != 0 {
            return Err(Error::last_os("rdma_bind_addr", format!("to {addr}")));
        }
        Ok(())
    }

    /// Binds to `addr` and listens (`rdma_listen(3)`) with room for
    /// `backlog` pending requests; take them with
    /// [`get_request`](Self::get_request). An unspecified address
    /// (`0.0.0.0`) listens on every RDMA device.
    pub fn listen(&self, addr: SocketAddr, backlog: i32) -> Result<()> {
        self.bind_addr(addr)?;
        // SAFETY: the id is live and bound.
        let rc = unsafe { cm::rdma_listen(self.raw(), backlog) };
        if rc != 0 {
            return Err(Error::last_os("rdma_listen", format!("on {addr}")));
        }
        Ok(())
    }

    /// The next connect request to this listening id, waiting at most
    /// `timeout` (`None`: for ever).
    pub fn get_request(&self, timeout: Option<Duration>) -> Result<ConnectRequest> {
        self.request_of(self.get_event(timeout)?)
    }

    /// The connect request `ev` carries, or the error for an event of
    /// another kind.
    pub(super) fn request_of(&self, mut ev: CmEvent) -> Result<ConnectRequest> {
        if let Some(e) = ev.request_failed.take() {
            return Err(e);
        }
        let kind = ev.kind;
        let status = ev.status;
        ev.into_request().ok_or_else(|| Error::Cm {
            what: format!("waiting for a connect request on {self:?}"),
            event: kind.name(),
            status,
            hint: String::new(),
        })
    }

    /// Starts `rdma_resolve_addr`; its event is awaited by the caller.
    pub(super) fn resolve_addr_start(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<String> {
        let what = format!("rdma_resolve_addr to {dst}");
        let mut d = RawAddr::new(dst);
        let mut s = src.map(RawAddr::new);
        let sp = s.as_mut().map_or(std::ptr::null_mut(), RawAddr::as_mut_ptr);
        // SAFETY: the id is live; the addresses are valid for the call.
        let rc =
            unsafe { cm::rdma_resolve_addr(self.raw(), sp, d.as_mut_ptr(), timeout_ms(timeout)) };
        if rc != 0 {
            return Err(Error::last_os("rdma_resolve_addr", format!("to {dst}")));
        }
        Ok(what)
    }

    /// Resolves `dst` (and the local address to use: `src`, or the one
    /// routing picks) to an RDMA device and port (`rdma_resolve_addr(3)`),
    /// waiting for `RDMA_CM_EVENT_ADDR_RESOLVED`. The id is then bound to
    /// that device: [`context`](Self::context) works.
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        let (what, step) = self.ask(CmEventKind::AddrResolved, || {
            self.resolve_addr_start(src, dst, timeout)
        })?;
        self.expect(step, CmEventKind::AddrResolved, &what, timeout)
            .map(drop)
    }

    /// Resolves the route to the resolved address (`rdma_resolve_route(3)`),
    /// waiting for `RDMA_CM_EVENT_ROUTE_RESOLVED`.
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        let ((), step) = self.ask(CmEventKind::RouteResolved, || {
            self.resolve_route_start(timeout)
        })?;
        self.expect(
            step,
            CmEventKind::RouteResolved,
            "rdma_resolve_route",
            timeout,
        )
        .map(drop)
    }

    /// Starts `rdma_resolve_route`; its event is awaited by the caller.
    pub(super) fn resolve_route_start(&self, timeout: Duration) -> Result<()> {
        if !self.is_bound() {
            // librdmacm binds the id to its device when it reads the
            // address's answer: read what the channel holds (into its
            // backlog), then look again.
            self.inner.channel.read_pending()?;
        }
        self.require_bound("rdma_resolve_route")?;
        // SAFETY: the id is live and bound to a device (librdmacm's
        // rdma_resolve_route reaches `id->verbs`).
        let rc = unsafe { cm::rdma_resolve_route(self.raw(), timeout_ms(timeout)) };
        if rc != 0 {
            return Err(Error::last_os("rdma_resolve_route", format!("{self:?}")));
        }
        Ok(())
    }

    /// Sets the IP type of service (traffic class on RoCE) of the id's
    /// packets (`rdma_set_option(3)`, `RDMA_OPTION_ID_TOS`); before
    /// resolving the route.
    pub fn set_tos(&self, tos: u8) -> Result<()> {
        let mut v = tos;
        // SAFETY: the id is live; the option value is one byte, valid for
        // the call.
        let rc = unsafe {
            cm::rdma_set_option(
                self.raw(),
                cm::RDMA_OPTION_ID as i32,
                cm::RDMA_OPTION_ID_TOS as i32,
                (&mut v as *mut u8).cast(),
                1,
            )
        };
        if rc != 0 {
            return Err(Error::last_os("rdma_set_option", "RDMA_OPTION_ID_TOS"));
        }
        Ok(())
    }

    /// Whether librdmacm has bound the id to a device (`id->verbs` set: an
    /// address resolved and its answer read, a bind to a device's
    /// address, or a connect request's id).
    fn is_bound(&self) -> bool {
        // SAFETY: the id is live; `verbs` is a pointer field librdmacm sets
        // when it binds the id.
        !unsafe { (*self.raw()).verbs }.is_null()
    }

    /// Refuses `call` on an id not bound to a device: librdmacm would
    /// reach its NULL device.
    fn require_bound(&self, call: &str) -> Result<()> {
        if self.is_bound() {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "{call} on {self:?}, which is bound to no RDMA device yet: resolve its address \
             first (resolve_addr, and its answer read)"
        )))
    }

    /// The open device the id is bound to, for the PD, CQs, MRs and QP of
    /// its connection. The context keeps the id alive (its device is
    /// librdmacm's while the id lives). An id bound to no device yet (not
    /// resolved, or listening on every device) is refused.
    pub fn context(&self) -> Result<Context> {
        // SAFETY: the id is live; `verbs` is set once it is bound.
        let verbs = unsafe { (*self.raw()).verbs };
        let verbs = NonNull::new(verbs).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{self:?} is bound to no RDMA device yet: resolve an address first \
                 (resolve_addr), or take the context of a connect request's id"
            ))
        })?;
        let keep: Arc<dyn std::any::Any + Send + Sync> = self.inner.clone();
        // SAFETY: librdmacm keeps the id's device context open while the id
        // lives, and the context holds the id.
        Ok(unsafe { Context::from_raw_kept(verbs, Some(keep)) })
    }

    /// The port of the device the id is bound to (from 1; 0 when unbound).
    pub fn port_num(&self) -> u8 {
        // SAFETY: the id is live.
        unsafe { (*self.raw()).port_num }
    }

    /// The local address (`rdma_get_local_addr`), once bound.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live; its route's addresses are
        // sockaddr_storage-sized.
        unsafe { addr::from_raw(&(*self.raw()).route.addr.__bindgen_anon_1.src_addr) }
    }

    /// The peer's address (`rdma_get_peer_addr`), once resolved or
    /// requested.
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: as above.
        unsafe { addr::from_raw(&(*self.raw()).route.addr.__bindgen_anon_2.dst_addr) }
    }

    /// Whether the id is connected (connect or accept succeeded, and
    /// neither side has disconnected as far as this handle has seen).
    pub fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Relaxed)
    }

    /// Waits for the event `want` of this id; an error event becomes
    /// [`Error::Cm`] or [`Error::Rejected`].
    pub(super) fn expect(
        &self,
        mut step: Awaiting,
        want: CmEventKind,
        what: &str,
        timeout: Duration,
    ) -> Result<CmEvent> {
        // The CM times its own steps out; give its error event time to
        // come before giving up on it.
        let ev = self.get_event(Some(timeout + Duration::from_secs(1)))?;
        step.got(&ev);
        check_event(want, what, ev)
    }

    pub(super) fn check_qp(&self, qp: &RcQp) -> Result<()> {
        let ctx = self.context()?;
        let qp_dev = qp.pd().context().name();
        if qp_dev != ctx.name() {
            return Err(Error::InvalidArgument(format!(
                "the QP is on {qp_dev}, the rdma_cm id on {}: make the QP's PD on \
                 the id's context (CmId::context)",
                ctx.name()
            )));
        }
        Ok(())
    }

    /// Moves `qp` to the state `to` with the attributes the CM gives
    /// (`rdma_init_qp_attr(3)`), optionally overriding the read depths as
    /// librdmacm does.
    fn cm_modify(
        &self,
        qp: &RcQp,
        to: ffi::ibv_qp_state,
        name: &str,
        depth: Option<u8>,
    ) -> Result<()> {
        self.cm_attr(to, name, depth)?.apply(qp)
    }

    /// The attributes the CM gives for moving a QP to `to`
    /// (`rdma_init_qp_attr(3)`), the read depths overridden as librdmacm
    /// does; asked now, applied later or at once.
    pub(super) fn cm_attr(
        &self,
        to: ffi::ibv_qp_state,
        name: &str,
        depth: Option<u8>,
    ) -> Result<CmQpAttr> {
        let mut attr = ffi::ibv_qp_attr {
            qp_state: to,
            ..Default::default()
        };
        let mut mask: libc::c_int = 0;
        // SAFETY: the id is live; both out-parameters are writable.
        let rc = unsafe { cm::rdma_init_qp_attr(self.raw(), &mut attr, &mut mask) };
        if rc != 0 {
            return Err(Error::last_os(
                "rdma_init_qp_attr",
                format!("{name} for {self:?}"),
            ));
        }
        let unset = cm::RDMA_MAX_RESP_RES as u8;
        match depth {
            Some(d) if d != unset && to == ffi::IBV_QPS_RTR => attr.max_dest_rd_atomic = d,
            Some(d) if d != unset && to == ffi::IBV_QPS_RTS => attr.max_rd_atomic = d,
            _ => {}
        }
        Ok(CmQpAttr {
            attr,
            mask: mask as u32,
            to: format!("{name} (from rdma_cm)"),
        })
    }

    /// Moves a QP in RESET to INIT with the CM's attributes (port, P_Key,
    /// access), so that receives can be posted before connecting.
    /// [`connect`](Self::connect) and [`ConnectRequest::accept`] do it
    /// themselves for a QP still in RESET.
    pub fn init_qp(&self, qp: &RcQp) -> Result<()> {
        self.check_qp(qp)?;
        self.cm_modify(qp, ffi::IBV_QPS_INIT, "INIT", None)
    }

    pub(super) fn init_if_reset(&self, qp: &RcQp) -> Result<()> {
        if qp.state()? == QpState::Reset {
            self.init_qp(qp)?;
        }
        Ok(())
    }

    /// INIT (again, with the connection's attributes), RTR, RTS.
    pub(super) fn to_rts(&self, qp: &RcQp, param: &ConnParam) -> Result<()> {
        self.to_rtr(qp, param)?;
        self.rts_from_rtr(qp, param)
    }

    /// INIT (again, with the connection's attributes), RTR.
    pub(super) fn to_rtr(&self, qp: &RcQp, param: &ConnParam) -> Result<()> {
        self.cm_modify(qp, ffi::IBV_QPS_INIT, "INIT", None)?;
        self.cm_modify(qp, ffi::IBV_QPS_RTR, "RTR", Some(param.responder_resources))
    }

    /// RTR → RTS with the connection's attributes.
    pub(super) fn rts_from_rtr(&self, qp: &RcQp, param: &ConnParam) -> Result<()> {
        self.rts_attr(param)?.apply(qp)
    }

    /// The connection's attributes for RTS (as [`rts_from_rtr`](Self::rts_from_rtr)
    /// applies them), asked of the CM now.
    pub(super) fn rts_attr(&self, param: &ConnParam) -> Result<CmQpAttr> {
        self.cm_attr(ffi::IBV_QPS_RTS, "RTS", Some(param.initiator_depth))
    }

    /// Connects `qp` to the resolved peer (`rdma_connect(3)`) and waits up
    /// to `timeout` for its answer: on `RDMA_CM_EVENT_CONNECT_RESPONSE` the
    /// QP is moved to RTR and RTS with the CM's attributes and the
    /// connection completed (`rdma_establish(3)`). Returns the private data
    /// of the peer's accept.
    ///
    /// Needs [`resolve_route`](Self::resolve_route) first, and a QP on the
    /// id's device in RESET or INIT. A rejection is [`Error::Rejected`]
    /// (with the peer's private data), no answer [`Error::Cm`]
    /// (`RDMA_CM_EVENT_UNREACHABLE`) or [`Error::Timeout`]; the QP is then
    /// in ERR.
    pub fn connect(&self, qp: &RcQp, param: &ConnParam, timeout: Duration) -> Result<Vec<u8>> {
        let (what, step) = self.ask(CmEventKind::ConnectResponse, || {
            self.connect_start(qp, param)
        })?;
        let ev = self.expect(step, CmEventKind::ConnectResponse, &what, timeout);
        self.connect_finish(qp, param, &what, ev)
    }

    /// Checks, moves `qp` to INIT if in RESET, and calls `rdma_connect`.
    pub(super) fn connect_start(&self, qp: &RcQp, param: &ConnParam) -> Result<String> {
        param.check(MAX_CONNECT_PRIVATE_DATA, "rdma_connect")?;
        self.check_qp(qp)?;
        self.init_if_reset(qp)?;
        let what = format!("rdma_connect to {}", show(self.peer_addr()));
        let mut raw = param.to_raw(qp.qp_num());
        // SAFETY: the id is live; `raw` and its private data are valid for
        // the call (librdmacm copies them).
        let rc = unsafe { cm::rdma_connect(self.raw(), &mut raw) };
        if rc != 0 {
            return Err(Error::last_os("rdma_connect", what));
        }
        Ok(what)
    }

    /// Ends a connect on its answer `ev` (checked to be the connect
    /// response): RTR, RTS, `rdma_establish`; on any error the QP goes to
    /// ERR.
    pub(super) fn connect_finish(
        &self,
        qp: &RcQp,
        param: &ConnParam,
        what: &str,
        ev: Result<CmEvent>,
    ) -> Result<Vec<u8>> {
        let result = ev.and_then(|ev| {
            self.to_rts(qp, param)?;
            // SAFETY: the id is live and got its connect response.
            let rc = unsafe { cm::rdma_establish(self.raw()) };
            if rc != 0 {
                return Err(Error::last_os("rdma_establish", what.to_string()));
            }
            Ok(ev.private_data)
        });
        match result {
            Ok(data) => {
                self.connected.store(true, Ordering::Relaxed);
                Ok(data)
            }
            Err(e) => {
                // Nothing may run on a QP whose connection failed.
                let _ = qp.to_error();
                Err(e)
            }
        }
    }

    /// Disconnects (`rdma_disconnect(3)`): the peer gets
    /// `RDMA_CM_EVENT_DISCONNECTED`, and so does this id. Move the QP to
    /// ERR ([`QpEx::to_error`](crate::QpEx::to_error)) to flush what is outstanding on it.
    pub fn disconnect(&self) -> Result<()> {
        self.require_bound("rdma_disconnect")?;
        self.connected.store(false, Ordering::Relaxed);
        // SAFETY: the id is live and bound to a device (librdmacm's
        // rdma_disconnect reaches `id->verbs`).
        let rc = unsafe { cm::rdma_disconnect(self.raw()) };
        if rc != 0 {
            return Err(Error::last_os("rdma_disconnect", format!("{self:?}")));
        }
        Ok(())
    }

    /// Waits up to `timeout` for `RDMA_CM_EVENT_DISCONNECTED` of this id:
    /// the peer's disconnect (answered, see [`get_event`](Self::get_event)),
    /// or the peer's answer to this side's.
    pub fn wait_disconnected(&self, timeout: Duration) -> Result<()> {
        disconnected(self.get_event(Some(timeout))?)
    }
}

impl Drop for CmId {
    fn drop(&mut self) {
        if self.is_connected() {
            // SAFETY: the id is live; a failure (the peer disconnected
            // first) leaves nothing to undo.
            unsafe { cm::rdma_disconnect(self.raw()) };
        }
    }
}

impl fmt::Debug for CmId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CmId({}, {} -> {})",
            self.key().0,
            show(self.local_addr()),
            show(self.peer_addr())
        )
    }
}

pub(super) fn show(a: Option<SocketAddr>) -> String {
    a.map_or_else(|| "-".into(), |a| a.to_string())
}

fn timeout_ms(t: Duration) -> i32 {
    i32::try_from(t.as_millis()).unwrap_or(i32::MAX).max(1)
}

/// Ok for `RDMA_CM_EVENT_DISCONNECTED`, else the error `ev` stands for.
pub(super) fn disconnected(ev: CmEvent) -> Result<()> {
    if ev.kind == CmEventKind::Disconnected {
        return Ok(());
    }
    Err(event_error("waiting for RDMA_CM_EVENT_DISCONNECTED", ev))
}

/// `ev` if it is `want` with status 0, else the error it stands for.
/// A QP state the CM gave the attributes of (`rdma_init_qp_attr(3)`),
/// to apply to the connection's QP.
pub(super) struct CmQpAttr {
    attr: ffi::ibv_qp_attr,
    mask: u32,
    to: String,
}

impl CmQpAttr {
    /// Moves `qp` to the state with these attributes.
    pub(super) fn apply(mut self, qp: &RcQp) -> Result<()> {
        qp.modify(&mut self.attr, self.mask, &self.to)
    }
}

pub(super) fn check_event(want: CmEventKind, what: &str, ev: CmEvent) -> Result<CmEvent> {
    if ev.kind == want && ev.status == 0 {
        return Ok(ev);
    }
    Err(event_error(what, ev))
}

/// The error for an event other than the one awaited.
pub(super) fn event_error(what: &str, ev: CmEvent) -> Error {
    if ev.kind == CmEventKind::Rejected {
        return Error::Rejected {
            what: what.to_string(),
            reason: ev.status,
            private_data: ev.private_data,
        };
    }
    let hint = match (ev.kind, -ev.status) {
        (CmEventKind::AddrError, libc::ENODEV) | (CmEventKind::AddrError, libc::EADDRNOTAVAIL) => {
            ": no RDMA device has a netdev with that address or a route to it \
             (rdma link add ... type rxe netdev <if>, or check the address)"
        }
        (CmEventKind::AddrError, libc::ETIMEDOUT) | (CmEventKind::RouteError, libc::ETIMEDOUT) => {
            ": the neighbour did not answer (is the peer's address up?)"
        }
        (CmEventKind::Unreachable, _) => ": the peer did not answer (is a server listening?)",
        _ => "",
    };
    Error::Cm {
        what: what.to_string(),
        event: ev.kind.name(),
        status: ev.status,
        hint: hint.to_string(),
    }
}
