#include "model.h"

/*
 * The posting functions the other checks do not use: ibv_wr_abort,
 * ibv_wr_set_inline_data_list, and mlx5dv_wr_mkey_configure with its
 * access-flags and layout setters (list and interleaved), each checked by
 * the data that moves (or does not).
 */

/* An RC QP as make_rc() makes, with MLX5DV_QP_EX_WITH_MKEY_CONFIGURE. */
static struct rc make_configure_rc(void)
{
	struct ibv_qp_init_attr_ex ia = qp_attr(IBV_QPT_RC, 16, 16);
	struct mlx5dv_qp_init_attr dv = {0};
	struct rc r;
	ia.cap.max_send_sge = 2;
	ia.cap.max_inline_data = 64;
	ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_LOCAL_INV;
	dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
	dv.send_ops_flags = MLX5DV_QP_EX_WITH_MKEY_CONFIGURE;
	r.qp = mlx5dv_create_qp(ctx, &ia, &dv);
	CHECK(r.qp, "mlx5dv_create_qp: %s", strerror(errno));
	r.qpx = ibv_qp_to_qp_ex(r.qp);
	r.dv = mlx5dv_qp_ex_from_ibv_qp_ex(r.qpx);
	return r;
}

static struct mlx5dv_mkey *new_mkey(void)
{
	struct mlx5dv_mkey_init_attr mi = {
		.pd = pd,
		.create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT,
		.max_entries = 4};
	struct mlx5dv_mkey *mk = mlx5dv_create_mkey(&mi);
	CHECK(mk, "create_mkey: %s", strerror(errno));
	return mk;
}

static void configure(struct rc *a, uint64_t id, struct mlx5dv_mkey *mk,
		      int interleaved)
{
	struct mlx5dv_mkey_conf_attr attr = {0};
	ibv_wr_start(a->qpx);
	a->qpx->wr_id = id;
	a->qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	mlx5dv_wr_mkey_configure(a->dv, mk, 2, &attr);
	mlx5dv_wr_set_mkey_access_flags(a->dv, ALL_ACCESS);
	if (interleaved) {
		/* Two repeats of (8 bytes of mem[2], 8 bytes of mem[3]). */
		struct mlx5dv_mr_interleaved il[2] = {
			{.addr = (uintptr_t)mem[2], .bytes_count = 8,
			 .bytes_skip = 0, .lkey = mr[2]->lkey},
			{.addr = (uintptr_t)mem[3], .bytes_count = 8,
			 .bytes_skip = 0, .lkey = mr[3]->lkey}};
		mlx5dv_wr_set_mkey_layout_interleaved(a->dv, 2, 2, il);
	} else {
		/* 16 bytes of mem[2], then 16 of mem[3]. */
		struct ibv_sge l[2] = {{(uintptr_t)mem[2], 16, mr[2]->lkey},
				       {(uintptr_t)mem[3], 16, mr[3]->lkey}};
		mlx5dv_wr_set_mkey_layout_list(a->dv, 2, l);
	}
	CHECK(ibv_wr_complete(a->qpx) == 0, "wr_complete");
	expect(id, IBV_WC_SUCCESS, IBV_WC_DRIVER1);
}

void check_ops(void)
{
	struct rc a = make_configure_rc(), b = make_configure_rc();
	connect_rc(&a, &b);

	/* ibv_wr_abort: the aborted write never runs; the next batch does,
	 * and its completion is the only one. */
	fill(mem[0], 64, 17);
	memset(mem[1], 0, 64);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1400;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)mem[1]);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 32);
	ibv_wr_abort(a.qpx);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1401;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)mem[1] + 32);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0] + 32, 32);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(1401, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	static const uint8_t zero[32];
	same(mem[1], zero, 32, "aborted write");
	same(mem[1] + 32, mem[0] + 32, 32, "write after the abort");

	/* ibv_wr_set_inline_data_list: two buffers, sent concatenated. */
	uint8_t x[5] = {1, 2, 3, 4, 5}, y[9] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
	struct ibv_data_buf bufs[2] = {{x, sizeof(x)}, {y, sizeof(y)}};
	memset(mem[1], 0, 64);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1402;
	a.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)mem[1]);
	ibv_wr_set_inline_data_list(a.qpx, 2, bufs);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(1402, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	same(mem[1], x, 5, "inline list, first buffer");
	same(mem[1] + 5, y, 9, "inline list, second buffer");
	CHECK(mem[1][14] == 0, "inline list wrote past its 14 bytes");

	/* mlx5dv_wr_mkey_configure, list layout: a write of 32 bytes through
	 * the mkey lands 16 in mem[2] and 16 in mem[3]. */
	struct mlx5dv_mkey *mk = new_mkey();
	configure(&a, 1403, mk, 0);
	memset(mem[2], 0, 64);
	memset(mem[3], 0, 64);
	fill(mem[0], 64, 23);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1404;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, mk->rkey, 0);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 32);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(1404, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	same(mem[2], mem[0], 16, "list layout, first entry");
	same(mem[3], mem[0] + 16, 16, "list layout, second entry");
	/* Invalidated, the key no longer reaches them. */
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1405;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_local_inv(a.qpx, mk->lkey);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(1405, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);

	/* Interleaved layout: 8 + 8 bytes, repeated twice. */
	configure(&a, 1406, mk, 1);
	memset(mem[2], 0, 64);
	memset(mem[3], 0, 64);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1407;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, mk->rkey, 0);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 32);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(1407, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	same(mem[2], mem[0], 8, "interleaved, block 0");
	same(mem[3], mem[0] + 8, 8, "interleaved, block 1");
	same(mem[2] + 8, mem[0] + 16, 8, "interleaved, block 2");
	same(mem[3] + 8, mem[0] + 24, 8, "interleaved, block 3");
	CHECK(mlx5dv_destroy_mkey(mk) == 0, "destroy_mkey");
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
}
