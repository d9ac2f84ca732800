/*
 * C direct: an RC QP's send queue and send CQ taken with mlx5dv_init_obj
 * and driven by hand, as UCX's rc_mlx5 transport drives them: RDMA write
 * WQEs (control, remote-address and data segments, big-endian) written in
 * place, one doorbell per batch, CQEs parsed in place. The same work and
 * the same bookkeeping as mlx5dv's direct path (src/direct/): per WQE the
 * slot a completion needs (wr_id, sequence number, end index, opcode); a
 * completion names its wr_id and how many work requests it retires; the
 * barriers of libmlx5's post_send_db without its BlueFlame copy (x86-64:
 * a compiler barrier, the doorbell record, sfence, the 64-bit doorbell,
 * sfence). What the C does not do that the Rust does: it checks the room
 * once per batch, not per WQE, and writes the plan's entries unchecked.
 * Written as the strongest C we know for that work: every invariant of the
 * batch in a local (the WQE's stores could alias the QP's fields), the
 * constant words of the WQE byte-swapped once (the control segment's
 * qpn_ds and flags, the rkey word, the address vector), the WQE's block and
 * slot walked by pointer and wrapped at the ring's end (as UCX does), the
 * slot's sequence number and end one running 8-byte tag.
 *
 * The DCI loops do the same on a DCI's send queue: each WQE two basic
 * blocks (control segment with the stream id, the 48-byte address vector
 * of the address handle with the DCT number and key, remote address, data),
 * as mlx5dv_wr_set_dc_addr[_stream] writes them, and the second block's
 * slot marked as starting no WQE (the Rust's guard against a stale slot
 * being taken for an outstanding work request). The "checked" loops are
 * the same writes with the checks the crate's safe writer makes per work
 * request: the room for the WQE, the local length against the remote
 * buffer's, an empty entry left out (its DS one less) and, on a stream,
 * that the DCI has streams, so that what the checks cost shows in C too.
 *
 * build.rs compiles this file once per build (gcc and clang, -O2 and -O3):
 * every exported function is named DIRECT_PREFIX<name>, c_direct_<name> in
 * the gcc -O2 build (the one whose helpers the rig calls), so that the
 * bench counts every build's loops and takes, per row, the cheapest as
 * C direct.
 */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

#ifndef DIRECT_PREFIX
#define DIRECT_PREFIX c_direct_
#endif
#define DIRECT(name) BENCH_CAT(DIRECT_PREFIX, name)

#define NOINLINE __attribute__((noinline, visibility("default")))

#if defined(__x86_64__)
#define TO_DEVICE() asm volatile("" ::: "memory")
#define FROM_DEVICE() asm volatile("" ::: "memory")
#define WC_START() asm volatile("sfence" ::: "memory")
#define FLUSH_WRITES() asm volatile("sfence" ::: "memory")
#else
#define TO_DEVICE() __sync_synchronize()
#define FROM_DEVICE() __sync_synchronize()
#define WC_START() __sync_synchronize()
#define FLUSH_WRITES() __sync_synchronize()
#endif

/* Laid out as the Rust's slot: the second word is the writers' running
 * tag (the sequence number in bits 0 to 31, the end in bits 48 to 63, on a
 * little-endian machine), one 8-byte store a WQE, the opcode byte written
 * over after. */
struct direct_slot {
	uint64_t wr_id;
	uint32_t seq;
	uint8_t opcode;
	uint8_t pad;
	uint16_t end;
};
_Static_assert(sizeof(struct direct_slot) == 16, "a slot is 16 bytes");

