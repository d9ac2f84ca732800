//! Memory windows (`ibv_alloc_mw(3)`, `ibv_bind_mw(3)`): a remote key
//! over part of a memory region, bound and invalidated by work requests.

use crate::error::{check, Error, Result};
use crate::ffi;
use crate::mr::{AccessFlags, MemoryRegion, RemoteBuf};
use crate::pd::ProtectionDomain;
use crate::qp::{QpEx, ReliableConnection, SendOps};
use std::fmt;
use std::ops::RangeBounds;
use std::ptr::NonNull;

/// The type of a memory window (`enum ibv_mw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Type 1: bound with `ibv_bind_mw` ([`QpEx::bind_mw`]); its rkey is
    /// valid only while it is bound.
    Type1,
    /// Type 2: bound with `ibv_wr_bind_mw` ([`Wr::bind_mw`](crate::wr::Wr::bind_mw))
    /// to the QP that binds it; invalid until bound, invalidated by a local
    /// invalidate or a peer's send with invalidate.
    Type2,
}

impl MwType {
    fn raw(self) -> ffi::ibv_mw_type {
        match self {
            MwType::Type1 => ffi::IBV_MW_TYPE_1,
            MwType::Type2 => ffi::IBV_MW_TYPE_2,
        }
    }
}

/// A memory window (`ibv_alloc_mw(3)`), deallocated on drop
/// (`ibv_dealloc_mw`). It keeps its protection domain alive.
///
/// A window is allocated unbound in a protection domain. Binding it to a
/// range of a region registered with [`AccessFlags::MW_BIND`] gives it an
/// rkey through which peers reach that range (with the access the bind
/// grants, within what the region allows); invalidating it (locally with
/// [`Wr::local_inv`](crate::wr::Wr::local_inv), by the peer with
/// [`Wr::send_inv`](crate::wr::Wr::send_inv), or for a type 1 window by
/// [`QpEx::unbind_mw`]) takes that rkey away.
///
/// - Type 1 is bound with [`QpEx::bind_mw`] (`ibv_bind_mw`), a work
///   request outside any batch whose completion carries its wr_id and
///   [`WcOpcode::BIND_MW`](crate::WcOpcode::BIND_MW); it is unbound the
///   same way, with length 0 ([`QpEx::unbind_mw`]).
/// - Type 2 is bound inside a batch with
///   [`Wr::bind_mw`](crate::wr::Wr::bind_mw) (`ibv_wr_bind_mw`, on a QP
///   created with [`SendOps::BIND_MW`](crate::SendOps::BIND_MW)), with a
///   new rkey whose low 8 bits the caller chooses ([`MwBind::key`]; by
///   default the next one, `ibv_inc_rkey`).
///
/// # Memory, and a window outliving its region
///
/// A bound window lets peers read and write its region's bytes. The region
/// has [`AccessFlags::MW_BIND`], so the crate already treats it as memory a
/// peer may write at any moment
/// ([`MemoryRegion::is_peer_writable`](crate::MemoryRegion::is_peer_writable)):
/// no plain slice of it is handed out, whether or not a window is bound.
/// A bind borrows its region (shared) for as long as the work request may
/// be running, as an SGE does. After that the window does not keep its
/// region registered, but it keeps its memory: a region that a window
/// still allocated was ever bound to (even by a bind that failed or was
/// never completed) does not free its buffer when dropped (it is leaked),
/// and refuses to move to other memory or another PD
/// ([`MemoryRegion::rereg_new_buffer`](crate::MemoryRegion::rereg_new_buffer),
/// [`rereg_pd`](crate::MemoryRegion::rereg_pd): [`Error::InvalidArgument`]),
/// so no freed memory is reachable through a window whatever the device
/// does with a stale translation. Drop the window first. Soft-RoCE
/// refuses to deregister a region while a window is bound to it
/// (`rxe_dereg_mr`, IBA 10.6.7.2.6), and
/// [`MemoryRegion`](crate::MemoryRegion)'s drop then leaks the buffer (and
/// reports the failure; in the soft-RoCE guest `ibv_dereg_mr` failed with
/// `EINVAL`, and the PD's deallocation then with `EBUSY`) rather than free
/// memory the device may reach. On
/// the software device deregistration succeeds and an access through the
/// window then fails with a remote access error at the requester; on mlx5
/// hardware (not verified here) the window's translation likewise goes
/// through the region's key, which deregistration destroys.
///
/// Allocate, bind (type 1, on a QP created with
/// [`SendOps::BIND_MW`](crate::SendOps::BIND_MW)), and hand the peer the
/// bound range:
///
/// ```no_run
/// # use mlx5dv::*;
/// # fn f(pd: &ProtectionDomain, qp: &mut RcQp, mr: &MemoryRegion) -> Result<()> {
/// let mut mw = MemoryWindow::new(pd, MwType::Type1)?;
/// let bind = MwBind::new(mr, 0..4096, AccessFlags::REMOTE_WRITE)?;
/// let remote: RemoteBuf = qp.bind_mw(7, &mut mw, &bind)?;
/// // ... poll the send CQ for wr_id 7 (WcOpcode::BIND_MW), then send
/// // `remote` to the peer ...
/// # let _ = remote; Ok(()) }
/// ```
///
/// A bind needs the window's exclusive borrow (the rkey it will have is
/// recorded in it), so a window cannot be bound twice at once:
///
/// ```compile_fail,E0499
/// # use mlx5dv::*;
/// # fn f(qp: &mut RcQp, mw: &mut MemoryWindow, a: MwBind<'_>, b: MwBind<'_>) -> Result<()> {
/// let mut batch = qp.batch();
/// let first = batch.wr(1).bind_mw(mw, &a);
/// let second = batch.wr(2).bind_mw(mw, &b); // ERROR: `mw` is still borrowed
/// # let _ = (first, second); Ok(()) }
/// ```
pub struct MemoryWindow {
    mw: NonNull<ffi::ibv_mw>,
    kind: MwType,
    /// A token of every region the window was ever bound to (a bind that
    /// may have been posted): while the window is allocated it may reach
    /// their memory, which they then neither free nor move
    /// ([`MemoryRegion`]'s `windows`).
    regions: Vec<std::sync::Arc<()>>,
    /// Allocated by this value (deallocated on drop); false for a test's
    /// fake window.
    owned: bool,
    // Dropped after the window is deallocated.
    pd: ProtectionDomain,
}

