//! DC transport on mlx5 hardware: DCIs sending to DCTs, with and without
//! DCI streams, and the two ways an errored DCI stream is recovered.
//!
//! Ported from rdma-core's `tests/test_mlx5_dc.py` (with the helpers of
//! `tests/mlx5_base.py` and `tests/utils.py` it uses); each test names the
//! original it ports and keeps its assertions. Data is checked byte for
//! byte, and every completion's status, `wr_id` and opcode.
//!
//! Not ported: `test_dc_ah_to_qp_mapping` (the crate has no
//! `mlx5dv_map_ah_to_qp`) and `test_odp_dc_traffic` (on-demand paging is
//! outside this suite).
//!
//! These tests need an mlx5 (ConnectX) device: they run only where one is
//! present, and what they check counts as verified on hardware only from
//! such a run. They are `#[ignore]`d; run them with
//! `MLX5DV_TEST_MLX5_DEVICE=mlx5_0 cargo test --test mlx5_hw_dc -- --ignored`.
//! Without the variable a test fails. Where the device lacks a capability
//! the original skips on (DC, DCI streams), the test fails naming it, unless
//! `MLX5DV_TEST_ALLOW_MISSING_CAPS=1` is set: then it prints that line and
//! returns.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::*;
use std::collections::HashSet;
use support::hw::*;
use support::rig::{assert_wc, pattern, WAIT};

/// Iterations of each traffic loop (`self.iters` in `DCTest.setUp`).
const ITERS: usize = 10;

/// What one DCI work request does.
#[derive(Clone, Copy)]
enum Op {
    Send,
    Write(RemoteBuf),
}

/// Posts one work request of `MSG` bytes from `src` on `dci` (whose sends
/// complete on `cq`) to `addr` (on DCI stream `stream` when given) and
/// returns its completion, whatever its status, or the scoped post's
/// error.
fn post_one(
    dci: &mut DciQp,
    cq: &mut CompletionQueue,
    addr: DcAddr<'_>,
    stream: Option<u16>,
    wr_id: u64,
    src: &MemoryRegion,
    op: Op,
) -> Result<WorkCompletion> {
    let wcs = dci.post_and_wait(cq, WAIT, |b| {
        let wr = match stream {
            Some(id) => b.wr_stream(wr_id, addr, id),
            None => b.wr(wr_id, addr),
        };
        let sge = src.sge(0..MSG)?;
        match op {
            Op::Send => wr.send().sge(sge),
            Op::Write(remote) => wr.rdma_write(remote).sge(sge),
        }
    })?;
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(wcs[0].wr_id, wr_id, "{wcs:?}");
    Ok(wcs[0])
}

/// One RDMA write of `data` from `from`'s DCI 0 into `to`'s `dst`
/// (one half of a round of `rdma_traffic`).
fn write_once(from: &mut DcSide, to: &DcSide, stream: Option<u16>, wr_id: u64, data: &[u8]) {
    from.src.write_at(0, data).unwrap();
    let remote = to.dst.remote(0..MSG).unwrap();
    let addr = dc_addr(&from.ah, &to.dct);
    let wc = post_one(
        &mut from.dcis[0],
        &mut from.send_cq,
        addr,
        stream,
        wr_id,
        &from.src,
        Op::Write(remote),
    )
    .unwrap_or_else(|e| panic!("posting wr {wr_id}: {e}"));
    assert_wc(&wc, wr_id, WcOpcode::RDMA_WRITE);
    assert_eq!(
        to.dst.to_vec(..).unwrap(),
        data,
        "the DCT side's memory after the write"
    );
}

