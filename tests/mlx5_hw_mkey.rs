//! Indirect mkeys on mlx5 hardware: list and interleaved layouts registered
//! by work request (`mlx5dv_wr_mr_list`, `mlx5dv_wr_mr_interleaved`), RC
//! traffic through them, their bad flows, and invalidation.
//!
//! Ported from rdma-core's `tests/test_mlx5_mkey.py` (`Mlx5MkeyTest`);
//! each test names the original it ports and keeps its assertions. Data is
//! checked byte for byte, and every completion's status, `wr_id` and opcode
//! (`MLX5DV_WC_UMR` for a signalled registration, as mlx5dv_wr_post(3)
//! says).
//!
//! As in the original, each side has an RC QP with the registration
//! builder and an indirect mkey of 3 entries, registers a layout over two
//! 8-byte pieces of its region (at 0 and 64), and the client sends 16 bytes
//! through its mkey into a receive posted through the server's, so the
//! server's region holds the client's bytes at 0..8 and 64..72 and its own
//! elsewhere. The original creates its QPs with
//! `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`, which the crate cannot pass;
//! `MLX5_SCATTER_TO_CQE=0` does the same (see `disable_scatter_to_cqe`).
//!
//! Not ported: `test_mkey_list_new_api` and `test_mkey_interleaved_new_api`
//! (the crate has no `mlx5dv_wr_mkey_configure`).
//!
//! These tests need an mlx5 (ConnectX) device: they run only where one is
//! present, and what they check counts as verified on hardware only from
//! such a run. They are `#[ignore]`d; run them with
//! `MLX5DV_TEST_MLX5_DEVICE=mlx5_0 cargo test --test mlx5_hw_mkey -- --ignored`.
//! Without the variable a test fails. Where the device refuses the mkey or
//! its builders as unsupported (where the original skips), the test fails
//! naming it, unless `MLX5DV_TEST_ALLOW_MISSING_CAPS=1` is set: then it
//! prints that line and returns.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use std::ops::Range;
use support::hw::*;
use support::rig::{assert_wc, pattern, permutations, WAIT};

/// Iterations of the traffic loop (`self.iters` in `Mlx5MkeyTest.setUp`).
const ITERS: u64 = 10;

/// The entries of each mkey (`Mlx5Mkey(pd, INDIRECT, 3)`).
const MKEY_ENTRIES: u16 = 3;

/// What the server's region holds where the client's data does not land.
const SERVER_FILL: u8 = b's';

/// The two pieces each side's layout is made of (`reg_mr_list`).
const LIST: [Range<usize>; 2] = [0..8, 64..72];

/// An RC pair (client = A, server = B) whose QPs have `mlx5_ops`, send and
/// local invalidate, and an indirect mkey for each side.
struct Mkeys {
    p: RcPair,
    client: Mkey,
    server: Mkey,
}

/// The pair and its mkeys; the server's mkey allows remote invalidation
/// when `server_remote_invalidate`. `None` after `missing_capability` when
/// the device refuses them as unsupported.
fn mkeys(mlx5_ops: Mlx5SendOps, server_remote_invalidate: bool) -> Option<Mkeys> {
    disable_scatter_to_cqe();
    let ctx = open();
    let p = RcPair::new(
        &ctx,
        QpCaps::default(),
        SendOps::SEND | SendOps::LOCAL_INV,
        mlx5_ops,
        MSG,
    )?;
    let what = "indirect mkeys (mlx5dv_create_mkey)";
    let client = or_missing(Mkey::new(&p.pd, MKEY_ENTRIES, false), ctx.name(), what)?;
    let server = or_missing(
        Mkey::new(&p.pd, MKEY_ENTRIES, server_remote_invalidate),
        ctx.name(),
        what,
    )?;
    Some(Mkeys { p, client, server })
}

