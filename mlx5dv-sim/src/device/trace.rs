//! The trace (`MLX5DV_SIM_TRACE=FILE`): one line per WQE the device runs,
//! `wqe qpn=0x.. idx=N bytes=<hex of the linearised WQE>`, and one per CQE
//! it writes, `cqe cqn=0x.. n=N bytes=<hex of the 64-byte CQE>`, in the
//! order they happen, so tests can assert what reached the device and what
//! it answered, byte for byte.

use crate::config;
use std::io::Write;
use std::sync::Mutex;

static FILE: Mutex<Option<std::fs::File>> = Mutex::new(None);

fn line(args: std::fmt::Arguments<'_>, bytes: &[u8]) {
    let Some(path) = config::get().trace.as_deref() else {
        return;
    };
    let mut f = FILE.lock().unwrap_or_else(|e| e.into_inner());
    if f.is_none() {
        *f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok();
    }
    if let Some(f) = f.as_mut() {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let _ = writeln!(f, "{args} bytes={hex}");
    }
}

/// Appends one WQE to the trace, if tracing.
pub fn wqe(qpn: u32, idx: u16, bytes: &[u8]) {
    line(format_args!("wqe qpn={qpn:#x} idx={idx}"), bytes);
}

/// Appends one CQE (the `n`-th of CQ `cqn`) to the trace, if tracing.
pub fn cqe(cqn: u32, n: u32, bytes: &[u8; 64]) {
    line(format_args!("cqe cqn={cqn:#x} n={n}"), bytes);
}
