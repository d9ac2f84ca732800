//! Scatter/gather entries: what a work request names local memory with.
//!
//! [`Sge`] is memory the device reads (a send or write source), shared
//! borrowed; [`SgeMut`] is memory the device writes (an RDMA read, atomic
//! or memcpy destination), exclusively borrowed. Both have the layout of
//! `struct ibv_sge`.

use super::region::MemoryRegion;
use crate::error::{Error, Result};
use crate::ffi;
use std::fmt;
use std::marker::PhantomData;
use std::ops::RangeBounds;

/// The longest SGE: 2^31 - 1 bytes.
///
/// mlx5 writes an SGE's length into the byte count of a WQE data segment,
/// whose bit 31 the device reads as the inline flag (`MLX5_INLINE_SEG`), so
/// a longer one would be taken for inline data; and no RDMA message is
/// longer than 2^31 bytes (the InfiniBand DMA length limit).
pub(crate) const MAX_SGE_LENGTH: u32 = (1 << 31) - 1;

/// `len` as an SGE's length, refused when it is 2^31 or more
/// ([`MAX_SGE_LENGTH`]).
#[inline]
pub(crate) fn sge_length(len: usize) -> Result<u32> {
    if len > MAX_SGE_LENGTH as usize {
        return Err(Error::OutOfRange {
            what: "SGE length",
            value: len as u64,
            limit: sge_too_long(),
        });
    }
    Ok(len as u32)
}

#[cold]
#[inline(never)]
fn sge_too_long() -> String {
    format!(
        "at most 2^31 - 1 = {MAX_SGE_LENGTH}: mlx5 reads bit 31 of a data \
         segment's byte count as its inline flag, and no RDMA message is \
         longer than 2^31 bytes"
    )
}

/// An entry for `len` bytes at `offset` of `mr`, after checking the length.
/// The caller has checked the range against the region.
#[inline]
fn raw_sge(mr: &MemoryRegion, offset: usize, len: usize) -> Result<ffi::ibv_sge> {
    Ok(ffi::ibv_sge {
        addr: mr.addr() + offset as u64,
        length: sge_length(len)?,
        lkey: mr.lkey(),
    })
}

impl MemoryRegion {
    /// A scatter/gather entry for `range` of this region, as the source of
    /// a work request (memory the device reads): its address, length and
    /// lkey, borrowing the region shared. The range must lie inside the
    /// region and be shorter than 2^31 bytes: mlx5 reads bit 31 of a data
    /// segment's byte count as its inline flag, and no RDMA message is
    /// longer than 2^31.
    ///
    /// Inlined, so that in a loop each check is a compare: with a range
    /// of constant length (`at..at + 64`) the length checks fold away and
    /// what is left is the compare of its end with the region's length.
    #[inline]
    pub fn sge(&self, range: impl RangeBounds<usize>) -> Result<Sge<'_>> {
        let (offset, len) = self.check_range(range)?;
        Sge::of(self, offset, len)
    }

    /// A scatter/gather entry for `range` of this region, as the
    /// destination of a work request (memory the device writes: an RDMA
    /// read, an atomic, a memcpy), borrowing the region exclusively for as
    /// long as the entry or a piece of it ([`SgeMut::split_at`],
    /// [`SgeMut::chunks`]) is used. The range is checked as for
    /// [`sge`](Self::sge). The device can write only a region registered
    /// with [`AccessFlags::LOCAL_WRITE`](crate::AccessFlags::LOCAL_WRITE):
    /// into another, the work request completes with
    /// [`WcStatus::LOC_PROT_ERR`](crate::WcStatus::LOC_PROT_ERR) and its QP
    /// goes to ERR, as in C.
    ///
    /// Nothing here may read the memory while the device may be writing it:
    ///
    /// ```compile_fail,E0502
    /// # use mlx5dv::*;
    /// # fn f(mr: &mut MemoryRegion) -> Result<()> {
    /// let dst = mr.sge_mut(0..8)?;
    /// let early = mr.as_slice()?; // ERROR: `dst` still borrows `mr` exclusively
    /// println!("{:?} {:?}", dst.length(), early);
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn sge_mut(&mut self, range: impl RangeBounds<usize>) -> Result<SgeMut<'_>> {
        let (offset, len) = self.check_range(range)?;
        SgeMut::of(self, offset, len)
    }
}

