//! The builders' bytes against the header's own inline setters (called
//! through the crate's shims) or, where mlx5dv.h has no setter, against the
//! header's struct written field by field as the provider does; and every
//! validation rule at its boundary.

use super::*;
use std::mem::size_of;

/// The in-memory bytes of a segment struct of mlx5dv.h.
fn bytes_of<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: only used with the header's segment structs
    // (mlx5_wqe_ctrl_seg, _data_seg, _raddr_seg, _atomic_seg,
    // _inl_data_seg), plain integers and byte arrays with no padding (their
    // sizes are the sums of their fields, checked by the layout tests), so
    // every byte is initialised; `v` is a valid reference for the read.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }.to_vec()
}

/// What `mlx5dv_set_ctrl_seg` writes, with WQE index and signature 0 (left
/// to the driver) and `imm` handed over big-endian as the header asks.
fn header_ctrl(opcode: u8, opmod: u8, qp_num: u32, fm_ce_se: u8, ds: u8, imm_host: u32) -> Vec<u8> {
    let mut seg = ffi::mlx5_wqe_ctrl_seg::default();
    // SAFETY: `seg` is a valid, writable mlx5_wqe_ctrl_seg with the C
    // layout (src/sys/layout.rs); the shim only stores into it.
    unsafe {
        ffi::mlx5dv_set_ctrl_seg(
            &mut seg,
            0,
            opcode,
            opmod,
            qp_num,
            fm_ce_se,
            ds,
            0,
            imm_host.to_be(),
        )
    };
    bytes_of(&seg)
}

/// What `mlx5dv_set_data_seg` writes.
fn header_data(length: u32, lkey: u32, addr: u64) -> Vec<u8> {
    let mut seg = ffi::mlx5_wqe_data_seg::default();
    let addr = usize::try_from(addr).expect("64-bit target");
    // SAFETY: `seg` is a valid, writable mlx5_wqe_data_seg; the shim only
    // stores into it.
    unsafe { ffi::mlx5dv_set_data_seg(&mut seg, length, lkey, addr) };
    bytes_of(&seg)
}

/// `struct mlx5_wqe_raddr_seg` as rdma-core's set_raddr_seg writes it (the
/// header has no setter).
fn header_raddr(raddr: u64, rkey: u32) -> Vec<u8> {
    bytes_of(&ffi::mlx5_wqe_raddr_seg {
        raddr: raddr.to_be(),
        rkey: rkey.to_be(),
        reserved: 0,
    })
}

/// `struct mlx5_wqe_atomic_seg` field by field.
fn header_atomic(swap_add: u64, compare: u64) -> Vec<u8> {
    bytes_of(&ffi::mlx5_wqe_atomic_seg {
        swap_add: swap_add.to_be(),
        compare: compare.to_be(),
    })
}

/// The segment bytes after the control segment.
fn segs(wqe: &Wqe) -> &[u8] {
    &wqe.as_bytes()[DS_BYTES..]
}

fn out_of_range(r: Result<Wqe>, what: &str, value: u64) {
    match r {
        Err(Error::OutOfRange {
            what: w,
            value: v,
            ref limit,
        }) => {
            assert_eq!((w, v), (what, value), "{limit}");
            assert!(!limit.is_empty());
        }
        other => panic!("expected OutOfRange {what} = {value}, got {other:?}"),
    }
}

fn invalid(r: Result<Wqe>, needle: &str) {
    match r {
        Err(Error::InvalidArgument(msg)) => assert!(msg.contains(needle), "{msg}"),
        other => panic!("expected InvalidArgument ({needle}), got {other:?}"),
    }
}

#[test]
fn ctrl_seg_matches_mlx5dv_set_ctrl_seg() {
    let fences = [FenceMode::None, FenceMode::InitiatorSmall, FenceMode::Fence];
    let flag_sets = [
        CtrlFlags::empty(),
        CtrlFlags::CQ_UPDATE,
        CtrlFlags::SOLICITED,
        CtrlFlags::all(),
    ];
    for opcode in Opcode::ALL {
        for (opmod, qp_num, imm) in [
            (0, 0, 0),
            (0xff, MAX_QP_NUM, u32::MAX),
            (0x5c, 0x00ab_cdef, 0x1234_5678),
            (1, 1, 1),
        ] {
            for fence in fences {
                for flags in flag_sets {
                    let wqe = WqeBuilder::new(opcode, qp_num)
                        .opmod(opmod)
                        .fence(fence)
                        .flags(flags)
                        .imm(imm)
                        .build()
                        .unwrap();
                    let fm_ce_se = fence.bits() | flags.bits();
                    assert_eq!(
                        wqe.as_bytes(),
                        header_ctrl(opcode.raw(), opmod, qp_num, fm_ce_se, 1, imm),
                        "{opcode:?} opmod {opmod} qpn {qp_num:#x} {fence:?} {flags:?}"
                    );
                    assert_eq!(bytes_of(&wqe.ctrl()), wqe.as_bytes());
                }
            }
        }
    }
}

