//! perftest's default exchange, over one TCP connection (`ib_write_bw`
//! without `-R`): the messages of [`super`] as bytes on the stream, each
//! written with one `write` and read with one `read` of its exact size
//! (`ethernet_write_data`, `ethernet_read_data`).
//!
//! The client connects once (`ethernet_client_connect`: with no server
//! listening it fails at once); the server accepts one client and closes
//! its listener. After the versions, system data and MTU, each side makes
//! its QP and memory and the two exchange their connection data
//! (`ethernet_write_keys`, `ethernet_read_keys`) as text, `KEY_PRINT_FMT`:
//!
//! ```text
//! LID :OUT :QPN   :PSN   :RKEY    :VADDR           :SRQN            59 bytes with the NUL
//! 0000:0001:000123:a1b2c3:00001234:00007f0012340000:00000000
//! LID :OUT :QPN   :PSN   :RKEY    :VADDR           :GID (16 x "xx:")          :SRQN    :   108 bytes
//! ```
//!
//! all in hex, fixed widths; the second form (`KEY_PRINT_FMT_GID`) where
//! the side has a GID index (`-x`, or any RoCE port: perftest's index is
//! then at least 0), the first on InfiniBand without one. Both sides must
//! use the same form: each reads exactly the size of its own.
//!
//! The handshakes ([`Tcp::connection_data`]): the first carries each QP's
//! number and PSN; each side then connects its QP (an RC QP to RTR, and on
//! the client to RTS; a DC client makes its address handle; a DC server
//! has made its DCT ready, whose number perftest's server learns only
//! now: `set_up_connection` again) and sends its data twice more, the
//! second "after moving the QP to RTR": the writer takes the last. The end
//! (`ctx_close_connection`): a handshake, then each side writes `"done"`
//! and its NUL and closes.
//!
//! For DC (`ib_write_bw -c DC`) the server's QPN is its DCT's number and
//! its SRQN its SRQ's; the DC access key is not exchanged: both sides use
//! perftest's [`DC_KEY`](super::DC_KEY).

use super::{
    answer_seed, ask_verdict, report_target, report_writer, seed, version, BwReport, Dest,
    Exchange, Layout, Peer, FILL, STEP,
};
use crate::common::{self, pattern, Failure};
use mlx5dv::*;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `KEY_MSG_SIZE`: the connection data without a GID, with its NUL.
pub const KEY_MSG_SIZE: usize = 59;
/// `KEY_MSG_SIZE_GID`: the connection data with a GID, with its NUL.
pub const KEY_MSG_SIZE_GID: usize = 108;

/// Which form of the connection data a side sends and expects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyForm {
    /// `KEY_PRINT_FMT`: no GID (InfiniBand without a GID index).
    NoGid,
    /// `KEY_PRINT_FMT_GID`: with the GID.
    Gid,
}

impl KeyForm {
    /// The form of a side whose GID index is `gid_index`.
    pub fn of(gid_index: Option<u8>) -> KeyForm {
        match gid_index {
            Some(_) => KeyForm::Gid,
            None => KeyForm::NoGid,
        }
    }

    fn len(self) -> usize {
        match self {
            KeyForm::NoGid => KEY_MSG_SIZE,
            KeyForm::Gid => KEY_MSG_SIZE_GID,
        }
    }
}

impl Dest {
    /// The text form perftest writes (`ethernet_write_keys`), with its NUL.
    pub fn to_key_msg(self, form: KeyForm) -> Vec<u8> {
        let head = format!(
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid, self.out_reads, self.qpn, self.psn, self.rkey, self.vaddr
        );
        let text = match form {
            KeyForm::NoGid => format!("{head}{:08x}", self.srqn),
            KeyForm::Gid => {
                let gid: String = self.gid.iter().map(|b| format!("{b:02x}:")).collect();
                format!("{head}{gid}{:08x}:", self.srqn)
            }
        };
        let mut msg = text.into_bytes();
        msg.push(0);
        msg
    }