/// Registers a list layout of `pieces` of `side`'s region on `mkey`
/// (`reg_mr_list`): the registration completes with `MLX5DV_WC_UMR`.
fn reg_list<'k>(
    side: &mut RcSide,
    mkey: &'k Mkey,
    pieces: &[Range<usize>],
    wr_id: u64,
) -> MkeyLayout<'k> {
    let mr = &side.mr;
    let mut len = 0;
    let wcs = side
        .qp
        .post_and_wait(&mut side.send_cq, WAIT, |b| {
            let sges = pieces
                .iter()
                .map(|r| mr.sge(r.clone()))
                .collect::<Result<Vec<_>>>()?;
            len = b
                .wr(wr_id)
                .mr_list(mkey, AccessFlags::LOCAL_WRITE, &sges)?
                .len();
            Ok(())
        })
        .unwrap_or_else(|e| panic!("registering a list layout on {mkey:?}: {e}"));
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_wc(&wcs[0], wr_id, WcOpcode::UMR);
    let total: usize = pieces.iter().map(|r| r.len()).sum();
    assert_eq!(len, total as u64, "{mkey:?}");
    MkeyLayout::new(mkey, len)
}

/// Registers the interleaved layout of `reg_mr_interleaved` on `mkey`: 8
/// bytes at 0 then 8 bytes at 64, each followed by 2 skipped bytes,
/// repeated 3 times; the registration completes with `MLX5DV_WC_UMR`.
fn reg_interleaved(side: &mut RcSide, mkey: &Mkey, wr_id: u64) {
    let mr = &side.mr;
    let mut len = 0;
    let wcs = side
        .qp
        .post_and_wait(&mut side.send_cq, WAIT, |b| {
            let entries = [
                MrInterleaved::new(mr, 0, 8, 2)?,
                MrInterleaved::new(mr, 64, 8, 2)?,
            ];
            len = b
                .wr(wr_id)
                .mr_interleaved(mkey, AccessFlags::LOCAL_WRITE, 3, &entries)?
                .len();
            Ok(())
        })
        .unwrap_or_else(|e| panic!("registering an interleaved layout on {mkey:?}: {e}"));
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_wc(&wcs[0], wr_id, WcOpcode::UMR);
    assert_eq!(len, 48, "{mkey:?}");
}

/// The pieces of the interleaved layout of `reg_interleaved`, in layout
/// order: for each repeat, each entry's bytes, the next repeat 10 bytes
/// (8 + 2 skipped) further on.
fn interleaved_pieces() -> Vec<Range<usize>> {
    (0..3)
        .flat_map(|rep| [0usize, 64].map(|base| base + rep * 10..base + rep * 10 + 8))
        .collect()
}

/// The first `len` bytes of the layout made of `pieces` of `buf`.
fn gather(buf: &[u8], pieces: &[Range<usize>], len: usize) -> Vec<u8> {
    let mut out: Vec<u8> = pieces
        .iter()
        .flat_map(|r| buf[r.clone()].to_vec())
        .collect();
    out.truncate(len);
    out
}

