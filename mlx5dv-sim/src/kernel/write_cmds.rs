//! Legacy `write()` commands: framing, dispatch, and the context, device,
//! port, PD, MR, AH and completion-channel commands.
//!
//! Framing (`ib_user_verbs.h`): `ib_uverbs_cmd_hdr{command, in_words,
//! out_words}`, `in_words*4` covering the header; the core struct follows,
//! then the driver (UHW) input; the core response goes to the `response`
//! pointer, the driver response right after it. Extended commands
//! (`command | 0x80000000`) add `ib_uverbs_ex_cmd_hdr` and count 8-byte words.

use super::bytes::{In, Out};
use super::cmd::{pdn_of, Cmd, GID_TBL_LEN, MAX_CQE, MAX_QP_RD_ATOM, NUM_COMP_VECTORS};
use super::errno::{injected, refuse, Errno, Res};
use super::rereg_mr::{check_mr_access, check_mr_range};
use super::{mw_cmds, queue_cmds, rereg_mr, resize_cq, xrc_cmds};
use crate::config::{self, debug};
use crate::model::lock;
use crate::model::state::{MkeyKind, Pd};

const EXTENDED: u32 = 0x8000_0000;

/// (name, core request size, core response size, has a response pointer).
fn legacy_layout(cmd: u32) -> Option<(&'static str, usize, usize)> {
    Some(match cmd {
        0 => ("GET_CONTEXT", 8, 8),
        1 => ("QUERY_DEVICE", 8, 176),
        2 => ("QUERY_PORT", 16, 40),
        3 => ("ALLOC_PD", 8, 4),
        4 => ("DEALLOC_PD", 4, 0),
        5 => ("CREATE_AH", 56, 4),
        8 => ("DESTROY_AH", 4, 0),
        9 => ("REG_MR", 40, 12),
        11 => ("REREG_MR", 48, 8),
        13 => ("DEREG_MR", 4, 0),
        14 => ("ALLOC_MW", 16, 8),
        16 => ("DEALLOC_MW", 4, 0),
        17 => ("CREATE_COMP_CHANNEL", 8, 4),
        18 => ("CREATE_CQ", 32, 8),
        19 => ("RESIZE_CQ", 16, 8),
        20 => ("DESTROY_CQ", 16, 8),
        23 => ("REQ_NOTIFY_CQ", 8, 0),
        24 => ("CREATE_QP", 56, 32),
        25 => ("QUERY_QP", 16, 128),
        26 => ("MODIFY_QP", 112, 0),
        27 => ("DESTROY_QP", 16, 4),
        32 => ("CREATE_SRQ", 32, 16),
        33 => ("MODIFY_SRQ", 16, 0),
        34 => ("QUERY_SRQ", 16, 16),
        35 => ("DESTROY_SRQ", 16, 4),
        37 => ("OPEN_XRCD", 16, 4),
        38 => ("CLOSE_XRCD", 4, 0),
        39 => ("CREATE_XSRQ", 48, 16),
        _ => return None,
    })
}

fn ex_name(cmd: u32) -> Option<&'static str> {
    Some(match cmd {
        1 => "EX_QUERY_DEVICE",
        18 => "EX_CREATE_CQ",
        24 => "EX_CREATE_QP",
        26 => "EX_MODIFY_QP",
        _ => return None,
    })
}

