/* Two-process checks: UD datagrams and DC (DCI to the peer's DCT). */

#include "fabric.h"

#define QKEY 0x11111111u
/* A UD receive starts with 40 bytes of room for the GRH. */
#define GRH 40

void ud_server(void)
{
	struct ibv_qp *u = make_ud(QKEY);
	struct ibv_wc wc;
	me.qpn[0] = u->qp_num;
	for (int k = 0; k < 3; k++)
		post_recv(u, 500 + k, big[2] + k * 8192, 8192, big_mr[2]->lkey);
	exchange();

	wc = expect_msg(u, 500, IBV_WC_RECV, GRH + 200, peer.qpn[0], 0, 0);
	check_pattern(big[2] + GRH, 200, 21, "UD send");
	/* No GRH on an InfiniBand port without one: the room stays as it
	 * was. On RoCE every packet has one, its IP header, written there:
	 * for an IPv4-mapped source GID an IPv4 header in bytes 20 to 39,
	 * else an IPv6 header; its source address is the sender's GID. */
	if (!roce) {
		CHECK(!(wc.wc_flags & IBV_WC_GRH), "a GRH on IB");
		check_zero(big[2], GRH, "the GRH room");
	} else {
		static const uint8_t v4_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0,
						      0, 0, 0xff, 0xff};
		CHECK(wc.wc_flags & IBV_WC_GRH, "no GRH on RoCE");
		if (!memcmp(peer.gid, v4_prefix, 12)) {
			CHECK(big[2][20] == 0x45, "IPv4 header %#x", big[2][20]);
			CHECK(!memcmp(big[2] + 32, peer.gid + 12, 4),
			      "the IPv4 source address");
		} else {
			CHECK(big[2][0] >> 4 == 6, "GRH version %d", big[2][0] >> 4);
			CHECK(!memcmp(big[2] + 8, peer.gid, 16), "the source GID");
		}
	}
	expect_msg(u, 501, IBV_WC_RECV, GRH + 100, peer.qpn[0], 1,
		   0xabcdef01);
	check_pattern(big[2] + 8192 + GRH, 100, 22, "UD send with immediate");

	hear(3); /* a datagram with another qkey was sent: it is dropped */
	CHECK(!poll_within(&wc, 300),
	      "the datagram of the wrong qkey arrived: wr_id %llu status %s",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
	say(4);
	expect_msg(u, 502, IBV_WC_RECV, GRH + 64, peer.qpn[0], 0, 0);
	check_pattern(big[2] + 2 * 8192 + GRH, 64, 24, "UD send after the drop");
	hear(5);
	CHECK(ibv_destroy_qp(u) == 0, "destroy_qp");
}

static void ud_send(struct ibv_qp *u, struct ibv_ah *ah, uint64_t wr_id,
		    uint32_t qkey, int has_imm, uint32_t len, uint8_t seed)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(u);
	fill(mem[0], len, seed);
	ibv_wr_start(x);
	x->wr_id = wr_id;
	x->wr_flags = IBV_SEND_SIGNALED;
	if (has_imm)
		ibv_wr_send_imm(x, htobe32(0xabcdef01));
	else
		ibv_wr_send(x);
	ibv_wr_set_ud_addr(x, ah, peer.qpn[0], qkey);
	ibv_wr_set_sge(x, mr[0]->lkey, (uintptr_t)mem[0], len);
	CHECK(ibv_wr_complete(x) == 0, "wr_complete");
	expect(wr_id, IBV_WC_SUCCESS, IBV_WC_SEND);
}

void ud_client(void)
{
	struct ibv_qp *u = make_ud(QKEY);
	me.qpn[0] = u->qp_num;
	exchange();
	struct ibv_ah *ah = peer_ah();
	ud_send(u, ah, 1, QKEY, 0, 200, 21);
	ud_send(u, ah, 2, QKEY, 1, 100, 22);
	/* The sender completes although the datagram is dropped. */
	ud_send(u, ah, 3, 0x22222222, 0, 64, 23);
	say(3);
	hear(4);
	ud_send(u, ah, 4, QKEY, 0, 64, 24);
	say(5);
	CHECK(ibv_destroy_ah(ah) == 0 && ibv_destroy_qp(u) == 0, "destroy");
}

/* The DCT's AV on this port: RoCE needs the GRH's source GID index. */
static void dct_av(struct ibv_ah_attr *a)
{
	set_ah_attr(a);
	memset(a->grh.dgid.raw, 0, 16);
}