/// The accessors both entry types have: address, length and local key.
macro_rules! sge_fields {
    () => {
        /// Start address.
        #[inline]
        pub fn addr(&self) -> u64 {
            self.raw.addr
        }

        /// Length in bytes.
        #[inline]
        pub fn length(&self) -> u32 {
            self.raw.length
        }

        /// The region's local key.
        #[inline]
        pub fn lkey(&self) -> u32 {
            self.raw.lkey
        }
    };
}

/// A scatter/gather entry (`struct ibv_sge`) of memory the device READS:
/// `length` bytes at `addr` of the region whose local key is `lkey`,
/// borrowed from that region for `'m`.
///
/// Made by [`MemoryRegion::sge`], which checks the range; the shared borrow
/// keeps the region alive and unchanged (by this program) while a scoped
/// post uses it. It is the source of a send or RDMA write; memory the device
/// writes is an [`SgeMut`]. Same layout as `struct ibv_sge`, so a slice of
/// them is handed to C as is.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Sge<'m> {
    raw: ffi::ibv_sge,
    _mr: PhantomData<&'m MemoryRegion>,
}

impl<'m> Sge<'m> {
    /// The entry for `len` bytes at `offset` of `mr` (range already checked).
    #[inline]
    pub(super) fn of(mr: &'m MemoryRegion, offset: usize, len: usize) -> Result<Self> {
        Ok(Sge::from_raw(raw_sge(mr, offset, len)?))
    }
}

impl Sge<'_> {
    sge_fields!();

    /// An entry from raw parts (zero-based mkey entries).
    #[inline]
    pub(crate) fn from_raw(raw: ffi::ibv_sge) -> Self {
        Sge {
            raw,
            _mr: PhantomData,
        }
    }

    /// The entry as C sees it.
    #[inline(always)]
    pub(crate) fn as_raw(&self) -> &ffi::ibv_sge {
        &self.raw
    }

    /// The entries as C sees them.
    pub(crate) fn as_raw_slice<'a>(sges: &'a [Sge<'_>]) -> &'a [ffi::ibv_sge] {
        // SAFETY: Sge is repr(transparent) over ibv_sge.
        unsafe { std::slice::from_raw_parts(sges.as_ptr().cast(), sges.len()) }
    }
}

impl<'m> Sge<'m> {
    /// The entry as one known to hold at least one byte, or `None` when
    /// it is empty.
    ///
    /// A writer of the direct path that is given a [`NonEmptySge`] makes
    /// no test for an empty entry (mlx5 reads a data segment's byte count
    /// of 0 as 2^31, so an empty entry must be written as no segment):
    /// made once where a loop's entries are made, as C knows its entries'
    /// lengths, it takes that test out of the loop.
    ///
    /// ```
    /// # fn f(mr: &mlx5dv::MemoryRegion) -> mlx5dv::Result<()> {
    /// use std::borrow::Borrow;
    /// let entry = mr.sge(0..64)?;
    /// let known = entry.non_empty().expect("64 bytes");
    /// assert_eq!(known.sge(), entry);
    /// let borrowed: &mlx5dv::Sge<'_> = known.borrow();
    /// assert_eq!(borrowed, &entry);
    /// assert!(mr.sge(0..0)?.non_empty().is_none());
    /// # Ok(()) }
    /// ```
    #[inline]
    pub fn non_empty(self) -> Option<NonEmptySge<'m>> {
        (self.raw.length != 0).then_some(NonEmptySge(self))
    }
}

/// An [`Sge`] of at least one byte ([`Sge::non_empty`]): the same entry,
/// the same shared borrow of its region for `'m`. It is also taken where
/// an [`Sge`] is borrowed (`Borrow<Sge>`, as by
/// [`wr::Op::sge`](crate::wr::Op::sge)).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(transparent)]
pub struct NonEmptySge<'m>(Sge<'m>);

impl<'m> NonEmptySge<'m> {
    /// The entry as a plain [`Sge`].
    #[inline]
    pub fn sge(self) -> Sge<'m> {
        self.0
    }

    /// Start address.
    #[inline]
    pub fn addr(&self) -> u64 {
        self.0.addr()
    }

    /// Length in bytes, at least 1.
    #[inline]
    pub fn length(&self) -> u32 {
        self.0.length()
    }

    /// The region's local key.
    #[inline]
    pub fn lkey(&self) -> u32 {
        self.0.lkey()
    }

    /// The entry as C sees it.
    #[inline(always)]
    pub(crate) fn as_raw(&self) -> &ffi::ibv_sge {
        self.0.as_raw()
    }
}

