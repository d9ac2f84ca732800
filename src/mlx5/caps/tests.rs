//! Host tests of the conversion from `struct mlx5dv_context`: contexts built
//! by hand, as a provider would fill them, with chosen `comp_mask` bits.

use super::*;

/// Each `comp_mask` bit and the name of the field it reports.
const BITS: [(ffi::mlx5dv_context_comp_mask, &str); 14] = [
    (ffi::MLX5DV_CONTEXT_MASK_CQE_COMPRESION, "cqe_comp_caps"),
    (ffi::MLX5DV_CONTEXT_MASK_SWP, "sw_parsing_caps"),
    (ffi::MLX5DV_CONTEXT_MASK_STRIDING_RQ, "striding_rq_caps"),
    (
        ffi::MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS,
        "tunnel_offloads_caps",
    ),
    (ffi::MLX5DV_CONTEXT_MASK_DYN_BFREGS, "max_dynamic_bfregs"),
    (
        ffi::MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE,
        "max_clock_info_update_nsec",
    ),
    (
        ffi::MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS,
        "flow_action_flags",
    ),
    (ffi::MLX5DV_CONTEXT_MASK_DC_ODP_CAPS, "dc_odp_caps"),
    (ffi::MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK, "hca_core_clock"),
    (ffi::MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS, "num_lag_ports"),
    (ffi::MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD, "sig_caps"),
    (ffi::MLX5DV_CONTEXT_MASK_DCI_STREAMS, "dci_streams_caps"),
    (
        ffi::MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH,
        "max_wr_memcpy_length",
    ),
    (ffi::MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD, "crypto_caps"),
];

/// The names of the fields that came back `Some`.
fn reported(c: &Mlx5Caps) -> Vec<&'static str> {
    let present = [
        c.cqe_comp_caps.is_some(),
        c.sw_parsing_caps.is_some(),
        c.striding_rq_caps.is_some(),
        c.tunnel_offloads_caps.is_some(),
        c.max_dynamic_bfregs.is_some(),
        c.max_clock_info_update_nsec.is_some(),
        c.flow_action_flags.is_some(),
        c.dc_odp_caps.is_some(),
        c.hca_core_clock.is_some(),
        c.num_lag_ports.is_some(),
        c.sig_caps.is_some(),
        c.dci_streams_caps.is_some(),
        c.max_wr_memcpy_length.is_some(),
        c.crypto_caps.is_some(),
    ];
    BITS.iter()
        .zip(present)
        .filter(|(_, p)| *p)
        .map(|((_, name), _)| *name)
        .collect()
}

/// A context whose every field holds its type's largest value (a non-NULL
/// clock pointer), as if fully written, with the given `comp_mask`.
fn full(comp_mask: u64) -> ffi::mlx5dv_context {
    let mut raw = ffi::mlx5dv_context {
        version: u8::MAX,
        flags: u64::MAX,
        comp_mask,
        tunnel_offloads_caps: u32::MAX,
        max_dynamic_bfregs: u32::MAX,
        max_clock_info_update_nsec: u64::MAX,
        flow_action_flags: u32::MAX,
        dc_odp_caps: u32::MAX,
        hca_core_clock: 0x7f00_dead_b000_usize as *mut c_void,
        num_lag_ports: u8::MAX,
        max_wr_memcpy_length: usize::MAX,
        ..Default::default()
    };
    raw.cqe_comp_caps.max_num = u32::MAX;
    raw.cqe_comp_caps.supported_format = u32::MAX;
    raw.sw_parsing_caps.sw_parsing_offloads = u32::MAX;
    raw.sw_parsing_caps.supported_qpts = u32::MAX;
    let s = &mut raw.striding_rq_caps;
    s.min_single_stride_log_num_of_bytes = u32::MAX;
    s.max_single_stride_log_num_of_bytes = u32::MAX - 1;
    s.min_single_wqe_log_num_of_strides = u32::MAX - 2;
    s.max_single_wqe_log_num_of_strides = u32::MAX - 3;
    s.supported_qpts = u32::MAX;
    raw.sig_caps.block_size = u64::MAX;
    raw.sig_caps.block_prot = u32::MAX;
    raw.sig_caps.t10dif_bg = u16::MAX;
    raw.sig_caps.crc_type = u16::MAX;
    raw.dci_streams_caps.max_log_num_concurent = u8::MAX;
    raw.dci_streams_caps.max_log_num_errored = u8::MAX - 1;
    let c = &mut raw.crypto_caps;
    c.failed_selftests = u16::MAX;
    c.crypto_engines = u8::MAX;
    c.wrapped_import_method = u8::MAX;
    c.log_max_num_deks = u8::MAX;
    c.flags = u32::MAX;
    raw
}

