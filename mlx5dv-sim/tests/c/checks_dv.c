/* Model checks: mlx5 direct verbs: DC, DMA memcpy, indirect mkeys, raw WQEs, invalidation. */

#include "model.h"

void check_dc(void)
{
	struct ibv_qp *dct, *dci;
	/* Its own SRQ: the srq check leaves receives posted on the shared one. */
	struct ibv_srq_init_attr si = {.attr = {.max_wr = 16, .max_sge = 1}};
	struct ibv_srq *dsrq = ibv_create_srq(pd, &si);
	CHECK(dsrq, "create_srq");
	struct ibv_ah_attr aa = {.dlid = 1, .port_num = 1};
	dct = make_dct(dsrq, &aa);
	dci = make_dci(2, 1, &aa);
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah, "create_ah");
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(dci);
	struct mlx5dv_qp_ex *d = mlx5dv_qp_ex_from_ibv_qp_ex(x);
	fill(mem[0], 128, 99);
	memset(mem[1], 0, 128);
	ibv_wr_start(x);
	x->wr_id = 500;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, mr[1]->rkey, (uintptr_t)mem[1]);
	mlx5dv_wr_set_dc_addr_stream(d, ah, dct->qp_num, DC_KEY, 3);
	ibv_wr_set_sge(x, mr[0]->lkey, (uintptr_t)mem[0], 128);
	CHECK(ibv_wr_complete(x) == 0, "wr_complete");
	expect(500, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	same(mem[1], mem[0], 128, "dc write");

	/* Wrong DC key: remote access error on stream 1 only. */
	ibv_wr_start(x);
	x->wr_id = 501;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, mr[1]->rkey, (uintptr_t)mem[1]);
	mlx5dv_wr_set_dc_addr_stream(d, ah, dct->qp_num, DC_KEY + 1, 1);
	ibv_wr_set_sge(x, mr[0]->lkey, (uintptr_t)mem[0], 8);
	CHECK(ibv_wr_complete(x) == 0, "wr_complete");
	expect(501, IBV_WC_REM_ACCESS_ERR, -1);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(dci, &qa, IBV_QP_STATE, &qi) == 0 &&
		      qa.qp_state == IBV_QPS_RTS,
	      "DCI state after a stream error: %d", qa.qp_state);
	CHECK(mlx5dv_dci_stream_id_reset(dci, 2) != 0,
	      "reset of a good stream succeeded");
	CHECK(mlx5dv_dci_stream_id_reset(dci, 1) == 0, "stream reset: %s",
	      strerror(errno));

	/* Send to the DCT's SRQ. */
	struct ibv_srq *saved = srq;
	srq = dsrq;
	post_srq_recv(600, mem[2], 256, mr[2]->lkey);
	srq = saved;
	ibv_wr_start(x);
	x->wr_id = 502;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	mlx5dv_wr_set_dc_addr_stream(d, ah, dct->qp_num, DC_KEY, 1);
	ibv_wr_set_sge(x, mr[0]->lkey, (uintptr_t)mem[0], 64);
	CHECK(ibv_wr_complete(x) == 0, "wr_complete");
	struct ibv_wc w1 = poll1(), w2 = poll1();
	struct ibv_wc *r = w1.wr_id == 600 ? &w1 : &w2, *s = r == &w1 ? &w2 : &w1;
	CHECK(s->wr_id == 502 && s->status == IBV_WC_SUCCESS, "dc send: wr_id %llu status %s",
	      (unsigned long long)s->wr_id, ibv_wc_status_str(s->status));
	CHECK(r->wr_id == 600 && r->status == IBV_WC_SUCCESS &&
		      r->opcode == IBV_WC_RECV && r->byte_len == 64,
	      "dct recv");
	same(mem[2], mem[0], 64, "dc send data");
	ibv_destroy_ah(ah);
	CHECK(ibv_destroy_qp(dci) == 0 && ibv_destroy_qp(dct) == 0, "destroy");
	CHECK(ibv_destroy_srq(dsrq) == 0, "destroy_srq");
}

