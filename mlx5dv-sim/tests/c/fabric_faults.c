/* Two-process checks: transport retries against a QP or a process that is
 * not there, a peer killed mid-stream, and the responder's NAKs (remote
 * access error, invalid request) with its async events. */

#include "fabric.h"

/* What a run may take beyond the retry budget on a loaded machine. */
#define SLACK_MS 1500.0

/* The longest a requester keeps retrying an unanswered packet: (retry_cnt
 * + 1) attempts, each waiting max(4.096 µs × 2^timeout, the device's least
 * acknowledgement timeout, MLX5DV_SIM_MIN_ACK_TIMEOUT_MS). */
static double retry_budget_ms(const struct conn *c)
{
	double spec = 4.096e-3 * (double)(1u << c->timeout);
	double least = env_ms("MLX5DV_SIM_MIN_ACK_TIMEOUT_MS", 50);
	return (c->retry_cnt + 1) * (spec > least ? spec : least);
}

/* Posts a 64-byte RDMA write on r and expects it to end in
 * RETRY_EXC_ERR after the whole retry budget and within it plus slack;
 * the QP is then in ERR and flushes what comes after. */
static void write_exhausts_retries(struct rc *r, const struct conn *c)
{
	double budget = retry_budget_ms(c);
	fill(mem[0], 64, 60);
	double t0 = now_ms();
	post_one(r, 1, IBV_WR_RDMA_WRITE, peer.rkey[0], peer.addr[0], mem[0],
		 64, mr[0]->lkey, 0);
	expect(1, IBV_WC_RETRY_EXC_ERR, -1);
	double took = now_ms() - t0;
	CHECK(took >= budget && took <= budget + SLACK_MS,
	      "RETRY_EXC_ERR after %.0f ms; the budget is %.0f ms", took,
	      budget);
	CHECK(qp_state(r->qp) == IBV_QPS_ERR, "requester state %d",
	      qp_state(r->qp));
	post_one(r, 2, IBV_WR_RDMA_WRITE, peer.rkey[0], peer.addr[0], mem[0],
		 64, mr[0]->lkey, 0);
	expect(2, IBV_WC_WR_FLUSH_ERR, -1);
	fprintf(stderr, "%sretries exhausted after %.0f ms (budget %.0f ms)\n",
		fail_prefix, took, budget);
}

/* A write to a QPN the peer process does not have. */
void absent_qp_server(void)
{
	struct rc a = make_rc(0);
	me.qpn[0] = a.qp->qp_num;
	exchange();
	hear(1);
	CHECK(ibv_destroy_qp(a.qp) == 0, "destroy_qp");
}

void absent_qp_client(void)
{
	struct rc r = make_rc(0);
	/* 4.096 µs × 2^8 ≈ 1 ms: the least acknowledgement timeout rules. */
	struct conn c = default_conn;
	c.timeout = 8;
	c.retry_cnt = 3;
	exchange();
	connect_to(r.qp, peer.qpn[0] + 0x1000, 0, 0, &c);
	write_exhausts_retries(&r, &c);
	say(1);
	CHECK(ibv_destroy_qp(r.qp) == 0, "destroy_qp");
}

/* A write to a QP of a process that has exited (its QP still in RTS
 * when it did). */
void exited_server(void)
{
	struct rc a = make_rc(0);
	me.qpn[0] = a.qp->qp_num;
	exchange();
	connect_to(a.qp, peer.qpn[0], 0, 0, &default_conn);
	hear(1);
	printf("ok exited server\n");
	fflush(stdout);
	_exit(0);
}