/// Writes `data` into the layout made of `pieces` of `buf`, from its start.
fn scatter(buf: &mut [u8], pieces: &[Range<usize>], data: &[u8]) {
    let mut rest = data;
    for r in pieces {
        let n = r.len().min(rest.len());
        buf[r.start..r.start + n].copy_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
}

/// `Mlx5MkeyTest.traffic`: `rounds` times, the server posts a receive of
/// `len` bytes through its mkey and the client sends `len` bytes through
/// its own; both complete, and the server's region holds the client's
/// layout bytes in its own layout's places and its fill everywhere else.
fn traffic(
    m: &mut Mkeys,
    client_pieces: &[Range<usize>],
    server_pieces: &[Range<usize>],
    len: usize,
    rounds: u64,
) {
    for i in 0..rounds {
        let data = pattern(MSG, i as u8 + 1);
        m.p.a.mr.write_at(0, &data).unwrap();
        fill(&mut m.p.b.mr, .., SERVER_FILL);
        let recv = unsafe { MkeyLayout::new(&m.server, len as u64).sge(..) }.unwrap();
        unsafe { m.p.b.qp.post_recv(100 + i, &[recv]) }.unwrap();
        let send = unsafe { MkeyLayout::new(&m.client, len as u64).sge(..) }.unwrap();
        let wcs =
            m.p.a
                .qp
                .post_and_wait(&mut m.p.a.send_cq, WAIT, |b| b.wr(i).send().sge(send))
                .unwrap();
        assert_wc(&wcs[0], i, WcOpcode::SEND);
        let rx = m.p.b.recv_cq.wait(1, WAIT).unwrap();
        assert_wc(&rx[0], 100 + i, WcOpcode::RECV);
        assert_eq!(rx[0].byte_len as usize, len, "{:?}", rx[0]);
        let mut expected = vec![SERVER_FILL; MSG];
        scatter(
            &mut expected,
            server_pieces,
            &gather(&data, client_pieces, len),
        );
        assert_eq!(m.p.b.mr.to_vec(..).unwrap(), &expected[..], "round {i}");
        assert_eq!(
            m.p.a.mr.to_vec(..).unwrap(),
            &data[..],
            "the client's region changed"
        );
    }
}

/// `invalidate_mkeys` for one side: a local invalidate of the mkey's key
/// (the original passes its lkey) completes with `IBV_WC_LOCAL_INV`.
fn invalidate(side: &mut RcSide, mkey: &Mkey, wr_id: u64) {
    let key = mkey.lkey();
    let wcs = side
        .qp
        .post_and_wait(&mut side.send_cq, WAIT, |b| b.wr(wr_id).local_inv(key))
        .unwrap_or_else(|e| panic!("invalidating {mkey:?}: {e}"));
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_wc(&wcs[0], wr_id, WcOpcode::LOCAL_INV);
}

/// Ports `test_mkey_list`: both sides register a list layout (8 bytes at 0
/// and 8 at 64), ten rounds of 16-byte traffic go through the mkeys, then
/// both mkeys are invalidated.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn mkey_list() {
    let Some(mut m) = mkeys(Mlx5SendOps::MR_LIST, false) else {
        return;
    };
    reg_list(&mut m.p.b, &m.server, &LIST, 1);
    reg_list(&mut m.p.a, &m.client, &LIST, 2);
    traffic(&mut m, &LIST, &LIST, 16, ITERS);
    invalidate(&mut m.p.b, &m.server, 3);
    invalidate(&mut m.p.a, &m.client, 4);
}

/// Ports `test_mkey_interleaved`: both sides register an interleaved
/// layout (8 bytes at 0 and 8 at 64, each then 2 skipped, repeated 3
/// times), ten rounds of 16-byte traffic go through the mkeys (the first
/// repeat: the same bytes as the list layout), then both mkeys are
/// invalidated.
///
/// Beyond the original, a last round sends the whole 48-byte layout, so
/// every repeat is checked in its place: 0..8, 64..72, 10..18, 74..82,
/// 20..28, 84..92.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn mkey_interleaved() {
    let Some(mut m) = mkeys(Mlx5SendOps::MR_INTERLEAVED, false) else {
        return;
    };
    reg_interleaved(&mut m.p.b, &m.server, 1);
    reg_interleaved(&mut m.p.a, &m.client, 2);
    let pieces = interleaved_pieces();
    assert_eq!(pieces[..2], LIST, "the first repeat is the list layout");
    traffic(&mut m, &pieces, &pieces, 16, ITERS);
    traffic(&mut m, &pieces, &pieces, 48, 1);
    invalidate(&mut m.p.b, &m.server, 3);
    invalidate(&mut m.p.a, &m.client, 4);
}

