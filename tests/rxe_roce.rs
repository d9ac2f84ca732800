//! RoCE addressing on an Ethernet port, without rdma_cm: which GID table
//! entry `Context::default_gid_index`, `gid_index_for_ip` and
//! `gid_index_for_netdev` choose, checked against the address and the
//! network interface the port is known to have, their refusals (each
//! with the table and the fix), a connection made from that entry
//! carrying data, and one without a GID refused before any change.
//!
//! Where the address and interface come from: `MLX5DV_TEST_CM_ADDR` (else
//! the soft-RoCE guest's `MLX5DV_VM_ADDR`) and `MLX5DV_TEST_NETDEV` (else
//! `MLX5DV_VM_NETDEV`); on the software mlx5 device (`scripts/mlx5-sim
//! --roce`, which sets `MLX5DV_SIM=1`) its documented scheme: host `N`
//! of the fabric is `10.77.N/256.N%256`, `N` being the low 16 bits of its
//! node GUID, on the netdev `lo`.
//!
//! On an InfiniBand port there is nothing to test: each test reports the
//! missing capability (`support::hw::missing_capability`: a failure,
//! unless `MLX5DV_TEST_ALLOW_MISSING_CAPS=1` makes it a line saying
//! "SKIPPED, NOT RUN").
//!
//! Run by `scripts/test` in the guest with `MLX5DV_TEST_DEVICE=rxe0`; on
//! the software device under `scripts/mlx5-sim --roce` with
//! `MLX5DV_TEST_DEVICE=mlx5_0`.

mod support;

use mlx5dv::*;
use std::net::{IpAddr, Ipv4Addr};
use support::{hw, rig};

/// The device, if its port 1 is Ethernet; else `None` after
/// [`hw::missing_capability`].
fn roce_device() -> Option<Context> {
    let ctx = rig::open();
    let layer = ctx.query_port(1).expect("query port 1").link_layer;
    if layer != LinkLayer::Ethernet {
        hw::missing_capability(
            ctx.name(),
            format_args!("an Ethernet (RoCE) port 1 (its link layer is {layer:?})"),
        );
        return None;
    }
    Some(ctx)
}

/// Whether this runs on the software mlx5 device.
fn on_the_software_device() -> bool {
    std::env::var("MLX5DV_SIM").as_deref() == Ok("1")
}

/// The port's IPv4 address, as known outside the GID table.
fn address(ctx: &Context) -> IpAddr {
    for var in ["MLX5DV_TEST_CM_ADDR", "MLX5DV_VM_ADDR"] {
        if let Ok(a) = std::env::var(var) {
            return a
                .parse()
                .unwrap_or_else(|_| panic!("{var}={a:?} is no IP address"));
        }
    }
    assert!(
        on_the_software_device(),
        "the device's IPv4 address is unknown: set MLX5DV_TEST_CM_ADDR"
    );
    let host = (ctx.query_device().expect("query device").node_guid & 0xffff) as u16;
    let [hi, lo] = host.to_be_bytes();
    IpAddr::V4(Ipv4Addr::new(10, 77, hi, lo))
}

