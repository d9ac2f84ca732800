//! The crate's one error type.

use std::io;

/// Everything that can go wrong in this crate.
///
/// A failing C call is [`Error::Verbs`], naming the call, with the `errno`
/// it left as an [`io::Error`] and what it was doing; `EOPNOTSUPP` and
/// `EPROTONOSUPPORT` become [`Error::Unsupported`]. Input that breaks a rule
/// of the man pages is refused before any C call, as
/// [`Error::OutOfRange`] or [`Error::InvalidArgument`]; on the direct data
/// path, which calls no C to post or poll, as [`Error::Direct`].
///
/// Its `Debug` form is the variant's name and the `Display` text, as
/// `anyhow` shows an error, so that a `main` or a `#[test]` returning this
/// crate's [`Result`] prints the whole message (`Error: DeviceNotFound: no
/// RDMA device named "mlx5_0" (found: none): without RDMA hardware run
/// under ...`); `{:#?}` shows the variant's fields.
///
/// ```
/// let e = mlx5dv::Error::InvalidArgument("a bad value".into());
/// assert_eq!(format!("{e:?}"), "InvalidArgument: invalid argument: a bad value");
/// assert!(format!("{e:#?}").starts_with("InvalidArgument(\n"));
/// ```
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A verbs or direct-verbs call failed.
    #[error("{call} failed ({context}): {source}")]
    Verbs {
        /// The C function, e.g. `ibv_create_qp_ex`.
        call: &'static str,
        /// What it was asked to do: which device, QP, size.
        context: String,
        /// The `errno` the call reported.
        #[source]
        source: io::Error,
    },

    /// The device or provider does not support what was asked
    /// (`EOPNOTSUPP` / `EPROTONOSUPPORT`, or a capability that reads 0).
    #[error("not supported: {what}")]
    Unsupported {
        /// What was asked, e.g. `mlx5dv_create_qp on rxe0`.
        what: String,
    },

    /// No RDMA device has this name (or, with an empty name, there is no
    /// RDMA device at all: [`Context::open_first`](crate::Context::open_first)).
    #[error("{}", device_not_found(.name, .found))]
    DeviceNotFound {
        /// The name asked for; empty when any device would do.
        name: String,
        /// The devices that exist, comma-separated.
        found: String,
    },

    /// A numeric input is outside what the man page or the object allows.
    #[error("{what} = {} is out of range: {limit}", shown_value(what, *value))]
    OutOfRange {
        /// The input, e.g. `SGE range end`.
        what: &'static str,
        /// The value given.
        value: u64,
        /// The rule it broke, e.g. `at most 4096 (the MR's length)`.
        limit: String,
    },

    /// An input that is wrong in a way other than its size.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A wait for completions ran out of time.
    #[error("timed out after {waited_ms} ms waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// How long it waited.
        waited_ms: u64,
    },

    /// A work request completed with an error status.
    ///
    /// The text names the work request, the QP (its number in hex), the
    /// status in rdma-core's words (`ibv_wc_status_str(3)`) and the
    /// provider's vendor error, then, after a colon, the status's usual
    /// causes and what to do next: where the crate knows the QP's kind
    /// (`kind`: a scoped post's completions, an `AsyncQp`'s,
    /// [`WorkCompletion::ok_for`](crate::WorkCompletion::ok_for)), that
    /// kind's own ([`WcStatus::hint_for`](crate::WcStatus::hint_for)), else
    /// the hint for any kind ([`WcStatus::hint`](crate::WcStatus::hint)):
    ///
    /// ```text
    /// work request 7 on QP 0x1a2 completed with remote access error (vendor error 0x0):
    /// the peer's device refused access to its memory: a wrong or stale rkey ...
    /// ```
    #[error("work request {wr_id} on QP {qp_num:#x} completed with {status} (vendor error {vendor_err:#x}){}", hint_suffix(*status, *kind))]
    WorkCompletion {
        /// The failed work request.
        wr_id: u64,
        /// The QP it was posted on.
        qp_num: u32,
        /// Its status.
        status: crate::wc::WcStatus,
        /// The provider's vendor error code.
        vendor_err: u32,
        /// The kind of the QP, where the crate knew it when it made the
        /// error; `None` where it did not (a completion read from a CQ
        /// that QPs of any kind may share).
        kind: Option<crate::QpKind>,
    },

    /// The bytes given to a type's `from_bytes` are another type's byte
    /// form (each of [`Endpoint`](crate::Endpoint),
    /// [`DctEndpoint`](crate::DctEndpoint),
    /// [`UdEndpoint`](crate::UdEndpoint) and
    /// [`RemoteBuf`](crate::RemoteBuf) marks its own, after the version):
    /// the peer sent, or the program read, the wrong one.
    #[error("these are {}'s bytes, not {}'s: the byte form of one type is not read as another's; exchange and read the {expected} itself", a(found), a(expected))]
    WrongByteForm {
        /// The type whose `from_bytes` was called, e.g. `Endpoint`.
        expected: &'static str,
        /// The type whose byte form the bytes are, e.g. `RemoteBuf`.
        found: &'static str,
    },

    /// A plain slice was asked of memory a remote peer may write (a region
    /// registered with remote write, remote atomic or memory-window bind
    /// access: [`MemoryRegion::is_peer_writable`](crate::MemoryRegion::is_peer_writable)).
    /// Such memory can change at any moment, which a `&[u8]` or `&mut [u8]`
    /// promises it does not, so it is not handed out as one: copy it out
    /// with [`read_at`](crate::MemoryRegion::read_at) or
    /// [`to_vec`](crate::MemoryRegion::to_vec), and in with
    /// [`write_at`](crate::MemoryRegion::write_at) or
    /// [`fill`](crate::MemoryRegion::fill).
    #[error("{what}: memory a remote peer may write is not handed out as a plain slice (copy it with read_at/to_vec/write_at/fill)")]
    PeerWritable {
        /// What was asked, of which region, e.g. `as_slice of a 4096-byte
        /// region with access AccessFlags(LOCAL_WRITE | REMOTE_WRITE) on rxe0`.
        what: String,
    },

    /// A batch held more work requests than the send queue had room for
    /// (`ibv_wr_complete` returned `ENOMEM` or `ENOSPC`): none of the batch
    /// was posted. Also the error of any work request on a QP without a
    /// send queue (`max_send_wr` 0: depth 0).
    #[error("send queue full: a batch of {} did not fit the send queue of depth {depth}; none was posted", count(u64::from(*batch), "work request"))]
    SendQueueFull {
        /// Work requests in the batch.
        batch: u32,
        /// The room the send queue had for the batch: its depth
        /// (`max_send_wr`), less the type 1 memory window binds
        /// ([`QpEx::bind_mw`](crate::QpEx::bind_mw)) queued on it and not
        /// yet seen complete, which take up the queue too.
        depth: u32,
    },

    /// A work request past the number its batch was limited to
    /// ([`WrBatch::limit`](crate::WrBatch::limit),
    /// [`DirectBatch::limit`](crate::direct::DirectBatch::limit)), or a later `limit`
    /// asking for more room than an earlier one left: it was not added
    /// (nor the limit changed), and the batch stays open.
    #[error("batch full: it was limited to {}", count(u64::from(*limit), "work request"))]
    BatchLimit {
        /// How many work requests the batch may hold in all, those added
        /// before it was limited included.
        limit: u32,
    },

    /// rdma_cm answered a request with an error event
    /// (`RDMA_CM_EVENT_ADDR_ERROR`, `_ROUTE_ERROR`, `_UNREACHABLE`,
    /// `_CONNECT_ERROR`, ...) or with an event other than the one awaited.
    #[error("{what}: {event} (status {status}){hint}")]
    Cm {
        /// What was asked, e.g. `rdma_resolve_addr to 10.99.0.2:7174`.
        what: String,
        /// The event's C name, e.g. `RDMA_CM_EVENT_ADDR_ERROR`.
        event: &'static str,
        /// The event's status (a negative errno for address, route and
        /// connect errors).
        status: i32,
        /// What the status usually means, with its fix, or empty.
        hint: String,
    },

    /// The peer rejected the connection (`RDMA_CM_EVENT_REJECTED`): reason
    /// 8 when nothing listens at that address and port, 28 when the peer's
    /// application rejected it (with its private data).
    #[error("{what}: rejected by the peer (reason {reason}{}){}", if *reason == 8 { ": nothing listens there" } else if *reason == 28 { ": the peer's application rejected it" } else { "" }, if private_data.is_empty() { String::new() } else { format!(", {} bytes of private data", private_data.len()) })]
    Rejected {
        /// What was asked, e.g. `rdma_connect to 10.99.0.1:7174`.
        what: String,
        /// The reject reason (the event's status; on InfiniBand and RoCE
        /// an IB CM reject reason).
        reason: i32,
        /// The private data of the reject.
        private_data: Vec<u8>,
    },

    /// A post refused because its QP is not in a state that takes it:
    /// sends need RTS, receives INIT or later (`ibv_modify_qp(3)`,
    /// `ibv_post_recv(3)`). The safe posts ([`QpEx::post_and_wait`](crate::QpEx::post_and_wait),
    /// the `tokio` feature's `AsyncQp`) also refuse sends in ERR, where
    /// every work request would only be flushed. The state is libibverbs'
    /// record of it, which learns of a move the device made by itself
    /// (to ERR, after a failed work request) when the QP is next queried:
    /// a safe post that saw the failure queries it, but after a failure
    /// seen only through an unsafe batch's completions, the first safe
    /// post may return flushed completions instead of this error.
    ///
    /// [`UdQp::endpoint`](crate::UdQp::endpoint) refuses so too, in RESET
    /// and ERR, where the QP has no Q_Key to give a peer (`what` is
    /// `UdQp::endpoint`, and the text says to call `ready` first).
    ///
    /// Nothing was posted, and the QP was left as it was: connect it (or
    /// [`reset`](crate::QpEx::reset) and connect it again) and post again.
    /// The text says the state and the next step:
    ///
    /// ```text
    /// post_and_wait: QP 0x1a2b is in RESET (not connected): connect it (connect_to / ready) before posting
    /// post_and_wait: QP 0x1a2b is in ERR: a work request failed or it was stopped; RC, UC, DCI, UD: reset() it, then connect_to (RC, UC) or ready (DCI, UD) again; XRC: reset() the initiator, then connect; a DCT or an XRC target has no reset(): make a new one; through rdma_cm: a new CmId
    /// ```
    #[error("{what}: QP {qp_num:#x} is in {}", crate::qp_state::not_ready_in(what, *state, *receive))]
    QpNotReady {
        /// The refused call: `post_and_wait`, `ibv_wr_complete`,
        /// `ibv_post_recv`, `AsyncQp::send`, ...
        what: &'static str,
        /// The QP.
        qp_num: u32,
        /// Its state when the post was refused (`ibv_query_qp(3)`).
        state: crate::qp_state::QpState,
        /// Whether a receive was refused (else a send).
        receive: bool,
    },

    /// A memory region lacks an access flag what was asked needs (checked
    /// before C is called): a memory window bind needs the region's
    /// [`MW_BIND`](crate::AccessFlags::MW_BIND), and a window granting
    /// remote write or atomic access its `LOCAL_WRITE` (`ibv_bind_mw(3)`).
    #[error("{what} needs a memory region with {needed:?}; the region has {access:?}")]
    MissingAccess {
        /// What was refused.
        what: &'static str,
        /// The access it needs.
        needed: crate::AccessFlags,
        /// The access the region was registered with.
        access: crate::AccessFlags,
    },

    /// The direct data path ([`direct`](crate::direct)) refused a work
    /// request before anything of it was written (nothing was posted, and
    /// the batch holds what it held before), or skipped a CQE it cannot
    /// trust. The error is plain data (no text is formatted, nothing
    /// allocated, until it is shown), so that each check of the writers
    /// and of the poll costs a comparison and a branch.
    #[error("{0}")]
    Direct(DirectError),
}