#[test]
fn ctrl_seg_ds_matches_the_setter_up_to_the_maximum() {
    for ds in [1u8, 2, 3, 4, 5, 62, MAX_DS] {
        let body = vec![0xa5; (usize::from(ds) - 1) * DS_BYTES];
        let mut b = WqeBuilder::new(Opcode::Send, 0x12_3456).signaled();
        if !body.is_empty() {
            b = b.raw_seg(&body);
        }
        let wqe = b.build().unwrap();
        assert_eq!(wqe.ds(), ds);
        assert_eq!(wqe.as_bytes().len(), usize::from(ds) * DS_BYTES);
        let fm_ce_se = CtrlFlags::CQ_UPDATE.bits();
        assert_eq!(
            &wqe.as_bytes()[..DS_BYTES],
            header_ctrl(Opcode::Send.raw(), 0, 0x12_3456, fm_ce_se, ds, 0)
        );
        assert_eq!(segs(&wqe), body);
        // Four 16-byte units per 64-byte basic block.
        let blocks = [0, 1, 1, 1, 1, 2];
        let want = blocks.get(usize::from(ds)).copied().unwrap_or(16);
        assert_eq!(wqe.basic_blocks(), want, "ds {ds}");
    }
}

#[test]
fn signaled_and_solicited_add_the_header_bits() {
    let wqe = WqeBuilder::new(Opcode::SendImm, 7)
        .solicited()
        .signaled()
        .build()
        .unwrap();
    assert_eq!(
        wqe.ctrl().fm_ce_se,
        (ffi::MLX5_WQE_CTRL_CQ_UPDATE | ffi::MLX5_WQE_CTRL_SOLICITED) as u8
    );
}

#[test]
fn wqe_index_and_signature_are_left_zero_for_the_driver() {
    let wqe = WqeBuilder::new(Opcode::RdmaWriteImm, MAX_QP_NUM)
        .opmod(0xff)
        .imm(u32::MAX)
        .fence(FenceMode::Fence)
        .flags(CtrlFlags::all())
        .build()
        .unwrap();
    let ctrl = wqe.ctrl();
    // The pi bits 23..8, which the provider overwrites with its index.
    assert_eq!(u32::from_be(ctrl.opmod_idx_opcode) & 0x00ff_ff00, 0);
    assert_eq!(ctrl.signature, 0);
    assert_eq!(ctrl.dci_stream_channel_id, [0, 0]);
}

#[test]
fn dci_stream_channel_id_is_big_endian_at_offset_nine() {
    for id in [0u16, 1, 0x1234, u16::MAX] {
        let wqe = WqeBuilder::new(Opcode::Send, 1)
            .dci_stream_channel_id(id)
            .build()
            .unwrap();
        assert_eq!(wqe.ctrl().dci_stream_channel_id, id.to_be_bytes());
        assert_eq!(wqe.as_bytes()[9..11], id.to_be_bytes());
    }
}

#[test]
fn data_seg_matches_mlx5dv_set_data_seg() {
    for (len, lkey, addr) in [
        (0, 0, 0),
        (MAX_DATA_SEG_BYTE_COUNT, u32::MAX, u64::MAX),
        (64, 0x8899_aabb, 0xfedc_ba98_7654_3210),
        (1, ffi::MLX5_INVALID_LKEY, 0x8000_0000_0000_0008),
    ] {
        let wqe = WqeBuilder::new(Opcode::Send, 1)
            .data_seg(len, lkey, addr)
            .build()
            .unwrap();
        assert_eq!(segs(&wqe), header_data(len, lkey, addr));
        assert_eq!(wqe.ds(), 2);
    }
}

#[test]
fn data_seg_byte_count_stops_below_the_inline_bit() {
    let ok = WqeBuilder::new(Opcode::Send, 1).data_seg(MAX_DATA_SEG_BYTE_COUNT, 1, 1);
    assert!(ok.build().is_ok());
    assert_eq!(
        MAX_DATA_SEG_BYTE_COUNT + 1,
        ffi::MLX5_INLINE_SEG,
        "the limit is the bit below MLX5_INLINE_SEG"
    );
    for len in [MAX_DATA_SEG_BYTE_COUNT + 1, u32::MAX] {
        let r = WqeBuilder::new(Opcode::Send, 1).data_seg(len, 1, 1).build();
        out_of_range(r, "data segment byte count", u64::from(len));
    }
}

