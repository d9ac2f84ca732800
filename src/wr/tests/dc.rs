//! DCI work requests against the recording provider: the DC address's
//! address handle must be of the DCI's protection domain.

use super::*;

#[test]
fn a_dc_address_handle_of_another_pd_of_the_dcis_context_is_refused_and_nothing_posted() {
    let mut fx = Fx::new();
    let mr = fx.mr();
    let ah_ptr = &mut *fx.ah_raw as *mut ffi::ibv_ah;
    let second = fx.second_pd();
    let ah = fx.ah();
    let streams = DciStreams {
        log_num_concurent: 2,
        log_num_errored: 1,
    };
    let mut qp = fx.qp::<DcInitiator>(SendOps::rc_default(), Mlx5SendOps::empty(), Some(streams));
    assert_eq!(second.pd.context().as_ptr(), qp.pd().context().as_ptr());
    let theirs = DcAddr::new(&second.ah, 0x10, 0x20);
    let other_pd = |e: &Error| {
        matches!(e, Error::InvalidArgument(m)
            if m.starts_with("mlx5dv_wr_set_dc_addr: the DC address's address handle is of \
                              another protection domain than the DCI's (of the same device \
                              context)"))
    };
    take();
    let mut b = qp.batch();
    let e = b
        .wr(1, theirs)
        .rdma_write(remote(8))
        .sge(mr.sge(0..8).unwrap())
        .unwrap_err();
    assert!(other_pd(&e), "{e}");
    let e = b.wr_stream(2, theirs, 1).send().inline(b"x").unwrap_err();
    assert!(other_pd(&e), "{e}");
    drop(b);
    let e = qp
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(3, theirs).send().sge(mr.sge(0..8)?)
        })
        .unwrap_err();
    assert!(other_pd(&e), "{e}");
    only_aborted_batches(2);
    // An address handle of the DCI's own PD goes.
    let wcs = qp
        .post_and_wait(&mut fx.cq, Duration::from_secs(1), |b| {
            b.wr(4, DcAddr::new(&ah, 0x10, 0x20))
                .send()
                .sge(mr.sge(0..8)?)
        })
        .unwrap();
    assert_eq!(outcomes(wcs), [(4, WcStatus::SUCCESS)]);
    assert_eq!(
        args_of(&fx, "wr_set_dc_addr"),
        [vec![ptr(ah_ptr), Arg::U32(0x10), Arg::U64(0x20)]]
    );
    assert!(fx.fcq.violations.is_empty(), "{:?}", fx.fcq.violations);
}
