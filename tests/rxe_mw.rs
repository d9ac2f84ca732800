//! Memory windows on a real RDMA device (soft-RoCE in the test guest) and
//! on the software device: two RC QPs on one device connected to each
//! other; B binds windows over its region, A reaches B's memory through
//! them. Data is checked byte for byte, every completion's status and
//! opcode too.
//!
//! Run by `scripts/test` with `MLX5DV_TEST_DEVICE` set; without it the
//! tests are ignored, and fail if forced to run. A device that does not
//! offer a window type (its `device_cap_flags` lack `MEM_WINDOW` or
//! `MEM_WINDOW_TYPE_2A/2B`) must refuse to allocate one with the crate's
//! `Error::Unsupported`, which the test then asserts instead; the software
//! device offers both types, and the test requires them there.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use support::rig::*;

/// `IBV_DEVICE_MEM_WINDOW`, `_TYPE_2A`, `_TYPE_2B`.
const MEM_WINDOW: u32 = 1 << 17;
const MEM_WINDOW_TYPE_2: u32 = (1 << 23) | (1 << 24);

fn on_sim() -> bool {
    std::env::var("MLX5DV_SIM").as_deref() == Ok("1")
}

fn ops() -> SendOps {
    SendOps::rc_default() | SendOps::BIND_MW | SendOps::LOCAL_INV | SendOps::SEND_WITH_INV
}

/// A window of type `kind` in `pd`, or `None` when the device does not
/// offer that type, after asserting that it says so (its capability
/// flags) and that the crate refuses with `Unsupported`.
fn window(ctx: &Context, pd: &ProtectionDomain, kind: MwType) -> Option<MemoryWindow> {
    let mut attr = ffi::ibv_device_attr::default();
    assert_eq!(unsafe { ffi::ibv_query_device(ctx.as_ptr(), &mut attr) }, 0);
    let flags = attr.device_cap_flags;
    let offered =
        flags & MEM_WINDOW != 0 && (kind == MwType::Type1 || flags & MEM_WINDOW_TYPE_2 != 0);
    match MemoryWindow::new(pd, kind) {
        Ok(mw) => {
            assert_eq!(mw.mw_type(), kind);
            Some(mw)
        }
        Err(e) => {
            assert!(
                !on_sim() && !offered,
                "{kind:?} window refused on a device offering it (cap flags {flags:#x}): {e}"
            );
            assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
            println!("{kind:?} windows not offered here (cap flags {flags:#x}): {e}");
            None
        }
    }
}

/// A writes A's `0..len` to `to`; its one completion.
fn write_from_a(p: &mut Pair, wr_id: u64, to: RemoteBuf, len: usize) -> WorkCompletion {
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(wr_id).rdma_write(to).sge(p.a.mr.sge(0..len)?)
            })
            .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    wcs[0]
}

/// A reads `from` into A's `0..len`; its one completion.
fn read_into_a(p: &mut Pair, wr_id: u64, from: RemoteBuf, len: usize) -> WorkCompletion {
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(wr_id).rdma_read(from).sge(p.a.mr.sge_mut(0..len)?)
            })
            .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    wcs[0]
}

/// Waits for B's one send completion (a bind or an invalidate).
fn b_completes(p: &mut Pair, wr_id: u64, opcode: WcOpcode) {
    let wcs = p.b.send_cq.wait(1, WAIT).unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_wc(&wcs[0], wr_id, opcode);
}

