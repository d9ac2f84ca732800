//! The builders of mlx5dv_wr_post(3) on top of the batch: DMA memcpy,
//! list and interleaved mkey registration, raw WQEs; and the local
//! invalidate that makes an mkey registrable again.

use super::{Addressed, SendFlags, Wr};
use crate::error::{Error, Result};
use crate::ffi;
use crate::mkey::{Mkey, MkeyLayout};
use crate::mr::{AccessFlags, MemoryRegion, Sge, SgeMut};
use crate::qp::{Mlx5Info, Mlx5SendOps, QpEx, ReliableConnection, SendOps, Transport};
use crate::wqe::Wqe;
use std::marker::PhantomData;

use crate::qp_spec::{ENTRY, INL_HDR};

/// One entry of an interleaved layout (`struct mlx5dv_mr_interleaved`):
/// `bytes_count` bytes of real data at an offset of a memory region, then
/// `bytes_skip` bytes of padding, repeated by the registration's
/// `repeat_count`.
#[derive(Debug, Clone, Copy)]
pub struct MrInterleaved<'m> {
    raw: ffi::mlx5dv_mr_interleaved,
    /// Where the region ends, to bound the repeated pattern.
    region_end: u64,
    /// Whether a peer may already write the region (see
    /// [`Wr::mr_interleaved`] on remote write access).
    peer_writable: bool,
    _mr: PhantomData<&'m MemoryRegion>,
}

impl<'m> MrInterleaved<'m> {
    /// `bytes_count` bytes at `offset` of `mr`, then `bytes_skip` skipped.
    /// The first block must lie in the region; the repeated ones are
    /// checked when the layout is registered.
    pub fn new(
        mr: &'m MemoryRegion,
        offset: usize,
        bytes_count: u32,
        bytes_skip: u32,
    ) -> Result<Self> {
        let end = (offset as u64).checked_add(u64::from(bytes_count));
        if bytes_count == 0 || end.is_none_or(|e| e > mr.len() as u64) {
            return Err(Error::OutOfRange {
                what: "interleaved entry end",
                value: end.unwrap_or(u64::MAX),
                limit: format!(
                    "1 to {} bytes from the entry's offset (the memory region's length)",
                    mr.len()
                ),
            });
        }
        Ok(MrInterleaved {
            raw: ffi::mlx5dv_mr_interleaved {
                addr: mr.addr() + offset as u64,
                bytes_count,
                bytes_skip,
                lkey: mr.lkey(),
            },
            region_end: mr.addr() + mr.len() as u64,
            peer_writable: mr.is_peer_writable(),
            _mr: PhantomData,
        })
    }

    /// The last byte the pattern touches after `repeat_count` repeats,
    /// plus one; None on overflow.
    fn span_end(&self, repeat_count: u32) -> Option<u64> {
        let stride = u64::from(self.raw.bytes_count) + u64::from(self.raw.bytes_skip);
        stride
            .checked_mul(u64::from(repeat_count) - 1)?
            .checked_add(u64::from(self.raw.bytes_count))?
            .checked_add(self.raw.addr)
    }
}

/// A DMA memcpy whose lengths were checked against a QP
/// ([`QpEx::memcpy_op`]): posted with [`Wr::memcpy_op`], which checks
/// nothing more. It borrows both ranges' memory for `'m`.
#[derive(Debug, Clone, Copy)]
pub struct MemcpyOp<'m> {
    dest: SgeMut<'m>,
    src: Sge<'m>,
}

impl<'m> MemcpyOp<'m> {
    /// The destination.
    pub fn dest(&self) -> SgeMut<'m> {
        self.dest
    }

    /// The source.
    pub fn src(&self) -> Sge<'m> {
        self.src
    }
}

