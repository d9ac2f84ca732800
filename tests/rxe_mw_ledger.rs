//! The places type 1 memory window binds take, in their QP's send queue
//! and in its send CQ, on a real RDMA device (soft-RoCE in the test guest)
//! and on the software device: binds beside an `AsyncQp`'s operations on
//! one CQ, a QP dropped with binds counted, polls whose callback panics, a
//! bind posted while a poll of its CQ runs, and a bind counted after its
//! count was emptied (a reset run from a region's drop when a poll ended)
//! that an older bind's completion with the same id must not retire; a
//! resize racing binds on another thread, binds after a resize (the CQ
//! holds one fewer until a poll reads the resize's own completion), and a
//! QP wrapped again by `from_raw_parts`. Each test failed before its fix
//! (on the software device).
//!
//! Built only with `--features tokio` (two tests drive an `AsyncQp`); run
//! by `scripts/test` with `MLX5DV_TEST_DEVICE` set; without it the tests
//! are ignored, and fail if forced to run.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::aio::{AsyncQp, IoBuf, IoBufMut};
use mlx5dv::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::rig::*;

fn ops() -> SendOps {
    SendOps::rc_default() | SendOps::BIND_MW
}

fn window(pd: &ProtectionDomain) -> MemoryWindow {
    MemoryWindow::new(pd, MwType::Type1).unwrap()
}

/// Connects two RC QPs (both in RESET) to each other.
fn connect(x: &RcQp, y: &RcQp, opts: &ConnectOptions) {
    let (px, py) = (0x111, 0x222);
    let ex = x.endpoint(px, opts).unwrap();
    let ey = y.endpoint(py, opts).unwrap();
    x.connect(&ey, px, opts).unwrap();
    y.connect(&ex, py, opts).unwrap();
}

/// Polls `cq` until `n` completions came or `wait` passed.
fn drain(cq: &mut CompletionQueue, n: usize, wait: Duration) -> Vec<WorkCompletion> {
    let mut out = Vec::new();
    let start = Instant::now();
    while out.len() < n && start.elapsed() < wait {
        cq.poll_into(&mut out, 64).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
    out
}

/// A pair whose B side sends on a CQ of `cqe` entries of its own.
fn pair_with_send_cq(cqe: u32, caps: QpCaps) -> Pair {
    Pair::with_b_send_cq(cqe, caps, ops())
}

// ---------------------------------------------------------------------
// 1. A QP dropped with binds counted: their places in the send CQ.
// ---------------------------------------------------------------------

/// B binds the send CQ's capacity of windows, then B is dropped (libmlx5
/// cleans its completions out of the CQ: none of them will ever be read).
/// The places the binds took must come back: the CQ serves the next QP.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_dropped_qps_binds_give_back_their_places_in_the_cq() {
    let caps = QpCaps {
        max_send_wr: 32,
        ..QpCaps::default()
    };
    let p = pair_with_send_cq(2, caps);
    let Pair {
        ctx: _ctx,
        pd,
        a,
        b,
        opts,
    } = p;
    let Side {
        qp: mut qp_b,
        send_cq: mut x,
        recv_cq: b_recv,
        mr: b_mr,
    } = b;
    let capacity = x.capacity() as usize;
    let target = bindable(&pd);
    let mut windows: Vec<_> = (0..capacity).map(|_| window(&pd)).collect();
    for (i, mw) in windows.iter_mut().enumerate() {
        let bind = MwBind::new(&target, i * 64..i * 64 + 64, remote_rw()).unwrap();
        qp_b.bind_mw(10 + i as u64, mw, &bind).unwrap();
    }
    assert_eq!(x.binds_in_flight() as usize, capacity);
    // Let the device run them (their completions are in X now), then drop B.
    std::thread::sleep(Duration::from_millis(300));
    drop(qp_b);
    let leaked = x.binds_in_flight();
    // Whatever is left in X is not B's any more (cleaned by the provider).
    let left = drain(&mut x, 1, Duration::from_millis(200));
    println!("after drop: binds_in_flight {leaked}, handed out {left:?}");
    // A new QP on X, connected to A, posts one write.
    a.qp.reset().unwrap();
    let qp_b2 = QpBuilder::rc(&pd, &x, &b_recv)
        .caps(caps)
        .send_ops(ops())
        .build()
        .unwrap();
    let mut qp_b2 = qp_b2;
    connect(&a.qp, &qp_b2, &opts);
    let to = a.mr.remote(0..64).unwrap();
    let r = qp_b2.post_and_wait(&mut x, WAIT, |bt| {
        bt.wr(1).rdma_write(to).sge(b_mr.sge(0..64)?)
    });
    let posted = r.map(|w| w.len());
    assert_eq!(
        leaked, 0,
        "binds of a destroyed QP still counted in the CQ; a post of one on a new QP: {posted:?}"
    );
    assert!(posted.is_ok(), "{posted:?}");
    drop(windows);
}

