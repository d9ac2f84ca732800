/*
 * Two-process checks of the software mlx5 device: a server and a client
 * process of this one program, both under one mlx5-sim runner, each a host
 * of the runner's fabric, talk to each other through rdma-core's own API
 * only (libibverbs + libmlx5 direct verbs). Run by tests/fabric.rs. Each
 * side verifies data byte for byte and every completion's status and
 * opcode, prints "ok CHECK ROLE" and exits 0; it exits 1 at the first
 * failure.
 *
 * Built from fabric.c (this harness and the channel), fabric_*.c (the
 * checks) and helpers.c.
 *
 * Usage: fabric CHECK server|client CHANNEL
 *
 * CHANNEL names an abstract Unix stream socket the server listens on and
 * the client connects to: the two exchange their LIDs, GIDs, QPNs, PSNs,
 * rkeys and addresses there, and step each other through the check. The
 * port is InfiniBand, or Ethernet (RoCE) under `mlx5-sim --roce`: then
 * every address carries a GRH from GID index 3 (RoCE v2, IPv4-mapped) to
 * the peer's.
 */
#include "fabric.h"

int is_server;
int roce;
enum ibv_mtu path_mtu;
struct info me, peer;
uint8_t *big[NBIG];
struct ibv_mr *big_mr[NBIG];
const struct conn default_conn = {.timeout = 14,
				  .retry_cnt = 7,
				  .rnr_retry = 7,
				  .min_rnr_timer = 12,
				  .access = ALL_ACCESS};

/* The GID index every address uses on RoCE: RoCE v2, IPv4-mapped. */
#define GID_INDEX (roce ? 3 : 0)

static int chan = -1;

static void open_channel(const char *name)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	CHECK(strlen(name) + 1 < sizeof(a.sun_path), "channel name too long");
	memcpy(a.sun_path + 1, name, strlen(name));
	socklen_t len = offsetof(struct sockaddr_un, sun_path) + 1 + strlen(name);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(s >= 0, "socket: %s", strerror(errno));
	if (is_server) {
		CHECK(bind(s, (struct sockaddr *)&a, len) == 0 &&
			      listen(s, 1) == 0,
		      "listen on @%s: %s", name, strerror(errno));
		struct pollfd p = {.fd = s, .events = POLLIN};
		CHECK(poll(&p, 1, CHANNEL_WAIT_MS) == 1,
		      "no client within %d ms", CHANNEL_WAIT_MS);
		chan = accept4(s, NULL, NULL, SOCK_CLOEXEC);
		CHECK(chan >= 0, "accept: %s", strerror(errno));
		close(s);
		return;
	}
	double t0 = now_ms();
	while (connect(s, (struct sockaddr *)&a, len) != 0) {
		CHECK(now_ms() - t0 < CHANNEL_WAIT_MS, "no server at @%s: %s",
		      name, strerror(errno));
		usleep(5000);
	}
	chan = s;
}

void put(const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t w = send(chan, b, n, MSG_NOSIGNAL);
		CHECK(w > 0, "channel send: %s", strerror(errno));
		b += w;
		n -= (size_t)w;
	}
}

/* Reads n bytes; 0 if the peer closed the channel first. */
int get_or_eof(void *p, size_t n)
{
	uint8_t *b = p;
	while (n) {
		struct pollfd pf = {.fd = chan, .events = POLLIN};
		CHECK(poll(&pf, 1, CHANNEL_WAIT_MS) == 1,
		      "the peer said nothing for %d ms", CHANNEL_WAIT_MS);
		ssize_t r = recv(chan, b, n, 0);
		CHECK(r >= 0, "channel recv: %s", strerror(errno));
		if (r == 0)
			return 0;
		b += r;
		n -= (size_t)r;
	}
	return 1;
}

void get(void *p, size_t n)
{
	CHECK(get_or_eof(p, n), "the peer closed the channel");
}

/* Steps: one side says a tag, the other waits to hear exactly that one. */
void say(uint32_t tag)
{
	put(&tag, sizeof(tag));
}

void hear(uint32_t tag)
{
	uint32_t t;
	get(&t, sizeof(t));
	CHECK(t == tag, "heard step %u, expected %u", t, tag);
}

void exchange(void)
{
	put(&me, sizeof(me));
	get(&peer, sizeof(peer));
}

