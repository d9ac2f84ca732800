//! Asynchronous events of a device (`ibv_get_async_event(3)`): a port that
//! went down, a QP or CQ in error, a fatal device error.
//!
//! The event names its object by a pointer (`struct ibv_qp *`, ...), which
//! stays valid only until the event is acknowledged (libibverbs'
//! `ibv_destroy_qp`, `ibv_destroy_cq` and `ibv_destroy_srq` wait for the
//! acknowledgement of every event the kernel handed out for the object).
//! So each event is converted while that holds — the object's number or
//! handle read from it — and acknowledged (`ibv_ack_async_event`) before
//! it is returned: no pointer leaves this module.

use crate::channel::CqId;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::fd::{clear_errno, poll_readable, set_nonblocking};
use crate::ffi;
use std::ffi::CStr;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::{Duration, Instant};

/// One asynchronous event (`struct ibv_async_event`), with the object it
/// names given by its number or handle (`enum ibv_event_type`, one variant
/// per type; `ibv_event_type_str(3)` is its `Display`).
///
/// ```
/// use mlx5dv::AsyncEvent;
///
/// let e = AsyncEvent::PortErr { port: 1 };
/// assert_eq!(e.to_string(), "port error on port 1");
/// assert_eq!(e.event_type(), mlx5dv::ffi::IBV_EVENT_PORT_ERR);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// `IBV_EVENT_CQ_ERR`: the CQ is in error, e.g. it overran: completions
    /// were lost ([`CompletionQueue::id`](crate::CompletionQueue::id)).
    CqErr {
        /// The CQ.
        cq: CqId,
    },
    /// `IBV_EVENT_QP_FATAL`: the QP hit an error not tied to a work request
    /// and moved to the error state.
    QpFatal {
        /// The QP's number ([`QpEx::qp_num`](crate::QpEx::qp_num)).
        qp_num: u32,
    },
    /// `IBV_EVENT_QP_REQ_ERR`: invalid request local work queue error.
    QpReqErr {
        /// The QP's number.
        qp_num: u32,
    },
    /// `IBV_EVENT_QP_ACCESS_ERR`: local access violation error.
    QpAccessErr {
        /// The QP's number.
        qp_num: u32,
    },
    /// `IBV_EVENT_COMM_EST`: communication was established on the QP.
    CommEst {
        /// The QP's number.
        qp_num: u32,
    },
    /// `IBV_EVENT_SQ_DRAINED`: the send queue of a QP in SQD is drained.
    SqDrained {
        /// The QP's number.
        qp_num: u32,
    },
    /// `IBV_EVENT_PATH_MIG`: the QP migrated to its alternate path.
    PathMig {
        /// The QP's number.
        qp_num: u32,
    },
    /// `IBV_EVENT_PATH_MIG_ERR`: path migration failed.
    PathMigErr {
        /// The QP's number.
        qp_num: u32,
    },
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: the last WQE of a QP on an SRQ was
    /// reached.
    QpLastWqeReached {
        /// The QP's number.
        qp_num: u32,
    },
    /// `IBV_EVENT_SRQ_ERR`: the SRQ is in error.
    SrqErr {
        /// The SRQ's kernel handle (`struct ibv_srq`'s `handle`).
        srq_handle: u32,
    },
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: the SRQ's limit was reached.
    SrqLimitReached {
        /// The SRQ's kernel handle.
        srq_handle: u32,
    },
    /// `IBV_EVENT_WQ_FATAL`: the WQ is in error.
    WqFatal {
        /// The WQ's number.
        wq_num: u32,
    },
    /// `IBV_EVENT_DEVICE_FATAL`: the device is unusable; close it.
    DeviceFatal,
    /// `IBV_EVENT_PORT_ACTIVE`: the port became active.
    PortActive {
        /// The port, from 1.
        port: u8,
    },
    /// `IBV_EVENT_PORT_ERR`: the port left the active state (link down).
    PortErr {
        /// The port, from 1.
        port: u8,
    },
    /// `IBV_EVENT_LID_CHANGE`: the port's LID changed.
    LidChange {
        /// The port, from 1.
        port: u8,
    },
    /// `IBV_EVENT_PKEY_CHANGE`: the port's P_Key table changed.
    PkeyChange {
        /// The port, from 1.
        port: u8,
    },
    /// `IBV_EVENT_SM_CHANGE`: the port's subnet manager changed.
    SmChange {
        /// The port, from 1.
        port: u8,
    },
    /// `IBV_EVENT_CLIENT_REREGISTER`: the SM asks to re-register.
    ClientReregister {
        /// The port, from 1.
        port: u8,
    },
    /// `IBV_EVENT_GID_CHANGE`: the port's GID table changed.
    GidChange {
        /// The port, from 1.
        port: u8,
    },
    /// An event type this crate does not know, with the port number field
    /// libibverbs gives it.
    Other {
        /// The raw `enum ibv_event_type`.
        event_type: u32,
        /// The event's element as a port number.
        element: i32,
    },
}

