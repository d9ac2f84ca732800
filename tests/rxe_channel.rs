//! Completion channels, blocking waits and asynchronous events on a real
//! RDMA device (soft-RoCE in the test guest): events for send and receive
//! completions, solicited-only arming, several CQs on one channel, drops
//! with events unacknowledged, timeouts, the scoped post on a channel CQ,
//! the CPU a blocked wait uses, and the typed async events.
//!
//! Run by `scripts/test` in the guest with `MLX5DV_TEST_DEVICE=rxe0`;
//! without that variable the tests are ignored, and fail if forced to run.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use std::collections::HashSet;
use std::time::{Duration, Instant};
use support::rig::*;

/// A CQ on `channel`, or a plain one.
fn cq(ctx: &Context, channel: Option<&CompletionChannel>, cqe: u32) -> CompletionQueue {
    match channel {
        Some(ch) => CompletionQueue::with_channel(ctx, cqe, ch).expect("CQ on a channel"),
        None => CompletionQueue::new(ctx, cqe).expect("CQ"),
    }
}

/// One side whose send and receive CQs are on the channels given, its send
/// CQ with room for `send_cqe` completions.
fn side_on(
    ctx: &Context,
    pd: &ProtectionDomain,
    [send, recv]: [Option<&CompletionChannel>; 2],
    send_cqe: u32,
    caps: QpCaps,
) -> Side {
    let send_cq = cq(ctx, send, send_cqe);
    let recv_cq = cq(ctx, recv, 256);
    let qp = QpBuilder::rc(pd, &send_cq, &recv_cq)
        .caps(caps)
        .build()
        .expect("create RC QP");
    let mr = MemoryRegion::new(pd, MR_LEN, access_all()).expect("register MR");
    Side {
        qp,
        send_cq,
        recv_cq,
        mr,
    }
}

/// A connected pair whose CQs (A send, A recv, B send, B recv) are on the
/// channels given.
fn pair_on(ctx: &Context, chans: [Option<&CompletionChannel>; 4]) -> Pair {
    pair_tuned(ctx, chans, |_| {})
}

/// `pair_on`, with connection options `tweak` adjusts.
fn pair_tuned(
    ctx: &Context,
    chans: [Option<&CompletionChannel>; 4],
    tweak: impl FnOnce(&mut ConnectOptions),
) -> Pair {
    pair_built(ctx, chans, 256, QpCaps::default(), tweak)
}

/// `pair_tuned`, with QPs of `caps` and A's send CQ of `a_send_cqe`
/// entries.
fn pair_built(
    ctx: &Context,
    [a_send, a_recv, b_send, b_recv]: [Option<&CompletionChannel>; 4],
    a_send_cqe: u32,
    caps: QpCaps,
    tweak: impl FnOnce(&mut ConnectOptions),
) -> Pair {
    let pd = ProtectionDomain::new(ctx).expect("alloc PD");
    let mut opts = connect_options(ctx);
    tweak(&mut opts);
    let a = side_on(ctx, &pd, [a_send, a_recv], a_send_cqe, caps);
    let b = side_on(ctx, &pd, [b_send, b_recv], 256, caps);
    let mut p = Pair {
        ctx: ctx.clone(),
        pd,
        a,
        b,
        opts,
    };
    p.connect();
    p
}

/// Posts one signalled send of `len` bytes from A (no waiting).
fn send_from_a(p: &mut Pair, wr_id: u64, len: usize, solicited: bool) {
    let mut batch = p.a.qp.batch();
    let wr = batch.wr(wr_id).signaled();
    let wr = if solicited { wr.solicited() } else { wr };
    wr.send().sge(p.a.mr.sge(0..len).unwrap()).unwrap();
    unsafe { batch.complete() }.unwrap();
}

/// Posts one signalled 8-byte RDMA write from A into B's region (no
/// waiting).
fn write_from_a(p: &mut Pair, wr_id: u64) {
    let remote = p.b.mr.remote(0..8).unwrap();
    let mut batch = p.a.qp.batch();
    batch
        .wr(wr_id)
        .signaled()
        .rdma_write(remote)
        .sge(p.a.mr.sge(0..8).unwrap())
        .unwrap();
    unsafe { batch.complete() }.unwrap();
}

/// Posts one receive at B into its region's first `len` bytes.
fn recv_at_b(p: &mut Pair, wr_id: u64, len: usize) {
    unsafe { p.b.qp.post_recv(wr_id, &[p.b.mr.sge(0..len).unwrap()]) }.unwrap();
}