/// Ports `test_mkey_list_bad_flow`: after both sides register a 16-byte
/// list layout, a 100-byte send through the client's mkey must fail.
///
/// The crate refuses it first: an SGE of 100 bytes through a 16-byte
/// layout is `Error::OutOfRange`. The original's error is the device's; to
/// keep that assertion the same send is then posted with `ibv_post_send`
/// through `mlx5dv::ffi` (as the original posts it), and its completion
/// must be an error. Registering more entries than the mkey has is refused
/// by the crate too (`max_entries` for a list, `max_entries - 1` for an
/// interleaved layout), before the device and without posting anything.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn mkey_list_bad_flow() {
    let Some(mut m) = mkeys(Mlx5SendOps::MR_LIST | Mlx5SendOps::MR_INTERLEAVED, false) else {
        return;
    };

    // More entries than the mkey holds: typed errors, nothing posted.
    let mr = &m.p.a.mr;
    let client = &m.client;
    let err =
        m.p.a
            .qp
            .post_and_wait(&mut m.p.a.send_cq, WAIT, |b| {
                let sges = [
                    mr.sge(0..8)?,
                    mr.sge(16..24)?,
                    mr.sge(32..40)?,
                    mr.sge(48..56)?,
                ];
                b.wr(90)
                    .mr_list(client, AccessFlags::LOCAL_WRITE, &sges)
                    .map(drop)
            })
            .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                what: "mr_list entries",
                value: 4,
                ..
            }
        ),
        "{err}"
    );
    let err =
        m.p.a
            .qp
            .post_and_wait(&mut m.p.a.send_cq, WAIT, |b| {
                let entries = [
                    MrInterleaved::new(mr, 0, 8, 2)?,
                    MrInterleaved::new(mr, 64, 8, 2)?,
                    MrInterleaved::new(mr, 128, 8, 2)?,
                ];
                b.wr(91)
                    .mr_interleaved(client, AccessFlags::LOCAL_WRITE, 3, &entries)
                    .map(drop)
            })
            .unwrap_err();
    assert!(
        matches!(
            err,
            Error::OutOfRange {
                what: "num_interleaved",
                value: 3,
                ..
            }
        ),
        "{err}"
    );
    let mut stray = Vec::new();
    m.p.a.send_cq.poll_into(&mut stray, 8).unwrap();
    assert!(
        stray.is_empty(),
        "a refused registration was posted: {stray:?}"
    );

    let server = reg_list(&mut m.p.b, &m.server, &LIST, 1);
    let client = reg_list(&mut m.p.a, &m.client, &LIST, 2);

    // The crate's refusal of an SGE past the layout.
    let err = unsafe { client.sge(0..100) }.unwrap_err();
    assert!(matches!(err, Error::OutOfRange { value: 100, .. }), "{err}");

    // The device's: the same send, posted around the crate's check.
    let recv = unsafe { server.sge(0..16) }.unwrap();
    unsafe { m.p.b.qp.post_recv(200, &[recv]) }.unwrap();
    let mut sge = ffi::ibv_sge {
        addr: 0,
        length: 100,
        lkey: m.client.lkey(),
    };
    let mut wr = ffi::ibv_send_wr {
        wr_id: 201,
        sg_list: &mut sge,
        num_sge: 1,
        opcode: ffi::IBV_WR_SEND,
        send_flags: ffi::IBV_SEND_SIGNALED,
        ..Default::default()
    };
    let mut bad = std::ptr::null_mut();
    // The client's region (the only memory the mkey reaches) outlives the
    // completion waited for below.
    let rc = unsafe { ffi::ibv_post_send(m.p.a.qp.as_ptr(), &mut wr, &mut bad) };
    assert_eq!(
        rc,
        0,
        "ibv_post_send: {}",
        std::io::Error::from_raw_os_error(rc)
    );
    let wcs = m.p.a.send_cq.wait(1, WAIT).unwrap();
    assert_eq!(wcs[0].wr_id, 201, "{wcs:?}");
    assert_ne!(
        wcs[0].status,
        WcStatus::SUCCESS,
        "a 100-byte send through a 16-byte mkey layout succeeded: {wcs:?}"
    );
}

