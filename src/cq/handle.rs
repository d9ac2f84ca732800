//! The handle: [`CompletionQueue`], the share of it that QPs and SRQs
//! hold ([`CqInner`]), its creation and its drop. Every other file of the
//! folder adds to these; the types of their fields are in the files below
//! (`raw_wc`, `work_completion`, `queued`, `owners`, `one_per_start`).

use super::one_per_start::{OnePerStart, OnePerStartPtr};
use super::owners::Owners;
#[cfg(doc)]
use super::polled_wc::PolledWc;
use super::queued::Watch;
use super::raw_wc::RawWc;
use super::soft_roce_probe;
use super::work_completion::WorkCompletion;
use crate::channel::CompletionChannel;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ffi;
use std::collections::VecDeque;
use std::fmt;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

/// A completion queue created with `ibv_create_cq_ex(3)` and polled with
/// the extended poll API (`ibv_start_poll`, `ibv_next_poll`,
/// `ibv_end_poll`).
///
/// One handle polls the CQ: polling takes `&mut self`, so the compiler
/// keeps two polls of one CQ apart, and a poll costs no lock of this
/// crate (the provider's own, held from `ibv_start_poll` to `ibv_end_poll`,
/// is the one C pays too). Several QPs may complete on the CQ: they are
/// built with `&CompletionQueue` and keep the CQ alive (it is destroyed
/// when the handle and the last of them are dropped), as XRC SRQs made on
/// it do; an XRC SRQ dropped after a receive was posted on it is kept by
/// the CQ and destroyed right before it
/// ([`SharedReceiveQueue`](crate::SharedReceiveQueue)). To poll one CQ from
/// several threads, share the handle in a `Mutex`:
///
/// ```no_run
/// # fn demo(cq: mlx5dv::CompletionQueue) {
/// use std::sync::{Arc, Mutex};
///
/// let cq = Arc::new(Mutex::new(cq));
/// let poller = {
///     let cq = Arc::clone(&cq);
///     std::thread::spawn(move || {
///         let mut cq = cq.lock().unwrap();
///         cq.poll_each(16, |wc| println!("{}: {}", wc.wr_id(), wc.status()))
///     })
/// };
/// # let _ = poller.join();
/// # }
/// ```
pub struct CompletionQueue {
    /// The CQ (also in `inner`): read from the handle itself by a poll.
    pub(super) cq: NonNull<ffi::ibv_cq_ex>,
    /// The attribute `start_poll` is given: zero, input only. Kept here,
    /// at hand beside the CQ, rather than made afresh on each poll.
    pub(super) attr: ffi::ibv_poll_cq_attr,
    /// Completions taken from the CQ by a scoped post
    /// ([`QpEx::post_and_wait`](crate::QpEx::post_and_wait)) that were not
    /// its own: handed out, oldest first, by the next polls, before any
    /// new completion of the device.
    pub(super) backlog: VecDeque<RawWc>,
    /// What the last [`wait`](CompletionQueue::wait) (or scoped post)
    /// returned: its room is reused by the next.
    pub(super) completions: Vec<WorkCompletion>,
    /// How many completions the CQ holds (`ibv_cq.cqe`, as created or
    /// last resized: [`resize`](CompletionQueue::resize) takes `&mut self`).
    pub(super) capacity: u32,
    pub(super) inner: Arc<CqInner>,
}

/// What keeps a CQ alive: the handle's and each QP's share of it.
pub(crate) struct CqInner {
    pub(crate) cq: NonNull<ffi::ibv_cq_ex>,
    owned: bool,
    /// Whether the owned completions read the sender of each receive
    /// (`src_qp`, `slid`, `sl`, `dlid_path_bits`): set once a UD QP
    /// receives on this CQ ([`QpBuilder::ud`](crate::QpBuilder::ud)),
    /// whose server answers each sender; other CQs skip the four reads
    /// (a UD sender's fields mean nothing to an RC receive).
    pub(super) senders: std::sync::atomic::AtomicBool,
    /// The QPs sending on this CQ with type 1 binds queued, whose
    /// completions its polls look for ([`queued`](super::queued)).
    pub(crate) watch: Watch,
    /// The QPs and DCTs on this CQ, by number, with their generations: a
    /// kept completion of one destroyed since is dropped
    /// ([`owners`](super::owners)).
    pub(crate) owners: Owners,
    /// XRC SRQs dropped after a receive was posted on them, whose
    /// completions may still be in this CQ or still come: destroyed right
    /// before it (`retired`). They hold their PD and domain, not the CQ.
    pub(super) retired: Mutex<Vec<Retired>>,
    // Dropped after the CQ is destroyed.
    pub(super) one_per_start: Option<OnePerStartPtr>,
    /// The channel the CQ's events go to: dropped after the CQ is
    /// destroyed (a channel outlives its CQs).
    pub(super) channel: Option<CompletionChannel>,
    pub(super) ctx: Context,
}

