//! Copies in and out of registered memory with volatile accesses, as
//! rust-vmm's vm-memory reaches guest memory: the compiler may not assume
//! the memory keeps what it last saw there (a remote peer or the device may
//! write it at any moment), so it neither elides, merges nor invents these
//! loads and stores. The aligned middle of a copy moves a `u64` at a time,
//! the unaligned ends a byte at a time.

use std::ptr;

const WORD: usize = std::mem::size_of::<u64>();

/// How many bytes of a `len`-byte copy at `p` come before the first
/// `u64`-aligned address (all of them when none is reached).
fn head_len(p: *const u8, len: usize) -> usize {
    p.align_offset(WORD).min(len)
}

/// Copies `dst.len()` bytes starting at `src` into `dst`.
///
/// # Safety
///
/// `src..src + dst.len()` is valid for reads and does not overlap `dst`.
pub(super) unsafe fn copy_out(src: *const u8, dst: &mut [u8]) {
    let (head, rest) = dst.split_at_mut(head_len(src, dst.len()));
    for (i, b) in head.iter_mut().enumerate() {
        // SAFETY: `i < head.len() <= dst.len()`: inside the caller's range.
        *b = unsafe { ptr::read_volatile(src.add(i)) };
    }
    // SAFETY: `head.len() <= dst.len()`: at most one past the range.
    let mut p = unsafe { src.add(head.len()) };
    let mut words = rest.chunks_exact_mut(WORD);
    for w in &mut words {
        // SAFETY: `p` is u64-aligned (past the head, which ends at the first
        // aligned address whenever a whole word follows) and the 8 bytes
        // there lie inside the range, as `w` lies inside `dst`.
        w.copy_from_slice(&unsafe { ptr::read_volatile(p.cast::<u64>()) }.to_ne_bytes());
        // SAFETY: at most one past the range.
        p = unsafe { p.add(WORD) };
    }
    for (i, b) in words.into_remainder().iter_mut().enumerate() {
        // SAFETY: the tail lies inside the range, as it does inside `dst`.
        *b = unsafe { ptr::read_volatile(p.add(i)) };
    }
}

/// Copies `src` to `src.len()` bytes starting at `dst`.
///
/// # Safety
///
/// `dst..dst + src.len()` is valid for writes and does not overlap `src`.
pub(super) unsafe fn copy_in(dst: *mut u8, src: &[u8]) {
    let (head, rest) = src.split_at(head_len(dst, src.len()));
    for (i, &b) in head.iter().enumerate() {
        // SAFETY: `i < head.len() <= src.len()`: inside the caller's range.
        unsafe { ptr::write_volatile(dst.add(i), b) };
    }
    // SAFETY: `head.len() <= src.len()`: at most one past the range.
    let mut p = unsafe { dst.add(head.len()) };
    let mut words = rest.chunks_exact(WORD);
    for w in &mut words {
        let w = u64::from_ne_bytes(w.try_into().expect("chunks_exact gives 8-byte chunks"));
        // SAFETY: `p` is u64-aligned and the 8 bytes there lie inside the
        // range (as in `copy_out`).
        unsafe { ptr::write_volatile(p.cast::<u64>(), w) };
        // SAFETY: at most one past the range.
        p = unsafe { p.add(WORD) };
    }
    for (i, &b) in words.remainder().iter().enumerate() {
        // SAFETY: the tail lies inside the range.
        unsafe { ptr::write_volatile(p.add(i), b) };
    }
}

/// Sets `len` bytes starting at `dst` to `byte`.
///
/// # Safety
///
/// `dst..dst + len` is valid for writes.
pub(super) unsafe fn fill(dst: *mut u8, len: usize, byte: u8) {
    let head = head_len(dst, len);
    for i in 0..head {
        // SAFETY: `i < head <= len`: inside the caller's range.
        unsafe { ptr::write_volatile(dst.add(i), byte) };
    }
    let word = u64::from_ne_bytes([byte; WORD]);
    let words = (len - head) / WORD;
    for i in 0..words {
        // SAFETY: past the head `dst` is u64-aligned (the head ends at the
        // first aligned address whenever a whole word follows), and word
        // `i < words` ends inside the range.
        unsafe { ptr::write_volatile(dst.add(head + i * WORD).cast::<u64>(), word) };
    }
    for i in head + words * WORD..len {
        // SAFETY: `i < len`: inside the range.
        unsafe { ptr::write_volatile(dst.add(i), byte) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEN: usize = 80;

    /// An 8-aligned buffer of `LEN` distinct bytes.
    fn buffer() -> Vec<u64> {
        (0..LEN as u64 / 8)
            .map(|i| u64::from_ne_bytes(std::array::from_fn(|j| (i * 8 + j as u64 + 1) as u8)))
            .collect()
    }

    fn bytes(buf: &mut [u64]) -> &mut [u8] {
        // SAFETY: the u64s' bytes, borrowed from `buf`.
        unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast(), buf.len() * 8) }
    }

    /// Every start alignment, every length from 0 to well past two words,
    /// and copies ending at every alignment, byte for byte against the
    /// plain slice operations.
    fn cases() -> impl Iterator<Item = (usize, usize)> {
        (0..=17).flat_map(|off| (0..=LEN - off).map(move |len| (off, len)))
    }

    #[test]
    fn copy_out_matches_a_plain_copy_at_every_alignment() {
        let mut buf = buffer();
        let mem = bytes(&mut buf).to_vec();
        for (off, len) in cases() {
            let mut got = vec![0xEE; len];
            // SAFETY: `off + len <= LEN`, inside `buf`, which `got` is not.
            unsafe { copy_out(bytes(&mut buf).as_ptr().add(off), &mut got) };
            assert_eq!(got, &mem[off..off + len], "offset {off}, length {len}");
        }
    }

    #[test]
    fn copy_in_matches_a_plain_copy_at_every_alignment() {
        for (off, len) in cases() {
            let mut buf = buffer();
            let mut want = bytes(&mut buf).to_vec();
            let data: Vec<u8> = (0..len).map(|i| 0x80 | i as u8).collect();
            want[off..off + len].copy_from_slice(&data);
            // SAFETY: `off + len <= LEN`, inside `buf`, which `data` is not.
            unsafe { copy_in(bytes(&mut buf).as_mut_ptr().add(off), &data) };
            assert_eq!(bytes(&mut buf), &want[..], "offset {off}, length {len}");
        }
    }

    #[test]
    fn fill_matches_a_plain_fill_at_every_alignment() {
        for (off, len) in cases() {
            let mut buf = buffer();
            let mut want = bytes(&mut buf).to_vec();
            want[off..off + len].fill(0xA5);
            // SAFETY: `off + len <= LEN`, inside `buf`.
            unsafe { fill(bytes(&mut buf).as_mut_ptr().add(off), len, 0xA5) };
            assert_eq!(bytes(&mut buf), &want[..], "offset {off}, length {len}");
        }
    }
}
