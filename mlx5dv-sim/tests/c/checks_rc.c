/* Model checks: RC traffic, SRQ, errors and the classic post path. */

#include "model.h"

void check_device(void)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	struct mlx5dv_context dc = {0};
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	CHECK(da.vendor_id == 0x02c9 && da.vendor_part_id == 4123,
	      "vendor %#x part %u", da.vendor_id, da.vendor_part_id);
	CHECK(da.max_sge == 30 && da.atomic_cap == IBV_ATOMIC_HCA, "caps");
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "query_port");
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.lid == 1 &&
		      pa.link_layer == IBV_LINK_LAYER_INFINIBAND,
	      "port state %d lid %u", pa.state, pa.lid);
	dc.comp_mask = MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH |
		       MLX5DV_CONTEXT_MASK_DCI_STREAMS;
	CHECK(mlx5dv_query_device(ctx, &dc) == 0, "mlx5dv_query_device");
	CHECK(dc.max_wr_memcpy_length == 1ULL << 31, "memcpy length %llu",
	      (unsigned long long)dc.max_wr_memcpy_length);
	CHECK(dc.dci_streams_caps.max_log_num_concurent == 4 &&
		      dc.dci_streams_caps.max_log_num_errored == 3,
	      "dci streams caps");
}

void check_rc(void)
{
	struct rc a = make_rc(0), b = make_rc(0);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	uint8_t *src = mem[0], *dst = mem[1];
	connect_rc(&a, &b);
	CHECK(ibv_query_qp(a.qp, &qa, IBV_QP_STATE, &qi) == 0 &&
		      qa.qp_state == IBV_QPS_RTS,
	      "query_qp state %d", qa.qp_state);

	/* RDMA write from an SGE list of two entries. */
	fill(src, 256, 1);
	memset(dst, 0, 256);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)dst);
	struct ibv_sge sl[2] = {{(uintptr_t)src, 100, mr[0]->lkey},
				{(uintptr_t)src + 100, 156, mr[0]->lkey}};
	ibv_wr_set_sge_list(a.qpx, 2, sl);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	same(dst, src, 256, "rdma write");

	/* Inline RDMA write. */
	uint8_t inl[40];
	fill(inl, sizeof(inl), 9);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 2;
	a.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)dst + 1000);
	ibv_wr_set_inline_data(a.qpx, inl, sizeof(inl));
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	same(dst + 1000, inl, sizeof(inl), "inline write");

	/* RDMA read. */
	fill(dst + 2000, 300, 33);
	memset(src + 2000, 0, 300);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 3;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(a.qpx, mr[1]->rkey, (uintptr_t)dst + 2000);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)src + 2000, 300);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(3, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	same(src + 2000, dst + 2000, 300, "rdma read");

	/* Send and send with immediate into the peer's RQ. */
	memset(dst, 0, 512);
	post_recv(b.qp, 100, dst, 256, mr[1]->lkey);
	post_recv(b.qp, 101, dst + 256, 256, mr[1]->lkey);
	fill(src, 512, 77);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 4;
	a.qpx->wr_flags = 0;
	ibv_wr_send(a.qpx);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)src, 200);
	a.qpx->wr_id = 5;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(a.qpx, htobe32(0xfeedbeef));
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)src + 200, 256);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect_recv(100, IBV_WC_RECV, 200, 0, 0);
	expect_recv(101, IBV_WC_RECV, 256, 1, 0xfeedbeef);
	expect(5, IBV_WC_SUCCESS, IBV_WC_SEND);
	same(dst, src, 200, "send");
	same(dst + 256, src + 200, 256, "send imm");

	/* RDMA write with immediate consumes a receive. */
	post_recv(b.qp, 102, dst, 16, mr[1]->lkey);
	fill(src, 64, 5);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 6;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(a.qpx, mr[1]->rkey, (uintptr_t)dst + 3000,
			      htobe32(42));
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)src, 64);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect_recv(102, IBV_WC_RECV_RDMA_WITH_IMM, 64, 1, 42);
	expect(6, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	same(dst + 3000, src, 64, "write imm");

	/* Atomics: host-order 64-bit values (atomic_cap HCA: the responder
	 * runs in host-endianness mode); the original value comes back in host
	 * order. */
	uint64_t *rem = (uint64_t *)(dst + 3584), *loc = (uint64_t *)(src + 3584);
	*rem = 100;
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 7;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(a.qpx, mr[1]->rkey, (uintptr_t)rem, 23);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)loc, 8);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(7, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD);
	CHECK(*loc == 100 && *rem == 123, "fetch_add %llu %llu",
	      (unsigned long long)*loc, (unsigned long long)*rem);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 8;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_cmp_swp(a.qpx, mr[1]->rkey, (uintptr_t)rem, 123, 7);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)loc, 8);
	a.qpx->wr_id = 9;
	ibv_wr_atomic_cmp_swp(a.qpx, mr[1]->rkey, (uintptr_t)rem, 123, 9);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)loc + 8, 8);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(8, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP);
	expect(9, IBV_WC_SUCCESS, IBV_WC_COMP_SWAP);
	CHECK(loc[0] == 123 && loc[1] == 7 && *rem == 7, "cmp_swp");
	/* A large addend carries across bytes in host order. */
	*rem = 0xff;
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 10;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(a.qpx, mr[1]->rkey, (uintptr_t)rem,
				0x100000001ULL);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)loc, 8);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(10, IBV_WC_SUCCESS, IBV_WC_FETCH_ADD);
	CHECK(*loc == 0xff && *rem == 0x100000100ULL, "fetch_add carry %#llx",
	      (unsigned long long)*rem);

	/* A wrong rkey: REM_ACCESS, then the QP is in error and flushes. */
	post_recv(a.qp, 200, src, 16, mr[0]->lkey);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 12;
	a.qpx->wr_flags = 0;
	ibv_wr_rdma_write(a.qpx, mr[1]->rkey ^ 0x100, (uintptr_t)dst);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)src, 8);
	a.qpx->wr_id = 13;
	ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)dst);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)src, 8);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	struct ibv_wc w[3];
	for (int i = 0; i < 3; i++)
		w[i] = poll1();
	/* The send queue completes in order; the receive flush may come
	 * before or after it. */
	int s = 0, got_rq = 0;
	for (int i = 0; i < 3; i++) {
		if (w[i].wr_id == 200) {
			CHECK(w[i].status == IBV_WC_WR_FLUSH_ERR, "rq flush");
			got_rq = 1;
		} else if (s++ == 0) {
			CHECK(w[i].wr_id == 12 &&
				      w[i].status == IBV_WC_REM_ACCESS_ERR,
			      "wrong rkey: wr_id %llu status %s",
			      (unsigned long long)w[i].wr_id,
			      ibv_wc_status_str(w[i].status));
		} else {
			CHECK(w[i].wr_id == 13 &&
				      w[i].status == IBV_WC_WR_FLUSH_ERR,
			      "flush: wr_id %llu status %s",
			      (unsigned long long)w[i].wr_id,
			      ibv_wc_status_str(w[i].status));
		}
	}
	CHECK(got_rq, "receive not flushed");
	CHECK(ibv_query_qp(a.qp, &qa, IBV_QP_STATE, &qi) == 0 &&
		      qa.qp_state == IBV_QPS_ERR,
	      "QP state after error %d", qa.qp_state);
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
}