/// An object the CQ keeps until it is destroyed, and drops (destroying
/// it) right before: an XRC SRQ (`crate::srq`'s `RetiredSrq`; see
/// `retired`).
pub(crate) type Retired = Box<dyn Send + Sync>;

// SAFETY: the CQ is polled only through `&mut CompletionQueue` (one thread
// at a time); what `&self` reaches (the pointer, the capacity, the context)
// is read-only, and creation and destruction are thread-safe verbs calls.
unsafe impl Send for CompletionQueue {}
// SAFETY: as above.
unsafe impl Sync for CompletionQueue {}
// SAFETY: a shared `CqInner` is only read (QPs give its pointer to verbs
// calls), but for its kept SRQs, behind a `Mutex`; its `OnePerStart`,
// whose `Cell` a poll sets, is touched only by polls, which hold the CQ's
// handle mutably (one thread at a time); the CQ is destroyed by the last
// owner.
unsafe impl Send for CqInner {}
// SAFETY: as above.
unsafe impl Sync for CqInner {}

impl Drop for CqInner {
    fn drop(&mut self) {
        // The XRC SRQs it keeps first, owned CQ or not: an SRQ names its CQ
        // until destroyed (and a CQ made elsewhere is destroyed after this).
        self.destroy_retired();
        if self.owned {
            if let Some(channel) = &self.channel {
                // SAFETY: attached when made; destroyed next. Its events
                // are acknowledged, or ibv_destroy_cq would wait for ever.
                unsafe { channel.detach(cq_of(self.cq)) };
            }
            // SAFETY: created by this crate; the handle and every QP and
            // SRQ using it hold this Arc, so none is left (a dropped XRC SRQ
            // it kept was destroyed above); destroyed once.
            let rc = unsafe { ffi::ibv_destroy_cq(ffi::ibv_cq_ex_to_cq(self.cq.as_ptr())) };
            crate::error::report_destroy_failure("ibv_destroy_cq", rc, self.ctx.name());
        }
    }
}

/// The vendor id soft-RoCE (rxe) reports. Its provider's `next_poll`, on
/// finding the CQ empty, already ends the poll (stores the consumer index
/// and unlocks), and in rdma-core 44 to 54 it has advanced that index
/// first, so the `end_poll` that ibv_create_cq_ex(3) then requires
/// advances it past the last completion and later polls return zeroed
/// completions (fixed in 55). A soft-RoCE CQ made by
/// [`CompletionQueue::new`] gets [`OnePerStart`] entries when the provider
/// in use does that, as the first such CQ of the process finds out by
/// running the sequence ([`soft_roce_probe`](super::soft_roce_probe)).
const SOFT_ROCE_VENDOR_ID: u32 = 0x00FF_FFFF;

/// Checks, once, that the provider filled every poll entry of `cq` a poll
/// calls: the hot path then calls them straight from `struct ibv_cq_ex`,
/// as the header's `ibv_start_poll` / `ibv_wc_read_*` do.
///
/// # Safety
/// `cq` is a live extended CQ.
unsafe fn check_poll_entries(cq: NonNull<ffi::ibv_cq_ex>, device: &str) -> Result<()> {
    // SAFETY: the caller's promise.
    let c = unsafe { cq.as_ref() };
    let filled = c.start_poll.is_some()
        && c.next_poll.is_some()
        && c.end_poll.is_some()
        && c.read_opcode.is_some()
        && c.read_vendor_err.is_some()
        && c.read_byte_len.is_some()
        && c.read_imm_data.is_some()
        && c.read_qp_num.is_some()
        && c.read_wc_flags.is_some();
    if filled {
        Ok(())
    } else {
        Err(Error::Unsupported {
            what: format!(
                "the provider of {device} left an extended-CQ poll entry NULL \
                 (start/next/end_poll, read_opcode, read_vendor_err, read_byte_len, \
                 read_imm_data, read_qp_num or read_wc_flags)"
            ),
        })
    }
}

/// What the CQ reports for each completion: `IBV_WC_STANDARD_FLAGS`, the
/// fields of a `struct ibv_wc` (the sender's QP, LID and service level and
/// the local LID's path bits for UD receives: [`PolledWc::src_qp`],
/// [`PolledWc::slid`], [`PolledWc::sl`], [`PolledWc::dlid_path_bits`]).
const WC_FLAGS: u64 = ffi::IBV_WC_EX_WITH_BYTE_LEN as u64
    | ffi::IBV_WC_EX_WITH_IMM as u64
    | ffi::IBV_WC_EX_WITH_QP_NUM as u64
    | ffi::IBV_WC_EX_WITH_SRC_QP as u64
    | ffi::IBV_WC_EX_WITH_SLID as u64
    | ffi::IBV_WC_EX_WITH_SL as u64
    | ffi::IBV_WC_EX_WITH_DLID_PATH_BITS as u64;