    /// Reads the text form (`ethernet_read_keys`): every field hex and of
    /// its width, colons between, a NUL at the end; anything else is
    /// refused with the message's text.
    pub fn from_key_msg(msg: &[u8], form: KeyForm) -> Result<Dest, Failure> {
        let bad = |why: &str| {
            Failure::Failed(format!(
                "the peer's connection data {:?} is not perftest's ({why})",
                String::from_utf8_lossy(msg).trim_end_matches('\0')
            ))
        };
        let text = msg
            .strip_suffix(&[0])
            .and_then(|t| std::str::from_utf8(t).ok())
            .ok_or_else(|| bad("not text ending in a NUL"))?;
        let (widths, text): (&[usize], &str) = match form {
            KeyForm::NoGid => (&[4, 4, 6, 6, 8, 16, 8], text),
            KeyForm::Gid => (
                &[
                    4, 4, 6, 6, 8, 16, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 8,
                ],
                text.strip_suffix(':')
                    .ok_or_else(|| bad("no ':' after the SRQ number"))?,
            ),
        };
        let fields: Vec<&str> = text.split(':').collect();
        if fields.len() != widths.len() {
            return Err(bad(&format!(
                "{} fields, not {}",
                fields.len(),
                widths.len()
            )));
        }
        let mut nums = Vec::with_capacity(fields.len());
        for (f, &w) in fields.iter().zip(widths) {
            if f.len() != w || !f.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad(&format!("{f:?} is not {w} hex digits")));
            }
            nums.push(u64::from_str_radix(f, 16).map_err(|_| bad("a field out of range"))?);
        }
        let mut gid = [0u8; 16];
        if form == KeyForm::Gid {
            for (g, &n) in gid.iter_mut().zip(&nums[6..22]) {
                *g = n as u8;
            }
        }
        // Every field but the address is at most 8 hex digits: u32.
        Ok(Dest {
            lid: nums[0] as u32,
            out_reads: nums[1] as u32,
            qpn: nums[2] as u32,
            psn: nums[3] as u32,
            rkey: nums[4] as u32,
            vaddr: nums[5],
            gid,
            srqn: *nums.last().unwrap_or(&0) as u32,
            gid_index: 0,
        })
    }
}

/// The TCP connection of perftest's default exchange.
pub struct Tcp {
    stream: TcpStream,
    client: bool,
    form: KeyForm,
}

impl Tcp {
    /// The client's end: one attempt to reach `host:port`, as perftest's
    /// client makes (start the server first).
    pub fn connect(host: &str, port: u16, form: KeyForm) -> Result<Tcp, Failure> {
        let stream = common::connect_to_server(host, port, common::Wait::Once)?;
        Ok(Tcp {
            stream,
            client: true,
            form,
        })
    }

    /// The server's end: waits for one client on `port`.
    pub fn accept(port: u16, form: KeyForm) -> Result<Tcp, Failure> {
        let stream = common::accept_one(port)?;
        Ok(Tcp {
            stream,
            client: false,
            form,
        })
    }

    /// Receives the peer's connection data in this side's form, telling a
    /// peer that sends the other form apart: perftest's text without a GID
    /// ends in a NUL at byte 58, with one it goes on.
    fn recv_keys(&mut self, wait: Option<Duration>) -> Result<Dest, Failure> {
        let what = "connection data";
        let mut msg = self.recv(KEY_MSG_SIZE, what, wait)?;
        let short = msg[KEY_MSG_SIZE - 1] == 0;
        match (self.form, short) {
            (KeyForm::NoGid, false) => {
                return Err(Failure::Failed(
                    "the peer sends its connection data with a GID, this side without (no GID index): \
                     give both sides a GID index (-g/-x), or neither"
                        .into(),
                ))
            }
            (KeyForm::Gid, true) => {
                return Err(Failure::Failed(
                    "the peer sends its connection data without a GID (perftest without -x on \
                     InfiniBand), this side with one: give both sides a GID index (-g/-x), or neither"
                        .into(),
                ))
            }
            (KeyForm::Gid, false) => {
                msg.extend(self.recv(KEY_MSG_SIZE_GID - KEY_MSG_SIZE, what, wait)?);
            }
            (KeyForm::NoGid, true) => {}
        }
        Dest::from_key_msg(&msg, self.form)
    }

