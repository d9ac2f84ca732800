//! The device-wide object space: every context of the process shares one
//! device, so objects of one context can address another's (QPN, DCTN, keys).

use crate::mkey::Layout;
use std::collections::HashMap;

/// IB QP states, numbered as `enum ibv_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum QpState {
    /// RESET.
    Reset = 0,
    /// INIT.
    Init = 1,
    /// Ready to receive.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    /// Send queue drained.
    Sqd = 4,
    /// Send queue error.
    Sqe = 5,
    /// Error.
    Err = 6,
}

impl QpState {
    /// Whether a QP in this state answers packets (RTR, RTS, SQD); in any
    /// other the device drops what reaches it.
    pub fn receives(self) -> bool {
        matches!(self, Self::Rtr | Self::Rts | Self::Sqd)
    }

    /// From the uverbs encoding.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Reset,
            1 => Self::Init,
            2 => Self::Rtr,
            3 => Self::Rts,
            4 => Self::Sqd,
            5 => Self::Sqe,
            6 => Self::Err,
            _ => return None,
        })
    }
}

/// The transport of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpKind {
    /// Reliable connected.
    Rc,
    /// Unreliable connected (accepted, executed like RC without remote reads).
    Uc,
    /// Unreliable datagram (created; its sends are refused).
    Ud,
    /// DC initiator.
    Dci,
    /// DC target (no queues of its own; receives through its SRQ).
    Dct,
    /// XRC initiator (`IBV_QPT_XRC_SEND`): sends only, each WQE names the
    /// remote XRC SRQ.
    XrcIni,
    /// XRC target (`IBV_QPT_XRC_RECV`): created in an XRC domain, no
    /// queues of its own; a packet lands in the XRC SRQ it names.
    XrcTgt,
}

/// A protection domain.
#[derive(Debug)]
pub struct Pd {
    /// Owning command fd.
    pub ctx: i32,
    /// The PD number.
    pub pdn: u32,
}

/// What a memory key translates through.
#[derive(Debug, Clone)]
pub enum MkeyKind {
    /// A registered memory region: `[addr, addr+len)` of this process.
    Mr {
        /// Start address (the MR's `iova` equals its address).
        addr: u64,
        /// Length in bytes.
        len: u64,
    },
    /// An indirect mkey (DEVX CREATE_MKEY); zero-based, translated by its layout.
    Indirect {
        /// The layout from the last UMR, `None` while free (not configured).
        layout: Option<Layout>,
        /// Most translation entries (`max_entries` at creation).
        max_entries: u32,
        /// Created with remote invalidation enabled (`mkc.en_rinval`).
        remote_invalidate: bool,
    },
    /// A memory window (ALLOC_MW); its `access` and `len` are those of its
    /// last bind.
    Window {
        /// Type 2 (bound by the QP it serves; remotely invalidable), else 1.
        type2: bool,
        /// What it maps while bound; `None` while free.
        bound: Option<WindowMap>,
    },
}

/// What a bound memory window maps: `[start, start + len)` of its own
/// addresses onto the region `key` from `addr`.
#[derive(Debug, Clone, Copy)]
pub struct WindowMap {
    /// The window's first address (0 when zero-based).
    pub start: u64,
    /// The memory region's key.
    pub key: u32,
    /// The address in that region of the window's first byte.
    pub addr: u64,
    /// The QP a type 2 window is bound to (`0xffffff` for type 1).
    pub qpn: u32,
}

/// A memory key (MR or indirect mkey).
#[derive(Debug, Clone)]
pub struct Mkey {
    /// Owning command fd.
    pub ctx: i32,
    /// The full key (index << 8 | variant); lkey == rkey.
    pub key: u32,
    /// The PD number.
    pub pdn: u32,
    /// `IBV_ACCESS_*` flags.
    pub access: u32,
    /// Length in bytes (for indirect keys, of the configured layout).
    pub len: u64,
    /// The translation.
    pub kind: MkeyKind,
}

/// `IBV_ACCESS_LOCAL_WRITE`.
pub const ACCESS_LOCAL_WRITE: u32 = 1;
/// `IBV_ACCESS_REMOTE_WRITE`.
pub const ACCESS_REMOTE_WRITE: u32 = 2;
/// `IBV_ACCESS_REMOTE_READ`.
pub const ACCESS_REMOTE_READ: u32 = 4;
/// `IBV_ACCESS_REMOTE_ATOMIC`.
pub const ACCESS_REMOTE_ATOMIC: u32 = 8;
/// `IBV_ACCESS_MW_BIND`.
pub const ACCESS_MW_BIND: u32 = 0x10;