impl AsyncEvent {
    /// The event type (`enum ibv_event_type`).
    pub fn event_type(&self) -> u32 {
        use AsyncEvent::*;
        match *self {
            CqErr { .. } => ffi::IBV_EVENT_CQ_ERR,
            QpFatal { .. } => ffi::IBV_EVENT_QP_FATAL,
            QpReqErr { .. } => ffi::IBV_EVENT_QP_REQ_ERR,
            QpAccessErr { .. } => ffi::IBV_EVENT_QP_ACCESS_ERR,
            CommEst { .. } => ffi::IBV_EVENT_COMM_EST,
            SqDrained { .. } => ffi::IBV_EVENT_SQ_DRAINED,
            PathMig { .. } => ffi::IBV_EVENT_PATH_MIG,
            PathMigErr { .. } => ffi::IBV_EVENT_PATH_MIG_ERR,
            QpLastWqeReached { .. } => ffi::IBV_EVENT_QP_LAST_WQE_REACHED,
            SrqErr { .. } => ffi::IBV_EVENT_SRQ_ERR,
            SrqLimitReached { .. } => ffi::IBV_EVENT_SRQ_LIMIT_REACHED,
            WqFatal { .. } => ffi::IBV_EVENT_WQ_FATAL,
            DeviceFatal => ffi::IBV_EVENT_DEVICE_FATAL,
            PortActive { .. } => ffi::IBV_EVENT_PORT_ACTIVE,
            PortErr { .. } => ffi::IBV_EVENT_PORT_ERR,
            LidChange { .. } => ffi::IBV_EVENT_LID_CHANGE,
            PkeyChange { .. } => ffi::IBV_EVENT_PKEY_CHANGE,
            SmChange { .. } => ffi::IBV_EVENT_SM_CHANGE,
            ClientReregister { .. } => ffi::IBV_EVENT_CLIENT_REREGISTER,
            GidChange { .. } => ffi::IBV_EVENT_GID_CHANGE,
            Other { event_type, .. } => event_type,
        }
    }

    /// The QP number the event names, for a QP event.
    pub fn qp_num(&self) -> Option<u32> {
        use AsyncEvent::*;
        match *self {
            QpFatal { qp_num }
            | QpReqErr { qp_num }
            | QpAccessErr { qp_num }
            | CommEst { qp_num }
            | SqDrained { qp_num }
            | PathMig { qp_num }
            | PathMigErr { qp_num }
            | QpLastWqeReached { qp_num } => Some(qp_num),
            _ => None,
        }
    }

    /// The event `ibv_get_async_event` returned, its object read by number.
    ///
    /// # Safety
    /// `ev` was filled by `ibv_get_async_event` and is not yet
    /// acknowledged, so the object it names is live.
    unsafe fn from_raw(ev: &ffi::ibv_async_event) -> Self {
        use AsyncEvent::*;
        let e = &ev.element;
        // SAFETY: the caller's promise: the union holds the member that
        // libibverbs sets for this event type (see ibv_get_async_event),
        // and the object it points at is live.
        unsafe {
            let qp = || (*e.qp).qp_num;
            let srq = || (*e.srq).handle;
            let port = || u8::try_from(e.port_num).unwrap_or(0);
            match ev.event_type {
                ffi::IBV_EVENT_CQ_ERR => CqErr { cq: CqId::of(e.cq) },
                ffi::IBV_EVENT_QP_FATAL => QpFatal { qp_num: qp() },
                ffi::IBV_EVENT_QP_REQ_ERR => QpReqErr { qp_num: qp() },
                ffi::IBV_EVENT_QP_ACCESS_ERR => QpAccessErr { qp_num: qp() },
                ffi::IBV_EVENT_COMM_EST => CommEst { qp_num: qp() },
                ffi::IBV_EVENT_SQ_DRAINED => SqDrained { qp_num: qp() },
                ffi::IBV_EVENT_PATH_MIG => PathMig { qp_num: qp() },
                ffi::IBV_EVENT_PATH_MIG_ERR => PathMigErr { qp_num: qp() },
                ffi::IBV_EVENT_QP_LAST_WQE_REACHED => QpLastWqeReached { qp_num: qp() },
                ffi::IBV_EVENT_SRQ_ERR => SrqErr { srq_handle: srq() },
                ffi::IBV_EVENT_SRQ_LIMIT_REACHED => SrqLimitReached { srq_handle: srq() },
                ffi::IBV_EVENT_WQ_FATAL => WqFatal {
                    wq_num: (*e.wq).wq_num,
                },
                ffi::IBV_EVENT_DEVICE_FATAL => DeviceFatal,
                ffi::IBV_EVENT_PORT_ACTIVE => PortActive { port: port() },
                ffi::IBV_EVENT_PORT_ERR => PortErr { port: port() },
                ffi::IBV_EVENT_LID_CHANGE => LidChange { port: port() },
                ffi::IBV_EVENT_PKEY_CHANGE => PkeyChange { port: port() },
                ffi::IBV_EVENT_SM_CHANGE => SmChange { port: port() },
                ffi::IBV_EVENT_CLIENT_REREGISTER => ClientReregister { port: port() },
                ffi::IBV_EVENT_GID_CHANGE => GidChange { port: port() },
                event_type => Other {
                    event_type,
                    element: e.port_num,
                },
            }
        }
    }
}

