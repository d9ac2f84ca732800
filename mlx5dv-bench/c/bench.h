/*
 * The C side of the benches: a null provider (an ibv_qp_ex + mlx5dv_qp_ex
 * pair and an ibv_cq_ex whose entries do what a minimal real provider does:
 * store their arguments into a 64-byte slot of a ring; benches/post_vs_c.rs
 * posts to it) and the same batches the Rust benches post through the safe
 * API, written in C with rdma-core's inline functions (BENCH_LOOPS: c/post.c
 * and c/plain.c), which post on the null provider's QPs or libmlx5's.
 */
#ifndef MLX5DV_BENCH_H
#define MLX5DV_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

/* Work requests per batch, completions per poll. */
#define BENCH_BATCH 32
/* Slots of the provider's ring (a power of two). */
#define BENCH_RING 256
/* Bytes of one WR in the batches, of the inline message. */
#define BENCH_MSG 64
#define BENCH_INLINE 16
/* DCI streams of the bench DCI: 2^2. */
#define BENCH_LOG_STREAMS 2
/* Entries per mkey list registration. */
#define BENCH_LIST 2

/* A null QP: the generic extended QP and its mlx5 extension side by side,
 * as the mlx5 provider keeps them in one object. */
struct null_qp {
	struct ibv_qp qp;
	struct ibv_qp_ex ibv;
	struct mlx5dv_qp_ex dv;
	unsigned int head;
	uint64_t ring[BENCH_RING][8];
};

/* A null CQ: every poll round serves BENCH_BATCH completions. */
struct null_cq {
	struct ibv_cq_ex cq;
	unsigned int cur;
	uint32_t qp_num;
};

/* The null provider's objects; the Rust side wraps these with from_raw, and
 * passes the QPs, CQs and inputs to the C loops. */
struct bench_objs {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq_ex *cq;
	struct ibv_mr *mr;
	struct mlx5dv_mkey *mkey;
	struct ibv_ah *ah;
	struct null_qp *rc;
	struct null_qp *dci;
	/* The same QPs as the Rust side sees them. */
	struct ibv_qp *rc_qp;
	struct ibv_qp_ex *rc_qpx;
	struct mlx5dv_qp_ex *rc_mqpx;
	struct ibv_qp *dci_qp;
	struct ibv_qp_ex *dci_qpx;
	struct mlx5dv_qp_ex *dci_mqpx;
	/* The remote buffer the writes go to. */
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t remote_dctn;
	uint64_t remote_dc_key;
	/* For the natural forms' comparisons (the end of post.c): an RC QP
	 * whose send CQ completes every work request it was given
	 * (struct null_ring_cq), as the scoped post needs, and room for one
	 * round of completions with every field the Rust side's
	 * WorkCompletion holds. */
	struct null_qp *rcw;
	struct ibv_qp *rcw_qp;
	struct ibv_qp_ex *rcw_qpx;
	struct ibv_cq_ex *wcq;
	struct bench_wc_full *wc_full;
};

/* A completion with every field of the Rust side's WorkCompletion: the
 * immediate and the invalidated rkey share the CQE field, which is read
 * (and its has_ flag set) only when the flags name one. */
struct bench_wc_full {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t has_imm;
	uint32_t imm;
	uint32_t has_inv;
	uint32_t inv;
	uint32_t qp_num;
	uint32_t vendor_err;
	/* The flags as read, and whether the sender of a receive was read:
	 * never here (a CQ no UD QP receives on), as the Rust side's
	 * completions of such a CQ say with their sender fields. */
	uint32_t wc_flags;
	uint32_t has_sender;
};

/* Builds the fake objects (never freed). */
struct bench_objs *bench_objs_new(void);

/* What a performance-minded C user precomputes, like the Rust side: the
 * SGEs and remote addresses of one batch. */
struct bench_plan {
	struct ibv_sge sge[BENCH_BATCH];
	uint64_t raddr[BENCH_BATCH];
	struct ibv_sge src[BENCH_BATCH];
	struct ibv_sge list[BENCH_LIST];
	uint8_t msg[BENCH_INLINE];
};

/* A plan for the memory region `mr` and the peer's buffer at `remote_addr`
 * (never freed). */
struct bench_plan *bench_plan_new(const struct ibv_mr *mr, uint64_t remote_addr);

