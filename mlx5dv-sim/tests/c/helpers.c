/*
 * What the C programs of the software device's tests share: the device's
 * objects (one context, PD, CQ, SRQ and four registered buffers) and the
 * helpers that post, poll and check. Used by model.c and fabric.c.
 */
#include "model.h"

const char *fail_prefix = "";
struct ibv_context *ctx;
struct ibv_pd *pd;
struct ibv_cq *cq;
struct ibv_srq *srq;
uint8_t *mem[4];
struct ibv_mr *mr[4];
int (*sim_step)(void);

struct ibv_wc poll1(void)
{
	struct ibv_wc wc;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (sim_step)
			sim_step();
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq: %d", n);
		if (n == 1)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		CHECK(t.tv_sec - t0.tv_sec < 10, "no completion within 10 s");
	}
}

void expect(uint64_t wr_id, enum ibv_wc_status st, int opcode)
{
	struct ibv_wc wc = poll1();
	CHECK(wc.wr_id == wr_id && wc.status == st &&
		      (opcode < 0 || (int)wc.opcode == opcode),
	      "completion wr_id %llu status %s (%d) opcode %d; expected wr_id "
	      "%llu status %s opcode %d",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
	      wc.status, wc.opcode, (unsigned long long)wr_id,
	      ibv_wc_status_str(st), opcode);
}

void expect_recv(uint64_t wr_id, int opcode, uint32_t len, int imm,
			uint32_t imm_val)
{
	struct ibv_wc wc = poll1();
	CHECK(wc.wr_id == wr_id && wc.status == IBV_WC_SUCCESS &&
		      (int)wc.opcode == opcode && wc.byte_len == len,
	      "recv wr_id %llu status %s opcode %d len %u; expected %llu %d %u",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
	      wc.opcode, wc.byte_len, (unsigned long long)wr_id, opcode, len);
	if (imm)
		CHECK((wc.wc_flags & IBV_WC_WITH_IMM) &&
			      be32toh(wc.imm_data) == imm_val,
		      "imm %#x flags %#x", be32toh(wc.imm_data), wc.wc_flags);
}

void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

void same(const uint8_t *a, const uint8_t *b, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		CHECK(a[i] == b[i], "%s: byte %zu is %#x, expected %#x", what, i,
		      a[i], b[i]);
}

void to_state(struct ibv_qp *qp, enum ibv_qp_state s, uint32_t dest)
{
	struct ibv_qp_attr a = {0};
	int mask = IBV_QP_STATE;
	a.qp_state = s;
	if (s == IBV_QPS_INIT) {
		a.pkey_index = 0;
		a.port_num = 1;
		a.qp_access_flags = ALL_ACCESS;
		mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	} else if (s == IBV_QPS_RTR) {
		a.path_mtu = IBV_MTU_4096;
		a.dest_qp_num = dest;
		a.rq_psn = 0;
		a.max_dest_rd_atomic = 4;
		a.min_rnr_timer = 12;
		a.ah_attr.dlid = 1;
		a.ah_attr.port_num = 1;
		mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
			IBV_QP_MIN_RNR_TIMER;
	} else if (s == IBV_QPS_RTS) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.sq_psn = 0;
		a.max_rd_atomic = 4;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
			IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	CHECK(ibv_modify_qp(qp, &a, mask) == 0, "modify_qp to %d: %s", s,
	      strerror(errno));
}

struct rc make_rc(int with_srq)
{
	struct ibv_qp_init_attr_ex ia = {0};
	struct mlx5dv_qp_init_attr dv = {0};
	struct rc r;
	ia.qp_type = IBV_QPT_RC;
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.srq = with_srq ? srq : NULL;
	ia.cap.max_send_wr = 64;
	ia.cap.max_recv_wr = with_srq ? 0 : 64;
	ia.cap.max_send_sge = 4;
	ia.cap.max_recv_sge = 4;
	ia.cap.max_inline_data = 64;
	ia.pd = pd;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE |
			    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			    IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_SEND |
			    IBV_QP_EX_WITH_SEND_WITH_IMM |
			    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
			    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
			    IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_LOCAL_INV;
	dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
	dv.send_ops_flags = MLX5DV_QP_EX_WITH_MEMCPY |
			    MLX5DV_QP_EX_WITH_MR_LIST |
			    MLX5DV_QP_EX_WITH_MR_INTERLEAVED |
			    MLX5DV_QP_EX_WITH_RAW_WQE;
	r.qp = mlx5dv_create_qp(ctx, &ia, &dv);
	CHECK(r.qp, "mlx5dv_create_qp: %s", strerror(errno));
	r.qpx = ibv_qp_to_qp_ex(r.qp);
	r.dv = mlx5dv_qp_ex_from_ibv_qp_ex(r.qpx);
	return r;
}