impl fmt::Display for AsyncEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: ibv_event_type_str returns a static string for any value.
        let name = unsafe { CStr::from_ptr(ffi::ibv_event_type_str(self.event_type())) };
        f.write_str(&name.to_string_lossy())?;
        use AsyncEvent::*;
        match *self {
            CqErr { cq } => write!(f, " on CQ {}", cq.handle()),
            SrqErr { srq_handle } | SrqLimitReached { srq_handle } => {
                write!(f, " on SRQ {srq_handle}")
            }
            WqFatal { wq_num } => write!(f, " on WQ {wq_num:#x}"),
            DeviceFatal | Other { .. } => Ok(()),
            PortActive { port }
            | PortErr { port }
            | LidChange { port }
            | PkeyChange { port }
            | SmChange { port }
            | ClientReregister { port }
            | GidChange { port } => write!(f, " on port {port}"),
            _ => match self.qp_num() {
                Some(qp_num) => write!(f, " on QP {qp_num:#x}"),
                None => Ok(()),
            },
        }
    }
}

/// The asynchronous events of a context, read from its async fd
/// (`ibv_get_async_event(3)`), each acknowledged (`ibv_ack_async_event`)
/// as it is read.
///
/// Made with [`Context::async_events`], which puts the context's async fd
/// in non-blocking mode (`O_NONBLOCK`): [`get_event`](Self::get_event)
/// sleeps in `poll(2)` with a timeout, [`try_get_event`](Self::try_get_event)
/// returns at once, and the fd ([`AsFd`]) can be watched by `epoll` or an
/// async runtime. Each event is read by one reader: two threads reading
/// one context's events share them out.
///
/// ```no_run
/// use mlx5dv::*;
/// use std::time::Duration;
///
/// # fn main() -> Result<()> {
/// let ctx = Context::open("rxe0")?;
/// let events = ctx.async_events()?;
/// match events.get_event(Duration::from_secs(10)) {
///     Ok(AsyncEvent::PortErr { port }) => println!("port {port} went down"),
///     Ok(AsyncEvent::QpFatal { qp_num }) => println!("QP {qp_num:#x} failed"),
///     Ok(other) => println!("{other}"),
///     Err(Error::Timeout { .. }) => println!("no event in 10 s"),
///     Err(e) => return Err(e),
/// }
/// # Ok(())
/// # }
/// ```
#[must_use]
pub struct AsyncEvents {
    ctx: Context,
}

impl Context {
    /// The context's asynchronous events ([`AsyncEvents`]); puts its async
    /// fd in non-blocking mode.
    pub fn async_events(&self) -> Result<AsyncEvents> {
        let events = AsyncEvents { ctx: self.clone() };
        set_nonblocking(events.as_fd(), || {
            format!("the async event fd of {}", self.name())
        })?;
        Ok(events)
    }
}

