//! The tools a program may run to learn about the device, where the
//! kernel's interface behind them is not modelled: `rdma link show`, which
//! a kernel answers over RDMA netlink (the interposer makes RDMA netlink
//! sockets fail, so that libibverbs discovers the device through sysfs).
//! rdma-core's own tests (release 65 on) call it to find a port's netdev.
//!
//! The runner puts a folder holding an `rdma` script first in CMD's `PATH`:
//! `rdma link show [-j] [mlx5_0[/1]]` prints what iproute2's tool prints
//! for the device's one port (no `netdev`: the RoCE port's netdev, `lo`,
//! is not the port's own, as sysfs's `device/net/` has none either); any
//! other command says it is not answered and exits 1, as `rdma` does when
//! it cannot reach the kernel.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const RDMA: &str = r#"#!/bin/sh
# `rdma link show` for the software mlx5 device (mlx5-sim): RDMA netlink is
# not modelled. What iproute2's rdma prints for its one port.
json=0
args=
for a in "$@"; do
  case $a in
    -j | -json | --json) json=1 ;;
    -p | -pretty | --pretty | -d | -details | --details) ;;
    *) args="$args $a" ;;
  esac
done
set -- $args
case "$1 $2 ${3:-mlx5_0}" in
  "link show mlx5_0" | "link show mlx5_0/1" | "link list mlx5_0" | "link list mlx5_0/1" | \
    "link  mlx5_0")
    if [ $json = 1 ]; then
      echo '[{"ifindex":1,"ifname":"mlx5_0","port":1,"state":"ACTIVE","physical_state":"LINK_UP"}]'
    else
      echo 'link mlx5_0/1 state ACTIVE physical_state LINK_UP'
    fi
    ;;
  *)
    echo "rdma (mlx5-sim): only 'rdma link show' is answered for the software device" >&2
    exit 1
    ;;
esac
"#;

/// Writes the tools into `dir/bin` and returns that folder.
pub fn write(dir: &Path) -> io::Result<PathBuf> {
    let bin = dir.join("bin");
    fs::create_dir_all(&bin)?;
    let rdma = bin.join("rdma");
    fs::write(&rdma, RDMA)?;
    fs::set_permissions(&rdma, fs::Permissions::from_mode(0o755))?;
    Ok(bin)
}
