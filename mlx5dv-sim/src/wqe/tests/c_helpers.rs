//! A WQE built in C by the installed header's own inline helpers
//! (`mlx5dv_set_ctrl_seg`, `mlx5dv_set_dgram_seg`, `mlx5dv_set_data_seg`)
//! parses to the values given to them: byte order and field placement
//! agree with rdma-core's. Skipped only where the header is not installed.

use super::c_layout::{include_dir, run_c};
use crate::wqe::layout::opcode;
use crate::wqe::{parse, Body, Data, Fence, QpKind, QpView, Sge};

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

#[test]
fn a_wqe_built_by_the_header_helpers_parses() {
    let Some(include) = include_dir() else {
        eprintln!("skipped: <infiniband/mlx5dv.h> is not installed (set RDMA_CORE_INCLUDE_DIR)");
        return;
    };
    let hex = run_c(&include, "dcwrite", DC_WRITE);
    let hex = hex.trim();
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
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