impl CompletionQueue {
    /// Makes the owned completions of this CQ ([`WorkCompletion`], from
    /// [`wait`](Self::wait), [`poll_into`](Self::poll_into) and the scoped
    /// posts) read the sender of each receive: `src_qp`, `slid`, `sl`,
    /// `dlid_path_bits`. A CQ a UD QP receives on does so from the QP's
    /// creation ([`QpBuilder::ud`](crate::QpBuilder::ud)); on others,
    /// which skip those four reads a receive, call it where the sender
    /// matters. [`PolledWc`]'s readers read them on any CQ.
    pub fn read_senders(&self) {
        self.inner
            .senders
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the owned completions read senders
    /// ([`read_senders`](Self::read_senders)).
    #[inline]
    pub(crate) fn reads_senders(&self) -> bool {
        self.inner
            .senders
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Creates a CQ with room for at least `cqe` completions. Its waits
    /// poll (spinning, then yielding, then sleeping 50 µs at a time): see
    /// [`with_channel`](Self::with_channel) for a CQ whose waits sleep in
    /// the kernel.
    pub fn new(ctx: &Context, cqe: u32) -> Result<Self> {
        Self::create(ctx, cqe, None)
    }

    /// Creates a CQ, on `channel` when given (of `ctx`).
    pub(crate) fn create(
        ctx: &Context,
        cqe: u32,
        channel: Option<&CompletionChannel>,
    ) -> Result<Self> {
        if cqe == 0 || cqe > i32::MAX as u32 {
            return Err(Error::OutOfRange {
                what: "CQ entries",
                value: u64::from(cqe),
                limit: format!("1 to {} (and the device's max_cqe)", i32::MAX),
            });
        }
        let mut attr = ffi::ibv_cq_init_attr_ex {
            cqe,
            wc_flags: WC_FLAGS,
            channel: channel.map_or(std::ptr::null_mut(), CompletionChannel::as_ptr),
            ..Default::default()
        };
        // SAFETY: the context is open; `attr` is a valid, initialised
        // attribute struct; NULL is handled.
        let cq = unsafe { ffi::ibv_create_cq_ex(ctx.as_ptr(), &mut attr) };
        let cq = NonNull::new(cq).ok_or_else(|| {
            Error::last_os(
                "ibv_create_cq_ex",
                format!("{cqe} entries on {}", ctx.name()),
            )
        })?;
        // SAFETY: `cq` is a live CQ; `cqe` is the capacity it got.
        let capacity = unsafe { (*ffi::ibv_cq_ex_to_cq(cq.as_ptr())).cqe };
        let capacity = u32::try_from(capacity).unwrap_or(cqe);
        let mut inner = CqInner {
            cq,
            owned: true,
            senders: Default::default(),
            watch: Watch::new(capacity),
            owners: Owners::default(),
            retired: Mutex::default(),
            one_per_start: None,
            channel: channel.cloned(),
            ctx: ctx.clone(),
        };
        if let Some(channel) = channel {
            // SAFETY: just created on `channel`, and not armed; `inner`
            // detaches it before destroying it.
            unsafe { channel.attach(cq_of(cq)) };
        }
        // SAFETY: a live extended CQ (destroyed by `inner` on failure).
        unsafe { check_poll_entries(cq, ctx.name()) }?;
        let soft_roce = ctx
            .query_device()
            .is_ok_and(|a| a.vendor_id == SOFT_ROCE_VENDOR_ID);
        let overruns = || match NonNull::new(ctx.as_ptr()) {
            // SAFETY: an open context, of a soft-RoCE device.
            Some(c) => unsafe { soft_roce_probe::end_poll_overruns(c) },
            None => true,
        };
        if soft_roce && overruns() {
            // SAFETY: just created and checked; nothing polls it yet, and
            // `cq_context` is unused (NULL at creation).
            inner.one_per_start = Some(unsafe { OnePerStart::install(cq) });
        }
        Ok(CompletionQueue {
            cq,
            attr: ffi::ibv_poll_cq_attr::default(),
            backlog: VecDeque::new(),
            completions: Vec::new(),
            capacity,
            inner: Arc::new(inner),
        })
    }

    /// Wraps an extended CQ created elsewhere; the handle does not destroy it.
    ///
    /// # Safety
    ///
    /// `cq` must be a live CQ of `ctx`, created with `ibv_create_cq_ex` with
    /// at least `IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM |
    /// IBV_WC_EX_WITH_QP_NUM` in its `wc_flags`, polled by nobody else,
    /// its poll entries left as the provider set them, and kept alive
    /// until this handle and the QPs and SRQs made with it are dropped
    /// (a dropped XRC SRQ it keeps is destroyed with the last of them:
    /// see [`SharedReceiveQueue`](crate::SharedReceiveQueue)).
    /// Fails with [`Error::Unsupported`] when the provider left a poll
    /// entry NULL. The handle polls as ibv_create_cq_ex(3) says; for a
    /// soft-RoCE CQ use [`CompletionQueue::new`], which works around that
    /// provider's `next_poll` (the device is not queried here).
    pub unsafe fn from_raw(ctx: &Context, cq: NonNull<ffi::ibv_cq_ex>) -> Result<Self> {
        // SAFETY: the caller promises a live CQ.
        unsafe { check_poll_entries(cq, ctx.name()) }?;
        // SAFETY: as above.
        let capacity = unsafe { (*ffi::ibv_cq_ex_to_cq(cq.as_ptr())).cqe };
        let capacity = u32::try_from(capacity).unwrap_or(0);
        Ok(CompletionQueue {
            cq,
            attr: ffi::ibv_poll_cq_attr::default(),
            backlog: VecDeque::new(),
            completions: Vec::new(),
            capacity,
            inner: Arc::new(CqInner {
                cq,
                owned: false,
                senders: Default::default(),
                watch: Watch::new(capacity),
                owners: Owners::default(),
                retired: Mutex::default(),
                one_per_start: None,
                channel: None,
                ctx: ctx.clone(),
            }),
        })
    }

    /// Whether this CQ polls one completion per `start_poll` / `end_poll`
    /// pair of its provider: a CQ of a soft-RoCE provider whose `next_poll`
    /// overruns the CQ when it finds it empty (rdma-core 44 to 54), as the
    /// first soft-RoCE CQ of the process found out. Its `next_poll` and
    /// `end_poll` entries are then the crate's, which C code given
    /// [`as_ptr`](Self::as_ptr) calls too. False on every other CQ.
    pub fn polls_one_completion_per_start(&self) -> bool {
        self.inner.one_per_start.is_some()
    }

    /// The raw extended CQ, valid while this handle lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_cq_ex {
        self.cq.as_ptr()
    }

    /// How many completions the CQ holds (at least what was asked).
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// The completion channel the CQ's events go to, if it was created on
    /// one ([`with_channel`](Self::with_channel)).
    pub fn channel(&self) -> Option<&CompletionChannel> {
        self.inner.channel.as_ref()
    }

    /// A share of the CQ that keeps it alive (held by the QPs that complete
    /// on it).
    pub(crate) fn share(&self) -> Arc<CqInner> {
        Arc::clone(&self.inner)
    }

    /// How many hold the CQ: this handle and each QP's share.
    pub(crate) fn shares(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// Whether completions a scoped post kept wait to be handed out.
    pub(crate) fn has_backlog(&self) -> bool {
        self.backlog_len() != 0
    }

    /// The CQ's ledger of binds and places.
    #[inline(always)]
    pub(crate) fn watch(&self) -> &Watch {
        &self.inner.watch
    }

    /// How many completions of type 1 memory window binds
    /// ([`RcQp::bind_mw`](crate::RcQp::bind_mw),
    /// [`unbind_mw`](crate::RcQp::unbind_mw)) posted on the QPs sending on
    /// this CQ no poll has read yet: they are in the CQ or still to come.
    /// Each takes a place in the CQ until then, beside an `AsyncQp`'s
    /// operations in flight and a scoped post's batch while it runs, so a
    /// bind, a scoped post, an `AsyncQp` operation or a
    /// [`resize`](Self::resize) that would leave the device more
    /// completions than the CQ holds is refused with
    /// [`Error::OutOfRange`](crate::Error::OutOfRange): poll these first.
    /// A QP's binds stop counting when the QP is dropped (libmlx5 removes
    /// its completions from the CQ).
    #[inline]
    pub fn binds_in_flight(&self) -> u32 {
        self.inner.watch.binds()
    }
}

impl fmt::Debug for CompletionQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("device", &self.inner.ctx.name())
            .field("capacity", &self.capacity)
            .field("channel", &self.inner.channel.is_some())
            .finish()
    }
}

/// An extended CQ as its `struct ibv_cq` (`ibv_cq_ex_to_cq`).
#[inline]
pub(crate) fn cq_of(cq: NonNull<ffi::ibv_cq_ex>) -> NonNull<ffi::ibv_cq> {
    // SAFETY: `ibv_cq_ex_to_cq` converts the pointer and reads nothing.
    let raw = unsafe { ffi::ibv_cq_ex_to_cq(cq.as_ptr()) };
    NonNull::new(raw).unwrap_or(cq.cast())
}