/* Waits until the peer process has closed the channel (it exited). */
void wait_peer_gone(void)
{
	uint8_t b;
	CHECK(!get_or_eof(&b, 1), "the peer said more");
}

double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

unsigned int env_ms(const char *name, unsigned int dflt)
{
	const char *v = getenv(name);
	return v && *v ? (unsigned int)strtoul(v, NULL, 10) : dflt;
}

/* The address of the peer's port: its LID, and on RoCE a GRH from our
 * GID_INDEX to its GID. */
void set_ah_attr(struct ibv_ah_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->dlid = peer.lid;
	a->port_num = 1;
	if (roce) {
		a->is_global = 1;
		memcpy(a->grh.dgid.raw, peer.gid, 16);
		a->grh.sgid_index = GID_INDEX;
		a->grh.hop_limit = 64;
	}
}

struct ibv_ah *peer_ah(void)
{
	struct ibv_ah_attr aa;
	set_ah_attr(&aa);
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah, "create_ah: %s", strerror(errno));
	return ah;
}

/* RESET → INIT → RTR → RTS towards QP dqpn of the peer. */
void connect_to(struct ibv_qp *qp, uint32_t dqpn, uint32_t my_psn,
		uint32_t peer_psn, const struct conn *c)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
				.port_num = 1,
				.qp_access_flags = c->access};
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
					   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "INIT: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = path_mtu;
	a.dest_qp_num = dqpn;
	a.rq_psn = peer_psn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = c->min_rnr_timer;
	set_ah_attr(&a.ah_attr);
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
					   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					   IBV_QP_MAX_DEST_RD_ATOMIC |
					   IBV_QP_MIN_RNR_TIMER) == 0,
	      "RTR: %s", strerror(errno));
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = c->timeout;
	a.retry_cnt = c->retry_cnt;
	a.rnr_retry = c->rnr_retry;
	a.sq_psn = my_psn;
	a.max_rd_atomic = 4;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT |
					   IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					   IBV_QP_SQ_PSN |
					   IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "RTS: %s", strerror(errno));
	CHECK(qp_state(qp) == IBV_QPS_RTS, "not in RTS");
}

void check_pattern(const uint8_t *p, size_t n, uint8_t seed, const char *what)
{
	for (size_t i = 0; i < n; i++)
		CHECK(p[i] == (uint8_t)(seed + i * 7),
		      "%s: byte %zu is %#x, expected %#x", what, i, p[i],
		      (uint8_t)(seed + i * 7));
}

void check_zero(const uint8_t *p, size_t n, const char *what)
{
	for (size_t i = 0; i < n; i++)
		CHECK(p[i] == 0, "%s: byte %zu is %#x, not 0", what, i, p[i]);
}

/* Posts one signalled RC work request of opcode op (write, write with
 * immediate, read, send, send with immediate) from or into one SGE. */
void post_one(struct rc *r, uint64_t wr_id, int op, uint32_t rkey,
	      uint64_t raddr, void *local, uint32_t len, uint32_t lkey,
	      uint32_t imm)
{
	ibv_wr_start(r->qpx);
	r->qpx->wr_id = wr_id;
	r->qpx->wr_flags = IBV_SEND_SIGNALED;
	switch (op) {
	case IBV_WR_RDMA_WRITE:
		ibv_wr_rdma_write(r->qpx, rkey, raddr);
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		ibv_wr_rdma_write_imm(r->qpx, rkey, raddr, htobe32(imm));
		break;
	case IBV_WR_RDMA_READ:
		ibv_wr_rdma_read(r->qpx, rkey, raddr);
		break;
	case IBV_WR_SEND:
		ibv_wr_send(r->qpx);
		break;
	case IBV_WR_SEND_WITH_IMM:
		ibv_wr_send_imm(r->qpx, htobe32(imm));
		break;
	default:
		FAIL("opcode %d", op);
	}
	ibv_wr_set_sge(r->qpx, lkey, (uintptr_t)local, len);
	CHECK(ibv_wr_complete(r->qpx) == 0, "wr_complete: %s", strerror(errno));
}

/* The next completion: a successful receive on qp of wr_id, opcode and
 * length, sent by the peer's QP src. */
