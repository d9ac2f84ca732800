//! The recording provider: fake `ibv_qp_ex`, `mlx5dv_qp_ex`, `ibv_cq_ex`
//! and `ibv_context` function tables whose every entry records its name and
//! every argument it received (and, for work-request entries, the `wr_id`
//! and `wr_flags` the QP held at that moment, as a real provider reads them).
//!
//! The calls go through the crate's C shims, which are compiled from the
//! installed headers: a test that calls `ffi::mlx5dv_wr_memcpy(...)` and
//! finds `wr_memcpy` recorded with the same arguments proves the whole chain
//! Rust → shim → provider table, with every width intact.
//!
//! Records are kept per thread, so tests may run in parallel.
//!
//! By default the fakes only record: the CQ reports one fixed completion
//! for ever (`FakeCq::poll_ret`, the `wc` values). Attached to a CQ
//! ([`FakeQp::attach`]), a fake QP also plays a device ("echo" mode): each
//! work request it is given (one builder call, with the `wr_id` and
//! `wr_flags` the QP held then) runs at `wr_complete` and leaves its
//! completion in the CQ's queue ([`FakeCq::queue`]), which `start_poll` /
//! `next_poll` hand out one by one and `ENOENT` ends. Tests can inject
//! other completions ([`FakeCq::push`], [`FakeQp::interleave`]), make work
//! requests fail ([`FakeQp::fail_at`]) or stall ([`FakeQp::budget`]), make
//! `wr_complete` and `start_poll` fail, and see `ibv_modify_qp` /
//! `ibv_destroy_qp` / `ibv_create_srq` arrive through a fake
//! [`FakeVerbsContext`] (ERR flushes what is outstanding, RESET drops it and
//! cleans the CQ of the QP's completions, as mlx5 does).

#![allow(dead_code, clippy::undocumented_unsafe_blocks)]

use mlx5dv::ffi;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::c_void;

/// One argument as the provider received it. Pointer arguments are recorded
/// as their address, and what they point to is copied where its size is
/// known from the other arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    U8(u8),
    U16(u16),
    U32(u32),
    U64(u64),
    Usize(usize),
    Ptr(usize),
    /// A copied `struct ibv_sge` array: (addr, length, lkey).
    Sges(Vec<(u64, u32, u32)>),
    /// A copied `struct ibv_data_buf` array: the bytes of each buffer.
    Bufs(Vec<Vec<u8>>),
    /// A copied byte range.
    Bytes(Vec<u8>),
    /// A copied `struct mlx5dv_mr_interleaved` array:
    /// (addr, bytes_count, bytes_skip, lkey).
    Interleaved(Vec<(u64, u32, u32, u32)>),
}

/// One call into the fake provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The provider entry's name, as the field of the C function table.
    pub entry: &'static str,
    /// The object the entry was called on (QP, mlx5dv QP, CQ), as an address.
    pub obj: usize,
    /// `qp->wr_id` and `qp->wr_flags` at the time of a QP call.
    pub wr: Option<(u64, u32)>,
    pub args: Vec<Arg>,
}

thread_local! {
    static CALLS: RefCell<Vec<Call>> = const { RefCell::new(Vec::new()) };
}

fn push(call: Call) {
    CALLS.with(|c| c.borrow_mut().push(call));
}

/// Takes the calls recorded on this thread so far.
pub fn take() -> Vec<Call> {
    CALLS.with(|c| std::mem::take(&mut *c.borrow_mut()))
}

/// A fake QP: the generic extended QP and its mlx5 extension side by side,
/// as the mlx5 provider keeps them in one object. Its `ibv_qp` is the
/// extended QP's `qp_base` ([`FakeQp::qp`]), as in libibverbs.
#[repr(C)]
pub struct FakeQp {
    pub ibv: ffi::ibv_qp_ex,
    pub dv: ffi::mlx5dv_qp_ex,
    /// What the fake `wr_complete` returns.
    pub complete_ret: i32,
    // ----- the device (echo mode): see `attach` -----
    /// The CQ its work requests complete on; NULL: record only.
    pub echo_cq: *mut FakeCq,
    /// The work requests of the open batch, in order.
    pub pending: Vec<PostedWr>,
    /// Work requests posted but not run (stalled by `budget`, or published
    /// by a failed `wr_complete` with `publish_failed`): flushed by ERR,
    /// dropped by RESET.
    pub outstanding: VecDeque<PostedWr>,
    /// How many more work requests the device runs; the rest stay
    /// outstanding. None: no limit.
    pub budget: Option<usize>,
    /// The work request at this index of the next batch that runs completes
    /// with (status, vendor_err); the QP then goes to ERR and every later
    /// work request is flushed, as on a device.
    pub fail_at: Option<(usize, u32, u32)>,
    /// Whether a failed `wr_complete` still publishes its work requests
    /// (soft-RoCE does; mlx5 rolls them back). They do not run: they wait,
    /// outstanding, for the QP to be moved to ERR (flushed) or RESET.
    pub publish_failed: bool,
    /// Whether moving the QP to ERR flushes its outstanding work requests
    /// (false: the flush is lost, as when another QP overran the CQ).
    pub flush_on_err: bool,
    /// Completions to push into the CQ after the i-th work request of the
    /// next batch that runs (completions of other QPs, receives, ...).
    pub between: Vec<(usize, Wc)>,
}

/// A work request as the fake device saw it at its builder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostedWr {
    pub wr_id: u64,
    pub flags: u32,
    /// The opcode its completion reports.
    pub opcode: u32,
    /// The bytes its setters gave (SGEs, inline data).
    pub byte_len: u32,
}

/// One completion as the fake CQ reports it in echo mode; `imm_data` is
/// the raw CQE field (big-endian immediate, or the invalidated rkey).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Wc {
    pub wr_id: u64,
    pub status: u32,
    pub opcode: u32,
    pub byte_len: u32,
    pub wc_flags: u32,
    pub imm_data: u32,
    pub qp_num: u32,
    pub vendor_err: u32,
}

/// The vendor error the fake device reports on flushed completions (mlx5's
/// syndrome for a flush).
pub const FLUSH_VENDOR_ERR: u32 = 0xF9;

/// A fake extended CQ. By default it has one current completion for ever
/// (the `wc` values); in echo mode (`echo`, set by [`FakeQp::attach`]) it
/// hands out the completions of `queue` in order.
#[repr(C)]
pub struct FakeCq {
    pub cq: ffi::ibv_cq_ex,
    /// What `start_poll` and `next_poll` return (default mode).
    pub poll_ret: i32,
    /// Echo mode: poll `queue` instead of reporting one fixed completion.
    pub echo: bool,
    /// The completions not yet polled, oldest first (echo mode).
    pub queue: VecDeque<Wc>,
    /// The completion a poll is positioned on (echo mode).
    pub cur: Option<Wc>,
    /// Whether a poll is in progress (echo mode).
    pub in_poll: bool,
    /// The n-th `start_poll` from now (1: the next) fails with this errno
    /// and polls nothing.
    pub start_err: Option<(u32, i32)>,
    /// Entries called out of order in echo mode (a reader outside a poll,
    /// a poll started inside another, ...): a test expects none.
    pub violations: Vec<&'static str>,
}