/// A completion queue.
#[derive(Debug)]
pub struct Cq {
    /// Owning command fd.
    pub ctx: i32,
    /// The CQ number.
    pub cqn: u32,
    /// `user_handle` of the create command (echoed in completion events).
    pub user_handle: u64,
    /// CQE buffer.
    pub buf: u64,
    /// Doorbell record (`[0]` consumer index, `[1]` arm).
    pub db: u64,
    /// Number of CQEs (a power of two).
    pub ncqe: u32,
    /// CQE size (64 or 128).
    pub cqe_size: u32,
    /// Producer index (CQEs written so far).
    pub pi: u32,
    /// Write end of the completion channel's pipe, if any.
    pub channel: Option<i32>,
    /// The program's read end of that pipe.
    pub channel_read: Option<i32>,
    /// Async events (CQ errors) written for this CQ.
    pub async_events: u32,
    /// Last arm doorbell value acted on.
    pub armed_seen: u32,
    /// Completion events written.
    pub comp_events: u32,
    /// The CQ overran (it is in error and takes no more CQEs).
    pub overrun: bool,
    /// The overrun's async event was queued.
    pub overrun_reported: bool,
    /// Index of the last solicited or error CQE (for solicited-only arms).
    pub last_solicited: Option<u32>,
    /// RESIZE CQEs the program has stepped over but not yet counted in its
    /// doorbell record (libmlx5 counts them at its next poll), and the
    /// consumer index the record showed when the first of them was
    /// written: once it shows another, it counts them.
    pub resize_unreported: (u32, u32),
}

impl Cq {
    /// The CQEs written and not yet consumed, as the doorbell record and
    /// the RESIZE CQEs stepped over since it was last written say.
    pub fn used(&mut self) -> u32 {
        // SAFETY: `db` is the CQ's doorbell record from CREATE_CQ; word 0
        // is the consumer index libmlx5 updates.
        let ci = unsafe { crate::sys::raw::load_be32_acquire(self.db) } & 0xff_ffff;
        if self.resize_unreported.0 > 0 && ci != self.resize_unreported.1 {
            self.resize_unreported = (0, 0);
        }
        ((self.pi & 0xff_ffff).wrapping_sub(ci) & 0xff_ffff)
            .saturating_sub(self.resize_unreported.0)
    }

    /// A RESIZE CQE was written at the producer index: the program steps
    /// over it at once and counts it in its doorbell record later.
    pub fn resize_written(&mut self) {
        // SAFETY: as in `used`.
        let ci = unsafe { crate::sys::raw::load_be32_acquire(self.db) } & 0xff_ffff;
        if self.resize_unreported.0 == 0 || ci != self.resize_unreported.1 {
            self.resize_unreported = (0, ci);
        }
        self.resize_unreported.0 += 1;
    }
}

/// A send queue's geometry and progress.
#[derive(Debug, Clone, Copy)]
pub struct Sq {
    /// Start of the SQ in the QP buffer.
    pub buf: u64,
    /// Number of 64-byte WQEBBs (a power of two).
    pub wqe_cnt: u32,
    /// Device consumer index (WQEBBs, 16 bits wrap like the doorbell).
    pub ci: u16,
}

/// A receive queue's geometry and progress.
#[derive(Debug, Clone, Copy)]
pub struct Rq {
    /// Start of the RQ (the QP buffer start).
    pub buf: u64,
    /// Number of WQEs (a power of two).
    pub wqe_cnt: u32,
    /// log2 of the WQE stride.
    pub wqe_shift: u32,
    /// WQEs consumed (16-bit, as the doorbell).
    pub ci: u16,
}

