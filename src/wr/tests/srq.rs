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
