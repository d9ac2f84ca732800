//! Dispatch tests: every static-inline function of the work-request APIs
//! (`ibv_wr_*`, `mlx5dv_wr_*`) and of the completion API (`ibv_start_poll`,
//! `ibv_next_poll`, `ibv_end_poll`, `ibv_wc_read_*`, and the legacy
//! `ibv_post_send` / `ibv_post_recv` / `ibv_poll_cq`), called through the
//! crate's compiled shims against the recording provider, must reach exactly
//! the provider entry the header names, with exactly the arguments given.
//!
//! Values are chosen so that a narrowed or swapped argument cannot pass:
//! 64-bit keys and addresses with high bits set, a `size_t` length above
//! 4 GiB, the largest `u16` stream id, a distinct value per argument.
//!
//! This is the proof of the mlx5 wiring that runs without a device; the
//! same functions run against a real provider in the device suites.

#![allow(clippy::undocumented_unsafe_blocks)]

mod support;

use mlx5dv::ffi;
use std::collections::BTreeSet;
use support::recorder::*;

const WR_ID: u64 = 0xFEED_FACE_CAFE_BEEF;
const FLAGS: u32 = ffi::IBV_SEND_SIGNALED | ffi::IBV_SEND_INLINE | ffi::IBV_SEND_FENCE;
const WR: (u64, u32) = (WR_ID, FLAGS);
const RKEY: u32 = 0xA1B2_C3D4;
const LKEY: u32 = 0x8899_AABB;
const ADDR: u64 = 0xFEDC_BA98_7654_3210;
const ADDR2: u64 = 0x8000_0000_0000_0008;
const LEN32: u32 = 0xFFFF_FFF0;
const IMM_BE: u32 = 0x0102_0304u32.to_be();
const DCTN: u32 = 0x00FF_FFFE;
const DC_KEY: u64 = 0xFFEE_DDCC_BBAA_9988;
const ACCESS: u32 =
    ffi::IBV_ACCESS_LOCAL_WRITE | ffi::IBV_ACCESS_REMOTE_WRITE | ffi::IBV_ACCESS_REMOTE_READ;

/// A fake QP with the generic WR attributes set as an application would.
fn qp() -> Box<FakeQp> {
    let mut qp = FakeQp::new();
    qp.set_wr(WR_ID, FLAGS);
    qp
}

fn fake_ah() -> *mut ffi::ibv_ah {
    0x7f00_dead_0000_usize as *mut ffi::ibv_ah
}

fn fake_mkey() -> *mut ffi::mlx5dv_mkey {
    0x7f00_beef_0000_usize as *mut ffi::mlx5dv_mkey
}

