//! The parsed operation of a WQE: what follows the control segment.

pub use crate::mkey::Sge;

use super::umr::Umr;

/// The local data of a send, RDMA write or RDMA read: a list of pointer
/// data segments, or a gather list that holds inline data.
///
/// In the PRM a send WQE's data segments may be any sequence of inline and
/// memory pointer segments (each inline one `byte_count | MLX5_INLINE_SEG`
/// then its data, padded to 16 bytes); the message is their bytes in WQE
/// order. Libmlx5 writes either pointer segments or one inline
/// segment; UCX's `am_zcopy` on `rc_mlx5`/`dc_mlx5` writes an inline header
/// segment followed by pointer segments, and a ConnectX runs those too.
/// The form is canonical: [`Data::Gather`] exactly when there is an inline
/// segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Data {
    /// Pointer data segments only, in order (lengths decoded: 0 on the wire
    /// is 2 GiB): a gather list, or the scatter list of a read. Libmlx5
    /// never writes zero-length entries.
    Sges(Vec<Sge>),
    /// A gather list with at least one inline segment: the inline and
    /// pointer segments in WQE order (sends and writes only).
    Gather(Vec<Part>),
}

/// One data segment of a [`Data::Gather`] list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Part {
    /// The bytes of an inline data segment.
    Inline(Vec<u8>),
    /// A memory pointer segment (`struct mlx5_wqe_data_seg`).
    Pointer(Sge),
}

impl Part {
    /// The bytes this segment adds to the message.
    pub fn len(&self) -> u64 {
        match self {
            Part::Inline(bytes) => bytes.len() as u64,
            Part::Pointer(s) => u64::from(s.len),
        }
    }

    /// Whether the segment adds no byte (an empty inline segment).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Data {
    /// The message length: the sum of the segments' lengths.
    pub fn len(&self) -> u64 {
        match self {
            Data::Sges(sges) => sges.iter().map(|s| u64::from(s.len)).sum(),
            Data::Gather(parts) => parts.iter().map(Part::len).sum(),
        }
    }

    /// Whether the message carries no byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An address vector (`struct mlx5_wqe_av`, 48 bytes), as libmlx5 copies
/// it from the AH and completes it in `mlx5_send_wr_set_dc_addr` (DC) or
/// `_set_datagram_seg` (UD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Av {
    /// The 64-bit `key` field: the DC access key on a DCI; on UD the qkey
    /// is its upper 32 bits ([`Av::qkey`]).
    pub dc_key: u64,
    /// The destination DCTN (DCI) or QPN (UD): `dqp_dct & 0xffffff`.
    pub dctn: u32,
    /// `MLX5_EXTENDED_UD_AV` (bit 31 of `dqp_dct`): the 48-byte form.
    /// Libmlx5 always sets it; the parser refuses the 16-byte form.
    pub ext: bool,
    /// Static rate (`stat_rate_sl` bits 7:4).
    pub stat_rate: u8,
    /// Service level (`stat_rate_sl` bits 3:0; on RoCE bits 3:1 hold SL).
    pub sl: u8,
    /// Force loopback (`fl_mlid` bit 7).
    pub force_loopback: bool,
    /// Source path bits (`fl_mlid` bits 6:0).
    pub src_path_bits: u8,
    /// Destination LID (IB); on RoCE v2 the UDP source port.
    pub rlid: u16,
    /// Destination MAC (RoCE).
    pub rmac: [u8; 6],
    /// GRH traffic class.
    pub tclass: u8,
    /// GRH hop limit.
    pub hop_limit: u8,
    /// GRH present (`grh_gid_fl` bit 30; IB only, RoCE leaves it clear).
    pub grh: bool,
    /// Source GID index (`grh_gid_fl` bits 27:20).
    pub sgid_index: u8,
    /// Flow label (`grh_gid_fl` bits 19:0).
    pub flow_label: u32,
    /// Destination GID.
    pub rgid: [u8; 16],
}

impl Av {
    /// The UD qkey: the first 32 bits of the key field.
    pub fn qkey(&self) -> u32 {
        (self.dc_key >> 32) as u32
    }
}

/// RDMA write (with or without immediate) or RDMA read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rdma {
    /// The address vector (DCI), `None` on RC.
    pub av: Option<Av>,
    /// Remote address (`mlx5_wqe_raddr_seg.raddr`).
    pub raddr: u64,
    /// Remote key.
    pub rkey: u32,
    /// Local gather list (write; pointer and inline segments) or scatter
    /// list (read; pointers only).
    pub data: Data,
}

/// A send (plain, with immediate, or with invalidate).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The address vector (DCI, UD), `None` on RC.
    pub av: Option<Av>,
    /// Local gather list (pointer and inline segments).
    pub data: Data,
}