void connect_rc(struct rc *a, struct rc *b)
{
	to_state(a->qp, IBV_QPS_INIT, 0);
	to_state(b->qp, IBV_QPS_INIT, 0);
	to_state(a->qp, IBV_QPS_RTR, b->qp->qp_num);
	to_state(b->qp, IBV_QPS_RTR, a->qp->qp_num);
	to_state(a->qp, IBV_QPS_RTS, 0);
	to_state(b->qp, IBV_QPS_RTS, 0);
}

void post_recv(struct ibv_qp *qp, uint64_t id, void *buf, uint32_t len,
		      uint32_t lkey)
{
	struct ibv_sge s = {(uintptr_t)buf, len, lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1};
	struct ibv_recv_wr *bad;
	CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "post_recv");
}

void post_srq_recv(uint64_t id, void *buf, uint32_t len, uint32_t lkey)
{
	struct ibv_sge s = {(uintptr_t)buf, len, lkey};
	struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1};
	struct ibv_recv_wr *bad;
	CHECK(ibv_post_srq_recv(srq, &wr, &bad) == 0, "post_srq_recv");
}

struct mlx5dv_mkey *list_mkey(struct rc *on, uint64_t wr_id, int flags)
{
	struct mlx5dv_mkey_init_attr mi = {
		.pd = pd,
		.create_flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT | flags,
		.max_entries = 2};
	struct mlx5dv_mkey *mk = mlx5dv_create_mkey(&mi);
	CHECK(mk, "create_mkey: %s", strerror(errno));
	struct ibv_sge l = {(uintptr_t)mem[2], 64, mr[2]->lkey};
	ibv_wr_start(on->qpx);
	on->qpx->wr_id = wr_id;
	on->qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	mlx5dv_wr_mr_list(on->dv, mk, ALL_ACCESS, 1, &l);
	CHECK(ibv_wr_complete(on->qpx) == 0, "wr_complete");
	expect(wr_id, IBV_WC_SUCCESS, IBV_WC_DRIVER1);
	return mk;
}

void write_to(struct rc *from, uint64_t wr_id, uint32_t rkey,
		     enum ibv_wc_status st)
{
	ibv_wr_start(from->qpx);
	from->qpx->wr_id = wr_id;
	from->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(from->qpx, rkey, 0);
	ibv_wr_set_sge(from->qpx, mr[0]->lkey, (uintptr_t)mem[0], 16);
	CHECK(ibv_wr_complete(from->qpx) == 0, "wr_complete");
	expect(wr_id, st, st == IBV_WC_SUCCESS ? IBV_WC_RDMA_WRITE : -1);
}

struct ibv_qp_init_attr_ex qp_attr(enum ibv_qp_type type, uint32_t send_wr,
				   uint32_t recv_wr)
{
	struct ibv_qp_init_attr_ex ia = {0};
	ia.qp_type = type;
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.cap.max_send_wr = send_wr;
	ia.cap.max_recv_wr = recv_wr;
	ia.cap.max_send_sge = 1;
	ia.cap.max_recv_sge = 1;
	ia.pd = pd;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD;
	return ia;
}

struct ibv_qp *make_ud(uint32_t qkey)
{
	struct ibv_qp_init_attr_ex ia = qp_attr(IBV_QPT_UD, 8, 8);
	ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ia.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &ia);
	CHECK(qp, "create UD QP: %s", strerror(errno));
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qkey = qkey};
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					    IBV_QP_PORT | IBV_QP_QKEY) == 0,
	      "UD INIT");
	a.qp_state = IBV_QPS_RTR;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "UD RTR");
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0,
	      "UD RTS");
	return qp;
}

static struct ibv_device **list;

