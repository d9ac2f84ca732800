//! The rows named `direct`: the direct path (`mlx5dv::direct`, the
//! `rust_direct_*` functions of `shapes.rs`) against C direct
//! (`c/direct.c`: the send queue and CQ taken with `mlx5dv_init_obj` and
//! driven by hand, `c_direct_*`; every build of it, gcc and clang at `-O2`
//! and `-O3`, `DIRECT_VARIANTS`, is counted and each row takes its
//! cheapest, as C best does), each on a QP of its own (an RC QP
//! connected to a peer of its own, or a DCI writing to the DCT), and
//! against C through libmlx5 (C best of the rows `RC write + SGE`, `DCI
//! write + SGE + DC address`, `DCI write, stream` and `cq.poll_into`). The
//! writes also against C direct checked (`c_direct_*_checked`: the
//! same C loop with the checks the safe writer makes per work request),
//! which shows what the checks cost in C; the goals are against the
//! unchecked C.
//!
//! Before measuring, every version of each row runs once and must have
//! written the same WQEs (byte for byte but the WQE index and the QP
//! number) as libmlx5 writes for the same batch on its own QP (for the row
//! that signals the last work request only, with the completion flag of
//! the others cleared), and got the same completions: every field of
//! `DirectWc`, the QP number each its own.

use crate::common::measure::inclusive_ir;
use crate::common::{CSide, BATCH};
use crate::rig::{CDirectWc, Rig, SqView, GROUP, ZERO_WC};
use crate::shapes::{self, Plan};
use mlx5dv::direct::DirectWc;
use mlx5dv::{WcOpcode, WcStatus};
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::hint::black_box;
use std::time::{Duration, Instant};

extern "C" {
    // The rig's build (gcc -O2) of `c/direct.c`: what no row measures.
    fn c_direct_prime(d: *mut c_void, rkey: u32, plan: *const c_void) -> c_int;
    fn c_direct_drain(d: *mut c_void, wc: *mut CDirectWc, max: c_int) -> c_int;
}

type Cd = *mut c_void;
type CPlan = *const c_void;
type CRemotes = *const c_void;
type CAv = *const [u64; 6];

/// The measured loops of one build of `c/direct.c` (`DIRECT_PREFIX`): 0
/// on success, or a poll's count, or the scoped post's completions; a
/// negative errno on failure.
pub struct DLoops {
    rc_write_sge: unsafe extern "C" fn(Cd, u32, CPlan) -> c_int,
    rc_write_sge_last: unsafe extern "C" fn(Cd, u32, CPlan) -> c_int,
    rc_write_sge_checked: unsafe extern "C" fn(Cd, CRemotes, CPlan) -> c_int,
    rc_write_sge_last_checked: unsafe extern "C" fn(Cd, CRemotes, CPlan) -> c_int,
    dci_write_sge: unsafe extern "C" fn(Cd, u32, CAv, CPlan) -> c_int,
    dci_write_sge_stream: unsafe extern "C" fn(Cd, u32, CAv, CPlan) -> c_int,
    dci_write_sge_checked: unsafe extern "C" fn(Cd, CRemotes, CAv, CPlan) -> c_int,
    dci_write_sge_stream_checked: unsafe extern "C" fn(Cd, CRemotes, CAv, CPlan) -> c_int,
    poll: unsafe extern "C" fn(Cd, *mut CDirectWc) -> c_int,
    scoped_rc_write_sge: unsafe extern "C" fn(Cd, u32, CPlan, *mut CDirectWc, c_int) -> c_int,
}

