/*
 * The victim of tests/hostile.rs: a legitimate program on the software
 * device, with one QP whose peer is a host the test plays (and which a
 * lying host on the same fabric attacks).
 *
 *   victim rc|uc|ud PEER_LID PEER_QPN MS [post]
 *
 * Opens mlx5_0, registers 64 KiB (zeroed; local write, remote read, write
 * and atomic), creates one QP of the kind named (RC and UC connected to
 * PEER_LID/PEER_QPN with PSN 0 both ways; UD with Q_Key 0x11111111),
 * posts 4 receives of 8 KiB each into the second half of the buffer,
 * and says on stdout:
 *
 *   ready fabric=F lid=L qpn=Q rkey=K addr=A canary=C canary_rkey=R
 *
 * (the canary: 4 KiB of 0xc5, registered for local access only)
 *
 * With `post` (RC) it then posts one signalled RDMA write of 8 bytes to
 * the peer (rkey 0x1234, address 0x1000). For MS milliseconds it calls
 * ibv_query_qp over and over (a verbs command: it takes the device's
 * lock) and prints every completion as it comes:
 *
 *   wc wr_id=N status=S opcode=O len=L imm=I
 *
 * and at the end:
 *
 *   end qp_state=S max_cmd_us=U rss_start_kb=A rss_end_kb=B canary_ok=0|1
 *   mem HEX (the first 256 bytes of the buffer)
 */
#include <endian.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SIZE 65536
#define RECV_AT (SIZE / 2)
#define RECV_LEN 8192
#define QKEY 0x11111111u

#define CHECK(c, ...)                                                         \
	do {                                                                  \
		if (!(c)) {                                                   \
			fprintf(stderr, "victim: " __VA_ARGS__);              \
			fprintf(stderr, "\n");                                \
			exit(1);                                              \
		}                                                             \
	} while (0)

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;
	CHECK(f, "cannot open /proc/self/status");
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

