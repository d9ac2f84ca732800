//! The fake sysfs tree libibverbs discovers `mlx5_0` from (through
//! `SYSFS_PATH`): one ConnectX-6 (PCI 15b3:101b), uverbs0 = 231:192, one
//! port, ACTIVE: InfiniBand, or Ethernet (RoCE) with `roce`. The tree is
//! shared by every process of the run; the files that differ between the
//! hosts of the fabric (node GUID, LID, GIDs) are answered by each
//! process's device when it opens them, and hold a host-less placeholder
//! here.
//!
//! Laid out as the kernel lays it out: the device's directories live in its
//! PCI function's directory (`devices/pci0000:00/0000:00:02.0/0000:03:00.0/`,
//! which holds the function's `vendor`, `device`, `modalias`, ...), and
//! `class/infiniband/mlx5_0` and `class/infiniband_verbs/uverbs0` are
//! symbolic links to them, each with a `device` link back to the function.
//! UCX finds the function by resolving the class link (`realpath`) and
//! reads the PCI ids there, by which it knows the device for a ConnectX-6.

use std::fs;
use std::io;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// The netdev every RoCE GID names (it exists on every Linux host).
const ROCE_NETDEV: &str = "lo";

/// The placeholder of the per-host node GUID.
const NODE_GUID: &str = "0c42:a103:00b1:0000";

/// The PCI function's directory, relative to the tree's root.
const PCI_FUNCTION: &str = "devices/pci0000:00/0000:00:02.0/0000:03:00.0";

/// A sysfs tree in a temporary directory, removed on drop.
pub struct Tree {
    root: PathBuf,
}

fn put(root: &Path, rel: &str, content: &str) -> io::Result<()> {
    let p = root.join(rel);
    if let Some(d) = p.parent() {
        fs::create_dir_all(d)?;
    }
    fs::write(p, format!("{content}\n"))
}

impl Tree {
    /// Writes the tree under `$TMPDIR/mlx5dv-sim.<pid>.<n>`.
    pub fn create(roce: bool) -> io::Result<Self> {
        let base = std::env::temp_dir();
        let mut n = 0u32;
        let root = loop {
            let r = base.join(format!("mlx5dv-sim.{}.{n}", std::process::id()));
            match fs::create_dir(&r) {
                Ok(()) => break r,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(e),
            }
        };
        let t = Self { root };
        t.fill(roce)?;
        Ok(t)
    }

    /// The tree's root (the value of `SYSFS_PATH`).
    pub fn path(&self) -> &Path {
        &self.root
    }

    fn fill(&self, roce: bool) -> io::Result<()> {
        let r = &self.root;
        let f = PCI_FUNCTION;
        put(r, &format!("{f}/vendor"), "0x15b3")?;
        put(r, &format!("{f}/device"), "0x101b")?;
        put(r, &format!("{f}/subsystem_vendor"), "0x15b3")?;
        put(r, &format!("{f}/subsystem_device"), "0x0008")?;
        put(r, &format!("{f}/class"), "0x020700")?;
        put(
            r,
            &format!("{f}/modalias"),
            "pci:v000015B3d0000101Bsv000015B3sd00000008bc02sc07i00",
        )?;
        put(r, &format!("{f}/local_cpus"), "ffffffff")?;
        put(r, &format!("{f}/numa_node"), "-1")?;
        put(r, &format!("{f}/current_link_width"), "16")?;
        put(r, &format!("{f}/current_link_speed"), "16.0 GT/s PCIe")?;
        let v = "class/infiniband_verbs";
        put(r, &format!("{v}/abi_version"), "6")?;
        let u = format!("{f}/infiniband_verbs/uverbs0");
        put(r, &format!("{u}/ibdev"), "mlx5_0")?;
        put(r, &format!("{u}/dev"), "231:192")?;
        put(r, &format!("{u}/abi_version"), "1")?;
        link(r, &u, &format!("{v}/uverbs0"))?;
        link(r, f, &format!("{u}/device"))?;
        let d = format!("{f}/infiniband/mlx5_0");
        put(r, &format!("{d}/node_type"), "1: CA")?;
        put(r, &format!("{d}/node_guid"), NODE_GUID)?;
        put(r, &format!("{d}/sys_image_guid"), NODE_GUID)?;
        put(r, &format!("{d}/fw_ver"), "20.39.1002")?;
        put(r, &format!("{d}/hca_type"), "MT4123")?;
        put(r, &format!("{d}/hw_rev"), "0x0")?;
        put(r, &format!("{d}/board_id"), "MT_0000000222")?;
        put(r, &format!("{d}/node_desc"), "mlx5dv-sim mlx5_0")?;
        link(r, &d, "class/infiniband/mlx5_0")?;
        link(r, f, &format!("{d}/device"))?;
        let p = format!("{d}/ports/1");
        put(r, &format!("{p}/state"), "4: ACTIVE")?;
        put(r, &format!("{p}/phys_state"), "5: LinkUp")?;
        put(r, &format!("{p}/lid"), "0x0")?;
        put(r, &format!("{p}/sm_lid"), if roce { "0x0" } else { "0x1" })?;
        put(r, &format!("{p}/lid_mask_count"), "0")?;
        if roce {
            put(r, &format!("{p}/link_layer"), "Ethernet")?;
            put(r, &format!("{p}/rate"), "100 Gb/sec (2X HDR)")?;
            put(r, &format!("{p}/cap_mask"), "0x04010000")?;
        } else {
            put(r, &format!("{p}/link_layer"), "InfiniBand")?;
            put(r, &format!("{p}/rate"), "200 Gb/sec (4X HDR)")?;
            put(r, &format!("{p}/cap_mask"), "0x2651e848")?;
        }
        // As many GIDs and P_Keys as QUERY_PORT reports (8 and 128). The
        // GIDs' values are per host (see the module docs); their types and
        // netdevs are the same on every host: on RoCE, RoCE v1 and v2 of
        // the link-local address (0, 1) and of the IPv4 address (2, 3).
        for i in 0..8 {
            put(
                r,
                &format!("{p}/gids/{i}"),
                "0000:0000:0000:0000:0000:0000:0000:0000",
            )?;
        }
        for i in 0..8 {
            let ty = if roce && i % 2 == 1 {
                "RoCE v2"
            } else {
                "IB/RoCE v1"
            };
            put(r, &format!("{p}/gid_attrs/types/{i}"), ty)?;
            if roce && i < 4 {
                put(r, &format!("{p}/gid_attrs/ndevs/{i}"), ROCE_NETDEV)?;
            }
        }
        put(r, &format!("{p}/pkeys/0"), "0xffff")?;
        for i in 1..128 {
            put(r, &format!("{p}/pkeys/{i}"), "0x0000")?;
        }
        Ok(())
    }
}

/// Makes `link` (relative to `root`) a symbolic link to `target` (relative
/// to `root` too), written relative to the link's directory as the kernel
/// writes its links (`../../devices/...`), so the tree can move.
fn link(root: &Path, target: &str, link: &str) -> io::Result<()> {
    let dir = Path::new(link).parent().unwrap_or(Path::new(""));
    fs::create_dir_all(root.join(dir))?;
    let up = dir.components().count();
    symlink(format!("{}{target}", "../".repeat(up)), root.join(link))
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}