void dc_server(void)
{
	struct ibv_ah_attr av;
	dct_av(&av);
	struct ibv_qp *dct = make_dct(srq, &av);
	me.qpn[0] = dct->qp_num;
	fill(big[1], 4096, 51); /* what the client reads */
	post_srq_recv(600, big[2], 8192, big_mr[2]->lkey);
	exchange();

	hear(1);
	check_pattern(big[0], 2000, 31, "DC write");
	expect_msg(dct, 600, IBV_WC_RECV, 700, peer.qpn[0], 0, 0);
	check_pattern(big[2], 700, 32, "DC send");
	hear(3);
	check_zero(big[0] + 4096, 64, "the write with the wrong key");
	check_pattern(big[0] + 8192, 256, 33, "a write on another stream");
	check_pattern(big[0] + 16384, 128, 34, "a write on the reset stream");
	check_zero(big[0] + 24576, 64, "the flushed write");
	hear(4);
	CHECK(ibv_destroy_qp(dct) == 0, "destroy DCT");
}

/* Posts one signalled DC work request to the peer's DCT on stream
 * `stream` (ignored by a DCI without streams) and expects status st. */
static void dc_post(struct ibv_qp *dci, struct ibv_ah *ah, uint64_t wr_id,
		    int op, uint64_t key, uint16_t stream, uint32_t off,
		    uint32_t len, uint8_t seed, enum ibv_wc_status st)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(dci);
	struct mlx5dv_qp_ex *d = mlx5dv_qp_ex_from_ibv_qp_ex(x);
	uint8_t *local = big[0] + off;
	if (op != IBV_WR_RDMA_READ)
		fill(local, len, seed);
	ibv_wr_start(x);
	x->wr_id = wr_id;
	x->wr_flags = IBV_SEND_SIGNALED;
	if (op == IBV_WR_RDMA_WRITE)
		ibv_wr_rdma_write(x, peer.rkey[0], peer.addr[0] + off);
	else if (op == IBV_WR_RDMA_READ)
		ibv_wr_rdma_read(x, peer.rkey[1], peer.addr[1]);
	else
		ibv_wr_send(x);
	mlx5dv_wr_set_dc_addr_stream(d, ah, peer.qpn[0], key, stream);
	ibv_wr_set_sge(x, big_mr[0]->lkey, (uintptr_t)local, len);
	CHECK(ibv_wr_complete(x) == 0, "wr_complete");
	int opcode = op == IBV_WR_RDMA_WRITE  ? IBV_WC_RDMA_WRITE
		     : op == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ
					      : IBV_WC_SEND;
	expect(wr_id, st, st == IBV_WC_SUCCESS ? opcode : -1);
}

void dc_client(void)
{
	struct ibv_ah_attr av;
	set_ah_attr(&av);
	struct ibv_qp *dci = make_dci(2, 1, &av), *plain = make_dci(0, 0, &av);
	me.qpn[0] = dci->qp_num;
	exchange();
	struct ibv_ah *ah = peer_ah();

	dc_post(dci, ah, 1, IBV_WR_RDMA_WRITE, DC_KEY, 0, 0, 2000, 31,
		IBV_WC_SUCCESS);
	say(1);
	dc_post(dci, ah, 2, IBV_WR_SEND, DC_KEY, 0, 0, 700, 32, IBV_WC_SUCCESS);
	memset(big[0] + 32768, 0, 4096);
	dc_post(dci, ah, 3, IBV_WR_RDMA_READ, DC_KEY, 0, 32768, 4096, 0,
		IBV_WC_SUCCESS);
	check_pattern(big[0] + 32768, 4096, 51, "DC read");

	/* A wrong DC key: a remote access error on stream 1 only. */
	dc_post(dci, ah, 4, IBV_WR_RDMA_WRITE, DC_KEY + 1, 1, 4096, 64, 0,
		IBV_WC_REM_ACCESS_ERR);
	CHECK(qp_state(dci) == IBV_QPS_RTS, "DCI state %d", qp_state(dci));
	dc_post(dci, ah, 5, IBV_WR_RDMA_WRITE, DC_KEY, 2, 8192, 256, 33,
		IBV_WC_SUCCESS);
	dc_post(dci, ah, 6, IBV_WR_RDMA_WRITE, DC_KEY, 1, 24576, 64, 35,
		IBV_WC_WR_FLUSH_ERR);
	CHECK(mlx5dv_dci_stream_id_reset(dci, 1) == 0, "stream reset: %s",
	      strerror(errno));
	dc_post(dci, ah, 7, IBV_WR_RDMA_WRITE, DC_KEY, 1, 16384, 128, 34,
		IBV_WC_SUCCESS);
	/* Without streams the DCI itself goes to ERR. */
	dc_post(plain, ah, 8, IBV_WR_RDMA_WRITE, DC_KEY + 1, 0, 4096, 64, 0,
		IBV_WC_REM_ACCESS_ERR);
	CHECK(qp_state(plain) == IBV_QPS_ERR, "DCI state %d", qp_state(plain));
	say(3);
	say(4);
	CHECK(ibv_destroy_ah(ah) == 0 && ibv_destroy_qp(dci) == 0 &&
		      ibv_destroy_qp(plain) == 0,
	      "destroy");
}
