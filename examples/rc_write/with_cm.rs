//! `-R`: perftest's rdma_cm protocol (`examples/common/perftest/cm.rs`),
//! against `ib_write_bw -R` or another `rc_write -R`.

use super::*;
use crate::perftest::cm::{self, Comm};
use crate::perftest::{self, BwReport, Dest, Exchange, Layout, Peer, FILL, STEP};
use mlx5dv::cm::CmId;
use std::net::{SocketAddr, ToSocketAddrs};

pub(super) fn run(cli: &Cli, shape: Shape, host: Option<&str>) -> Result<(), Failure> {
    let port: u16 = cli.num_or("port", perftest::DEFAULT_PORT);
    if let Some(d) = cli.text("ib-dev") {
        // As perftest: a device that is not there fails at once, not
        // once a peer has connected (which then checks it is the one).
        open_device(Some(d))?;
    }
    let run = Run {
        shape,
        dev: cli.text("ib-dev"),
        mtu: cli.mtu(),
    };
    println!(
        "{PROG}: rdma_cm (perftest's protocol) on port {port}, {} writes of {} bytes in batches of {}",
        shape.iters, shape.size, shape.batch
    );
    match host {
        Some(host) => run.client(resolve(host, port)?),
        None => run.server(port),
    }
}

/// The first IPv4 address of `host` (perftest's rdma_cm is IPv4 only).
fn resolve(host: &str, port: u16) -> Result<SocketAddr, Failure> {
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .find(SocketAddr::is_ipv4)
        .ok_or_else(|| Failure::Failed(format!("{host} has no IPv4 address")))
}

/// A `-R` run: its shape, `-d` and `-m`.
struct Run<'a> {
    shape: Shape,
    dev: Option<&'a str>,
    mtu: Option<Mtu>,
}

impl Run<'_> {
    /// Refuses an rdma_cm id on another device than `-d` names.
    fn check_device(&self, id: &CmId) -> Result<Context, Failure> {
        let ctx = id.context()?;
        match self.dev {
            Some(d) if d != ctx.name() => Err(Failure::Failed(format!(
                "rdma_cm connected through {}: the address is not on {d} (-d)",
                ctx.name()
            ))),
            _ => Ok(ctx),
        }
    }

    /// The versions, the system data and the MTU.
    fn open(&self, comm: &mut Comm) -> Result<Peer, Failure> {
        let ctx = self.check_device(comm.id())?;
        let port = ctx.query_port(comm.id().port_num())?;
        let peer = comm.settle(
            &perftest::version(PROG),
            self.mtu.unwrap_or(port.active_mtu),
        )?;
        println!(
            "{PROG}: {} port {} ({} -> {}), peer version {:?}, MTU {}, cycle buffer {}, cache line {}",
            ctx.name(),
            comm.id().port_num(),
            show(comm.id().local_addr()),
            show(comm.id().peer_addr()),
            peer.version,
            peer.mtu.bytes(),
            peer.sys.cycle_buffer,
            peer.sys.cache_line
        );
        Ok(peer)
    }

    /// The data QP and its memory on `id`'s device.
    fn data_side(&self, id: &CmId, layout: Layout) -> Result<Side, Failure> {
        let ctx = self.check_device(id)?;
        Side::new(&ProtectionDomain::new(&ctx)?, layout.len, self.shape)
    }

    fn client(&self, dst: SocketAddr) -> Result<(), Failure> {
        println!("{PROG}: connecting to a server at {dst} through rdma_cm");
        let mut comm = Comm::connect(dst)?;
        let peer = self.open(&mut comm)?;
        let layout = Layout::new(self.shape.size, peer.sys);
        comm.hand_shake(&Dest::default(), Some(STEP))?;
        let (mut side, id) = cm::connect_retry(
            dst,
            cm::DATA_CONNECT_WITHIN,
            |id| self.data_side(id, layout),
            |s| &s.qp,
        )?;
        comm.hand_shake(&Dest::default(), Some(STEP))?;
        let mine = Dest::of(&id, &side.qp, &side.mr, side.psn)?;
        let theirs = comm.connection_data(&mine)?;
        let seed = perftest::seed();
        side.mr.write_at(0, &pattern(layout.len, seed))?;
        let remote = theirs.remote(layout.len);
        let (iters, elapsed) = write_all(&mut side, remote, self.shape, |k| layout.offset(k))?;
        let report = BwReport::new(self.shape.size, iters, elapsed);
        report.print();
        // The end: the server waits in this handshake.
        comm.hand_shake(&mine, Some(STEP))?;
        comm.xchg_bw_reports(&report)?;
        let verdict = perftest::ask_verdict(&mut comm, peer.is(PROG), seed)?;
        comm.hand_shake(&mine, Some(STEP))?;
        id.disconnect()?;
        cm::await_disconnect(&id, STEP)?;
        perftest::report_writer(PROG, verdict, &peer, iters)
    }

    fn server(&self, port: u16) -> Result<(), Failure> {
        println!("{PROG}: waiting for a client on rdma_cm port {port}");
        let mut comm = Comm::accept(port)?;
        let peer = self.open(&mut comm)?;
        let layout = Layout::new(self.shape.size, peer.sys);
        comm.hand_shake(&Dest::default(), Some(STEP))?;
        let (mut side, id) =
            cm::accept_one(port, Some(STEP), |id| self.data_side(id, layout), |s| &s.qp)?;
        side.mr.write_at(0, &vec![FILL; layout.len])?;
        comm.hand_shake(&Dest::default(), Some(STEP))?;
        let mine = Dest::of(&id, &side.qp, &side.mr, side.psn)?;
        comm.connection_data(&mine)?;
        // The client writes; its next handshake says it is done (or its
        // disconnect that it gave up).
        comm.hand_shake(&mine, None)?;
        let report = comm.xchg_bw_reports(&BwReport::default())?;
        report.print();
        let mem = side.mr.to_vec(..)?;
        let verdict = perftest::answer_seed(&mut comm, peer.is(PROG), &mem, peer.sys, &report)?;
        comm.hand_shake(&mine, Some(STEP))?;
        id.disconnect()?;
        cm::await_disconnect(&id, STEP)?;
        perftest::report_target(PROG, verdict)
    }
}

fn show(a: Option<SocketAddr>) -> String {
    a.map_or_else(|| "-".into(), |a| a.to_string())
}
