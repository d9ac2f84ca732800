//! XRC through the safe layer: an XRC domain, XRC SRQs in it, an XRC
//! target QP and an initiator connected to it, on one device. Each send
//! lands in the SRQ its work request names (checked byte for byte, with
//! its completion's status, opcode, length and QP number); RDMA writes,
//! reads and atomics go through the target; an SRQ of another domain is
//! refused; two contexts that open one file share its domain. An XRC SRQ
//! dropped with receives posted is kept by its CQ until the CQ goes: its
//! completions keep their own work request ids, never a new SRQ's; one
//! never posted on is destroyed at once.
//!
//! Run by `scripts/test` on the software mlx5 device and in the soft-RoCE
//! guest. Soft-RoCE has no XRC: there every test checks that the crate
//! refuses XRC with `Error::Unsupported` before making anything (decided
//! by `Context::is_mlx5`, never skipped).

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use support::rig::*;

/// On a device without XRC (soft-RoCE): each way into XRC is refused with
/// `Unsupported`. Returns whether the device is an mlx5 one (with XRC).
fn xrc_or_refused(ctx: &Context) -> bool {
    if ctx.is_mlx5() {
        return true;
    }
    let e = XrcDomain::open(ctx).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let file = tempfile("refused");
    let e = XrcDomain::open_file(ctx, &file, true).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let pd = ProtectionDomain::new(ctx).unwrap();
    let cq = CompletionQueue::new(ctx, 16).unwrap();
    let e = QpBuilder::xrc_ini(&pd, &cq).build().unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    false
}

/// A fresh file for an XRC domain, removed when the test's process ends.
fn tempfile(tag: &str) -> std::fs::File {
    let path = std::env::temp_dir().join(format!("mlx5dv-xrc-{tag}-{}", std::process::id()));
    let f = std::fs::File::create(&path).expect("temporary file");
    let _ = std::fs::remove_file(&path);
    f
}