/// What the direct data path refused ([`Error::Direct`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DirectError {
    /// The local entry is longer than the remote buffer.
    #[error("{what} = {len} is longer than the remote buffer's {remote_len} bytes")]
    RemoteTooShort {
        /// Which length, e.g. `the RDMA write's length`.
        what: &'static str,
        /// The local entry's length.
        len: u64,
        /// The remote buffer's length.
        remote_len: u64,
    },
    /// The WQE would take more 16-byte units than its control segment's
    /// 6-bit DS field can say (63) or than the QP's WQE size allows.
    #[error("the WQE's {units} 16-byte units are more than {max} ({})", if *.by_ds_field { "the DS field" } else { "the QP's WQE size" })]
    TooManyUnits {
        /// The units the WQE needs.
        units: u32,
        /// The most it may take.
        max: u32,
        /// Whether the limit is the DS field's (else the QP's WQE size).
        by_ds_field: bool,
    },
    /// Inline data longer than the QP's `max_inline_data`.
    #[error("inline data of {len} bytes is more than the QP's max_inline_data, {max} bytes")]
    InlineTooLong {
        /// The data's length.
        len: u64,
        /// The QP's `max_inline_data`.
        max: u32,
    },
    /// An atomic's local entry is not 8 bytes.
    #[error("the atomic's local entry is {len} bytes, not 8")]
    AtomicLength {
        /// The entry's length.
        len: u32,
    },
    /// An atomic's remote buffer is shorter than 8 bytes.
    #[error("the atomic's remote buffer is {remote_len} bytes, less than 8")]
    AtomicRemoteTooShort {
        /// The remote buffer's length.
        remote_len: u64,
    },
    /// An atomic's remote address is not 8-byte aligned.
    #[error("an atomic's remote address must be 8-byte aligned: {addr:#x}")]
    AtomicUnaligned {
        /// The remote address.
        addr: u64,
    },
    /// A DCI stream named on a DCI created without DCI streams
    /// ([`QpBuilder::dci_streams`](crate::QpBuilder::dci_streams)).
    #[error("a DCI stream on a DCI created without DCI streams (QpBuilder::dci_streams)")]
    NoStreams,
    /// A CQE that is not a send completion on a CQ that completes only a
    /// direct QP's send queue: skipped, never trusted.
    #[error("a direct CQ got a CQE of opcode {:#x} (format {}), which only a send completion may be here; it was skipped", .op_own >> 4, (.op_own >> 2) & 3)]
    StrayCqe {
        /// The CQE's `op_own` byte (opcode, format, owner bit).
        op_own: u8,
    },
    /// A CQE of another QP (its QP number is not the direct QP's) on a
    /// CQ that completes only the direct QP's send queue: skipped, never
    /// trusted.
    #[error("a direct CQ got a CQE of QP {qp_num:#x}, not of its own QP {own:#x}; it was skipped")]
    ForeignCqe {
        /// The QP number the CQE carries.
        qp_num: u32,
        /// The direct QP's number.
        own: u32,
    },
    /// A CQE whose WQE counter names no outstanding work request (not a
    /// WQE posted and not yet retired, or not the first basic block of
    /// one): skipped, never trusted.
    #[error("a direct CQE names WQE {counter:#x}, which starts no outstanding work request (consumer index {ci:#x}, producer index {pi:#x}); it was skipped")]
    CqeNotOutstanding {
        /// The CQE's WQE counter.
        counter: u16,
        /// The send queue's consumer index.
        ci: u16,
        /// The send queue's producer index.
        pi: u16,
    },
}

