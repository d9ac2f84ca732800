/*
 * "C plain": the batches of c/post.c as the man pages' examples write
 * them, every field set per work request and every read through the
 * objects, compiled once (gcc -O2); and what both C versions take besides
 * the objects: the plan and room for the completions.
 */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

struct bench_plan *bench_plan_new(const struct ibv_mr *mr, uint64_t remote_addr)
{
	struct bench_plan *p = calloc(1, sizeof(*p));
	uint64_t base = (uintptr_t)mr->addr;

	if (!p)
		abort();

	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		p->sge[i] = (struct ibv_sge){ base + i * BENCH_MSG, BENCH_MSG, mr->lkey };
		p->src[i] = (struct ibv_sge){ base + 4096 + i * BENCH_MSG, BENCH_MSG, mr->lkey };
		p->raddr[i] = remote_addr + i * BENCH_MSG;
	}
	for (unsigned int i = 0; i < BENCH_LIST; i++)
		p->list[i] = (struct ibv_sge){ base + 8192 + i * BENCH_MSG, BENCH_MSG, mr->lkey };
	for (unsigned int i = 0; i < BENCH_INLINE; i++)
		p->msg[i] = (uint8_t)i;
	return p;
}

struct bench_wc *bench_wc_new(void)
{
	struct bench_wc *wc = calloc(BENCH_BATCH, sizeof(*wc));

	if (!wc)
		abort();
	return wc;
}

/* ----- RC RDMA write + one SGE ----- */

NOINLINE int c_plain_rc_write_sge(struct ibv_qp_ex *qpx, uint32_t rkey, const struct bench_plan *p)
{
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, p->sge[i].lkey, p->sge[i].addr, p->sge[i].length);
	}
	return ibv_wr_complete(qpx);
}

/* ----- RC send, inline data ----- */

NOINLINE int c_plain_rc_inline_send(struct ibv_qp_ex *qpx, const struct bench_plan *p)
{
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		ibv_wr_send(qpx);
		ibv_wr_set_inline_data(qpx, (void *)p->msg, BENCH_INLINE);
	}
	return ibv_wr_complete(qpx);
}

/* ----- DCI RDMA write + one SGE + DC address (with and without stream) ----- */

NOINLINE int c_plain_dci_write_sge(struct ibv_qp_ex *qpx, struct mlx5dv_qp_ex *mqpx, uint32_t rkey,
				   const struct bench_dc *dc, const struct bench_plan *p)
{
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, p->sge[i].lkey, p->sge[i].addr, p->sge[i].length);
		mlx5dv_wr_set_dc_addr(mqpx, dc->ah, dc->dctn, dc->key);
	}
	return ibv_wr_complete(qpx);
}

NOINLINE int c_plain_dci_write_sge_stream(struct ibv_qp_ex *qpx, struct mlx5dv_qp_ex *mqpx,
					  uint32_t rkey, const struct bench_dc *dc,
					  const struct bench_plan *p)
{
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, p->sge[i].lkey, p->sge[i].addr, p->sge[i].length);
		mlx5dv_wr_set_dc_addr_stream(mqpx, dc->ah, dc->dctn, dc->key,
					     i % (1u << BENCH_LOG_STREAMS));
	}
	return ibv_wr_complete(qpx);
}

/* ----- DMA memcpy ----- */

NOINLINE int c_plain_memcpy(struct ibv_qp_ex *qpx, struct mlx5dv_qp_ex *mqpx,
			    const struct bench_plan *p)
{
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		mlx5dv_wr_memcpy(mqpx, p->sge[i].lkey, p->sge[i].addr, p->src[i].lkey,
				 p->src[i].addr, p->sge[i].length);
	}
	return ibv_wr_complete(qpx);
}

/* ----- mkey list registration ----- */

NOINLINE int c_plain_mr_list(struct ibv_qp_ex *qpx, struct mlx5dv_qp_ex *mqpx,
			     struct mlx5dv_mkey *mkey, const struct bench_plan *p)
{
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		mlx5dv_wr_mr_list(mqpx, mkey, IBV_ACCESS_LOCAL_WRITE, BENCH_LIST,
				  (struct ibv_sge *)p->list);
	}
	return ibv_wr_complete(qpx);
}

/* ----- raw WQE ----- */