/// One send of `data` from `from`'s DCI `qp_idx` to `to`'s DCT, received
/// into `to`'s `dst` through its SRQ (one half of a round of `traffic`).
fn send_once(from: &mut DcSide, to: &mut DcSide, qp_idx: usize, wr_id: u64, data: &[u8]) {
    from.src.write_at(0, data).unwrap();
    to.dst.fill(.., 0).unwrap();
    unsafe { to.srq.post_recv(wr_id, &[to.dst.sge(0..MSG).unwrap()]) }.unwrap();
    let addr = dc_addr(&from.ah, &to.dct);
    let wc = post_one(
        &mut from.dcis[qp_idx],
        &mut from.send_cq,
        addr,
        None,
        wr_id,
        &from.src,
        Op::Send,
    )
    .unwrap_or_else(|e| panic!("posting wr {wr_id}: {e}"));
    assert_wc(&wc, wr_id, WcOpcode::SEND);
    let rx = to.recv_cq.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], wr_id, WcOpcode::RECV);
    assert_eq!(rx[0].byte_len as usize, MSG, "{:?}", rx[0]);
    assert_eq!(to.dst.to_vec(..).unwrap(), data, "the received message");
}

/// Ports `test_dc_rdma_write`: two DCIs per side (`qp_count=2`) with RDMA
/// write; `rdma_traffic` writes the client's message into the server's
/// memory and the server's into the client's, ten times.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dc_rdma_write() {
    let ctx = open();
    let Some(mut p) = DcPair::new(&ctx, SendOps::RDMA_WRITE, &[None, None]) else {
        return;
    };
    for i in 0..ITERS {
        let id = 2 * i as u64;
        write_once(&mut p.client, &p.server, None, id, &pattern(MSG, i as u8));
        let back = pattern(MSG, 100 + i as u8);
        write_once(&mut p.server, &p.client, None, id + 1, &back);
    }
}

/// Not from rdma-core: a DC address whose address handle is of another
/// protection domain of the DCI's own context (the server side's, made in
/// its own PD) is refused with a typed error before any C call: nothing
/// is posted (no completion at the client, nothing received at the
/// server), the DCI stays in RTS, and a send through the address handle
/// of its own PD then arrives whole.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn a_dc_address_handle_of_another_pd_is_refused_and_the_dci_sends_on() {
    let ctx = open();
    let Some(mut p) = DcPair::new(&ctx, SendOps::SEND, &[None]) else {
        return;
    };
    assert_ne!(p.server.pd.as_ptr(), p.client.pd.as_ptr());
    let theirs = dc_addr(&p.server.ah, &p.server.dct);
    let data = pattern(MSG, 42);
    p.client.src.write_at(0, &data).unwrap();
    let other_pd = |e: &Error| {
        matches!(e, Error::InvalidArgument(m)
            if m.contains("is of another protection domain than the DCI's (of the same device context)"))
    };
    let e = post_one(
        &mut p.client.dcis[0],
        &mut p.client.send_cq,
        theirs,
        None,
        1,
        &p.client.src,
        Op::Send,
    )
    .unwrap_err();
    assert!(other_pd(&e), "{e}");
    let mut b = p.client.dcis[0].batch();
    let e = b.wr(2, theirs).send().inline(b"x").unwrap_err();
    assert!(other_pd(&e), "{e}");
    drop(b);
    assert_eq!(p.client.dcis[0].state().unwrap(), QpState::Rts);
    let mut seen = 0;
    p.client.send_cq.poll_each(4, |_| seen += 1).unwrap();
    p.server.recv_cq.poll_each(4, |_| seen += 1).unwrap();
    assert_eq!(seen, 0, "nothing completed at either side");
    // Through the client's own address handle: received whole.
    send_once(&mut p.client, &mut p.server, 0, 3, &data);
    assert_eq!(p.client.dcis[0].state().unwrap(), QpState::Rts);
}