/// The `DLoops` of the C functions named `<prefix><name>`.
macro_rules! d_loops {
    ($prefix:literal) => {
        d_loops!(@ $prefix;
            rc_write_sge(Cd, u32, CPlan),
            rc_write_sge_last(Cd, u32, CPlan),
            rc_write_sge_checked(Cd, CRemotes, CPlan),
            rc_write_sge_last_checked(Cd, CRemotes, CPlan),
            dci_write_sge(Cd, u32, CAv, CPlan),
            dci_write_sge_stream(Cd, u32, CAv, CPlan),
            dci_write_sge_checked(Cd, CRemotes, CAv, CPlan),
            dci_write_sge_stream_checked(Cd, CRemotes, CAv, CPlan),
            poll(Cd, *mut CDirectWc),
            scoped_rc_write_sge(Cd, u32, CPlan, *mut CDirectWc, c_int),
        )
    };
    (@ $prefix:literal; $($f:ident($($arg:ty),*),)*) => {
        DLoops {
            $($f: {
                extern "C" {
                    #[link_name = concat!($prefix, stringify!($f))]
                    fn $f($(_: $arg),*) -> c_int;
                }
                $f
            },)*
        }
    };
}

/// One build of `c/direct.c`, as build.rs compiled it.
pub struct DVariant {
    cc: &'static str,
    opt: u32,
    /// Its functions' names' prefix.
    prefix: &'static str,
    loops: DLoops,
}

impl DVariant {
    fn name(&self) -> String {
        format!("{} -O{}", self.cc, self.opt)
    }
}

include!(concat!(env!("OUT_DIR"), "/direct_variants.rs"));

/// A completion as both versions report it, but its QP number (checked
/// to be the version's own) and WQE index (the queues' histories differ).
#[derive(PartialEq, Eq, Debug, Clone, Copy)]
struct Rec {
    wr_id: u64,
    status: WcStatus,
    opcode: WcOpcode,
    byte_len: u32,
    covers: u32,
    syndrome: u8,
    vendor_err: u8,
}

fn rec_rust(w: &DirectWc, qpn: u32) -> Rec {
    assert_eq!(w.qp_num, qpn, "the direct QP's number");
    Rec {
        wr_id: w.wr_id,
        status: w.status,
        opcode: w.opcode,
        byte_len: w.byte_len,
        covers: w.covers,
        syndrome: w.syndrome,
        vendor_err: w.vendor_err,
    }
}

