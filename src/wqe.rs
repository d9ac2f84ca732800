//! Raw WQE builders: the bytes of an mlx5 send work-queue entry (WQE),
//! segment by segment, in the layouts of mlx5dv.h, for
//! `mlx5dv_wr_raw_wqe`.
//!
//! `mlx5dv_wr_post(3)` describes `mlx5dv_wr_raw_wqe` as the way to post a
//! custom WQE on a normal QP: the caller writes every field of the WQE
//! except the control segment's WQE index and signature, which the driver
//! sets. The work request's `wr_flags` are ignored (completion, fence and
//! solicited bits are the WQE's own), and whatever the opcode, the work
//! completion opcode of a raw WQE is `IBV_WC_DRIVER2`.
//!
//! A WQE is a control segment (`struct mlx5_wqe_ctrl_seg`) followed by the
//! segments its opcode needs, each a whole number of 16-byte units. The
//! control segment's DS field counts those units, the control segment
//! included; the WQE occupies `ceil(DS / 4)` 64-byte basic blocks
//! (`MLX5_SEND_WQE_BB`) of the send queue. [`WqeBuilder`] writes the
//! segments in the order they are appended and fills the control segment
//! last, with the DS count it measured:
//!
//! | Segment | mlx5dv.h | Builder |
//! |---|---|---|
//! | control | `struct mlx5_wqe_ctrl_seg` | [`WqeBuilder::new`] and its setters |
//! | remote address | `struct mlx5_wqe_raddr_seg` | [`WqeBuilder::raddr_seg`] |
//! | atomic | `struct mlx5_wqe_atomic_seg` | [`WqeBuilder::atomic_cmp_swp_seg`], [`WqeBuilder::atomic_fetch_add_seg`] |
//! | data pointer | `struct mlx5_wqe_data_seg` | [`WqeBuilder::data_seg`] |
//! | inline data | `struct mlx5_wqe_inl_data_seg` + data | [`WqeBuilder::inline_data_seg`] |
//! | any other | (datagram, Ethernet, UMR, ...) | [`WqeBuilder::raw_seg`] |
//!
//! The usual orders are: send: control, data; RDMA write and read:
//! control, remote address, data; atomics: control, remote address, atomic,
//! one 8-byte data segment for the old value.
//!
//! ## Limits
//!
//! - DS is 6 bits of `qpn_ds`: the provider (`mlx5_wr_raw_wqe` in rdma-core's
//!   `providers/mlx5/qp.c`) reads `be32toh(ctrl->qpn_ds) & 0x3f` and copies
//!   exactly `DS * 16` bytes from the pointer it is given, so a WQE has at
//!   most [`MAX_DS`] units ([`MAX_WQE_BYTES`] bytes).
//! - The QP number is 24 bits. The provider does not fill it in for a raw
//!   WQE: the builder writes it.
//! - The device's own limit is the QP's send WQE size, fixed when the QP was
//!   created from its capabilities (`max_send_sge`, `max_inline_data`). The
//!   provider does not check a raw WQE against it: a WQE with more basic
//!   blocks ([`Wqe::basic_blocks`]) than the QP's WQE size can overwrite
//!   WQEs still queued. Whoever posts the WQE checks this.
//!
//! ## Safety
//!
//! Building a WQE is safe: it is bytes in a buffer. Posting one is not: its
//! segments name memory by key and address (lkey, rkey) with nothing tying
//! that memory's lifetime or borrows to the WQE, and the device reads and
//! writes it. The posting call is therefore `unsafe`.
//!
//! ## Example
//!
//! An RDMA write of 64 bytes, signaled: control + remote address + data
//! segment, 48 bytes, DS 3:
//!
//! ```
//! use mlx5dv::wqe::{CtrlFlags, Opcode, WqeBuilder};
//!
//! let wqe = WqeBuilder::new(Opcode::RdmaWrite, 0x00_1234)
//!     .flags(CtrlFlags::CQ_UPDATE)
//!     .raddr_seg(0x7f00_0000_1000, 0xabcd)
//!     .data_seg(64, 0x1111, 0x5500_0000_2000)
//!     .build()?;
//! assert_eq!(wqe.ds(), 3);
//! assert_eq!(wqe.as_bytes().len(), 48);
//! assert_eq!(wqe.basic_blocks(), 1);
//! // The opcode and the WQE index (left 0 for the driver), big-endian.
//! assert_eq!(wqe.as_bytes()[..4], [0, 0, 0, Opcode::RdmaWrite.raw()]);
//! // The QP number and DS.
//! assert_eq!(wqe.as_bytes()[4..8], [0x00, 0x12, 0x34, 3]);
//! # Ok::<(), mlx5dv::Error>(())
//! ```

