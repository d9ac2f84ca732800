//! The device's configuration, read once from the environment.
//!
//! Every variable is documented in the crate's README ("Environment").

use std::sync::OnceLock;

/// A command the fake kernel refuses on purpose (fault injection).
#[derive(Debug, Clone)]
pub struct FailCmd {
    /// The command's name as the debug log spells it (`CREATE_QP`, `DEVX_CREATE_MKEY`, ...).
    pub name: String,
    /// The errno returned.
    pub errno: i32,
}

/// An error completion forced on one WQE (fault injection).
#[derive(Debug, Clone, Copy)]
pub struct FailWqe {
    /// 1-based number of the WQE, counted over the whole device in execution order.
    pub nth: u64,
    /// The syndrome of the error CQE.
    pub syndrome: u8,
}

/// What the environment asked for.
#[derive(Debug, Clone)]
pub struct Config {
    /// `MLX5DV_SIM`: the device is present (else every call passes through).
    pub enabled: bool,
    /// `MLX5DV_SIM_DEBUG`: log every command and every refusal on stderr.
    pub debug: bool,
    /// `MLX5DV_SIM_TRACE`: file that receives every executed WQE.
    pub trace: Option<String>,
    /// `MLX5DV_SIM_THREAD` (default 1): run the free-running device thread.
    pub thread: bool,
    /// `MLX5DV_SIM_POLL_US` (default 20): the device thread's idle poll period.
    pub poll_us: u64,
    /// `MLX5DV_SIM_DMA_MMO` (default 1): report `dma_mmo_sq`/`dma_mmo_qp`.
    pub dma_mmo: bool,
    /// `MLX5DV_SIM_LOG_DMA_MMO_MAX_SIZE` (default 0, which means 2 GiB).
    pub log_dma_mmo_max_size: u8,
    /// `MLX5DV_SIM_DCI_STREAMS` = `CONC,ERR` (default `4,3`): the logs of the
    /// most concurrent and errored DCI streams; `0,0` disables DCI streams.
    pub dci_streams: (u8, u8),
    /// `MLX5DV_SIM_QPC_EXTENSION` (default 1).
    pub qpc_extension: bool,
    /// `MLX5DV_SIM_MAX_INLINE` (default 1008): the largest `max_inline_data`
    /// the device accepts at QP creation.
    pub max_inline: u32,
    /// `MLX5DV_SIM_MKEY_MAX_ENTRIES` (default 1024): the most translation
    /// entries of a DEVX CREATE_MKEY.
    pub mkey_max_entries: u32,
    /// `MLX5DV_SIM_FAIL_WQE` = `N:SYNDROME`.
    pub fail_wqe: Option<FailWqe>,
    /// `MLX5DV_SIM_FAIL_CMD` = `NAME:ERRNO[,NAME:ERRNO...]`.
    pub fail_cmd: Vec<FailCmd>,
    /// `MLX5DV_SIM_FAIL_CQ_OVERRUN` = `N`: the N-th CQE written overruns its CQ.
    pub fail_cq_overrun: Option<u64>,
    /// `MLX5DV_SIM_FABRIC`: the name of the fabric this process's device
    /// joins (the runner sets one per run); unset: a fabric of its own.
    pub fabric: Option<String>,
    /// `MLX5DV_SIM_ROCE` (default 0): port 1 is an Ethernet (RoCE) port.
    pub roce: bool,
    /// `MLX5DV_SIM_MIN_ACK_TIMEOUT_MS` (default 50): the least a requester
    /// waits for a remote answer before it retries.
    pub min_ack_timeout_ms: u64,
    /// `SYSFS_PATH`: the sysfs tree libibverbs reads (its per-host files
    /// are answered by the device).
    pub sysfs: Option<String>,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn flag(name: &str, default: bool) -> bool {
    match var(name).as_deref() {
        None => default,
        Some("0" | "no" | "false" | "off") => false,
        Some(_) => true,
    }
}

fn num<T: std::str::FromStr>(name: &str, default: T) -> T {
    match var(name) {
        None => default,
        Some(v) => v.parse().unwrap_or_else(|_| {
            eprintln!("mlx5dv-sim: {name}={v} is not a number; using the default");
            default
        }),
    }
}

fn parse_int(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

impl Config {
    /// Reads the environment.
    pub fn from_env() -> Self {
        let dci_streams = var("MLX5DV_SIM_DCI_STREAMS")
            .and_then(|v| {
                let (a, b) = v.split_once(',')?;
                Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
            })
            .unwrap_or((4, 3));
        let fail_wqe = var("MLX5DV_SIM_FAIL_WQE").and_then(|v| {
            let (n, s) = v.split_once(':')?;
            Some(FailWqe {
                nth: parse_int(n)?,
                syndrome: u8::try_from(parse_int(s)?).ok()?,
            })
        });
        let fail_cmd = var("MLX5DV_SIM_FAIL_CMD")
            .map(|v| {
                v.split(',')
                    .filter_map(|item| {
                        let (n, e) = item.split_once(':')?;
                        Some(FailCmd {
                            name: n.trim().to_ascii_uppercase(),
                            errno: i32::try_from(parse_int(e)?).ok()?,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            enabled: flag("MLX5DV_SIM", false),
            debug: flag("MLX5DV_SIM_DEBUG", false),
            trace: var("MLX5DV_SIM_TRACE"),
            thread: flag("MLX5DV_SIM_THREAD", true),
            poll_us: num("MLX5DV_SIM_POLL_US", 20),
            dma_mmo: flag("MLX5DV_SIM_DMA_MMO", true),
            log_dma_mmo_max_size: num("MLX5DV_SIM_LOG_DMA_MMO_MAX_SIZE", 0),
            dci_streams,
            qpc_extension: flag("MLX5DV_SIM_QPC_EXTENSION", true),
            max_inline: num("MLX5DV_SIM_MAX_INLINE", 1008),
            mkey_max_entries: num("MLX5DV_SIM_MKEY_MAX_ENTRIES", 1024),
            fail_wqe,
            fail_cmd,
            fail_cq_overrun: var("MLX5DV_SIM_FAIL_CQ_OVERRUN").and_then(|v| parse_int(&v)),
            fabric: var("MLX5DV_SIM_FABRIC"),
            roce: flag("MLX5DV_SIM_ROCE", false),
            min_ack_timeout_ms: num("MLX5DV_SIM_MIN_ACK_TIMEOUT_MS", 50),
            sysfs: var("SYSFS_PATH"),
        }
    }

    /// The errno to refuse command `name` with, if fault injection asks so.
    pub fn injected_failure(&self, name: &str) -> Option<i32> {
        self.fail_cmd
            .iter()
            .find(|f| f.name == name)
            .map(|f| f.errno)
    }
}

/// The process-wide configuration (read on first use).
pub fn get() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(Config::from_env)
}

/// Logs a line on stderr when `MLX5DV_SIM_DEBUG` is set.
macro_rules! debug {
    ($($arg:tt)*) => {
        if $crate::config::get().debug {
            eprintln!("mlx5dv-sim: {}", format_args!($($arg)*));
        }
    };
}
pub(crate) use debug;

#[cfg(test)]
mod tests {
    use super::parse_int;

    #[test]
    fn numbers_in_decimal_and_hex() {
        assert_eq!(parse_int("12"), Some(12));
        assert_eq!(parse_int(" 0x13 "), Some(0x13));
        assert_eq!(parse_int("x"), None);
    }
}
