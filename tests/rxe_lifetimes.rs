//! Object lifetimes on a real device (soft-RoCE in the test guest): every
//! handle keeps its parents alive, so every drop order of context, PD, MR,
//! CQ, QP and AH is safe, and every destroy call succeeds (none is refused
//! because a child still exists). Run under valgrind's memcheck by the
//! leak check, this also shows nothing leaks.
//!
//! Run by `scripts/test` in the guest with `MLX5DV_TEST_DEVICE=rxe0`.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use support::rig::*;

/// One of each object, made in parent-first order (held for their drops).
#[allow(dead_code, clippy::large_enum_variant)]
enum Obj {
    Ctx(Context),
    Pd(ProtectionDomain),
    Mr(MemoryRegion),
    Cq(CompletionQueue),
    Qp(RcQp),
    Ah(AddressHandle),
}

fn make_all(ctx: &Context) -> Vec<Obj> {
    let pd = ProtectionDomain::new(ctx).unwrap();
    let mr = MemoryRegion::new(&pd, 4096, access_all()).unwrap();
    let cq = CompletionQueue::new(ctx, 16).unwrap();
    let qp = QpBuilder::rc(&pd, &cq, &cq).build().unwrap();
    let opts = connect_options(ctx);
    let grh = opts.gid_index.map(|i| Grh {
        dgid: ctx.gid(1, u32::from(i)).unwrap(),
        sgid_index: i,
        hop_limit: 1,
        traffic_class: 0,
        flow_label: 0,
    });
    let ah = AddressHandle::new(
        &pd,
        &AhAttr {
            port: 1,
            dlid: ctx.query_port(1).unwrap().lid,
            sl: 0,
            grh,
        },
    )
    .unwrap();
    vec![
        Obj::Ctx(ctx.clone()),
        Obj::Pd(pd),
        Obj::Mr(mr),
        Obj::Cq(cq),
        Obj::Qp(qp),
        Obj::Ah(ah),
    ]
}

/// The tests of this file compare the process-wide `destroy_failures()`
/// count, and one of them makes a destroy fail on purpose: they run one at
/// a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn every_drop_order_of_the_object_graph_is_safe_and_every_destroy_succeeds() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let orders = permutations(6);
    assert_eq!(orders.len(), 720);
    // Under memcheck (scripts/memcheck) every 8th order is enough to find a
    // leak or a use after free, at a tenth of the time.
    let stride = std::env::var("MLX5DV_TEST_DROP_ORDER_STRIDE")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .filter(|&s| s > 0)
        .unwrap_or(1);
    let before = destroy_failures();
    for order in orders.iter().step_by(stride) {
        // A fresh context per round, so that dropping it first is a real
        // case: the children keep it open.
        let ctx = open();
        let mut objs: Vec<Option<Obj>> = make_all(&ctx).into_iter().map(Some).collect();
        drop(ctx);
        for &i in order {
            // Objects dropped early must not break those still alive.
            if let Some(Obj::Qp(qp)) = &objs[4] {
                assert_eq!(qp.state().unwrap(), QpState::Reset);
            }
            if let Some(Obj::Mr(mr)) = &objs[2] {
                assert_eq!(mr.to_vec(..1).unwrap(), [0]);
            }
            drop(objs[i].take());
        }
    }
    assert_eq!(destroy_failures(), before, "a destroy call failed in drop");
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_destroy_the_kernel_refuses_is_counted_and_reported_not_hidden() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // An MR registered in the PD outside this crate keeps the PD busy: its
    // ibv_dealloc_pd fails (EBUSY), which Drop cannot return. The crate
    // counts it, prints one line, and forgets the PD, as documented.
    let ctx = open();
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let mut buf = vec![0u8; 4096];
    let raw_mr = unsafe {
        mlx5dv::ffi::ibv_reg_mr(
            pd.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            mlx5dv::ffi::IBV_ACCESS_LOCAL_WRITE as i32,
        )
    };
    assert!(
        !raw_mr.is_null(),
        "ibv_reg_mr: {}",
        std::io::Error::last_os_error()
    );
    let before = destroy_failures();
    drop(pd);
    assert_eq!(
        destroy_failures(),
        before + 1,
        "the refused dealloc was not counted"
    );
    // The MR (and so the PD object) is still usable and is released here.
    assert_eq!(unsafe { mlx5dv::ffi::ibv_dereg_mr(raw_mr) }, 0);
    // The context, whose last handle is this one, closes cleanly.
    let before = destroy_failures();
    drop(ctx);
    assert_eq!(destroy_failures(), before);
}
