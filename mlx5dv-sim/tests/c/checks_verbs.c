#include "model.h"
#include <fcntl.h>

/*
 * Verbs around the data path, answered as the kernel answers them (what
 * rdma-core's own tests rely on): ibv_rereg_mr of the access flags, the PD
 * and the translation, each enforced by the device afterwards, and its
 * refusals; a CQ on a completion vector the context lacks (EINVAL); the
 * receive queue QUERY_QP reports (as built); a UD QP that blocks multicast
 * loopback (accepted); ibv_resize_cq up and down with completions not
 * yet polled (none lost); the commands the device does
 * not implement (memory windows) refused with
 * EOPNOTSUPP, as uverbs refuses them, and not claimed by the device's
 * capability flags; QUERY_HCA_CAP of the NIC flow table and device memory
 * capabilities: answered, all zero.
 */

static struct rc a, b;

static void new_pair(void)
{
	a = make_rc(0);
	b = make_rc(0);
	connect_rc(&a, &b);
}

static void drop_pair(void)
{
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
}

/* An RDMA write of mem[0]'s first 16 bytes from `a` to (to, rkey). */
static void write_at(uint64_t wr_id, void *to, uint32_t rkey,
		     enum ibv_wc_status st)
{
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = wr_id;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a.qpx, rkey, (uintptr_t)to);
	ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 16);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(wr_id, st, st == IBV_WC_SUCCESS ? IBV_WC_RDMA_WRITE : -1);
}

static void check_rereg(void)
{
	uint8_t *buf = aligned_alloc(4096, BUF);
	uint8_t *other = aligned_alloc(4096, BUF);
	CHECK(buf && other, "aligned_alloc");
	memset(buf, 0, BUF);
	memset(other, 0, BUF);
	struct ibv_mr *m = ibv_reg_mr(pd, buf, BUF, ALL_ACCESS);
	CHECK(m, "reg_mr: %s", strerror(errno));
	fill(mem[0], 16, 21);

	new_pair();
	write_at(1400, buf, m->rkey, IBV_WC_SUCCESS);
	same(buf, mem[0], 16, "write before rereg");
	/* Local write only: a remote write is a remote access error. */
	CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_LOCAL_WRITE) == 0,
	      "rereg access: %s", strerror(errno));
	write_at(1401, buf, m->rkey, IBV_WC_REM_ACCESS_ERR);
	drop_pair();

	/* Another PD: the QPs' PD no longer matches the key. */
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	CHECK(pd2, "alloc_pd");
	CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS,
			   pd2, NULL, 0, ALL_ACCESS) == 0,
	      "rereg pd: %s", strerror(errno));
	CHECK(m->pd == pd2, "the MR's PD after rereg");
	new_pair();
	write_at(1402, buf, m->rkey, IBV_WC_REM_ACCESS_ERR);
	drop_pair();
	CHECK(ibv_dealloc_pd(pd2) == EBUSY, "dealloc of a PD with an MR");
	CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_PD, pd, NULL, 0, 0) == 0,
	      "rereg back: %s", strerror(errno));
	CHECK(ibv_dealloc_pd(pd2) == 0, "dealloc_pd");

	/* Another translation: the key now names `other`, and only it. */
	CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, other,
			   BUF, 0) == 0,
	      "rereg translation: %s", strerror(errno));
	CHECK(m->addr == other && m->length == BUF, "the MR's range");
	new_pair();
	fill(mem[0], 16, 22);
	write_at(1403, other + 32, m->rkey, IBV_WC_SUCCESS);
	same(other + 32, mem[0], 16, "write after rereg");
	write_at(1404, buf, m->rkey, IBV_WC_REM_ACCESS_ERR);
	drop_pair();

	/* Refused by the kernel's checks: no flags, remote write without
	 * local write, a PD of nothing. */
	errno = 0;
	CHECK(ibv_rereg_mr(m, 0, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_CMD &&
		      errno == EINVAL,
	      "rereg without flags: errno %d", errno);
	CHECK(ibv_rereg_mr(m, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			   IBV_ACCESS_REMOTE_WRITE) == IBV_REREG_MR_ERR_CMD &&
		      errno == EINVAL,
	      "rereg to remote write without local write: errno %d", errno);
	CHECK(ibv_dereg_mr(m) == 0, "dereg_mr");
	free(buf);
	free(other);
}

