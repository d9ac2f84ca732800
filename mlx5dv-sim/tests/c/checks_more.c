/* Model checks: Completion channels, async events, several contexts, UD. */

#include "model.h"

void check_channel(void)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch, "create_comp_channel");
	struct ibv_cq *ecq = ibv_create_cq(ctx, 16, (void *)0x5a5a, ch, 0);
	CHECK(ecq, "create_cq with channel");
	struct ibv_cq *saved = cq;
	cq = ecq;
	struct rc a = make_rc(0), b = make_rc(0);
	connect_rc(&a, &b);
	CHECK(ibv_req_notify_cq(ecq, 0) == 0, "req_notify");
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 900;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)mem[1]);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 8);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	if (sim_step)
		sim_step();
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0, "get_cq_event");
	CHECK(ev_cq == ecq && ev_ctx == (void *)0x5a5a, "event for the CQ");
	ibv_ack_cq_events(ecq, 1);
	expect(900, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);

	/* Armed for solicited completions only: a plain send does not fire,
	 * a solicited one does. */
	CHECK(ibv_req_notify_cq(ecq, 1) == 0, "req_notify solicited");
	post_recv(b.qp, 910, mem[1], 64, mr[1]->lkey);
	post_recv(b.qp, 911, mem[1] + 64, 64, mr[1]->lkey);
	for (int sol = 0; sol < 2; sol++) {
		ibv_wr_start(a.qpx);
		a.qpx->wr_id = 901 + sol;
		a.qpx->wr_flags = IBV_SEND_SIGNALED | (sol ? IBV_SEND_SOLICITED : 0);
		ibv_wr_send(a.qpx);
		ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 8);
		CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
		struct ibv_wc w1 = poll1(), w2 = poll1();
		CHECK(w1.status == IBV_WC_SUCCESS && w2.status == IBV_WC_SUCCESS,
		      "solicited round %d", sol);
		if (sim_step)
			sim_step();
		struct pollfd p = {.fd = ch->fd, .events = POLLIN};
		int n = poll(&p, 1, sol ? 10000 : 100);
		CHECK(n == sol, "solicited-only arm: %d events after a %s send", n,
		      sol ? "solicited" : "plain");
	}
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == ecq,
	      "get_cq_event (solicited)");
	ibv_ack_cq_events(ecq, 1);
	/* An event left unread in the channel: destroying the CQ drops it
	 * (it was never reported), so ibv_destroy_cq does not wait for its
	 * acknowledgement. SIGALRM ends the program if it hangs. */
	CHECK(ibv_req_notify_cq(ecq, 0) == 0, "req_notify");
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 903;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)mem[1]);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 8);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(903, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	if (sim_step)
		sim_step();
	struct pollfd pe = {.fd = ch->fd, .events = POLLIN};
	CHECK(poll(&pe, 1, 10000) == 1, "the event reached the channel");
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
	cq = saved;
	alarm(20);
	CHECK(ibv_destroy_cq(ecq) == 0, "destroy_cq");
	alarm(0);
	CHECK(poll(&pe, 1, 0) == 0, "the dropped CQ's event is still queued");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy channel");
}

/* Run alone with MLX5DV_SIM_FAIL_CQ_OVERRUN=1: the first CQE overruns the
 * CQ, which reports IBV_EVENT_CQ_ERR on the async fd. Not in the default
 * list. */
void check_overrun(void)
{
	struct rc a = make_rc(0), b = make_rc(0);
	connect_rc(&a, &b);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1200;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)mem[1]);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 8);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	if (sim_step)
		sim_step();
	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	CHECK(poll(&p, 1, 10000) == 1, "no async event within 10 s");
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(ctx, &ev) == 0, "get_async_event");
	CHECK(ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == cq,
	      "async event %d", ev.event_type);
	ibv_ack_async_event(&ev);
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "a CQE after the overrun");
	exit(0);
}

/* A second context on the same device: its QP, PD and MR talk to the
 * first context's. */
