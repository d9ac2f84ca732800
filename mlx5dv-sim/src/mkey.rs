//! Memory keys: list and interleaved layouts and their translation.
//!
//! A UMR WQE (`mlx5dv_wr_mr_list`, `mlx5dv_wr_mr_interleaved`,
//! `mlx5dv_wr_set_mkey_layout_*`, `ibv_wr_bind_mw`) gives an indirect mkey a
//! *layout*: the list of (key, address, length) ranges that its zero-based
//! byte range maps to. This module holds that layout and maps a byte range of
//! the mkey through it. It knows nothing of the keys themselves: a piece's
//! key may name an MR or another indirect mkey, which the caller resolves
//! (and bounds-checks) in turn.
//!
//! # API
//! - [`Sge`]: one `(lkey, addr, len)` entry, as in a data segment or KLM.
//! - [`Layout`]: `List(Vec<Sge>)` (KLM list: the entries concatenated) or
//!   `Interleaved { repeat_count, entries: Vec<RepeatEntry> }` (a repeat
//!   block: `repeat_count` repetitions of the entries; entry `i` in
//!   repetition `r` takes `byte_count` bytes at `va + r * stride`).
//! - [`Layout::len`]: the total length in bytes.
//! - [`translate`]`(&Layout, offset, len) -> Result<Vec<Piece>, TranslateError>`:
//!   the pieces `{ key, addr, len }` that the mkey bytes
//!   `offset..offset + len` map to, in order; adjacent pieces with the same
//!   key and contiguous addresses are merged. Out of range is an error.

use std::fmt;

/// One scatter/gather entry: `len` bytes at `addr` through memory key `lkey`.
///
/// In a WQE data segment (`struct mlx5_wqe_data_seg`) and a UMR KLM
/// (`struct mlx5_wqe_umr_klm_seg`) the length is a 32-bit `byte_count`.
/// The parsers store the *decoded* length here: a data segment's
/// `byte_count == 0` means 2 GiB in mlx5 semantics and is stored as
/// `0x8000_0000`; bit 31 of a data segment's `byte_count` is the inline flag
/// (`MLX5_INLINE_SEG`), so a pointer segment never has it set together with
/// other length bits. KLM entries of a UMR list keep `0` as `0` (see
/// `crate::wqe::umr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sge {
    /// The local key (`lkey`/`mkey`) the range is accessed through.
    pub lkey: u32,
    /// The start address (a virtual address of the key's address space).
    pub addr: u64,
    /// The length in bytes (decoded: 2 GiB is `0x8000_0000`).
    pub len: u32,
}

/// One entry of an interleaved (repeat block) layout
/// (`struct mlx5_wqe_umr_repeat_ent_seg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RepeatEntry {
    /// Distance in bytes between this entry's ranges in two consecutive
    /// repetitions (libmlx5 writes `bytes_count + bytes_skip`).
    pub stride: u16,
    /// Bytes this entry contributes to every repetition.
    pub byte_count: u16,
    /// The memory key of the entry's ranges.
    pub key: u32,
    /// The address of the entry's range in repetition 0.
    pub va: u64,
}

/// The translation of an indirect mkey.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    /// A KLM list: the mkey's bytes are the entries' ranges, concatenated.
    List(Vec<Sge>),
    /// A repeat block: `repeat_count` repetitions of `entries`.
    Interleaved {
        /// How many times the entries repeat.
        repeat_count: u32,
        /// The entries of one repetition, in order.
        entries: Vec<RepeatEntry>,
    },
}

impl Layout {
    /// The bytes of one repetition (the sum of the entries' lengths);
    /// for a list, its whole length.
    fn period(&self) -> u64 {
        match self {
            Layout::List(sges) => sges.iter().map(|s| u64::from(s.len)).sum(),
            Layout::Interleaved { entries, .. } => {
                entries.iter().map(|e| u64::from(e.byte_count)).sum()
            }
        }
    }

    /// The total length in bytes the layout maps.
    pub fn len(&self) -> u64 {
        match self {
            Layout::List(_) => self.period(),
            Layout::Interleaved { repeat_count, .. } => self.period() * u64::from(*repeat_count),
        }
    }