/// An initiator in `ini_pd` connected to a target in `domain`.
fn connected(
    ini_pd: &ProtectionDomain,
    send_cq: &CompletionQueue,
    domain: &XrcDomain,
    opts: &ConnectOptions,
) -> (XrcIniQp, XrcTgtQp) {
    let ini = QpBuilder::xrc_ini(ini_pd, send_cq)
        .build()
        .expect("XRC initiator");
    let tgt = XrcTgtQp::new(domain).expect("XRC target");
    let (psn_i, psn_t) = (0x111, 0x222);
    let ei = ini.endpoint(psn_i, opts).unwrap();
    let et = tgt.endpoint(psn_t, opts).unwrap();
    tgt.connect(&ei, psn_t, opts).expect("connect the target");
    ini.connect(&et, psn_i, opts)
        .expect("connect the initiator");
    assert_eq!(ini.state().unwrap(), QpState::Rts);
    assert_eq!(tgt.state().unwrap(), QpState::Rts);
    (ini, tgt)
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn each_send_lands_in_the_srq_it_names_and_rdma_and_atomics_go_through_the_target() {
    let ctx = open();
    if !xrc_or_refused(&ctx) {
        return;
    }
    let opts = connect_options(&ctx);
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let mut send_cq = CompletionQueue::new(&ctx, 64).unwrap();
    let mut srq_cq = CompletionQueue::new(&ctx, 64).unwrap();
    let domain = XrcDomain::open(&ctx).unwrap();
    let s1 = SharedReceiveQueue::new_xrc(&pd, &domain, &srq_cq, 16, 1).unwrap();
    let s2 = SharedReceiveQueue::new_xrc(&pd, &domain, &srq_cq, 16, 1).unwrap();
    let (n1, n2) = (s1.srq_num().unwrap(), s2.srq_num().unwrap());
    assert_ne!(n1, n2);
    let (mut ini, tgt) = connected(&pd, &send_cq, &domain, &opts);
    let mut src = MemoryRegion::new(&pd, MR_LEN, access_all()).unwrap();
    let mut dst = MemoryRegion::new(&pd, MR_LEN, access_all()).unwrap();
    let data = pattern(4096, 5);
    src.write_at(0, &data).unwrap();

    // A send to s2 (not s1): s2's receive takes it.
    unsafe {
        s1.post_recv(101, &[dst.sge_mut(0..1024).unwrap().into()])
            .unwrap();
        s2.post_recv(102, &[dst.sge_mut(1024..2048).unwrap().into()])
            .unwrap();
    }
    let wcs = ini
        .post_and_wait(&mut send_cq, WAIT, |b| {
            b.wr(1, XrcSrqn(n2)).send().sge(src.sge(0..200)?)
        })
        .unwrap();
    assert_wc(&wcs[0], 1, WcOpcode::SEND);
    let rx = srq_cq.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], 102, WcOpcode::RECV);
    assert_eq!(
        (rx[0].byte_len, rx[0].qp_num),
        (200, tgt.qp_num()),
        "{rx:?}"
    );
    let got = dst.to_vec(..).unwrap();
    assert_eq!(&got[1024..1224], &data[..200]);
    assert!(got[..1024].iter().all(|&x| x == 0), "s1's buffer changed");

    // Then one to s1, through the plain batch.
    let mut b = ini.batch_with(SendFlags::SIGNALED);
    b.wr(2, XrcSrqn(n1))
        .send()
        .sge(src.sge(200..300).unwrap())
        .unwrap();
    // SAFETY: `src` outlives the completions waited for below.
    unsafe { b.complete() }.unwrap();
    assert_wc(&send_cq.wait(1, WAIT).unwrap()[0], 2, WcOpcode::SEND);
    let rx = srq_cq.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], 101, WcOpcode::RECV);
    assert_eq!(rx[0].byte_len, 100);
    assert_eq!(dst.to_vec(0..100).unwrap(), &data[200..300]);

    // An RDMA write and read back through the target.
    let remote = dst.remote(8192..8192 + 4096).unwrap();
    let wcs = ini
        .post_and_wait(&mut send_cq, WAIT, |b| {
            b.wr(3, XrcSrqn(n1))
                .rdma_write(remote)
                .sge(src.sge(0..4096)?)
        })
        .unwrap();
    assert_wc(&wcs[0], 3, WcOpcode::RDMA_WRITE);
    assert_eq!(dst.to_vec(8192..8192 + 4096).unwrap(), data);
    let wcs = ini
        .post_and_wait(&mut send_cq, WAIT, |b| {
            b.wr(4, XrcSrqn(n2))
                .rdma_read(remote)
                .sge(src.sge_mut(16384..16384 + 4096)?)
        })
        .unwrap();
    assert_wc(&wcs[0], 4, WcOpcode::RDMA_READ);
    assert_eq!(wcs[0].byte_len, 4096);
    assert_eq!(src.to_vec(16384..16384 + 4096).unwrap(), data);

    // An atomic fetch-and-add through the target.
    dst.write_at(32768, &7u64.to_ne_bytes()).unwrap();
    let target = dst.remote(32768..32776).unwrap();
    let wcs = ini
        .post_and_wait(&mut send_cq, WAIT, |b| {
            b.wr(5, XrcSrqn(n1))
                .atomic_fetch_add(target, 35)
                .sge(src.sge_mut(24576..24584)?)
        })
        .unwrap();
    assert_wc(&wcs[0], 5, WcOpcode::FETCH_ADD);
    assert_eq!(src.to_vec(24576..24584).unwrap(), 7u64.to_ne_bytes());
    assert_eq!(dst.to_vec(32768..32776).unwrap(), 42u64.to_ne_bytes());
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn an_srq_of_another_domain_or_past_24_bits_is_refused() {
    let ctx = open();
    if !xrc_or_refused(&ctx) {
        return;
    }
    let opts = connect_options(&ctx);
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let mut send_cq = CompletionQueue::new(&ctx, 64).unwrap();
    let mut srq_cq = CompletionQueue::new(&ctx, 64).unwrap();
    let (domain, other) = (
        XrcDomain::open(&ctx).unwrap(),
        XrcDomain::open(&ctx).unwrap(),
    );
    let elsewhere = SharedReceiveQueue::new_xrc(&pd, &other, &srq_cq, 4, 1).unwrap();
    let (mut ini, _tgt) = connected(&pd, &send_cq, &domain, &opts);
    let mut mr = MemoryRegion::new(&pd, MR_LEN, access_all()).unwrap();
    unsafe {
        elsewhere
            .post_recv(9, &[mr.sge_mut(4096..8192).unwrap().into()])
            .unwrap()
    };
    // Past 24 bits: refused before the provider is called, nothing posted.
    let e = ini
        .post_and_wait(&mut send_cq, WAIT, |b| {
            b.wr(1, XrcSrqn(1 << 24)).send().sge(mr.sge(0..8)?)
        })
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::OutOfRange {
                what: "XRC SRQ number",
                ..
            }
        ),
        "{e}"
    );
    let n = elsewhere.srq_num().unwrap();
    let wcs = ini
        .post_and_wait(&mut send_cq, WAIT, |b| {
            b.wr(2, XrcSrqn(n)).send().sge(mr.sge(0..8)?)
        })
        .unwrap();
    assert_eq!(
        (wcs[0].wr_id, wcs[0].status),
        (2, WcStatus::REM_INV_REQ_ERR),
        "{wcs:?}"
    );
    let mut none = Vec::new();
    assert_eq!(srq_cq.poll_into(&mut none, 4).unwrap(), 0, "{none:?}");
    // An XRC SRQ feeds XRC targets only: an RC QP on it is refused before C.
    assert!(elsewhere.is_xrc());
    let e = QpBuilder::rc(&pd, &send_cq, &send_cq)
        .srq(&elsewhere)
        .build()
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(why) if why.contains("XRC SRQ")),
        "{e}"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn contexts_opening_one_file_share_its_domain() {
    let ctx = open();
    if !xrc_or_refused(&ctx) {
        return;
    }
    let ctx2 = open();
    let file = tempfile("shared");
    let e = XrcDomain::open_file(&ctx, &file, false).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENOENT), "{e}");
    let domain = XrcDomain::open_file(&ctx, &file, true).unwrap();
    let domain2 = XrcDomain::open_file(&ctx2, &file, false).unwrap();
    // The SRQ is made on the second context, the target on the first.
    let pd2 = ProtectionDomain::new(&ctx2).unwrap();
    let mut cq2 = CompletionQueue::new(&ctx2, 16).unwrap();
    let srq = SharedReceiveQueue::new_xrc(&pd2, &domain2, &cq2, 4, 1).unwrap();
    let mut mr2 = MemoryRegion::new(&pd2, 4096, access_all()).unwrap();
    let opts = connect_options(&ctx);
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let mut send_cq = CompletionQueue::new(&ctx, 16).unwrap();
    let (mut ini, tgt) = connected(&pd, &send_cq, &domain, &opts);
    let mut src = MemoryRegion::new(&pd, 4096, access_all()).unwrap();
    let data = pattern(64, 77);
    src.write_at(0, &data).unwrap();
    unsafe {
        srq.post_recv(5, &[mr2.sge_mut(0..4096).unwrap().into()])
            .unwrap()
    };
    let n = srq.srq_num().unwrap();
    let wcs = ini
        .post_and_wait(&mut send_cq, WAIT, |b| {
            b.wr(6, XrcSrqn(n)).send().sge(src.sge(0..64)?)
        })
        .unwrap();
    assert_wc(&wcs[0], 6, WcOpcode::SEND);
    let rx = cq2.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], 5, WcOpcode::RECV);
    assert_eq!((rx[0].byte_len, rx[0].qp_num), (64, tgt.qp_num()));
    assert_eq!(mr2.to_vec(0..64).unwrap(), data);
}