/// A fake device context whose `ops` table records `post_send`,
/// `post_recv` and `poll_cq`.
pub struct FakeContext {
    pub ctx: Box<ffi::ibv_context>,
}

// ----- helpers to build expected records -----

/// The record a QP entry leaves.
pub fn qp_call(entry: &'static str, qp: &FakeQp, wr: (u64, u32), args: Vec<Arg>) -> Call {
    Call {
        entry,
        obj: &qp.ibv as *const _ as usize,
        wr: Some(wr),
        args,
    }
}

/// The record an mlx5dv QP entry leaves.
pub fn dv_call(entry: &'static str, qp: &FakeQp, wr: (u64, u32), args: Vec<Arg>) -> Call {
    Call {
        entry,
        obj: &qp.dv as *const _ as usize,
        wr: Some(wr),
        args,
    }
}

/// The record a CQ entry leaves.
pub fn cq_call(entry: &'static str, cq: &FakeCq, args: Vec<Arg>) -> Call {
    Call {
        entry,
        obj: &cq.cq as *const _ as usize,
        wr: None,
        args,
    }
}

pub fn ptr<T>(p: *const T) -> Arg {
    Arg::Ptr(p as usize)
}

// ----- the fake QP -----

unsafe fn wr_of(qp: *mut ffi::ibv_qp_ex) -> (u64, u32) {
    unsafe { ((*qp).wr_id, (*qp).wr_flags) }
}

unsafe fn rec_qp(entry: &'static str, qp: *mut ffi::ibv_qp_ex, args: Vec<Arg>) {
    unsafe { echo_wr(qp, entry, &args) };
    push(Call {
        entry,
        obj: qp as usize,
        wr: Some(unsafe { wr_of(qp) }),
        args,
    });
}

/// The generic QP that holds `mqp` (the mlx5 provider's container_of).
unsafe fn ibv_of(mqp: *mut ffi::mlx5dv_qp_ex) -> *mut ffi::ibv_qp_ex {
    let offset = std::mem::offset_of!(FakeQp, dv);
    unsafe { (mqp as *mut u8).sub(offset) as *mut ffi::ibv_qp_ex }
}

unsafe fn rec_dv(entry: &'static str, mqp: *mut ffi::mlx5dv_qp_ex, args: Vec<Arg>) {
    unsafe { echo_wr(ibv_of(mqp), entry, &args) };
    push(Call {
        entry,
        obj: mqp as usize,
        wr: Some(unsafe { wr_of(ibv_of(mqp)) }),
        args,
    });
}

unsafe fn copy_sges(n: usize, p: *const ffi::ibv_sge) -> Arg {
    let s = unsafe { std::slice::from_raw_parts(p, n) };
    Arg::Sges(s.iter().map(|e| (e.addr, e.length, e.lkey)).collect())
}

unsafe fn copy_interleaved(n: usize, p: *const ffi::mlx5dv_mr_interleaved) -> Arg {
    let s = unsafe { std::slice::from_raw_parts(p, n) };
    Arg::Interleaved(
        s.iter()
            .map(|e| (e.addr, e.bytes_count, e.bytes_skip, e.lkey))
            .collect(),
    )
}

unsafe extern "C" fn wr_atomic_cmp_swp(
    qp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    compare: u64,
    swap: u64,
) {
    use Arg::*;
    let args = vec![U32(rkey), U64(remote_addr), U64(compare), U64(swap)];
    unsafe { rec_qp("wr_atomic_cmp_swp", qp, args) }
}

unsafe extern "C" fn wr_atomic_fetch_add(
    qp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    add: u64,
) {
    use Arg::*;
    let args = vec![U32(rkey), U64(remote_addr), U64(add)];
    unsafe { rec_qp("wr_atomic_fetch_add", qp, args) }
}

unsafe extern "C" fn wr_bind_mw(
    qp: *mut ffi::ibv_qp_ex,
    mw: *mut ffi::ibv_mw,
    rkey: u32,
    bind_info: *const ffi::ibv_mw_bind_info,
) {
    let b = unsafe { &*bind_info };
    let args = vec![
        ptr(mw),
        Arg::U32(rkey),
        ptr(bind_info),
        ptr(b.mr),
        Arg::U64(b.addr),
        Arg::U64(b.length),
        Arg::U32(b.mw_access_flags),
    ];
    unsafe { rec_qp("wr_bind_mw", qp, args) }
}

unsafe extern "C" fn wr_local_inv(qp: *mut ffi::ibv_qp_ex, invalidate_rkey: u32) {
    unsafe { rec_qp("wr_local_inv", qp, vec![Arg::U32(invalidate_rkey)]) }
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ffi::ibv_qp_ex, rkey: u32, remote_addr: u64) {
    let args = vec![Arg::U32(rkey), Arg::U64(remote_addr)];
    unsafe { rec_qp("wr_rdma_read", qp, args) }
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ffi::ibv_qp_ex, rkey: u32, remote_addr: u64) {
    let args = vec![Arg::U32(rkey), Arg::U64(remote_addr)];
    unsafe { rec_qp("wr_rdma_write", qp, args) }
}

unsafe extern "C" fn wr_rdma_write_imm(
    qp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    imm_data: ffi::__be32,
) {
    let args = vec![Arg::U32(rkey), Arg::U64(remote_addr), Arg::U32(imm_data)];
    unsafe { rec_qp("wr_rdma_write_imm", qp, args) }
}

unsafe extern "C" fn wr_send(qp: *mut ffi::ibv_qp_ex) {
    unsafe { rec_qp("wr_send", qp, vec![]) }
}

unsafe extern "C" fn wr_send_imm(qp: *mut ffi::ibv_qp_ex, imm_data: ffi::__be32) {
    unsafe { rec_qp("wr_send_imm", qp, vec![Arg::U32(imm_data)]) }
}

unsafe extern "C" fn wr_send_inv(qp: *mut ffi::ibv_qp_ex, invalidate_rkey: u32) {
    unsafe { rec_qp("wr_send_inv", qp, vec![Arg::U32(invalidate_rkey)]) }
}

unsafe extern "C" fn wr_send_tso(qp: *mut ffi::ibv_qp_ex, hdr: *mut c_void, hdr_sz: u16, mss: u16) {
    let bytes = unsafe { std::slice::from_raw_parts(hdr as *const u8, hdr_sz as usize) };
    let args = vec![
        ptr(hdr),
        Arg::U16(hdr_sz),
        Arg::U16(mss),
        Arg::Bytes(bytes.to_vec()),
    ];
    unsafe { rec_qp("wr_send_tso", qp, args) }
}

unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut ffi::ibv_qp_ex,
    ah: *mut ffi::ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    let args = vec![ptr(ah), Arg::U32(remote_qpn), Arg::U32(remote_qkey)];
    unsafe { rec_qp("wr_set_ud_addr", qp, args) }
}

unsafe extern "C" fn wr_set_xrc_srqn(qp: *mut ffi::ibv_qp_ex, remote_srqn: u32) {
    unsafe { rec_qp("wr_set_xrc_srqn", qp, vec![Arg::U32(remote_srqn)]) }
}

