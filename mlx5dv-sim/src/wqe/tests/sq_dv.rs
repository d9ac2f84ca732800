//! The mlx5dv builders of the fixture send queue: mkey configure and its
//! setters, `mr_list`, `mr_interleaved`, memcpy, local invalidate and
//! memory-window bind, as libmlx5 44 writes them.

use super::sq::{Interleaved, Sq, INLINE};
use crate::wqe::layout::{ctrl as c, opcode as op};

/// `IBV_ACCESS_LOCAL_WRITE`, `REMOTE_WRITE`, `REMOTE_READ`, `REMOTE_ATOMIC`.
pub const ACC_LW: u32 = 1;
/// `IBV_ACCESS_REMOTE_WRITE`.
pub const ACC_RW: u32 = 2;
/// `IBV_ACCESS_REMOTE_READ`.
pub const ACC_RR: u32 = 4;
/// `IBV_ACCESS_REMOTE_ATOMIC`.
pub const ACC_A: u32 = 8;

const MASK_LEN: u64 = 1;
const MASK_START_ADDR: u64 = 1 << 6;
const MASK_MKEY: u64 = 1 << 13;
const MASK_QPN: u64 = 1 << 14;
const MASK_ACCESS: u64 = 0xf << 18;
const MASK_FREE: u64 = 1 << 29;

/// `get_umr_mr_flags`.
fn umr_mr_flags(acc: u32) -> u8 {
    let mut f = 0;
    if acc & ACC_A != 0 {
        f |= 1 << 6;
    }
    if acc & ACC_RW != 0 {
        f |= 1 << 5;
    }
    if acc & ACC_RR != 0 {
        f |= 1 << 4;
    }
    if acc & ACC_LW != 0 {
        f |= 1 << 3;
    }
    f
}

impl Sq {
    fn umr_ctrl(&self) -> usize {
        self.ctrl + 16
    }

    fn mkc(&self) -> usize {
        let m = self.ctrl + 64;
        if m == self.buf.len() {
            0
        } else {
            m
        }
    }

    fn or_mask(&mut self, bits: u64) {
        let at = self.umr_ctrl() + 8;
        let m = u64::from_be_bytes(self.buf[at..at + 8].try_into().unwrap()) | bits;
        self.put(at, &m.to_be_bytes());
    }

    /// `mlx5_send_wr_mkey_configure` with `num_setters` setters to follow.
    pub fn mkey_configure(&mut self, lkey: u32, wr_flags: u32, num_setters: u32) -> u32 {
        assert!(
            wr_flags & INLINE != 0,
            "libmlx5 refuses mkey configure without IBV_SEND_INLINE"
        );
        self.init_op(op::UMR, wr_flags);
        self.size = 1;
        self.put(self.ctrl + c::IMM, &lkey.to_be_bytes());
        let u = self.umr_ctrl();
        self.put(u, &[0; 48]);
        self.size += 3;
        let m = self.mkc();
        self.put(m, &[0; 64]);
        self.put(m + 4, &(0xffff_ff00 | (lkey & 0xff)).to_be_bytes());
        self.size += 4;
        let d = m + 64;
        self.data = if d == self.buf.len() { 0 } else { d };
        self.buf[u] = 0x80;
        self.put(u + 8, &(MASK_FREE | MASK_MKEY).to_be_bytes());
        self.fm_cache = c::INITIATOR_SMALL_FENCE;
        if num_setters == 0 {
            self.finalize();
        }
        num_setters
    }

    /// `mlx5_send_wr_set_mkey_access_flags`.
    pub fn set_mkey_access_flags(&mut self, acc: u32, last: bool) {
        self.or_mask(MASK_ACCESS);
        let m = self.mkc();
        self.buf[m + 2] = umr_mr_flags(acc);
        if last {
            self.finalize();
        }
    }

    /// `mlx5_send_wr_set_mkey_layout_list` (`umr_sg_list_create`).
    pub fn set_mkey_layout_list(&mut self, sges: &[(u32, u64, u32)], last: bool) {
        let mut d = self.data;
        let mut reglen = 0u64;
        for &(lkey, addr, len) in sges {
            if d == self.buf.len() {
                d = 0;
            }
            self.put(d, &len.to_be_bytes());
            self.put(d + 4, &lkey.to_be_bytes());
            self.put(d + 8, &addr.to_be_bytes());
            reglen += u64::from(len);
            d += 16;
        }
        let pad = sges.len().next_multiple_of(4) - sges.len();
        self.put(d, &vec![0; pad * 16]);
        let xlat = sges.len() * 16;
        self.finish_layout(reglen, xlat, xlat.next_multiple_of(64), last);
    }

    /// `mlx5_send_wr_set_mkey_layout_interleaved` (`umr_strided_seg_create`).
    pub fn set_mkey_layout_interleaved(&mut self, repeat: u32, ents: &[Interleaved], last: bool) {
        let rb = self.data;
        self.put(rb + 4, &0x400u32.to_be_bytes());
        self.put(rb + 12, &0u16.to_be_bytes());
        self.put(rb + 14, &(ents.len() as u16).to_be_bytes());
        self.put(rb + 8, &repeat.to_be_bytes());
        let mut e = rb + 16;
        let mut bc = 0u64;
        for ent in ents {
            if e == self.buf.len() {
                e = 0;
            }
            bc += u64::from(ent.bytes_count);
            self.put(e + 8, &ent.addr.to_be_bytes());
            self.put(e + 2, &(ent.bytes_count as u16).to_be_bytes());
            self.put(
                e,
                &((ent.bytes_count + ent.bytes_skip) as u16).to_be_bytes(),
            );
            self.put(e + 4, &ent.lkey.to_be_bytes());
            e += 16;
        }
        self.put(rb, &(bc as u32).to_be_bytes());
        let pad = (ents.len() + 1).next_multiple_of(4) - ents.len() - 1;
        self.put(e, &vec![0; pad * 16]);
        let xlat = (ents.len() + 1) * 16;
        self.finish_layout(
            bc * u64::from(repeat),
            xlat,
            (16 + 16 * ents.len()).next_multiple_of(64),
            last,
        );
    }