impl Mlx5Info {
    /// Whether the QP was created with the mlx5 builder `op`, else
    /// [`Error::Unsupported`] naming it. (A QP has mlx5 ops only with its
    /// mlx5 extension, which the provider's entries are called with: QP
    /// creation refuses them otherwise, so one test decides.)
    #[inline(always)]
    fn require(&self, op: Mlx5SendOps, name: &'static str) -> Result<()> {
        if !self.ops.contains(op) {
            return Err(Error::Unsupported {
                what: not_in_mlx5_ops(name, op),
            });
        }
        Ok(())
    }
}

impl<T: Transport> QpEx<T> {
    /// Checks a DMA memcpy of `src` to `dest` against this QP once, for
    /// [`Wr::memcpy_op`]: the QP was created with [`Mlx5SendOps::MEMCPY`],
    /// both ranges have the same length, from 1 to the device's
    /// `max_wr_memcpy_length`. (Posted on another QP, the device's own
    /// limit applies there; the lengths stay equal.)
    pub fn memcpy_op<'m>(&self, dest: SgeMut<'m>, src: Sge<'m>) -> Result<MemcpyOp<'m>> {
        self.mlx5.require(Mlx5SendOps::MEMCPY, "memcpy")?;
        check_memcpy(&dest, &src, self.mlx5.max_memcpy)?;
        Ok(MemcpyOp { dest, src })
    }
}

/// mlx5dv_wr_post(3)'s rules for a memcpy: equal lengths (the device
/// copies one length), from 1 to `max`.
#[inline(always)]
fn check_memcpy(dest: &SgeMut<'_>, src: &Sge<'_>, max: u64) -> Result<()> {
    if dest.length() != src.length() {
        return Err(Error::InvalidArgument(memcpy_uneven(
            dest.length(),
            src.length(),
        )));
    }
    let len = u64::from(dest.length());
    if len == 0 || len > max {
        return Err(Error::OutOfRange {
            what: "memcpy length",
            value: len,
            limit: memcpy_length(max),
        });
    }
    Ok(())
}