impl std::fmt::Debug for Error {
    /// `Variant: text` (the `Display` text); `{:#?}`: the fields.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if f.alternate() {
            return self.fields(f);
        }
        write!(f, "{}: {self}", self.variant())
    }
}

impl Error {
    /// The variant's name, as the `Debug` form starts.
    fn variant(&self) -> &'static str {
        match self {
            Error::Verbs { .. } => "Verbs",
            Error::Unsupported { .. } => "Unsupported",
            Error::DeviceNotFound { .. } => "DeviceNotFound",
            Error::OutOfRange { .. } => "OutOfRange",
            Error::InvalidArgument(_) => "InvalidArgument",
            Error::Timeout { .. } => "Timeout",
            Error::WorkCompletion { .. } => "WorkCompletion",
            Error::WrongByteForm { .. } => "WrongByteForm",
            Error::PeerWritable { .. } => "PeerWritable",
            Error::SendQueueFull { .. } => "SendQueueFull",
            Error::BatchLimit { .. } => "BatchLimit",
            Error::Cm { .. } => "Cm",
            Error::Rejected { .. } => "Rejected",
            Error::QpNotReady { .. } => "QpNotReady",
            Error::MissingAccess { .. } => "MissingAccess",
            Error::Direct(_) => "Direct",
        }
    }

    /// The fields, as a derived `Debug` shows them (`{:#?}`).
    fn fields(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = match self {
            Error::Verbs {
                call,
                context,
                source,
            } => {
                let mut s = f.debug_struct("Verbs");
                s.field("call", call)
                    .field("context", context)
                    .field("source", source);
                s
            }
            Error::Unsupported { what } | Error::PeerWritable { what } => {
                let mut s = f.debug_struct(self.variant());
                s.field("what", what);
                s
            }
            Error::DeviceNotFound { name, found } => {
                let mut s = f.debug_struct("DeviceNotFound");
                s.field("name", name).field("found", found);
                s
            }
            Error::OutOfRange { what, value, limit } => {
                let mut s = f.debug_struct("OutOfRange");
                s.field("what", what)
                    .field("value", value)
                    .field("limit", limit);
                s
            }
            Error::InvalidArgument(text) => {
                return f.debug_tuple("InvalidArgument").field(text).finish()
            }
            Error::Direct(e) => return f.debug_tuple("Direct").field(e).finish(),
            Error::Timeout { what, waited_ms } => {
                let mut s = f.debug_struct("Timeout");
                s.field("what", what).field("waited_ms", waited_ms);
                s
            }
            Error::WorkCompletion {
                wr_id,
                qp_num,
                status,
                vendor_err,
                kind,
            } => {
                let mut s = f.debug_struct("WorkCompletion");
                s.field("wr_id", wr_id)
                    .field("qp_num", &format_args!("{qp_num:#x}"))
                    .field("status", status)
                    .field("vendor_err", &format_args!("{vendor_err:#x}"))
                    .field("kind", kind);
                s
            }
            Error::WrongByteForm { expected, found } => {
                let mut s = f.debug_struct("WrongByteForm");
                s.field("expected", expected).field("found", found);
                s
            }
            Error::SendQueueFull { batch, depth } => {
                let mut s = f.debug_struct("SendQueueFull");
                s.field("batch", batch).field("depth", depth);
                s
            }
            Error::BatchLimit { limit } => {
                let mut s = f.debug_struct("BatchLimit");
                s.field("limit", limit);
                s
            }
            Error::Cm {
                what,
                event,
                status,
                hint,
            } => {
                let mut s = f.debug_struct("Cm");
                s.field("what", what)
                    .field("event", event)
                    .field("status", status)
                    .field("hint", hint);
                s
            }
            Error::Rejected {
                what,
                reason,
                private_data,
            } => {
                let mut s = f.debug_struct("Rejected");
                s.field("what", what)
                    .field("reason", reason)
                    .field("private_data", private_data);
                s
            }
            Error::QpNotReady {
                what,
                qp_num,
                state,
                receive,
            } => {
                let mut s = f.debug_struct("QpNotReady");
                s.field("what", what)
                    .field("qp_num", &format_args!("{qp_num:#x}"))
                    .field("state", state)
                    .field("receive", receive);
                s
            }
            Error::MissingAccess {
                what,
                needed,
                access,
            } => {
                let mut s = f.debug_struct("MissingAccess");
                s.field("what", what)
                    .field("needed", needed)
                    .field("access", access);
                s
            }
        };
        s.finish()
    }
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The error of a failed C call, from an errno value (positive or
    /// negative, as providers differ).
    pub(crate) fn verbs(call: &'static str, errno: i32, context: impl Into<String>) -> Self {
        let errno = errno.abs();
        let context = context.into();
        if errno == libc::EOPNOTSUPP || errno == libc::EPROTONOSUPPORT {
            return Error::Unsupported {
                what: format!(
                    "{call} ({context}): {}",
                    io::Error::from_raw_os_error(errno)
                ),
            };
        }
        Error::Verbs {
            call,
            context,
            source: io::Error::from_raw_os_error(errno),
        }
    }

    /// The error of a failed C call that reports through `errno`.
    pub(crate) fn last_os(call: &'static str, context: impl Into<String>) -> Self {
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        // A NULL return without errno set happens with some providers:
        // report it as an I/O error rather than "success".
        Self::verbs(call, if errno == 0 { libc::EIO } else { errno }, context)
    }

    /// This error, a failed completion's ([`Error::WorkCompletion`]) saying
    /// it came from a QP of `kind`, so that its text gives that kind's
    /// causes and recovery ([`WcStatus::hint_for`](crate::WcStatus::hint_for));
    /// any other error unchanged.
    ///
    /// ```
    /// use mlx5dv::{Error, QpKind, WcStatus};
    ///
    /// let e = Error::WorkCompletion {
    ///     wr_id: 7,
    ///     qp_num: 0x1a2,
    ///     status: WcStatus::LOC_LEN_ERR,
    ///     vendor_err: 0,
    ///     kind: None,
    /// };
    /// let e = e.with_qp_kind(QpKind::Ud);
    /// assert!(matches!(e, Error::WorkCompletion { kind: Some(QpKind::Ud), .. }));
    /// assert!(e.to_string().contains("UD_GRH_BYTES"));
    /// ```
    #[must_use]
    pub fn with_qp_kind(self, kind: crate::QpKind) -> Self {
        match self {
            Error::WorkCompletion {
                wr_id,
                qp_num,
                status,
                vendor_err,
                kind: _,
            } => Error::WorkCompletion {
                wr_id,
                qp_num,
                status,
                vendor_err,
                kind: Some(kind),
            },
            other => other,
        }
    }

    /// The `errno` behind this error, if it came from a C call.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Verbs { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

/// `name` with its article: `an Endpoint`, `a RemoteBuf`.
pub(crate) fn a(name: &str) -> String {
    if name.starts_with(['A', 'E', 'I', 'O']) {
        format!("an {name}")
    } else {
        format!("a {name}")
    }
}

/// `n` and `noun`, the noun in the plural unless `n` is 1:
/// `1 completion`, `2 completions`.
pub(crate) fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// The end of [`Error::WorkCompletion`]'s text: `: ` and the status's
/// hint (for the QP's kind where it is known), or nothing for a status
/// without one.
fn hint_suffix(status: crate::wc::WcStatus, kind: Option<crate::QpKind>) -> String {
    match kind {
        Some(kind) => status.hint_for(kind).map(|h| format!(": {h}")),
        None => status.hint().map(|h| format!(": {h}")),
    }
    .unwrap_or_default()
}

/// The value of [`Error::OutOfRange`] as its text shows it: QP and DCT
/// numbers in hex, as every other message shows them; anything else in
/// decimal.
fn shown_value(what: &str, value: u64) -> String {
    if what.ends_with("QP number") || what.ends_with("DCT number") {
        format!("{value:#x}")
    } else {
        value.to_string()
    }
}

/// Turns a C return code (0 = success, else an errno) into a `Result`.
pub(crate) fn check(rc: i32, call: &'static str, context: impl FnOnce() -> String) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::verbs(call, rc, context()))
    }
}

