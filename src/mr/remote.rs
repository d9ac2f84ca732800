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

    /// The length of the byte form ([`to_bytes`](Self::to_bytes)).
    pub const BYTES: usize = 20;

    /// The byte form, to send to the peer with the QP's
    /// [`Endpoint`](crate::Endpoint) (over TCP, in a file): the address,
    /// the length, big-endian (8 bytes each), then the rkey (4 bytes).
    /// (With the `serde` feature, a struct of `addr`, `len` and `rkey`
    /// too, read with the same check.)
    ///
    /// ```
    /// use mlx5dv::RemoteBuf;
    ///
    /// let r = RemoteBuf { addr: 0x7f00_0000_1000, len: 4096, rkey: 0x1234 };
    /// assert_eq!(RemoteBuf::from_bytes(&r.to_bytes())?, r);
    /// assert!(RemoteBuf::from_bytes(&[0; 19]).is_err());
    /// # Ok::<(), mlx5dv::Error>(())
    /// ```
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0..8].copy_from_slice(&self.addr.to_be_bytes());
        b[8..16].copy_from_slice(&self.len.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b
    }

    /// Reads the byte form of [`to_bytes`](Self::to_bytes): exactly
    /// [`BYTES`](Self::BYTES) bytes, else [`Error::OutOfRange`]. A buffer
    /// that runs past the end of the address space is refused too.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let b: &[u8; Self::BYTES] = bytes.try_into().map_err(|_| Error::OutOfRange {
            what: "RemoteBuf byte form length",
            value: bytes.len() as u64,
            limit: format!("exactly {} bytes", Self::BYTES),
        })?;
        let mut word = [0u8; 8];
        word.copy_from_slice(&b[0..8]);
        let addr = u64::from_be_bytes(word);
        word.copy_from_slice(&b[8..16]);
        let len = u64::from_be_bytes(word);
        let rkey = u32::from_be_bytes([b[16], b[17], b[18], b[19]]);
        if len != u64::MAX && addr.checked_add(len).is_none() {
            return Err(Error::OutOfRange {
                what: "RemoteBuf end address",
                value: addr.saturating_add(len),
                limit: past_address_space(),
            });
        }
        Ok(RemoteBuf { addr, len, rkey })
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