/// A queue pair (also DCI and DCT).
#[derive(Debug)]
pub struct Qp {
    /// Owning command fd.
    pub ctx: i32,
    /// QP number (for a DCT: its DCTN once RTR).
    pub qpn: u32,
    /// `user_handle` of the create command.
    pub user_handle: u64,
    /// Transport.
    pub kind: QpKind,
    /// Protection domain number.
    pub pdn: u32,
    /// Send CQ handle.
    pub send_cq: Option<u32>,
    /// Receive CQ handle.
    pub recv_cq: Option<u32>,
    /// SRQ handle.
    pub srq: Option<u32>,
    /// State.
    pub state: QpState,
    /// Send queue, if any.
    pub sq: Option<Sq>,
    /// Receive queue, if any.
    pub rq: Option<Rq>,
    /// Doorbell record (`[0]` RQ, `[1]` SQ).
    pub db: u64,
    /// User index (cqe_version 1).
    pub uidx: u32,
    /// Caps as created.
    pub max_send_wr: u32,
    /// Caps as created.
    pub max_recv_wr: u32,
    /// Caps as created.
    pub max_send_sge: u32,
    /// Caps as created.
    pub max_recv_sge: u32,
    /// Caps as created.
    pub max_inline: u32,
    /// `sq_sig_all`.
    pub sq_sig_all: bool,
    /// Remote QP number (RC, from RTR).
    pub dest_qpn: u32,
    /// `qp_access_flags`.
    pub access: u32,
    /// DC access key (DCT).
    pub dc_key: u64,
    /// Attributes as last set (for QUERY_QP).
    pub attrs: QpAttrs,
    /// DCI streams: log of concurrent and errored streams, `None` without streams.
    pub dci_streams: Option<(u8, u8)>,
    /// DCI stream ids in error.
    pub errored_streams: Vec<u16>,
    /// MMO enabled by DEVX INIT2INIT.
    pub mmo: bool,
    /// Async events reported (destroy answers it).
    pub events: u32,
    /// Created with `MLX5_QP_FLAG_SIGNATURE` (WQE signatures checked).
    pub signature: bool,
    /// The SQ's head WQE waits (for a receiver, or for an answer) until
    /// this instant: (WQE index, give-up time; `None`: forever).
    pub waiting: Option<(u16, Option<std::time::Instant>)>,
    /// The QP's side of the fabric: PSNs, the request in flight, the
    /// answers kept for duplicates.
    pub wire: super::wire::QpWire,
    /// XRC: the QP's XRC domain number (a target QP's only container).
    pub xrcdn: Option<u32>,
    /// XRC target: the SRQ the packet being served names (set per packet;
    /// it also lends its PD for the packet's memory checks).
    pub xrc_srq: Option<u32>,
}

/// The attributes QUERY_QP reports back.
#[derive(Debug, Clone, Copy, Default)]
pub struct QpAttrs {
    /// Path MTU.
    pub path_mtu: u8,
    /// `rq_psn`.
    pub rq_psn: u32,
    /// `sq_psn`.
    pub sq_psn: u32,
    /// `qkey`.
    pub qkey: u32,
    /// `pkey_index`.
    pub pkey_index: u16,
    /// `port_num`.
    pub port_num: u8,
    /// `max_rd_atomic`.
    pub max_rd_atomic: u8,
    /// `max_dest_rd_atomic`.
    pub max_dest_rd_atomic: u8,
    /// `min_rnr_timer`.
    pub min_rnr_timer: u8,
    /// `timeout`.
    pub timeout: u8,
    /// `retry_cnt`.
    pub retry_cnt: u8,
    /// `rnr_retry`.
    pub rnr_retry: u8,
    /// Destination (the raw 32-byte `ib_uverbs_qp_dest`).
    pub dest: [u8; 32],
}

/// A shared receive queue.
#[derive(Debug)]
pub struct Srq {
    /// Owning command fd.
    pub ctx: i32,
    /// SRQ number.
    pub srqn: u32,
    /// PD number.
    pub pdn: u32,
    /// WQE buffer.
    pub buf: u64,
    /// Doorbell record (`[0]` = WQE counter).
    pub db: u64,
    /// log2 of the WQE stride.
    pub wqe_shift: u32,
    /// Number of WQEs.
    pub wqe_cnt: u32,
    /// Most SGEs.
    pub max_sge: u32,
    /// WQEs consumed (16-bit counter compared with the doorbell).
    pub consumed: u16,
    /// Index of the next WQE to consume (the free list's head).
    pub head: u16,
    /// User index.
    pub uidx: u32,
    /// `user_handle` of the create command (async events name it).
    pub user_handle: u64,
    /// The armed SRQ limit (0: not armed).
    pub limit: u32,
    /// Async events (limit reached) written.
    pub events: u32,
    /// An XRC SRQ: its XRC domain number and the handle of the CQ its
    /// receives complete on.
    pub xrc: Option<XrcSrq>,
}

/// What makes an SRQ an XRC SRQ (`IBV_SRQT_XRC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XrcSrq {
    /// The XRC domain number.
    pub xrcdn: u32,
    /// The CQ handle its receives complete on.
    pub cq: u32,
}

/// An XRC domain handle of one context (OPEN_XRCD). Handles opened
/// through the same file (inode) share one domain number.
#[derive(Debug, Clone, Copy)]
pub struct Xrcd {
    /// Owning command fd.
    pub ctx: i32,
    /// The XRC domain number.
    pub xrcdn: u32,
    /// The file's (device, inode) when opened through one.
    pub inode: Option<(u64, u64)>,
}

/// A user access region page.
#[derive(Debug)]
pub struct Uar {
    /// Owning command fd.
    pub ctx: i32,
    /// The mmap offset handed out.
    pub mmap_offset: u64,
}

