//! `cq_events`: waiting for completions without spinning. Two RC QPs on one
//! device play ping-pong with sends, each side on its own thread; all four
//! CQs share one completion channel, so a side that waits for the other's
//! message sleeps in the kernel (`poll(2)` on the channel) instead of
//! spinning. The peer thinks for a while (`--delay`) before each answer;
//! the report gives the round trips and the CPU each thread used, against
//! the same run with polling waits (`--poll`).
//!
//! ```text
//! cargo run --example cq_events -- -d rxe0                  # channel waits
//! cargo run --example cq_events -- -d rxe0 --poll           # polling waits
//! cargo run --example cq_events -- -d rxe0 -n 50 --delay 20 # slower peer
//! ```
//!
//! Each message carries its round's number and a pattern, checked on
//! arrival. Exit status: 0 success; 1 a verbs call, a completion or the
//! check failed; 2 bad usage.

mod common;

use common::{connect_options, exit, flag, open_device, pattern, val, Cli, Failure, WAIT};
use mlx5dv::*;
use std::process::ExitCode;
use std::time::{Duration, Instant};

const PROG: &str = "cq_events";
const USAGE: &str = "\
Usage: cq_events [-d DEVICE] [-i PORT] [-g GID] [-n ROUNDS] [-s SIZE] [--delay MS] [--poll]

Two RC QPs on one device play ping-pong with sends, one thread each; the
waits for completions sleep on a completion channel (or poll, with --poll).
Prints the round-trip time and the CPU each thread used.

Options:
  -d, --ib-dev=DEVICE   the device (default: the first)
  -i, --ib-port=PORT    its port (default 1)
  -g, --gid-idx=INDEX   the GID index (default on RoCE: the IPv4 RoCE v2 GID)
  -n, --iters=ROUNDS    round trips (default 100)
  -s, --size=SIZE       bytes per message, at least 8 (default 64)
      --delay=MS        the pong side's think time per round (default 5)
      --poll            CQs without a channel: the waits poll
  -h, --help            this text

Exit status: 0 success, 1 failure, 2 bad usage.
";

/// One side: its QP, CQs and a region whose first `size` bytes are the
/// message sent and the next `size` the one received.
struct Side {
    qp: RcQp,
    send_cq: CompletionQueue,
    recv_cq: CompletionQueue,
    mr: MemoryRegion,
}

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(
        PROG,
        USAGE,
        &[
            val('n', "iters"),
            val('s', "size"),
            val('D', "delay"),
            flag('P', "poll"),
        ],
    );
    cli.no_positional();
    exit(PROG, run(&cli))
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let rounds: u64 = cli.num_or("iters", 100);
    let size: usize = cli.num_or("size", 64);
    let delay = Duration::from_millis(cli.num_or("delay", 5));
    if rounds == 0 || !(8..=1 << 20).contains(&size) {
        common::usage_error(PROG, "--iters must be at least 1, --size 8 to 1 MiB");
    }
    let (ib_port, gid_index) = (cli.num_or("ib-port", 1), cli.num("gid-idx"));
    let ctx = open_device(cli.text("ib-dev"))?;
    let opts = connect_options(&ctx, ib_port, gid_index, None)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let channel = if cli.flag("poll") {
        None
    } else {
        Some(CompletionChannel::new(&ctx)?)
    };
    let side = || -> Result<Side, Failure> {
        let cq = || match &channel {
            Some(ch) => CompletionQueue::with_channel(&ctx, 16, ch),
            None => CompletionQueue::new(&ctx, 16),
        };
        let (send_cq, recv_cq) = (cq()?, cq()?);
        let qp = QpBuilder::rc(&pd, &send_cq, &recv_cq).build()?;
        let mr = MemoryRegion::new(&pd, 2 * size, AccessFlags::LOCAL_WRITE)?;
        Ok(Side {
            qp,
            send_cq,
            recv_cq,
            mr,
        })
    };
    let (mut ping, mut pong) = (side()?, side()?);
    let (psn_a, psn_b) = (common::random_psn(), common::random_psn());
    let (ea, eb) = (
        ping.qp.endpoint(psn_a, &opts)?,
        pong.qp.endpoint(psn_b, &opts)?,
    );
    ping.qp.connect_to(&eb, &opts)?; // sending from psn_a, given to endpoint
    pong.qp.connect_to(&ea, &opts)?;
    // The first receive of each side, before anything is sent.
    ping.post_recv(size, 0)?;
    pong.post_recv(size, 0)?;

    let start = Instant::now();
    let (ping_cpu, pong_cpu) = std::thread::scope(|s| {
        let pong = s.spawn(|| pong.answer(rounds, size, delay));
        let ping = ping.ask(rounds, size);
        (ping, pong.join().expect("the pong thread panicked"))
    });
    let (ping_cpu, pong_cpu) = (ping_cpu?, pong_cpu?);
    let elapsed = start.elapsed();
    let share = |cpu: Duration| 100.0 * cpu.as_secs_f64() / elapsed.as_secs_f64();
    println!(
        "{rounds} round trips of {size} bytes on {} in {elapsed:.2?} ({:.2?} each, {delay:?} of it the peer's think time); waits {}",
        ctx.name(),
        elapsed / rounds as u32,
        if channel.is_some() {
            "sleep on a completion channel"
        } else {
            "poll"
        }
    );
    println!(
        "CPU: ping {ping_cpu:.2?} ({:.1} % of a core), pong {pong_cpu:.2?} ({:.1} % of a core)",
        share(ping_cpu),
        share(pong_cpu)
    );
    Ok(())
}

