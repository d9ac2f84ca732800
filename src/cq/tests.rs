//! Polling a scripted provider: what a poll calls, in what order, and
//! what it hands over.

#![allow(clippy::undocumented_unsafe_blocks)]

use super::one_per_start::OnePerStart;
use super::*;
use crate::device::Context;
use crate::error::Error;
use crate::ffi;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Arc;

/// One completion the scripted CQ serves.
#[derive(Clone, Copy)]
struct Cqe {
    wr_id: u64,
    status: u32,
    opcode: u32,
    byte_len: u32,
    flags: u32,
    /// Big-endian on the wire, as `read_imm_data` returns it.
    imm_data: u32,
    qp_num: u32,
    vendor_err: u32,
    /// The sender: source QP, SLID, SL and DLID path bits.
    src: (u32, u16, u8, u8),
}

fn cqe(wr_id: u64) -> Cqe {
    Cqe {
        wr_id,
        status: ffi::IBV_WC_SUCCESS,
        opcode: ffi::IBV_WC_RDMA_WRITE,
        byte_len: 64 + wr_id as u32,
        flags: 0,
        imm_data: 0,
        qp_num: 0x100 + wr_id as u32,
        vendor_err: 0,
        src: (0x200 + wr_id as u32, 0x10 + wr_id as u16, 3, 1),
    }
}

/// A provider CQ with a queue of completions, served as a real
/// provider does: `start_poll` positions on the oldest unconsumed one,
/// `next_poll` consumes it and moves on, `end_poll` consumes the one
/// positioned on. Every entry is logged; an entry called out of order
/// (a reader or `next_poll` outside a poll, a `start_poll` inside one)
/// is logged as a violation.
#[repr(C)]
struct ScriptCq {
    cq: ffi::ibv_cq_ex,
    cqes: Vec<Cqe>,
    /// The oldest unconsumed completion.
    head: usize,
    in_poll: bool,
    /// The `n`-th `start_poll` from now (1: the next) returns this
    /// errno instead of polling.
    start_err: Option<(u32, i32)>,
    /// `next_poll` fails with this when moving to this index.
    next_err: Option<(usize, i32)>,
    log: Vec<&'static str>,
}

unsafe fn script<'a>(cq: *mut ffi::ibv_cq_ex) -> &'a mut ScriptCq {
    unsafe { &mut *cq.cast::<ScriptCq>() }
}

impl ScriptCq {
    fn position(&mut self) {
        let c = self.cqes[self.head];
        self.cq.wr_id = c.wr_id;
        self.cq.status = c.status;
    }

    fn read(&mut self, entry: &'static str) -> Cqe {
        self.log.push(entry);
        if !self.in_poll || self.head >= self.cqes.len() {
            self.log.push("VIOLATION: read outside a poll");
            return cqe(u64::MAX);
        }
        self.cqes[self.head]
    }
}

unsafe extern "C" fn start_poll(cq: *mut ffi::ibv_cq_ex, attr: *mut ffi::ibv_poll_cq_attr) -> i32 {
    let s = unsafe { script(cq) };
    s.log.push("start_poll");
    if s.in_poll {
        s.log.push("VIOLATION: start_poll inside a poll");
    }
    if unsafe { (*attr).comp_mask } != 0 {
        s.log.push("VIOLATION: comp_mask");
    }
    if let Some((nth, e)) = s.start_err {
        if nth == 1 {
            s.start_err = None;
            return e;
        }
        s.start_err = Some((nth - 1, e));
    }
    if s.head == s.cqes.len() {
        return libc::ENOENT;
    }
    s.in_poll = true;
    s.position();
    0
}

unsafe extern "C" fn next_poll(cq: *mut ffi::ibv_cq_ex) -> i32 {
    let s = unsafe { script(cq) };
    s.log.push("next_poll");
    if !s.in_poll {
        s.log.push("VIOLATION: next_poll outside a poll");
    }
    if let Some((at, e)) = s.next_err {
        if at == s.head + 1 {
            s.next_err = None;
            return e;
        }
    }
    s.head += 1;
    if s.head == s.cqes.len() {
        return libc::ENOENT;
    }
    s.position();
    0
}

unsafe extern "C" fn end_poll(cq: *mut ffi::ibv_cq_ex) {
    let s = unsafe { script(cq) };
    s.log.push("end_poll");
    if !s.in_poll {
        s.log.push("VIOLATION: end_poll outside a poll");
    }
    s.in_poll = false;
    s.head = (s.head + 1).min(s.cqes.len());
}