struct ibv_wc expect_from(struct ibv_qp *qp, uint64_t wr_id, int opcode,
			  uint32_t len, uint32_t src)
{
	struct ibv_wc wc = poll1();
	CHECK(wc.wr_id == wr_id && wc.status == IBV_WC_SUCCESS &&
		      (int)wc.opcode == opcode && wc.byte_len == len &&
		      wc.qp_num == qp->qp_num && wc.src_qp == src,
	      "recv wr_id %llu status %s opcode %d len %u qp %#x from %#x; "
	      "expected wr_id %llu opcode %d len %u qp %#x from %#x",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
	      wc.opcode, wc.byte_len, wc.qp_num, wc.src_qp,
	      (unsigned long long)wr_id, opcode, len, qp->qp_num, src);
	return wc;
}

/* expect_from, and the immediate: none if !has_imm, else imm. */
struct ibv_wc expect_msg(struct ibv_qp *qp, uint64_t wr_id, int opcode,
			 uint32_t len, uint32_t src, int has_imm, uint32_t imm)
{
	struct ibv_wc wc = expect_from(qp, wr_id, opcode, len, src);
	if (!has_imm)
		CHECK(!(wc.wc_flags & IBV_WC_WITH_IMM), "an immediate: %#x",
		      be32toh(wc.imm_data));
	else
		CHECK((wc.wc_flags & IBV_WC_WITH_IMM) &&
			      be32toh(wc.imm_data) == imm,
		      "immediate %#x (flags %#x), expected %#x",
		      be32toh(wc.imm_data), wc.wc_flags, imm);
	return wc;
}

/* Polls the CQ for up to ms milliseconds: 1 and the completion, or 0. */
int poll_within(struct ibv_wc *wc, int ms)
{
	double t0 = now_ms();
	do {
		int n = ibv_poll_cq(cq, 1, wc);
		CHECK(n >= 0, "ibv_poll_cq: %d", n);
		if (n == 1)
			return 1;
		usleep(1000);
	} while (now_ms() - t0 < ms);
	return 0;
}

enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	CHECK(ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi) == 0, "query_qp: %s",
	      strerror(errno));
	return qa.qp_state;
}

/* The next async event of the context is type, about qp; acknowledged. */
void expect_async(enum ibv_event_type type, struct ibv_qp *qp)
{
	struct pollfd p = {.fd = ctx->async_fd, .events = POLLIN};
	CHECK(poll(&p, 1, 10000) == 1, "no async event within 10 s");
	struct ibv_async_event ev;
	CHECK(ibv_get_async_event(ctx, &ev) == 0, "get_async_event: %s",
	      strerror(errno));
	CHECK(ev.event_type == type && ev.element.qp == qp,
	      "async event %s (%d) on %p; expected %s on QP %#x (%p)",
	      ibv_event_type_str(ev.event_type), ev.event_type,
	      (void *)ev.element.qp, ibv_event_type_str(type), qp->qp_num,
	      (void *)qp);
	ibv_ack_async_event(&ev);
}