fn rec_c(w: &CDirectWc, qpn: u32) -> Rec {
    assert_eq!(w.qp_num, qpn, "C direct's QP number");
    Rec {
        wr_id: w.wr_id,
        status: WcStatus::from_raw(w.status),
        opcode: WcOpcode::from_raw(w.opcode),
        byte_len: w.byte_len,
        covers: w.covers,
        syndrome: w.syndrome,
        vendor_err: w.vendor_err,
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum V {
    /// The writes to the peer's memory as C direct takes it: one rkey, an
    /// address per work request (`RemoteBuf::unbounded`).
    Rust,
    /// C direct, build `DIRECT_VARIANTS[k]`.
    C(usize),
    /// C direct with the safe writer's per-WR checks (the writes), build
    /// `DIRECT_VARIANTS[k]`.
    CChecked(usize),
    /// The writes to checked slices of the peer's memory (`RemoteBuf`s
    /// with their lengths), which the writer checks per work request.
    RustChecked,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Work {
    /// Posts 32 writes on the RC QP; `last`: only the last signalled.
    Post { last: bool },
    /// Posts 32 signalled writes on the DCI to the DCT; `stream`: on DCI
    /// stream `i % 4`.
    Dci { stream: bool },
    /// Reads 32 completions, every field.
    Poll,
    /// Posts 32 writes with the scoped post (the last signalled) and waits
    /// for their completion, asleep on the CQ's channel until the device
    /// runs them (the rig's stepper, 10 ms on).
    Scoped,
}

/// One `direct` row.
pub struct DRow {
    /// `rust_direct_<name>`, `c_direct_<name>` (and
    /// `c_direct_<name>_checked`).
    name: &'static str,
    title: &'static str,
    /// Rust / C direct, at most (instructions).
    goal: f64,
    /// Rust / C through libmlx5, at most, where the row has that goal.
    lib_goal: Option<f64>,
    /// The row of the libmlx5 table whose C best is this work through
    /// libmlx5 (`SHAPES`' name).
    lib: &'static str,
    work: Work,
    /// Whether the row has a C direct checked version.
    checked: bool,
}

pub const DROWS: &[DRow] = &[
    DRow {
        name: "rc_write_sge",
        title: "RC write + SGE, direct, 32 per batch, every WR signalled",
        goal: 1.05,
        lib_goal: None,
        lib: "rc_write_sge",
        work: Work::Post { last: false },
        checked: true,
    },
    DRow {
        name: "rc_write_sge_last",
        title: "RC write + SGE, direct, only the last of 32 signalled",
        goal: 1.05,
        lib_goal: None,
        lib: "rc_write_sge",
        work: Work::Post { last: true },
        checked: true,
    },
    DRow {
        name: "dci_write_sge",
        title: "DCI write + SGE + DC address, direct, 32 per batch",
        goal: 1.05,
        lib_goal: Some(0.35),
        lib: "dci_write_sge",
        work: Work::Dci { stream: false },
        checked: true,
    },
    DRow {
        name: "dci_write_sge_stream",
        title: "DCI write, stream, direct, 32 per batch",
        goal: 1.05,
        lib_goal: Some(0.35),
        lib: "dci_write_sge_stream",
        work: Work::Dci { stream: true },
        checked: true,
    },
    DRow {
        name: "scoped_rc_write_sge",
        title: "scoped post: RC write + SGE, direct, 32 per batch, the last signalled, and the \
                wait for its completion (asleep on the channel)",
        goal: 1.10,
        lib_goal: None,
        lib: "rc_write_sge",
        work: Work::Scoped,
        checked: false,
    },
    DRow {
        name: "poll",
        title: "poll 32, direct (per completion, every field)",
        goal: 1.05,
        lib_goal: None,
        lib: "poll_into",
        work: Work::Poll,
        checked: false,
    },
];

impl DRow {
    fn symbol(&self, v: V) -> String {
        match v {
            V::Rust => format!("rust_direct_{}", self.name),
            V::C(k) => format!("{}{}", DIRECT_VARIANTS[k].prefix, self.name),
            V::CChecked(k) => format!("{}{}_checked", DIRECT_VARIANTS[k].prefix, self.name),
            V::RustChecked => format!("rust_direct_{}_checked", self.name),
        }
    }

    /// The row's versions: C direct (each build), C direct checked (each
    /// build), Rust, Rust checked.
    fn versions(&self) -> Vec<V> {
        let builds = 0..DIRECT_VARIANTS.len();
        let mut vs: Vec<V> = builds.clone().map(V::C).collect();
        if self.checked {
            vs.extend(builds.map(V::CChecked));
            vs.extend([V::Rust, V::RustChecked]);
        } else {
            vs.push(V::Rust);
        }
        vs
    }

    fn dci(&self) -> bool {
        matches!(self.work, Work::Dci { .. })
    }

    /// The QP number of version `v`'s QP.
    fn qpn(&self, v: V, rig: &Rig) -> u32 {
        match (v, self.work) {
            (V::Rust | V::RustChecked, Work::Scoped) => rig.direct_scoped.qp_num(),
            (V::Rust | V::RustChecked, Work::Dci { .. }) => rig.direct_dci.qp_num(),
            (V::Rust | V::RustChecked, _) => rig.direct.qp_num(),
            (_, Work::Scoped) => rig.cdirect_scoped_qpn(),
            (_, Work::Dci { .. }) => rig.cdirect_dci_qpn(),
            _ => rig.cdirect_qpn(),
        }
    }

    /// Version `v`'s send queue, as libmlx5 laid it out.
    fn sq<'r>(&self, v: V, rig: &'r Rig) -> &'r SqView {
        match (v, self.work) {
            (V::Rust | V::RustChecked, Work::Scoped) => &rig.direct_scoped_sq,
            (V::Rust | V::RustChecked, Work::Dci { .. }) => &rig.direct_dci_sq,
            (V::Rust | V::RustChecked, _) => &rig.direct_sq,
            (_, Work::Scoped) => &rig.cdirect_scoped_sq,
            (_, Work::Dci { .. }) => &rig.cdirect_dci_sq,
            _ => &rig.cdirect_sq,
        }
    }

    /// One call of version `v`: work requests posted or completions read.
    fn call(&self, v: V, c: &CSide, rig: &mut Rig, p: &Plan<'_>) -> usize {
        let n = match (v, self.work) {
            (V::Rust, Work::Post { last: false }) => {
                shapes::rust_direct_rc_write_sge(&mut rig.direct, p).expect("direct post") as usize
            }
            (V::Rust, Work::Post { last: true }) => {
                shapes::rust_direct_rc_write_sge_last(&mut rig.direct, p).expect("direct post")
                    as usize
            }
            (V::Rust, Work::Dci { stream: false }) => {
                shapes::rust_direct_dci_write_sge(&mut rig.direct_dci, p, &rig.dav)
                    .expect("direct DCI post") as usize
            }
            (V::Rust, Work::Dci { stream: true }) => {
                shapes::rust_direct_dci_write_sge_stream(&mut rig.direct_dci, p, &rig.dav)
                    .expect("direct DCI post") as usize
            }
            (V::Rust, Work::Poll) => {
                shapes::rust_direct_poll(&mut rig.direct, &mut rig.dwcs).expect("direct poll")
            }
            (V::RustChecked, Work::Post { last }) => {
                let f = if last {
                    shapes::rust_direct_rc_write_sge_last_checked
                } else {
                    shapes::rust_direct_rc_write_sge_checked
                };
                f(&mut rig.direct, p).expect("direct post") as usize
            }
            (V::RustChecked, Work::Dci { stream }) => {
                let f = if stream {
                    shapes::rust_direct_dci_write_sge_stream_checked
                } else {
                    shapes::rust_direct_dci_write_sge_checked
                };
                f(&mut rig.direct_dci, p, &rig.dav).expect("direct DCI post") as usize
            }
            (V::C(k), Work::Post { last }) => {
                let l = &DIRECT_VARIANTS[k].loops;
                let f = if last {
                    l.rc_write_sge_last
                } else {
                    l.rc_write_sge
                };
                // SAFETY: C direct's QP and the plan live for the whole run,
                // and the regions the plan names stay registered.
                ok(unsafe { f(rig.cdirect, c.rkey, c.plan) })
            }
            (V::CChecked(k), Work::Post { last }) => {
                let remotes = rig.c_remotes(c);
                let l = &DIRECT_VARIANTS[k].loops;
                let f = if last {
                    l.rc_write_sge_last_checked
                } else {
                    l.rc_write_sge_checked
                };
                // SAFETY: as above; `remotes` is the plan's remote buffers,
                // never freed.
                ok(unsafe { f(rig.cdirect, remotes, c.plan) })
            }
            (V::C(k), Work::Dci { stream }) => {
                let l = &DIRECT_VARIANTS[k].loops;
                let f = if stream {
                    l.dci_write_sge_stream
                } else {
                    l.dci_write_sge
                };
                // SAFETY: C direct's DCI, the plan and the address vector
                // live for the whole run; the regions stay registered.
                ok(unsafe { f(rig.cdirect_dci, c.rkey, &*rig.cav, c.plan) })
            }
            (V::CChecked(k), Work::Dci { stream }) => {
                let remotes = rig.c_remotes(c);
                let l = &DIRECT_VARIANTS[k].loops;
                let f = if stream {
                    l.dci_write_sge_stream_checked
                } else {
                    l.dci_write_sge_checked
                };
                // SAFETY: as above; `remotes` is the plan's remote buffers,
                // never freed.
                ok(unsafe { f(rig.cdirect_dci, remotes, &*rig.cav, c.plan) })
            }
            (V::Rust, Work::Scoped) => {
                rig.step_later();
                let n = shapes::rust_direct_scoped_rc_write_sge(
                    &mut rig.direct_scoped,
                    p,
                    &mut rig.scoped_wcs,
                )
                .expect("scoped direct post");
                assert_eq!(n, 1, "{}: one completion", self.name);
                BATCH
            }
            (V::C(k), Work::Scoped) => {
                let scoped = DIRECT_VARIANTS[k].loops.scoped_rc_write_sge;
                rig.step_later();
                let ms = shapes::SCOPED_TIMEOUT.as_millis() as c_int;
                // SAFETY: C direct's scoped QP and the plan live for the
                // whole run, the regions stay registered; `cdwcs` has room
                // for BATCH completions.
                let n = unsafe {
                    scoped(
                        rig.cdirect_scoped,
                        c.rkey,
                        c.plan,
                        rig.cdwcs.as_mut_ptr(),
                        ms,
                    )
                };
                assert_eq!(n, 1, "{}: one completion", self.name);
                BATCH
            }
            (V::CChecked(_) | V::RustChecked, Work::Poll | Work::Scoped) => {
                unreachable!("{}: no checked version", self.name)
            }
            (V::C(k), Work::Poll) => {
                let poll = DIRECT_VARIANTS[k].loops.poll;
                // SAFETY: C direct's QP lives for the whole run; `cdwcs`
                // has room for the BATCH completions it reads at most.
                let n = unsafe { poll(rig.cdirect, rig.cdwcs.as_mut_ptr()) };
                usize::try_from(n).expect("C direct poll")
            }
        };
        black_box(n)
    }
}

fn ok(rc: c_int) -> usize {
    assert_eq!(rc, 0, "C direct post");
    BATCH
}

/// Before `calls` calls: for the poll, 32 signalled writes per call posted
/// on the version's QP and run, their completions waiting.
fn prepare(r: &DRow, v: V, calls: u64, c: &CSide, rig: &mut Rig, p: &Plan<'_>) {
    if r.work != Work::Poll {
        return;
    }
    for _ in 0..calls {
        match v {
            V::Rust | V::RustChecked => {
                assert_eq!(shapes::direct_prime(&mut rig.direct, p).expect("prime"), 32);
            }
            V::C(_) | V::CChecked(_) => {
                // SAFETY: as in `DRow::call`.
                assert_eq!(unsafe { c_direct_prime(rig.cdirect, c.rkey, c.plan) }, 0)
            }
        }
    }
    rig.step();
}

/// After `calls` calls of a posting row: the device runs them and their
/// completions are drained (checked), returned.
fn settle(r: &DRow, v: V, calls: u64, rig: &mut Rig) -> Vec<Rec> {
    let mut out = Vec::new();
    if matches!(r.work, Work::Poll | Work::Scoped) {
        // A poll leaves nothing; a scoped post read its own completion.
        return out;
    }
    let want = calls as u32 * BATCH as u32;
    let mut covered = 0;
    let qpn = r.qpn(v, rig);
    for _ in 0..100 {
        if covered == want {
            break;
        }
        rig.step();
        let push = |wc: DirectWc| out.push(rec_rust(&wc, qpn));
        match (v, r.dci()) {
            (V::Rust | V::RustChecked, false) => {
                rig.direct
                    .poll(usize::MAX, push)
                    .expect("drain the direct QP");
            }
            (V::Rust | V::RustChecked, true) => {
                rig.direct_dci
                    .poll(usize::MAX, push)
                    .expect("drain the direct DCI");
            }
            (V::C(_) | V::CChecked(_), dci) => {
                let d = if dci { rig.cdirect_dci } else { rig.cdirect };
                let mut buf = [CDirectWc::default(); 256];
                // SAFETY: room for 256.
                let n = unsafe { c_direct_drain(d, buf.as_mut_ptr(), 256) };
                let n = usize::try_from(n).expect("drain C direct");
                out.extend(buf[..n].iter().map(|w| rec_c(w, qpn)));
            }
        }
        covered = out.iter().map(|w| w.covers).sum();
    }
    assert_eq!(
        covered, want,
        "{}: the device completed {covered} of {want}",
        r.name
    );
    if let Some(bad) = out.iter().find(|w| w.status != WcStatus::SUCCESS) {
        panic!("a direct work request failed on the device: {bad:?}");
    }
    out
}

/// Calls version `v` of `r` `n` times, `GROUP` at a time with the device
/// run between; the time spent in the calls alone.
fn run(r: &DRow, v: V, n: u64, c: &CSide, rig: &mut Rig, p: &Plan<'_>) -> Duration {
    let mut spent = Duration::ZERO;
    let mut left = n;
    while left > 0 {
        let g = left.min(GROUP);
        prepare(r, v, g, c, rig, p);
        let mut done = 0;
        let t = Instant::now();
        for _ in 0..g {
            done += r.call(v, c, rig, p);
        }
        spent += t.elapsed();
        assert_eq!(done, g as usize * BATCH, "{}", r.name);
        settle(r, v, g, rig);
        left -= g;
    }
    spent
}

/// Every version of every direct row `n` times.
pub fn run_all(n: u64, c: &CSide, rig: &mut Rig, p: &Plan<'_>) {
    for r in DROWS {
        for v in r.versions() {
            run(r, v, n, c, rig, p);
        }
    }
}

/// The measured functions' symbols.
pub fn symbols() -> Vec<String> {
    DROWS
        .iter()
        .flat_map(|r| r.versions().into_iter().map(|v| r.symbol(v)))
        .collect()
}

/// What one version did: its WQEs (index and QP number zeroed) and
/// completions, or the completions it read.
#[derive(PartialEq, Debug)]
enum Did {
    Posted { wqes: Vec<Vec<u8>>, wcs: Vec<Rec> },
    Polled(Vec<Rec>),
}

fn did(r: &DRow, v: V, c: &CSide, rig: &mut Rig, p: &Plan<'_>) -> Did {
    run(r, v, 1, c, rig, p);
    prepare(r, v, 1, c, rig, p);
    match r.work {
        Work::Post { .. } | Work::Dci { .. } => {
            let from = r.sq(v, rig).pc();
            assert_eq!(r.call(v, c, rig, p), BATCH, "{}", r.name);
            let sq = r.sq(v, rig);
            let wqes = sq.wqes(from, sq.pc()).into_iter().map(no_qpn).collect();
            Did::Posted {
                wqes,
                wcs: settle(r, v, 1, rig),
            }
        }
        Work::Scoped => {
            let from = r.sq(v, rig).pc();
            rig.cdwcs = [CDirectWc::default(); BATCH];
            assert_eq!(r.call(v, c, rig, p), BATCH, "{}", r.name);
            let sq = r.sq(v, rig);
            let wqes = sq.wqes(from, sq.pc()).into_iter().map(no_qpn).collect();
            let qpn = r.qpn(v, rig);
            let wcs = match v {
                V::Rust | V::RustChecked => {
                    rig.scoped_wcs.iter().map(|w| rec_rust(w, qpn)).collect()
                }
                V::C(_) | V::CChecked(_) => rig.cdwcs[..1].iter().map(|w| rec_c(w, qpn)).collect(),
            };
            Did::Posted { wqes, wcs }
        }
        Work::Poll => {
            rig.dwcs = [ZERO_WC; BATCH];
            rig.cdwcs = [CDirectWc::default(); BATCH];
            assert_eq!(r.call(v, c, rig, p), BATCH, "{}", r.name);
            Did::Polled(match v {
                V::Rust | V::RustChecked => {
                    let q = rig.direct.qp_num();
                    rig.dwcs.iter().map(|w| rec_rust(w, q)).collect()
                }
                V::C(_) | V::CChecked(_) => {
                    let q = rig.cdirect_qpn();
                    rig.cdwcs.iter().map(|w| rec_c(w, q)).collect()
                }
            })
        }
    }
}

/// A WQE with its QP number zeroed (`qpn_ds`'s high 24 bits): the
/// versions post on QPs of their own.
pub fn no_qpn(mut wqe: Vec<u8>) -> Vec<u8> {
    wqe[4..7].fill(0);
    wqe
}

/// Every version of every direct row once: the same work, and the WQEs
/// libmlx5 writes for the batch (`lib_wqes`: per row of the libmlx5 table,
/// the WQEs of its Rust version, every work request signalled, index and
/// QP number zeroed).
pub fn check_same_work(c: &CSide, rig: &mut Rig, p: &Plan<'_>, lib_wqes: &[(&str, Vec<Vec<u8>>)]) {
    for r in DROWS {
        let rust = did(r, V::Rust, c, rig, p);
        for v in r.versions().into_iter().filter(|&v| v != V::Rust) {
            let other = did(r, v, c, rig, p);
            assert_eq!(
                rust, other,
                "{}: Rust direct and {v:?} direct did different work",
                r.name
            );
        }
        match (&rust, r.work) {
            (Did::Posted { wqes, wcs }, Work::Post { .. } | Work::Dci { .. } | Work::Scoped) => {
                let last = matches!(r.work, Work::Post { last: true } | Work::Scoped);
                let (_, lib) = lib_wqes
                    .iter()
                    .find(|(n, _)| *n == r.lib)
                    .unwrap_or_else(|| panic!("{}: no libmlx5 WQEs of {}", r.name, r.lib));
                let mut want = lib.clone();
                if last {
                    // fm_ce_se: the completion flag on the last one only.
                    let n = want.len();
                    for w in &mut want[..n - 1] {
                        w[11] &= !0x08;
                    }
                }
                assert_eq!(
                    wqes, &want,
                    "{}: the direct WQEs and libmlx5's differ",
                    r.name
                );
                let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
                let covers: Vec<u32> = wcs.iter().map(|w| w.covers).collect();
                if last {
                    assert_eq!((ids, covers), (vec![31], vec![32]), "{}", r.name);
                } else {
                    assert_eq!(ids, (0..32).collect::<Vec<_>>(), "{}", r.name);
                    assert!(covers.iter().all(|&c| c == 1), "{}", r.name);
                }
            }
            (Did::Polled(wcs), Work::Poll) => {
                let ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
                assert_eq!(ids, (0..32).collect::<Vec<_>>(), "{}", r.name);
            }
            _ => unreachable!(),
        }
    }
}

/// `x` with `d` decimals, or a dash where there is none (NaN).
fn num(x: f64, d: usize) -> String {
    if x.is_nan() {
        "—".into()
    } else {
        format!("{x:.d$}")
    }
}

/// The direct rows' table: instructions per work request (per completion
/// for the poll) of Rust direct, C direct, C direct checked and C through
/// libmlx5 (the C best of `lib`'s row in `counts`), the goals and whether
/// they are met, and the best times of `rounds` rounds of `calls` calls.
/// Whether every goal is met.
#[allow(clippy::too_many_arguments)]
pub fn report(
    annotate: &str,
    n: u64,
    lib: &[(&str, f64)],
    rounds: u32,
    calls: u64,
    c: &CSide,
    rig: &mut Rig,
    p: &Plan<'_>,
) -> bool {
    let ir = |r: &DRow, v: V| {
        if !r.versions().contains(&v) {
            return f64::NAN;
        }
        let sym = r.symbol(v);
        let ir = inclusive_ir(annotate, &sym)
            .unwrap_or_else(|| panic!("{sym} is not in the listing: was it a --run {n}?"));
        ir as f64 / (n * BATCH as u64) as f64
    };
    // Per row, C direct's and C direct checked's cheapest build.
    let cheapest = |r: &DRow, v: fn(usize) -> V| {
        (0..DIRECT_VARIANTS.len())
            .map(v)
            .filter(|v| r.versions().contains(v))
            .min_by(|&a, &b| ir(r, a).total_cmp(&ir(r, b)))
    };
    let best: Vec<(Option<V>, Option<V>)> = DROWS
        .iter()
        .map(|r| (cheapest(r, V::C), cheapest(r, V::CChecked)))
        .collect();
    // The best time of each version of each row.
    let mut ns: Vec<HashMap<V, f64>> = vec![HashMap::new(); DROWS.len()];
    for round in 0..rounds as usize {
        for (k, r) in DROWS.iter().enumerate() {
            if r.work == Work::Scoped {
                // Each call sleeps until the stepper runs the device: its
                // time is the stepper's delay, not the post's.
                continue;
            }
            // The cheapest builds of C only (the others are counted, not
            // timed).
            let vs: Vec<V> = r
                .versions()
                .into_iter()
                .filter(|v| match v {
                    V::C(_) => Some(*v) == best[k].0,
                    V::CChecked(_) => Some(*v) == best[k].1,
                    _ => true,
                })
                .collect();
            for j in (0..vs.len()).map(|j| (j + round) % vs.len()) {
                let t = run(r, vs[j], calls, c, rig, p);
                let t = t.as_nanos() as f64 / (calls * BATCH as u64) as f64;
                let e = ns[k].entry(vs[j]).or_insert(t);
                *e = e.min(t);
            }
        }
    }
    println!();
    println!(
        "The direct path (`mlx5dv::direct`) against C direct (`c/direct.c`, per row its \
         cheapest build), C direct checked (the same C with the safe writer's per-WR checks of \
         checked remote slices, as Rust checked passes them) and C through libmlx5 (C best)"
    );
    println!();
    println!(
        "| shape | goal | C direct Ir/WR | Rust Ir/WR | **Rust / C direct** | \
         C direct checked Ir/WR | Rust checked Ir/WR | Rust checked / C direct checked | \
         C libmlx5 Ir/WR | Rust / C libmlx5 | C direct / C libmlx5 | met | C direct ns/WR | \
         Rust ns/WR | Rust / C direct (time) | C direct checked ns/WR | Rust checked ns/WR | \
         C direct build | C direct checked build |"
    );
    println!(
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|---|"
    );
    let mut all_met = true;
    for ((r, t), &(cb, kb)) in DROWS.iter().zip(&ns).zip(&best) {
        let at = |v: Option<V>| v.and_then(|v| t.get(&v).copied()).unwrap_or(f64::NAN);
        let irv = |v: Option<V>| v.map_or(f64::NAN, |v| ir(r, v));
        let (cd, ck, rs, rk) = (irv(cb), irv(kb), ir(r, V::Rust), ir(r, V::RustChecked));
        // The scoped post waits too: no libmlx5 row does the same work.
        let l = lib
            .iter()
            .find(|(s, _)| *s == r.lib && r.work != Work::Scoped)
            .map_or(f64::NAN, |x| x.1);
        let met = rs / cd <= r.goal && r.lib_goal.is_none_or(|g| rs / l <= g);
        all_met &= met;
        let goal = match r.lib_goal {
            Some(g) => format!("≤ {:.2} C direct, ≤ {g:.2} C libmlx5", r.goal),
            None => format!("≤ {:.2} C direct", r.goal),
        };
        let build = |v: Option<V>| match v {
            Some(V::C(k) | V::CChecked(k)) => DIRECT_VARIANTS[k].name(),
            _ => "—".into(),
        };
        println!(
            "| {} | {goal} | {:.2} | {:.2} | **{:.3}** | {} | {} | {} | {} | {} | {} | {} | \
             {} | {} | {} | {} | {} | {} | {} |",
            r.title,
            cd,
            rs,
            rs / cd,
            num(ck, 2),
            num(rk, 2),
            num(rk / ck, 3),
            num(l, 2),
            num(rs / l, 3),
            num(cd / l, 3),
            if met { "yes" } else { "**no**" },
            num(at(cb), 2),
            num(at(Some(V::Rust)), 2),
            num(at(Some(V::Rust)) / at(cb), 2),
            num(at(kb), 2),
            num(at(Some(V::RustChecked)), 2),
            build(cb),
            build(kb),
        );
    }
    // Every build's counts, as for C best.
    println!();
    println!(
        "C direct, every build (Ir per WR; * the cheapest, C direct; the checked loops after \
         the slash)"
    );
    println!();
    print!("| build |");
    for r in DROWS {
        print!(" {} |", r.name);
    }
    println!();
    println!("|---|{}", "---:|".repeat(DROWS.len()));
    for (k, build) in DIRECT_VARIANTS.iter().enumerate() {
        print!("| {} |", build.name());
        for (r, &(cb, kb)) in DROWS.iter().zip(&best) {
            let mark = |v: V, b: Option<V>| if Some(v) == b { "*" } else { "" };
            let mut cell = format!("{:.2}{}", ir(r, V::C(k)), mark(V::C(k), cb));
            if r.versions().contains(&V::CChecked(k)) {
                cell += &format!(
                    " / {:.2}{}",
                    ir(r, V::CChecked(k)),
                    mark(V::CChecked(k), kb)
                );
            }
            print!(" {cell} |");
        }
        println!();
    }
    all_met
}