unsafe extern "C" fn read_opcode(cq: *mut ffi::ibv_cq_ex) -> ffi::ibv_wc_opcode {
    unsafe { script(cq) }.read("read_opcode").opcode
}
unsafe extern "C" fn read_vendor_err(cq: *mut ffi::ibv_cq_ex) -> u32 {
    unsafe { script(cq) }.read("read_vendor_err").vendor_err
}
unsafe extern "C" fn read_byte_len(cq: *mut ffi::ibv_cq_ex) -> u32 {
    unsafe { script(cq) }.read("read_byte_len").byte_len
}
unsafe extern "C" fn read_imm_data(cq: *mut ffi::ibv_cq_ex) -> ffi::__be32 {
    unsafe { script(cq) }.read("read_imm_data").imm_data
}
unsafe extern "C" fn read_qp_num(cq: *mut ffi::ibv_cq_ex) -> u32 {
    unsafe { script(cq) }.read("read_qp_num").qp_num
}
unsafe extern "C" fn read_wc_flags(cq: *mut ffi::ibv_cq_ex) -> u32 {
    unsafe { script(cq) }.read("read_wc_flags").flags
}
unsafe extern "C" fn read_src_qp(cq: *mut ffi::ibv_cq_ex) -> u32 {
    unsafe { script(cq) }.read("read_src_qp").src.0
}
unsafe extern "C" fn read_slid(cq: *mut ffi::ibv_cq_ex) -> u32 {
    unsafe { script(cq) }.read("read_slid").src.1.into()
}
unsafe extern "C" fn read_sl(cq: *mut ffi::ibv_cq_ex) -> u8 {
    unsafe { script(cq) }.read("read_sl").src.2
}
unsafe extern "C" fn read_dlid_path_bits(cq: *mut ffi::ibv_cq_ex) -> u8 {
    unsafe { script(cq) }.read("read_dlid_path_bits").src.3
}

/// A handle over a scripted CQ; field order is drop order.
struct Fx {
    cq: CompletionQueue,
    raw: Box<ScriptCq>,
    _ctx: Box<ffi::ibv_context>,
    _dev: Box<ffi::ibv_device>,
}

impl Fx {
    fn new(cqes: Vec<Cqe>) -> Fx {
        Self::with(cqes, false)
    }

    /// `one_per_start`: the CQ gets the entries a soft-RoCE CQ gets.
    fn with(cqes: Vec<Cqe>, one_per_start: bool) -> Fx {
        let mut dev: Box<ffi::ibv_device> = Box::default();
        for (d, s) in dev.name.iter_mut().zip(b"fake0") {
            *d = *s as _;
        }
        let mut ctx: Box<ffi::ibv_context> = Box::default();
        ctx.device = &mut *dev;
        let context = Context::fake(NonNull::from(&mut *ctx), "fake0", false);
        let mut raw = Box::new(ScriptCq {
            cq: ffi::ibv_cq_ex {
                context: &mut *ctx,
                cqe: 64,
                start_poll: Some(start_poll),
                next_poll: Some(next_poll),
                end_poll: Some(end_poll),
                read_opcode: Some(read_opcode),
                read_vendor_err: Some(read_vendor_err),
                read_byte_len: Some(read_byte_len),
                read_imm_data: Some(read_imm_data),
                read_qp_num: Some(read_qp_num),
                read_wc_flags: Some(read_wc_flags),
                read_src_qp: Some(read_src_qp),
                read_slid: Some(read_slid),
                read_sl: Some(read_sl),
                read_dlid_path_bits: Some(read_dlid_path_bits),
                ..Default::default()
            },
            cqes,
            head: 0,
            in_poll: false,
            start_err: None,
            next_err: None,
            log: Vec::new(),
        });
        let ptr = NonNull::from(&mut raw.cq);
        let mut cq = unsafe { CompletionQueue::from_raw(&context, ptr) }.unwrap();
        if one_per_start {
            Arc::get_mut(&mut cq.inner).unwrap().one_per_start =
                Some(unsafe { OnePerStart::install(ptr) });
        }
        Fx {
            cq,
            raw,
            _ctx: ctx,
            _dev: dev,
        }
    }

    /// The entries called since the last call, checked for violations.
    fn log(&mut self) -> Vec<&'static str> {
        let log = std::mem::take(&mut self.raw.log);
        assert!(!log.iter().any(|e| e.starts_with("VIOLATION")), "{log:?}");
        log
    }
}

fn ids(n: u64) -> Vec<Cqe> {
    (0..n).map(cqe).collect()
}