/* A completion as the Rust side's WorkCompletion holds it. */
struct bench_wc {
	uint64_t wr_id;
	uint32_t status;
	uint32_t opcode;
	uint32_t byte_len;
	uint32_t has_imm;
	uint32_t imm;
	uint32_t qp_num;
	uint32_t vendor_err;
};

/* Room for one poll round's completions (never freed). */
struct bench_wc *bench_wc_new(void);

/* Copies the last BENCH_BATCH slots the provider wrote on `q`, oldest
 * first, so that the benches can check both sides did the same work. */
void bench_last_batch(const struct null_qp *q, uint64_t out[BENCH_BATCH][8]);
/* Zeroes the ring, so that a batch's slots show only what it wrote. */
void bench_clear_ring(struct null_qp *q);

/* The DC target of the DCI loops: the address handle, the DCT number and
 * its access key, as a C program keeps them. */
struct bench_dc {
	struct ibv_ah *ah;
	uint32_t dctn;
	uint64_t key;
};

#define BENCH_CAT2(a, b) a##b
#define BENCH_CAT(a, b) BENCH_CAT2(a, b)

/* The loops of one build, named <prefix><shape>: one batch (or one poll
 * round) per call, 0 on success (a poll: how many completions it read), a
 * negative errno on failure. They take what a C program passes: the QP as
 * its struct ibv_qp_ex (and struct mlx5dv_qp_ex where the shape uses mlx5dv
 * setters), the CQ as its struct ibv_cq_ex, and the batch's inputs: the
 * peer's rkey, the plan, the DC target, the mkey, the raw WQE, room for the
 * completions.
 *
 * poll_full reads one poll round whole into `wc` (struct bench_wc_full);
 * cq_wait polls rounds until BENCH_BATCH have come; post_wait posts the
 * BENCH_BATCH RDMA writes of rc_write_sge on `qpx`, then polls their
 * completions from `cq`, its send CQ.
 *
 * c/post.c defines them as "C best" (compiled once per variant, its prefix
 * c_best_<variant>_), c/plain.c as "C plain" (prefix c_plain_). */
#define BENCH_LOOPS(prefix)                                                    \
	int BENCH_CAT(prefix, rc_write_sge)(struct ibv_qp_ex *qpx, uint32_t rkey, \
					    const struct bench_plan *p);       \
	int BENCH_CAT(prefix, rc_inline_send)(struct ibv_qp_ex *qpx,           \
					      const struct bench_plan *p);     \
	int BENCH_CAT(prefix, dci_write_sge)(struct ibv_qp_ex *qpx,            \
					     struct mlx5dv_qp_ex *mqpx,        \
					     uint32_t rkey,                    \
					     const struct bench_dc *dc,        \
					     const struct bench_plan *p);      \
	int BENCH_CAT(prefix, dci_write_sge_stream)(struct ibv_qp_ex *qpx,     \
						    struct mlx5dv_qp_ex *mqpx, \
						    uint32_t rkey,             \
						    const struct bench_dc *dc, \
						    const struct bench_plan *p); \
	int BENCH_CAT(prefix, memcpy)(struct ibv_qp_ex *qpx,                   \
				      struct mlx5dv_qp_ex *mqpx,               \
				      const struct bench_plan *p);             \
	int BENCH_CAT(prefix, mr_list)(struct ibv_qp_ex *qpx,                  \
				       struct mlx5dv_qp_ex *mqpx,              \
				       struct mlx5dv_mkey *mkey,               \
				       const struct bench_plan *p);            \
	int BENCH_CAT(prefix, raw_wqe)(struct ibv_qp_ex *qpx,                  \
				       struct mlx5dv_qp_ex *mqpx,              \
				       const void *wqe);                       \
	int BENCH_CAT(prefix, poll_cq)(struct ibv_cq_ex *cq,                   \
				       struct bench_wc *wc);                   \
	int BENCH_CAT(prefix, poll_full)(struct ibv_cq_ex *cq,                 \
					 struct bench_wc_full *wc);            \
	int BENCH_CAT(prefix, cq_wait)(struct ibv_cq_ex *cq,                   \
				       struct bench_wc_full *wc);              \
	int BENCH_CAT(prefix, post_wait)(struct ibv_qp_ex *qpx, uint32_t rkey,  \
					 const struct bench_plan *p,           \
					 struct ibv_cq_ex *cq,                 \
					 struct bench_wc_full *wc);

BENCH_LOOPS(c_plain_)
#ifdef BENCH_PREFIX
BENCH_LOOPS(BENCH_PREFIX)
#endif

#endif
