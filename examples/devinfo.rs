//! `devinfo`: the RDMA devices of this machine, their ports and GID tables,
//! and for mlx5 devices what the direct-verbs work-request API can do on
//! them: DMA memcpy length, DC (DCI/DCT), DCI streams, indirect mkeys, raw
//! WQEs.
//!
//! ```text
//! cargo run --example devinfo                # every device
//! cargo run --example devinfo -- -d mlx5_0   # one device
//! cargo run --example devinfo -- -v          # and every mlx5dv_query_device field
//! ```
//!
//! The mlx5 lines come from `mlx5dv_query_device(3)`
//! ([`Context::mlx5_caps`]) where it reports the capability (memcpy length,
//! DCI streams), and otherwise from creating the object once and destroying
//! it (a DCI and a DCT, an indirect mkey, an RC QP with raw WQE): what
//! `supported` means is that the creation succeeded.
//!
//! Exit status: 0 success; 1 no RDMA device, or a query failed; 2 bad usage.
//! The mlx5 part was verified only where an mlx5 device was present.

mod common;

use common::{exit, flag, open_device, val, Cli, Failure};
use mlx5dv::mlx5::Mlx5Caps;
use mlx5dv::*;
use std::process::ExitCode;

const PROG: &str = "devinfo";
const USAGE: &str = "\
Usage: devinfo [-d DEVICE] [-v]

Lists the RDMA devices, their ports and GID tables, and for mlx5 devices
what the direct-verbs work-request API can do on them.

Options:
  -d, --ib-dev=DEVICE   only this device (default: all)
  -v, --verbose         also every field of mlx5dv_query_device
  -h, --help            this text

Exit status: 0 success, 1 no RDMA device or a query failed, 2 bad usage.
";

fn main() -> ExitCode {
    let cli = Cli::parse(PROG, USAGE, &[val('d', "ib-dev"), flag('v', "verbose")]);
    cli.no_positional();
    exit(PROG, run(&cli))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let verbose = cli.flag("verbose");
    let names: Vec<String> = match cli.text("ib-dev") {
        Some(name) => vec![name.to_string()],
        None => DeviceList::new()?.iter().map(|d| d.name()).collect(),
    };
    if names.is_empty() {
        return Err(Failure::Failed(
            "no RDMA devices found (on a machine without RDMA, try scripts/rxe-vm -- \
             target/debug/examples/devinfo)"
                .into(),
        ));
    }
    for name in names {
        let ctx = open_device(Some(&name))?;
        describe(&ctx, verbose)?;
    }
    Ok(())
}

fn describe(ctx: &Context, verbose: bool) -> Result<(), Failure> {
    let attr = ctx.query_device()?;
    let g = attr.node_guid;
    println!(
        "{}: node GUID {:04x}:{:04x}:{:04x}:{:04x}, firmware {}, {} port(s), mlx5 direct verbs: {}",
        ctx.name(),
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff,
        if attr.fw_ver.is_empty() {
            "-"
        } else {
            &attr.fw_ver
        },
        attr.phys_port_cnt,
        if ctx.is_mlx5() { "yes" } else { "no" }
    );
    println!(
        "  limits: max_qp {}, max_qp_wr {}, max_sge {}, max_cqe {}, max_mr_size {}, max_srq {}",
        attr.max_qp, attr.max_qp_wr, attr.max_sge, attr.max_cqe, attr.max_mr_size, attr.max_srq
    );
    let gids = ctx.gid_table()?;
    for port in 1..=attr.phys_port_cnt {
        let p = ctx.query_port(port)?;
        println!(
            "  port {port}: {:?}, link layer {:?}, active MTU {} (max {}), LID {:#06x}",
            p.state,
            p.link_layer,
            p.active_mtu.bytes(),
            p.max_mtu.bytes(),
            p.lid
        );
        for e in gids.iter().filter(|e| e.port == u32::from(port)) {
            let kind = match e.gid_type {
                GidType::Ib => "IB".to_string(),
                GidType::RoceV1 => "RoCE v1".to_string(),
                GidType::RoceV2 => "RoCE v2".to_string(),
                other => format!("{other:?}"),
            };
            println!("    GID[{:3}]: {}, {kind}", e.index, e.gid);
        }
    }
    if ctx.is_mlx5() {
        mlx5_section(ctx, verbose)?;
    } else {
        println!("  mlx5 direct verbs: not available (DC, DMA memcpy, mkeys and raw WQEs need an mlx5 device)");
    }
    Ok(())
}

/// What the mlx5 work-request API can do on this device.
fn mlx5_section(ctx: &Context, verbose: bool) -> Result<(), Failure> {
    let caps: Mlx5Caps = ctx.mlx5_caps()?;
    println!("  mlx5 direct verbs:");
    let memcpy = match caps.max_wr_memcpy_length {
        Some(0) => "not supported (max_wr_memcpy_length 0)".to_string(),
        Some(n) => format!("up to {n} bytes per work request"),
        None => "not reported by this rdma-core".to_string(),
    };
    println!("    DMA memcpy (mlx5dv_wr_memcpy): {memcpy}");
    let pd = ProtectionDomain::new(ctx)?;
    let cq = CompletionQueue::new(ctx, 16)?;
    println!("    DC (DCI): {}", probe(QpBuilder::dci(&pd, &cq).build()));
    let srq = SharedReceiveQueue::new(&pd, 16, 1)?;
    println!(
        "    DC (DCT): {}",
        probe(Dct::new(&pd, &cq, &srq, 0xD0C_0DE))
    );
    let streams = match caps.dci_streams_caps {
        Some(s) if s.max_log_num_concurent > 0 => format!(
            "up to 2^{} concurrent streams, 2^{} in error",
            s.max_log_num_concurent, s.max_log_num_errored
        ),
        Some(_) => "not supported (max_log_num_concurent 0)".to_string(),
        None => "not reported".to_string(),
    };
    println!("    DCI streams: {streams}");
    println!(
        "    indirect mkey (list / interleaved layouts): {}",
        probe(Mkey::new(&pd, 4, false))
    );
    println!(
        "    list / interleaved registration on an RC QP: {}",
        probe(
            QpBuilder::rc(&pd, &cq, &cq)
                .mlx5_send_ops(Mlx5SendOps::MR_LIST | Mlx5SendOps::MR_INTERLEAVED)
                .build()
        )
    );
    println!(
        "    raw WQE (mlx5dv_wr_raw_wqe): {}",
        probe(
            QpBuilder::rc(&pd, &cq, &cq)
                .mlx5_send_ops(Mlx5SendOps::RAW_WQE)
                .build()
        )
    );
    if verbose {
        println!("    mlx5dv_query_device:");
        for (key, value) in caps.summary() {
            println!("      {key}: {value}");
        }
    }
    Ok(())
}

/// "supported" when the object could be created (it is dropped at once),
/// else why not.
fn probe<T>(r: Result<T>) -> String {
    match r {
        Ok(_) => "supported".into(),
        Err(Error::Unsupported { what }) => format!("not supported ({what})"),
        Err(e) => format!("not available ({e})"),
    }
}