/// After a refused access A's QP is in ERR: both QPs back to RTS.
fn reconnect(p: &mut Pair) {
    p.a.qp.reset().unwrap();
    p.b.qp.reset().unwrap();
    p.connect();
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn type1_window_is_written_and_read_through_and_unbound() {
    let mut p = Pair::with(QpCaps::default(), ops());
    let mut target = bindable(&p.pd);
    let Some(mut mw) = window(&p.ctx, &p.pd, MwType::Type1) else {
        return;
    };
    let allocated = mw.rkey();
    let bind = MwBind::new(&target, 4096..8192, remote_rw()).unwrap();
    let remote = p.b.qp.bind_mw(11, &mut mw, &bind).unwrap();
    b_completes(&mut p, 11, WcOpcode::BIND_MW);
    assert_eq!(remote.rkey, mw.rkey());
    assert_ne!(
        remote.rkey, allocated,
        "a bind gives a type 1 window a new rkey"
    );
    assert_ne!(remote.rkey, target.rkey());
    assert_eq!((remote.addr, remote.len), (target.addr() + 4096, 4096));

    // A peer's write through the window lands in the bound range only.
    let data = pattern(4096, 5);
    p.a.mr.write_at(0, &data).unwrap();
    assert_wc(
        &write_from_a(&mut p, 1, remote, 4096),
        1,
        WcOpcode::RDMA_WRITE,
    );
    let bytes = target.to_vec(..).unwrap();
    assert_eq!(&bytes[4096..8192], &data[..]);
    assert!(bytes[..4096].iter().chain(&bytes[8192..]).all(|&x| x == 0));

    // And a read through it returns what B wrote there.
    let back = pattern(4096, 77);
    target.write_at(4096, &back).unwrap();
    assert_wc(
        &read_into_a(&mut p, 2, remote, 4096),
        2,
        WcOpcode::RDMA_READ,
    );
    assert_eq!(p.a.mr.to_vec(0..4096).unwrap(), back);

    // Unbound, the rkey reaches nothing: a remote access error.
    p.b.qp.unbind_mw(12, &mut mw, &target).unwrap();
    b_completes(&mut p, 12, WcOpcode::BIND_MW);
    p.a.mr.fill(0..4096, 0xee).unwrap();
    let wc = write_from_a(&mut p, 3, remote, 64);
    assert_eq!(
        (wc.wr_id, wc.status),
        (3, WcStatus::REM_ACCESS_ERR),
        "{wc:?}"
    );
    assert_eq!(
        target.to_vec(4096..8192).unwrap(),
        back,
        "unbound window wrote"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn access_outside_a_window_or_beyond_its_rights_fails() {
    let mut p = Pair::with(QpCaps::default(), ops());
    let target = bindable(&p.pd);
    let Some(mut mw) = window(&p.ctx, &p.pd, MwType::Type1) else {
        return;
    };
    let bind = MwBind::new(&target, 0..4096, AccessFlags::REMOTE_READ).unwrap();
    let remote = p.b.qp.bind_mw(1, &mut mw, &bind).unwrap();
    b_completes(&mut p, 1, WcOpcode::BIND_MW);
    assert_wc(
        &read_into_a(&mut p, 2, remote, 4096),
        2,
        WcOpcode::RDMA_READ,
    );

    // A write through a read-only window.
    p.a.mr.fill(0..64, 0x5a).unwrap();
    let wc = write_from_a(&mut p, 3, remote, 64);
    assert_eq!(
        (wc.wr_id, wc.status),
        (3, WcStatus::REM_ACCESS_ERR),
        "{wc:?}"
    );
    reconnect(&mut p);
    // A read that runs past the window's end (the region goes on): a
    // remote access error on the software device, as the IB spec has it.
    // Soft-RoCE (seen with Linux 6.1's rxe) checks such a read against the
    // region's range only, and serves it.
    let past = RemoteBuf::unbounded(remote.addr + 4096 - 32, remote.rkey);
    let wc = read_into_a(&mut p, 4, past, 64);
    let expected = if on_sim() {
        WcStatus::REM_ACCESS_ERR
    } else {
        WcStatus::SUCCESS
    };
    assert_eq!((wc.wr_id, wc.status), (4, expected), "{wc:?}");
    assert!(target.to_vec(..).unwrap().iter().all(|&x| x == 0));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn type2_window_is_bound_in_a_batch_and_invalidated_locally_and_remotely() {
    let mut p = Pair::with(QpCaps::default(), ops());
    let target = bindable(&p.pd);
    let Some(mut mw) = window(&p.ctx, &p.pd, MwType::Type2) else {
        return;
    };
    let allocated = mw.rkey();

    // Bound with a key of our choosing, in a batch.
    let bind = MwBind::new(&target, 1024..3072, remote_rw())
        .unwrap()
        .key(0x42);
    let mut remote = None;
    let wcs =
        p.b.qp
            .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                remote = Some(b.wr(21).signaled().bind_mw(&mut mw, &bind)?);
                Ok(())
            })
            .unwrap();
    assert_wc(&wcs[0], 21, WcOpcode::BIND_MW);
    let remote = remote.unwrap();
    assert_eq!(remote.rkey, (allocated & !0xff) | 0x42);
    assert_eq!(mw.rkey(), remote.rkey);
    let data = pattern(2048, 9);
    p.a.mr.write_at(0, &data).unwrap();
    assert_wc(
        &write_from_a(&mut p, 1, remote, 2048),
        1,
        WcOpcode::RDMA_WRITE,
    );
    assert_eq!(target.to_vec(1024..3072).unwrap(), data);

    // Local invalidation: the rkey then reaches nothing.
    let wcs =
        p.b.qp
            .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                b.wr(22).signaled().local_inv(remote.rkey)
            })
            .unwrap();
    assert_wc(&wcs[0], 22, WcOpcode::LOCAL_INV);
    let wc = read_into_a(&mut p, 2, remote, 64);
    assert_eq!(
        (wc.wr_id, wc.status),
        (2, WcStatus::REM_ACCESS_ERR),
        "{wc:?}"
    );
    reconnect(&mut p);

    // Bound again (the next key), then invalidated by A's send.
    let bind = MwBind::new(&target, 0..4096, remote_rw()).unwrap();
    let mut again = None;
    let wcs =
        p.b.qp
            .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                again = Some(b.wr(23).signaled().bind_mw(&mut mw, &bind)?);
                Ok(())
            })
            .unwrap();
    assert_wc(&wcs[0], 23, WcOpcode::BIND_MW);
    let again = again.unwrap();
    assert_eq!(again.rkey, unsafe { ffi::ibv_inc_rkey(remote.rkey) });
    assert_wc(&read_into_a(&mut p, 3, again, 4096), 3, WcOpcode::RDMA_READ);
    assert_eq!(
        p.a.mr.to_vec(1024..3072).unwrap(),
        data,
        "the read returns what the first write left"
    );
    unsafe { p.b.qp.post_recv(31, &[]).unwrap() };
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(4).send_inv(again.rkey).inline(b"")
            })
            .unwrap();
    assert_wc(&wcs[0], 4, WcOpcode::SEND);
    let wcs = p.b.recv_cq.wait(1, WAIT).unwrap();
    assert_wc(&wcs[0], 31, WcOpcode::RECV);
    // Soft-RoCE (seen with Linux 6.1's rxe) does not report the
    // invalidated rkey in the receive completion.
    if on_sim() || wcs[0].invalidated_rkey.is_some() {
        assert_eq!(wcs[0].invalidated_rkey, Some(again.rkey), "{:?}", wcs[0]);
    }
    let wc = write_from_a(&mut p, 5, again, 64);
    println!("write after the send with invalidate: {wc:?}");
    assert_eq!(
        (wc.wr_id, wc.status),
        (5, WcStatus::REM_ACCESS_ERR),
        "{wc:?}"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_zero_based_type2_window_is_addressed_from_zero() {
    let mut p = Pair::with(QpCaps::default(), ops());
    let target = bindable(&p.pd);
    let Some(mut mw) = window(&p.ctx, &p.pd, MwType::Type2) else {
        return;
    };
    let access = remote_rw() | AccessFlags::ZERO_BASED;
    let bind = MwBind::new(&target, 8192..12288, access).unwrap();
    let mut remote = None;
    let wcs =
        p.b.qp
            .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                remote = Some(b.wr(1).signaled().bind_mw(&mut mw, &bind)?);
                Ok(())
            })
            .unwrap();
    assert_wc(&wcs[0], 1, WcOpcode::BIND_MW);
    let remote = remote.unwrap();
    assert_eq!((remote.addr, remote.len), (0, 4096));
    // Window address 100 is region offset 8192 + 100.
    let data = pattern(256, 17);
    p.a.mr.write_at(0, &data).unwrap();
    let to = remote.slice(100, 256).unwrap();
    assert_wc(&write_from_a(&mut p, 2, to, 256), 2, WcOpcode::RDMA_WRITE);
    let bytes = target.to_vec(..).unwrap();
    assert_eq!(&bytes[8292..8548], &data[..]);
    assert_eq!(
        bytes.iter().filter(|&&x| x != 0).count(),
        data.iter().filter(|&&x| x != 0).count()
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn binds_are_refused_before_c() {
    let mut p = Pair::with(QpCaps::default(), ops());
    let Some(mut one) = window(&p.ctx, &p.pd, MwType::Type1) else {
        return;
    };
    let target = bindable(&p.pd);
    // A window bound past its region.
    let err = MwBind::new(&target, MR_LEN - 64..MR_LEN + 64, remote_rw()).unwrap_err();
    assert!(matches!(err, Error::OutOfRange { .. }), "{err:?}");
    assert!(err.to_string().contains("past its region"), "{err}");
    assert!(matches!(
        MwBind::new(&target, 0..0, remote_rw()),
        Err(Error::OutOfRange { .. })
    ));
    // A region without MW_BIND.
    let plain = MemoryRegion::new(&p.pd, 4096, access_all()).unwrap();
    let err = MwBind::new(&plain, 0..64, remote_rw()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::MissingAccess {
                needed: AccessFlags::MW_BIND,
                ..
            }
        ),
        "{err:?}"
    );
    // Remote write over a region the device may not write.
    let ro = MemoryRegion::new(&p.pd, 4096, AccessFlags::MW_BIND).unwrap();
    assert!(MwBind::new(&ro, 0..64, AccessFlags::REMOTE_READ).is_ok());
    let err = MwBind::new(&ro, 0..64, remote_rw()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::MissingAccess {
                needed: AccessFlags::LOCAL_WRITE,
                ..
            }
        ),
        "{err:?}"
    );
    // Access a window cannot grant.
    let err = MwBind::new(&target, 0..64, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    // A type 1 window in a batch, a zero-based type 1 bind.
    let bind = MwBind::new(&target, 0..64, remote_rw()).unwrap();
    let mut b = p.b.qp.batch();
    let err = b.wr(1).bind_mw(&mut one, &bind).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    drop(b);
    let err = p.b.qp.bind_mw(1 << 63, &mut one, &bind).unwrap_err();
    assert!(matches!(err, Error::OutOfRange { .. }), "{err:?}");
    let zero = MwBind::new(&target, 0..64, remote_rw() | AccessFlags::ZERO_BASED).unwrap();
    let err = p.b.qp.bind_mw(1, &mut one, &zero).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    // A QP created without BIND_MW.
    if let Some(mut two) = window(&p.ctx, &p.pd, MwType::Type2) {
        let mut plain_ops = Pair::new();
        let mut b = plain_ops.a.qp.batch();
        let err = b.wr(1).bind_mw(&mut two, &bind).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    }
    // Another PD's region.
    let other_pd = ProtectionDomain::new(&p.ctx).unwrap();
    let elsewhere = bindable(&other_pd);
    let bind = MwBind::new(&elsewhere, 0..64, remote_rw()).unwrap();
    let err = p.b.qp.bind_mw(1, &mut one, &bind).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    // Nothing reached the send queue.
    assert!(p
        .b
        .send_cq
        .wait(1, std::time::Duration::from_millis(200))
        .is_err());
}

