//! On a device without mlx5 direct verbs (soft-RoCE), every mlx5
//! constructor refuses with `Error::Unsupported` naming the device, before
//! calling into the mlx5 provider, and nothing crashes; the generic objects
//! made beside them keep working.
//!
//! On an mlx5 device the same constructors are asserted to succeed (and
//! the requests the device's DCI stream caps exceed to be refused by
//! libmlx5 with `EINVAL`), so that the suite means something there too.
//!
//! Run by `scripts/test` in the guest with `MLX5DV_TEST_DEVICE=rxe0`.

mod support;

use mlx5dv::*;
use support::rig::*;

fn device() -> (Context, ProtectionDomain, CompletionQueue) {
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let cq = CompletionQueue::new(&ctx, 16).unwrap();
    (ctx, pd, cq)
}

#[track_caller]
fn assert_refused<T: std::fmt::Debug>(r: Result<T>, device: &str, call: &str) {
    match r {
        Err(Error::Unsupported { what }) => {
            assert!(
                what.contains(device),
                "message does not name {device}: {what}"
            );
            assert!(what.contains(call), "message does not name {call}: {what}");
        }
        other => panic!("expected Unsupported from {call}, got {other:?}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn dci_rc_with_mlx5_ops_dct_and_mkey_are_refused_with_the_device_named() {
    let (ctx, pd, cq) = device();
    if ctx.is_mlx5() {
        return mlx5_constructors_succeed(&ctx, &pd, &cq);
    }
    let dev = ctx.name().to_string();
    assert_refused(QpBuilder::dci(&pd, &cq).build(), &dev, "mlx5dv_create_qp");
    assert_refused(
        QpBuilder::dci(&pd, &cq).dci_streams(2, 1).build(),
        &dev,
        "mlx5dv_create_qp",
    );
    for ops in [
        Mlx5SendOps::MEMCPY,
        Mlx5SendOps::RAW_WQE,
        Mlx5SendOps::MR_LIST,
        Mlx5SendOps::MR_INTERLEAVED,
    ] {
        let r = QpBuilder::rc(&pd, &cq, &cq).mlx5_send_ops(ops).build();
        assert_refused(r, &dev, "mlx5dv_create_qp");
    }
    assert_refused(
        QpBuilder::rc(&pd, &cq, &cq)
            .disable_scatter_to_cqe()
            .build(),
        &dev,
        "mlx5dv_create_qp",
    );
    let srq = SharedReceiveQueue::new(&pd, 16, 1).unwrap();
    assert_refused(Dct::new(&pd, &cq, &srq, 0xC0FFEE), &dev, "mlx5dv_create_qp");
    assert_refused(Mkey::new(&pd, 4, false), &dev, "mlx5dv_create_mkey");
    assert_refused(ctx.mlx5_caps(), &dev, "mlx5dv_query_device");

    // The plain objects still work: an RC QP comes up on the same PD.
    let qp = QpBuilder::rc(&pd, &cq, &cq).build().unwrap();
    assert_eq!(qp.state().unwrap(), QpState::Reset);
    assert!(qp.mlx5_send_ops().is_empty());
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rc_only_and_out_of_range_requests_are_refused_before_the_device_is_asked() {
    let (ctx, pd, cq) = device();
    // RC-only builders on a DCI: a typed error, whatever the device.
    let err = QpBuilder::dci(&pd, &cq)
        .mlx5_send_ops(Mlx5SendOps::MR_LIST)
        .build()
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    // More streams than 16-bit stream ids can name, at the limit + 1.
    for (conc, err_log) in [(17, 0), (2, 17)] {
        let err = QpBuilder::dci(&pd, &cq)
            .dci_streams(conc, err_log)
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::OutOfRange { value: 17, .. }), "{err}");
    }
    // At the limit, and with more errored than concurrent streams (which
    // rdma-core's own tests create), the request reaches the device check.
    // On mlx5, libmlx5 checks them against the device's DCI stream caps
    // (EINVAL beyond; create_qp in providers/mlx5/verbs.c).
    let streams_caps = ctx
        .is_mlx5()
        .then(|| ctx.mlx5_caps().unwrap().dci_streams_caps);
    for (conc, err_log) in [(16, 16), (2, 3)] {
        let got = QpBuilder::dci(&pd, &cq).dci_streams(conc, err_log).build();
        match streams_caps {
            None => {
                let err = got.unwrap_err();
                assert!(matches!(err, Error::Unsupported { .. }), "{err}");
            }
            Some(Some(c))
                if conc <= c.max_log_num_concurent && err_log <= c.max_log_num_errored =>
            {
                got.unwrap();
            }
            Some(c) => {
                let err = got.unwrap_err();
                assert!(
                    matches!(
                        err,
                        Error::Verbs {
                            call: "mlx5dv_create_qp",
                            ..
                        }
                    ) && err.errno() == Some(libc::EINVAL),
                    "dci_streams({conc}, {err_log}) beyond the caps {c:?}: {err}"
                );
            }
        }
    }
    assert!(matches!(
        Mkey::new(&pd, 0, false),
        Err(Error::OutOfRange { .. })
    ));
    assert!(matches!(
        SharedReceiveQueue::new(&pd, 0, 1),
        Err(Error::OutOfRange { .. })
    ));
}

/// On an mlx5 device every constructor the other devices refuse succeeds,
/// and the objects are what was asked for.
fn mlx5_constructors_succeed(ctx: &Context, pd: &ProtectionDomain, cq: &CompletionQueue) {
    let caps = ctx.mlx5_caps().unwrap();
    let dci = QpBuilder::dci(pd, cq).build().unwrap();
    assert_eq!(dci.state().unwrap(), QpState::Reset);
    if let Some(c) = caps
        .dci_streams_caps
        .filter(|c| c.max_log_num_concurent >= 1)
    {
        let conc = 1;
        let err_log = c.max_log_num_errored.min(1);
        QpBuilder::dci(pd, cq)
            .dci_streams(conc, err_log)
            .build()
            .unwrap();
    }
    for ops in [
        Mlx5SendOps::MEMCPY,
        Mlx5SendOps::RAW_WQE,
        Mlx5SendOps::MR_LIST,
        Mlx5SendOps::MR_INTERLEAVED,
    ] {
        if ops == Mlx5SendOps::MEMCPY && !caps.memcpy_supported() {
            continue; // no DMA MMO on this device: EOPNOTSUPP is right
        }
        let qp = QpBuilder::rc(pd, cq, cq)
            .mlx5_send_ops(ops)
            .build()
            .unwrap();
        assert_eq!(qp.mlx5_send_ops(), ops);
    }
    QpBuilder::rc(pd, cq, cq)
        .disable_scatter_to_cqe()
        .build()
        .unwrap();
    let srq = SharedReceiveQueue::new(pd, 16, 1).unwrap();
    Dct::new(pd, cq, &srq, 0xC0FFEE).unwrap();
    Mkey::new(pd, 4, false).unwrap();
}
