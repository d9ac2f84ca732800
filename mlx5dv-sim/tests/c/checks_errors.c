#include "model.h"

/*
 * The responder and transport error syndromes, each through libmlx5's own
 * poll (which maps the syndrome to the ibv_wc status): a send into a
 * receive too short (receiver LOCAL_LENGTH, sender REMOTE_INVAL_REQ), a
 * send into a receive with a bad key (receiver LOCAL_PROT, sender
 * REMOTE_OP), a write to a QP that no longer answers (TRANSPORT_RETRY_EXC).
 * Both QPs go to ERR.
 */

/* Polls two completions, in either order: (wr_id a, status sa) and
 * (wr_id b, status sb). */
static void expect_pair(uint64_t a, enum ibv_wc_status sa, uint64_t b,
			enum ibv_wc_status sb, const char *what)
{
	int seen_a = 0, seen_b = 0;
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc = poll1();
		if (wc.wr_id == a && wc.status == sa && !seen_a)
			seen_a = 1;
		else if (wc.wr_id == b && wc.status == sb && !seen_b)
			seen_b = 1;
		else
			FAIL("%s: completion wr_id %llu status %s (expected %llu "
			     "%s and %llu %s)",
			     what, (unsigned long long)wc.wr_id,
			     ibv_wc_status_str(wc.status),
			     (unsigned long long)a, ibv_wc_status_str(sa),
			     (unsigned long long)b, ibv_wc_status_str(sb));
	}
}

static enum ibv_qp_state state_of(struct ibv_qp *qp)
{
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	CHECK(ibv_query_qp(qp, &at, IBV_QP_STATE, &ia) == 0, "query_qp");
	return at.qp_state;
}

static void send_64(struct rc *from, uint64_t id)
{
	ibv_wr_start(from->qpx);
	from->qpx->wr_id = id;
	from->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(from->qpx);
	ibv_wr_set_sge(from->qpx, mr[0]->lkey, (uintptr_t)mem[0], 64);
	CHECK(ibv_wr_complete(from->qpx) == 0, "wr_complete");
}

void check_syndromes(void)
{
	/* A receive of 16 bytes for a send of 64. */
	struct rc a = make_rc(0), b = make_rc(0);
	connect_rc(&a, &b);
	fill(mem[0], 64, 5);
	memset(mem[2], 0, 64);
	post_recv(b.qp, 1300, mem[2], 16, mr[2]->lkey);
	send_64(&a, 1301);
	expect_pair(1300, IBV_WC_LOC_LEN_ERR, 1301, IBV_WC_REM_INV_REQ_ERR,
		    "short receive");
	CHECK(state_of(a.qp) == IBV_QPS_ERR && state_of(b.qp) == IBV_QPS_ERR,
	      "short receive: both QPs in ERR");
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");

	/* A receive whose key names no MR. */
	a = make_rc(0);
	b = make_rc(0);
	connect_rc(&a, &b);
	post_recv(b.qp, 1302, mem[2], 64, mr[2]->lkey ^ 0x5500);
	send_64(&a, 1303);
	expect_pair(1302, IBV_WC_LOC_PROT_ERR, 1303, IBV_WC_REM_OP_ERR,
		    "receive with a bad key");
	CHECK(state_of(a.qp) == IBV_QPS_ERR && state_of(b.qp) == IBV_QPS_ERR,
	      "bad receive key: both QPs in ERR");
	static const uint8_t zero[64];
	same(mem[2], zero, 64, "nothing received");
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");

	/* The responder moved to RESET: the requester retries
	 * (retry_cnt 7, timeout 14: about 0.5 s), then fails. */
	a = make_rc(0);
	b = make_rc(0);
	connect_rc(&a, &b);
	to_state(b.qp, IBV_QPS_RESET, 0);
	write_to(&a, 1304, mr[1]->rkey, IBV_WC_RETRY_EXC_ERR);
	CHECK(state_of(a.qp) == IBV_QPS_ERR, "retry exceeded: QP in ERR");
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
}
