//! `--perftest`: perftest's default exchange over TCP
//! (`examples/common/perftest/tcp.rs`), against `ib_write_bw -c DC` or
//! another `dc_write --perftest`.

use super::*;
use crate::perftest::tcp::{self, Run};
use crate::perftest::{self, Dest, Layout};

/// The run: a DCT and perftest's layout of memory on the server, a DCI
/// on the client; both with perftest's DC key.
pub(super) fn run(
    pd: &ProtectionDomain,
    opts: ConnectOptions,
    shape: Shape,
    host: Option<&str>,
    port: u16,
) -> Result<(), Failure> {
    let run = Run::new(PROG, &opts, (shape.size, shape.iters), port, host);
    run.run(
        |layout: Layout, mtu| Target::new(pd, &opts.mtu(mtu), layout.len, perftest::DC_KEY),
        |layout: Layout, mtu| {
            Ok(Writer {
                ini: Initiator::new(pd, &opts.mtu(mtu), layout.len, shape)?,
                shape,
            })
        },
    )
}

impl tcp::Side for Target {
    /// The DCT's number (ready already, so final) as the QPN; the SRQ
    /// number is not sent (0: perftest's DC writer does not read it).
    fn dest(&self) -> Result<Dest, Failure> {
        let ctx = self.mr.pd().context();
        Dest::local(ctx, &self.opts, self.dct.dctn(), random_psn(), &self.mr)
    }

    fn memory(&mut self) -> &mut MemoryRegion {
        &mut self.mr
    }
}

/// The client: a DCI and the run's shape.
struct Writer {
    ini: Initiator,
    shape: Shape,
}

impl tcp::Side for Writer {
    fn dest(&self) -> Result<Dest, Failure> {
        let i = &self.ini;
        Dest::local(i.src.pd().context(), &i.opts, i.dci.qp_num(), i.psn, &i.src)
    }

    fn memory(&mut self) -> &mut MemoryRegion {
        &mut self.ini.src
    }
}

impl tcp::Writer for Writer {
    /// To the DCT numbered in the server's last connection data (a
    /// perftest server learns its DCT's number once the DCT is ready),
    /// through an address handle for its LID and GID.
    fn write(
        &mut self,
        peer: &Dest,
        layout: Layout,
        iters: u64,
    ) -> Result<(u64, Duration), Failure> {
        if peer.qpn > 0x00ff_ffff {
            return Err(Failure::Failed(format!(
                "the server's DCT number {:#x} is beyond 24 bits",
                peer.qpn
            )));
        }
        let info = DctInfo {
            lid: peer.lid16()?,
            gid: Gid(peer.gid),
            dctn: peer.qpn,
            dc_key: perftest::DC_KEY,
            remote: peer.remote(layout.len),
        };
        let shape = Shape {
            iters,
            ..self.shape
        };
        self.ini.write(&info, shape, |k| layout.offset(k))
    }
}
