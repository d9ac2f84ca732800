//! The ping-pong of rdma-core's `ibv_rc_pingpong` and `ibv_uc_pingpong`,
//! for any connected transport (RC, UC): the command line, the QP's
//! connection and the message loop that `examples/rc_pingpong.rs` and
//! `examples/uc_pingpong.rs` share (the address message and its TCP
//! exchange are `pp`'s, shared with the other pingpong ports). What
//! differs, the QP, each passes in.

use super::pp::{self, line, Dest, SEND_WRID, STALL};
use super::{flag, random_psn, Cli, Failure};
use mlx5dv::*;
use std::time::Instant;

/// The options both tools take besides `-d`, `-i`, `-g`.
pub fn options() -> Vec<super::Opt> {
    [&pp::options()[..], &[flag('e', "events"), flag('c', "chk")]].concat()
}

/// The usage text of `prog`, the port of rdma-core's `tool`.
pub fn usage(prog: &str, tool: &str) -> String {
    usage_with(prog, tool, &[])
}

/// The usage text of `prog`, the port of rdma-core's `tool`, with the
/// lines of its own options (`extra`) before `-h`.
pub fn usage_with(prog: &str, tool: &str, extra: &[&str]) -> String {
    pp::usage(
        prog,
        tool,
        &[
            line::PORT,
            line::IB_DEV,
            line::IB_PORT,
            line::SIZE,
            line::MTU,
            line::RX_DEPTH,
            line::ITERS,
            line::SL,
            "  -e, --events           sleep on CQ events (default: poll)\n",
            line::GID_IDX,
            CHK_LINE,
            &extra.concat(),
            line::HELP,
        ],
    )
}

/// The usage line of `-c`.
const CHK_LINE: &str = concat!(
    "  -c, --chk              the C tools' data validation: the client zeroes\n",
    "                         the first byte of each page of its buffer; each\n",
    "                         side takes 0 or 0x7b there (with a C peer that\n",
    "                         gives -c, give it here too)\n",
);

/// The payload byte of rdma-core's tools.
const PAYLOAD: u8 = 0x7b;

/// What the command line asked for.
pub struct Config {
    /// What the options every pingpong tool takes say.
    pp: pp::Config,
    /// `-e`: sleep on a completion channel rather than poll.
    events: bool,
    /// `-c`: the C tools' page-start bytes (see [`CHK_LINE`]).
    chk: bool,
}

/// Reads the command line and opens the device.
pub fn config(prog: &str, cli: &Cli) -> Result<(Context, Config), Failure> {
    let (ctx, pp) = pp::Config::open(prog, cli, |_| Ok(()))?;
    let cfg = Config {
        pp,
        events: cli.flag("events"),
        chk: cli.flag("chk"),
    };
    Ok((ctx, cfg))
}