    fn finish_layout(&mut self, reglen: u64, xlat: usize, size: usize, last: bool) {
        let m = self.mkc();
        self.put(m + 24, &reglen.to_be_bytes());
        self.or_mask(MASK_LEN);
        let u = self.umr_ctrl();
        self.put(
            u + 4,
            &((xlat.next_multiple_of(64) / 16) as u16).to_be_bytes(),
        );
        self.size += size / 16;
        if last {
            self.finalize();
        }
    }

    /// `mlx5dv_wr_mr_list`.
    pub fn mr_list(&mut self, lkey: u32, wr_flags: u32, acc: u32, sges: &[(u32, u64, u32)]) {
        self.mkey_configure(lkey, wr_flags, 2);
        self.set_mkey_access_flags(acc, false);
        self.set_mkey_layout_list(sges, true);
    }

    /// `mlx5dv_wr_mr_interleaved`.
    pub fn mr_interleaved(
        &mut self,
        lkey: u32,
        wr_flags: u32,
        acc: u32,
        repeat: u32,
        ents: &[Interleaved],
    ) {
        self.mkey_configure(lkey, wr_flags, 2);
        self.set_mkey_access_flags(acc, false);
        self.set_mkey_layout_interleaved(repeat, ents, true);
    }

    /// `mlx5dv_wr_memcpy`.
    pub fn memcpy(
        &mut self,
        wr_flags: u32,
        dst: (u32, u64),
        src: (u32, u64),
        len: u32,
        opaque: (u32, u64),
    ) {
        let len = if len == 0x8000_0000 { 0 } else { len };
        self.init_op(op::MMO, wr_flags);
        let ctrl = self.ctrl;
        let w0 = u32::from_be_bytes(self.buf[ctrl..ctrl + 4].try_into().unwrap());
        self.put(ctrl, &((w0 & 0xff_ffff) | (1 << 24)).to_be_bytes());
        self.put(ctrl + 16, &0u32.to_be_bytes());
        self.put(ctrl + 20, &opaque.0.to_be_bytes());
        self.put(ctrl + 24, &opaque.1.to_be_bytes());
        for (at, (lkey, addr)) in [(ctrl + 32, src), (ctrl + 48, dst)] {
            self.put(at, &len.to_be_bytes());
            self.put(at + 4, &lkey.to_be_bytes());
            self.put(at + 8, &addr.to_be_bytes());
        }
        self.size = 4;
        self.finalize();
    }

    /// `_build_umr_wqe` / `set_bind_wr` for a type-2 window (`bind:
    /// None`: `ibv_wr_local_inv`). `bind = (new_rkey, mr_lkey, addr, len,
    /// access)`.
    pub fn umr_bind(
        &mut self,
        wr_flags: u32,
        orig_rkey: u32,
        bind: Option<(u32, u32, u64, u32, u32)>,
    ) {
        self.init_op(op::UMR, wr_flags);
        self.put(self.ctrl + c::IMM, &orig_rkey.to_be_bytes());
        let u = self.umr_ctrl();
        let mut flags = 0x10 | 0x80;
        let mut mask = MASK_FREE | MASK_MKEY | MASK_QPN;
        self.put(u + 1, &[0; 3]);
        self.put(u + 6, &[0; 2]);
        self.put(u + 16, &[0; 32]);
        let klm = if bind.is_some() { 4u16 } else { 0 };
        if bind.is_some() {
            flags |= 0x20;
            mask |= MASK_LEN | MASK_START_ADDR | MASK_ACCESS;
        } else {
            flags |= 0x08;
        }
        self.buf[u] = flags;
        self.put(u + 4, &klm.to_be_bytes());
        self.put(u + 8, &mask.to_be_bytes());
        let m = self.mkc();
        let new_rkey = bind.map_or(0, |b| b.0);
        let qpn_part = if bind.is_some() {
            self.qpn << 8
        } else {
            0xffff_ff00
        };
        self.put(m + 4, &((new_rkey & 0xff) | qpn_part).to_be_bytes());
        self.size = 1 + 3 + 4;
        match bind {
            None => self.buf[m] = 0x40,
            Some((_, mr_lkey, addr, len, acc)) => {
                self.buf[m] = 0;
                self.buf[m + 2] = umr_mr_flags(acc);
                self.put(m + 16, &addr.to_be_bytes());
                self.put(m + 24, &u64::from(len).to_be_bytes());
                let d = if m + 64 == self.buf.len() { 0 } else { m + 64 };
                self.put(d, &len.to_be_bytes());
                self.put(d + 4, &mr_lkey.to_be_bytes());
                self.put(d + 8, &addr.to_be_bytes());
                self.put(d + 16, &[0; 48]);
                self.size += 4;
            }
        }
        self.fm_cache = c::INITIATOR_SMALL_FENCE;
        self.finalize();
    }
}
