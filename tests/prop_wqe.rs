//! Property tests of the WQE segment builders and the range checks, on the
//! host.
//!
//! For any input, [`WqeBuilder`] and [`Wqe::from_bytes`] never panic, fail
//! exactly where the rules of `mlx5dv.h` and the provider say (QP number
//! over 24 bits, DS over 63, a data byte count with bit 31 set, empty
//! inline data, partial 16-byte units, unknown control flags, a DS byte
//! that does not count the bytes), and when they succeed the bytes are
//! those the header's own setters write (`mlx5dv_set_ctrl_seg`,
//! `mlx5dv_set_data_seg`, through the crate's shims). The range checks
//! (`MemoryRegion::sge` and `remote` on a fake region, `RemoteBuf::slice`,
//! `MrInterleaved::new`) never panic and refuse exactly the ranges that do
//! not fit.
//!
//! 256 cases per property (`PROPTEST_CASES` overrides).

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::wqe::{
    CtrlFlags, FenceMode, Opcode, Wqe, WqeBuilder, DS_BYTES, MAX_DS, MAX_QP_NUM, MAX_WQE_BYTES,
};
use mlx5dv::{ffi, Error, MrInterleaved, RemoteBuf};
use proptest::prelude::*;
use std::ops::Bound;
use support::fakes::{Fx, LEN};

const OPCODES: [Opcode; 20] = Opcode::ALL;

/// One appended segment, as the builder's methods take it.
#[derive(Debug, Clone)]
enum Seg {
    Raddr(u64, u32),
    Data(u32, u32, u64),
    CmpSwp(u64, u64),
    FetchAdd(u64),
    Inline(Vec<u8>),
    Raw(Vec<u8>),
}

/// The control segment's inputs.
#[derive(Debug, Clone)]
struct Ctrl {
    opcode: Opcode,
    qp_num: u32,
    opmod: u8,
    fence: FenceMode,
    flags: u8,
    imm: u32,
    stream: u16,
}

/// Values near the limits more often than chance would give them.
fn qp_num() -> impl Strategy<Value = u32> {
    prop_oneof![
        0..=MAX_QP_NUM,
        Just(MAX_QP_NUM),
        Just(MAX_QP_NUM + 1),
        any::<u32>()
    ]
}

fn byte_count() -> impl Strategy<Value = u32> {
    prop_oneof![
        0..=0x7fff_ffffu32,
        Just(0x7fff_ffff),
        Just(0x8000_0000),
        any::<u32>()
    ]
}

fn ctrl() -> impl Strategy<Value = Ctrl> {
    (
        prop::sample::select(&OPCODES[..]),
        qp_num(),
        any::<u8>(),
        prop::sample::select(vec![
            FenceMode::None,
            FenceMode::InitiatorSmall,
            FenceMode::Fence,
        ]),
        prop_oneof![
            4 => prop::sample::select(vec![0u8, 0x02, 0x08, 0x0a]),
            1 => any::<u8>()
        ],
        any::<u32>(),
        any::<u16>(),
    )
        .prop_map(|(opcode, qp_num, opmod, fence, flags, imm, stream)| Ctrl {
            opcode,
            qp_num,
            opmod,
            fence,
            flags,
            imm,
            stream,
        })
}

fn seg() -> impl Strategy<Value = Seg> {
    prop_oneof![
        (any::<u64>(), any::<u32>()).prop_map(|(a, k)| Seg::Raddr(a, k)),
        (byte_count(), any::<u32>(), any::<u64>()).prop_map(|(c, k, a)| Seg::Data(c, k, a)),
        (any::<u64>(), any::<u64>()).prop_map(|(c, s)| Seg::CmpSwp(c, s)),
        any::<u64>().prop_map(Seg::FetchAdd),
        prop::collection::vec(any::<u8>(), 0..200).prop_map(Seg::Inline),
        prop_oneof![
            (0usize..8).prop_map(|u| vec![0xA5; u * DS_BYTES]),
            prop::collection::vec(any::<u8>(), 0..100)
        ]
        .prop_map(Seg::Raw),
    ]
}