/// The QP's sizes, as the C tools ask: one send, `rx_depth` receives.
pub fn caps(cfg: &Config) -> QpCaps {
    QpCaps {
        max_send_wr: 1,
        max_recv_wr: cfg.pp.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

/// Runs the ping-pong on the QP `make_qp` builds (in RESET, on the one CQ
/// it is given, with [`caps`]).
pub fn run<T: Connected>(
    ctx: &Context,
    cfg: &Config,
    make_qp: impl FnOnce(&ProtectionDomain, &CompletionQueue) -> Result<QpEx<T>>,
) -> Result<(), Failure> {
    let pd = ProtectionDomain::new(ctx)?;
    // The memory: one send buffer, and one receive slot per posted receive.
    let (send_mr, recv_mr) = buffers(&pd, cfg)?;
    let channel = if cfg.events {
        Some(CompletionChannel::new(ctx)?)
    } else {
        None
    };
    let mut cq = match &channel {
        Some(ch) => CompletionQueue::with_channel(ctx, cfg.pp.rx_depth + 2, ch)?,
        None => CompletionQueue::new(ctx, cfg.pp.rx_depth + 2)?,
    };
    // Declared after the memory, so dropped (destroyed) before it.
    let mut qp = make_qp(&pd, &cq)?;
    qp.to_init(cfg.pp.opts.port, cfg.pp.opts.access)?;
    for slot in 0..cfg.pp.rx_depth as usize {
        post_recv(&mut qp, &recv_mr, slot, cfg.pp.size)?;
    }

    let me = Dest::of(&qp.endpoint(random_psn(), &cfg.pp.opts)?);
    me.print("local");
    // The server connects its QP before it answers, so that it is ready
    // before the client's first send.
    let peer = pp::exchange_one(cfg.pp.host.as_deref(), cfg.pp.tcp_port, me, |peer| {
        connect(&qp, cfg, &me, peer)
    })?;
    peer.print("remote");
    if cfg.pp.host.is_some() {
        connect(&qp, cfg, &me, &peer)?;
    }

    // The loop of the C tools: a send goes out when the previous send and
    // a receive have both completed.
    const RECV: u8 = 1;
    const SEND: u8 = 2;
    let mut pending = RECV;
    if cfg.pp.host.is_some() {
        post_send(&mut qp, &send_mr, cfg.pp.size)?;
        pending |= SEND;
    }
    // What arrives with -c: the C client zeroes the first byte of each
    // page of its buffer, which is also where it receives, so the C
    // server, which receives into the buffer it sends from too, echoes
    // those zeros, until a message from this program (all 0x7b)
    // overwrites them: either byte is right there.
    let page_starts = if cfg.chk {
        PageStarts::ZeroOrPayload
    } else {
        PageStarts::Payload
    };
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    let mut last_progress = Instant::now();
    while rcnt < cfg.pp.iters || scnt < cfg.pp.iters {
        let wc = if cfg.events {
            // Sleeps on the channel while the CQ is empty.
            cq.wait(1, STALL)
                .map_err(|e| stalled(e.to_string(), scnt, rcnt, cfg))?[0]
        } else {
            let Some(wc) = super::poll_one(&mut cq)? else {
                if last_progress.elapsed() > STALL {
                    return Err(stalled("no completion".into(), scnt, rcnt, cfg));
                }
                std::hint::spin_loop();
                continue;
            };
            wc
        };
        last_progress = Instant::now();
        if !wc.status.is_success() {
            return Err(Failure::Failed(format!(
                "failed status {} for wr_id {:#x}",
                wc.status, wc.wr_id
            )));
        }
        if wc.wr_id == SEND_WRID {
            scnt += 1;
            pending &= !SEND;
        } else {
            let slot = received(&recv_mr, cfg, &wc, rcnt, page_starts)?;
            post_recv(&mut qp, &recv_mr, slot, cfg.pp.size)?;
            rcnt += 1;
            pending &= !RECV;
        }
        if scnt < cfg.pp.iters && pending == 0 {
            post_send(&mut qp, &send_mr, cfg.pp.size)?;
            pending = RECV | SEND;
        }
    }
    pp::report(cfg.pp.size, cfg.pp.iters, start.elapsed());
    println!(
        "{rcnt} messages of {} bytes received and checked (every byte {PAYLOAD:#04x}{})",
        cfg.pp.size,
        match page_starts {
            PageStarts::Payload => "",
            PageStarts::ZeroOrPayload => " but the first of each page, 0 or that",
        }
    );
    // The receives still posted are flushed when the QP is destroyed, on
    // drop, before the memory is deregistered.
    Ok(())
}

/// The same ping-pong with the sends on mlx5's direct path
/// ([`mlx5dv::direct`]): the QP's send queue and send CQ are taken by the
/// crate before it is connected (`QpEx::into_direct`: the crate writes
/// each send's WQE and reads its CQE), its receives go through libmlx5 on
/// a CQ of their own. Each send is a scoped `post_and_wait`, which returns
/// once the send has completed, so the C tools' flow holds (a side sends
/// its next message once its previous send and a receive have both
/// completed) and the peer (`ibv_rc_pingpong`, or this program without
/// `--direct`) sees the same messages. RC only; polls (no `-e`).
pub fn run_direct(ctx: &Context, cfg: &Config) -> Result<(), Failure> {
    let pd = ProtectionDomain::new(ctx)?;
    let (send_mr, recv_mr) = buffers(&pd, cfg)?;
    let send_cq = CompletionQueue::new(ctx, 2)?;
    let mut recv_cq = CompletionQueue::new(ctx, cfg.pp.rx_depth + 1)?;
    // Declared after the memory, so dropped (destroyed, with its CQ)
    // before it. In RESET, never posted: the direct path takes its send
    // queue and `send_cq`.
    let qp = QpBuilder::rc(&pd, &send_cq, &recv_cq)
        .caps(caps(cfg))
        .send_ops(SendOps::SEND)
        .build()?;
    let mut qp = qp.into_direct(send_cq).map_err(Error::from)?;

    let me = Dest::of(&qp.endpoint(random_psn(), &cfg.pp.opts)?);
    me.print("local");
    // RESET to RTS (the C tool's attributes: ConnectOptions' defaults),
    // then the receives: the server does it before it answers, the client
    // before its first send, so that the peer's first message finds one.
    let ready = |qp: &mut direct::DirectRc, peer: &Dest| -> Result<(), Failure> {
        qp.connect_to(&peer.endpoint(), &cfg.pp.opts)?;
        for slot in 0..cfg.pp.rx_depth as usize {
            // SAFETY: as `post_recv`'s.
            unsafe { qp.post_recv(slot as u64, &[recv_sge(&recv_mr, slot, cfg)?])? };
        }
        Ok(())
    };
    let peer = pp::exchange_one(cfg.pp.host.as_deref(), cfg.pp.tcp_port, me, |peer| {
        ready(&mut qp, peer)
    })?;
    peer.print("remote");
    let client = cfg.pp.host.is_some();
    if client {
        ready(&mut qp, &peer)?;
    }
    let page_starts = if cfg.chk {
        PageStarts::ZeroOrPayload
    } else {
        PageStarts::Payload
    };
    let send = |qp: &mut direct::DirectRc| -> Result<(), Failure> {
        let wcs = qp.post_and_wait(STALL, |b| {
            b.send(SEND_WRID, SendFlags::SIGNALED, send_mr.sge(0..cfg.pp.size)?)
        })?;
        for wc in wcs {
            wc.ok()?;
        }
        if wcs.last().map(|wc| (wc.wr_id, wc.opcode)) != Some((SEND_WRID, WcOpcode::SEND)) {
            return Err(Failure::Failed(format!(
                "the send's completion is missing: {wcs:?}"
            )));
        }
        Ok(())
    };
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    if client {
        send(&mut qp)?;
        scnt += 1;
    }
    while rcnt < cfg.pp.iters {
        let last_progress = Instant::now();
        let wc = loop {
            if let Some(wc) = super::poll_one(&mut recv_cq)? {
                break wc;
            }
            if last_progress.elapsed() > STALL {
                return Err(stalled("no receive completion".into(), scnt, rcnt, cfg));
            }
            std::hint::spin_loop();
        };
        wc.ok()?;
        let slot = received(&recv_mr, cfg, &wc, rcnt, page_starts)?;
        // SAFETY: as `post_recv`'s.
        unsafe { qp.post_recv(slot as u64, &[recv_sge(&recv_mr, slot, cfg)?])? };
        rcnt += 1;
        if scnt < cfg.pp.iters {
            send(&mut qp)?;
            scnt += 1;
        }
    }
    pp::report(cfg.pp.size, cfg.pp.iters, start.elapsed());
    println!(
        "{rcnt} messages of {} bytes received and checked (every byte {PAYLOAD:#04x}{}); \
         {scnt} sent on the direct path",
        cfg.pp.size,
        match page_starts {
            PageStarts::Payload => "",
            PageStarts::ZeroOrPayload => " but the first of each page, 0 or that",
        }
    );
    Ok(())
}

/// Checks the message a receive completion `wc` (the `n`-th) reports:
/// its slot's length and bytes. Returns the slot, to post again.
fn received(
    recv_mr: &MemoryRegion,
    cfg: &Config,
    wc: &WorkCompletion,
    n: u64,
    page_starts: PageStarts,
) -> Result<usize, Failure> {
    let slot = wc.wr_id as usize;
    let m = Message {
        slot,
        size: cfg.pp.size,
        byte_len: wc.byte_len,
        n,
        page_starts,
    };
    check_message(recv_mr, &m)?;
    Ok(slot)
}

/// Receive slot `slot` of the receive buffer.
fn recv_sge<'m>(recv_mr: &'m MemoryRegion, slot: usize, cfg: &Config) -> Result<Sge<'m>, Failure> {
    let size = cfg.pp.size;
    Ok(recv_mr.sge(slot * size..(slot + 1) * size)?)
}