#[test]
fn raddr_seg_matches_the_header_struct() {
    for (raddr, rkey) in [
        (0, 0),
        (u64::MAX, u32::MAX),
        (0x7f00_1234_5678_9abc, 0xa1b2_c3d4),
    ] {
        let wqe = WqeBuilder::new(Opcode::RdmaRead, 1)
            .raddr_seg(raddr, rkey)
            .build()
            .unwrap();
        assert_eq!(segs(&wqe), header_raddr(raddr, rkey));
    }
}

#[test]
fn atomic_segs_match_the_header_struct() {
    for (a, b) in [(0, 0), (u64::MAX, u64::MAX), (1, 0xfedc_ba98_7654_3210)] {
        let cs = WqeBuilder::new(Opcode::AtomicCs, 1)
            .atomic_cmp_swp_seg(a, b)
            .build()
            .unwrap();
        // Compare-and-swap: swap_add holds the swap value.
        assert_eq!(segs(&cs), header_atomic(b, a));
        let fa = WqeBuilder::new(Opcode::AtomicFa, 1)
            .atomic_fetch_add_seg(a)
            .build()
            .unwrap();
        assert_eq!(segs(&fa), header_atomic(a, 0));
    }
}

#[test]
fn inline_data_seg_is_the_header_count_then_padded_data() {
    let header = size_of::<ffi::mlx5_wqe_inl_data_seg>();
    for len in [1usize, 12, 13, 28, 29, 100] {
        let data: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
        let wqe = WqeBuilder::new(Opcode::Send, 1)
            .inline_data_seg(&data)
            .build()
            .unwrap();
        let mut want = bytes_of(&ffi::mlx5_wqe_inl_data_seg {
            byte_count: (len as u32 | ffi::MLX5_INLINE_SEG).to_be(),
        });
        want.extend_from_slice(&data);
        want.resize((header + len).div_ceil(DS_BYTES) * DS_BYTES, 0);
        assert_eq!(segs(&wqe), want, "len {len}");
    }
}

#[test]
fn inline_data_seg_fills_the_wqe_and_no_more() {
    // 62 units after the control segment, 4 of them the byte count.
    let most = usize::from(MAX_DS - 1) * DS_BYTES - 4;
    let wqe = WqeBuilder::new(Opcode::Send, 1)
        .inline_data_seg(&vec![1; most])
        .build()
        .unwrap();
    assert_eq!(wqe.ds(), MAX_DS);
    let r = WqeBuilder::new(Opcode::Send, 1)
        .inline_data_seg(&vec![1; most + 1])
        .build();
    out_of_range(r, "WQE size in 16-byte units (DS)", u64::from(MAX_DS) + 1);
    invalid(
        WqeBuilder::new(Opcode::Send, 1)
            .inline_data_seg(&[])
            .build(),
        "no data",
    );
}

#[test]
fn whole_rdma_write_wqe_byte_by_byte() {
    let wqe = WqeBuilder::new(Opcode::RdmaWrite, 0x00ab_cdef)
        .fence(FenceMode::InitiatorSmall)
        .signaled()
        .imm(0x0102_0304)
        .raddr_seg(0x1122_3344_5566_7788, 0x99aa_bbcc)
        .data_seg(0x0000_1000, 0xddee_ff00, 0x0123_4567_89ab_cdef)
        .build()
        .unwrap();
    #[rustfmt::skip]
    let want: [u8; 48] = [
        // ctrl: opmod 0, WQE index 0, opcode 0x08 | QPN 0xabcdef, DS 3
        0x00, 0x00, 0x00, 0x08, 0xab, 0xcd, 0xef, 0x03,
        // signature 0, stream 0, fm_ce_se 0x20 | 0x08, imm
        0x00, 0x00, 0x00, 0x28, 0x01, 0x02, 0x03, 0x04,
        // raddr seg: raddr, rkey, reserved
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
        0x99, 0xaa, 0xbb, 0xcc, 0x00, 0x00, 0x00, 0x00,
        // data seg: byte_count, lkey, addr
        0x00, 0x00, 0x10, 0x00, 0xdd, 0xee, 0xff, 0x00,
        0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
    ];
    assert_eq!(wqe.as_bytes(), want);
    assert_eq!((wqe.ds(), wqe.basic_blocks()), (3, 1));
    let mut whole = header_ctrl(
        Opcode::RdmaWrite.raw(),
        0,
        0x00ab_cdef,
        0x28,
        3,
        0x0102_0304,
    );
    whole.extend(header_raddr(0x1122_3344_5566_7788, 0x99aa_bbcc));
    whole.extend(header_data(0x1000, 0xddee_ff00, 0x0123_4567_89ab_cdef));
    assert_eq!(wqe.as_bytes(), whole);
}

