/* Two-process check: UC. Multi-packet writes with immediate and sends land;
 * a write to a bad rkey and a send that finds no receive complete
 * successfully at the requester and are dropped at the responder, which
 * stays in RTS (no NAK, no RNR, no error state) and takes what follows. */

#include "fabric.h"

#define UC_PSN_SERVER 0x0a0b0c
#define UC_PSN_CLIENT 0x0c0b0a

static struct rc make_uc(void)
{
	struct ibv_qp_init_attr_ex ia = qp_attr(IBV_QPT_UC, 8, 8);
	ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ia.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			    IBV_QP_EX_WITH_RDMA_WRITE |
			    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
	struct rc r = {0};
	r.qp = ibv_create_qp_ex(ctx, &ia);
	CHECK(r.qp, "create UC QP: %s", strerror(errno));
	r.qpx = ibv_qp_to_qp_ex(r.qp);
	return r;
}

/* INIT, RTR and RTS with the attributes the kernel takes for UC. */
static void uc_connect(struct ibv_qp *qp, uint32_t dqpn, uint32_t my_psn,
		       uint32_t peer_psn)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
				.port_num = 1,
				.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
						   IBV_ACCESS_REMOTE_WRITE};
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "UC INIT: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = path_mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = peer_psn;
	set_ah_attr(&a.ah_attr);
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN) == 0,
	      "UC RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = my_psn;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0,
	      "UC RTS: %s", strerror(errno));
	CHECK(qp_state(qp) == IBV_QPS_RTS, "not in RTS");
}

void uc_server(void)
{
	struct rc u = make_uc();
	struct ibv_wc wc = {0};
	me.qpn[0] = u.qp->qp_num;
	me.psn[0] = UC_PSN_SERVER;
	exchange();
	uc_connect(u.qp, peer.qpn[0], me.psn[0], peer.psn[0]);
	post_recv(u.qp, 200, big[2], 8192, big_mr[2]->lkey);
	say(0);

	/* 64 KiB written with an immediate: many packets, one completion. */
	expect_msg(u.qp, 200, IBV_WC_RECV_RDMA_WITH_IMM, 65536, peer.qpn[0], 1,
		   0x5151);
	check_pattern(big[0], 65536, 41, "UC write with immediate");
	check_zero(big[2], 8192, "the receive of a write with immediate");

	hear(1); /* a write to a bad rkey and a send without a receive */
	CHECK(poll_within(&wc, 300) == 0,
	      "a dropped message completed: wr_id %llu status %s",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	CHECK(qp_state(u.qp) == IBV_QPS_RTS, "the UC responder left RTS");
	check_zero(big[1], 8192, "the target of the bad-rkey write");
	post_recv(u.qp, 201, big[2], 8192, big_mr[2]->lkey);
	say(2);

	/* The next send lands in the receive posted after the dropped one. */
	expect_msg(u.qp, 201, IBV_WC_RECV, 3000, peer.qpn[0], 1, 0x6262);
	check_pattern(big[2], 3000, 42, "UC send after the drops");
	say(3);
	CHECK(ibv_destroy_qp(u.qp) == 0, "destroy");
}

void uc_client(void)
{
	struct rc u = make_uc();
	me.qpn[0] = u.qp->qp_num;
	me.psn[0] = UC_PSN_CLIENT;
	fill(big[0], 65536, 41);
	fill(big[1], 8192, 0);
	fill(big[2], 3000, 42);
	exchange();
	uc_connect(u.qp, peer.qpn[0], me.psn[0], peer.psn[0]);
	hear(0);
	uint32_t lk0 = big_mr[0]->lkey;
	post_one(&u, 1, IBV_WR_RDMA_WRITE_WITH_IMM, peer.rkey[0], peer.addr[0],
		 big[0], 65536, lk0, 0x5151);
	expect(1, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);

	/* Unanswered: both complete successfully here. */
	post_one(&u, 2, IBV_WR_RDMA_WRITE, peer.rkey[1] ^ 0x5500, peer.addr[1],
		 big[1], 8192, big_mr[1]->lkey, 0);
	expect(2, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
	post_one(&u, 3, IBV_WR_SEND, 0, 0, big[2], 3000, big_mr[2]->lkey, 0);
	expect(3, IBV_WC_SUCCESS, IBV_WC_SEND);
	say(1);
	hear(2);
	post_one(&u, 4, IBV_WR_SEND_WITH_IMM, 0, 0, big[2], 3000,
		 big_mr[2]->lkey, 0x6262);
	expect(4, IBV_WC_SUCCESS, IBV_WC_SEND);
	hear(3);
	CHECK(ibv_destroy_qp(u.qp) == 0, "destroy");
}