/// Not from rdma-core: a write whose DC address carries another key than
/// the DCT's is refused by the target, lands nothing, and its error says
/// that a DC key may be why and what to do next.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn a_dc_write_with_a_wrong_dc_key_is_refused_and_says_so() {
    let ctx = open();
    let Some(mut p) = DcPair::new(&ctx, SendOps::RDMA_WRITE, &[None]) else {
        return;
    };
    p.client.src.write_at(0, &pattern(MSG, 9)).unwrap();
    p.server.dst.fill(.., 0).unwrap();
    let remote = p.server.dst.remote(0..MSG).unwrap();
    let wrong = DcAddr::new(&p.client.ah, p.server.dct.dctn(), DCT_KEY ^ 1);
    let wc = post_one(
        &mut p.client.dcis[0],
        &mut p.client.send_cq,
        wrong,
        None,
        5,
        &p.client.src,
        Op::Write(remote),
    )
    .unwrap();
    // The software device answers with a remote access error; a device
    // that drops the packet instead leaves the DCI to retry in vain.
    assert_eq!(wc.wr_id, 5, "{wc:?}");
    assert!(
        matches!(
            wc.status,
            WcStatus::REM_ACCESS_ERR | WcStatus::RETRY_EXC_ERR
        ),
        "{wc:?}"
    );
    let text = wc.ok().unwrap_err().to_string();
    for cause in ["remote_dc_key", "ready"] {
        assert!(text.contains(cause), "{cause}: {text}");
    }
    assert!(
        p.server.dst.to_vec(..).unwrap().iter().all(|&x| x == 0),
        "a write with a wrong DC key landed"
    );
}

/// Not from rdma-core: a DC send to a DCT whose shared receive queue is
/// empty waits there (receiver not ready, retried for ever at the default
/// `rnr_retry` 7); the scoped post's timeout says so, naming the DCT's SRQ.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn a_dc_send_to_a_dct_with_no_receive_posted_times_out_saying_so() {
    let ctx = open();
    let Some(mut p) = DcPair::new(&ctx, SendOps::SEND, &[None]) else {
        return;
    };
    assert_eq!(p.opts.rnr_retry, 7);
    let addr = dc_addr(&p.client.ah, &p.server.dct);
    let src = &p.client.src;
    let err = p.client.dcis[0]
        .post_and_wait(
            &mut p.client.send_cq,
            std::time::Duration::from_millis(500),
            |b| b.wr(3, addr).send().sge(src.sge(0..MSG)?),
        )
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let text = err.to_string();
    for said in [
        "(0 arrived)",
        "receiver not ready",
        "SharedReceiveQueue",
        "rnr_retry",
    ] {
        assert!(text.contains(said), "{said}: {text}");
    }
}

/// Ports `test_dc_send`: two DCIs per side with send; `traffic` sends from
/// every DCI of the client to the server's DCT and back, ten times, each
/// message received through the SRQ and checked.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dc_send() {
    let ctx = open();
    let Some(mut p) = DcPair::new(&ctx, SendOps::SEND, &[None, None]) else {
        return;
    };
    let mut id = 0;
    for i in 0..ITERS {
        for qp_idx in 0..p.client.dcis.len() {
            let seed = (i * 2 + qp_idx) as u8;
            send_once(
                &mut p.client,
                &mut p.server,
                qp_idx,
                id,
                &pattern(MSG, seed),
            );
            let back = pattern(MSG, 128 + seed);
            send_once(&mut p.server, &mut p.client, qp_idx, id + 1, &back);
            id += 2;
        }
    }
}

/// DCI streams as `Mlx5DcStreamsRes.generate_dci_attr` chooses them for
/// DCI `qpn`: (log_num_concurent, log_num_errored) of (3, 2) for the first
/// DCI and (2, 3) for the second, each bounded by the device.
///
/// The crate refuses `log_num_errored > log_num_concurent` (a rule of
/// `QpBuilder::dci_streams` that neither mlx5dv_create_qp(3) nor the
/// original states), so the second DCI's (2, 3) becomes (2, 2) here.
fn streams_for(qpn: usize, caps: mlx5dv::mlx5::DciStreamsCaps) -> DciStreams {
    let (conc, err) = [(3u8, 2u8), (2, 3)].get(qpn).copied().unwrap_or((1, 1));
    let conc = conc.min(caps.max_log_num_concurent);
    let err = err.min(caps.max_log_num_errored).min(conc);
    DciStreams {
        log_num_concurent: conc,
        log_num_errored: err,
    }
}

