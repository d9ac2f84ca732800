//! The segment offsets, sizes and constants of [`crate::wqe::layout`] and
//! [`crate::cqe`] against the installed `<infiniband/mlx5dv.h>`: a small C
//! program prints `offsetof`/`sizeof`/enum values, compiled with `cc`.
//! Skipped (with a note) only where the header is not installed.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

use crate::cqe::{offset as co, opcode as cop, syndrome as syn};
use crate::wqe::layout::*;

/// Each line of the C program prints `name value`.
const PROBES: &[(&str, &str)] = &[
    ("ctrl.size", "sizeof(struct mlx5_wqe_ctrl_seg)"),
    (
        "ctrl.opmod_idx_opcode",
        "offsetof(struct mlx5_wqe_ctrl_seg, opmod_idx_opcode)",
    ),
    ("ctrl.qpn_ds", "offsetof(struct mlx5_wqe_ctrl_seg, qpn_ds)"),
    (
        "ctrl.signature",
        "offsetof(struct mlx5_wqe_ctrl_seg, signature)",
    ),
    (
        "ctrl.dci_stream_channel_id",
        "offsetof(struct mlx5_wqe_ctrl_seg, dci_stream_channel_id)",
    ),
    (
        "ctrl.fm_ce_se",
        "offsetof(struct mlx5_wqe_ctrl_seg, fm_ce_se)",
    ),
    ("ctrl.imm", "offsetof(struct mlx5_wqe_ctrl_seg, imm)"),
    ("av.size", "sizeof(struct mlx5_wqe_datagram_seg)"),
    ("av.key", "offsetof(struct mlx5_wqe_av, key)"),
    ("av.dqp_dct", "offsetof(struct mlx5_wqe_av, dqp_dct)"),
    (
        "av.stat_rate_sl",
        "offsetof(struct mlx5_wqe_av, stat_rate_sl)",
    ),
    ("av.fl_mlid", "offsetof(struct mlx5_wqe_av, fl_mlid)"),
    ("av.rlid", "offsetof(struct mlx5_wqe_av, rlid)"),
    ("av.reserved0", "offsetof(struct mlx5_wqe_av, reserved0)"),
    ("av.rmac", "offsetof(struct mlx5_wqe_av, rmac)"),
    ("av.tclass", "offsetof(struct mlx5_wqe_av, tclass)"),
    ("av.hop_limit", "offsetof(struct mlx5_wqe_av, hop_limit)"),
    ("av.grh_gid_fl", "offsetof(struct mlx5_wqe_av, grh_gid_fl)"),
    ("av.rgid", "offsetof(struct mlx5_wqe_av, rgid)"),
    ("raddr.size", "sizeof(struct mlx5_wqe_raddr_seg)"),
    ("raddr.raddr", "offsetof(struct mlx5_wqe_raddr_seg, raddr)"),
    ("raddr.rkey", "offsetof(struct mlx5_wqe_raddr_seg, rkey)"),
    (
        "raddr.reserved",
        "offsetof(struct mlx5_wqe_raddr_seg, reserved)",
    ),
    ("atomic.size", "sizeof(struct mlx5_wqe_atomic_seg)"),
    (
        "atomic.swap_add",
        "offsetof(struct mlx5_wqe_atomic_seg, swap_add)",
    ),
    (
        "atomic.compare",
        "offsetof(struct mlx5_wqe_atomic_seg, compare)",
    ),
    ("data.size", "sizeof(struct mlx5_wqe_data_seg)"),
    (
        "data.byte_count",
        "offsetof(struct mlx5_wqe_data_seg, byte_count)",
    ),
    ("data.lkey", "offsetof(struct mlx5_wqe_data_seg, lkey)"),
    ("data.addr", "offsetof(struct mlx5_wqe_data_seg, addr)"),
    ("data.inline_header", "sizeof(struct mlx5_wqe_inl_data_seg)"),
    ("umr.size", "sizeof(struct mlx5_wqe_umr_ctrl_seg)"),
    ("umr.flags", "offsetof(struct mlx5_wqe_umr_ctrl_seg, flags)"),
    ("umr.rsvd0", "offsetof(struct mlx5_wqe_umr_ctrl_seg, rsvd0)"),
    (
        "umr.klm_octowords",
        "offsetof(struct mlx5_wqe_umr_ctrl_seg, klm_octowords)",
    ),
    (
        "umr.translation_offset",
        "offsetof(struct mlx5_wqe_umr_ctrl_seg, translation_offset)",
    ),
    (
        "umr.mkey_mask",
        "offsetof(struct mlx5_wqe_umr_ctrl_seg, mkey_mask)",
    ),
    ("umr.rsvd1", "offsetof(struct mlx5_wqe_umr_ctrl_seg, rsvd1)"),
    ("mkc.size", "sizeof(struct mlx5_wqe_mkey_context_seg)"),
    (
        "mkc.free",
        "offsetof(struct mlx5_wqe_mkey_context_seg, free)",
    ),
    (
        "mkc.access_flags",
        "offsetof(struct mlx5_wqe_mkey_context_seg, access_flags)",
    ),
    (
        "mkc.qpn_mkey",
        "offsetof(struct mlx5_wqe_mkey_context_seg, qpn_mkey)",
    ),
    (
        "mkc.flags_pd",
        "offsetof(struct mlx5_wqe_mkey_context_seg, flags_pd)",
    ),
    (
        "mkc.start_addr",
        "offsetof(struct mlx5_wqe_mkey_context_seg, start_addr)",
    ),
    ("mkc.len", "offsetof(struct mlx5_wqe_mkey_context_seg, len)"),
    (
        "mkc.bsf_octword_size",
        "offsetof(struct mlx5_wqe_mkey_context_seg, bsf_octword_size)",
    ),
    (
        "mkc.translations_octword_size",
        "offsetof(struct mlx5_wqe_mkey_context_seg, translations_octword_size)",
    ),
    (
        "mkc.log_page_size",
        "offsetof(struct mlx5_wqe_mkey_context_seg, log_page_size)",
    ),
    ("klm.size", "sizeof(struct mlx5_wqe_umr_klm_seg)"),
    (
        "klm.byte_count",
        "offsetof(struct mlx5_wqe_umr_klm_seg, byte_count)",
    ),
    ("klm.mkey", "offsetof(struct mlx5_wqe_umr_klm_seg, mkey)"),
    (
        "klm.address",
        "offsetof(struct mlx5_wqe_umr_klm_seg, address)",
    ),
    ("rb.size", "sizeof(struct mlx5_wqe_umr_repeat_block_seg)"),
    (
        "rb.byte_count",
        "offsetof(struct mlx5_wqe_umr_repeat_block_seg, byte_count)",
    ),
    (
        "rb.op",
        "offsetof(struct mlx5_wqe_umr_repeat_block_seg, op)",
    ),
    (
        "rb.repeat_count",
        "offsetof(struct mlx5_wqe_umr_repeat_block_seg, repeat_count)",
    ),
    (
        "rb.reserved",
        "offsetof(struct mlx5_wqe_umr_repeat_block_seg, reserved)",
    ),
    (
        "rb.num_ent",
        "offsetof(struct mlx5_wqe_umr_repeat_block_seg, num_ent)",
    ),
    ("re.size", "sizeof(struct mlx5_wqe_umr_repeat_ent_seg)"),
    (
        "re.stride",
        "offsetof(struct mlx5_wqe_umr_repeat_ent_seg, stride)",
    ),
    (
        "re.byte_count",
        "offsetof(struct mlx5_wqe_umr_repeat_ent_seg, byte_count)",
    ),
    (
        "re.memkey",
        "offsetof(struct mlx5_wqe_umr_repeat_ent_seg, memkey)",
    ),
    ("re.va", "offsetof(struct mlx5_wqe_umr_repeat_ent_seg, va)"),
    ("cqe.size", "sizeof(struct mlx5_cqe64)"),
    ("cqe.ml_path", "offsetof(struct mlx5_cqe64, ml_path)"),
    ("cqe.slid", "offsetof(struct mlx5_cqe64, slid)"),
    ("cqe.flags_rqpn", "offsetof(struct mlx5_cqe64, flags_rqpn)"),
    ("cqe.srqn_uidx", "offsetof(struct mlx5_cqe64, srqn_uidx)"),
    (
        "cqe.imm_inval_pkey",
        "offsetof(struct mlx5_cqe64, imm_inval_pkey)",
    ),
    ("cqe.byte_cnt", "offsetof(struct mlx5_cqe64, byte_cnt)"),
    ("cqe.timestamp", "offsetof(struct mlx5_cqe64, timestamp)"),
    (
        "cqe.sop_drop_qpn",
        "offsetof(struct mlx5_cqe64, sop_drop_qpn)",
    ),
    (
        "cqe.wqe_counter",
        "offsetof(struct mlx5_cqe64, wqe_counter)",
    ),
    ("cqe.signature", "offsetof(struct mlx5_cqe64, signature)"),
    ("cqe.op_own", "offsetof(struct mlx5_cqe64, op_own)"),
    ("err.size", "sizeof(struct mlx5_err_cqe)"),
    ("err.srqn", "offsetof(struct mlx5_err_cqe, srqn)"),
    (
        "err.vendor_err_synd",
        "offsetof(struct mlx5_err_cqe, vendor_err_synd)",
    ),
    ("err.syndrome", "offsetof(struct mlx5_err_cqe, syndrome)"),
    (
        "err.s_wqe_opcode_qpn",
        "offsetof(struct mlx5_err_cqe, s_wqe_opcode_qpn)",
    ),
    (
        "err.wqe_counter",
        "offsetof(struct mlx5_err_cqe, wqe_counter)",
    ),
    ("err.op_own", "offsetof(struct mlx5_err_cqe, op_own)"),
];

