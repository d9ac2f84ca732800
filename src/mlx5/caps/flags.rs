//! The bit sets of `struct mlx5dv_context` (`mlx5dv_query_device(3)`), one
//! `bitflags` type per C enum, with the values of the installed header.
//!
//! Every type keeps bits it does not name (`from_bits_retain`), so a flag a
//! newer provider reports is not lost, only shown as a number.

use crate::ffi;

bitflags::bitflags! {
    /// `mlx5dv_context->flags` (`enum mlx5dv_context_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Mlx5ContextFlags: u64 {
        /// CQE version 1 is needed (else version 0).
        const CQE_V1 = ffi::MLX5DV_CONTEXT_FLAGS_CQE_V1 as u64;
        /// Obsolete: the man page says not to use it.
        const OBSOLETE = ffi::MLX5DV_CONTEXT_FLAGS_OBSOLETE as u64;
        /// Multi-packet WQE is allowed.
        const MPW_ALLOWED = ffi::MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED as u64;
        /// Enhanced multi-packet WQE is supported.
        const ENHANCED_MPW = ffi::MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW as u64;
        /// 128-byte CQE compression is supported.
        const CQE_128B_COMP = ffi::MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP as u64;
        /// 128-byte CQE padding is supported.
        const CQE_128B_PAD = ffi::MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD as u64;
        /// Packet-based credit mode is supported in RC QPs.
        const PACKET_BASED_CREDIT_MODE =
            ffi::MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE as u64;
        /// Completion timestamps of a CQ created with
        /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK` are in real-time
        /// format.
        const REAL_TIME_TS = ffi::MLX5DV_CONTEXT_FLAGS_REAL_TIME_TS as u64;
    }
}

bitflags::bitflags! {
    /// `cqe_comp_caps.supported_format` (`enum mlx5dv_cqe_comp_res_format`):
    /// the CQE formats that may be compressed.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct CqeCompResFormat: u32 {
        /// Hash result format.
        const HASH = ffi::MLX5DV_CQE_RES_FORMAT_HASH;
        /// Checksum result format.
        const CSUM = ffi::MLX5DV_CQE_RES_FORMAT_CSUM;
        /// Checksum with stride index result format.
        const CSUM_STRIDX = ffi::MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX;
    }
}

bitflags::bitflags! {
    /// `sw_parsing_caps.sw_parsing_offloads`
    /// (`enum mlx5dv_sw_parsing_offloads`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SwParsingOffloads: u32 {
        /// Software parsing is supported (`MLX5DV_SW_PARSING`).
        const SW_PARSING = ffi::MLX5DV_SW_PARSING;
        /// Checksum offload with software parsing.
        const CSUM = ffi::MLX5DV_SW_PARSING_CSUM;
        /// Large send offload with software parsing.
        const LSO = ffi::MLX5DV_SW_PARSING_LSO;
    }
}

bitflags::bitflags! {
    /// A `supported_qpts` mask: bit `1 << IBV_QPT_*` for each QP type a
    /// capability applies to (`enum ibv_qp_type`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct QpTypes: u32 {
        /// Reliable connected (`IBV_QPT_RC`).
        const RC = 1 << ffi::IBV_QPT_RC;
        /// Unreliable connected (`IBV_QPT_UC`).
        const UC = 1 << ffi::IBV_QPT_UC;
        /// Unreliable datagram (`IBV_QPT_UD`).
        const UD = 1 << ffi::IBV_QPT_UD;
        /// Raw Ethernet packets (`IBV_QPT_RAW_PACKET`).
        const RAW_PACKET = 1 << ffi::IBV_QPT_RAW_PACKET;
        /// XRC send side (`IBV_QPT_XRC_SEND`).
        const XRC_SEND = 1 << ffi::IBV_QPT_XRC_SEND;
        /// XRC receive side (`IBV_QPT_XRC_RECV`).
        const XRC_RECV = 1 << ffi::IBV_QPT_XRC_RECV;
    }
}

bitflags::bitflags! {
    /// `tunnel_offloads_caps` (`enum mlx5dv_tunnel_offloads`): the tunnels
    /// whose stateless offloads raw-packet QPs support.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct TunnelOffloads: u32 {
        /// VXLAN.
        const VXLAN = ffi::MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_VXLAN;
        /// GRE.
        const GRE = ffi::MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_GRE;
        /// GENEVE.
        const GENEVE = ffi::MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_GENEVE;
        /// MPLS over GRE with control word.
        const CW_MPLS_OVER_GRE = ffi::MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_CW_MPLS_OVER_GRE;
        /// MPLS over UDP with control word.
        const CW_MPLS_OVER_UDP = ffi::MLX5DV_RAW_PACKET_CAP_TUNNELED_OFFLOAD_CW_MPLS_OVER_UDP;
    }
}

bitflags::bitflags! {
    /// `flow_action_flags` (`enum mlx5dv_flow_action_cap_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct FlowActionCapFlags: u32 {
        /// Flow action ESP with AES-GCM keymat is supported.
        const ESP_AES_GCM = ffi::MLX5DV_FLOW_ACTION_FLAGS_ESP_AES_GCM;
        /// Flow action ESP always returns metadata in the payload.
        const ESP_AES_GCM_REQ_METADATA = ffi::MLX5DV_FLOW_ACTION_FLAGS_ESP_AES_GCM_REQ_METADATA;
        /// ESP with AES-GCM keymat supports matching by SPI (rather than
        /// hashing against it).
        const ESP_AES_GCM_SPI_STEERING = ffi::MLX5DV_FLOW_ACTION_FLAGS_ESP_AES_GCM_SPI_STEERING;
        /// Flow action ESP supports full offload with AES-GCM keymat.
        const ESP_AES_GCM_FULL_OFFLOAD = ffi::MLX5DV_FLOW_ACTION_FLAGS_ESP_AES_GCM_FULL_OFFLOAD;
        /// With AES-GCM keymat, the ESN comes implicitly from the IV.
        const ESP_AES_GCM_TX_IV_IS_ESN = ffi::MLX5DV_FLOW_ACTION_FLAGS_ESP_AES_GCM_TX_IV_IS_ESN;
    }
}