// ---------------------------------------------------------------------
// 2. Binds beside an AsyncQp on one send CQ.
// ---------------------------------------------------------------------

/// The AsyncQp owns its send CQ X, with operations in flight whose
/// completions take places in X; QP B (made on X before it was handed
/// over) binds windows. The binds plus the operations must not exceed X's
/// capacity (the device would overrun X and drop completions: operations
/// that never end).
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn binds_beside_an_async_qp_do_not_overrun_its_cq() {
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let opts = connect_options(&ctx);
    let ch = CompletionChannel::new(&ctx).unwrap();
    let x = CompletionQueue::with_channel(&ctx, 8, &ch).unwrap();
    let c_recv = CompletionQueue::with_channel(&ctx, 64, &ch).unwrap();
    let capacity = x.capacity();
    let caps = QpCaps {
        max_send_wr: 64,
        ..QpCaps::default()
    };
    let qp_c = QpBuilder::rc(&pd, &x, &c_recv).caps(caps).build().unwrap();
    let d = side(&ctx, &pd, QpCaps::default(), SendOps::rc_default());
    connect(&qp_c, &d.qp, &opts);
    let b_recv = CompletionQueue::new(&ctx, 64).unwrap();
    let mut qp_b = QpBuilder::rc(&pd, &x, &b_recv)
        .caps(caps)
        .send_ops(ops())
        .build()
        .unwrap();
    let a = side(&ctx, &pd, QpCaps::default(), SendOps::rc_default());
    connect(&qp_b, &a.qp, &opts);

    let c = AsyncQp::new(qp_c, x, Some(c_recv)).unwrap();
    let k = capacity as usize / 2;
    let to = d.mr.remote(0..64).unwrap();
    let mut writes = Vec::new();
    for _ in 0..k {
        let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
        writes.push(c.write(mr, 0..64, to));
    }
    assert_eq!(c.in_flight(), k);
    // Their completions land in X, unpolled.
    std::thread::sleep(Duration::from_millis(300));
    let target = bindable(&pd);
    let mut windows: Vec<_> = (0..=capacity).map(|_| window(&pd)).collect();
    let mut accepted = 0usize;
    let mut refusal = None;
    for (i, mw) in windows.iter_mut().enumerate() {
        let bind = MwBind::new(&target, i * 64..i * 64 + 64, remote_rw()).unwrap();
        match qp_b.bind_mw(100 + i as u64, mw, &bind) {
            Ok(_) => accepted += 1,
            Err(e) => {
                refusal = Some(e);
                break;
            }
        }
    }
    // What the device did with them: the operations and the binds.
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    while c.in_flight() != 0 && start.elapsed() < Duration::from_secs(3) {
        let _ = c.poll();
        std::thread::sleep(Duration::from_millis(10));
    }
    let stuck = c.in_flight();
    let stray = c.take_stray();
    let binds_seen = stray
        .iter()
        .filter(|w| w.opcode == WcOpcode::BIND_MW)
        .count();
    // One operation more, after that: does it ever end?
    let late = c.write(
        MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE).unwrap(),
        0..64,
        to,
    );
    let start = Instant::now();
    while c.in_flight() != 0 && start.elapsed() < Duration::from_secs(3) {
        let _ = c.poll();
        std::thread::sleep(Duration::from_millis(10));
    }
    let late_stuck = c.in_flight();
    let events = ctx.async_events().unwrap();
    let mut evs = Vec::new();
    while let Ok(Some(e)) = events.try_get_event() {
        evs.push(format!("{e:?}"));
    }
    println!(
        "capacity {capacity}, async ops {k}, binds accepted {accepted} (refusal {refusal:?}); \
         ops never completed {stuck}; bind completions seen {binds_seen}; a later operation \
         still in flight after 3 s: {late_stuck}; async events: {evs:?}"
    );
    drop(late);
    assert!(
        k + accepted <= capacity as usize,
        "{k} async operations + {accepted} binds admitted on a CQ of {capacity}; \
         operations stuck: {stuck}, bind completions seen {binds_seen} of {accepted}"
    );
    assert_eq!(stuck, 0, "async operations whose completions were lost");
    drop(writes);
    drop(windows);
}