/// Declares the dispatch tests, one per static-inline function, each named
/// after the function it calls, and the list of those names.
macro_rules! cases {
    ($( fn $name:ident() $body:block )*) => {
        mod cases {
            use super::*;
            $( #[test] fn $name() $body )*
        }
        /// The functions that have a dispatch test.
        const COVERED: &[&str] = &[$(stringify!($name)),*];
    };
}

cases! {
    // ----- ibv_wr_post(3): start / complete / abort -----

    fn ibv_wr_start() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_start(qp.ibv()) };
        assert_eq!(take(), [qp_call("wr_start", &qp, WR, vec![])]);
    }

    fn ibv_wr_complete() {
        let mut qp = qp();
        assert_eq!(unsafe { ffi::ibv_wr_complete(qp.ibv()) }, 0);
        qp.complete_ret = libc::ENOMEM;
        assert_eq!(unsafe { ffi::ibv_wr_complete(qp.ibv()) }, libc::ENOMEM);
        let c = qp_call("wr_complete", &qp, WR, vec![]);
        assert_eq!(take(), [c.clone(), c]);
    }

    fn ibv_wr_abort() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_abort(qp.ibv()) };
        assert_eq!(take(), [qp_call("wr_abort", &qp, WR, vec![])]);
    }

    // ----- ibv_wr_post(3): builders -----

    fn ibv_wr_atomic_cmp_swp() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_atomic_cmp_swp(qp.ibv(), RKEY, ADDR, u64::MAX - 1, ADDR2) };
        let args = vec![Arg::U32(RKEY), Arg::U64(ADDR), Arg::U64(u64::MAX - 1), Arg::U64(ADDR2)];
        assert_eq!(take(), [qp_call("wr_atomic_cmp_swp", &qp, WR, args)]);
    }

    fn ibv_wr_atomic_fetch_add() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_atomic_fetch_add(qp.ibv(), RKEY, ADDR, ADDR2) };
        let args = vec![Arg::U32(RKEY), Arg::U64(ADDR), Arg::U64(ADDR2)];
        assert_eq!(take(), [qp_call("wr_atomic_fetch_add", &qp, WR, args)]);
    }

    fn ibv_wr_atomic_write() {
        let mut qp = qp();
        let value = 0x1122_3344_5566_7788u64.to_be_bytes();
        unsafe { ffi::ibv_wr_atomic_write(qp.ibv(), RKEY, ADDR, value.as_ptr().cast()) };
        let args = vec![
            Arg::U32(RKEY),
            Arg::U64(ADDR),
            ptr(value.as_ptr()),
            Arg::Bytes(value.to_vec()),
        ];
        assert_eq!(take(), [qp_call("wr_atomic_write", &qp, WR, args)]);
    }

    fn ibv_wr_bind_mw() {
        let mut qp = qp();
        let mw = 0x7f00_0000_1000_usize as *mut ffi::ibv_mw;
        let info = ffi::ibv_mw_bind_info {
            mr: 0x7f00_0000_2000_usize as *mut ffi::ibv_mr,
            addr: ADDR,
            length: ADDR2,
            mw_access_flags: ffi::IBV_ACCESS_REMOTE_WRITE | ffi::IBV_ACCESS_ZERO_BASED,
        };
        unsafe { ffi::ibv_wr_bind_mw(qp.ibv(), mw, RKEY, &info) };
        let args = vec![
            ptr(mw),
            Arg::U32(RKEY),
            ptr(&info),
            ptr(info.mr),
            Arg::U64(ADDR),
            Arg::U64(ADDR2),
            Arg::U32(info.mw_access_flags),
        ];
        assert_eq!(take(), [qp_call("wr_bind_mw", &qp, WR, args)]);
    }

    fn ibv_wr_local_inv() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_local_inv(qp.ibv(), RKEY) };
        assert_eq!(take(), [qp_call("wr_local_inv", &qp, WR, vec![Arg::U32(RKEY)])]);
    }

    fn ibv_wr_rdma_read() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_rdma_read(qp.ibv(), RKEY, ADDR) };
        let args = vec![Arg::U32(RKEY), Arg::U64(ADDR)];
        assert_eq!(take(), [qp_call("wr_rdma_read", &qp, WR, args)]);
    }

    fn ibv_wr_rdma_write() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_rdma_write(qp.ibv(), RKEY, ADDR) };
        let args = vec![Arg::U32(RKEY), Arg::U64(ADDR)];
        assert_eq!(take(), [qp_call("wr_rdma_write", &qp, WR, args)]);
    }

    fn ibv_wr_rdma_write_imm() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_rdma_write_imm(qp.ibv(), RKEY, ADDR, IMM_BE) };
        let args = vec![Arg::U32(RKEY), Arg::U64(ADDR), Arg::U32(IMM_BE)];
        assert_eq!(take(), [qp_call("wr_rdma_write_imm", &qp, WR, args)]);
    }

    fn ibv_wr_send() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_send(qp.ibv()) };
        assert_eq!(take(), [qp_call("wr_send", &qp, WR, vec![])]);
    }

    fn ibv_wr_send_imm() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_send_imm(qp.ibv(), IMM_BE) };
        assert_eq!(take(), [qp_call("wr_send_imm", &qp, WR, vec![Arg::U32(IMM_BE)])]);
    }

    fn ibv_wr_send_inv() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_send_inv(qp.ibv(), RKEY) };
        assert_eq!(take(), [qp_call("wr_send_inv", &qp, WR, vec![Arg::U32(RKEY)])]);
    }

    fn ibv_wr_send_tso() {
        let mut qp = qp();
        let mut hdr = [0xA5u8; 54];
        hdr[53] = 0x5A;
        unsafe { ffi::ibv_wr_send_tso(qp.ibv(), hdr.as_mut_ptr().cast(), 54, 0xFFF0) };
        let args = vec![ptr(hdr.as_ptr()), Arg::U16(54), Arg::U16(0xFFF0), Arg::Bytes(hdr.to_vec())];
        assert_eq!(take(), [qp_call("wr_send_tso", &qp, WR, args)]);
    }

    // ----- ibv_wr_post(3): setters -----

    fn ibv_wr_set_ud_addr() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_set_ud_addr(qp.ibv(), fake_ah(), DCTN, 0x8001_1111) };
        let args = vec![ptr(fake_ah()), Arg::U32(DCTN), Arg::U32(0x8001_1111)];
        assert_eq!(take(), [qp_call("wr_set_ud_addr", &qp, WR, args)]);
    }

    fn ibv_wr_set_xrc_srqn() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_set_xrc_srqn(qp.ibv(), DCTN) };
        assert_eq!(take(), [qp_call("wr_set_xrc_srqn", &qp, WR, vec![Arg::U32(DCTN)])]);
    }

    fn ibv_wr_set_sge() {
        let mut qp = qp();
        unsafe { ffi::ibv_wr_set_sge(qp.ibv(), LKEY, ADDR, LEN32) };
        let args = vec![Arg::U32(LKEY), Arg::U64(ADDR), Arg::U32(LEN32)];
        assert_eq!(take(), [qp_call("wr_set_sge", &qp, WR, args)]);
    }

    fn ibv_wr_set_sge_list() {
        let mut qp = qp();
        let sges = [
            ffi::ibv_sge { addr: ADDR, length: LEN32, lkey: LKEY },
            ffi::ibv_sge { addr: ADDR2, length: 1, lkey: RKEY },
            ffi::ibv_sge { addr: u64::MAX, length: u32::MAX, lkey: u32::MAX },
        ];
        unsafe { ffi::ibv_wr_set_sge_list(qp.ibv(), sges.len(), sges.as_ptr()) };
        let args = vec![
            Arg::Usize(3),
            ptr(sges.as_ptr()),
            Arg::Sges(vec![(ADDR, LEN32, LKEY), (ADDR2, 1, RKEY), (u64::MAX, u32::MAX, u32::MAX)]),
        ];
        assert_eq!(take(), [qp_call("wr_set_sge_list", &qp, WR, args)]);
    }

    fn ibv_wr_set_inline_data() {
        let mut qp = qp();
        let mut data: Vec<u8> = (0..=255u8).collect();
        unsafe { ffi::ibv_wr_set_inline_data(qp.ibv(), data.as_mut_ptr().cast(), data.len()) };
        let args = vec![ptr(data.as_ptr()), Arg::Usize(256), Arg::Bytes(data.clone())];
        assert_eq!(take(), [qp_call("wr_set_inline_data", &qp, WR, args)]);
    }

    fn ibv_wr_set_inline_data_list() {
        let mut qp = qp();
        let a = *b"first buffer";
        let b = [0xEEu8; 3];
        let bufs = [
            ffi::ibv_data_buf { addr: a.as_ptr() as *mut _, length: a.len() },
            ffi::ibv_data_buf { addr: b.as_ptr() as *mut _, length: b.len() },
        ];
        unsafe { ffi::ibv_wr_set_inline_data_list(qp.ibv(), 2, bufs.as_ptr()) };
        let args = vec![Arg::Usize(2), ptr(bufs.as_ptr()), Arg::Bufs(vec![a.to_vec(), b.to_vec()])];
        assert_eq!(take(), [qp_call("wr_set_inline_data_list", &qp, WR, args)]);
    }

    // ----- mlx5dv_wr_post(3) -----

    fn mlx5dv_wr_set_dc_addr() {
        let mut qp = qp();
        unsafe { ffi::mlx5dv_wr_set_dc_addr(qp.dv(), fake_ah(), DCTN, DC_KEY) };
        let args = vec![ptr(fake_ah()), Arg::U32(DCTN), Arg::U64(DC_KEY)];
        assert_eq!(take(), [dv_call("wr_set_dc_addr", &qp, WR, args)]);
    }

    fn mlx5dv_wr_set_dc_addr_stream() {
        let mut qp = qp();
        for stream in [0u16, 1, 0x8000, u16::MAX] {
            unsafe { ffi::mlx5dv_wr_set_dc_addr_stream(qp.dv(), fake_ah(), DCTN, DC_KEY, stream) };
            let args = vec![ptr(fake_ah()), Arg::U32(DCTN), Arg::U64(DC_KEY), Arg::U16(stream)];
            assert_eq!(take(), [dv_call("wr_set_dc_addr_stream", &qp, WR, args)]);
        }
    }

    fn mlx5dv_wr_mr_interleaved() {
        let mut qp = qp();
        let mut data = [
            ffi::mlx5dv_mr_interleaved { addr: ADDR, bytes_count: 512, bytes_skip: 0xFFFF_0000, lkey: LKEY },
            ffi::mlx5dv_mr_interleaved { addr: ADDR2, bytes_count: LEN32, bytes_skip: 8, lkey: RKEY },
        ];
        unsafe {
            ffi::mlx5dv_wr_mr_interleaved(qp.dv(), fake_mkey(), ACCESS, 0xFFFF_FFFF, 2, data.as_mut_ptr())
        };
        let args = vec![
            ptr(fake_mkey()),
            Arg::U32(ACCESS),
            Arg::U32(0xFFFF_FFFF),
            Arg::U16(2),
            ptr(data.as_ptr()),
            Arg::Interleaved(vec![(ADDR, 512, 0xFFFF_0000, LKEY), (ADDR2, LEN32, 8, RKEY)]),
        ];
        assert_eq!(take(), [dv_call("wr_mr_interleaved", &qp, WR, args)]);
    }

    fn mlx5dv_wr_mr_list() {
        let mut qp = qp();
        let mut sges = [
            ffi::ibv_sge { addr: ADDR, length: 4096, lkey: LKEY },
            ffi::ibv_sge { addr: ADDR2, length: LEN32, lkey: RKEY },
        ];
        unsafe { ffi::mlx5dv_wr_mr_list(qp.dv(), fake_mkey(), ACCESS, 2, sges.as_mut_ptr()) };
        let args = vec![
            ptr(fake_mkey()),
            Arg::U32(ACCESS),
            Arg::U16(2),
            ptr(sges.as_ptr()),
            Arg::Sges(vec![(ADDR, 4096, LKEY), (ADDR2, LEN32, RKEY)]),
        ];
        assert_eq!(take(), [dv_call("wr_mr_list", &qp, WR, args)]);
    }

    fn mlx5dv_wr_memcpy() {
        let mut qp = qp();
        // Above 4 GiB: a length narrowed to 32 bits would arrive as 0x10.
        let len: usize = 0x0000_0001_0000_0010;
        unsafe { ffi::mlx5dv_wr_memcpy(qp.dv(), LKEY, ADDR, RKEY, ADDR2, len) };
        let args = vec![Arg::U32(LKEY), Arg::U64(ADDR), Arg::U32(RKEY), Arg::U64(ADDR2), Arg::Usize(len)];
        assert_eq!(take(), [dv_call("wr_memcpy", &qp, WR, args)]);
    }

    fn mlx5dv_wr_raw_wqe() {
        let mut qp = qp();
        let mut wqe = [0u64; 8];
        let mut ctrl = ffi::mlx5_wqe_ctrl_seg::default();
        unsafe { ffi::mlx5dv_set_ctrl_seg(&mut ctrl, 0, ffi::MLX5_OPCODE_SEND as u8, 0, 0x12_3456, 0x08, 2, 0, 0) };
        // SAFETY (test): both are 16 plain bytes.
        let ctrl_bytes: [u8; 16] = unsafe { std::mem::transmute(ctrl) };
        unsafe { std::ptr::copy_nonoverlapping(ctrl_bytes.as_ptr(), wqe.as_mut_ptr().cast::<u8>(), 16) };
        unsafe { ffi::mlx5dv_wr_raw_wqe(qp.dv(), wqe.as_ptr().cast()) };
        let args = vec![ptr(wqe.as_ptr()), Arg::Bytes(ctrl_bytes.to_vec())];
        assert_eq!(take(), [dv_call("wr_raw_wqe", &qp, WR, args)]);
    }

    fn mlx5dv_wr_mkey_configure() {
        let mut qp = qp();
        let mut attr = ffi::mlx5dv_mkey_conf_attr { conf_flags: 0x8000_0001, comp_mask: 0 };
        unsafe { ffi::mlx5dv_wr_mkey_configure(qp.dv(), fake_mkey(), 0xFE, &mut attr) };
        let args = vec![ptr(fake_mkey()), Arg::U8(0xFE), ptr(&attr), Arg::U32(0x8000_0001)];
        assert_eq!(take(), [dv_call("wr_mkey_configure", &qp, WR, args)]);
    }

    fn mlx5dv_wr_set_mkey_access_flags() {
        let mut qp = qp();
        unsafe { ffi::mlx5dv_wr_set_mkey_access_flags(qp.dv(), ACCESS) };
        assert_eq!(take(), [dv_call("wr_set_mkey_access_flags", &qp, WR, vec![Arg::U32(ACCESS)])]);
    }

    fn mlx5dv_wr_set_mkey_layout_list() {
        let mut qp = qp();
        let sges = [ffi::ibv_sge { addr: ADDR, length: LEN32, lkey: LKEY }];
        unsafe { ffi::mlx5dv_wr_set_mkey_layout_list(qp.dv(), 1, sges.as_ptr()) };
        let args = vec![Arg::U16(1), ptr(sges.as_ptr()), Arg::Sges(vec![(ADDR, LEN32, LKEY)])];
        assert_eq!(take(), [dv_call("wr_set_mkey_layout_list", &qp, WR, args)]);
    }

    fn mlx5dv_wr_set_mkey_layout_interleaved() {
        let mut qp = qp();
        let data = [ffi::mlx5dv_mr_interleaved { addr: ADDR, bytes_count: 64, bytes_skip: 64, lkey: LKEY }];
        unsafe { ffi::mlx5dv_wr_set_mkey_layout_interleaved(qp.dv(), 0x8000_0000, 1, data.as_ptr()) };
        let args = vec![
            Arg::U32(0x8000_0000),
            Arg::U16(1),
            ptr(data.as_ptr()),
            Arg::Interleaved(vec![(ADDR, 64, 64, LKEY)]),
        ];
        assert_eq!(take(), [dv_call("wr_set_mkey_layout_interleaved", &qp, WR, args)]);
    }

    fn mlx5dv_wr_set_mkey_sig_block() {
        let mut qp = qp();
        let attr = ffi::mlx5dv_sig_block_attr { check_mask: 0xA5, ..Default::default() };
        unsafe { ffi::mlx5dv_wr_set_mkey_sig_block(qp.dv(), &attr) };
        let args = vec![ptr(&attr), Arg::U8(0xA5)];
        assert_eq!(take(), [dv_call("wr_set_mkey_sig_block", &qp, WR, args)]);
    }

    fn mlx5dv_wr_set_mkey_crypto() {
        let mut qp = qp();
        let attr = ffi::mlx5dv_crypto_attr { comp_mask: 0x8000_0000_0000_0002, ..Default::default() };
        unsafe { ffi::mlx5dv_wr_set_mkey_crypto(qp.dv(), &attr) };
        let args = vec![ptr(&attr), Arg::U64(0x8000_0000_0000_0002)];
        assert_eq!(take(), [dv_call("wr_set_mkey_crypto", &qp, WR, args)]);
    }

    // ----- ibv_create_cq_ex(3): the extended poll API -----

    fn ibv_start_poll() {
        let mut cq = FakeCq::new();
        let mut attr = ffi::ibv_poll_cq_attr { comp_mask: 0 };
        assert_eq!(unsafe { ffi::ibv_start_poll(cq.cq(), &mut attr) }, 0);
        cq.poll_ret = libc::ENOENT;
        assert_eq!(unsafe { ffi::ibv_start_poll(cq.cq(), &mut attr) }, libc::ENOENT);
        let c = cq_call("start_poll", &cq, vec![ptr(&attr), Arg::U32(0)]);
        assert_eq!(take(), [c.clone(), c]);
    }

    fn ibv_next_poll() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_next_poll(cq.cq()) }, 0);
        cq.poll_ret = libc::ENOENT;
        assert_eq!(unsafe { ffi::ibv_next_poll(cq.cq()) }, libc::ENOENT);
        let c = cq_call("next_poll", &cq, vec![]);
        assert_eq!(take(), [c.clone(), c]);
    }

    fn ibv_end_poll() {
        let mut cq = FakeCq::new();
        unsafe { ffi::ibv_end_poll(cq.cq()) };
        assert_eq!(take(), [cq_call("end_poll", &cq, vec![])]);
    }

    fn ibv_wc_read_opcode() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_opcode(cq.cq()) }, wc::OPCODE);
        assert_eq!(take(), [cq_call("read_opcode", &cq, vec![])]);
    }

    fn ibv_wc_read_vendor_err() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_vendor_err(cq.cq()) }, wc::VENDOR_ERR);
        assert_eq!(take(), [cq_call("read_vendor_err", &cq, vec![])]);
    }

    fn ibv_wc_read_byte_len() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_byte_len(cq.cq()) }, wc::BYTE_LEN);
        assert_eq!(take(), [cq_call("read_byte_len", &cq, vec![])]);
    }

    fn ibv_wc_read_imm_data() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_imm_data(cq.cq()) }, wc::IMM_DATA);
        assert_eq!(take(), [cq_call("read_imm_data", &cq, vec![])]);
    }

    fn ibv_wc_read_invalidated_rkey() {
        // The header reads the invalidated rkey through read_imm_data.
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_invalidated_rkey(cq.cq()) }, wc::IMM_DATA);
        assert_eq!(take(), [cq_call("read_imm_data", &cq, vec![])]);
    }

    fn ibv_wc_read_qp_num() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_qp_num(cq.cq()) }, wc::QP_NUM);
        assert_eq!(take(), [cq_call("read_qp_num", &cq, vec![])]);
    }

    fn ibv_wc_read_src_qp() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_src_qp(cq.cq()) }, wc::SRC_QP);
        assert_eq!(take(), [cq_call("read_src_qp", &cq, vec![])]);
    }

    fn ibv_wc_read_wc_flags() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_wc_flags(cq.cq()) }, wc::WC_FLAGS);
        assert_eq!(take(), [cq_call("read_wc_flags", &cq, vec![])]);
    }

    fn ibv_wc_read_slid() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_slid(cq.cq()) }, wc::SLID);
        assert_eq!(take(), [cq_call("read_slid", &cq, vec![])]);
    }

    fn ibv_wc_read_sl() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_sl(cq.cq()) }, wc::SL);
        assert_eq!(take(), [cq_call("read_sl", &cq, vec![])]);
    }

    fn ibv_wc_read_dlid_path_bits() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_dlid_path_bits(cq.cq()) }, wc::DLID_PATH_BITS);
        assert_eq!(take(), [cq_call("read_dlid_path_bits", &cq, vec![])]);
    }

    fn ibv_wc_read_completion_ts() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_completion_ts(cq.cq()) }, wc::COMPLETION_TS);
        assert_eq!(take(), [cq_call("read_completion_ts", &cq, vec![])]);
    }

    fn ibv_wc_read_completion_wallclock_ns() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_completion_wallclock_ns(cq.cq()) }, wc::WALLCLOCK_NS);
        assert_eq!(take(), [cq_call("read_completion_wallclock_ns", &cq, vec![])]);
    }

    fn ibv_wc_read_cvlan() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_cvlan(cq.cq()) }, wc::CVLAN);
        assert_eq!(take(), [cq_call("read_cvlan", &cq, vec![])]);
    }

    fn ibv_wc_read_flow_tag() {
        let mut cq = FakeCq::new();
        assert_eq!(unsafe { ffi::ibv_wc_read_flow_tag(cq.cq()) }, wc::FLOW_TAG);
        assert_eq!(take(), [cq_call("read_flow_tag", &cq, vec![])]);
    }

    fn ibv_wc_read_tm_info() {
        let mut cq = FakeCq::new();
        let mut info = ffi::ibv_wc_tm_info::default();
        unsafe { ffi::ibv_wc_read_tm_info(cq.cq(), &mut info) };
        assert_eq!((info.tag, info.priv_), (wc::TM_TAG, wc::TM_PRIV));
        assert_eq!(take(), [cq_call("read_tm_info", &cq, vec![ptr(&info)])]);
    }

    fn ibv_cq_ex_to_cq() {
        let mut cq = FakeCq::new();
        let base = unsafe { ffi::ibv_cq_ex_to_cq(cq.cq()) };
        assert_eq!(base as usize, cq.cq() as usize);
        assert_eq!(take(), []);
    }

    // ----- the legacy post and poll calls (through the context's ops) -----

    fn ibv_post_send() {
        let mut ctx = FakeContext::new();
        let mut qp = ffi::ibv_qp { context: ctx.ctx(), ..Default::default() };
        let mut wr = ffi::ibv_send_wr { wr_id: WR_ID, ..Default::default() };
        let mut bad = std::ptr::null_mut();
        assert_eq!(unsafe { ffi::ibv_post_send(&mut qp, &mut wr, &mut bad) }, 0);
        let args = vec![ptr(&wr), ptr(&bad), Arg::U64(WR_ID)];
        assert_eq!(take(), [Call { entry: "post_send", obj: &qp as *const _ as usize, wr: None, args }]);
    }

    fn ibv_post_recv() {
        let mut ctx = FakeContext::new();
        let mut qp = ffi::ibv_qp { context: ctx.ctx(), ..Default::default() };
        let mut wr = ffi::ibv_recv_wr { wr_id: WR_ID, ..Default::default() };
        let mut bad = std::ptr::null_mut();
        assert_eq!(unsafe { ffi::ibv_post_recv(&mut qp, &mut wr, &mut bad) }, 0);
        let args = vec![ptr(&wr), ptr(&bad), Arg::U64(WR_ID)];
        assert_eq!(take(), [Call { entry: "post_recv", obj: &qp as *const _ as usize, wr: None, args }]);
    }

    fn ibv_poll_cq() {
        let mut ctx = FakeContext::new();
        let mut cq = ffi::ibv_cq { context: ctx.ctx(), ..Default::default() };
        let mut wcs = [ffi::ibv_wc::default(); 4];
        assert_eq!(unsafe { ffi::ibv_poll_cq(&mut cq, 4, wcs.as_mut_ptr()) }, 1);
        assert_eq!(wcs[0].wr_id, 0x0102_0304_0506_0708);
        let args = vec![Arg::U32(4), ptr(wcs.as_ptr())];
        assert_eq!(take(), [Call { entry: "poll_cq", obj: &cq as *const _ as usize, wr: None, args }]);
    }
}