/// The network interface the port sits on.
fn netdev() -> String {
    for var in ["MLX5DV_TEST_NETDEV", "MLX5DV_VM_NETDEV"] {
        if let Ok(n) = std::env::var(var) {
            return n;
        }
    }
    assert!(
        on_the_software_device(),
        "the device's network interface is unknown: set MLX5DV_TEST_NETDEV"
    );
    "lo".into()
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn the_gid_of_the_ports_ipv4_address_is_found_by_address_by_netdev_and_by_default() {
    let Some(ctx) = roce_device() else {
        return;
    };
    let (ip, netdev) = (address(&ctx), netdev());
    let by_ip = ctx
        .gid_index_for_ip(1, ip, GidType::RoceV2)
        .unwrap_or_else(|e| panic!("the RoCE v2 GID of {ip}: {e}"));
    let table = ctx.gid_table().expect("GID table");
    println!("{ip} on {netdev}: RoCE v2 GID index {by_ip}; {table:?}");
    let entry = table
        .iter()
        .find(|e| e.port == 1 && e.index == u32::from(by_ip))
        .expect("the entry in the table");
    assert_eq!(entry.gid_type, GidType::RoceV2, "{entry:?}");
    assert_eq!(entry.gid.to_string(), format!("::ffff:{ip}"), "{entry:?}");
    assert_eq!(ctx.gid(1, u32::from(by_ip)).unwrap(), entry.gid);

    // The default on RoCE: the RoCE v2 GID of the IPv4 address.
    assert_eq!(ctx.default_gid_index(1).unwrap(), Some(by_ip));
    // By the interface: of its RoCE v2 entries, the IPv4-mapped one.
    assert_eq!(
        ctx.gid_index_for_netdev(1, &netdev, GidType::RoceV2)
            .unwrap(),
        by_ip
    );
    // A RoCE v1 entry of the same address, where the port has one, is
    // another index of the same GID.
    if let Ok(v1) = ctx.gid_index_for_ip(1, ip, GidType::RoceV1) {
        assert_ne!(v1, by_ip);
        assert_eq!(ctx.gid(1, u32::from(v1)).unwrap(), entry.gid);
        assert_eq!(
            ctx.gid_index_for_netdev(1, &netdev, GidType::RoceV1)
                .unwrap(),
            v1
        );
    } else {
        assert!(
            !on_the_software_device(),
            "the software device has RoCE v1 entries"
        );
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn an_address_or_netdev_the_port_lacks_is_refused_with_the_table_and_the_fix() {
    let Some(ctx) = roce_device() else {
        return;
    };
    let ip = address(&ctx);
    let e = ctx
        .gid_index_for_ip(1, "192.0.2.77".parse().unwrap(), GidType::RoceV2)
        .unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, Error::InvalidArgument(_)), "{text}");
    assert!(text.contains("ip addr add"), "{text}");
    assert!(
        text.contains(&format!("::ffff:{ip}")),
        "lists the table: {text}"
    );
    let e = ctx
        .gid_index_for_netdev(1, "nosuchif0", GidType::RoceV2)
        .unwrap_err();
    assert!(e.to_string().contains("nosuchif0"), "{e}");
    // An interface that exists but is not the port's (`lo`, unless it is:
    // on the software device).
    if netdev() != "lo" {
        let e = ctx
            .gid_index_for_netdev(1, "lo", GidType::RoceV2)
            .unwrap_err();
        assert!(e.to_string().contains("rdma link"), "{e}");
    }
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_roce_connection_without_a_gid_is_refused_with_the_fix() {
    let Some(ctx) = roce_device() else {
        return;
    };
    let index = ctx
        .default_gid_index(1)
        .unwrap()
        .expect("RoCE: a GID index");
    let pd = ProtectionDomain::new(&ctx).unwrap();
    let a = rig::side(&ctx, &pd, QpCaps::default(), SendOps::rc_default());
    let b = rig::side(&ctx, &pd, QpCaps::default(), SendOps::rc_default());
    let no_gid = rig::connect_options(&ctx).gid_index(None);
    for e in [
        a.qp.endpoint(1, &no_gid).unwrap_err(),
        a.qp.connect(
            &Endpoint {
                qpn: b.qp.qp_num(),
                psn: 2,
                lid: 0,
                gid: Gid::default(),
            },
            1,
            &no_gid,
        )
        .unwrap_err(),
    ] {
        let text = e.to_string();
        assert!(matches!(e, Error::InvalidArgument(_)), "{text}");
        assert!(text.contains("is RoCE"), "{text}");
        assert!(text.contains("ConnectOptions::gid_index"), "{text}");
        assert!(
            text.contains(&format!("default_gid_index gives {index} (")),
            "{text}"
        );
    }
    assert_eq!(
        a.qp.state().unwrap(),
        QpState::Reset,
        "refused before any change"
    );
}

#[test]
#[ignore = "needs an RDMA device: set MLX5DV_TEST_DEVICE"]
fn a_connection_from_the_default_gid_carries_data() {
    let Some(ctx) = roce_device() else {
        return;
    };
    let index = ctx.default_gid_index(1).unwrap();
    assert!(index.is_some(), "RoCE: a GID index");
    let mut p = rig::Pair::tuned(QpCaps::default(), SendOps::rc_default(), |o| {
        o.gid_index = index;
    });
    assert_eq!(p.opts.gid_index, index);
    let data: Vec<u8> = (0..256u32).map(|i| (i * 7 + 1) as u8).collect();
    p.a.mr.write_at(0, &data).unwrap();
    let remote = p.b.mr.remote(512..768).unwrap();
    let wcs =
        p.a.qp
            .post_and_wait(&mut p.a.send_cq, rig::WAIT, |b| {
                b.wr(1).rdma_write(remote).sge(p.a.mr.sge(0..256)?)
            })
            .unwrap();
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::SUCCESS));
    assert_eq!(wcs[0].opcode, WcOpcode::RDMA_WRITE);
    assert_eq!(p.b.mr.to_vec(512..768).unwrap(), data);
    assert!(p.b.mr.to_vec(..512).unwrap().iter().all(|&b| b == 0));
    assert!(p.b.mr.to_vec(768..1024).unwrap().iter().all(|&b| b == 0));
}