// ---------------------------------------------------------------------
// 3. A completion kept by a panicking callback, and its QP destroyed.
// ---------------------------------------------------------------------

/// `poll_each`'s callback panics on B's bind completion: it is kept in
/// the backlog. B is then destroyed: as for any kept completion, it must
/// go with its QP (libmlx5 would have cleaned it from the CQ; a QP made
/// later may get B's number).
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_completion_kept_by_a_panicking_callback_goes_with_its_destroyed_qp() {
    let p = Pair::with(QpCaps::default(), ops());
    let Pair { pd, a, b, .. } = p;
    let Side {
        qp: mut qp_b,
        send_cq: mut x,
        ..
    } = b;
    let target = bindable(&pd);
    let mut mw = window(&pd);
    let bind = MwBind::new(&target, 0..64, remote_rw()).unwrap();
    qp_b.bind_mw(5, &mut mw, &bind).unwrap();
    let start = Instant::now();
    let mut panicked = false;
    while !panicked && start.elapsed() < WAIT {
        panicked = catch_unwind(AssertUnwindSafe(|| {
            x.poll_each(1, |_| panic!("the callback panics")).unwrap();
        }))
        .is_err();
    }
    assert!(panicked);
    assert_eq!(x.backlog_len(), 1, "kept by the panicking poll");
    drop(qp_b);
    let kept = x.backlog_len();
    let mut got = Vec::new();
    x.poll_into(&mut got, 8).unwrap();
    assert_eq!(
        kept, 0,
        "a kept completion of a destroyed QP still counted; handed out: {got:?}"
    );
    assert!(
        got.is_empty(),
        "handed out after its QP was destroyed: {got:?}"
    );
    drop((mw, a));
}

// ---------------------------------------------------------------------
// 4. Binds read by a poll whose callback panics.
// ---------------------------------------------------------------------

/// Two bind completions in B's send CQ; `poll_each(2)`'s callback takes
/// the first and panics on the second (kept, handed out again by the next
/// poll). Once both are read, no bind is in flight.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn binds_read_by_a_poll_that_panicked_are_retired() {
    let mut p = Pair::with(QpCaps::default(), ops());
    let target = bindable(&p.pd);
    let (mut w1, mut w2) = (window(&p.pd), window(&p.pd));
    let bind = MwBind::new(&target, 0..64, remote_rw()).unwrap();
    p.b.qp.bind_mw(1, &mut w1, &bind).unwrap();
    p.b.qp.bind_mw(2, &mut w2, &bind).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Polled until the callback has panicked on the second completion
    // (normally both are read by the first poll; a loaded machine's device
    // may not have run the second yet).
    let mut calls = 0;
    let start = Instant::now();
    let mut panicked = false;
    while !panicked {
        assert!(start.elapsed() < WAIT, "the second bind never completed");
        panicked = catch_unwind(AssertUnwindSafe(|| {
            p.b.send_cq
                .poll_each(2, |wc| {
                    calls += 1;
                    assert_eq!(wc.opcode(), WcOpcode::BIND_MW);
                    if calls == 2 {
                        panic!("the callback panics on the second");
                    }
                })
                .unwrap()
        }))
        .is_err();
    }
    assert_eq!(calls, 2);
    let rest = drain(&mut p.b.send_cq, 1, WAIT);
    let ids: Vec<_> = rest.iter().map(|w| (w.wr_id, w.opcode)).collect();
    assert_eq!(ids, [(2, WcOpcode::BIND_MW)]);
    assert_eq!(
        p.b.send_cq.binds_in_flight(),
        0,
        "both bind completions were read, yet binds are still counted in flight"
    );
    drop((w1, w2));
}

// ---------------------------------------------------------------------
// 5. A bind posted (from another thread) while a poll of its CQ runs.
// ---------------------------------------------------------------------