/// An mkey created with remote invalidation
/// (`MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE`), in the flow of
/// `test_mkey_list`. The rdma-core test file has no remote-invalidate test;
/// this one follows mlx5dv_create_mkey(3).
///
/// The peer's send-with-invalidate cannot be posted: the crate has no
/// `ibv_wr_send_inv` builder (nor does `WorkCompletion` report
/// `IBV_WC_WITH_INV` and the invalidated rkey). So the server invalidates
/// its mkey locally (`local_inv`), which is what a remote invalidate does
/// to it, and the test checks what follows: a new layout can be registered
/// and carries traffic to its new places; once invalidated again, a send
/// into the mkey fails.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn mkey_remote_invalidate() {
    let Some(mut m) = mkeys(Mlx5SendOps::MR_LIST, true) else {
        return;
    };
    assert!(m.server.remote_invalidate());
    assert!(!m.client.remote_invalidate());
    reg_list(&mut m.p.b, &m.server, &LIST, 1);
    reg_list(&mut m.p.a, &m.client, &LIST, 2);
    traffic(&mut m, &LIST, &LIST, 16, 2);

    // Invalidate (locally: see above), register another layout, use it.
    invalidate(&mut m.p.b, &m.server, 3);
    let moved = [72..80, 8..16];
    reg_list(&mut m.p.b, &m.server, &moved, 4);
    traffic(&mut m, &LIST, &moved, 16, 2);

    // Invalidated, the mkey takes no data: the send into it fails.
    invalidate(&mut m.p.b, &m.server, 5);
    // The layouts as last registered: the server's is gone on the device.
    let recv = unsafe { MkeyLayout::new(&m.server, 16).sge(0..16) }.unwrap();
    unsafe { m.p.b.qp.post_recv(300, &[recv]) }.unwrap();
    let send = unsafe { MkeyLayout::new(&m.client, 16).sge(0..16) }.unwrap();
    let wcs =
        m.p.a
            .qp
            .post_and_wait(&mut m.p.a.send_cq, WAIT, |b| b.wr(301).send().sge(send))
            .unwrap();
    assert_eq!(wcs[0].wr_id, 301, "{wcs:?}");
    assert_ne!(
        wcs[0].status,
        WcStatus::SUCCESS,
        "a send into an invalidated mkey succeeded: {wcs:?}"
    );
}

/// Every drop order of context, PD, MR, CQ, QP (with the mkey builders) and
/// an indirect mkey is safe and no destroy call fails: the mkey and the QP
/// keep their PD, and the PD its context, alive. (The generic objects'
/// orders run on soft-RoCE in `tests/rxe_lifetimes.rs`; the mkey needs
/// mlx5.)
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn mkey_drop_orders() {
    #[allow(dead_code, clippy::large_enum_variant)]
    enum Obj {
        Ctx(Context),
        Pd(ProtectionDomain),
        Mr(MemoryRegion),
        Cq(CompletionQueue),
        Qp(RcQp),
        Mkey(Mkey),
    }
    let before = destroy_failures();
    let mut rounds = 0;
    for order in permutations(6) {
        let ctx = open();
        let pd = ProtectionDomain::new(&ctx).unwrap();
        let mr = MemoryRegion::new(&pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
        let cq = CompletionQueue::new(&ctx, 16).unwrap();
        let built = QpBuilder::rc(&pd, &cq, &cq)
            .mlx5_send_ops(Mlx5SendOps::MR_LIST)
            .build();
        let Some(qp) = or_missing(built, ctx.name(), "an RC QP with MR_LIST") else {
            return;
        };
        let Some(mkey) = or_missing(Mkey::new(&pd, 4, false), ctx.name(), "an indirect mkey")
        else {
            return;
        };
        let mut objs = [
            Some(Obj::Ctx(ctx)),
            Some(Obj::Pd(pd)),
            Some(Obj::Mr(mr)),
            Some(Obj::Cq(cq)),
            Some(Obj::Qp(qp)),
            Some(Obj::Mkey(mkey)),
        ];
        for &i in &order {
            drop(objs[i].take());
        }
        rounds += 1;
    }
    assert_eq!(rounds, 720);
    assert_eq!(destroy_failures(), before, "a destroy call failed in drop");
}
