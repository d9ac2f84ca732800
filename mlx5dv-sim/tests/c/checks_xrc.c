#include "model.h"
#include <fcntl.h>

/*
 * XRC on the software device, in one process: an XRC domain, XRC SRQs in
 * it, an XRC initiator (IBV_QPT_XRC_SEND) connected to an XRC target
 * (IBV_QPT_XRC_RECV). Each request lands in the SRQ it names: a send
 * (ibv_wr_* and the classic ibv_post_send) completes on the SRQ's CQ
 * with the SRQ's receive, an RDMA write and read move bytes under the
 * SRQ's PD; an SRQ of another domain is refused (remote invalid request).
 * Closing a domain that still holds SRQs is EBUSY.
 */

static struct ibv_srq *xsrq(struct ibv_xrcd *x)
{
	struct ibv_srq_init_attr_ex a = {
		.attr = {.max_wr = 16, .max_sge = 1},
		.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
			     IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_PD,
		.srq_type = IBV_SRQT_XRC,
		.xrcd = x,
		.cq = cq,
		.pd = pd};
	struct ibv_srq *s = ibv_create_srq_ex(ctx, &a);
	CHECK(s, "create_srq_ex XRC: %s", strerror(errno));
	return s;
}

static uint32_t srqn(struct ibv_srq *s)
{
	uint32_t n = 0;
	CHECK(ibv_get_srq_num(s, &n) == 0, "get_srq_num");
	return n;
}

static void xrc_recv(struct ibv_srq *s, uint64_t id, void *buf, uint32_t len)
{
	struct ibv_sge g = {(uintptr_t)buf, len, mr[1]->lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &g, .num_sge = 1};
	struct ibv_recv_wr *bad;
	CHECK(ibv_post_srq_recv(s, &wr, &bad) == 0, "post_srq_recv");
}

static struct ibv_xrcd *open_domain(void)
{
	struct ibv_xrcd_init_attr xa = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = -1,
		.oflags = O_CREAT};
	struct ibv_xrcd *x = ibv_open_xrcd(ctx, &xa);
	CHECK(x, "open_xrcd: %s", strerror(errno));
	return x;
}