impl<'m, T: Transport> Wr<'_, 'm, T> {
    /// An mkey of another device context than the QP's is refused:
    /// libmlx5 would write its key into this device's WQE.
    #[inline]
    fn check_mkey_context(&self, mkey: &Mkey, name: &'static str) -> Result<()> {
        if mkey.context_ptr() != self.state.ctx {
            return Err(Error::InvalidArgument(format!(
                "{name}: the mkey belongs to another device context than the QP's"
            )));
        }
        Ok(())
    }

    /// Whether the QP was created with the mlx5 builder `op`; else
    /// [`Error::Unsupported`].
    #[inline(always)]
    fn mlx5_op(&self, op: Mlx5SendOps, name: &'static str) -> Result<()> {
        self.state.mlx5.require(op, name)
    }

    /// A DMA memcpy of `src` to `dest` on the device (`mlx5dv_wr_memcpy`),
    /// for RC and DCI QPs created with [`Mlx5SendOps::MEMCPY`]. Both ranges
    /// have the same length, from 1 to the device's `max_wr_memcpy_length`.
    /// Signalled, it completes with [`WcOpcode::MEMCPY`](crate::WcOpcode).
    /// On a DCI the copy is local: its WQE has no DC address, and the
    /// address (and stream) the work request was started with is not used.
    ///
    /// A later work request that depends on `dest` must be fenced
    /// ([`Wr::fence`]), as mlx5dv_wr_post(3) says. For a loop of copies
    /// prepared beforehand, [`QpEx::memcpy_op`] checks the lengths once and
    /// [`memcpy_op`](Self::memcpy_op) posts with no check left.
    #[inline(always)]
    pub fn memcpy(self, dest: SgeMut<'m>, src: Sge<'m>) -> Result<()> {
        self.mlx5_op(Mlx5SendOps::MEMCPY, "memcpy")?;
        check_memcpy(&dest, &src, self.state.mlx5.max_memcpy)?;
        self.post_memcpy(&dest, &src)
    }

    /// The DMA memcpy `op`, whose lengths [`QpEx::memcpy_op`] checked when
    /// it was made (`mlx5dv_wr_memcpy`); for QPs created with
    /// [`Mlx5SendOps::MEMCPY`].
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # fn f(qp: &mut RcQp, dst: &mut MemoryRegion, src: &MemoryRegion) -> Result<()> {
    /// // The device writes `dst`: its 64-byte pieces hold it exclusively.
    /// let pieces = dst.sge_mut(0..32 * 64)?.chunks(64)?;
    /// let ops = pieces
    ///     .enumerate()
    ///     .map(|(i, d)| qp.memcpy_op(d, src.sge(i * 64..(i + 1) * 64)?))
    ///     .collect::<Result<Vec<_>>>()?;
    /// let mut b = qp.batch_with(SendFlags::SIGNALED);
    /// for (i, op) in ops.iter().enumerate() {
    ///     b.wr(i as u64).memcpy_op(op)?;
    /// }
    /// // SAFETY: both regions stay registered and untouched until the
    /// // completions are polled.
    /// unsafe { b.complete()? };
    /// # Ok(())
    /// # }
    /// ```
    #[inline(always)]
    pub fn memcpy_op(self, op: &MemcpyOp<'m>) -> Result<()> {
        self.mlx5_op(Mlx5SendOps::MEMCPY, "memcpy")?;
        self.post_memcpy(&op.dest, &op.src)
    }

    /// Hands a checked memcpy to the provider.
    #[inline(always)]
    fn post_memcpy(self, dest: &SgeMut<'m>, src: &Sge<'m>) -> Result<()> {
        self.commit_as(
            SendFlags::empty(),
            Addressed::No,
            #[inline(always)]
            |_, ops| {
                // SAFETY: the mlx5 extension of a QP created with MEMCPY, whose
                // wr_memcpy entry was resolved non-NULL at creation; both
                // ranges have the length passed (checked equal).
                unsafe {
                    (ops.memcpy)(
                        ops.mqpx,
                        dest.lkey(),
                        dest.addr(),
                        src.lkey(),
                        src.addr(),
                        dest.length() as usize,
                    )
                }
            },
        )
    }

    /// A local invalidate of `rkey` (`ibv_wr_local_inv`): after it
    /// completes, an mkey's layout is gone and another can be registered.
    /// Needs [`SendOps::LOCAL_INV`]. On a DCI it is local: its WQE has no DC
    /// address, and the work request's address is not used.
    #[inline]
    pub fn local_inv(self, rkey: u32) -> Result<()> {
        if !self.state.send_ops.contains(SendOps::LOCAL_INV) {
            return Err(Error::Unsupported {
                what: "local invalidate: the QP was not created with LOCAL_INV in its send ops"
                    .into(),
            });
        }
        self.commit_as(
            SendFlags::empty(),
            Addressed::No,
            #[inline(always)]
            |q, ops| {
                // SAFETY: the live extended QP; wr_local_inv was resolved non-NULL
                // at creation since LOCAL_INV is in its send ops.
                unsafe { (ops.local_inv)(q, rkey) }
            },
        )
    }
}

