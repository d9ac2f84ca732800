//! The direct path's CQ on mlx5 hardware: what a refused `into_direct`
//! gives back, a CQ holding completions not yet polled, and completions a
//! failed scoped post or a panicking poll callback must not lose.
//!
//! Every test is `#[ignore]`d; run them with
//! `MLX5DV_TEST_MLX5_DEVICE=mlx5_0 cargo test --test mlx5_hw_direct_cq -- --ignored`
//! (or under `scripts/mlx5-sim`, which provides a software mlx5_0, with or
//! without `MLX5DV_SIM_THREAD=0`: the tests step the device themselves
//! then).

mod support;

use mlx5dv::direct::{DirectRc, DirectWc};
use mlx5dv::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::hw::open;
use support::rig::{self, pattern, WAIT};

extern "C" {
    fn dlsym(handle: *mut std::ffi::c_void, name: *const std::ffi::c_char)
        -> *mut std::ffi::c_void;
}

type StepFn = extern "C" fn() -> i32;

/// The software device's step function when it runs only when stepped
/// (`MLX5DV_SIM_THREAD=0`).
fn stepper() -> Option<StepFn> {
    if std::env::var("MLX5DV_SIM_THREAD").as_deref() != Ok("0") {
        return None;
    }
    // SAFETY: RTLD_DEFAULT (null) and a NUL-terminated name.
    let p = unsafe { dlsym(std::ptr::null_mut(), c"mlx5dv_sim_step".as_ptr()) };
    assert!(!p.is_null(), "mlx5dv_sim_step not found");
    // SAFETY: the software device exports `int mlx5dv_sim_step(void)`.
    Some(unsafe { std::mem::transmute::<*mut std::ffi::c_void, StepFn>(p) })
}

/// Lets the device run what was posted: stepped, or time for its thread.
fn run_device(step: Option<StepFn>) {
    match step {
        Some(f) => while f() > 0 {},
        None => std::thread::sleep(Duration::from_millis(200)),
    }
}

/// While it lives, the device is stepped from a thread of its own (after
/// `delay`), as a device thread would run it; nothing without a stepper.
struct Background {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    fn new(step: Option<StepFn>, delay: Duration) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = step.map(|f| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                std::thread::sleep(delay);
                while !stop.load(Ordering::Acquire) {
                    if f() == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            })
        });
        Background { stop, thread }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

