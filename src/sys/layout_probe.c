/*
 * Layout facts measured by the C compiler, for the Rust layout tests.
 *
 * bindgen asserts the layouts it generates against clang's view; this table
 * adds the C compiler's own numbers for the types whose Rust definition is
 * written by hand (struct mlx5_wqe_ctrl_seg, which bindgen cannot lay out)
 * and for the structures the recording-provider tests fill from Rust.
 * The order of the entries is the order of `LayoutProbe` in
 * src/sys/layout.rs.
 */
#include <stddef.h>
#include <stdint.h>
#include "wrapper.h"

#define PROBE_STRUCT(type) sizeof(struct type), _Alignof(struct type)

const uint64_t mlx5dv_sys_layout_probe[] = {
	PROBE_STRUCT(mlx5_wqe_ctrl_seg),
	offsetof(struct mlx5_wqe_ctrl_seg, opmod_idx_opcode),
	offsetof(struct mlx5_wqe_ctrl_seg, qpn_ds),
	offsetof(struct mlx5_wqe_ctrl_seg, signature),
	offsetof(struct mlx5_wqe_ctrl_seg, dci_stream_channel_id),
	offsetof(struct mlx5_wqe_ctrl_seg, fm_ce_se),
	offsetof(struct mlx5_wqe_ctrl_seg, imm),
	PROBE_STRUCT(mlx5_wqe_data_seg),
	PROBE_STRUCT(mlx5_wqe_raddr_seg),
	PROBE_STRUCT(mlx5dv_mr_interleaved),
	PROBE_STRUCT(ibv_sge),
	PROBE_STRUCT(ibv_data_buf),
	PROBE_STRUCT(ibv_qp_ex),
	offsetof(struct ibv_qp_ex, wr_id),
	offsetof(struct ibv_qp_ex, wr_flags),
	offsetof(struct ibv_qp_ex, wr_start),
	offsetof(struct ibv_qp_ex, wr_complete),
	offsetof(struct ibv_qp_ex, wr_abort),
	PROBE_STRUCT(mlx5dv_qp_ex),
	offsetof(struct mlx5dv_qp_ex, wr_set_dc_addr),
	offsetof(struct mlx5dv_qp_ex, wr_mr_interleaved),
	offsetof(struct mlx5dv_qp_ex, wr_mr_list),
	offsetof(struct mlx5dv_qp_ex, wr_raw_wqe),
	offsetof(struct mlx5dv_qp_ex, wr_set_dc_addr_stream),
	offsetof(struct mlx5dv_qp_ex, wr_memcpy),
	PROBE_STRUCT(ibv_cq_ex),
	offsetof(struct ibv_cq_ex, wr_id),
	offsetof(struct ibv_cq_ex, status),
	offsetof(struct ibv_cq_ex, start_poll),
	offsetof(struct ibv_cq_ex, read_opcode),
};

const size_t mlx5dv_sys_layout_probe_len =
	sizeof(mlx5dv_sys_layout_probe) / sizeof(mlx5dv_sys_layout_probe[0]);