/// `ibv_wr_flush` (rdma-core 45 and newer): dispatched like the other
/// builders, in its own test because the bindings of older releases do
/// not have it (build.rs sets `mlx5dv_ibv_wr_flush` when this build's
/// bindings do). Its entry records into a list of its own: the shared
/// recorder's fake QP predates it.
#[cfg(mlx5dv_ibv_wr_flush)]
#[test]
fn ibv_wr_flush() {
    use std::cell::RefCell;
    type Seen = (usize, (u64, u32), u32, u64, usize, u8, u8);
    thread_local! {
        static SEEN: RefCell<Vec<Seen>> = const { RefCell::new(Vec::new()) };
    }
    unsafe extern "C" fn wr_flush(
        qp: *mut ffi::ibv_qp_ex,
        rkey: u32,
        remote_addr: u64,
        len: usize,
        type_: u8,
        level: u8,
    ) {
        let wr = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
        SEEN.with(|s| {
            s.borrow_mut()
                .push((qp as usize, wr, rkey, remote_addr, len, type_, level))
        });
    }
    let mut qp = qp();
    qp.ibv.wr_flush = Some(wr_flush);
    // Above 4 GiB, and a placement type and selectivity level that differ,
    // so that a narrowed length or swapped bytes cannot pass.
    let len: usize = 0x0000_0001_0000_0010;
    let (placement, level) = (ffi::IBV_FLUSH_PERSISTENT as u8, ffi::IBV_FLUSH_MR as u8);
    assert_ne!(placement, level);
    unsafe { ffi::ibv_wr_flush(qp.ibv(), RKEY, ADDR, len, placement, level) };
    let got = SEEN.with(|s| s.take());
    assert_eq!(
        got,
        [(qp.ibv() as usize, WR, RKEY, ADDR, len, placement, level)]
    );
    assert_eq!(take(), []);
}

