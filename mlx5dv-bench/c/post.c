/*
 * The batches of benches/post_vs_c.rs written in C against rdma-core's
 * inline functions (ibv_wr_*, mlx5dv_wr_*, ibv_start_poll, ...), each one
 * batch of BENCH_BATCH work requests (or one poll round) per call.
 *
 * c_best_*: as a performance engineer writes it: what does not change
 * across the batch (wr_flags, keys, the DC address) is set or loaded once.
 * c_plain_*: as the man pages' examples do it: every field per WR.
 * Every WR is signalled, in both, as on the Rust side.
 */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

struct bench_plan *bench_plan_new(const struct bench_objs *o)
{
	struct bench_plan *p = calloc(1, sizeof(*p));
	uint64_t base = (uintptr_t)o->mr->addr;

	if (!p)
		abort();

	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		p->sge[i] = (struct ibv_sge){ base + i * BENCH_MSG, BENCH_MSG, o->mr->lkey };
		p->src[i] = (struct ibv_sge){ base + 4096 + i * BENCH_MSG, BENCH_MSG, o->mr->lkey };
		p->raddr[i] = o->remote_addr + i * BENCH_MSG;
	}
	for (unsigned int i = 0; i < BENCH_LIST; i++)
		p->list[i] = (struct ibv_sge){ base + 8192 + i * BENCH_MSG, BENCH_MSG, o->mr->lkey };
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

NOINLINE int c_best_rc_write_sge(const struct bench_objs *o, const struct bench_plan *p,
				 struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->rc->ibv;
	uint32_t rkey = o->rkey;

	(void)wc;
	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		const struct ibv_sge *s = &p->sge[i];

		qpx->wr_id = i;
		ibv_wr_rdma_write(qpx, rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, s->lkey, s->addr, s->length);
	}
	return ibv_wr_complete(qpx);
}

NOINLINE int c_plain_rc_write_sge(const struct bench_objs *o, const struct bench_plan *p,
				  struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->rc->ibv;

	(void)wc;
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, o->rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, p->sge[i].lkey, p->sge[i].addr, p->sge[i].length);
	}
	return ibv_wr_complete(qpx);
}

/* ----- RC send, inline data ----- */

NOINLINE int c_best_rc_inline_send(const struct bench_objs *o, const struct bench_plan *p,
				   struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->rc->ibv;

	(void)wc;
	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		ibv_wr_send(qpx);
		ibv_wr_set_inline_data(qpx, (void *)p->msg, BENCH_INLINE);
	}
	return ibv_wr_complete(qpx);
}

NOINLINE int c_plain_rc_inline_send(const struct bench_objs *o, const struct bench_plan *p,
				    struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->rc->ibv;

	(void)wc;
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

NOINLINE int c_best_dci_write_sge(const struct bench_objs *o, const struct bench_plan *p,
				  struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->dci->ibv;
	struct mlx5dv_qp_ex *mqpx = &o->dci->dv;
	struct ibv_ah *ah = o->ah;
	uint32_t rkey = o->rkey, dctn = o->remote_dctn;
	uint64_t key = o->remote_dc_key;

	(void)wc;
	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		const struct ibv_sge *s = &p->sge[i];

		qpx->wr_id = i;
		ibv_wr_rdma_write(qpx, rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, s->lkey, s->addr, s->length);
		mlx5dv_wr_set_dc_addr(mqpx, ah, dctn, key);
	}
	return ibv_wr_complete(qpx);
}

NOINLINE int c_plain_dci_write_sge(const struct bench_objs *o, const struct bench_plan *p,
				   struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->dci->ibv;
	struct mlx5dv_qp_ex *mqpx = &o->dci->dv;

	(void)wc;
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, o->rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, p->sge[i].lkey, p->sge[i].addr, p->sge[i].length);
		mlx5dv_wr_set_dc_addr(mqpx, o->ah, o->remote_dctn, o->remote_dc_key);
	}
	return ibv_wr_complete(qpx);
}

NOINLINE int c_best_dci_write_sge_stream(const struct bench_objs *o, const struct bench_plan *p,
					 struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->dci->ibv;
	struct mlx5dv_qp_ex *mqpx = &o->dci->dv;
	struct ibv_ah *ah = o->ah;
	uint32_t rkey = o->rkey, dctn = o->remote_dctn;
	uint64_t key = o->remote_dc_key;

	(void)wc;
	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		const struct ibv_sge *s = &p->sge[i];

		qpx->wr_id = i;
		ibv_wr_rdma_write(qpx, rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, s->lkey, s->addr, s->length);
		mlx5dv_wr_set_dc_addr_stream(mqpx, ah, dctn, key,
					     i % (1u << BENCH_LOG_STREAMS));
	}
	return ibv_wr_complete(qpx);
}