unsafe extern "C" fn wr_set_inline_data(qp: *mut ffi::ibv_qp_ex, addr: *mut c_void, length: usize) {
    let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, length) };
    let args = vec![ptr(addr), Arg::Usize(length), Arg::Bytes(bytes.to_vec())];
    unsafe { rec_qp("wr_set_inline_data", qp, args) }
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ffi::ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ffi::ibv_data_buf,
) {
    let bufs = unsafe { std::slice::from_raw_parts(buf_list, num_buf) };
    let copied = bufs
        .iter()
        .map(|b| unsafe { std::slice::from_raw_parts(b.addr as *const u8, b.length) }.to_vec())
        .collect();
    let args = vec![Arg::Usize(num_buf), ptr(buf_list), Arg::Bufs(copied)];
    unsafe { rec_qp("wr_set_inline_data_list", qp, args) }
}

unsafe extern "C" fn wr_set_sge(qp: *mut ffi::ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let args = vec![Arg::U32(lkey), Arg::U64(addr), Arg::U32(length)];
    unsafe { rec_qp("wr_set_sge", qp, args) }
}

unsafe extern "C" fn wr_set_sge_list(
    qp: *mut ffi::ibv_qp_ex,
    num_sge: usize,
    sg_list: *const ffi::ibv_sge,
) {
    let args = vec![Arg::Usize(num_sge), ptr(sg_list), unsafe {
        copy_sges(num_sge, sg_list)
    }];
    unsafe { rec_qp("wr_set_sge_list", qp, args) }
}

unsafe extern "C" fn wr_start(qp: *mut ffi::ibv_qp_ex) {
    unsafe { rec_qp("wr_start", qp, vec![]) }
}

unsafe extern "C" fn wr_complete(qp: *mut ffi::ibv_qp_ex) -> i32 {
    unsafe { rec_qp("wr_complete", qp, vec![]) };
    let fq = unsafe { &mut *qp.cast::<FakeQp>() };
    let ret = fq.complete_ret;
    fq.complete_batch(ret);
    ret
}

unsafe extern "C" fn wr_abort(qp: *mut ffi::ibv_qp_ex) {
    unsafe { rec_qp("wr_abort", qp, vec![]) }
}

unsafe extern "C" fn wr_atomic_write(
    qp: *mut ffi::ibv_qp_ex,
    rkey: u32,
    remote_addr: u64,
    atomic_wr: *const c_void,
) {
    // An atomic write carries 8 bytes (ibv_wr_atomic_write(3)).
    let bytes = unsafe { std::slice::from_raw_parts(atomic_wr as *const u8, 8) };
    let args = vec![
        Arg::U32(rkey),
        Arg::U64(remote_addr),
        ptr(atomic_wr),
        Arg::Bytes(bytes.to_vec()),
    ];
    unsafe { rec_qp("wr_atomic_write", qp, args) }
}

// ----- the fake mlx5dv QP -----

unsafe extern "C" fn wr_set_dc_addr(
    mqp: *mut ffi::mlx5dv_qp_ex,
    ah: *mut ffi::ibv_ah,
    remote_dctn: u32,
    remote_dc_key: u64,
) {
    let args = vec![ptr(ah), Arg::U32(remote_dctn), Arg::U64(remote_dc_key)];
    unsafe { rec_dv("wr_set_dc_addr", mqp, args) }
}

unsafe extern "C" fn wr_set_dc_addr_stream(
    mqp: *mut ffi::mlx5dv_qp_ex,
    ah: *mut ffi::ibv_ah,
    remote_dctn: u32,
    remote_dc_key: u64,
    stream_id: u16,
) {
    let args = vec![
        ptr(ah),
        Arg::U32(remote_dctn),
        Arg::U64(remote_dc_key),
        Arg::U16(stream_id),
    ];
    unsafe { rec_dv("wr_set_dc_addr_stream", mqp, args) }
}

unsafe extern "C" fn wr_mr_interleaved(
    mqp: *mut ffi::mlx5dv_qp_ex,
    mkey: *mut ffi::mlx5dv_mkey,
    access_flags: u32,
    repeat_count: u32,
    num_interleaved: u16,
    data: *mut ffi::mlx5dv_mr_interleaved,
) {
    let args = vec![
        ptr(mkey),
        Arg::U32(access_flags),
        Arg::U32(repeat_count),
        Arg::U16(num_interleaved),
        ptr(data),
        unsafe { copy_interleaved(num_interleaved as usize, data) },
    ];
    unsafe { rec_dv("wr_mr_interleaved", mqp, args) }
}

unsafe extern "C" fn wr_mr_list(
    mqp: *mut ffi::mlx5dv_qp_ex,
    mkey: *mut ffi::mlx5dv_mkey,
    access_flags: u32,
    num_sges: u16,
    sge: *mut ffi::ibv_sge,
) {
    let args = vec![
        ptr(mkey),
        Arg::U32(access_flags),
        Arg::U16(num_sges),
        ptr(sge),
        unsafe { copy_sges(num_sges as usize, sge) },
    ];
    unsafe { rec_dv("wr_mr_list", mqp, args) }
}

unsafe extern "C" fn wr_mkey_configure(
    mqp: *mut ffi::mlx5dv_qp_ex,
    mkey: *mut ffi::mlx5dv_mkey,
    num_setters: u8,
    attr: *mut ffi::mlx5dv_mkey_conf_attr,
) {
    let conf_flags = unsafe { (*attr).conf_flags };
    let args = vec![
        ptr(mkey),
        Arg::U8(num_setters),
        ptr(attr),
        Arg::U32(conf_flags),
    ];
    unsafe { rec_dv("wr_mkey_configure", mqp, args) }
}

unsafe extern "C" fn wr_set_mkey_access_flags(mqp: *mut ffi::mlx5dv_qp_ex, access_flags: u32) {
    let args = vec![Arg::U32(access_flags)];
    unsafe { rec_dv("wr_set_mkey_access_flags", mqp, args) }
}

unsafe extern "C" fn wr_set_mkey_layout_list(
    mqp: *mut ffi::mlx5dv_qp_ex,
    num_sges: u16,
    sge: *const ffi::ibv_sge,
) {
    let args = vec![Arg::U16(num_sges), ptr(sge), unsafe {
        copy_sges(num_sges as usize, sge)
    }];
    unsafe { rec_dv("wr_set_mkey_layout_list", mqp, args) }
}

unsafe extern "C" fn wr_set_mkey_layout_interleaved(
    mqp: *mut ffi::mlx5dv_qp_ex,
    repeat_count: u32,
    num_interleaved: u16,
    data: *const ffi::mlx5dv_mr_interleaved,
) {
    let args = vec![
        Arg::U32(repeat_count),
        Arg::U16(num_interleaved),
        ptr(data),
        unsafe { copy_interleaved(num_interleaved as usize, data) },
    ];
    unsafe { rec_dv("wr_set_mkey_layout_interleaved", mqp, args) }
}

unsafe extern "C" fn wr_set_mkey_sig_block(
    mqp: *mut ffi::mlx5dv_qp_ex,
    attr: *const ffi::mlx5dv_sig_block_attr,
) {
    let args = vec![ptr(attr), Arg::U8(unsafe { (*attr).check_mask })];
    unsafe { rec_dv("wr_set_mkey_sig_block", mqp, args) }
}

unsafe extern "C" fn wr_set_mkey_crypto(
    mqp: *mut ffi::mlx5dv_qp_ex,
    attr: *const ffi::mlx5dv_crypto_attr,
) {
    let args = vec![ptr(attr), Arg::U64(unsafe { (*attr).comp_mask })];
    unsafe { rec_dv("wr_set_mkey_crypto", mqp, args) }
}