// SAFETY: an ibv_mw may be used and deallocated from any thread; its rkey
// is written only through `&mut self` (a bind).
unsafe impl Send for MemoryWindow {}
// SAFETY: `&self` only reads the rkey, which a bind (through `&mut self`)
// writes.
unsafe impl Sync for MemoryWindow {}

impl MemoryWindow {
    /// Allocates an unbound window of type `kind` in `pd`
    /// (`ibv_alloc_mw`). A device without windows of that type refuses it
    /// ([`Error::Unsupported`] where the provider answers `EOPNOTSUPP`).
    pub fn new(pd: &ProtectionDomain, kind: MwType) -> Result<Self> {
        // SAFETY: the PD is live; NULL is handled.
        let mw = unsafe { ffi::ibv_alloc_mw(pd.as_ptr(), kind.raw()) };
        let mw = NonNull::new(mw).ok_or_else(|| {
            Error::last_os(
                "ibv_alloc_mw",
                format!("{kind:?} on {}", pd.context().name()),
            )
        })?;
        Ok(MemoryWindow {
            mw,
            kind,
            regions: Vec::new(),
            owned: true,
            pd: pd.clone(),
        })
    }

    /// The window's type.
    pub fn mw_type(&self) -> MwType {
        self.kind
    }

    /// The window's rkey: the one its last bind gives it, else the one it
    /// was allocated with. Recorded when the bind is added (a type 2 bind
    /// in a batch that is then dropped, and so never posted, leaves it
    /// recorded); the window answers to it once the bind has completed.
    pub fn rkey(&self) -> u32 {
        // SAFETY: the window is live; the rkey is written only through
        // `&mut self`.
        unsafe { (*self.mw.as_ptr()).rkey }
    }