static void check_queries(void)
{
	/* A completion vector past num_comp_vectors. */
	errno = 0;
	CHECK(!ibv_create_cq(ctx, 16, NULL, NULL, ctx->num_comp_vectors) &&
		      errno == EINVAL,
	      "CQ on vector %d: errno %d", ctx->num_comp_vectors, errno);
	struct ibv_cq *c = ibv_create_cq(ctx, 16, NULL, NULL,
					 ctx->num_comp_vectors - 1);
	CHECK(c, "CQ on the last vector: %s", strerror(errno));

	/* The receive queue as built: a power of two of at least the 64
	 * receives make_rc asks for; no receive queue with an SRQ. */
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	struct rc r = make_rc(0), s = make_rc(1);
	CHECK(ibv_query_qp(r.qp, &at, IBV_QP_CAP, &ia) == 0, "query_qp");
	CHECK(at.cap.max_recv_wr >= 64 &&
		      (at.cap.max_recv_wr & (at.cap.max_recv_wr - 1)) == 0 &&
		      at.cap.max_recv_sge >= 4,
	      "max_recv_wr %u, max_recv_sge %u", at.cap.max_recv_wr,
	      at.cap.max_recv_sge);
	CHECK(ibv_query_qp(s.qp, &at, IBV_QP_CAP, &ia) == 0, "query_qp");
	CHECK(at.cap.max_recv_wr == 0, "max_recv_wr %u with an SRQ",
	      at.cap.max_recv_wr);
	CHECK(ibv_destroy_qp(r.qp) == 0 && ibv_destroy_qp(s.qp) == 0,
	      "destroy_qp");

	/* A UD QP that blocks multicast loopback (rdma-core's tests ask for
	 * one on Mellanox devices): accepted, there is no multicast. */
	struct ibv_qp_init_attr_ex ua = {
		.qp_type = IBV_QPT_UD, .send_cq = cq, .recv_cq = cq, .pd = pd,
		.cap = {.max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
			.max_recv_sge = 1},
		.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS,
		.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB};
	struct ibv_qp *ud = ibv_create_qp_ex(ctx, &ua);
	CHECK(ud, "UD QP blocking multicast loopback: %s", strerror(errno));
	CHECK(ibv_destroy_qp(ud) == 0, "destroy_qp");

	/* Not implemented, and not claimed. */
	struct ibv_device_attr da;
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	/* Memory windows, both types, as mlx5 reports them. */
	CHECK((da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) &&
	      (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B),
	      "device_cap_flags %#x without memory windows", da.device_cap_flags);
	struct ibv_mw *mw1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
	struct ibv_mw *mw2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
	CHECK(mw1 && mw2 && mw1->rkey != mw2->rkey, "alloc_mw: %s", strerror(errno));
	CHECK(ibv_dealloc_mw(mw1) == 0 && ibv_dealloc_mw(mw2) == 0, "dealloc_mw");
	CHECK(ibv_destroy_cq(c) == 0, "destroy_cq");
}

/* `n` signalled RDMA writes from `a` into mem[1], wr_ids from `first`. */
static void writes(uint64_t first, int n)
{
	ibv_wr_start(a.qpx);
	for (int i = 0; i < n; i++) {
		a.qpx->wr_id = first + i;
		a.qpx->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)mem[1] + 16 * i);
		ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 16);
	}
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	/* Let the device complete them: they wait in the CQ, unpolled. */
	if (sim_step)
		while (sim_step() > 0)
			;
	else
		usleep(100 * 1000);
}

