//! The fake sysfs tree libibverbs discovers `mlx5_0` from (through
//! `SYSFS_PATH`): one ConnectX-6 (PCI 15b3:101b), uverbs0 = 231:192, one
//! IB port, ACTIVE, LID 1.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// The node GUID (matches what QUERY_DEVICE reports).
const NODE_GUID: &str = "0c42:a103:00b1:5e00";

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
    pub fn create() -> io::Result<Self> {
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
        t.fill()?;
        Ok(t)
    }

    /// The tree's root (the value of `SYSFS_PATH`).
    pub fn path(&self) -> &Path {
        &self.root
    }

    fn fill(&self) -> io::Result<()> {
        let r = &self.root;
        let v = "class/infiniband_verbs";
        put(r, &format!("{v}/abi_version"), "6")?;
        put(r, &format!("{v}/uverbs0/ibdev"), "mlx5_0")?;
        put(r, &format!("{v}/uverbs0/dev"), "231:192")?;
        put(r, &format!("{v}/uverbs0/abi_version"), "1")?;
        let d = "class/infiniband/mlx5_0";
        put(r, &format!("{d}/node_type"), "1: CA")?;
        put(r, &format!("{d}/node_guid"), NODE_GUID)?;
        put(r, &format!("{d}/sys_image_guid"), NODE_GUID)?;
        put(r, &format!("{d}/fw_ver"), "20.39.1002")?;
        put(r, &format!("{d}/hca_type"), "MT4123")?;
        put(r, &format!("{d}/hw_rev"), "0x0")?;
        put(r, &format!("{d}/board_id"), "MT_0000000222")?;
        put(r, &format!("{d}/node_desc"), "mlx5dv-sim mlx5_0")?;
        put(
            r,
            &format!("{d}/device/modalias"),
            "pci:v000015B3d0000101Bsv000015B3sd00000008bc02sc07i00",
        )?;
        put(r, &format!("{d}/device/local_cpus"), "ffffffff")?;
        put(r, &format!("{d}/device/vendor"), "0x15b3")?;
        put(r, &format!("{d}/device/device"), "0x101b")?;
        let p = format!("{d}/ports/1");
        put(r, &format!("{p}/state"), "4: ACTIVE")?;
        put(r, &format!("{p}/phys_state"), "5: LinkUp")?;
        put(r, &format!("{p}/lid"), "0x1")?;
        put(r, &format!("{p}/sm_lid"), "0x1")?;
        put(r, &format!("{p}/lid_mask_count"), "0")?;
        put(r, &format!("{p}/link_layer"), "InfiniBand")?;
        put(r, &format!("{p}/rate"), "200 Gb/sec (4X HDR)")?;
        put(r, &format!("{p}/cap_mask"), "0x2651e848")?;
        put(
            r,
            &format!("{p}/gids/0"),
            "fe80:0000:0000:0000:0c42:a103:00b1:5e00",
        )?;
        // As many GIDs and P_Keys as QUERY_PORT reports (8 and 128).
        for i in 1..8 {
            put(
                r,
                &format!("{p}/gids/{i}"),
                "0000:0000:0000:0000:0000:0000:0000:0000",
            )?;
        }
        for i in 0..8 {
            put(r, &format!("{p}/gid_attrs/types/{i}"), "IB/RoCE v1")?;
        }
        put(r, &format!("{p}/pkeys/0"), "0xffff")?;
        for i in 1..128 {
            put(r, &format!("{p}/pkeys/{i}"), "0x0000")?;
        }
        Ok(())
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}
