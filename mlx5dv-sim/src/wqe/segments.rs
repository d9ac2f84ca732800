//! The address vector, remote address, atomic and data segments.

use super::body::{Av, Data, Part, Sge};
use super::error::{need, WqeError};
use super::layout::{atomic as at_seg, av, be16, be32, be64, data, is_zero, raddr, OCTOWORD};
use super::qp::{QpKind, QpView};

/// Parses the 48-byte address vector at `at` of a DCI or UD WQE, as
/// `mlx5_send_wr_set_dc_addr` / `_set_datagram_seg` complete the AH's copy.
pub(super) fn parse_av(w: &[u8], at: usize, kind: QpKind) -> Result<Av, WqeError> {
    need(w, at, av::SIZE, "address vector runs past the DS")?;
    let dqp_dct = be32(w, at + av::DQP_DCT);
    if dqp_dct & av::EXTENDED == 0 {
        return Err(WqeError::Unsupported {
            what: "compact (non-extended) address vector",
        });
    }
    let reserved = dqp_dct & 0x7f00_0000;
    if reserved != 0 {
        return Err(reserved_av(
            "dqp_dct bits 30:24",
            at + av::DQP_DCT,
            reserved.into(),
        ));
    }
    if !is_zero(w, at + av::RESERVED0, 4) {
        let v = be32(w, at + av::RESERVED0);
        return Err(reserved_av("reserved0", at + av::RESERVED0, v.into()));
    }
    let grh_gid_fl = be32(w, at + av::GRH_GID_FL);
    let reserved = grh_gid_fl & 0xb000_0000;
    if reserved != 0 {
        return Err(reserved_av(
            "grh_gid_fl bits 31, 29:28",
            at + av::GRH_GID_FL,
            reserved.into(),
        ));
    }
    let key = be64(w, at + av::KEY);
    if kind == QpKind::Ud && key as u32 != 0 {
        return Err(reserved_av(
            "qkey reserved half",
            at + av::KEY + 4,
            (key as u32).into(),
        ));
    }
    let mut rmac = [0; 6];
    rmac.copy_from_slice(&w[at + av::RMAC..at + av::RMAC + 6]);
    let mut rgid = [0; 16];
    rgid.copy_from_slice(&w[at + av::RGID..at + av::RGID + 16]);
    let stat_rate_sl = w[at + av::STAT_RATE_SL];
    let fl_mlid = w[at + av::FL_MLID];
    Ok(Av {
        dc_key: key,
        dctn: dqp_dct & 0x00ff_ffff,
        ext: true,
        stat_rate: stat_rate_sl >> 4,
        sl: stat_rate_sl & 0xf,
        force_loopback: fl_mlid & 0x80 != 0,
        src_path_bits: fl_mlid & 0x7f,
        rlid: be16(w, at + av::RLID),
        rmac,
        tclass: w[at + av::TCLASS],
        hop_limit: w[at + av::HOP_LIMIT],
        grh: grh_gid_fl & (1 << 30) != 0,
        sgid_index: (grh_gid_fl >> 20) as u8,
        flow_label: grh_gid_fl & 0x000f_ffff,
        rgid,
    })
}

fn reserved_av(field: &'static str, at: usize, value: u64) -> WqeError {
    WqeError::Reserved { field, at, value }
}

/// Parses a remote address segment at `at`: `(raddr, rkey)`.
pub(super) fn parse_raddr(w: &[u8], at: usize) -> Result<(u64, u32), WqeError> {
    need(
        w,
        at,
        raddr::SIZE,
        "remote address segment runs past the DS",
    )?;
    let reserved = be32(w, at + raddr::RESERVED);
    if reserved != 0 {
        return Err(WqeError::Reserved {
            field: "raddr_seg.reserved",
            at: at + raddr::RESERVED,
            value: reserved.into(),
        });
    }
    Ok((be64(w, at + raddr::RADDR), be32(w, at + raddr::RKEY)))
}