/// Destroy calls that failed in `Drop` so far
/// ([`destroy_failures`](crate::destroy_failures)).
pub(crate) static DESTROY_FAILURES: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// Reports a destroy call that failed in `Drop`, where it cannot be
/// returned: one line on standard error naming the call, the errno and the
/// device, and one more in [`destroy_failures`](crate::destroy_failures).
/// The object is forgotten either way (see the crate docs). Here, at the
/// bottom of the crate, so that every module's `Drop` calls down to it.
pub(crate) fn report_destroy_failure(call: &str, rc: i32, device: &str) {
    if rc != 0 {
        DESTROY_FAILURES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        eprintln!(
            "mlx5dv: {call} on {device} failed in drop: {}",
            std::io::Error::from_raw_os_error(rc.abs())
        );
    }
}

#[cfg(test)]
mod tests;

/// The text of [`Error::DeviceNotFound`]: what was missing, what there
/// is, and what to do next.
fn device_not_found(name: &str, found: &str) -> String {
    let missing = if name.is_empty() {
        format!("no RDMA device (found: {found})")
    } else {
        format!("no RDMA device named {name:?} (found: {found})")
    };
    let others = if found == "none" || found.is_empty() {
        ""
    } else {
        "name one of those, or "
    };
    format!(
        "{missing}: {others}{}",
        "without RDMA hardware run under the software mlx5 device (mlx5-sim -- <command>, \
         from `cargo install mlx5dv-sim` or scripts/mlx5-sim in the repository, whose \
         device is mlx5_0), in the soft-RoCE guest (scripts/rxe-vm), or load soft-RoCE \
         (modprobe rdma_rxe; rdma link add rxe0 type rxe netdev <interface>)"
    )
}

