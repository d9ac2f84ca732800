//! `xsrq_pingpong`: rdma-core's `ibv_xsrq_pingpong` (XRC and XRC SRQs),
//! written with `mlx5dv`, and wire-compatible with it: either side can be
//! the C tool.
//!
//! ```text
//! xsrq_pingpong [-d DEV] [-i PORT] [-g GID] [-s SIZE] [-c CLIENTS] [-n TESTS] ...   # server
//! xsrq_pingpong [-d DEV] [-i PORT] [-g GID] [-s SIZE] [-n TESTS] ... HOST          # client
//!
//! # on the software mlx5 device, the C server and this client:
//! scripts/mlx5-sim -- sh -c 'ibv_xsrq_pingpong -d mlx5_0 & sleep 1;
//!     target/debug/examples/xsrq_pingpong -d mlx5_0 127.0.0.1'
//! ```
//!
//! What it shares with the C tool, so that the two interoperate:
//!
//! - the objects: an XRC domain opened through the file `/tmp/xrc_domain`
//!   (made if missing), one XRC SRQ (`-c` receives deep) completing on
//!   the receive CQ, and per client an XRC target QP (remote write and
//!   read allowed) and an XRC initiator;
//! - the TCP exchange on port 18515 (`-p`): the client connects and sends
//!   `"%04x:%06x:%06x:%06x:%06x:%32s"` (LID, target QPN, initiator QPN,
//!   PSN, SRQ number, GID as 32 hex digits in wire order) with its NUL,
//!   66 bytes; the server answers with its own for that client, then
//!   both connect: each target to the peer's initiator, each initiator to
//!   the peer's target, path MTU 1024 (`-m`), RNR timer 12, timeout 14,
//!   7 retries;
//! - the message flow: the server sends first, one message of `-s` bytes
//!   to each client's SRQ, round robin over its initiators; each side
//!   answers every message it receives with the next one to that peer,
//!   until `-n` have gone each way per client; only the last send to each
//!   peer is signalled;
//! - the end: the client sends `"END"` (4 bytes with its NUL), the server
//!   answers each client with the same; both print `success`.
//!
//! Beyond the C tool, each message's length is checked (`-s` must be the
//! same on both sides). The payload is not: rdma-core's tool sends and
//! receives in one buffer, so what it sends is what it last received.
//!
//! Not offered: `-e` (sleep on CQ events) and `-o` (on-demand paging):
//! they are refused as bad usage.
//!
//! Exit status: 0 success; 1 a verbs call, a completion or the exchange
//! failed; 2 bad usage; 3 the device has no XRC (soft-RoCE), said before
//! any TCP.

mod common;

use common::pp::{self, line, STALL};
use common::{exit, open_device, random_psn, val, Cli, Failure};
use mlx5dv::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Instant;

const PROG: &str = "xsrq_pingpong";

/// The usage text.
fn usage() -> String {
    format!(
        "\
Usage:
  xsrq_pingpong [OPTIONS]          start a server and wait for connection
  xsrq_pingpong [OPTIONS] HOST     connect to the server at HOST

Wire-compatible with rdma-core's ibv_xsrq_pingpong.

Options:
{}
Exit status: 0 success, 1 failure, 2 bad usage, 3 no XRC on the device.
",
        [
            line::PORT,
            line::IB_DEV,
            line::IB_PORT,
            line::SIZE,
            line::MTU,
            "  -c, --clients=N        number of clients (on the server only, default 1)\n",
            "  -n, --num_tests=N      messages each way per client (default 5)\n",
            line::SL,
            line::GID_IDX,
            line::HELP,
        ]
        .concat()
    )
}

/// `sizeof` the exchange message with its NUL.
const MSG_LEN: usize = 66;
/// The termination message, `"END"` and its NUL.
const END: &[u8; 4] = b"END\0";
/// The file whose XRC domain both tools open.
const DOMAIN_FILE: &str = "/tmp/xrc_domain";

/// What the two sides exchange (`struct pingpong_dest`).
#[derive(Clone, Copy)]
struct Dest {
    lid: u16,
    recv_qpn: u32,
    send_qpn: u32,
    psn: u32,
    srqn: u32,
    gid: Gid,
}

impl Dest {
    /// `"%04x:%06x:%06x:%06x:%06x:%s"` and NULs.
    fn to_wire(self) -> [u8; MSG_LEN] {
        pp::to_wire(&format!(
            "{:04x}:{:06x}:{:06x}:{:06x}:{:06x}:{}",
            self.lid,
            self.recv_qpn,
            self.send_qpn,
            self.psn,
            self.srqn,
            common::gid_to_hex(self.gid)
        ))
    }

    /// Reads what `sscanf(msg, "%x:%x:%x:%x:%x:%s")` reads.
    fn from_wire(msg: &[u8]) -> Result<Dest, Failure> {
        let (lid, [recv_qpn, send_qpn, psn, srqn], gid) = pp::from_wire(msg)?;
        Ok(Dest {
            lid,
            recv_qpn,
            send_qpn,
            psn,
            srqn,
            gid,
        })
    }

