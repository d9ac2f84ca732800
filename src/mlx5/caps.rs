//! mlx5 device capabilities (`mlx5dv_query_device(3)`) as typed values.
//!
//! `struct mlx5dv_context` is filled field by field: the caller sets a bit
//! of `comp_mask` for each field it wants, and the provider clears the bit
//! of each field it did not fill ("Compatibility mask (comp_mask) is in/out
//! field"). [`Context::mlx5_caps`] asks for every field of the header the
//! crate was built with, and [`Mlx5Caps::from_raw`] reads a field only when
//! its bit came back set: a field the provider did not fill is `None`.
//!
//! Only the bits of the fields present in the compiled `struct
//! mlx5dv_context` are asked for, so a newer provider never writes past its
//! end; an older one ignores the bits it does not know and clears them.
//! Fields later rdma-core releases appended (such as `max_dc_rd_atom`) are
//! not in the rdma-core 44 header and are not read.

use crate::device::Context;
use crate::error::{Error, Result};
use crate::ffi;
use std::ffi::c_void;
use std::fmt;
use std::ptr::NonNull;

mod flags;
#[cfg(test)]
mod tests;

pub use flags::*;

/// The `comp_mask` [`Context::mlx5_caps`] passes in: every
/// `MLX5DV_CONTEXT_MASK_*` of the installed header.
const QUERY_COMP_MASK: u64 = (ffi::MLX5DV_CONTEXT_MASK_CQE_COMPRESION
    | ffi::MLX5DV_CONTEXT_MASK_SWP
    | ffi::MLX5DV_CONTEXT_MASK_STRIDING_RQ
    | ffi::MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS
    | ffi::MLX5DV_CONTEXT_MASK_DYN_BFREGS
    | ffi::MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE
    | ffi::MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS
    | ffi::MLX5DV_CONTEXT_MASK_DC_ODP_CAPS
    | ffi::MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK
    | ffi::MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS
    | ffi::MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD
    | ffi::MLX5DV_CONTEXT_MASK_DCI_STREAMS
    | ffi::MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH
    | ffi::MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD) as u64;

impl Context {
    /// The mlx5-specific capabilities of the device
    /// (`mlx5dv_query_device(3)`).
    ///
    /// On a device that is not mlx5 (soft-RoCE `rxe0`, for one) this returns
    /// [`Error::Unsupported`] naming the device, without calling
    /// `mlx5dv_query_device`: rdma-core does not define mlx5dv calls on
    /// other providers' contexts.
    pub fn mlx5_caps(&self) -> Result<Mlx5Caps> {
        require_mlx5(self.name(), self.is_mlx5())?;
        let mut raw = ffi::mlx5dv_context {
            comp_mask: QUERY_COMP_MASK,
            ..Default::default()
        };
        // SAFETY: the context is open and is an mlx5 context (checked
        // above); `raw` is a writable `struct mlx5dv_context` of the layout
        // the header defines, and `comp_mask` asks only for its fields.
        let rc = unsafe { ffi::mlx5dv_query_device(self.as_ptr(), &mut raw) };
        crate::error::check(rc, "mlx5dv_query_device", || self.name().to_string())?;
        Ok(Mlx5Caps::from_raw(&raw))
    }
}

/// Refuses a device that is not mlx5, before any mlx5dv call.
fn require_mlx5(name: &str, is_mlx5: bool) -> Result<()> {
    if is_mlx5 {
        Ok(())
    } else {
        Err(Error::Unsupported {
            what: format!("{name} is not an mlx5 device: mlx5dv_query_device needs one"),
        })
    }
}