#[test]
fn the_query_asks_for_every_field_of_the_header() {
    let all = BITS.iter().fold(0u64, |m, (bit, _)| m | u64::from(*bit));
    assert_eq!(QUERY_COMP_MASK, all);
    // rdma-core 44's enum mlx5dv_context_comp_mask: bits 0 to 13, no gap.
    assert_eq!(QUERY_COMP_MASK, (1 << 14) - 1);
}

#[test]
fn a_clear_comp_mask_reports_only_version_and_flags() {
    let caps = Mlx5Caps::from_raw(&full(0));
    assert_eq!(reported(&caps), Vec::<&str>::new(), "{caps:?}");
    assert_eq!(caps.version, u8::MAX);
    assert_eq!(caps.flags.bits(), u64::MAX);
    assert!(!caps.memcpy_supported());
}

#[test]
fn each_bit_alone_reports_exactly_its_field() {
    for (bit, name) in BITS {
        let caps = Mlx5Caps::from_raw(&full(u64::from(bit)));
        assert_eq!(reported(&caps), vec![name], "bit {bit:#x}: {caps:?}");
    }
}

#[test]
fn all_but_one_bit_leaves_exactly_that_field_out() {
    for (bit, name) in BITS {
        let caps = Mlx5Caps::from_raw(&full(QUERY_COMP_MASK & !u64::from(bit)));
        let got = reported(&caps);
        assert_eq!(got.len(), BITS.len() - 1, "bit {bit:#x}: {got:?}");
        assert!(!got.contains(&name), "bit {bit:#x}: {got:?}");
    }
}

#[test]
fn bits_the_header_does_not_know_report_nothing() {
    let caps = Mlx5Caps::from_raw(&full(!QUERY_COMP_MASK));
    assert_eq!(reported(&caps), Vec::<&str>::new(), "{caps:?}");
}

#[test]
fn every_field_keeps_its_full_width() {
    let caps = Mlx5Caps::from_raw(&full(QUERY_COMP_MASK));
    assert_eq!(reported(&caps).len(), BITS.len());
    let cqe = caps.cqe_comp_caps.unwrap();
    assert_eq!(cqe.max_num, u32::MAX);
    assert_eq!(cqe.supported_format.bits(), u32::MAX);
    let swp = caps.sw_parsing_caps.unwrap();
    assert_eq!(swp.sw_parsing_offloads.bits(), u32::MAX);
    assert_eq!(swp.supported_qpts.bits(), u32::MAX);
    let s = caps.striding_rq_caps.unwrap();
    assert_eq!(s.min_single_stride_log_num_of_bytes, u32::MAX);
    assert_eq!(s.max_single_stride_log_num_of_bytes, u32::MAX - 1);
    assert_eq!(s.min_single_wqe_log_num_of_strides, u32::MAX - 2);
    assert_eq!(s.max_single_wqe_log_num_of_strides, u32::MAX - 3);
    assert_eq!(s.supported_qpts.bits(), u32::MAX);
    assert_eq!(caps.tunnel_offloads_caps.unwrap().bits(), u32::MAX);
    assert_eq!(caps.max_dynamic_bfregs, Some(u32::MAX));
    assert_eq!(caps.max_clock_info_update_nsec, Some(u64::MAX));
    assert_eq!(caps.flow_action_flags.unwrap().bits(), u32::MAX);
    assert_eq!(caps.dc_odp_caps.unwrap().bits(), u32::MAX);
    assert_eq!(
        caps.hca_core_clock.unwrap().as_ptr() as usize,
        0x7f00_dead_b000
    );
    assert_eq!(caps.num_lag_ports, Some(u8::MAX));
    let sig = caps.sig_caps.unwrap();
    assert_eq!(sig.block_size.bits(), u64::MAX);
    assert_eq!(sig.block_prot.bits(), u32::MAX);
    assert_eq!(sig.t10dif_bg.bits(), u16::MAX);
    assert_eq!(sig.crc_type.bits(), u16::MAX);
    let dci = caps.dci_streams_caps.unwrap();
    assert_eq!(dci.max_log_num_concurent, u8::MAX);
    assert_eq!(dci.max_log_num_errored, u8::MAX - 1);
    assert_eq!(caps.max_wr_memcpy_length, Some(u64::MAX));
    let c = caps.crypto_caps.unwrap();
    assert_eq!(c.failed_selftests, u16::MAX);
    assert_eq!(c.crypto_engines.bits(), u8::MAX);
    assert_eq!(c.wrapped_import_method.bits(), u8::MAX);
    assert_eq!(c.log_max_num_deks, u8::MAX);
    assert_eq!(c.flags.bits(), u32::MAX);
}