/// A whole batch, as in the man page's EXAMPLE: the calls arrive in order,
/// each builder seeing the wr_id and flags set just before it.
#[test]
fn a_dci_batch_arrives_in_order_with_each_wrs_attributes() {
    let mut qp = FakeQp::new();
    unsafe {
        ffi::ibv_wr_start(qp.ibv());
        qp.set_wr(1, ffi::IBV_SEND_SIGNALED);
        ffi::ibv_wr_rdma_write(qp.ibv(), RKEY, ADDR);
        ffi::ibv_wr_set_sge(qp.ibv(), LKEY, ADDR2, 64);
        ffi::mlx5dv_wr_set_dc_addr(qp.dv(), fake_ah(), DCTN, DC_KEY);
        qp.set_wr(2, 0);
        ffi::ibv_wr_rdma_write(qp.ibv(), RKEY, ADDR + 64);
        ffi::ibv_wr_set_sge(qp.ibv(), LKEY, ADDR2 + 64, 64);
        ffi::mlx5dv_wr_set_dc_addr_stream(qp.dv(), fake_ah(), DCTN, DC_KEY, 7);
        assert_eq!(ffi::ibv_wr_complete(qp.ibv()), 0);
    }
    let w1 = (1, ffi::IBV_SEND_SIGNALED);
    let w2 = (2, 0);
    let expected = [
        qp_call("wr_start", &qp, (0, 0), vec![]),
        qp_call(
            "wr_rdma_write",
            &qp,
            w1,
            vec![Arg::U32(RKEY), Arg::U64(ADDR)],
        ),
        qp_call(
            "wr_set_sge",
            &qp,
            w1,
            vec![Arg::U32(LKEY), Arg::U64(ADDR2), Arg::U32(64)],
        ),
        dv_call(
            "wr_set_dc_addr",
            &qp,
            w1,
            vec![ptr(fake_ah()), Arg::U32(DCTN), Arg::U64(DC_KEY)],
        ),
        qp_call(
            "wr_rdma_write",
            &qp,
            w2,
            vec![Arg::U32(RKEY), Arg::U64(ADDR + 64)],
        ),
        qp_call(
            "wr_set_sge",
            &qp,
            w2,
            vec![Arg::U32(LKEY), Arg::U64(ADDR2 + 64), Arg::U32(64)],
        ),
        dv_call(
            "wr_set_dc_addr_stream",
            &qp,
            w2,
            vec![
                ptr(fake_ah()),
                Arg::U32(DCTN),
                Arg::U64(DC_KEY),
                Arg::U16(7),
            ],
        ),
        qp_call("wr_complete", &qp, w2, vec![]),
    ];
    assert_eq!(take(), expected);
}