#[test]
fn the_pointer_is_the_aligned_start_of_the_bytes() {
    let wqe = WqeBuilder::new(Opcode::Nop, 0).build().unwrap();
    assert_eq!(wqe.as_ptr(), wqe.as_bytes().as_ptr().cast());
    assert_eq!(wqe.as_ptr() as usize % 16, 0);
    assert_eq!(wqe.as_bytes().len(), DS_BYTES);
    assert_eq!(wqe.as_ref(), wqe.as_bytes());
}

#[test]
fn qp_number_is_24_bits() {
    for qpn in [0, 1, MAX_QP_NUM] {
        let wqe = WqeBuilder::new(Opcode::Nop, qpn).build().unwrap();
        assert_eq!(u32::from_be(wqe.ctrl().qpn_ds) >> 8, qpn);
    }
    for qpn in [MAX_QP_NUM + 1, u32::MAX] {
        let r = WqeBuilder::new(Opcode::Nop, qpn).build();
        out_of_range(r, "QP number", u64::from(qpn));
    }
}

#[test]
fn ds_is_at_most_63_units() {
    let fill = vec![0; usize::from(MAX_DS - 1) * DS_BYTES];
    let full = WqeBuilder::new(Opcode::Send, 1).raw_seg(&fill);
    assert_eq!(full.build().unwrap().ds(), MAX_DS);
    let r = WqeBuilder::new(Opcode::Send, 1)
        .raw_seg(&fill)
        .data_seg(1, 1, 1)
        .build();
    out_of_range(r, "WQE size in 16-byte units (DS)", 64);
    // Segment by segment: the 63rd unit fits, the 64th does not.
    let mut b = WqeBuilder::new(Opcode::Send, 1);
    for _ in 1..MAX_DS {
        b = b.data_seg(8, 2, 3);
    }
    assert_eq!(b.build().unwrap().ds(), MAX_DS);
    let mut b = WqeBuilder::new(Opcode::Send, 1);
    for _ in 0..MAX_DS {
        b = b.raddr_seg(1, 2);
    }
    out_of_range(b.build(), "WQE size in 16-byte units (DS)", 64);
    // A huge inline segment is refused, not truncated or panicked on.
    let r = WqeBuilder::new(Opcode::Send, 1)
        .inline_data_seg(&vec![0; 1 << 20])
        .build();
    out_of_range(
        r,
        "WQE size in 16-byte units (DS)",
        1 + (4 + (1 << 20)) / 16 + 1,
    );
}

#[test]
fn the_first_error_is_kept() {
    let r = WqeBuilder::new(Opcode::Send, 1 << 24)
        .data_seg(u32::MAX, 0, 0)
        .inline_data_seg(&[])
        .build();
    out_of_range(r, "QP number", 1 << 24);
    let r = WqeBuilder::new(Opcode::Send, 1)
        .data_seg(u32::MAX, 0, 0)
        .raw_seg(&[0; 3])
        .build();
    out_of_range(r, "data segment byte count", u64::from(u32::MAX));
}

#[test]
fn raw_seg_is_whole_units() {
    for len in [0usize, 1, 15, 17, 31] {
        invalid(
            WqeBuilder::new(Opcode::Send, 1)
                .raw_seg(&vec![0; len])
                .build(),
            "whole 16-byte units",
        );
    }
    for len in [16usize, 32, 48] {
        let bytes: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let wqe = WqeBuilder::new(Opcode::Send, 1)
            .raw_seg(&bytes)
            .build()
            .unwrap();
        assert_eq!(segs(&wqe), bytes);
    }
}

#[test]
fn unknown_flag_bits_are_refused() {
    for bits in [0x01u8, 0x04, 0x20, 0x80, 0xff] {
        let flags = CtrlFlags::from_bits_retain(bits);
        let r = WqeBuilder::new(Opcode::Send, 1).flags(flags).build();
        invalid(r, "MLX5_WQE_CTRL_CQ_UPDATE");
    }
}