/// Every event the channel gives within `quiet` of the previous one.
fn drain_events(channel: &CompletionChannel, first: Duration, quiet: Duration) -> Vec<CqId> {
    let mut ids = Vec::new();
    let mut wait = first;
    loop {
        match channel.get_event(wait) {
            Ok(e) => ids.push(e.cq()),
            Err(Error::Timeout { .. }) => return ids,
            Err(e) => panic!("get_event: {e}"),
        }
        wait = quiet;
    }
}

/// Asserts that `cpu` is under `limit` of `wall`, unless the test runs
/// under valgrind (scripts/memcheck), whose translation of the code on its
/// first run costs CPU that the program itself does not.
#[track_caller]
fn assert_cpu_share_below(limit: f64, cpu: Duration, wall: Duration) {
    let share = cpu.as_secs_f64() / wall.as_secs_f64();
    let under_valgrind = std::env::var("LD_PRELOAD").is_ok_and(|v| v.contains("vgpreload"));
    if under_valgrind {
        println!("under valgrind: {cpu:?} of CPU in {wall:?} not checked");
        return;
    }
    assert!(share < limit, "{cpu:?} of CPU in {wall:?}");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn send_and_receive_completions_raise_events_naming_their_cqs() {
    let ctx = open();
    let channel = CompletionChannel::new(&ctx).unwrap();
    let mut p = pair_on(&ctx, [Some(&channel); 4]);
    assert_eq!(channel.cq_count(), 4);
    let ids: HashSet<CqId> = [
        p.a.send_cq.id(),
        p.a.recv_cq.id(),
        p.b.send_cq.id(),
        p.b.recv_cq.id(),
    ]
    .into();
    assert_eq!(ids.len(), 4, "CQ ids are distinct: {ids:?}");
    // Nothing armed, nothing to read.
    assert!(channel.try_get_event().unwrap().is_none());

    let data = pattern(512, 5);
    p.a.mr.write_at(0, &data).unwrap();
    recv_at_b(&mut p, 21, 512);
    for cq in [
        &mut p.a.send_cq,
        &mut p.a.recv_cq,
        &mut p.b.send_cq,
        &mut p.b.recv_cq,
    ] {
        cq.req_notify(false).unwrap();
    }
    send_from_a(&mut p, 11, 512, false);
    let mut got = drain_events(&channel, WAIT, Duration::from_millis(500));
    got.sort();
    let mut want = vec![p.a.send_cq.id(), p.b.recv_cq.id()];
    want.sort();
    assert_eq!(
        got, want,
        "one event for A's send CQ and one for B's receive CQ"
    );
    let tx = p.a.send_cq.wait(1, WAIT).unwrap();
    assert_wc(&tx[0], 11, WcOpcode::SEND);
    let rx = p.b.recv_cq.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], 21, WcOpcode::RECV);
    assert_eq!(p.b.mr.to_vec(..512).unwrap(), data);

    // The other way round, after re-arming: the events name the other two.
    unsafe { p.a.qp.post_recv(22, &[p.a.mr.sge(1024..2048).unwrap()]) }.unwrap();
    p.a.recv_cq.req_notify(false).unwrap();
    p.b.send_cq.req_notify(false).unwrap();
    let remote = p.a.mr.remote(4096..4160).unwrap();
    let wcs =
        p.b.qp
            .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                b.wr(12).rdma_write_imm(remote, 77).sge(p.b.mr.sge(0..64)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 12, WcOpcode::RDMA_WRITE);
    let got = drain_events(&channel, WAIT, Duration::from_millis(500));
    assert!(got.contains(&p.a.recv_cq.id()), "{got:?}");
    assert!(
        got.iter()
            .all(|id| *id == p.a.recv_cq.id() || *id == p.b.send_cq.id()),
        "only the armed CQs that completed: {got:?}"
    );
    let rx = p.a.recv_cq.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], 22, WcOpcode::RECV_RDMA_WITH_IMM);
    assert_eq!(rx[0].imm, Some(77));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_solicited_only_arm_wakes_for_a_solicited_send_and_not_for_another() {
    let ctx = open();
    let channel = CompletionChannel::new(&ctx).unwrap();
    // Only B's receive CQ is on the channel.
    let mut p = pair_on(&ctx, [None, None, None, Some(&channel)]);
    recv_at_b(&mut p, 1, 64);
    recv_at_b(&mut p, 2, 64);
    p.b.recv_cq.req_notify(true).unwrap();

    // A send without SOLICITED completes at B, and raises no event.
    let sent =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(10).send().sge(p.a.mr.sge(0..64)?)
            })
            .unwrap();
    assert_wc(&sent[0], 10, WcOpcode::SEND);
    let start = Instant::now();
    let err = channel.get_event(Duration::from_millis(1500)).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(start.elapsed() >= Duration::from_millis(1500));

    // One with SOLICITED does.
    let sent =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(11).solicited().send().sge(p.a.mr.sge(0..64)?)
            })
            .unwrap();
    assert_wc(&sent[0], 11, WcOpcode::SEND);
    let event = channel.get_event(WAIT).unwrap();
    assert_eq!(event.cq(), p.b.recv_cq.id());
    let rx = p.b.recv_cq.wait(2, WAIT).unwrap();
    assert_wc(&rx[0], 1, WcOpcode::RECV);
    assert_wc(&rx[1], 2, WcOpcode::RECV);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn threads_waiting_on_cqs_of_one_channel_each_wake_for_their_own() {
    // Two threads block in `wait` on two CQs of one channel; whichever of
    // them reads the channel, each wakes for its own CQ's completion.
    let ctx = open();
    let channel = CompletionChannel::new(&ctx).unwrap();
    let mut p = pair_on(&ctx, [Some(&channel); 4]);
    recv_at_b(&mut p, 31, 64);
    unsafe { p.a.qp.post_recv(32, &[p.a.mr.sge(0..64).unwrap()]) }.unwrap();
    let (a_recv, b_recv) = (&mut p.a.recv_cq, &mut p.b.recv_cq);
    let (a_qp, b_qp) = (&mut p.a.qp, &mut p.b.qp);
    let (a_mr, b_mr) = (&p.a.mr, &p.b.mr);
    let (a_send, b_send) = (&mut p.a.send_cq, &mut p.b.send_cq);
    std::thread::scope(|s| {
        let at_b = s.spawn(|| b_recv.wait(1, WAIT));
        let at_a = s.spawn(|| a_recv.wait(1, WAIT));
        std::thread::sleep(Duration::from_millis(500));
        a_qp.post_and_wait(a_send, WAIT, |b| b.wr(1).send().sge(a_mr.sge(0..64)?))
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        b_qp.post_and_wait(b_send, WAIT, |b| b.wr(2).send().sge(b_mr.sge(0..64)?))
            .unwrap();
        assert_wc(&at_b.join().unwrap().unwrap()[0], 31, WcOpcode::RECV);
        assert_wc(&at_a.join().unwrap().unwrap()[0], 32, WcOpcode::RECV);
    });
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_cq_dropped_with_events_unacknowledged_does_not_hang() {
    let ctx = open();
    let channel = CompletionChannel::new(&ctx).unwrap();
    // Events are acknowledged in batches of 32: 3 leave all unacknowledged
    // at the drop, 40 a batch acknowledged and 8 not. The last event is
    // read, or left unread in the kernel.
    for (events, read_the_last) in [(3, true), (3, false), (40, true), (40, false)] {
        let mut p = pair_on(&ctx, [Some(&channel), None, None, None]);
        let id = p.a.send_cq.id();
        let before = destroy_failures();
        for i in 0..events {
            p.a.send_cq.req_notify(false).unwrap();
            write_from_a(&mut p, i);
            if read_the_last || i + 1 < events {
                assert_eq!(channel.get_event(WAIT).unwrap().cq(), id);
            } else {
                // Let it reach the channel.
                std::thread::sleep(Duration::from_millis(300));
            }
            p.a.send_cq.wait(1, WAIT).unwrap();
        }
        let Pair { a, b, pd, .. } = p;
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let dropper = std::thread::spawn(move || {
            drop(a);
            drop(b);
            drop(pd);
            done_tx.send(()).unwrap();
        });
        done_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("dropping a CQ with unacknowledged events hung in ibv_destroy_cq");
        dropper.join().unwrap();
        assert_eq!(destroy_failures(), before);
        assert_eq!(channel.cq_count(), 0);
        // Nothing of the dropped CQ comes out of the channel.
        assert!(channel.try_get_event().unwrap().is_none());
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn cqs_dropped_while_another_thread_reads_their_channel_neither_hang_nor_fail() {
    // A thread reads the channel all along, while CQs on it are armed,
    // complete and are dropped at varying moments: before their event is
    // raised, while it is read, after it was counted. Each drop returns
    // (every event read is acknowledged, by the registry or by the reader
    // that finds its CQ gone), and no destroy fails. Under memcheck this
    // also checks that no event reaches a freed CQ.
    use std::sync::atomic::{AtomicBool, Ordering};
    let ctx = open();
    let channel = CompletionChannel::new(&ctx).unwrap();
    let before = destroy_failures();
    let stop = AtomicBool::new(false);
    let events = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                match channel.get_event(Duration::from_millis(20)) {
                    Ok(_) => n += 1,
                    Err(Error::Timeout { .. }) => {}
                    Err(e) => panic!("get_event: {e}"),
                }
            }
            n
        });
        for round in 0..16u64 {
            let mut p = pair_on(&ctx, [Some(&channel), Some(&channel), None, None]);
            p.a.send_cq.req_notify(false).unwrap();
            p.a.recv_cq.req_notify(false).unwrap();
            write_from_a(&mut p, round);
            std::thread::sleep(Duration::from_millis(round % 4 * 15));
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            let dropper = std::thread::spawn(move || {
                drop(p);
                done_tx.send(()).unwrap();
            });
            done_rx
                .recv_timeout(Duration::from_secs(20))
                .unwrap_or_else(|_| panic!("round {round}: the drop hung"));
            dropper.join().unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap()
    });
    println!("the reader took {events} events of 16 rounds");
    assert_eq!(destroy_failures(), before);
    assert_eq!(channel.cq_count(), 0);
    assert!(channel.try_get_event().unwrap().is_none());
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn an_event_loop_on_the_fd_sees_it_readable_and_drains_it() {
    // What epoll or an async runtime does: wait for the fd, take every
    // event, poll the CQs named, re-arm.
    use std::os::fd::{AsFd, AsRawFd};
    let ctx = open();
    let channel = CompletionChannel::new(&ctx).unwrap();
    let flags = unsafe { libc::fcntl(channel.as_raw_fd(), libc::F_GETFL) };
    assert_ne!(
        flags & libc::O_NONBLOCK,
        0,
        "the channel's fd is non-blocking"
    );
    let mut p = pair_on(&ctx, [Some(&channel), None, None, Some(&channel)]);
    let readable = |ms: i32| {
        let mut pfd = libc::pollfd {
            fd: channel.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        n == 1
    };
    assert!(!readable(0));
    let mut received = 0;
    for round in 0..5u64 {
        recv_at_b(&mut p, 100 + round, 64);
        p.a.send_cq.req_notify(false).unwrap();
        p.b.recv_cq.req_notify(false).unwrap();
        send_from_a(&mut p, round, 64, false);
        let mut seen = HashSet::new();
        while seen.len() < 2 {
            assert!(readable(20_000), "no event within 20 s");
            while let Some(event) = channel.try_get_event().unwrap() {
                seen.insert(event.cq());
            }
        }
        assert_eq!(seen, [p.a.send_cq.id(), p.b.recv_cq.id()].into());
        assert!(!readable(0), "drained");
        assert_wc(
            &p.a.send_cq.wait(1, WAIT).unwrap()[0],
            round,
            WcOpcode::SEND,
        );
        let rx = p.b.recv_cq.wait(1, WAIT).unwrap();
        assert_wc(&rx[0], 100 + round, WcOpcode::RECV);
        received += 1;
    }
    assert_eq!(received, 5);

    // The same loop with the crate's race-free step: poll, and when empty
    // arm and poll again; wait for the fd only when that found nothing.
    for round in 5..10u64 {
        recv_at_b(&mut p, 100 + round, 64);
        let mut rx = Vec::new();
        assert_eq!(
            p.b.recv_cq
                .poll_or_arm(4, |wc| rx.push(WorkCompletion::from(wc)))
                .unwrap(),
            0,
            "nothing sent yet: empty, and armed"
        );
        send_from_a(&mut p, round, 64, false);
        while rx.is_empty() {
            assert!(readable(20_000), "no event within 20 s");
            while channel.try_get_event().unwrap().is_some() {}
            p.b.recv_cq
                .poll_or_arm(4, |wc| rx.push(WorkCompletion::from(wc)))
                .unwrap();
        }
        assert_wc(&rx[0], 100 + round, WcOpcode::RECV);
        assert_wc(
            &p.a.send_cq.wait(1, WAIT).unwrap()[0],
            round,
            WcOpcode::SEND,
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_channel_outlives_its_cqs_and_its_handle_may_go_first() {
    let ctx = open();
    let channel = CompletionChannel::new(&ctx).unwrap();
    let mut p = pair_on(&ctx, [Some(&channel), None, None, Some(&channel)]);
    drop(channel);
    let ch =
        p.b.recv_cq
            .channel()
            .expect("the CQ keeps its channel")
            .clone();
    assert_eq!(ch.cq_count(), 2);
    recv_at_b(&mut p, 5, 16);
    let sent =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(6).send().sge(p.a.mr.sge(0..16)?)
            })
            .unwrap();
    assert_wc(&sent[0], 6, WcOpcode::SEND);
    assert_wc(&p.b.recv_cq.wait(1, WAIT).unwrap()[0], 5, WcOpcode::RECV);
    assert!(format!("{:?}", p.b.recv_cq).contains("channel: true"));
    assert!(format!("{:?}", p.b.send_cq).contains("channel: false"));
    drop(p);
    assert_eq!(ch.cq_count(), 0);
    let dbg = format!("{ch:?}");
    assert!(
        dbg.contains("CompletionChannel") && dbg.contains("cqs: 0"),
        "{dbg}"
    );
}

/// Never before the time asked (the clock starts before the call that
/// sets the deadline); the bound above is generous, for a loaded machine
/// or an emulated guest, where a woken thread may wait long for a core.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_wait_with_no_completion_times_out_in_about_the_time_asked() {
    let ctx = open();
    let channel = CompletionChannel::new(&ctx).unwrap();
    let mut cq = CompletionQueue::with_channel(&ctx, 16, &channel).unwrap();
    for ms in [0u64, 200, 700] {
        let asked = Duration::from_millis(ms);
        let start = Instant::now();
        let err = cq.wait(1, asked).unwrap_err();
        let took = start.elapsed();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert!(
            took >= asked && took < asked + Duration::from_secs(3),
            "asked {asked:?}, took {took:?}"
        );
        let start = Instant::now();
        let err = channel.get_event(asked).unwrap_err();
        let took = start.elapsed();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert!(
            took >= asked && took < asked + Duration::from_secs(3),
            "asked {asked:?}, took {took:?}"
        );
    }
    // Arguments refused before any C call.
    let mut plain = CompletionQueue::new(&ctx, 16).unwrap();
    assert!(plain.channel().is_none());
    let err = plain.req_notify(false).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let other = Context::open(ctx.name()).unwrap();
    let err = CompletionQueue::with_channel(&other, 16, &channel).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    let err = CompletionQueue::with_channel(&ctx, 0, &channel).unwrap_err();
    assert!(matches!(err, Error::OutOfRange { .. }), "{err}");
    assert_eq!(channel.cq_count(), 1);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn post_and_wait_on_a_channel_cq_lands_byte_for_byte() {
    let ctx = open();
    let channel = CompletionChannel::new(&ctx).unwrap();
    let mut p = pair_on(&ctx, [Some(&channel); 4]);
    let data = pattern(4096, 3);
    p.a.mr.write_at(0, &data).unwrap();
    let remote = p.b.mr.remote(1024..1024 + 4096).unwrap();
    for round in 0..20u64 {
        let wcs =
            p.a.qp
                .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                    b.wr(round).rdma_write(remote).sge(p.a.mr.sge(0..4096)?)
                })
                .unwrap();
        assert_eq!(wcs.len(), 1);
        assert_wc(&wcs[0], round, WcOpcode::RDMA_WRITE);
    }
    assert_eq!(p.b.mr.to_vec(1024..1024 + 4096).unwrap(), data);
    // A read back, waited for on the channel too.
    let mut back = MemoryRegion::new(&p.pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let into = back.sge_mut(0..4096).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(99).rdma_read(remote).sge(into)
            })
            .unwrap();
    assert_wc(&wcs[0], 99, WcOpcode::RDMA_READ);
    assert_eq!(back.to_vec(..).unwrap(), data);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_scoped_post_that_times_out_on_a_channel_cq_sleeps_through_the_flush() {
    let ctx = open();
    let channel = CompletionChannel::new(&ctx).unwrap();
    let mut p = pair_tuned(&ctx, [Some(&channel), None, None, None], |o| {
        o.timeout = 20;
        o.retry_cnt = 7;
    });
    p.b.qp.to_error().unwrap();
    p.b.qp.reset().unwrap();
    let remote = p.b.mr.remote(0..16).unwrap();
    // 3 s: the calls around the sleep (the post, arming the CQ, moving the
    // QP to ERR, the flush's poll) cost a fixed ~0.1 s of CPU in a busy
    // emulated guest; over 3 s of sleep they stay well under the share a
    // spinning wait would take.
    let wait = Duration::from_millis(3000);
    let (start, cpu0) = (Instant::now(), thread_cpu());
    let err =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, wait, |b| {
                b.wr(1).rdma_write(remote).sge(p.a.mr.sge(0..16)?)
            })
            .unwrap_err();
    let (took, cpu) = (start.elapsed(), thread_cpu() - cpu0);
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("flushed"), "{err}");
    assert!(took >= wait, "{took:?}");
    let share = cpu.as_secs_f64() / took.as_secs_f64();
    println!(
        "scoped post timed out after {took:?}, using {cpu:?} of CPU ({:.2} %)",
        share * 100.0
    );
    assert_cpu_share_below(0.05, cpu, took);
    assert_eq!(p.a.qp.state().unwrap(), QpState::Err);
}