void check_srq(void)
{
	struct rc a = make_rc(0), b = make_rc(1);
	connect_rc(&a, &b);
	memset(mem[1], 0, 1024);
	for (int i = 0; i < 4; i++)
		post_srq_recv(300 + i, mem[1] + 256 * i, 256, mr[1]->lkey);
	fill(mem[0], 1024, 3);
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 4; i++) {
			ibv_wr_start(a.qpx);
			a.qpx->wr_id = 400 + i;
			a.qpx->wr_flags = IBV_SEND_SIGNALED;
			ibv_wr_send(a.qpx);
			ibv_wr_set_sge(a.qpx, mr[0]->lkey,
				       (uintptr_t)mem[0] + 256 * i, 100 + i);
			CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
			struct ibv_wc w1 = poll1(), w2 = poll1();
			struct ibv_wc *r = w1.wr_id >= 300 && w1.wr_id < 304 ? &w1 : &w2;
			struct ibv_wc *s = r == &w1 ? &w2 : &w1;
			CHECK(s->wr_id == 400u + i && s->status == IBV_WC_SUCCESS &&
				      s->opcode == IBV_WC_SEND,
			      "srq send wc");
			CHECK(r->status == IBV_WC_SUCCESS &&
				      r->opcode == IBV_WC_RECV &&
				      r->byte_len == 100u + i,
			      "srq recv wc status %d len %u", r->status,
			      r->byte_len);
			int slot = (int)(r->wr_id - 300);
			same(mem[1] + 256 * slot, mem[0] + 256 * i, 100 + i,
			     "srq data");
			post_srq_recv(r->wr_id, mem[1] + 256 * slot, 256,
				      mr[1]->lkey);
		}
	}
	/* The SRQ limit: armed at 4 with 4 receives posted, one more
	 * consumed raises IBV_EVENT_SRQ_LIMIT_REACHED once and disarms. */
	struct ibv_srq_attr sa = {.srq_limit = 4};
	CHECK(ibv_modify_srq(srq, &sa, IBV_SRQ_LIMIT) == 0, "modify_srq limit");
	CHECK(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 4, "query_srq");
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 450;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(a.qpx);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 8);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	struct ibv_wc l1 = poll1(), l2 = poll1();
	CHECK(l1.status == IBV_WC_SUCCESS && l2.status == IBV_WC_SUCCESS,
	      "limit send");
	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	CHECK(poll(&p, 1, 10000) == 1, "no SRQ limit event");
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(ctx, &ev) == 0 &&
		      ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED &&
		      ev.element.srq == srq,
	      "SRQ limit event %d", ev.event_type);
	ibv_ack_async_event(&ev);
	CHECK(ibv_query_srq(srq, &sa) == 0 && sa.srq_limit == 0,
	      "the limit disarms");
	int slot = (int)((l1.wr_id >= 300 && l1.wr_id < 304 ? l1 : l2).wr_id - 300);
	post_srq_recv(300 + slot, mem[1] + 256 * slot, 256, mr[1]->lkey);
	/* A QP on an SRQ moved to ERR: IBV_EVENT_QP_LAST_WQE_REACHED, once. */
	struct ibv_qp_attr ea = {.qp_state = IBV_QPS_ERR};
	CHECK(ibv_modify_qp(b.qp, &ea, IBV_QP_STATE) == 0, "modify_qp to ERR");
	CHECK(poll(&p, 1, 10000) == 1, "no last WQE reached event");
	CHECK(ibv_get_async_event(ctx, &ev) == 0 &&
		      ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED &&
		      ev.element.qp == b.qp,
	      "last WQE reached event %d", ev.event_type);
	ibv_ack_async_event(&ev);
	CHECK(ibv_modify_qp(b.qp, &ea, IBV_QP_STATE) == 0, "ERR to ERR");
	CHECK(poll(&p, 1, 0) == 0, "a second last WQE reached event");
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
}