/// Constants compared by value (`MLX5_*` enumerators).
const CONSTANTS: &[(&str, u64)] = &[
    ("MLX5_OPCODE_NOP", opcode::NOP as u64),
    ("MLX5_OPCODE_SEND_INVAL", opcode::SEND_INVAL as u64),
    ("MLX5_OPCODE_RDMA_WRITE", opcode::RDMA_WRITE as u64),
    ("MLX5_OPCODE_RDMA_WRITE_IMM", opcode::RDMA_WRITE_IMM as u64),
    ("MLX5_OPCODE_SEND", opcode::SEND as u64),
    ("MLX5_OPCODE_SEND_IMM", opcode::SEND_IMM as u64),
    ("MLX5_OPCODE_TSO", opcode::TSO as u64),
    ("MLX5_OPCODE_RDMA_READ", opcode::RDMA_READ as u64),
    ("MLX5_OPCODE_ATOMIC_CS", opcode::ATOMIC_CS as u64),
    ("MLX5_OPCODE_ATOMIC_FA", opcode::ATOMIC_FA as u64),
    (
        "MLX5_OPCODE_ATOMIC_MASKED_CS",
        opcode::ATOMIC_MASKED_CS as u64,
    ),
    (
        "MLX5_OPCODE_ATOMIC_MASKED_FA",
        opcode::ATOMIC_MASKED_FA as u64,
    ),
    ("MLX5_OPCODE_FMR", opcode::FMR as u64),
    ("MLX5_OPCODE_LOCAL_INVAL", opcode::LOCAL_INVAL as u64),
    ("MLX5_OPCODE_CONFIG_CMD", opcode::CONFIG_CMD as u64),
    ("MLX5_OPCODE_SET_PSV", opcode::SET_PSV as u64),
    ("MLX5_OPCODE_UMR", opcode::UMR as u64),
    ("MLX5_OPCODE_TAG_MATCHING", opcode::TAG_MATCHING as u64),
    (
        "MLX5_OPCODE_FLOW_TBL_ACCESS",
        opcode::FLOW_TBL_ACCESS as u64,
    ),
    ("MLX5_OPCODE_MMO", opcode::MMO as u64),
    ("MLX5_SEND_WQE_BB", SEND_WQE_BB as u64),
    ("MLX5_INLINE_SEG", data::INLINE_SEG as u64),
    ("MLX5_EXTENDED_UD_AV", av::EXTENDED as u64),
    ("MLX5_WQE_CTRL_CQ_UPDATE", ctrl::CQ_UPDATE as u64),
    ("MLX5_WQE_CTRL_SOLICITED", ctrl::SOLICITED as u64),
    ("MLX5_WQE_CTRL_FENCE", ctrl::FENCE as u64),
    (
        "MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE",
        ctrl::INITIATOR_SMALL_FENCE as u64,
    ),
    (
        "MLX5_WQE_UMR_CTRL_FLAG_INLINE",
        umr_ctrl::FLAG_INLINE as u64,
    ),
    (
        "MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE",
        umr_ctrl::FLAG_CHECK_FREE as u64,
    ),
    (
        "MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET",
        umr_ctrl::FLAG_TRANSLATION_OFFSET as u64,
    ),
    (
        "MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN",
        umr_ctrl::FLAG_CHECK_QPN as u64,
    ),
    ("MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN", umr_ctrl::MASK_LEN),
    (
        "MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR",
        umr_ctrl::MASK_START_ADDR,
    ),
    (
        "MLX5_WQE_UMR_CTRL_MKEY_MASK_SIG_ERR",
        umr_ctrl::MASK_SIG_ERR,
    ),
    (
        "MLX5_WQE_UMR_CTRL_MKEY_MASK_BSF_ENABLE",
        umr_ctrl::MASK_BSF_ENABLE,
    ),
    ("MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY", umr_ctrl::MASK_MKEY),
    ("MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN", umr_ctrl::MASK_QPN),
    (
        "MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE",
        umr_ctrl::MASK_ACCESS_LOCAL_WRITE,
    ),
    (
        "MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ",
        umr_ctrl::MASK_ACCESS_REMOTE_READ,
    ),
    (
        "MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE",
        umr_ctrl::MASK_ACCESS_REMOTE_WRITE,
    ),
    (
        "MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC",
        umr_ctrl::MASK_ACCESS_ATOMIC,
    ),
    ("MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE", umr_ctrl::MASK_FREE),
    ("MLX5_WQE_MKEY_CONTEXT_FREE", mkey_ctx::FREE_BIT as u64),
    (
        "MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC",
        mkey_ctx::ACCESS_ATOMIC as u64,
    ),
    (
        "MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE",
        mkey_ctx::ACCESS_REMOTE_WRITE as u64,
    ),
    (
        "MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ",
        mkey_ctx::ACCESS_REMOTE_READ as u64,
    ),
    (
        "MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE",
        mkey_ctx::ACCESS_LOCAL_WRITE as u64,
    ),
    (
        "MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ",
        mkey_ctx::ACCESS_LOCAL_READ as u64,
    ),
    ("MLX5_CQE_REQ", cop::REQ as u64),
    ("MLX5_CQE_RESP_WR_IMM", cop::RESP_WR_IMM as u64),
    ("MLX5_CQE_RESP_SEND", cop::RESP_SEND as u64),
    ("MLX5_CQE_RESP_SEND_IMM", cop::RESP_SEND_IMM as u64),
    ("MLX5_CQE_RESP_SEND_INV", cop::RESP_SEND_INV as u64),
    ("MLX5_CQE_REQ_ERR", cop::REQ_ERR as u64),
    ("MLX5_CQE_RESP_ERR", cop::RESP_ERR as u64),
    ("MLX5_CQE_INVALID", cop::INVALID as u64),
    (
        "MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR",
        syn::LOCAL_LENGTH_ERR as u64,
    ),
    (
        "MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR",
        syn::LOCAL_QP_OP_ERR as u64,
    ),
    (
        "MLX5_CQE_SYNDROME_LOCAL_PROT_ERR",
        syn::LOCAL_PROT_ERR as u64,
    ),
    ("MLX5_CQE_SYNDROME_WR_FLUSH_ERR", syn::WR_FLUSH_ERR as u64),
    ("MLX5_CQE_SYNDROME_MW_BIND_ERR", syn::MW_BIND_ERR as u64),
    ("MLX5_CQE_SYNDROME_BAD_RESP_ERR", syn::BAD_RESP_ERR as u64),
    (
        "MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR",
        syn::LOCAL_ACCESS_ERR as u64,
    ),
    (
        "MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR",
        syn::REMOTE_INVAL_REQ_ERR as u64,
    ),
    (
        "MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR",
        syn::REMOTE_ACCESS_ERR as u64,
    ),
    ("MLX5_CQE_SYNDROME_REMOTE_OP_ERR", syn::REMOTE_OP_ERR as u64),
    (
        "MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR",
        syn::TRANSPORT_RETRY_EXC_ERR as u64,
    ),
    (
        "MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR",
        syn::RNR_RETRY_EXC_ERR as u64,
    ),
    (
        "MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR",
        syn::REMOTE_ABORTED_ERR as u64,
    ),
];