#[test]
fn every_accessor_returns_what_the_provider_reported() {
    let cqes = vec![
        Cqe {
            wr_id: 0xFEDC_BA98_7654_3210,
            status: ffi::IBV_WC_SUCCESS,
            opcode: ffi::IBV_WC_RECV_RDMA_WITH_IMM,
            byte_len: 0xF000_0001,
            flags: ffi::IBV_WC_WITH_IMM | ffi::IBV_WC_GRH,
            imm_data: 0x1234_5678u32.to_be(),
            qp_num: 0x00FF_FFFE,
            vendor_err: 0,
            src: (0x00AB_CDEF, 0xBEEF, 15, 0x7F),
        },
        Cqe {
            wr_id: 7,
            status: ffi::IBV_WC_SUCCESS,
            opcode: ffi::IBV_WC_RECV,
            byte_len: 0,
            flags: ffi::IBV_WC_WITH_INV,
            imm_data: 0xDEAD_BEEF,
            qp_num: 3,
            vendor_err: 0,
            src: (9, 0, 0, 0),
        },
        Cqe {
            wr_id: 8,
            status: ffi::IBV_WC_REM_ACCESS_ERR,
            opcode: 0xABCD,
            byte_len: 5,
            flags: 0x8000_0000,
            imm_data: 0x5555_5555,
            qp_num: 4,
            vendor_err: 0x8765_4321,
            src: (1, 2, 3, 4),
        },
    ];
    let mut fx = Fx::new(cqes.clone());
    let mut seen = Vec::new();
    let n = fx
        .cq
        .poll_each(8, |wc| {
            seen.push((
                wc.wr_id(),
                wc.status(),
                wc.is_success(),
                wc.opcode(),
                wc.byte_len(),
                wc.wc_flags(),
                wc.imm(),
                wc.invalidated_rkey(),
                wc.qp_num(),
                wc.vendor_err(),
                wc.as_ptr(),
                (
                    wc.src_qp().unwrap(),
                    wc.slid().unwrap(),
                    wc.sl().unwrap(),
                    wc.dlid_path_bits().unwrap(),
                ),
            ))
        })
        .unwrap();
    assert_eq!(n, 3);
    let cq = &mut fx.raw.cq as *mut ffi::ibv_cq_ex;
    assert_eq!(
        seen,
        [
            (
                0xFEDC_BA98_7654_3210,
                WcStatus::SUCCESS,
                true,
                WcOpcode::RECV_RDMA_WITH_IMM,
                0xF000_0001,
                WcFlags::WITH_IMM | WcFlags::GRH,
                Some(0x1234_5678),
                None,
                0x00FF_FFFE,
                0,
                cq,
                (0x00AB_CDEF, 0xBEEF, 15, 0x7F),
            ),
            (
                7,
                WcStatus::SUCCESS,
                true,
                WcOpcode::RECV,
                0,
                WcFlags::WITH_INV,
                None,
                Some(0xDEAD_BEEF),
                3,
                0,
                cq,
                (9, 0, 0, 0),
            ),
            (
                8,
                WcStatus::REM_ACCESS_ERR,
                false,
                WcOpcode::from_raw(0xABCD),
                5,
                WcFlags::from_bits_retain(0x8000_0000),
                None,
                None,
                4,
                0x8765_4321,
                cq,
                (1, 2, 3, 4),
            ),
        ]
    );
    fx.log();

    // WorkCompletion::from reads the same, every field.
    let mut fx = Fx::new(cqes);
    fx.cq.read_senders();
    let mut owned = Vec::new();
    let mut errors = Vec::new();
    fx.cq
        .poll_each(8, |wc| {
            owned.push(WorkCompletion::from(wc));
            errors.push(wc.ok().map_err(|e| e.to_string()));
        })
        .unwrap();
    let want: Vec<_> = seen
        .iter()
        .map(|s| WorkCompletion {
            wr_id: s.0,
            status: s.1,
            opcode: s.3,
            byte_len: s.4,
            imm: s.6,
            invalidated_rkey: s.7,
            qp_num: s.8,
            vendor_err: s.9,
            wc_flags: s.5,
            // Receives all three (the third's opcode has the receive bit).
            src_qp: Some(s.11 .0),
            slid: Some(s.11 .1),
            qp_kind: None,
        })
        .collect();
    assert_eq!(owned, want);
    assert_eq!(
        errors,
        [
            Ok(()),
            Ok(()),
            Err(format!(
                "work request 8 on QP 0x4 completed with remote access error \
                 (vendor error 0x87654321): {}",
                WcStatus::REM_ACCESS_ERR.hint().unwrap()
            ))
        ]
    );
    assert_eq!(format!("{:?}", owned[0].opcode), "RECV_RDMA_WITH_IMM");
    fx.log();
}

