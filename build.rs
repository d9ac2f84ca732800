//! Build script of `mlx5dv`.
//!
//! 1. Finds rdma-core: `RDMA_CORE_INCLUDE_DIR` / `RDMA_CORE_LIB_DIR` when set,
//!    else pkg-config (`libibverbs`, `libmlx5`) with a floor of rdma-core 37.
//!    When it is missing or too old the build stops with one error that names
//!    the packages to install.
//! 2. Produces `$OUT_DIR/bindings.rs` and `$OUT_DIR/shims.c`: with bindgen
//!    (feature `bindgen`, the default) from the installed headers, or by
//!    copying the committed pre-generated pair in `src/sys/pregenerated/`
//!    (without the feature, or when `DOCS_RS` or `MLX5DV_PREGENERATED=1` is
//!    set). A committed copy is first checked against the installed headers
//!    (size, alignment and field offsets of every struct the crate uses,
//!    src/sys/build_layout_check.rs): the build stops when they differ.
//! 3. Compiles the shims (one exported wrapper per static-inline function of
//!    the headers) and the layout probe with warnings as errors, and links
//!    libmlx5 and libibverbs.
//! 4. With the feature `rdma-cm`: finds librdmacm the same way (pkg-config
//!    `librdmacm`, or the same two variables), produces
//!    `$OUT_DIR/cm_bindings.rs` from `cm_wrapper.h` (bindgen or the committed
//!    copy), and links librdmacm. Without the feature librdmacm is neither
//!    needed nor linked.
//!
//! Under `DOCS_RS` nothing is compiled or linked: docs.rs has no rdma-core.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process;

#[path = "src/sys/build_layout_check.rs"]
mod build_layout_check;

/// The oldest rdma-core release whose headers have every API this crate
/// binds (DCI streams and `mlx5dv_wr_memcpy` arrived in 37).
const MIN_RDMA_CORE: u32 = 37;

/// Functions and types taken from the headers.
#[cfg(feature = "bindgen")]
const FUNCTIONS: &str = "_*ibv_.*|mlx5dv_.*|_mlx5dv_.*";
#[cfg(feature = "bindgen")]
const TYPES: &str = "ibv_.*|mlx5dv_.*|mlx5_.*";
#[cfg(feature = "bindgen")]
const VARS: &str = "IBV_.*|MLX5.*|mlx5dv_.*";

const PREGENERATED_DIR: &str = "src/sys/pregenerated";

const CM_INSTALL_HINT: &str = "install librdmacm's development files: \
     Debian/Ubuntu `apt-get install librdmacm-dev`, \
     Fedora/RHEL `dnf install rdma-core-devel`; or build without the \
     `rdma-cm` feature";

const INSTALL_HINT: &str = "install the rdma-core development files: \
     Debian/Ubuntu `apt-get install libibverbs-dev pkg-config`, \
     Fedora/RHEL `dnf install rdma-core-devel pkgconf-pkg-config`; \
     or point RDMA_CORE_INCLUDE_DIR (and RDMA_CORE_LIB_DIR) at an rdma-core \
     install";

/// Where rdma-core was found.
struct RdmaCore {
    include_dirs: Vec<PathBuf>,
    link_dirs: Vec<PathBuf>,
    /// The rdma-core release (e.g. 44), when pkg-config told it.
    release: Option<u32>,
}

