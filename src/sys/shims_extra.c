/*
 * Shims that bindgen's wrap_static_fns does not emit.
 *
 * bindgen 0.72 generates neither a declaration nor a wrapper for
 * ibv_wc_read_imm_data (a static inline returning __be32): it is written here
 * under the same naming convention (<name>__extern) and declared by hand in
 * src/sys/mod.rs. The recording-provider tests check that every static-inline
 * function of the work-request and completion APIs in the installed headers
 * is callable, so a function missed by the generator shows up there.
 */
#include "wrapper.h"

__be32 ibv_wc_read_imm_data__extern(struct ibv_cq_ex *cq)
{
	return ibv_wc_read_imm_data(cq);
}