/// The Rust side of each probe.
fn rust_layout() -> HashMap<&'static str, usize> {
    HashMap::from([
        ("ctrl.size", ctrl::SIZE),
        ("ctrl.opmod_idx_opcode", ctrl::OPMOD_IDX_OPCODE),
        ("ctrl.qpn_ds", ctrl::QPN_DS),
        ("ctrl.signature", ctrl::SIGNATURE),
        ("ctrl.dci_stream_channel_id", ctrl::DCI_STREAM_CHANNEL_ID),
        ("ctrl.fm_ce_se", ctrl::FM_CE_SE),
        ("ctrl.imm", ctrl::IMM),
        ("av.size", av::SIZE),
        ("av.key", av::KEY),
        ("av.dqp_dct", av::DQP_DCT),
        ("av.stat_rate_sl", av::STAT_RATE_SL),
        ("av.fl_mlid", av::FL_MLID),
        ("av.rlid", av::RLID),
        ("av.reserved0", av::RESERVED0),
        ("av.rmac", av::RMAC),
        ("av.tclass", av::TCLASS),
        ("av.hop_limit", av::HOP_LIMIT),
        ("av.grh_gid_fl", av::GRH_GID_FL),
        ("av.rgid", av::RGID),
        ("raddr.size", raddr::SIZE),
        ("raddr.raddr", raddr::RADDR),
        ("raddr.rkey", raddr::RKEY),
        ("raddr.reserved", raddr::RESERVED),
        ("atomic.size", atomic::SIZE),
        ("atomic.swap_add", atomic::SWAP_ADD),
        ("atomic.compare", atomic::COMPARE),
        ("data.size", data::SIZE),
        ("data.byte_count", data::BYTE_COUNT),
        ("data.lkey", data::LKEY),
        ("data.addr", data::ADDR),
        ("data.inline_header", data::INLINE_HEADER),
        ("umr.size", umr_ctrl::SIZE),
        ("umr.flags", umr_ctrl::FLAGS),
        ("umr.rsvd0", umr_ctrl::RSVD0),
        ("umr.klm_octowords", umr_ctrl::KLM_OCTOWORDS),
        ("umr.translation_offset", umr_ctrl::TRANSLATION_OFFSET),
        ("umr.mkey_mask", umr_ctrl::MKEY_MASK),
        ("umr.rsvd1", umr_ctrl::RSVD1),
        ("mkc.size", mkey_ctx::SIZE),
        ("mkc.free", mkey_ctx::FREE),
        ("mkc.access_flags", mkey_ctx::ACCESS_FLAGS),
        ("mkc.qpn_mkey", mkey_ctx::QPN_MKEY),
        ("mkc.flags_pd", mkey_ctx::FLAGS_PD),
        ("mkc.start_addr", mkey_ctx::START_ADDR),
        ("mkc.len", mkey_ctx::LEN),
        ("mkc.bsf_octword_size", mkey_ctx::BSF_OCTWORD_SIZE),
        (
            "mkc.translations_octword_size",
            mkey_ctx::TRANSLATIONS_OCTWORD_SIZE,
        ),
        ("mkc.log_page_size", mkey_ctx::LOG_PAGE_SIZE),
        ("klm.size", klm::SIZE),
        ("klm.byte_count", klm::BYTE_COUNT),
        ("klm.mkey", klm::MKEY),
        ("klm.address", klm::ADDRESS),
        ("rb.size", repeat::SIZE),
        ("rb.byte_count", repeat::BYTE_COUNT),
        ("rb.op", repeat::OP),
        ("rb.repeat_count", repeat::REPEAT_COUNT),
        ("rb.reserved", repeat::RESERVED),
        ("rb.num_ent", repeat::NUM_ENT),
        ("re.size", repeat::SIZE),
        ("re.stride", repeat::ENT_STRIDE),
        ("re.byte_count", repeat::ENT_BYTE_COUNT),
        ("re.memkey", repeat::ENT_MEMKEY),
        ("re.va", repeat::ENT_VA),
        ("cqe.size", crate::cqe::CQE_SIZE),
        ("cqe.ml_path", co::ML_PATH),
        ("cqe.slid", co::SLID),
        ("cqe.flags_rqpn", co::FLAGS_RQPN),
        ("cqe.srqn_uidx", co::SRQN_UIDX),
        ("cqe.imm_inval_pkey", co::IMM_INVAL_PKEY),
        ("cqe.byte_cnt", co::BYTE_CNT),
        ("cqe.timestamp", co::TIMESTAMP),
        ("cqe.sop_drop_qpn", co::SOP_DROP_QPN),
        ("cqe.wqe_counter", co::WQE_COUNTER),
        ("cqe.signature", co::SIGNATURE),
        ("cqe.op_own", co::OP_OWN),
        ("err.size", crate::cqe::CQE_SIZE),
        ("err.srqn", co::SRQN_UIDX),
        ("err.vendor_err_synd", co::VENDOR_ERR_SYND),
        ("err.syndrome", co::SYNDROME),
        ("err.s_wqe_opcode_qpn", co::SOP_DROP_QPN),
        ("err.wqe_counter", co::WQE_COUNTER),
        ("err.op_own", co::OP_OWN),
    ])
}