/// The stream ids a DCI's work requests take in turn
/// (`Mlx5DcStreamsRes.generate_stream_id`): the next id after the last,
/// starting after the DCI's index.
///
/// The original lets the id run up to the number of streams + 2 before it
/// wraps to 1 (the crate passes any 16-bit id on, as `WrBatch::wr_stream`
/// says: the device maps ids to its streams); here the ids wrap within the
/// DCI's 2^`log_num_concurent` streams so that each of them is visited.
struct StreamIds {
    last: u16,
    num: u16,
}

impl StreamIds {
    fn new(qp_idx: u16, streams: DciStreams) -> Self {
        let num = u16::try_from(streams.num_streams()).expect("at most 2^15 streams");
        StreamIds {
            last: qp_idx % num,
            num,
        }
    }

    fn next(&mut self) -> u16 {
        self.last = (self.last + 1) % self.num;
        self.last
    }
}

/// Ports `test_dc_rdma_write_stream`: two DCIs per side created with DCI
/// streams; `rdma_traffic` writes both ways ten times, each work request on
/// the DCI's next stream id (`mlx5dv_wr_set_dc_addr_stream`).
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dc_rdma_write_stream() {
    let ctx = open();
    let Some(caps) = dci_streams_caps(&ctx) else {
        return;
    };
    let streams = [Some(streams_for(0, caps)), Some(streams_for(1, caps))];
    let Some(mut p) = DcPair::new(&ctx, SendOps::RDMA_WRITE, &streams) else {
        return;
    };
    let s0 = streams[0].unwrap();

    let mut client_ids = StreamIds::new(0, s0);
    let mut server_ids = StreamIds::new(0, s0);
    for i in 0..ITERS {
        let id = 2 * i as u64;
        let data = pattern(MSG, i as u8);
        write_once(&mut p.client, &p.server, Some(client_ids.next()), id, &data);
        let back = pattern(MSG, 100 + i as u8);
        write_once(
            &mut p.server,
            &p.client,
            Some(server_ids.next()),
            id + 1,
            &back,
        );
    }
}

/// The client side of the streams bad flows
/// (`Mlx5DcStreamsRes.traffic_with_bad_flow`): a send from the client's
/// DCI 0 on `stream`, from `good` or, in a bad flow, from `bad`, a region
/// of another PD, which the device must refuse with a local protection
/// error. The original moves its region to the other PD with
/// `ibv_rereg_mr(IBV_REREG_MR_CHANGE_PD)`; a second region registered in
/// that PD is the same fault.
struct BadFlow {
    _pd: ProtectionDomain,
    mr: MemoryRegion,
}

impl BadFlow {
    fn new(ctx: &Context) -> Self {
        let pd = ProtectionDomain::new(ctx).expect("alloc the other PD");
        let mr = MemoryRegion::new(&pd, MSG, AccessFlags::LOCAL_WRITE).expect("register MR");
        BadFlow { _pd: pd, mr }
    }
}

/// Sends `data` from the client (from `bad` when given) to the server on
/// `stream`; returns the send's completion, or the scoped post's error.
fn stream_send(
    p: &mut DcPair,
    bad: Option<&mut BadFlow>,
    stream: u16,
    wr_id: u64,
    data: &[u8],
) -> Result<WorkCompletion> {
    let src: &mut MemoryRegion = match bad {
        Some(b) => &mut b.mr,
        None => &mut p.client.src,
    };
    src.write_at(0, data).unwrap();
    let src: &MemoryRegion = src;
    let addr = dc_addr(&p.client.ah, &p.server.dct);
    post_one(
        &mut p.client.dcis[0],
        &mut p.client.send_cq,
        addr,
        Some(stream),
        wr_id,
        src,
        Op::Send,
    )
}

/// The server's side of a good send: the receive posted before it, its
/// completion and the data.
fn expect_received(p: &mut DcPair, wr_id: u64, data: &[u8]) {
    let rx = p.server.recv_cq.wait(1, WAIT).unwrap();
    assert_wc(&rx[0], wr_id, WcOpcode::RECV);
    assert_eq!(rx[0].byte_len as usize, MSG, "{:?}", rx[0]);
    assert_eq!(
        p.server.dst.to_vec(..).unwrap(),
        data,
        "the received message"
    );
}