impl<'m> std::borrow::Borrow<Sge<'m>> for NonEmptySge<'m> {
    #[inline]
    fn borrow(&self) -> &Sge<'m> {
        &self.0
    }
}

impl<'m> From<NonEmptySge<'m>> for Sge<'m> {
    #[inline]
    fn from(e: NonEmptySge<'m>) -> Sge<'m> {
        e.0
    }
}

impl fmt::Debug for NonEmptySge<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("NonEmptySge").field(&self.0).finish()
    }
}

/// A scatter/gather entry (`struct ibv_sge`) of memory the device WRITES:
/// the destination of an RDMA read, an atomic or a memcpy. It holds its
/// region EXCLUSIVELY borrowed for `'m`, so nothing in this program can
/// read or write the memory (not even through
/// [`MemoryRegion::read_at`]) until the entry, and every copy of it, is
/// gone: in the scoped post, until the completion has arrived.
///
/// Made by [`MemoryRegion::sge_mut`], which checks the range. It is `Copy`
/// so that one region can feed many destinations ([`SgeMut::chunks`],
/// [`SgeMut::split_at`]): the copies share the one exclusive loan. Same
/// layout as `struct ibv_sge`.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct SgeMut<'m> {
    raw: ffi::ibv_sge,
    _mr: PhantomData<&'m mut MemoryRegion>,
}

impl<'m> SgeMut<'m> {
    /// The entry for `len` bytes at `offset` of `mr` (range already checked).
    #[inline]
    pub(super) fn of(mr: &'m mut MemoryRegion, offset: usize, len: usize) -> Result<Self> {
        Ok(SgeMut {
            raw: raw_sge(mr, offset, len)?,
            _mr: PhantomData,
        })
    }

    /// An entry from raw parts, for the host tests of the rings.
    #[cfg(test)]
    pub(crate) fn from_raw(raw: ffi::ibv_sge) -> Self {
        SgeMut {
            raw,
            _mr: PhantomData,
        }
    }

    /// A part of this entry: `length` bytes at `offset` of it, both inside it.
    #[inline]
    fn part(self, offset: u32, length: u32) -> SgeMut<'m> {
        debug_assert!(u64::from(offset) + u64::from(length) <= u64::from(self.raw.length));
        SgeMut {
            raw: ffi::ibv_sge {
                addr: self.raw.addr + u64::from(offset),
                length,
                lkey: self.raw.lkey,
            },
            _mr: PhantomData,
        }
    }

    sge_fields!();

    /// The first `mid` bytes and the rest, both still exclusively borrowing
    /// the region. `mid` may be 0 or the length (one side is then empty);
    /// beyond the length it is refused.
    #[inline]
    pub fn split_at(self, mid: u32) -> Result<(SgeMut<'m>, SgeMut<'m>)> {
        let length = self.raw.length;
        if mid > length {
            return Err(Error::OutOfRange {
                what: "SGE split point",
                value: mid.into(),
                limit: at_most_sge_len(length),
            });
        }
        Ok((self.part(0, mid), self.part(mid, length - mid)))
    }

    /// The entry cut into consecutive entries of `chunk_len` bytes, the last
    /// one shorter when `chunk_len` does not divide the length (an empty
    /// entry gives none). It is how a loop posts many destinations in one
    /// region, each a piece of one exclusive borrow:
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # fn f(dst: &mut MemoryRegion) -> Result<()> {
    /// let start = dst.addr();
    /// let slots: Vec<_> = dst.sge_mut(0..64 * 1024)?.chunks(4096)?.collect();
    /// assert_eq!((slots.len(), slots[1].addr()), (16, start + 4096));
    /// # Ok(()) }
    /// ```
    ///
    /// A `chunk_len` of 0 is refused.
    #[inline]
    pub fn chunks(self, chunk_len: u32) -> Result<impl ExactSizeIterator<Item = SgeMut<'m>>> {
        if chunk_len == 0 {
            return Err(Error::OutOfRange {
                what: "SGE chunk length",
                value: 0,
                limit: "at least 1 byte".into(),
            });
        }
        let length = self.raw.length;
        Ok((0..length.div_ceil(chunk_len)).map(move |i| {
            let offset = i * chunk_len;
            self.part(offset, chunk_len.min(length - offset))
        }))
    }

    /// The same memory as a source: an entry the device reads, borrowing
    /// the region for the rest of `'m`.
    #[inline]
    pub fn into_sge(self) -> Sge<'m> {
        Sge::from_raw(*self.as_raw())
    }

    /// The entry as C sees it.
    #[inline]
    pub(crate) fn as_raw(&self) -> &ffi::ibv_sge {
        &self.raw
    }

    /// The entries as C sees them.
    pub(crate) fn as_raw_slice<'a>(sges: &'a [SgeMut<'_>]) -> &'a [ffi::ibv_sge] {
        // SAFETY: SgeMut is repr(transparent) over ibv_sge.
        unsafe { std::slice::from_raw_parts(sges.as_ptr().cast(), sges.len()) }
    }
}