#[test]
fn a_null_core_clock_is_not_reported_even_with_its_bit() {
    let mut raw = full(QUERY_COMP_MASK);
    raw.hca_core_clock = std::ptr::null_mut();
    assert_eq!(Mlx5Caps::from_raw(&raw).hca_core_clock, None);
}

#[test]
fn context_flags_map_bit_by_bit() {
    let pairs = [
        (ffi::MLX5DV_CONTEXT_FLAGS_CQE_V1, Mlx5ContextFlags::CQE_V1),
        (
            ffi::MLX5DV_CONTEXT_FLAGS_OBSOLETE,
            Mlx5ContextFlags::OBSOLETE,
        ),
        (
            ffi::MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED,
            Mlx5ContextFlags::MPW_ALLOWED,
        ),
        (
            ffi::MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW,
            Mlx5ContextFlags::ENHANCED_MPW,
        ),
        (
            ffi::MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP,
            Mlx5ContextFlags::CQE_128B_COMP,
        ),
        (
            ffi::MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD,
            Mlx5ContextFlags::CQE_128B_PAD,
        ),
        (
            ffi::MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE,
            Mlx5ContextFlags::PACKET_BASED_CREDIT_MODE,
        ),
        (
            ffi::MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS,
            Mlx5ContextFlags::REAL_TIME_TS,
        ),
    ];
    assert_eq!(pairs.len(), Mlx5ContextFlags::all().iter().count());
    for (bit, flag) in pairs {
        let raw = ffi::mlx5dv_context {
            flags: u64::from(bit),
            ..Default::default()
        };
        assert_eq!(Mlx5Caps::from_raw(&raw).flags, flag, "bit {bit:#x}");
    }
    // A flag from a newer provider is kept, not dropped.
    let raw = ffi::mlx5dv_context {
        flags: 1 << 40 | u64::from(ffi::MLX5DV_CONTEXT_FLAGS_CQE_V1),
        ..Default::default()
    };
    let flags = Mlx5Caps::from_raw(&raw).flags;
    assert!(flags.contains(Mlx5ContextFlags::CQE_V1));
    assert_eq!(flags.bits(), 1 << 40 | 1);
    assert_eq!(names(&flags), "CQE_V1 | 0x10000000000");
}