struct direct_qp {
	/* send queue */
	uint8_t *sq_buf;
	uint32_t wqe_cnt;
	uint16_t sq_mask;
	uint16_t pi;
	uint16_t sq_ci;
	uint32_t posted;
	uint32_t retired;
	uint32_t qpn8;
	volatile uint32_t *sq_dbrec;
	uint8_t *bf_reg;
	uint32_t bf_size;
	uint32_t bf_offset;
	struct direct_slot *slots;
	/* Whether the QP is a DCI with streams (the checked DCI loops). */
	uint32_t streams;
	/* CQ */
	uint8_t *cq_buf;
	uint32_t cqe_cnt;
	uint32_t cq_mask;
	uint32_t cq_shift;
	uint32_t cqe64_at;
	uint32_t cq_ci;
	volatile uint32_t *cq_dbrec;
	/* Arming (the scoped post): the CQ's UAR and number, its channel
	 * and CQ for ibv_get_cq_event, the events read (the arm sequence
	 * number) and those not yet acknowledged. */
	uint8_t *cq_uar;
	uint32_t cqn;
	struct ibv_comp_channel *channel;
	struct ibv_cq *ibcq;
	uint32_t events;
	uint32_t unacked;
};

/* Every field of the Rust side's DirectWc. */
struct direct_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t qp_num;
	uint32_t covers;
	uint16_t wqe_index;
	uint8_t syndrome;
	uint8_t vendor_err;
};

/* A remote buffer as the Rust side's RemoteBuf: address, length, rkey. */
struct direct_remote {
	uint64_t addr;
	uint64_t len;
	uint32_t rkey;
};

/* The CQ doorbell record: the consumer index first (MLX5_CQ_SET_CI = 0). */
struct direct_qp *DIRECT(new)(struct ibv_qp *qp, struct ibv_cq_ex *cq)
{
	struct mlx5dv_qp dq;
	struct mlx5dv_cq dc;
	struct mlx5dv_obj obj;
	struct direct_qp *d;

	memset(&obj, 0, sizeof(obj));
	obj.qp.in = qp;
	obj.qp.out = &dq;
	obj.cq.in = ibv_cq_ex_to_cq(cq);
	obj.cq.out = &dc;
	if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ))
		return NULL;
	if (dq.sq.stride != 64 || (dc.cqe_size != 64 && dc.cqe_size != 128))
		return NULL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->sq_buf = dq.sq.buf;
	d->wqe_cnt = dq.sq.wqe_cnt;
	d->sq_mask = (uint16_t)(dq.sq.wqe_cnt - 1);
	d->qpn8 = qp->qp_num << 8;
	d->sq_dbrec = &dq.dbrec[MLX5_SND_DBR];
	d->bf_reg = dq.bf.reg;
	d->bf_size = dq.bf.size;
	d->slots = calloc(dq.sq.wqe_cnt, sizeof(*d->slots));
	d->cq_buf = dc.buf;
	d->cqe_cnt = dc.cqe_cnt;
	d->cq_mask = dc.cqe_cnt - 1;
	d->cq_shift = dc.cqe_size == 64 ? 6 : 7;
	d->cqe64_at = dc.cqe_size - 64;
	d->cq_ci = be32toh(dc.dbrec[0]) & 0xffffff;
	d->cq_dbrec = &dc.dbrec[0];
	d->cq_uar = dc.cq_uar;
	d->cqn = dc.cqn;
	d->ibcq = ibv_cq_ex_to_cq(cq);
	d->channel = d->ibcq->channel;
	if (!d->slots) {
		free(d);
		return NULL;
	}
	return d;
}

static inline __attribute__((always_inline)) void ring(struct direct_qp *d, uint16_t pi,
						       const uint8_t *last)
{
	TO_DEVICE();
	*d->sq_dbrec = htobe32(pi);
	d->pi = pi;
	WC_START();
	*(volatile uint64_t *)(d->bf_reg + d->bf_offset) = *(const uint64_t *)last;
	FLUSH_WRITES();
	d->bf_offset ^= d->bf_size;
}

/* The tag's step a WQE of one basic block: the sequence number and the
 * end both one on. */
#define TAG_STEP(blocks) (((uint64_t)(blocks) << 48) | 1)

/* Writes a slot's second word: the tag (seq, end), then the opcode. */
static inline __attribute__((always_inline)) void tag_slot(struct direct_slot *slot,
							   uint64_t tag, uint8_t opcode)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(&slot->seq, &tag, sizeof(tag));
#else
	slot->seq = (uint32_t)tag;
	slot->end = (uint16_t)(tag >> 48);
#endif
	slot->opcode = opcode;
}