/// The fake `struct verbs_context`: the non-inline verbs calls the crate
/// makes on a QP or SRQ (`ibv_modify_qp`, ...) reach libibverbs, which
/// dispatches them to the provider's ops: the fake's record them.
#[test]
fn libibverbs_dispatches_qp_and_srq_calls_to_the_fake_contexts_ops() {
    let mut ctx = FakeVerbsContext::new("fake0");
    let mut fq = FakeQp::new();
    ctx.add_qp(&mut fq);
    let qp = fq.qp();
    let mut attr = ffi::ibv_qp_attr {
        qp_state: ffi::IBV_QPS_ERR,
        ..Default::default()
    };
    let mask = (ffi::IBV_QP_STATE | ffi::IBV_QP_PORT) as i32;
    assert_eq!(unsafe { ffi::ibv_modify_qp(qp, &mut attr, mask) }, 0);
    // libibverbs keeps the state it moved the QP to.
    assert_eq!(fq.ibv.qp_base.state, ffi::IBV_QPS_ERR);
    let mut out = ffi::ibv_qp_attr::default();
    let mut init = ffi::ibv_qp_init_attr::default();
    let m = ffi::IBV_QP_STATE as i32;
    assert_eq!(unsafe { ffi::ibv_query_qp(qp, &mut out, m, &mut init) }, 0);
    assert_eq!(out.qp_state, ffi::IBV_QPS_ERR);
    assert_eq!(unsafe { ffi::ibv_destroy_qp(qp) }, 0);

    let mut pd = ffi::ibv_pd {
        context: ctx.ctx(),
        ..Default::default()
    };
    let mut srq_attr = ffi::ibv_srq_init_attr::default();
    srq_attr.attr.max_wr = 0x1234;
    srq_attr.attr.max_sge = 3;
    let srq = unsafe { ffi::ibv_create_srq(&mut pd, &mut srq_attr) };
    assert!(!srq.is_null());
    // libibverbs fills in the SRQ's context and PD.
    assert_eq!(
        unsafe { ((*srq).context, (*srq).pd) },
        (ctx.ctx(), &mut pd as *mut _)
    );
    assert_eq!(unsafe { ffi::ibv_destroy_srq(srq) }, 0);

    let q = qp as usize;
    let call = |entry, obj, args| Call {
        entry,
        obj,
        wr: None,
        args,
    };
    assert_eq!(
        take(),
        [
            call(
                "modify_qp",
                q,
                vec![Arg::U32(ffi::IBV_QPS_ERR), Arg::U32(mask as u32)]
            ),
            call("query_qp", q, vec![Arg::U32(ffi::IBV_QP_STATE)]),
            call("destroy_qp", q, vec![]),
            call(
                "create_srq",
                &pd as *const _ as usize,
                vec![Arg::U32(0x1234), Arg::U32(3)]
            ),
            call("destroy_srq", srq as usize, vec![]),
        ]
    );
}