impl<'m> Wr<'_, 'm, ReliableConnection> {
    /// Registers a list layout on `mkey` (`mlx5dv_wr_mr_list`): the mkey
    /// then covers the SGEs one after another, addressed zero-based. RC
    /// only. Sets `IBV_SEND_INLINE` itself (the man page requires it).
    /// Returns the layout it registers (the SGEs' total length), which the
    /// mkey has once this work request completes.
    ///
    /// At most the mkey's `max_entries` SGEs, and at most what the QP's WQE
    /// holds: `(max_inline_data + 4) / 16` (4 with the default 64); in all
    /// at most 2^31 - 1 bytes (libmlx5 sums the layout in an `int`).
    ///
    /// `access` may not grant `REMOTE_WRITE` or `REMOTE_ATOMIC`
    /// ([`Error::InvalidArgument`]): a peer could then write the listed
    /// memory through the mkey after the SGEs' borrows end, and an SGE does
    /// not say whether its region is one a peer may write (see the crate
    /// docs' memory model). For a remote-writable layout use
    /// [`mr_interleaved`](Self::mr_interleaved) with `bytes_skip` 0 and a
    /// repeat count of 1 over regions registered with remote write access.
    /// Signalled, it completes with [`WcOpcode::UMR`](crate::WcOpcode::UMR).
    #[inline]
    pub fn mr_list(
        self,
        mkey: &'m Mkey,
        access: AccessFlags,
        sges: &[Sge<'m>],
    ) -> Result<MkeyLayout<'m>> {
        self.mlx5_op(Mlx5SendOps::MR_LIST, "mr_list")?;
        self.check_mkey_context(mkey, "mr_list")?;
        let wqe_max = (self.state.caps().max_inline_data + INL_HDR) / ENTRY;
        check_entries(
            "mr_list entries",
            sges.len(),
            u32::from(mkey.max_entries()),
            "the mkey's max_entries",
        )?;
        check_entries("mr_list entries", sges.len(), wqe_max, WQE_LIMIT)?;
        if access.intersects(PEER_WRITES) {
            return Err(Error::InvalidArgument(list_peer_writes(access)));
        }
        let raw = Sge::as_raw_slice(sges);
        // One pass: the total, and whether an entry is empty (0 bytes in a
        // UMR translation is not "nothing" to every device: a data
        // segment's 0 means 2 GiB).
        let (total, empty) = raw.iter().fold((0u64, false), |(t, e), s| {
            (t + u64::from(s.length), e | (s.length == 0))
        });
        if empty {
            return Err(Error::OutOfRange {
                what: "mr_list SGE length",
                value: 0,
                limit: "at least 1".into(),
            });
        }
        check_layout_len(total)?;
        self.commit(
            SendFlags::INLINE,
            #[inline(always)]
            |_, ops| {
                // SAFETY: the mlx5 extension of an RC QP created with MR_LIST,
                // whose wr_mr_list entry was checked non-NULL; the mkey and the
                // SGE array are valid for the call (the provider copies them
                // into the WQE); the count fits u16 (checked above).
                unsafe {
                    (ops.mr_list)(
                        ops.mqpx,
                        mkey.as_ptr(),
                        access.bits(),
                        raw.len() as u16,
                        raw.as_ptr() as *mut ffi::ibv_sge,
                    )
                }
            },
        )?;
        Ok(MkeyLayout::new(mkey, total))
    }

    /// Registers an interleaved layout on `mkey`
    /// (`mlx5dv_wr_mr_interleaved`): the entries' data, one after another,
    /// repeated `repeat_count` times, addressed zero-based. RC only. Sets
    /// `IBV_SEND_INLINE` itself. Returns the layout it registers, which the
    /// mkey has once this work request completes.
    ///
    /// The mkey needs one more entry than `entries.len()` (one holds the
    /// repeat header), and the QP's WQE must hold them:
    /// `(max_inline_data + 4) / 16 - 1` entries (3 with the default 64).
    /// Every repeat of every entry must stay inside its region; the layout
    /// is at most 2^31 - 1 bytes. With `REMOTE_WRITE` or `REMOTE_ATOMIC` in
    /// `access`, every entry's region must itself be registered with remote
    /// write or atomic access (so that it is already memory a peer may
    /// write, never handed out as a plain slice); otherwise
    /// [`Error::InvalidArgument`].
    /// Signalled, it completes with [`WcOpcode::UMR`](crate::WcOpcode::UMR).
    pub fn mr_interleaved(
        self,
        mkey: &'m Mkey,
        access: AccessFlags,
        repeat_count: u32,
        entries: &[MrInterleaved<'m>],
    ) -> Result<MkeyLayout<'m>> {
        self.mlx5_op(Mlx5SendOps::MR_INTERLEAVED, "mr_interleaved")?;
        self.check_mkey_context(mkey, "mr_interleaved")?;
        let mkey_max = u32::from(mkey.max_entries()).saturating_sub(1);
        let wqe_max = ((self.state.caps().max_inline_data + INL_HDR) / ENTRY).saturating_sub(1);
        check_entries(
            "num_interleaved",
            entries.len(),
            mkey_max,
            "the mkey's max_entries - 1 (one entry holds the repeat header)",
        )?;
        check_entries("num_interleaved", entries.len(), wqe_max, WQE_LIMIT)?;
        if repeat_count == 0 {
            return Err(Error::OutOfRange {
                what: "repeat_count",
                value: 0,
                limit: "at least 1".into(),
            });
        }
        let mut per_repeat = 0u64;
        let peer_writes = access.intersects(PEER_WRITES);
        for e in entries {
            if peer_writes && !e.peer_writable {
                return Err(Error::InvalidArgument(interleaved_peer_writes(access)));
            }
            // The WQE's repeat entry holds the stride (and so the count) in
            // 16 bits: libmlx5 would truncate a larger one, and the device
            // would map other bytes than the layout says.
            let stride = u64::from(e.raw.bytes_count) + u64::from(e.raw.bytes_skip);
            if stride > u64::from(u16::MAX) {
                return Err(Error::OutOfRange {
                    what: "interleaved entry stride",
                    value: stride,
                    limit: "at most 65535 (bytes_count + bytes_skip: a 16-bit field of the \
                            WQE's repeat entry)"
                        .into(),
                });
            }
            match e.span_end(repeat_count) {
                Some(end) if end <= e.region_end => {}
                end => {
                    return Err(Error::OutOfRange {
                        what: "interleaved pattern end",
                        value: end.unwrap_or(u64::MAX),
                        limit: format!("at most {:#x} (its memory region's end)", e.region_end),
                    })
                }
            }
            per_repeat += u64::from(e.raw.bytes_count);
        }
        let total = per_repeat.saturating_mul(u64::from(repeat_count));
        check_layout_len(total)?;
        // The C array, on the stack for the usual sizes; filled once.
        let mut stack = [ffi::mlx5dv_mr_interleaved::default(); 16];
        let mut heap = Vec::new();
        let raw: &mut [ffi::mlx5dv_mr_interleaved] = if entries.len() <= stack.len() {
            &mut stack[..entries.len()]
        } else {
            heap.resize(entries.len(), ffi::mlx5dv_mr_interleaved::default());
            &mut heap
        };
        for (r, e) in raw.iter_mut().zip(entries) {
            *r = e.raw;
        }
        self.commit(
            SendFlags::INLINE,
            #[inline(always)]
            |_, ops| {
                // SAFETY: the mlx5 extension of an RC QP created with
                // MR_INTERLEAVED, whose entry was checked non-NULL; the mkey and
                // the array are valid for the call (copied into the WQE); the
                // count fits u16 (checked above).
                unsafe {
                    (ops.mr_interleaved)(
                        ops.mqpx,
                        mkey.as_ptr(),
                        access.bits(),
                        repeat_count,
                        raw.len() as u16,
                        raw.as_mut_ptr(),
                    )
                }
            },
        )?;
        Ok(MkeyLayout::new(mkey, total))
    }

    /// Posts a raw WQE built by the caller (`mlx5dv_wr_raw_wqe`), for a QP
    /// created with [`Mlx5SendOps::RAW_WQE`]. The driver sets the WQE index
    /// and signature; the flags of this [`Wr`] are ignored (the WQE's own
    /// control segment has them); its completion, whatever the opcode, is
    /// [`WcOpcode::RAW_WQE`](crate::WcOpcode::RAW_WQE).
    ///
    /// # Safety
    ///
    /// The device executes the WQE as written: every key and address in it
    /// must name registered memory that follows the rules of
    /// [`WrBatch::complete`](crate::WrBatch::complete), and its opcode and
    /// segments must be valid for this QP.
    #[inline]
    pub unsafe fn raw_wqe(self, wqe: &Wqe) -> Result<()> {
        self.mlx5_op(Mlx5SendOps::RAW_WQE, "raw_wqe")?;
        // The provider copies the WQE whole and advances the send queue by
        // its 64-byte blocks without checking them against the QP's WQE
        // size: a larger WQE would overwrite the next ones.
        // In 16-byte units (4 to a block): the WQE's own count, compared
        // as it is.
        let blocks = self.state.mlx5.wqe_blocks;
        if u32::from(wqe.ds()) > blocks * 4 {
            // Made out of line whole: its blocks are counted only there.
            return Err(wqe_too_big(wqe, blocks));
        }
        self.commit(
            SendFlags::empty(),
            #[inline(always)]
            |_, ops| {
                // SAFETY: the mlx5 extension of a QP created with RAW_WQE, whose
                // entry was checked non-NULL; the WQE's bytes are valid for the
                // call and as long as its DS count says (Wqe keeps them in step);
                // what it asks of the device is the caller's promise.
                unsafe { (ops.raw_wqe)(ops.mqpx, wqe.as_ptr()) }
            },
        )
    }
}