#[test]
fn debug_of_a_failed_completion_reads_and_shows_only_the_defined_fields() {
    let mut failed = cqe(8);
    failed.status = ffi::IBV_WC_REM_ACCESS_ERR;
    failed.opcode = ffi::IBV_WC_SEND;
    failed.vendor_err = 0x88;
    let mut fx = Fx::new(vec![cqe(0), failed]);
    let mut texts = Vec::new();
    fx.cq
        .poll_each(2, |wc| texts.push(format!("{wc:?}")))
        .unwrap();
    assert_eq!(texts[0], format!("{:?}", owned(cqe(0))));
    assert!(texts[0].contains("opcode: RDMA_WRITE"), "{}", texts[0]);
    assert_eq!(
        texts[1],
        "WorkCompletion { wr_id: 8, status: REM_ACCESS_ERR, opcode: undefined, \
         byte_len: undefined, imm: undefined, invalidated_rkey: undefined, \
         qp_num: 0x108, vendor_err: 0x88, wc_flags: undefined, src_qp: undefined, \
         slid: undefined }"
    );
    // Of the failed one, ibv_poll_cq(3)'s undefined fields are not read.
    let log = fx.log();
    let after = log.iter().position(|&e| e == "next_poll").unwrap();
    assert_eq!(
        log[after..],
        ["next_poll", "read_qp_num", "read_vendor_err", "end_poll"]
    );
}

/// What `WorkCompletion::from` reads of a scripted completion without
/// flags.
fn owned(c: Cqe) -> WorkCompletion {
    WorkCompletion {
        wr_id: c.wr_id,
        status: WcStatus::from_raw(c.status),
        opcode: WcOpcode::from_raw(c.opcode),
        byte_len: c.byte_len,
        imm: None,
        invalidated_rkey: None,
        qp_num: c.qp_num,
        vendor_err: c.vendor_err,
        wc_flags: WcFlags::empty(),
        src_qp: None,
        slid: None,
        qp_kind: None,
    }
}

#[test]
fn each_accessor_reads_only_what_it_needs() {
    let mut imm = cqe(1);
    imm.flags = ffi::IBV_WC_WITH_IMM;
    let mut fx = Fx::new(vec![cqe(0), imm]);
    let mut ids = Vec::new();
    fx.cq
        .poll_each(2, |wc| ids.push((wc.wr_id(), wc.status())))
        .unwrap();
    assert_eq!(ids, [(0, WcStatus::SUCCESS), (1, WcStatus::SUCCESS)]);
    // wr_id and status are fields of the CQ: no reader is called.
    assert_eq!(fx.log(), ["start_poll", "next_poll", "end_poll"]);

    let mut fx = Fx::new(vec![cqe(0), imm]);
    let mut got = Vec::new();
    fx.cq.poll_each(2, |wc| got.push(wc.imm())).unwrap();
    assert_eq!(got, [None, Some(0)]);
    // The immediate is read only when the flags say there is one.
    assert_eq!(
        fx.log(),
        [
            "start_poll",
            "read_wc_flags",
            "next_poll",
            "read_wc_flags",
            "read_imm_data",
            "end_poll"
        ]
    );

    let mut fx = Fx::new(vec![cqe(0)]);
    fx.cq
        .poll_each(1, |wc| {
            wc.opcode();
            wc.byte_len();
            wc.qp_num();
            wc.vendor_err();
        })
        .unwrap();
    assert_eq!(
        fx.log(),
        [
            "start_poll",
            "read_opcode",
            "read_byte_len",
            "read_qp_num",
            "read_vendor_err",
            "end_poll"
        ]
    );
}

#[test]
fn max_is_honoured_and_the_rest_stays_for_the_next_poll() {
    let mut fx = Fx::new(ids(5));
    let mut got = Vec::new();
    assert_eq!(fx.cq.poll_each(2, |wc| got.push(wc.wr_id())).unwrap(), 2);
    assert_eq!(got, [0, 1]);
    // No next_poll after the max-th completion.
    assert_eq!(fx.log(), ["start_poll", "next_poll", "end_poll"]);

    assert_eq!(fx.cq.poll_each(1, |wc| got.push(wc.wr_id())).unwrap(), 1);
    assert_eq!(fx.log(), ["start_poll", "end_poll"]);

    // Fewer than max: the poll stops at ENOENT from next_poll.
    assert_eq!(fx.cq.poll_each(32, |wc| got.push(wc.wr_id())).unwrap(), 2);
    assert_eq!(got, [0, 1, 2, 3, 4]);
    assert_eq!(
        fx.log(),
        ["start_poll", "next_poll", "next_poll", "end_poll"]
    );

    // max 0 polls nothing: no entry is called.
    let mut fx = Fx::new(ids(1));
    assert_eq!(fx.cq.poll_each(0, |_| panic!("called")).unwrap(), 0);
    assert_eq!(fx.log(), Vec::<&str>::new());
}

