//! The device engine's loop: finds posted work by polling the doorbell
//! records, runs it ([`super::requester`]), takes what other hosts sent
//! ([`super::responder`]), writes completions.
//!
//! A free-running thread calls [`step`] (unless `MLX5DV_SIM_THREAD=0`);
//! tests that want determinism call the exported `mlx5dv_sim_step()`
//! themselves. One step runs every WQE posted so far on every QP, flushes
//! the queues of QPs in error, and writes completion events for armed CQs.

use super::cq::{self, opcode, syndrome as syn, Cqe};
use super::outcome::{Outcome, Requester};
use super::requester::{execute::execute, remote, retry};
use super::responder::receive;
use super::trace;
use crate::config::{self, debug};
use crate::fabric::outbox;
use crate::model::lock;
use crate::model::state::{self, Device, QpKind, QpState};
use crate::sys::raw::{load_be32_acquire, read_raw};
use crate::wqe;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Starts the device thread once per process (when configured): a child
/// made by `fork` has no thread of its parent's, so it starts its own.
pub fn ensure_running() {
    static STARTED_IN: AtomicU32 = AtomicU32::new(0);
    if !config::get().thread {
        return;
    }
    let pid = std::process::id();
    if STARTED_IN.swap(pid, Ordering::AcqRel) == pid {
        return;
    }
    let r = std::thread::Builder::new()
        .name("mlx5dv-sim".into())
        .spawn(run_thread);
    if let Err(e) = r {
        eprintln!("mlx5dv-sim: cannot start the device thread: {e}");
    }
}

/// How long work counts as recent: while the device did work in the last
/// `HOT`, it looks at the doorbells every poll period.
pub const HOT: Duration = Duration::from_millis(10);
/// The longest the idle device waits before it looks at the doorbells
/// again (a packet from another host ends the wait at once).
pub const MAX_IDLE_WAIT: Duration = Duration::from_millis(10);
/// The longest wait while answers wait for room at their requesters.
pub const OUTBOX_WAIT: Duration = Duration::from_micros(50);

/// How long the device thread waits, with nothing to do, before it looks
/// at the doorbells again: the poll period `base` while work was recent
/// (a doorbell rung in a round trip is seen within one period), then a
/// sixteenth of the time since the last work, up to [`MAX_IDLE_WAIT`] (so
/// the first doorbell after a quiet spell waits at most a sixteenth of
/// it, and an idle device wakes 100 times a second); at most
/// [`OUTBOX_WAIT`] while answers wait for room.
pub fn idle_wait(base: Duration, quiet: Duration, answers_waiting: bool) -> Duration {
    let wait = if quiet < HOT {
        base
    } else {
        (quiet / 16).clamp(base, MAX_IDLE_WAIT.max(base))
    };
    if answers_waiting {
        wait.min(OUTBOX_WAIT)
    } else {
        wait
    }
}

fn run_thread() {
    // Short waits as asked: the default timer slack (50 µs) would make
    // each 20 µs poll period a 70 µs one.
    // SAFETY: prctl(PR_SET_TIMERSLACK) takes an integer; it changes only
    // this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0) };
    let base = Duration::from_micros(config::get().poll_us.max(1));
    let mut last_work = std::time::Instant::now();
    loop {
        let (n, open) = {
            let mut dev = lock();
            (step_locked(&mut dev), !dev.contexts.is_empty())
        };
        // Answers that found their requester's queue full, tried again
        // with the device lock released.
        let waiting = crate::fabric::joined().map_or(0, outbox::flush);
        if !open && waiting == 0 {
            // No context is open: nothing can be posted until one is.
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        if n > 0 {
            last_work = std::time::Instant::now();
            std::thread::yield_now();
            continue;
        }
        let wait = idle_wait(base, last_work.elapsed(), waiting > 0);
        match crate::fabric::joined() {
            Some(h) => {
                let mut p = libc::pollfd {
                    fd: h.fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ts = libc::timespec {
                    tv_sec: wait.as_secs() as libc::time_t,
                    tv_nsec: libc::c_long::from(wait.subsec_nanos() as i32),
                };
                // SAFETY: one valid pollfd and a valid timeout, both read
                // during the call; no signal mask.
                if unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) } > 0 {
                    last_work = std::time::Instant::now();
                }
            }
            None => std::thread::sleep(wait),
        }
    }
}

/// Runs everything posted so far; returns how many WQEs and flushes ran.
pub fn step() -> usize {
    let n = step_locked(&mut lock());
    if let Some(h) = crate::fabric::joined() {
        outbox::flush(h);
    }
    n
}

