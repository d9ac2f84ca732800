//! Posting and polling through the real libmlx5, Rust against C, on the
//! software mlx5 device (`mlx5dv-sim`: the real libibverbs and libmlx5 run
//! in this process; the "hardware" is a model of it). Not a hardware
//! measurement: what it shows is what the library code costs, libmlx5's
//! WQE building included, not what a ConnectX does.
//!
//! The shapes are those of `post_vs_c.rs` (which posts to a null
//! provider), here on real objects: an RC QP connected to a second one, a
//! DCI with 4 streams writing to a DCT, an indirect mkey, a registered
//! region and the peer's. Each posts one batch of 32 work requests (or
//! reads 32 completions) per call: the C loops `post_vs_c.rs` measures,
//! given libmlx5's own QPs and CQ (every build of C best,
//! `c_best_<build>_<shape>`, the cheapest taken per shape, and C plain,
//! `c_plain_<shape>`), and the safe API's tuned and natural forms and its
//! completions as `WorkCompletion`s, `cq.poll_into`, `cq.wait` and
//! `cq.wait_into` (`rust_<shape>`: `common/shapes.rs`, the same functions
//! `post_vs_c.rs` measures). Not `post_and_wait`: the device would have to
//! run on its own thread while the scoped post waits, and the counts would
//! not repeat.
//!
//! Between measured calls (never inside one) the device runs what was
//! posted (`mlx5dv_sim_step`: the device has no thread of its own,
//! `MLX5DV_SIM_THREAD=0`) and the completions are drained, so the send
//! queues never fill: `GROUP` calls back to back, then the device. For the
//! polls and waits, 32 RDMA writes per call are posted and run before the
//! calls: their completions are in the CQ when each call runs, and a wait
//! never spins.
//!
//! Before measuring, every version of every shape runs once and must have
//! done the same work: the same WQEs in the send queue, byte for byte but
//! for the WQE index, and the same completions (for the polls and waits,
//! the same fields read: every field of `WorkCompletion` for `poll_into`
//! and the waits).
//!
//! ```text
//! real_provider --symbols        the measured functions, one a line
//! real_provider --run N          every function N times, `bench_zero_mark`,
//!                                then N times more (callgrind
//!                                --zero-before=bench_zero_mark counts the
//!                                second N)
//! real_provider --report FILE N [--rounds R] [--calls C]
//!                                FILE: `callgrind_annotate --inclusive=yes`
//!                                of a `--run N`; times C best's cheapest
//!                                build, C plain and Rust (best of R rounds
//!                                of C calls, without valgrind) and prints
//!                                the table
//! ```
//!
//! `scripts/bench-real` runs it under `scripts/mlx5-sim`.
//!
//! ## Module map
//!
//! Lowest first; each module uses only those of its own line or of an
//! earlier one, a lower layer (`cargo run -p module-stack` checks it).
//!
//! 1. `common`: what both benches share (the C side's builds and their
//!    symbols, the completion records, the counting and the table).
//! 2. `rig`: the objects every shape posts on (the QPs, CQs, regions and
//!    DC target on the software device) and what runs around the measured
//!    calls (`Work`: the device's steps and the draining).
//! 3. `shapes`: the measured shapes through libmlx5, C and Rust, and the
//!    direct path's Rust functions (`rust_direct_*`).
//! 4. `direct`: the direct path's rows: C direct, the check that both
//!    sides did the same work, the table.

#[path = "../common/mod.rs"]
mod common;
mod direct;
mod rig;
mod shapes;

use common::measure::{self, bench_zero_mark, Counts, Version};
use common::wc::BenchWc;
use common::{CSide, BATCH, VARIANTS};
use mlx5dv::WorkCompletion;
use rig::{Rig, Work, GROUP};
use shapes::{Plan, Shape, SHAPES};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// What one version of a shape did.
#[derive(PartialEq, Debug)]
enum Did {
    /// The WQEs it wrote (the index zeroed) and its completions.
    Posted {
        wqes: Vec<Vec<u8>>,
        wcs: Vec<(u64, mlx5dv::WcStatus, mlx5dv::WcOpcode, u32)>,
    },
    /// The completions it read (`poll_each`'s fields).
    Polled(Vec<BenchWc>),
    /// The completions it read, every field (`poll_into`, the waits).
    Read(Vec<WorkCompletion>),
}