    /// `ctx_hand_shake`: the two sides' connection data.
    pub fn hand_shake(&mut self, mine: &Dest, wait: Option<Duration>) -> Result<Dest, Failure> {
        let msg = mine.to_key_msg(self.form);
        if self.client {
            self.send(&msg)?;
            self.recv_keys(wait)
        } else {
            let theirs = self.recv_keys(wait)?;
            self.send(&msg)?;
            Ok(theirs)
        }
    }

    /// The connection data, exchanged three times as perftest does: once
    /// (`mine`), then `connect` connects this side's QP to the peer's and
    /// returns this side's data as it now is, sent twice more ("on the
    /// remote side" and "after moving the QP to RTR"). Prints both sides';
    /// returns this side's last data and the peer's.
    pub fn connection_data(
        &mut self,
        mine: &Dest,
        connect: impl FnOnce(&Dest) -> Result<Dest, Failure>,
    ) -> Result<(Dest, Dest), Failure> {
        let first = self.hand_shake(mine, Some(STEP))?;
        let mine = connect(&first)?;
        mine.print("local");
        let theirs = self.hand_shake(&mine, Some(STEP))?;
        theirs.print("remote");
        Ok((mine, self.hand_shake(&mine, Some(STEP))?))
    }

    /// `ctx_close_connection`: a handshake, then `"done"` and its NUL; the
    /// peer's `"done"` is read (for at most a second) so that closing
    /// does not reset the connection under it.
    pub fn close(mut self, mine: &Dest) -> Result<(), Failure> {
        self.hand_shake(mine, Some(STEP))?;
        self.send(b"done\0")?;
        self.stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        let _ = common::read_some(&mut self.stream, 5);
        Ok(())
    }
}

impl Exchange for Tcp {
    fn is_client(&self) -> bool {
        self.client
    }

    fn send(&mut self, data: &[u8]) -> Result<(), Failure> {
        self.stream
            .write_all(data)
            .map_err(|e| Failure::Failed(format!("cannot send to the peer: {e}")))
    }

    fn recv(&mut self, len: usize, what: &str, wait: Option<Duration>) -> Result<Vec<u8>, Failure> {
        self.stream.set_read_timeout(wait)?;
        let mut buf = vec![0u8; len];
        match self.stream.read_exact(&mut buf) {
            Ok(()) => Ok(buf),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => Err(Failure::Failed(format!(
                "the peer closed the connection while this side waited for its {what}"
            ))),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Err(Failure::Failed(format!(
                    "no {what} from the peer within {} s",
                    wait.unwrap_or_default().as_secs()
                )))
            }
            Err(e) => Err(Failure::Failed(format!(
                "cannot read the peer's {what}: {e}"
            ))),
        }
    }
}

/// A run against perftest's default exchange: the example's name, the
/// writes' size and count, the TCP port, and this side's GID index and
/// MTU (the MTU the two agree on is the smaller).
pub struct Run<'a> {
    pub prog: &'static str,
    pub size: usize,
    pub iters: u64,
    pub port: u16,
    pub gid_index: Option<u8>,
    pub mtu: Mtu,
    /// The server's host: `None` on the server.
    pub host: Option<&'a str>,
}

/// What a side brings to the run, made once the opening exchanges have
/// settled the layout and the MTU.
pub trait Side {
    /// This side's connection data.
    fn dest(&self) -> Result<Dest, Failure>;
    /// Connects to the peer's first connection data: an RC QP to RTR and
    /// RTS. By default nothing: a DCT is ready already, and a DCI's
    /// address handle is made when it writes.
    fn connect(&mut self, _peer: &Dest) -> Result<(), Failure> {
        Ok(())
    }
    /// The memory: the target's, or the writer's source.
    fn memory(&mut self) -> &mut MemoryRegion;
}

/// A writing side: the client's.
pub trait Writer: Side {
    /// Writes `iters` times `layout.size` bytes to the peer of `peer` (its
    /// last connection data), write `k` from and to `layout.offset(k)`.
    /// Returns the writes done and the time they took.
    fn write(
        &mut self,
        peer: &Dest,
        layout: Layout,
        iters: u64,
    ) -> Result<(u64, Duration), Failure>;
}

