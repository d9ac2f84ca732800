//! `Context::mlx5_caps` on a real RDMA device: a device that is not mlx5
//! (soft-RoCE in the test guest) is refused with `Error::Unsupported` naming
//! it, and the context stays usable; an mlx5 device reports its
//! capabilities.
//!
//! Run by `scripts/test` in the guest with `MLX5DV_TEST_DEVICE=rxe0`;
//! without that variable the tests are ignored, and fail if forced to run.

mod support;

use mlx5dv::mlx5::{Mlx5Caps, Mlx5ContextFlags};
use mlx5dv::*;
use support::rig::open;

/// Checks what an mlx5 device reported.
fn check_mlx5_caps(name: &str, caps: &Mlx5Caps) {
    // rdma-core reports version 0 in every release so far.
    assert_eq!(caps.version, 0, "{name}: {caps:?}");
    assert!(
        !caps.flags.contains(Mlx5ContextFlags::OBSOLETE),
        "{name} reports the obsolete flag: {caps:?}"
    );
    if let Some(s) = caps.striding_rq_caps {
        assert!(
            s.min_single_stride_log_num_of_bytes <= s.max_single_stride_log_num_of_bytes
                && s.min_single_wqe_log_num_of_strides <= s.max_single_wqe_log_num_of_strides,
            "{name}: {s:?}"
        );
    }
    assert_eq!(
        caps.memcpy_supported(),
        caps.max_wr_memcpy_length.is_some_and(|n| n > 0)
    );
    assert_eq!(caps.summary().len(), 16, "{caps}");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn mlx5_caps_are_refused_on_other_devices_and_read_on_mlx5() {
    let ctx = open();
    let name = ctx.name().to_string();
    let list = DeviceList::new().unwrap();
    let dev = list.find(&name).unwrap();
    assert_eq!(ctx.is_mlx5(), dev.is_mlx5(), "{name}");
    match ctx.mlx5_caps() {
        Ok(caps) => {
            assert!(ctx.is_mlx5(), "{name} is not mlx5 yet reported {caps:?}");
            check_mlx5_caps(&name, &caps);
            assert_eq!(ctx.mlx5_caps().unwrap(), caps, "a second query differs");
        }
        Err(Error::Unsupported { what }) => {
            assert!(!ctx.is_mlx5(), "{name} is mlx5 but was refused: {what}");
            assert_eq!(
                what,
                format!("{name} is not an mlx5 device: mlx5dv_query_device needs one")
            );
        }
        Err(e) => panic!("mlx5_caps on {name}: unexpected error {e:?}"),
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_refused_query_leaves_the_context_usable() {
    let ctx = open();
    if ctx.is_mlx5() {
        eprintln!("{} is mlx5: nothing to refuse", ctx.name());
        return;
    }
    for _ in 0..3 {
        let e = ctx.mlx5_caps().unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
        assert!(e.to_string().contains(ctx.name()), "{e}");
    }
    let attr = ctx.query_device().unwrap();
    assert!(attr.phys_port_cnt >= 1, "{attr:?}");
    assert_eq!(ctx.query_port(1).unwrap().state, PortState::Active);
    // A second context on the same device is refused the same way.
    let other = Context::open(ctx.name()).unwrap();
    assert!(matches!(other.mlx5_caps(), Err(Error::Unsupported { .. })));
}