/// A poll of X starts with no bind counted (its watch off); meanwhile
/// another thread binds on B, whose send CQ is X, and the poll reads that
/// bind's completion. Once read, no bind is in flight.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_bind_posted_during_a_poll_is_retired_when_read() {
    let p = Pair::with(QpCaps::default(), ops());
    let Pair { pd, a, b, .. } = p;
    let Side {
        qp: mut qp_b,
        send_cq: mut x,
        mr: b_mr,
        ..
    } = b;
    let target = bindable(&pd);
    let mut mw = window(&pd);
    // One plain completion in X first (inline data: no memory borrowed).
    let to = a.mr.remote(0..8).unwrap();
    let mut batch = qp_b.batch_with(SendFlags::SIGNALED);
    batch.wr(9).rdma_write(to).inline(b"12345678").unwrap();
    unsafe { batch.complete() }.unwrap();
    let mut seen = Vec::new();
    let start = Instant::now();
    while seen.is_empty() && start.elapsed() < WAIT {
        x.poll_each(4, |wc| {
            seen.push((wc.wr_id(), wc.opcode()));
            if seen.len() == 1 {
                std::thread::scope(|s| {
                    s.spawn(|| {
                        let bind = MwBind::new(&target, 0..64, remote_rw()).unwrap();
                        qp_b.bind_mw(77, &mut mw, &bind).unwrap();
                    });
                });
                // The device runs the bind meanwhile.
                std::thread::sleep(Duration::from_millis(300));
            }
        })
        .unwrap();
    }
    let mut rest = Vec::new();
    if seen.len() < 2 {
        rest = drain(&mut x, 1, WAIT);
    }
    println!("seen in the poll: {seen:?}; after: {rest:?}");
    assert_eq!(
        x.binds_in_flight(),
        0,
        "the bind's completion was read ({seen:?} {rest:?}) yet it is still counted"
    );
    drop((mw, b_mr));
}

// ---------------------------------------------------------------------
// 6. A bind retired by a completion of an earlier bind with its wr_id.
// ---------------------------------------------------------------------

/// A buffer whose drop runs a hook (its region is owned by value, as
/// `IoBufMut` asks).
struct Hooked {
    mr: MemoryRegion,
    hook: Option<Box<dyn FnOnce() + Send>>,
}

impl Drop for Hooked {
    fn drop(&mut self) {
        if let Some(h) = self.hook.take() {
            h();
        }
    }
}

// SAFETY: owns its region by value; the region never changes, and nothing
// else reaches it.
unsafe impl IoBuf for Hooked {
    fn region(&self) -> &MemoryRegion {
        &self.mr
    }
}
// SAFETY: as above.
unsafe impl IoBufMut for Hooked {
    fn region_mut(&mut self) -> &mut MemoryRegion {
        &mut self.mr
    }
}

struct HookState {
    qp: RcQp,
    mw: MemoryWindow,
    target: MemoryRegion,
    peer: Endpoint,
    opts: ConnectOptions,
    ran: Option<Result<RemoteBuf>>,
}

