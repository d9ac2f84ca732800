/*
 * What a program sees of the device beyond libibverbs' own calls, as UCX
 * looks at it: the uverbs node's access(), the sysfs tree's layout (the
 * class link into the PCI function's directory, its PCI ids), the general
 * HCA capabilities, a zero-length RDMA write with no key (UCX's flush),
 * and UAR mappings whose mmap() bypasses the interposer (UCX's memory
 * hooks). Run under the mlx5-sim runner by tests/host_view.rs; prints
 * "ok NAME" per check and exits 1 at the first failure.
 *
 * Built from host_view.c and helpers.c.
 *
 * Usage: host_view CHECK...
 *
 * With HOST_VIEW_RAW_MMAP=1 every mmap() the program's libraries make
 * through the PLT is the raw system call, as after libucm patched the
 * interposer's mmap (its "bistro" hook, whose original is the system
 * call).
 */
#include "model.h"
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/syscall.h>

static int raw_mmap;
static int raw_mmap_calls;

/* The executable's definition comes before the preloaded interposer's. */
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	static void *(*next)(void *, size_t, int, int, int, off_t);
	if (raw_mmap) {
		raw_mmap_calls += fd >= 0;
		return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd,
				       off);
	}
	if (!next)
		next = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(
			RTLD_NEXT, "mmap");
	return next(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return mmap(addr, len, prot, flags, fd, off);
}

static void check_access(void)
{
	const char *node = "/dev/infiniband/uverbs0";
	struct stat st;
	CHECK(stat(node, &st) == 0 && S_ISCHR(st.st_mode), "stat");
	CHECK(access(node, R_OK | W_OK) == 0, "access: %s", strerror(errno));
	CHECK(access(node, F_OK) == 0, "access F_OK: %s", strerror(errno));
	CHECK(faccessat(AT_FDCWD, node, R_OK | W_OK, 0) == 0,
	      "faccessat: %s", strerror(errno));
	CHECK(faccessat(AT_FDCWD, node, R_OK | W_OK, AT_EACCESS) == 0,
	      "faccessat AT_EACCESS: %s", strerror(errno));
	CHECK(euidaccess(node, R_OK | W_OK) == 0, "euidaccess: %s",
	      strerror(errno));
	CHECK(eaccess(node, R_OK | W_OK) == 0, "eaccess: %s", strerror(errno));
	errno = 0;
	CHECK(access(node, X_OK) == -1 && errno == EACCES,
	      "access X_OK: %d %s", errno, strerror(errno));
	errno = 0;
	CHECK(access("/dev/infiniband/uverbs9", F_OK) == -1 && errno == ENOENT,
	      "another node: %s", strerror(errno));
}

/* The first line of a file, without its newline. By open(), as
 * libibverbs, UCX and Python read sysfs (glibc's fopen opens the file by
 * an internal call, which no interposer sees). */
static void read_line(const char *path, char *buf, size_t n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0, "open %s: %s", path, strerror(errno));
	ssize_t got = read(fd, buf, n - 1);
	CHECK(got > 0, "read %s", path);
	close(fd);
	buf[got] = 0;
	buf[strcspn(buf, "\n")] = 0;
}