const WQE_LIMIT: &str = "what the QP's WQE holds: create it with a larger max_inline_data";

#[inline(always)]
fn check_entries(what: &'static str, n: usize, max: u32, why: &'static str) -> Result<()> {
    if n == 0 || n > max as usize {
        return Err(Error::OutOfRange {
            what,
            value: n as u64,
            limit: entries_out_of_range(max, why),
        });
    }
    Ok(())
}

// The errors' text, made out of line so that each check in the caller's
// loop stays one compare; the variant is built at the check.

#[cold]
#[inline(never)]
fn entries_out_of_range(max: u32, why: &str) -> String {
    format!("1 to {max} ({why})")
}

#[cold]
#[inline(never)]
fn not_in_mlx5_ops(name: &str, op: Mlx5SendOps) -> String {
    format!("{name}: the QP was not created with {op:?} in its mlx5 send ops")
}

// The access that lets a peer write through an mkey (remote write and
// atomic access, and MW_BIND: a window bound through the mkey may grant
// either), the same bits MemoryRegion::is_peer_writable counts.
use crate::mr::PEER_WRITES;

/// An mkey layout is at most 2^31 - 1 bytes: rdma-core sums its entries in
/// an `int`.
#[inline(always)]
fn check_layout_len(total: u64) -> Result<()> {
    if total > i32::MAX as u64 {
        return Err(Error::OutOfRange {
            what: "mkey layout length",
            value: total,
            limit: layout_too_long(),
        });
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn layout_too_long() -> String {
    format!(
        "at most {} (2^31 - 1: libmlx5 sums the layout's length in an int)",
        i32::MAX
    )
}

#[cold]
#[inline(never)]
fn list_peer_writes(access: AccessFlags) -> String {
    format!(
        "mr_list with {:?}: a peer could write the listed memory through the mkey after \
         its borrow ends, and an SGE does not say whether its region allows that; use \
         mr_interleaved (one entry per piece, bytes_skip 0, repeat 1) over regions \
         registered with that access",
        access & PEER_WRITES
    )
}

#[cold]
#[inline(never)]
fn interleaved_peer_writes(access: AccessFlags) -> String {
    format!(
        "mr_interleaved with {:?}: every entry's region must itself be registered with \
         remote write, atomic or memory-window access (a region that is not hands out plain slices, \
         which a peer writing through the mkey would change under them)",
        access & PEER_WRITES
    )
}

#[cold]
#[inline(never)]
fn memcpy_uneven(dest: u32, src: u32) -> String {
    format!("memcpy: destination is {dest} bytes, source {src} bytes")
}

#[cold]
#[inline(never)]
fn memcpy_length(max: u64) -> String {
    format!("1 to {max} (the device's max_wr_memcpy_length)")
}

#[cold]
#[inline(never)]
fn wqe_too_big(wqe: &Wqe, max: u32) -> Error {
    Error::OutOfRange {
        what: "raw WQE size in 64-byte blocks",
        value: u64::from(wqe.basic_blocks()),
        limit: format!(
            "at most {max} (the QP's WQE size: create it with a larger \
             max_inline_data or max_send_sge)"
        ),
    }
}