#[cold]
#[inline(never)]
fn at_most_sge_len(length: u32) -> String {
    format!("at most {length} (the SGE's length)")
}

impl<'m> From<SgeMut<'m>> for Sge<'m> {
    #[inline]
    fn from(sge: SgeMut<'m>) -> Sge<'m> {
        sge.into_sge()
    }
}

/// A receive work request over `sges` (`struct ibv_recv_wr`), after checking
/// their count against the queue's `max_sge` (`whose` names the queue).
/// The returned value points into `sges`.
pub(crate) fn recv_wr(
    wr_id: u64,
    sges: &[Sge<'_>],
    max_sge: u32,
    whose: &str,
) -> Result<ffi::ibv_recv_wr> {
    if sges.len() > max_sge as usize {
        return Err(Error::OutOfRange {
            what: "receive SGE count",
            value: sges.len() as u64,
            limit: format!("at most {max_sge} ({whose})"),
        });
    }
    Ok(ffi::ibv_recv_wr {
        wr_id,
        next: std::ptr::null_mut(),
        sg_list: Sge::as_raw_slice(sges).as_ptr() as *mut ffi::ibv_sge,
        num_sge: sges.len() as i32,
    })
}

fn fmt_raw(name: &str, raw: &ffi::ibv_sge, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    f.debug_struct(name)
        .field("addr", &format_args!("{:#x}", raw.addr))
        .field("length", &raw.length)
        .field("lkey", &format_args!("{:#x}", raw.lkey))
        .finish()
}

fn raw_eq(a: &ffi::ibv_sge, b: &ffi::ibv_sge) -> bool {
    (a.addr, a.length, a.lkey) == (b.addr, b.length, b.lkey)
}

impl fmt::Debug for Sge<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_raw("Sge", &self.raw, f)
    }
}

impl fmt::Debug for SgeMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_raw("SgeMut", &self.raw, f)
    }
}

impl PartialEq for Sge<'_> {
    fn eq(&self, other: &Self) -> bool {
        raw_eq(&self.raw, &other.raw)
    }
}

impl Eq for Sge<'_> {}

impl PartialEq for SgeMut<'_> {
    fn eq(&self, other: &Self) -> bool {
        raw_eq(&self.raw, &other.raw)
    }
}