void check_contexts(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *c2 = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	CHECK(c2, "second open_device");
	struct ibv_pd *pd2 = ibv_alloc_pd(c2);
	uint8_t *m2 = aligned_alloc(4096, BUF);
	struct ibv_mr *mr2 = ibv_reg_mr(pd2, m2, BUF, ALL_ACCESS);
	struct ibv_cq *cq2 = ibv_create_cq(c2, 16, NULL, NULL, 0);
	CHECK(pd2 && mr2 && cq2, "second context objects");
	struct ibv_qp_init_attr_ex ia = qp_attr(IBV_QPT_RC, 8, 8);
	ia.send_cq = cq2;
	ia.recv_cq = cq2;
	ia.pd = pd2;
	struct rc b = {0};
	b.qp = ibv_create_qp_ex(c2, &ia);
	CHECK(b.qp, "qp on the second context");
	struct rc a = make_rc(0);
	connect_rc(&a, &b);
	fill(mem[0], 512, 17);
	memset(m2, 0, 512);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1100;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, mr2->rkey, (uintptr_t)m2);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 512);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(1100, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	same(m2, mem[0], 512, "write across contexts");
	/* The first context's rkey is not valid in the second's PD. */
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1101;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)mem[1]);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 8);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(1101, IBV_WC_REM_ACCESS_ERR, -1);
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
	CHECK(ibv_destroy_cq(cq2) == 0 && ibv_dereg_mr(mr2) == 0 &&
		      ibv_dealloc_pd(pd2) == 0 && ibv_close_device(c2) == 0,
	      "second context teardown");
	free(m2);
}

/* UD: a datagram lands 40 bytes (the GRH's room) into the receive; a wrong
 * qkey drops it, the sender completing anyway. */
void check_ud(void)
{
	struct ibv_qp *a = make_ud(0x11), *b = make_ud(0x22);
	struct ibv_ah_attr aa = {.dlid = 1, .port_num = 1};
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah, "create_ah");
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
	memset(mem[1], 0, 512);
	post_recv(b, 1300, mem[1], 256, mr[1]->lkey);
	fill(mem[0], 100, 61);
	ibv_wr_start(x);
	x->wr_id = 1301;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(x, htobe32(7));
	ibv_wr_set_ud_addr(x, ah, b->qp_num, 0x22);
	ibv_wr_set_sge(x, mr[0]->lkey, (uintptr_t)mem[0], 100);
	CHECK(ibv_wr_complete(x) == 0, "wr_complete");
	struct ibv_wc w1 = poll1(), w2 = poll1();
	struct ibv_wc *r = w1.wr_id == 1300 ? &w1 : &w2, *s = r == &w1 ? &w2 : &w1;
	CHECK(s->wr_id == 1301 && s->status == IBV_WC_SUCCESS &&
		      s->opcode == IBV_WC_SEND,
	      "UD send");
	CHECK(r->wr_id == 1300 && r->status == IBV_WC_SUCCESS &&
		      r->opcode == IBV_WC_RECV && r->byte_len == 140 &&
		      r->src_qp == a->qp_num && (r->wc_flags & IBV_WC_WITH_IMM) &&
		      be32toh(r->imm_data) == 7,
	      "UD recv: len %u src %#x flags %#x", r->byte_len, r->src_qp,
	      r->wc_flags);
	same(mem[1] + 40, mem[0], 100, "UD data");
	/* A wrong qkey: the sender completes, nothing arrives. */
	ibv_wr_start(x);
	x->wr_id = 1302;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_ud_addr(x, ah, b->qp_num, 0x23);
	ibv_wr_set_sge(x, mr[0]->lkey, (uintptr_t)mem[0], 10);
	CHECK(ibv_wr_complete(x) == 0, "wr_complete");
	expect(1302, IBV_WC_SUCCESS, IBV_WC_SEND);
	struct ibv_wc wc;
	struct timespec ms = {0, 50 * 1000 * 1000};
	nanosleep(&ms, NULL);
	if (sim_step)
		sim_step();
	CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "a datagram with a wrong qkey arrived");
	ibv_destroy_ah(ah);
	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy UD");
}
