//! Devices and the device context: listing, opening, attributes, ports and
//! the GID table.

use crate::error::{Error, Result};
use crate::ffi;
use crate::port::{Gid, GidEntry, PortAttr};
use std::ffi::CStr;
use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

/// The RDMA devices of this machine (`ibv_get_device_list(3)`), freed on drop.
pub struct DeviceList {
    list: *mut *mut ffi::ibv_device,
    len: usize,
}

// SAFETY: the list is an immutable array owned by this value; rdma-core's
// device objects are reference counted and safe to use from any thread.
unsafe impl Send for DeviceList {}
// SAFETY: as above; nothing mutates the list through `&self`.
unsafe impl Sync for DeviceList {}

impl DeviceList {
    /// Lists the devices. A kernel without RDMA support (`ENOSYS`) gives an
    /// empty list, not an error.
    pub fn new() -> Result<Self> {
        let mut n = 0;
        // SAFETY: ibv_get_device_list writes the count into `n` and returns
        // a NULL-terminated array or NULL with errno set.
        let list = unsafe { ffi::ibv_get_device_list(&mut n) };
        if list.is_null() {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ENOSYS) {
                return Ok(DeviceList {
                    list: std::ptr::null_mut(),
                    len: 0,
                });
            }
            return Err(Error::last_os("ibv_get_device_list", "listing devices"));
        }
        Ok(DeviceList {
            list,
            len: usize::try_from(n).unwrap_or(0),
        })
    }

    /// How many devices there are.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The devices, in the order rdma-core lists them.
    pub fn iter(&self) -> impl Iterator<Item = Device<'_>> + '_ {
        (0..self.len).map(move |i| Device {
            // SAFETY: `i < len` and the list holds `len` valid pointers.
            ptr: unsafe { *self.list.add(i) },
            _list: PhantomData,
        })
    }

    /// The device with this name.
    pub fn find(&self, name: &str) -> Result<Device<'_>> {
        self.iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| Error::DeviceNotFound {
                name: name.to_string(),
                found: self.names(),
            })
    }

    fn names(&self) -> String {
        let names: Vec<String> = self.iter().map(|d| d.name()).collect();
        if names.is_empty() {
            "none".into()
        } else {
            names.join(", ")
        }
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        if !self.list.is_null() {
            // SAFETY: the list came from ibv_get_device_list and is freed
            // once; opened contexts keep their own references.
            unsafe { ffi::ibv_free_device_list(self.list) };
        }
    }
}

impl fmt::Debug for DeviceList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The kernel name of a device (`ibv_get_device_name`), e.g. `mlx5_0`.
///
/// # Safety
/// `dev` is a live device.
pub(crate) unsafe fn device_name(dev: *mut ffi::ibv_device) -> String {
    // SAFETY: the caller's promise; the name is a NUL-terminated string
    // the device owns.
    unsafe { CStr::from_ptr(ffi::ibv_get_device_name(dev)) }
        .to_string_lossy()
        .into_owned()
}

/// One entry of a [`DeviceList`], valid while the list lives.
#[derive(Clone, Copy)]
pub struct Device<'list> {
    ptr: *mut ffi::ibv_device,
    _list: PhantomData<&'list DeviceList>,
}

impl Device<'_> {
    /// The kernel name, e.g. `mlx5_0` or `rxe0`.
    pub fn name(&self) -> String {
        // SAFETY: `ptr` is a live device.
        unsafe { device_name(self.ptr) }
    }

    /// The node GUID, in host byte order.
    pub fn guid(&self) -> u64 {
        // SAFETY: `ptr` is a live device.
        u64::from_be(unsafe { ffi::ibv_get_device_guid(self.ptr) })
    }

    /// Whether the mlx5 direct-verbs API is available (`mlx5dv_is_supported`).
    pub fn is_mlx5(&self) -> bool {
        // SAFETY: `ptr` is a live device; the call only reads it.
        unsafe { ffi::mlx5dv_is_supported(self.ptr) }
    }

    /// Opens the device (`ibv_open_device(3)`).
    pub fn open(&self) -> Result<Context> {
        let name = self.name();
        // SAFETY: `ptr` is a live device; NULL is handled.
        let ctx = unsafe { ffi::ibv_open_device(self.ptr) };
        let ctx = NonNull::new(ctx).ok_or_else(|| Error::last_os("ibv_open_device", &name))?;
        Ok(Context(Arc::new(ContextInner {
            ctx,
            name,
            mlx5: self.is_mlx5(),
            owned: true,
            _keep: None,
        })))
    }
}

impl fmt::Debug for Device<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name())
            .field("guid", &format_args!("{:016x}", self.guid()))
            .finish()
    }
}

