//! Compiles the C shims for the variadic libc functions the interposer
//! replaces (`open`, `openat`, `ioctl` and their aliases): stable Rust cannot
//! define a C-variadic function.

fn main() {
    println!("cargo:rerun-if-changed=csrc/variadic.c");
    cc::Build::new()
        .file("csrc/variadic.c")
        .flag_if_supported("-fvisibility=default")
        .flag("-fno-function-sections")
        .warnings(true)
        .compile("mlx5dv_sim_variadic");
    // rustc's version script for a cdylib exports only Rust symbols; the C
    // shims must be exported too, or LD_PRELOAD would not interpose them.
    let out = std::env::var("OUT_DIR").expect("OUT_DIR");
    let map = std::path::Path::new(&out).join("variadic.map");
    std::fs::write(
        &map,
        "{ global: open; open64; openat; openat64; __open_2; __open64_2; __openat_2; __openat64_2; ioctl; };\n",
    )
    .expect("write the version script");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
}