/// An XRC SRQ dropped while a receive of it has completed and its
/// completion waits in the CQ: the completion comes back with that
/// receive's own wr_id, never as a receive of a new SRQ made in the same
/// domain on the same CQ (libmlx5 finds an XRC SRQ's receives by the SRQ's
/// user index, which the new SRQ would get if the old one were destroyed);
/// a send still naming the dropped SRQ lands in its next receive; the new
/// SRQ's receive completes only with its buffer filled.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_dropped_srqs_unpolled_completion_keeps_its_wr_id_and_is_never_a_new_srqs() {
    let ctx = open();
    if !xrc_or_refused(&ctx) {
        return;
    }
    let opts = connect_options(&ctx);
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let mut send_cq = CompletionQueue::new(&ctx, 16).unwrap();
    let mut srq_cq = CompletionQueue::new(&ctx, 16).unwrap();
    let domain = XrcDomain::open(&ctx).unwrap();
    let (mut ini, tgt) = connected(&pd, &send_cq, &domain, &opts);
    let mut src = MemoryRegion::new(&pd, 4096, access_all()).unwrap();
    let mut dst = MemoryRegion::new(&pd, 4 * 4096, access_all()).unwrap();
    let (first, second, third) = (pattern(16, 31), pattern(24, 62), pattern(32, 93));
    src.write_at(0, &first).unwrap();
    src.write_at(1024, &second).unwrap();
    src.write_at(2048, &third).unwrap();
    // The old SRQ's receives: 0..1024 and 1024..2048; the new SRQ's:
    // 8192..9216.
    let (old_a, old_b, new_r) = (0..1024, 1024..2048, 8192..9216);

    let old = SharedReceiveQueue::new_xrc(&pd, &domain, &srq_cq, 4, 1).unwrap();
    unsafe {
        old.post_recv(1001, &[dst.sge_mut(old_a.clone()).unwrap().into()])
            .unwrap();
        old.post_recv(1002, &[dst.sge_mut(old_b.clone()).unwrap().into()])
            .unwrap();
    }
    let n_old = old.srq_num().unwrap();
    let wcs = ini
        .post_and_wait(&mut send_cq, WAIT, |b| {
            b.wr(1, XrcSrqn(n_old)).send().sge(src.sge(0..16)?)
        })
        .unwrap();
    assert_wc(&wcs[0], 1, WcOpcode::SEND);
    // Acknowledged, so landed: its completion waits, unpolled, in srq_cq.
    assert_eq!(dst.to_vec(old_a.start..old_a.start + 16).unwrap(), first);
    drop(old);

    let new = SharedReceiveQueue::new_xrc(&pd, &domain, &srq_cq, 4, 1).unwrap();
    let n_new = new.srq_num().unwrap();
    assert_ne!(n_new, n_old, "the dropped SRQ's number was given again");
    unsafe {
        new.post_recv(2001, &[dst.sge_mut(new_r.clone()).unwrap().into()])
            .unwrap()
    };
    let untouched = |dst: &MemoryRegion| dst.to_vec(new_r.clone()).unwrap().iter().all(|&x| x == 0);

    // The completion waiting in the CQ is the old SRQ's first receive's.
    let rx = srq_cq.wait(1, WAIT).unwrap().to_vec();
    assert_eq!(rx.len(), 1, "{rx:?}");
    assert!(
        rx[0].wr_id != 2001 || !untouched(&dst),
        "the new SRQ's receive completed with its buffer empty: {rx:?}"
    );
    assert_wc(&rx[0], 1001, WcOpcode::RECV);
    assert_eq!((rx[0].byte_len, rx[0].qp_num), (16, tgt.qp_num()), "{rx:?}");
    let mut more = Vec::new();
    assert_eq!(srq_cq.poll_into(&mut more, 4).unwrap(), 0, "{more:?}");
    assert!(untouched(&dst), "the new SRQ's buffer changed");

    // A send still naming the dropped SRQ lands in its second receive.
    let wcs = ini
        .post_and_wait(&mut send_cq, WAIT, |b| {
            b.wr(2, XrcSrqn(n_old)).send().sge(src.sge(1024..1048)?)
        })
        .unwrap();
    assert_wc(&wcs[0], 2, WcOpcode::SEND);
    let rx = srq_cq.wait(1, WAIT).unwrap().to_vec();
    assert_wc(&rx[0], 1002, WcOpcode::RECV);
    assert_eq!(rx[0].byte_len, 24, "{rx:?}");
    assert_eq!(dst.to_vec(old_b.start..old_b.start + 24).unwrap(), second);
    assert!(untouched(&dst), "the new SRQ's buffer changed");

    // The new SRQ's receive completes with what was sent to it.
    let wcs = ini
        .post_and_wait(&mut send_cq, WAIT, |b| {
            b.wr(3, XrcSrqn(n_new)).send().sge(src.sge(2048..2080)?)
        })
        .unwrap();
    assert_wc(&wcs[0], 3, WcOpcode::SEND);
    let rx = srq_cq.wait(1, WAIT).unwrap().to_vec();
    assert_wc(&rx[0], 2001, WcOpcode::RECV);
    assert_eq!((rx[0].byte_len, rx[0].qp_num), (32, tgt.qp_num()), "{rx:?}");
    assert_eq!(dst.to_vec(new_r.start..new_r.start + 32).unwrap(), third);
    assert_eq!(srq_cq.poll_into(&mut more, 4).unwrap(), 0, "{more:?}");
}

