/*
 * The null provider of benches/post_vs_c.rs, shared by the C loops and the
 * Rust side: every work-request entry does what a minimal real provider
 * does, store its arguments into a 64-byte slot of a ring (the builder
 * starts a slot, as mlx5 starts a WQE, and reads wr_id and wr_flags from the
 * QP; the setters fill the current slot), and the CQ serves BENCH_BATCH
 * completions per poll round from memory. Plus the fake context, device,
 * PD, MR, mkey and AH the Rust side's from_raw constructors wrap. Nothing
 * here is freed: the objects live as long as the process.
 */
#include "bench.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define SLOT_MASK (BENCH_RING - 1)

static struct null_qp *of_ibv(struct ibv_qp_ex *qp)
{
	return (struct null_qp *)((char *)qp - offsetof(struct null_qp, ibv));
}

static struct null_qp *of_dv(struct mlx5dv_qp_ex *mqp)
{
	return (struct null_qp *)((char *)mqp - offsetof(struct null_qp, dv));
}

/* Starts the next slot: the WR's id, flags and opcode. */
static uint64_t *begin(struct null_qp *q, uint64_t opcode)
{
	uint64_t *s = q->ring[q->head++ & SLOT_MASK];

	s[0] = q->ibv.wr_id;
	s[1] = q->ibv.wr_flags | opcode << 32;
	return s;
}

/* The slot being built. */
static uint64_t *current(struct null_qp *q)
{
	return q->ring[(q->head - 1) & SLOT_MASK];
}

static void wr_start(struct ibv_qp_ex *qp)
{
	struct null_qp *q = of_ibv(qp);

	q->ring[q->head & SLOT_MASK][0] = 0;
}

static int wr_complete(struct ibv_qp_ex *qp)
{
	(void)qp;
	return 0;
}

static void wr_abort(struct ibv_qp_ex *qp)
{
	(void)qp;
}

static void wr_rdma_write(struct ibv_qp_ex *qp, uint32_t rkey, uint64_t remote_addr)
{
	uint64_t *s = begin(of_ibv(qp), IBV_WR_RDMA_WRITE);

	s[2] = rkey;
	s[3] = remote_addr;
}

static void wr_send(struct ibv_qp_ex *qp)
{
	begin(of_ibv(qp), IBV_WR_SEND);
}

static void wr_set_sge(struct ibv_qp_ex *qp, uint32_t lkey, uint64_t addr, uint32_t length)
{
	uint64_t *s = current(of_ibv(qp));

	s[4] = lkey | (uint64_t)length << 32;
	s[5] = addr;
}

static void wr_set_sge_list(struct ibv_qp_ex *qp, size_t num_sge, const struct ibv_sge *sg_list)
{
	uint64_t *s = current(of_ibv(qp));

	if (num_sge) {
		s[4] = sg_list->lkey | (uint64_t)sg_list->length << 32;
		s[5] = sg_list->addr;
	}
}

static void wr_set_inline_data(struct ibv_qp_ex *qp, void *addr, size_t length)
{
	uint64_t *s = current(of_ibv(qp));

	memcpy(&s[4], addr, length < 32 ? length : 32);
}

static void wr_set_dc_addr(struct mlx5dv_qp_ex *mqp, struct ibv_ah *ah,
			   uint32_t remote_dctn, uint64_t remote_dc_key)
{
	uint64_t *s = current(of_dv(mqp));

	s[6] = (uintptr_t)ah;
	s[7] = remote_dc_key ^ (uint64_t)remote_dctn << 40;
}

static void wr_set_dc_addr_stream(struct mlx5dv_qp_ex *mqp, struct ibv_ah *ah,
				  uint32_t remote_dctn, uint64_t remote_dc_key,
				  uint16_t stream_id)
{
	uint64_t *s = current(of_dv(mqp));

	s[1] |= (uint64_t)stream_id << 48;
	s[6] = (uintptr_t)ah;
	s[7] = remote_dc_key ^ (uint64_t)remote_dctn << 40;
}

static void wr_memcpy(struct mlx5dv_qp_ex *mqp, uint32_t dest_lkey, uint64_t dest_addr,
		      uint32_t src_lkey, uint64_t src_addr, size_t length)
{
	uint64_t *s = begin(of_dv(mqp), IBV_WR_DRIVER1);

	s[2] = dest_lkey | (uint64_t)src_lkey << 32;
	s[3] = dest_addr;
	s[4] = src_addr;
	s[5] = length;
}

static void wr_mr_list(struct mlx5dv_qp_ex *mqp, struct mlx5dv_mkey *mkey,
		       uint32_t access_flags, uint16_t num_sges, struct ibv_sge *sge)
{
	uint64_t *s = begin(of_dv(mqp), IBV_WR_DRIVER1);

	s[2] = mkey->lkey | (uint64_t)access_flags << 32;
	s[3] = num_sges;
	for (unsigned int i = 0; i < num_sges && i < 2; i++) {
		s[4 + 2 * i] = sge[i].lkey | (uint64_t)sge[i].length << 32;
		s[5 + 2 * i] = sge[i].addr;
	}
}