int main(int argc, char **argv)
{
	CHECK(argc >= 5, "usage: victim rc|uc|ud PEER_LID PEER_QPN MS [post]");
	const char *kind = argv[1];
	uint16_t peer_lid = (uint16_t)strtoul(argv[2], NULL, 0);
	uint32_t peer_qpn = (uint32_t)strtoul(argv[3], NULL, 0);
	double ms = atof(argv[4]);
	int post = argc > 5 && !strcmp(argv[5], "post");
	enum ibv_qp_type type = !strcmp(kind, "uc") ? IBV_QPT_UC :
				!strcmp(kind, "ud") ? IBV_QPT_UD :
						      IBV_QPT_RC;

	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0, "no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "ibv_alloc_pd");
	uint8_t *buf = aligned_alloc(4096, SIZE);
	CHECK(buf, "aligned_alloc");
	memset(buf, 0, SIZE);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, SIZE,
				       IBV_ACCESS_LOCAL_WRITE |
					       IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(mr, "ibv_reg_mr");
	/* A canary no remote access reaches: registered for local use only. */
	uint8_t *canary = aligned_alloc(4096, 4096);
	CHECK(canary, "aligned_alloc");
	memset(canary, 0xc5, 4096);
	struct ibv_mr *canary_mr = ibv_reg_mr(pd, canary, 4096,
					      IBV_ACCESS_LOCAL_WRITE);
	CHECK(canary_mr, "ibv_reg_mr (canary)");
	struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	CHECK(cq, "ibv_create_cq");
	struct ibv_qp_init_attr ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.qp_type = type,
		.cap = { .max_send_wr = 16,
			 .max_recv_wr = 16,
			 .max_send_sge = 1,
			 .max_recv_sge = 1 },
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "ibv_create_qp");

	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (type == IBV_QPT_UD) {
		a.qkey = QKEY;
		mask |= IBV_QP_QKEY;
	} else {
		a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE |
				    IBV_ACCESS_REMOTE_READ |
				    IBV_ACCESS_REMOTE_ATOMIC;
		if (type == IBV_QPT_UC)
			a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	CHECK(!ibv_modify_qp(qp, &a, mask), "INIT");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	mask = IBV_QP_STATE;
	if (type != IBV_QPT_UD) {
		a.path_mtu = IBV_MTU_1024;
		a.dest_qp_num = peer_qpn;
		a.rq_psn = 0;
		a.ah_attr.dlid = peer_lid;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN;
		if (type == IBV_QPT_RC) {
			a.max_dest_rd_atomic = 1;
			a.min_rnr_timer = 1;
			mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
		}
	}
	CHECK(!ibv_modify_qp(qp, &a, mask), "RTR");

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (type == IBV_QPT_RC) {
		/* 4.096 us * 2^18 = 1.07 s a try: the test answers at leisure. */
		a.timeout = 18;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_MAX_QP_RD_ATOMIC;
	}
	CHECK(!ibv_modify_qp(qp, &a, mask), "RTS");

	for (int i = 0; i < 4; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)(buf + RECV_AT +
							i * RECV_LEN),
				     .length = RECV_LEN,
				     .lkey = mr->lkey };
		struct ibv_recv_wr w = { .wr_id = 100 + i,
					 .sg_list = &s,
					 .num_sge = 1 },
				   *bad;
		CHECK(!ibv_post_recv(qp, &w, &bad), "ibv_post_recv");
	}

	struct ibv_port_attr pa;
	CHECK(!ibv_query_port(ctx, 1, &pa), "ibv_query_port");
	const char *fabric = getenv("MLX5DV_SIM_FABRIC");
	printf("ready fabric=%s lid=%u qpn=%u rkey=%u addr=%llu canary=%llu "
	       "canary_rkey=%u\n",
	       fabric ? fabric : "", pa.lid, qp->qp_num, mr->rkey,
	       (unsigned long long)(uintptr_t)buf,
	       (unsigned long long)(uintptr_t)canary, canary_mr->rkey);
	fflush(stdout);
	long rss_start = rss_kb();

	if (post) {
		struct ibv_sge s = { .addr = (uintptr_t)buf,
				     .length = 8,
				     .lkey = mr->lkey };
		struct ibv_send_wr w = { .wr_id = 7,
					 .sg_list = &s,
					 .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED },
				   *bad;
		w.wr.rdma.rkey = 0x1234;
		w.wr.rdma.remote_addr = 0x1000;
		CHECK(!ibv_post_send(qp, &w, &bad), "ibv_post_send");
	}

	double t_end = now_us() + ms * 1000, max_cmd = 0;
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	while (now_us() < t_end) {
		double t0 = now_us();
		CHECK(!ibv_query_qp(qp, &qa, IBV_QP_STATE, &qia),
		      "ibv_query_qp");
		double dt = now_us() - t0;
		if (dt > max_cmd)
			max_cmd = dt;
		struct ibv_wc wc;
		while (ibv_poll_cq(cq, 1, &wc) == 1) {
			printf("wc wr_id=%llu status=%d opcode=%d len=%u imm=%u\n",
			       (unsigned long long)wc.wr_id, wc.status,
			       wc.opcode, wc.byte_len,
			       (wc.wc_flags & IBV_WC_WITH_IMM) ?
				       be32toh(wc.imm_data) :
				       0);
			fflush(stdout);
		}
		usleep(500);
	}
	CHECK(!ibv_query_qp(qp, &qa, IBV_QP_STATE, &qia), "ibv_query_qp");
	int canary_ok = 1;
	for (int i = 0; i < 4096; i++)
		canary_ok &= canary[i] == 0xc5;
	printf("end qp_state=%d max_cmd_us=%.0f rss_start_kb=%ld rss_end_kb=%ld "
	       "canary_ok=%d\n",
	       qa.qp_state, max_cmd, rss_start, rss_kb(), canary_ok);
	printf("mem ");
	for (int i = 0; i < 256; i++)
		printf("%02x", buf[i]);
	printf("\n");
	fflush(stdout);
	/* Leave without tearing down: the test reads only what was printed. */
	return 0;
}
