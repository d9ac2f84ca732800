//! DMA memcpy (`mlx5dv_wr_memcpy`) on mlx5 hardware: the copy itself, the
//! protection faults the device must report, and the length limit the
//! crate enforces before the device.
//!
//! Ported from rdma-core's `tests/test_mlx5_dma_memcpy.py` (`DmaGgaMemcpy`);
//! each test names the original it ports and keeps its assertions. Data is
//! checked byte for byte, and every completion's status, `wr_id` and opcode
//! (`MLX5DV_WC_MEMCPY` for a signalled memcpy, as mlx5dv_wr_post(3) says).
//!
//! The original's QP (`Mlx5DmaResources`: RC, `IBV_QP_EX_WITH_SEND` and
//! `MLX5DV_QP_EX_WITH_MEMCPY`) is moved to RTS without a real peer; here it
//! is one side of a connected RC pair.
//!
//! These tests need an mlx5 (ConnectX) device: they run only where one is
//! present, and what they check counts as verified on hardware only from
//! such a run. They are `#[ignore]`d; run them with
//! `MLX5DV_TEST_MLX5_DEVICE=mlx5_0 cargo test --test mlx5_hw_memcpy -- --ignored`.
//! Without the variable a test fails. Where the device lacks DMA memcpy
//! (`max_wr_memcpy_length` of 0 or not reported, where the original cannot
//! create its QP), the test fails naming it, unless
//! `MLX5DV_TEST_ALLOW_MISSING_CAPS=1` is set: then it prints that line and
//! returns.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use support::hw::*;
use support::rig::{assert_wc, pattern, WAIT};

/// The device, its `max_wr_memcpy_length`, and an RC pair whose QPs have
/// the memcpy builder; `None` after `missing_capability` when the device
/// has no DMA memcpy.
fn memcpy_pair(mr_len: usize) -> Option<(Context, u64, RcPair)> {
    let ctx = open();
    let caps = mlx5_caps(&ctx);
    let max = match caps.max_wr_memcpy_length {
        Some(max) if caps.memcpy_supported() => max,
        other => {
            missing_capability(
                ctx.name(),
                format_args!("DMA memcpy (max_wr_memcpy_length: {other:?})"),
            );
            return None;
        }
    };
    let pair = RcPair::new(
        &ctx,
        QpCaps::default(),
        SendOps::SEND,
        Mlx5SendOps::MEMCPY,
        mr_len,
    )?;
    Some((ctx, max, pair))
}

/// Copies `MSG` bytes of side A's region into `dest` with one signalled
/// memcpy and returns its completion, whatever its status.
fn memcpy_into(p: &mut RcPair, dest: &mut MemoryRegion, wr_id: u64) -> WorkCompletion {
    let src = &p.a.mr;
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                b.wr(wr_id).memcpy(dest.sge_mut(0..MSG)?, src.sge(0..MSG)?)
            })
            .unwrap_or_else(|e| panic!("posting the memcpy: {e}"));
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(wcs[0].wr_id, wr_id, "{wcs:?}");
    wcs[0]
}

/// Ports `test_dma_memcpy_data` (`dma_memcpy(1024)`): a memcpy from the
/// QP's region into a zeroed region of the same PD completes with
/// `MLX5DV_WC_MEMCPY`, and the destination then equals the source.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dma_memcpy_data() {
    let Some((_ctx, _max, mut p)) = memcpy_pair(MSG) else {
        return;
    };
    let data = pattern(MSG, 5);
    p.a.mr.write_at(0, &data).unwrap();
    let mut dest = MemoryRegion::new(&p.pd, MSG, AccessFlags::LOCAL_WRITE).unwrap();
    let wc = memcpy_into(&mut p, &mut dest, 1);
    assert_wc(&wc, 1, WcOpcode::MEMCPY);
    assert_eq!(
        dest.as_slice().unwrap(),
        &data[..],
        "the memcpy destination"
    );
    assert_eq!(
        p.a.mr.to_vec(..).unwrap(),
        &data[..],
        "the memcpy source changed"
    );
}

