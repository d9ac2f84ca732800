//! A peer's memory ([`RemoteBuf`]): its address, length and rkey, and
//! the checked slices of it that RDMA reads, writes and atomics target.

use crate::error::{Error, Result};

/// A peer's memory: what an RDMA read, write or atomic targets.
///
/// Its `Debug` form gives the address and rkey in hex, as the crate's
/// messages do, and the length in decimal.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteBuf {
    /// Remote address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// The remote region's rkey.
    pub rkey: u32,
}

impl std::fmt::Debug for RemoteBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteBuf")
            .field("addr", &format_args!("{:#x}", self.addr))
            .field("len", &self.len)
            .field("rkey", &format_args!("{:#x}", self.rkey))
            .finish()
    }
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
    pub const BYTES: usize = 28;
    /// The version of the byte form this crate writes and reads.
    pub const VERSION: u8 = crate::byte_form::FORM_VERSION;

    /// The byte form, to send to the peer with the QP's
    /// [`Endpoint`](crate::Endpoint) (over TCP, in a file). Versioned as
    /// the endpoints' byte forms are, and checked: a CRC-32 of the first
    /// 24 bytes ends it, so that a garbled or misaligned exchange is
    /// refused by [`from_bytes`](Self::from_bytes) rather than found as a
    /// remote access error after posting. Stable: a later release that
    /// changes it writes another version, which this one refuses. (With
    /// the `serde` feature, a struct of `addr`, `len` and `rkey` too, read
    /// with the same check of the address range.)
    ///
    /// | offset | bytes | field |
    /// |---|---|---|
    /// | 0 | 1 | version: 2 |
    /// | 1 | 1 | form: 4 (a `RemoteBuf`'s; other types' forms have others) |
    /// | 2 | 2 | reserved: 0 |
    /// | 4 | 4 | rkey, big-endian |
    /// | 8 | 8 | address, big-endian |
    /// | 16 | 8 | length, big-endian |
    /// | 24 | 4 | CRC-32 (IEEE 802.3, as zlib's `crc32`) of bytes 0..24, big-endian |
    ///
    /// ```
    /// use mlx5dv::RemoteBuf;
    ///
    /// let r = RemoteBuf { addr: 0x7f00_0000_1000, len: 4096, rkey: 0x1234 };
    /// let bytes = r.to_bytes();
    /// assert_eq!(bytes[..8], [2, 4, 0, 0, 0, 0, 0x12, 0x34]);
    /// assert_eq!(RemoteBuf::from_bytes(&bytes)?, r);
    /// let mut garbled = bytes;
    /// garbled[9] ^= 1;
    /// assert!(RemoteBuf::from_bytes(&garbled).is_err());
    /// assert!(RemoteBuf::from_bytes(&bytes[..20]).is_err());
    /// # Ok::<(), mlx5dv::Error>(())
    /// ```
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[0] = Self::VERSION;
        b[1] = crate::qp::ByteForm::RemoteBuf.tag();
        b[4..8].copy_from_slice(&self.rkey.to_be_bytes());
        b[8..16].copy_from_slice(&self.addr.to_be_bytes());
        b[16..24].copy_from_slice(&self.len.to_be_bytes());
        let check = crc32(&b[..24]);
        b[24..28].copy_from_slice(&check.to_be_bytes());
        b
    }

    /// Reads the byte form of [`to_bytes`](Self::to_bytes): exactly
    /// [`BYTES`](Self::BYTES) bytes of version 2 and a `RemoteBuf`'s form
    /// byte (else [`Error::OutOfRange`] for the length,
    /// [`Error::InvalidArgument`] for the version, and
    /// [`Error::WrongByteForm`] for another type's byte form, such as an
    /// [`Endpoint`](crate::Endpoint)'s), whose reserved bytes are 0 and whose CRC-32
    /// matches (else [`Error::InvalidArgument`]). A buffer whose end,
    /// `addr + len`, overflows 2^64 is refused too
    /// ([`Error::OutOfRange`]; a length of `u64::MAX` is
    /// [`unbounded`](Self::unbounded)'s, and taken).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let b = crate::qp::versioned_form::<{ Self::BYTES }>(
            bytes,
            crate::qp::ByteForm::RemoteBuf,
            "RemoteBuf byte form length",
        )?;
        let sent = u32::from_be_bytes([b[24], b[25], b[26], b[27]]);
        let computed = crc32(&b[..24]);
        if sent != computed || b[2] != 0 || b[3] != 0 {
            return Err(Error::InvalidArgument(format!(
                "RemoteBuf byte form fails its check (CRC-32 {sent:#010x}, computed \
                 {computed:#010x}; reserved bytes {:#04x} {:#04x}): the bytes were garbled \
                 or are not a RemoteBuf's to_bytes",
                b[2], b[3]
            )));
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_be_bytes(w)
        };
        let rkey = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
        let (addr, len) = (word(8), word(16));
        if len != u64::MAX && addr.checked_add(len).is_none() {
            return Err(Error::OutOfRange {
                what: "RemoteBuf address",
                value: addr,
                limit: overflows("len", len),
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
                what: "remote range address",
                value: self.addr,
                limit: overflows("offset + len", end),
            }),
            _ => Err(Error::OutOfRange {
                what: "remote range end",
                value: offset.saturating_add(len),
                limit: at_most_remote_len(self.len),
            }),
        }
    }
}

