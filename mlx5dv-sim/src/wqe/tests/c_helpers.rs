//! A WQE built in C by the installed header's own inline helpers
//! (`mlx5dv_set_ctrl_seg`, `mlx5dv_set_dgram_seg`, `mlx5dv_set_data_seg`)
//! and structs (`mlx5_wqe_inl_data_seg`) parses to the values given to
//! them: byte order and field placement agree with rdma-core's. Skipped
//! only where the header is not installed.

use super::c_layout::{include_dir, run_c};
use crate::wqe::layout::opcode;
use crate::wqe::{parse, Body, Data, Fence, Part, QpKind, QpView, Sge};

/// A DCI RDMA write built with the header's own inline helpers
/// (`mlx5dv_set_ctrl_seg`, `mlx5dv_set_dgram_seg`, `mlx5dv_set_data_seg`),
/// printed as hex and parsed here.
const DC_WRITE: &str = r#"
int main(void) {
    unsigned char buf[96];
    unsigned char rmac[6] = {0}, rgid[16] = {0xfe, 0x80, [15] = 9};
    struct mlx5_wqe_ctrl_seg *ctrl = (void *)buf;
    struct mlx5_wqe_datagram_seg *dg = (void *)(buf + 16);
    struct mlx5_wqe_raddr_seg *raddr = (void *)(buf + 64);
    struct mlx5_wqe_data_seg *data = (void *)(buf + 80);
    memset(buf, 0, sizeof(buf));
    mlx5dv_set_ctrl_seg(ctrl, 0x1234, MLX5_OPCODE_RDMA_WRITE_IMM, 0, 0xabcdef,
                        MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_FENCE, 6, 0, htobe32(0x01020304));
    mlx5dv_set_dgram_seg(dg, 0x1122334455667788ULL, 0x00777777, 1, 0x35, 0x02, 0x4321,
                         rmac, 3, 64, (1u << 30) | (5u << 20) | 0xabcde, rgid);
    raddr->raddr = htobe64(0x00007f0011223344ULL);
    raddr->rkey = htobe32(0xcafe);
    raddr->reserved = 0;
    mlx5dv_set_data_seg(data, 4096, 0x55aa, 0x10000);
    for (unsigned i = 0; i < sizeof(buf); i++)
        printf("%02x", buf[i]);
    printf("\n");
    return 0;
}
"#;