/// The mlx5-specific device capabilities (`struct mlx5dv_context`,
/// `mlx5dv_query_device(3)`), in the man page's names.
///
/// `version` and `flags` are always reported. Every other field is `None`
/// when the provider left its `comp_mask` bit clear: the device or the
/// installed rdma-core does not report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Mlx5Caps {
    /// The format of the internal hardware structures that `mlx5dv.h`
    /// represents.
    pub version: u8,
    /// `enum mlx5dv_context_flags`.
    pub flags: Mlx5ContextFlags,
    /// CQE compression (`MLX5DV_CONTEXT_MASK_CQE_COMPRESION`).
    pub cqe_comp_caps: Option<CqeCompCaps>,
    /// Software parsing (`MLX5DV_CONTEXT_MASK_SWP`).
    pub sw_parsing_caps: Option<SwParsingCaps>,
    /// Striding receive queues (`MLX5DV_CONTEXT_MASK_STRIDING_RQ`).
    pub striding_rq_caps: Option<StridingRqCaps>,
    /// Tunnel offloads of raw-packet QPs
    /// (`MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS`).
    pub tunnel_offloads_caps: Option<TunnelOffloads>,
    /// Most blue-flame registers that can be allocated dynamically
    /// (`MLX5DV_CONTEXT_MASK_DYN_BFREGS`).
    pub max_dynamic_bfregs: Option<u32>,
    /// Longest interval, in nanoseconds, between updates of the clock
    /// information page (`MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE`).
    pub max_clock_info_update_nsec: Option<u64>,
    /// Flow action capabilities (`MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS`).
    pub flow_action_flags: Option<FlowActionCapFlags>,
    /// The operations for which DC supports on-demand paging
    /// (`MLX5DV_CONTEXT_MASK_DC_ODP_CAPS`).
    pub dc_odp_caps: Option<OdpTransportCaps>,
    /// The mapped HCA core clock (`MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK`);
    /// `None` also when the provider reported a NULL pointer.
    pub hca_core_clock: Option<HcaCoreClock>,
    /// The number of LAG ports (`MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS`).
    pub num_lag_ports: Option<u8>,
    /// Signature offload (`MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD`).
    pub sig_caps: Option<SigCaps>,
    /// DCI streams (`MLX5DV_CONTEXT_MASK_DCI_STREAMS`).
    pub dci_streams_caps: Option<DciStreamsCaps>,
    /// The longest DMA memcpy work request (`mlx5dv_wr_memcpy`), in bytes
    /// (`MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH`). "A zero value in
    /// mlx5dv_context->max_wr_memcpy_length means the device doesn't support
    /// memcpy operations" (`mlx5dv_wr_post(3)`): see
    /// [`memcpy_supported`](Self::memcpy_supported).
    pub max_wr_memcpy_length: Option<u64>,
    /// Crypto offload (`MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD`).
    pub crypto_caps: Option<CryptoCaps>,
}

/// `struct mlx5dv_cqe_comp_caps`: CQE compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct CqeCompCaps {
    /// The most CQEs one compressed block may hold.
    pub max_num: u32,
    /// The CQE formats that may be compressed.
    pub supported_format: CqeCompResFormat,
}

/// `struct mlx5dv_sw_parsing_caps`: software parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SwParsingCaps {
    /// The offloads available with software parsing.
    pub sw_parsing_offloads: SwParsingOffloads,
    /// The QP types they apply to.
    pub supported_qpts: QpTypes,
}

/// `struct mlx5dv_striding_rq_caps`: striding receive queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct StridingRqCaps {
    /// Smallest stride size, as log2 of bytes.
    pub min_single_stride_log_num_of_bytes: u32,
    /// Largest stride size, as log2 of bytes.
    pub max_single_stride_log_num_of_bytes: u32,
    /// Fewest strides per WQE, as log2.
    pub min_single_wqe_log_num_of_strides: u32,
    /// Most strides per WQE, as log2.
    pub max_single_wqe_log_num_of_strides: u32,
    /// The QP types striding RQs apply to.
    pub supported_qpts: QpTypes,
}

/// `struct mlx5dv_sig_caps`: signature offload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct SigCaps {
    /// The data block sizes supported.
    pub block_size: BlockSizeCaps,
    /// The signature types supported.
    pub block_prot: SigProtCaps,
    /// The T10-DIF block guard types supported.
    pub t10dif_bg: SigT10difBgCaps,
    /// The CRC types supported.
    pub crc_type: SigCrcTypeCaps,
}