fn post_server_recv(p: &mut DcPair, wr_id: u64) {
    p.server.dst.fill(.., 0).unwrap();
    let sge = p.server.dst.sge(0..MSG).unwrap();
    unsafe { p.server.srq.post_recv(wr_id, &[sge]) }.unwrap();
}

/// Ports `test_dc_send_stream_bad_flow` (`DCI_TEST_BAD_FLOW_WITH_RESET`):
/// one DCI with DCI streams sends ten times on successive stream ids; every
/// third send comes from another PD's memory and fails with a local
/// protection error on its stream only, which is then reset
/// (`mlx5dv_dci_stream_id_reset`) and used again. The first time, resetting
/// a stream that is not in error must fail. Every injected error is caught
/// once, and every good send arrives intact.
///
/// The original injects on stream ids divisible by 3, which with ids kept
/// within the DCI's streams might inject none on a device with few streams;
/// here every third work request is the bad one.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dc_send_stream_bad_flow_resets_the_errored_stream() {
    let ctx = open();
    let Some(caps) = dci_streams_caps(&ctx) else {
        return;
    };
    let streams = streams_for(0, caps);
    if streams.log_num_errored == 0 {
        // Mlx5DcStreamsRes.set_bad_flow skips here: one errored stream
        // would move the whole DCI to ERR.
        missing_capability(
            ctx.name(),
            format_args!("DCI streams with log_num_errored >= 1 ({caps:?})"),
        );
        return;
    }
    let Some(mut p) = DcPair::new(&ctx, SendOps::SEND, &[Some(streams)]) else {
        return;
    };
    let mut bad = BadFlow::new(&ctx);
    let mut ids = StreamIds::new(0, streams);
    let (mut injected, mut caught) = (0, 0);
    let mut good_stream_reset_checked = false;
    post_server_recv(&mut p, 1000);
    for i in 0..ITERS {
        let stream = ids.next();
        let data = pattern(MSG, i as u8);
        let bad_flow = i % 3 == 2;
        injected += usize::from(bad_flow);
        let wc = stream_send(
            &mut p,
            bad_flow.then_some(&mut bad),
            stream,
            i as u64,
            &data,
        )
        .unwrap_or_else(|e| panic!("posting wr {i}: {e}"));
        if wc.status != WcStatus::SUCCESS {
            assert!(bad_flow, "a good send failed: {wc:?}");
            assert_eq!(wc.status, WcStatus::LOC_PROT_ERR, "{wc:?}");
            caught += 1;
            let dci = &p.client.dcis[0];
            // mlx5dv_dci_stream_id_reset(3): an error of one stream leaves
            // the DCI in RTS.
            assert_eq!(dci.state().unwrap(), QpState::Rts, "stream {stream}");
            dci.dci_stream_id_reset(stream)
                .unwrap_or_else(|e| panic!("resetting errored stream {stream}: {e}"));
            if !good_stream_reset_checked {
                let good = (stream + 1) % ids.num;
                let r = dci.dci_stream_id_reset(good);
                assert!(
                    matches!(
                        r,
                        Err(Error::Verbs {
                            call: "mlx5dv_dci_stream_id_reset",
                            ..
                        })
                    ),
                    "resetting stream {good}, which is not in error, must fail: {r:?}"
                );
                good_stream_reset_checked = true;
            }
            continue;
        }
        assert!(
            !bad_flow,
            "a send from another PD's memory succeeded: {wc:?}"
        );
        assert_wc(&wc, i as u64, WcOpcode::SEND);
        expect_received(&mut p, 1000, &data);
        post_server_recv(&mut p, 1000);
    }
    assert_eq!(injected, caught, "injected vs caught stream errors");
    assert!(
        good_stream_reset_checked,
        "resetting a stream that is not in error was never tried"
    );
}