/// Runs one step of the device on a locked device (tests of the model).
pub fn step_locked(dev: &mut Device) -> usize {
    let mut n = receive(dev, 256);
    let mut handles: Vec<u32> = dev.qps.keys().copied().collect();
    handles.sort_unstable();
    for h in handles {
        n += run_sq(dev, h);
        n += flush_rq(dev, h);
    }
    let Device { cqs, contexts, .. } = dev;
    for cq in cqs.values_mut() {
        cq::maybe_event(cq);
        if cq.overrun && !cq.overrun_reported {
            if let Some((_, w)) = contexts.get(&cq.ctx).and_then(|c| c.async_fd) {
                cq::report_overrun(cq, w);
            }
        }
    }
    n
}

/// The QP view the WQE parser needs.
fn view(q: &state::Qp, sq: &state::Sq) -> wqe::QpView {
    wqe::QpView {
        qpn: q.qpn,
        kind: match q.kind {
            QpKind::Rc | QpKind::Uc => wqe::QpKind::Rc,
            QpKind::Dci => wqe::QpKind::Dci,
            // An XRC target has no send queue either.
            QpKind::Dct | QpKind::XrcTgt => wqe::QpKind::Dct,
            QpKind::Ud => wqe::QpKind::Ud,
            QpKind::XrcIni => wqe::QpKind::XrcIni,
        },
        max_inline: q.max_inline,
        max_send_sge: q.max_send_sge,
        sq_wqe_cnt: sq.wqe_cnt,
        max_wqe_size: 1024,
        dci_streams: q.dci_streams.is_some(),
        signature: q.signature,
        expected_wqe_index: Some(sq.ci),
    }
}

/// Reads the WQE at the consumer index, linearised (it may wrap at the end
/// of the SQ). Returns the bytes and the WQEBBs it spans.
fn read_wqe(sq: &state::Sq) -> (Vec<u8>, u16) {
    let bb = |i: u32| sq.buf + u64::from(i & (sq.wqe_cnt - 1)) * 64;
    // SAFETY: WQEBB `ci & (cnt-1)` lies inside the SQ the create command gave.
    let ctrl = unsafe { read_raw(bb(u32::from(sq.ci)), 16) };
    let ds = wqe::ctrl_ds(&ctrl);
    if ds == 0 {
        return (ctrl, 1);
    }
    let nbb = wqe::wqebbs(ds).clamp(1, sq.wqe_cnt);
    let len = usize::from(ds) * 16;
    let mut out = Vec::with_capacity(nbb as usize * 64);
    for i in 0..nbb {
        // SAFETY: each WQEBB index is masked into the SQ.
        out.extend(unsafe { read_raw(bb(u32::from(sq.ci) + i), 64) });
    }
    out.truncate(len);
    (out, nbb as u16)
}

fn push_send_cqe(dev: &mut Device, h: u32, c: &Cqe) {
    let Some(cqh) = dev.qps[&h].send_cq else {
        return;
    };
    if let Some(cq) = dev.cqs.get_mut(&cqh) {
        if cq::push(cq, c).is_err() {
            debug!("send completion lost: CQ {:#x} overrun", cq.cqn);
        }
    }
}