/// The send buffer (every byte the payload; with `-c` on the client, each
/// page's first byte 0, as the C client does) and the receive slots.
fn buffers(pd: &ProtectionDomain, cfg: &Config) -> Result<(MemoryRegion, MemoryRegion), Failure> {
    let mut send_mr = MemoryRegion::new(pd, cfg.pp.size, AccessFlags::LOCAL_WRITE)?;
    send_mr.as_mut_slice()?.fill(PAYLOAD);
    if cfg.chk && cfg.pp.host.is_some() {
        // What the C client does with -c: byte i / page_size % 1, a zero,
        // at the start of each page.
        for b in send_mr.as_mut_slice()?.iter_mut().step_by(page_size()) {
            *b = 0;
        }
    }
    let recv_mr = MemoryRegion::new(pd, cfg.pp.recv_len()?, AccessFlags::LOCAL_WRITE)?;
    Ok((send_mr, recv_mr))
}

/// The error of a loop that waited [`STALL`] for a completion.
fn stalled(why: String, scnt: u64, rcnt: u64, cfg: &Config) -> Failure {
    Failure::Failed(format!(
        "{why} for {} s (sent {scnt}, received {rcnt} of {})",
        STALL.as_secs(),
        cfg.pp.iters
    ))
}

/// The system's page size, what the C tools' `-c` counts in.
fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).unwrap_or(4096).max(1)
}