/* The RC writes: every invariant of the batch in a local (the WQE's stores
 * could alias *d), the constant words of the control and remote-address
 * segments byte-swapped once, the plan walked by pointer, one running tag
 * for the slot's sequence number and end. `r` (the checked loops): each
 * work request's remote buffer, checked per work request as the Rust's
 * safe writer does (the room for the WQE, the local length against the
 * remote buffer's, an empty entry left out with its DS one less); NULL:
 * the plan's addresses and one rkey, unchecked. */
static inline __attribute__((always_inline)) int
rc_writes(struct direct_qp *d, uint32_t rkey, const struct direct_remote *r,
	  const struct bench_plan *p, int last_only)
{
	uint8_t *const buf = d->sq_buf;
	uint8_t *const end = buf + ((size_t)d->wqe_cnt << 6);
	struct direct_slot *const slots = d->slots;
	const uint32_t mask = d->sq_mask;
	const uint32_t qpn_ds = htobe32(d->qpn8 | 3);
	const uint32_t qpn_ds_empty = htobe32(d->qpn8 | 2);
	const uint64_t rkey_word = htobe64((uint64_t)rkey << 32);
	/* signature, stream id and fm_ce_se, then the immediate: 0. */
	const uint64_t signalled = htobe32(MLX5_WQE_CTRL_CQ_UPDATE);
	/* The producer index may reach the consumer index plus the ring. */
	const uint16_t limit = (uint16_t)(d->sq_ci + d->wqe_cnt);
	const struct ibv_sge *s = p->sge;
	const uint64_t *raddr = p->raddr;
	uint64_t tag = ((uint64_t)d->pi << 48) | d->posted;
	/* The WQE's block and slot, walked, wrapping at the ring's end (as
	 * UCX walks its send queue). */
	uint8_t *ctrl = buf + ((size_t)(d->pi & mask) << 6);
	struct direct_slot *slot = &slots[d->pi & mask];
	uint16_t pi;

	/* The room for the batch, once (one basic block per WQE). */
	if (!r && (uint32_t)(uint16_t)(d->pi - d->sq_ci) + BENCH_BATCH > d->wqe_cnt)
		return -ENOMEM;
	for (uint64_t i = 0; i < BENCH_BATCH; i++, s++, raddr++) {
		const uint32_t idx = (uint32_t)(tag >> 48);
		uint64_t fm = (!last_only || i == BENCH_BATCH - 1) ? signalled : 0;
		uint32_t ds = qpn_ds;

		if (r) {
			/* The remote buffer holds the entry's bytes. */
			if (s->length > r[i].len)
				return -EINVAL;
			/* Room for the WQE (one basic block). */
			if ((uint16_t)idx == limit)
				return -ENOMEM;
			/* An empty entry is no data segment (a byte count of 0
			 * is 2^31). */
			if (!s->length)
				ds = qpn_ds_empty;
		}
		((uint32_t *)ctrl)[0] = htobe32((idx << 8) | MLX5_OPCODE_RDMA_WRITE);
		((uint32_t *)ctrl)[1] = ds;
		((uint64_t *)ctrl)[1] = fm;
		if (r) {
			((uint64_t *)ctrl)[2] = htobe64(r[i].addr);
			((uint64_t *)ctrl)[3] = htobe64((uint64_t)r[i].rkey << 32);
		} else {
			((uint64_t *)ctrl)[2] = htobe64(*raddr);
			/* The rkey, then 4 reserved bytes of 0: one 8-byte store. */
			((uint64_t *)ctrl)[3] = rkey_word;
		}
		((uint32_t *)ctrl)[8] = htobe32(s->length);
		((uint32_t *)ctrl)[9] = htobe32(s->lkey);
		((uint64_t *)ctrl)[5] = htobe64(s->addr);
		tag += TAG_STEP(1);
		slot->wr_id = i;
		/* mapped when written, as the Rust does */
		tag_slot(slot, tag, IBV_WC_RDMA_WRITE);
		ctrl += 64;
		slot++;
		if (__builtin_expect(ctrl == end, 0)) {
			ctrl = buf;
			slot = slots;
		}
	}
	pi = (uint16_t)(tag >> 48);
	d->posted = (uint32_t)tag;
	ring(d, pi, buf + ((size_t)((uint16_t)(pi - 1) & mask) << 6));
	return 0;
}