unsafe extern "C" fn wr_raw_wqe(mqp: *mut ffi::mlx5dv_qp_ex, wqe: *const c_void) {
    // The control segment (16 bytes) is where the device starts reading.
    let ctrl = unsafe { std::slice::from_raw_parts(wqe as *const u8, 16) };
    let args = vec![ptr(wqe), Arg::Bytes(ctrl.to_vec())];
    unsafe { rec_dv("wr_raw_wqe", mqp, args) }
}

unsafe extern "C" fn wr_memcpy(
    mqp: *mut ffi::mlx5dv_qp_ex,
    dest_lkey: u32,
    dest_addr: u64,
    src_lkey: u32,
    src_addr: u64,
    length: usize,
) {
    use Arg::*;
    let args = vec![
        U32(dest_lkey),
        U64(dest_addr),
        U32(src_lkey),
        U64(src_addr),
        Usize(length),
    ];
    unsafe { rec_dv("wr_memcpy", mqp, args) }
}

// ----- the fake device (echo mode) -----

/// The opcode of the completion of a work request whose builder is `entry`
/// (None: `entry` is not a builder).
fn wc_opcode(entry: &str) -> Option<u32> {
    Some(match entry {
        "wr_send" | "wr_send_imm" | "wr_send_inv" => ffi::IBV_WC_SEND,
        "wr_send_tso" => ffi::IBV_WC_TSO,
        "wr_rdma_write" | "wr_rdma_write_imm" => ffi::IBV_WC_RDMA_WRITE,
        "wr_rdma_read" => ffi::IBV_WC_RDMA_READ,
        "wr_atomic_cmp_swp" => ffi::IBV_WC_COMP_SWAP,
        "wr_atomic_fetch_add" => ffi::IBV_WC_FETCH_ADD,
        "wr_atomic_write" => ffi::IBV_WC_ATOMIC_WRITE,
        "wr_bind_mw" => ffi::IBV_WC_BIND_MW,
        "wr_local_inv" => ffi::IBV_WC_LOCAL_INV,
        "wr_mr_list" | "wr_mr_interleaved" | "wr_mkey_configure" => ffi::MLX5DV_WC_UMR,
        "wr_raw_wqe" => ffi::MLX5DV_WC_RAW_WQE,
        "wr_memcpy" => ffi::MLX5DV_WC_MEMCPY,
        _ => return None,
    })
}

/// The bytes a data setter `entry` gives its work request (None: `entry`
/// gives none).
fn data_len(entry: &str, args: &[Arg]) -> Option<u32> {
    match (entry, args) {
        ("wr_set_sge", [_, _, Arg::U32(len)]) => Some(*len),
        ("wr_set_sge_list", [_, _, Arg::Sges(l)]) => Some(l.iter().map(|s| s.1).sum()),
        ("wr_set_inline_data", [_, Arg::Usize(len), _]) => Some(*len as u32),
        ("wr_set_inline_data_list", [_, _, Arg::Bufs(b)]) => {
            Some(b.iter().map(|b| b.len() as u32).sum())
        }
        _ => None,
    }
}

/// What the fake device does with one QP entry call: a builder adds a work
/// request (with the `wr_id` and `wr_flags` the QP holds now), a data
/// setter gives it its length, `wr_start` and `wr_abort` drop the batch's.
unsafe fn echo_wr(qp: *mut ffi::ibv_qp_ex, entry: &'static str, args: &[Arg]) {
    let fq = unsafe { &mut *qp.cast::<FakeQp>() };
    if fq.echo_cq.is_null() {
        return;
    }
    if matches!(entry, "wr_start" | "wr_abort") {
        fq.pending.clear();
    } else if let Some(opcode) = wc_opcode(entry) {
        fq.pending.push(PostedWr {
            wr_id: fq.ibv.wr_id,
            flags: fq.ibv.wr_flags,
            opcode,
            byte_len: 0,
        });
    } else if let Some(len) = data_len(entry, args) {
        if let Some(wr) = fq.pending.last_mut() {
            wr.byte_len += len;
        }
    }
}

fn flushed(wr: &PostedWr, qp_num: u32) -> Wc {
    Wc {
        wr_id: wr.wr_id,
        status: ffi::IBV_WC_WR_FLUSH_ERR,
        opcode: wr.opcode,
        qp_num,
        vendor_err: FLUSH_VENDOR_ERR,
        ..Wc::default()
    }
}

impl FakeQp {
    /// Echo mode: work requests given to this QP complete on `cq`, which
    /// hands out queued completions (see the module's docs).
    pub fn attach(&mut self, cq: &mut FakeCq) {
        self.echo_cq = cq;
        cq.echo = true;
    }

    /// The QP number its completions carry (`qp_base.qp_num`).
    pub fn qp_num(&self) -> u32 {
        self.ibv.qp_base.qp_num
    }

    /// Pushes `wc` into the CQ after the `at`-th work request (from 0) of
    /// the next batch that runs has completed (or, past its end, after
    /// the batch).
    pub fn interleave(&mut self, at: usize, wc: Wc) {
        self.between.push((at, wc));
    }

    /// `wr_complete` of the open batch, which returned `ret`.
    fn complete_batch(&mut self, ret: i32) {
        if self.echo_cq.is_null() {
            return;
        }
        let batch = std::mem::take(&mut self.pending);
        if ret != 0 {
            if self.publish_failed {
                self.outstanding.extend(batch);
            }
            return;
        }
        self.run(batch);
    }

    /// Runs a batch: each work request completes (signalled ones and
    /// failed ones leave a completion), fails (`fail_at`: the QP goes to
    /// ERR), is flushed (the QP is in ERR) or stalls (`budget`).
    fn run(&mut self, batch: Vec<PostedWr>) {
        let cq = unsafe { &mut *self.echo_cq };
        let qp_num = self.qp_num();
        let fail = self.fail_at.take();
        let between = std::mem::take(&mut self.between);
        let n = batch.len();
        for (i, wr) in batch.iter().enumerate() {
            if self.ibv.qp_base.state == ffi::IBV_QPS_ERR {
                cq.queue.push_back(flushed(wr, qp_num));
            } else if self.budget == Some(0) {
                self.outstanding.push_back(*wr);
            } else {
                if let Some(b) = &mut self.budget {
                    *b -= 1;
                }
                let (status, vendor_err) = match fail {
                    Some((at, status, vendor_err)) if at == i => (status, vendor_err),
                    _ => (ffi::IBV_WC_SUCCESS, 0),
                };
                let ok = status == ffi::IBV_WC_SUCCESS;
                if !ok {
                    self.ibv.qp_base.state = ffi::IBV_QPS_ERR;
                }
                if !ok || wr.flags & ffi::IBV_SEND_SIGNALED != 0 {
                    cq.queue.push_back(Wc {
                        wr_id: wr.wr_id,
                        status,
                        opcode: wr.opcode,
                        byte_len: if ok { wr.byte_len } else { 0 },
                        qp_num,
                        vendor_err,
                        ..Wc::default()
                    });
                }
            }
            for (_, wc) in between.iter().filter(|(at, _)| *at == i) {
                cq.queue.push_back(*wc);
            }
        }
        for (_, wc) in between.iter().filter(|(at, _)| *at >= n) {
            cq.queue.push_back(*wc);
        }
    }

