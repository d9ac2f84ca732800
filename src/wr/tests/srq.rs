//! RC QPs on an SRQ and the SRQ's limit, against the recording provider:
//! what is refused is refused before any C call.

use super::*;

#[test]
fn an_rc_qp_refuses_an_srq_of_another_context_before_any_c_call() {
    let fx = Fx::new();
    let other = fx.other_context();
    let other_srq = SharedReceiveQueue::new(&other.pd, 16, 1).unwrap();
    take();
    let e = QpBuilder::rc(&fx.pd, &fx.cq, &fx.cq)
        .srq(&other_srq)
        .build()
        .unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument(ref m)
            if m.contains("the SRQ belongs to fake1, the PD to fake0")),
        "{e}"
    );
    assert_eq!(take(), [], "refused before any C call");
}

#[test]
fn a_qp_on_an_srq_refuses_its_own_receives_and_keeps_the_srq_alive() {
    let mut fx = Fx::new();
    let mut mr = fx.mr();
    let srq = SharedReceiveQueue::new(&fx.pd, 16, 1).unwrap();
    let mut qp = fx.rc();
    qp.srq = Some(srq.clone());
    assert_eq!(qp.srq().map(SharedReceiveQueue::handle), Some(srq.handle()));
    take();
    let sge = mr.sge_mut(0..64).unwrap().into();
    // SAFETY (test): refused before the provider, nothing is posted.
    let e = unsafe { qp.post_recv(1, &[sge]) }.unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument(ref m)
            if m.contains("its receives come from its SRQ")),
        "{e}"
    );
    assert_eq!(take(), [], "refused before any C call");
    // The QP holds the SRQ: dropping the caller's handle destroys nothing.
    drop(srq);
    assert_eq!(take(), []);
    drop(qp);
    let names: Vec<_> = take().iter().map(|c| c.entry).collect();
    assert_eq!(names, ["destroy_srq"]);
}

#[test]
fn an_srq_limit_outside_1_to_max_wr_is_refused_before_any_c_call() {
    let fx = Fx::new();
    let srq = SharedReceiveQueue::new(&fx.pd, 16, 1).unwrap();
    take();
    for bad in [0, 17, u32::MAX] {
        let e = srq.arm_limit(bad).unwrap_err();
        assert!(
            matches!(e, Error::OutOfRange { what: "SRQ limit", value, ref limit }
                if value == u64::from(bad) && limit.contains("to 16")),
            "{e}"
        );
    }
    assert_eq!(take(), [], "refused before any C call");
}

#[test]
fn an_srq_tells_its_own_events_from_others() {
    let fx = Fx::new();
    let srq = SharedReceiveQueue::new(&fx.pd, 16, 1).unwrap();
    let h = srq.handle();
    assert!(srq.is(&AsyncEvent::SrqLimitReached { srq_handle: h }));
    assert!(srq.is(&AsyncEvent::SrqErr { srq_handle: h }));
    assert!(!srq.is(&AsyncEvent::SrqLimitReached { srq_handle: h + 1 }));
    assert!(!srq.is(&AsyncEvent::QpLastWqeReached { qp_num: h }));
}

/// An XRC SRQ over a fake SRQ (made by `ibv_create_srq` on the fake
/// context), in `domain`, completing on `cq`.
fn fake_xrc_srq(
    pd: &ProtectionDomain,
    domain: &XrcDomain,
    cq: &CompletionQueue,
) -> SharedReceiveQueue {
    let mut attr = ffi::ibv_srq_init_attr {
        attr: ffi::ibv_srq_attr {
            max_wr: 16,
            max_sge: 1,
            srq_limit: 0,
        },
        ..Default::default()
    };
    let srq = NonNull::new(unsafe { ffi::ibv_create_srq(pd.as_ptr(), &mut attr) }).unwrap();
    let parents = crate::srq::XrcParents::new(domain, cq);
    SharedReceiveQueue::wrap(srq, attr.attr, pd, Some(parents))
}

#[test]
fn an_xrc_srq_posted_on_is_destroyed_by_its_cq_and_one_never_posted_on_at_once() {
    let mut fx = Fx::new();
    let mut mr = fx.mr();
    let ctx = fx.pd.context().clone();
    let mut xrcd = fx._vctx.xrcd();
    let domain = XrcDomain::fake(&ctx, NonNull::from(&mut *xrcd));
    let mut fcq = FakeCq::new();
    let cq = unsafe { CompletionQueue::from_raw(&ctx, NonNull::new(fcq.cq()).unwrap()) }.unwrap();
    let [never, refused, failed, posted] = [(); 4].map(|_| fake_xrc_srq(&fx.pd, &domain, &cq));
    let ptr = |s: &SharedReceiveQueue| s.raw() as usize;
    let (p_refused, p_failed, p_posted) = (ptr(&refused), ptr(&failed), ptr(&posted));
    let failures = crate::destroy_failures();
    take();

    // Refused before the provider: nothing posted.
    let sges = [mr.sge(0..64).unwrap(), mr.sge(64..128).unwrap()];
    let e = unsafe { refused.post_recv(1, &sges) }.unwrap_err();
    assert!(matches!(e, Error::OutOfRange { .. }), "{e}");
    // Failed in the provider: maybe posted.
    let sge = mr.sge_mut(0..64).unwrap().into();
    let e = unsafe { failed.post_recv(FAILING_SRQ_WR_ID, &[sge]) }.unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENOMEM), "{e}");
    let sge = mr.sge_mut(64..128).unwrap().into();
    unsafe { posted.post_recv(2, &[sge]) }.unwrap();
    let calls: Vec<_> = take().iter().map(|c| (c.entry, c.obj)).collect();
    assert_eq!(
        calls,
        [("post_srq_recv", p_failed), ("post_srq_recv", p_posted)]
    );

    // Never posted on (or refused before the provider): destroyed at once.
    drop(never);
    drop(refused);
    let calls = take();
    assert_eq!(calls.len(), 2, "{calls:#?}");
    assert!(calls.iter().all(|c| c.entry == "destroy_srq"), "{calls:#?}");
    assert_eq!(calls[1].obj, p_refused);
    // Posted on (or maybe): kept by the CQ, with the domain.
    drop((failed, posted, domain));
    assert_eq!(take(), [], "destroyed before its CQ");
    drop(cq);
    let calls: Vec<_> = take().iter().map(|c| (c.entry, c.obj)).collect();
    let x = &*xrcd as *const ffi::ibv_xrcd as usize;
    assert_eq!(
        calls,
        [
            ("destroy_srq", p_failed),
            ("destroy_srq", p_posted),
            ("close_xrcd", x)
        ]
    );
    assert_eq!(crate::destroy_failures(), failures);
    drop((mr, fcq, xrcd));
}