NOINLINE int c_plain_raw_wqe(struct ibv_qp_ex *qpx, struct mlx5dv_qp_ex *mqpx, const void *wqe)
{
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		mlx5dv_wr_raw_wqe(mqpx, wqe);
	}
	return ibv_wr_complete(qpx);
}

/* ----- polling BENCH_BATCH completions ----- */

NOINLINE int c_plain_poll_cq(struct ibv_cq_ex *cq, struct bench_wc *wc)
{
	struct ibv_poll_cq_attr attr = {};
	int n = 0, ret;

	ret = ibv_start_poll(cq, &attr);
	if (ret == ENOENT)
		return 0;
	if (ret)
		return -ret;
	for (;;) {
		struct bench_wc *w = &wc[n++];

		w->wr_id = cq->wr_id;
		w->status = cq->status;
		w->has_imm = !!(ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM);
		w->imm = w->has_imm ? be32toh(ibv_wc_read_imm_data(cq)) : 0;
		w->opcode = ibv_wc_read_opcode(cq);
		w->byte_len = ibv_wc_read_byte_len(cq);
		w->qp_num = ibv_wc_read_qp_num(cq);
		w->vendor_err = ibv_wc_read_vendor_err(cq);
		if (n == BENCH_BATCH)
			break;
		ret = ibv_next_poll(cq);
		if (ret == ENOENT)
			break;
		if (ret) {
			ibv_end_poll(cq);
			return -ret;
		}
	}
	ibv_end_poll(cq);
	return n;
}

/* ----- the natural forms' comparisons (post.c says what they do) ----- */

static void read_wc_full_plain(struct ibv_cq_ex *cq, struct bench_wc_full *w)
{
	w->wr_id = cq->wr_id;
	w->status = cq->status;
	w->opcode = ibv_wc_read_opcode(cq);
	w->byte_len = ibv_wc_read_byte_len(cq);
	w->has_imm = !!(ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM);
	w->has_inv = !w->has_imm && (ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_INV);
	w->imm = w->has_imm ? be32toh(ibv_wc_read_imm_data(cq)) : 0;
	w->inv = w->has_inv ? ibv_wc_read_invalidated_rkey(cq) : 0;
	w->wc_flags = ibv_wc_read_wc_flags(cq);
	w->has_sender = 0;
	w->qp_num = ibv_wc_read_qp_num(cq);
	w->vendor_err = ibv_wc_read_vendor_err(cq);
}

static int poll_full_plain(struct ibv_cq_ex *cq, struct bench_wc_full *wc, int got, int max)
{
	struct ibv_poll_cq_attr attr = {};
	int n = 0, ret;

	ret = ibv_start_poll(cq, &attr);
	if (ret == ENOENT)
		return 0;
	if (ret)
		return -ret;
	for (;;) {
		read_wc_full_plain(cq, &wc[got + n]);
		n++;
		if (n == max)
			break;
		ret = ibv_next_poll(cq);
		if (ret == ENOENT)
			break;
		if (ret) {
			ibv_end_poll(cq);
			return -ret;
		}
	}
	ibv_end_poll(cq);
	return n;
}

static int wait_full_plain(struct ibv_cq_ex *cq, struct bench_wc_full *wc, int want)
{
	struct timespec start, now;
	int got = 0;

	clock_gettime(CLOCK_MONOTONIC, &start);
	while (got < want) {
		int k = poll_full_plain(cq, wc, got, want - got);

		if (k < 0)
			return k;
		got += k;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec >= 5)
			return -ETIMEDOUT;
	}
	return got;
}

NOINLINE int c_plain_poll_full(struct ibv_cq_ex *cq, struct bench_wc_full *wc)
{
	return poll_full_plain(cq, wc, 0, BENCH_BATCH);
}

NOINLINE int c_plain_cq_wait(struct ibv_cq_ex *cq, struct bench_wc_full *wc)
{
	return wait_full_plain(cq, wc, BENCH_BATCH);
}

NOINLINE int c_plain_post_wait(struct ibv_qp_ex *qpx, uint32_t rkey, const struct bench_plan *p,
			       struct ibv_cq_ex *cq, struct bench_wc_full *wc)
{
	int ret;

	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, p->sge[i].lkey, p->sge[i].addr, p->sge[i].length);
	}
	ret = ibv_wr_complete(qpx);
	if (ret)
		return -ret;
	return wait_full_plain(cq, wc, BENCH_BATCH);
}