/// The client's DCI 0, in ERR after `errored` of its streams erred, reset
/// and brought back to RTS.
fn recover(p: &DcPair, errored: usize, errored_limit: usize) {
    assert_eq!(
        errored, errored_limit,
        "the DCI is in ERR after {errored} errored streams; 2^log_num_errored = {errored_limit}"
    );
    let dci = &p.client.dcis[0];
    dci.reset().unwrap();
    dci.ready(DCI_PSN, &p.opts).unwrap();
    assert_eq!(dci.state().unwrap(), QpState::Rts);
}

/// Ports `test_dc_send_stream_bad_flow_qp` (`DCI_TEST_BAD_FLOW_WITHOUT_RESET`):
/// one DCI with DCI streams sends twenty times from another PD's memory on
/// successive stream ids, without resetting them. Each stream errs once
/// (local protection error, never twice on one stream); when the number of
/// errored streams reaches 2^`log_num_errored` the DCI moves to ERR and the
/// next send is refused by the crate (`Error::QpNotReady` in ERR: the
/// scoped post that saw the failure asked the DCI's state), where the
/// original's is flushed (either is taken). The DCI is then reset and
/// brought back to RTS, and the remaining sends, from good memory, arrive
/// intact.
///
/// The original ends without checking that the recovery happened; here it
/// must have, and at least one good send must have followed it.
#[test]
#[ignore = "needs an mlx5 device: set MLX5DV_TEST_MLX5_DEVICE"]
fn dc_send_stream_bad_flow_recovers_the_qp() {
    const ITERS_QP: usize = 20;
    let ctx = open();
    let Some(caps) = dci_streams_caps(&ctx) else {
        return;
    };
    let streams = streams_for(0, caps);
    let Some(mut p) = DcPair::new(&ctx, SendOps::SEND, &[Some(streams)]) else {
        return;
    };
    let errored_limit = 1usize << streams.log_num_errored;
    let mut bad = BadFlow::new(&ctx);
    let mut ids = StreamIds::new(0, streams);
    let mut errored_streams = HashSet::new();
    let mut recovered = false;
    let mut good_after_recovery = 0;
    post_server_recv(&mut p, 2000);
    for i in 0..ITERS_QP {
        let stream = ids.next();
        let data = pattern(MSG, i as u8);
        let bad_flow = !recovered;
        let sent = stream_send(
            &mut p,
            bad_flow.then_some(&mut bad),
            stream,
            i as u64,
            &data,
        );
        let wc = match sent {
            Ok(wc) => wc,
            Err(Error::QpNotReady {
                state: QpState::Err,
                ..
            }) if bad_flow => {
                recover(&p, errored_streams.len(), errored_limit);
                recovered = true;
                continue;
            }
            Err(e) => panic!("posting wr {i}: {e}"),
        };
        match wc.status {
            WcStatus::SUCCESS => {
                assert!(
                    !bad_flow,
                    "a send from another PD's memory succeeded: {wc:?}"
                );
                assert_wc(&wc, i as u64, WcOpcode::SEND);
                expect_received(&mut p, 2000, &data);
                post_server_recv(&mut p, 2000);
                good_after_recovery += 1;
            }
            WcStatus::LOC_PROT_ERR => {
                assert!(bad_flow, "{wc:?}");
                assert!(
                    errored_streams.insert(stream),
                    "a second error from stream {stream}"
                );
            }
            WcStatus::WR_FLUSH_ERR => {
                assert!(bad_flow, "a good send was flushed: {wc:?}");
                if p.client.dcis[0].state().unwrap() == QpState::Err {
                    recover(&p, errored_streams.len(), errored_limit);
                    recovered = true;
                }
            }
            other => panic!("unexpected status {other:?}: {wc:?}"),
        }
    }
    assert!(
        recovered,
        "the DCI never reached ERR: {} streams errored, limit {errored_limit}",
        errored_streams.len()
    );
    assert!(good_after_recovery > 0, "no good send after the recovery");
}