/// An open device (`struct ibv_context`): the root of every other object.
///
/// A cheap, cloneable handle; the device is closed when the last clone and
/// the last object made from it are gone.
#[derive(Clone)]
pub struct Context(pub(crate) Arc<ContextInner>);

pub(crate) struct ContextInner {
    pub(crate) ctx: NonNull<ffi::ibv_context>,
    name: String,
    mlx5: bool,
    owned: bool,
    /// What keeps a context opened elsewhere open (an rdma_cm id on its
    /// device); dropped after the context's last user.
    _keep: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

// SAFETY: ibv_context is safe to use from several threads: rdma-core's
// context calls (queries, object creation) lock internally, and the pointer
// is only closed in Drop, when no handle is left.
unsafe impl Send for ContextInner {}
// SAFETY: as above.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: the context was opened by this crate, every child holds
            // an Arc to it, so none is left; closed once.
            let rc = unsafe { ffi::ibv_close_device(self.ctx.as_ptr()) };
            crate::error::report_destroy_failure("ibv_close_device", rc, &self.name);
        }
    }
}

impl Context {
    /// Opens the device with this name.
    pub fn open(name: &str) -> Result<Self> {
        DeviceList::new()?.find(name)?.open()
    }

    /// Opens the first device rdma-core lists.
    pub fn open_first() -> Result<Self> {
        let list = DeviceList::new()?;
        let dev = list.iter().next().ok_or_else(|| Error::DeviceNotFound {
            name: String::new(),
            found: "none".into(),
        })?;
        dev.open()
    }

    /// Wraps a context opened elsewhere (another crate, or C).
    ///
    /// The handle does not close the context: the caller keeps it open.
    ///
    /// # Safety
    ///
    /// `ctx` must be an open `ibv_context` that stays open until this handle,
    /// all its clones and every object made through them are dropped.
    pub unsafe fn from_raw(ctx: NonNull<ffi::ibv_context>) -> Self {
        // SAFETY: the caller's promise.
        unsafe { Self::from_raw_kept(ctx, None) }
    }

    /// [`from_raw`](Self::from_raw), holding `keep` for as long as the
    /// context has a user.
    ///
    /// # Safety
    ///
    /// `ctx` must be open, and stay open while `keep` lives.
    #[cfg_attr(not(feature = "rdma-cm"), allow(dead_code))]
    pub(crate) unsafe fn from_raw_kept(
        ctx: NonNull<ffi::ibv_context>,
        keep: Option<Arc<dyn std::any::Any + Send + Sync>>,
    ) -> Self {
        // SAFETY: the caller promises `ctx` is open; its device pointer is
        // valid while it is.
        let dev = unsafe { (*ctx.as_ptr()).device };
        // SAFETY: as above.
        let name = unsafe { device_name(dev) };
        // SAFETY: as above.
        let mlx5 = unsafe { ffi::mlx5dv_is_supported(dev) };
        Context(Arc::new(ContextInner {
            ctx,
            name,
            mlx5,
            owned: false,
            _keep: keep,
        }))
    }

    /// A context over a fake `ibv_context`, for the recording-provider
    /// tests: nothing is read from it or closed.
    #[cfg(test)]
    pub(crate) fn fake(ctx: NonNull<ffi::ibv_context>, name: &str, mlx5: bool) -> Self {
        Context(Arc::new(ContextInner {
            ctx,
            name: name.into(),
            mlx5,
            owned: false,
            _keep: None,
        }))
    }

    /// The raw context, for calls this crate does not wrap. It stays valid
    /// while this handle lives.
    pub fn as_ptr(&self) -> *mut ffi::ibv_context {
        self.0.ctx.as_ptr()
    }

    /// The device name, e.g. `mlx5_0` or `rxe0`.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Whether the mlx5 direct-verbs API is available on this device.
    pub fn is_mlx5(&self) -> bool {
        self.0.mlx5
    }