void check_xrc(void)
{
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	CHECK(da.device_cap_flags & IBV_DEVICE_XRC, "XRC not claimed");

	struct ibv_xrcd *x = open_domain(), *other = open_domain();
	struct ibv_srq *s1 = xsrq(x), *s2 = xsrq(x), *s3 = xsrq(other);
	CHECK(srqn(s1) != srqn(s2), "two SRQs, one number");

	struct ibv_qp_init_attr_ex ta = {
		.qp_type = IBV_QPT_XRC_RECV,
		.comp_mask = IBV_QP_INIT_ATTR_XRCD,
		.xrcd = x};
	struct ibv_qp *tgt = ibv_create_qp_ex(ctx, &ta);
	CHECK(tgt, "create XRC_RECV QP: %s", strerror(errno));
	struct ibv_qp_init_attr_ex ia = {
		.qp_type = IBV_QPT_XRC_SEND,
		.send_cq = cq,
		.cap = {.max_send_wr = 16, .max_send_sge = 1},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.pd = pd,
		.send_ops_flags = IBV_QP_EX_WITH_SEND |
				  IBV_QP_EX_WITH_RDMA_WRITE |
				  IBV_QP_EX_WITH_RDMA_READ};
	struct ibv_qp *ini = ibv_create_qp_ex(ctx, &ia);
	CHECK(ini, "create XRC_SEND QP: %s", strerror(errno));
	struct ibv_qp_ex *qx = ibv_qp_to_qp_ex(ini);
	to_state(tgt, IBV_QPS_INIT, 0);
	to_state(ini, IBV_QPS_INIT, 0);
	to_state(tgt, IBV_QPS_RTR, ini->qp_num);
	to_state(ini, IBV_QPS_RTR, tgt->qp_num);
	to_state(ini, IBV_QPS_RTS, 0);

	/* A send through ibv_wr_*: to s2, not s1. */
	fill(mem[0], 64, 3);
	memset(mem[1], 0, 256);
	xrc_recv(s1, 101, mem[1], 64);
	xrc_recv(s2, 102, mem[1] + 128, 64);
	ibv_wr_start(qx);
	qx->wr_id = 1;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_xrc_srqn(qx, srqn(s2));
	ibv_wr_set_sge(qx, mr[0]->lkey, (uintptr_t)mem[0], 40);
	CHECK(ibv_wr_complete(qx) == 0, "wr_complete");
	struct ibv_wc w[2];
	for (int i = 0; i < 2; i++)
		w[i] = poll1();
	struct ibv_wc *snd = w[0].wr_id == 1 ? &w[0] : &w[1];
	struct ibv_wc *rcv = w[0].wr_id == 1 ? &w[1] : &w[0];
	CHECK(snd->wr_id == 1 && snd->status == IBV_WC_SUCCESS &&
		      snd->opcode == IBV_WC_SEND,
	      "send: wr_id %llu status %d opcode %d",
	      (unsigned long long)snd->wr_id, snd->status, snd->opcode);
	CHECK(rcv->wr_id == 102 && rcv->status == IBV_WC_SUCCESS &&
		      rcv->opcode == IBV_WC_RECV && rcv->byte_len == 40 &&
		      rcv->qp_num == tgt->qp_num,
	      "receive: wr_id %llu status %d opcode %d len %u qp %#x",
	      (unsigned long long)rcv->wr_id, rcv->status, rcv->opcode,
	      rcv->byte_len, rcv->qp_num);
	same(mem[1] + 128, mem[0], 40, "XRC send into s2");
	CHECK(mem[1][0] == 0, "s1's buffer untouched");

	/* The classic post: to s1. */
	fill(mem[0], 64, 9);
	struct ibv_sge g = {(uintptr_t)mem[0], 24, mr[0]->lkey};
	struct ibv_send_wr sw = {.wr_id = 2, .sg_list = &g, .num_sge = 1,
				 .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED};
	sw.qp_type.xrc.remote_srqn = srqn(s1);
	struct ibv_send_wr *bad;
	CHECK(ibv_post_send(ini, &sw, &bad) == 0, "post_send");
	for (int i = 0; i < 2; i++)
		w[i] = poll1();
	rcv = w[0].wr_id == 2 ? &w[1] : &w[0];
	CHECK(rcv->wr_id == 101 && rcv->status == IBV_WC_SUCCESS &&
		      rcv->byte_len == 24,
	      "classic receive: wr_id %llu status %d len %u",
	      (unsigned long long)rcv->wr_id, rcv->status, rcv->byte_len);
	same(mem[1], mem[0], 24, "XRC send into s1");

	/* RDMA write and read through the target, under s1's PD. */
	fill(mem[0], 64, 21);
	ibv_wr_start(qx);
	qx->wr_id = 3;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(qx, mr[2]->rkey, (uintptr_t)mem[2]);
	ibv_wr_set_xrc_srqn(qx, srqn(s1));
	ibv_wr_set_sge(qx, mr[0]->lkey, (uintptr_t)mem[0], 64);
	CHECK(ibv_wr_complete(qx) == 0, "wr_complete");
	expect(3, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	same(mem[2], mem[0], 64, "XRC RDMA write");
	memset(mem[3], 0, 64);
	ibv_wr_start(qx);
	qx->wr_id = 4;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(qx, mr[2]->rkey, (uintptr_t)mem[2]);
	ibv_wr_set_xrc_srqn(qx, srqn(s1));
	ibv_wr_set_sge(qx, mr[3]->lkey, (uintptr_t)mem[3], 64);
	CHECK(ibv_wr_complete(qx) == 0, "wr_complete");
	expect(4, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
	same(mem[3], mem[0], 64, "XRC RDMA read");

	/* An SRQ of another domain: refused, nothing received. */
	xrc_recv(s3, 103, mem[1], 64);
	ibv_wr_start(qx);
	qx->wr_id = 5;
	qx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qx);
	ibv_wr_set_xrc_srqn(qx, srqn(s3));
	ibv_wr_set_sge(qx, mr[0]->lkey, (uintptr_t)mem[0], 8);
	CHECK(ibv_wr_complete(qx) == 0, "wr_complete");
	expect(5, IBV_WC_REM_INV_REQ_ERR, -1);

	errno = 0;
	CHECK(ibv_close_xrcd(x) == EBUSY, "close_xrcd with SRQs: not EBUSY");
	CHECK(ibv_destroy_qp(ini) == 0 && ibv_destroy_qp(tgt) == 0,
	      "destroy XRC QPs");
	CHECK(ibv_destroy_srq(s1) == 0 && ibv_destroy_srq(s2) == 0 &&
		      ibv_destroy_srq(s3) == 0,
	      "destroy XRC SRQs");
	CHECK(ibv_close_xrcd(x) == 0 && ibv_close_xrcd(other) == 0,
	      "close_xrcd");
}
