//! DEVX: the PRM (firmware) commands libmlx5 sends through the mlx5 driver
//! ioctls: QUERY_HCA_CAP, CREATE_MKEY / DESTROY (indirect mkeys), and QP
//! modifies (INIT2INIT with MMO, RTS2RTS with a DCI stream id reset).
//!
//! Bit offsets are those of `mlx5_ifc.h` (rdma-core 44), relative to the
//! start of each command's input or output.

use super::bytes::{prm, In, Out};
use super::cmd::MAX_QP_RD_ATOM;
use super::errno::{injected, refuse, Res};
use super::ioctl_call::Call;
use crate::config::{self, debug};
use crate::model::lock;
use crate::model::state::{DevxObj, Mkey, MkeyKind, QpKind, QpState};

const NS: u16 = 1 << 12;
const OP_QUERY_HCA_CAP: u32 = 0x100;
const OP_CREATE_MKEY: u32 = 0x200;
const OP_RTS2RTS_QP: u32 = 0x505;
const OP_INIT2INIT_QP: u32 = 0x50e;

/// PRM status BAD_PARAM.
const STATUS_BAD_PARAM: u32 = 0x3;
/// PRM status BAD_OP.
const STATUS_BAD_OP: u32 = 0x2;

/// A PRM command output with a failing status (the ioctl fails with
/// EREMOTEIO, as the kernel's DEVX does).
fn prm_fail(
    call: &Call,
    out_attr: u16,
    status: u32,
    syndrome: u32,
    why: std::fmt::Arguments<'_>,
) -> Res<()> {
    let mut o = Out::new(16);
    prm::set(&mut o.0, 0, 8, status);
    prm::set(&mut o.0, 0x20, 32, syndrome);
    let _ = call.ptr_out(out_attr, &o);
    Err(refuse(libc::EREMOTEIO, why))
}

/// The general capabilities (`cmd_hca_cap`, at bit 0x80 of the output)
/// that say what the device is, with ConnectX-6 values agreeing with what
/// QUERY_DEVICE reports: UCX's DEVX memory domain reads them
/// (`uct_ib_mlx5_devx_md_open`: `log_max_msg` must be 30, DC from `dct`,
/// the atomic caps are queried only with `atomic`, CQE version 1 from
/// `cqe_version`, the DC read/atomic depth). Capabilities the device does
/// not model stay 0 (ODP's `pg`, RMPs, compact address vectors, CQE
/// compression, LAG, tag matching).
fn general_caps(b: &mut [u8], roce: bool) {
    const CAP: usize = 0x80;
    let log_rd_atom = MAX_QP_RD_ATOM.trailing_zeros();
    for (bit, width, value) in [
        (0x80, 8, 15),               // log_max_srq_sz: 32768 receives (max_srq_wr + 1)
        (0x88, 8, 15),               // log_max_qp_sz: max_qp_wr 32768
        (0x9b, 5, 18),               // log_max_qp: max_qp 2^18
        (0xab, 5, 23),               // log_max_srq: max_srq 2^23
        (0xc8, 8, 22),               // log_max_cq_sz: MAX_CQE + 1
        (0xdb, 5, 24),               // log_max_cq: max_cq 2^24
        (0xea, 6, 24),               // log_max_mkey: max_mr 2^24
        (0x12a, 6, log_rd_atom),     // log_max_ra_req_dc
        (0x13a, 6, log_rd_atom),     // log_max_ra_res_dc
        (0x14a, 6, log_rd_atom),     // log_max_ra_req_qp
        (0x15a, 6, log_rd_atom),     // log_max_ra_res_qp
        (0x1b6, 2, u32::from(roce)), // port_type: 0 InfiniBand, 1 Ethernet
        (0x1b8, 8, 1),               // num_ports
        (0x1c3, 5, 30),              // log_max_msg: max_msg_sz 2^30
        (0x1fc, 4, 1),               // cqe_version
        (0x21a, 1, 1),               // dct
        (0x21d, 1, u32::from(roce)), // roce
        (0x21e, 1, 1),               // atomic
        (0x32b, 5, 24),              // log_max_pd: max_pd 2^24
    ] {
        prm::set(b, CAP + bit, width, value);
    }
}

