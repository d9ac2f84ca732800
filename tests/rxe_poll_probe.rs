//! The soft-RoCE poll workaround follows what the provider in use does:
//! rdma-core 44 to 54's rxe `next_poll` overruns the CQ when it finds it
//! empty (fixed in 55), and the first soft-RoCE CQ of a process runs that
//! sequence to find out (src/cq/soft_roce_probe.rs). Here the answer is
//! compared with the release of the libibverbs the process loaded (the
//! provider comes from the same rdma-core), and the poll loop the answer
//! chose is run across empty `next_poll`s on real traffic.
//!
//! Run by `scripts/test` in the guest with `MLX5DV_TEST_DEVICE=rxe0`, with
//! rdma-core 44 there and with rdma-core 56 by `scripts/test-rdma-core`.

mod support;

use mlx5dv::*;
use std::ptr::NonNull;
use support::rig::*;

/// The vendor id soft-RoCE reports.
const SOFT_ROCE_VENDOR_ID: u32 = 0x00FF_FFFF;

/// The rdma-core release of the libibverbs this process mapped: its file
/// is `libibverbs.so.1.<abi>.<release>.<patch>` (`/proc/self/maps` names
/// the file, not the `libibverbs.so.1` link).
fn loaded_rdma_core_release() -> Option<u32> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let path = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libibverbs.so"))?;
    let real = std::fs::canonicalize(path).ok()?;
    let parts: Vec<&str> = real.file_name()?.to_str()?.split('.').collect();
    parts.get(parts.len().checked_sub(2)?)?.parse().ok()
}