    /// What the device does when `ibv_modify_qp` moves the QP to `state`:
    /// ERR flushes the outstanding work requests (unless `flush_on_err`
    /// is false), RESET drops them and removes the QP's completions from
    /// its CQ (mlx5 cleans the CQ on that transition).
    fn moved_to(&mut self, state: u32) {
        self.ibv.qp_base.state = state;
        if self.echo_cq.is_null() {
            return;
        }
        let cq = unsafe { &mut *self.echo_cq };
        let qp_num = self.qp_num();
        if state == ffi::IBV_QPS_ERR && self.flush_on_err {
            for wr in self.outstanding.drain(..) {
                cq.queue.push_back(flushed(&wr, qp_num));
            }
        } else if state == ffi::IBV_QPS_RESET {
            self.outstanding.clear();
            self.pending.clear();
            cq.queue.retain(|wc| wc.qp_num != qp_num);
        }
    }
}

impl FakeQp {
    /// A QP whose every generic and mlx5 entry records.
    pub fn new() -> Box<Self> {
        let mut qp = Box::new(FakeQp {
            ibv: Default::default(),
            dv: Default::default(),
            complete_ret: 0,
            echo_cq: std::ptr::null_mut(),
            pending: Vec::new(),
            outstanding: VecDeque::new(),
            budget: None,
            fail_at: None,
            publish_failed: false,
            flush_on_err: true,
            between: Vec::new(),
        });
        qp.ibv.qp_base.state = ffi::IBV_QPS_RTS;
        let q = &mut qp.ibv;
        q.wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
        q.wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
        q.wr_bind_mw = Some(wr_bind_mw);
        q.wr_local_inv = Some(wr_local_inv);
        q.wr_rdma_read = Some(wr_rdma_read);
        q.wr_rdma_write = Some(wr_rdma_write);
        q.wr_rdma_write_imm = Some(wr_rdma_write_imm);
        q.wr_send = Some(wr_send);
        q.wr_send_imm = Some(wr_send_imm);
        q.wr_send_inv = Some(wr_send_inv);
        q.wr_send_tso = Some(wr_send_tso);
        q.wr_set_ud_addr = Some(wr_set_ud_addr);
        q.wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
        q.wr_set_inline_data = Some(wr_set_inline_data);
        q.wr_set_inline_data_list = Some(wr_set_inline_data_list);
        q.wr_set_sge = Some(wr_set_sge);
        q.wr_set_sge_list = Some(wr_set_sge_list);
        q.wr_start = Some(wr_start);
        q.wr_complete = Some(wr_complete);
        q.wr_abort = Some(wr_abort);
        q.wr_atomic_write = Some(wr_atomic_write);
        let d = &mut qp.dv;
        d.wr_set_dc_addr = Some(wr_set_dc_addr);
        d.wr_set_dc_addr_stream = Some(wr_set_dc_addr_stream);
        d.wr_mr_interleaved = Some(wr_mr_interleaved);
        d.wr_mr_list = Some(wr_mr_list);
        d.wr_mkey_configure = Some(wr_mkey_configure);
        d.wr_set_mkey_access_flags = Some(wr_set_mkey_access_flags);
        d.wr_set_mkey_layout_list = Some(wr_set_mkey_layout_list);
        d.wr_set_mkey_layout_interleaved = Some(wr_set_mkey_layout_interleaved);
        d.wr_set_mkey_sig_block = Some(wr_set_mkey_sig_block);
        d.wr_set_mkey_crypto = Some(wr_set_mkey_crypto);
        d.wr_raw_wqe = Some(wr_raw_wqe);
        d.wr_memcpy = Some(wr_memcpy);
        qp
    }

    /// The extended QP (the whole fake's address: the provider's entries
    /// reach the rest of it from there).
    pub fn ibv(&mut self) -> *mut ffi::ibv_qp_ex {
        std::ptr::addr_of_mut!(*self).cast()
    }

    /// The QP: the extended QP's `qp_base`, as in libibverbs.
    pub fn qp(&mut self) -> *mut ffi::ibv_qp {
        self.ibv().cast()
    }

    pub fn dv(&mut self) -> *mut ffi::mlx5dv_qp_ex {
        let this: *mut Self = self;
        unsafe { std::ptr::addr_of_mut!((*this).dv) }
    }

    /// Sets the generic WR attributes the next builder will see.
    pub fn set_wr(&mut self, wr_id: u64, wr_flags: u32) {
        self.ibv.wr_id = wr_id;
        self.ibv.wr_flags = wr_flags;
    }
}

// ----- the fake CQ -----

unsafe fn rec_cq(entry: &'static str, cq: *mut ffi::ibv_cq_ex, args: Vec<Arg>) {
    push(Call {
        entry,
        obj: cq as usize,
        wr: None,
        args,
    });
}

/// The values the fake CQ's readers return: distinct, full-width.
pub mod wc {
    pub const OPCODE: u32 = mlx5dv::ffi::IBV_WC_RDMA_WRITE;
    pub const VENDOR_ERR: u32 = 0x8765_4321;
    pub const BYTE_LEN: u32 = 0xF000_0001;
    pub const IMM_DATA: u32 = 0xDEAD_BEEF;
    pub const QP_NUM: u32 = 0x00FF_FFFE;
    pub const SRC_QP: u32 = 0x00AB_CDEF;
    pub const WC_FLAGS: u32 = 0x8000_0003;
    pub const SLID: u32 = 0xFFFF_0001;
    pub const SL: u8 = 0xF1;
    pub const DLID_PATH_BITS: u8 = 0x7F;
    pub const COMPLETION_TS: u64 = 0xFEDC_BA98_7654_3210;
    pub const WALLCLOCK_NS: u64 = 0x8000_0000_0000_0001;
    pub const CVLAN: u16 = 0xFFFE;
    pub const FLOW_TAG: u32 = 0xC0FF_EE00;
    pub const TM_PRIV: u32 = 0x1234_5678;
    pub const TM_TAG: u64 = 0xAAAA_5555_AAAA_5555;
}

unsafe fn fake_cq<'a>(cq: *mut ffi::ibv_cq_ex) -> &'a mut FakeCq {
    unsafe { &mut *cq.cast::<FakeCq>() }
}

impl FakeCq {
    fn position(&mut self, wc: Wc) {
        self.cur = Some(wc);
        self.cq.wr_id = wc.wr_id;
        self.cq.status = wc.status;
    }

    /// The completion a reader reads (echo mode).
    fn current(&mut self, reader: &'static str) -> Wc {
        match self.cur {
            Some(wc) if self.in_poll => wc,
            _ => {
                self.violations.push(reader);
                Wc::default()
            }
        }
    }
}

unsafe extern "C" fn start_poll(cq: *mut ffi::ibv_cq_ex, attr: *mut ffi::ibv_poll_cq_attr) -> i32 {
    let comp_mask = unsafe { (*attr).comp_mask };
    unsafe { rec_cq("start_poll", cq, vec![ptr(attr), Arg::U32(comp_mask)]) };
    let f = unsafe { fake_cq(cq) };
    if let Some((nth, errno)) = f.start_err {
        if nth <= 1 {
            f.start_err = None;
            return errno;
        }
        f.start_err = Some((nth - 1, errno));
    }
    if !f.echo {
        return f.poll_ret;
    }
    if f.in_poll {
        f.violations.push("start_poll inside a poll");
    }
    match f.queue.pop_front() {
        Some(wc) => {
            f.in_poll = true;
            f.position(wc);
            0
        }
        None => libc::ENOENT,
    }
}