#[test]
fn opcodes_are_the_header_values() {
    let header = [
        (Opcode::Nop, ffi::MLX5_OPCODE_NOP),
        (Opcode::SendInval, ffi::MLX5_OPCODE_SEND_INVAL),
        (Opcode::RdmaWrite, ffi::MLX5_OPCODE_RDMA_WRITE),
        (Opcode::RdmaWriteImm, ffi::MLX5_OPCODE_RDMA_WRITE_IMM),
        (Opcode::Send, ffi::MLX5_OPCODE_SEND),
        (Opcode::SendImm, ffi::MLX5_OPCODE_SEND_IMM),
        (Opcode::Tso, ffi::MLX5_OPCODE_TSO),
        (Opcode::RdmaRead, ffi::MLX5_OPCODE_RDMA_READ),
        (Opcode::AtomicCs, ffi::MLX5_OPCODE_ATOMIC_CS),
        (Opcode::AtomicFa, ffi::MLX5_OPCODE_ATOMIC_FA),
        (Opcode::AtomicMaskedCs, ffi::MLX5_OPCODE_ATOMIC_MASKED_CS),
        (Opcode::AtomicMaskedFa, ffi::MLX5_OPCODE_ATOMIC_MASKED_FA),
        (Opcode::Fmr, ffi::MLX5_OPCODE_FMR),
        (Opcode::LocalInval, ffi::MLX5_OPCODE_LOCAL_INVAL),
        (Opcode::ConfigCmd, ffi::MLX5_OPCODE_CONFIG_CMD),
        (Opcode::SetPsv, ffi::MLX5_OPCODE_SET_PSV),
        (Opcode::Umr, ffi::MLX5_OPCODE_UMR),
        (Opcode::TagMatching, ffi::MLX5_OPCODE_TAG_MATCHING),
        (Opcode::FlowTblAccess, ffi::MLX5_OPCODE_FLOW_TBL_ACCESS),
        (Opcode::Mmo, ffi::MLX5_OPCODE_MMO),
    ];
    assert_eq!(header.len(), Opcode::ALL.len());
    for ((op, value), listed) in header.into_iter().zip(Opcode::ALL) {
        assert_eq!(op, listed);
        assert_eq!(u32::from(op.raw()), value, "{op:?}");
        assert_eq!(Opcode::try_from(op.raw()).unwrap(), op);
    }
    for raw in 0..=u8::MAX {
        if !Opcode::ALL.iter().any(|op| op.raw() == raw) {
            assert!(matches!(
                Opcode::try_from(raw),
                Err(Error::InvalidArgument(_))
            ));
        }
    }
    assert_eq!(FenceMode::Fence.bits(), ffi::MLX5_WQE_CTRL_FENCE as u8);
    assert_eq!(
        FenceMode::InitiatorSmall.bits(),
        ffi::MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE as u8
    );
    assert_eq!(FenceMode::default().bits(), 0);
}

#[test]
fn from_bytes_round_trips_and_checks_ds() {
    let built = WqeBuilder::new(Opcode::RdmaWrite, 0x42)
        .raddr_seg(1, 2)
        .data_seg(3, 4, 5)
        .build()
        .unwrap();
    let copied = Wqe::from_bytes(built.as_bytes()).unwrap();
    assert_eq!(copied, built);
    assert_eq!(copied.ds(), 3);
    // Lengths: empty, not whole units, past the maximum.
    for len in [0usize, 8, 17, 47] {
        invalid(Wqe::from_bytes(&vec![0; len]), "whole 16-byte units");
    }
    let mut big = vec![0; MAX_WQE_BYTES + DS_BYTES];
    big[7] = MAX_DS + 1;
    out_of_range(Wqe::from_bytes(&big), "WQE size in bytes", big.len() as u64);
    // The largest: 63 units with DS 63.
    let mut max = vec![0; MAX_WQE_BYTES];
    max[7] = MAX_DS;
    assert_eq!(Wqe::from_bytes(&max).unwrap().ds(), MAX_DS);
    // DS that disagrees with the length, either way, or with the reserved
    // bits above it set.
    for ds_byte in [0u8, 2, 4, 3 | 0x40, 3 | 0x80] {
        let mut bytes = built.as_bytes().to_vec();
        bytes[7] = ds_byte;
        invalid(Wqe::from_bytes(&bytes), "DS byte");
    }
}

#[test]
fn debug_shows_the_units_in_hex() {
    let wqe = WqeBuilder::new(Opcode::Send, 1)
        .data_seg(1, 2, 3)
        .build()
        .unwrap();
    let text = format!("{wqe:?}");
    assert!(text.contains("ds: 2"), "{text}");
    assert!(text.contains("0000000a00000102"), "{text}");
    assert!(format!("{:?}", WqeBuilder::new(Opcode::Nop, 0)).contains("Nop"));
}
