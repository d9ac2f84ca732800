/*
 * Checks of the software mlx5 device through rdma-core's own API only
 * (libibverbs + libmlx5 direct verbs), run under the mlx5-sim runner by
 * tests/model.rs. Each check verifies data byte for byte and every
 * completion's status and opcode; the program prints "ok NAME" per check
 * and exits 1 at the first failure.
 *
 * Built from model.c (this harness), helpers.c and checks_*.c.
 *
 * Usage: model [CHECK...]   (default: all)
 *
 * With MODEL_STEP=1 the program drives the device itself through the
 * exported mlx5dv_sim_step() (run it with MLX5DV_SIM_THREAD=0).
 */
#include "model.h"

static const struct {
	const char *name;
	void (*fn)(void);
	int by_name_only;
} checks[] = {
	{"device", check_device},   {"rc", check_rc},
	{"srq", check_srq},	    {"dc", check_dc},
	{"mlx5", check_memcpy_mkey_raw}, {"local_error", check_local_error},
	{"channel", check_channel},
	{"invalidate", check_invalidate}, {"contexts", check_contexts},
	{"ud", check_ud}, {"unmapped", check_unmapped},
	{"post_send", check_post_send},
	{"raw_refusals", check_raw_refusals}, {"syndromes", check_syndromes},
	{"ops", check_ops}, {"verbs", check_verbs}, {"xrc", check_xrc},
	{"overrun", check_overrun, 1},
};

int main(int argc, char **argv)
{
	if (getenv("MODEL_STEP")) {
		sim_step = (int (*)(void))dlsym(RTLD_DEFAULT, "mlx5dv_sim_step");
		CHECK(sim_step, "mlx5dv_sim_step is not in the process");
	}
	open_device(256, 16);
	for (size_t i = 0; i < sizeof(checks) / sizeof(checks[0]); i++) {
		int run = argc == 1 && !checks[i].by_name_only;
		for (int j = 1; j < argc; j++)
			run |= strcmp(argv[j], checks[i].name) == 0;
		if (!run)
			continue;
		checks[i].fn();
		printf("ok %s\n", checks[i].name);
		fflush(stdout);
	}
	close_device();
	return 0;
}
