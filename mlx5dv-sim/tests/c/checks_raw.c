#include "model.h"

/*
 * Malformed WQEs posted with mlx5dv_wr_raw_wqe (which copies ds * 16 bytes
 * into the send queue and rewrites only the WQE index): each must complete
 * in error with the syndrome the device reports for it (the status libmlx5
 * maps it to), move the QP to ERR, and flush the WQE posted after it.
 *
 * Not reachable this way: a DS of 0 (libmlx5 copies nothing and does not
 * advance the producer index, so the device never sees a WQE) and a wrong
 * WQE index (libmlx5 writes the right one).
 */

/* An RC QP that posts raw WQEs and RDMA writes: 8 send WQEBBs, one SGE, no
 * inline data beyond what its one-WQEBB WQE holds. */
static struct rc make_raw_rc(void)
{
	struct ibv_qp_init_attr_ex ia = qp_attr(IBV_QPT_RC, 8, 1);
	struct mlx5dv_qp_init_attr dv = {0};
	struct rc r;
	ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
	dv.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
	dv.send_ops_flags = MLX5DV_QP_EX_WITH_RAW_WQE;
	r.qp = mlx5dv_create_qp(ctx, &ia, &dv);
	CHECK(r.qp, "mlx5dv_create_qp: %s", strerror(errno));
	r.qpx = ibv_qp_to_qp_ex(r.qp);
	r.dv = mlx5dv_qp_ex_from_ibv_qp_ex(r.qpx);
	struct mlx5dv_qp q = {0};
	struct mlx5dv_obj o = {.qp = {.in = r.qp, .out = &q}};
	CHECK(mlx5dv_init_obj(&o, MLX5DV_OBJ_QP) == 0, "mlx5dv_init_obj");
	CHECK(q.sq.wqe_cnt == 8 && q.sq.stride == 64,
	      "send queue of %u WQEBBs of %u bytes; expected 8 of 64",
	      q.sq.wqe_cnt, q.sq.stride);
	return r;
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	CHECK(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) == 0, "query_qp: %s",
	      strerror(errno));
	return a.qp_state;
}

static void ctrl(uint8_t *w, uint8_t opmod, uint8_t opcode, uint32_t qpn,
		 uint8_t fm_ce_se, uint8_t ds_byte, uint8_t signature)
{
	struct mlx5_wqe_ctrl_seg *c = (void *)w;
	mlx5dv_set_ctrl_seg(c, 0, opcode, opmod, qpn, fm_ce_se, 0, signature,
			    0);
	/* The DS byte as given, reserved bits included. */
	c->qpn_ds = htobe32((qpn << 8) | ds_byte);
}

static void raddr(uint8_t *w, uint64_t addr, uint32_t rkey)
{
	struct mlx5_wqe_raddr_seg *r = (void *)w;
	r->raddr = htobe64(addr);
	r->rkey = htobe32(rkey);
	r->reserved = 0;
}

/* An RDMA write of 16 bytes from mem[0] to mem[1]: ctrl, raddr, data. */
static void good_write(uint8_t *w, uint32_t qpn)
{
	ctrl(w, 0, MLX5_OPCODE_RDMA_WRITE, qpn, MLX5_WQE_CTRL_CQ_UPDATE, 3,
	     0);
	raddr(w + 16, (uintptr_t)mem[1], mr[1]->rkey);
	mlx5dv_set_data_seg((void *)(w + 32), 16, mr[0]->lkey,
			    (uintptr_t)mem[0]);
}

enum tail { FLUSH_NEXT, NOTHING_AFTER };

/* Builds a WQE for the QP numbered qpn into w (1024 bytes, zeroed). */
typedef void (*build_fn)(uint8_t *w, uint32_t qpn);

/* Makes a raw QP, posts the WQE `build` makes for it (wr_id id), then, with
 * FLUSH_NEXT, a valid signalled RDMA write (id + 1); checks the error
 * completion, the QP in ERR, the write flushed and not run. */