    /// The protection domain.
    pub fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }

    /// The raw `ibv_mw`, valid while the window lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_mw {
        self.mw.as_ptr()
    }

    /// A window over a fake `ibv_mw` (tests with the recording provider):
    /// never deallocated, so that no call reaches the fake's context.
    ///
    /// # Safety
    /// `mw` outlives the handle.
    #[cfg(test)]
    pub(crate) unsafe fn fake(
        pd: &ProtectionDomain,
        mw: NonNull<ffi::ibv_mw>,
        kind: MwType,
    ) -> Self {
        MemoryWindow {
            mw,
            kind,
            regions: Vec::new(),
            owned: false,
            pd: pd.clone(),
        }
    }

    /// Records the rkey a bind gives the window (libmlx5 reads it as the
    /// window's key at the next bind; soft-RoCE checks it).
    pub(crate) fn set_rkey(&mut self, rkey: u32) {
        // SAFETY: the window is live and borrowed exclusively.
        unsafe { (*self.mw.as_ptr()).rkey = rkey };
    }

    /// Refuses a bind of this window with `bind` on a QP of `qp_pd` before
    /// C is called: the type must be `kind`, and the window, the region and
    /// the QP in one PD.
    pub(crate) fn check_bind(
        &self,
        kind: MwType,
        bind: &MwBind<'_>,
        qp_pd: *mut ffi::ibv_pd,
    ) -> Result<()> {
        if self.kind != kind {
            return Err(Error::InvalidArgument(format!(
                "a {:?} memory window bound as {kind:?} (type 1: QpEx::bind_mw; type 2: Wr::bind_mw)",
                self.kind
            )));
        }
        if kind == MwType::Type1 && bind.access.contains(AccessFlags::ZERO_BASED) {
            return Err(Error::InvalidArgument(
                "a zero-based type 1 memory window (ibv_bind_mw refuses ZERO_BASED)".into(),
            ));
        }
        let (w, r, q) = (self.pd.as_ptr(), bind.mr.pd().as_ptr(), qp_pd);
        if w != r || w != q {
            return Err(Error::InvalidArgument(
                "memory window bind: the window, the memory region and the QP are not in one \
                 protection domain"
                    .into(),
            ));
        }
        Ok(())
    }
}

impl MemoryWindow {
    /// Records that the window may be bound to `mr` from now on (before
    /// the bind is posted: a bind that may have been posted counts).
    pub(crate) fn hold(&mut self, mr: &MemoryRegion) {
        if !self
            .regions
            .iter()
            .any(|r| std::sync::Arc::ptr_eq(r, &mr.windows))
        {
            self.regions.push(std::sync::Arc::clone(&mr.windows));
        }
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: allocated by this value and deallocated once.
        let rc = unsafe { ffi::ibv_dealloc_mw(self.mw.as_ptr()) };
        crate::error::report_destroy_failure("ibv_dealloc_mw", rc, self.pd.context().name());
        if rc != 0 {
            // Still allocated: it may still reach the regions it was bound
            // to, whose memory then stays (leaked) rather than freed.
            std::mem::forget(std::mem::take(&mut self.regions));
        }
    }
}

impl fmt::Debug for MemoryWindow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("type", &self.kind)
            .field("rkey", &format_args!("{:#x}", self.rkey()))
            .finish()
    }
}

/// What a bind gives a window (`struct ibv_mw_bind_info`): a range of a
/// region and the remote access through it, checked before C is called.
#[derive(Debug, Clone, Copy)]
#[must_use]
pub struct MwBind<'m> {
    pub(crate) mr: &'m MemoryRegion,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    pub(crate) access: AccessFlags,
    pub(crate) key: Option<u8>,
}

/// The access a window may grant: remote read, write and atomic, and
/// zero-based addressing (type 2 only).
const WINDOW_ACCESS: AccessFlags = AccessFlags::REMOTE_READ
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC)
    .union(AccessFlags::ZERO_BASED);

/// A bind's length limit: libmlx5 translates a window with one KLM, whose
/// byte count is at most 2 GiB.
const MAX_WINDOW_LEN: usize = 1 << 31;

