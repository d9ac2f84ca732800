//! Device test rig: opens the device named by `MLX5DV_TEST_DEVICE`, picks
//! a RoCE v2 GID, and connects pairs of RC QPs to each other on it.

#![allow(dead_code)]

use mlx5dv::*;
use std::time::Duration;

/// CPU time this thread has used, user and system
/// (`getrusage(RUSAGE_THREAD)`): what a wait that sleeps does not use.
pub fn thread_cpu() -> Duration {
    // SAFETY: `rusage` is plain data; all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid, writable `rusage`.
    assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) }, 0);
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// How long a test waits for completions (soft-RoCE under emulation is slow).
pub const WAIT: Duration = Duration::from_secs(20);

/// The device to test on; panics (fails the test) when the variable is not
/// set, since a device test asked to run without a device must not pass.
pub fn device_name() -> String {
    std::env::var("MLX5DV_TEST_DEVICE").unwrap_or_else(|_| {
        panic!(
            "MLX5DV_TEST_DEVICE is not set: this test needs an RDMA device \
             (run it through scripts/test, or set MLX5DV_TEST_DEVICE=rxe0)"
        )
    })
}

/// Every permutation of 0..n, in lexicographic order (the drop orders of
/// the lifetime tests).
pub fn permutations(n: usize) -> Vec<Vec<usize>> {
    let mut p: Vec<usize> = (0..n).collect();
    let mut all = vec![p.clone()];
    loop {
        let Some(i) = (0..n.saturating_sub(1)).rev().find(|&i| p[i] < p[i + 1]) else {
            return all;
        };
        let j = (i + 1..n).rev().find(|&j| p[j] > p[i]).unwrap();
        p.swap(i, j);
        p[i + 1..].reverse();
        all.push(p.clone());
    }
}

pub fn open() -> Context {
    let name = device_name();
    Context::open(&name).unwrap_or_else(|e| panic!("cannot open {name}: {e}"))
}

/// The connection options for port 1 of `ctx`: its active MTU and, on
/// RoCE, the first RoCE v2 GID (`MLX5DV_TEST_GID_INDEX` overrides).
pub fn connect_options(ctx: &Context) -> ConnectOptions {
    let port = ctx.query_port(1).expect("query port 1");
    assert_eq!(
        port.state,
        PortState::Active,
        "port 1 of {} is not active",
        ctx.name()
    );
    let gid_index = match std::env::var("MLX5DV_TEST_GID_INDEX") {
        Ok(v) => Some(v.parse::<u8>().expect("MLX5DV_TEST_GID_INDEX is a number")),
        Err(_) if port.link_layer == LinkLayer::Ethernet => {
            let table = ctx.gid_table().expect("GID table");
            let e = table
                .iter()
                .find(|e| e.port == 1 && e.gid_type == GidType::RoceV2 && !e.gid.is_zero())
                .unwrap_or_else(|| panic!("no RoCE v2 GID on {} port 1: {table:?}", ctx.name()));
            Some(e.index as u8)
        }
        Err(_) => None,
    };
    ConnectOptions::default()
        .gid_index(gid_index)
        .mtu(port.active_mtu)
        // Fail fast rather than retry for minutes when a test breaks.
        .timeout(14)
        .retry_cnt(7)
        .rnr_retry(7)
        .max_rd_atomic(4)
        .max_dest_rd_atomic(4)
}

/// One side of a connection: a QP with its own CQs and a memory region.
pub struct Side {
    pub qp: RcQp,
    pub send_cq: CompletionQueue,
    pub recv_cq: CompletionQueue,
    pub mr: MemoryRegion,
}

/// Two RC QPs on one device, connected to each other.
pub struct Pair {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub a: Side,
    pub b: Side,
    pub opts: ConnectOptions,
}

pub const MR_LEN: usize = 64 * 1024;

/// A region memory windows may be bound to: local write and window binds,
/// no remote access of its own.
pub fn bindable(pd: &ProtectionDomain) -> MemoryRegion {
    MemoryRegion::new(pd, MR_LEN, AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND).unwrap()
}