/// An XRC SRQ in the domain of a fresh file, on a CQ of its own, with a
/// second context that tells whether the file still has a domain.
struct FileSrq {
    ctx: Context,
    probe: Context,
    file: std::fs::File,
    pd: ProtectionDomain,
    cq: CompletionQueue,
    domain: XrcDomain,
    srq: SharedReceiveQueue,
}

impl FileSrq {
    /// `None` on a device without XRC (where it checks the refusals).
    fn new(tag: &str) -> Option<FileSrq> {
        let ctx = open();
        if !xrc_or_refused(&ctx) {
            return None;
        }
        let file = tempfile(tag);
        let pd = ProtectionDomain::new(&ctx).unwrap();
        let cq = CompletionQueue::new(&ctx, 16).unwrap();
        let domain = XrcDomain::open_file(&ctx, &file, true).unwrap();
        let srq = SharedReceiveQueue::new_xrc(&pd, &domain, &cq, 4, 1).unwrap();
        Some(FileSrq {
            probe: open(),
            ctx,
            file,
            pd,
            cq,
            domain,
            srq,
        })
    }

    /// Whether the file's domain is open (in any context).
    fn domain_open(probe: &Context, file: &std::fs::File) -> bool {
        match XrcDomain::open_file(probe, file, false) {
            Ok(_) => true,
            Err(e) => {
                assert_eq!(e.errno(), Some(libc::ENOENT), "{e}");
                false
            }
        }
    }
}