    /// `ADDR_FORMAT` of the C tool.
    fn print(&self, who: &str) {
        println!(
            "{who:>8}: LID {:04x}, QPN RECV {:06x} SEND {:06x}, PSN {:06x}, SRQN {:06x}, GID {}",
            self.lid,
            self.recv_qpn,
            self.send_qpn,
            self.psn,
            self.srqn,
            std::net::Ipv6Addr::from(self.gid.0)
        );
    }
}

/// One peer: its target and initiator here, its address, how many
/// messages went to it, and its TCP stream.
struct Peer {
    tgt: XrcTgtQp,
    ini: XrcIniQp,
    /// The PSN this side gave the peer: what its initiator sends from and
    /// its target answers from.
    psn: u32,
    remote: Option<Dest>,
    sent: u64,
    stream: Option<TcpStream>,
}

struct Config {
    tcp_port: u16,
    size: usize,
    clients: usize,
    tests: u64,
    host: Option<String>,
    opts: ConnectOptions,
}

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(
        PROG,
        &usage(),
        &[
            val('p', "port"),
            val('s', "size"),
            val('m', "mtu"),
            val('c', "clients"),
            val('n', "num_tests"),
            val('l', "sl"),
        ],
    );
    exit(PROG, run(&cli))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let ib_port: u8 = cli.num_or("ib-port", 1);
    let size: usize = cli.num_or("size", 4096);
    let host = cli.host().map(str::to_string);
    // As the C tool: a client is one client, whatever -c says.
    let clients: usize = if host.is_some() {
        1
    } else {
        cli.num_or("clients", 1)
    };
    let tests: u64 = cli.num_or("num_tests", 5);
    if size == 0 || clients == 0 || tests == 0 {
        common::usage_error(PROG, "--size, --clients and --num_tests must be at least 1");
    }
    let ctx = open_device(cli.text("ib-dev"))?;
    let mut opts =
        common::connect_options(&ctx, ib_port, None, Some(cli.mtu().unwrap_or(Mtu::Mtu1024)))?;
    opts.gid_index = cli.num("gid-idx");
    opts.sl = cli.num_or("sl", 0);
    opts.access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let cfg = Config {
        tcp_port: cli.num_or("port", 18515),
        size,
        clients,
        tests,
        host,
        opts,
    };
    pingpong(&ctx, &cfg)
}

fn pingpong(ctx: &Context, cfg: &Config) -> Result<(), Failure> {
    let pd = ProtectionDomain::new(ctx)?;
    // One send buffer (never written after it is filled), one receive
    // slot per receive the SRQ holds.
    let mut send_mr = MemoryRegion::new(&pd, cfg.size, AccessFlags::LOCAL_WRITE)?;
    common::fill_pattern(send_mr.as_mut_slice()?, 0x5a);
    let recv_len = cfg
        .size
        .checked_mul(cfg.clients)
        .ok_or_else(|| "--size × --clients is too large".to_string())?;
    let recv_mr = MemoryRegion::new(&pd, recv_len, AccessFlags::LOCAL_WRITE)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(DOMAIN_FILE)
        .map_err(|e| format!("cannot open {DOMAIN_FILE} for the XRC domain: {e}"))?;
    let domain = XrcDomain::open_file(ctx, &file, true)?;
    let mut recv_cq = CompletionQueue::new(ctx, cfg.clients as u32)?;
    let mut send_cq = CompletionQueue::new(ctx, cfg.clients as u32)?;
    let srq = SharedReceiveQueue::new_xrc(&pd, &domain, &recv_cq, cfg.clients as u32, 1)?;
    let srqn = srq.srq_num()?;
    // Declared after the memory, so dropped (destroyed) before it.
    let mut peers = Vec::with_capacity(cfg.clients);
    for _ in 0..cfg.clients {
        let ini = QpBuilder::xrc_ini(&pd, &send_cq)
            .caps(QpCaps {
                max_send_wr: (cfg.clients as u64 * cfg.tests).min(u64::from(u32::MAX)) as u32,
                max_recv_wr: 0,
                max_send_sge: 1,
                max_recv_sge: 0,
                max_inline_data: 0,
            })
            .send_ops(SendOps::SEND)
            .build()?;
        peers.push(Peer {
            tgt: XrcTgtQp::new(&domain)?,
            ini,
            psn: random_psn(),
            remote: None,
            sent: 0,
            stream: None,
        });
    }
    for slot in 0..cfg.clients {
        pp::post_srq_recv(&srq, &recv_mr, slot, cfg.size)?;
    }

    match &cfg.host {
        Some(host) => {
            let mut s = common::connect_to_server(host, cfg.tcp_port, common::Wait::Once)?;
            s.write_all(&local(&peers[0], srqn, cfg)?.to_wire())?;
            let msg = pp::read_wire::<MSG_LEN>(&mut s, None)?;
            connect(&mut peers[0], Dest::from_wire(&msg)?, cfg)?;
            peers[0].stream = Some(s);
        }
        None => {
            let listener = TcpListener::bind(("0.0.0.0", cfg.tcp_port))
                .map_err(|e| format!("cannot listen on TCP port {}: {e}", cfg.tcp_port))?;
            for p in peers.iter_mut() {
                let (mut s, _) = listener.accept()?;
                let remote = Dest::from_wire(&pp::read_wire::<MSG_LEN>(&mut s, None)?)?;
                s.write_all(&local(p, srqn, cfg)?.to_wire())?;
                connect(p, remote, cfg)?;
                p.stream = Some(s);
            }
            for i in 0..cfg.clients {
                post_send(&mut peers, i, cfg, &send_mr)?;
            }
        }
    }

    let total = cfg.clients as u64 * cfg.tests;
    let (mut received, mut last) = (0u64, Instant::now());
    while received < total {
        let Some(wc) = common::poll_one(&mut recv_cq)? else {
            if last.elapsed() > STALL {
                return Err(Failure::Failed(format!(
                    "no message for {} s ({received} of {total} received)",
                    STALL.as_secs()
                )));
            }
            std::hint::spin_loop();
            continue;
        };
        last = Instant::now();
        wc.ok().map_err(|e| format!("{e} ({wc:?})"))?;
        if wc.byte_len as usize != cfg.size {
            return Err(Failure::Failed(format!(
                "message {received}: {} bytes received, {} expected (use the same -s on both sides)",
                wc.byte_len, cfg.size
            )));
        }
        pp::post_srq_recv(&srq, &recv_mr, wc.wr_id as usize, cfg.size)?;
        // `find_qp`: the peer whose target carried it (with one client,
        // the only one).
        let i = match peers.iter().position(|p| p.tgt.qp_num() == wc.qp_num) {
            Some(i) => i,
            None if cfg.clients == 1 => 0,
            None => return Err(format!("a message through unknown QP {:#x}", wc.qp_num).into()),
        };
        if peers[i].sent < cfg.tests {
            post_send(&mut peers, i, cfg, &send_mr)?;
        }
        received += 1;
    }
    // The last send to each peer is signalled.
    common::wait_ok(&mut send_cq, cfg.clients)?;

    // Ends only once the other side is done: its target may still carry
    // a message for this side's SRQ.
    if cfg.host.is_some() {
        let s = peers[0].stream.as_mut().expect("connected");
        s.write_all(END)?;
        read_end(s)?;
    } else {
        for p in peers.iter_mut() {
            read_end(p.stream.as_mut().expect("connected"))?;
        }
        for p in peers.iter_mut() {
            p.stream.as_mut().expect("connected").write_all(END)?;
        }
    }
    println!("success");
    Ok(())
}