void check_local_error(void)
{
	struct rc a = make_rc(0), b = make_rc(0);
	connect_rc(&a, &b);
	/* A local key outside its MR: local protection error + flush. */
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 800;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)mem[1]);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0] + BUF - 4, 8);
	a.qpx->wr_id = 801;
	ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)mem[1]);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 8);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(800, IBV_WC_LOC_PROT_ERR, -1);
	expect(801, IBV_WC_WR_FLUSH_ERR, -1);
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
}

/* The classic ibv_post_send path (libmlx5's _mlx5_post_send builds the
 * WQEs there), with an SGE list, inline data, immediate and a fence. */
void check_post_send(void)
{
	struct rc a = make_rc(0), b = make_rc(0);
	connect_rc(&a, &b);
	fill(mem[0], 512, 44);
	memset(mem[1], 0, 1024);
	post_recv(b.qp, 1500, mem[1] + 512, 256, mr[1]->lkey);
	struct ibv_sge s1[2] = {{(uintptr_t)mem[0], 64, mr[0]->lkey},
				{(uintptr_t)mem[0] + 128, 64, mr[0]->lkey}};
	struct ibv_sge s2 = {(uintptr_t)mem[0] + 256, 48, mr[0]->lkey};
	struct ibv_send_wr w2 = {.wr_id = 1502,
				 .sg_list = &s2,
				 .num_sge = 1,
				 .opcode = IBV_WR_SEND_WITH_IMM,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE |
					       IBV_SEND_FENCE,
				 .imm_data = htobe32(0xabc)};
	struct ibv_send_wr w1 = {.wr_id = 1501,
				 .next = &w2,
				 .sg_list = s1,
				 .num_sge = 2,
				 .opcode = IBV_WR_RDMA_WRITE,
				 .send_flags = IBV_SEND_SIGNALED};
	w1.wr.rdma.remote_addr = (uintptr_t)mem[1];
	w1.wr.rdma.rkey = mr[1]->rkey;
	struct ibv_send_wr *bad;
	CHECK(ibv_post_send(a.qp, &w1, &bad) == 0, "post_send");
	expect(1501, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	struct ibv_wc x = poll1(), y = poll1();
	struct ibv_wc *r = x.wr_id == 1500 ? &x : &y, *s = r == &x ? &y : &x;
	CHECK(s->wr_id == 1502 && s->status == IBV_WC_SUCCESS &&
		      s->opcode == IBV_WC_SEND,
	      "send wc");
	CHECK(r->wr_id == 1500 && r->status == IBV_WC_SUCCESS &&
		      r->byte_len == 48 && be32toh(r->imm_data) == 0xabc,
	      "recv wc");
	same(mem[1], mem[0], 64, "sge 1");
	same(mem[1] + 64, mem[0] + 128, 64, "sge 2");
	same(mem[1] + 512, mem[0] + 256, 48, "inline send");
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
}

/* A target MR whose memory the program unmapped while registered (its
 * bug): the device must not fault; the write completes, as an HCA's DMA
 * to the still-pinned pages would. */
void check_unmapped(void)
{
	struct rc a = make_rc(0), b = make_rc(0);
	connect_rc(&a, &b);
	void *p = mmap(NULL, BUF, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED, "mmap");
	struct ibv_mr *m = ibv_reg_mr(pd, p, BUF, ALL_ACCESS);
	CHECK(m, "reg_mr");
	CHECK(munmap(p, BUF) == 0, "munmap");
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1401;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, m->rkey, (uintptr_t)p + 64);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 64);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(1401, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	CHECK(ibv_dereg_mr(m) == 0, "dereg_mr");
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
}