/// An XRC SRQ on which no receive was posted has no completions to leave
/// behind: it is destroyed when dropped, and its domain, whose last handle
/// is dropped too, is closed at once (the domain's file has none left, as
/// a second context that opens it finds).
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn an_xrc_srq_never_posted_on_is_destroyed_when_dropped() {
    let Some(FileSrq {
        probe,
        file,
        cq,
        domain,
        srq,
        ..
    }) = FileSrq::new("never-posted")
    else {
        return;
    };
    let failures = destroy_failures();
    assert!(FileSrq::domain_open(&probe, &file));
    drop((srq, domain));
    assert!(
        !FileSrq::domain_open(&probe, &file),
        "the domain is still open"
    );
    drop(cq);
    assert_eq!(destroy_failures(), failures);
}

/// An XRC SRQ dropped with a receive posted (and not completed) is kept
/// by its CQ, with its domain, and destroyed when the CQ is: no destroy
/// fails, and the domain is closed then (as a second context that opens
/// the domain's file finds). Meanwhile the direct path refuses the CQ.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_dropped_xrc_srq_with_receives_posted_is_destroyed_with_its_cq() {
    let Some(FileSrq {
        ctx,
        probe,
        file,
        pd,
        cq,
        domain,
        srq,
    }) = FileSrq::new("retired")
    else {
        return;
    };
    let mut mr = MemoryRegion::new(&pd, 4096, access_all()).unwrap();
    unsafe {
        srq.post_recv(7, &[mr.sge_mut(0..4096).unwrap().into()])
            .unwrap()
    };
    let failures = destroy_failures();
    drop((srq, domain));
    // Kept by the CQ: the file's domain is still open.
    assert!(FileSrq::domain_open(&probe, &file), "the domain was closed");
    // Its completions may still come: the direct path refuses the CQ.
    let recv_cq = CompletionQueue::new(&ctx, 16).unwrap();
    let qp = QpBuilder::rc(&pd, &cq, &recv_cq).build().unwrap();
    let (qp, cq, e) = qp.into_direct(cq).unwrap_err().into_parts();
    assert!(
        matches!(&e, Error::InvalidArgument(why) if why.contains("keeps XRC SRQs")),
        "{e}"
    );
    drop((qp, recv_cq));
    drop(cq);
    assert_eq!(destroy_failures(), failures);
    assert!(
        !FileSrq::domain_open(&probe, &file),
        "the domain is still open"
    );
    // The receive's memory is no longer the device's.
    drop(mr);
    assert_eq!(destroy_failures(), failures);
}