    /// The device's attributes (`ibv_query_device_ex(3)`).
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let mut attr = ffi::ibv_device_attr_ex::default();
        // SAFETY: the context is open; `attr` is writable and the input may
        // be NULL.
        let rc = unsafe { ffi::ibv_query_device_ex(self.as_ptr(), std::ptr::null(), &mut attr) };
        crate::error::check(rc, "ibv_query_device_ex", || self.name().to_string())?;
        Ok(DeviceAttr::from_raw(&attr))
    }

    /// The attributes of a port, numbered from 1 (`ibv_query_port(3)`).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        let mut attr = ffi::ibv_port_attr::default();
        // SAFETY: the context is open and `attr` is writable; a port number
        // the device lacks fails with EINVAL.
        let rc = unsafe { ffi::___ibv_query_port(self.as_ptr(), port, &mut attr) };
        crate::error::check(rc, "ibv_query_port", || {
            format!("{} port {port}", self.name())
        })?;
        Ok(PortAttr::from_raw(port, &attr))
    }

    /// The GID table of every port (`ibv_query_gid_table(3)`): index,
    /// port, type (IB, RoCE v1, RoCE v2) and the GID.
    pub fn gid_table(&self) -> Result<Vec<GidEntry>> {
        let dev = self.query_device()?;
        let mut max = 0usize;
        for port in 1..=dev.phys_port_cnt {
            let attr = self.query_port(port)?;
            max += usize::try_from(attr.gid_tbl_len).unwrap_or(0);
        }
        let mut entries = vec![ffi::ibv_gid_entry::default(); max.max(1)];
        // SAFETY: `entries` has room for `entries.len()` entries; the call
        // writes at most that many and returns how many it wrote.
        let n = unsafe {
            ffi::ibv_query_gid_table(self.as_ptr(), entries.as_mut_ptr(), entries.len(), 0)
        };
        if n < 0 {
            return Err(Error::verbs(
                "ibv_query_gid_table",
                i32::try_from(n).unwrap_or(libc::EIO),
                self.name(),
            ));
        }
        entries.truncate(usize::try_from(n).unwrap_or(0));
        Ok(entries.iter().map(GidEntry::from_raw).collect())
    }

    /// One GID (`ibv_query_gid(3)`).
    pub fn gid(&self, port: u8, index: u32) -> Result<Gid> {
        let mut gid = ffi::ibv_gid::default();
        let idx = i32::try_from(index).map_err(|_| Error::OutOfRange {
            what: "GID index",
            value: u64::from(index),
            limit: format!("at most {}", i32::MAX),
        })?;
        // SAFETY: the context is open and `gid` writable; a bad port or
        // index fails with an error code.
        let rc = unsafe { ffi::ibv_query_gid(self.as_ptr(), port, idx, &mut gid) };
        if rc != 0 {
            // ibv_query_gid(3) returns -1 and sets errno.
            return Err(Error::last_os(
                "ibv_query_gid",
                format!("{} port {port} index {index}", self.name()),
            ));
        }
        // SAFETY: every bit pattern of the union is a valid 16-byte array.
        Ok(Gid(unsafe { gid.raw }))
    }
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("name", &self.name())
            .field("mlx5", &self.is_mlx5())
            .finish()
    }
}

/// The device attributes this crate uses (`struct ibv_device_attr_ex`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: String,
    /// Node GUID (host byte order).
    pub node_guid: u64,
    /// Physical ports, numbered 1..=phys_port_cnt.
    pub phys_port_cnt: u8,
    /// IEEE vendor id (0xffffff for soft-RoCE).
    pub vendor_id: u32,
    /// The vendor's part id.
    pub vendor_part_id: u32,
    /// Most QPs.
    pub max_qp: u32,
    /// Most outstanding WRs per queue.
    pub max_qp_wr: u32,
    /// Most SGEs per WR.
    pub max_sge: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most entries per CQ.
    pub max_cqe: u32,
    /// Most MRs.
    pub max_mr: u32,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Most PDs.
    pub max_pd: u32,
    /// Most outstanding RDMA reads/atomics a QP may be the target of.
    pub max_qp_rd_atom: u32,
    /// Most outstanding RDMA reads/atomics a QP may issue.
    pub max_qp_init_rd_atom: u32,
    /// Whether atomics are supported (`atomic_cap != IBV_ATOMIC_NONE`).
    pub atomics: bool,
    /// Most SRQs.
    pub max_srq: u32,
}

impl DeviceAttr {
    fn from_raw(a: &ffi::ibv_device_attr_ex) -> Self {
        let o = &a.orig_attr;
        let fw: Vec<u8> = o
            .fw_ver
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        let u = |v: i32| u32::try_from(v).unwrap_or(0);
        DeviceAttr {
            fw_ver: String::from_utf8_lossy(&fw).into_owned(),
            node_guid: u64::from_be(o.node_guid),
            phys_port_cnt: o.phys_port_cnt,
            vendor_id: o.vendor_id,
            vendor_part_id: o.vendor_part_id,
            max_qp: u(o.max_qp),
            max_qp_wr: u(o.max_qp_wr),
            max_sge: u(o.max_sge),
            max_cq: u(o.max_cq),
            max_cqe: u(o.max_cqe),
            max_mr: u(o.max_mr),
            max_mr_size: o.max_mr_size,
            max_pd: u(o.max_pd),
            max_qp_rd_atom: u(o.max_qp_rd_atom),
            max_qp_init_rd_atom: u(o.max_qp_init_rd_atom),
            atomics: o.atomic_cap != ffi::IBV_ATOMIC_NONE,
            max_srq: u(o.max_srq),
        }
    }
}
