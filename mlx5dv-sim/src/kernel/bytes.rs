//! Command buffers: copies of user memory read and written at byte offsets.
//!
//! The fake kernel never trusts `sizeof`: each request is read from the
//! length the caller gave (in_words/out_words, attribute `len`), fields past
//! that end read as zero, and responses are cut to the caller's length, as
//! the kernel's uverbs layer does when user and kernel structs differ in
//! size.

/// A little-endian view of a command buffer (a copy; reads past the end give 0).
#[derive(Debug, Clone, Default)]
pub struct In(pub Vec<u8>);

impl In {
    /// `len` bytes copied from the user address `addr`.
    ///
    /// # Safety
    /// `addr..addr+len` must be readable memory of this process (the caller
    /// of the command vouches for it, as for a system call).
    pub unsafe fn copy_from(addr: u64, len: usize) -> Self {
        let mut v = vec![0u8; len];
        if len != 0 {
            // SAFETY: the caller guarantees `addr` is readable for `len`
            // bytes; `v` is a fresh buffer of `len` bytes.
            unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, v.as_mut_ptr(), len) };
        }
        Self(v)
    }

    /// The bytes from `off` on (empty when past the end).
    pub fn tail(&self, off: usize) -> In {
        In(self.0.get(off..).map(<[u8]>::to_vec).unwrap_or_default())
    }

    fn get<const N: usize>(&self, off: usize) -> [u8; N] {
        let mut b = [0u8; N];
        for (i, x) in b.iter_mut().enumerate() {
            *x = self.0.get(off + i).copied().unwrap_or(0);
        }
        b
    }

    /// The byte at `off`.
    pub fn u8(&self, off: usize) -> u8 {
        self.get::<1>(off)[0]
    }
    /// The little-endian u16 at `off`.
    pub fn u16(&self, off: usize) -> u16 {
        u16::from_le_bytes(self.get(off))
    }
    /// The little-endian u32 at `off`.
    pub fn u32(&self, off: usize) -> u32 {
        u32::from_le_bytes(self.get(off))
    }
    /// The little-endian u64 at `off`.
    pub fn u64(&self, off: usize) -> u64 {
        u64::from_le_bytes(self.get(off))
    }
    /// Length of the copy.
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// Whether the copy is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A response being built; written back cut to the caller's length.
#[derive(Debug, Clone)]
pub struct Out(pub Vec<u8>);

impl Out {
    /// A zeroed response of `len` bytes.
    pub fn new(len: usize) -> Self {
        Self(vec![0; len])
    }
    fn put(&mut self, off: usize, b: &[u8]) {
        for (i, x) in b.iter().enumerate() {
            if let Some(d) = self.0.get_mut(off + i) {
                *d = *x;
            }
        }
    }
    /// Writes a byte at `off` (dropped past the end).
    pub fn u8(&mut self, off: usize, v: u8) {
        self.put(off, &[v]);
    }
    /// Writes a little-endian u16 at `off`.
    pub fn u16(&mut self, off: usize, v: u16) {
        self.put(off, &v.to_le_bytes());
    }
    /// Writes a little-endian u32 at `off`.
    pub fn u32(&mut self, off: usize, v: u32) {
        self.put(off, &v.to_le_bytes());
    }
    /// Writes a little-endian u64 at `off`.
    pub fn u64(&mut self, off: usize, v: u64) {
        self.put(off, &v.to_le_bytes());
    }
    /// Writes raw bytes at `off`.
    pub fn bytes(&mut self, off: usize, b: &[u8]) {
        self.put(off, b);
    }
    /// Copies the response to the user address `addr`.
    ///
    /// # Safety
    /// `addr..addr+self.0.len()` must be writable memory of this process.
    pub unsafe fn copy_to(&self, addr: u64) {
        if !self.0.is_empty() {
            // SAFETY: the caller guarantees the destination is writable.
            unsafe {
                std::ptr::copy_nonoverlapping(self.0.as_ptr(), addr as *mut u8, self.0.len())
            };
        }
    }
}

/// PRM (firmware command) buffers: big-endian bit fields addressed as
/// `mlx5_ifc.h` does (bit 0 is the most significant bit of dword 0).
pub mod prm {
    /// Reads `width` bits at bit offset `off` (width ≤ 32, within one dword).
    pub fn get(buf: &[u8], off: usize, width: usize) -> u32 {
        let dw = off / 32 * 4;
        let Some(b) = buf.get(dw..dw + 4) else {
            return 0;
        };
        let v = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let shift = 32 - (off % 32) - width;
        let mask = if width == 32 {
            u32::MAX
        } else {
            (1 << width) - 1
        };
        (v >> shift) & mask
    }
    /// Reads the big-endian u64 at bit offset `off` (64-bit aligned).
    pub fn get64(buf: &[u8], off: usize) -> u64 {
        (u64::from(get(buf, off, 32)) << 32) | u64::from(get(buf, off + 32, 32))
    }
    /// Writes `width` bits at bit offset `off`.
    pub fn set(buf: &mut [u8], off: usize, width: usize, val: u32) {
        let dw = off / 32 * 4;
        let Some(b) = buf.get_mut(dw..dw + 4) else {
            return;
        };
        let mut v = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let shift = 32 - (off % 32) - width;
        let mask = if width == 32 {
            u32::MAX
        } else {
            ((1u32 << width) - 1) << shift
        };
        v = (v & !mask) | ((val << shift) & mask);
        b.copy_from_slice(&v.to_be_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prm_bits_round_trip() {
        let mut b = vec![0u8; 16];
        prm::set(&mut b, 0x48, 24, 0xabcdef);
        assert_eq!(prm::get(&b, 0x48, 24), 0xabcdef);
        assert_eq!(&b[8..12], &[0, 0xab, 0xcd, 0xef]);
        prm::set(&mut b, 0x1, 1, 1);
        assert_eq!(b[0], 0x40);
    }

    #[test]
    fn short_reads_are_zero() {
        let i = In(vec![1, 2]);
        assert_eq!(i.u32(0), 0x0201);
        assert_eq!(i.u64(8), 0);
        let mut o = Out::new(3);
        o.u32(0, 0x04030201);
        assert_eq!(o.0, vec![1, 2, 3]);
    }
}