/// Whether the provider's own poll loop overruns: one receive completes on
/// a CQ wrapped with [`CompletionQueue::from_raw`] (which keeps the
/// provider's entries: no workaround), is polled with room for more (an
/// empty `next_poll`, then `end_poll`), and the next poll is asked whether
/// it finds a completion that was never written.
fn the_providers_own_loop_overruns(ctx: &Context) -> bool {
    let mut attr = ffi::ibv_cq_init_attr_ex {
        cqe: 16,
        wc_flags: u64::from(
            ffi::IBV_WC_EX_WITH_BYTE_LEN | ffi::IBV_WC_EX_WITH_IMM | ffi::IBV_WC_EX_WITH_QP_NUM,
        ),
        ..Default::default()
    };
    // SAFETY: an open context and an initialised attribute struct.
    let raw = NonNull::new(unsafe { ffi::ibv_create_cq_ex(ctx.as_ptr(), &mut attr) })
        .expect("ibv_create_cq_ex");
    let phantom = {
        let pd = ProtectionDomain::new(ctx).unwrap();
        let a = side(ctx, &pd, QpCaps::default(), SendOps::rc_default());
        // SAFETY: a live extended CQ of `ctx` with the flags from_raw
        // needs, polled only through this handle, destroyed below after
        // the handle and its QP are dropped.
        let recv_cq = unsafe { CompletionQueue::from_raw(ctx, raw) }.unwrap();
        assert!(!recv_cq.polls_one_completion_per_start());
        let send_cq = CompletionQueue::new(ctx, 16).unwrap();
        let qp = QpBuilder::rc(&pd, &send_cq, &recv_cq)
            .caps(QpCaps::default())
            .send_ops(SendOps::rc_default())
            .build()
            .unwrap();
        let mr = MemoryRegion::new(&pd, MR_LEN, access_all()).unwrap();
        let b = Side {
            qp,
            send_cq,
            recv_cq,
            mr,
        };
        let opts = connect_options(ctx);
        let mut p = Pair {
            ctx: ctx.clone(),
            pd,
            a,
            b,
            opts,
        };
        p.connect();
        // SAFETY: the region outlives the receive (the QP is destroyed
        // first).
        unsafe { p.b.qp.post_recv(7, &[p.b.mr.sge(0..64).unwrap()]).unwrap() };
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(8).send().sge(p.a.mr.sge(0..64)?)
            })
            .unwrap();
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + WAIT;
        while got.is_empty() && std::time::Instant::now() < deadline {
            p.b.recv_cq
                .poll_each(16, |wc| got.push(wc.wr_id()))
                .unwrap();
        }
        assert_eq!(got, [7]);
        let mut phantom = Vec::new();
        p.b.recv_cq
            .poll_each(16, |wc| phantom.push(format!("{wc:?}")))
            .unwrap();
        println!(
            "after an empty next_poll, the provider's own loop polled {} completion(s) never written{}",
            phantom.len(),
            phantom.first().map_or(String::new(), |w| format!(", the first {w}"))
        );
        !phantom.is_empty()
        // The QPs and the CQ handles go first; then the CQ itself.
    };
    // SAFETY: made above; its handle and the QP completing on it are gone.
    let rc = unsafe { ffi::ibv_destroy_cq(ffi::ibv_cq_ex_to_cq(raw.as_ptr())) };
    assert_eq!(rc, 0);
    phantom
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn the_soft_roce_poll_workaround_is_chosen_by_what_the_provider_does() {
    let ctx = open();
    let cq = CompletionQueue::new(&ctx, 16).unwrap();
    if ctx.query_device().unwrap().vendor_id != SOFT_ROCE_VENDOR_ID {
        assert!(
            !cq.polls_one_completion_per_start(),
            "{}: only soft-RoCE CQs get the workaround",
            ctx.name()
        );
        return;
    }
    let release = loaded_rdma_core_release().expect("the loaded libibverbs' file name");
    assert_eq!(
        cq.polls_one_completion_per_start(),
        release < 55,
        "rdma-core {release}: the workaround is for 44 to 54's rxe provider"
    );
    // What the probe found is what the provider's own loop does.
    assert_eq!(
        the_providers_own_loop_overruns(&ctx),
        cq.polls_one_completion_per_start(),
        "rdma-core {release}"
    );
    // Asked once a process: a second CQ gets the same answer.
    let again = CompletionQueue::new(&ctx, 16).unwrap();
    assert_eq!(
        again.polls_one_completion_per_start(),
        cq.polls_one_completion_per_start()
    );
    println!(
        "rdma-core {release}: soft-RoCE CQs poll {}",
        if cq.polls_one_completion_per_start() {
            "one completion per start_poll/end_poll (the provider overruns)"
        } else {
            "with the provider's own next_poll (it does not overrun)"
        }
    );
}

/// Whichever loop was chosen: completions polled across empty `next_poll`s
/// come once each, and no completion that was never written follows them.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn polls_across_an_empty_next_poll_return_each_completion_once() {
    let mut p = Pair::new();
    for round in 0..3u64 {
        for i in 0..3 {
            // SAFETY: the region outlives the receives (the pair drops its
            // QPs first).
            unsafe {
                p.b.qp
                    .post_recv(round * 10 + i, &[p.b.mr.sge(0..64).unwrap()])
                    .unwrap()
            };
        }
        for i in 0..3 {
            let wcs =
                p.a.qp
                    .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                        b.wr(100 + i).send().sge(p.a.mr.sge(0..64)?)
                    })
                    .unwrap();
            assert_wc(&wcs[0], 100 + i, WcOpcode::SEND);
        }
        // Asks for more than there are: each poll ends at an empty
        // next_poll.
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + WAIT;
        while got.len() < 3 && std::time::Instant::now() < deadline {
            p.b.recv_cq
                .poll_each(16, |wc| got.push((wc.wr_id(), wc.status())))
                .unwrap();
        }
        let want: Vec<_> = (0..3)
            .map(|i| (round * 10 + i, WcStatus::SUCCESS))
            .collect();
        assert_eq!(got, want, "round {round}");
        for _ in 0..3 {
            let n =
                p.b.recv_cq
                    .poll_each(16, |wc| panic!("a completion never written: {wc:?}"));
            assert_eq!(n.unwrap(), 0);
        }
    }
}