bitflags::bitflags! {
    /// `dc_odp_caps` (`enum ibv_odp_transport_cap_bits`): the operations
    /// for which DC supports on-demand paging.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct OdpTransportCaps: u32 {
        /// Sends.
        const SEND = ffi::IBV_ODP_SUPPORT_SEND;
        /// Receives.
        const RECV = ffi::IBV_ODP_SUPPORT_RECV;
        /// RDMA writes.
        const WRITE = ffi::IBV_ODP_SUPPORT_WRITE;
        /// RDMA reads.
        const READ = ffi::IBV_ODP_SUPPORT_READ;
        /// Atomics.
        const ATOMIC = ffi::IBV_ODP_SUPPORT_ATOMIC;
        /// Receives on an SRQ.
        const SRQ_RECV = ffi::IBV_ODP_SUPPORT_SRQ_RECV;
    }
}

bitflags::bitflags! {
    /// `sig_caps.block_size` (`enum mlx5dv_block_size_caps`): the data
    /// block sizes signature offload supports.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct BlockSizeCaps: u64 {
        /// 512-byte blocks.
        const SIZE_512 = ffi::MLX5DV_BLOCK_SIZE_CAP_512 as u64;
        /// 520-byte blocks.
        const SIZE_520 = ffi::MLX5DV_BLOCK_SIZE_CAP_520 as u64;
        /// 4048-byte blocks.
        const SIZE_4048 = ffi::MLX5DV_BLOCK_SIZE_CAP_4048 as u64;
        /// 4096-byte blocks.
        const SIZE_4096 = ffi::MLX5DV_BLOCK_SIZE_CAP_4096 as u64;
        /// 4160-byte blocks.
        const SIZE_4160 = ffi::MLX5DV_BLOCK_SIZE_CAP_4160 as u64;
    }
}

