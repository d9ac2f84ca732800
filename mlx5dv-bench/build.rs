//! Compiles the benchmarks' C (`c/`: the same batches written in C, and
//! the null provider both sides post to) against the rdma-core headers
//! mlx5dv was built with (`DEP_MLX5_INCLUDE`, from mlx5dv's build script),
//! with `-O2` and warnings as errors.

use std::env;
use std::path::PathBuf;

fn main() {
    const FILES: [&str; 2] = ["c/null_provider.c", "c/post.c"];
    for f in FILES.iter().chain(&["c/bench.h"]) {
        println!("cargo:rerun-if-changed={f}");
    }
    println!("cargo:rerun-if-env-changed=DEP_MLX5_INCLUDE");
    let includes: Vec<PathBuf> = env::var_os("DEP_MLX5_INCLUDE")
        .map(|v| env::split_paths(&v).collect())
        .unwrap_or_default();
    cc::Build::new()
        .files(FILES)
        .includes(&includes)
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true)
        .compile("mlx5dv_bench_c");
}