void exited_client(void)
{
	struct rc r = make_rc(0);
	/* 4.096 µs × 2^16 ≈ 268 ms a try: the QP's timeout rules. */
	struct conn c = default_conn;
	c.timeout = 16;
	c.retry_cnt = 1;
	me.qpn[0] = r.qp->qp_num;
	exchange();
	connect_to(r.qp, peer.qpn[0], 0, 0, &c);
	fill(mem[0], 64, 61);
	post_one(&r, 9, IBV_WR_RDMA_WRITE, peer.rkey[0], peer.addr[0], mem[0],
		 64, mr[0]->lkey, 0);
	expect(9, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	say(1);
	wait_peer_gone();
	write_exhausts_retries(&r, &c);
	CHECK(ibv_destroy_qp(r.qp) == 0, "destroy_qp");
}

/* The server is killed (SIGKILL, by the client) while the client streams
 * 256 KiB writes to it: the stream ends in one RETRY_EXC_ERR within the
 * retry budget, the rest flushed; nothing hangs. */
#define STREAM 40
#define STREAM_LEN (256 * 1024)

void killed_server(void)
{
	struct rc a = make_rc(0);
	me.qpn[0] = a.qp->qp_num;
	exchange();
	connect_to(a.qp, peer.qpn[0], 0, 0, &default_conn);
	/* Until killed: the client never says this. */
	hear(~0u);
	FAIL("not killed");
}

void killed_client(void)
{
	struct rc r = make_rc(0);
	struct conn c = default_conn;
	c.timeout = 14; /* ≈ 67 ms a try */
	c.retry_cnt = 2;
	me.qpn[0] = r.qp->qp_num;
	exchange();
	connect_to(r.qp, peer.qpn[0], 0, 0, &c);
	fill(big[0], BIG, 62);
	ibv_wr_start(r.qpx);
	for (int i = 0; i < STREAM; i++) {
		r.qpx->wr_id = i;
		r.qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(r.qpx, peer.rkey[0],
				  peer.addr[0] + (i % 4) * STREAM_LEN);
		ibv_wr_set_sge(r.qpx, big_mr[0]->lkey,
			       (uintptr_t)big[0] + (i % 4) * STREAM_LEN,
			       STREAM_LEN);
	}
	CHECK(ibv_wr_complete(r.qpx) == 0, "wr_complete");
	double killed_at = 0, failed_at = 0;
	int ok = 0, failed = 0, flushed = 0;
	for (int i = 0; i < STREAM; i++) {
		struct ibv_wc wc = poll1();
		CHECK(wc.wr_id == (uint64_t)i, "completion of wr_id %llu, "
					       "expected %d",
		      (unsigned long long)wc.wr_id, i);
		if (wc.status == IBV_WC_SUCCESS) {
			CHECK(!failed && wc.opcode == IBV_WC_RDMA_WRITE,
			      "write %d succeeded after the error, opcode %d",
			      i, wc.opcode);
			ok++;
		} else if (wc.status == IBV_WC_RETRY_EXC_ERR) {
			CHECK(killed_at && !failed, "write %d: retry error", i);
			failed++;
			failed_at = now_ms();
		} else {
			CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && failed,
			      "write %d: status %s", i,
			      ibv_wc_status_str(wc.status));
			flushed++;
		}
		if (ok == 3 && !killed_at) {
			CHECK(kill(peer.pid, SIGKILL) == 0, "kill: %s",
			      strerror(errno));
			killed_at = now_ms();
		}
	}
	double budget = retry_budget_ms(&c);
	CHECK(failed == 1 && ok + flushed == STREAM - 1,
	      "%d written, %d failed, %d flushed", ok, failed, flushed);
	CHECK(failed_at - killed_at <= budget + SLACK_MS,
	      "the error came %.0f ms after the kill; the budget is %.0f ms",
	      failed_at - killed_at, budget);
	CHECK(qp_state(r.qp) == IBV_QPS_ERR, "requester state %d",
	      qp_state(r.qp));
	fprintf(stderr, "client: %d writes, then RETRY_EXC_ERR %.0f ms after "
			"the kill (budget %.0f ms)\n",
		ok, failed_at - killed_at, budget);
	wait_peer_gone();
	CHECK(ibv_destroy_qp(r.qp) == 0, "destroy_qp");
}

/* A bad rkey: REM_ACCESS_ERR at the requester; the responder QP goes to
 * ERR with IBV_EVENT_QP_ACCESS_ERR and flushes its receive. A write to a
 * QP without remote write access: REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR. */
/* The responder QP qp NAKed a write: its context has the async event, it
 * is in ERR, its receive wr_id is flushed, and nothing was written. */
static void responder_failed(enum ibv_event_type event, struct ibv_qp *qp,
			     uint64_t wr_id)
{
	expect_async(event, qp);
	CHECK(qp_state(qp) == IBV_QPS_ERR, "responder state %d", qp_state(qp));
	expect(wr_id, IBV_WC_WR_FLUSH_ERR, -1);
	check_zero(big[0], 4096, "the refused write");
}

void nak_server(void)
{
	struct rc a = make_rc(0), b = make_rc(0);
	struct conn no_write = default_conn;
	no_write.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
	me.qpn[0] = a.qp->qp_num;
	me.qpn[1] = b.qp->qp_num;
	exchange();
	connect_to(a.qp, peer.qpn[0], 0, 0, &default_conn);
	connect_to(b.qp, peer.qpn[1], 0, 0, &no_write);
	post_recv(a.qp, 500, big[2], 4096, big_mr[2]->lkey);
	post_recv(b.qp, 501, big[2] + 4096, 4096, big_mr[2]->lkey);
	say(0);

	hear(1);
	responder_failed(IBV_EVENT_QP_ACCESS_ERR, a.qp, 500);
	hear(2);
	responder_failed(IBV_EVENT_QP_REQ_ERR, b.qp, 501);
	say(3);
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
}

void nak_client(void)
{
	struct rc a = make_rc(0), b = make_rc(0);
	me.qpn[0] = a.qp->qp_num;
	me.qpn[1] = b.qp->qp_num;
	exchange();
	connect_to(a.qp, peer.qpn[0], 0, 0, &default_conn);
	connect_to(b.qp, peer.qpn[1], 0, 0, &default_conn);
	hear(0); /* the server's receives are posted */
	fill(mem[0], 64, 63);

	/* The rkey with another variant byte: not a key the peer has. */
	post_one(&a, 1, IBV_WR_RDMA_WRITE, peer.rkey[0] ^ 0x55, peer.addr[0],
		 mem[0], 64, mr[0]->lkey, 0);
	expect(1, IBV_WC_REM_ACCESS_ERR, -1);
	CHECK(qp_state(a.qp) == IBV_QPS_ERR, "requester state %d",
	      qp_state(a.qp));
	post_one(&a, 2, IBV_WR_RDMA_WRITE, peer.rkey[0], peer.addr[0], mem[0],
		 64, mr[0]->lkey, 0);
	expect(2, IBV_WC_WR_FLUSH_ERR, -1);
	say(1);

	post_one(&b, 3, IBV_WR_RDMA_WRITE, peer.rkey[0], peer.addr[0], mem[0],
		 64, mr[0]->lkey, 0);
	expect(3, IBV_WC_REM_INV_REQ_ERR, -1);
	CHECK(qp_state(b.qp) == IBV_QPS_ERR, "requester state %d",
	      qp_state(b.qp));
	say(2);
	hear(3);
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
}
