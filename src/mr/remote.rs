//! A peer's memory ([`RemoteBuf`]): its address, length and rkey, and
//! the checked slices of it that RDMA reads, writes and atomics target.

use crate::error::{Error, Result};

/// A peer's memory: what an RDMA read, write or atomic targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteBuf {
    /// Remote address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// The remote region's rkey.
    pub rkey: u32,
}

impl RemoteBuf {
    /// The peer's memory at `addr` under `rkey`, of a length not known
    /// here (`len` is `u64::MAX`): work requests to it are not checked
    /// against a length on this side, as in C. The responder's device
    /// checks every access against the bounds and rights of its region and
    /// fails the work request with a remote access error
    /// ([`WcStatus::REM_ACCESS_ERR`](crate::WcStatus)) when it falls
    /// outside.
    ///
    /// It is what a loop of writes to one peer region uses to pass the
    /// rkey once and each address as C passes it, with no per-request
    /// length check:
    ///
    /// ```no_run
    /// # use mlx5dv::*;
    /// # fn f(qp: &mut RcQp, sges: &[Sge<'_>], rkey: u32, raddr: &[u64]) -> Result<()> {
    /// let mut b = qp.batch_with(SendFlags::SIGNALED);
    /// for (i, (sge, &addr)) in sges.iter().zip(raddr).enumerate() {
    ///     b.wr(i as u64).rdma_write(RemoteBuf::unbounded(addr, rkey)).sge(*sge)?;
    /// }
    /// // SAFETY: the memory stays registered and untouched until the
    /// // completions are polled.
    /// unsafe { b.complete()? };
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub const fn unbounded(addr: u64, rkey: u32) -> RemoteBuf {
        RemoteBuf {
            addr,
            len: u64::MAX,
            rkey,
        }
    }

    /// `len` bytes of this buffer starting at `offset`, checked: inside
    /// the buffer, and (the fields are public) not past the end of the
    /// address space.
    ///
    /// Inlined, its errors' text made out of line: one compare of the
    /// slice's end with a bound that does not change in a loop over one
    /// buffer.
    #[inline]
    pub fn slice(&self, offset: u64, len: u64) -> Result<RemoteBuf> {
        // `addr + end` does not overflow exactly when `end <= MAX - addr`;
        // then neither does `addr + offset` nor `addr + offset + len`.
        let limit = self.len.min(u64::MAX - self.addr);
        match offset.checked_add(len) {
            Some(end) if end <= limit => Ok(RemoteBuf {
                addr: self.addr + offset,
                len,
                rkey: self.rkey,
            }),
            Some(end) if end <= self.len => Err(Error::OutOfRange {
                what: "remote range end address",
                value: self.addr.saturating_add(end),
                limit: past_address_space(),
            }),
            _ => Err(Error::OutOfRange {
                what: "remote range end",
                value: offset.saturating_add(len),
                limit: at_most_remote_len(self.len),
            }),
        }
    }
}

#[cold]
#[inline(never)]
fn past_address_space() -> String {
    "below 2^64 (the remote buffer runs past the end of the address space)".into()
}

#[cold]
#[inline(never)]
fn at_most_remote_len(len: u64) -> String {
    format!("at most {len} (the remote buffer's length)")
}