#[test]
fn an_empty_cq_is_zero_and_its_poll_is_not_ended() {
    let mut fx = Fx::new(Vec::new());
    assert_eq!(fx.cq.poll_each(32, |_| panic!("called")).unwrap(), 0);
    // ibv_create_cq_ex(3): no ibv_end_poll after ENOENT from start_poll.
    assert_eq!(fx.log(), ["start_poll"]);
    let mut out = Vec::new();
    assert_eq!(fx.cq.poll_into(&mut out, 32).unwrap(), 0);
    assert!(out.is_empty());
    assert_eq!(fx.log(), ["start_poll"]);
}

#[test]
fn a_start_poll_error_is_returned_without_ending_a_poll() {
    let mut fx = Fx::new(ids(2));
    fx.raw.start_err = Some((1, libc::EIO));
    let e = fx.cq.poll_each(32, |_| panic!("called")).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EIO));
    assert!(
        e.to_string().starts_with("ibv_start_poll failed (fake0)"),
        "{e}"
    );
    assert_eq!(fx.log(), ["start_poll"]);
    // The completions are still there.
    let mut out = Vec::new();
    assert_eq!(fx.cq.poll_into(&mut out, 32).unwrap(), 2);
}

#[test]
fn a_next_poll_error_ends_the_poll_and_is_returned() {
    let mut fx = Fx::new(ids(5));
    fx.raw.next_err = Some((2, libc::EIO));
    let mut got = Vec::new();
    let e = fx.cq.poll_each(32, |wc| got.push(wc.wr_id())).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EIO));
    assert!(
        e.to_string().starts_with("ibv_next_poll failed (fake0)"),
        "{e}"
    );
    // The completions before the error were handed over.
    assert_eq!(got, [0, 1]);
    assert_eq!(
        fx.log(),
        ["start_poll", "next_poll", "next_poll", "end_poll"]
    );
    // poll_into keeps what it read before the error.
    let mut fx = Fx::new(ids(5));
    fx.raw.next_err = Some((3, libc::EAGAIN));
    let mut out = Vec::new();
    assert!(fx.cq.poll_into(&mut out, 32).is_err());
    let ids: Vec<_> = out.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [0, 1, 2]);
    assert_eq!(fx.log().last(), Some(&"end_poll"));
}

#[test]
fn a_panicking_callback_ends_the_poll_and_the_cq_still_polls() {
    let mut fx = Fx::new(ids(4));
    let mut got = Vec::new();
    let r = catch_unwind(AssertUnwindSafe(|| {
        fx.cq.poll_each(32, |wc| {
            got.push(wc.wr_id());
            assert!(wc.wr_id() < 1, "stop at {}", wc.wr_id());
        })
    }));
    assert!(r.is_err());
    assert_eq!(got, [0, 1]);
    let polls = |log: Vec<&'static str>| {
        log.into_iter()
            .filter(|e| e.ends_with("_poll"))
            .collect::<Vec<_>>()
    };
    assert_eq!(polls(fx.log()), ["start_poll", "next_poll", "end_poll"]);
    // The panic ended the poll and kept the completion it was on: the
    // next poll hands that one out again, first, then the device's.
    assert_eq!(fx.cq.backlog_len(), 1);
    got.clear();
    assert_eq!(fx.cq.poll_each(32, |wc| got.push(wc.wr_id())).unwrap(), 1);
    assert_eq!(fx.cq.poll_each(32, |wc| got.push(wc.wr_id())).unwrap(), 2);
    assert_eq!(got, [1, 2, 3]);
    assert_eq!(
        polls(fx.log()),
        ["start_poll", "next_poll", "next_poll", "end_poll"]
    );
    // Kept in full: what a fresh poll read of it.
    let mut fx = Fx::new(ud_pair());
    let fresh: Vec<Read> = {
        let mut f = Fx::new(ud_pair());
        let mut v = Vec::new();
        f.cq.poll_each(32, |wc| v.push(read_all(wc))).unwrap();
        v
    };
    let r = catch_unwind(AssertUnwindSafe(|| {
        fx.cq.poll_each(32, |wc| {
            assert_ne!(wc.wr_id(), fresh[1].0 .0, "panic on the second")
        })
    }));
    assert!(r.is_err());
    let mut again = Vec::new();
    fx.cq.poll_each(32, |wc| again.push(read_all(wc))).unwrap();
    assert_eq!(again, fresh[1..]);
}