void open_device(int ncqe, uint32_t srq_wr)
{
	int n;
	list = ibv_get_device_list(&n);
	CHECK(list && n == 1, "ibv_get_device_list: %d devices", n);
	CHECK(strcmp(ibv_get_device_name(list[0]), "mlx5_0") == 0, "name");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open_device: %s", strerror(errno));
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	for (int i = 0; i < 4; i++) {
		mem[i] = aligned_alloc(4096, BUF);
		mr[i] = ibv_reg_mr(pd, mem[i], BUF, ALL_ACCESS);
		CHECK(mr[i], "reg_mr");
	}
	cq = ibv_create_cq(ctx, ncqe, NULL, NULL, 0);
	CHECK(cq, "create_cq");
	struct ibv_srq_init_attr si = {.attr = {.max_wr = srq_wr, .max_sge = 1}};
	srq = ibv_create_srq(pd, &si);
	CHECK(srq, "create_srq");
}

void close_device(void)
{
	CHECK(ibv_destroy_srq(srq) == 0, "destroy_srq");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq");
	for (int i = 0; i < 4; i++)
		CHECK(ibv_dereg_mr(mr[i]) == 0, "dereg_mr");
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "close_device");
	ibv_free_device_list(list);
}

/* A DC QP (DCT with key DC_KEY receiving into SRQ s, or a DCI that may
 * post writes, reads and sends, with DCI streams unless log_conc is 0),
 * in INIT. */
static struct ibv_qp *create_dc(int type, struct ibv_srq *s, int log_conc,
				int log_err)
{
	struct ibv_qp_init_attr_ex ia = {0};
	struct mlx5dv_qp_init_attr dv = {0};
	ia.qp_type = IBV_QPT_DRIVER;
	ia.send_cq = cq;
	ia.recv_cq = cq;
	ia.srq = s;
	ia.pd = pd;
	ia.comp_mask = IBV_QP_INIT_ATTR_PD;
	dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC;
	dv.dc_init_attr.dc_type = type;
	if (type == MLX5DV_DCTYPE_DCT) {
		dv.dc_init_attr.dct_access_key = DC_KEY;
	} else {
		ia.cap.max_send_wr = 16;
		ia.cap.max_send_sge = 1;
		ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE |
				    IBV_QP_EX_WITH_SEND |
				    IBV_QP_EX_WITH_RDMA_READ;
	}
	if (log_conc) {
		dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
		dv.dc_init_attr.dci_streams.log_num_concurent = log_conc;
		dv.dc_init_attr.dci_streams.log_num_errored = log_err;
	}
	struct ibv_qp *qp = mlx5dv_create_qp(ctx, &ia, &dv);
	CHECK(qp, "create DC QP: %s", strerror(errno));
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1};
	int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	if (type == MLX5DV_DCTYPE_DCT) {
		a.qp_access_flags = ALL_ACCESS;
		mask |= IBV_QP_ACCESS_FLAGS;
	}
	CHECK(ibv_modify_qp(qp, &a, mask) == 0, "DC INIT: %s", strerror(errno));
	return qp;
}

/* A DCT in RTR; av: the port and, on RoCE, the GRH's source GID index. */
struct ibv_qp *make_dct(struct ibv_srq *s, const struct ibv_ah_attr *av)
{
	struct ibv_qp *dct = create_dc(MLX5DV_DCTYPE_DCT, s, 0, 0);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
				.path_mtu = IBV_MTU_1024,
				.min_rnr_timer = 12,
				.ah_attr = *av};
	CHECK(ibv_modify_qp(dct, &a, IBV_QP_STATE | IBV_QP_MIN_RNR_TIMER |
					    IBV_QP_AV | IBV_QP_PATH_MTU) == 0,
	      "DCT RTR: %s", strerror(errno));
	return dct;
}

/* A DCI in RTS (2^log_conc concurrent streams, 2^log_err errored; none
 * with log_conc 0); av as for make_dct. */
struct ibv_qp *make_dci(int log_conc, int log_err,
			const struct ibv_ah_attr *av)
{
	struct ibv_qp *dci = create_dc(MLX5DV_DCTYPE_DCI, NULL, log_conc,
				       log_err);
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
				.path_mtu = IBV_MTU_1024,
				.ah_attr = *av};
	CHECK(ibv_modify_qp(dci, &a, IBV_QP_STATE | IBV_QP_PATH_MTU |
					    IBV_QP_AV) == 0,
	      "DCI RTR: %s", strerror(errno));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CHECK(ibv_modify_qp(dci, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
					    IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					    IBV_QP_SQ_PSN |
					    IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "DCI RTS");
	return dci;
}
