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
    let make = |layout: Layout, mtu: Mtu| -> Result<Rc, Failure> {
        Ok(Rc {
            side: Side::new(pd, layout.len, shape)?,
            opts: opts.mtu(mtu),
            shape,
        })
    };
    if direct {
        // The client on the direct path (`--direct` needs a HOST).
        return run.run(make, |layout: Layout, mtu: Mtu| {
            Ok(DirectRc {
                side: DirectSide::new(pd, layout.len, shape)?,
                opts: opts.mtu(mtu),
                shape,
            })
        });
    }
    run.run(make, make)
}

/// One side: its QP and memory, and the options it connects with (the
/// MTU the two sides agreed on).
struct Rc {
    side: Side,
    opts: ConnectOptions,
    shape: Shape,
}

impl tcp::Side for Rc {
    fn dest(&self) -> Result<Dest, Failure> {
        let s = &self.side;
        Dest::local(s.mr.pd().context(), &self.opts, s.qp.qp_num(), s.psn, &s.mr)
    }

    fn connect(&mut self, peer: &Dest) -> Result<(), Failure> {
        self.side.connect(&peer.endpoint()?, &self.opts)
    }

    fn memory(&mut self) -> &mut MemoryRegion {
        &mut self.side.mr
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
        write_all(&mut self.side, peer.remote(layout.len), shape, |k| {
            layout.offset(k)
        })
    }
}

/// The client on mlx5's direct path: its QP taken for
/// [`mlx5dv::direct`] in RESET, then connected as [`Rc`]'s.
struct DirectRc {
    side: DirectSide,
    opts: ConnectOptions,
    shape: Shape,
}

impl tcp::Side for DirectRc {
    fn dest(&self) -> Result<Dest, Failure> {
        let s = &self.side;
        Dest::local(s.mr.pd().context(), &self.opts, s.qp.qp_num(), s.psn, &s.mr)
    }

    /// From the PSN [`dest`](tcp::Side::dest) sent (`connect_to` sends
    /// from the PSN its QP's `endpoint` gave).
    fn connect(&mut self, peer: &Dest) -> Result<(), Failure> {
        let s = &self.side;
        s.qp.endpoint(s.psn, &self.opts)?;
        Ok(s.qp.connect_to(&peer.endpoint()?, &self.opts)?)
    }

    fn memory(&mut self) -> &mut MemoryRegion {
        &mut self.side.mr
    }
}

impl tcp::Writer for DirectRc {
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
            .write_all(peer.remote(layout.len), shape, |k| layout.offset(k))
    }
}