/// What a DEVX object handle names.
#[derive(Debug, Clone, Copy)]
pub enum DevxObj {
    /// An indirect mkey (its key).
    Mkey(u32),
}

/// One open device context (one command fd).
#[derive(Debug)]
pub struct Context {
    /// The async event pipe: (read end handed to the user, write end kept).
    pub async_fd: Option<(i32, i32)>,
    /// DEVX was requested at GET_CONTEXT.
    pub devx: bool,
    /// Whether GET_CONTEXT ran.
    pub alive: bool,
}

/// The whole device.
#[derive(Debug, Default)]
pub struct Device {
    /// Open contexts by command fd.
    pub contexts: HashMap<i32, Context>,
    /// PDs by handle.
    pub pds: HashMap<u32, Pd>,
    /// Memory keys by key index (key >> 8).
    pub mkeys: HashMap<u32, Mkey>,
    /// MR and memory-window handles to key index.
    pub mr_handles: HashMap<u32, u32>,
    /// CQs by handle.
    pub cqs: HashMap<u32, Cq>,
    /// QPs by handle.
    pub qps: HashMap<u32, Qp>,
    /// SRQs by handle.
    pub srqs: HashMap<u32, Srq>,
    /// UARs by handle.
    pub uars: HashMap<u32, Uar>,
    /// DEVX objects by handle.
    pub devx: HashMap<u32, DevxObj>,
    /// Address handles (RoCE) by handle: the owning fd.
    pub ahs: HashMap<u32, i32>,
    /// Completion channels: user's read end → (write end, owning fd).
    pub channels: HashMap<i32, (i32, i32)>,
    /// XRC domain handles by handle.
    pub xrcds: HashMap<u32, Xrcd>,
    next_xrcdn: u32,
    next_handle: u32,
    next_qpn: u32,
    next_cqn: u32,
    next_srqn: u32,
    next_pdn: u32,
    next_mkey: u32,
    next_uar: u64,
    /// WQEs executed (for fault injection and tracing).
    pub wqes_executed: u64,
}

impl Device {
    /// A fresh handle (unique over the device).
    pub fn handle(&mut self) -> u32 {
        self.next_handle += 1;
        self.next_handle
    }
    /// A fresh QP number (also used for DCTNs).
    pub fn qpn(&mut self) -> u32 {
        self.next_qpn += 1;
        0x100 + self.next_qpn
    }
    /// A fresh CQ number.
    pub fn cqn(&mut self) -> u32 {
        self.next_cqn += 1;
        0x400 + self.next_cqn
    }
    /// A fresh SRQ number.
    pub fn srqn(&mut self) -> u32 {
        self.next_srqn += 1;
        0x40 + self.next_srqn
    }
    /// A fresh XRC domain number.
    pub fn xrcdn(&mut self) -> u32 {
        self.next_xrcdn += 1;
        self.next_xrcdn
    }
    /// A fresh PD number.
    pub fn pdn(&mut self) -> u32 {
        self.next_pdn += 1;
        self.next_pdn
    }
    /// A fresh key index (the key is `index << 8 | variant`).
    pub fn mkey_index(&mut self) -> u32 {
        self.next_mkey += 1;
        0x10 + self.next_mkey
    }
    /// A fresh UAR mmap offset (page multiples, opaque to the library).
    pub fn uar_offset(&mut self) -> u64 {
        self.next_uar += 1;
        (0x1000 + self.next_uar) << 12
    }

    /// The QP with number `qpn` (DCTs by their DCTN).
    pub fn qp_by_qpn(&self, qpn: u32) -> Option<u32> {
        self.qps.iter().find(|(_, q)| q.qpn == qpn).map(|(h, _)| *h)
    }

    /// The key record for `key`, checking the variant byte.
    pub fn key(&self, key: u32) -> Option<&Mkey> {
        self.mkeys.get(&(key >> 8)).filter(|m| m.key == key)
    }

    /// A new key under a new MR or window handle (REG_MR, ALLOC_MW), its
    /// variant byte the index's low 7 bits: the handle and the key.
    pub fn add_keyed(
        &mut self,
        ctx: i32,
        pdn: u32,
        access: u32,
        len: u64,
        kind: MkeyKind,
    ) -> (u32, u32) {
        let h = self.handle();
        let idx = self.mkey_index();
        let key = (idx << 8) | (idx & 0x7f);
        let mkey = Mkey {
            ctx,
            key,
            pdn,
            access,
            len,
            kind,
        };
        self.mkeys.insert(idx, mkey);
        self.mr_handles.insert(h, idx);
        (h, key)
    }
}
