//! Lists the RDMA devices of this machine through the raw API ([`mlx5dv::ffi`]),
//! with each device's first-port state and whether the mlx5 direct-verbs
//! API is available on it (`mlx5dv_is_supported`).
//!
//! ```text
//! cargo run --example list_devices
//! ```
//!
//! Exits with status 2 when the machine has no RDMA device, 1 on any other
//! failure.

use mlx5dv::ffi;
use std::ffi::CStr;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut n = 0;
    // SAFETY: ibv_get_device_list writes the count into `n` and returns a
    // NULL-terminated array, or NULL with errno set.
    let list = unsafe { ffi::ibv_get_device_list(&mut n) };
    if list.is_null() {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ENOSYS) {
            // No RDMA support in this kernel at all: no devices.
            eprintln!("no RDMA devices found (this kernel has no RDMA support)");
            return ExitCode::from(2);
        }
        eprintln!("ibv_get_device_list: {err}");
        return ExitCode::from(1);
    }
    // SAFETY: `list` holds `n` valid device pointers until it is freed below.
    let devices = unsafe { std::slice::from_raw_parts(list, n.max(0) as usize) };
    for &dev in devices {
        describe(dev);
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed exactly once,
    // after the last use of the devices in it.
    unsafe { ffi::ibv_free_device_list(list) };
    if devices.is_empty() {
        eprintln!("no RDMA devices found");
        return ExitCode::from(2);
    }
    ExitCode::SUCCESS
}

fn describe(dev: *mut ffi::ibv_device) {
    // SAFETY: `dev` is a live entry of the device list; the name is a
    // NUL-terminated string owned by it.
    let name = unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) }.to_string_lossy();
    // SAFETY: as above; mlx5dv_is_supported only reads the device.
    let mlx5 = unsafe { ffi::mlx5dv_is_supported(dev) };
    // SAFETY: as above; a NULL return is handled.
    let ctx = unsafe { ffi::ibv_open_device(dev) };
    if ctx.is_null() {
        println!("{name}: cannot open: {}", std::io::Error::last_os_error());
        return;
    }
    let mut port = ffi::ibv_port_attr::default();
    // SAFETY: `ctx` is an open context and `port` a writable ibv_port_attr.
    let rc = unsafe { ffi::___ibv_query_port(ctx, 1, &mut port) };
    let state = if rc == 0 {
        // SAFETY: ibv_port_state_str returns a static string for any value.
        unsafe { CStr::from_ptr(ffi::ibv_port_state_str(port.state)) }.to_string_lossy()
    } else {
        format!("query failed: {}", std::io::Error::from_raw_os_error(rc)).into()
    };
    println!(
        "{name}: port 1 {state}, mlx5 direct verbs: {}",
        if mlx5 { "yes" } else { "no" }
    );
    // SAFETY: `ctx` was opened above and is closed once.
    unsafe { ffi::ibv_close_device(ctx) };
}