/// `dma_memcpy_bad_protection_flow`: the memcpy into `dest` completes with
/// a local protection error.
fn expect_protection_error(mut p: RcPair, mut dest: MemoryRegion) {
    p.a.mr.write_at(0, &pattern(MSG, 9)).unwrap();
    let wc = memcpy_into(&mut p, &mut dest, 2);
    assert_eq!(
        wc.status,
        WcStatus::LOC_PROT_ERR,
        "expected a completion with a local protection error: {wc:?}"
    );
}

/// Ports `test_dma_memcpy_different_pd_bad_flow`: a memcpy into a region of
/// another PD completes with `IBV_WC_LOC_PROT_ERR`.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dma_memcpy_different_pd_bad_flow() {
    let Some((ctx, _max, p)) = memcpy_pair(MSG) else {
        return;
    };
    let other_pd = ProtectionDomain::new(&ctx).unwrap();
    let dest = MemoryRegion::new(&other_pd, MSG, AccessFlags::LOCAL_WRITE).unwrap();
    expect_protection_error(p, dest);
}

/// Ports `test_dma_memcpy_protection_bad_flow`: a memcpy into a region
/// registered without local write (remote read only) completes with
/// `IBV_WC_LOC_PROT_ERR`.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dma_memcpy_protection_bad_flow() {
    let Some((_ctx, _max, p)) = memcpy_pair(MSG) else {
        return;
    };
    let dest = MemoryRegion::new(&p.pd, MSG, AccessFlags::REMOTE_READ).unwrap();
    expect_protection_error(p, dest);
}

/// Ports `test_dma_memcpy_large_data_bad_flow`: a memcpy of
/// `max_wr_memcpy_length + 1` bytes must fail. The original sees the
/// provider's error from `ibv_wr_complete`; the crate refuses the length
/// before any C call, with `Error::OutOfRange` naming the limit, and nothing
/// is posted: the send CQ stays empty and the QP still copies afterwards.
///
/// Like the original, this registers a region of that length (about 2 GiB
/// on current devices); here one region serves as both ends, since the
/// work request never reaches the device.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dma_memcpy_large_data_bad_flow() {
    let Some((_ctx, max, mut p)) = memcpy_pair(MSG) else {
        return;
    };
    let over = max + 1;
    let len = usize::try_from(u32::try_from(over).unwrap_or_else(|_| {
        panic!("max_wr_memcpy_length + 1 = {over} does not fit a 32-bit SGE length")
    }))
    .unwrap();
    let mut big = MemoryRegion::new(&p.pd, len, AccessFlags::LOCAL_WRITE)
        .unwrap_or_else(|e| panic!("registering {len} bytes for the over-length memcpy: {e}"));
    let err =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, WAIT, |b| {
                let whole = big.sge_mut(..)?;
                b.wr(3).memcpy(whole, whole.into_sge())
            })
            .unwrap_err();
    // A limit of 2 GiB (what most devices report) plus one byte is already
    // past what one SGE can carry (its byte count has 31 bits on mlx5):
    // the SGE is refused first, naming its own limit.
    let what = if over >= 1 << 31 {
        "SGE length"
    } else {
        "memcpy length"
    };
    assert!(
        matches!(err, Error::OutOfRange { what: w, value, .. } if w == what && value == over),
        "{err}"
    );
    drop(big);
    let mut stray = Vec::new();
    p.a.send_cq.poll_into(&mut stray, 8).unwrap();
    assert!(stray.is_empty(), "the refused memcpy was posted: {stray:?}");

    // The QP is untouched: a memcpy of a valid length still completes.
    let data = pattern(MSG, 13);
    p.a.mr.write_at(0, &data).unwrap();
    let mut dest = MemoryRegion::new(&p.pd, MSG, AccessFlags::LOCAL_WRITE).unwrap();
    let wc = memcpy_into(&mut p, &mut dest, 4);
    assert_wc(&wc, 4, WcOpcode::MEMCPY);
    assert_eq!(dest.as_slice().unwrap(), &data[..]);
}