#[cfg(test)]
mod device_not_found_tests {
    use super::Error;

    #[test]
    fn no_device_says_what_to_run_next() {
        let none = Error::DeviceNotFound {
            name: String::new(),
            found: "none".into(),
        };
        let text = none.to_string();
        assert!(
            text.starts_with("no RDMA device (found: none): without RDMA hardware run under"),
            "{text}"
        );
        for next in [
            "mlx5-sim -- <command>",
            "cargo install mlx5dv-sim",
            "scripts/mlx5-sim",
            "scripts/rxe-vm",
            "rdma_rxe",
        ] {
            assert!(text.contains(next), "{next}: {text}");
        }
        let absent = Error::DeviceNotFound {
            name: "mlx5_0".into(),
            found: "none".into(),
        };
        let text = absent.to_string();
        assert!(
            text.starts_with("no RDMA device named \"mlx5_0\" (found: none): without RDMA"),
            "{text}"
        );
        assert!(text.contains("mlx5-sim -- <command>"), "{text}");
        let named = Error::DeviceNotFound {
            name: "mlx5_9".into(),
            found: "mlx5_0, rxe0".into(),
        };
        let text = named.to_string();
        assert!(
            text.starts_with(
                "no RDMA device named \"mlx5_9\" (found: mlx5_0, rxe0): name one of those, or \
                 without RDMA hardware run under the software mlx5 device"
            ),
            "{text}"
        );
    }
}