fn run_sq(dev: &mut Device, h: u32) -> usize {
    let q = &dev.qps[&h];
    if q.sq.is_none() {
        return 0;
    }
    if !matches!(q.state, QpState::Rts | QpState::Sqd | QpState::Err) {
        return 0;
    }
    let mut n = 0;
    loop {
        let q = &dev.qps[&h];
        let sq = q.sq.expect("checked above");
        // SAFETY: word 1 of the QP doorbell record is the SQ producer counter.
        let pi = unsafe { load_be32_acquire(q.db + 4) } as u16;
        if pi == sq.ci {
            return n;
        }
        let (bytes, nbb) = read_wqe(&sq);
        let v = view(q, &sq);
        let rq = Requester {
            handle: h,
            qpn: q.qpn,
            kind: q.kind,
            pdn: q.pdn,
            dest_qpn: q.dest_qpn,
            qkey: q.attrs.qkey,
        };
        let in_error = q.state == QpState::Err;
        let in_flight = q.wire.inflight.as_ref().is_some_and(|f| f.ci == sq.ci);
        let parsed = wqe::parse(&bytes, &v);
        let (opc, signaled, stream) = match &parsed {
            Ok(w) => (w.ctrl.opcode, w.ctrl.signaled, w.ctrl.dci_stream_channel_id),
            Err(_) => (bytes[3], true, 0),
        };
        let mut c = Cqe {
            sop_qpn: (u32::from(opc) << 24) | q.qpn,
            wqe_counter: sq.ci,
            uidx: q.uidx,
            ..Cqe::default()
        };
        let stream_errored = q.dci_streams.is_some() && q.errored_streams.contains(&stream);
        let outcome = if in_error || stream_errored {
            if let Some(q) = dev.qps.get_mut(&h) {
                q.wire.inflight = None;
            }
            Outcome::Error(syn::WR_FLUSH, "flushed".into())
        } else if in_flight {
            remote::progress(dev, h)
        } else {
            dev.wqes_executed += 1;
            let inject = config::get()
                .fail_wqe
                .filter(|f| f.nth == dev.wqes_executed);
            match (&parsed, inject) {
                (_, Some(f)) => Outcome::Error(f.syndrome, format!("injected on WQE {}", f.nth)),
                (Err(e), None) => Outcome::Error(e.syndrome(), e.to_string()),
                (Ok(w), None) => execute(dev, &rq, sq.ci, w),
            }
        };
        // A request in flight to another host keeps its own timers.
        let outcome = if in_flight || matches!(outcome, Outcome::Pending) {
            outcome
        } else {
            retry::wait(dev, h, sq.ci, outcome)
        };
        if !matches!(outcome, Outcome::Stall(_) | Outcome::Pending) {
            trace::wqe(rq.qpn, c.wqe_counter, &bytes);
        }
        match outcome {
            // Counted once, when it started; the answer comes later.
            Outcome::Pending => return n,
            Outcome::Stall(_) => {
                // Retried at the next step: not counted, not traced yet.
                dev.wqes_executed -= 1;
                return n;
            }
            Outcome::Done(bytes) => {
                if signaled {
                    c.opcode = opcode::REQ;
                    c.byte_cnt = bytes;
                    push_send_cqe(dev, h, &c);
                }
            }
            Outcome::Error(s, why) => {
                if s != syn::WR_FLUSH {
                    debug!(
                        "QP {:#x} WQE {}: error {s:#x}: {why}",
                        rq.qpn, c.wqe_counter
                    );
                }
                c.opcode = opcode::REQ_ERR;
                c.syndrome = s;
                push_send_cqe(dev, h, &c);
                if s != syn::WR_FLUSH {
                    enter_error(dev, h, stream);
                }
            }
        }
        if let Some(sq) = dev.qps.get_mut(&h).and_then(|q| q.sq.as_mut()) {
            sq.ci = sq.ci.wrapping_add(nbb);
        }
        n += 1;
    }
}

/// An error on QP `h`: the QP goes to ERR, or on a DCI with streams the
/// stream does, until 2^log_num_errored streams are in error.
fn enter_error(dev: &mut Device, h: u32, stream: u16) {
    let q = dev.qps.get_mut(&h).expect("live QP");
    if let Some((_, log_err)) = q.dci_streams {
        if !q.errored_streams.contains(&stream) {
            q.errored_streams.push(stream);
        }
        if q.errored_streams.len() < (1usize << log_err) {
            debug!("DCI {:#x}: stream {stream} in error", q.qpn);
            return;
        }
    }
    debug!("QP {:#x} -> ERR", q.qpn);
    crate::model::events::enter_err(dev, h);
}

/// Flushes the posted receive WQEs of a QP in error.
fn flush_rq(dev: &mut Device, h: u32) -> usize {
    let q = &dev.qps[&h];
    let Some(rq) = q.rq else { return 0 };
    if q.state != QpState::Err {
        return 0;
    }
    // SAFETY: word 0 of the QP doorbell record is the RQ producer counter.
    let pi = unsafe { load_be32_acquire(q.db) } as u16;
    let mut n = 0;
    let mut ci = rq.ci;
    while ci != pi {
        let c = Cqe {
            opcode: opcode::RESP_ERR,
            syndrome: syn::WR_FLUSH,
            sop_qpn: q.qpn,
            wqe_counter: ci,
            uidx: q.uidx,
            ..Cqe::default()
        };
        if let Some(cq) = q.recv_cq.and_then(|c| dev.cqs.get_mut(&c)) {
            if cq::push(cq, &c).is_err() {
                break;
            }
        }
        ci = ci.wrapping_add(1);
        n += 1;
    }
    if let Some(rq) = dev.qps.get_mut(&h).and_then(|q| q.rq.as_mut()) {
        rq.ci = ci;
    }
    n
}

/// Runs one device step now (for tests that disable the device thread with
/// `MLX5DV_SIM_THREAD=0`); returns the number of WQEs and flushes run.
#[no_mangle]
pub extern "C" fn mlx5dv_sim_step() -> libc::c_int {
    step() as libc::c_int
}