void check_memcpy_mkey_raw(void)
{
	struct rc a = make_rc(0), b = make_rc(0);
	connect_rc(&a, &b);

	/* DMA memcpy. */
	fill(mem[0], 1500, 21);
	memset(mem[1], 0, 1500);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 700;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	mlx5dv_wr_memcpy(a.dv, mr[1]->lkey, (uintptr_t)mem[1], mr[0]->lkey,
			 (uintptr_t)mem[0], 1500);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(700, IBV_WC_SUCCESS, IBV_WC_DRIVER3);
	same(mem[1], mem[0], 1500, "memcpy");

	/* mr_list: mkey bytes = mem[2][0..100) ++ mem[3][500..700). */
	struct mlx5dv_mkey_init_attr mi = {.pd = pd,
					   .create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT,
					   .max_entries = 4};
	struct mlx5dv_mkey *mk = mlx5dv_create_mkey(&mi);
	CHECK(mk, "create_mkey: %s", strerror(errno));
	struct ibv_sge l[2] = {{(uintptr_t)mem[2], 100, mr[2]->lkey},
			       {(uintptr_t)mem[3] + 500, 200, mr[3]->lkey}};
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 701;
	a.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	mlx5dv_wr_mr_list(a.dv, mk, ALL_ACCESS, 2, l);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(701, IBV_WC_SUCCESS, IBV_WC_DRIVER1);
	memset(mem[2], 0, BUF);
	memset(mem[3], 0, BUF);
	fill(mem[0], 300, 55);
	ibv_wr_start(b.qpx);
	b.qpx->wr_id = 702;
	b.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(b.qpx, mk->rkey, 0);
	ibv_wr_set_sge(b.qpx, mr[0]->lkey, (uintptr_t)mem[0], 300);
	CHECK(ibv_wr_complete(b.qpx) == 0, "wr_complete");
	expect(702, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	same(mem[2], mem[0], 100, "mr_list piece 1");
	same(mem[3] + 500, mem[0] + 100, 200, "mr_list piece 2");
	CHECK(mem[3][499] == 0 && mem[3][700] == 0, "mr_list overrun");

	/* mr_interleaved: 3 repetitions of (8 bytes of mem[2] every 16, 4
	 * bytes of mem[3] every 12). */
	struct mlx5dv_mr_interleaved il[2] = {
		{(uintptr_t)mem[2], 8, 8, mr[2]->lkey},
		{(uintptr_t)mem[3], 4, 8, mr[3]->lkey}};
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 703;
	a.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	mlx5dv_wr_mr_interleaved(a.dv, mk, ALL_ACCESS, 3, 2, il);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(703, IBV_WC_SUCCESS, IBV_WC_DRIVER1);
	memset(mem[2], 0, BUF);
	memset(mem[3], 0, BUF);
	fill(mem[0], 36, 200);
	ibv_wr_start(b.qpx);
	b.qpx->wr_id = 704;
	b.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(b.qpx, mk->rkey, 0);
	ibv_wr_set_sge(b.qpx, mr[0]->lkey, (uintptr_t)mem[0], 36);
	CHECK(ibv_wr_complete(b.qpx) == 0, "wr_complete");
	expect(704, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	for (int r = 0; r < 3; r++) {
		same(mem[2] + 16 * r, mem[0] + 12 * r, 8, "interleaved a");
		same(mem[3] + 12 * r, mem[0] + 12 * r + 8, 4, "interleaved b");
	}
	/* Nested: a second mkey lists 16 bytes of the first (its bytes 12..28:
	 * repetition 1 and 2 of the interleaved layout). */
	struct mlx5dv_mkey *outer = mlx5dv_create_mkey(&mi);
	CHECK(outer, "create_mkey: %s", strerror(errno));
	struct ibv_sge nl = {12, 16, mk->lkey};
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 707;
	a.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	mlx5dv_wr_mr_list(a.dv, outer, ALL_ACCESS, 1, &nl);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(707, IBV_WC_SUCCESS, IBV_WC_DRIVER1);
	memset(mem[2], 0, BUF);
	memset(mem[3], 0, BUF);
	fill(mem[0], 16, 90);
	ibv_wr_start(b.qpx);
	b.qpx->wr_id = 708;
	b.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(b.qpx, outer->rkey, 0);
	ibv_wr_set_sge(b.qpx, mr[0]->lkey, (uintptr_t)mem[0], 16);
	CHECK(ibv_wr_complete(b.qpx) == 0, "wr_complete");
	expect(708, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	same(mem[2] + 16, mem[0], 8, "nested a1");
	same(mem[3] + 12, mem[0] + 8, 4, "nested b1");
	same(mem[2] + 32, mem[0] + 12, 4, "nested a2");
	CHECK(mem[2][15] == 0 && mem[2][36] == 0 && mem[3][11] == 0 &&
		      mem[3][16] == 0,
	      "nested write strayed");
	CHECK(mlx5dv_destroy_mkey(outer) == 0, "destroy outer mkey");

	/* Raw WQE: a NOP that asks for a completion. */
	uint8_t wqe[64] = {0};
	struct mlx5_wqe_ctrl_seg *c = (void *)wqe;
	mlx5dv_set_ctrl_seg(c, 0, MLX5_OPCODE_NOP, 0, a.qp->qp_num,
			    MLX5_WQE_CTRL_CQ_UPDATE, 1, 0, 0);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 706;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	mlx5dv_wr_raw_wqe(a.dv, wqe);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(706, IBV_WC_SUCCESS, IBV_WC_DRIVER2);
	/* Past the layout's end: remote access error (last: the responder,
	 * a, goes to the error state, as the IB spec's class C errors do). */
	ibv_wr_start(b.qpx);
	b.qpx->wr_id = 705;
	b.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(b.qpx, mk->rkey, 30);
	ibv_wr_set_sge(b.qpx, mr[0]->lkey, (uintptr_t)mem[0], 8);
	CHECK(ibv_wr_complete(b.qpx) == 0, "wr_complete");
	expect(705, IBV_WC_REM_ACCESS_ERR, -1);
	CHECK(mlx5dv_destroy_mkey(mk) == 0, "destroy_mkey");

	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
}

void check_invalidate(void)
{
	struct rc a = make_rc(0), b = make_rc(0);
	connect_rc(&a, &b);
	/* Local invalidate: the mkey takes no more data. */
	struct mlx5dv_mkey *mk = list_mkey(&a, 1000, 0);
	write_to(&b, 1001, mk->rkey, IBV_WC_SUCCESS);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1002;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_local_inv(a.qpx, mk->lkey);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(1002, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV);
	write_to(&b, 1003, mk->rkey, IBV_WC_REM_ACCESS_ERR);
	CHECK(mlx5dv_destroy_mkey(mk) == 0, "destroy_mkey");
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");

	/* Send with invalidate of an mkey created for it. */
	a = make_rc(0);
	b = make_rc(0);
	connect_rc(&a, &b);
	mk = list_mkey(&b, 1010, MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE);
	post_recv(b.qp, 1011, mem[1], 64, mr[1]->lkey);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1012;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_inv(a.qpx, mk->rkey);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 32);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	struct ibv_wc w1 = poll1(), w2 = poll1();
	struct ibv_wc *r = w1.wr_id == 1011 ? &w1 : &w2, *s = r == &w1 ? &w2 : &w1;
	CHECK(s->wr_id == 1012 && s->status == IBV_WC_SUCCESS &&
		      s->opcode == IBV_WC_SEND,
	      "send_inv: %s", ibv_wc_status_str(s->status));
	CHECK(r->wr_id == 1011 && r->status == IBV_WC_SUCCESS &&
		      r->opcode == IBV_WC_RECV && r->byte_len == 32 &&
		      (r->wc_flags & IBV_WC_WITH_INV) &&
		      r->invalidated_rkey == mk->rkey,
	      "recv of send_inv: flags %#x rkey %#x", r->wc_flags,
	      r->invalidated_rkey);
	write_to(&a, 1013, mk->rkey, IBV_WC_REM_ACCESS_ERR);
	CHECK(mlx5dv_destroy_mkey(mk) == 0, "destroy_mkey");
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
}
