//! What the harnesses' `--symbols`, `--run` and `--report` share: the
//! measured functions' symbols, the zero mark callgrind restarts its
//! counts at, and the counts read back from `callgrind_annotate`.

use super::{CLoops, CShape, Style, BATCH, PLAIN, VARIANTS};
use std::hint::black_box;

/// A version of a row: a build of C best (an index into `VARIANTS`), C
/// plain, or the Rust form.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Version {
    Best(usize),
    Plain,
    Rust,
}

impl Version {
    /// Every version: the builds of C best, C plain, Rust.
    pub fn all() -> impl Iterator<Item = Version> {
        (0..VARIANTS.len())
            .map(Version::Best)
            .chain([Version::Plain, Version::Rust])
    }

    /// The C loops of a C version.
    pub fn c_loops(self) -> Option<&'static CLoops> {
        match self {
            Version::Best(k) => Some(&VARIANTS[k].loops),
            Version::Plain => Some(&PLAIN),
            Version::Rust => None,
        }
    }

    /// How the harnesses' messages name it.
    pub fn label(self, shape: CShape) -> String {
        match self {
            Version::Best(k) => format!("C best ({})", VARIANTS[k].label(shape)),
            Version::Plain => "C plain".into(),
            Version::Rust => "Rust".into(),
        }
    }
}

/// A row of a harness's table: one shape's versions.
pub trait Row {
    /// The Rust version is `rust_<name>`.
    fn name(&self) -> &'static str;
    /// The C versions' work: `<prefix><c's name>` of each build.
    fn c(&self) -> CShape;

    /// The symbol of version `v`.
    fn symbol(&self, v: Version) -> String {
        let c = self.c().name();
        match v {
            Version::Best(k) => format!("{}{c}", VARIANTS[k].prefix),
            Version::Plain => format!("c_plain_{c}"),
            Version::Rust => format!("rust_{}", self.name()),
        }
    }
}

/// `--symbols`: every measured function's symbol, once, one a line (what
/// the scripts pass to callgrind's `--toggle-collect`).
pub fn print_symbols<R: Row>(rows: &[R]) {
    let mut all: Vec<String> = rows
        .iter()
        .flat_map(|r| Version::all().map(|v| r.symbol(v)))
        .collect();
    all.sort();
    all.dedup();
    for sym in all {
        println!("{sym}");
    }
}

/// Calls `run(row, version)` for every version of every row, the C
/// versions of a loop shared by several rows once, under the first of
/// them (callgrind counts per symbol).
pub fn run_all<R: Row>(rows: &[R], mut run: impl FnMut(&R, Version)) {
    for (k, s) in rows.iter().enumerate() {
        let shared = rows[..k].iter().any(|t| t.c() == s.c());
        for v in Version::all() {
            if v == Version::Rust || !shared {
                run(s, v);
            }
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
pub fn inclusive_ir(annotate: &str, symbol: &str) -> Option<u64> {
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

/// The instructions per work request of `row`'s version `v` in
/// `annotate`, the listing of a `--run n`.
pub fn ir_per_wr(annotate: &str, row: &impl Row, v: Version, n: u64) -> f64 {
    let sym = row.symbol(v);
    let ir = inclusive_ir(annotate, &sym)
        .unwrap_or_else(|| panic!("{sym} is not in the listing: was it a --run {n}?"));
    ir as f64 / (n * BATCH as u64) as f64
}

/// One row's counts: every build of C best, C plain and Rust, per work
/// request.
pub struct Counts {
    pub best: Vec<f64>,
    pub plain: f64,
    pub rust: f64,
}

impl Counts {
    pub fn of(annotate: &str, row: &impl Row, n: u64) -> Counts {
        let ir = |v| ir_per_wr(annotate, row, v, n);
        Counts {
            best: (0..VARIANTS.len()).map(|k| ir(Version::Best(k))).collect(),
            plain: ir(Version::Plain),
            rust: ir(Version::Rust),
        }
    }

    /// C best: the build with the fewest instructions (the first of equals).
    pub fn winner(&self) -> usize {
        (0..self.best.len())
            .reduce(|a, b| if self.best[b] < self.best[a] { b } else { a })
            .expect("at least one build of C best")
    }

    /// C best's instructions per work request.
    pub fn c_best(&self) -> f64 {
        self.best[self.winner()]
    }
}

/// The builds of C best, one a line, with each one's instructions per
/// work request for every C loop the rows use: `(loop, counts)` in the
/// order of `rows`.
pub fn print_variants<R: Row>(rows: &[R], counts: &[Counts]) {
    let mut seen: Vec<CShape> = Vec::new();
    let mut cols = Vec::new();
    for (r, c) in rows.iter().zip(counts) {
        if !seen.contains(&r.c()) {
            seen.push(r.c());
            cols.push((r.c(), c));
        }
    }
    println!();
    println!(
        "C best, every build (Ir per WR; * the cheapest, C best). a: batch invariants \
         in locals, polls on a counter; b: re-read in the loop, polls ending on a pointer"
    );
    print!("{:<20}", "build");
    for (shape, _) in &cols {
        print!(" {:>w$}", shape.name(), w = shape.name().len().max(8));
    }
    println!();
    for (k, v) in VARIANTS.iter().enumerate() {
        let style = match v.style {
            Style::Locals => "a",
            Style::Reread => "b",
        };
        print!("{:<20}", format!("{} -O{} {style}", v.cc, v.opt));
        for (shape, c) in &cols {
            let mark = if c.winner() == k { "*" } else { " " };
            let w = shape.name().len().max(8) - 1;
            print!(" {:>w$.2}{mark}", c.best[k]);
        }
        println!();
    }
    if !VARIANTS.iter().any(|v| v.cc == "clang") {
        println!("(no clang where this was built: the gcc builds only)");
    }
}