mod ctrl;
#[cfg(test)]
mod tests;

pub use ctrl::{CtrlFlags, FenceMode, Opcode};

use crate::ffi;
use crate::{Error, Result};
use std::ffi::c_void;
use std::fmt;

/// Bytes in one DS unit (an octoword): every segment is a whole number of
/// them.
pub const DS_BYTES: usize = 16;

/// The most 16-byte units in one WQE: the DS field is the low 6 bits of
/// `mlx5_wqe_ctrl_seg.qpn_ds`.
pub const MAX_DS: u8 = 0x3f;

/// The largest WQE in bytes: [`MAX_DS`] units of [`DS_BYTES`].
pub const MAX_WQE_BYTES: usize = MAX_DS as usize * DS_BYTES;

/// The largest QP number: 24 bits, `mlx5_wqe_ctrl_seg.qpn_ds` bits 31..8.
pub const MAX_QP_NUM: u32 = 0x00ff_ffff;

/// `MLX5_INLINE_SEG`: bit 31 of a segment's byte count marks inline data.
const INLINE_SEG: u32 = ffi::MLX5_INLINE_SEG;

/// The largest byte count of a data segment: bit 31 is
/// `MLX5_INLINE_SEG`, which would turn it into an inline-data segment.
pub const MAX_DATA_SEG_BYTE_COUNT: u32 = INLINE_SEG - 1;

/// The size of the basic block the send queue is made of
/// (`MLX5_SEND_WQE_BB`).
const SEND_WQE_BB: usize = ffi::MLX5_SEND_WQE_BB as usize;

/// The WQE's storage: 16-byte aligned, so the control segment (4-byte
/// aligned in C) and every 8-byte field of the segments are aligned at the
/// buffer's start.
#[derive(Clone)]
#[repr(C, align(16))]
struct Buf([u8; MAX_WQE_BYTES]);

impl Buf {
    const fn zeroed() -> Self {
        Buf([0; MAX_WQE_BYTES])
    }
}

/// A finished WQE: a control segment and its segments, [`Wqe::ds`] whole
/// 16-byte units, in a 16-byte-aligned buffer.
///
/// Made by [`WqeBuilder::build`] or checked from caller-made bytes by
/// [`Wqe::from_bytes`]. The control segment's WQE index and signature are
/// left as given (0 from the builder): the driver sets them when the WQE is
/// posted.
#[derive(Clone)]
pub struct Wqe {
    buf: Buf,
    /// The number of 16-byte units in use, 1..=MAX_DS.
    ds: u8,
}

