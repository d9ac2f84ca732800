/*
 * "C best": the batches of benches/post_vs_c.rs written in C against
 * rdma-core's inline functions (ibv_wr_*, mlx5dv_wr_*, ibv_start_poll, ...)
 * as a performance engineer writes them, one batch of BENCH_BATCH work
 * requests (or one poll round) per call. Every WR is signalled, with
 * wr_flags set once, before the loop (the provider reads it at each
 * builder). The loops take the QP, the CQ and the batch's inputs as a C
 * program passes them (bench.h, BENCH_LOOPS), so that the same code posts
 * on the null provider and on libmlx5's own QPs.
 *
 * build.rs compiles this file once per variant: gcc and clang, -O2 and
 * -O3, and two styles, BENCH_STYLE:
 *
 * - BENCH_LOCALS: what stays the same across the batch is loaded into
 *   locals before the loop (the DC target's fields); the poll loops end on
 *   a counter;
 * - BENCH_REREAD: it is re-read from its struct inside the loop, which
 *   leaves the compiler fewer values to keep across the provider's calls;
 *   the poll loops end on a pointer.
 *
 * Invariants passed as arguments (the rkey, the mkey, the WQE) are the
 * compiler's to keep in both styles. Each variant's functions are named
 * BENCH_PREFIX<shape> (c_best_clang_o3_b_dci_write_sge, ...); the harnesses
 * count every variant and take, per shape, the one with the fewest
 * instructions as C best. c/plain.c has the same loops as the man pages'
 * examples write them.
 */
#include "bench.h"

#include <errno.h>
#include <time.h>

#define BENCH_LOCALS 1
#define BENCH_REREAD 2

#ifndef BENCH_PREFIX
#error "build.rs defines BENCH_PREFIX, the variant's name prefix"
#endif
#if BENCH_STYLE != BENCH_LOCALS && BENCH_STYLE != BENCH_REREAD
#error "build.rs defines BENCH_STYLE as BENCH_LOCALS or BENCH_REREAD"
#endif

#define BEST(name) BENCH_CAT(BENCH_PREFIX, name)
#define NOINLINE __attribute__((noinline))

#if BENCH_STYLE == BENCH_LOCALS
/* The DC target's fields, loaded once before the loop. */
#define DC_TARGET(dc)                                                          \
	struct ibv_ah *const dc_ah = (dc)->ah;                                 \
	const uint32_t dc_dctn = (dc)->dctn;                                   \
	const uint64_t dc_key = (dc)->key
#define DC_ARGS(dc) dc_ah, dc_dctn, dc_key
#else
/* The DC target's fields, read where they are passed. */
#define DC_TARGET(dc) (void)(dc)
#define DC_ARGS(dc) (dc)->ah, (dc)->dctn, (dc)->key
#endif

/* ----- RC RDMA write + one SGE ----- */

/* The writes of rc_write_sge and post_wait. */
static inline void rc_writes(struct ibv_qp_ex *qpx, uint32_t rkey, const struct bench_plan *p)
{
	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		const struct ibv_sge *s = &p->sge[i];

		qpx->wr_id = i;
		ibv_wr_rdma_write(qpx, rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, s->lkey, s->addr, s->length);
	}
}

NOINLINE int BEST(rc_write_sge)(struct ibv_qp_ex *qpx, uint32_t rkey, const struct bench_plan *p)
{
	rc_writes(qpx, rkey, p);
	return ibv_wr_complete(qpx);
}

/* ----- RC send, inline data ----- */

NOINLINE int BEST(rc_inline_send)(struct ibv_qp_ex *qpx, const struct bench_plan *p)
{
	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		ibv_wr_send(qpx);
		ibv_wr_set_inline_data(qpx, (void *)p->msg, BENCH_INLINE);
	}
	return ibv_wr_complete(qpx);
}

/* ----- DCI RDMA write + one SGE + DC address (with and without stream) ----- */

NOINLINE int BEST(dci_write_sge)(struct ibv_qp_ex *qpx, struct mlx5dv_qp_ex *mqpx, uint32_t rkey,
				 const struct bench_dc *dc, const struct bench_plan *p)
{
	DC_TARGET(dc);

	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		const struct ibv_sge *s = &p->sge[i];

		qpx->wr_id = i;
		ibv_wr_rdma_write(qpx, rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, s->lkey, s->addr, s->length);
		mlx5dv_wr_set_dc_addr(mqpx, DC_ARGS(dc));
	}
	return ibv_wr_complete(qpx);
}

NOINLINE int BEST(dci_write_sge_stream)(struct ibv_qp_ex *qpx, struct mlx5dv_qp_ex *mqpx,
					uint32_t rkey, const struct bench_dc *dc,
					const struct bench_plan *p)
{
	DC_TARGET(dc);

	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		const struct ibv_sge *s = &p->sge[i];

		qpx->wr_id = i;
		ibv_wr_rdma_write(qpx, rkey, p->raddr[i]);
		ibv_wr_set_sge(qpx, s->lkey, s->addr, s->length);
		mlx5dv_wr_set_dc_addr_stream(mqpx, DC_ARGS(dc), i % (1u << BENCH_LOG_STREAMS));
	}
	return ibv_wr_complete(qpx);
}

/* ----- DMA memcpy ----- */

NOINLINE int BEST(memcpy)(struct ibv_qp_ex *qpx, struct mlx5dv_qp_ex *mqpx,
			  const struct bench_plan *p)
{
	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		const struct ibv_sge *d = &p->sge[i], *s = &p->src[i];

		qpx->wr_id = i;
		mlx5dv_wr_memcpy(mqpx, d->lkey, d->addr, s->lkey, s->addr, d->length);
	}
	return ibv_wr_complete(qpx);
}