impl<'m> MwBind<'m> {
    /// A bind of `range` of `mr` granting `access`, checked as the man
    /// pages ask (`ibv_bind_mw(3)`): the range lies within the region
    /// (a window bound past its region is [`Error::OutOfRange`]), is 1 byte
    /// to 2 GiB long; the region was registered with
    /// [`AccessFlags::MW_BIND`], and with `LOCAL_WRITE` when the window
    /// grants remote write or atomic access ([`Error::MissingAccess`]);
    /// `access` holds only `REMOTE_READ`, `REMOTE_WRITE`, `REMOTE_ATOMIC`
    /// and `ZERO_BASED` ([`Error::InvalidArgument`]).
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # fn f(pd: &ProtectionDomain) -> Result<()> {
    /// let mr = MemoryRegion::new(pd, 4096, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND)?;
    /// let past = MwBind::new(&mr, 2048..8192, AccessFlags::REMOTE_READ);
    /// assert!(matches!(past, Err(Error::OutOfRange { .. })));
    /// # Ok(()) }
    /// ```
    pub fn new(
        mr: &'m MemoryRegion,
        range: impl RangeBounds<usize>,
        access: AccessFlags,
    ) -> Result<Self> {
        let (offset, len) = mr.check_range(range).map_err(|e| match e {
            Error::OutOfRange { value, limit, .. } => Error::OutOfRange {
                what: "memory window range (a window bound past its region)",
                value,
                limit,
            },
            e => e,
        })?;
        if len == 0 || len > MAX_WINDOW_LEN {
            return Err(Error::OutOfRange {
                what: "memory window length",
                value: len as u64,
                limit: format!("1 to {MAX_WINDOW_LEN} bytes"),
            });
        }
        if !WINDOW_ACCESS.contains(access) {
            return Err(Error::InvalidArgument(format!(
                "memory window access {access:?}: a window grants only REMOTE_READ, \
                 REMOTE_WRITE, REMOTE_ATOMIC and ZERO_BASED"
            )));
        }
        let region = mr.access();
        if !region.contains(AccessFlags::MW_BIND) {
            return Err(Error::MissingAccess {
                what: "a memory window bind",
                needed: AccessFlags::MW_BIND,
                access: region,
            });
        }
        let writes = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC;
        if access.intersects(writes) && !region.contains(AccessFlags::LOCAL_WRITE) {
            return Err(Error::MissingAccess {
                what: "a memory window with remote write or atomic access",
                needed: AccessFlags::LOCAL_WRITE,
                access: region,
            });
        }
        Ok(MwBind {
            mr,
            offset,
            len,
            access,
            key: None,
        })
    }

    /// The low 8 bits of the rkey the window gets (by default those of
    /// `ibv_inc_rkey` of its rkey: one more).
    pub fn key(mut self, key: u8) -> Self {
        self.key = Some(key);
        self
    }

    /// The rkey a window with `rkey` gets from this bind.
    pub(crate) fn new_rkey(&self, rkey: u32) -> u32 {
        match self.key {
            Some(k) => (rkey & !0xff) | u32::from(k),
            // SAFETY: a pure function of its argument.
            None => unsafe { ffi::ibv_inc_rkey(rkey) },
        }
    }

    /// The C form of the bind.
    pub(crate) fn info(&self) -> ffi::ibv_mw_bind_info {
        ffi::ibv_mw_bind_info {
            mr: self.mr.as_ptr(),
            addr: self.mr.addr() + self.offset as u64,
            length: self.len as u64,
            mw_access_flags: self.access.bits(),
        }
    }

    /// What the peer reaches once the bind has completed: the bound range
    /// (from 0 when zero-based) under `rkey`.
    pub(crate) fn remote(&self, rkey: u32) -> RemoteBuf {
        let addr = if self.access.contains(AccessFlags::ZERO_BASED) {
            0
        } else {
            self.mr.addr() + self.offset as u64
        };
        RemoteBuf {
            addr,
            len: self.len as u64,
            rkey,
        }
    }
}

