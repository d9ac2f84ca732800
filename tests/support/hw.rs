//! mlx5 hardware test rig, shared by the `tests/mlx5_hw_*.rs` suites (ports
//! of rdma-core's own mlx5 tests): opens the mlx5 device named by
//! `MLX5DV_TEST_MLX5_DEVICE`, decides what a missing device capability does,
//! and builds what the tests run on: RC pairs whose QPs have mlx5 send ops,
//! and DC pairs (DCIs, a DCT on an SRQ, an address handle to the local
//! port), both sides on the one device, as rdma-core's tests do.
//!
//! A test asked to run without its device fails. A device that lacks a
//! capability the original test skips on fails the test too, with a message
//! naming the capability, unless `MLX5DV_TEST_ALLOW_MISSING_CAPS=1` is set:
//! then the test prints that line and returns (it is counted as passed by
//! the harness, so that setting is for surveying a device, not for sign-off).
//!
//! The port and GID come from [`rig::connect_options`]: port 1, which must
//! be active; on RoCE the first RoCE v2 GID (`MLX5DV_TEST_GID_INDEX`
//! overrides); on InfiniBand no GRH.

#![allow(dead_code)]

use super::rig;
use mlx5dv::mlx5::{DciStreamsCaps, Mlx5Caps};
use mlx5dv::*;
use std::fmt;
use std::ops::RangeBounds;
use std::sync::Once;

/// The variable naming the mlx5 device, e.g. `mlx5_0`.
pub const DEVICE_ENV: &str = "MLX5DV_TEST_MLX5_DEVICE";

/// Set to `1` to let a test whose capability the device lacks print a line
/// and return instead of failing.
pub const ALLOW_MISSING_CAPS_ENV: &str = "MLX5DV_TEST_ALLOW_MISSING_CAPS";

/// rdma-core's tests move 1024-byte messages (`msg_size` in `tests/base.py`).
pub const MSG: usize = 1024;

/// The DC access key of every DCT here.
pub const DCT_KEY: u64 = 0x0bad_c0de_0000_1234;

/// The mlx5 device to test on; panics (fails the test) when the variable is
/// unset or empty, since a hardware test asked to run without its device
/// must not pass.
pub fn device_name() -> String {
    match std::env::var(DEVICE_ENV) {
        Ok(name) if !name.is_empty() => name,
        _ => panic!(
            "{DEVICE_ENV} is not set: this test needs an mlx5 (ConnectX) device; \
             run it with {DEVICE_ENV}=mlx5_0 (see `ibv_devices`)"
        ),
    }
}

/// Opens the device and checks that it is an mlx5 device: any other device
/// is a misconfiguration, not a missing capability, and fails the test.
pub fn open() -> Context {
    let name = device_name();
    let ctx = Context::open(&name).unwrap_or_else(|e| panic!("cannot open {name}: {e}"));
    assert!(
        ctx.is_mlx5(),
        "{DEVICE_ENV}={name} is not an mlx5 device (mlx5dv_is_supported is false): \
         these tests need a ConnectX device"
    );
    ctx
}

/// The device's mlx5 capabilities (`mlx5dv_query_device`).
pub fn mlx5_caps(ctx: &Context) -> Mlx5Caps {
    ctx.mlx5_caps()
        .unwrap_or_else(|e| panic!("mlx5dv_query_device on {}: {e}", ctx.name()))
}

/// The device lacks `what`, which the original test skips on. Fails the
/// test unless `MLX5DV_TEST_ALLOW_MISSING_CAPS=1`, in which case it prints
/// the line and the caller returns.
#[track_caller]
pub fn missing_capability(device: &str, what: impl fmt::Display) {
    let line = format!("device {device} lacks {what}: this test cannot run here");
    if std::env::var(ALLOW_MISSING_CAPS_ENV).as_deref() == Ok("1") {
        eprintln!("SKIPPED, NOT RUN: {line} ({ALLOW_MISSING_CAPS_ENV}=1)");
    } else {
        panic!("{line} (set {ALLOW_MISSING_CAPS_ENV}=1 to skip instead of failing)");
    }
}

/// `Some(value)`; or, when the device refused with [`Error::Unsupported`]
/// (`EOPNOTSUPP`, where the original test skips), [`missing_capability`]
/// and `None`. Any other error fails the test.
#[track_caller]
pub fn or_missing<T>(r: Result<T>, device: &str, what: &str) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e @ Error::Unsupported { .. }) => {
            missing_capability(device, format_args!("{what} ({e})"));
            None
        }
        Err(e) => panic!("{what} on {device}: {e}"),
    }
}