static inline __attribute__((always_inline)) int
writes(struct direct_qp *d, uint32_t rkey, const struct bench_plan *p, int last_only)
{
	return rc_writes(d, rkey, NULL, p, last_only);
}

/* Every work request signalled. */
NOINLINE int DIRECT(rc_write_sge)(struct direct_qp *d, uint32_t rkey, const struct bench_plan *p)
{
	return writes(d, rkey, p, 0);
}

/* Only the last of the batch signalled. */
NOINLINE int DIRECT(rc_write_sge_last)(struct direct_qp *d, uint32_t rkey,
					const struct bench_plan *p)
{
	return writes(d, rkey, p, 1);
}

/* The same writes, not measured: what the polls find completed. */
NOINLINE int DIRECT(prime)(struct direct_qp *d, uint32_t rkey, const struct bench_plan *p)
{
	return writes(d, rkey, p, 0);
}

static uint32_t status_of(uint8_t syndrome)
{
	switch (syndrome) {
	case MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR:
		return IBV_WC_LOC_LEN_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR:
		return IBV_WC_LOC_QP_OP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_PROT_ERR:
		return IBV_WC_LOC_PROT_ERR;
	case MLX5_CQE_SYNDROME_WR_FLUSH_ERR:
		return IBV_WC_WR_FLUSH_ERR;
	case MLX5_CQE_SYNDROME_MW_BIND_ERR:
		return IBV_WC_MW_BIND_ERR;
	case MLX5_CQE_SYNDROME_BAD_RESP_ERR:
		return IBV_WC_BAD_RESP_ERR;
	case MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR:
		return IBV_WC_LOC_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR:
		return IBV_WC_REM_INV_REQ_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR:
		return IBV_WC_REM_ACCESS_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_OP_ERR:
		return IBV_WC_REM_OP_ERR;
	case MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR:
		return IBV_WC_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR:
		return IBV_WC_RNR_RETRY_EXC_ERR;
	case MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR:
		return IBV_WC_REM_ABORT_ERR;
	default:
		return IBV_WC_GENERAL_ERR;
	}
}


/* 1: a completion in *wc; 0: none; negative: a CQE not of this QP's send
 * queue (skipped). */
/* The indices a poll moves, in locals for its loop (as the Rust keeps
 * them): the stores of the completions cannot then be taken to alias
 * them. */
struct poll_idx {
	uint32_t cq_ci;
	uint16_t sq_ci;
	uint32_t retired;
};

/* The slot of the WQE a CQE names, checked to start an outstanding work
 * request; retires it and the ones before it. */
static inline __attribute__((always_inline)) int
retire(const struct direct_qp *d, struct poll_idx *x, uint16_t counter,
       struct direct_slot *slot, uint32_t *covers)
{
	uint16_t ends_after;

	*slot = d->slots[counter & d->sq_mask];
	*covers = slot->seq - x->retired;
	ends_after = (uint16_t)(slot->end - counter);
	if ((uint16_t)(counter - x->sq_ci) >= (uint16_t)(d->pi - x->sq_ci) ||
	    *covers - 1 >= d->posted - x->retired ||
	    (uint16_t)(ends_after - 1) >= (uint16_t)(d->pi - counter))
		return -EINVAL;
	x->retired = slot->seq;
	x->sq_ci = slot->end;
	return 0;
}

/* Every CQE but a successful requester one, out of line. */
static __attribute__((noinline, cold)) int
slow_step(const struct direct_qp *d, struct poll_idx *x, const uint8_t *cqe, uint8_t op_own,
	  struct direct_wc *wc)
{
	uint8_t opcode = op_own >> 4;
	uint32_t qpn = be32toh(*(volatile const uint32_t *)(cqe + 56));
	uint16_t counter = be16toh(*(volatile const uint16_t *)(cqe + 60));
	uint8_t syndrome = *(volatile const uint8_t *)(cqe + 55);
	uint8_t vendor = *(volatile const uint8_t *)(cqe + 54);
	struct direct_slot slot;
	uint32_t status, covers;