impl QpEx<ReliableConnection> {
    /// Binds the type 1 window `mw` as `bind` says (`ibv_bind_mw(3)`): a
    /// signalled work request on this QP's send queue, outside any batch,
    /// whose completion carries `wr_id` and
    /// [`WcOpcode::BIND_MW`](crate::WcOpcode::BIND_MW). Returns what the
    /// peer reaches through the window once that completion is in: the
    /// range under the window's new rkey (also [`MemoryWindow::rkey`]).
    ///
    /// The QP must have been created with
    /// [`SendOps::BIND_MW`](crate::SendOps::BIND_MW) among its send ops
    /// ([`Error::Unsupported`] otherwise): libmlx5 sizes the send queue's
    /// slots for a bind (three 64-byte blocks) only then, and a bind in a
    /// smaller slot overwrites the work requests after it.
    ///
    /// The bind stays in the send queue after this returns, until the
    /// device has run it. The QP counts it from just before the call until
    /// a poll of the send CQ (any of the crate's polls, or a scoped post's
    /// wait) reads its successful completion, or the completion of a work
    /// request posted after it, or [`reset`](QpEx::reset) empties the
    /// queue; meanwhile batches on the QP have one work request less of
    /// room, and a bind that finds the queue full of binds is refused
    /// ([`Error::SendQueueFull`]). A bind that fails leaves the QP in ERR,
    /// and is counted until the reset that makes it usable again. Its
    /// completion takes a place in the send CQ until a poll reads it, too:
    /// a bind that finds the CQ's capacity taken (by the binds of its QPs,
    /// an `AsyncQp`'s operations, a scoped post running) is refused
    /// ([`Error::OutOfRange`];
    /// [`CompletionQueue::binds_in_flight`](crate::CompletionQueue::binds_in_flight)),
    /// as the device would overrun the CQ and drop completions.
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # use std::time::Duration;
    /// # fn f(pd: &ProtectionDomain, send_cq: &mut CompletionQueue, recv_cq: &CompletionQueue, mr: &MemoryRegion) -> Result<()> {
    /// let mut qp = QpBuilder::rc(pd, send_cq, recv_cq)
    ///     .send_ops(SendOps::rc_default() | SendOps::BIND_MW)
    ///     .build()?;
    /// // ... connect it ...
    /// let mut mw = MemoryWindow::new(pd, MwType::Type1)?;
    /// let bind = MwBind::new(mr, 0..4096, AccessFlags::REMOTE_READ)?;
    /// let remote = qp.bind_mw(7, &mut mw, &bind)?;
    /// let wcs = send_cq.wait(1, Duration::from_secs(5))?; // the bind's, read: no longer queued
    /// assert_eq!((wcs[0].wr_id, wcs[0].opcode), (7, WcOpcode::BIND_MW));
    /// wcs[0].ok()?;
    /// # let _ = remote; Ok(()) }
    /// ```
    ///
    /// Refused before C is called: a type 2 window or a zero-based bind
    /// ([`Error::InvalidArgument`], as libmlx5), a window, region and QP
    /// not in one PD, a QP that is not ready to send
    /// ([`Error::QpNotReady`]), and a call inside a
    /// [`poll_each`](crate::CompletionQueue::poll_each) callback (the
    /// provider takes the send CQ's lock to find the queue full). The
    /// region's borrow ends here; its memory stays until the window is
    /// deallocated (see [`MemoryWindow`]). A `wr_id`
    /// of 2^63 or more is refused ([`Error::OutOfRange`]): the ids with bit
    /// 63 are the scoped post's, which could take the bind's completion
    /// for one of its own.
    pub fn bind_mw(
        &mut self,
        wr_id: u64,
        mw: &mut MemoryWindow,
        bind: &MwBind<'_>,
    ) -> Result<RemoteBuf> {
        mw.check_bind(MwType::Type1, bind, self.pd().as_ptr())?;
        let info = bind.info();
        self.post_bind(wr_id, mw, info, Some(bind.mr))?;
        Ok(bind.remote(mw.rkey()))
    }

