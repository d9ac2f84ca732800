//! A send queue written as libmlx5 44 writes it (`providers/mlx5/qp.c`):
//! the `ibv_wr_*` / `mlx5dv_wr_*` builders and setters, wrap-around at
//! `qend` included. Fresh SQ memory is filled with a stale pattern, so a
//! parser that reads a field libmlx5 leaves unwritten (the `imm` of plain
//! WQEs, inline padding, the unmasked mkey context of a local invalidate)
//! trips over it.

use crate::wqe::layout::{ctrl as c, SEND_WQE_BB};
use crate::wqe::{ctrl_ds, QpKind, QpView};

/// The byte libmlx5's stale SQ memory is filled with in these fixtures.
pub const STALE: u8 = 0xa5;

/// `IBV_SEND_FENCE`, `IBV_SEND_SIGNALED`, `IBV_SEND_SOLICITED`,
/// `IBV_SEND_INLINE` (as `ibv_qp_ex.wr_flags`).
pub const FENCE: u32 = 1;
/// `IBV_SEND_SIGNALED`.
pub const SIGNALED: u32 = 2;
/// `IBV_SEND_SOLICITED`.
pub const SOLICITED: u32 = 4;
/// `IBV_SEND_INLINE`.
pub const INLINE: u32 = 8;

/// An interleaved entry as `struct mlx5dv_mr_interleaved`.
#[derive(Clone, Copy)]
pub struct Interleaved {
    pub addr: u64,
    pub bytes_count: u32,
    pub bytes_skip: u32,
    pub lkey: u32,
}

/// One libmlx5 send queue.
pub struct Sq {
    pub buf: Vec<u8>,
    pub wqe_cnt: u32,
    pub qpn: u32,
    pub kind: QpKind,
    pub max_inline: u32,
    pub wq_sig: bool,
    pub sig_all: bool,
    pub cur_post: u32,
    pub fm_cache: u8,
    /// Offset of the WQE being built (`cur_ctrl`).
    pub ctrl: usize,
    /// `cur_data`.
    pub data: usize,
    /// `cur_size` in octowords.
    pub size: usize,
    setters: u32,
}

impl Sq {
    pub fn new(kind: QpKind, wqe_cnt: u32) -> Self {
        Sq {
            buf: vec![STALE; wqe_cnt as usize * SEND_WQE_BB],
            wqe_cnt,
            qpn: 0x00_0123,
            kind,
            max_inline: 220,
            wq_sig: false,
            sig_all: false,
            cur_post: 0,
            fm_cache: 0,
            ctrl: 0,
            data: 0,
            size: 0,
            setters: 0,
        }
    }

    /// The view of this QP a device would give the parser; the WQE index
    /// expected is that of the WQE at `cur_post` `idx`.
    pub fn view(&self, idx: u32) -> QpView {
        QpView {
            qpn: self.qpn,
            kind: self.kind,
            max_inline: self.max_inline,
            max_send_sge: 16,
            sq_wqe_cnt: self.wqe_cnt,
            max_wqe_size: 1024,
            dci_streams: true,
            signature: self.wq_sig,
            expected_wqe_index: Some(idx as u16),
        }
    }

    fn qend(&self) -> usize {
        self.buf.len()
    }

    pub fn put(&mut self, off: usize, bytes: &[u8]) {
        self.buf[off..off + bytes.len()].copy_from_slice(bytes);
    }

    fn put32(&mut self, off: usize, v: u32) {
        self.put(off, &v.to_be_bytes());
    }

    fn put64(&mut self, off: usize, v: u64) {
        self.put(off, &v.to_be_bytes());
    }

    /// `memcpy_to_wqe`: a copy that wraps at `qend`.
    fn copy_wrapping(&mut self, dest: usize, src: &[u8]) -> usize {
        let room = self.qend() - dest;
        if src.len() > room {
            self.put(dest, &src[..room]);
            self.put(0, &src[room..]);
            src.len() - room
        } else {
            self.put(dest, src);
            dest + src.len()
        }
    }

    fn wrap(&self, off: usize) -> usize {
        if off == self.qend() {
            0
        } else {
            off
        }
    }

