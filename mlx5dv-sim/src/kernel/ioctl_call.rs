//! One decoded `RDMA_VERBS_IOCTL` call: its attributes, and reading and
//! writing them as the method handlers ([`super::ioctl`], [`super::devx`])
//! do.

use super::bytes::{In, Out};
use super::errno::{refuse, Res};

/// `UVERBS_ATTR_F_VALID_OUTPUT`.
const VALID_OUTPUT: u16 = 2;

/// One attribute of the call, with where it sits in the caller's array.
#[derive(Debug, Clone, Copy)]
pub struct Attr {
    /// Attribute id.
    pub id: u16,
    /// Length (pointer attributes).
    pub len: u16,
    /// The data word (inline data, pointer, or handle).
    pub data: u64,
    /// Where the attribute sits in the caller's array.
    pub(super) slot: u64,
}

/// A decoded ioctl call.
pub struct Call {
    /// The command fd.
    pub fd: i32,
    /// The attributes, as the caller gave them.
    pub(super) attrs: Vec<Attr>,
}

impl Call {
    /// The attribute `id`.
    pub fn attr(&self, id: u16) -> Option<Attr> {
        self.attrs.iter().copied().find(|a| a.id == id)
    }
    /// A PTR_IN attribute's bytes (inline when 8 bytes or fewer).
    pub fn ptr_in(&self, id: u16) -> Res<In> {
        let a = self.attr(id).ok_or_else(|| {
            refuse(
                libc::EINVAL,
                format_args!("ioctl: missing attribute {id:#x}"),
            )
        })?;
        if a.len <= 8 {
            let b = a.data.to_le_bytes();
            return Ok(In(b[..usize::from(a.len)].to_vec()));
        }
        // SAFETY: a PTR_IN attribute longer than 8 bytes points to `len`
        // readable bytes (the uverbs ioctl contract).
        Ok(unsafe { In::copy_from(a.data, usize::from(a.len)) })
    }
    /// Writes a PTR_OUT attribute (cut to its length) and marks it valid.
    pub fn ptr_out(&self, id: u16, out: &Out) -> Res<()> {
        let a = self.attr(id).ok_or_else(|| {
            refuse(
                libc::EINVAL,
                format_args!("ioctl: missing attribute {id:#x}"),
            )
        })?;
        let mut o = out.clone();
        o.0.resize(usize::from(a.len), 0);
        // SAFETY: a PTR_OUT attribute points to `len` writable bytes; the
        // flags word lies in the caller's attribute array.
        unsafe {
            o.copy_to(a.data);
            let flags = (a.slot + 4) as *mut u16;
            flags.write_unaligned(flags.read_unaligned() | VALID_OUTPUT);
        }
        Ok(())
    }
    /// Stores a new object handle into an IDR_NEW attribute's data word.
    pub fn idr_new(&self, id: u16, handle: u32) -> Res<()> {
        let a = self.attr(id).ok_or_else(|| {
            refuse(
                libc::EINVAL,
                format_args!("ioctl: missing attribute {id:#x}"),
            )
        })?;
        // SAFETY: the data word lies in the caller's attribute array.
        unsafe { ((a.slot + 8) as *mut u64).write_unaligned(u64::from(handle)) };
        Ok(())
    }
}