bitflags::bitflags! {
    /// `sig_caps.block_prot` (`enum mlx5dv_sig_prot_caps`): the signature
    /// types supported.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SigProtCaps: u32 {
        /// T10-DIF.
        const T10DIF = ffi::MLX5DV_SIG_PROT_CAP_T10DIF;
        /// CRC.
        const CRC = ffi::MLX5DV_SIG_PROT_CAP_CRC;
    }
}

bitflags::bitflags! {
    /// `sig_caps.t10dif_bg` (`enum mlx5dv_sig_t10dif_bg_caps`): the T10-DIF
    /// block guard types supported.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SigT10difBgCaps: u16 {
        /// CRC guard.
        const CRC = ffi::MLX5DV_SIG_T10DIF_BG_CAP_CRC as u16;
        /// IP checksum guard.
        const CSUM = ffi::MLX5DV_SIG_T10DIF_BG_CAP_CSUM as u16;
    }
}

bitflags::bitflags! {
    /// `sig_caps.crc_type` (`enum mlx5dv_sig_crc_type_caps`): the CRC
    /// signature types supported.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SigCrcTypeCaps: u16 {
        /// CRC32.
        const CRC32 = ffi::MLX5DV_SIG_CRC_TYPE_CAP_CRC32 as u16;
        /// CRC32C.
        const CRC32C = ffi::MLX5DV_SIG_CRC_TYPE_CAP_CRC32C as u16;
        /// CRC64 XP10.
        const CRC64_XP10 = ffi::MLX5DV_SIG_CRC_TYPE_CAP_CRC64_XP10 as u16;
    }
}

bitflags::bitflags! {
    /// `crypto_caps.crypto_engines` (`enum mlx5dv_crypto_engines_caps`): the
    /// crypto engines the device supports.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct CryptoEnginesCaps: u8 {
        /// AES-XTS; deprecated, replaced by
        /// [`AES_XTS_SINGLE_BLOCK`](Self::AES_XTS_SINGLE_BLOCK).
        const AES_XTS = ffi::MLX5DV_CRYPTO_ENGINES_CAP_AES_XTS as u8;
        /// AES-XTS that encrypts a single block at a time.
        const AES_XTS_SINGLE_BLOCK = ffi::MLX5DV_CRYPTO_ENGINES_CAP_AES_XTS_SINGLE_BLOCK as u8;
        /// AES-XTS with multi-block encryption.
        const AES_XTS_MULTI_BLOCK = ffi::MLX5DV_CRYPTO_ENGINES_CAP_AES_XTS_MULTI_BLOCK as u8;
    }
}

bitflags::bitflags! {
    /// `crypto_caps.wrapped_import_method`
    /// (`enum mlx5dv_crypto_wrapped_import_method_caps`): a set bit means
    /// that engine is in wrapped import method and needs wrapped DEKs (and a
    /// crypto login); a clear bit means plaintext DEKs.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct CryptoWrappedImportMethodCaps: u8 {
        /// The AES-XTS engine uses wrapped import.
        const AES_XTS = ffi::MLX5DV_CRYPTO_WRAPPED_IMPORT_METHOD_CAP_AES_XTS as u8;
    }
}

bitflags::bitflags! {
    /// `crypto_caps.flags` (`enum mlx5dv_crypto_caps_flags`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct CryptoCapsFlags: u32 {
        /// Crypto capabilities are enabled on the device.
        const CRYPTO = ffi::MLX5DV_CRYPTO_CAPS_CRYPTO;
        /// Crypto engines in wrapped import method are operational.
        const WRAPPED_CRYPTO_OPERATIONAL = ffi::MLX5DV_CRYPTO_CAPS_WRAPPED_CRYPTO_OPERATIONAL;
        /// After the next firmware reset the device goes back to
        /// commissioning mode ([`WRAPPED_CRYPTO_OPERATIONAL`] will be clear).
        ///
        /// [`WRAPPED_CRYPTO_OPERATIONAL`]: Self::WRAPPED_CRYPTO_OPERATIONAL
        const WRAPPED_CRYPTO_GOING_TO_COMMISSIONING =
            ffi::MLX5DV_CRYPTO_CAPS_WRAPPED_CRYPTO_GOING_TO_COMMISSIONING;
    }
}