/// Decodes and runs one command.
///
/// # Safety
/// See [`super::write`].
pub unsafe fn dispatch(fd: i32, buf: *const u8, len: usize) -> Res<()> {
    if len < 8 {
        return Err(refuse(libc::EINVAL, format_args!("write of {len} bytes")));
    }
    // SAFETY: the caller's buffer is readable for `len` bytes.
    let all = unsafe { In::copy_from(buf as u64, len) };
    let command = all.u32(0);
    let in_words = usize::from(all.u16(4));
    let out_words = usize::from(all.u16(6));
    let mut cmd;
    let name;
    let code = command & 0xff;
    if command & EXTENDED != 0 {
        name = ex_name(code)
            .ok_or_else(|| refuse(libc::EOPNOTSUPP, format_args!("extended command {code}")))?;
        if len < 24 {
            return Err(refuse(libc::EINVAL, format_args!("{name}: short")));
        }
        let resp = all.u64(8);
        let pin = usize::from(all.u16(16)) * 8;
        let pout = usize::from(all.u16(18)) * 8;
        let core_len = in_words * 8;
        if 24 + core_len + pin != len {
            return Err(refuse(
                libc::EINVAL,
                format_args!("{name}: {len} bytes, words say {}", 24 + core_len + pin),
            ));
        }
        let core_out = out_words * 8;
        cmd = Cmd {
            fd,
            core: In(all.0[24..24 + core_len].to_vec()),
            uhw: In(all.0[24 + core_len..].to_vec()),
            out: Out::new(core_out),
            uhw_out: Out::new(pout),
            resp_ptr: if core_out != 0 { resp } else { 0 },
            uhw_ptr: if pout != 0 { resp + core_out as u64 } else { 0 },
        };
        if (core_out != 0 || pout != 0) && resp == 0 {
            return Err(refuse(
                libc::EFAULT,
                format_args!("{name}: no response buffer"),
            ));
        }
    } else {
        // A command the device does not implement: EOPNOTSUPP, as the
        // kernel's uverbs answers for a method the driver lacks
        // (ib_uverbs_notsupp) and for one it does not know.
        let (n, core_in, core_out) = legacy_layout(code).ok_or_else(|| {
            refuse(
                libc::EOPNOTSUPP,
                format_args!("write command {code} is not modelled"),
            )
        })?;
        name = n;
        if in_words * 4 != len {
            return Err(refuse(
                libc::EINVAL,
                format_args!("{name}: in_words {in_words} but {len} bytes"),
            ));
        }
        if len < 8 + core_in {
            return Err(refuse(
                libc::EINVAL,
                format_args!("{name}: short ({len} bytes)"),
            ));
        }
        let out_len = out_words * 4;
        if out_len < core_out {
            return Err(refuse(
                libc::ENOSPC,
                format_args!("{name}: response of {out_len} bytes"),
            ));
        }
        let core = In(all.0[8..8 + core_in].to_vec());
        let resp = if core_out != 0 { core.u64(0) } else { 0 };
        if core_out != 0 && resp == 0 {
            return Err(refuse(
                libc::EFAULT,
                format_args!("{name}: no response buffer"),
            ));
        }
        cmd = Cmd {
            fd,
            uhw: In(all.0[8 + core_in..].to_vec()),
            core,
            out: Out::new(core_out),
            uhw_out: Out::new(out_len - core_out),
            resp_ptr: resp,
            uhw_ptr: if out_len > core_out {
                resp + core_out as u64
            } else {
                0
            },
        };
    }
    debug!("{name} (fd {fd})");
    injected(name)?;
    let extended = command & EXTENDED != 0;
    match (extended, code) {
        (false, 0) => get_context(&mut cmd)?,
        (false, 1) => query_device(&mut cmd, false)?,
        (true, 1) => query_device(&mut cmd, true)?,
        (false, 2) => query_port(&mut cmd)?,
        (false, 3) => alloc_pd(&mut cmd)?,
        (false, 4) => dealloc_pd(&mut cmd)?,
        (false, 5) => create_ah(&mut cmd)?,
        (false, 8) => destroy_ah(&mut cmd)?,
        (false, 9) => reg_mr(&mut cmd)?,
        (false, 11) => rereg_mr::rereg_mr(&mut cmd)?,
        (false, 13) => dereg_mr(&mut cmd)?,
        (false, 14) => mw_cmds::alloc_mw(&mut cmd)?,
        (false, 16) => mw_cmds::dealloc_mw(&mut cmd)?,
        (false, 17) => create_comp_channel(&mut cmd)?,
        (false, 19) => resize_cq::resize_cq(&mut cmd)?,
        (false, 37..=39) => xrc_cmds::dispatch(&mut cmd, code)?,
        _ => queue_cmds::dispatch(&mut cmd, extended, code, name)?,
    }
    cmd.commit();
    Ok(())
}

/// `device_cap_flags`: BAD_PKEY_CNTR, BAD_QKEY_CNTR, SYS_IMAGE_GUID,
/// RC_RNR_NAK_GEN, N_NOTIFY_CQ, MEM_WINDOW, XRC, MEM_MGT_EXTENSIONS,
/// MEM_WINDOW_TYPE_2B (as mlx5 reports). Not SRQ_RESIZE: a ConnectX has
/// it, the model not.
const DEVICE_CAP_FLAGS: u32 =
    0x2 | 0x4 | 0x800 | 0x1000 | 0x4000 | (1 << 17) | (1 << 20) | (1 << 21) | (1 << 24);

/// The node GUID: the host's on the fabric.
fn node_guid() -> u64 {
    crate::fabric::host().map_or(0, |h| h.node_guid())
}

