/* Two-process checks: RC traffic between the processes, and RNR. */

#include "fabric.h"

/* Receive slots of the server's small messages: 8 KiB apart in big[2]. */
#define SLOT(k) (big[2] + (k) * 8192)
/* The atomics' target: the last 8-byte word of the server's big[2]. */
#define ATOMIC_OFF (BIG - 64)
/* How many small sends the ordering step posts. */
#define NSMALL 60

/* The next completion is the successful work request wr_id of opcode,
 * with byte_len len. */
static void expect_len(uint64_t wr_id, int opcode, uint32_t len)
{
	struct ibv_wc wc = poll1();
	CHECK(wc.wr_id == wr_id && wc.status == IBV_WC_SUCCESS &&
		      (int)wc.opcode == opcode && wc.byte_len == len,
	      "wr_id %llu status %s opcode %d byte_len %u; expected %llu "
	      "opcode %d byte_len %u",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
	      wc.opcode, wc.byte_len, (unsigned long long)wr_id, opcode, len);
}

static void destroy(struct rc *r)
{
	CHECK(ibv_destroy_qp(r->qp) == 0, "destroy_qp: %s", strerror(errno));
}

void rc_server(void)
{
	struct rc a = make_rc(0), b = make_rc(1);
	struct ibv_wc wc;
	uint64_t *atomic = (uint64_t *)(big[2] + ATOMIC_OFF);
	me.qpn[0] = a.qp->qp_num;
	me.qpn[1] = b.qp->qp_num;
	me.psn[0] = 0x123456;
	me.psn[1] = 0x654321;
	fill(big[1], BIG, 77); /* what the client reads */
	*atomic = 100;
	exchange();
	connect_to(a.qp, peer.qpn[0], me.psn[0], peer.psn[0], &default_conn);
	connect_to(b.qp, peer.qpn[1], me.psn[1], peer.psn[1], &default_conn);
	uint32_t lk = big_mr[2]->lkey;
	post_recv(a.qp, 200, SLOT(0), 8192, lk); /* write with immediate */
	post_recv(a.qp, 201, SLOT(1), 8192, lk); /* send */
	post_recv(a.qp, 202, SLOT(2), 8192, lk); /* send with immediate */
	post_srq_recv(300, SLOT(3), 8192, lk);
	post_srq_recv(301, SLOT(4), 8192, lk);
	say(0);

	hear(1); /* an RDMA write of 4 KiB landed, nothing past it */
	check_pattern(big[0], 4096, 1, "write");
	check_zero(big[0] + 4096, 4096, "past the write");

	/* Write with immediate: the receive completes with the immediate and
	 * the length written; the data is there when the completion is. */
	expect_msg(a.qp, 200, IBV_WC_RECV_RDMA_WITH_IMM, 100, peer.qpn[0], 1,
		   0x1234);
	check_pattern(big[0] + 8192, 100, 2, "write with immediate");
	check_zero(SLOT(0), 100, "the receive of a write with immediate");

	expect_msg(a.qp, 201, IBV_WC_RECV, 300, peer.qpn[0], 0, 0);
	check_pattern(SLOT(1), 300, 3, "send");
	expect_msg(a.qp, 202, IBV_WC_RECV, 64, peer.qpn[0], 1, 0xdeadbeef);
	check_pattern(SLOT(2), 64, 4, "send with immediate");

	/* Into the SRQ, through QP b. */
	expect_msg(b.qp, 300, IBV_WC_RECV, 500, peer.qpn[1], 0, 0);
	check_pattern(SLOT(3), 500, 5, "send into the SRQ");
	expect_msg(b.qp, 301, IBV_WC_RECV, 32, peer.qpn[1], 1, 7);
	check_pattern(SLOT(4), 32, 6, "send with immediate into the SRQ");

	hear(7); /* compare-and-swap (hit, miss), fetch-and-add */
	CHECK(*atomic == 205, "atomic target %llu, expected 205",
	      (unsigned long long)*atomic);

	hear(8); /* 1 MiB written: several packets */
	check_pattern(big[0], BIG, 8, "1 MiB write");
	post_recv(a.qp, 203, big[0], BIG, big_mr[0]->lkey);
	say(80);
	expect_from(a.qp, 203, IBV_WC_RECV, BIG, peer.qpn[0]);
	check_pattern(big[0], BIG, 9, "1 MiB send");
	post_recv(a.qp, 204, SLOT(5), 8192, big_mr[2]->lkey);
	say(81);
	expect_msg(a.qp, 204, IBV_WC_RECV_RDMA_WITH_IMM, BIG, peer.qpn[0], 1,
		   0x5678);
	check_pattern(big[0], BIG, 10, "1 MiB write with immediate");

	/* Many small sends arrive in the order posted. */
	for (int i = 0; i < NSMALL; i++)
		post_recv(a.qp, 1000 + i, big[1] + i * 64, 64,
			  big_mr[1]->lkey);
	say(9);
	for (int i = 0; i < NSMALL; i++) {
		expect_msg(a.qp, 1000 + i, IBV_WC_RECV, 8, peer.qpn[0], 1, i);
		uint64_t v;
		memcpy(&v, big[1] + i * 64, 8);
		CHECK(v == (uint64_t)i, "small send %d carried %llu", i,
		      (unsigned long long)v);
	}
	hear(10);
	CHECK(!poll_within(&wc, 0), "a completion too many: wr_id %llu",
	      (unsigned long long)wc.wr_id);
	destroy(&a);
	destroy(&b);
}