/// Echo mode: the fake QP plays a device. Each work request completes on
/// the CQ with the wr_id its builder saw, in order; the CQ hands them out
/// one by one, and ENOENT when none is left.
#[test]
fn an_attached_fake_qp_completes_each_work_request_with_its_builders_wr_id() {
    let mut qp = FakeQp::new();
    let mut cq = FakeCq::new();
    qp.ibv.qp_base.qp_num = DCTN;
    qp.attach(&mut cq);
    unsafe {
        ffi::ibv_wr_start(qp.ibv());
        qp.set_wr(1, ffi::IBV_SEND_SIGNALED);
        ffi::ibv_wr_rdma_write(qp.ibv(), RKEY, ADDR);
        ffi::ibv_wr_set_sge(qp.ibv(), LKEY, ADDR2, 64);
        // Unsignalled: no completion.
        qp.set_wr(2, 0);
        ffi::ibv_wr_send(qp.ibv());
        ffi::ibv_wr_set_sge(qp.ibv(), LKEY, ADDR2, 8);
        qp.set_wr(3, ffi::IBV_SEND_SIGNALED);
        ffi::mlx5dv_wr_memcpy(qp.dv(), LKEY, ADDR, LKEY, ADDR2, 32);
        assert_eq!(ffi::ibv_wr_complete(qp.ibv()), 0);
        // An aborted batch leaves nothing.
        ffi::ibv_wr_start(qp.ibv());
        qp.set_wr(4, ffi::IBV_SEND_SIGNALED);
        ffi::ibv_wr_send(qp.ibv());
        ffi::ibv_wr_abort(qp.ibv());
    }
    cq.push(Wc {
        wr_id: 9,
        status: ffi::IBV_WC_REM_OP_ERR,
        qp_num: 7,
        vendor_err: 5,
        ..Wc::default()
    });
    take();
    let mut attr = ffi::ibv_poll_cq_attr::default();
    let mut got = Vec::new();
    unsafe {
        let mut rc = ffi::ibv_start_poll(cq.cq(), &mut attr);
        while rc == 0 {
            let c = cq.cq();
            got.push((
                (*c).wr_id,
                (*c).status,
                ffi::ibv_wc_read_opcode(c),
                ffi::ibv_wc_read_byte_len(c),
                ffi::ibv_wc_read_qp_num(c),
                ffi::ibv_wc_read_vendor_err(c),
            ));
            rc = ffi::ibv_next_poll(c);
        }
        assert_eq!(rc, libc::ENOENT);
        ffi::ibv_end_poll(cq.cq());
        assert_eq!(ffi::ibv_start_poll(cq.cq(), &mut attr), libc::ENOENT);
    }
    let ok = ffi::IBV_WC_SUCCESS;
    assert_eq!(
        got,
        [
            (1, ok, ffi::IBV_WC_RDMA_WRITE, 64, DCTN, 0),
            (3, ok, ffi::MLX5DV_WC_MEMCPY, 0, DCTN, 0),
            (9, ffi::IBV_WC_REM_OP_ERR, 0, 0, 7, 5),
        ]
    );
    assert!(cq.violations.is_empty(), "{:?}", cq.violations);
    // A reader outside a poll is noticed.
    unsafe { ffi::ibv_wc_read_opcode(cq.cq()) };
    assert_eq!(cq.violations, ["read_opcode"]);
}