NOINLINE int c_plain_dci_write_sge_stream(const struct bench_objs *o,
					  const struct bench_plan *p, struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->dci->ibv;
	struct mlx5dv_qp_ex *mqpx = &o->dci->dv;

	(void)wc;
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, o->rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, p->sge[i].lkey, p->sge[i].addr, p->sge[i].length);
		mlx5dv_wr_set_dc_addr_stream(mqpx, o->ah, o->remote_dctn, o->remote_dc_key,
					     i % (1u << BENCH_LOG_STREAMS));
	}
	return ibv_wr_complete(qpx);
}

/* ----- DMA memcpy ----- */

NOINLINE int c_best_memcpy(const struct bench_objs *o, const struct bench_plan *p,
			   struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->rc->ibv;
	struct mlx5dv_qp_ex *mqpx = &o->rc->dv;

	(void)wc;
	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		const struct ibv_sge *d = &p->sge[i], *s = &p->src[i];

		qpx->wr_id = i;
		mlx5dv_wr_memcpy(mqpx, d->lkey, d->addr, s->lkey, s->addr, d->length);
	}
	return ibv_wr_complete(qpx);
}

NOINLINE int c_plain_memcpy(const struct bench_objs *o, const struct bench_plan *p,
			    struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->rc->ibv;
	struct mlx5dv_qp_ex *mqpx = &o->rc->dv;

	(void)wc;
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

NOINLINE int c_best_mr_list(const struct bench_objs *o, const struct bench_plan *p,
			    struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->rc->ibv;
	struct mlx5dv_qp_ex *mqpx = &o->rc->dv;
	struct mlx5dv_mkey *mkey = o->mkey;

	(void)wc;
	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		mlx5dv_wr_mr_list(mqpx, mkey, IBV_ACCESS_LOCAL_WRITE, BENCH_LIST,
				  (struct ibv_sge *)p->list);
	}
	return ibv_wr_complete(qpx);
}

NOINLINE int c_plain_mr_list(const struct bench_objs *o, const struct bench_plan *p,
			     struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->rc->ibv;
	struct mlx5dv_qp_ex *mqpx = &o->rc->dv;

	(void)wc;
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		mlx5dv_wr_mr_list(mqpx, o->mkey, IBV_ACCESS_LOCAL_WRITE, BENCH_LIST,
				  (struct ibv_sge *)p->list);
	}
	return ibv_wr_complete(qpx);
}

/* ----- raw WQE ----- */

NOINLINE int c_best_raw_wqe(const struct bench_objs *o, const struct bench_plan *p,
			    struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->rc->ibv;
	struct mlx5dv_qp_ex *mqpx = &o->rc->dv;
	const void *wqe = o->wqe;

	(void)p;
	(void)wc;
	/* The WQE's control segment has the flags: wr_flags is not read. */
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		mlx5dv_wr_raw_wqe(mqpx, wqe);
	}
	return ibv_wr_complete(qpx);
}

NOINLINE int c_plain_raw_wqe(const struct bench_objs *o, const struct bench_plan *p,
			     struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->rc->ibv;
	struct mlx5dv_qp_ex *mqpx = &o->rc->dv;

	(void)p;
	(void)wc;
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		mlx5dv_wr_raw_wqe(mqpx, o->wqe);
	}
	return ibv_wr_complete(qpx);
}

/* ----- polling BENCH_BATCH completions ----- */

static inline void read_wc(struct ibv_cq_ex *cq, struct bench_wc *w)
{
	unsigned int flags = ibv_wc_read_wc_flags(cq);

	w->wr_id = cq->wr_id;
	w->status = cq->status;
	w->has_imm = !!(flags & IBV_WC_WITH_IMM);
	w->imm = w->has_imm ? be32toh(ibv_wc_read_imm_data(cq)) : 0;
	w->opcode = ibv_wc_read_opcode(cq);
	w->byte_len = ibv_wc_read_byte_len(cq);
	w->qp_num = ibv_wc_read_qp_num(cq);
	w->vendor_err = ibv_wc_read_vendor_err(cq);
}

