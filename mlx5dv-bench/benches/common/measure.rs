//! What the harnesses' `--symbols`, `--run` and `--report` share: the
//! measured functions' symbols, the zero mark callgrind restarts its
//! counts at, and the counts read back from `callgrind_annotate`.

use super::BATCH;
use std::hint::black_box;

/// A row of a harness's table: one shape's three versions (0 best C,
/// 1 plain C, 2 Rust).
pub trait Row {
    /// What the harness's C loops' names start with, before `c_best_` and
    /// `c_plain_` (build.rs names the real provider's copy `real_<name>`).
    const C_PREFIX: &'static str;
    /// The Rust version is `rust_<name>`.
    fn name(&self) -> &'static str;
    /// The C versions are `<C_PREFIX>c_best_<c>` and `<C_PREFIX>c_plain_<c>`.
    fn c(&self) -> &'static str;

    /// The three versions' symbols.
    fn symbols(&self) -> [String; 3] {
        [
            format!("{}c_best_{}", Self::C_PREFIX, self.c()),
            format!("{}c_plain_{}", Self::C_PREFIX, self.c()),
            format!("rust_{}", self.name()),
        ]
    }
}

/// `--symbols`: every measured function's symbol, once, one a line (what
/// the scripts pass to callgrind's `--toggle-collect`).
pub fn print_symbols<R: Row>(rows: &[R]) {
    let mut all: Vec<String> = rows.iter().flat_map(R::symbols).collect();
    all.sort();
    all.dedup();
    for sym in all {
        println!("{sym}");
    }
}

/// Calls `run(row, version)` for every version of every row, a C version
/// shared by several rows once, under the first of them (callgrind counts
/// per symbol).
pub fn run_all<R: Row>(rows: &[R], mut run: impl FnMut(&R, usize)) {
    for (k, s) in rows.iter().enumerate() {
        let shared = rows[..k].iter().any(|t| t.c() == s.c());
        let first = if shared { 2 } else { 0 };
        for v in first..3 {
            run(s, v);
        }
    }
}

/// Called between the two halves of `--run`: the scripts run callgrind
/// with `--zero-before=bench_zero_mark`, so that the counts are those of
/// the second half alone (the difference of 2N and N calls: no one-time
/// cost of the first calls in them).
#[no_mangle]
#[inline(never)]
pub extern "C" fn bench_zero_mark() {
    black_box(());
}

/// The inclusive instruction count of `symbol` in a `callgrind_annotate
/// --inclusive=yes` listing: the line `N (P%)  file:symbol [object]`.
fn inclusive_ir(annotate: &str, symbol: &str) -> Option<u64> {
    annotate.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        let count = words.next()?;
        let name = words.find(|w| w.contains(':'))?;
        let func = name.rsplit(':').next()?;
        (func == symbol)
            .then(|| count.replace(',', "").parse().ok())
            .flatten()
    })
}

/// The instructions per work request of `row`'s three versions in
/// `annotate`, the listing of a `--run n`.
pub fn ir_per_wr(annotate: &str, row: &impl Row, n: u64) -> [f64; 3] {
    row.symbols().map(|sym| {
        let ir = inclusive_ir(annotate, &sym)
            .unwrap_or_else(|| panic!("{sym} is not in the listing: was it a --run {n}?"));
        ir as f64 / (n * BATCH as u64) as f64
    })
}
