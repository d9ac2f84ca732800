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

#![allow(dead_code, clippy::undocumented_unsafe_blocks)]

use mlx5dv::ffi;
use std::cell::RefCell;
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
/// as the mlx5 provider keeps them in one object.
#[repr(C)]
pub struct FakeQp {
    pub ibv: ffi::ibv_qp_ex,
    pub dv: ffi::mlx5dv_qp_ex,
    /// What the fake `wr_complete` returns.
    pub complete_ret: i32,
}

/// A fake extended CQ with one current completion.
#[repr(C)]
pub struct FakeCq {
    pub cq: ffi::ibv_cq_ex,
    /// What `start_poll` and `next_poll` return.
    pub poll_ret: i32,
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
    unsafe { (*(qp as *mut FakeQp)).complete_ret }
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

impl FakeQp {
    /// A QP whose every generic and mlx5 entry records.
    pub fn new() -> Box<Self> {
        let mut qp = Box::new(FakeQp {
            ibv: Default::default(),
            dv: Default::default(),
            complete_ret: 0,
        });
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

    pub fn ibv(&mut self) -> *mut ffi::ibv_qp_ex {
        &mut self.ibv
    }

    pub fn dv(&mut self) -> *mut ffi::mlx5dv_qp_ex {
        &mut self.dv
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

unsafe extern "C" fn start_poll(cq: *mut ffi::ibv_cq_ex, attr: *mut ffi::ibv_poll_cq_attr) -> i32 {
    let comp_mask = unsafe { (*attr).comp_mask };
    unsafe { rec_cq("start_poll", cq, vec![ptr(attr), Arg::U32(comp_mask)]) };
    unsafe { (*(cq as *mut FakeCq)).poll_ret }
}

unsafe extern "C" fn next_poll(cq: *mut ffi::ibv_cq_ex) -> i32 {
    unsafe { rec_cq("next_poll", cq, vec![]) };
    unsafe { (*(cq as *mut FakeCq)).poll_ret }
}

unsafe extern "C" fn end_poll(cq: *mut ffi::ibv_cq_ex) {
    unsafe { rec_cq("end_poll", cq, vec![]) }
}

macro_rules! reader {
    ($name:ident -> $ty:ty = $value:expr) => {
        unsafe extern "C" fn $name(cq: *mut ffi::ibv_cq_ex) -> $ty {
            unsafe { rec_cq(stringify!($name), cq, vec![]) };
            $value
        }
    };
}

reader!(read_opcode -> ffi::ibv_wc_opcode = wc::OPCODE);
reader!(read_vendor_err -> u32 = wc::VENDOR_ERR);
reader!(read_byte_len -> u32 = wc::BYTE_LEN);
reader!(read_imm_data -> ffi::__be32 = wc::IMM_DATA);
reader!(read_qp_num -> u32 = wc::QP_NUM);
reader!(read_src_qp -> u32 = wc::SRC_QP);
reader!(read_wc_flags -> u32 = wc::WC_FLAGS);
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

impl FakeCq {
    /// A CQ whose every poll entry records, with one current completion.
    pub fn new() -> Box<Self> {
        let mut cq = Box::new(FakeCq {
            cq: Default::default(),
            poll_ret: 0,
        });
        let c = &mut cq.cq;
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

    pub fn cq(&mut self) -> *mut ffi::ibv_cq_ex {
        &mut self.cq
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