/// On the software device, as the kernel's mlx5 driver does, a region
/// deregistered under a bound window goes away, and the window reaches
/// nothing; soft-RoCE refuses the deregistration, and the region's drop
/// then keeps its buffer (leaked, reported) rather than free memory the
/// window still reaches. Either way no access lands in freed memory.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_window_outliving_its_region_reaches_no_freed_memory() {
    let mut p = Pair::with(QpCaps::default(), ops());
    let target = bindable(&p.pd);
    let Some(mut mw) = window(&p.ctx, &p.pd, MwType::Type1) else {
        return;
    };
    let bind = MwBind::new(&target, 0..4096, remote_rw()).unwrap();
    let remote = p.b.qp.bind_mw(1, &mut mw, &bind).unwrap();
    b_completes(&mut p, 1, WcOpcode::BIND_MW);
    drop(target);
    p.a.mr.fill(0..64, 0x11).unwrap();
    let wc = write_from_a(&mut p, 2, remote, 64);
    if on_sim() {
        assert_eq!(
            (wc.wr_id, wc.status),
            (2, WcStatus::REM_ACCESS_ERR),
            "{wc:?}"
        );
    } else {
        // The region is still registered (the buffer leaked): the write
        // lands in memory nothing else owns.
        assert!(
            wc.status == WcStatus::SUCCESS || wc.status == WcStatus::REM_ACCESS_ERR,
            "{wc:?}"
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_region_keeps_its_memory_while_a_window_bound_to_it_is_allocated() {
    let mut p = Pair::with(QpCaps::default(), ops());
    let mut target = bindable(&p.pd);
    let Some(mut mw) = window(&p.ctx, &p.pd, MwType::Type1) else {
        return;
    };
    let bind = MwBind::new(&target, 0..4096, remote_rw()).unwrap();
    p.b.qp.bind_mw(1, &mut mw, &bind).unwrap();
    b_completes(&mut p, 1, WcOpcode::BIND_MW);
    // The window may reach the buffer: it is neither moved nor handed to
    // another PD (refused before C) ...
    let other = ProtectionDomain::new(&p.ctx).unwrap();
    for result in [target.rereg_new_buffer(4096), target.rereg_pd(&other)] {
        match result {
            Err(Error::InvalidArgument(why)) => assert!(why.contains("window"), "{why}"),
            other => panic!("expected a refusal naming the window, got {other:?}"),
        }
    }
    assert_eq!(target.len(), MR_LEN, "the region is untouched");
    // ... until the window is gone.
    drop(mw);
    match target.rereg_pd(&other) {
        Ok(()) => assert_eq!(target.len(), MR_LEN),
        Err(Error::Unsupported { what }) if !on_sim() => {
            // Soft-RoCE on Linux 6.1 re-registers no region.
            assert!(what.contains("IBV_REREG_MR_ERR_CMD"), "{what}")
        }
        Err(e) => panic!("rereg after the window is gone: {e}"),
    }
}

extern "C" {
    fn dlsym(handle: *mut std::ffi::c_void, name: *const std::ffi::c_char)
        -> *mut std::ffi::c_void;
}

/// The software device's step function when it runs only when stepped
/// (`MLX5DV_SIM_THREAD=0`): work posted waits there until stepped, as on
/// a device slower than the program.
fn stepper() -> Option<extern "C" fn() -> i32> {
    if std::env::var("MLX5DV_SIM_THREAD").as_deref() != Ok("0") {
        return None;
    }
    let p = unsafe { dlsym(std::ptr::null_mut(), c"mlx5dv_sim_step".as_ptr()) };
    assert!(!p.is_null(), "mlx5dv_sim_step not found");
    Some(unsafe { std::mem::transmute::<*mut std::ffi::c_void, extern "C" fn() -> i32>(p) })
}

/// Steps a stepped device until `stop` is set (from another thread), so
/// that the waits after a stepped part of a test end.
fn keep_stepping(step: Option<extern "C" fn() -> i32>, stop: &std::sync::atomic::AtomicBool) {
    if let Some(f) = step {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            f();
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

/// A type 1 bind takes more of a send queue than libmlx5 gives a work
/// request on a QP created without `BIND_MW` (three 64-byte blocks in a
/// slot of one or two): `bind_mw` refuses such a QP before C is called,
/// and posts nothing.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_type1_bind_needs_bind_mw_among_the_send_ops() {
    let caps = QpCaps {
        max_send_wr: 4,
        ..QpCaps::default()
    };
    let mut p = Pair::with(caps, SendOps::rc_default());
    let target = bindable(&p.pd);
    let Some(mut mw) = window(&p.ctx, &p.pd, MwType::Type1) else {
        return;
    };
    let allocated = mw.rkey();
    for i in 0..4u64 {
        let bind = MwBind::new(
            &target,
            (i as usize * 64)..(i as usize * 64 + 64),
            remote_rw(),
        )
        .unwrap();
        let err = p.b.qp.bind_mw(40 + i, &mut mw, &bind).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
        assert!(err.to_string().contains("SendOps::BIND_MW"), "{err}");
        let err = p.b.qp.unbind_mw(50 + i, &mut mw, &target).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    }
    assert_eq!(mw.rkey(), allocated, "a refused bind changed the rkey");
    // Nothing reached the send queue, and the QP sends as before.
    assert!(p
        .b
        .send_cq
        .wait(1, std::time::Duration::from_millis(300))
        .is_err());
    assert_eq!(p.b.qp.state().unwrap(), QpState::Rts);
    let data = pattern(256, 9);
    p.b.mr.write_at(0, &data).unwrap();
    let to = RemoteBuf {
        addr: p.a.mr.addr(),
        len: 256,
        rkey: p.a.mr.rkey(),
    };
    let wcs =
        p.b.qp
            .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                b.wr(7).rdma_write(to).sge(p.b.mr.sge(0..256)?)
            })
            .unwrap();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_wc(&wcs[0], 7, WcOpcode::RDMA_WRITE);
    assert_eq!(p.a.mr.to_vec(0..256).unwrap(), data);
}

/// Binds left queued take up the send queue: with the queue full of
/// unpolled binds, a batch's first work request and another bind are
/// refused before the provider sees them (libmlx5's builders would write
/// their segments over the last WQE it built, a bind the device may not
/// have run yet), the binds all complete as binds, each window works,
/// and once their completions are polled the queue has its room back.
/// Under `MLX5DV_SIM_THREAD=0` the software device runs nothing until the
/// refusals are done, as a slow device would.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn binds_left_queued_take_room_from_the_next_batch() {
    let caps = QpCaps {
        max_send_wr: 4,
        ..QpCaps::default()
    };
    let step = stepper();
    let mut p = Pair::with(caps, ops());
    let depth = p.b.qp.caps().max_send_wr as usize;
    assert!((4..=64).contains(&depth), "depth {depth}");
    let mut target = bindable(&p.pd);
    let mut windows = Vec::new();
    for _ in 0..depth {
        let Some(mw) = window(&p.ctx, &p.pd, MwType::Type1) else {
            return;
        };
        windows.push(mw);
    }
    let mut remotes = Vec::new();
    for (i, mw) in windows.iter_mut().enumerate() {
        let bind = MwBind::new(&target, i * 256..i * 256 + 256, remote_rw()).unwrap();
        remotes.push(p.b.qp.bind_mw(100 + i as u64, mw, &bind).unwrap());
    }
    let to = RemoteBuf {
        addr: p.a.mr.addr(),
        len: 64,
        rkey: p.a.mr.rkey(),
    };
    p.a.mr.fill(0..64, 0).unwrap();
    p.b.mr.fill(0..64, 0x5a).unwrap();
    // The room left is 0: the binds took the whole depth.
    let full = |e: &Error| matches!(e, Error::SendQueueFull { batch: 1, depth: 0 });
    // The scoped post, refused: nothing posted.
    let err =
        p.b.qp
            .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                b.wr(1).rdma_write(to).sge(p.b.mr.sge(0..64)?)
            })
            .unwrap_err();
    assert!(full(&err), "{err:?}");
    // A batch's first work request, refused before libmlx5's builder.
    {
        let mut batch = p.b.qp.batch();
        let err = batch
            .wr(2)
            .rdma_write(to)
            .sge(p.b.mr.sge(0..64).unwrap())
            .unwrap_err();
        assert!(full(&err), "{err:?}");
        assert_eq!(batch.len(), 0);
    }
    // One bind more than the queue holds.
    let mut extra = window(&p.ctx, &p.pd, MwType::Type1).unwrap();
    let bind = MwBind::new(&target, 0..64, remote_rw()).unwrap();
    let err = p.b.qp.bind_mw(99, &mut extra, &bind).unwrap_err();
    assert!(full(&err), "{err:?}");
    assert_eq!(p.b.qp.state().unwrap(), QpState::Rts);

    // Now the device runs what was posted: the binds, each a bind.
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| keep_stepping(step, &stop));
        let wcs = p.b.send_cq.wait(depth, WAIT).unwrap().to_vec();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(wcs.len(), depth, "{wcs:?}");
        for (i, wc) in wcs.iter().enumerate() {
            assert_wc(wc, 100 + i as u64, WcOpcode::BIND_MW);
        }
    });
    assert_eq!(
        p.a.mr.to_vec(0..64).unwrap(),
        vec![0; 64],
        "a refused write ran"
    );
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| keep_stepping(step, &stop));
        // Each window reaches its own range.
        for (i, remote) in remotes.iter().enumerate() {
            let data = pattern(256, i as u8);
            p.a.mr.write_at(0, &data).unwrap();
            assert_wc(
                &write_from_a(&mut p, 200 + i as u64, *remote, 256),
                200 + i as u64,
                WcOpcode::RDMA_WRITE,
            );
            assert_eq!(target.to_vec(i * 256..i * 256 + 256).unwrap(), data);
        }
        // Polled, the binds are known done: a batch of the whole depth fits.
        p.a.mr.fill(0..64, 0).unwrap();
        let wcs =
            p.b.qp
                .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                    for k in 0..depth as u64 {
                        b.wr(300 + k).rdma_write(to).sge(p.b.mr.sge(0..64)?)?;
                    }
                    Ok(())
                })
                .unwrap()
                .to_vec();
        assert_eq!(wcs.len(), depth);
        for (k, wc) in wcs.iter().enumerate() {
            assert_wc(wc, 300 + k as u64, WcOpcode::RDMA_WRITE);
        }
        assert_eq!(p.a.mr.to_vec(0..64).unwrap(), vec![0x5a; 64]);

        // A scoped post's own completion also retires the binds queued
        // before it: depth - 1 binds, a post of one, then one of the depth.
        for (i, mw) in windows.iter_mut().take(depth - 1).enumerate() {
            p.b.qp.unbind_mw(400 + i as u64, mw, &target).unwrap();
        }
        let wcs =
            p.b.qp
                .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                    b.wr(500).rdma_write(to).sge(p.b.mr.sge(0..64)?)
                })
                .unwrap()
                .to_vec();
        assert_eq!(wcs.len(), 1);
        assert_wc(&wcs[0], 500, WcOpcode::RDMA_WRITE);
        let wcs =
            p.b.qp
                .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                    for k in 0..depth as u64 {
                        b.wr(600 + k).rdma_write(to).sge(p.b.mr.sge(0..64)?)?;
                    }
                    Ok(())
                })
                .unwrap()
                .to_vec();
        assert_eq!(wcs.len(), depth);
        // The unbinds' completions were kept for the next poll, in order.
        let kept = p.b.send_cq.wait(depth - 1, WAIT).unwrap().to_vec();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(kept.len(), depth - 1, "{kept:?}");
        for (i, wc) in kept.iter().enumerate() {
            assert_wc(wc, 400 + i as u64, WcOpcode::BIND_MW);
        }
    });
    target.fill(.., 0).unwrap();
}