/// MLX5_IB_METHOD_DEVX_OTHER: general commands (QUERY_HCA_CAP).
pub fn general(call: &Call) -> Res<()> {
    let cin = call.ptr_in(NS)?;
    let opcode = prm::get(&cin.0, 0, 16);
    let op_mod = prm::get(&cin.0, 0x30, 16);
    if opcode != OP_QUERY_HCA_CAP {
        return prm_fail(
            call,
            NS + 1,
            STATUS_BAD_OP,
            0x1,
            format_args!("DEVX general opcode {opcode:#x} is not modelled"),
        );
    }
    let out_len = usize::from(call.attr(NS + 1).map_or(0, |a| a.len));
    let mut o = Out::new(out_len.max(16));
    let cap_type = op_mod >> 1;
    let cfg = config::get();
    match cap_type {
        0 => {
            let b = &mut o.0;
            general_caps(b, cfg.roce);
            prm::set(b, 0x1a2, 1, u32::from(cfg.qpc_extension));
            if cfg.dma_mmo {
                prm::set(b, 0x1d3, 1, 1); // dma_mmo_sq
                prm::set(b, 0x7c8, 1, 1); // dma_mmo_qp
                prm::set(b, 0xeb, 5, u32::from(cfg.log_dma_mmo_max_size));
            }
        }
        3 => {
            // atomic_caps (from bit 0x80): host-endian responder
            // (atomic_req_8B_endianness_mode 1, supported_..._mode_1),
            // compare-swap and fetch-add, 8-byte operands on QPs and DC.
            let b = &mut o.0;
            prm::set(b, 0x80 + 0x40, 2, 1);
            prm::set(b, 0x80 + 0x46, 1, 1);
            prm::set(b, 0x80 + 0x90, 16, 0x3);
            prm::set(b, 0x80 + 0xb0, 16, 0x8);
            prm::set(b, 0x80 + 0xd0, 16, 0x8);
        }
        // ODP, NIC flow table (no steering, no packet reformat), QoS,
        // device memory (no MEMIC), crypto, general 2: present, all zero,
        // as on a ConnectX without those features.
        2 | 0x7 | 0xc | 0xf | 0x1a | 0x20 => {}
        t => {
            return prm_fail(
                call,
                NS + 1,
                STATUS_BAD_PARAM,
                0x2,
                format_args!("QUERY_HCA_CAP of cap type {t:#x}"),
            )
        }
    }
    debug!("DEVX QUERY_HCA_CAP type {cap_type:#x}");
    call.ptr_out(NS + 1, &o)
}

/// MLX5_IB_METHOD_DEVX_OBJ_CREATE: CREATE_MKEY (indirect, KLM).
pub fn obj_create(call: &Call) -> Res<()> {
    let cin = call.ptr_in(NS + 1)?;
    let opcode = prm::get(&cin.0, 0, 16);
    if opcode != OP_CREATE_MKEY {
        return prm_fail(
            call,
            NS + 2,
            STATUS_BAD_OP,
            0x1,
            format_args!("DEVX object opcode {opcode:#x} is not modelled"),
        );
    }
    injected("DEVX_CREATE_MKEY")?;
    let mkc = In(cin.0.get(16..).map(<[u8]>::to_vec).unwrap_or_default());
    let b = &mkc.0;
    let mode = prm::get(b, 0x16, 2) | (prm::get(b, 0x3, 3) << 2);
    let pdn = prm::get(b, 0x68, 24);
    let octwords = prm::get(b, 0x1a0, 32);
    let free = prm::get(b, 0x1, 1);
    let umr_en = prm::get(b, 0x10, 1);
    let variant = prm::get(b, 0x38, 8);
    let remote_invalidate = prm::get(b, 0x67, 1) == 1;
    // lr (local read) is implied; lw, rw, rr, a map to IBV_ACCESS_* bits.
    let access = prm::get(b, 0x14, 1)
        | (prm::get(b, 0x12, 1) << 1)
        | (prm::get(b, 0x13, 1) << 2)
        | (prm::get(b, 0x11, 1) << 3);
    let cfg = config::get();
    if mode != 2 || umr_en != 1 || free != 1 {
        return prm_fail(call, NS + 2, STATUS_BAD_PARAM, 0x3, format_args!("CREATE_MKEY: access mode {mode}, umr_en {umr_en}, free {free} (only free KLM mkeys are modelled)"));
    }
    if octwords == 0 || octwords > cfg.mkey_max_entries {
        return prm_fail(
            call,
            NS + 2,
            STATUS_BAD_PARAM,
            0x4,
            format_args!(
                "CREATE_MKEY: {octwords} entries (at most {})",
                cfg.mkey_max_entries
            ),
        );
    }
    let mut dev = lock();
    let owner = dev
        .pds
        .values()
        .find(|p| p.pdn == pdn && p.ctx == call.fd)
        .map(|p| p.ctx);
    if owner.is_none() {
        drop(dev);
        return prm_fail(
            call,
            NS + 2,
            STATUS_BAD_PARAM,
            0x5,
            format_args!("CREATE_MKEY: PD {pdn} is not this context's"),
        );
    }
    let h = dev.handle();
    let idx = dev.mkey_index();
    let key = (idx << 8) | variant;
    dev.mkeys.insert(
        idx,
        Mkey {
            ctx: call.fd,
            key,
            pdn,
            access,
            len: 0,
            kind: MkeyKind::Indirect {
                layout: None,
                max_entries: octwords,
                remote_invalidate,
            },
        },
    );
    dev.devx.insert(h, DevxObj::Mkey(key));
    drop(dev);
    debug!("DEVX CREATE_MKEY key {key:#x} pd {pdn} entries {octwords}");
    let out_len = usize::from(call.attr(NS + 2).map_or(16, |a| a.len));
    let mut o = Out::new(out_len.max(16));
    prm::set(&mut o.0, 0x48, 24, idx);
    call.idr_new(NS, h)?;
    call.ptr_out(NS + 2, &o)
}