static void wr_raw_wqe(struct mlx5dv_qp_ex *mqp, const void *wqe)
{
	struct null_qp *q = of_dv(mqp);
	uint64_t *s = q->ring[q->head++ & SLOT_MASK];

	memcpy(s, wqe, 64);
	s[7] = q->ibv.wr_id;
}

static void null_qp_init(struct null_qp *q, uint32_t qp_num)
{
	struct ibv_qp_ex *x = &q->ibv;
	struct mlx5dv_qp_ex *d = &q->dv;

	x->qp_base.qp_num = qp_num;
	x->qp_base.qp_type = IBV_QPT_RC;
	/* Connected, as libibverbs records it: the crate refuses posts on a
	 * QP whose recorded state cannot send. */
	x->qp_base.state = IBV_QPS_RTS;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_send = wr_send;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_set_inline_data = wr_set_inline_data;
	d->wr_set_dc_addr = wr_set_dc_addr;
	d->wr_set_dc_addr_stream = wr_set_dc_addr_stream;
	d->wr_memcpy = wr_memcpy;
	d->wr_mr_list = wr_mr_list;
	d->wr_raw_wqe = wr_raw_wqe;
}

/* ----- the CQ ----- */

static struct null_cq *of_cq(struct ibv_cq_ex *cq)
{
	return (struct null_cq *)cq;
}

static void position(struct null_cq *c)
{
	c->cq.status = IBV_WC_SUCCESS;
	c->cq.wr_id = c->cur;
}

static int start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	struct null_cq *c = of_cq(cq);

	(void)attr;
	c->cur = 0;
	position(c);
	return 0;
}

static int next_poll(struct ibv_cq_ex *cq)
{
	struct null_cq *c = of_cq(cq);

	if (++c->cur == BENCH_BATCH)
		return ENOENT;
	position(c);
	return 0;
}

static void end_poll(struct ibv_cq_ex *cq)
{
	(void)cq;
}

static enum ibv_wc_opcode read_opcode(struct ibv_cq_ex *cq)
{
	return of_cq(cq)->cur & 1 ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RDMA_WRITE;
}

static uint32_t read_vendor_err(struct ibv_cq_ex *cq)
{
	(void)cq;
	return 0;
}

static uint32_t read_byte_len(struct ibv_cq_ex *cq)
{
	(void)cq;
	return BENCH_MSG;
}

static __be32 read_imm_data(struct ibv_cq_ex *cq)
{
	return htobe32(of_cq(cq)->cur);
}

static uint32_t read_qp_num(struct ibv_cq_ex *cq)
{
	return of_cq(cq)->qp_num;
}

static unsigned int read_wc_flags(struct ibv_cq_ex *cq)
{
	return of_cq(cq)->cur & 1 ? IBV_WC_WITH_IMM : 0;
}

/* ----- a CQ that completes what its QP was given (the scoped post's) -----
 *
 * The send CQ of o->rcw: each poll position is the next slot the QP's
 * entries wrote that has not completed yet, reported as a successful
 * completion of that work request (its wr_id, its SGE's length), as a
 * real send CQ reports a QP's work requests in order. The scoped post
 * (post_and_wait) needs this: it waits for the completions of the ids it
 * posted, on the QP's send CQ. */

struct null_ring_cq {
	struct ibv_cq_ex cq;
	const struct null_qp *qp;
	/* The next slot to complete. */
	unsigned int tail;
	/* The slot the poll is positioned on. */
	const uint64_t *cur;
};

static struct null_ring_cq *of_ring_cq(struct ibv_cq_ex *cq)
{
	return (struct null_ring_cq *)cq;
}

static int ring_position(struct null_ring_cq *c)
{
	if (c->tail == c->qp->head)
		return ENOENT;
	c->cur = c->qp->ring[c->tail++ & SLOT_MASK];
	c->cq.wr_id = c->cur[0];
	c->cq.status = IBV_WC_SUCCESS;
	return 0;
}

static int ring_start_poll(struct ibv_cq_ex *cq, struct ibv_poll_cq_attr *attr)
{
	(void)attr;
	return ring_position(of_ring_cq(cq));
}

static int ring_next_poll(struct ibv_cq_ex *cq)
{
	return ring_position(of_ring_cq(cq));
}

static enum ibv_wc_opcode ring_read_opcode(struct ibv_cq_ex *cq)
{
	return (of_ring_cq(cq)->cur[1] >> 32) == IBV_WR_SEND ? IBV_WC_SEND : IBV_WC_RDMA_WRITE;
}

static uint32_t ring_read_byte_len(struct ibv_cq_ex *cq)
{
	return (uint32_t)(of_ring_cq(cq)->cur[4] >> 32);
}

static uint32_t ring_read_qp_num(struct ibv_cq_ex *cq)
{
	return of_ring_cq(cq)->qp->ibv.qp_base.qp_num;
}

static unsigned int ring_read_wc_flags(struct ibv_cq_ex *cq)
{
	(void)cq;
	return 0;
}

static __be32 ring_read_imm_data(struct ibv_cq_ex *cq)
{
	(void)cq;
	return 0;
}