static void check_resize(void)
{
	struct ibv_cq *saved = cq;
	cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq, "create_cq: %s", strerror(errno));
	new_pair();
	fill(mem[0], 16, 31);
	writes(0, 12);
	CHECK(ibv_resize_cq(cq, 200) == 0, "resize up: %s", strerror(errno));
	CHECK(cq->cqe == 255, "cqe %d after resize to 200", cq->cqe);
	writes(12, 40);
	CHECK(ibv_resize_cq(cq, 60) == 0, "resize down: %s", strerror(errno));
	CHECK(cq->cqe == 63, "cqe %d after resize to 60", cq->cqe);
	/* Smaller than the completions not yet polled: refused. */
	CHECK(ibv_resize_cq(cq, 8) == EINVAL, "resize below the backlog");
	CHECK(cq->cqe == 63, "cqe %d after a refused resize", cq->cqe);
	for (uint64_t id = 0; id < 52; id++) {
		struct ibv_wc wc;
		int n, tries = 0;
		while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && tries++ < 1000000)
			;
		CHECK(n == 1, "completion %lu: poll_cq %d", (unsigned long)id, n);
		CHECK(wc.wr_id == id && wc.status == IBV_WC_SUCCESS &&
			      wc.opcode == IBV_WC_RDMA_WRITE,
		      "completion %lu: wr_id %lu status %d opcode %d",
		      (unsigned long)id, (unsigned long)wc.wr_id, wc.status,
		      wc.opcode);
	}
	struct ibv_wc wc;
	CHECK(ibv_poll_cq(cq, 1, &wc) == 0, "a completion too many");
	same(mem[1] + 16 * 39, mem[0], 16, "write after the resizes");
	/* Empty: down to 3 entries (one is the RESIZE CQE's until the next
	 * poll), and the CQ still works. */
	CHECK(ibv_resize_cq(cq, 3) == 0, "resize to 3: %s", strerror(errno));
	writes(52, 1);
	CHECK(ibv_poll_cq(cq, 1, &wc) == 1 && wc.wr_id == 52 &&
		      wc.status == IBV_WC_SUCCESS,
	      "completion after resize to 1");
	/* Two resizes with no poll between them (libmlx5 steps over each
	 * RESIZE CQE at once and counts it in the doorbell record only at its
	 * next poll), then as many completions as the CQ holds less one: all
	 * arrive, none overruns (rdma-core 65's test_resize_cq). */
	CHECK(ibv_resize_cq(cq, 1) == 0, "resize to 1: %s", strerror(errno));
	CHECK(ibv_resize_cq(cq, 7) == 0, "resize to 7: %s", strerror(errno));
	CHECK(cq->cqe == 7, "cqe %d after resize to 7", cq->cqe);
	writes(53, 6);
	for (uint64_t id = 53; id < 59; id++) {
		int n, tries = 0;
		while ((n = ibv_poll_cq(cq, 1, &wc)) == 0 && tries++ < 1000000)
			;
		CHECK(n == 1 && wc.wr_id == id && wc.status == IBV_WC_SUCCESS,
		      "completion %lu after two resizes: poll_cq %d wr_id %lu "
		      "status %d", (unsigned long)id, n, (unsigned long)wc.wr_id,
		      wc.status);
	}
	drop_pair();
	CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq");
	cq = saved;
}

/* QUERY_HCA_CAP (PRM opcode 0x100) of capability type `type`, current
 * values: the output's status and whether the capability is all zero. */
static void hca_cap(struct ibv_context *dc, uint16_t type, const char *what)
{
	uint32_t in[4] = {htobe32(0x100 << 16), htobe32((type << 1) | 1), 0, 0};
	static uint8_t out[0x1010];
	memset(out, 0xff, sizeof(out));
	CHECK(mlx5dv_devx_general_cmd(dc, in, sizeof(in), out, sizeof(out)) == 0,
	      "QUERY_HCA_CAP %s: %s", what, strerror(errno));
	CHECK(out[0] == 0, "QUERY_HCA_CAP %s: status %u", what, out[0]);
	for (size_t i = 0x10; i < sizeof(out); i++)
		CHECK(out[i] == 0, "QUERY_HCA_CAP %s: byte %#zx is %#x", what,
		      i, out[i]);
}

static void check_absent_caps(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0], "device list");
	struct mlx5dv_context_attr ca = {.flags = MLX5DV_CONTEXT_FLAGS_DEVX};
	struct ibv_context *dc = mlx5dv_open_device(list[0], &ca);
	CHECK(dc, "mlx5dv_open_device (DEVX): %s", strerror(errno));
	hca_cap(dc, 0x7, "NIC flow table");
	hca_cap(dc, 0xf, "device memory");
	CHECK(ibv_close_device(dc) == 0, "close_device");
	ibv_free_device_list(list);
}

void check_verbs(void)
{
	check_rereg();
	check_queries();
	check_resize();
	check_absent_caps();
}
