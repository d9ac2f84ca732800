//! The fast paths of posting and polling, on the recording provider (no
//! device): per-work-request flags tracked instead of written back, the
//! scoped post's caller ids written into a reused list, its completions
//! written in place, `poll_into`'s reservation. Each test checks what
//! reaches the provider or the caller, call by call.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::ffi;
use mlx5dv::*;
use std::ptr::NonNull;
use std::time::Duration;
use support::fakes::*;
use support::recorder::{self, builders, Wc};

const SIG: u32 = ffi::IBV_SEND_SIGNALED;
const INL: u32 = ffi::IBV_SEND_INLINE;
const FENCE: u32 = ffi::IBV_SEND_FENCE;
const SOL: u32 = ffi::IBV_SEND_SOLICITED;
const BIT63: u64 = 1 << 63;

fn source(fx: &mut Fx) -> MemoryRegion {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    unsafe { MemoryRegion::from_raw(&fx.pd, NonNull::from(&mut *fx._raw.mr), access) }.unwrap()
}

fn scoped_id_of_one_write(fx: &mut Fx, src: &MemoryRegion) -> u64 {
    recorder::take();
    let r = remote(fx, 8);
    fx.rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(1).rdma_write(r).sge(src.sge(0..8)?)
        })
        .unwrap();
    let ids = builders(&recorder::take());
    ids[0].0
}

// ----- Q1: flags -----

#[test]
fn flags_after_a_refused_wr_a_dropped_wr_and_a_full_queue() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let short = remote(&fx, 4);
    let r = remote(&fx, 64);
    recorder::take();
    let mut b = fx.rc.batch();
    b.wr(1).fence().send().sge(src.sge(0..8).unwrap()).unwrap();
    // Refused after its flags were chosen (remote too short).
    assert!(b
        .wr(2)
        .signaled()
        .solicited()
        .rdma_write(short)
        .sge(src.sge(0..8).unwrap())
        .is_err());
    // Started, flags chosen, dropped.
    drop(b.wr(3).signaled().fence());
    b.wr(4).send().sge(src.sge(0..8).unwrap()).unwrap();
    b.wr(5).signaled().send().inline(b"x").unwrap();
    b.wr(6)
        .signaled()
        .rdma_write(r)
        .sge(src.sge(0..8).unwrap())
        .unwrap();
    b.wr(7).rdma_write(r).sge(src.sge(0..8).unwrap()).unwrap();
    for i in 8..19 {
        b.wr(i).solicited().send().inline(b"y").unwrap();
    }
    // Past the queue (16): refused, with other flags.
    assert!(matches!(
        b.wr(99)
            .fence()
            .signaled()
            .send()
            .sge(src.sge(0..8).unwrap()),
        Err(Error::SendQueueFull { .. })
    ));
    assert_eq!(unsafe { b.complete() }.unwrap(), 16);
    let mut want = vec![(1, FENCE), (4, 0), (5, SIG | INL), (6, SIG), (7, 0)];
    for i in 8..19 {
        want.push((i, SOL | INL));
    }
    assert_eq!(builders(&recorder::take()), want);
}

#[test]
fn flags_do_not_leak_across_aborted_leaked_or_unsafe_batches_into_a_scoped_one() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    recorder::take();
    // Aborted batch whose last WR had its own flags.
    {
        let mut b = fx.rc.batch_with(SendFlags::SIGNALED);
        b.wr(1)
            .fence()
            .solicited()
            .send()
            .sge(src.sge(0..8).unwrap())
            .unwrap();
    }
    // Leaked batch whose last WR had its own flags.
    {
        let mut b = fx.rc.batch();
        b.wr(2).fence().signaled().send().inline(b"z").unwrap();
        std::mem::forget(b);
    }
    // A plain batch: its WR must see no flags.
    let mut b = fx.rc.batch();
    b.wr(3).send().sge(src.sge(0..8).unwrap()).unwrap();
    // Unsafe complete, last WR with FENCE|SOL.
    b.wr(4)
        .fence()
        .solicited()
        .send()
        .sge(src.sge(0..8).unwrap())
        .unwrap();
    unsafe { b.complete() }.unwrap();
    // Scoped: SIG only (and INLINE on inline).
    let r = remote(&fx, 8);
    fx.rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(5).rdma_write(r).sge(src.sge(0..8)?)?;
            b.wr(6).send().inline(b"q")?;
            b.wr(7).fence().send().sge(src.sge(0..8)?)?;
            b.wr(8).send().sge(src.sge(0..8)?)
        })
        .unwrap();
    let got: Vec<_> = builders(&recorder::take())
        .into_iter()
        .map(|(id, f)| (if id & BIT63 != 0 { 0 } else { id }, f))
        .collect();
    assert_eq!(
        got,
        [
            (1, FENCE | SOL | SIG),
            (2, FENCE | SIG | INL),
            (3, 0),
            (4, FENCE | SOL),
            (0, SIG),
            (0, SIG | INL),
            (0, SIG | FENCE),
            (0, SIG),
        ]
    );
    // Drain the unsafe batch's completions (none signalled but 0).
    let mut out = Vec::new();
    fx.cq.poll_into(&mut out, 64).unwrap();
}

