//! The tools the runner puts first in its command's `PATH`: `rdma link
//! show`, which a kernel answers over RDMA netlink (not modelled), prints
//! the device's port as iproute2's `rdma` does; any other `rdma` command
//! fails as `rdma` does when it cannot reach the kernel.

use std::process::Command;

mod common;
use common::{ensure_library, runner, text};

fn sim_sh(script: &str) -> std::process::Output {
    ensure_library();
    Command::new(runner())
        .args(["--", "sh", "-c", script])
        .output()
        .expect("run mlx5-sim")
}

#[test]
fn rdma_link_show_names_the_port() {
    let o = sim_sh("rdma link show -j && rdma link show mlx5_0/1 && rdma link");
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            r#"[{"ifindex":1,"ifname":"mlx5_0","port":1,"state":"ACTIVE","physical_state":"LINK_UP"}]"#,
            "link mlx5_0/1 state ACTIVE physical_state LINK_UP",
            "link mlx5_0/1 state ACTIVE physical_state LINK_UP",
        ],
        "{}",
        text(&o)
    );
}

#[test]
fn other_rdma_commands_fail() {
    let o = sim_sh("rdma dev show; echo status $?; rdma link show mlx5_1; echo status $?");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["status 1", "status 1"],
        "{}",
        text(&o)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("only 'rdma link show' is answered"));
}