#[test]
fn a_completion_kept_from_a_panicking_callback_is_handed_out_again_if_it_panics_again() {
    let mut fx = Fx::new(ids(2));
    for _ in 0..3 {
        let r = catch_unwind(AssertUnwindSafe(|| {
            fx.cq.poll_each(32, |wc| assert_ne!(wc.wr_id(), 0))
        }));
        assert!(r.is_err());
        assert_eq!(fx.cq.backlog_len(), 1);
    }
    let mut got = Vec::new();
    while fx.cq.poll_each(32, |wc| got.push(wc.wr_id())).unwrap() > 0 {}
    assert_eq!(got, [0, 1]);
}

#[test]
fn one_per_start_pairs_every_completion_with_its_own_start_and_end() {
    let mut fx = Fx::with(ids(3), true);
    let mut got = Vec::new();
    let n = fx
        .cq
        .poll_each(32, |wc| got.push((wc.wr_id(), wc.byte_len())))
        .unwrap();
    assert_eq!(n, 3);
    assert_eq!(got, [(0, 64), (1, 65), (2, 66)]);
    let (s, r, e_) = ("start_poll", "read_byte_len", "end_poll");
    // The provider's next_poll is never called (see OnePerStart); the
    // last start_poll finds the CQ empty and is not ended.
    assert_eq!(fx.log(), [s, r, e_, s, r, e_, s, r, e_, s]);

    // max: no start_poll after the max-th completion.
    let mut fx = Fx::with(ids(3), true);
    let mut out = Vec::new();
    assert_eq!(fx.cq.poll_into(&mut out, 2).unwrap(), 2);
    assert_eq!(out.len(), 2);
    assert_eq!(
        fx.log()
            .iter()
            .filter(|e| e.ends_with("_poll"))
            .collect::<Vec<_>>(),
        [&s, &e_, &s, &e_]
    );

    // A start_poll error after the first completion (reported as the
    // error of the next_poll it stands in) ends nothing more and is
    // returned.
    let mut fx = Fx::with(ids(3), true);
    fx.raw.start_err = Some((2, libc::EIO));
    let mut got = Vec::new();
    let e = fx.cq.poll_each(32, |wc| got.push(wc.wr_id())).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EIO));
    assert!(
        e.to_string().starts_with("ibv_next_poll failed (fake0)"),
        "{e}"
    );
    assert_eq!(got, [0]);
    assert_eq!(fx.log(), [s, e_, s]);

    // A panicking callback ends its own poll, and its completion is
    // handed out again first.
    let mut fx = Fx::with(ids(3), true);
    let r = catch_unwind(AssertUnwindSafe(|| {
        fx.cq.poll_each(32, |wc| assert_ne!(wc.wr_id(), 1))
    }));
    assert!(r.is_err());
    assert_eq!(
        fx.log()
            .into_iter()
            .filter(|e| e.ends_with("_poll"))
            .collect::<Vec<_>>(),
        [s, e_, s, e_]
    );
    assert_eq!(
        fx.cq.poll_each(32, |wc| assert_eq!(wc.wr_id(), 1)).unwrap(),
        1
    );
    assert_eq!(
        fx.cq.poll_each(32, |wc| assert_eq!(wc.wr_id(), 2)).unwrap(),
        1
    );
}

#[test]
fn threads_sharing_one_cq_in_a_mutex_share_out_every_completion() {
    const N: u64 = 600;
    let Fx {
        cq,
        mut raw,
        _ctx,
        _dev,
    } = Fx::new(ids(N));
    let cq = std::sync::Mutex::new(cq);
    let got = std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let n = cq
                            .lock()
                            .unwrap()
                            .poll_each(7, |wc| {
                                mine.push(wc.wr_id());
                                std::thread::yield_now();
                            })
                            .unwrap();
                        if n == 0 {
                            return mine;
                        }
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap())
            .collect::<Vec<_>>()
    });
    // Each thread saw its completions in order, and together they saw
    // each exactly once.
    for mine in &got {
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "{mine:?}");
    }
    let mut all: Vec<u64> = got.concat();
    all.sort_unstable();
    assert_eq!(all, (0..N).collect::<Vec<_>>());
    // The provider saw well-formed polls only (the scripted CQ logs a
    // VIOLATION for a poll started inside another), each ended once.
    drop(cq);
    let log = std::mem::take(&mut raw.log);
    assert!(!log.iter().any(|e| e.starts_with("VIOLATION")), "{log:?}");
    let ends = log.iter().filter(|e| **e == "end_poll").count();
    assert_eq!(ends, (N as usize).div_ceil(7));
}

#[test]
fn a_polls_errors_name_the_device_of_its_cq() {
    // Through the CQ's context and device; a CQ without them still
    // gets an error.
    let mut fx = Fx::new(ids(1));
    fx.raw.start_err = Some((1, libc::EIO));
    let e = fx.cq.poll_each(1, |_| {}).unwrap_err();
    assert!(e.to_string().contains("(fake0)"), "{e}");
    fx.raw.cq.context = std::ptr::null_mut();
    fx.raw.start_err = Some((1, libc::EIO));
    let e = fx.cq.poll_each(1, |_| {}).unwrap_err();
    assert!(e.to_string().contains("(an unnamed device)"), "{e}");
    assert_eq!(e.errno(), Some(libc::EIO));
}