fn caps(send: u32) -> QpCaps {
    QpCaps {
        max_send_wr: send,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

fn connect(a: &RcQp, b: &RcQp, opts: &ConnectOptions) {
    let ea = a.endpoint(0x100, opts).unwrap();
    let eb = b.endpoint(0x200, opts).unwrap();
    a.connect_to(&eb, opts).unwrap();
    b.connect_to(&ea, opts).unwrap();
}

/// Leaves a flushed receive's CQE on `cq`, of a QP then destroyed: one
/// libmlx5 cleans from the CQ unless `mlx5dv_init_obj` marked it the
/// application's.
fn leave_a_dead_qps_cqe(
    ctx: &Context,
    pd: &ProtectionDomain,
    cq: &CompletionQueue,
    step: Option<StepFn>,
) {
    let opts = rig::connect_options(ctx);
    let sx = CompletionQueue::new(ctx, 16).unwrap();
    let mut qpx = QpBuilder::rc(pd, &sx, cq).caps(caps(4)).build().unwrap();
    let peer = rig::side(ctx, pd, QpCaps::default(), SendOps::rc_default());
    connect(&qpx, &peer.qp, &opts);
    // SAFETY: no SGEs, so no memory.
    unsafe { qpx.post_recv(7, &[]).unwrap() };
    qpx.to_error().unwrap();
    run_device(step);
    drop(qpx);
}

/// A direct QP on `cq`, connected to a peer of its own.
fn direct_on(
    ctx: &Context,
    pd: &ProtectionDomain,
    cq: CompletionQueue,
    opts: &ConnectOptions,
) -> std::result::Result<(DirectRc, rig::Side, CompletionQueue), Error> {
    let rq = CompletionQueue::new(ctx, 16).unwrap();
    let qp = QpBuilder::rc(pd, &cq, &rq).caps(caps(64)).build().unwrap();
    let direct = qp.into_direct(cq)?;
    let peer = rig::side(ctx, pd, QpCaps::default(), SendOps::rc_default());
    let ed = direct.endpoint(0x300, opts).unwrap();
    let ep = peer.qp.endpoint(0x400, opts).unwrap();
    direct.connect_to(&ep, opts).unwrap();
    peer.qp.connect_to(&ed, opts).unwrap();
    Ok((direct, peer, rq))
}

/// Rings `n` signalled 64-byte writes (wr_ids 0..n) of `src` to `remote`,
/// each at `64 * wr_id` in both.
///
/// # Safety
///
/// `src` is neither written nor dropped until their completions are
/// polled.
unsafe fn ring_writes(direct: &mut DirectRc, src: &MemoryRegion, remote: &RemoteBuf, n: u64) {
    let mut b = direct.batch();
    for i in 0..n {
        let at = i * 64;
        b.rdma_write(
            i,
            SendFlags::SIGNALED,
            remote.slice(at, 64).unwrap(),
            src.sge(at as usize..at as usize + 64).unwrap(),
        )
        .unwrap();
    }
    // SAFETY: the caller's.
    assert_eq!(unsafe { b.ring() }, n as u32);
}

/// A QP without a send queue is refused before `mlx5dv_init_obj` marks its
/// CQ (so libmlx5 still cleans a destroyed QP's CQEs from it), and a direct
/// QP later taken on that CQ gets only its own completion: its RDMA read
/// has landed when `post_and_wait` returns, and the device writes nothing
/// after.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn a_refused_into_direct_gives_back_a_cq_whose_stale_cqes_are_never_taken() {
    let step = stepper();
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let opts = rig::connect_options(&ctx);
    let cq = CompletionQueue::new(&ctx, 256).unwrap();

    let rq0 = CompletionQueue::new(&ctx, 16).unwrap();
    let qp0 = QpBuilder::rc(&pd, &cq, &rq0).caps(caps(0)).build().unwrap();
    let (qp0, cq, refusal) = qp0.into_direct(cq).expect_err("refused").into_parts();
    drop(qp0);

    leave_a_dead_qps_cqe(&ctx, &pd, &cq, step);

    // Taken, or refused for the CQE it holds: never its CQE as our own.
    let (mut direct, mut peer, _rq) = match direct_on(&ctx, &pd, cq, &opts) {
        Ok(d) => d,
        Err(e) => {
            assert!(e.to_string().contains("not yet polled"), "{e}");
            return;
        }
    };
    let data = pattern(64, 9);
    peer.mr.write_at(0, &data).unwrap();
    let mut dst = MemoryRegion::new(&pd, 4096, rig::access_all()).unwrap();
    dst.fill(.., 0).unwrap();
    let remote = peer.mr.remote(0..64).unwrap();
    let qpn = direct.qp_num();
    let wcs = {
        // The device runs only a while after the post (when stepped here).
        let _bg = Background::new(step, Duration::from_millis(50));
        direct
            .post_and_wait(WAIT, |b| {
                b.rdma_read(42, SendFlags::SIGNALED, remote, dst.sge_mut(0..64)?)
            })
            .map(<[DirectWc]>::to_vec)
    };
    // The borrow of `dst` has ended: the device must be done with it.
    let at_return = dst.to_vec(0..64).unwrap();
    dst.fill(.., 0xee).unwrap();
    run_device(step);
    let after = dst.to_vec(0..64).unwrap();
    let wcs = wcs.expect("the read");
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert!(wcs[0].is_success(), "{:?}", wcs[0]);
    assert_eq!(
        (wcs[0].wr_id, wcs[0].qp_num, wcs[0].byte_len),
        (42, qpn, 64),
        "{:?}",
        wcs[0]
    );
    assert_eq!(
        at_return, data,
        "the read had not landed when post_and_wait returned"
    );
    assert_eq!(
        after,
        vec![0xee; 64],
        "the device wrote into dst after post_and_wait returned"
    );
    assert_eq!(
        direct
            .poll(16, |wc| panic!("a stray completion {wc:?}"))
            .unwrap(),
        0
    );
    // The refusal names its cause, an argument of the caller's.
    assert!(
        matches!(&refusal, Error::InvalidArgument(t) if t.contains("without a send queue")),
        "{refusal}"
    );
}

/// A CQ with completions not yet polled (a dead QP's, left on a CQ
/// `mlx5dv_init_obj` marked, so that libmlx5 did not clean them) is
/// refused: the direct reader would take them as its own.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn into_direct_refuses_a_cq_holding_completions_not_yet_polled() {
    let step = stepper();
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let opts = rig::connect_options(&ctx);
    let cq = CompletionQueue::new(&ctx, 256).unwrap();
    // The application's, as after a successful mlx5dv_init_obj.
    let mut dvcq = ffi::mlx5dv_cq::default();
    let mut obj = ffi::mlx5dv_obj::default();
    // `struct ibv_cq_ex` starts with `struct ibv_cq` (`ibv_cq_ex_to_cq`).
    obj.cq.in_ = cq.as_ptr().cast::<ffi::ibv_cq>();
    obj.cq.out = &mut dvcq;
    assert_eq!(
        // SAFETY: a live CQ; the out-struct is writable and outlives the
        // call.
        unsafe { ffi::mlx5dv_init_obj(&mut obj, u64::from(ffi::MLX5DV_OBJ_CQ)) },
        0
    );
    leave_a_dead_qps_cqe(&ctx, &pd, &cq, step);
    let Err(e) = direct_on(&ctx, &pd, cq, &opts) else {
        panic!("a CQ holding a dead QP's CQE was taken");
    };
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("not yet polled"), "{e}");
}