fn get_context(cmd: &mut Cmd) -> Res<()> {
    // mlx5_ib_alloc_ucontext_req_v2: flags @8, max_cqe_version @16, lib_caps @24.
    let flags = cmd.uhw.u32(8);
    let max_cqe_version = cmd.uhw.u8(16);
    if max_cqe_version < 1 {
        return Err(refuse(
            libc::EINVAL,
            format_args!("GET_CONTEXT: max_cqe_version 0 (the device speaks CQE version 1 only)"),
        ));
    }
    let mut dev = lock();
    let ctx = dev
        .contexts
        .get_mut(&cmd.fd)
        .ok_or_else(|| refuse(libc::EBADF, format_args!("GET_CONTEXT on unknown fd")))?;
    if ctx.alive {
        return Err(refuse(
            libc::EINVAL,
            format_args!("GET_CONTEXT twice on one fd"),
        ));
    }
    // The device joins the fabric when it is first opened (its LID and
    // GIDs are the host's).
    if crate::fabric::host().is_none() {
        return Err(refuse(
            libc::ENODEV,
            format_args!("GET_CONTEXT: the device could not join the fabric"),
        ));
    }
    let (r, w) = pipe()?;
    ctx.async_fd = Some((r, w));
    ctx.devx = flags & 1 != 0;
    ctx.alive = true;
    drop(dev);
    cmd.out.u32(0, r as u32);
    cmd.out.u32(4, NUM_COMP_VECTORS);
    let o = &mut cmd.uhw_out;
    let resp_len = o.0.len().min(72) as u32;
    o.u32(0, 1 << 18); // qp_tab_size
    o.u32(4, 512); // bf_reg_size
    o.u32(8, 0); // tot_bfregs: dynamic UARs
    o.u32(12, 64); // cache_line_size
    o.u16(16, 1024); // max_sq_desc_sz
    o.u16(18, 512); // max_rq_desc_sz
    o.u32(20, 1 << 15); // max_send_wqebb
    o.u32(24, 1 << 15); // max_recv_wr
    o.u32(28, (1 << 15) - 1); // max_srq_recv_wr
    o.u16(32, 1); // num_ports
    o.u32(36, 0); // comp_mask
    o.u32(40, resp_len); // response_length
    o.u8(44, 1); // cqe_version
                 // cmds_supp_uhw: QUERY_DEVICE, and on RoCE CREATE_AH (the kernel
                 // resolves the destination MAC; libmlx5 reads it from the response).
    o.u8(45, if crate::config::get().roce { 3 } else { 1 });
    o.u32(56, 12); // log_uar_size
    o.u32(60, 1); // num_uars_per_page
    o.u32(64, 0); // num_dyn_bfregs
    crate::device::ensure_running();
    Ok(())
}

/// A pipe with O_CLOEXEC; the write end non-blocking (the device never
/// blocks on a full pipe while holding its lock).
pub fn pipe() -> Res<(i32, i32)> {
    let mut p = [0i32; 2];
    // SAFETY: `p` has room for the two fds pipe2 writes.
    if unsafe { libc::pipe2(p.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Errno(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EMFILE),
        ));
    }
    // SAFETY: p[1] is the pipe's write end just created.
    unsafe { libc::fcntl(p[1], libc::F_SETFL, libc::O_NONBLOCK) };
    Ok((p[0], p[1]))
}

/// CREATE_AH (RoCE only: on InfiniBand libmlx5 builds the AV in user
/// space and never asks). Answers the destination MAC as the kernel
/// resolves it: the fabric host the GID names.
fn create_ah(cmd: &mut Cmd) -> Res<()> {
    if !crate::config::get().roce {
        return Err(refuse(
            libc::EOPNOTSUPP,
            format_args!("CREATE_AH: IB link layer builds AVs in user space"),
        ));
    }
    let c = &cmd.core;
    // ib_uverbs_create_ah: pd_handle @16; ah_attr @24 (dgid @24,
    // sgid_index @44, is_global @53, port_num @54).
    let pd = c.u32(16);
    let (sgid, global, port) = (c.u8(44), c.u8(53), c.u8(54));
    let mut dev = lock();
    if dev.pds.get(&pd).is_none_or(|p| p.ctx != cmd.fd) {
        return Err(refuse(libc::EINVAL, format_args!("CREATE_AH: PD {pd}")));
    }
    if port != 1 || global == 0 || u32::from(sgid) >= GID_TBL_LEN {
        return Err(refuse(
            libc::EINVAL,
            format_args!(
                "CREATE_AH: port {port}, is_global {global}, sgid_index {sgid} (RoCE needs a GRH)"
            ),
        ));
    }
    let dgid: [u8; 16] = c.0[24..40].try_into().expect("16 bytes");
    let dmac = crate::fabric::host_of_gid(&dgid).map_or([0; 6], crate::fabric::mac_of);
    let h = dev.handle();
    dev.ahs.insert(h, cmd.fd);
    drop(dev);
    cmd.out.u32(0, h);
    let o = &mut cmd.uhw_out;
    if o.0.len() >= 10 {
        o.u32(0, o.0.len().min(16) as u32);
        o.0[4..10].copy_from_slice(&dmac);
    }
    Ok(())
}