impl Wqe {
    /// The WQE's bytes, exactly [`Wqe::ds`] × 16 of them, as the device
    /// reads them.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf.0[..usize::from(self.ds) * DS_BYTES]
    }

    /// The start of the WQE: the pointer `mlx5dv_wr_raw_wqe` takes. It is
    /// 16-byte aligned and valid for [`Wqe::ds`] × 16 bytes while `self`
    /// lives and is not moved.
    pub fn as_ptr(&self) -> *const c_void {
        self.buf.0.as_ptr().cast()
    }

    /// The WQE's size in 16-byte units, as written in the control
    /// segment's DS field (1..=[`MAX_DS`]).
    pub fn ds(&self) -> u8 {
        self.ds
    }

    /// The 64-byte send-queue basic blocks (`MLX5_SEND_WQE_BB`) the WQE
    /// occupies: `ceil(DS * 16 / 64)`, what the provider advances the queue
    /// by.
    pub fn basic_blocks(&self) -> u8 {
        // At most ceil(1008 / 64) = 16: fits a u8.
        (usize::from(self.ds) * DS_BYTES).div_ceil(SEND_WQE_BB) as u8
    }

    /// A copy of the control segment (its fields big-endian, as stored).
    pub fn ctrl(&self) -> ffi::mlx5_wqe_ctrl_seg {
        let b = &self.buf.0;
        let be32 = |at: usize| u32::from_ne_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        ffi::mlx5_wqe_ctrl_seg {
            opmod_idx_opcode: be32(0),
            qpn_ds: be32(4),
            signature: b[8],
            dci_stream_channel_id: [b[9], b[10]],
            fm_ce_se: b[11],
            imm: be32(12),
        }
    }

    /// Checks caller-made WQE bytes and copies them into a [`Wqe`].
    ///
    /// The provider trusts one field of them: it copies DS × 16 bytes,
    /// with DS read from the control segment. So `bytes` must be whole
    /// 16-byte units, 1 to [`MAX_DS`] of them, and the low byte of
    /// `qpn_ds` (DS and the two reserved bits above it) must equal their
    /// count. Nothing else is checked: the bytes are the caller's.
    pub fn from_bytes(bytes: &[u8]) -> Result<Wqe> {
        if bytes.is_empty() || bytes.len() % DS_BYTES != 0 {
            return Err(Error::InvalidArgument(format!(
                "a WQE of {} bytes: it must be whole 16-byte units, starting \
                 with a 16-byte mlx5_wqe_ctrl_seg",
                bytes.len()
            )));
        }
        if bytes.len() > MAX_WQE_BYTES {
            return Err(Error::OutOfRange {
                what: "WQE size in bytes",
                value: bytes.len() as u64,
                limit: format!("at most {MAX_WQE_BYTES} ({MAX_DS} units of 16 bytes)"),
            });
        }
        // At most MAX_DS by the checks above.
        let ds = (bytes.len() / DS_BYTES) as u8;
        if bytes[7] != ds {
            return Err(Error::InvalidArgument(format!(
                "the control segment's DS byte (qpn_ds bits 7..0) is {}, but \
                 the WQE has {ds} units of 16 bytes; the provider copies DS units",
                bytes[7]
            )));
        }
        let mut buf = Buf::zeroed();
        buf.0[..bytes.len()].copy_from_slice(bytes);
        Ok(Wqe { buf, ds })
    }
}

impl AsRef<[u8]> for Wqe {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl PartialEq for Wqe {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for Wqe {}

impl std::hash::Hash for Wqe {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl fmt::Debug for Wqe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wqe")
            .field("ds", &self.ds)
            .field("bytes", &HexUnits(self.as_bytes()))
            .finish()
    }
}

/// Shows bytes as hex, one 16-byte unit per entry.
struct HexUnits<'a>(&'a [u8]);

impl fmt::Debug for HexUnits<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Unit<'a>(&'a [u8]);
        impl fmt::Debug for Unit<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
            }
        }
        f.debug_list()
            .entries(self.0.chunks(DS_BYTES).map(Unit))
            .finish()
    }
}