/// Parses an atomic segment at `at`: `(swap_add, compare)`.
pub(super) fn parse_atomic(w: &[u8], at: usize) -> Result<(u64, u64), WqeError> {
    need(w, at, at_seg::SIZE, "atomic segment runs past the DS")?;
    Ok((
        be64(w, at + at_seg::SWAP_ADD),
        be64(w, at + at_seg::COMPARE),
    ))
}

/// Parses one pointer data segment at `at` (length decoded: 0 is 2 GiB).
/// Returns `None` when it is an inline segment.
pub(super) fn parse_pointer(w: &[u8], at: usize) -> Result<Option<Sge>, WqeError> {
    need(w, at, data::SIZE, "data segment runs past the DS")?;
    let byte_count = be32(w, at + data::BYTE_COUNT);
    if byte_count & data::INLINE_SEG != 0 {
        return Ok(None);
    }
    Ok(Some(Sge {
        lkey: be32(w, at + data::LKEY),
        addr: be64(w, at + data::ADDR),
        len: if byte_count == 0 {
            data::ZERO_MEANS
        } else {
            byte_count
        },
    }))
}

/// Parses the data segments from `at` to the end of the WQE: any sequence
/// of pointer segments (at most `max_send_sge` of them) and, if
/// `allow_inline`, inline segments (their bytes together at most
/// `max_inline`; each padded to 16 bytes, the padding's content ignored
/// as libmlx5 leaves it stale). The PRM allows inline and pointer
/// segments in any order in a send WQE; libmlx5 writes one or the other,
/// UCX an inline header then pointers.
pub(super) fn parse_data(
    w: &[u8],
    at: usize,
    qp: &QpView,
    allow_inline: bool,
) -> Result<Data, WqeError> {
    let mut parts = Vec::new();
    let (mut pointers, mut inline_len) = (0usize, 0u64);
    let mut off = at;
    while off < w.len() {
        if let Some(sge) = parse_pointer(w, off)? {
            parts.push(Part::Pointer(sge));
            pointers += 1;
            off += data::SIZE;
            continue;
        }
        if !allow_inline {
            return Err(WqeError::Inline {
                what: "inline data segment where the opcode needs pointer segments",
                at: off,
            });
        }
        let (bytes, end) = parse_inline(w, off, qp)?;
        inline_len += bytes.len() as u64;
        parts.push(Part::Inline(bytes));
        off = end;
    }
    if pointers > qp.max_send_sge as usize {
        return Err(WqeError::TooManySges {
            count: pointers,
            max: qp.max_send_sge,
        });
    }
    if inline_len > u64::from(qp.max_inline) {
        return Err(WqeError::InlineTooLong {
            // At most a WQE's 1008 bytes: parse_inline checked each.
            len: inline_len as u32,
            max: qp.max_inline,
        });
    }
    if pointers < parts.len() {
        return Ok(Data::Gather(parts));
    }
    let sges = parts
        .into_iter()
        .filter_map(|p| match p {
            Part::Pointer(s) => Some(s),
            Part::Inline(_) => None,
        })
        .collect();
    Ok(Data::Sges(sges))
}

/// Parses the inline data segment at `at`: its bytes and the offset after
/// its padding.
fn parse_inline(w: &[u8], at: usize, qp: &QpView) -> Result<(Vec<u8>, usize), WqeError> {
    let len = be32(w, at + data::BYTE_COUNT) & !data::INLINE_SEG;
    if len > qp.max_inline {
        return Err(WqeError::InlineTooLong {
            len,
            max: qp.max_inline,
        });
    }
    let start = at + data::INLINE_HEADER;
    let seg_end = (start + len as usize).next_multiple_of(OCTOWORD);
    if seg_end > w.len() {
        return Err(WqeError::Layout {
            what: "inline data runs past the DS",
            at,
            size: w.len(),
        });
    }
    Ok((w[start..start + len as usize].to_vec(), seg_end))
}