unsafe extern "C" fn next_poll(cq: *mut ffi::ibv_cq_ex) -> i32 {
    unsafe { rec_cq("next_poll", cq, vec![]) };
    let f = unsafe { fake_cq(cq) };
    if !f.echo {
        return f.poll_ret;
    }
    if !f.in_poll {
        f.violations.push("next_poll outside a poll");
    }
    match f.queue.pop_front() {
        Some(wc) => {
            f.position(wc);
            0
        }
        None => {
            f.cur = None;
            libc::ENOENT
        }
    }
}

unsafe extern "C" fn end_poll(cq: *mut ffi::ibv_cq_ex) {
    unsafe { rec_cq("end_poll", cq, vec![]) };
    let f = unsafe { fake_cq(cq) };
    if f.echo {
        if !f.in_poll {
            f.violations.push("end_poll outside a poll");
        }
        f.in_poll = false;
        f.cur = None;
    }
}

/// A reader: records its call and returns the constant `$value`, or in
/// echo mode the `$field` of the completion the poll is positioned on.
macro_rules! reader {
    ($name:ident -> $ty:ty = $value:expr $(, $field:ident)?) => {
        unsafe extern "C" fn $name(cq: *mut ffi::ibv_cq_ex) -> $ty {
            unsafe { rec_cq(stringify!($name), cq, vec![]) };
            $(
                let f = unsafe { fake_cq(cq) };
                if f.echo {
                    return f.current(stringify!($name)).$field as $ty;
                }
            )?
            $value
        }
    };
}

reader!(read_opcode -> ffi::ibv_wc_opcode = wc::OPCODE, opcode);
reader!(read_vendor_err -> u32 = wc::VENDOR_ERR, vendor_err);
reader!(read_byte_len -> u32 = wc::BYTE_LEN, byte_len);
reader!(read_imm_data -> ffi::__be32 = wc::IMM_DATA, imm_data);
reader!(read_qp_num -> u32 = wc::QP_NUM, qp_num);
reader!(read_src_qp -> u32 = wc::SRC_QP);
reader!(read_wc_flags -> u32 = wc::WC_FLAGS, wc_flags);
reader!(read_slid -> u32 = wc::SLID);
reader!(read_sl -> u8 = wc::SL);
reader!(read_dlid_path_bits -> u8 = wc::DLID_PATH_BITS);
reader!(read_completion_ts -> u64 = wc::COMPLETION_TS);
reader!(read_completion_wallclock_ns -> u64 = wc::WALLCLOCK_NS);
reader!(read_cvlan -> u16 = wc::CVLAN);
reader!(read_flow_tag -> u32 = wc::FLOW_TAG);

unsafe extern "C" fn read_tm_info(cq: *mut ffi::ibv_cq_ex, tm_info: *mut ffi::ibv_wc_tm_info) {
    unsafe { rec_cq("read_tm_info", cq, vec![ptr(tm_info)]) };
    unsafe {
        (*tm_info).tag = wc::TM_TAG;
        (*tm_info).priv_ = wc::TM_PRIV;
    }
}

/// The capacity (`cqe`) of a fake CQ.
pub const CQE: i32 = 64;

impl FakeCq {
    /// A CQ of [`CQE`] entries whose every poll entry records, with one
    /// current completion (until [`FakeQp::attach`] puts it in echo mode).
    pub fn new() -> Box<Self> {
        Self::with_capacity(CQE)
    }

    /// A CQ of `cqe` entries, as [`new`](Self::new).
    pub fn with_capacity(cqe: i32) -> Box<Self> {
        let mut cq = Box::new(FakeCq {
            cq: Default::default(),
            poll_ret: 0,
            echo: false,
            queue: VecDeque::new(),
            cur: None,
            in_poll: false,
            start_err: None,
            violations: Vec::new(),
        });
        let c = &mut cq.cq;
        c.cqe = cqe;
        c.start_poll = Some(start_poll);
        c.next_poll = Some(next_poll);
        c.end_poll = Some(end_poll);
        c.read_opcode = Some(read_opcode);
        c.read_vendor_err = Some(read_vendor_err);
        c.read_byte_len = Some(read_byte_len);
        c.read_imm_data = Some(read_imm_data);
        c.read_qp_num = Some(read_qp_num);
        c.read_src_qp = Some(read_src_qp);
        c.read_wc_flags = Some(read_wc_flags);
        c.read_slid = Some(read_slid);
        c.read_sl = Some(read_sl);
        c.read_dlid_path_bits = Some(read_dlid_path_bits);
        c.read_completion_ts = Some(read_completion_ts);
        c.read_completion_wallclock_ns = Some(read_completion_wallclock_ns);
        c.read_cvlan = Some(read_cvlan);
        c.read_flow_tag = Some(read_flow_tag);
        c.read_tm_info = Some(read_tm_info);
        cq
    }

    /// The extended CQ (the whole fake's address).
    pub fn cq(&mut self) -> *mut ffi::ibv_cq_ex {
        std::ptr::addr_of_mut!(*self).cast()
    }

    /// Queues `wc` behind the completions already there (echo mode): a
    /// receive, another QP's completion, an error, ...
    pub fn push(&mut self, wc: Wc) {
        self.echo = true;
        self.queue.push_back(wc);
    }
}

// ----- the fake context (the legacy post/poll entries) -----

unsafe extern "C" fn post_send(
    qp: *mut ffi::ibv_qp,
    wr: *mut ffi::ibv_send_wr,
    bad_wr: *mut *mut ffi::ibv_send_wr,
) -> i32 {
    let args = vec![ptr(wr), ptr(bad_wr), Arg::U64(unsafe { (*wr).wr_id })];
    push(Call {
        entry: "post_send",
        obj: qp as usize,
        wr: None,
        args,
    });
    0
}

unsafe extern "C" fn post_recv(
    qp: *mut ffi::ibv_qp,
    wr: *mut ffi::ibv_recv_wr,
    bad_wr: *mut *mut ffi::ibv_recv_wr,
) -> i32 {
    let args = vec![ptr(wr), ptr(bad_wr), Arg::U64(unsafe { (*wr).wr_id })];
    push(Call {
        entry: "post_recv",
        obj: qp as usize,
        wr: None,
        args,
    });
    0
}

/// A receive posted with this id on a fake SRQ fails (`ENOMEM`), after
/// being recorded.
pub const FAILING_SRQ_WR_ID: u64 = 0xFA11;

unsafe extern "C" fn post_srq_recv(
    srq: *mut ffi::ibv_srq,
    wr: *mut ffi::ibv_recv_wr,
    bad_wr: *mut *mut ffi::ibv_recv_wr,
) -> i32 {
    let wr_id = unsafe { (*wr).wr_id };
    push(Call {
        entry: "post_srq_recv",
        obj: srq as usize,
        wr: None,
        args: vec![Arg::U64(wr_id)],
    });
    if wr_id == FAILING_SRQ_WR_ID {
        unsafe { *bad_wr = wr };
        return libc::ENOMEM;
    }
    0
}