	if (opcode == MLX5_CQE_REQ) {
		status = IBV_WC_GENERAL_ERR;
		syndrome = 0;
		vendor = 0;
	} else if (opcode == MLX5_CQE_REQ_ERR || opcode == MLX5_CQE_RESP_ERR) {
		status = status_of(syndrome);
	} else {
		return -EINVAL;
	}
	if (retire(d, x, counter, &slot, &covers))
		return -EINVAL;
	wc->wr_id = slot.wr_id;
	wc->status = status;
	wc->opcode = slot.opcode;
	wc->byte_len = 0;
	wc->syndrome = syndrome;
	wc->vendor_err = vendor;
	wc->qp_num = qpn & 0xffffff;
	wc->wqe_index = counter;
	wc->covers = covers;
	return 1;
}

static inline __attribute__((always_inline)) int
step(const struct direct_qp *d, struct poll_idx *x, struct direct_wc *wc)
{
	const uint8_t *cqe = d->cq_buf + ((size_t)(x->cq_ci & d->cq_mask) << d->cq_shift) +
			     d->cqe64_at;
	uint8_t op_own = *(volatile const uint8_t *)(cqe + 63);
	struct direct_slot slot;
	uint32_t qpn, covers;
	uint16_t counter;

	if ((op_own >> 4) == MLX5_CQE_INVALID || (op_own & 1) != !!(x->cq_ci & d->cqe_cnt))
		return 0;
	FROM_DEVICE();
	x->cq_ci++;
	if (__builtin_expect(op_own & 0xfc, 0))
		return slow_step(d, x, cqe, op_own, wc);
	qpn = be32toh(*(volatile const uint32_t *)(cqe + 56));
	counter = be16toh(*(volatile const uint16_t *)(cqe + 60));
	if (retire(d, x, counter, &slot, &covers))
		return -EINVAL;
	wc->wr_id = slot.wr_id;
	wc->status = IBV_WC_SUCCESS;
	wc->opcode = slot.opcode;
	wc->byte_len = slot.opcode == IBV_WC_RDMA_READ ?
			       be32toh(*(volatile const uint32_t *)(cqe + 44)) :
		       (slot.opcode == IBV_WC_COMP_SWAP || slot.opcode == IBV_WC_FETCH_ADD) ? 8 :
											0;
	wc->syndrome = 0;
	wc->vendor_err = 0;
	wc->qp_num = qpn & 0xffffff;
	wc->wqe_index = counter;
	wc->covers = covers;
	return 1;
}

static inline __attribute__((always_inline)) int cq_poll(struct direct_qp *d, struct direct_wc *wc,
						      int max)
{
	struct poll_idx x = { d->cq_ci, d->sq_ci, d->retired };
	int n = 0, r = 0;

	while (n < max) {
		r = step(d, &x, &wc[n]);
		if (r <= 0)
			break;
		n++;
	}
	d->cq_ci = x.cq_ci;
	d->sq_ci = x.sq_ci;
	d->retired = x.retired;
	if (n > 0 || r < 0) {
		TO_DEVICE();
		*d->cq_dbrec = htobe32(d->cq_ci & 0xffffff);
	}
	return r < 0 ? r : n;
}
NOINLINE int DIRECT(poll)(struct direct_qp *d, struct direct_wc *wc)
{
	return cq_poll(d, wc, BENCH_BATCH);
}

/* The same, not measured: the harness's drain. */
NOINLINE int DIRECT(drain)(struct direct_qp *d, struct direct_wc *wc, int max)
{
	return cq_poll(d, wc, max);
}

/* ----- The checked RC writes: the safe writer's per-WR checks in C ----- */

/* The plan's remote buffers, BENCH_MSG bytes each (never freed). */
struct direct_remote *DIRECT(remotes_new)(const struct bench_plan *p, uint32_t rkey)
{
	struct direct_remote *r = calloc(BENCH_BATCH, sizeof(*r));