/// An atomic compare-and-swap or fetch-and-add.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Atomic {
    /// The address vector (DCI), `None` on RC.
    pub av: Option<Av>,
    /// Remote address (8-byte aligned by the verbs contract).
    pub raddr: u64,
    /// Remote key.
    pub rkey: u32,
    /// `swap_add`: the swap value (CS) or the addend (FA).
    pub swap_add: u64,
    /// `compare`: the compare value (CS); libmlx5 leaves it stale for FA.
    pub compare: u64,
    /// The local 8-byte buffer that receives the original remote value.
    pub local: Sge,
}

/// A DMA memcpy (`MLX5_OPCODE_MMO` with opcode modifier
/// `MLX5_OPC_MOD_MMO_DMA`; `struct mlx5_mmo_wqe`, DS 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mmo {
    /// `mmo_meta.local_key`: lkey of the PD's 64-byte opaque MR.
    pub opaque_lkey: u32,
    /// `mmo_meta.local_address`: the PD's opaque buffer.
    pub opaque_addr: u64,
    /// Source (length decoded: 0 on the wire is 2 GiB).
    pub src: Sge,
    /// Destination (same length as the source).
    pub dst: Sge,
}

/// The operation of a WQE, by opcode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Body {
    /// `MLX5_OPCODE_NOP`: no operation (its segments, if any, are ignored).
    Nop,
    /// `MLX5_OPCODE_RDMA_WRITE`.
    RdmaWrite(Rdma),
    /// `MLX5_OPCODE_RDMA_WRITE_IMM`; the immediate is `Ctrl::imm`.
    RdmaWriteImm(Rdma),
    /// `MLX5_OPCODE_RDMA_READ`.
    RdmaRead(Rdma),
    /// `MLX5_OPCODE_SEND`.
    Send(Message),
    /// `MLX5_OPCODE_SEND_IMM`; the immediate is `Ctrl::imm`.
    SendImm(Message),
    /// `MLX5_OPCODE_SEND_INVAL`; the rkey to invalidate is `Ctrl::imm`.
    SendInv(Message),
    /// `MLX5_OPCODE_ATOMIC_CS`.
    AtomicCs(Atomic),
    /// `MLX5_OPCODE_ATOMIC_FA`.
    AtomicFa(Atomic),
    /// `MLX5_OPCODE_UMR`: mkey configure, list, interleaved, local
    /// invalidate, memory window bind.
    Umr(Umr),
    /// `MLX5_OPCODE_MMO` DMA memcpy.
    Mmo(Mmo),
}

impl Body {
    /// The operation's name, for traces and messages.
    pub fn name(&self) -> &'static str {
        match self {
            Body::Nop => "NOP",
            Body::RdmaWrite(_) => "RDMA_WRITE",
            Body::RdmaWriteImm(_) => "RDMA_WRITE_IMM",
            Body::RdmaRead(_) => "RDMA_READ",
            Body::Send(_) => "SEND",
            Body::SendImm(_) => "SEND_IMM",
            Body::SendInv(_) => "SEND_INVAL",
            Body::AtomicCs(_) => "ATOMIC_CS",
            Body::AtomicFa(_) => "ATOMIC_FA",
            Body::Umr(_) => "UMR",
            Body::Mmo(_) => "MMO",
        }
    }

    /// Whether the operation reaches a responder (a QP, DCT or UD QP of
    /// this host or another): writes, reads, sends and atomics.
    pub fn reaches_a_peer(&self) -> bool {
        matches!(
            self,
            Body::RdmaWrite(_)
                | Body::RdmaWriteImm(_)
                | Body::RdmaRead(_)
                | Body::Send(_)
                | Body::SendImm(_)
                | Body::SendInv(_)
                | Body::AtomicCs(_)
                | Body::AtomicFa(_)
        )
    }

    /// The address vector, for operations that carry one.
    pub fn av(&self) -> Option<&Av> {
        match self {
            Body::RdmaWrite(r) | Body::RdmaWriteImm(r) | Body::RdmaRead(r) => r.av.as_ref(),
            Body::Send(m) | Body::SendImm(m) | Body::SendInv(m) => m.av.as_ref(),
            Body::AtomicCs(a) | Body::AtomicFa(a) => a.av.as_ref(),
            Body::Nop | Body::Umr(_) | Body::Mmo(_) => None,
        }
    }

    /// The local data of sends, writes and reads.
    pub fn data(&self) -> Option<&Data> {
        match self {
            Body::RdmaWrite(r) | Body::RdmaWriteImm(r) | Body::RdmaRead(r) => Some(&r.data),
            Body::Send(m) | Body::SendImm(m) | Body::SendInv(m) => Some(&m.data),
            _ => None,
        }
    }
}
