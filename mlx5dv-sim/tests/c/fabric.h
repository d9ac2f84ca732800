#ifndef FABRIC_H
#define FABRIC_H

/* Shared declarations of the two-process checks (see fabric.c). */
#include "model.h"
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>

/* The large buffers: 1 MiB each, registered with every access. */
#define BIG (1 << 20)
#define NBIG 3
/* The most QPs one side names to the other. */
#define NQP 4
/* How long a process waits for its peer's next word on the channel. */
#define CHANNEL_WAIT_MS 20000

/* What one side tells the other at the start of a check. */
struct info {
	int32_t pid;
	uint16_t lid;
	uint8_t gid[16]; /* the GID at GID_INDEX */
	uint64_t node_guid;
	uint32_t qpn[NQP]; /* QP numbers, or a DCTN */
	uint32_t psn[NQP]; /* each QP's first send PSN */
	uint32_t rkey[NBIG];
	uint64_t addr[NBIG];
};

/* Set up by main (fabric.c). */
extern int is_server;
extern int roce;
extern enum ibv_mtu path_mtu;
extern struct info me, peer;
extern uint8_t *big[NBIG];
extern struct ibv_mr *big_mr[NBIG];

/* A connection's parameters (the requester's timers and counts, the
 * responder's RNR timer and access). */
struct conn {
	uint8_t timeout;
	uint8_t retry_cnt;
	uint8_t rnr_retry;
	uint8_t min_rnr_timer;
	unsigned int access;
};
extern const struct conn default_conn;

/* The channel between the two processes (fabric.c). */
void put(const void *p, size_t n);
int get_or_eof(void *p, size_t n);
void get(void *p, size_t n);
void say(uint32_t tag);
void hear(uint32_t tag);
void exchange(void);
void wait_peer_gone(void);

/* Helpers (fabric.c). */
double now_ms(void);
unsigned int env_ms(const char *name, unsigned int dflt);
void set_ah_attr(struct ibv_ah_attr *a);
struct ibv_ah *peer_ah(void);
void connect_to(struct ibv_qp *qp, uint32_t dqpn, uint32_t my_psn,
		uint32_t peer_psn, const struct conn *c);
void check_pattern(const uint8_t *p, size_t n, uint8_t seed, const char *what);
void check_zero(const uint8_t *p, size_t n, const char *what);
void post_one(struct rc *r, uint64_t wr_id, int op, uint32_t rkey,
	      uint64_t raddr, void *local, uint32_t len, uint32_t lkey,
	      uint32_t imm);
struct ibv_wc expect_from(struct ibv_qp *qp, uint64_t wr_id, int opcode,
			  uint32_t len, uint32_t src);
struct ibv_wc expect_msg(struct ibv_qp *qp, uint64_t wr_id, int opcode,
			 uint32_t len, uint32_t src, int has_imm, uint32_t imm);
int poll_within(struct ibv_wc *wc, int ms);
enum ibv_qp_state qp_state(struct ibv_qp *qp);
void expect_async(enum ibv_event_type type, struct ibv_qp *qp);

/* The checks, a server and a client side each (fabric_*.c). */
void identity_server(void);
void identity_client(void);
void rc_server(void);
void rc_client(void);
void rnr_server(void);
void rnr_client(void);
void absent_qp_server(void);
void absent_qp_client(void);
void exited_server(void);
void exited_client(void);
void nak_server(void);
void nak_client(void);
void killed_server(void);
void killed_client(void);
void ud_server(void);
void ud_client(void);
void dc_server(void);
void dc_client(void);
void uc_server(void);
void uc_client(void);

#endif