	if (!r)
		return NULL;
	for (unsigned int i = 0; i < BENCH_BATCH; i++) {
		r[i].addr = p->raddr[i];
		r[i].len = BENCH_MSG;
		r[i].rkey = rkey;
	}
	return r;
}

/* c_direct_rc_write_sge with the safe writer's checks per work request. */
NOINLINE int DIRECT(rc_write_sge_checked)(struct direct_qp *d, const struct direct_remote *r,
					   const struct bench_plan *p)
{
	return rc_writes(d, 0, r, p, 0);
}

/* c_direct_rc_write_sge_last with the safe writer's checks. */
NOINLINE int DIRECT(rc_write_sge_last_checked)(struct direct_qp *d,
						const struct direct_remote *r,
						const struct bench_plan *p)
{
	return rc_writes(d, 0, r, p, 1);
}

/* ----- DCI: RDMA write + SGE to a DC target, two basic blocks a WQE ----- */

/* The datagram segment a DCI's WQE carries (struct mlx5_wqe_av): the
 * address handle's address vector with the DCT number and access key, as
 * mlx5dv_wr_set_dc_addr writes it. */
struct direct_av {
	uint64_t words[6];
};

int DIRECT(dc_addr)(struct ibv_ah *ah, uint32_t dctn, uint64_t key, struct direct_av *out)
{
	struct mlx5dv_ah dah;
	struct mlx5dv_obj obj;
	struct mlx5_wqe_av av;

	memset(&obj, 0, sizeof(obj));
	obj.ah.in = ah;
	obj.ah.out = &dah;
	if (mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH) || !dah.av)
		return -EINVAL;
	_Static_assert(sizeof(av) == sizeof(*out), "struct mlx5_wqe_av is 48 bytes");
	memcpy(&av, dah.av, sizeof(av));
	av.dqp_dct |= htobe32(dctn | MLX5_EXTENDED_UD_AV);
	av.key.dc_key = htobe64(key);
	memcpy(out, &av, sizeof(av));
	return 0;
}

/* The DCI writes, as the RC ones: the invariants in locals (the address
 * vector's six words too), the constant words byte-swapped once, the plan
 * walked by pointer, one running tag. */
/* 16 bytes of the address vector, in one vector register. */
typedef uint64_t direct_v2 __attribute__((vector_size(16)));