static void expect_file(const char *dir, const char *name, const char *want)
{
	char path[PATH_MAX], got[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	read_line(path, got, sizeof(got));
	CHECK(strcmp(got, want) == 0, "%s: '%s', not '%s'", path, got, want);
}

static void expect_realpath(const char *root, const char *rel, const char *want)
{
	char path[PATH_MAX], got[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s", root, rel);
	CHECK(realpath(path, got), "realpath %s: %s", path, strerror(errno));
	CHECK(strcmp(got, want) == 0, "%s resolves to %s, not %s", rel, got,
	      want);
}

static void check_sysfs(void)
{
	const char *sysfs = getenv("SYSFS_PATH");
	/* Room for the tree's root and a path in it. */
	char root[PATH_MAX], dev[PATH_MAX], path[2 * PATH_MAX], fn[PATH_MAX];
	CHECK(sysfs && realpath(sysfs, root), "SYSFS_PATH");
	/* As UCX finds the PCI function: the class link resolved, less two
	 * components (infiniband/mlx5_0). */
	snprintf(path, sizeof(path), "%s/class/infiniband/mlx5_0", root);
	CHECK(realpath(path, dev), "realpath %s: %s", path, strerror(errno));
	size_t l = strlen(dev), t = strlen("/infiniband/mlx5_0");
	CHECK(l > t && strcmp(dev + l - t, "/infiniband/mlx5_0") == 0,
	      "class/infiniband/mlx5_0 resolves to %s", dev);
	snprintf(fn, sizeof(fn), "%s", dev);
	strcpy(fn, dirname(dirname(fn)));
	CHECK(strncmp(fn, root, strlen(root)) == 0 &&
		      strstr(fn + strlen(root), "/devices/pci"),
	      "PCI function %s", fn);
	CHECK(strcmp(strrchr(fn, '/'), "/0000:03:00.0") == 0, "BDF of %s", fn);
	expect_file(fn, "vendor", "0x15b3");
	expect_file(fn, "device", "0x101b");
	expect_file(fn, "subsystem_vendor", "0x15b3");
	expect_realpath(root, "class/infiniband/mlx5_0/device", fn);
	expect_realpath(root, "class/infiniband_verbs/uverbs0/device", fn);
	snprintf(path, sizeof(path), "%s/class/infiniband/mlx5_0/device", root);
	expect_file(path, "vendor", "0x15b3");
	snprintf(path, sizeof(path), "%s/class/infiniband_verbs/uverbs0", root);
	expect_file(path, "ibdev", "mlx5_0");
	expect_file(path, "dev", "231:192");
	/* The per-host files, by the class link and by the function's
	 * directory: this host's node GUID both ways. */
	char by_class[64], by_dev[64];
	snprintf(path, sizeof(path), "%s/class/infiniband/mlx5_0/node_guid",
		 root);
	read_line(path, by_class, sizeof(by_class));
	snprintf(path, sizeof(path), "%s/node_guid", dev);
	read_line(path, by_dev, sizeof(by_dev));
	CHECK(strcmp(by_class, by_dev) == 0, "node_guid %s and %s", by_class,
	      by_dev);
	CHECK(strcmp(by_class, "0c42:a103:00b1:0000") != 0,
	      "node_guid is the tree's placeholder");
	/* The device's files under the real /sys are the tree's. */
	expect_file("/sys/class/infiniband/mlx5_0/ports/1/pkeys", "0",
		    "0xffff");
	expect_file("/sys/class/infiniband/mlx5_0/device", "vendor",
		    "0x15b3");
	expect_file("/sys/class/infiniband/mlx5_0", "node_guid", by_class);
	/* And libibverbs finds the device, its GUID and P_Key. */
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n == 1, "ibv_get_device_list: %d", n);
	uint64_t guid = be64toh(ibv_get_device_guid(list[0]));
	char want[64];
	snprintf(want, sizeof(want), "%04x:%04x:%04x:%04x",
		 (unsigned)(guid >> 48), (unsigned)(guid >> 32) & 0xffff,
		 (unsigned)(guid >> 16) & 0xffff, (unsigned)guid & 0xffff);
	CHECK(strcmp(want, by_class) == 0, "device GUID %s, sysfs %s", want,
	      by_class);
	ibv_free_device_list(list);
	__be16 pkey;
	CHECK(ibv_query_pkey(ctx, 1, 0, &pkey) == 0 &&
		      be16toh(pkey) == 0xffff,
	      "P_Key 0: %#x", be16toh(pkey));
}

/* A field of QUERY_HCA_CAP's output, `bit` relative to the capability
 * (the output's bit 0x80), as mlx5_ifc.h lays out cmd_hca_cap. */
static uint32_t cap_field(const uint8_t *out, unsigned bit, unsigned width)
{
	bit += 0x80;
	uint32_t dw;
	memcpy(&dw, out + bit / 32 * 4, 4);
	dw = be32toh(dw);
	return (dw >> (32 - bit % 32 - width)) & ((1ULL << width) - 1);
}

static void check_hca_caps(void)
{
	struct mlx5dv_context_attr da = {.flags = MLX5DV_CONTEXT_FLAGS_DEVX};
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *dc = mlx5dv_open_device(list[0], &da);
	CHECK(dc, "mlx5dv_open_device(DEVX): %s", strerror(errno));
	uint32_t in[4] = {htobe32(0x100 << 16), htobe32(1)};
	uint8_t out[0x1010] = {0};
	CHECK(mlx5dv_devx_general_cmd(dc, in, sizeof(in), out, sizeof(out)) ==
		      0,
	      "QUERY_HCA_CAP general: %s", strerror(errno));
	CHECK(cap_field(out, 0x1c3, 5) == 30, "log_max_msg %u",
	      cap_field(out, 0x1c3, 5));
	CHECK(cap_field(out, 0x21a, 1) == 1, "dct");
	CHECK(cap_field(out, 0x21e, 1) == 1, "atomic");
	CHECK(cap_field(out, 0x1fc, 4) == 1, "cqe_version");
	CHECK(cap_field(out, 0x12a, 6) == 4, "log_max_ra_req_dc %u",
	      cap_field(out, 0x12a, 6));
	CHECK(cap_field(out, 0x1b8, 8) == 1, "num_ports");
	int roce = getenv("MLX5DV_SIM_ROCE") &&
		   strcmp(getenv("MLX5DV_SIM_ROCE"), "1") == 0;
	CHECK(cap_field(out, 0x1b6, 2) == (uint32_t)roce, "port_type");
	CHECK(cap_field(out, 0x21d, 1) == (uint32_t)roce, "roce");
	CHECK(cap_field(out, 0x227, 1) == 0, "pg (no ODP)");
	ibv_close_device(dc);
	ibv_free_device_list(list);
}

/* 16 bytes of mem[0] written to mem[1] by `rkey`. */
static void write_at(struct rc *a, uint64_t wr_id, uint32_t rkey,
		     enum ibv_wc_status st)
{
	ibv_wr_start(a->qpx);
	a->qpx->wr_id = wr_id;
	a->qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(a->qpx, rkey, (uintptr_t)mem[1]);
	ibv_wr_set_sge(a->qpx, mr[0]->lkey, (uintptr_t)mem[0], 16);
	CHECK(ibv_wr_complete(a->qpx) == 0, "wr_complete");
	expect(wr_id, st, st == IBV_WC_SUCCESS ? IBV_WC_RDMA_WRITE : -1);
}

static void zero_length_write(struct rc *a, uint64_t wr_id, int inl)
{
	ibv_wr_start(a->qpx);
	a->qpx->wr_id = wr_id;
	a->qpx->wr_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0);
	ibv_wr_rdma_write(a->qpx, 0, 0);
	if (inl)
		ibv_wr_set_inline_data(a->qpx, NULL, 0);
	else
		ibv_wr_set_sge(a->qpx, mr[0]->lkey, (uintptr_t)mem[0], 0);
	CHECK(ibv_wr_complete(a->qpx) == 0, "wr_complete");
	expect(wr_id, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
}

/* IBA C9-88: a zero-length RDMA write's R_Key and address are not
 * checked; the QP's access flags still are (a wrong rkey with data is a
 * remote access error, as before, and puts the QP in ERR). */
static void check_zero_length_write(void)
{
	struct rc a = make_rc(0), b = make_rc(0);
	connect_rc(&a, &b);
	zero_length_write(&a, 1, 0);
	zero_length_write(&a, 2, 1);
	write_at(&a, 3, mr[1]->rkey + 1, IBV_WC_REM_ACCESS_ERR);
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);
}