#[test]
fn dci_local_ops_and_addressed_ops_keep_their_flags() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    recorder::take();
    let addr = DcAddr::new(&fx.ah, 0x12, 0x34);
    let mut b = fx.dci.batch();
    b.wr(1, addr)
        .fence()
        .send()
        .sge(src.sge(0..8).unwrap())
        .unwrap();
    b.wr(2, addr).send().sge(src.sge(0..8).unwrap()).unwrap();
    unsafe { b.complete() }.unwrap();
    assert_eq!(builders(&recorder::take()), [(1, FENCE), (2, 0)]);
    let mut out = Vec::new();
    fx.cq.poll_into(&mut out, 64).unwrap();
}

// ----- Q2: the ids list -----

#[test]
fn ids_survive_growth_reuse_restarted_wrs_errors_and_panics() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    // Grow from empty over several reallocations (capacity 4, 8, 16).
    let wcs = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            for i in 0..16 {
                // A WR started and dropped at each index first.
                drop(b.wr(1000 + i).signaled());
                b.wr(100 + i).rdma_write(r).sge(src.sge(0..8)?)?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(
        wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (100..116).collect::<Vec<_>>()
    );
    // Closure fails after 5 WRs: nothing posted; the list is lost.
    let e = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            for i in 0..5 {
                b.wr(200 + i).rdma_write(r).sge(src.sge(0..8)?)?;
            }
            Err(Error::InvalidArgument("x".into()))
        })
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)));
    // Closure panics after 3 WRs.
    let p = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = fx
            .rc
            .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
                for i in 0..3 {
                    b.wr(300 + i).rdma_write(r).sge(src.sge(0..8)?)?;
                }
                panic!("in the closure");
            });
    }));
    assert!(p.is_err());
    // The queue-full WR inside a scoped batch: refused, nothing posted.
    let e = fx
        .rc
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            for i in 0..17 {
                b.wr(400 + i).rdma_write(r).sge(src.sge(0..8)?)?;
            }
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(e, Error::SendQueueFull { .. }), "{e}");
    // Then small batches with the reused list.
    for round in 0..3u64 {
        let wcs = fx
            .rc
            .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
                drop(b.wr(9999));
                b.wr(round * 10).rdma_write(r).sge(src.sge(0..8)?)?;
                drop(b.wr(8888).fence());
                b.wr(round * 10 + 1).send().inline(b"a")
            })
            .unwrap();
        assert_eq!(
            wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            [round * 10, round * 10 + 1]
        );
    }
    assert_eq!(fx.cq.backlog_len(), 0);
    assert!(fx.fcq().queue.is_empty());
}

#[test]
fn post_and_wait_into_leaves_out_as_it_was_on_error() {
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let r = remote(&fx, 8);
    let mut out = Vec::new();
    fx.rc
        .post_and_wait_into(&mut fx.cq, Duration::from_secs(1), &mut out, |b| {
            b.wr(1).rdma_write(r).sge(src.sge(0..8)?)
        })
        .unwrap();
    let before = out.clone();
    fx.fq(RC).budget = Some(1);
    let e = fx
        .rc
        .post_and_wait_into(&mut fx.cq, Duration::from_millis(20), &mut out, |b| {
            for i in 0..3 {
                b.wr(10 + i).rdma_write(r).sge(src.sge(0..8)?)?;
            }
            Ok(())
        })
        .unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert_eq!(out, before);
    let mut back = Vec::new();
    fx.cq.poll_into(&mut back, 16).unwrap();
    assert_eq!(
        back.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        [10, 11, 12]
    );
}

#[test]
fn duplicated_own_completions_do_not_overrun_out() {
    // A device (or a stale id) reporting more of the batch's completions
    // than it has: seen > n.
    let mut fx = Fx::new();
    let src = source(&mut fx);
    let last = scoped_id_of_one_write(&mut fx, &src);
    let id0 = BIT63 | ((last + 1) & !BIT63);
    for _ in 0..40 {
        fx.fcq().push(Wc {
            wr_id: id0,
            opcode: ffi::IBV_WC_RDMA_WRITE,
            qp_num: RC_QPN,
            ..Wc::default()
        });
    }
    let r = remote(&fx, 8);
    let mut out = Vec::with_capacity(2);
    fx.rc
        .post_and_wait_into(&mut fx.cq, Duration::from_secs(1), &mut out, |b| {
            b.wr(1).rdma_write(r).sge(src.sge(0..8)?)?;
            b.wr(2).rdma_write(r).sge(src.sge(0..8)?)
        })
        .unwrap();
    eprintln!(
        "dup: {} completions: {:?}",
        out.len(),
        out.iter().map(|w| w.wr_id).collect::<Vec<_>>()
    );
    assert_eq!(out.last().unwrap().wr_id, 2);
}

#[test]
fn poll_into_with_a_large_max_on_an_empty_big_cq_reserves_little() {
    let mut fx = Fx::new();
    let caps = CAPS;
    let (qp, mut cq) = fx.extra_rc(0x00AB_CD77, caps, 1 << 22);
    let mut v = Vec::new();
    assert_eq!(cq.poll_into(&mut v, usize::MAX).unwrap(), 0);
    assert!(
        v.capacity() < 1024,
        "allocated {} entries for nothing",
        v.capacity()
    );
    drop(qp);
    drop(cq);
}