/// B's bind 7 has completed and sits in X. A poll of X reads it (noted)
/// and, in its callback, drops the last handle of an AsyncQp, whose
/// destruction waits for the poll's end; an abandoned receive's region
/// then goes, and its drop resets B, connects it again and binds another
/// window with id 7 (allowed: not inside a poll any more). That new bind's
/// completion has not been read: it must stay counted.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_bind_is_not_retired_by_an_older_binds_completion_of_the_same_id() {
    let caps = QpCaps {
        max_send_wr: 4,
        ..QpCaps::default()
    };
    let p = Pair::with(caps, ops());
    let Pair {
        ctx,
        pd,
        a,
        b,
        opts,
    } = p;
    let Side {
        qp: mut qp_b,
        send_cq: mut x,
        recv_cq: _b_recv,
        mr: b_mr,
    } = b;
    let depth = qp_b.caps().max_send_wr;
    let target = bindable(&pd);
    let mut w1 = window(&pd);
    let bind = MwBind::new(&target, 0..64, remote_rw()).unwrap();
    qp_b.bind_mw(7, &mut w1, &bind).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(x.binds_in_flight(), 1);

    // An AsyncQp on a pair of its own, with a receive in flight whose
    // region is `Hooked`, the operation dropped (abandoned).
    let ch = CompletionChannel::new(&ctx).unwrap();
    let c_send = CompletionQueue::with_channel(&ctx, 64, &ch).unwrap();
    let c_recv = CompletionQueue::with_channel(&ctx, 64, &ch).unwrap();
    let qp_c = QpBuilder::rc(&pd, &c_send, &c_recv).build().unwrap();
    let d = side(&ctx, &pd, QpCaps::default(), SendOps::rc_default());
    connect(&qp_c, &d.qp, &opts);
    let c = AsyncQp::new(qp_c, c_send, Some(c_recv)).unwrap();

    let peer = a.qp.endpoint(0x1234, &opts).unwrap();
    let state = Arc::new(Mutex::new(Some(HookState {
        qp: qp_b,
        mw: window(&pd),
        target,
        peer,
        opts,
        ran: None,
    })));
    let st = Arc::clone(&state);
    let hook = Box::new(move || {
        let mut g = st.lock().unwrap();
        let s = g.as_mut().unwrap();
        s.qp.reset().unwrap();
        s.qp.connect(&s.peer, 0x4321, &s.opts).unwrap();
        let bind = MwBind::new(&s.target, 64..128, remote_rw()).unwrap();
        let r = s.qp.bind_mw(7, &mut s.mw, &bind);
        s.ran = Some(r);
    });
    let buf = Hooked {
        mr: MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE).unwrap(),
        hook: Some(hook),
    };
    drop(c.recv(buf, 0..4096));
    assert_eq!(c.in_flight(), 1);

    let mut held = Some(c);
    let mut seen = Vec::new();
    // Polled until bind 7's completion is read (a loaded machine's device
    // may not have run it yet), by a poll that drops the AsyncQp.
    let start = Instant::now();
    while seen.is_empty() {
        assert!(start.elapsed() < WAIT, "bind 7's completion never came");
        let n = x
            .poll_each(1, |wc| {
                seen.push((wc.wr_id(), wc.opcode(), wc.status()));
                drop(held.take());
            })
            .unwrap();
        if n == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    assert_eq!(seen, [(7, WcOpcode::BIND_MW, WcStatus::SUCCESS)]);
    let s = state.lock().unwrap().take().unwrap();
    let ran = s.ran.expect("the hook ran after the poll");
    ran.expect("the second bind was posted");
    let HookState {
        qp: mut qp_b,
        mw: w2,
        target,
        ..
    } = s;
    // The second bind's completion has not been read by anyone.
    let in_flight = x.binds_in_flight();
    // The room a batch on B opens with: depth less the binds queued.
    let to = a.mr.remote(0..64).unwrap();
    let mut taken = 0;
    {
        let mut batch = qp_b.batch();
        for k in 0..depth as u64 {
            if batch
                .wr(500 + k)
                .rdma_write(to)
                .sge(b_mr.sge(0..64).unwrap())
                .is_err()
            {
                break;
            }
            taken += 1;
        }
        // Dropped: aborted, nothing posted.
    }
    let rest = drain(&mut x, 1, WAIT);
    let ids: Vec<_> = rest.iter().map(|w| (w.wr_id, w.opcode, w.status)).collect();
    assert_eq!(
        in_flight, 1,
        "the second bind (unread completion) is not counted: a batch on B took {taken} of \
         depth {depth}; its completion came after: {ids:?}"
    );
    assert!(
        taken < depth,
        "a batch took the whole depth beside a queued bind"
    );
    drop((w1, w2, target, d));
}

fn cq_errors(ctx: &Context) -> Vec<String> {
    let events = ctx.async_events().unwrap();
    let mut evs = Vec::new();
    while let Ok(Some(e)) = events.try_get_event() {
        evs.push(format!("{e:?}"));
    }
    evs
}

// ---------------------------------------------------------------------
// 7. Resizes and the places.
// ---------------------------------------------------------------------