/// Builds a [`Wqe`]: a control segment from [`WqeBuilder::new`] and its
/// setters, then the segments in the order they are appended.
///
/// Setters and segment methods chain; the first rule broken is kept and
/// returned by [`WqeBuilder::build`], which also writes the DS count into
/// the control segment. Nothing panics on any input. The control segment's
/// WQE index (bits 23..8 of `opmod_idx_opcode`) and signature are left 0:
/// the driver sets them.
///
/// ```
/// use mlx5dv::wqe::{CtrlFlags, FenceMode, Opcode, WqeBuilder};
///
/// // An atomic fetch-and-add of 1 on remote 8 bytes, the old value into a
/// // local 8-byte buffer: 64 bytes, one basic block.
/// let wqe = WqeBuilder::new(Opcode::AtomicFa, 0x42)
///     .fence(FenceMode::Fence)
///     .flags(CtrlFlags::CQ_UPDATE)
///     .raddr_seg(0x1000, 0x77)
///     .atomic_fetch_add_seg(1)
///     .data_seg(8, 0x99, 0x2000)
///     .build()?;
/// assert_eq!((wqe.ds(), wqe.basic_blocks()), (4, 1));
///
/// // A QP number is 24 bits.
/// assert!(WqeBuilder::new(Opcode::Nop, 1 << 24).build().is_err());
/// # Ok::<(), mlx5dv::Error>(())
/// ```
#[must_use = "a WqeBuilder makes nothing until build()"]
pub struct WqeBuilder {
    buf: Buf,
    /// Units written so far, the control segment's included.
    ds: u8,
    opcode: Opcode,
    opmod: u8,
    qp_num: u32,
    fence: FenceMode,
    flags: CtrlFlags,
    imm: u32,
    dci_stream_channel_id: u16,
    /// The first rule broken, returned by `build`.
    error: Option<Error>,
}

impl WqeBuilder {
    /// Starts a WQE of `opcode` for the QP numbered `qp_num` (at most
    /// [`MAX_QP_NUM`], 24 bits): the control segment, with opcode
    /// modifier 0, no fence, no completion flags, immediate 0.
    pub fn new(opcode: Opcode, qp_num: u32) -> Self {
        let mut b = WqeBuilder {
            buf: Buf::zeroed(),
            ds: 1,
            opcode,
            opmod: 0,
            qp_num,
            fence: FenceMode::None,
            flags: CtrlFlags::empty(),
            imm: 0,
            dci_stream_channel_id: 0,
            error: None,
        };
        if qp_num > MAX_QP_NUM {
            b.fail(Error::OutOfRange {
                what: "QP number",
                value: u64::from(qp_num),
                limit: format!("at most {MAX_QP_NUM:#x} (24 bits of mlx5_wqe_ctrl_seg.qpn_ds)"),
            });
        }
        b
    }

    /// The opcode modifier: bits 31..24 of `opmod_idx_opcode` (its meaning
    /// depends on the opcode; 0 for the common ones).
    pub fn opmod(mut self, opmod: u8) -> Self {
        self.opmod = opmod;
        self
    }

    /// The fence mode (bits 7..5 of `fm_ce_se`).
    pub fn fence(mut self, fence: FenceMode) -> Self {
        self.fence = fence;
        self
    }

    /// The completion and solicited-event flags (the other bits of
    /// `fm_ce_se`), replacing earlier ones. Bits not named by
    /// [`CtrlFlags`] (from `CtrlFlags::from_bits_retain`) are refused by
    /// [`WqeBuilder::build`].
    pub fn flags(mut self, flags: CtrlFlags) -> Self {
        self.flags = flags;
        self
    }

    /// Adds [`CtrlFlags::CQ_UPDATE`]: the WQE generates a completion.
    pub fn signaled(mut self) -> Self {
        self.flags |= CtrlFlags::CQ_UPDATE;
        self
    }

    /// Adds [`CtrlFlags::SOLICITED`]: a solicited event at the receiver.
    pub fn solicited(mut self) -> Self {
        self.flags |= CtrlFlags::SOLICITED;
        self
    }

    /// The control segment's `imm`, given in host byte order and stored
    /// big-endian: the immediate data of [`Opcode::SendImm`] and
    /// [`Opcode::RdmaWriteImm`] (which the peer's completion reports in host
    /// order again), the rkey of [`Opcode::SendInval`], the mkey of a UMR.
    pub fn imm(mut self, imm: u32) -> Self {
        self.imm = imm;
        self
    }

    /// The control segment's `dci_stream_channel_id`, stored big-endian:
    /// the stream of a DCI QP, as `mlx5dv_wr_set_dc_addr_stream` writes it.
    pub fn dci_stream_channel_id(mut self, stream_id: u16) -> Self {
        self.dci_stream_channel_id = stream_id;
        self
    }