/// The directory holding `infiniband/mlx5dv.h`, if installed.
pub(super) fn include_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("RDMA_CORE_INCLUDE_DIR")
        .map_or_else(|| PathBuf::from("/usr/include"), PathBuf::from);
    dir.join("infiniband/mlx5dv.h").exists().then_some(dir)
}

/// Compiles the C program `body` (after `#include`s of the header) with
/// `cc` and returns its standard output.
pub(super) fn run_c(include: &PathBuf, tag: &str, body: &str) -> String {
    let src = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include <string.h>\n\
         #include <infiniband/mlx5dv.h>\n{body}"
    );
    let dir = std::env::temp_dir().join(format!("mlx5dv-sim-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (c, exe) = (dir.join("probe.c"), dir.join("probe"));
    std::fs::write(&c, src).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .arg("-I")
        .arg(include)
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(status.success(), "compiling the C probe {tag} failed");
    let out = Command::new(&exe).output().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// The probe program's `name value` pairs.
fn c_values(include: &PathBuf) -> HashMap<String, u64> {
    let mut body = String::from("int main(void) {\n");
    let lines = PROBES
        .iter()
        .map(|(n, e)| (*n, *e))
        .chain(CONSTANTS.iter().map(|(n, _)| (*n, *n)));
    for (name, expr) in lines {
        body += &format!("  printf(\"%s %llu\\n\", \"{name}\", (unsigned long long)({expr}));\n");
    }
    body += "  return 0;\n}\n";
    run_c(include, "layout", &body)
        .lines()
        .map(|l| {
            let (n, v) = l.split_once(' ').unwrap();
            (n.to_string(), v.parse().unwrap())
        })
        .collect()
}

#[test]
fn offsets_sizes_and_constants_match_mlx5dv_h() {
    let Some(include) = include_dir() else {
        eprintln!("skipped: <infiniband/mlx5dv.h> is not installed (set RDMA_CORE_INCLUDE_DIR)");
        return;
    };
    let c = c_values(&include);
    let rust = rust_layout();
    let mut wrong = vec![];
    for (name, _) in PROBES {
        let r = rust[name] as u64;
        if c[*name] != r {
            wrong.push(format!("{name}: C {} Rust {r}", c[*name]));
        }
    }
    for (name, r) in CONSTANTS {
        if c[*name] != *r {
            wrong.push(format!("{name}: C {} Rust {r}", c[*name]));
        }
    }
    assert_eq!(rust.len(), PROBES.len(), "every probe has a Rust side");
    assert!(
        wrong.is_empty(),
        "layout differs from mlx5dv.h:\n{}",
        wrong.join("\n")
    );
}