/// The DCI streams capabilities, or [`missing_capability`] and `None` when
/// the device reports none or `max_log_num_concurent` of 0 (where
/// `Mlx5DcStreamsRes` in rdma-core's `tests/mlx5_base.py` skips).
pub fn dci_streams_caps(ctx: &Context) -> Option<DciStreamsCaps> {
    match mlx5_caps(ctx).dci_streams_caps {
        Some(c) if c.max_log_num_concurent > 0 => Some(c),
        other => {
            missing_capability(
                ctx.name(),
                format_args!("DCI streams (dci_streams_caps: {other:?})"),
            );
            None
        }
    }
}

/// Sets every byte of `range` of `mr` to `byte` (volatile writes: the
/// test regions are peer-writable).
pub fn fill(mr: &mut MemoryRegion, range: impl RangeBounds<usize>, byte: u8) {
    mr.fill(range, byte).expect("fill a range of the MR");
}

/// Keeps the mlx5 provider from scattering small received messages into
/// the CQE (`MLX5_SCATTER_TO_CQE=0`, read by libmlx5 when a QP is created).
///
/// rdma-core's mkey tests create their QPs with
/// `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`: a receive of 32 bytes or less
/// would otherwise arrive in the CQE, and the provider would copy it to the
/// receive SGE's address, which through a zero-based mkey is an offset, not
/// a pointer. [`QpBuilder`] has no way to pass that create flag, so the
/// provider's environment switch is used instead. It is set once per test
/// binary; every test of a binary that needs it calls this first, before
/// any verbs call, so no other thread reads the environment meanwhile.
pub fn disable_scatter_to_cqe() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| std::env::set_var("MLX5_SCATTER_TO_CQE", "0"));
}

/// One side of an RC pair: a QP with its own CQs and a memory region.
pub struct RcSide {
    pub qp: RcQp,
    pub send_cq: CompletionQueue,
    pub recv_cq: CompletionQueue,
    pub mr: MemoryRegion,
}

/// Two RC QPs on one device and one PD, created with `mlx5dv_create_qp` and
/// the given mlx5 send ops, connected to each other.
pub struct RcPair {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub opts: ConnectOptions,
    pub a: RcSide,
    pub b: RcSide,
}

impl RcPair {
    /// The pair, or `None` after [`missing_capability`] when the device
    /// refuses the QPs with [`Error::Unsupported`] (where the original test
    /// skips). Each side gets a zeroed memory region of `mr_len` bytes with
    /// every access right.
    pub fn new(
        ctx: &Context,
        caps: QpCaps,
        ops: SendOps,
        mlx5_ops: Mlx5SendOps,
        mr_len: usize,
    ) -> Option<RcPair> {
        let pd = ProtectionDomain::new(ctx).expect("alloc PD");
        let opts = rig::connect_options(ctx);
        let side = || -> Result<RcSide> {
            let send_cq = CompletionQueue::new(ctx, 256)?;
            let recv_cq = CompletionQueue::new(ctx, 256)?;
            let qp = QpBuilder::rc(&pd, &send_cq, &recv_cq)
                .caps(caps)
                .send_ops(ops)
                .mlx5_send_ops(mlx5_ops)
                .build()?;
            let mr = MemoryRegion::new(&pd, mr_len, rig::access_all())?;
            Ok(RcSide {
                qp,
                send_cq,
                recv_cq,
                mr,
            })
        };
        let what = format!("RC QPs with mlx5 send ops {mlx5_ops:?} and send ops {ops:?}");
        let a = or_missing(side(), ctx.name(), &what)?;
        let b = or_missing(side(), ctx.name(), &what)?;
        let (psn_a, psn_b) = (0xa11a, 0xb22b);
        let ea = a.qp.endpoint(psn_a, &opts).expect("endpoint A");
        let eb = b.qp.endpoint(psn_b, &opts).expect("endpoint B");
        a.qp.connect(&eb, psn_a, &opts).expect("connect A");
        b.qp.connect(&ea, psn_b, &opts).expect("connect B");
        assert_eq!(a.qp.state().unwrap(), QpState::Rts);
        assert_eq!(b.qp.state().unwrap(), QpState::Rts);
        Some(RcPair {
            ctx: ctx.clone(),
            pd,
            opts,
            a,
            b,
        })
    }
}