/// What `mlx5dv_set_ctrl_seg` writes, WQE index and signature 0, plus the
/// DCI stream id the builder also writes.
fn header_ctrl(c: &Ctrl, ds: u8) -> [u8; 16] {
    let mut seg = ffi::mlx5_wqe_ctrl_seg::default();
    let fm_ce_se = c.fence.bits() | c.flags;
    // The setter stores `imm` as given: big-endian is the caller's.
    unsafe {
        ffi::mlx5dv_set_ctrl_seg(
            &mut seg,
            0,
            c.opcode.raw(),
            c.opmod,
            c.qp_num,
            fm_ce_se,
            ds,
            0,
            c.imm.to_be(),
        )
    };
    seg.dci_stream_channel_id = c.stream.to_be_bytes();
    unsafe { std::mem::transmute::<ffi::mlx5_wqe_ctrl_seg, [u8; 16]>(seg) }
}

/// What `mlx5dv_set_data_seg` writes.
fn header_data(count: u32, lkey: u32, addr: u64) -> [u8; 16] {
    let mut seg = ffi::mlx5_wqe_data_seg::default();
    unsafe { ffi::mlx5dv_set_data_seg(&mut seg, count, lkey, addr as usize) };
    unsafe { std::mem::transmute::<ffi::mlx5_wqe_data_seg, [u8; 16]>(seg) }
}

/// The error kinds of the model.
#[derive(Debug, PartialEq, Eq)]
enum Fail {
    QpNum,
    Ds,
    ByteCount,
    EmptyInline,
    RawUnits,
    Flags,
}

/// The rules, written out independently of the builder: the first broken
/// rule, or the WQE's bytes (segments written with the header's setters
/// where it has them).
fn model(c: &Ctrl, segs: &[Seg]) -> Result<Vec<u8>, Fail> {
    let mut first = (c.qp_num > MAX_QP_NUM).then_some(Fail::QpNum);
    let mut body = Vec::new();
    for s in segs {
        if first.is_some() {
            break;
        }
        let bytes: Result<Vec<u8>, Fail> = match s {
            Seg::Raddr(a, k) => Ok([&a.to_be_bytes()[..], &k.to_be_bytes(), &[0; 4]].concat()),
            Seg::Data(n, _, _) if *n > 0x7fff_ffff => Err(Fail::ByteCount),
            Seg::Data(n, k, a) => Ok(header_data(*n, *k, *a).to_vec()),
            Seg::CmpSwp(cmp, swap) => Ok([swap.to_be_bytes(), cmp.to_be_bytes()].concat()),
            Seg::FetchAdd(add) => Ok([add.to_be_bytes(), [0; 8]].concat()),
            Seg::Inline(d) if d.is_empty() => Err(Fail::EmptyInline),
            Seg::Inline(d) => {
                let mut v = (d.len() as u32 | 0x8000_0000).to_be_bytes().to_vec();
                v.extend_from_slice(d);
                v.resize(v.len().div_ceil(DS_BYTES) * DS_BYTES, 0);
                Ok(v)
            }
            Seg::Raw(r) if r.is_empty() || r.len() % DS_BYTES != 0 => Err(Fail::RawUnits),
            Seg::Raw(r) => Ok(r.clone()),
        };
        match bytes {
            Err(f) => first = Some(f),
            Ok(_) if DS_BYTES + body.len() + bytes_len(&bytes) > MAX_WQE_BYTES => {
                first = Some(Fail::Ds)
            }
            Ok(b) => body.extend(b),
        }
    }
    if let Some(f) = first {
        return Err(f);
    }
    if c.flags & !CtrlFlags::all().bits() != 0 {
        return Err(Fail::Flags);
    }
    let ds = (1 + body.len() / DS_BYTES) as u8;
    let mut out = header_ctrl(c, ds).to_vec();
    out.extend(body);
    Ok(out)
}

fn bytes_len(b: &Result<Vec<u8>, Fail>) -> usize {
    b.as_ref().map_or(0, Vec::len)
}

/// The model's kind of a builder error.
fn kind(e: &Error) -> Option<Fail> {
    match e {
        Error::OutOfRange { what, .. } => match *what {
            "QP number" => Some(Fail::QpNum),
            "WQE size in 16-byte units (DS)" => Some(Fail::Ds),
            "data segment byte count" => Some(Fail::ByteCount),
            _ => None,
        },
        Error::InvalidArgument(m) if m.contains("inline-data segment with no data") => {
            Some(Fail::EmptyInline)
        }
        Error::InvalidArgument(m) if m.contains("raw segment") => Some(Fail::RawUnits),
        Error::InvalidArgument(m) if m.contains("control-segment flags") => Some(Fail::Flags),
        _ => None,
    }
}