/// Thread R owns the send CQ X and shrinks it (`resize(3)`) while no bind is
/// counted; thread B (which owns QP B, whose send CQ is X) binds a burst of
/// windows at the same moment. Whatever the interleaving, the binds
/// counted must never exceed X's capacity after the resize: the device
/// would owe X more completions than it holds (an overrun). A fresh pair
/// each round; at most 60 rounds or 20 s.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_resize_racing_binds_never_leaves_more_binds_than_places() {
    let caps = QpCaps {
        max_send_wr: 64,
        ..QpCaps::default()
    };
    const BURST: usize = 24;
    let mut violation = None;
    let mut rounds = 0u64;
    let mut shrunk = 0u64;
    let mut lcg = 12345u64;
    let deadline = Instant::now() + Duration::from_secs(20);
    while violation.is_none() && Instant::now() < deadline && rounds < 60 {
        rounds += 1;
        let p = pair_with_send_cq(63, caps);
        let Pair { ctx, pd, a, b, .. } = p;
        let Side {
            qp: mut qp_b,
            send_cq: mut x,
            ..
        } = b;
        let target = bindable(&pd);
        let mut windows: Vec<_> = (0..BURST)
            .map(|_| MemoryWindow::new(&pd, MwType::Type1).unwrap())
            .collect();
        lcg = lcg.wrapping_mul(6364136223846793005).wrapping_add(1);
        let spin = (lcg >> 33) % 3000;
        let go = AtomicBool::new(false);
        let mut r = None;
        std::thread::scope(|s| {
            s.spawn(|| {
                let bind = MwBind::new(&target, 0..64, remote_rw()).unwrap();
                while !go.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                // A varying delay, so that the burst lands anywhere in the
                // resize call.
                let t = Instant::now();
                while t.elapsed() < Duration::from_nanos(spin * 100) {
                    std::hint::spin_loop();
                }
                for (i, mw) in windows.iter_mut().enumerate() {
                    let _ = qp_b.bind_mw(1000 + i as u64, mw, &bind);
                }
            });
            go.store(true, Ordering::Release);
            r = Some(x.resize(3));
        });
        if matches!(r, Some(Ok(_))) {
            shrunk += 1;
        }
        // After a resize the CQ holds one fewer than its capacity until a
        // poll reads the resize's CQE.
        let (inflight, cap) = (x.binds_in_flight(), x.capacity());
        let holds = if matches!(r, Some(Ok(_))) {
            cap - 1
        } else {
            cap
        };
        if inflight > holds {
            std::thread::sleep(Duration::from_millis(200));
            let evs = cq_errors(&ctx);
            let got = drain(&mut x, inflight as usize, Duration::from_secs(1));
            violation = Some(format!(
                "round {rounds} (delay {} us): resize(3) -> {r:?}; {inflight} binds counted \
                 on a CQ of capacity {cap}; completions read after: {} of {inflight}; \
                 async events {evs:?}",
                spin / 10,
                got.len()
            ));
        }
        drop((a, qp_b, windows, target));
    }
    println!("rounds {rounds}, shrunk {shrunk}; violation: {violation:?}");
    assert!(violation.is_none(), "{violation:?}");
}

