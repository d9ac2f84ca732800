//! Compiles the benchmarks' C (`c/`) against the rdma-core headers mlx5dv
//! was built with (`DEP_MLX5_INCLUDE`, from mlx5dv's build script), with
//! warnings as errors:
//!
//! - `c/null_provider.c`, the provider `benches/post_vs_c.rs` posts to, and
//!   `c/plain.c`, "C plain" (the man pages' loops), and `c/direct.c`, "C
//!   direct" (the send queue and CQ driven by hand), with gcc `-O2`;
//! - `c/post.c`, "C best", once per variant: gcc and clang (when `clang`
//!   runs here; else gcc alone, with a warning) × `-O2` and `-O3` × its two
//!   loop styles (`BENCH_STYLE`: a, batch invariants in locals and polls on
//!   a counter; b, invariants re-read and polls ending on a pointer). Each
//!   variant's functions are named `c_best_<cc>_o<n>_<style>_<shape>`
//!   (`BENCH_PREFIX`), so that one binary holds them all.
//!
//! The variants compiled are listed in `$OUT_DIR/c_variants.rs`, which the
//! benches include (`benches/common/mod.rs`): they count every variant and
//! take, per shape, the cheapest as C best.
//!
//! - `c/direct.c` also once more per other build (gcc `-O3`, clang `-O2`
//!   and `-O3`), its functions named `c_direct_<cc>_o<n>_<name>`
//!   (`DIRECT_PREFIX`), listed in `$OUT_DIR/direct_variants.rs`: the
//!   direct rows take, per row, the cheapest build as C direct.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

/// `c/post.c`'s loop styles: the `BENCH_STYLE` value, the name's letter
/// and `common::Style`'s variant.
const STYLES: [(&str, &str, &str); 2] = [
    ("BENCH_LOCALS", "a", "Locals"),
    ("BENCH_REREAD", "b", "Reread"),
];

fn main() {
    for f in [
        "c/null_provider.c",
        "c/plain.c",
        "c/post.c",
        "c/direct.c",
        "c/bench.h",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    println!("cargo:rerun-if-env-changed=DEP_MLX5_INCLUDE");
    let includes: Vec<PathBuf> = env::var_os("DEP_MLX5_INCLUDE")
        .map(|v| env::split_paths(&v).collect())
        .unwrap_or_default();
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let build = |cc: &str, opt: u32| {
        let mut b = cc::Build::new();
        b.compiler(cc)
            .includes(&includes)
            .opt_level(opt)
            .warnings(true)
            .extra_warnings(true)
            .warnings_into_errors(true);
        b
    };
    build("gcc", 2)
        .files(["c/null_provider.c", "c/plain.c", "c/direct.c"])
        .compile("mlx5dv_bench_c");

    let mut compilers = vec!["gcc"];
    if runs("clang") {
        compilers.push("clang");
    } else {
        println!("cargo:warning=no clang: C best and C direct are built with gcc only");
    }
    let mut direct = String::from(
        "// The builds of c/direct.c compiled by build.rs, each one's loops\n\
         // named after it; the first is the one the rig's helpers come from.\n\
         pub const DIRECT_VARIANTS: &[DVariant] = &[\n    \
         DVariant { cc: \"gcc\", opt: 2, prefix: \"c_direct_\", loops: d_loops!(\"c_direct_\") },\n",
    );
    for &cc in &compilers {
        for opt in [2, 3] {
            if (cc, opt) == ("gcc", 2) {
                continue;
            }
            let name = format!("{cc}_o{opt}");
            let prefix = format!("c_direct_{name}_");
            let dir = out.join(format!("direct_{name}"));
            fs::create_dir_all(&dir).expect("create the variant's directory");
            build(cc, opt)
                .define("DIRECT_PREFIX", prefix.as_str())
                .file("c/direct.c")
                .out_dir(&dir)
                .compile(&format!("mlx5dv_bench_direct_{name}"));
            writeln!(
                direct,
                "    DVariant {{ cc: {cc:?}, opt: {opt}, prefix: {prefix:?}, \
                 loops: d_loops!({prefix:?}) }},"
            )
            .expect("write to a String");
        }
    }
    direct.push_str("];\n");
    fs::write(out.join("direct_variants.rs"), direct).expect("write OUT_DIR/direct_variants.rs");
    let mut variants = String::from(
        "// The builds of c/post.c compiled by build.rs, each one's loops\n\
         // named after it.\npub const VARIANTS: &[Variant] = &[\n",
    );
    for cc in compilers {
        for opt in [2, 3] {
            for (style, letter, kind) in STYLES {
                let name = format!("{cc}_o{opt}_{letter}");
                let prefix = format!("c_best_{name}_");
                let dir = out.join(&name);
                fs::create_dir_all(&dir).expect("create the variant's directory");
                build(cc, opt)
                    .define("BENCH_STYLE", style)
                    .define("BENCH_PREFIX", prefix.as_str())
                    .file("c/post.c")
                    .out_dir(&dir)
                    .compile(&format!("mlx5dv_bench_best_{name}"));
                writeln!(
                    variants,
                    "    Variant {{ cc: {cc:?}, opt: {opt}, style: Style::{kind}, \
                     prefix: {prefix:?}, loops: c_loops!({prefix:?}) }},"
                )
                .expect("write to a String");
            }
        }
    }
    variants.push_str("];\n");
    fs::write(out.join("c_variants.rs"), variants).expect("write OUT_DIR/c_variants.rs");
}

/// Whether `cc --version` runs.
fn runs(cc: &str) -> bool {
    Command::new(cc)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}