/// Every accessor of a completion, then its sender fields.
type Read = (
    (
        u64,
        WcStatus,
        WcOpcode,
        u32,
        WcFlags,
        Option<u32>,
        Option<u32>,
        u32,
        u32,
    ),
    Sender,
);

/// Source QP, SLID, SL, DLID path bits.
type Sender = (Option<u32>, Option<u16>, Option<u8>, Option<u8>);

fn read_all(wc: &PolledWc<'_>) -> Read {
    (
        (
            wc.wr_id(),
            wc.status(),
            wc.opcode(),
            wc.byte_len(),
            wc.wc_flags(),
            wc.imm(),
            wc.invalidated_rkey(),
            wc.qp_num(),
            wc.vendor_err(),
        ),
        (wc.src_qp(), wc.slid(), wc.sl(), wc.dlid_path_bits()),
    )
}

/// A UD receive (with a GRH) and a send completion.
fn ud_pair() -> Vec<Cqe> {
    let mut recv = cqe(1);
    recv.opcode = ffi::IBV_WC_RECV;
    recv.flags = ffi::IBV_WC_GRH | ffi::IBV_WC_WITH_IMM;
    recv.imm_data = 0x0102_0304u32.to_be();
    recv.src = (0x00AB_CDEF, 0x0042, 5, 0x3);
    let mut send = cqe(2);
    send.opcode = ffi::IBV_WC_SEND;
    vec![recv, send]
}

#[test]
fn a_completion_kept_in_the_backlog_reads_as_a_fresh_poll() {
    let mut fx = Fx::new(ud_pair());
    let mut fresh = Vec::new();
    let mut kept = Vec::new();
    fx.cq
        .poll_each(8, |wc| {
            fresh.push(read_all(wc));
            kept.push(RawWc::of(wc));
        })
        .unwrap();
    assert_eq!(fresh.len(), 2);
    assert_eq!(
        fresh[0].1,
        (Some(0x00AB_CDEF), Some(0x42), Some(5), Some(3))
    );
    assert_eq!(
        fresh[0].0 .4,
        WcFlags::GRH | WcFlags::WITH_IMM,
        "{:?}",
        fresh[0]
    );
    fx.log();

    // What a scoped post does with completions that are not its own.
    fx.cq.keep(kept);
    assert_eq!(fx.cq.backlog_len(), 2);
    let mut replayed = Vec::new();
    fx.cq
        .poll_each(8, |wc| replayed.push(read_all(wc)))
        .unwrap();
    assert_eq!(replayed, fresh);
    assert_eq!(fx.cq.backlog_len(), 0);
    // Served from the backlog: nothing of the device is called for them.
    assert!(fx.log().is_empty());
}

#[test]
fn a_kept_completion_without_a_sender_reader_has_none() {
    let mut fx = Fx::new(ud_pair());
    fx.raw.cq.read_src_qp = None;
    fx.raw.cq.read_sl = None;
    let mut kept = Vec::new();
    fx.cq.poll_each(1, |wc| kept.push(RawWc::of(wc))).unwrap();
    fx.cq.keep(kept);
    let mut replayed = Vec::new();
    fx.cq
        .poll_each(1, |wc| replayed.push(read_all(wc)))
        .unwrap();
    assert_eq!(replayed[0].1, (None, Some(0x42), None, Some(3)));
}