/* ----- mkey list registration ----- */

NOINLINE int BEST(mr_list)(struct ibv_qp_ex *qpx, struct mlx5dv_qp_ex *mqpx,
			   struct mlx5dv_mkey *mkey, const struct bench_plan *p)
{
	ibv_wr_start(qpx);
	qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		mlx5dv_wr_mr_list(mqpx, mkey, IBV_ACCESS_LOCAL_WRITE, BENCH_LIST,
				  (struct ibv_sge *)p->list);
	}
	return ibv_wr_complete(qpx);
}

/* ----- raw WQE ----- */

NOINLINE int BEST(raw_wqe)(struct ibv_qp_ex *qpx, struct mlx5dv_qp_ex *mqpx, const void *wqe)
{
	/* The WQE's control segment has the flags: wr_flags is not read. */
	ibv_wr_start(qpx);
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		qpx->wr_id = i;
		mlx5dv_wr_raw_wqe(mqpx, wqe);
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

NOINLINE int BEST(poll_cq)(struct ibv_cq_ex *cq, struct bench_wc *wc)
{
	struct ibv_poll_cq_attr attr = {};
	int n, ret = ibv_start_poll(cq, &attr);

	if (ret)
		return ret == ENOENT ? 0 : -ret;
#if BENCH_STYLE == BENCH_LOCALS
	n = 0;
	do
		read_wc(cq, &wc[n++]);
	while (n < BENCH_BATCH && !(ret = ibv_next_poll(cq)));
#else
	struct bench_wc *w = wc, *const end = wc + BENCH_BATCH;

	do
		read_wc(cq, w++);
	while (w < end && !(ret = ibv_next_poll(cq)));
	n = (int)(w - wc);
#endif
	ibv_end_poll(cq);
	return ret && ret != ENOENT ? -ret : n;
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
	w->wc_flags = flags;
	w->has_sender = 0;
	w->qp_num = ibv_wc_read_qp_num(cq);
	w->vendor_err = ibv_wc_read_vendor_err(cq);
}

/* Up to `max` (at least 1) completions into `w`: how many, or -errno. */
static inline int poll_full(struct ibv_cq_ex *cq, struct bench_wc_full *w, int max)
{
	struct ibv_poll_cq_attr attr = {};
	int n, ret = ibv_start_poll(cq, &attr);

	if (ret)
		return ret == ENOENT ? 0 : -ret;
#if BENCH_STYLE == BENCH_LOCALS
	n = 0;
	do
		read_wc_full(cq, &w[n++]);
	while (n < max && !(ret = ibv_next_poll(cq)));
#else
	struct bench_wc_full *at = w, *const end = w + max;

	do
		read_wc_full(cq, at++);
	while (at < end && !(ret = ibv_next_poll(cq)));
	n = (int)(at - w);
#endif
	ibv_end_poll(cq);
	return ret && ret != ENOENT ? -ret : n;
}

/* After a poll that found nothing: whether 5 s have passed since the
 * first such poll (`*deadline` 0 before it). */
static inline int timed_out(time_t *deadline)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	if (!*deadline)
		*deadline = now.tv_sec + 5;
	else if (now.tv_sec >= *deadline)
		return 1;
	return 0;
}

/* Polls until `want` completions have come into `w`, or 5 s have passed
 * (-ETIMEDOUT); the clock is read only once a poll found nothing. */
#if BENCH_STYLE == BENCH_LOCALS
static inline int wait_full(struct ibv_cq_ex *cq, struct bench_wc_full *w, int want)
{
	time_t deadline = 0;
	int got = 0;

	while (got < want) {
		int k = poll_full(cq, w + got, want - got);

		if (k < 0)
			return k;
		got += k;
		if (!k && timed_out(&deadline))
			return -ETIMEDOUT;
	}
	return got;
}
#else
static inline int wait_full(struct ibv_cq_ex *cq, struct bench_wc_full *w, int want)
{
	struct bench_wc_full *at = w, *const end = w + want;
	time_t deadline = 0;

	while (at < end) {
		int k = poll_full(cq, at, (int)(end - at));

		if (k < 0)
			return k;
		at += k;
		if (!k && timed_out(&deadline))
			return -ETIMEDOUT;
	}
	return (int)(at - w);
}
#endif

/* ----- cq.poll_into: one poll round, every field ----- */

NOINLINE int BEST(poll_full)(struct ibv_cq_ex *cq, struct bench_wc_full *wc)
{
	return poll_full(cq, wc, BENCH_BATCH);
}

/* ----- cq.wait: rounds until BENCH_BATCH completions have come ----- */

NOINLINE int BEST(cq_wait)(struct ibv_cq_ex *cq, struct bench_wc_full *wc)
{
	return wait_full(cq, wc, BENCH_BATCH);
}

/* ----- post_and_wait: BENCH_BATCH RDMA writes, then their completions ----- */

NOINLINE int BEST(post_wait)(struct ibv_qp_ex *qpx, uint32_t rkey, const struct bench_plan *p,
			     struct ibv_cq_ex *cq, struct bench_wc_full *wc)
{
	int ret;

	rc_writes(qpx, rkey, p);
	ret = ibv_wr_complete(qpx);
	if (ret)
		return -ret;
	return wait_full(cq, wc, BENCH_BATCH);
}
