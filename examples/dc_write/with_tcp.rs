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
    let target =
        |layout: Layout, mtu| Target::new(pd, &opts.mtu(mtu), layout.len, perftest::DC_KEY);
    if shape.direct {
        // The client's DCI on the direct path (`--direct` needs a HOST).
        return run.run(target, |layout: Layout, mtu| {
            Ok(DirectWriter {
                ini: DirectInitiator::new(pd, &opts.mtu(mtu), layout.len, shape)?,
                shape,
            })
        });
    }
    run.run(target, |layout: Layout, mtu| {
        Ok(Writer {
            ini: Initiator::new(pd, &opts.mtu(mtu), layout.len, shape)?,
            shape,
        })
    })
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
    /// To the DCT of [`dct_info`].
    fn write(
        &mut self,
        peer: &Dest,
        layout: Layout,
        iters: u64,
    ) -> Result<(u64, Duration), Failure> {
        let info = dct_info(peer, layout)?;
        let shape = Shape {
            iters,
            ..self.shape
        };
        self.ini.write(&info, shape, |k| layout.offset(k))
    }
}

/// The DCT of the server's last connection data (a perftest server learns
/// its DCT's number once the DCT is ready), to be reached through an
/// address handle for its LID and GID.
fn dct_info(peer: &Dest, layout: Layout) -> Result<DctInfo, Failure> {
    if peer.qpn > 0x00ff_ffff {
        return Err(Failure::Failed(format!(
            "the server's DCT number {:#x} is beyond 24 bits",
            peer.qpn
        )));
    }
    Ok(DctInfo {
        lid: peer.lid16()?,
        gid: Gid(peer.gid),
        dctn: peer.qpn,
        dc_key: perftest::DC_KEY,
        remote: peer.remote(layout.len),
    })
}

/// The client on mlx5's direct path: a DCI taken for [`mlx5dv::direct`]
/// in RESET, then made ready, as [`Writer`]'s.
struct DirectWriter {
    ini: DirectInitiator,
    shape: Shape,
}

impl tcp::Side for DirectWriter {
    fn dest(&self) -> Result<Dest, Failure> {
        let i = &self.ini;
        Dest::local(i.src.pd().context(), &i.opts, i.dci.qp_num(), i.psn, &i.src)
    }

    fn memory(&mut self) -> &mut MemoryRegion {
        &mut self.ini.src
    }
}

impl tcp::Writer for DirectWriter {
    fn write(
        &mut self,
        peer: &Dest,
        layout: Layout,
        iters: u64,
    ) -> Result<(u64, Duration), Failure> {
        let info = dct_info(peer, layout)?;
        let shape = Shape {
            iters,
            ..self.shape
        };
        self.ini.write(&info, shape, |k| layout.offset(k))
    }
}