#[test]
fn owned_completions_carry_the_sender_of_a_receive_fresh_or_kept() {
    let want = [
        WorkCompletion {
            wr_id: 1,
            status: WcStatus::SUCCESS,
            opcode: WcOpcode::RECV,
            byte_len: 65,
            imm: Some(0x0102_0304),
            invalidated_rkey: None,
            qp_num: 0x101,
            vendor_err: 0,
            wc_flags: WcFlags::GRH | WcFlags::WITH_IMM,
            src_qp: Some(0x00AB_CDEF),
            slid: Some(0x42),
            qp_kind: None,
        },
        // A send completion has no sender: nothing is read for it.
        WorkCompletion {
            wr_id: 2,
            status: WcStatus::SUCCESS,
            opcode: WcOpcode::SEND,
            byte_len: 66,
            imm: None,
            invalidated_rkey: None,
            qp_num: 0x102,
            vendor_err: 0,
            wc_flags: WcFlags::empty(),
            src_qp: None,
            slid: None,
            qp_kind: None,
        },
    ];
    // Fresh: `wait` and `WorkCompletion::from` read the same.
    let mut fx = Fx::new(ud_pair());
    fx.cq.read_senders();
    let got = fx.cq.wait(2, std::time::Duration::from_secs(1)).unwrap();
    assert_eq!(got, want);
    let log = fx.log();
    let sends = log.iter().rposition(|&e| e == "next_poll").unwrap();
    assert!(
        log[..sends].contains(&"read_src_qp") && !log[sends..].contains(&"read_src_qp"),
        "{log:?}"
    );
    let mut fx = Fx::new(ud_pair());
    fx.cq.read_senders();
    let mut from = Vec::new();
    fx.cq
        .poll_each(2, |wc| from.push(WorkCompletion::from(wc)))
        .unwrap();
    assert_eq!(from, want);

    // Kept by a scoped post, whether read by a poll or already owned.
    let mut fx = Fx::new(ud_pair());
    fx.cq.read_senders();
    let mut kept = Vec::new();
    fx.cq.poll_each(1, |wc| kept.push(RawWc::of(wc))).unwrap();
    kept.push(RawWc::from_read(&want[1]));
    fx.cq.keep(kept);
    fx.cq.keep([RawWc::from_read(&want[0])]);
    let mut got = Vec::new();
    fx.cq.poll_into(&mut got, 8).unwrap();
    assert_eq!(got, [want[0], want[1], want[0]]);
    assert_eq!(WorkCompletion::from(&RawWc::from_read(&want[0])), want[0]);

    // A CQ no UD QP receives on (none called `read_senders`): its owned
    // completions skip the sender's four reads, and say `None`; the
    // in-place view still reads them.
    let mut fx = Fx::new(ud_pair());
    let got = fx.cq.wait(2, std::time::Duration::from_secs(1)).unwrap();
    let none = WorkCompletion {
        src_qp: None,
        slid: None,
        ..want[0]
    };
    assert_eq!(got, [none, want[1]]);
    let log = fx.log();
    assert!(
        !log.contains(&"read_src_qp") && !log.contains(&"read_slid"),
        "{log:?}"
    );
    let mut fx = Fx::new(ud_pair());
    let mut seen = Vec::new();
    fx.cq
        .poll_each(1, |wc| seen.push((wc.src_qp(), wc.slid())))
        .unwrap();
    assert_eq!(seen, [(want[0].src_qp, want[0].slid)]);
}

#[test]
fn a_wait_that_times_out_keeps_what_it_took_for_the_next_poll() {
    let mut fx = Fx::new(ids(2));
    let err = fx
        .cq
        .wait(3, std::time::Duration::from_millis(50))
        .unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert_eq!(fx.cq.backlog_len(), 2);
    fx.log();
    let mut got = Vec::new();
    fx.cq.poll_into(&mut got, 8).unwrap();
    assert_eq!(got.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(got[1], owned(cqe(1)));
    assert_eq!(fx.cq.backlog_len(), 0);
    // Handed out from the backlog: nothing of the device was called.
    assert!(fx.log().is_empty());
    // A wait that ends in time hands out what it waited for, as before.
    fx.raw.cqes.extend([cqe(2), cqe(3)]);
    let wcs = fx.cq.wait(2, std::time::Duration::from_secs(5)).unwrap();
    assert_eq!(wcs.iter().map(|w| w.wr_id).collect::<Vec<_>>(), [2, 3]);
}

#[test]
fn a_kept_completion_of_a_qp_destroyed_since_is_never_handed_out() {
    let mut fx = Fx::new(ids(3));
    // QPs 0x100 and 0x101 are on the CQ; 0x102 was made outside the crate.
    let (gone, live) = (Owners::generation(), Owners::generation());
    fx.cq.inner.owners.add(0x100, gone);
    fx.cq.inner.owners.add(0x101, live);
    let mut kept = Vec::new();
    fx.cq.poll_each(8, |wc| kept.push(RawWc::of(wc))).unwrap();
    fx.cq.keep(kept);
    assert_eq!(fx.cq.backlog_len(), 3);
    // QP 0x100 is destroyed, and a new QP gets its number.
    fx.cq.inner.owners.remove(0x100, gone);
    fx.cq.inner.owners.add(0x100, Owners::generation());
    assert_eq!(fx.cq.backlog_len(), 2);
    let mut got = Vec::new();
    fx.cq.poll_into(&mut got, 8).unwrap();
    assert_eq!(got, [owned(cqe(1)), owned(cqe(2))]);
    // A stale removal (of a generation no longer on the CQ) changes
    // nothing.
    fx.cq.inner.owners.remove(0x101, gone);
    assert!(fx.cq.inner.owners.alive(0x101, live));
}