/// MLX5_IB_METHOD_DEVX_OBJ_DESTROY.
pub fn obj_destroy(call: &Call) -> Res<()> {
    let h = call.attr(NS).map_or(0, |a| a.data) as u32;
    let mut dev = lock();
    match dev.devx.get(&h).copied() {
        Some(DevxObj::Mkey(key)) if dev.key(key).is_some_and(|m| m.ctx == call.fd) => {
            dev.devx.remove(&h);
            dev.mkeys.remove(&(key >> 8));
            debug!("DEVX DESTROY mkey {key:#x}");
            Ok(())
        }
        _ => Err(refuse(
            libc::EINVAL,
            format_args!("DEVX_OBJ_DESTROY: handle {h}"),
        )),
    }
}

/// MLX5_IB_METHOD_DEVX_OBJ_MODIFY on a QP handle.
pub fn obj_modify(call: &Call) -> Res<()> {
    let h = call.attr(NS).map_or(0, |a| a.data) as u32;
    let cin = call.ptr_in(NS + 1)?;
    let b = &cin.0;
    let opcode = prm::get(b, 0, 16);
    let qpn = prm::get(b, 0x48, 24);
    let qpc_ext = prm::get(b, 0x40, 1);
    let mut dev = lock();
    let Some(qp) = dev.qps.get_mut(&h).filter(|q| q.ctx == call.fd) else {
        drop(dev);
        return prm_fail(
            call,
            NS + 2,
            STATUS_BAD_PARAM,
            0x6,
            format_args!("DEVX_OBJ_MODIFY: handle {h} is no QP"),
        );
    };
    if qp.qpn != qpn {
        drop(dev);
        return prm_fail(
            call,
            NS + 2,
            STATUS_BAD_PARAM,
            0x7,
            format_args!("DEVX_OBJ_MODIFY: qpn {qpn:#x} is not the handle's QP"),
        );
    }
    let cfg = config::get();
    match opcode {
        OP_INIT2INIT_QP => {
            injected("DEVX_INIT2INIT_QP")?;
            if qp.state != QpState::Init || qpc_ext == 0 || !cfg.qpc_extension {
                let st = qp.state;
                drop(dev);
                return prm_fail(
                    call,
                    NS + 2,
                    STATUS_BAD_PARAM,
                    0x8,
                    format_args!("INIT2INIT_QP in {st:?}, qpc_ext {qpc_ext}"),
                );
            }
            if prm::get(b, 0x882, 1) == 1 {
                if !cfg.dma_mmo {
                    drop(dev);
                    return prm_fail(
                        call,
                        NS + 2,
                        STATUS_BAD_PARAM,
                        0x9,
                        format_args!("INIT2INIT_QP: MMO not supported"),
                    );
                }
                qp.mmo = true;
            }
            debug!("DEVX INIT2INIT_QP qpn {qpn:#x} mmo {}", qp.mmo);
        }
        OP_RTS2RTS_QP => {
            injected("DEVX_RTS2RTS_QP")?;
            let id = prm::get(b, 0x890, 16) as u16;
            let ok = qp.state == QpState::Rts
                && qp.kind == QpKind::Dci
                && qpc_ext == 1
                && qp.dci_streams.is_some();
            if !ok {
                let st = qp.state;
                drop(dev);
                return prm_fail(
                    call,
                    NS + 2,
                    STATUS_BAD_PARAM,
                    0xa,
                    format_args!("RTS2RTS_QP stream reset on a QP in {st:?} without DCI streams"),
                );
            }
            if !qp.errored_streams.contains(&id) {
                drop(dev);
                return prm_fail(
                    call,
                    NS + 2,
                    STATUS_BAD_PARAM,
                    0xb,
                    format_args!("RTS2RTS_QP: stream {id} is not in error"),
                );
            }
            qp.errored_streams.retain(|&s| s != id);
            debug!("DEVX RTS2RTS_QP qpn {qpn:#x}: stream {id} reset");
        }
        op => {
            drop(dev);
            return prm_fail(
                call,
                NS + 2,
                STATUS_BAD_OP,
                0x1,
                format_args!("DEVX modify opcode {op:#x} is not modelled"),
            );
        }
    }
    drop(dev);
    call.ptr_out(NS + 2, &Out::new(16))
}