fn destroy_ah(cmd: &mut Cmd) -> Res<()> {
    let h = cmd.core.u32(0);
    let mut dev = lock();
    match dev.ahs.get(&h) {
        Some(fd) if *fd == cmd.fd => {
            dev.ahs.remove(&h);
            Ok(())
        }
        _ => Err(refuse(libc::EINVAL, format_args!("DESTROY_AH: handle {h}"))),
    }
}

fn query_device(cmd: &mut Cmd, ex: bool) -> Res<()> {
    if ex && cmd.core.u32(0) != 0 {
        return Err(refuse(
            libc::EINVAL,
            format_args!("EX_QUERY_DEVICE: comp_mask {:#x}", cmd.core.u32(0)),
        ));
    }
    let o = &mut cmd.out;
    o.u64(0, (20u64 << 32) | (39 << 16) | 1002); // fw 20.39.1002
    o.u64(8, node_guid().to_be());
    o.u64(16, node_guid().to_be());
    o.u64(24, u64::MAX); // max_mr_size
    o.u64(32, 0xffff_ffff_ffff_f000); // page_size_cap
    o.u32(40, 0x02c9); // vendor_id
    o.u32(44, 4123); // vendor_part_id: ConnectX-6
    o.u32(48, 0); // hw_ver
    o.u32(52, 1 << 18); // max_qp
    o.u32(56, 1 << 15); // max_qp_wr
    o.u32(60, DEVICE_CAP_FLAGS);
    o.u32(64, 30); // max_sge
    o.u32(68, 30); // max_sge_rd
    o.u32(72, 1 << 24); // max_cq
    o.u32(76, MAX_CQE); // max_cqe
    o.u32(80, 1 << 24); // max_mr
    o.u32(84, 1 << 24); // max_pd
    o.u32(88, MAX_QP_RD_ATOM);
    o.u32(96, 1 << 22); // max_res_rd_atom
    o.u32(100, MAX_QP_RD_ATOM);
    o.u32(108, 1); // atomic_cap: IBV_ATOMIC_HCA
    o.u32(120, 1 << 24); // max_mw
    o.u32(132, 1 << 21); // max_mcast_grp
    o.u32(136, 240); // max_mcast_qp_attach
    o.u32(140, 240 << 21); // max_total_mcast_qp_attach
    o.u32(144, i32::MAX as u32); // max_ah
    o.u32(156, 1 << 23); // max_srq
    o.u32(160, (1 << 15) - 1); // max_srq_wr
    o.u32(164, 31); // max_srq_sge
    o.u16(168, 128); // max_pkeys
    o.u8(170, 16); // local_ca_ack_delay
    o.u8(171, 1); // phys_port_cnt
    if !ex {
        return Ok(());
    }
    let len = o.0.len().min(304) as u32;
    o.u32(180, len); // response_length
    o.u64(208, (1 << 63) - 1); // timestamp_mask
    o.u64(216, 156_250); // hca_core_clock (kHz)
    o.u64(224, 0); // device_cap_flags_ex (upper bits)
    o.u32(280, 0xffff_u32 | (0xffff << 16)); // cq moderation count/period
    let u = &mut cmd.uhw_out;
    let ulen = u.0.len().min(104) as u32;
    u.u32(4, ulen); // response_length
    u.u32(8, 256 * 1024); // tso max
    let cfg = config::get();
    u.u8(100, cfg.dci_streams.0);
    u.u8(101, cfg.dci_streams.1);
    Ok(())
}