fn build(c: &Ctrl, segs: &[Seg]) -> mlx5dv::Result<Wqe> {
    let b = WqeBuilder::new(c.opcode, c.qp_num)
        .opmod(c.opmod)
        .fence(c.fence)
        .flags(CtrlFlags::from_bits_retain(c.flags))
        .imm(c.imm)
        .dci_stream_channel_id(c.stream);
    segs.iter()
        .fold(b, |b, s| match s {
            Seg::Raddr(a, k) => b.raddr_seg(*a, *k),
            Seg::Data(n, k, a) => b.data_seg(*n, *k, *a),
            Seg::CmpSwp(cmp, swap) => b.atomic_cmp_swp_seg(*cmp, *swap),
            Seg::FetchAdd(add) => b.atomic_fetch_add_seg(*add),
            Seg::Inline(d) => b.inline_data_seg(d),
            Seg::Raw(r) => b.raw_seg(r),
        })
        .build()
}

/// A range of `usize` bounds, biased towards `len` and the type's ends.
fn bound(len: usize) -> impl Strategy<Value = Bound<usize>> {
    let v = prop_oneof![
        0..=len + 2,
        Just(usize::MAX),
        Just(usize::MAX - 1),
        any::<usize>()
    ];
    prop_oneof![
        v.clone().prop_map(Bound::Included),
        v.prop_map(Bound::Excluded),
        Just(Bound::Unbounded),
    ]
}