static void atomic(struct rc *r, uint64_t wr_id, int cs, uint64_t compare,
		   uint64_t swap_add, uint64_t *result)
{
	ibv_wr_start(r->qpx);
	r->qpx->wr_id = wr_id;
	r->qpx->wr_flags = IBV_SEND_SIGNALED;
	uint64_t raddr = peer.addr[2] + ATOMIC_OFF;
	if (cs)
		ibv_wr_atomic_cmp_swp(r->qpx, peer.rkey[2], raddr, compare,
				      swap_add);
	else
		ibv_wr_atomic_fetch_add(r->qpx, peer.rkey[2], raddr, swap_add);
	ibv_wr_set_sge(r->qpx, mr[3]->lkey, (uintptr_t)result, 8);
	CHECK(ibv_wr_complete(r->qpx) == 0, "wr_complete");
	expect_len(wr_id, cs ? IBV_WC_COMP_SWAP : IBV_WC_FETCH_ADD, 8);
}

void rc_client(void)
{
	struct rc a = make_rc(0), b = make_rc(0);
	me.qpn[0] = a.qp->qp_num;
	me.qpn[1] = b.qp->qp_num;
	me.psn[0] = 0xffffe0; /* wraps past 0xffffff during the check */
	me.psn[1] = 0x000777;
	exchange();
	connect_to(a.qp, peer.qpn[0], me.psn[0], peer.psn[0], &default_conn);
	connect_to(b.qp, peer.qpn[1], me.psn[1], peer.psn[1], &default_conn);
	uint32_t rk0 = peer.rkey[0], rk1 = peer.rkey[1];
	hear(0); /* the server's receives are posted */

	fill(big[0], 4096, 1);
	post_one(&a, 1, IBV_WR_RDMA_WRITE, rk0, peer.addr[0], big[0], 4096,
		 big_mr[0]->lkey, 0);
	expect(1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	say(1);

	fill(mem[0], 100, 2);
	post_one(&a, 2, IBV_WR_RDMA_WRITE_WITH_IMM, rk0, peer.addr[0] + 8192,
		 mem[0], 100, mr[0]->lkey, 0x1234);
	expect(2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);

	post_one(&a, 3, IBV_WR_RDMA_READ, rk1, peer.addr[1], big[1], 4096,
		 big_mr[1]->lkey, 0);
	expect_len(3, IBV_WC_RDMA_READ, 4096);
	check_pattern(big[1], 4096, 77, "read");
	check_zero(big[1] + 4096, 4096, "past the read");

	fill(mem[1], 300, 3);
	post_one(&a, 4, IBV_WR_SEND, 0, 0, mem[1], 300, mr[1]->lkey, 0);
	expect(4, IBV_WC_SUCCESS, IBV_WC_SEND);
	fill(mem[2], 64, 4);
	post_one(&a, 5, IBV_WR_SEND_WITH_IMM, 0, 0, mem[2], 64, mr[2]->lkey,
		 0xdeadbeef);
	expect(5, IBV_WC_SUCCESS, IBV_WC_SEND);

	fill(mem[0], 500, 5);
	post_one(&b, 6, IBV_WR_SEND, 0, 0, mem[0], 500, mr[0]->lkey, 0);
	expect(6, IBV_WC_SUCCESS, IBV_WC_SEND);
	fill(mem[1], 32, 6);
	post_one(&b, 7, IBV_WR_SEND_WITH_IMM, 0, 0, mem[1], 32, mr[1]->lkey, 7);
	expect(7, IBV_WC_SUCCESS, IBV_WC_SEND);

	/* The atomics return the original value: 100, then 200 (a compare
	 * that misses swaps nothing), then 200 again (+5 → 205). */
	uint64_t *res = (uint64_t *)mem[3];
	memset(res, 0xff, 24);
	atomic(&a, 8, 1, 100, 200, &res[0]);
	atomic(&a, 9, 1, 100, 300, &res[1]);
	atomic(&a, 10, 0, 0, 5, &res[2]);
	CHECK(res[0] == 100 && res[1] == 200 && res[2] == 200,
	      "atomics returned %llu, %llu, %llu; expected 100, 200, 200",
	      (unsigned long long)res[0], (unsigned long long)res[1],
	      (unsigned long long)res[2]);
	say(7);

	/* 1 MiB: write, read, send, each several packets. */
	fill(big[0], BIG, 8);
	post_one(&a, 11, IBV_WR_RDMA_WRITE, rk0, peer.addr[0], big[0], BIG,
		 big_mr[0]->lkey, 0);
	expect(11, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	say(8);
	memset(big[1], 0, BIG);
	post_one(&a, 12, IBV_WR_RDMA_READ, rk1, peer.addr[1], big[1], BIG,
		 big_mr[1]->lkey, 0);
	expect_len(12, IBV_WC_RDMA_READ, BIG);
	check_pattern(big[1], BIG, 77, "1 MiB read");
	hear(80);
	fill(big[0], BIG, 9);
	post_one(&a, 13, IBV_WR_SEND, 0, 0, big[0], BIG, big_mr[0]->lkey, 0);
	expect(13, IBV_WC_SUCCESS, IBV_WC_SEND);
	hear(81);
	fill(big[0], BIG, 10);
	post_one(&a, 14, IBV_WR_RDMA_WRITE_WITH_IMM, rk0, peer.addr[0], big[0],
		 BIG, big_mr[0]->lkey, 0x5678);
	expect(14, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);

	hear(9);
	ibv_wr_start(a.qpx);
	for (uint64_t i = 0; i < NSMALL; i++) {
		a.qpx->wr_id = 1000 + i;
		a.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
		ibv_wr_send_imm(a.qpx, htobe32((uint32_t)i));
		ibv_wr_set_inline_data(a.qpx, &i, 8);
	}
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	for (int i = 0; i < NSMALL; i++)
		expect(1000 + i, IBV_WC_SUCCESS, IBV_WC_SEND);
	say(10);
	destroy(&a);
	destroy(&b);
}

/* RNR: a send finds no receive. With rnr_retry 2 it ends in
 * RNR_RETRY_EXC_ERR after the retries; with rnr_retry 7 (for ever) it
 * completes once the peer posts a receive, 300 ms later. */
void rnr_server(void)
{
	struct rc a = make_rc(0), b = make_rc(0);
	struct ibv_wc wc;
	me.qpn[0] = a.qp->qp_num;
	me.qpn[1] = b.qp->qp_num;
	exchange();
	connect_to(a.qp, peer.qpn[0], 0, 0, &default_conn);
	connect_to(b.qp, peer.qpn[1], 0, 0, &default_conn);
	hear(1);
	/* Receiver not ready is no error of the responder's. */
	CHECK(qp_state(a.qp) == IBV_QPS_RTS, "responder state %d",
	      qp_state(a.qp));
	CHECK(!poll_within(&wc, 50), "a completion: wr_id %llu status %s",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	hear(2);
	usleep(300 * 1000);
	post_recv(b.qp, 400, SLOT(0), 8192, big_mr[2]->lkey);
	expect_from(b.qp, 400, IBV_WC_RECV, 128, peer.qpn[1]);
	check_pattern(SLOT(0), 128, 41, "send after RNR");
	hear(3);
	destroy(&a);
	destroy(&b);
}

void rnr_client(void)
{
	struct rc a = make_rc(0), b = make_rc(0);
	struct conn few = default_conn;
	few.rnr_retry = 2;
	me.qpn[0] = a.qp->qp_num;
	me.qpn[1] = b.qp->qp_num;
	exchange();
	connect_to(a.qp, peer.qpn[0], 0, 0, &few);
	connect_to(b.qp, peer.qpn[1], 0, 0, &default_conn);

	fill(mem[0], 64, 40);
	double t0 = now_ms();
	post_one(&a, 1, IBV_WR_SEND, 0, 0, mem[0], 64, mr[0]->lkey, 0);
	expect(1, IBV_WC_RNR_RETRY_EXC_ERR, -1);
	/* Two retries, each after the responder's min_rnr_timer (0.64 ms). */
	CHECK(now_ms() - t0 >= 2 * 0.64, "RNR error after %.2f ms",
	      now_ms() - t0);
	CHECK(qp_state(a.qp) == IBV_QPS_ERR, "requester state %d",
	      qp_state(a.qp));
	post_one(&a, 2, IBV_WR_SEND, 0, 0, mem[0], 64, mr[0]->lkey, 0);
	expect(2, IBV_WC_WR_FLUSH_ERR, -1);
	say(1);

	fill(mem[1], 128, 41);
	t0 = now_ms();
	post_one(&b, 3, IBV_WR_SEND, 0, 0, mem[1], 128, mr[1]->lkey, 0);
	say(2);
	expect(3, IBV_WC_SUCCESS, IBV_WC_SEND);
	CHECK(now_ms() - t0 >= 300, "the send completed after %.0f ms, "
				     "before the receive was posted",
	      now_ms() - t0);
	say(3);
	destroy(&a);
	destroy(&b);
}