static inline __attribute__((always_inline)) int dci_writes(struct direct_qp *d, uint32_t rkey,
							    const struct direct_remote *r,
							    const struct direct_av *av,
							    const struct bench_plan *p,
							    int streams)
{
	uint8_t *const buf = d->sq_buf;
	uint8_t *const end = buf + ((size_t)d->wqe_cnt << 6);
	struct direct_slot *const slots = d->slots;
	const uint32_t mask = d->sq_mask;
	const uint32_t qpn_ds = htobe32(d->qpn8 | 6);
	const uint32_t qpn_ds_empty = htobe32(d->qpn8 | 5);
	const uint64_t rkey_word = htobe64((uint64_t)rkey << 32);
	const uint32_t has_streams = d->streams;
	/* The producer index may reach the consumer index plus the ring. */
	const uint16_t limit = (uint16_t)(d->sq_ci + d->wqe_cnt);
	const struct ibv_sge *s = p->sge;
	const uint64_t *raddr = p->raddr;
	uint64_t tag = ((uint64_t)d->pi << 48) | d->posted;
	uint8_t *ctrl = buf + ((size_t)(d->pi & mask) << 6);
	struct direct_slot *slot = &slots[d->pi & mask];
	direct_v2 av0, av1, av2;
	uint16_t pi;

	memcpy(&av0, &av->words[0], 16);
	memcpy(&av1, &av->words[2], 16);
	memcpy(&av2, &av->words[4], 16);
	/* The room for the batch, once (two basic blocks per WQE). */
	if (!r && (uint32_t)(uint16_t)(d->pi - d->sq_ci) + 2 * BENCH_BATCH > d->wqe_cnt)
		return -ENOMEM;
	for (uint64_t i = 0; i < BENCH_BATCH; i++, s++, raddr++) {
		const uint32_t idx = (uint32_t)(tag >> 48);
		uint32_t stream = streams ? (uint32_t)i % (1u << BENCH_LOG_STREAMS) : 0;
		uint64_t *w = (uint64_t *)ctrl;
		/* The second block, and its slot. */
		uint64_t *next = (uint64_t *)(ctrl + 64);
		struct direct_slot *slot2 = slot + 1;
		uint32_t ds = qpn_ds;

		if (r) {
			/* The remote buffer holds the entry's bytes. */
			if (s->length > r[i].len)
				return -EINVAL;
			/* Room for the WQE (two basic blocks). */
			if ((uint16_t)(limit - (uint16_t)idx) < 2)
				return -ENOMEM;
			/* A stream only on a DCI with streams. */
			if (streams && !has_streams)
				return -EINVAL;
			/* An empty entry is no data segment. */
			if (!s->length)
				ds = qpn_ds_empty;
		}
		if (__builtin_expect((uint8_t *)next == end, 0)) {
			next = (uint64_t *)buf;
			slot2 = slots;
		}
		((uint32_t *)w)[0] = htobe32((idx << 8) | MLX5_OPCODE_RDMA_WRITE);
		((uint32_t *)w)[1] = ds;
		/* signature, DCI stream id (big-endian), fm_ce_se; immediate 0 */
		w[1] = htobe32((stream << 8) | MLX5_WQE_CTRL_CQ_UPDATE);
		/* The address vector: units 1 to 3, 16-aligned. */
		memcpy(w + 2, &av0, 16);
		memcpy(w + 4, &av1, 16);
		memcpy(w + 6, &av2, 16);
		if (r) {
			next[0] = htobe64(r[i].addr);
			next[1] = htobe64((uint64_t)r[i].rkey << 32);
		} else {
			next[0] = htobe64(*raddr);
			next[1] = rkey_word;
		}
		((uint32_t *)next)[4] = htobe32(s->length);
		((uint32_t *)next)[5] = htobe32(s->lkey);
		next[3] = htobe64(s->addr);
		tag += TAG_STEP(2);
		slot->wr_id = i;
		/* mapped when written, as the Rust does */
		tag_slot(slot, tag, IBV_WC_RDMA_WRITE);
		/* The second block starts no WQE: its slot says so, as the Rust's. */
		slot2->end = (uint16_t)(idx + 1);
		ctrl = (uint8_t *)next + 64;
		slot = slot2 + 1;
		if (__builtin_expect(ctrl == end, 0)) {
			ctrl = buf;
			slot = slots;
		}
	}
	pi = (uint16_t)(tag >> 48);
	d->posted = (uint32_t)tag;
	ring(d, pi, buf + ((size_t)((uint16_t)(pi - 2) & mask) << 6));
	return 0;
}

/* 32 signalled RDMA writes + SGE to the DC target `av`. */
NOINLINE int DIRECT(dci_write_sge)(struct direct_qp *d, uint32_t rkey,
				    const struct direct_av *av, const struct bench_plan *p)
{
	return dci_writes(d, rkey, NULL, av, p, 0);
}

/* The same on DCI stream i % 4 (the control segment's stream id). */
NOINLINE int DIRECT(dci_write_sge_stream)(struct direct_qp *d, uint32_t rkey,
					   const struct direct_av *av,
					   const struct bench_plan *p)
{
	return dci_writes(d, rkey, NULL, av, p, 1);
}

/* c_direct_dci_write_sge with the safe writer's checks per work request. */
NOINLINE int DIRECT(dci_write_sge_checked)(struct direct_qp *d, const struct direct_remote *r,
					    const struct direct_av *av,
					    const struct bench_plan *p)
{
	return dci_writes(d, 0, r, av, p, 0);
}

/* c_direct_dci_write_sge_stream with the safe writer's checks. */
NOINLINE int DIRECT(dci_write_sge_stream_checked)(struct direct_qp *d,
						   const struct direct_remote *r,
						   const struct direct_av *av,
						   const struct bench_plan *p)
{
	return dci_writes(d, 0, r, av, p, 1);
}

/* Marks a DCI as one with streams (its streams checked by the checked
 * loops, as the Rust's writer checks them). */
