//! Compiles the benchmarks' C (`c/`: the same batches written in C, and
//! the null provider both sides post to) against the rdma-core headers
//! mlx5dv was built with (`DEP_MLX5_INCLUDE`, from mlx5dv's build script),
//! with `-O2` and warnings as errors.
//!
//! `c/post.c` is compiled a second time for `benches/real_provider/`,
//! which runs its loops against libmlx5 itself: the loops reach a QP's
//! `ibv_qp_ex` and `mlx5dv_qp_ex` as two members of one `struct null_qp`
//! (`&o->rc->ibv`, `&o->rc->dv`), and libmlx5 keeps them at another
//! distance than the null provider does. The second copy sees a
//! `struct null_qp` laid out as libmlx5's QP is, and its functions are
//! named `real_<name>`; the loops' code is otherwise the same.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

fn main() {
    const FILES: [&str; 2] = ["c/null_provider.c", "c/post.c"];
    for f in FILES.iter().chain(&["c/bench.h"]) {
        println!("cargo:rerun-if-changed={f}");
    }
    println!("cargo:rerun-if-env-changed=DEP_MLX5_INCLUDE");
    let includes: Vec<PathBuf> = env::var_os("DEP_MLX5_INCLUDE")
        .map(|v| env::split_paths(&v).collect())
        .unwrap_or_default();
    let build = || {
        let mut b = cc::Build::new();
        b.includes(&includes)
            .opt_level(2)
            .warnings(true)
            .extra_warnings(true)
            .warnings_into_errors(true);
        b
    };
    build().files(FILES).compile("mlx5dv_bench_c");

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR")).join("real");
    let post = real_provider_copy(&out);
    let mut b = build();
    for name in exported_functions(&post) {
        b.define(&name, Some(format!("real_{name}").as_str()));
    }
    b.file(out.join("post.c")).compile("mlx5dv_bench_real_c");
}

/// libmlx5's QP from its `ibv_qp_ex` on (`struct mlx5_qp` in rdma-core's
/// `providers/mlx5/mlx5.h`: a `struct verbs_qp`, whose union holds the
/// `ibv_qp_ex`, followed by its `comp_mask` and `xrcd`, then the
/// `mlx5dv_qp_ex`), under the name the loops use.
/// `benches/real_provider/` checks the distance against libmlx5's own
/// (`real_qp_dv_offset`) before it posts.
const REAL_QP: &str = "\
/* libmlx5's QP (struct mlx5_qp) from its ibv_qp_ex on: struct verbs_qp's
 * union, comp_mask and xrcd, then the mlx5dv_qp_ex (written by build.rs). */
struct null_qp {
\tstruct ibv_qp_ex ibv;
\tuint32_t comp_mask;
\tvoid *xrcd;
\tstruct mlx5dv_qp_ex dv;
};";

/// What `benches/real_provider/` reads of the second copy.
const REAL_EXPORTS: &str = "
/* For benches/real_provider/ (appended by build.rs). */
const size_t real_qp_dv_offset = offsetof(struct null_qp, dv) - offsetof(struct null_qp, ibv);
const size_t real_bench_objs_size = sizeof(struct bench_objs);
";

/// Writes `dir/bench.h` (`c/bench.h` with `struct null_qp` laid out as
/// libmlx5's QP) and `dir/post.c` (`c/post.c`, which includes it, and
/// [`REAL_EXPORTS`]); returns `c/post.c`'s text.
fn real_provider_copy(dir: &Path) -> String {
    let read = |f: &str| fs::read_to_string(f).unwrap_or_else(|e| panic!("reading {f}: {e}"));
    let (header, post) = (read("c/bench.h"), read("c/post.c"));
    let def = header
        .find("struct null_qp {")
        .expect("c/bench.h defines struct null_qp (build.rs replaces it for the real provider)");
    // The definition's comment goes with it.
    let start = header[..def]
        .rfind("/*")
        .filter(|&c| header[c..def].trim_end().ends_with("*/"))
        .unwrap_or(def);
    let end = def + header[def..].find("};").expect("the end of struct null_qp") + 2;
    let header = format!("{}{REAL_QP}{}", &header[..start], &header[end..]);
    fs::create_dir_all(dir).expect("create OUT_DIR/real");
    fs::write(dir.join("bench.h"), header).expect("write OUT_DIR/real/bench.h");
    fs::write(dir.join("post.c"), format!("{post}{REAL_EXPORTS}"))
        .expect("write OUT_DIR/real/post.c");
    post
}

/// The functions a C file defines with external linkage: the name before
/// the `(` of each line that starts a declaration at the left margin and
/// is not `static`.
fn exported_functions(c: &str) -> Vec<String> {
    c.lines()
        .filter(|l| l.starts_with(|ch: char| ch.is_ascii_alphabetic()) && !l.starts_with("static"))
        .filter_map(|l| {
            let head = &l[..l.find('(')?];
            let name = head.rsplit([' ', '*']).next()?;
            (!name.is_empty()).then(|| name.to_string())
        })
        .collect()
}