/// Remote read and write: what the tests' windows grant.
pub fn remote_rw() -> AccessFlags {
    AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE
}

pub fn access_all() -> AccessFlags {
    AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC
}

/// One side of a `Pair`: an RC QP with its own CQs and a region, not
/// connected.
pub fn side(ctx: &Context, pd: &ProtectionDomain, caps: QpCaps, ops: SendOps) -> Side {
    let send_cq = CompletionQueue::new(ctx, 256).expect("send CQ");
    let recv_cq = CompletionQueue::new(ctx, 256).expect("recv CQ");
    let qp = QpBuilder::rc(pd, &send_cq, &recv_cq)
        .caps(caps)
        .send_ops(ops)
        .build()
        .expect("create RC QP");
    let mr = MemoryRegion::new(pd, MR_LEN, access_all()).expect("register MR");
    Side {
        qp,
        send_cq,
        recv_cq,
        mr,
    }
}

impl Pair {
    pub fn new() -> Pair {
        Self::with(QpCaps::default(), SendOps::rc_default())
    }

    pub fn with(caps: QpCaps, ops: SendOps) -> Pair {
        Self::tuned(caps, ops, |_| {})
    }

    /// A pair whose connection options `tweak` adjusts (timeouts, retries).
    pub fn tuned(caps: QpCaps, ops: SendOps, tweak: impl FnOnce(&mut ConnectOptions)) -> Pair {
        let mut pair = Self::unconnected(caps, ops);
        tweak(&mut pair.opts);
        pair.connect();
        pair
    }

    /// A connected pair whose B side sends on a CQ of `cqe` entries of its
    /// own (`b.send_cq`), made with `caps` and `ops`.
    pub fn with_b_send_cq(cqe: u32, caps: QpCaps, ops: SendOps) -> Pair {
        let mut p = Self::unconnected(caps, ops);
        let send_cq = CompletionQueue::new(&p.ctx, cqe).expect("B's send CQ");
        p.b.qp = QpBuilder::rc(&p.pd, &send_cq, &p.b.recv_cq)
            .caps(caps)
            .send_ops(ops)
            .build()
            .expect("create RC QP");
        p.b.send_cq = send_cq;
        p.connect();
        p
    }

    /// A pair whose QPs are left in RESET (`connect` connects them).
    pub fn unconnected(caps: QpCaps, ops: SendOps) -> Pair {
        let ctx = open();
        let pd = ProtectionDomain::new(&ctx).expect("alloc PD");
        let opts = connect_options(&ctx);
        let a = side(&ctx, &pd, caps, ops);
        let b = side(&ctx, &pd, caps, ops);
        Pair {
            ctx,
            pd,
            a,
            b,
            opts,
        }
    }

    /// Connects A and B to each other (from RESET).
    pub fn connect(&mut self) {
        let (psn_a, psn_b) = (0x1234, 0x4321);
        let ea = self.a.qp.endpoint(psn_a, &self.opts).expect("endpoint A");
        let eb = self.b.qp.endpoint(psn_b, &self.opts).expect("endpoint B");
        self.a
            .qp
            .connect(&eb, psn_a, &self.opts)
            .expect("connect A");
        self.b
            .qp
            .connect(&ea, psn_b, &self.opts)
            .expect("connect B");
        assert_eq!(self.a.qp.state().unwrap(), QpState::Rts);
        assert_eq!(self.b.qp.state().unwrap(), QpState::Rts);
    }
}

/// A recognisable pattern: byte i is (i * 7 + seed) mod 251.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| ((i * 7 + seed as usize) % 251) as u8)
        .collect()
}

/// Asserts one successful completion with this wr_id and opcode.
#[track_caller]
pub fn assert_wc(wc: &WorkCompletion, wr_id: u64, opcode: WcOpcode) {
    assert_eq!(wc.status, WcStatus::SUCCESS, "{wc:?}");
    assert_eq!(wc.wr_id, wr_id, "{wc:?}");
    assert_eq!(wc.opcode, opcode, "{wc:?}");
}
