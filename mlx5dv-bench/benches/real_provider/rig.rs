//! The objects on the device, the same objects as the C loops take them
//! (libmlx5's own QPs and CQ), and what happens between measured calls: the
//! device run (`mlx5dv_sim_step`), the completions drained, the peer's
//! receives posted, and what the C loops read taken back for the check.

use crate::common::wc::{BenchWc, CWcFull};
use crate::common::DcTarget;
use crate::common::{CDc, CQp, CSide, BATCH, LOG_STREAMS, MSG};
use mlx5dv::direct::{DirectDcAddr, DirectDci, DirectRc, DirectWc};
use mlx5dv::ffi;
use mlx5dv::wqe::{Opcode, Wqe, WqeBuilder};
use mlx5dv::{
    AccessFlags, AddressHandle, AhAttr, CompletionChannel, CompletionQueue, ConnectOptions,
    Context, DcAddr, DciQp, Dct, Endpoint, Gid, MemoryRegion, Mkey, Mlx5SendOps, ProtectionDomain,
    QpBuilder, QpCaps, RcQp, RemoteBuf, Result, SendFlags, SendOps, SharedReceiveQueue, WcOpcode,
    WcStatus, WorkCompletion,
};
use std::ffi::{c_char, c_int, c_void};
use std::ptr::{self, NonNull};
use std::sync::mpsc;
use std::time::Duration;

/// Calls made back to back before the device runs them: the send queues
/// hold `GROUP` batches, and the poll shape finds `GROUP` rounds waiting.
pub const GROUP: u64 = 8;
/// The send queues' depth: room for `GROUP` batches, twice.
const SQ_DEPTH: u32 = 2 * GROUP as u32 * BATCH as u32;
/// Bytes of the local region (the C plan's offsets reach 8192 + 128).
const LOCAL_LEN: usize = 16384;
/// The DC access key of the DCT.
const DC_KEY: u64 = 0x0bad_c0de_0000_1234;
const PSN: u32 = 0x1234;
/// How long after a scoped post starts the stepper runs the device.
const SCOPED_STEP_DELAY: Duration = Duration::from_millis(10);
/// The device name scripts/mlx5-sim gives its device.
const DEVICE: &str = "mlx5_0";

