//! Re-registration (`ibv_rereg_mr`), CQ resize (`ibv_resize_cq`) and
//! atomic write on a real RDMA device (soft-RoCE in the test guest) and on
//! the software device: statuses, opcodes and data checked.
//!
//! Without `MLX5DV_TEST_DEVICE` the tests are ignored, and fail if forced
//! to run.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use std::time::Duration;
use support::rig::*;

/// Soft-RoCE's vendor id.
const RXE_VENDOR: u32 = 0x00FF_FFFF;

fn is_rxe(ctx: &Context) -> bool {
    ctx.query_device().unwrap().vendor_id == RXE_VENDOR
}

/// The running kernel's (major, minor) release.
fn kernel() -> (u32, u32) {
    let r = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut n = r
        .split(['.', '-'])
        .map(|p| p.trim().parse::<u32>().unwrap_or(0));
    (n.next().unwrap_or(0), n.next().unwrap_or(0))
}

/// The result of a re-registration that must succeed, except on a
/// soft-RoCE kernel without `rereg_user_mr` (Linux 6.1's rxe): there the
/// kernel answers EOPNOTSUPP, the command failed (IBV_REREG_MR_ERR_CMD),
/// and the region must be left reaching no memory. Returns whether it
/// succeeded.
#[track_caller]
fn rereg_done(ctx: &Context, result: Result<()>, mr: &MemoryRegion) -> bool {
    match result {
        Ok(()) => true,
        Err(Error::Unsupported { what }) if is_rxe(ctx) => {
            assert!(what.contains("IBV_REREG_MR_ERR_CMD"), "{what}");
            assert!(mr.is_empty());
            assert_eq!((mr.lkey(), mr.rkey()), (0, 0));
            assert!(mr.sge(0..1).is_err() && mr.remote(0..1).is_err());
            assert!(mr.to_vec(..).unwrap().is_empty());
            eprintln!(
                "soft-RoCE on Linux {:?} re-registers no region: refused, region left empty",
                kernel()
            );
            false
        }
        Err(e) => panic!("rereg: {e}"),
    }
}

/// The status of one RDMA write of A's first 16 bytes into `remote`.
fn write_status(p: &mut Pair, remote: RemoteBuf, wr_id: u64) -> WcStatus {
    match p.a.qp.post_and_wait(&mut p.a.send_cq, WAIT, |b| {
        b.wr(wr_id).rdma_write(remote).sge(p.a.mr.sge(0..16)?)
    }) {
        Ok(wcs) => {
            assert_eq!(wcs.len(), 1, "{wcs:?}");
            assert_eq!(wcs[0].wr_id, wr_id, "{wcs:?}");
            if wcs[0].status == WcStatus::SUCCESS {
                assert_eq!(wcs[0].opcode, WcOpcode::RDMA_WRITE, "{wcs:?}");
            }
            wcs[0].status
        }
        Err(Error::WorkCompletion {
            wr_id: id, status, ..
        }) => {
            assert_eq!(id, wr_id);
            status
        }
        Err(e) => panic!("write {wr_id}: {e}"),
    }
}