/// `struct mlx5dv_dci_streams_caps`: DCI streams
/// (`mlx5dv_dci_stream_id_reset(3)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct DciStreamsCaps {
    /// The most different streams the hardware can handle in parallel, as
    /// log2 (the C spelling, `concurent`, is kept).
    pub max_log_num_concurent: u8,
    /// The most stream channels of a DCI that may be in error before the
    /// DCI itself moves to the error state, as log2.
    pub max_log_num_errored: u8,
}

/// `struct mlx5dv_crypto_caps`: crypto offload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct CryptoCaps {
    /// Non-zero when some crypto self tests failed, which may make some
    /// engines unusable; the code's meaning is NVIDIA's to explain.
    pub failed_selftests: u16,
    /// The crypto engines supported.
    pub crypto_engines: CryptoEnginesCaps,
    /// The import method of each engine: wrapped (bit set) or plaintext.
    pub wrapped_import_method: CryptoWrappedImportMethodCaps,
    /// The most data encryption keys, as log2.
    pub log_max_num_deks: u8,
    /// Crypto state flags.
    pub flags: CryptoCapsFlags,
}

/// `mlx5dv_context->hca_core_clock`: "a memory location that is mapped to
/// the HCA's core clock".
///
/// Only an address: this crate never reads through it. It stays mapped
/// while the [`Context`] it came from is open; reading it is the caller's
/// `unsafe` business.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HcaCoreClock(NonNull<c_void>);

// SAFETY: the value is an address that this crate never dereferences; any
// read through it goes through `as_ptr` and the caller's own `unsafe`.
unsafe impl Send for HcaCoreClock {}
// SAFETY: as above.
unsafe impl Sync for HcaCoreClock {}

impl HcaCoreClock {
    /// The mapped clock's address, valid while the context is open.
    pub fn as_ptr(&self) -> *const c_void {
        self.0.as_ptr()
    }
}