/// X is shrunk with `resize(n)`; then binds until one is refused, one
/// thread, no race: as many as `capacity() - 1` are admitted (the CQ holds
/// one fewer until a poll reads the resize's own CQE), and each completes
/// (no overrun).
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn binds_admitted_after_a_resize_all_complete() {
    let caps = QpCaps {
        max_send_wr: 64,
        ..QpCaps::default()
    };
    let mut report = Vec::new();
    let mut failed = false;
    for n in [1u32, 2, 3, 7] {
        let p = pair_with_send_cq(63, caps);
        let Pair { ctx, pd, a, b, .. } = p;
        let Side {
            qp: mut qp_b,
            send_cq: mut x,
            ..
        } = b;
        let cap = x.resize(n).unwrap();
        let target = bindable(&pd);
        let mut windows: Vec<_> = (0..cap + 1)
            .map(|_| MemoryWindow::new(&pd, MwType::Type1).unwrap())
            .collect();
        let mut accepted = 0usize;
        for (i, mw) in windows.iter_mut().enumerate() {
            let bind = MwBind::new(&target, i * 64..i * 64 + 64, remote_rw()).unwrap();
            if qp_b.bind_mw(10 + i as u64, mw, &bind).is_ok() {
                accepted += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(200));
        let got = drain(&mut x, accepted, Duration::from_secs(2));
        let evs = cq_errors(&ctx);
        report.push(format!(
            "resize({n}) -> capacity {cap}: binds accepted {accepted}, completions read {}, \
             async events {evs:?}",
            got.len()
        ));
        failed |= got.len() != accepted || !evs.is_empty() || accepted + 1 != cap as usize;
        drop((a, windows, qp_b, target));
    }
    println!("{report:#?}");
    assert!(!failed, "{report:#?}");
}

/// The same the same after one completion was polled past the
/// resize (libmlx5 then writes the consumer index it advanced over the
/// RESIZE CQE to the doorbell record).
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn binds_admitted_after_a_resize_and_a_poll_all_complete() {
    let caps = QpCaps {
        max_send_wr: 64,
        ..QpCaps::default()
    };
    let p = pair_with_send_cq(63, caps);
    let Pair { ctx, pd, a, b, .. } = p;
    let Side {
        qp: mut qp_b,
        send_cq: mut x,
        ..
    } = b;
    let cap = x.resize(7).unwrap() as usize;
    let target = bindable(&pd);
    let mut windows: Vec<_> = (0..cap + 1)
        .map(|_| MemoryWindow::new(&pd, MwType::Type1).unwrap())
        .collect();
    let bind = MwBind::new(&target, 0..64, remote_rw()).unwrap();
    qp_b.bind_mw(1, &mut windows[0], &bind).unwrap();
    let first = drain(&mut x, 1, WAIT);
    assert_eq!(first.len(), 1);
    let mut accepted = 0;
    for (i, mw) in windows.iter_mut().enumerate().take(cap) {
        if qp_b.bind_mw(10 + i as u64, mw, &bind).is_ok() {
            accepted += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let got = drain(&mut x, accepted, Duration::from_secs(2));
    let evs = cq_errors(&ctx);
    println!(
        "capacity {cap}: after one polled, binds accepted {accepted}, read {}, events {evs:?}",
        got.len()
    );
    assert!(got.len() == accepted && evs.is_empty());
    drop((a, windows, qp_b, target));
}

// ---------------------------------------------------------------------
// 8. A QP wrapped again by `from_raw_parts`.
// ---------------------------------------------------------------------

/// QP B (made with BIND_MW, so watched by X) is leaked (`mem::forget`: it
/// lives for ever and nothing posts on it through that handle), then taken
/// over with `QpEx::from_raw_parts` (its contract kept: live pointers, the
/// PD and CQs it was made with, nothing else posting, nothing outstanding).
/// A bind posted through the new handle and read by a poll of X must no
/// longer be counted.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_bind_on_a_qp_wrapped_again_is_retired_when_read() {
    let p = Pair::with(QpCaps::default(), ops());
    let Pair { pd, a, b, .. } = p;
    let Side {
        qp: qp_b,
        send_cq: mut x,
        recv_cq: b_recv,
        ..
    } = b;
    let raw = RawQp {
        qp: NonNull::new(qp_b.as_ptr()).unwrap(),
        qpx: NonNull::new(qp_b.as_qp_ex_ptr()).unwrap(),
        pd: &pd,
        send_cq: &x,
        recv_cq: &b_recv,
        caps: qp_b.caps(),
        send_ops: qp_b.send_ops(),
        mlx5: None,
    };
    std::mem::forget(qp_b);
    // SAFETY: live pointers of one QP made in `pd` with these CQs and
    // send ops; the leaked handle never posts; nothing was posted on it.
    let mut h = unsafe { RcQp::from_raw_parts(raw) }.unwrap();
    let target = bindable(&pd);
    let mut mw = MemoryWindow::new(&pd, MwType::Type1).unwrap();
    let bind = MwBind::new(&target, 0..64, remote_rw()).unwrap();
    h.bind_mw(5, &mut mw, &bind).unwrap();
    let got = drain(&mut x, 1, WAIT);
    let ids: Vec<_> = got.iter().map(|w| (w.wr_id, w.opcode, w.status)).collect();
    assert_eq!(ids, [(5, WcOpcode::BIND_MW, WcStatus::SUCCESS)]);
    // Once read, the bind must not be counted any more.
    let in_flight = x.binds_in_flight();
    // What that costs: the room a batch on H opens with.
    let to = a.mr.remote(0..8).unwrap();
    let mut room = 0;
    {
        let depth = h.caps().max_send_wr as u64;
        let mut batch = h.batch();
        for k in 0..depth {
            if batch
                .wr(500 + k)
                .rdma_write(to)
                .inline(b"12345678")
                .is_err()
            {
                break;
            }
            room += 1;
        }
        // Dropped: aborted, nothing posted.
    }
    println!(
        "after reading the bind's completion: binds_in_flight {in_flight}, batch room {room} \
         of {}",
        h.caps().max_send_wr
    );
    assert_eq!(
        in_flight,
        0,
        "the bind's completion was read ({ids:?}) yet it is still counted (batch room \
         {room} of {})",
        h.caps().max_send_wr
    );
    drop((h, mw, a));
}