    /// Whether the layout maps no byte at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One contiguous piece of a translated range: `len` bytes at `addr`
/// through `key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Piece {
    /// The key the piece is accessed through (an MR or another mkey).
    pub key: u32,
    /// The address in that key's address space.
    pub addr: u64,
    /// The length in bytes.
    pub len: u64,
}

/// Why a range could not be translated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TranslateError {
    /// `offset + len` lies beyond the layout's length (or overflows).
    OutOfRange {
        /// The first byte asked for.
        offset: u64,
        /// The number of bytes asked for.
        len: u64,
        /// The layout's length.
        layout_len: u64,
    },
    /// An entry's address plus offset overflows 64 bits.
    AddressOverflow {
        /// The entry's key.
        key: u32,
    },
}

impl fmt::Display for TranslateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TranslateError::OutOfRange {
                offset,
                len,
                layout_len,
            } => write!(
                f,
                "mkey range {offset:#x}+{len:#x} exceeds the layout's {layout_len:#x} bytes"
            ),
            TranslateError::AddressOverflow { key } => {
                write!(f, "address of an entry of key {key:#x} overflows 64 bits")
            }
        }
    }
}

impl std::error::Error for TranslateError {}

/// Appends a piece, merging it into the previous one when contiguous.
fn push(out: &mut Vec<Piece>, key: u32, addr: u64, len: u64) {
    if len == 0 {
        return;
    }
    if let Some(last) = out.last_mut() {
        if last.key == key && last.addr.checked_add(last.len) == Some(addr) {
            last.len += len;
            return;
        }
    }
    out.push(Piece { key, addr, len });
}

/// Maps the zero-based byte range `offset..offset + len` of an mkey with
/// this `layout` to the pieces it consists of, in order.
///
/// A zero `len` at any `offset <= layout.len()` gives no piece. Entries of
/// zero length are skipped. Nested keys are *not* resolved here.
pub fn translate(layout: &Layout, offset: u64, len: u64) -> Result<Vec<Piece>, TranslateError> {
    let layout_len = layout.len();
    let out_of_range = TranslateError::OutOfRange {
        offset,
        len,
        layout_len,
    };
    let end = offset.checked_add(len).ok_or(out_of_range)?;
    if end > layout_len {
        return Err(out_of_range);
    }
    let mut out = Vec::new();
    if len == 0 {
        return Ok(out);
    }
    match layout {
        Layout::List(sges) => {
            let entries = sges.iter().map(|s| (s.lkey, s.addr, u64::from(s.len)));
            walk(entries, 0, offset, end, &mut out)?;
        }
        Layout::Interleaved { entries, .. } => {
            let period = layout.period();
            // Start at the repetition holding `offset`; later ones follow.
            let mut rep = offset / period;
            let mut base = rep * period;
            while base < end {
                let mapped = entries.iter().map(|e| {
                    let va = e.va.checked_add(rep * u64::from(e.stride)).ok_or(e.key);
                    (e.key, va, u64::from(e.byte_count))
                });
                walk_checked(mapped, base, offset, end, &mut out)?;
                rep += 1;
                base += period;
            }
        }
    }
    Ok(out)
}

/// Walks entries laid end to end from `base`, emitting the parts inside
/// `offset..end`.
fn walk(
    entries: impl Iterator<Item = (u32, u64, u64)>,
    base: u64,
    offset: u64,
    end: u64,
    out: &mut Vec<Piece>,
) -> Result<(), TranslateError> {
    walk_checked(
        entries.map(|(k, a, l)| (k, Ok(a), l)),
        base,
        offset,
        end,
        out,
    )
}

