//! Layout tests: the Rust view of the structures this crate writes or hands
//! to C, against the numbers the C compiler measured (src/sys/layout_probe.c).
//!
//! bindgen's own layout assertions (compiled into the bindings) already check
//! every generated struct against clang; these add the hand-written
//! `mlx5_wqe_ctrl_seg` and a second opinion from the compiler that builds the
//! shims.

use super::*;
use core::mem::{align_of, offset_of, size_of};

extern "C" {
    static mlx5dv_sys_layout_probe: [u64; 39];
    static mlx5dv_sys_layout_probe_len: usize;
}

/// The Rust side of each entry, in the order of the C table.
fn rust_layout() -> Vec<(&'static str, usize)> {
    macro_rules! sa {
        ($t:ty) => {
            [
                (concat!("sizeof ", stringify!($t)), size_of::<$t>()),
                (concat!("alignof ", stringify!($t)), align_of::<$t>()),
            ]
        };
    }
    macro_rules! off {
        ($t:ty, $f:ident) => {
            [(
                concat!("offsetof ", stringify!($t), ".", stringify!($f)),
                offset_of!($t, $f),
            )]
        };
    }
    [
        &sa!(mlx5_wqe_ctrl_seg)[..],
        &off!(mlx5_wqe_ctrl_seg, opmod_idx_opcode),
        &off!(mlx5_wqe_ctrl_seg, qpn_ds),
        &off!(mlx5_wqe_ctrl_seg, signature),
        &off!(mlx5_wqe_ctrl_seg, dci_stream_channel_id),
        &off!(mlx5_wqe_ctrl_seg, fm_ce_se),
        &off!(mlx5_wqe_ctrl_seg, imm),
        &sa!(mlx5_wqe_data_seg),
        &sa!(mlx5_wqe_raddr_seg),
        &sa!(mlx5dv_mr_interleaved),
        &sa!(ibv_sge),
        &sa!(ibv_data_buf),
        &sa!(ibv_qp_ex),
        &off!(ibv_qp_ex, wr_id),
        &off!(ibv_qp_ex, wr_flags),
        &off!(ibv_qp_ex, wr_start),
        &off!(ibv_qp_ex, wr_complete),
        &off!(ibv_qp_ex, wr_abort),
        &sa!(mlx5dv_qp_ex),
        &off!(mlx5dv_qp_ex, wr_set_dc_addr),
        &off!(mlx5dv_qp_ex, wr_mr_interleaved),
        &off!(mlx5dv_qp_ex, wr_mr_list),
        &off!(mlx5dv_qp_ex, wr_raw_wqe),
        &off!(mlx5dv_qp_ex, wr_set_dc_addr_stream),
        &off!(mlx5dv_qp_ex, wr_memcpy),
        &sa!(ibv_cq_ex),
        &off!(ibv_cq_ex, wr_id),
        &off!(ibv_cq_ex, status),
        &off!(ibv_cq_ex, start_poll),
        &off!(ibv_cq_ex, read_opcode),
    ]
    .concat()
}

#[test]
fn rust_layouts_match_the_c_compiler() {
    let rust = rust_layout();
    // SAFETY: both statics are defined once in layout_probe.c, immutable,
    // and the array has `mlx5dv_sys_layout_probe_len` elements.
    let c = unsafe {
        assert_eq!(
            mlx5dv_sys_layout_probe_len,
            rust.len(),
            "probe table length"
        );
        &mlx5dv_sys_layout_probe[..]
    };
    assert_eq!(c.len(), rust.len());
    for ((what, r), c) in rust.iter().zip(c) {
        assert_eq!(*r as u64, *c, "{what}: Rust {r}, C {c}");
    }
}

#[test]
fn ctrl_seg_is_sixteen_bytes_with_the_be16_at_offset_nine() {
    assert_eq!(size_of::<mlx5_wqe_ctrl_seg>(), 16);
    assert_eq!(align_of::<mlx5_wqe_ctrl_seg>(), 4);
    assert_eq!(offset_of!(mlx5_wqe_ctrl_seg, dci_stream_channel_id), 9);
    assert_eq!(offset_of!(mlx5_wqe_ctrl_seg, imm), 12);
}

#[test]
fn ctrl_seg_shim_writes_the_bytes_the_header_defines() {
    let mut seg = mlx5_wqe_ctrl_seg::default();
    // SAFETY: `seg` is a valid, writable mlx5_wqe_ctrl_seg with the C layout
    // (tested above); the shim only stores into it.
    unsafe {
        mlx5dv_set_ctrl_seg(
            &mut seg,
            0xbeef,
            0x0a,
            0x5c,
            0x00ab_cdef,
            0x08,
            0x03,
            0x7e,
            0x1234_5678,
        );
    }
    // opmod << 24 | pi << 8 | opcode, big-endian.
    assert_eq!(seg.opmod_idx_opcode, u32::from_be(0x5cbe_ef0a));
    // qpn << 8 | ds, big-endian.
    assert_eq!(seg.qpn_ds, u32::from_be(0xabcd_ef03));
    assert_eq!(seg.signature, 0x7e);
    assert_eq!(seg.fm_ce_se, 0x08);
    assert_eq!(seg.imm, 0x1234_5678);
    assert_eq!(seg.dci_stream_channel_id, [0, 0]);
}