    /// Appends a remote address segment (`struct mlx5_wqe_raddr_seg`,
    /// 16 bytes): the peer's address and rkey of an RDMA read, write or
    /// atomic, big-endian, reserved word 0.
    pub fn raddr_seg(self, raddr: u64, rkey: u32) -> Self {
        self.push(1, |seg| {
            seg[0..8].copy_from_slice(&raddr.to_be_bytes());
            seg[8..12].copy_from_slice(&rkey.to_be_bytes());
        })
    }

    /// Appends a data pointer segment (`struct mlx5_wqe_data_seg`,
    /// 16 bytes), as `mlx5dv_set_data_seg` writes it: `byte_count` bytes
    /// at `addr` in the local memory of `lkey`.
    ///
    /// `byte_count` is at most [`MAX_DATA_SEG_BYTE_COUNT`]: bit 31 is
    /// `MLX5_INLINE_SEG`, which marks an inline-data segment instead.
    pub fn data_seg(mut self, byte_count: u32, lkey: u32, addr: u64) -> Self {
        if byte_count > MAX_DATA_SEG_BYTE_COUNT {
            self.fail(Error::OutOfRange {
                what: "data segment byte count",
                value: u64::from(byte_count),
                limit: format!(
                    "at most {MAX_DATA_SEG_BYTE_COUNT:#x} (bit 31, MLX5_INLINE_SEG, \
                     marks an inline-data segment)"
                ),
            });
            return self;
        }
        self.push(1, |seg| {
            seg[0..4].copy_from_slice(&byte_count.to_be_bytes());
            seg[4..8].copy_from_slice(&lkey.to_be_bytes());
            seg[8..16].copy_from_slice(&addr.to_be_bytes());
        })
    }

    /// Appends an atomic segment (`struct mlx5_wqe_atomic_seg`, 16 bytes)
    /// for [`Opcode::AtomicCs`]: if the remote 8 bytes equal `compare`
    /// they become `swap` (`swap_add` = `swap`, `compare` = `compare`,
    /// big-endian, as the provider writes them).
    pub fn atomic_cmp_swp_seg(self, compare: u64, swap: u64) -> Self {
        self.atomic_seg(swap, compare)
    }

    /// Appends an atomic segment (`struct mlx5_wqe_atomic_seg`, 16 bytes)
    /// for [`Opcode::AtomicFa`]: `add` is added to the remote 8 bytes
    /// (`swap_add` = `add`, `compare` = 0).
    pub fn atomic_fetch_add_seg(self, add: u64) -> Self {
        self.atomic_seg(add, 0)
    }

    fn atomic_seg(self, swap_add: u64, compare: u64) -> Self {
        self.push(1, |seg| {
            seg[0..8].copy_from_slice(&swap_add.to_be_bytes());
            seg[8..16].copy_from_slice(&compare.to_be_bytes());
        })
    }

    /// Appends an inline-data segment: `struct mlx5_wqe_inl_data_seg`
    /// (the byte count with `MLX5_INLINE_SEG` set, big-endian), then
    /// `data`, zero-padded to a whole 16-byte unit. `4 + data.len()` bytes
    /// must fit the WQE; the QP's `max_inline_data` is the poster's to
    /// check.
    ///
    /// Empty data is refused: the provider leaves the segment out then.
    pub fn inline_data_seg(mut self, data: &[u8]) -> Self {
        if data.is_empty() {
            self.fail(Error::InvalidArgument(
                "an inline-data segment with no data: leave the segment out".into(),
            ));
            return self;
        }
        let header = std::mem::size_of::<ffi::mlx5_wqe_inl_data_seg>();
        let units = units_for(header as u64 + data.len() as u64);
        self.push(units, |seg| {
            // data.len() fits: the segment fits the WQE (at most 1008 bytes).
            let count = data.len() as u32 | INLINE_SEG;
            seg[..header].copy_from_slice(&count.to_be_bytes());
            seg[header..header + data.len()].copy_from_slice(data);
        })
    }