fn query_port(cmd: &mut Cmd) -> Res<()> {
    let port = cmd.core.u8(8);
    if port != 1 {
        return Err(refuse(
            libc::EINVAL,
            format_args!("QUERY_PORT: port {port}"),
        ));
    }
    let o = &mut cmd.out;
    // IsSM? no. CM_SUP | SYS_IMAGE_GUID_SUP | PKEY_SW_EXT_PORT_TRAP | ...
    o.u32(0, 0x0265_1868);
    o.u32(4, 1 << 30); // max_msg_sz
    o.u32(16, GID_TBL_LEN);
    o.u16(20, 128); // pkey_tbl_len
    let host = crate::fabric::host()
        .ok_or_else(|| refuse(libc::ENODEV, format_args!("QUERY_PORT: not on the fabric")))?;
    let roce = host.roce;
    o.u16(22, host.lid()); // lid
    o.u16(24, if roce { 0 } else { 1 }); // sm_lid
    o.u8(26, 4); // state ACTIVE
    o.u8(27, 5); // max_mtu 4096
                 // active_mtu: 4096 on IB; on RoCE 1024, as a ConnectX reports for a
                 // netdev of the Ethernet default MTU (1500).
    o.u8(28, if roce { 3 } else { 5 });
    o.u8(29, 0); // lmc
    o.u8(30, 4); // max_vl_num
    o.u8(31, 0); // sm_sl
    o.u8(32, 18); // subnet_timeout
    o.u8(34, 2); // active_width 4X
    o.u8(35, 0x40); // active_speed HDR
    o.u8(36, 5); // phys_state LINK_UP
    if roce {
        // IB_LINK_LAYER_ETHERNET; flags IB_UVERBS_QPF_GRH_REQUIRED.
        o.u8(37, 2);
        o.u8(38, 1);
        // RoCE ports: no SM, IP-based GIDs (IB_PORT_IP_BASED_GIDS).
        o.u32(0, (1 << 16) | (1 << 26)); // CM_SUP | IP_BASED_GIDS
    } else {
        o.u8(37, 1); // link_layer IB
    }
    Ok(())
}

fn alloc_pd(cmd: &mut Cmd) -> Res<()> {
    let mut dev = lock();
    let h = dev.handle();
    let pdn = dev.pdn();
    dev.pds.insert(h, Pd { ctx: cmd.fd, pdn });
    cmd.out.u32(0, h);
    cmd.uhw_out.u32(0, pdn);
    Ok(())
}

fn dealloc_pd(cmd: &mut Cmd) -> Res<()> {
    let h = cmd.core.u32(0);
    let mut dev = lock();
    let pdn = match dev.pds.get(&h) {
        Some(p) if p.ctx == cmd.fd => p.pdn,
        _ => return Err(refuse(libc::EINVAL, format_args!("DEALLOC_PD: handle {h}"))),
    };
    let busy = dev.mkeys.values().any(|m| m.pdn == pdn)
        || dev.qps.values().any(|q| q.pdn == pdn)
        || dev.srqs.values().any(|s| s.pdn == pdn);
    if busy {
        return Err(refuse(
            libc::EBUSY,
            format_args!("DEALLOC_PD: PD {pdn} still in use"),
        ));
    }
    dev.pds.remove(&h);
    Ok(())
}

fn reg_mr(cmd: &mut Cmd) -> Res<()> {
    let start = cmd.core.u64(8);
    let length = cmd.core.u64(16);
    let iova = cmd.core.u64(24);
    let pd = cmd.core.u32(32);
    let access = cmd.core.u32(36);
    check_mr_range("REG_MR", start, length, iova)?;
    check_mr_access("REG_MR", access)?;
    let mut dev = lock();
    let pdn = pdn_of(&dev, cmd.fd, pd)?;
    let kind = MkeyKind::Mr {
        addr: start,
        len: length,
    };
    let (h, key) = dev.add_keyed(cmd.fd, pdn, access, length, kind);
    debug!("REG_MR {start:#x}+{length} key {key:#x} pd {pdn} access {access:#x}");
    cmd.out.u32(0, h);
    cmd.out.u32(4, key);
    cmd.out.u32(8, key);
    Ok(())
}

fn dereg_mr(cmd: &mut Cmd) -> Res<()> {
    let h = cmd.core.u32(0);
    let mut dev = lock();
    let idx = match dev.mr_handles.get(&h) {
        Some(&idx)
            if dev
                .mkeys
                .get(&idx)
                .is_some_and(|m| matches!(m.kind, MkeyKind::Mr { .. })) =>
        {
            idx
        }
        _ => return Err(refuse(libc::EINVAL, format_args!("DEREG_MR: handle {h}"))),
    };
    dev.mr_handles.remove(&h);
    dev.mkeys.remove(&idx);
    Ok(())
}

fn create_comp_channel(cmd: &mut Cmd) -> Res<()> {
    let (r, w) = pipe()?;
    lock().channels.insert(r, (w, cmd.fd));
    cmd.out.u32(0, r as u32);
    Ok(())
}