/// Waits for one receive on B's receive CQ that arrives `late`; returns
/// (wall time, this thread's CPU time) of the wait.
fn timed_late_receive(p: &mut Pair, late: Duration) -> (Duration, Duration) {
    recv_at_b(p, 40, 64);
    let (b_recv, a_qp, a_send, a_mr) = (&mut p.b.recv_cq, &mut p.a.qp, &mut p.a.send_cq, &p.a.mr);
    // The send is posted `late` after the waiter has started its clock (a
    // device that delivers in microseconds would otherwise complete the
    // wait a moment under `late` after a late-starting waiter's start).
    let started = std::sync::Barrier::new(2);
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let (start, cpu0) = (Instant::now(), thread_cpu());
            started.wait();
            let wcs = b_recv.wait(1, Duration::from_secs(30)).unwrap();
            let (took, cpu) = (start.elapsed(), thread_cpu() - cpu0);
            assert_wc(&wcs[0], 40, WcOpcode::RECV);
            (took, cpu)
        });
        started.wait();
        std::thread::sleep(late);
        a_qp.post_and_wait(a_send, WAIT, |b| b.wr(41).send().sge(a_mr.sge(0..64)?))
            .unwrap();
        waiter.join().unwrap()
    })
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_blocked_wait_for_a_late_completion_uses_under_5_percent_of_a_core() {
    let ctx = open();
    let channel = CompletionChannel::new(&ctx).unwrap();
    let mut p = pair_on(&ctx, [None, None, None, Some(&channel)]);
    let (took, cpu) = timed_late_receive(&mut p, Duration::from_secs(2));
    let share = cpu.as_secs_f64() / took.as_secs_f64();
    println!(
        "blocking wait (channel): {took:?} waited, {cpu:?} of CPU: {:.3} % of a core",
        share * 100.0
    );
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert_cpu_share_below(0.05, cpu, took);

    // The same wait on a CQ without a channel, for comparison (not
    // asserted: it spins, yields, then sleeps 50 µs at a time).
    let mut q = pair_on(&ctx, [None; 4]);
    let (took, cpu) = timed_late_receive(&mut q, Duration::from_secs(2));
    println!(
        "polling wait (no channel): {took:?} waited, {cpu:?} of CPU: {:.1} % of a core",
        cpu.as_secs_f64() / took.as_secs_f64() * 100.0
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_cq_overrun_raises_a_cq_error_event_naming_the_cq() {
    // As in rxe_faults' overrun test: more signalled writes than the send
    // CQ holds, nobody polling. Soft-RoCE drops the excess and raises
    // IBV_EVENT_CQ_ERR for the CQ.
    let ctx = open();
    let events = ctx.async_events().unwrap();
    // Nothing pending on a fresh context.
    while let Some(e) = events.try_get_event().unwrap() {
        println!("an earlier event: {e}");
    }
    let caps = QpCaps {
        max_send_wr: 128,
        ..QpCaps::default()
    };
    let mut p = pair_built(&ctx, [None; 4], 4, caps, |_| {});
    let cap = p.a.send_cq.capacity();
    let n = u64::from(2 * cap + 4);
    assert!(n <= 128, "a send CQ of {cap} entries");
    let mut batch = p.a.qp.batch();
    for i in 0..n {
        let r = p.b.mr.remote(..).unwrap().slice(i * 8, 8).unwrap();
        batch
            .wr(i)
            .signaled()
            .rdma_write(r)
            .sge(p.a.mr.sge(0..8).unwrap())
            .unwrap();
    }
    unsafe { batch.complete() }.unwrap();
    let event = events.get_event(WAIT).unwrap();
    println!("after the overrun: {event} ({event:?})");
    assert_eq!(
        event,
        AsyncEvent::CqErr {
            cq: p.a.send_cq.id()
        }
    );
    assert_eq!(event.qp_num(), None);
    assert_eq!(
        event.to_string(),
        format!("CQ error on CQ {}", p.a.send_cq.id().handle())
    );
    let mut more = Vec::new();
    while let Ok(e) = events.get_event(Duration::from_millis(500)) {
        more.push(e);
    }
    println!("then: {more:?}");
    // Soft-RoCE raises one for each completion it drops; nothing else.
    assert!(more.iter().all(|e| *e == event), "{more:?}");
    // The CQ (its async events acknowledged) is destroyed without waiting.
    drop(p);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn qp_errors_and_their_async_events_on_soft_roce() {
    // What the device raises for QP errors: a QP moved to ERR by hand, a
    // remote access error (the responder's QP fails), a vanished peer
    // (retries exceeded). Whatever comes is typed and names a QP of the
    // pair by number.
    let ctx = open();
    let events = ctx.async_events().unwrap();
    while events.try_get_event().unwrap().is_some() {}
    let collect = || -> Vec<AsyncEvent> {
        std::iter::from_fn(|| events.get_event(Duration::from_millis(1000)).ok()).collect()
    };
    let mut p = Pair::tuned(QpCaps::default(), SendOps::rc_default(), |o| {
        o.timeout = 12;
        o.retry_cnt = 1;
    });
    let qpns = [p.a.qp.qp_num(), p.b.qp.qp_num()];

    p.a.qp.to_error().unwrap();
    let by_hand = collect();
    println!("after a QP moved to ERR by hand: {by_hand:?}");

    p.a.qp.reset().unwrap();
    p.b.qp.reset().unwrap();
    p.connect();
    let read_only = MemoryRegion::new(
        &p.pd,
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    )
    .unwrap();
    let target = read_only.remote(0..64).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(1).rdma_write(target).sge(p.a.mr.sge(0..64)?)
            })
            .unwrap();
    assert_eq!(wcs[0].status, WcStatus::REM_ACCESS_ERR, "{wcs:?}");
    let access = collect();
    println!("after a remote access error: {access:?}");

    p.a.qp.reset().unwrap();
    p.b.qp.reset().unwrap();
    p.connect();
    p.b.qp.to_error().unwrap();
    p.b.qp.reset().unwrap();
    let remote = p.b.mr.remote(0..64).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(2).rdma_write(remote).sge(p.a.mr.sge(0..64)?)
            })
            .unwrap();
    assert_eq!(wcs[0].status, WcStatus::RETRY_EXC_ERR, "{wcs:?}");
    let retries = collect();
    println!("after retries exceeded: {retries:?}");

    for e in by_hand.iter().chain(&access).chain(&retries) {
        let qp_num = e
            .qp_num()
            .unwrap_or_else(|| panic!("not a QP event: {e:?}"));
        assert!(qpns.contains(&qp_num), "{e:?} names no QP of the pair");
    }
    if ctx.query_device().unwrap().vendor_id == 0x00FF_FFFF {
        // Soft-RoCE reports QP errors in the completions only.
        assert!(by_hand.is_empty() && access.is_empty() && retries.is_empty());
    }

    // The fd is non-blocking and pollable.
    use std::os::fd::AsRawFd;
    let flags = unsafe { libc::fcntl(events.as_raw_fd(), libc::F_GETFL) };
    assert_ne!(flags & libc::O_NONBLOCK, 0);
    let start = Instant::now();
    let err = events.get_event(Duration::from_millis(300)).unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(start.elapsed() >= Duration::from_millis(300));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn the_cq_events_example_plays_ping_pong_with_both_kinds_of_wait() {
    // examples/cq_events.rs, built beside this test (target/<profile>/examples).
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .unwrap()
        .join("examples/cq_events");
    assert!(
        path.exists(),
        "build the examples first: {}",
        path.display()
    );
    for extra in [&[][..], &["--poll"][..]] {
        let out = std::process::Command::new(&path)
            .args([
                "-d",
                &device_name(),
                "-n",
                "20",
                "-s",
                "256",
                "--delay",
                "10",
            ])
            .args(extra)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        println!("{text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{:?}", out.status);
        assert!(text.contains("20 round trips of 256 bytes"), "{text}");
        let how = if extra.is_empty() {
            "waits sleep on a completion channel"
        } else {
            "waits poll"
        };
        assert!(text.contains(how) && text.contains("CPU: ping"), "{text}");
    }
}