/// Both QPs back to RTS after an error.
fn reconnect(p: &mut Pair) {
    p.a.qp.reset().unwrap();
    p.b.qp.reset().unwrap();
    p.connect();
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rereg_access_refuses_then_allows_a_remote_write_and_back() {
    let mut p = Pair::new();
    let data = pattern(16, 5);
    p.a.mr.write_at(0, &data).unwrap();
    let mut target = MemoryRegion::new(&p.pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let remote = target.remote(64..80).unwrap();
    assert_eq!(write_status(&mut p, remote, 1), WcStatus::REM_ACCESS_ERR);
    assert!(target.as_slice().unwrap().iter().all(|&x| x == 0));
    reconnect(&mut p);

    let r = target.rereg_access(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE);
    if !rereg_done(&p.ctx, r, &target) {
        return;
    }
    assert_eq!(
        target.access(),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
    );
    assert!(target.is_peer_writable());
    let remote = target.remote(64..80).unwrap(); // the keys as they are now
    assert_eq!(write_status(&mut p, remote, 2), WcStatus::SUCCESS);
    let got = target.to_vec(..).unwrap();
    assert_eq!(&got[64..80], &data[..]);
    assert!(got[..64].iter().chain(&got[80..]).all(|&x| x == 0));

    let r = target.rereg_access(AccessFlags::LOCAL_WRITE);
    assert!(rereg_done(&p.ctx, r, &target));
    // Once granted, peer writes stay possible in the crate's eyes (an mkey
    // layout or a window made meanwhile may still reach the memory): no
    // plain slice of it, copies only.
    assert!(target.is_peer_writable());
    assert!(matches!(target.as_slice(), Err(Error::PeerWritable { .. })));
    let remote = target.remote(0..16).unwrap();
    assert_eq!(write_status(&mut p, remote, 3), WcStatus::REM_ACCESS_ERR);
    assert!(target.to_vec(..16).unwrap().iter().all(|&x| x == 0));

    // Refused before C: remote write without local write.
    assert!(matches!(
        target.rereg_access(AccessFlags::REMOTE_WRITE),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(target.access(), AccessFlags::LOCAL_WRITE);
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rereg_translation_moves_the_region_to_new_memory() {
    let mut p = Pair::new();
    let data = pattern(16, 11);
    p.a.mr.write_at(0, &data).unwrap();
    let mut target = MemoryRegion::new(&p.pd, 4096, access_all()).unwrap();
    let old = target.remote(0..16).unwrap();
    let result = target.rereg_new_buffer(8192);
    if is_rxe(&p.ctx) {
        // Soft-RoCE changes a region's access and PD only.
        assert!(
            matches!(result, Err(Error::Unsupported { .. })),
            "{result:?}"
        );
        return;
    }
    result.unwrap();
    assert_eq!(target.len(), 8192);
    assert!(target.to_vec(..).unwrap().iter().all(|&x| x == 0));
    let new = target.remote(8000..8016).unwrap();
    assert_eq!(write_status(&mut p, new, 1), WcStatus::SUCCESS);
    let got = target.to_vec(..).unwrap();
    assert_eq!(&got[8000..8016], &data[..]);
    assert!(got[..8000].iter().chain(&got[8016..]).all(|&x| x == 0));
    // The old addresses are outside the region now.
    assert_eq!(write_status(&mut p, old, 2), WcStatus::REM_ACCESS_ERR);
    assert_eq!(&target.to_vec(8000..8016).unwrap(), &data);
    assert!(matches!(
        target.rereg_new_buffer(0),
        Err(Error::OutOfRange { .. })
    ));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn rereg_pd_leaves_the_old_pds_qps_a_local_protection_error() {
    let mut p = Pair::new();
    let mut source = MemoryRegion::new(&p.pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let data = pattern(32, 17);
    source.as_mut_slice().unwrap()[..32].copy_from_slice(&data);
    let remote = p.b.mr.remote(0..32).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(1).rdma_write(remote).sge(source.sge(0..32)?)
            })
            .unwrap();
    assert_wc(&wcs[0], 1, WcOpcode::RDMA_WRITE);
    assert_eq!(&p.b.mr.to_vec(0..32).unwrap(), &data);

    let pd2 = ProtectionDomain::new(&p.ctx).unwrap();
    let r = source.rereg_pd(&pd2);
    if !rereg_done(&p.ctx, r, &source) {
        return;
    }
    let remote = p.b.mr.remote(64..96).unwrap();
    let status = match p.a.qp.post_and_wait(&mut p.a.send_cq, WAIT, |b| {
        b.wr(2).rdma_write(remote).sge(source.sge(0..32)?)
    }) {
        Ok(wcs) => (wcs[0].wr_id, wcs[0].status),
        Err(Error::WorkCompletion { wr_id, status, .. }) => (wr_id, status),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(status, (2, WcStatus::LOC_PROT_ERR));
    assert!(p.b.mr.to_vec(64..96).unwrap().iter().all(|&x| x == 0));

    // A PD of another context is refused before C.
    let other = open();
    let pd3 = ProtectionDomain::new(&other).unwrap();
    assert!(matches!(
        source.rereg_pd(&pd3),
        Err(Error::InvalidArgument(_))
    ));
    assert!(std::ptr::eq(source.pd().as_ptr(), pd2.as_ptr()));
}

/// `n` signalled RDMA writes of 8 inline bytes from A into B's region,
/// wr_ids from `first`, left in A's send CQ.
fn post_writes(p: &mut Pair, first: u64, n: u64) {
    let remote = p.b.mr.remote(..).unwrap();
    let mut b = p.a.qp.batch_with(SendFlags::SIGNALED);
    for id in first..first + n {
        let at = remote.slice(id * 8, 8).unwrap();
        b.wr(id).rdma_write(at).inline(&id.to_le_bytes()).unwrap();
    }
    // SAFETY: inline data only, copied into the WQEs; the queue holds
    // them (at most 128 outstanding, the default depth).
    unsafe { b.complete() }.unwrap();
    // Let them complete: they wait in the CQ, not yet polled.
    std::thread::sleep(Duration::from_millis(200));
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn resize_cq_up_and_down_loses_no_completion() {
    let mut p = Pair::new();
    let before = p.a.send_cq.capacity();
    post_writes(&mut p, 0, 20);
    let up = p.a.send_cq.resize(1000).unwrap();
    assert!(up >= 1000, "{up}");
    assert_eq!(p.a.send_cq.capacity(), up);
    post_writes(&mut p, 20, 20);
    let down = p.a.send_cq.resize(100).unwrap();
    assert!(
        (100..up).contains(&down),
        "{down} (was {up}, first {before})"
    );
    assert_eq!(p.a.send_cq.capacity(), down);
    let wcs = p.a.send_cq.wait(40, WAIT).unwrap().to_vec();
    assert_eq!(wcs.len(), 40);
    for (i, wc) in wcs.iter().enumerate() {
        assert_wc(wc, i as u64, WcOpcode::RDMA_WRITE);
    }
    assert!(p.a.send_cq.poll_into(&mut Vec::new(), 8).unwrap() == 0);
    let got = p.b.mr.to_vec(0..40 * 8).unwrap();
    for id in 0..40u64 {
        let at = id as usize * 8;
        assert_eq!(got[at..at + 8], id.to_le_bytes(), "write {id}");
    }

    // Refused before C: no entries; and inside a poll callback.
    assert!(matches!(
        p.a.send_cq.resize(0),
        Err(Error::OutOfRange { .. })
    ));
    post_writes(&mut p, 40, 1);
    let mut inside = None;
    let n =
        p.a.send_cq
            .poll_each(1, |wc| {
                assert_eq!((wc.wr_id(), wc.status()), (40, WcStatus::SUCCESS));
                inside = Some(p.b.send_cq.resize(64));
            })
            .unwrap();
    assert_eq!(n, 1);
    assert!(
        matches!(inside, Some(Err(Error::InvalidArgument(_)))),
        "{inside:?}"
    );
    assert_eq!(p.b.send_cq.capacity(), before);
}

/// Whether the device claims atomic write (`IB_UVERBS_DEVICE_ATOMIC_WRITE`).
fn claims_atomic_write(ctx: &Context) -> bool {
    let mut attr = ffi::ibv_device_attr_ex::default();
    let rc = unsafe { ffi::ibv_query_device_ex(ctx.as_ptr(), std::ptr::null(), &mut attr) };
    assert_eq!(rc, 0);
    attr.device_cap_flags_ex & (1 << 40) != 0
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn atomic_write_where_the_device_claims_it_else_a_typed_unsupported() {
    let ctx = open();
    let claimed = claims_atomic_write(&ctx);
    if is_rxe(&ctx) {
        // rxe runs atomic writes from Linux 6.2.
        assert_eq!(claimed, kernel() >= (6, 2), "Linux {:?}", kernel());
    } else {
        // The software device models no atomic write (nor has libmlx5 44).
        assert!(!claimed);
    }
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let cq = CompletionQueue::new(&ctx, 16).unwrap();
    let built = QpBuilder::rc(&pd, &cq, &cq)
        .send_ops(SendOps::rc_default() | SendOps::ATOMIC_WRITE)
        .build();
    if !claimed {
        match built {
            Err(Error::Unsupported { what }) => assert!(what.contains("atomic write"), "{what}"),
            other => panic!("expected Unsupported, got {other:?}"),
        }
        return;
    }
    drop(built.unwrap());
    let mut p = Pair::with(
        QpCaps::default(),
        SendOps::rc_default() | SendOps::ATOMIC_WRITE,
    );
    let value = 0x0102_0304_0506_0708u64.to_le_bytes();
    let remote = p.b.mr.remote(64..72).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(5).atomic_write(remote, &value)
            })
            .unwrap();
    assert_wc(&wcs[0], 5, WcOpcode::ATOMIC_WRITE);
    let got = p.b.mr.to_vec(0..128).unwrap();
    assert_eq!(got[64..72], value);
    assert!(got[..64].iter().chain(&got[72..]).all(|&x| x == 0));
}