/* Both processes see a port of their own: own LID, node GUID and GIDs. */
static void identity(void)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "query_port");
	uint64_t guid = be64toh(da.node_guid);
	uint16_t host = (uint16_t)guid;
	CHECK(guid >> 16 == 0x0c42a10300b1ULL && host != 0,
	      "node GUID %#llx", (unsigned long long)guid);
	CHECK(be64toh(ibv_get_device_guid(ctx->device)) == guid,
	      "ibv_get_device_guid differs from node_guid");
	CHECK(pa.state == IBV_PORT_ACTIVE, "port state %d", pa.state);
	uint8_t want[4][16] = {{0}};
	int kinds[4];
	if (roce) {
		CHECK(pa.link_layer == IBV_LINK_LAYER_ETHERNET && pa.lid == 0,
		      "RoCE port: link layer %d, LID %u", pa.link_layer, pa.lid);
		/* fe80::c4:2aff:fe00:NNNN (v1, v2); ::ffff:10.77.hi.lo (v1, v2) */
		uint8_t ll[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0xc4,
				  0x2a, 0xff, 0xfe, 0x00, host >> 8, host & 0xff};
		uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
				  10, 77, host >> 8, host & 0xff};
		memcpy(want[0], ll, 16);
		memcpy(want[1], ll, 16);
		memcpy(want[2], v4, 16);
		memcpy(want[3], v4, 16);
		kinds[0] = kinds[2] = IBV_GID_TYPE_ROCE_V1;
		kinds[1] = kinds[3] = IBV_GID_TYPE_ROCE_V2;
	} else {
		CHECK(pa.link_layer == IBV_LINK_LAYER_INFINIBAND &&
			      pa.lid == host,
		      "IB port: link layer %d, LID %u, host %u", pa.link_layer,
		      pa.lid, host);
		want[0][0] = 0xfe;
		want[0][1] = 0x80;
		uint64_t g = htobe64(guid);
		memcpy(want[0] + 8, &g, 8);
		kinds[0] = IBV_GID_TYPE_IB;
	}
	for (int i = 0; i < (roce ? 4 : 1); i++) {
		union ibv_gid gid;
		struct ibv_gid_entry e;
		CHECK(ibv_query_gid(ctx, 1, i, &gid) == 0, "query_gid %d", i);
		CHECK(memcmp(gid.raw, want[i], 16) == 0, "GID %d is not ours", i);
		CHECK(ibv_query_gid_ex(ctx, 1, i, &e, 0) == 0,
		      "query_gid_ex %d: %s", i, strerror(errno));
		CHECK(memcmp(e.gid.raw, want[i], 16) == 0 &&
			      (int)e.gid_type == kinds[i],
		      "GID entry %d: type %u, expected %d", i, e.gid_type,
		      kinds[i]);
	}
	exchange();
	CHECK(peer.node_guid != me.node_guid &&
		      (roce || peer.lid != me.lid) &&
		      memcmp(peer.gid, me.gid, 16) != 0,
	      "the two processes share an identity: GUID %#llx, LID %u",
	      (unsigned long long)me.node_guid, me.lid);
	CHECK(peer.node_guid >> 16 == me.node_guid >> 16,
	      "GUIDs of another vendor or system");
	say(1);
	hear(1);
}

void identity_server(void)
{
	identity();
}

void identity_client(void)
{
	identity();
}

static const struct {
	const char *name;
	void (*server)(void);
	void (*client)(void);
} checks[] = {
	{"identity", identity_server, identity_client},
	{"rc", rc_server, rc_client},
	{"rnr", rnr_server, rnr_client},
	{"absent_qp", absent_qp_server, absent_qp_client},
	{"exited", exited_server, exited_client},
	{"nak", nak_server, nak_client},
	{"killed", killed_server, killed_client},
	{"ud", ud_server, ud_client},
	{"dc", dc_server, dc_client},
	{"uc", uc_server, uc_client},
};

int main(int argc, char **argv)
{
	CHECK(argc == 4 && (!strcmp(argv[2], "server") ||
			    !strcmp(argv[2], "client")),
	      "usage: fabric CHECK server|client CHANNEL");
	is_server = !strcmp(argv[2], "server");
	fail_prefix = is_server ? "server: " : "client: ";
	open_channel(argv[3]);
	open_device(1024, 128);
	struct ibv_port_attr pa;
	union ibv_gid gid;
	struct ibv_device_attr da;
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "query_port");
	roce = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
	path_mtu = pa.active_mtu;
	CHECK(ibv_query_gid(ctx, 1, GID_INDEX, &gid) == 0, "query_gid");
	CHECK(ibv_query_device(ctx, &da) == 0, "query_device");
	me.pid = getpid();
	me.lid = pa.lid;
	memcpy(me.gid, gid.raw, 16);
	me.node_guid = be64toh(da.node_guid);
	for (int i = 0; i < NBIG; i++) {
		big[i] = aligned_alloc(4096, BIG);
		CHECK(big[i], "aligned_alloc");
		memset(big[i], 0, BIG);
		big_mr[i] = ibv_reg_mr(pd, big[i], BIG, ALL_ACCESS);
		CHECK(big_mr[i], "reg_mr: %s", strerror(errno));
		me.rkey[i] = big_mr[i]->rkey;
		me.addr[i] = (uintptr_t)big[i];
	}
	size_t i = 0;
	while (i < sizeof(checks) / sizeof(checks[0]) &&
	       strcmp(checks[i].name, argv[1]))
		i++;
	CHECK(i < sizeof(checks) / sizeof(checks[0]), "no check %s", argv[1]);
	(is_server ? checks[i].server : checks[i].client)();
	for (int j = 0; j < NBIG; j++)
		CHECK(ibv_dereg_mr(big_mr[j]) == 0, "dereg_mr");
	close_device();
	printf("ok %s %s\n", argv[1], argv[2]);
	return 0;
}