/// A thread that reads every event of `channel` with `get_event` (as an
/// event loop for "any event" would) until `stop`; returns what it read.
fn any_event_reader(
    channel: &CompletionChannel,
    stop: &std::sync::atomic::AtomicBool,
) -> Vec<CqId> {
    let mut seen = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        match channel.get_event(Duration::from_millis(200)) {
            Ok(e) => seen.push(e.cq()),
            Err(Error::Timeout { .. }) => {}
            Err(e) => panic!("get_event: {e}"),
        }
    }
    seen
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_cq_wait_wakes_for_its_completion_when_another_thread_takes_the_event() {
    // Thread X reads the channel for any event (`get_event`) and takes
    // every event it reads; thread Y then waits on its own CQ of the same
    // channel: first a blocking `wait`, then a scoped post. Each wait must
    // end soon after its completion arrives, not at its timeout, whoever
    // took the CQ's event.
    use std::sync::atomic::{AtomicBool, Ordering};
    let ctx = open();
    let channel = CompletionChannel::new(&ctx).unwrap();
    let mut p = pair_on(&ctx, [Some(&channel); 4]);
    recv_at_b(&mut p, 41, 64);
    let long = Duration::from_secs(15);
    let soon = Duration::from_secs(5);
    let stop = AtomicBool::new(false);
    let b_recv_id = p.b.recv_cq.id();
    let a_send_id = p.a.send_cq.id();
    let (a_qp, a_send, a_mr) = (&mut p.a.qp, &mut p.a.send_cq, &p.a.mr);
    let b_recv = &mut p.b.recv_cq;
    let remote = p.b.mr.remote(0..64).unwrap();
    /// Stops the reader however the scope ends (a failed assertion too).
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    std::thread::scope(|s| {
        let reader = s.spawn(|| any_event_reader(&channel, &stop));
        let _stop = StopOnDrop(&stop);
        // X is asleep on the fd before Y waits.
        std::thread::sleep(Duration::from_millis(300));
        let waiter = s.spawn(|| {
            let start = Instant::now();
            let wc = b_recv.wait(1, long).map(|w| w[0]);
            (wc, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(500));
        // A's send completes at B's receive CQ (Y's) and at A's send CQ.
        let mut batch = a_qp.batch();
        batch
            .wr(1)
            .signaled()
            .send()
            .sge(a_mr.sge(0..64).unwrap())
            .unwrap();
        unsafe { batch.complete() }.unwrap();
        let (wc, took) = waiter.join().unwrap();
        assert_wc(&wc.expect("Y's wait"), 41, WcOpcode::RECV);
        assert!(took < soon, "Y's wait took {took:?}: its wakeup was lost");
        // The send's own completion, polled here so that it is not left.
        let wc = a_send.wait(1, WAIT).unwrap()[0];
        assert_wc(&wc, 1, WcOpcode::SEND);

        // A scoped post on A's send CQ while X still reads the channel.
        let start = Instant::now();
        let wcs = a_qp
            .post_and_wait(a_send, long, |b| {
                b.wr(2).rdma_write(remote).sge(a_mr.sge(0..64)?)
            })
            .expect("the scoped post");
        let took = start.elapsed();
        assert_wc(&wcs[0], 2, WcOpcode::RDMA_WRITE);
        assert!(
            took < soon,
            "the scoped post took {took:?}: its wakeup was lost"
        );
        stop.store(true, Ordering::SeqCst);
        let seen = reader.join().unwrap();
        // What X read names only the channel's CQs (it may have taken
        // Y's events, which is the point).
        assert!(
            seen.iter().all(|id| [b_recv_id, a_send_id].contains(id)),
            "{seen:?}"
        );
    });
}