unsafe extern "C" fn close_xrcd(xrcd: *mut ffi::ibv_xrcd) -> i32 {
    push(Call {
        entry: "close_xrcd",
        obj: xrcd as usize,
        wr: None,
        args: vec![],
    });
    0
}

unsafe extern "C" fn poll_cq(cq: *mut ffi::ibv_cq, num_entries: i32, wc: *mut ffi::ibv_wc) -> i32 {
    push(Call {
        entry: "poll_cq",
        obj: cq as usize,
        wr: None,
        args: vec![Arg::U32(num_entries as u32), ptr(wc)],
    });
    // Reports one completion, with a recognisable wr_id.
    unsafe { (*wc).wr_id = 0x0102_0304_0506_0708 };
    1
}

impl FakeContext {
    pub fn new() -> Self {
        let mut ctx: Box<ffi::ibv_context> = Box::default();
        ctx.ops.post_send = Some(post_send);
        ctx.ops.post_recv = Some(post_recv);
        ctx.ops.poll_cq = Some(poll_cq);
        FakeContext { ctx }
    }

    pub fn ctx(&mut self) -> *mut ffi::ibv_context {
        &mut *self.ctx
    }
}

// ----- a fake `struct verbs_context`: the ops libibverbs dispatches to -----

/// A `struct verbs_device` as libibverbs lays it out: the `ibv_device`,
/// then the provider's ops pointer that `mlx5dv_is_supported` compares
/// (NULL here: not an mlx5 device, so libmlx5's `mlx5dv_*` calls on it
/// fail with `EOPNOTSUPP`), then room for the rest.
#[repr(C)]
pub struct FakeDevice {
    pub dev: ffi::ibv_device,
    ops: *const c_void,
    _rest: [u64; 64],
}

impl FakeDevice {
    /// A fake device named `name`.
    pub fn new(name: &str) -> Box<Self> {
        let mut dev: Box<FakeDevice> = Box::new(unsafe { std::mem::zeroed() });
        for (d, s) in dev.dev.name.iter_mut().zip(name.bytes()) {
            *d = s as std::ffi::c_char;
        }
        dev
    }
}

/// How many entries the fake provider-ops table has: more than
/// `struct verbs_context_ops` holds in any rdma-core release, plus the
/// fields before it in `struct verbs_ex_private`.
const SLOTS: usize = 256;

/// A fake `struct verbs_context`, whose `ibv_context` is its last field:
/// libibverbs' `ibv_modify_qp`, `ibv_query_qp`, `ibv_destroy_qp`,
/// `ibv_create_srq` and `ibv_destroy_srq` call the provider's op through
/// `container_of(ctx, struct verbs_context, context)->priv->ops`. `priv`
/// points at a table of [`SLOTS`] distinct recording entries; which entry
/// is which op is learnt once, by calling each of those functions on a
/// probe (the layout of `struct verbs_ex_private` is private to rdma-core
/// and changes between releases; the part of `struct verbs_context` from
/// `priv` to `context` is ABI and fixed).
///
/// The ops record (`modify_qp` with the new state and the mask,
/// `query_qp`, `destroy_qp`, `create_srq` with max_wr and max_sge,
/// `destroy_srq`) and succeed; on a QP registered with
/// [`add_qp`](Self::add_qp), `modify_qp` also plays the device (see
/// `FakeQp::moved_to`). The legacy `post_send` / `post_recv` / `poll_cq`
/// entries of the context's `ops` record as [`FakeContext`]'s do, and its
/// `post_srq_recv` records `post_srq_recv` with the work request's id
/// (failing for [`FAILING_SRQ_WR_ID`]).
#[repr(C)]
pub struct FakeVerbsContext {
    /// `struct verbs_ex_private *priv`.
    priv_: *const usize,
    /// `query_device_ex` to `_ABI_placeholder3`.
    _after_priv: [usize; 12],
    /// `sz`.
    _sz: usize,
    /// `context`: the last field of `struct verbs_context`.
    pub ctx: ffi::ibv_context,
    // ----- the fake's own, after the C struct -----
    pub dev: Box<FakeDevice>,
    /// QPs whose `modify_qp` plays the device.
    qps: Vec<*mut FakeQp>,
    /// SRQs made by `create_srq` (freed with the context).
    #[allow(clippy::vec_box)]
    srqs: Vec<Box<ffi::ibv_srq>>,
}

impl FakeVerbsContext {
    /// A fake context on a fake device named `name`.
    pub fn new(name: &str) -> Box<Self> {
        let names = op_names();
        debug_assert!(names.contains(&Some("modify_qp")));
        Self::bare(name)
    }

    fn bare(name: &str) -> Box<Self> {
        let mut c = Box::new(FakeVerbsContext {
            priv_: slot_table().as_ptr(),
            _after_priv: [0; 12],
            _sz: 0,
            ctx: Default::default(),
            dev: FakeDevice::new(name),
            qps: Vec::new(),
            srqs: Vec::new(),
        });
        c.ctx.device = &mut c.dev.dev;
        c.ctx.ops.post_send = Some(post_send);
        c.ctx.ops.post_recv = Some(post_recv);
        c.ctx.ops.poll_cq = Some(poll_cq);
        c.ctx.ops.post_srq_recv = Some(post_srq_recv);
        c
    }

    /// A fake XRC domain of this context, whose `ibv_close_xrcd` records
    /// `close_xrcd`: the context is marked extended and its `close_xrcd`
    /// entry (in `struct verbs_context`, before `sz`) set.
    pub fn xrcd(&mut self) -> Box<ffi::ibv_xrcd> {
        // `__VERBS_ABI_IS_EXTENDED`, which `verbs_get_ctx` checks.
        self.ctx.abi_compat = usize::MAX as *mut c_void;
        // `close_xrcd`: the eleventh entry after `priv` (`query_device_ex`,
        // `ibv_destroy_flow`, a placeholder, `ibv_create_flow`, a
        // placeholder, `open_qp`, `create_qp_ex`, `get_srq_num`,
        // `create_srq_ex`, `open_xrcd`, `close_xrcd`).
        self._after_priv[10] =
            close_xrcd as unsafe extern "C" fn(*mut ffi::ibv_xrcd) -> i32 as usize;
        Box::new(ffi::ibv_xrcd {
            context: self.ctx(),
        })
    }

    /// The `ibv_context`.
    pub fn ctx(&mut self) -> *mut ffi::ibv_context {
        let this: *mut Self = self;
        unsafe { std::ptr::addr_of_mut!((*this).ctx) }
    }

    /// Makes `qp` a QP of this context: its `qp_base.context` is this
    /// context, and `ibv_modify_qp` on it plays the device.
    pub fn add_qp(&mut self, qp: &mut FakeQp) {
        qp.ibv.qp_base.context = self.ctx();
        self.qps.push(qp);
    }

    /// The fake of a context whose ops table is the fake's.
    unsafe fn of<'a>(ctx: *mut ffi::ibv_context) -> &'a mut Self {
        let offset = std::mem::offset_of!(FakeVerbsContext, ctx);
        unsafe { &mut *(ctx as *mut u8).sub(offset).cast::<Self>() }
    }
}

/// One entry of the fake ops table: every op's arguments fit in the first
/// four integer registers, and its return value (an int or a pointer) in
/// the first return register.
type Slot = unsafe extern "C" fn(usize, usize, usize, usize) -> usize;