/// The range `(start, end)` in exact arithmetic, if it fits `len`.
fn fits(len: usize, start: Bound<usize>, end: Bound<usize>) -> Option<(usize, usize)> {
    let s: u128 = match start {
        Bound::Included(s) => s as u128,
        Bound::Excluded(s) => s as u128 + 1,
        Bound::Unbounded => 0,
    };
    let e: u128 = match end {
        Bound::Included(e) => e as u128 + 1,
        Bound::Excluded(e) => e as u128,
        Bound::Unbounded => len as u128,
    };
    (s <= e && e <= len as u128).then(|| (s as usize, (e - s) as usize))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
    ))]

    /// Any control segment and up to 80 segments: the builder fails
    /// exactly where the model does, with the same first rule, and
    /// otherwise writes the model's bytes.
    #[test]
    fn wqe_builder_matches_the_rules_and_the_header_setters(
        c in ctrl(),
        segs in prop::collection::vec(seg(), 0..80),
    ) {
        let got = build(&c, &segs);
        match (model(&c, &segs), got) {
            (Ok(bytes), Ok(wqe)) => {
                prop_assert_eq!(wqe.as_bytes(), &bytes[..]);
                prop_assert_eq!(usize::from(wqe.ds()) * DS_BYTES, bytes.len());
                prop_assert!(wqe.ds() >= 1 && wqe.ds() <= MAX_DS);
                prop_assert_eq!(usize::from(wqe.basic_blocks()), bytes.len().div_ceil(64));
                prop_assert_eq!(wqe.as_ptr() as usize % 16, 0);
                // What the builder made, from_bytes takes back unchanged.
                prop_assert_eq!(Wqe::from_bytes(wqe.as_bytes()).unwrap(), wqe);
            }
            (Err(want), Err(e)) => prop_assert_eq!(kind(&e), Some(want), "{}", e),
            (want, got) => prop_assert!(false, "model {:?}, builder {:?}", want, got.map(|w| w.ds())),
        }
    }

    /// Any bytes: from_bytes accepts exactly whole units, 1 to 63 of them,
    /// whose DS byte counts them, and keeps them as given.
    #[test]
    fn wqe_from_bytes_accepts_exactly_well_formed_wqes(
        mut bytes in prop::collection::vec(any::<u8>(), 0..1100),
        fix_ds in any::<bool>(),
        units in 0usize..70,
    ) {
        if fix_ds {
            // Often a plausible WQE: whole units and a DS byte that
            // counts them.
            bytes.resize(units * DS_BYTES, 0x5A);
            if bytes.len() > 7 {
                bytes[7] = units as u8;
            }
        }
        let n = bytes.len();
        let ok = n > 0 && n % DS_BYTES == 0 && n <= MAX_WQE_BYTES && bytes[7] as usize == n / DS_BYTES;
        match Wqe::from_bytes(&bytes) {
            Ok(wqe) => {
                prop_assert!(ok, "accepted {} bytes, DS byte {}", n, bytes[7]);
                prop_assert_eq!(wqe.as_bytes(), &bytes[..]);
                prop_assert_eq!(usize::from(wqe.ds()), n / DS_BYTES);
                prop_assert_eq!(usize::from(wqe.basic_blocks()), n.div_ceil(64));
                prop_assert_eq!(wqe.as_ptr() as usize % 16, 0);
                prop_assert_eq!(wqe.ctrl().qpn_ds.to_ne_bytes(), [bytes[4], bytes[5], bytes[6], bytes[7]]);
            }
            Err(e) => {
                prop_assert!(!ok, "refused a well-formed WQE: {}", e);
                let typed = matches!(e, Error::InvalidArgument(_))
                    || matches!(e, Error::OutOfRange { what: "WQE size in bytes", .. });
                prop_assert!(typed, "{:?}", e);
            }
        }
    }

    /// A remote buffer inside the address space: slice succeeds exactly
    /// when offset + len fits, with the address moved by the offset.
    #[test]
    fn remote_slice_is_refused_exactly_past_the_end(
        addr in any::<u64>(),
        len in prop_oneof![0u64..10_000, any::<u64>()],
        offset in prop_oneof![0u64..10_001, any::<u64>()],
        slen in prop_oneof![0u64..10_001, any::<u64>()],
    ) {
        // Keep the buffer inside the address space (addr + len <= 2^64);
        // one past it is the host table's known-bug row.
        let len = len.min(u64::MAX - addr);
        let buf = RemoteBuf { addr, len, rkey: 7 };
        let fits = offset as u128 + slen as u128 <= len as u128;
        match buf.slice(offset, slen) {
            Ok(s) => {
                prop_assert!(fits);
                prop_assert_eq!(s, RemoteBuf { addr: addr + offset, len: slen, rkey: 7 });
            }
            Err(e) => {
                prop_assert!(!fits, "refused a range that fits: {}", e);
                let typed = matches!(e, Error::OutOfRange { what: "remote range end", .. });
                prop_assert!(typed, "{:?}", e);
            }
        }
    }

    /// Any pair of bounds on a (fake) 64 KiB region: sge and remote
    /// succeed exactly when start <= end <= the region's length, at the
    /// region's address plus start.
    #[test]
    fn region_ranges_are_refused_exactly_outside_the_region(
        start in bound(LEN),
        end in bound(LEN),
    ) {
        let fx = Fx::new();
        let want = fits(LEN, start, end);
        match (fx.mr.sge((start, end)), want) {
            (Ok(s), Some((off, n))) => {
                prop_assert_eq!(s.addr(), fx.mr.addr() + off as u64);
                prop_assert_eq!(s.length() as usize, n);
                prop_assert_eq!(s.lkey(), fx.mr.lkey());
            }
            (Err(Error::OutOfRange { .. }), None) => {}
            (got, want) => prop_assert!(false, "sge gave {:?}, expected {:?}", got, want),
        }
        match (fx.mr.remote((start, end)), want) {
            (Ok(r), Some((off, n))) => {
                prop_assert_eq!(r.addr, fx.mr.addr() + off as u64);
                prop_assert_eq!(r.len, n as u64);
            }
            (Err(Error::OutOfRange { .. }), None) => {}
            (got, want) => prop_assert!(false, "remote gave {:?}, expected {:?}", got, want),
        }
    }

    /// Any interleaved entry on the region: accepted exactly when it has
    /// bytes and they lie inside the region.
    #[test]
    fn interleaved_entries_are_refused_exactly_outside_the_region(
        offset in prop_oneof![0..=LEN + 1, any::<usize>()],
        count in prop_oneof![0u32..=LEN as u32 + 1, any::<u32>()],
        skip in any::<u32>(),
    ) {
        let fx = Fx::new();
        let fits = count > 0 && offset as u128 + count as u128 <= LEN as u128;
        match MrInterleaved::new(&fx.mr, offset, count, skip) {
            Ok(_) => prop_assert!(fits),
            Err(Error::OutOfRange { .. }) => prop_assert!(!fits),
            Err(e) => prop_assert!(false, "{:?}", e),
        }
    }
}