/// This side's address for peer `p`, printed as the C tool prints it.
fn local(p: &Peer, srqn: u32, cfg: &Config) -> Result<Dest, Failure> {
    let e = p.tgt.endpoint(p.psn, &cfg.opts)?;
    let d = Dest {
        lid: e.lid,
        recv_qpn: e.qpn,
        send_qpn: p.ini.qp_num(),
        psn: p.psn,
        srqn,
        gid: e.gid,
    };
    d.print("local");
    Ok(d)
}

/// Connects peer `p`'s target to the remote initiator and its initiator
/// to the remote target, each side's one PSN being what its initiator
/// sends from and its target answers from.
fn connect(p: &mut Peer, remote: Dest, cfg: &Config) -> Result<(), Failure> {
    remote.print("remote");
    let mine = p.psn;
    let at = |qpn| Endpoint {
        qpn,
        psn: remote.psn,
        lid: remote.lid,
        gid: remote.gid,
    };
    p.tgt.connect(&at(remote.send_qpn), mine, &cfg.opts)?;
    p.ini.connect(&at(remote.recv_qpn), mine, &cfg.opts)?;
    p.remote = Some(remote);
    Ok(())
}

/// `pp_post_send`: the next message to peer `index`'s SRQ, through the
/// initiator `(index + sent) % clients`; signalled when it is the last.
fn post_send(
    peers: &mut [Peer],
    index: usize,
    cfg: &Config,
    mr: &MemoryRegion,
) -> Result<(), Failure> {
    let srqn = peers[index].remote.expect("connected").srqn;
    let via = (index + peers[index].sent as usize) % cfg.clients;
    peers[index].sent += 1;
    let last = peers[index].sent >= cfg.tests;
    let qp = &mut peers[via].ini;
    let mut batch = qp.batch();
    let wr = batch.wr(index as u64, XrcSrqn(srqn));
    let wr = if last { wr.signaled() } else { wr };
    wr.send().sge(mr.sge(0..cfg.size)?)?;
    // SAFETY: the send buffer is never written after it was filled and
    // lives until after the QPs are destroyed (declared before them); the
    // send queue holds every message this side sends
    // (max_send_wr = clients × tests).
    unsafe { batch.complete()? };
    Ok(())
}

/// Reads the peer's `"END"`.
fn read_end(s: &mut TcpStream) -> Result<(), Failure> {
    let mut msg = [0u8; 4];
    s.read_exact(&mut msg)
        .map_err(|e| format!("couldn't read the remote termination: {e}"))?;
    if &msg != END {
        return Err(Failure::Failed(format!(
            "invalid termination from the peer: {:?}",
            String::from_utf8_lossy(&msg)
        )));
    }
    Ok(())
}
