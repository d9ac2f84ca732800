//! `--perftest`: perftest's default exchange over TCP
//! (`examples/common/perftest/tcp.rs`), against `ib_write_bw` or another
//! `rc_write --perftest`.

use super::*;
use crate::perftest::tcp::{self, Run};
use crate::perftest::{Dest, Layout};

/// The run: an RC QP and memory of perftest's layout on each side.
pub(super) fn run(
    pd: &ProtectionDomain,
    opts: ConnectOptions,
    shape: Shape,
    host: Option<&str>,
    port: u16,
    direct: bool,
) -> Result<(), Failure> {
    let run = Run::new(PROG, &opts, (shape.size, shape.iters), port, host);
    // The client's QP on the direct path with `--direct` (which needs a
    // HOST): the server's is a plain one either way.
    let make = |direct: bool| {
        move |layout: Layout, mtu: Mtu| -> Result<Rc, Failure> {
            Ok(Rc {
                side: Writer::new(pd, layout.len, shape, direct)?,
                opts: opts.mtu(mtu),
                shape,
            })
        }
    };
    run.run(make(false), make(direct))
}

/// One side: its QP and memory (the client's on the direct path with
/// `--direct`), and the options it connects with (the MTU the two sides
/// agreed on).
struct Rc {
    side: Writer,
    opts: ConnectOptions,
    shape: Shape,
}

impl tcp::Side for Rc {
    fn dest(&self) -> Result<Dest, Failure> {
        let (qpn, psn) = self.side.qpn_psn();
        let mr = self.side.mr();
        Dest::local(mr.pd().context(), &self.opts, qpn, psn, mr)
    }

    fn connect(&mut self, peer: &Dest) -> Result<(), Failure> {
        self.side.connect(&peer.endpoint()?, &self.opts)
    }

    fn memory(&mut self) -> &mut MemoryRegion {
        self.side.mr_mut()
    }
}

impl tcp::Writer for Rc {
    fn write(
        &mut self,
        peer: &Dest,
        layout: Layout,
        iters: u64,
    ) -> Result<(u64, std::time::Duration), Failure> {
        let shape = Shape {
            iters,
            ..self.shape
        };
        self.side
            .write(peer.remote(layout.len), shape, |k| layout.offset(k))
    }
}