void DIRECT(set_streams)(struct direct_qp *d, uint32_t streams)
{
	d->streams = streams;
}

/* ----- The scoped post: 32 writes, then the wait for their completion ----- */

/* Arms the CQ for the next completion with C direct's own consumer index,
 * as libmlx5's mlx5_arm_cq does: the arm word in the doorbell record
 * (sequence number, command REQ_NOT, consumer index), then the same word
 * and the CQ number to the CQ doorbell of the UAR. */
static inline __attribute__((always_inline)) void arm(struct direct_qp *d)
{
	uint32_t word = ((d->events & 3) << 28) | (d->cq_ci & 0xffffff);

	d->cq_dbrec[1] = htobe32(word);
	TO_DEVICE();
	WC_START();
	*(volatile uint64_t *)(d->cq_uar + 0x20) = htobe64(((uint64_t)word << 32) | d->cqn);
	FLUSH_WRITES();
}

/* Whether the CQE at the consumer index is the device's (its owner bit
 * that of the pass). */
static inline __attribute__((always_inline)) int ready(const struct direct_qp *d)
{
	const uint8_t *cqe = d->cq_buf + ((size_t)(d->cq_ci & d->cq_mask) << d->cq_shift) +
			     d->cqe64_at;
	uint8_t op_own = *(volatile const uint8_t *)(cqe + 63);

	return (op_own >> 4) != MLX5_CQE_INVALID && (op_own & 1) == !!(d->cq_ci & d->cqe_cnt);
}

/* Nanoseconds of the monotonic clock. */
static inline __attribute__((always_inline)) int64_t now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* 32 RDMA writes + SGE, only the last signalled, one doorbell; then waits
 * up to timeout_ms for the batch's completion, as the Rust's scoped post
 * does: polls; the clock read at the first poll that finds nothing; 64
 * idle polls with a pause each; then, each round, the timeout checked,
 * the CQ armed, polled once more, and a sleep on its channel (poll(2) with
 * the time left, then ibv_get_cq_event, the events acknowledged 32 at a
 * time). Returns the completions read (into wc, room for BENCH_BATCH),
 * the last covering the batch, or a negative error. */
NOINLINE int DIRECT(scoped_rc_write_sge)(struct direct_qp *d, uint32_t rkey,
					  const struct bench_plan *p, struct direct_wc *wc,
					  int timeout_ms)
{
	const int64_t timeout = (int64_t)timeout_ms * 1000000;
	int64_t t0 = 0;
	uint32_t end;
	int n = 0, idle = 0;

	if (writes(d, rkey, p, 1))
		return -ENOMEM;
	end = d->posted;
	for (;;) {
		int r = cq_poll(d, &wc[n], 1);
		int64_t left;

		if (r < 0)
			return r;
		if (r > 0) {
			idle = 0;
			if (d->retired == end)
				return n + 1;
			if (++n == BENCH_BATCH)
				return -EOVERFLOW;
			continue;
		}
		if (!t0)
			t0 = now_ns();
		if (idle < 64) {
			idle++;
#if defined(__x86_64__)
			__builtin_ia32_pause();
#endif
			continue;
		}
		left = timeout - (now_ns() - t0);
		if (left <= 0)
			return -ETIMEDOUT;
		arm(d);
		if (ready(d))
			continue;
		{
			struct pollfd pfd = { .fd = d->channel->fd, .events = POLLIN };
			struct ibv_cq *cq;
			void *ctx;
			int rc = poll(&pfd, 1, (int)((left + 999999) / 1000000));

			if (rc < 0)
				return -errno;
			if (rc == 0)
				continue;
			if (ibv_get_cq_event(d->channel, &cq, &ctx))
				return -EIO;
			d->events++;
			if (++d->unacked == 32) {
				ibv_ack_cq_events(cq, d->unacked);
				d->unacked = 0;
			}
		}
	}
}

/* Acknowledges the events the scoped post read and has not acknowledged
 * (ibv_destroy_cq waits for them). */
void DIRECT(ack_events)(struct direct_qp *d)
{
	if (d->unacked) {
		ibv_ack_cq_events(d->ibcq, d->unacked);
		d->unacked = 0;
	}
}