fn main() {
    for var in [
        "RDMA_CORE_INCLUDE_DIR",
        "RDMA_CORE_LIB_DIR",
        "DOCS_RS",
        "MLX5DV_PREGENERATED",
        "LIBCLANG_PATH",
        "PKG_CONFIG",
        "PKG_CONFIG_PATH",
        "PKG_CONFIG_LIBDIR",
        "PKG_CONFIG_SYSROOT_DIR",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    for file in [
        "wrapper.h",
        "cm_wrapper.h",
        "src/sys/pregenerated/cm_bindings.rs",
        "src/sys/layout_probe.c",
        "src/sys/shims_extra.c",
        "src/sys/pregenerated/bindings.rs",
        "src/sys/pregenerated/shims.c",
        "src/sys/pregenerated/RELEASE",
    ] {
        println!("cargo:rerun-if-changed={file}");
    }

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let docs_rs = env::var_os("DOCS_RS").is_some();
    let want_pregenerated = docs_rs
        || env::var("MLX5DV_PREGENERATED").is_ok_and(|v| !v.is_empty() && v != "0")
        || env::var_os("CARGO_FEATURE_BINDGEN").is_none();

    let rdma_cm = env::var_os("CARGO_FEATURE_RDMA_CM").is_some();

    if docs_rs {
        copy_pregenerated(&out_dir);
        bound_function_cfgs(&out_dir);
        if rdma_cm {
            copy_pregenerated_cm(&out_dir);
        }
        return;
    }

    let rdma = find_rdma_core().unwrap_or_else(|msg| fail(&msg));
    if want_pregenerated {
        copy_pregenerated(&out_dir);
    } else {
        generate(&rdma, &out_dir);
        // The committed copy can be compared with the generated one only
        // when both come from the same rdma-core release.
        if rdma.release.is_some() && rdma.release == pregenerated_release() {
            println!("cargo:rustc-cfg=mlx5dv_pregenerated_comparable");
        }
    }
    if let Some(release) = rdma.release {
        println!("cargo:rustc-env=MLX5DV_RDMA_CORE_RELEASE={release}");
    }
    bound_function_cfgs(&out_dir);
    if rdma_cm {
        check_rdma_cm(&rdma).unwrap_or_else(|msg| fail(&msg));
        if want_pregenerated {
            copy_pregenerated_cm(&out_dir);
        } else {
            generate_cm(&rdma, &out_dir);
        }
    }
    if want_pregenerated {
        check_pregenerated_layout(&rdma, &out_dir, rdma_cm);
    }
    compile_shims(&rdma, &out_dir);

    for dir in &rdma.link_dirs {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    if rdma_cm {
        println!("cargo:rustc-link-lib=dylib=rdmacm");
    }
    println!("cargo:rustc-link-lib=dylib=mlx5");
    println!("cargo:rustc-link-lib=dylib=ibverbs");
    // Exposed to dependents (`DEP_MLX5_INCLUDE`) that compile C against the
    // same headers, e.g. the benchmarks' C (mlx5dv-bench/build.rs).
    let includes = env::join_paths(&rdma.include_dirs).expect("include paths join");
    println!("cargo:include={}", includes.to_string_lossy());
}

/// Static-inline functions that only some rdma-core releases define: a
/// `mlx5dv_<name>` cfg tells the tests whether this build's bindings have
/// each (the dispatch-coverage test covers what the headers define).
const OPTIONAL_FUNCTIONS: [&str; 1] = ["ibv_wr_flush"];

fn bound_function_cfgs(out_dir: &Path) {
    let bindings = fs::read_to_string(out_dir.join("bindings.rs"))
        .unwrap_or_else(|e| fail(&format!("cannot read the bindings: {e}")));
    for f in OPTIONAL_FUNCTIONS {
        println!("cargo:rustc-check-cfg=cfg(mlx5dv_{f})");
        if bindings.contains(&format!("pub fn {f}(")) {
            println!("cargo:rustc-cfg=mlx5dv_{f}");
        }
    }
}

/// Stops the build with one readable error.
fn fail(msg: &str) -> ! {
    eprintln!("\nerror: mlx5dv: {msg}\n");
    process::exit(1);
}

/// Locates rdma-core's headers and libraries.
fn find_rdma_core() -> Result<RdmaCore, String> {
    let (include_dirs, link_dirs, release) = match env::var_os("RDMA_CORE_INCLUDE_DIR") {
        Some(inc) => {
            let link_dirs = env::var_os("RDMA_CORE_LIB_DIR")
                .map(PathBuf::from)
                .into_iter()
                .collect();
            (vec![PathBuf::from(inc)], link_dirs, None)
        }
        None => {
            let (include_dirs, release) = probe_pkg_config()?;
            let link_dirs = env::var_os("RDMA_CORE_LIB_DIR")
                .map(PathBuf::from)
                .into_iter()
                .collect();
            (include_dirs, link_dirs, Some(release))
        }
    };
    check_headers(&include_dirs, release)?;
    Ok(RdmaCore {
        include_dirs,
        link_dirs,
        release,
    })
}

/// Asks pkg-config for libibverbs and libmlx5 and checks the release floor.
fn probe_pkg_config() -> Result<(Vec<PathBuf>, u32), String> {
    let mut include_dirs = Vec::new();
    let mut release = None;
    for lib in ["libibverbs", "libmlx5"] {
        let found = pkg_config::Config::new()
            .cargo_metadata(false)
            .env_metadata(false)
            .probe(lib)
            .map_err(|e| {
                let why = e.to_string();
                // pkg-config's own words ("Package 'x' ... not found") when
                // it said any, else the first line of the error.
                let lines = why.lines().map(str::trim).filter(|l| !l.is_empty());
                let said: Vec<&str> = lines.clone().filter(|l| l.starts_with("Package ")).collect();
                let detail = if said.is_empty() {
                    lines.take(1).collect::<Vec<_>>().join("")
                } else {
                    said.join("; ")
                };
                format!("rdma-core not found: pkg-config could not find `{lib}` ({detail}); {INSTALL_HINT}")
            })?;
        // The last component of the library version is the rdma-core
        // release: libmlx5 1.24.44.0 belongs to rdma-core 44.
        let rel = rdma_core_release(&found.version).ok_or_else(|| {
            format!(
                "cannot tell the rdma-core release from `{lib}` version {}",
                found.version
            )
        })?;
        if rel < MIN_RDMA_CORE {
            return Err(format!(
                "rdma-core {rel} found (`{lib}` {}), but mlx5dv needs rdma-core {MIN_RDMA_CORE} or newer; {INSTALL_HINT}",
                found.version
            ));
        }
        release = Some(release.map_or(rel, |r: u32| r.min(rel)));
        for dir in found.include_paths {
            if !include_dirs.contains(&dir) {
                include_dirs.push(dir);
            }
        }
    }
    Ok((include_dirs, release.expect("two libraries probed")))
}

/// `1.24.44.0` → 44; `1.14.44.0` → 44.
fn rdma_core_release(version: &str) -> Option<u32> {
    let parts: Vec<&str> = version.split('.').collect();
    if parts.len() >= 3 {
        parts[parts.len() - 2].parse().ok()
    } else {
        None
    }
}

/// Checks that the headers exist and have the newest API bound here; this
/// also catches a too-old rdma-core given through RDMA_CORE_INCLUDE_DIR.
fn check_headers(include_dirs: &[PathBuf], release: Option<u32>) -> Result<(), String> {
    let mut search: Vec<PathBuf> = include_dirs.to_vec();
    search.push(PathBuf::from("/usr/include"));
    let mlx5dv_h = search
        .iter()
        .map(|d| d.join("infiniband/mlx5dv.h"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "rdma-core headers not found: no infiniband/mlx5dv.h under {}; {INSTALL_HINT}",
                display_dirs(include_dirs)
            )
        })?;
    let text = fs::read_to_string(&mlx5dv_h)
        .map_err(|e| format!("cannot read {}: {e}", mlx5dv_h.display()))?;
    // The tests compare the headers' static-inline functions with the shims.
    println!("cargo:rustc-env=MLX5DV_MLX5DV_H={}", mlx5dv_h.display());
    let verbs_h = mlx5dv_h.with_file_name("verbs.h");
    println!("cargo:rustc-env=MLX5DV_VERBS_H={}", verbs_h.display());
    for needed in ["mlx5dv_wr_set_dc_addr_stream", "mlx5dv_wr_memcpy"] {
        if !text.contains(needed) {
            let found = release.map_or_else(|| "an older release".to_string(), |r| r.to_string());
            return Err(format!(
                "{} has no `{needed}`: rdma-core {found} found, mlx5dv needs rdma-core {MIN_RDMA_CORE} or newer; {INSTALL_HINT}",
                mlx5dv_h.display()
            ));
        }
    }
    Ok(())
}

fn display_dirs(dirs: &[PathBuf]) -> String {
    if dirs.is_empty() {
        return "the default include path".into();
    }
    dirs.iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The rdma-core release the committed bindings were generated from.
fn pregenerated_release() -> Option<u32> {
    fs::read_to_string(Path::new(PREGENERATED_DIR).join("RELEASE"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn copy_pregenerated(out_dir: &Path) {
    for name in ["bindings.rs", "shims.c"] {
        let from = Path::new(PREGENERATED_DIR).join(name);
        fs::copy(&from, out_dir.join(name))
            .unwrap_or_else(|e| fail(&format!("cannot copy {}: {e}", from.display())));
    }
}

/// With `rdma-cm`: checks that librdmacm's header is there, and (through
/// pkg-config, unless `RDMA_CORE_INCLUDE_DIR` names the headers) that the
/// library is.
fn check_rdma_cm(rdma: &RdmaCore) -> Result<(), String> {
    if env::var_os("RDMA_CORE_INCLUDE_DIR").is_none() {
        pkg_config::Config::new()
            .cargo_metadata(false)
            .env_metadata(false)
            .probe("librdmacm")
            .map_err(|_| {
                format!("the `rdma-cm` feature needs librdmacm, which pkg-config cannot find; {CM_INSTALL_HINT}")
            })?;
    }
    let mut search: Vec<PathBuf> = rdma.include_dirs.clone();
    search.push(PathBuf::from("/usr/include"));
    if !search.iter().any(|d| d.join("rdma/rdma_cma.h").is_file()) {
        return Err(format!(
            "the `rdma-cm` feature needs rdma/rdma_cma.h, not found under {}; {CM_INSTALL_HINT}",
            display_dirs(&rdma.include_dirs)
        ));
    }
    Ok(())
}

fn copy_pregenerated_cm(out_dir: &Path) {
    let from = Path::new(PREGENERATED_DIR).join("cm_bindings.rs");
    fs::copy(&from, out_dir.join("cm_bindings.rs"))
        .unwrap_or_else(|e| fail(&format!("cannot copy {}: {e}", from.display())));
}

/// Generates `cm_bindings.rs` from `cm_wrapper.h`: the `rdma_*` functions
/// and types; the verbs types they name come from the main bindings.
#[cfg(feature = "bindgen")]
fn generate_cm(rdma: &RdmaCore, out_dir: &Path) {
    let rust_target = bindgen::RustTarget::stable(77, 0)
        .unwrap_or_else(|e| fail(&format!("bindgen rust target: {e}")));
    let generated = bindgen::Builder::default()
        .header("cm_wrapper.h")
        .clang_args(
            rdma.include_dirs
                .iter()
                .map(|d| format!("-I{}", d.display())),
        )
        .rust_target(rust_target)
        .allowlist_function("rdma_.*")
        .allowlist_type("rdma_.*")
        .allowlist_var("RDMA_.*|RAI_.*")
        // The verbs types are the main bindings' (`use super::*`), so a
        // `*mut ibv_context` here is the same type as there.
        // (`infiniband/sa.h`'s path record is not among them.)
        .blocklist_type("ibv_[^s].*|ibv_s[^a].*|__u(8|16|32|64)|__be(16|32|64)|pthread_.*")
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(true)
        .generate_comments(true)
        .layout_tests(true)
        .generate();
    match generated {
        Ok(b) => b
            .write_to_file(out_dir.join("cm_bindings.rs"))
            .unwrap_or_else(|e| fail(&format!("cannot write cm_bindings.rs: {e}"))),
        Err(e) => fail(&format!(
            "bindgen could not generate the rdma_cm bindings from cm_wrapper.h: {e}"
        )),
    }
}

#[cfg(not(feature = "bindgen"))]
fn generate_cm(_: &RdmaCore, out_dir: &Path) {
    copy_pregenerated_cm(out_dir);
}

#[cfg(feature = "bindgen")]
fn generate(rdma: &RdmaCore, out_dir: &Path) {
    let rust_target = bindgen::RustTarget::stable(77, 0)
        .unwrap_or_else(|e| fail(&format!("bindgen rust target: {e}")));
    let builder = bindgen::Builder::default()
        // Relative on purpose: the generated shims.c then says
        // `#include "wrapper.h"`, the same on every machine, and the
        // committed copy of it stays byte-identical.
        .header("wrapper.h")
        .clang_args(
            rdma.include_dirs
                .iter()
                .map(|d| format!("-I{}", d.display())),
        )
        .rust_target(rust_target)
        .allowlist_function(FUNCTIONS)
        .allowlist_type(TYPES)
        .allowlist_var(VARS)
        // Packed and aligned(4): bindgen lays it out as 20 bytes where C has
        // 16. Defined by hand in src/sys/ctrl_seg.rs.
        .blocklist_type("mlx5_wqe_ctrl_seg")
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(true)
        .generate_comments(true)
        .layout_tests(true)
        .wrap_static_fns(true)
        .wrap_static_fns_path(out_dir.join("shims"))
        .parse_callbacks(Box::new(
            bindgen::CargoCallbacks::new().rerun_on_header_files(true),
        ));
    // bindgen panics when it cannot load libclang: turn that into the same
    // one-line error as any other generation failure.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let generated =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()));
    std::panic::set_hook(default_hook);
    let why = match generated {
        Ok(Ok(bindings)) => {
            bindings
                .write_to_file(out_dir.join("bindings.rs"))
                .unwrap_or_else(|e| fail(&format!("cannot write bindings.rs: {e}")));
            return;
        }
        Ok(Err(e)) => e.to_string(),
        Err(panic) => panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "bindgen panicked".into()),
    };
    fail(&format!(
        "bindgen could not generate the bindings from wrapper.h: {why}; \
         is libclang installed (Debian/Ubuntu `libclang-dev`, Fedora/RHEL `clang-devel`)? \
         Without libclang, use the committed bindings: set MLX5DV_PREGENERATED=1 in \
         the build's environment, or depend on the crate without its default \
         `bindgen` feature (in your Cargo.toml: \
         `mlx5dv = {{ version = \"...\", default-features = false }}`; for this crate \
         itself: `cargo build --no-default-features`)"
    ));
}

#[cfg(not(feature = "bindgen"))]
fn generate(_: &RdmaCore, out_dir: &Path) {
    copy_pregenerated(out_dir);
}

/// Pre-generated bindings only: compiles, against the installed headers,
/// `_Static_assert`s of the layout the committed bindings give each struct
/// the crate uses (src/sys/build_layout_check.rs), and stops the build
/// when the headers lay one out differently.
fn check_pregenerated_layout(rdma: &RdmaCore, out_dir: &Path, rdma_cm: bool) {
    // The structs checked are those the sources name: a new one is checked
    // from the next build on.
    let sources = [Path::new("src"), Path::new("tests"), Path::new("examples")];
    for dir in sources {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    let dir = Path::new(PREGENERATED_DIR);
    let mut files = vec![dir.join("bindings.rs")];
    let mut headers = vec!["wrapper.h"];
    if rdma_cm {
        files.push(dir.join("cm_bindings.rs"));
        headers.push("cm_wrapper.h");
    }
    let check = build_layout_check::make(&files, &sources, &headers).unwrap_or_else(|e| fail(&e));
    let file = out_dir.join("layout_check.c");
    fs::write(&file, &check.source)
        .unwrap_or_else(|e| fail(&format!("cannot write {}: {e}", file.display())));
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let compiler = cc::Build::new()
        .include(&manifest_dir)
        .includes(&rdma.include_dirs)
        .cargo_metadata(false)
        .get_compiler();
    let mut cmd = compiler.to_command();
    cmd.arg("-fsyntax-only").arg(&file);
    let output = cmd.output().unwrap_or_else(|e| {
        fail(&format!(
            "cannot run the C compiler on {}: {e}",
            file.display()
        ))
    });
    if output.status.success() {
        return;
    }
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let failed = build_layout_check::failures(&said);
    let bindings_release = pregenerated_release().map_or_else(
        || "another release".to_string(),
        |r| format!("rdma-core {r}"),
    );
    let installed = rdma.release.map_or_else(
        || "the installed rdma-core".to_string(),
        |r| format!("rdma-core {r}"),
    );
    if failed.is_empty() {
        fail(&format!(
            "the layout check of the pre-generated bindings ({}) did not compile against \
             the headers of {installed}:\n{said}",
            file.display()
        ));
    }
    let list: Vec<String> = failed
        .iter()
        .map(|(ty, what)| format!("  struct {ty}: {}", what.join("; ")))
        .collect();
    fail(&format!(
        "the pre-generated bindings (src/sys/pregenerated, from {bindings_release}) do not \
         match the headers of {installed}: of the {} structs the crate uses ({} checks), \
         the installed headers lay out {} differently, and code built with these bindings \
         would read or write them with the wrong layout:\n{}\n\
         Use bindings generated from the installed headers instead: build with the `bindgen` \
         feature (the default; needs libclang: Debian/Ubuntu `libclang-dev`, Fedora/RHEL \
         `clang-devel`) and without MLX5DV_PREGENERATED; or regenerate the committed copy \
         from these headers with scripts/regen-bindings.",
        check.structs,
        check.asserts,
        failed.len(),
        list.join("\n")
    ));
}

/// Compiles the static-inline shims and the layout probe.
fn compile_shims(rdma: &RdmaCore, out_dir: &Path) {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let mut build = cc::Build::new();
    build
        .file(out_dir.join("shims.c"))
        .file("src/sys/shims_extra.c")
        .file("src/sys/layout_probe.c")
        .include(&manifest_dir)
        .includes(&rdma.include_dirs)
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true);
    build.compile("mlx5dv_shims");
}