impl Mlx5Caps {
    /// Reads a `struct mlx5dv_context` that `mlx5dv_query_device` filled:
    /// `version` and `flags`, and each other field whose `comp_mask` bit is
    /// set. Pure: it touches no device and never dereferences
    /// `hca_core_clock`.
    pub fn from_raw(raw: &ffi::mlx5dv_context) -> Self {
        let has = |bit: ffi::mlx5dv_context_comp_mask| raw.comp_mask & u64::from(bit) != 0;
        let qpts = QpTypes::from_bits_retain;
        Mlx5Caps {
            version: raw.version,
            flags: Mlx5ContextFlags::from_bits_retain(raw.flags),
            cqe_comp_caps: has(ffi::MLX5DV_CONTEXT_MASK_CQE_COMPRESION).then(|| CqeCompCaps {
                max_num: raw.cqe_comp_caps.max_num,
                supported_format: CqeCompResFormat::from_bits_retain(
                    raw.cqe_comp_caps.supported_format,
                ),
            }),
            sw_parsing_caps: has(ffi::MLX5DV_CONTEXT_MASK_SWP).then(|| SwParsingCaps {
                sw_parsing_offloads: SwParsingOffloads::from_bits_retain(
                    raw.sw_parsing_caps.sw_parsing_offloads,
                ),
                supported_qpts: qpts(raw.sw_parsing_caps.supported_qpts),
            }),
            striding_rq_caps: has(ffi::MLX5DV_CONTEXT_MASK_STRIDING_RQ).then(|| {
                let s = &raw.striding_rq_caps;
                StridingRqCaps {
                    min_single_stride_log_num_of_bytes: s.min_single_stride_log_num_of_bytes,
                    max_single_stride_log_num_of_bytes: s.max_single_stride_log_num_of_bytes,
                    min_single_wqe_log_num_of_strides: s.min_single_wqe_log_num_of_strides,
                    max_single_wqe_log_num_of_strides: s.max_single_wqe_log_num_of_strides,
                    supported_qpts: qpts(s.supported_qpts),
                }
            }),
            tunnel_offloads_caps: has(ffi::MLX5DV_CONTEXT_MASK_TUNNEL_OFFLOADS)
                .then(|| TunnelOffloads::from_bits_retain(raw.tunnel_offloads_caps)),
            max_dynamic_bfregs: has(ffi::MLX5DV_CONTEXT_MASK_DYN_BFREGS)
                .then_some(raw.max_dynamic_bfregs),
            max_clock_info_update_nsec: has(ffi::MLX5DV_CONTEXT_MASK_CLOCK_INFO_UPDATE)
                .then_some(raw.max_clock_info_update_nsec),
            flow_action_flags: has(ffi::MLX5DV_CONTEXT_MASK_FLOW_ACTION_FLAGS)
                .then(|| FlowActionCapFlags::from_bits_retain(raw.flow_action_flags)),
            dc_odp_caps: has(ffi::MLX5DV_CONTEXT_MASK_DC_ODP_CAPS)
                .then(|| OdpTransportCaps::from_bits_retain(raw.dc_odp_caps)),
            hca_core_clock: has(ffi::MLX5DV_CONTEXT_MASK_HCA_CORE_CLOCK)
                .then(|| NonNull::new(raw.hca_core_clock).map(HcaCoreClock))
                .flatten(),
            num_lag_ports: has(ffi::MLX5DV_CONTEXT_MASK_NUM_LAG_PORTS).then_some(raw.num_lag_ports),
            sig_caps: has(ffi::MLX5DV_CONTEXT_MASK_SIGNATURE_OFFLOAD).then(|| SigCaps {
                block_size: BlockSizeCaps::from_bits_retain(raw.sig_caps.block_size),
                block_prot: SigProtCaps::from_bits_retain(raw.sig_caps.block_prot),
                t10dif_bg: SigT10difBgCaps::from_bits_retain(raw.sig_caps.t10dif_bg),
                crc_type: SigCrcTypeCaps::from_bits_retain(raw.sig_caps.crc_type),
            }),
            dci_streams_caps: has(ffi::MLX5DV_CONTEXT_MASK_DCI_STREAMS).then_some(DciStreamsCaps {
                max_log_num_concurent: raw.dci_streams_caps.max_log_num_concurent,
                max_log_num_errored: raw.dci_streams_caps.max_log_num_errored,
            }),
            // size_t is at most 64 bits on every target rdma-core supports.
            max_wr_memcpy_length: has(ffi::MLX5DV_CONTEXT_MASK_WR_MEMCPY_LENGTH)
                .then(|| u64::try_from(raw.max_wr_memcpy_length).unwrap_or(u64::MAX)),
            crypto_caps: has(ffi::MLX5DV_CONTEXT_MASK_CRYPTO_OFFLOAD).then(|| {
                let c = &raw.crypto_caps;
                CryptoCaps {
                    failed_selftests: c.failed_selftests,
                    crypto_engines: CryptoEnginesCaps::from_bits_retain(c.crypto_engines),
                    wrapped_import_method: CryptoWrappedImportMethodCaps::from_bits_retain(
                        c.wrapped_import_method,
                    ),
                    log_max_num_deks: c.log_max_num_deks,
                    flags: CryptoCapsFlags::from_bits_retain(c.flags),
                }
            }),
        }
    }

    /// Whether the device supports DMA memcpy work requests: false when
    /// `max_wr_memcpy_length` is not reported or is 0 ("A zero value in
    /// mlx5dv_context->max_wr_memcpy_length means the device doesn't support
    /// memcpy operations", `mlx5dv_wr_post(3)`).
    pub fn memcpy_supported(&self) -> bool {
        matches!(self.max_wr_memcpy_length, Some(n) if n > 0)
    }