impl AsyncEvents {
    /// The context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Waits up to `timeout` for the next event, asleep in `poll(2)`.
    /// [`Error::Timeout`] when none came.
    pub fn get_event(&self, timeout: Duration) -> Result<AsyncEvent> {
        let start = Instant::now();
        let deadline = start.checked_add(timeout);
        loop {
            if let Some(event) = self.try_get_event()? {
                return Ok(event);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::Timeout {
                    what: format!("an async event on {}", self.ctx.name()),
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
            poll_readable(self.as_fd(), deadline).map_err(|errno| {
                Error::verbs(
                    "poll",
                    errno,
                    format!("the async event fd of {}", self.ctx.name()),
                )
            })?;
        }
    }

    /// The next event, if one is waiting; `Ok(None)` at once otherwise.
    pub fn try_get_event(&self) -> Result<Option<AsyncEvent>> {
        loop {
            let mut ev = ffi::ibv_async_event::default();
            clear_errno();
            // SAFETY: the context is open; its async fd is non-blocking;
            // `ev` is writable.
            let rc = unsafe { ffi::ibv_get_async_event(self.ctx.as_ptr(), &mut ev) };
            if rc == 0 {
                // SAFETY: just filled by ibv_get_async_event, not yet
                // acknowledged.
                let event = unsafe { AsyncEvent::from_raw(&ev) };
                // SAFETY: acknowledged once, after its object was read; no
                // pointer of it is kept.
                unsafe { ffi::ibv_ack_async_event(&mut ev) };
                return Ok(Some(event));
            }
            match io::Error::last_os_error().raw_os_error() {
                Some(libc::EAGAIN) => return Ok(None),
                Some(libc::EINTR) => continue,
                _ => return Err(Error::last_os("ibv_get_async_event", self.ctx.name())),
            }
        }
    }
}

impl AsFd for AsyncEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the context is open while `self` holds it; its async fd
        // stays open until the context is closed.
        unsafe { BorrowedFd::borrow_raw((*self.ctx.as_ptr()).async_fd) }
    }
}

impl AsRawFd for AsyncEvents {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

impl fmt::Debug for AsyncEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncEvents")
            .field("device", &self.ctx.name())
            .field("fd", &self.as_raw_fd())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::undocumented_unsafe_blocks)]

    use super::*;

    #[test]
    fn each_event_names_its_object_by_number() {
        let mut qp = ffi::ibv_qp {
            qp_num: 0x11,
            ..Default::default()
        };
        let mut cq = ffi::ibv_cq {
            handle: 7,
            ..Default::default()
        };
        let mut srq = ffi::ibv_srq {
            handle: 3,
            ..Default::default()
        };
        let mut ev = ffi::ibv_async_event::default();
        let mut read = |t: u32, set: &dyn Fn(&mut ffi::ibv_async_event)| {
            ev.event_type = t;
            set(&mut ev);
            unsafe { AsyncEvent::from_raw(&ev) }
        };
        let qp_ptr: *mut ffi::ibv_qp = &mut qp;
        let cq_ptr: *mut ffi::ibv_cq = &mut cq;
        let srq_ptr: *mut ffi::ibv_srq = &mut srq;
        assert_eq!(
            read(ffi::IBV_EVENT_QP_FATAL, &|e| e.element.qp = qp_ptr),
            AsyncEvent::QpFatal { qp_num: 0x11 }
        );
        assert_eq!(
            read(ffi::IBV_EVENT_COMM_EST, &|e| e.element.qp = qp_ptr),
            AsyncEvent::CommEst { qp_num: 0x11 }
        );
        let e = read(ffi::IBV_EVENT_CQ_ERR, &|e| e.element.cq = cq_ptr);
        assert_eq!(e, AsyncEvent::CqErr { cq: CqId(7) });
        assert_eq!(e.to_string(), "CQ error on CQ 7");
        assert_eq!(
            read(ffi::IBV_EVENT_SRQ_LIMIT_REACHED, &|e| e.element.srq =
                srq_ptr),
            AsyncEvent::SrqLimitReached { srq_handle: 3 }
        );
        let e = read(ffi::IBV_EVENT_PORT_ACTIVE, &|e| e.element.port_num = 2);
        assert_eq!(e, AsyncEvent::PortActive { port: 2 });
        assert_eq!(e.event_type(), ffi::IBV_EVENT_PORT_ACTIVE);
        assert_eq!(
            read(ffi::IBV_EVENT_DEVICE_FATAL, &|_| {}),
            AsyncEvent::DeviceFatal
        );
        assert_eq!(
            read(99, &|e| e.element.port_num = 5),
            AsyncEvent::Other {
                event_type: 99,
                element: 5
            }
        );
        assert_eq!(
            AsyncEvent::QpFatal { qp_num: 0x11 }.to_string(),
            "local work queue catastrophic error on QP 0x11"
        );
    }
}