extern "C" {
    // `c/plain.c`.
    fn bench_plan_new(mr: *const ffi::ibv_mr, remote_addr: u64) -> *mut c_void;
    fn bench_wc_new() -> *mut c_void;
    // `c/direct.c`.
    fn c_direct_new(qp: *mut ffi::ibv_qp, cq: *mut ffi::ibv_cq_ex) -> *mut c_void;
    fn c_direct_set_streams(d: *mut c_void, streams: u32);
    fn c_direct_ack_events(d: *mut c_void);
    fn c_direct_remotes_new(plan: *const c_void, rkey: u32) -> *mut c_void;
    fn c_direct_dc_addr(ah: *mut ffi::ibv_ah, dctn: u32, key: u64, out: *mut [u64; 6]) -> c_int;
    // glibc.
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// `int mlx5dv_sim_step(void)` of the software device.
type Step = unsafe extern "C" fn() -> c_int;

/// Everything on the device. Field order is drop order: the region
/// wrappers go before the region they wrap.
pub struct Rig {
    pub rc: RcQp,
    /// The direct path's RC QP (`mlx5dv::direct`), and C direct's
    /// (`c/direct.c`'s `struct direct_qp`, over `cdirect_qp` and its send
    /// CQ), each connected to a peer of its own.
    pub direct: DirectRc,
    pub cdirect: *mut c_void,
    pub direct_sq: SqView,
    pub cdirect_sq: SqView,
    /// Where the direct polls read their completions to.
    pub dwcs: [DirectWc; BATCH],
    pub cdwcs: [CDirectWc; BATCH],
    /// The direct DCIs (with DCI streams, each its own CQ), Rust's and C
    /// direct's, writing to the DCT, and the DC target's address as each
    /// writes it into its WQEs (C's: `struct direct_av`).
    pub direct_dci: DirectDci,
    pub cdirect_dci: *mut c_void,
    pub direct_dci_sq: SqView,
    pub cdirect_dci_sq: SqView,
    pub dav: DirectDcAddr,
    pub cav: Box<[u64; 6]>,
    /// The plan's remote buffers as C direct checked takes them
    /// (`struct direct_remote`: address, length, rkey).
    pub cremotes: *mut c_void,
    /// The scoped posts' QPs, Rust's and C direct's, each with a send CQ
    /// on a completion channel of its own (the waits sleep on it), each
    /// connected to a peer of its own; where their completions go.
    pub direct_scoped: DirectRc,
    pub cdirect_scoped: *mut c_void,
    pub direct_scoped_sq: SqView,
    pub cdirect_scoped_sq: SqView,
    pub scoped_wcs: Vec<DirectWc>,
    cdirect_scoped_qp: RcQp,
    _scoped_peers: [RcQp; 2],
    _scoped_cqs: [CompletionQueue; 3],
    _scoped_channels: [CompletionChannel; 2],
    /// The thread that runs the device for a scoped post while it waits,
    /// and its word that it has (each step ends before the next call).
    stepper: Option<mpsc::Sender<()>>,
    stepped: mpsc::Receiver<()>,
    step_pending: bool,
    stepper_thread: Option<std::thread::JoinHandle<()>>,
    cdirect_qp: RcQp,
    cdirect_dci_qp: DciQp,
    _direct_peers: [RcQp; 2],
    _direct_cqs: [CompletionQueue; 4],
    pub dci: DciQp,
    pub cq: CompletionQueue,
    pub mkey: Mkey,
    pub ah: AddressHandle,
    pub dc: DcTarget,
    pub wqe: Wqe,
    /// The local region again, as the natural forms borrow it: a source
    /// (`src.sge(..)?`) and memcpy destinations (`dst.sge_mut(..)?`).
    pub src: MemoryRegion,
    pub dst: MemoryRegion,
    /// The peer's buffer, where the writes land.
    pub remote: RemoteBuf,
    /// Where `rust_poll_cq` reads the completions to.
    pub completions: [BenchWc; BATCH],
    /// Where `rust_poll_into` and `rust_cq_wait_into` read them to, and
    /// where what `rust_cq_wait` returned is copied for the check.
    pub wcs: Vec<WorkCompletion>,
    peer: RcQp,
    peer_cq: CompletionQueue,
    _dct: Dct,
    _srq: SharedReceiveQueue,
    remote_mr: MemoryRegion,
    local: MemoryRegion,
    _pd: ProtectionDomain,
    _ctx: Context,
    step: Step,
    rc_sq: SqView,
    dci_sq: SqView,
    drained: Vec<WorkCompletion>,
}

impl Drop for Rig {
    fn drop(&mut self) {
        // The stepper's last step ends, and the thread with it, before
        // anything it may touch is destroyed.
        if self.step_pending {
            let _ = self.stepped.recv();
        }
        drop(self.stepper.take());
        if let Some(t) = self.stepper_thread.take() {
            let _ = t.join();
        }
        // SAFETY: C direct's scoped QP, live; its CQ is destroyed after
        // this (a field), and waits for the events C read to be
        // acknowledged.
        unsafe { c_direct_ack_events(self.cdirect_scoped) };
    }
}

/// Why the bench cannot run: it needs the software device in step mode.
fn need_the_sim(what: &str) -> ! {
    eprintln!(
        "real_provider: {what}: run it with scripts/bench-real (the software mlx5 device, \
         scripts/mlx5-sim, with MLX5DV_SIM_THREAD=0)"
    );
    std::process::exit(2)
}

impl Rig {
    /// Opens the device and makes every object.
    pub fn open() -> Result<Rig> {
        if std::env::var("MLX5DV_SIM_THREAD").as_deref() != Ok("0") {
            need_the_sim("MLX5DV_SIM_THREAD is not 0");
        }
        // SAFETY: dlsym with RTLD_DEFAULT (a null handle in glibc) and a
        // NUL-terminated name.
        let step = unsafe { dlsym(ptr::null_mut(), c"mlx5dv_sim_step".as_ptr()) };
        if step.is_null() {
            need_the_sim("no mlx5dv_sim_step in this process");
        }
        // SAFETY: the software device exports `int mlx5dv_sim_step(void)`.
        let step = unsafe { std::mem::transmute::<*mut c_void, Step>(step) };
        let ctx = Context::open(DEVICE).unwrap_or_else(|e| need_the_sim(&e.to_string()));
        let pd = ProtectionDomain::new(&ctx)?;
        let opts = ConnectOptions::default();
        let depth = 4 * SQ_DEPTH;
        let cq = CompletionQueue::new(&ctx, depth)?;
        let peer_cq = CompletionQueue::new(&ctx, depth)?;
        let caps = QpCaps {
            max_send_wr: SQ_DEPTH,
            max_recv_wr: SQ_DEPTH,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        };
        let rc = QpBuilder::rc(&pd, &cq, &cq)
            .caps(caps)
            .send_ops(SendOps::RDMA_WRITE | SendOps::SEND)
            .mlx5_send_ops(Mlx5SendOps::MEMCPY | Mlx5SendOps::MR_LIST | Mlx5SendOps::RAW_WQE)
            .build()?;
        // A peer of its own for a QP whose endpoint is `e`, on the peers'
        // CQ, the two connected (`connect` connects the QP to the peer).
        let peer_of = |e: Endpoint, connect: &dyn Fn(&Endpoint) -> Result<()>| -> Result<RcQp> {
            let peer = QpBuilder::rc(&pd, &peer_cq, &peer_cq).caps(caps).build()?;
            connect(&peer.endpoint(PSN, &opts)?)?;
            peer.connect(&e, PSN, &opts)?;
            Ok(peer)
        };
        let peer = peer_of(rc.endpoint(PSN, &opts)?, &|e| rc.connect(e, PSN, &opts))?;

        // The direct QPs: each its own send CQ, receives on another.
        let (dcq, drq) = (
            CompletionQueue::new(&ctx, depth)?,
            CompletionQueue::new(&ctx, 16)?,
        );
        let dqp = QpBuilder::rc(&pd, &dcq, &drq).caps(caps).build()?;
        let direct_sq = SqView::of(dqp.as_ptr());
        let direct = dqp.into_direct(dcq)?;
        let dpeer = peer_of(direct.endpoint(PSN, &opts)?, &|e| {
            direct.connect_to(e, &opts)
        })?;
        let (ccq, crq) = (
            CompletionQueue::new(&ctx, depth)?,
            CompletionQueue::new(&ctx, 16)?,
        );
        let cdirect_qp = QpBuilder::rc(&pd, &ccq, &crq).caps(caps).build()?;
        let cpeer = peer_of(cdirect_qp.endpoint(PSN, &opts)?, &|e| {
            cdirect_qp.connect(e, PSN, &opts)
        })?;
        let cdirect_sq = SqView::of(cdirect_qp.as_ptr());
        // SAFETY: a live mlx5 RC QP, never posted, and its send CQ, which
        // only C direct polls from here on; never freed (as the plan).
        let cdirect = unsafe { c_direct_new(cdirect_qp.as_ptr(), ccq.as_ptr()) };
        assert!(!cdirect.is_null(), "c_direct_new");

        let dci = QpBuilder::dci(&pd, &cq)
            .caps(QpCaps {
                max_recv_wr: 0,
                max_recv_sge: 0,
                ..caps
            })
            .send_ops(SendOps::RDMA_WRITE)
            .dci_streams(LOG_STREAMS, 0)
            .build()?;
        dci.ready(PSN, &opts)?;
        let srq = SharedReceiveQueue::new(&pd, 16, 1)?;
        let dct = Dct::new(&pd, &peer_cq, &srq, DC_KEY)?;
        dct.ready(&opts)?;
        let port = ctx.query_port(opts.port)?;
        let ah = AddressHandle::new(&pd, &AhAttr::towards(port.lid, Gid::default(), &opts))?;
        let mkey = Mkey::new(&pd, 4, false)?;

        // The direct DCIs: each its own CQ, never posted through libmlx5.
        let dci_caps = QpCaps {
            max_recv_wr: 0,
            max_recv_sge: 0,
            ..caps
        };
        let to = DcAddr::new(&ah, dct.dctn(), DC_KEY);
        let ddcq = CompletionQueue::new(&ctx, depth)?;
        let ddci = QpBuilder::dci(&pd, &ddcq)
            .caps(dci_caps)
            .dci_streams(LOG_STREAMS, 0)
            .build()?;
        let direct_dci_sq = SqView::of(ddci.as_ptr());
        let direct_dci = ddci.into_direct(ddcq)?;
        direct_dci.ready(PSN, &opts)?;
        let dav = direct_dci.dc_addr(&to)?;
        let cdcq = CompletionQueue::new(&ctx, depth)?;
        let cdirect_dci_qp = QpBuilder::dci(&pd, &cdcq)
            .caps(dci_caps)
            .dci_streams(LOG_STREAMS, 0)
            .build()?;
        cdirect_dci_qp.ready(PSN, &opts)?;
        let cdirect_dci_sq = SqView::of(cdirect_dci_qp.as_ptr());
        // SAFETY: a live mlx5 DCI, never posted, and its CQ, which only C
        // direct polls from here on; never freed.
        let cdirect_dci = unsafe { c_direct_new(cdirect_dci_qp.as_ptr(), cdcq.as_ptr()) };
        assert!(!cdirect_dci.is_null(), "c_direct_new of the DCI");
        // SAFETY: the live C direct DCI just made; it has streams.
        unsafe { c_direct_set_streams(cdirect_dci, 1) };
        let mut cav = Box::new([0u64; 6]);
        // SAFETY: a live AH; room for the 48-byte address vector.
        let got = unsafe { c_direct_dc_addr(ah.as_ptr(), dct.dctn(), DC_KEY, &mut *cav) };
        assert_eq!(got, 0, "c_direct_dc_addr");

        // The scoped posts' QPs: send CQs on channels of their own.
        let (sch, csch) = (CompletionChannel::new(&ctx)?, CompletionChannel::new(&ctx)?);
        let scq = CompletionQueue::with_channel(&ctx, depth, &sch)?;
        let srcq = CompletionQueue::new(&ctx, 16)?;
        let sqp = QpBuilder::rc(&pd, &scq, &srcq).caps(caps).build()?;
        let direct_scoped_sq = SqView::of(sqp.as_ptr());
        let direct_scoped = sqp.into_direct(scq)?;
        let speer = peer_of(direct_scoped.endpoint(PSN, &opts)?, &|e| {
            direct_scoped.connect_to(e, &opts)
        })?;
        let cscq = CompletionQueue::with_channel(&ctx, depth, &csch)?;
        let csrq = CompletionQueue::new(&ctx, 16)?;
        let cdirect_scoped_qp = QpBuilder::rc(&pd, &cscq, &csrq).caps(caps).build()?;
        let cspeer = peer_of(cdirect_scoped_qp.endpoint(PSN, &opts)?, &|e| {
            cdirect_scoped_qp.connect(e, PSN, &opts)
        })?;
        let cdirect_scoped_sq = SqView::of(cdirect_scoped_qp.as_ptr());
        // SAFETY: a live mlx5 RC QP, never posted, and its send CQ, which
        // only C direct polls, arms and reads the events of from here on
        // (nothing of the crate waits on its channel); never freed.
        let cdirect_scoped = unsafe { c_direct_new(cdirect_scoped_qp.as_ptr(), cscq.as_ptr()) };
        assert!(!cdirect_scoped.is_null(), "c_direct_new of the scoped QP");
        // The device runs 10 ms after a scoped post starts: long after its
        // waiter, Rust's or C's, has armed the CQ and gone to sleep on the
        // channel (microseconds, even under callgrind), so that each call
        // does the same work, and its count repeats.
        let (stepper, steps) = mpsc::channel::<()>();
        let (done, stepped) = mpsc::channel::<()>();
        let stepper_thread = std::thread::Builder::new()
            .name("scoped-stepper".into())
            .spawn(move || {
                for () in steps {
                    std::thread::sleep(SCOPED_STEP_DELAY);
                    // SAFETY: the device's step runs what was posted; it
                    // takes the device's lock (the waiter is asleep).
                    unsafe { step() };
                    if done.send(()).is_err() {
                        break;
                    }
                }
            })
            .expect("the stepper thread");

        let local = MemoryRegion::new(&pd, LOCAL_LEN, AccessFlags::LOCAL_WRITE)?;
        let remote_mr = MemoryRegion::new(
            &pd,
            BATCH * MSG,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )?;
        let remote = remote_mr.remote(..)?;
        let wqe = WqeBuilder::new(Opcode::RdmaWrite, rc.qp_num())
            .signaled()
            .raddr_seg(remote.addr, remote.rkey)
            .data_seg(MSG as u32, local.lkey(), local.addr())
            .build()?;
        // SAFETY: as `plan_region`.
        let (src, dst) = unsafe { (local.alias()?, local.alias()?) };
        Ok(Rig {
            direct,
            cdirect,
            direct_sq,
            cdirect_sq,
            dwcs: [ZERO_WC; BATCH],
            cdwcs: [CDirectWc::default(); BATCH],
            direct_dci,
            cdirect_dci,
            direct_dci_sq,
            cdirect_dci_sq,
            dav,
            cav,
            // Made from the C plan (`c_remotes`).
            cremotes: ptr::null_mut(),
            direct_scoped,
            cdirect_scoped,
            direct_scoped_sq,
            cdirect_scoped_sq,
            scoped_wcs: Vec::with_capacity(BATCH),
            cdirect_scoped_qp,
            _scoped_peers: [speer, cspeer],
            _scoped_cqs: [cscq, csrq, srcq],
            _scoped_channels: [sch, csch],
            stepper: Some(stepper),
            stepped,
            step_pending: false,
            stepper_thread: Some(stepper_thread),
            cdirect_qp,
            cdirect_dci_qp,
            _direct_peers: [dpeer, cpeer],
            _direct_cqs: [drq, ccq, crq, cdcq],
            rc_sq: SqView::of(rc.as_ptr()),
            dci_sq: SqView::of(dci.as_ptr()),
            rc,
            dci,
            cq,
            mkey,
            ah,
            dc: DcTarget {
                dctn: dct.dctn(),
                key: DC_KEY,
            },
            wqe,
            src,
            dst,
            remote,
            completions: [BenchWc::ZERO; BATCH],
            wcs: Vec::new(),
            peer,
            peer_cq,
            _dct: dct,
            _srq: srq,
            remote_mr,
            local,
            _pd: pd,
            _ctx: ctx,
            step,
            drained: Vec::new(),
        })
    }

    /// The local region once more, for the plan to borrow exclusively
    /// (`Plan::new`). Drop it before the rig.
    pub fn plan_region(&self) -> Result<MemoryRegion> {
        // SAFETY: the wrapper is dropped before the rig (the caller's
        // promise, kept by `main`'s declaration order); nothing of the
        // program reads or writes the region's memory: only the device
        // does (memcpy destinations, write sources), so the wrappers never
        // access it in conflict.
        unsafe { self.local.alias() }
    }

    /// The objects as the C loops take them: libmlx5's QPs as their
    /// `ibv_qp_ex` and `mlx5dv_qp_ex` (`mlx5dv_qp_ex_from_ibv_qp_ex`), its
    /// CQ as its `ibv_cq_ex`, the batch's inputs and room for the
    /// completions.
    pub fn c_side(&self) -> CSide {
        let qp = |qpx: *mut ffi::ibv_qp_ex| CQp {
            qpx,
            // SAFETY: `qpx` is a live mlx5 QP's.
            mqpx: unsafe { ffi::mlx5dv_qp_ex_from_ibv_qp_ex(qpx) },
        };
        CSide {
            rc: qp(self.rc.as_qp_ex_ptr()),
            dci: qp(self.dci.as_qp_ex_ptr()),
            cq: self.cq.as_ptr(),
            rkey: self.remote.rkey,
            dc: CDc {
                ah: self.ah.as_ptr(),
                dctn: self.dc.dctn,
                key: self.dc.key,
            },
            mkey: self.mkey.as_ptr(),
            wqe: self.wqe.as_ptr(),
            // SAFETY: the region is live; the plan, like the completion
            // array, is never freed.
            plan: unsafe { bench_plan_new(self.local.as_ptr(), self.remote.addr) },
            // SAFETY: allocates.
            wc: unsafe { bench_wc_new() },
            // No `post_wait` here (see BENCHMARKS.md).
            rcw: ptr::null_mut(),
            wcq: ptr::null_mut(),
            // Never freed, as the plan.
            wc_full: Box::into_raw(Box::new([CWcFull::ZERO; BATCH])).cast(),
        }
    }

    /// Before `calls` calls of a shape: the peer's receives for sends, or
    /// 32 completions per call waiting on the CQ for the polls and waits.
    pub fn prepare(&mut self, work: Work, calls: u64) {
        let n = calls as usize * BATCH;
        match work {
            Work::Post { recvs: false, .. } => {}
            Work::Post { recvs: true, .. } => {
                let sge = self.remote_mr.sge(0..MSG).expect("a receive buffer");
                for i in 0..n {
                    // SAFETY: the peer's region stays registered for the
                    // whole run; nothing of the program reads it.
                    unsafe { self.peer.post_recv(i as u64, &[sge]) }.expect("post a receive");
                }
            }
            Work::Poll { .. } => {
                for _ in 0..calls {
                    let r = prime(&mut self.rc, &self.src, self.remote);
                    assert_eq!(r.expect("post the writes to poll"), BATCH as u32);
                }
                // SAFETY: the device's step runs what was posted.
                unsafe { (self.step)() };
            }
        }
    }

    /// After `calls` calls of a shape: the device runs the batches, and
    /// their completions (and the peer's, for sends) are drained and
    /// checked. Returns the send completions.
    pub fn settle(&mut self, work: Work, calls: u64) -> &[WorkCompletion] {
        let n = calls as usize * BATCH;
        self.drained.clear();
        if let Work::Post { recvs, .. } = work {
            drain(self.step, &mut self.cq, n, &mut self.drained);
            if recvs {
                let mut peer = Vec::with_capacity(n);
                drain(self.step, &mut self.peer_cq, n, &mut peer);
            }
        }
        &self.drained
    }

    /// Has the stepper thread run the device once, `SCOPED_STEP_DELAY`
    /// from now: for a scoped post about to wait.
    /// The step of the call before has ended first: it must not run this
    /// call's work requests early.
    pub fn step_later(&mut self) {
        if self.step_pending {
            self.stepped.recv().expect("the stepper thread");
        }
        let stepper = self.stepper.as_ref().expect("the stepper thread");
        stepper.send(()).expect("the stepper thread");
        self.step_pending = true;
    }

    /// C direct's scoped QP's number.
    pub fn cdirect_scoped_qpn(&self) -> u32 {
        self.cdirect_scoped_qp.qp_num()
    }

    /// Runs the device once (`mlx5dv_sim_step`).
    pub fn step(&self) {
        // SAFETY: the device's step runs what was posted.
        unsafe { (self.step)() };
    }

    /// C direct's QP number.
    pub fn cdirect_qpn(&self) -> u32 {
        self.cdirect_qp.qp_num()
    }

    /// C direct's DCI's QP number.
    pub fn cdirect_dci_qpn(&self) -> u32 {
        self.cdirect_dci_qp.qp_num()
    }

    /// The plan's remote buffers as C direct checked takes them, made
    /// once from `c`'s plan.
    pub fn c_remotes(&mut self, c: &CSide) -> *const c_void {
        if self.cremotes.is_null() {
            // SAFETY: `c.plan` is a live plan (never freed); so is this.
            self.cremotes = unsafe { c_direct_remotes_new(c.plan, c.rkey) };
            assert!(!self.cremotes.is_null(), "c_direct_remotes_new");
        }
        self.cremotes
    }

    /// The producer index of the send queue `q` (the doorbell record).
    pub fn sq_pc(&self, q: Queue) -> u16 {
        self.sq(q).pc()
    }

    /// The WQEs libmlx5 wrote on `q` between producer indexes `from` and
    /// `to`, each cut to its size, its WQE index zeroed.
    pub fn wqes(&self, q: Queue, from: u16, to: u16) -> Vec<Vec<u8>> {
        self.sq(q).wqes(from, to)
    }

    fn sq(&self, q: Queue) -> &SqView {
        match q {
            Queue::Rc => &self.rc_sq,
            Queue::Dci => &self.dci_sq,
        }
    }
}

/// What the last C loop `poll_full` or `cq_wait` read (into `c.wc_full`,
/// which `Rig::c_side` made), as `WorkCompletion`s, and the array zeroed
/// for the next.
pub fn take_full_wcs(c: &CSide) -> Vec<WorkCompletion> {
    // SAFETY: `wc_full` holds BATCH `CWcFull` (`Rig::c_side`), never freed;
    // no C loop runs during this.
    let wcs = unsafe { &mut *(c.wc_full as *mut [CWcFull; BATCH]) };
    let out = wcs.iter().map(|w| w.to_rust()).collect();
    *wcs = [CWcFull::ZERO; BATCH];
    out
}

trait Alias {
    /// Another handle on the same registered region (`from_raw`).
    ///
    /// # Safety
    ///
    /// As `MemoryRegion::from_raw`: the handle is dropped before `self`,
    /// and does not access the memory in conflict with other handles.
    unsafe fn alias(&self) -> Result<MemoryRegion>;
}

impl Alias for MemoryRegion {
    unsafe fn alias(&self) -> Result<MemoryRegion> {
        let mr = NonNull::new(self.as_ptr()).expect("a registered region");
        // SAFETY: `mr` is a live region of this PD registered with this
        // access; the caller keeps the rest.
        unsafe { MemoryRegion::from_raw(self.pd(), mr, self.access()) }
    }
}

/// 32 signalled RDMA writes for the poll shape to find completed (not a
/// measured function).
#[inline(never)]
fn prime(qp: &mut RcQp, src: &MemoryRegion, remote: RemoteBuf) -> Result<u32> {
    let mut b = qp.batch_with(SendFlags::SIGNALED);
    for i in 0..BATCH {
        let at = i * MSG;
        b.wr(i as u64)
            .rdma_write(remote.slice(at as u64, MSG as u64)?)
            .sge(src.sge(at..at + MSG)?)?;
    }
    // SAFETY: both regions stay registered for the whole run, and the
    // program touches neither.
    unsafe { b.complete() }
}

/// Runs the device until `n` completions have come on `cq`, into `out`;
/// panics on one that failed, or when they do not come.
fn drain(step: Step, cq: &mut CompletionQueue, n: usize, out: &mut Vec<WorkCompletion>) {
    for _ in 0..100 {
        if out.len() == n {
            break;
        }
        // SAFETY: the device's step runs what was posted.
        unsafe { step() };
        cq.poll_into(out, n - out.len()).expect("poll the CQ");
    }
    assert_eq!(out.len(), n, "the device completed {} of {n}", out.len());
    if let Some(bad) = out.iter().find(|wc| wc.status != WcStatus::SUCCESS) {
        panic!("a work request failed on the device: {bad:?}");
    }
}

/// A send queue as libmlx5 lays it out (`mlx5dv_init_obj`): 64-byte
/// basic blocks, and the doorbell record libmlx5 writes the producer
/// index to at each `ibv_wr_complete`.
pub struct SqView {
    buf: *const u8,
    wqe_cnt: u32,
    dbrec: *const u32,
}

impl SqView {
    fn of(qp: *mut ffi::ibv_qp) -> SqView {
        // SAFETY: zeroed is a valid `mlx5dv_qp` (pointers and integers).
        let mut out: ffi::mlx5dv_qp = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut obj: ffi::mlx5dv_obj = unsafe { std::mem::zeroed() };
        obj.qp.in_ = qp;
        obj.qp.out = &mut out;
        // SAFETY: `obj` names a live mlx5 QP and room for its layout.
        let rc = unsafe { ffi::mlx5dv_init_obj(&mut obj, u64::from(ffi::MLX5DV_OBJ_QP)) };
        assert_eq!(rc, 0, "mlx5dv_init_obj of a QP");
        assert_eq!(out.sq.stride, 64, "a send queue's basic block");
        SqView {
            buf: out.sq.buf as *const u8,
            wqe_cnt: out.sq.wqe_cnt,
            dbrec: out.dbrec as *const u32,
        }
    }

    /// The producer index (`MLX5_SND_DBR`, big-endian, 16 bits).
    pub fn pc(&self) -> u16 {
        // SAFETY: the doorbell record lives as long as the QP.
        u32::from_be(unsafe { ptr::read_volatile(self.dbrec.add(1)) }) as u16
    }

    /// Basic block `i` (modulo the queue).
    fn bb(&self, i: u16) -> &[u8] {
        let at = (u32::from(i) & (self.wqe_cnt - 1)) as usize * 64;
        // SAFETY: inside the send queue, which lives as long as the QP;
        // libmlx5 wrote these bytes before the doorbell record.
        unsafe { std::slice::from_raw_parts(self.buf.add(at), 64) }
    }

    pub fn wqes(&self, from: u16, to: u16) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut i = from;
        while i != to {
            let ctrl = self.bb(i);
            // qpn_ds: the WQE's size in 16-byte units, in its low 6 bits.
            let ds = usize::from(ctrl[7] & 0x3f);
            let blocks = (ds * 16).div_ceil(64) as u16;
            let mut wqe = Vec::with_capacity(usize::from(blocks) * 64);
            for k in 0..blocks {
                wqe.extend_from_slice(self.bb(i.wrapping_add(k)));
            }
            wqe.truncate(ds * 16);
            // opmod_idx_opcode: the WQE index in bytes 1 and 2.
            wqe[1..3].fill(0);
            out.push(wqe);
            i = i.wrapping_add(blocks.max(1));
        }
        out
    }
}