    /// One `(field, value)` line per field, in the man page's names, for
    /// printing (`not reported` for a field whose bit came back clear).
    pub fn summary(&self) -> Vec<(&'static str, String)> {
        fn show<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
            v.map_or_else(|| "not reported".into(), f)
        }
        vec![
            ("version", self.version.to_string()),
            ("flags", names(&self.flags)),
            (
                "cqe_comp_caps",
                show(self.cqe_comp_caps, |c| {
                    format!(
                        "max_num {}, supported_format {}",
                        c.max_num,
                        names(&c.supported_format)
                    )
                }),
            ),
            (
                "sw_parsing_caps",
                show(self.sw_parsing_caps, |c| {
                    format!(
                        "sw_parsing_offloads {}, supported_qpts {}",
                        names(&c.sw_parsing_offloads),
                        names(&c.supported_qpts)
                    )
                }),
            ),
            (
                "striding_rq_caps",
                show(self.striding_rq_caps, |c| {
                    format!(
                        "log stride bytes {}..={}, log strides per WQE {}..={}, supported_qpts {}",
                        c.min_single_stride_log_num_of_bytes,
                        c.max_single_stride_log_num_of_bytes,
                        c.min_single_wqe_log_num_of_strides,
                        c.max_single_wqe_log_num_of_strides,
                        names(&c.supported_qpts)
                    )
                }),
            ),
            (
                "tunnel_offloads_caps",
                show(self.tunnel_offloads_caps, |f| names(&f)),
            ),
            (
                "max_dynamic_bfregs",
                show(self.max_dynamic_bfregs, |n| n.to_string()),
            ),
            (
                "max_clock_info_update_nsec",
                show(self.max_clock_info_update_nsec, |n| n.to_string()),
            ),
            (
                "flow_action_flags",
                show(self.flow_action_flags, |f| names(&f)),
            ),
            ("dc_odp_caps", show(self.dc_odp_caps, |f| names(&f))),
            (
                "hca_core_clock",
                show(self.hca_core_clock, |c| {
                    format!("mapped at {:p}", c.as_ptr())
                }),
            ),
            ("num_lag_ports", show(self.num_lag_ports, |n| n.to_string())),
            (
                "sig_caps",
                show(self.sig_caps, |c| {
                    format!(
                        "block_size {}, block_prot {}, t10dif_bg {}, crc_type {}",
                        names(&c.block_size),
                        names(&c.block_prot),
                        names(&c.t10dif_bg),
                        names(&c.crc_type)
                    )
                }),
            ),
            (
                "dci_streams_caps",
                show(self.dci_streams_caps, |c| {
                    format!(
                        "max_log_num_concurent {}, max_log_num_errored {}",
                        c.max_log_num_concurent, c.max_log_num_errored
                    )
                }),
            ),
            (
                "max_wr_memcpy_length",
                show(self.max_wr_memcpy_length, |n| {
                    if n == 0 {
                        "0 (memcpy not supported)".into()
                    } else {
                        n.to_string()
                    }
                }),
            ),
            (
                "crypto_caps",
                show(self.crypto_caps, |c| {
                    format!(
                        "flags {}, crypto_engines {}, wrapped_import_method {}, \
                         log_max_num_deks {}, failed_selftests {:#x}",
                        names(&c.flags),
                        names(&c.crypto_engines),
                        names(&c.wrapped_import_method),
                        c.log_max_num_deks,
                        c.failed_selftests
                    )
                }),
            ),
        ]
    }
}

impl fmt::Display for Mlx5Caps {
    /// The [`summary`](Mlx5Caps::summary), one `field: value` line each.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (key, value) in self.summary() {
            writeln!(f, "{key}: {value}")?;
        }
        Ok(())
    }
}

/// A flag set as `A | B | 0x100` (unnamed bits in hex), or `none`.
fn names<F>(flags: &F) -> String
where
    F: bitflags::Flags,
    F::Bits: bitflags::parser::WriteHex,
{
    if flags.is_empty() {
        return "none".into();
    }
    let mut s = String::new();
    // Writing into a String cannot fail.
    let _ = bitflags::parser::to_writer(flags, &mut s);
    s
}