/// [`walk`] over entries whose address may already have overflowed
/// (`Err(key)`).
fn walk_checked(
    entries: impl Iterator<Item = (u32, Result<u64, u32>, u64)>,
    base: u64,
    offset: u64,
    end: u64,
    out: &mut Vec<Piece>,
) -> Result<(), TranslateError> {
    let mut start = base;
    for (key, addr, elen) in entries {
        let stop = start + elen;
        let lo = offset.max(start);
        let hi = end.min(stop);
        if lo < hi {
            let addr = addr.map_err(|key| TranslateError::AddressOverflow { key })?;
            let overflow = TranslateError::AddressOverflow { key };
            let addr = addr.checked_add(lo - start).ok_or(overflow)?;
            // The piece's last byte must be addressable too.
            addr.checked_add(hi - lo - 1).ok_or(overflow)?;
            push(out, key, addr, hi - lo);
        }
        if stop >= end {
            break;
        }
        start = stop;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sge(lkey: u32, addr: u64, len: u32) -> Sge {
        Sge { lkey, addr, len }
    }

    fn piece(key: u32, addr: u64, len: u64) -> Piece {
        Piece { key, addr, len }
    }

    fn list() -> Layout {
        Layout::List(vec![
            sge(0x100, 0x1000, 16),
            sge(0x200, 0x8000, 0),
            sge(0x200, 0x9000, 32),
            sge(0x100, 0x1010, 8),
        ])
    }

    #[test]
    fn list_len_and_whole_range() {
        let l = list();
        assert_eq!(l.len(), 56);
        assert!(!l.is_empty());
        assert_eq!(
            translate(&l, 0, 56).unwrap(),
            vec![
                piece(0x100, 0x1000, 16),
                piece(0x200, 0x9000, 32),
                piece(0x100, 0x1010, 8)
            ]
        );
    }

    #[test]
    fn list_inner_ranges_and_boundaries() {
        let l = list();
        assert_eq!(
            translate(&l, 15, 2).unwrap(),
            vec![piece(0x100, 0x100f, 1), piece(0x200, 0x9000, 1)]
        );
        assert_eq!(
            translate(&l, 16, 32).unwrap(),
            vec![piece(0x200, 0x9000, 32)]
        );
        assert_eq!(
            translate(&l, 47, 9).unwrap(),
            vec![piece(0x200, 0x901f, 1), piece(0x100, 0x1010, 8)]
        );
        assert_eq!(translate(&l, 55, 1).unwrap(), vec![piece(0x100, 0x1017, 1)]);
        assert_eq!(translate(&l, 56, 0).unwrap(), vec![]);
        assert_eq!(translate(&l, 3, 0).unwrap(), vec![]);
    }

    #[test]
    fn list_out_of_range() {
        let l = list();
        let err = TranslateError::OutOfRange {
            offset: 50,
            len: 7,
            layout_len: 56,
        };
        assert_eq!(translate(&l, 50, 7), Err(err));
        assert!(translate(&l, 57, 0).is_err());
        assert!(translate(&l, u64::MAX, 2).is_err());
        assert!(translate(&Layout::List(vec![]), 0, 1).is_err());
        assert_eq!(translate(&Layout::List(vec![]), 0, 0).unwrap(), vec![]);
    }

    #[test]
    fn list_merges_contiguous_pieces() {
        let l = Layout::List(vec![sge(7, 0x100, 4), sge(7, 0x104, 4), sge(8, 0x108, 4)]);
        assert_eq!(
            translate(&l, 1, 11).unwrap(),
            vec![piece(7, 0x101, 7), piece(8, 0x108, 4)]
        );
    }

    fn interleaved() -> Layout {
        // Two entries: 4 bytes of key 1 every 16 bytes, 2 bytes of key 2
        // every 8 bytes; 3 repetitions: 18 bytes.
        Layout::Interleaved {
            repeat_count: 3,
            entries: vec![
                RepeatEntry {
                    stride: 16,
                    byte_count: 4,
                    key: 1,
                    va: 0x1000,
                },
                RepeatEntry {
                    stride: 8,
                    byte_count: 2,
                    key: 2,
                    va: 0x2000,
                },
            ],
        }
    }

    #[test]
    fn interleaved_len_and_whole_range() {
        let l = interleaved();
        assert_eq!(l.len(), 18);
        assert_eq!(
            translate(&l, 0, 18).unwrap(),
            vec![
                piece(1, 0x1000, 4),
                piece(2, 0x2000, 2),
                piece(1, 0x1010, 4),
                piece(2, 0x2008, 2),
                piece(1, 0x1020, 4),
                piece(2, 0x2010, 2),
            ]
        );
    }

    #[test]
    fn interleaved_starts_mid_repetition() {
        let l = interleaved();
        assert_eq!(
            translate(&l, 9, 5).unwrap(),
            vec![
                piece(1, 0x1013, 1),
                piece(2, 0x2008, 2),
                piece(1, 0x1020, 2)
            ]
        );
        assert_eq!(translate(&l, 17, 1).unwrap(), vec![piece(2, 0x2011, 1)]);
        assert!(translate(&l, 17, 2).is_err());
    }

    #[test]
    fn interleaved_dense_stride_merges() {
        let l = Layout::Interleaved {
            repeat_count: 1000,
            entries: vec![RepeatEntry {
                stride: 64,
                byte_count: 64,
                key: 9,
                va: 0,
            }],
        };
        assert_eq!(l.len(), 64_000);
        assert_eq!(
            translate(&l, 10, 63_990).unwrap(),
            vec![piece(9, 10, 63_990)]
        );
    }

    #[test]
    fn interleaved_zero_length_layouts() {
        let none = Layout::Interleaved {
            repeat_count: 0,
            entries: vec![],
        };
        assert!(none.is_empty());
        assert!(translate(&none, 0, 1).is_err());
        let zero = Layout::Interleaved {
            repeat_count: 5,
            entries: vec![RepeatEntry {
                stride: 0,
                byte_count: 0,
                key: 1,
                va: 0,
            }],
        };
        assert_eq!(zero.len(), 0);
        assert_eq!(translate(&zero, 0, 0).unwrap(), vec![]);
    }

    #[test]
    fn address_overflow_is_an_error() {
        let l = Layout::Interleaved {
            repeat_count: 2,
            entries: vec![RepeatEntry {
                stride: 16,
                byte_count: 8,
                key: 3,
                va: u64::MAX - 20,
            }],
        };
        assert_eq!(
            translate(&l, 0, 8).unwrap(),
            vec![piece(3, u64::MAX - 20, 8)]
        );
        assert_eq!(
            translate(&l, 8, 8),
            Err(TranslateError::AddressOverflow { key: 3 })
        );
    }

    /// Every byte of the layout, as (key, address), by brute force.
    fn bytes_of(layout: &Layout) -> Vec<(u32, u64)> {
        let mut out = vec![];
        match layout {
            Layout::List(sges) => {
                for s in sges {
                    out.extend((0..u64::from(s.len)).map(|i| (s.lkey, s.addr + i)));
                }
            }
            Layout::Interleaved {
                repeat_count,
                entries,
            } => {
                for r in 0..u64::from(*repeat_count) {
                    for e in entries {
                        let base = e.va + r * u64::from(e.stride);
                        out.extend((0..u64::from(e.byte_count)).map(|i| (e.key, base + i)));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn translate_matches_a_byte_by_byte_reference() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for round in 0..300 {
            let n = 1 + rnd(5) as usize;
            let layout = if round % 2 == 0 {
                Layout::List(
                    (0..n)
                        .map(|_| sge(1 + rnd(2) as u32, rnd(4) * 8, rnd(9) as u32))
                        .collect(),
                )
            } else {
                Layout::Interleaved {
                    repeat_count: rnd(5) as u32,
                    entries: (0..n)
                        .map(|_| RepeatEntry {
                            stride: rnd(12) as u16,
                            byte_count: rnd(6) as u16,
                            key: 1 + rnd(2) as u32,
                            va: rnd(4) * 4,
                        })
                        .collect(),
                }
            };
            let reference = bytes_of(&layout);
            assert_eq!(layout.len(), reference.len() as u64);
            let total = layout.len();
            for _ in 0..20 {
                let offset = rnd(total + 2);
                let len = rnd(total + 2);
                let got = translate(&layout, offset, len);
                if offset + len > total {
                    assert!(got.is_err(), "{layout:?} {offset}+{len}");
                    continue;
                }
                let pieces = got.unwrap();
                let flat: Vec<(u32, u64)> = pieces
                    .iter()
                    .flat_map(|p| (0..p.len).map(move |i| (p.key, p.addr + i)))
                    .collect();
                assert_eq!(
                    flat,
                    reference[offset as usize..(offset + len) as usize],
                    "{layout:?} {offset}+{len}"
                );
                for w in pieces.windows(2) {
                    let mergeable = w[0].key == w[1].key && w[0].addr + w[0].len == w[1].addr;
                    assert!(!mergeable && w[0].len > 0, "{pieces:?}");
                }
            }
        }
    }
}