    /// `_common_wqe_init_op`.
    pub fn init_op(&mut self, opcode: u8, wr_flags: u32) {
        let idx = (self.cur_post & (self.wqe_cnt - 1)) as usize;
        self.ctrl = idx * SEND_WQE_BB;
        let ctrl = self.ctrl;
        self.put(ctrl + 8, &[0; 4]);
        let fence = if wr_flags & FENCE != 0 {
            c::FENCE
        } else {
            self.fm_cache
        };
        self.fm_cache = 0;
        let mut fm_ce_se = fence;
        if self.sig_all || wr_flags & SIGNALED != 0 {
            fm_ce_se |= c::CQ_UPDATE;
        }
        if wr_flags & SOLICITED != 0 {
            fm_ce_se |= c::SOLICITED;
        }
        self.buf[ctrl + c::FM_CE_SE] = fm_ce_se;
        self.put32(ctrl, ((self.cur_post & 0xffff) << 8) | u32::from(opcode));
    }

    fn transport(&self) -> usize {
        match self.kind {
            QpKind::Dci | QpKind::Ud => 48,
            _ => 0,
        }
    }

    /// `_mlx5_send_wr_send` (+ `_imm`, `_inv`: the imm written).
    pub fn send(&mut self, opcode: u8, wr_flags: u32, imm: Option<u32>) {
        self.init_op(opcode, wr_flags);
        if let Some(imm) = imm {
            self.put32(self.ctrl + c::IMM, imm);
        }
        let t = self.transport();
        self.data = self.wrap(self.ctrl + 16 + t);
        self.size = (16 + t) / 16;
        self.setters = 0;
    }

    /// `_mlx5_send_wr_rdma` (+ `_imm`).
    pub fn rdma(&mut self, opcode: u8, wr_flags: u32, rkey: u32, raddr: u64, imm: Option<u32>) {
        self.init_op(opcode, wr_flags);
        if let Some(imm) = imm {
            self.put32(self.ctrl + c::IMM, imm);
        }
        let t = self.transport();
        let r = self.wrap(self.ctrl + 16 + t);
        self.put64(r, raddr);
        self.put32(r + 8, rkey);
        self.put32(r + 12, 0);
        self.data = r + 16;
        self.size = (16 + t + 16) / 16;
        self.setters = 0;
    }

    /// `_mlx5_send_wr_atomic`.
    pub fn atomic(
        &mut self,
        opcode: u8,
        wr_flags: u32,
        rkey: u32,
        raddr: u64,
        cmp_add: u64,
        swap: u64,
    ) {
        self.init_op(opcode, wr_flags);
        let t = self.transport();
        let r = self.wrap(self.ctrl + 16 + t);
        self.put64(r, raddr);
        self.put32(r + 8, rkey);
        self.put32(r + 12, 0);
        if opcode == crate::wqe::layout::opcode::ATOMIC_CS {
            self.put64(r + 16, swap);
            self.put64(r + 24, cmp_add);
        } else {
            self.put64(r + 16, cmp_add);
        }
        self.data = self.wrap(r + 32);
        self.size = (16 + t + 32) / 16;
        self.setters = 0;
    }

    /// The setters' tail: RC finalises at once, DCI/UD after two setters.
    fn setter_done(&mut self) {
        match self.kind {
            QpKind::Dci | QpKind::Ud => {
                if self.setters == 1 {
                    self.finalize();
                } else {
                    self.setters += 1;
                }
            }
            _ => self.finalize(),
        }
    }

    /// `ibv_wr_set_sge`.
    pub fn set_sge(&mut self, lkey: u32, addr: u64, len: u32) {
        if len != 0 {
            let d = self.data;
            self.put32(d, len);
            self.put32(d + 4, lkey);
            self.put64(d + 8, addr);
            self.size += 1;
        }
        self.setter_done();
    }

    /// `ibv_wr_set_sge_list`.
    pub fn set_sge_list(&mut self, sges: &[(u32, u64, u32)]) {
        let mut d = self.data;
        for &(lkey, addr, len) in sges {
            d = self.wrap(d);
            if len == 0 {
                continue;
            }
            self.put32(d, len);
            self.put32(d + 4, lkey);
            self.put64(d + 8, addr);
            d += 16;
            self.size += 1;
        }
        self.setter_done();
    }

    /// `ibv_wr_set_inline_data_list` (one buffer: `ibv_wr_set_inline_data`).
    pub fn set_inline_list(&mut self, bufs: &[&[u8]]) {
        let seg = self.data;
        let mut w = seg + 4;
        let mut total = 0;
        for b in bufs {
            total += b.len();
            w = self.copy_wrapping(w, b);
        }
        if total != 0 {
            self.put32(seg, total as u32 | 0x8000_0000);
            self.size += (total + 4).div_ceil(16);
        }
        self.setter_done();
    }