static struct ibv_cq_ex *ring_cq_new(struct ibv_context *ctx, const struct null_qp *qp);

/* ----- the objects ----- */

static void *zalloc(size_t n)
{
	void *p = calloc(1, n);

	if (!p)
		abort();
	return p;
}

struct bench_objs *bench_objs_new(void)
{
	struct bench_objs *o = zalloc(sizeof(*o));
	/* Larger than struct ibv_device: mlx5dv_is_supported() reads the
	 * field of rdma-core's struct verbs_device that follows it (zero: not
	 * an mlx5 device, which nothing here needs). */
	struct ibv_device *dev = zalloc(4096);
	struct ibv_context *ctx = zalloc(sizeof(*ctx));
	struct ibv_pd *pd = zalloc(sizeof(*pd));
	struct ibv_mr *mr = zalloc(sizeof(*mr));
	struct mlx5dv_mkey *mkey = zalloc(sizeof(*mkey));
	struct ibv_ah *ah = zalloc(sizeof(*ah));
	struct null_cq *cq = zalloc(sizeof(*cq));
	size_t len = 1 << 16;

	strcpy(dev->name, "null0");
	ctx->device = dev;
	pd->context = ctx;
	mr->context = ctx;
	mr->pd = pd;
	mr->addr = zalloc(len);
	mr->length = len;
	mr->lkey = 0x1111;
	mr->rkey = 0x2222;
	mkey->lkey = 0x3333;
	mkey->rkey = 0x4444;
	ah->context = ctx;
	ah->pd = pd;

	cq->cq.context = ctx;
	cq->cq.cqe = 256;
	cq->cq.start_poll = start_poll;
	cq->cq.next_poll = next_poll;
	cq->cq.end_poll = end_poll;
	cq->cq.read_opcode = read_opcode;
	cq->cq.read_vendor_err = read_vendor_err;
	cq->cq.read_byte_len = read_byte_len;
	cq->cq.read_imm_data = read_imm_data;
	cq->cq.read_qp_num = read_qp_num;
	cq->cq.read_wc_flags = read_wc_flags;
	cq->qp_num = 0x101;

	o->ctx = ctx;
	o->pd = pd;
	o->cq = &cq->cq;
	o->mr = mr;
	o->mkey = mkey;
	o->ah = ah;
	o->rc = zalloc(sizeof(*o->rc));
	null_qp_init(o->rc, 0x101);
	o->dci = zalloc(sizeof(*o->dci));
	null_qp_init(o->dci, 0x102);
	/* Of the PD, as libibverbs makes a QP: a UD or DC address's address
	 * handle is checked against it. */
	o->rc->ibv.qp_base.context = ctx;
	o->rc->ibv.qp_base.pd = pd;
	o->dci->ibv.qp_base.context = ctx;
	o->dci->ibv.qp_base.pd = pd;
	o->rc_qp = &o->rc->ibv.qp_base;
	o->rc_qpx = &o->rc->ibv;
	o->rc_mqpx = &o->rc->dv;
	o->dci_qp = &o->dci->ibv.qp_base;
	o->dci_qpx = &o->dci->ibv;
	o->dci_mqpx = &o->dci->dv;
	o->remote_addr = 0x7f0000000000;
	o->rkey = 0xabcd;
	o->remote_dctn = 0x1234;
	o->remote_dc_key = 0xc0ffee;

	o->rcw = zalloc(sizeof(*o->rcw));
	null_qp_init(o->rcw, 0x103);
	o->rcw->ibv.qp_base.context = ctx;
	o->rcw->ibv.qp_base.pd = pd;
	o->rcw_qp = &o->rcw->ibv.qp_base;
	o->rcw_qpx = &o->rcw->ibv;
	o->wcq = ring_cq_new(ctx, o->rcw);
	o->wc_full = zalloc(BENCH_BATCH * sizeof(*o->wc_full));
	return o;
}

static struct ibv_cq_ex *ring_cq_new(struct ibv_context *ctx, const struct null_qp *qp)
{
	struct null_ring_cq *c = zalloc(sizeof(*c));

	c->qp = qp;
	c->cq.context = ctx;
	c->cq.cqe = 256;
	c->cq.start_poll = ring_start_poll;
	c->cq.next_poll = ring_next_poll;
	c->cq.end_poll = end_poll;
	c->cq.read_opcode = ring_read_opcode;
	c->cq.read_vendor_err = read_vendor_err;
	c->cq.read_byte_len = ring_read_byte_len;
	c->cq.read_imm_data = ring_read_imm_data;
	c->cq.read_qp_num = ring_read_qp_num;
	c->cq.read_wc_flags = ring_read_wc_flags;
	return &c->cq;
}

void bench_last_batch(const struct null_qp *q, uint64_t out[BENCH_BATCH][8])
{
	for (unsigned int i = 0; i < BENCH_BATCH; i++)
		memcpy(out[i], q->ring[(q->head - BENCH_BATCH + i) & SLOT_MASK], 64);
}

void bench_clear_ring(struct null_qp *q)
{
	memset(q->ring, 0, sizeof(q->ring));
}