static void refused(const char *what, build_fn build, enum ibv_wc_status want,
		    uint64_t id, enum tail tail)
{
	static uint8_t w[1024];
	static const uint8_t zero[64];
	struct rc a = make_raw_rc(), b = make_rc(0);
	connect_rc(&a, &b);
	memset(w, 0, sizeof(w));
	build(w, a.qp->qp_num);
	memset(mem[1], 0, 64);
	fill(mem[0], 64, 91);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = id;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	mlx5dv_wr_raw_wqe(a.dv, w);
	if (tail == FLUSH_NEXT) {
		a.qpx->wr_id = id + 1;
		ibv_wr_rdma_write(a.qpx, mr[1]->rkey, (uintptr_t)mem[1]);
		ibv_wr_set_sge(a.qpx, mr[0]->lkey, (uintptr_t)mem[0], 16);
	}
	CHECK(ibv_wr_complete(a.qpx) == 0, "%s: wr_complete", what);
	struct ibv_wc wc = poll1();
	CHECK(wc.wr_id == id && wc.status == want,
	      "%s: completion wr_id %llu status %s; expected %llu %s", what,
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
	      (unsigned long long)id, ibv_wc_status_str(want));
	if (tail == FLUSH_NEXT)
		expect(id + 1, IBV_WC_WR_FLUSH_ERR, -1);
	CHECK(qp_state(a.qp) == IBV_QPS_ERR, "%s: QP not in ERR", what);
	same(mem[1], zero, 64, what);
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");
}

static void bad_opcode(uint8_t *w, uint32_t qpn)
{
	/* 0x03 is no MLX5_OPCODE_*. */
	ctrl(w, 0, 0x03, qpn, MLX5_WQE_CTRL_CQ_UPDATE, 1, 0);
}

static void bad_opmod_nop(uint8_t *w, uint32_t qpn)
{
	ctrl(w, 1, MLX5_OPCODE_NOP, qpn, MLX5_WQE_CTRL_CQ_UPDATE, 1, 0);
}

static void bad_opmod_write(uint8_t *w, uint32_t qpn)
{
	good_write(w, qpn);
	ctrl(w, 2, MLX5_OPCODE_RDMA_WRITE, qpn, MLX5_WQE_CTRL_CQ_UPDATE, 3, 0);
}

static void atomic_past_ds(uint8_t *w, uint32_t qpn)
{
	/* Compare-and-swap with DS 2: the atomic segment would follow the
	 * remote address segment, past the end of the WQE. */
	ctrl(w, 0, MLX5_OPCODE_ATOMIC_CS, qpn, MLX5_WQE_CTRL_CQ_UPDATE, 2, 0);
	raddr(w + 16, (uintptr_t)mem[1], mr[1]->rkey);
}

static void reserved_fm_ce_se(uint8_t *w, uint32_t qpn)
{
	good_write(w, qpn);
	w[11] |= 0x01; /* fm_ce_se bit 0: reserved */
}

static void reserved_raddr(uint8_t *w, uint32_t qpn)
{
	good_write(w, qpn);
	w[16 + 15] = 1; /* the raddr segment's reserved word */
}

static void reserved_ds_bits(uint8_t *w, uint32_t qpn)
{
	/* A NOP whose DS byte has bit 6 set: libmlx5 copies ds & 0x3f (1)
	 * segment; the device reads the whole byte. */
	ctrl(w, 0, MLX5_OPCODE_NOP, qpn, MLX5_WQE_CTRL_CQ_UPDATE, 0x41, 0);
}

static void signature_without_wq_sig(uint8_t *w, uint32_t qpn)
{
	good_write(w, qpn);
	w[8] = 0x5a; /* the signature byte, on a QP made without signatures */
}

static void other_qpn(uint8_t *w, uint32_t qpn)
{
	good_write(w, qpn ^ 1);
}

static void too_many_sges(uint8_t *w, uint32_t qpn)
{
	/* Two pointer segments on a QP made with max_send_sge 1. */
	good_write(w, qpn);
	ctrl(w, 0, MLX5_OPCODE_RDMA_WRITE, qpn, MLX5_WQE_CTRL_CQ_UPDATE, 4, 0);
	mlx5dv_set_data_seg((void *)(w + 48), 16, mr[0]->lkey,
			    (uintptr_t)mem[0] + 16);
}

static void inline_too_long(uint8_t *w, uint32_t qpn)
{
	/* 64 bytes inline (DS 7) on a QP whose WQE holds far fewer. */
	ctrl(w, 0, MLX5_OPCODE_RDMA_WRITE, qpn, MLX5_WQE_CTRL_CQ_UPDATE, 7, 0);
	raddr(w + 16, (uintptr_t)mem[1], mr[1]->rkey);
	struct mlx5_wqe_inl_data_seg *inl = (void *)(w + 32);
	inl->byte_count = htobe32(MLX5_INLINE_SEG | 64);
	memset(w + 36, 0x77, 64);
}