impl<'a> Run<'a> {
    /// The run of `prog` with `opts`' GID index and MTU.
    pub fn new(
        prog: &'static str,
        opts: &ConnectOptions,
        (size, iters): (usize, u64),
        port: u16,
        host: Option<&'a str>,
    ) -> Run<'a> {
        Run {
            prog,
            size,
            iters,
            port,
            gid_index: opts.gid_index,
            mtu: opts.mtu,
            host,
        }
    }

    /// Serves (no host) or writes to the host: the whole run.
    pub fn run<T: Side, W: Writer>(
        &self,
        target: impl FnOnce(Layout, Mtu) -> Result<T, Failure>,
        writer: impl FnOnce(Layout, Mtu) -> Result<W, Failure>,
    ) -> Result<(), Failure> {
        match self.host {
            None => self.serve(target),
            Some(host) => self.write_to(host, writer),
        }
    }

    fn open(&self, tcp: &mut Tcp) -> Result<(Peer, Layout), Failure> {
        let peer = tcp.settle(&version(self.prog), self.mtu)?;
        let layout = Layout::new(self.size, peer.sys);
        println!(
            "{}: peer version {:?}, MTU {}, cycle buffer {}, cache line {}: {} slot(s) of {} bytes in {} bytes",
            self.prog,
            peer.version,
            peer.mtu.bytes(),
            peer.sys.cycle_buffer,
            peer.sys.cache_line,
            layout.slots,
            layout.size,
            layout.len
        );
        Ok((peer, layout))
    }

    /// The server: makes the target, fills its memory with [`FILL`], and
    /// after the client's writes checks it ([`super::check_target`]).
    fn serve<T: Side>(
        &self,
        make: impl FnOnce(Layout, Mtu) -> Result<T, Failure>,
    ) -> Result<(), Failure> {
        let port = self.port;
        println!(
            "{}: waiting for a client on TCP port {port} (perftest's exchange)",
            self.prog
        );
        let mut tcp = Tcp::accept(port, KeyForm::of(self.gid_index))?;
        let (peer, layout) = self.open(&mut tcp)?;
        let mut side = make(layout, peer.mtu)?;
        side.memory().write_at(0, &vec![FILL; layout.len])?;
        let (mine, _) = tcp.connection_data(&side.dest()?, |theirs| {
            side.connect(theirs)?;
            side.dest()
        })?;
        // The client writes; its next handshake says it is done.
        tcp.hand_shake(&mine, None)?;
        let report = tcp.xchg_bw_reports(&BwReport::default())?;
        report.print();
        let mem = side.memory().to_vec(..)?;
        let verdict = answer_seed(&mut tcp, peer.is(self.prog), &mem, peer.sys, &report)?;
        tcp.close(&mine)?;
        if report.size != self.size as u64 {
            return Err(Failure::Failed(format!(
                "the client wrote {} bytes a write, this side was given {} (-s): use the same on both sides",
                report.size, self.size
            )));
        }
        report_target(self.prog, verdict)
    }

    /// The client: makes the writer, fills its memory with the pattern of
    /// a seed, writes, and against an example asks for its check.
    fn write_to<W: Writer>(
        &self,
        host: &str,
        make: impl FnOnce(Layout, Mtu) -> Result<W, Failure>,
    ) -> Result<(), Failure> {
        let mut tcp = Tcp::connect(host, self.port, KeyForm::of(self.gid_index))?;
        let (peer, layout) = self.open(&mut tcp)?;
        let mut side = make(layout, peer.mtu)?;
        let seed = seed();
        side.memory().write_at(0, &pattern(layout.len, seed))?;
        let (mine, theirs) = tcp.connection_data(&side.dest()?, |theirs| {
            side.connect(theirs)?;
            side.dest()
        })?;
        let (iters, elapsed) = side.write(&theirs, layout, self.iters)?;
        let report = BwReport::new(self.size, iters, elapsed);
        report.print();
        tcp.hand_shake(&mine, Some(STEP))?;
        tcp.xchg_bw_reports(&report)?;
        let verdict = ask_verdict(&mut tcp, peer.is(self.prog), seed)?;
        tcp.close(&mine)?;
        report_writer(self.prog, verdict, &peer, iters)
    }
}