impl Eq for SgeMut<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge_mut(addr: u64, length: u32) -> SgeMut<'static> {
        SgeMut {
            raw: ffi::ibv_sge {
                addr,
                length,
                lkey: 0x77,
            },
            _mr: PhantomData,
        }
    }

    fn parts(sges: &[SgeMut<'_>]) -> Vec<(u64, u32, u32)> {
        sges.iter()
            .map(|s| (s.addr(), s.length(), s.lkey()))
            .collect()
    }

    #[test]
    fn sge_and_sge_mut_have_the_layout_of_ibv_sge() {
        use std::mem::{align_of, size_of};
        assert_eq!(size_of::<Sge<'_>>(), size_of::<ffi::ibv_sge>());
        assert_eq!(align_of::<Sge<'_>>(), align_of::<ffi::ibv_sge>());
        assert_eq!(size_of::<SgeMut<'_>>(), size_of::<ffi::ibv_sge>());
        assert_eq!(align_of::<SgeMut<'_>>(), align_of::<ffi::ibv_sge>());
        let sges = [sge_mut(0x1000, 8), sge_mut(0x2000, 16)];
        let raw = SgeMut::as_raw_slice(&sges);
        assert_eq!(raw.len(), 2);
        assert_eq!(
            (raw[1].addr, raw[1].length, raw[1].lkey),
            (0x2000, 16, 0x77)
        );
        assert!(std::ptr::eq(sges[0].as_raw(), &raw[0]));
    }

    #[test]
    fn sge_lengths_stop_below_2_pow_31() {
        assert_eq!(sge_length(0).unwrap(), 0);
        assert_eq!(sge_length((1 << 31) - 1).unwrap(), MAX_SGE_LENGTH);
        for len in [1usize << 31, u32::MAX as usize, 1 << 32, usize::MAX] {
            let e = sge_length(len).unwrap_err();
            assert!(
                matches!(e, Error::OutOfRange { what: "SGE length", value, .. } if value == len as u64),
                "{e}"
            );
            assert!(e.to_string().contains("inline flag"), "{e}");
        }
    }

    #[test]
    fn split_at_keeps_both_parts_inside_the_entry() {
        let s = sge_mut(0x1000, 100);
        let (a, b) = s.split_at(40).unwrap();
        assert_eq!(parts(&[a, b]), [(0x1000, 40, 0x77), (0x1028, 60, 0x77)]);
        let (a, b) = s.split_at(0).unwrap();
        assert_eq!(parts(&[a, b]), [(0x1000, 0, 0x77), (0x1000, 100, 0x77)]);
        let (a, b) = s.split_at(100).unwrap();
        assert_eq!(parts(&[a, b]), [(0x1000, 100, 0x77), (0x1064, 0, 0x77)]);
        assert!(matches!(
            s.split_at(101),
            Err(Error::OutOfRange {
                what: "SGE split point",
                value: 101,
                ..
            })
        ));
        assert!(s.split_at(u32::MAX).is_err());
        let max = sge_mut(0, MAX_SGE_LENGTH);
        let (a, b) = max.split_at(MAX_SGE_LENGTH).unwrap();
        assert_eq!(
            (a.length(), b.length(), b.addr()),
            (MAX_SGE_LENGTH, 0, MAX_SGE_LENGTH.into())
        );
    }

    #[test]
    fn chunks_cover_the_entry_with_a_shorter_last_one() {
        let s = sge_mut(0x1000, 10);
        let c: Vec<_> = s.chunks(4).unwrap().collect();
        assert_eq!(
            parts(&c),
            [(0x1000, 4, 0x77), (0x1004, 4, 0x77), (0x1008, 2, 0x77)]
        );
        assert_eq!(s.chunks(4).unwrap().len(), 3);
        let c: Vec<_> = s.chunks(5).unwrap().collect();
        assert_eq!(parts(&c), [(0x1000, 5, 0x77), (0x1005, 5, 0x77)]);
        let c: Vec<_> = s.chunks(10).unwrap().collect();
        assert_eq!(parts(&c), [(0x1000, 10, 0x77)]);
        let c: Vec<_> = s.chunks(u32::MAX).unwrap().collect();
        assert_eq!(parts(&c), [(0x1000, 10, 0x77)]);
        let c: Vec<_> = s.chunks(1).unwrap().collect();
        assert_eq!(c.len(), 10);
        assert_eq!(parts(&c[9..]), [(0x1009, 1, 0x77)]);
        assert_eq!(sge_mut(0x1000, 0).chunks(4).unwrap().count(), 0);
        assert!(matches!(
            s.chunks(0),
            Err(Error::OutOfRange {
                what: "SGE chunk length",
                value: 0,
                ..
            })
        ));
        // The longest entry, in chunks that do not divide it: no overflow,
        // and the chunks end exactly where the entry does.
        let max = sge_mut(0x1000, MAX_SGE_LENGTH);
        let last = max.chunks(1 << 30).unwrap().last().unwrap();
        assert_eq!(
            (last.addr(), last.length()),
            (0x1000 + (1 << 30), (1 << 30) - 1)
        );
        assert_eq!(
            max.chunks(1 << 30)
                .unwrap()
                .map(|c| u64::from(c.length()))
                .sum::<u64>(),
            MAX_SGE_LENGTH.into()
        );
    }

    #[test]
    fn an_sge_mut_becomes_an_sge_of_the_same_memory() {
        let s = sge_mut(0x1000, 10);
        let r: Sge<'_> = s.into();
        assert_eq!((r.addr(), r.length(), r.lkey()), (0x1000, 10, 0x77));
        assert_eq!(r, s.into_sge());
        assert_eq!(
            format!("{s:?}"),
            "SgeMut { addr: 0x1000, length: 10, lkey: 0x77 }"
        );
        assert_eq!(
            format!("{r:?}"),
            "Sge { addr: 0x1000, length: 10, lkey: 0x77 }"
        );
    }
}