/// One side of a DC pair, as `Mlx5DcResources` in rdma-core's
/// `tests/mlx5_base.py` builds it: DCIs (each ready to send), a DCT on an
/// SRQ (ready to receive), an address handle to the local port, and two
/// regions: `src`, what this side sends, and `dst`, where peers write and
/// receives land.
pub struct DcSide {
    pub pd: ProtectionDomain,
    pub send_cq: CompletionQueue,
    pub recv_cq: CompletionQueue,
    pub srq: SharedReceiveQueue,
    pub dcis: Vec<DciQp>,
    pub dct: Dct,
    pub ah: AddressHandle,
    pub src: MemoryRegion,
    pub dst: MemoryRegion,
}

/// Two DC sides on one device: `client` sends to `server`'s DCT and back.
pub struct DcPair {
    pub ctx: Context,
    pub opts: ConnectOptions,
    pub client: DcSide,
    pub server: DcSide,
}

/// The packet sequence number the DCIs start from.
pub const DCI_PSN: u32 = 0x0012_3456;

impl DcSide {
    fn new(
        ctx: &Context,
        opts: &ConnectOptions,
        ops: SendOps,
        streams: &[Option<DciStreams>],
    ) -> Result<DcSide> {
        let pd = ProtectionDomain::new(ctx)?;
        let send_cq = CompletionQueue::new(ctx, 256)?;
        let recv_cq = CompletionQueue::new(ctx, 256)?;
        let srq = SharedReceiveQueue::new(&pd, 64, 1)?;
        let mut dcis = Vec::with_capacity(streams.len());
        for s in streams {
            let mut b = QpBuilder::dci(&pd, &send_cq);
            // QPCap(100, 0, 1, 0) of Mlx5DcResources.create_qp_cap.
            b.caps(QpCaps {
                max_send_wr: 100,
                max_recv_wr: 0,
                max_send_sge: 1,
                max_recv_sge: 0,
                max_inline_data: 0,
            })
            .send_ops(ops);
            if let Some(s) = s {
                b.dci_streams(s.log_num_concurent, s.log_num_errored);
            }
            let dci = b.build()?;
            dci.ready(DCI_PSN, opts)?;
            dcis.push(dci);
        }
        let dct = Dct::new(&pd, &recv_cq, &srq, DCT_KEY)?;
        dct.ready(opts)?;
        let ah = AddressHandle::new(&pd, &local_port_ah(ctx, opts)?)?;
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let src = MemoryRegion::new(&pd, MSG, access)?;
        let dst = MemoryRegion::new(&pd, MSG, access)?;
        Ok(DcSide {
            pd,
            send_cq,
            recv_cq,
            srq,
            dcis,
            dct,
            ah,
            src,
            dst,
        })
    }
}

impl DcPair {
    /// Both sides, each with one DCI per entry of `streams` (with DCI
    /// streams where the entry is `Some`) created with send ops `ops`; or
    /// `None` after [`missing_capability`] when the device refuses DC with
    /// [`Error::Unsupported`] (where the original test skips).
    pub fn new(ctx: &Context, ops: SendOps, streams: &[Option<DciStreams>]) -> Option<DcPair> {
        let opts = rig::connect_options(ctx);
        let what = format!("DC transport (DCIs with send ops {ops:?}, {streams:?}; a DCT)");
        let client = or_missing(DcSide::new(ctx, &opts, ops, streams), ctx.name(), &what)?;
        let server = or_missing(DcSide::new(ctx, &opts, ops, streams), ctx.name(), &what)?;
        for side in [&client, &server] {
            for dci in &side.dcis {
                assert_eq!(dci.state().unwrap(), QpState::Rts, "{dci:?}");
            }
        }
        Some(DcPair {
            ctx: ctx.clone(),
            opts,
            client,
            server,
        })
    }
}

/// The address of `dct` for work requests of a DCI whose PD holds `ah`.
pub fn dc_addr<'a>(ah: &'a AddressHandle, dct: &Dct) -> DcAddr<'a> {
    DcAddr::new(ah, dct.dctn(), DCT_KEY)
}

/// The path to the local port (`get_global_ah` in rdma-core's
/// `tests/utils.py`): its LID, and on RoCE its own GID as destination.
pub fn local_port_ah(ctx: &Context, opts: &ConnectOptions) -> Result<AhAttr> {
    let port = ctx.query_port(opts.port)?;
    let gid = match opts.gid_index {
        Some(i) => ctx.gid(opts.port, u32::from(i))?,
        None => Gid::default(),
    };
    Ok(AhAttr::towards(port.lid, gid, opts))
}