/// Runs the C program `body`, which prints a WQE as hex, and returns it.
fn wqe_from_c(include: &std::path::PathBuf, tag: &str, body: &str) -> Vec<u8> {
    let hex = run_c(include, tag, body);
    let hex = hex.trim();
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn a_wqe_built_by_the_header_helpers_parses() {
    let Some(include) = include_dir() else {
        eprintln!("skipped: <infiniband/mlx5dv.h> is not installed (set RDMA_CORE_INCLUDE_DIR)");
        return;
    };
    let bytes = wqe_from_c(&include, "dcwrite", DC_WRITE);
    let qp = QpView {
        qpn: 0xab_cdef,
        kind: QpKind::Dci,
        max_inline: 0,
        max_send_sge: 1,
        sq_wqe_cnt: 64,
        max_wqe_size: 1024,
        dci_streams: false,
        signature: false,
        expected_wqe_index: Some(0x1234),
    };
    let w = parse(&bytes, &qp).unwrap();
    assert_eq!(
        (w.ctrl.opcode, w.ctrl.ds, w.ctrl.imm),
        (opcode::RDMA_WRITE_IMM, 6, 0x0102_0304)
    );
    assert_eq!(
        (w.ctrl.signaled, w.ctrl.fence),
        (true, Fence::SmallAndFence)
    );
    let Body::RdmaWriteImm(r) = w.body else {
        panic!("{:?}", w.body)
    };
    let av = r.av.unwrap();
    assert_eq!(
        (av.dc_key, av.dctn, av.ext),
        (0x1122_3344_5566_7788, 0x77_7777, true)
    );
    assert_eq!(
        (av.stat_rate, av.sl, av.src_path_bits, av.rlid),
        (3, 5, 2, 0x4321)
    );
    assert_eq!(
        (
            av.tclass,
            av.hop_limit,
            av.grh,
            av.sgid_index,
            av.flow_label
        ),
        (3, 64, true, 5, 0xabcde)
    );
    assert_eq!((av.rgid[0], av.rgid[1], av.rgid[15]), (0xfe, 0x80, 9));
    assert_eq!((r.raddr, r.rkey), (0x7f00_1122_3344, 0xcafe));
    assert_eq!(
        r.data,
        Data::Sges(vec![Sge {
            lkey: 0x55aa,
            addr: 0x10000,
            len: 4096
        }])
    );
}

/// An RC send as UCX's `am_zcopy` writes it on `rc_mlx5`: the control
/// segment (`mlx5dv_set_ctrl_seg`), an inline header segment
/// (`struct mlx5_wqe_inl_data_seg` with `MLX5_INLINE_SEG`, then the bytes,
/// padded to 16), then two pointer segments (`mlx5dv_set_data_seg`).
const INLINE_HEADER_SEND: &str = r#"
int main(void) {
    unsigned char buf[80];
    const char hdr[] = "am-hdr:0123456789";  /* 17 bytes: two units */
    struct mlx5_wqe_ctrl_seg *ctrl = (void *)buf;
    struct mlx5_wqe_inl_data_seg *inl = (void *)(buf + 16);
    struct mlx5_wqe_data_seg *data = (void *)(buf + 48);
    memset(buf, 0xa5, sizeof(buf));  /* stale: the header's padding stays so */
    memset(ctrl, 0, sizeof(*ctrl));  /* dci_stream_channel_id 0 */
    mlx5dv_set_ctrl_seg(ctrl, 7, MLX5_OPCODE_SEND, 0, 0x000123, MLX5_WQE_CTRL_CQ_UPDATE,
                        5, 0, 0);
    inl->byte_count = htobe32((sizeof(hdr) - 1) | MLX5_INLINE_SEG);
    memcpy(inl + 1, hdr, sizeof(hdr) - 1);
    mlx5dv_set_data_seg(&data[0], 1000, 0x1111, 0x7f0000001000ULL);
    mlx5dv_set_data_seg(&data[1], 24, 0x2222, 0x7f0000802000ULL);
    for (unsigned i = 0; i < sizeof(buf); i++)
        printf("%02x", buf[i]);
    printf("\n");
    return 0;
}
"#;

#[test]
fn an_inline_header_then_two_pointer_segments_parses_into_parts() {
    let Some(include) = include_dir() else {
        eprintln!("skipped: <infiniband/mlx5dv.h> is not installed (set RDMA_CORE_INCLUDE_DIR)");
        return;
    };
    let bytes = wqe_from_c(&include, "inlhdr", INLINE_HEADER_SEND);
    let qp = QpView {
        qpn: 0x123,
        kind: QpKind::Rc,
        max_inline: 64,
        max_send_sge: 2,
        sq_wqe_cnt: 64,
        max_wqe_size: 1024,
        dci_streams: false,
        signature: false,
        expected_wqe_index: Some(7),
    };
    let w = parse(&bytes, &qp).unwrap();
    assert_eq!((w.ctrl.opcode, w.ctrl.ds), (opcode::SEND, 5));
    let Body::Send(m) = w.body else {
        panic!("{:?}", w.body)
    };
    let sge = |lkey, addr, len| Part::Pointer(Sge { lkey, addr, len });
    assert_eq!(
        m.data,
        Data::Gather(vec![
            Part::Inline(b"am-hdr:0123456789".to_vec()),
            sge(0x1111, 0x7f00_0000_1000, 1000),
            sge(0x2222, 0x7f00_0080_2000, 24),
        ])
    );
    assert_eq!(m.data.len(), 17 + 1000 + 24);
}