/// Runs version `v` of `s` twice and says what the second call did (so
/// that the queue's history is the shape's own: libmlx5 fences the work
/// request after a UMR, for one).
fn did(s: &Shape, v: Version, c: &CSide, rig: &mut Rig, p: &Plan<'_>) -> Did {
    run(s, v, 1, c, rig, p);
    rig.prepare(s.work, 1);
    match s.work {
        Work::Post { queue, .. } => {
            let from = rig.sq_pc(queue);
            assert_eq!(s.call(v, c, rig, p), BATCH, "{}", s.name);
            let wqes = rig.wqes(queue, from, rig.sq_pc(queue));
            let wcs = rig.settle(s.work, 1);
            let wcs = wcs
                .iter()
                .map(|w| (w.wr_id, w.status, w.opcode, w.byte_len))
                .collect();
            Did::Posted { wqes, wcs }
        }
        Work::Poll { full } => {
            // Every version's room for the completions emptied, so that
            // what is compared is this call's alone.
            c.take_wcs();
            rig::take_full_wcs(c);
            rig.completions = [BenchWc::ZERO; BATCH];
            rig.wcs.clear();
            assert_eq!(s.call(v, c, rig, p), BATCH, "{}", s.name);
            rig.settle(s.work, 1);
            match (full, v == Version::Rust) {
                (false, true) => Did::Polled(rig.completions.to_vec()),
                (false, false) => Did::Polled(c.take_wcs().to_vec()),
                (true, true) => Did::Read(rig.wcs.clone()),
                (true, false) => Did::Read(rig::take_full_wcs(c)),
            }
        }
    }
}

/// Runs every version of every shape once (every build of C best, C
/// plain, Rust) and checks they did the same work.
fn check_same_work(c: &CSide, rig: &mut Rig, p: &Plan<'_>) {
    // The direct rows: their WQEs against libmlx5's for the same batch.
    let lib: Vec<(&str, Vec<Vec<u8>>)> = ["rc_write_sge", "dci_write_sge", "dci_write_sge_stream"]
        .into_iter()
        .map(|name| {
            let s = SHAPES.iter().find(|s| s.name == name).expect("a shape");
            let Did::Posted { wqes, .. } = did(s, Version::Rust, c, rig, p) else {
                unreachable!()
            };
            (name, wqes.into_iter().map(direct::no_qpn).collect())
        })
        .collect();
    direct::check_same_work(c, rig, p, &lib);
    for s in SHAPES {
        let rust = did(s, Version::Rust, c, rig, p);
        let ids: Vec<u64> = match &rust {
            Did::Posted { wqes, wcs } => {
                assert_eq!(wqes.len(), BATCH, "{}: WQEs posted", s.name);
                wcs.iter().map(|w| w.0).collect()
            }
            Did::Polled(wcs) => wcs.iter().map(|w| w.wr_id).collect(),
            Did::Read(wcs) => wcs.iter().map(|w| w.wr_id).collect(),
        };
        assert_eq!(ids, (0..BATCH as u64).collect::<Vec<_>>(), "{}", s.name);
        for v in Version::all().filter(|&v| v != Version::Rust) {
            let other = did(s, v, c, rig, p);
            if other != rust {
                panic!(
                    "{}: the versions did different work:\n{}",
                    s.name,
                    difference(&[(v.label(s.c), other), ("Rust".into(), rust)])
                );
            }
        }
    }
}

/// The first place where two versions' work differs, each version's side
/// of it on a line.
fn difference(did: &[(String, Did); 2]) -> String {
    let side = |f: &dyn Fn(&Did) -> String| {
        let lines: Vec<String> = did.iter().map(|(n, d)| format!("{n}: {}", f(d))).collect();
        lines.join("\n")
    };
    if let [(_, Did::Posted { wqes: a, .. }), (_, Did::Posted { wqes: b, .. })] = did {
        if let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) {
            return format!(
                "WQE {i} (index zeroed):\n{}",
                side(&|d| match d {
                    Did::Posted { wqes, .. } => wqes.get(i).map_or("none".into(), |w| {
                        w.iter().map(|b| format!("{b:02x}")).collect::<String>()
                    }),
                    Did::Polled(_) | Did::Read(_) => unreachable!(),
                })
            );
        }
    }
    side(&|d| match d {
        Did::Posted { wcs, .. } => format!("completions {wcs:?}"),
        Did::Polled(wcs) => format!("read {wcs:?}"),
        Did::Read(wcs) => format!("read {wcs:?}"),
    })
}

/// Calls version `v` of `s` `n` times, `GROUP` at a time with the device
/// run between; returns the time spent in the calls alone.
fn run(s: &Shape, v: Version, n: u64, c: &CSide, rig: &mut Rig, p: &Plan<'_>) -> Duration {
    let mut spent = Duration::ZERO;
    let mut left = n;
    while left > 0 {
        let g = left.min(GROUP);
        rig.prepare(s.work, g);
        let mut done = 0;
        let t = Instant::now();
        for _ in 0..g {
            done += black_box(s.call(v, c, rig, p));
        }
        spent += t.elapsed();
        assert_eq!(done, g as usize * BATCH, "{}", s.name);
        rig.settle(s.work, g);
        left -= g;
    }
    spent
}