/// The rule an address broke whose end overflows: `addr + {what}` (whose
/// value is `n`) overflows 2^64.
#[cold]
#[inline(never)]
fn overflows(what: &str, n: u64) -> String {
    format!(
        "addr + {what} (= {n}) overflows 2^64: the remote buffer would run past the end of \
         the address space"
    )
}

/// The CRC-32 of IEEE 802.3 (zlib's `crc32`, reflected, polynomial
/// 0xedb88320) of `bytes`: the check of [`RemoteBuf`]'s byte form.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[cold]
#[inline(never)]
fn at_most_remote_len(len: u64) -> String {
    format!("at most {len} (the remote buffer's length)")
}

#[cfg(test)]
mod byte_form_tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn crc32_is_zlibs() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn an_overflowing_range_says_so_without_contradiction() {
        let mut b = RemoteBuf {
            addr: u64::MAX - 4095,
            len: 8192,
            rkey: 1,
        }
        .to_bytes();
        let text = RemoteBuf::from_bytes(&b).unwrap_err().to_string();
        assert_eq!(
            text,
            "RemoteBuf address = 18446744073709547520 is out of range: addr + len (= 8192) \
             overflows 2^64: the remote buffer would run past the end of the address space"
        );
        // Unbounded (len u64::MAX) is taken at any address.
        let top = RemoteBuf::unbounded(u64::MAX - 1, 3);
        assert_eq!(RemoteBuf::from_bytes(&top.to_bytes()).unwrap(), top);
        // The old 20-byte form is refused by its length, a future version
        // by its version, a flipped bit by the check.
        assert!(matches!(
            RemoteBuf::from_bytes(&b[..20]),
            Err(Error::OutOfRange { value: 20, .. })
        ));
        b[27] ^= 0x80;
        let text = RemoteBuf::from_bytes(&b).unwrap_err().to_string();
        assert!(text.contains("fails its check"), "{text}");
        b[27] ^= 0x80;
        b[0] = 3;
        let text = RemoteBuf::from_bytes(&b).unwrap_err().to_string();
        assert!(text.contains("version 3"), "{text}");
    }

    proptest! {
        #[test]
        fn every_buffer_round_trips(addr: u64, len: u64, rkey: u32) {
            let len = if addr.checked_add(len).is_some() { len } else { u64::MAX };
            let r = RemoteBuf { addr, len, rkey };
            prop_assert_eq!(RemoteBuf::from_bytes(&r.to_bytes()).unwrap(), r);
        }

        #[test]
        fn random_bytes_do_not_decode(bytes in proptest::array::uniform28(any::<u8>())) {
            prop_assert!(RemoteBuf::from_bytes(&bytes).is_err());
        }

        #[test]
        fn one_flipped_bit_is_refused(addr: u64, len in 0u64..1 << 40, rkey: u32, bit in 0usize..224) {
            let mut b = RemoteBuf { addr: addr >> 1, len, rkey }.to_bytes();
            b[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(RemoteBuf::from_bytes(&b).is_err());
        }
    }
}
