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
                ini: AnyInitiator::new(pd, &opts.mtu(mtu), layout.len, shape)?,
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

/// The client: a DCI (on the direct path with `--direct`) and the run's
/// shape.
struct Writer {
    ini: AnyInitiator,
    shape: Shape,
}

impl tcp::Side for Writer {
    fn dest(&self) -> Result<Dest, Failure> {
        let (qpn, psn, opts, src) = self.ini.parts();
        Dest::local(src.pd().context(), opts, qpn, psn, src)
    }

    fn memory(&mut self) -> &mut MemoryRegion {
        self.ini.src_mut()
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