impl Side {
    /// Posts the receive of the next message.
    fn post_recv(&mut self, size: usize, round: u64) -> Result<(), Failure> {
        // The device writes a receive's buffer: an exclusive borrow of that
        // half, passed as the `Sge` that post_recv takes.
        let sge = self.mr.sge_mut(size..2 * size)?.into();
        // SAFETY: the region lives until the end of `run`, after the last
        // completion; its receive half is read only after the receive's
        // completion, and written by nothing else.
        unsafe { self.qp.post_recv(round, &[sge])? };
        Ok(())
    }

    /// Sends round `round`'s message and waits until it is sent.
    fn send(&mut self, size: usize, round: u64) -> Result<(), Failure> {
        let mut msg = pattern(size, round as u8);
        msg[..8].copy_from_slice(&round.to_le_bytes());
        self.mr.write_at(0, &msg)?;
        let mr = &self.mr;
        let wcs = self.qp.post_and_wait(&mut self.send_cq, WAIT, |b| {
            b.wr(round).send().sge(mr.sge(0..size)?)
        })?;
        wcs[0].ok()?;
        Ok(())
    }

    /// Waits for round `round`'s message, checks it and posts the next
    /// receive.
    fn receive(&mut self, size: usize, round: u64) -> Result<(), Failure> {
        let wc = self.recv_cq.wait(1, WAIT)?[0].ok()?;
        let got = self.mr.to_vec(size..2 * size)?;
        let mut want = pattern(size, round as u8);
        want[..8].copy_from_slice(&round.to_le_bytes());
        if wc.byte_len as usize != size || got != want {
            return Err(Failure::Failed(format!(
                "round {round}: the message received ({} bytes) is not the one sent",
                wc.byte_len
            )));
        }
        self.post_recv(size, round + 1)
    }

    /// The ping side: sends, then waits for the answer; returns the CPU
    /// its thread used.
    fn ask(&mut self, rounds: u64, size: usize) -> Result<Duration, Failure> {
        let cpu = thread_cpu();
        for round in 0..rounds {
            self.send(size, round)?;
            self.receive(size, round)?;
        }
        Ok(thread_cpu() - cpu)
    }

    /// The pong side: waits for each message, thinks, answers.
    fn answer(&mut self, rounds: u64, size: usize, delay: Duration) -> Result<Duration, Failure> {
        let cpu = thread_cpu();
        for round in 0..rounds {
            self.receive(size, round)?;
            std::thread::sleep(delay);
            self.send(size, round)?;
        }
        Ok(thread_cpu() - cpu)
    }
}

/// The CPU time this thread has used (`getrusage(RUSAGE_THREAD)`).
fn thread_cpu() -> Duration {
    // SAFETY: all-zero bytes are a valid `rusage` (integers only).
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is writable; RUSAGE_THREAD is valid on Linux.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
