//! `mlx5-sim`: runs a command with the software mlx5 device present as
//! `mlx5_0`.
//!
//! ```text
//! mlx5-sim [--roce] [--] CMD [ARGS...]
//! ```
//!
//! Every process of CMD's tree that opens the device is a host on one
//! fabric (named in `MLX5DV_SIM_FABRIC`, unique to this run): its own
//! LID, GUID and GIDs, and it reaches the others' QPs as through a switch.
//! With `--roce` (or `MLX5DV_SIM_ROCE=1`) port 1 is an Ethernet port with
//! RoCE v1 and v2 GIDs instead of an InfiniBand port.
//!
//! Writes a sysfs tree for one ConnectX-6 into a fresh directory under
//! `$TMPDIR`, starts CMD with `LD_PRELOAD` naming the interposer library
//! (`MLX5DV_SIM_LIB`, or the copy built into this runner: see `library`),
//! `SYSFS_PATH` naming the tree, `MLX5DV_SIM=1` and `PATH` beginning with
//! the runner's tools (`rdma link show`: see `tools`), waits for it, removes
//! the tree and exits with CMD's status (128 + N when a signal N ended it).
//! This runner itself does not load the interposer. SIGINT, SIGTERM,
//! SIGHUP and SIGQUIT sent to it are passed on to CMD.
//!
//! ## Module map
//!
//! Lowest first; each module uses only those of its own line or of an
//! earlier one, a lower layer (`cargo run -p module-stack` checks it).
//!
//! 1. `library`, `sysfs`, `tools`: the interposer library it names, the
//!    sysfs tree it writes, the tools it puts first in CMD's `PATH` (none
//!    uses another).

mod library;
mod sysfs;
mod tools;

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};

/// The command's pid, for the signal forwarder (0: none yet).
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe; `pid` is our child.
        unsafe { libc::kill(pid, sig) };
    }
}

/// Passes SIGINT, SIGTERM, SIGHUP and SIGQUIT on to the command instead of
/// dying of them, so that the runner outlives it and removes the tree.
fn forward_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: installing a handler that only calls kill(2) and reads
        // an atomic, both async-signal-safe.
        unsafe {
            libc::signal(
                sig,
                forward as extern "C" fn(libc::c_int) as libc::sighandler_t,
            )
        };
    }
}

const USAGE: &str = "\
Usage: mlx5-sim [--roce] [--] CMD [ARGS...]

Runs CMD with a software mlx5 device (ConnectX-6, mlx5_0) that the real
libibverbs and libmlx5 drive in-process. Every process of CMD's tree that
opens it is a host on one fabric: two programs (a server and a client)
talk to each other through it as through a switch.

Options:
  --roce      port 1 is Ethernet (RoCE v1 and v2 GIDs) instead of InfiniBand
  -h, --help  this text

See mlx5dv-sim/README.md for the MLX5DV_SIM_* variables (caps, tracing,
fault injection).";

/// A name no other run on this machine uses: this runner's pid and the
/// time it started.
fn fabric_name() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{t:x}", std::process::id())
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut roce = std::env::var("MLX5DV_SIM_ROCE").is_ok_and(|v| v == "1");
    loop {
        match args.first().map(String::as_str) {
            Some("-h" | "--help") => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            Some("--roce") => {
                roce = true;
                args.remove(0);
            }
            Some("--") => {
                args.remove(0);
                break;
            }
            Some(o) if o.starts_with('-') => {
                eprintln!("mlx5-sim: unknown option {o}\n{USAGE}");
                return ExitCode::from(2);
            }
            _ => break,
        }
    }
    if args.is_empty() {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    }
    let lib = match library::find() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("mlx5-sim: {e}");
            return ExitCode::from(125);
        }
    };
    let tree = match sysfs::Tree::create(roce) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("mlx5-sim: cannot write the sysfs tree: {e}");
            return ExitCode::from(125);
        }
    };
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(p) if !p.is_empty() => format!("{}:{p}", lib.path().display()),
        _ => lib.path().display().to_string(),
    };
    let path = match tools::write(tree.path()) {
        Ok(bin) => match std::env::var_os("PATH") {
            Some(p) => {
                let mut dirs = vec![bin];
                dirs.extend(std::env::split_paths(&p));
                std::env::join_paths(dirs).unwrap_or(p)
            }
            None => bin.into_os_string(),
        },
        Err(e) => {
            eprintln!("mlx5-sim: cannot write its tools: {e}");
            return ExitCode::from(125);
        }
    };
    let mut cmd = Command::new(&args[0]);
    cmd.args(&args[1..])
        .env("PATH", path)
        .env("LD_PRELOAD", preload)
        .env("SYSFS_PATH", tree.path())
        .env("MLX5DV_SIM", "1")
        .env("MLX5DV_SIM_FABRIC", fabric_name())
        .env("MLX5DV_SIM_ROCE", if roce { "1" } else { "0" });
    if std::env::var_os("MLX5_STALL_CQ_POLL").is_none() {
        cmd.env("MLX5_STALL_CQ_POLL", "0");
    }
    let status = cmd.spawn().and_then(|mut child| {
        CHILD.store(child.id() as i32, Ordering::Relaxed);
        forward_signals();
        child.wait()
    });
    drop(tree);
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => ExitCode::from(c as u8),
            (None, Some(sig)) => ExitCode::from(128u8.wrapping_add(sig as u8)),
            _ => ExitCode::from(125),
        },
        Err(e) => {
            eprintln!("mlx5-sim: cannot run {}: {e}", args[0]);
            ExitCode::from(if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            })
        }
    }
}