/// INIT → RTR → RTS towards the peer (RTR and RTS with the transport's
/// attributes: for UC, no RNR timer, timeout or retries).
fn connect<T: Connected>(
    qp: &QpEx<T>,
    cfg: &Config,
    me: &Dest,
    peer: &Dest,
) -> Result<(), Failure> {
    qp.to_rtr(&peer.endpoint(), &cfg.pp.opts)?;
    qp.to_rts(me.psn, &cfg.pp.opts)?;
    Ok(())
}

/// Posts the receive of buffer slot `slot`.
fn post_recv<T: Connected>(
    qp: &mut QpEx<T>,
    mr: &MemoryRegion,
    slot: usize,
    size: usize,
) -> Result<(), Failure> {
    let sge = mr.sge(slot * size..(slot + 1) * size)?;
    // SAFETY: the region lives until after the QP is destroyed (declared
    // before it); the slot is read only after this receive's completion and
    // before it is posted again.
    unsafe { qp.post_recv(slot as u64, &[sge])? };
    Ok(())
}

/// Posts one signalled send of the send buffer, through a batch.
fn post_send<T: Connected>(
    qp: &mut QpEx<T>,
    mr: &MemoryRegion,
    size: usize,
) -> Result<(), Failure> {
    let mut batch = qp.batch();
    batch
        .wr(SEND_WRID)
        .signaled()
        .send()
        .sge(mr.sge(0..size)?)?;
    // SAFETY: the send buffer is never written after it was filled, and
    // lives until after the QP is destroyed (declared before it).
    unsafe { batch.complete()? };
    Ok(())
}

/// What the first byte of each page of a received message holds.
#[derive(Clone, Copy, PartialEq)]
enum PageStarts {
    /// The payload byte, as every other (no `-c`).
    Payload,
    /// 0 (what the C client writes with `-c`, and the C server echoes)
    /// or the payload byte.
    ZeroOrPayload,
}

/// A received message to check.
struct Message {
    slot: usize,
    size: usize,
    byte_len: u32,
    /// Its number, for the error.
    n: u64,
    page_starts: PageStarts,
}

/// Checks the message received into its slot: its length and every byte.
fn check_message(mr: &MemoryRegion, m: &Message) -> Result<(), Failure> {
    let (n, size) = (m.n, m.size);
    if m.byte_len as usize != size {
        return Err(Failure::Failed(format!(
            "message {n}: {} bytes received, {size} expected (use the same -s on both sides)",
            m.byte_len
        )));
    }
    // SAFETY: the slot's receive has completed and it is not posted again
    // until this check is done: the device does not write these bytes now
    // (it may write other slots, which this slice does not cover).
    let data = unsafe {
        std::slice::from_raw_parts((mr.addr() as usize + m.slot * size) as *const u8, size)
    };
    let page = page_size();
    let ok = |i: usize, b: u8| match m.page_starts {
        PageStarts::ZeroOrPayload if i % page == 0 => b == 0 || b == PAYLOAD,
        _ => b == PAYLOAD,
    };
    if let Some(at) = (0..size).find(|&i| !ok(i, data[i])) {
        return Err(Failure::Failed(format!(
            "message {n}: byte {at} is {:#04x}, expected {PAYLOAD:#04x}{}",
            data[at],
            if at % page == 0 && data[at] == 0 {
                " (the peer's -c zeroes the first byte of each page: give -c here too)"
            } else {
                ""
            }
        )));
    }
    Ok(())
}