    /// `mlx5dv_wr_set_dc_addr_stream` (`stream: None`: `_set_dc_addr`),
    /// with an IB AH of `dlid`, SL 3, static rate 0, optional GRH.
    pub fn set_dc_addr(
        &mut self,
        dlid: u16,
        dctn: u32,
        key: u64,
        stream: Option<u16>,
        grh: Option<[u8; 16]>,
    ) {
        if let Some(s) = stream {
            self.put(self.ctrl + c::DCI_STREAM_CHANNEL_ID, &s.to_be_bytes());
        }
        let mut av = [0u8; 48];
        av[12] = 3; // stat_rate_sl
        av[13] = 0x01; // fl_mlid: src_path_bits
        av[14..16].copy_from_slice(&dlid.to_be_bytes());
        if let Some(gid) = grh {
            av[26] = 7; // tclass
            av[27] = 64; // hop_limit
            let g: u32 = (1 << 30) | (2 << 20) | 0x12345;
            av[28..32].copy_from_slice(&g.to_be_bytes());
            av[32..48].copy_from_slice(&gid);
        }
        let dqp = dctn | 0x8000_0000;
        av[8..12].copy_from_slice(&dqp.to_be_bytes());
        av[0..8].copy_from_slice(&key.to_be_bytes());
        let at = self.ctrl + 16;
        self.put(at, &av);
        self.setter_done();
    }

    /// `ibv_wr_set_ud_addr` (`_set_datagram_seg`) with an IB AH of `dlid`.
    pub fn set_ud_addr(&mut self, dlid: u16, remote_qpn: u32, qkey: u32) {
        let mut av = [0u8; 48];
        av[14..16].copy_from_slice(&dlid.to_be_bytes());
        av[8..12].copy_from_slice(&(remote_qpn | 0x8000_0000).to_be_bytes());
        av[0..4].copy_from_slice(&qkey.to_be_bytes());
        let at = self.ctrl + 16;
        self.put(at, &av);
        self.setter_done();
    }

    /// `_common_wqe_finalize` (+ `__wqe_finalize`).
    pub fn finalize(&mut self) {
        let ctrl = self.ctrl;
        self.put32(ctrl + c::QPN_DS, self.size as u32 | (self.qpn << 8));
        self.sign_and_advance(self.size);
    }

    /// `__wqe_finalize`: signature (over `ds * 16` linear bytes, as
    /// `wq_sig` reads them) and the producer counter.
    fn sign_and_advance(&mut self, size: usize) {
        if self.wq_sig {
            let ctrl = self.ctrl;
            let len = (size * 16).min(self.qend() - ctrl);
            let x = self.buf[ctrl..ctrl + len].iter().fold(0u8, |a, &b| a ^ b);
            self.buf[ctrl + c::SIGNATURE] = !x;
        }
        self.cur_post += size.div_ceil(4) as u32;
    }

    /// `mlx5dv_wr_raw_wqe`: copies the caller's WQE (wrapping), rewrites
    /// only the WQE index bits.
    pub fn raw_wqe(&mut self, wqe: &[u8]) {
        let idx = (self.cur_post & (self.wqe_cnt - 1)) as usize;
        self.ctrl = idx * SEND_WQE_BB;
        self.fm_cache = 0;
        let ds = ctrl_ds(wqe) as usize;
        let ctrl = self.ctrl;
        self.copy_wrapping(ctrl, &wqe[..ds * 16]);
        let w0 = u32::from_be_bytes(wqe[0..4].try_into().unwrap());
        self.put32(ctrl, (w0 & 0xff00_00ff) | ((self.cur_post & 0xffff) << 8));
        self.sign_and_advance(ds);
    }

    /// The WQE at producer counter `idx`, linearised as a device reads it.
    pub fn linearise(&self, idx: u32) -> Vec<u8> {
        let start = (idx & (self.wqe_cnt - 1)) as usize * SEND_WQE_BB;
        let ds = ctrl_ds(&self.buf[start..start + 16]).max(1) as usize;
        (0..ds * 16)
            .map(|i| self.buf[(start + i) % self.qend()])
            .collect()
    }
}
