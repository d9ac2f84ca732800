//! The one lock over the device: every context of the process, the
//! commands of the fake kernel and the device engine take it.

use super::state::Device;
use std::sync::{Mutex, MutexGuard, OnceLock};

fn device_cell() -> &'static Mutex<Device> {
    static DEV: OnceLock<Mutex<Device>> = OnceLock::new();
    DEV.get_or_init(|| Mutex::new(Device::default()))
}

/// Locks the device (a poisoned lock is taken over: the state stays usable).
pub fn lock() -> MutexGuard<'static, Device> {
    device_cell().lock().unwrap_or_else(|e| e.into_inner())
}
