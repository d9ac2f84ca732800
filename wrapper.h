/*
 * The C headers the `mlx5dv` crate binds: the generic verbs API (including
 * the extended work-request API, ibv_wr_*) and the mlx5 direct-verbs API
 * (mlx5dv_wr_*). bindgen reads this file; the generated C shim file
 * includes it, so every static-inline function is compiled from the
 * installed headers themselves.
 */
#include <infiniband/verbs.h>
#include <infiniband/mlx5dv.h>
