#ifndef MODEL_H
#define MODEL_H

#define _GNU_SOURCE
/* Shared declarations of the model checks (see model.c). */
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <poll.h>
#include <sys/mman.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...)                                                              \
	do {                                                                   \
		fprintf(stderr, "%sFAIL %s:%d: ", fail_prefix, __func__,       \
			__LINE__);                                             \
		fprintf(stderr, __VA_ARGS__);                                  \
		fprintf(stderr, "\n");                                         \
		exit(1);                                                       \
	} while (0)
#define CHECK(c, ...)                                                          \
	do {                                                                   \
		if (!(c))                                                      \
			FAIL(__VA_ARGS__);                                     \
	} while (0)

#define BUF 4096
#define ALL_ACCESS                                                             \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                    \
	 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)
#define DC_KEY 0x1234abcdULL

/* Starts every failure message (fabric.c: which process failed). */
extern const char *fail_prefix;
extern struct ibv_context *ctx;
extern struct ibv_pd *pd;
extern struct ibv_cq *cq;
extern struct ibv_srq *srq;
extern uint8_t *mem[4];
extern struct ibv_mr *mr[4];

struct rc {
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	struct mlx5dv_qp_ex *dv;
};

extern int (*sim_step)(void);

/* Helpers (helpers.c). */
void open_device(int ncqe, uint32_t srq_wr);
void close_device(void);
struct ibv_wc poll1(void);
void expect(uint64_t wr_id, enum ibv_wc_status st, int opcode);
void expect_recv(uint64_t wr_id, int opcode, uint32_t len, int imm,
			uint32_t imm_val);
void fill(uint8_t *p, size_t n, uint8_t seed);
void same(const uint8_t *a, const uint8_t *b, size_t n, const char *what);
void to_state(struct ibv_qp *qp, enum ibv_qp_state s, uint32_t dest);
struct rc make_rc(int with_srq);
void connect_rc(struct rc *a, struct rc *b);
void post_recv(struct ibv_qp *qp, uint64_t id, void *buf, uint32_t len,
		      uint32_t lkey);
void post_srq_recv(uint64_t id, void *buf, uint32_t len, uint32_t lkey);
struct mlx5dv_mkey *list_mkey(struct rc *on, uint64_t wr_id, int flags);
void write_to(struct rc *from, uint64_t wr_id, uint32_t rkey,
		     enum ibv_wc_status st);
/* Creation attributes: both CQs `cq`, PD `pd`, one SGE each way. */
struct ibv_qp_init_attr_ex qp_attr(enum ibv_qp_type type, uint32_t send_wr,
				   uint32_t recv_wr);
struct ibv_qp *make_ud(uint32_t qkey);
struct ibv_qp *make_dct(struct ibv_srq *s, const struct ibv_ah_attr *av);
struct ibv_qp *make_dci(int log_conc, int log_err,
			const struct ibv_ah_attr *av);

/* The checks (checks_*.c). */
void check_device(void);
void check_rc(void);
void check_srq(void);
void check_dc(void);
void check_memcpy_mkey_raw(void);
void check_local_error(void);
void check_channel(void);
void check_invalidate(void);
void check_contexts(void);
void check_overrun(void);
void check_ud(void);
void check_unmapped(void);
void check_post_send(void);
void check_raw_refusals(void);
void check_syndromes(void);
void check_ops(void);
void check_verbs(void);
void check_xrc(void);

#endif