/// Every version of every shape `n` times (a C version shared by several
/// rows once, under the first: callgrind counts per symbol).
fn run_all(n: u64, c: &CSide, rig: &mut Rig, p: &Plan<'_>) {
    measure::run_all(SHAPES, |s, v| {
        run(s, v, n, c, rig, p);
    });
    direct::run_all(n, c, rig, p);
}

/// Prints the table: instructions per work request from `annotate` (a
/// `--run n`; C best the cheapest build per shape), and the best time per
/// work request of `rounds` rounds of `calls` calls of C best's cheapest
/// build, C plain and Rust, interleaved round by round (their order turned
/// each round, so that none always runs first).
fn report(
    annotate: &str,
    n: u64,
    rounds: u32,
    calls: u64,
    c: &CSide,
    rig: &mut Rig,
    p: &Plan<'_>,
) -> bool {
    let counts: Vec<Counts> = SHAPES.iter().map(|s| Counts::of(annotate, s, n)).collect();
    let mut best_ns = vec![[f64::MAX; 3]; SHAPES.len()];
    for round in 0..rounds as usize {
        for (k, s) in SHAPES.iter().enumerate() {
            let versions = [
                Version::Best(counts[k].winner()),
                Version::Plain,
                Version::Rust,
            ];
            for j in (0..3).map(|j| (j + round) % 3) {
                let t = run(s, versions[j], calls, c, rig, p);
                let ns = t.as_nanos() as f64 / (calls * BATCH as u64) as f64;
                best_ns[k][j] = best_ns[k][j].min(ns);
            }
        }
    }
    println!(
        "| shape | kind | C best Ir/WR | C plain Ir/WR | Rust Ir/WR | Rust / C best | \
         Rust / C plain | C best ns/WR | C plain ns/WR | Rust ns/WR | Rust / C best (time) | \
         C best build |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for ((s, ns), ir) in SHAPES.iter().zip(&best_ns).zip(&counts) {
        let c_best = ir.c_best();
        println!(
            "| {} | {} | {:.2} | {:.2} | {:.2} | {:.3} | {:.3} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            s.title,
            s.kind,
            c_best,
            ir.plain,
            ir.rust,
            ir.rust / c_best,
            ir.rust / ir.plain,
            ns[0],
            ns[1],
            ns[2],
            ns[2] / ns[0],
            VARIANTS[ir.winner()].label(s.c),
        );
    }
    measure::print_variants(SHAPES, &counts);
    let lib: Vec<(&str, f64)> = SHAPES
        .iter()
        .zip(&counts)
        .map(|(s, c)| (s.name, c.c_best()))
        .collect();
    direct::report(annotate, n, &lib, rounds, calls, c, rig, p)
}

fn usage() -> ! {
    eprintln!(
        "usage: real_provider --symbols | --run N | --report ANNOTATE_FILE N [--rounds R] [--calls C]\n\
         (under scripts/mlx5-sim with MLX5DV_SIM_THREAD=0; scripts/bench-real runs it)"
    );
    std::process::exit(2)
}

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize| -> u64 {
        argv.get(i)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| usage())
    };
    let flag_num = |name: &str, default: u64| {
        argv.iter()
            .position(|a| a == name)
            .map_or(default, |i| num(i + 1))
    };

    let mut rig = Rig::open().expect("the objects on the device");
    let c = rig.c_side();
    // Declared after the rig: dropped before it.
    let mut mr = rig.plan_region().expect("the plan's region");
    let remote = rig.remote;
    let p = Plan::new(&mut mr, remote, &rig.rc).expect("the plan fits the region");
    check_same_work(&c, &mut rig, &p);

    match argv.first().map(String::as_str) {
        Some("--symbols") => {
            measure::print_symbols(SHAPES);
            for sym in direct::symbols() {
                println!("{sym}");
            }
        }
        Some("--run") => {
            let n = num(1);
            run_all(n, &c, &mut rig, &p);
            bench_zero_mark();
            run_all(n, &c, &mut rig, &p);
        }
        Some("--report") => {
            let file = argv.get(1).unwrap_or_else(|| usage());
            let annotate =
                std::fs::read_to_string(file).expect("read the callgrind_annotate listing");
            let rounds = flag_num("--rounds", 10) as u32;
            let calls = flag_num("--calls", 400);
            let met = report(&annotate, num(2), rounds, calls, &c, &mut rig, &p);
            if argv.iter().any(|a| a == "--check") && !met {
                eprintln!("real_provider: a direct row is above its goal (--check)");
                std::process::exit(1);
            }
        }
        _ => usage(),
    }
}