/// The names of the `static inline` functions a header defines.
fn static_inline_functions(header: &str) -> BTreeSet<String> {
    let text = std::fs::read_to_string(header).unwrap_or_else(|e| panic!("read {header}: {e}"));
    text.match_indices("static inline")
        .filter_map(|(at, _)| {
            let rest = &text[at..];
            let head = &rest[..rest.find('(')?];
            let name = head
                .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
                .next()?;
            Some(name.to_string())
        })
        .collect()
}

/// Whether a static-inline function belongs to the work-request or
/// completion APIs this crate promises to wire.
fn in_scope(name: &str) -> bool {
    name.starts_with("ibv_wr_")
        || name.starts_with("mlx5dv_wr_")
        || name.starts_with("ibv_wc_read_")
        || matches!(
            name,
            "ibv_start_poll"
                | "ibv_next_poll"
                | "ibv_end_poll"
                | "ibv_post_send"
                | "ibv_post_recv"
                | "ibv_poll_cq"
                | "ibv_cq_ex_to_cq"
        )
}

#[test]
fn every_work_request_and_poll_function_of_the_installed_headers_has_a_dispatch_test() {
    let mut in_headers = static_inline_functions(env!("MLX5DV_VERBS_H"));
    in_headers.extend(static_inline_functions(env!("MLX5DV_MLX5DV_H")));
    let in_headers: BTreeSet<String> = in_headers.into_iter().filter(|n| in_scope(n)).collect();
    let mut covered: BTreeSet<String> = COVERED.iter().map(|s| s.to_string()).collect();
    // Tested outside `cases!` where this build's bindings have them.
    if cfg!(mlx5dv_ibv_wr_flush) {
        covered.insert("ibv_wr_flush".into());
    }

    // Sanity: the parser found the spec's six functions and the batch calls.
    for must in [
        "mlx5dv_wr_set_dc_addr",
        "mlx5dv_wr_set_dc_addr_stream",
        "mlx5dv_wr_mr_interleaved",
        "mlx5dv_wr_mr_list",
        "mlx5dv_wr_raw_wqe",
        "mlx5dv_wr_memcpy",
        "ibv_wr_start",
        "ibv_wr_complete",
        "ibv_wr_abort",
    ] {
        assert!(
            in_headers.contains(must),
            "{must} not found in the installed headers"
        );
    }
    let untested: Vec<_> = in_headers.difference(&covered).collect();
    assert!(
        untested.is_empty(),
        "static-inline functions without a dispatch test: {untested:?}"
    );
    let unknown: Vec<_> = covered.difference(&in_headers).collect();
    assert!(
        unknown.is_empty(),
        "dispatch tests for functions the headers do not define: {unknown:?}"
    );
}
