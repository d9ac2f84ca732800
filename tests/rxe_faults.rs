//! Faults on a real device (soft-RoCE in the test guest): what the crate
//! reports when the peer vanishes, the send queue is full, no receive is
//! posted, a scoped post times out, and several threads share a CQ. Each
//! case asserts which completions arrived, with which status, and that no
//! data outside the target range changed.
//!
//! Run by `scripts/test` in the guest with `MLX5DV_TEST_DEVICE=rxe0`.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::rig::*;

/// Short transport timeouts: 4.096 µs × 2^12 ≈ 17 ms per try, one retry.
fn impatient(o: &mut ConnectOptions) {
    o.timeout = 12;
    o.retry_cnt = 1;
    o.rnr_retry = 1;
    o.min_rnr_timer = 1;
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_vanished_peer_gives_retry_exceeded_with_the_qp_named() {
    let mut p = Pair::tuned(QpCaps::default(), SendOps::rc_default(), impatient);
    let remote = p.b.mr.remote(0..64).unwrap();
    // The peer QP goes away: nothing answers A's packets any more.
    p.b.qp.to_error().unwrap();
    p.b.qp.reset().unwrap();
    p.a.mr.write_at(0, &[7; 64]).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(1).rdma_write(remote).sge(p.a.mr.sge(0..64)?)?;
                b.wr(2).rdma_write(remote).sge(p.a.mr.sge(0..64)?)
            })
            .unwrap();
    assert_eq!(wcs.len(), 2, "{wcs:?}");
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (1, WcStatus::RETRY_EXC_ERR),
        "{wcs:?}"
    );
    assert_eq!(
        (wcs[1].wr_id, wcs[1].status),
        (2, WcStatus::WR_FLUSH_ERR),
        "{wcs:?}"
    );
    let err = wcs[0].ok().unwrap_err();
    let text = err.to_string();
    let qpn = format!("{:#x}", p.a.qp.qp_num());
    assert!(
        text.contains(&qpn) && text.contains("retry counter exceeded"),
        "{text}"
    );
    // ... and says why: the peer did not answer; and what to do.
    assert!(
        text.contains("did not answer") || text.contains("no answer"),
        "{text}"
    );
    assert!(text.contains("reset()"), "{text}");
    assert!(
        p.b.mr.to_vec(..).unwrap().iter().all(|&x| x == 0),
        "data reached the vanished peer"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_send_with_no_receive_posted_exhausts_rnr_retries() {
    let mut p = Pair::tuned(QpCaps::default(), SendOps::rc_default(), impatient);
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(9).send().inline(b"nobody listens")
            })
            .unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (9, WcStatus::RNR_RETRY_EXC_ERR),
        "{wcs:?}"
    );
    assert_eq!(p.a.qp.state().unwrap(), QpState::Err);
    let text = wcs[0].ok().unwrap_err().to_string();
    assert!(
        text.contains("RNR retry counter exceeded") && text.contains("no receive posted"),
        "{text}"
    );
    assert!(text.contains("rnr_retry"), "{text}");
    let mut none = Vec::new();
    assert_eq!(p.b.recv_cq.poll_into(&mut none, 4).unwrap(), 0, "{none:?}");
}