#[test]
fn sub_flags_map_bit_by_bit() {
    let mut raw = ffi::mlx5dv_context {
        comp_mask: QUERY_COMP_MASK,
        dc_odp_caps: ffi::IBV_ODP_SUPPORT_WRITE | ffi::IBV_ODP_SUPPORT_READ,
        ..Default::default()
    };
    raw.sw_parsing_caps.supported_qpts = 1 << ffi::IBV_QPT_RAW_PACKET;
    raw.sig_caps.crc_type = ffi::MLX5DV_SIG_CRC_TYPE_CAP_CRC32C as u16;
    raw.crypto_caps.wrapped_import_method =
        ffi::MLX5DV_CRYPTO_WRAPPED_IMPORT_METHOD_CAP_AES_XTS as u8;
    raw.crypto_caps.flags = ffi::MLX5DV_CRYPTO_CAPS_WRAPPED_CRYPTO_OPERATIONAL;
    let caps = Mlx5Caps::from_raw(&raw);
    assert_eq!(
        caps.dc_odp_caps,
        Some(OdpTransportCaps::WRITE | OdpTransportCaps::READ)
    );
    assert_eq!(
        caps.sw_parsing_caps.unwrap().supported_qpts,
        QpTypes::RAW_PACKET
    );
    assert_eq!(caps.sig_caps.unwrap().crc_type, SigCrcTypeCaps::CRC32C);
    let crypto = caps.crypto_caps.unwrap();
    assert_eq!(
        crypto.wrapped_import_method,
        CryptoWrappedImportMethodCaps::AES_XTS
    );
    assert_eq!(crypto.flags, CryptoCapsFlags::WRAPPED_CRYPTO_OPERATIONAL);
    assert_eq!(crypto.crypto_engines, CryptoEnginesCaps::empty());
}

#[test]
fn memcpy_is_supported_only_for_a_non_zero_length() {
    let with = |len: Option<usize>| {
        let raw = ffi::mlx5dv_context {
            comp_mask: if len.is_some() {
                u64::from(ffi::MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH)
            } else {
                0
            },
            max_wr_memcpy_length: len.unwrap_or(usize::MAX),
            ..Default::default()
        };
        Mlx5Caps::from_raw(&raw)
    };
    assert!(!with(None).memcpy_supported());
    assert_eq!(with(None).max_wr_memcpy_length, None);
    assert!(!with(Some(0)).memcpy_supported());
    assert_eq!(with(Some(0)).max_wr_memcpy_length, Some(0));
    assert!(with(Some(1)).memcpy_supported());
    assert!(with(Some(1 << 31)).memcpy_supported());
}

#[test]
fn a_device_that_is_not_mlx5_is_refused_by_name() {
    let e = require_mlx5("rxe0", false).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        "not supported: rxe0 is not an mlx5 device: mlx5dv_query_device needs one"
    );
    assert!(require_mlx5("mlx5_0", true).is_ok());
}

#[test]
fn the_summary_has_a_line_per_field() {
    let none = Mlx5Caps::from_raw(&ffi::mlx5dv_context::default());
    let lines = none.summary();
    assert_eq!(lines.len(), 2 + BITS.len());
    assert_eq!(lines[0], ("version", "0".to_string()));
    assert_eq!(lines[1], ("flags", "none".to_string()));
    for ((key, value), (_, name)) in lines[2..].iter().zip(BITS) {
        assert_eq!(*key, name);
        assert_eq!(value, "not reported", "{key}");
    }

    let mut raw = ffi::mlx5dv_context {
        comp_mask: QUERY_COMP_MASK,
        flags: u64::from(ffi::MLX5DV_CONTEXT_FLAGS_CQE_V1 | ffi::MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED),
        max_wr_memcpy_length: 0,
        ..Default::default()
    };
    raw.dci_streams_caps.max_log_num_concurent = 4;
    let caps = Mlx5Caps::from_raw(&raw);
    let text = caps.to_string();
    assert!(text.contains("flags: CQE_V1 | MPW_ALLOWED\n"), "{text}");
    assert!(text.contains("hca_core_clock: not reported\n"), "{text}");
    assert!(
        text.contains("max_wr_memcpy_length: 0 (memcpy not supported)\n"),
        "{text}"
    );
    assert!(
        text.contains("dci_streams_caps: max_log_num_concurent 4, max_log_num_errored 0\n"),
        "{text}"
    );
}