/// A pair whose B side sends on a CQ of `cqe` entries of its own.
fn pair_with_send_cq(cqe: u32, caps: QpCaps) -> Pair {
    Pair::with_b_send_cq(cqe, caps, ops())
}

/// Each bind's completion takes a place in the send CQ until a poll reads
/// it: with the CQ's capacity of binds unpolled, one bind more, a scoped
/// post and a shrinking resize are refused before C (the device would
/// overrun the CQ and drop completions), every bind posted completes as a
/// bind, and once they are polled the places are free again.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn binds_are_held_to_the_send_cqs_capacity() {
    let caps = QpCaps {
        max_send_wr: 32,
        ..QpCaps::default()
    };
    let mut p = pair_with_send_cq(2, caps);
    let capacity = p.b.send_cq.capacity() as usize;
    assert!(
        capacity < p.b.qp.caps().max_send_wr as usize,
        "capacity {capacity}"
    );
    let mut target = bindable(&p.pd);
    let mut windows = Vec::new();
    for _ in 0..=capacity {
        let Some(mw) = window(&p.ctx, &p.pd, MwType::Type1) else {
            return;
        };
        windows.push(mw);
    }
    let mut remotes = Vec::new();
    for (i, mw) in windows.iter_mut().take(capacity).enumerate() {
        let bind = MwBind::new(&target, i * 256..i * 256 + 256, remote_rw()).unwrap();
        remotes.push(p.b.qp.bind_mw(100 + i as u64, mw, &bind).unwrap());
    }
    assert_eq!(p.b.send_cq.binds_in_flight() as usize, capacity);
    let over = |e: &Error| matches!(e, Error::OutOfRange { .. }) && e.to_string().contains("bind");
    // One bind more than the CQ holds.
    let extra = MwBind::new(&target, 0..64, remote_rw()).unwrap();
    let err =
        p.b.qp
            .bind_mw(99, &mut windows[capacity], &extra)
            .unwrap_err();
    assert!(over(&err), "{err:?}");
    // A scoped post of one: its completion has no place left.
    let to = RemoteBuf {
        addr: p.a.mr.addr(),
        len: 64,
        rkey: p.a.mr.rkey(),
    };
    p.a.mr.fill(0..64, 0).unwrap();
    p.b.mr.fill(0..64, 0x3c).unwrap();
    let err =
        p.b.qp
            .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                b.wr(1).rdma_write(to).sge(p.b.mr.sge(0..64)?)
            })
            .unwrap_err();
    assert!(over(&err), "{err:?}");
    // A resize below what the binds need.
    let err = p.b.send_cq.resize(capacity as u32 - 1).unwrap_err();
    assert!(over(&err), "{err:?}");
    assert_eq!(p.b.send_cq.capacity() as usize, capacity);
    assert_eq!(p.b.qp.state().unwrap(), QpState::Rts);
    assert_eq!(
        p.a.mr.to_vec(0..64).unwrap(),
        vec![0; 64],
        "a refused write ran"
    );

    // Every bind posted completes, as a bind, in order; none was lost.
    let wcs = p.b.send_cq.wait(capacity, WAIT).unwrap().to_vec();
    assert_eq!(wcs.len(), capacity, "{wcs:?}");
    for (i, wc) in wcs.iter().enumerate() {
        assert_wc(wc, 100 + i as u64, WcOpcode::BIND_MW);
    }
    assert_eq!(p.b.send_cq.binds_in_flight(), 0);
    assert!(p
        .b
        .send_cq
        .wait(1, std::time::Duration::from_millis(200))
        .is_err());
    // Each window reaches its range.
    for (i, remote) in remotes.iter().enumerate() {
        let data = pattern(256, 0x40 + i as u8);
        p.a.mr.write_at(0, &data).unwrap();
        let wc = write_from_a(&mut p, 200 + i as u64, *remote, 256);
        assert_wc(&wc, 200 + i as u64, WcOpcode::RDMA_WRITE);
        assert_eq!(target.to_vec(i * 256..i * 256 + 256).unwrap(), data);
    }
    // The places are free again: the extra bind, then a post.
    let remote = p.b.qp.bind_mw(99, &mut windows[capacity], &extra).unwrap();
    b_completes(&mut p, 99, WcOpcode::BIND_MW);
    assert_eq!(remote.len, 64);
    let wcs =
        p.b.qp
            .post_and_wait(&mut p.b.send_cq, WAIT, |b| {
                b.wr(2).rdma_write(to).sge(p.b.mr.sge(0..64)?)
            })
            .unwrap()
            .to_vec();
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_wc(&wcs[0], 2, WcOpcode::RDMA_WRITE);
    assert_eq!(p.a.mr.to_vec(0..64).unwrap(), vec![0x3c; 64]);
    drop(windows);
    let _ = &mut target;
}