    /// Unbinds the type 1 window `mw` (`ibv_bind_mw(3)` with length 0):
    /// once the completion (wr_id `wr_id`, [`WcOpcode::BIND_MW`](crate::WcOpcode::BIND_MW))
    /// is in, its rkey reaches nothing. `mr` is the region it was bound to
    /// (soft-RoCE's provider reads the region's lkey even for an unbind).
    /// Refused, and counted in the send queue, as
    /// [`bind_mw`](Self::bind_mw) is.
    pub fn unbind_mw(
        &mut self,
        wr_id: u64,
        mw: &mut MemoryWindow,
        mr: &MemoryRegion,
    ) -> Result<()> {
        if mw.mw_type() != MwType::Type1 {
            return Err(Error::InvalidArgument(
                "unbind_mw of a type 2 memory window (invalidate it: Wr::local_inv)".into(),
            ));
        }
        let (w, r, q) = (mw.pd().as_ptr(), mr.pd().as_ptr(), self.pd().as_ptr());
        if w != r || w != q {
            return Err(Error::InvalidArgument(
                "unbind_mw: the window, the memory region and the QP are not in one protection \
                 domain"
                    .into(),
            ));
        }
        let info = ffi::ibv_mw_bind_info {
            mr: mr.as_ptr(),
            addr: mr.addr(),
            length: 0,
            mw_access_flags: 0,
        };
        self.post_bind(wr_id, mw, info, None)
    }

    fn post_bind(
        &mut self,
        wr_id: u64,
        mw: &mut MemoryWindow,
        info: ffi::ibv_mw_bind_info,
        region: Option<&MemoryRegion>,
    ) -> Result<()> {
        if crate::cq::in_provider_poll() {
            return Err(crate::cq::in_poll_callback("ibv_bind_mw", &self.describe()));
        }
        // Ids with bit 63 are the scoped post's: a later post_and_wait on
        // this QP could take the bind's completion for one of its own.
        if wr_id >> 63 != 0 {
            return Err(Error::OutOfRange {
                what: "ibv_bind_mw wr_id",
                value: wr_id,
                limit: "below 2^63 (ids with bit 63 are the scoped post's)".into(),
            });
        }
        // libmlx5 sizes the send queue's WQEs (and counts its room) for a
        // bind only on a QP created with BIND_MW: on another, a bind takes
        // more blocks than its slot and overwrites the WQEs after it.
        if !self.send_ops().contains(SendOps::BIND_MW) {
            return Err(Error::Unsupported {
                what: format!(
                    "ibv_bind_mw on {}: the QP was not created with SendOps::BIND_MW in its \
                     send ops, for which libmlx5 sizes its send queue's WQEs (a bind would \
                     overwrite the WQEs after it); create it with \
                     QpBuilder::send_ops(SendOps::rc_default() | SendOps::BIND_MW)",
                    self.describe()
                ),
            });
        }
        self.ready_to_send("ibv_bind_mw")?;
        // A leaked batch holds the send queue's lock: end it first.
        self.abort_if_leaked();
        // Counted as queued from before the call until its completion is
        // seen: a batch leaves room for it (see `crate::cq::Queued`).
        self.queue_bind(wr_id)?;
        // From here the bind may be posted: the window may reach the
        // region's memory until it is deallocated.
        if let Some(mr) = region {
            mw.hold(mr);
        }
        let mut wr = ffi::ibv_mw_bind {
            wr_id,
            send_flags: ffi::IBV_SEND_SIGNALED,
            bind_info: info,
        };
        // SAFETY: the QP and the window are live, and no batch is open
        // (`&mut self`, a leaked one aborted above); the bind's region, if
        // any, is borrowed by the caller for the call. The provider writes
        // the window's new rkey, which `&mut mw` lets it.
        let rc = unsafe { ffi::ibv_bind_mw(self.as_ptr(), mw.as_ptr(), &mut wr) };
        if rc != 0 && self.pd().context().is_mlx5() {
            // libmlx5 checks a bind whole before writing it: refused, it
            // posted nothing. (Other providers' refusals count as posted.)
            self.unqueue_bind();
        }
        check(rc, "ibv_bind_mw", || {
            format!("{} wr_id {wr_id}, {mw:?}", self.describe())
        })
    }
}