thread_local! {
    /// While the table is being learnt: the slot the probe call reached.
    static PROBED: Cell<Option<usize>> = const { Cell::new(None) };
    static PROBING: Cell<bool> = const { Cell::new(false) };
}

unsafe extern "C" fn slot<const I: usize>(a0: usize, a1: usize, a2: usize, a3: usize) -> usize {
    if PROBING.with(Cell::get) {
        PROBED.with(|p| p.set(Some(I)));
        return 0;
    }
    unsafe { verbs_op(I, [a0, a1, a2, a3]) }
}

macro_rules! slots16 {
    ($hi:literal) => {
        [
            slot::<{ $hi * 16 }> as Slot,
            slot::<{ $hi * 16 + 1 }>,
            slot::<{ $hi * 16 + 2 }>,
            slot::<{ $hi * 16 + 3 }>,
            slot::<{ $hi * 16 + 4 }>,
            slot::<{ $hi * 16 + 5 }>,
            slot::<{ $hi * 16 + 6 }>,
            slot::<{ $hi * 16 + 7 }>,
            slot::<{ $hi * 16 + 8 }>,
            slot::<{ $hi * 16 + 9 }>,
            slot::<{ $hi * 16 + 10 }>,
            slot::<{ $hi * 16 + 11 }>,
            slot::<{ $hi * 16 + 12 }>,
            slot::<{ $hi * 16 + 13 }>,
            slot::<{ $hi * 16 + 14 }>,
            slot::<{ $hi * 16 + 15 }>,
        ]
    };
}

/// The table `priv` points at: slot `i` is `slot::<i>`.
fn slot_table() -> &'static [usize; SLOTS] {
    static TABLE: std::sync::OnceLock<[usize; SLOTS]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let rows: [[Slot; 16]; SLOTS / 16] = [
            slots16!(0),
            slots16!(1),
            slots16!(2),
            slots16!(3),
            slots16!(4),
            slots16!(5),
            slots16!(6),
            slots16!(7),
            slots16!(8),
            slots16!(9),
            slots16!(10),
            slots16!(11),
            slots16!(12),
            slots16!(13),
            slots16!(14),
            slots16!(15),
        ];
        let mut t = [0usize; SLOTS];
        for (i, f) in rows.iter().flatten().enumerate() {
            t[i] = *f as usize;
        }
        t
    })
}

/// Which op each slot is, learnt by calling each libibverbs function once
/// on a probe whose context is a fake.
fn op_names() -> &'static [Option<&'static str>; SLOTS] {
    static NAMES: std::sync::OnceLock<[Option<&'static str>; SLOTS]> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let mut probe = FakeVerbsContext::bare("probe");
        let ctx = probe.ctx();
        let mut qp = ffi::ibv_qp {
            context: ctx,
            ..Default::default()
        };
        let mut pd = ffi::ibv_pd {
            context: ctx,
            ..Default::default()
        };
        let mut srq = ffi::ibv_srq {
            context: ctx,
            ..Default::default()
        };
        let mut attr = ffi::ibv_qp_attr::default();
        let mut init = ffi::ibv_qp_init_attr::default();
        let mut srq_attr = ffi::ibv_srq_init_attr::default();
        let mut names = [None; SLOTS];
        let mut probe = |name: &'static str, call: &mut dyn FnMut()| {
            PROBED.with(|p| p.set(None));
            call();
            let i = PROBED
                .with(Cell::get)
                .unwrap_or_else(|| panic!("ibv_{name} reached no slot of the fake ops table"));
            assert!(names[i].is_none(), "{name} shares slot {i}");
            names[i] = Some(name);
        };
        PROBING.with(|p| p.set(true));
        probe("modify_qp", &mut || unsafe {
            ffi::ibv_modify_qp(&mut qp, &mut attr, 0);
        });
        probe("query_qp", &mut || unsafe {
            ffi::ibv_query_qp(&mut qp, &mut attr, 0, &mut init);
        });
        probe("destroy_qp", &mut || unsafe {
            ffi::ibv_destroy_qp(&mut qp);
        });
        probe("create_srq", &mut || unsafe {
            ffi::ibv_create_srq(&mut pd, &mut srq_attr);
        });
        probe("destroy_srq", &mut || unsafe {
            ffi::ibv_destroy_srq(&mut srq);
        });
        PROBING.with(|p| p.set(false));
        names
    })
}

/// An op of a fake context: records it and plays it.
unsafe fn verbs_op(i: usize, a: [usize; 4]) -> usize {
    let Some(name) = op_names()[i] else {
        // An op no test expects: recorded, and "succeeds" (0 / NULL).
        push(Call {
            entry: "unknown verbs op",
            obj: a[0],
            wr: None,
            args: vec![Arg::Usize(i)],
        });
        return 0;
    };
    let record = |args: Vec<Arg>| {
        push(Call {
            entry: name,
            obj: a[0],
            wr: None,
            args,
        })
    };
    match name {
        "modify_qp" | "query_qp" | "destroy_qp" => {
            let qp = a[0] as *mut ffi::ibv_qp;
            let attr = a[1] as *mut ffi::ibv_qp_attr;
            let mask = a[2] as u32;
            let fake = unsafe { FakeVerbsContext::of((*qp).context) };
            let fq = fake
                .qps
                .iter()
                .copied()
                .find(|&f| unsafe { (*f).qp() } == qp);
            match name {
                "modify_qp" => {
                    let state = unsafe { (*attr).qp_state };
                    record(vec![Arg::U32(state), Arg::U32(mask)]);
                    if let (Some(fq), true) = (fq, mask & ffi::IBV_QP_STATE != 0) {
                        unsafe { (*fq).moved_to(state) };
                    }
                }
                "query_qp" => {
                    record(vec![Arg::U32(mask)]);
                    unsafe { (*attr).qp_state = (*qp).state };
                }
                _ => record(vec![]),
            }
            0
        }
        "create_srq" => {
            let pd = a[0] as *mut ffi::ibv_pd;
            let init = unsafe { &*(a[1] as *const ffi::ibv_srq_init_attr) };
            record(vec![
                Arg::U32(init.attr.max_wr),
                Arg::U32(init.attr.max_sge),
            ]);
            let fake = unsafe { FakeVerbsContext::of((*pd).context) };
            let mut srq: Box<ffi::ibv_srq> = Box::default();
            let p: *mut ffi::ibv_srq = &mut *srq;
            fake.srqs.push(srq);
            p as usize
        }
        _ => {
            record(vec![]);
            0
        }
    }
}

/// The (wr_id, wr_flags) each builder call saw, in order.
pub fn builders(calls: &[Call]) -> Vec<(u64, u32)> {
    const SETTERS: [&str; 5] = [
        "wr_set_sge",
        "wr_set_sge_list",
        "wr_set_inline_data",
        "wr_set_dc_addr",
        "wr_set_dc_addr_stream",
    ];
    calls
        .iter()
        .filter(|c| {
            c.wr.is_some()
                && c.entry.starts_with("wr_")
                && !matches!(c.entry, "wr_start" | "wr_complete" | "wr_abort")
                && !SETTERS.contains(&c.entry)
        })
        .map(|c| c.wr.unwrap())
        .collect()
}
