//! Reading and writing a region's memory from this program: plain slices
//! where no peer may write it, volatile copies everywhere (see "Who may
//! touch the memory, and when" on [`MemoryRegion`]).

#[cfg(doc)]
use super::AccessFlags;
use super::{range_within, volatile, MemoryRegion};
use crate::error::{Error, Result};
use std::ops::RangeBounds;

impl MemoryRegion {
    /// Whether a remote peer may write the memory: the region was registered
    /// with [`REMOTE_WRITE`](AccessFlags::REMOTE_WRITE),
    /// [`REMOTE_ATOMIC`](AccessFlags::REMOTE_ATOMIC) or
    /// [`MW_BIND`](AccessFlags::MW_BIND) (a memory window bound to it may
    /// grant either), now or at any time since it was registered (a
    /// re-registration that takes the access away does not end it: an mkey
    /// layout or a window made while it was granted may still reach the
    /// memory). Such memory is reached only by copying
    /// ([`read_at`](Self::read_at), [`write_at`](Self::write_at), ...).
    pub fn is_peer_writable(&self) -> bool {
        self.peer_granted
    }

    /// Refuses `what` (a plain slice of the memory) when a peer may write it.
    fn check_not_peer_writable(&self, what: &str) -> Result<()> {
        if self.is_peer_writable() {
            return Err(Error::PeerWritable {
                what: format!(
                    "{what} of a {}-byte region with access {:?} on {}",
                    self.len,
                    self.access,
                    self.pd.context().name()
                ),
            });
        }
        Ok(())
    }

    /// The memory, as a plain slice; [`Error::PeerWritable`] for a region a
    /// remote peer may write ([`is_peer_writable`](Self::is_peer_writable)),
    /// which is read with [`read_at`](Self::read_at) or
    /// [`to_vec`](Self::to_vec) instead.
    pub fn as_slice(&self) -> Result<&[u8]> {
        self.check_not_peer_writable("as_slice")?;
        // SAFETY: `addr..addr + len` is valid for the region's life; no peer
        // may write it (checked above), the device writes it only through an
        // `SgeMut` (which borrows `self` exclusively) or an `unsafe` post,
        // and writers here need `&mut self`.
        Ok(unsafe { std::slice::from_raw_parts(self.addr.as_ptr(), self.len) })
    }

    /// The memory, as a plain writable slice; [`Error::PeerWritable`] for a
    /// region a remote peer may write, which is written with
    /// [`write_at`](Self::write_at) or [`fill`](Self::fill) instead.
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        self.check_not_peer_writable("as_mut_slice")?;
        // SAFETY: as above, and `&mut self` makes this the only reference.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.addr.as_ptr(), self.len) })
    }

    /// Copies `buf.len()` bytes at `offset` of the region into `buf`, with
    /// volatile reads; the range must lie inside the region. Works on every
    /// region; on one a peer is writing, the copy may mix old and new bytes.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        span_within(self.len, offset, buf.len())?;
        // SAFETY: the span lies inside the region's memory, valid for reads
        // for its life; `buf` is not that memory (plain references to it
        // need `as_slice`/`as_mut_slice`, and `buf` would be one borrowed
        // mutably alongside `&self`).
        unsafe { volatile::copy_out(self.addr.as_ptr().add(offset), buf) };
        Ok(())
    }

    /// The bytes of `range` of the region, copied out with volatile reads
    /// (see [`read_at`](Self::read_at)).
    pub fn to_vec(&self, range: impl RangeBounds<usize>) -> Result<Vec<u8>> {
        let (offset, len) = self.check_range(range)?;
        let mut v = vec![0; len];
        self.read_at(offset, &mut v)?;
        Ok(v)
    }

    /// Copies `data` to `offset` of the region, with volatile writes; the
    /// range must lie inside the region. Works on every region.
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        span_within(self.len, offset, data.len())?;
        // SAFETY: the span lies inside the region's memory, valid for writes
        // for its life; `&mut self` excludes the device's writes through an
        // `SgeMut` and every plain slice of it, so `data` is not that memory.
        unsafe { volatile::copy_in(self.addr.as_ptr().add(offset), data) };
        Ok(())
    }

    /// Sets every byte of `range` of the region to `byte`, with volatile
    /// writes. Works on every region.
    pub fn fill(&mut self, range: impl RangeBounds<usize>, byte: u8) -> Result<()> {
        let (offset, len) = self.check_range(range)?;
        // SAFETY: the range lies inside the region's memory, valid for
        // writes for its life.
        unsafe { volatile::fill(self.addr.as_ptr().add(offset), len, byte) };
        Ok(())
    }
}

/// Checks that `count` bytes at `offset` lie within `0..len`.
fn span_within(len: usize, offset: usize, count: usize) -> Result<()> {
    let end = offset.checked_add(count).ok_or_else(|| Error::OutOfRange {
        what: "range end",
        value: (offset as u64).saturating_add(count as u64),
        limit: format!("at most {len} (the memory region's length)"),
    })?;
    range_within(len, offset..end).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_are_checked_without_overflow() {
        assert!(span_within(4096, 0, 4096).is_ok());
        assert!(span_within(4096, 4096, 0).is_ok());
        assert!(span_within(4096, 4000, 96).is_ok());
        assert!(matches!(
            span_within(4096, 4000, 97),
            Err(Error::OutOfRange {
                what: "range end",
                value: 4097,
                ..
            })
        ));
        assert!(matches!(
            span_within(4096, 4097, 0),
            Err(Error::OutOfRange { .. })
        ));
        assert!(matches!(
            span_within(4096, usize::MAX, 2),
            Err(Error::OutOfRange {
                what: "range end",
                ..
            })
        ));
    }
}