    /// Appends a segment the builder has no method for (a datagram segment
    /// written by `mlx5dv_set_dgram_seg`, an Ethernet segment, a UMR
    /// segment, ...), as given: whole 16-byte units, at least one.
    pub fn raw_seg(mut self, bytes: &[u8]) -> Self {
        if bytes.is_empty() || bytes.len() % DS_BYTES != 0 {
            self.fail(Error::InvalidArgument(format!(
                "a raw segment of {} bytes: segments are whole 16-byte units",
                bytes.len()
            )));
            return self;
        }
        self.push(units_for(bytes.len() as u64), |seg| {
            seg.copy_from_slice(bytes)
        })
    }

    /// Finishes the WQE: writes the control segment with the DS count of
    /// everything appended, WQE index and signature 0; or returns the first
    /// rule an input broke.
    pub fn build(mut self) -> Result<Wqe> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let unknown = self.flags.bits() & !CtrlFlags::all().bits();
        if unknown != 0 {
            return Err(Error::InvalidArgument(format!(
                "control-segment flags {unknown:#04x} are not MLX5_WQE_CTRL_CQ_UPDATE or \
                 MLX5_WQE_CTRL_SOLICITED (set the fence with WqeBuilder::fence)"
            )));
        }
        let opmod_idx_opcode = (u32::from(self.opmod) << 24) | u32::from(self.opcode.raw());
        let qpn_ds = (self.qp_num << 8) | u32::from(self.ds);
        let ctrl = &mut self.buf.0[..DS_BYTES];
        ctrl[0..4].copy_from_slice(&opmod_idx_opcode.to_be_bytes());
        ctrl[4..8].copy_from_slice(&qpn_ds.to_be_bytes());
        ctrl[8] = 0; // signature: the driver's
        ctrl[9..11].copy_from_slice(&self.dci_stream_channel_id.to_be_bytes());
        ctrl[11] = self.fence.bits() | self.flags.bits();
        ctrl[12..16].copy_from_slice(&self.imm.to_be_bytes());
        Ok(Wqe {
            buf: self.buf,
            ds: self.ds,
        })
    }

    /// Keeps the first error.
    fn fail(&mut self, e: Error) {
        self.error.get_or_insert(e);
    }

    /// Appends `units` 16-byte units written by `write` (which gets them
    /// zeroed), unless an earlier rule was broken or they do not fit.
    fn push(mut self, units: u64, write: impl FnOnce(&mut [u8])) -> Self {
        if self.error.is_some() {
            return self;
        }
        let total = u64::from(self.ds) + units;
        if total > u64::from(MAX_DS) {
            self.fail(Error::OutOfRange {
                what: "WQE size in 16-byte units (DS)",
                value: total,
                limit: format!(
                    "at most {MAX_DS} ({MAX_WQE_BYTES} bytes: DS is 6 bits of \
                     mlx5_wqe_ctrl_seg.qpn_ds)"
                ),
            });
            return self;
        }
        let start = usize::from(self.ds) * DS_BYTES;
        // `total` <= MAX_DS, so both fit.
        let end = total as usize * DS_BYTES;
        write(&mut self.buf.0[start..end]);
        self.ds = total as u8;
        self
    }
}

impl fmt::Debug for WqeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WqeBuilder")
            .field("opcode", &self.opcode)
            .field("opmod", &self.opmod)
            .field("qp_num", &self.qp_num)
            .field("fence", &self.fence)
            .field("flags", &self.flags)
            .field("imm", &self.imm)
            .field("dci_stream_channel_id", &self.dci_stream_channel_id)
            .field("ds", &self.ds)
            .field("error", &self.error)
            .finish_non_exhaustive()
    }
}

/// The 16-byte units `bytes` bytes take, rounded up.
fn units_for(bytes: u64) -> u64 {
    bytes.div_ceil(DS_BYTES as u64)
}