/// Which send queue a shape posts on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Queue {
    Rc,
    Dci,
}

/// What a shape's calls need around them (outside the measured calls).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Work {
    /// Posts a batch on this queue: afterwards the device runs it and its
    /// completions are drained; `recvs`: the peer needs a receive per work
    /// request (sends).
    Post { queue: Queue, recvs: bool },
    /// Reads 32 completions: before, 32 RDMA writes per call are posted and
    /// run, so that they are in the CQ when the call runs (a wait never
    /// spins). `full`: every field, as `WorkCompletion`s (`poll_into`, the
    /// waits; C's `struct bench_wc_full`), else the fields of `BenchWc`
    /// (`poll_each`; C's `struct bench_wc`).
    Poll { full: bool },
}

/// `struct direct_wc` of `c/direct.c`: every field of `DirectWc`.
#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
pub struct CDirectWc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub qp_num: u32,
    pub covers: u32,
    pub wqe_index: u16,
    pub syndrome: u8,
    pub vendor_err: u8,
}

/// A zeroed `DirectWc`, room for the Rust poll.
pub const ZERO_WC: DirectWc = DirectWc {
    wr_id: 0,
    status: WcStatus::SUCCESS,
    opcode: WcOpcode::RDMA_WRITE,
    byte_len: 0,
    qp_num: 0,
    vendor_err: 0,
    syndrome: 0,
    wqe_index: 0,
    covers: 0,
};