/// What a scoped post's timeout says when a send of it waits for a
/// receive at the peer.
const RECEIVER_NOT_READY: &str = "the peer may have no receive posted (receiver not ready): \
     with rnr_retry 7 (the default) the send is retried for ever; post a receive at the \
     peer first, or set ConnectOptions::rnr_retry below 7 to get RNR_RETRY_EXC_ERR";

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_send_the_peer_has_no_receive_for_times_out_saying_the_receiver_may_not_be_ready() {
    // rnr_retry 7, the default: the send is retried for ever.
    let mut p = Pair::new();
    assert_eq!(p.opts.rnr_retry, 7);
    let err =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, Duration::from_millis(300), |b| {
                b.wr(9).send().inline(b"nobody listens")
            })
            .unwrap_err();
    println!("{err}");
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let text = err.to_string();
    let qpn = format!("{:#x}", p.a.qp.qp_num());
    assert!(
        text.starts_with("timed out after ")
            && text.contains(&format!("waiting for 1 completion of QP {qpn} (0 arrived)")),
        "{text}"
    );
    assert!(
        text.contains(
            "a send of the batch has not completed, and a send waits for a receive at the peer"
        ),
        "{text}"
    );
    assert!(text.contains(RECEIVER_NOT_READY), "{text}");
    let mut none = Vec::new();
    assert_eq!(p.b.recv_cq.poll_into(&mut none, 4).unwrap(), 0, "{none:?}");
    // With a receive posted at the peer first, the same send goes through.
    p.a.qp.reset().unwrap();
    p.b.qp.reset().unwrap();
    p.connect();
    unsafe { p.b.qp.post_recv(10, &[p.b.mr.sge(0..64).unwrap()]) }.unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(11).send().inline(b"someone listens")
            })
            .unwrap();
    assert_wc(&wcs[0], 11, WcOpcode::SEND);
    let recv = p.b.recv_cq.wait(1, WAIT).unwrap()[0];
    assert_wc(&recv, 10, WcOpcode::RECV);
    assert_eq!(p.b.mr.to_vec(..15).unwrap(), b"someone listens");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_batch_larger_than_the_send_queue_is_refused_whole() {
    let caps = QpCaps {
        max_send_wr: 16,
        ..QpCaps::default()
    };
    let mut p = Pair::with(caps, SendOps::rc_default());
    let depth = p.a.qp.caps().max_send_wr;
    p.a.mr.write_at(0, b"12345678").unwrap();
    let remote = p.b.mr.remote(..).unwrap();
    // The work request past the depth is refused when it is added, before
    // the provider sees it; the batch, dropped, is aborted whole.
    let mut batch = p.a.qp.batch();
    for i in 0..=depth {
        let r = remote.slice(u64::from(i) * 8, 8).unwrap();
        let added = batch
            .wr(u64::from(i))
            .signaled()
            .rdma_write(r)
            .sge(p.a.mr.sge(0..8).unwrap());
        if i < depth {
            added.unwrap();
        } else {
            let err = added.unwrap_err();
            assert!(
                matches!(err, Error::SendQueueFull { batch, depth: d } if batch == depth + 1 && d == depth),
                "{err}"
            );
        }
    }
    assert_eq!(batch.len(), depth);
    drop(batch);
    // Nothing of it was posted: no completion, no byte at the peer.
    std::thread::sleep(Duration::from_millis(300));
    let mut none = Vec::new();
    assert_eq!(p.a.send_cq.poll_into(&mut none, 64).unwrap(), 0, "{none:?}");
    assert!(p.b.mr.to_vec(..).unwrap().iter().all(|&x| x == 0));
    // A batch that fits goes through whole, each WR exactly once.
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                for i in 0..depth {
                    let r = remote.slice(u64::from(i) * 8, 8)?;
                    b.wr(u64::from(i)).rdma_write(r).sge(p.a.mr.sge(0..8)?)?;
                }
                Ok(())
            })
            .unwrap();
    let ids: BTreeSet<u64> = wcs.iter().map(|c| c.wr_id).collect();
    assert_eq!(wcs.len() as u32, depth);
    assert_eq!(ids, (0..u64::from(depth)).collect());
    assert!(wcs.iter().all(|c| c.status == WcStatus::SUCCESS), "{wcs:?}");
    let b = p.b.mr.to_vec(..).unwrap();
    for i in 0..depth as usize {
        assert_eq!(&b[i * 8..i * 8 + 8], b"12345678");
    }
    assert!(b[depth as usize * 8..].iter().all(|&x| x == 0));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_scoped_post_that_times_out_returns_after_the_flush() {
    // Patient retries (≈ 4 s × 7), a 300 ms wait: the wait runs out first.
    let mut p = Pair::tuned(QpCaps::default(), SendOps::rc_default(), |o| {
        o.timeout = 20;
        o.retry_cnt = 7;
    });
    p.b.qp.to_error().unwrap();
    p.b.qp.reset().unwrap();
    let remote = p.b.mr.remote(0..16).unwrap();
    let start = Instant::now();
    let err =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, Duration::from_millis(300), |b| {
                b.wr(1).rdma_write(remote).sge(p.a.mr.sge(0..16)?)?;
                b.wr(2).rdma_write(remote).sge(p.a.mr.sge(16..32)?)
            })
            .unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, Error::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("flushed"), "{err}");
    // Its work requests are writes, which need no receive at the peer:
    // nothing is said of receives.
    assert!(
        !err.to_string().contains("receiver not ready") && !err.to_string().contains("rnr_retry"),
        "{err}"
    );
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(20),
        "{took:?}"
    );
    // The QP was moved to ERR and its flushes drained before returning;
    // they wait in the CQ's backlog with the caller's ids, and nothing
    // else is left.
    assert_eq!(p.a.qp.state().unwrap(), QpState::Err);
    let mut rest = Vec::new();
    assert_eq!(p.a.send_cq.poll_into(&mut rest, 8).unwrap(), 2, "{rest:?}");
    let flushed = WcStatus::from_raw(mlx5dv::ffi::IBV_WC_WR_FLUSH_ERR);
    let got: Vec<_> = rest.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(got, [(1, flushed), (2, flushed)], "{rest:?}");
    assert_eq!(p.a.send_cq.poll_into(&mut rest, 8).unwrap(), 0, "{rest:?}");
    // And the QP comes back through RESET.
    p.a.qp.reset().unwrap();
    p.connect();
    p.a.mr.write_at(0, b"back").unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(3).rdma_write(remote).sge(p.a.mr.sge(0..4)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 3, WcOpcode::RDMA_WRITE);
    assert_eq!(p.b.mr.to_vec(..4).unwrap(), b"back");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn threads_posting_on_their_own_qps_share_one_cq_and_every_completion_is_accounted_for() {
    const THREADS: usize = 4;
    const BATCHES: u64 = 8;
    const PER_BATCH: u64 = 16;
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let opts = connect_options(&ctx);
    // One CQ polled from every thread: the handle is shared in a mutex.
    let shared = Arc::new(Mutex::new(CompletionQueue::new(&ctx, 1024).unwrap()));
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let mut handles = Vec::new();
    for t in 0..THREADS {
        let (ctx, pd, shared, seen) = (ctx.clone(), pd.clone(), shared.clone(), seen.clone());
        handles.push(std::thread::spawn(move || {
            let peer_cq = CompletionQueue::new(&ctx, 64).unwrap();
            let mut qp = {
                let cq = shared.lock().unwrap();
                QpBuilder::rc(&pd, &cq, &cq).build().unwrap()
            };
            let peer = QpBuilder::rc(&pd, &peer_cq, &peer_cq).build().unwrap();
            let (ea, eb) = (
                qp.endpoint(10, &opts).unwrap(),
                peer.endpoint(20, &opts).unwrap(),
            );
            qp.connect(&eb, 10, &opts).unwrap();
            peer.connect(&ea, 20, &opts).unwrap();
            let mut src = MemoryRegion::new(&pd, 4096, access_all()).unwrap();
            let dst = MemoryRegion::new(&pd, 4096, access_all()).unwrap();
            src.fill(.., t as u8 + 1).unwrap();
            let remote = dst.remote(..).unwrap();
            let qpn = qp.qp_num();
            for b in 0..BATCHES {
                let mut batch = qp.batch();
                for i in 0..PER_BATCH {
                    let off = (i * 64) as usize;
                    batch
                        .wr(b * PER_BATCH + i)
                        .signaled()
                        .rdma_write(remote.slice(i * 64, 64).unwrap())
                        .sge(src.sge(off..off + 64).unwrap())
                        .unwrap();
                }
                unsafe { batch.complete() }.unwrap();
                // Poll the shared CQ: completions of any thread may come.
                let mut got = Vec::new();
                shared
                    .lock()
                    .unwrap()
                    .wait_into(&mut got, PER_BATCH as usize, WAIT)
                    .unwrap();
                let mut seen = seen.lock().unwrap();
                for wc in got {
                    assert_eq!(wc.status, WcStatus::SUCCESS, "{wc:?}");
                    assert!(
                        seen.insert((wc.qp_num, wc.wr_id)),
                        "completion twice: {wc:?}"
                    );
                }
            }
            // Wait until the other threads have drained every completion of
            // this QP, then check its data.
            let deadline = Instant::now() + WAIT;
            loop {
                let mine = seen
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|(q, _)| *q == qpn)
                    .count();
                if mine as u64 == BATCHES * PER_BATCH || Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            assert!(dst
                .to_vec(..1024)
                .unwrap()
                .iter()
                .all(|&x| x == t as u8 + 1));
            assert!(dst.to_vec(1024..).unwrap().iter().all(|&x| x == 0));
            qpn
        }));
    }
    let qpns: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len() as u64, THREADS as u64 * BATCHES * PER_BATCH);
    for q in qpns {
        let ids: BTreeSet<u64> = seen
            .iter()
            .filter(|(n, _)| *n == q)
            .map(|(_, id)| *id)
            .collect();
        assert_eq!(ids, (0..BATCHES * PER_BATCH).collect(), "QP {q:#x}");
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn writing_where_the_peer_gave_no_write_access_is_a_remote_access_error() {
    // B's region allows remote reads only; B's QP allows remote writes.
    let mut p = Pair::new();
    let read_only = MemoryRegion::new(
        &p.pd,
        4096,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    )
    .unwrap();
    p.a.mr.write_at(0, &[9; 64]).unwrap();
    let target = read_only.remote(0..64).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(1).rdma_write(target).sge(p.a.mr.sge(0..64)?)?;
                b.wr(2).rdma_write(target).sge(p.a.mr.sge(0..64)?)
            })
            .unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (1, WcStatus::REM_ACCESS_ERR),
        "{wcs:?}"
    );
    assert_eq!(
        (wcs[1].wr_id, wcs[1].status),
        (2, WcStatus::WR_FLUSH_ERR),
        "{wcs:?}"
    );
    assert!(
        read_only.as_slice().unwrap().iter().all(|&x| x == 0),
        "a refused write landed"
    );
    // The errors say why and what next: the region's access or the rkey,
    // then reset and connect it again; the flushed one, that it did not run.
    let text = wcs[0].ok().unwrap_err().to_string();
    for cause in [
        "remote access error",
        "rkey",
        "REMOTE_WRITE",
        "reset()",
        "connect_to",
    ] {
        assert!(text.contains(cause), "{cause}: {text}");
    }
    let text = wcs[1].ok().unwrap_err().to_string();
    for cause in [
        "Flushed",
        "did not run",
        "earlier work request failed",
        "reset()",
    ] {
        assert!(text.contains(cause), "{cause}: {text}");
    }
    // Reading it is allowed: after recovery an RDMA read of it works.
    p.a.qp.reset().unwrap();
    p.b.qp.reset().unwrap();
    p.connect();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(3).rdma_read(target).sge(p.a.mr.sge_mut(0..64)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 3, WcOpcode::RDMA_READ);
    assert_eq!(p.a.mr.to_vec(..64).unwrap(), &[0; 64]);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_read_into_a_region_without_local_write_is_a_local_protection_error_that_says_so() {
    // The device writes an RDMA read's destination: a region registered
    // without LOCAL_WRITE cannot take it.
    let mut p = Pair::new();
    let mut no_local_write = MemoryRegion::new(&p.pd, 4096, AccessFlags::empty()).unwrap();
    p.b.mr.write_at(0, &[3; 64]).unwrap();
    let source = p.b.mr.remote(0..64).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(4)
                    .rdma_read(source)
                    .sge(no_local_write.sge_mut(0..64)?)
            })
            .unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (4, WcStatus::LOC_PROT_ERR),
        "{wcs:?}"
    );
    let text = wcs[0].ok().unwrap_err().to_string();
    let qpn = format!("{:#x}", p.a.qp.qp_num());
    for cause in [
        qpn.as_str(),
        "local protection error",
        "LOCAL_WRITE",
        "reset()",
    ] {
        assert!(text.contains(cause), "{cause}: {text}");
    }
    assert!(
        no_local_write.as_slice().unwrap()[..64]
            .iter()
            .all(|&x| x == 0),
        "the refused read landed"
    );
    // The opcode of a failed completion is undefined: Debug says so.
    assert!(
        format!("{:?}", wcs[0]).contains("opcode: undefined"),
        "{wcs:?}"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_qp_that_refuses_remote_writes_fails_them_even_into_a_writable_region() {
    // B's QP is connected without REMOTE_WRITE in its access flags: the
    // responder NAKs the request as invalid (not an rkey violation), which
    // the requester reports as a remote invalid request error.
    let mut p = Pair::tuned(QpCaps::default(), SendOps::rc_default(), |o| {
        o.access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    });
    let target = p.b.mr.remote(0..64).unwrap();
    p.a.mr.write_at(0, &[5; 64]).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(7).rdma_write(target).sge(p.a.mr.sge(0..64)?)
            })
            .unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (7, WcStatus::REM_INV_REQ_ERR),
        "{wcs:?}"
    );
    assert_eq!(wcs[0].status.to_string(), "remote invalid request error");
    assert!(
        p.b.mr.to_vec(..).unwrap().iter().all(|&x| x == 0),
        "a refused write landed"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_cq_overrun_keeps_the_completions_that_fit_and_drops_the_rest() {
    // The send CQ holds fewer completions than are posted signalled, and
    // nobody polls until all were posted. What the crate can promise: the
    // completions that fit arrive intact and in order, nothing is invented
    // or duplicated, and the process and the QP stay usable. What soft-RoCE
    // does with the rest: drops them (and raises IBV_EVENT_CQ_ERR on the
    // async event queue); mlx5 moves the CQ to error and raises the same
    // event; the crate docs say to size CQs for the completions they can
    // hold.
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let opts = connect_options(&ctx);
    let mut small = CompletionQueue::new(&ctx, 4).unwrap();
    let cap = small.capacity();
    let peer_cq = CompletionQueue::new(&ctx, 64).unwrap();
    let caps = QpCaps {
        max_send_wr: 4 * cap + 8,
        ..QpCaps::default()
    };
    let mut qp = QpBuilder::rc(&pd, &small, &small)
        .caps(caps)
        .build()
        .unwrap();
    let peer = QpBuilder::rc(&pd, &peer_cq, &peer_cq).build().unwrap();
    let (ea, eb) = (
        qp.endpoint(1, &opts).unwrap(),
        peer.endpoint(2, &opts).unwrap(),
    );
    qp.connect(&eb, 1, &opts).unwrap();
    peer.connect(&ea, 2, &opts).unwrap();
    let mut src = MemoryRegion::new(&pd, 4096, access_all()).unwrap();
    let dst = MemoryRegion::new(&pd, 4096, access_all()).unwrap();
    src.fill(.., 3).unwrap();
    let n = u64::from(2 * cap + 4);
    let mut batch = qp.batch();
    for i in 0..n {
        let r = dst.remote(..).unwrap().slice(i * 8, 8).unwrap();
        batch
            .wr(i)
            .signaled()
            .rdma_write(r)
            .sge(src.sge(0..8).unwrap())
            .unwrap();
    }
    unsafe { batch.complete() }.unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        small.poll_into(&mut got, 64).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!got.is_empty() && got.len() as u64 <= n, "{got:?}");
    assert!(
        got.len() as u32 <= cap,
        "more completions than the CQ holds: {got:?}"
    );
    for (i, wc) in got.iter().enumerate() {
        assert_wc(wc, i as u64, WcOpcode::RDMA_WRITE);
        assert_eq!(wc.qp_num, qp.qp_num());
    }
    // Every write was executed, whether or not its completion fit.
    let d = dst.to_vec(..).unwrap();
    assert!(d[..n as usize * 8].iter().all(|&x| x == 3));
    assert!(d[n as usize * 8..].iter().all(|&x| x == 0));
    assert_eq!(qp.state().unwrap(), QpState::Rts);
    let r = dst.remote(1024..1032).unwrap();
    if ctx.is_mlx5() {
        // mlx5 moves an overrun CQ to error for good (IBV_EVENT_CQ_ERR):
        // it takes no completion any more, so a post waiting on it times
        // out (and is stopped), while the write itself still runs.
        let events = ctx.async_events().unwrap();
        assert_eq!(
            events.get_event(WAIT).unwrap(),
            AsyncEvent::CqErr { cq: small.id() }
        );
        let err = qp
            .post_and_wait(&mut small, Duration::from_millis(500), |b| {
                b.wr(999).rdma_write(r).sge(src.sge(0..8)?)
            })
            .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert_eq!(dst.to_vec(1024..1032).unwrap(), [3; 8]);
        return;
    }
    // The QP still works once its CQ is drained.
    let wcs = qp
        .post_and_wait(&mut small, WAIT, |b| {
            b.wr(999).rdma_write(r).sge(src.sge(0..8)?)
        })
        .unwrap();
    assert_wc(&wcs[0], 999, WcOpcode::RDMA_WRITE);
}