NOINLINE int c_best_poll_cq(const struct bench_objs *o, const struct bench_plan *p,
			    struct bench_wc *wc)
{
	struct ibv_cq_ex *cq = o->cq;
	struct ibv_poll_cq_attr attr = {};
	int n = 0, ret;

	(void)p;
	ret = ibv_start_poll(cq, &attr);
	if (ret)
		return ret == ENOENT ? 0 : -ret;
	do
		read_wc(cq, &wc[n++]);
	while (n < BENCH_BATCH && !(ret = ibv_next_poll(cq)));
	ibv_end_poll(cq);
	return ret && ret != ENOENT ? -ret : n;
}

NOINLINE int c_plain_poll_cq(const struct bench_objs *o, const struct bench_plan *p,
			     struct bench_wc *wc)
{
	struct ibv_poll_cq_attr attr = {};
	int n = 0, ret;

	(void)p;
	ret = ibv_start_poll(o->cq, &attr);
	if (ret == ENOENT)
		return 0;
	if (ret)
		return -ret;
	for (;;) {
		struct bench_wc *w = &wc[n++];

		w->wr_id = o->cq->wr_id;
		w->status = o->cq->status;
		w->has_imm = !!(ibv_wc_read_wc_flags(o->cq) & IBV_WC_WITH_IMM);
		w->imm = w->has_imm ? be32toh(ibv_wc_read_imm_data(o->cq)) : 0;
		w->opcode = ibv_wc_read_opcode(o->cq);
		w->byte_len = ibv_wc_read_byte_len(o->cq);
		w->qp_num = ibv_wc_read_qp_num(o->cq);
		w->vendor_err = ibv_wc_read_vendor_err(o->cq);
		if (n == BENCH_BATCH)
			break;
		ret = ibv_next_poll(o->cq);
		if (ret == ENOENT)
			break;
		if (ret) {
			ibv_end_poll(o->cq);
			return -ret;
		}
	}
	ibv_end_poll(o->cq);
	return n;
}

/* =====================================================================
 * The natural forms' comparisons: what cq.wait, cq.poll_into and
 * post_and_wait do, written in C as strongly as C allows. The natural
 * Rust posting shapes (rust_*_natural) are compared with the loops above:
 * they do the same work.
 * ===================================================================== */

/* Every field of the Rust side's WorkCompletion; the shared CQE field
 * read only when the flags say it holds the immediate or the rkey. */
static inline void read_wc_full(struct ibv_cq_ex *cq, struct bench_wc_full *w)
{
	unsigned int flags = ibv_wc_read_wc_flags(cq);

	w->wr_id = cq->wr_id;
	w->status = cq->status;
	w->opcode = ibv_wc_read_opcode(cq);
	w->byte_len = ibv_wc_read_byte_len(cq);
	w->has_imm = !!(flags & IBV_WC_WITH_IMM);
	w->has_inv = (flags & (IBV_WC_WITH_IMM | IBV_WC_WITH_INV)) == IBV_WC_WITH_INV;
	if (flags & IBV_WC_WITH_IMM)
		w->imm = be32toh(ibv_wc_read_imm_data(cq));
	else if (flags & IBV_WC_WITH_INV)
		w->inv = ibv_wc_read_invalidated_rkey(cq);
	w->qp_num = ibv_wc_read_qp_num(cq);
	w->vendor_err = ibv_wc_read_vendor_err(cq);
}

/* Up to `max` (at least 1) completions into `w`: how many, or -errno. */
static inline int poll_full(struct ibv_cq_ex *cq, struct bench_wc_full *w, int max)
{
	struct ibv_poll_cq_attr attr = {};
	int n = 0, ret = ibv_start_poll(cq, &attr);

	if (ret)
		return ret == ENOENT ? 0 : -ret;
	do
		read_wc_full(cq, &w[n++]);
	while (n < max && !(ret = ibv_next_poll(cq)));
	ibv_end_poll(cq);
	return ret && ret != ENOENT ? -ret : n;
}

/* Polls until `want` completions have come into `w`, or 5 s have passed
 * (-ETIMEDOUT); the clock is read only once a poll found nothing. */
