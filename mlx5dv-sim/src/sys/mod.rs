//! The lowest layer: the process's own system calls, reached without the
//! interposer ([`real`]: libc's definitions of the functions the
//! interposer replaces), and raw reads of the memory the program shares
//! with the device ([`raw`]). Nothing here knows the device.

pub mod raw;
pub mod real;