/// A scoped post that times out keeps what it read and what was flushed:
/// the write's success and the send's flush are returned by a later poll.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn a_timed_out_scoped_post_keeps_its_completions_for_the_next_poll() {
    let step = stepper();
    let _bg = Background::new(step, Duration::ZERO);
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let mut opts = rig::connect_options(&ctx);
    opts.rnr_retry = 7; // for ever
    let cq = CompletionQueue::new(&ctx, 256).unwrap();
    let (mut direct, peer, _rq) = direct_on(&ctx, &pd, cq, &opts).unwrap();
    let src = MemoryRegion::new(&pd, 4096, rig::access_all()).unwrap();
    let remote = peer.mr.remote(0..64).unwrap();
    let r = direct.post_and_wait(Duration::from_millis(300), |b| {
        b.rdma_write(1, SendFlags::SIGNALED, remote, src.sge(0..64)?)?;
        // The peer posts no receive: RNR for ever.
        b.send(2, SendFlags::SIGNALED, src.sge(64..128)?)
    });
    assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    let mut later = Vec::new();
    direct.poll(16, |wc| later.push(wc)).unwrap();
    let got: Vec<_> = later.iter().map(|wc| (wc.wr_id, wc.status)).collect();
    assert_eq!(
        got,
        [(1, WcStatus::SUCCESS), (2, WcStatus::WR_FLUSH_ERR)],
        "{later:?}"
    );
    assert_eq!(direct.outstanding(), 0);
}

/// A poll whose callback panics loses nothing: a completion kept by a
/// scoped post is handed out again by the next poll.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn a_panicking_poll_callback_loses_no_kept_completion() {
    let step = stepper();
    let _bg = Background::new(step, Duration::ZERO);
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let opts = rig::connect_options(&ctx);
    let cq = CompletionQueue::new(&ctx, 256).unwrap();
    let (mut direct, peer, _rq) = direct_on(&ctx, &pd, cq, &opts).unwrap();
    let src = MemoryRegion::new(&pd, 4096, rig::access_all()).unwrap();
    let remote = peer.mr.remote(..).unwrap();
    // SAFETY: `src` is neither written nor dropped until the completions
    // below.
    unsafe { ring_writes(&mut direct, &src, &remote, 2) };
    // The scoped post reads both earlier completions and keeps them.
    let wcs = direct
        .post_and_wait(WAIT, |b| {
            b.rdma_write(
                9,
                SendFlags::SIGNALED,
                remote.slice(128, 64)?,
                src.sge(128..192)?,
            )
        })
        .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        direct.poll(16, |_| panic!("the callback panics"))
    }));
    assert!(panicked.is_err());
    let mut got = Vec::new();
    direct.poll(16, |wc| got.push(wc.wr_id)).unwrap();
    assert_eq!(got, [0, 1]);
}

/// A direct poll whose callback panics at its second completion: the
/// first stays read (never handed out again), the one it panicked on is
/// handed out again, first, by the next poll, and the rest follow once
/// each; nothing is outstanding after.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn a_direct_poll_whose_callback_panics_hands_out_no_completion_twice() {
    let step = stepper();
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let opts = rig::connect_options(&ctx);
    let cq = CompletionQueue::new(&ctx, 256).unwrap();
    let (mut direct, peer, _rq) = direct_on(&ctx, &pd, cq, &opts).unwrap();
    let mut src = MemoryRegion::new(&pd, 4096, rig::access_all()).unwrap();
    let data = pattern(256, 0x21);
    src.write_at(0, &data).unwrap();
    let remote = peer.mr.remote(..).unwrap();
    // SAFETY: `src` is neither written nor dropped until every completion
    // below has been polled.
    unsafe { ring_writes(&mut direct, &src, &remote, 4) };
    run_device(step);
    let _bg = Background::new(step, Duration::ZERO);
    // All four are in the CQ (the device ran them): wait for the first.
    let deadline = std::time::Instant::now() + WAIT;
    while peer.mr.to_vec(192..256).unwrap() != data[192..] {
        assert!(
            std::time::Instant::now() < deadline,
            "the writes never landed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut first = Vec::new();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        direct.poll(4, |wc| {
            first.push(wc.wr_id);
            if first.len() == 2 {
                panic!("the callback panics at its second completion");
            }
        })
    }));
    assert!(panicked.is_err());
    assert_eq!(first, [0, 1]);
    let mut after = Vec::new();
    let deadline = std::time::Instant::now() + WAIT;
    while after.len() < 3 && std::time::Instant::now() < deadline {
        direct
            .poll(16, |wc| {
                assert_eq!(wc.status, WcStatus::SUCCESS, "{wc:?}");
                after.push(wc.wr_id)
            })
            .unwrap();
    }
    assert_eq!(after, [1, 2, 3], "duplicated or lost");
    let mut more = Vec::new();
    direct.poll(16, |wc| more.push(wc.wr_id)).unwrap();
    assert!(more.is_empty(), "{more:?}");
    assert_eq!(direct.outstanding(), 0);
    assert_eq!(peer.mr.to_vec(0..256).unwrap(), data);
}