/// A completion a wait took but did not hand out (it timed out) is kept
/// for the next poll, and dropped if its QP is destroyed first, as the
/// provider drops a destroyed QP's completions from its CQ.
#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn completions_of_a_timed_out_wait_are_kept_until_their_qp_goes() {
    let mut p = Pair::with(QpCaps::default(), ops());
    let target = bindable(&p.pd);
    let (Some(mut w1), Some(mut w2)) = (
        window(&p.ctx, &p.pd, MwType::Type1),
        window(&p.ctx, &p.pd, MwType::Type1),
    ) else {
        return;
    };
    let bind = MwBind::new(&target, 0..256, remote_rw()).unwrap();
    p.b.qp.bind_mw(10, &mut w1, &bind).unwrap();
    p.b.qp.bind_mw(11, &mut w2, &bind).unwrap();
    // Both come; the wait asks for three and times out.
    let err =
        p.b.send_cq
            .wait(3, std::time::Duration::from_secs(2))
            .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert_eq!(p.b.send_cq.backlog_len(), 2);
    let wcs = p.b.send_cq.wait(1, WAIT).unwrap().to_vec();
    assert_eq!(wcs.len(), 1);
    assert_wc(&wcs[0], 10, WcOpcode::BIND_MW);
    // The other, kept again by a second timed-out wait, then its QP is
    // destroyed: it is never handed out.
    let err =
        p.b.send_cq
            .wait(2, std::time::Duration::from_millis(300))
            .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert_eq!(p.b.send_cq.backlog_len(), 1);
    let Pair { b, a, .. } = p;
    let Side {
        qp, mut send_cq, ..
    } = b;
    drop(qp);
    assert_eq!(send_cq.backlog_len(), 0);
    let mut got = Vec::new();
    send_cq.poll_into(&mut got, 8).unwrap();
    assert!(got.is_empty(), "{got:?}");
    drop((w1, w2, a));
}