static void atomic_not_8_bytes(uint8_t *w, uint32_t qpn)
{
	/* Fetch-and-add whose local buffer is 16 bytes. */
	ctrl(w, 0, MLX5_OPCODE_ATOMIC_FA, qpn, MLX5_WQE_CTRL_CQ_UPDATE, 4, 0);
	raddr(w + 16, (uintptr_t)mem[1], mr[1]->rkey);
	struct mlx5_wqe_atomic_seg *at = (void *)(w + 32);
	at->swap_add = htobe64(1);
	mlx5dv_set_data_seg((void *)(w + 48), 16, mr[0]->lkey,
			    (uintptr_t)mem[0]);
}

static void memcpy_lengths_differ(uint8_t *w, uint32_t qpn)
{
	/* DMA memcpy (MMO opcode, opmod 1): ctrl, metadata, source 16
	 * bytes, destination 32. */
	ctrl(w, 1, 0x2f, qpn, MLX5_WQE_CTRL_CQ_UPDATE, 4, 0);
	mlx5dv_set_data_seg((void *)(w + 32), 16, mr[0]->lkey,
			    (uintptr_t)mem[0]);
	mlx5dv_set_data_seg((void *)(w + 48), 32, mr[1]->lkey,
			    (uintptr_t)mem[1]);
}

static void larger_than_the_sq(uint8_t *w, uint32_t qpn)
{
	/* DS 63 (1008 bytes, 16 WQEBBs) on a send queue of 8 WQEBBs:
	 * libmlx5 copies the first 512 bytes and wraps the other 496 to the
	 * start of the queue, over the first; the control segment is
	 * repeated at byte 512 so that the device finds it at slot 0. */
	ctrl(w, 0, MLX5_OPCODE_NOP, qpn, MLX5_WQE_CTRL_CQ_UPDATE, 63, 0);
	memcpy(w + 512, w, 16);
}

void check_raw_refusals(void)
{
	static uint8_t w[1024];
	struct rc a = make_raw_rc(), b = make_rc(0);
	connect_rc(&a, &b);
	/* The well-formed write runs through the same path. */
	memset(w, 0, sizeof(w));
	good_write(w, a.qp->qp_num);
	fill(mem[0], 64, 90);
	memset(mem[1], 0, 64);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1200;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	mlx5dv_wr_raw_wqe(a.dv, w);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect(1200, IBV_WC_SUCCESS, IBV_WC_DRIVER2);
	same(mem[1], mem[0], 16, "raw RDMA write");
	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0,
	      "destroy_qp");

	const enum ibv_wc_status op = IBV_WC_LOC_QP_OP_ERR,
				 len = IBV_WC_LOC_LEN_ERR;
	refused("bad opcode", bad_opcode, op, 1210, FLUSH_NEXT);
	refused("NOP with opmod 1", bad_opmod_nop, op, 1212, FLUSH_NEXT);
	refused("RDMA write with opmod 2", bad_opmod_write, op, 1214,
		FLUSH_NEXT);
	refused("atomic segment past the DS", atomic_past_ds, op, 1216,
		FLUSH_NEXT);
	refused("reserved fm_ce_se bit", reserved_fm_ce_se, op, 1220,
		FLUSH_NEXT);
	refused("reserved raddr word", reserved_raddr, op, 1222, FLUSH_NEXT);
	refused("reserved DS bits", reserved_ds_bits, op, 1224, FLUSH_NEXT);
	refused("signature on a QP without", signature_without_wq_sig, op,
		1226, FLUSH_NEXT);
	refused("another QP's number", other_qpn, op, 1228, FLUSH_NEXT);
	refused("more SGEs than max_send_sge", too_many_sges, op, 1230,
		FLUSH_NEXT);
	refused("inline data over max_inline_data", inline_too_long, len,
		1232, FLUSH_NEXT);
	refused("atomic local buffer of 16 bytes", atomic_not_8_bytes, len,
		1234, FLUSH_NEXT);
	refused("memcpy source and destination lengths differ",
		memcpy_lengths_differ, len, 1238, FLUSH_NEXT);
	/* Its 16 WQEBBs fill the queue twice over: nothing can follow it. */
	refused("WQE larger than the send queue", larger_than_the_sq, op,
		1236, NOTHING_AFTER);
}