/* UAR pages mapped by the mmap system call, not through the interposer:
 * a QP posts and completes as usual. */
static void check_raw_mmap(void)
{
	CHECK(raw_mmap, "run with HOST_VIEW_RAW_MMAP=1");
	struct rc a = make_rc(0), b = make_rc(0);
	CHECK(raw_mmap_calls > 0, "libmlx5 mapped no UAR by mmap");
	connect_rc(&a, &b);
	fill(mem[0], BUF, 7);
	write_at(&a, 1, mr[1]->rkey, IBV_WC_SUCCESS);
	same(mem[0], mem[1], 16, "written");
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);
}

static const struct {
	const char *name;
	void (*fn)(void);
} checks[] = {
	{"access", check_access},
	{"sysfs", check_sysfs},
	{"hca_caps", check_hca_caps},
	{"zero_length_write", check_zero_length_write},
	{"raw_mmap", check_raw_mmap},
};

int main(int argc, char **argv)
{
	raw_mmap = getenv("HOST_VIEW_RAW_MMAP") != NULL;
	open_device(256, 16);
	for (int j = 1; j < argc; j++) {
		size_t i = 0;
		while (i < sizeof(checks) / sizeof(checks[0]) &&
		       strcmp(argv[j], checks[i].name) != 0)
			i++;
		CHECK(i < sizeof(checks) / sizeof(checks[0]), "no check %s",
		      argv[j]);
		checks[i].fn();
		printf("ok %s\n", checks[i].name);
		fflush(stdout);
	}
	close_device();
	return 0;
}