static inline int wait_full(struct ibv_cq_ex *cq, struct bench_wc_full *w, int want)
{
	struct timespec now;
	time_t deadline = 0;
	int got = 0;

	while (got < want) {
		int k = poll_full(cq, w + got, want - got);

		if (k < 0)
			return k;
		got += k;
		if (k)
			continue;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (!deadline)
			deadline = now.tv_sec + 5;
		else if (now.tv_sec >= deadline)
			return -ETIMEDOUT;
	}
	return got;
}

/* The same, as the man pages' examples write it: every read through the
 * objects, every field set. */
static void read_wc_full_plain(const struct bench_objs *o, struct ibv_cq_ex *cq,
			       struct bench_wc_full *w)
{
	(void)o;
	w->wr_id = cq->wr_id;
	w->status = cq->status;
	w->opcode = ibv_wc_read_opcode(cq);
	w->byte_len = ibv_wc_read_byte_len(cq);
	w->has_imm = !!(ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM);
	w->has_inv = !w->has_imm && (ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_INV);
	w->imm = w->has_imm ? be32toh(ibv_wc_read_imm_data(cq)) : 0;
	w->inv = w->has_inv ? ibv_wc_read_invalidated_rkey(cq) : 0;
	w->qp_num = ibv_wc_read_qp_num(cq);
	w->vendor_err = ibv_wc_read_vendor_err(cq);
}

static int poll_full_plain(const struct bench_objs *o, struct ibv_cq_ex *cq, int got, int max)
{
	struct ibv_poll_cq_attr attr = {};
	int n = 0, ret;

	ret = ibv_start_poll(cq, &attr);
	if (ret == ENOENT)
		return 0;
	if (ret)
		return -ret;
	for (;;) {
		read_wc_full_plain(o, cq, &o->wc_full[got + n]);
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

static int wait_full_plain(const struct bench_objs *o, struct ibv_cq_ex *cq, int want)
{
	struct timespec start, now;
	int got = 0;

	clock_gettime(CLOCK_MONOTONIC, &start);
	while (got < want) {
		int k = poll_full_plain(o, cq, got, want - got);

		if (k < 0)
			return k;
		got += k;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec >= 5)
			return -ETIMEDOUT;
	}
	return got;
}

/* ----- cq.poll_into: one poll round, every field ----- */

NOINLINE int c_best_poll_full(const struct bench_objs *o, const struct bench_plan *p,
			      struct bench_wc *wc)
{
	(void)p;
	(void)wc;
	return poll_full(o->cq, o->wc_full, BENCH_BATCH);
}

NOINLINE int c_plain_poll_full(const struct bench_objs *o, const struct bench_plan *p,
			       struct bench_wc *wc)
{
	(void)p;
	(void)wc;
	return poll_full_plain(o, o->cq, 0, BENCH_BATCH);
}

/* ----- cq.wait: rounds until BENCH_BATCH completions have come ----- */

NOINLINE int c_best_cq_wait(const struct bench_objs *o, const struct bench_plan *p,
			    struct bench_wc *wc)
{
	(void)p;
	(void)wc;
	return wait_full(o->cq, o->wc_full, BENCH_BATCH);
}

NOINLINE int c_plain_cq_wait(const struct bench_objs *o, const struct bench_plan *p,
			     struct bench_wc *wc)
{
	(void)p;
	(void)wc;
	return wait_full_plain(o, o->cq, BENCH_BATCH);
}

/* ----- post_and_wait: BENCH_BATCH RDMA writes, then their completions ----- */

NOINLINE int c_best_post_wait(const struct bench_objs *o, const struct bench_plan *p,
			      struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->rcw->ibv;
	uint32_t rkey = o->rkey;
	int ret;

	(void)wc;
	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		const struct ibv_sge *s = &p->sge[i];

		qpx->wr_id = i;
		ibv_wr_rdma_write(qpx, rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, s->lkey, s->addr, s->length);
	}
	ret = ibv_wr_complete(qpx);
	if (ret)
		return -ret;
	return wait_full(o->wcq, o->wc_full, BENCH_BATCH);
}

NOINLINE int c_plain_post_wait(const struct bench_objs *o, const struct bench_plan *p,
			       struct bench_wc *wc)
{
	struct ibv_qp_ex *qpx = &o->rcw->ibv;
	int ret;

	(void)wc;
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(qpx, o->rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, p->sge[i].lkey, p->sge[i].addr, p->sge[i].length);
	}
	ret = ibv_wr_complete(qpx);
	if (ret)
		return -ret;
	return wait_full_plain(o, o->wcq, BENCH_BATCH);
}
