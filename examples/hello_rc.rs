//! An RC write and read-back between two hosts, start to finish: the
//! crate's front-page program. The server exposes 64 bytes of memory; the
//! client writes a greeting into it with an RDMA write, reads it back with
//! an RDMA read, checks it and tells the server, which prints what
//! arrived. The two sides swap their endpoints over TCP.
//!
//! ```text
//! hello_rc DEVICE          # on the server: waits on TCP port 18531
//! hello_rc DEVICE HOST     # on the client: writes to the server at HOST
//! ```
use mlx5dv::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

const TCP_PORT: u16 = 18531;
const GREETING: &[u8] = b"hello over RDMA";

/// One side's RDMA objects, connected the same way on both hosts.
struct Side {
    pd: ProtectionDomain,
    cq: CompletionQueue,
    qp: RcQp,
    opts: ConnectOptions,
}

impl Side {
    fn new(device: &str) -> Result<Side> {
        let ctx = Context::open(device)?; // "mlx5_0", "rxe0", ...
        let pd = ProtectionDomain::new(&ctx)?;
        let cq = CompletionQueue::new(&ctx, 16)?;
        let qp = QpBuilder::rc(&pd, &cq, &cq).build()?;
        // Port 1; on RoCE the GID of the port's IPv4 address, which the
        // other host can route to (None on InfiniBand).
        let opts = ConnectOptions::default().gid_index(ctx.default_gid_index(1)?);
        Ok(Side { pd, cq, qp, opts })
    }
}

/// The server: memory a peer may write, and the check of what it wrote.
pub fn server(device: &str, listener: TcpListener) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let side = Side::new(device)?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let target = MemoryRegion::new(&side.pd, 64, access)?;
    println!(
        "hello_rc: waiting for a client on TCP port {}",
        listener.local_addr()?.port()
    );
    let (mut tcp, peer) = listener.accept()?;

    // Its endpoint in, ours and the memory's address and rkey out.
    let mut theirs = [0; Endpoint::BYTES];
    tcp.read_exact(&mut theirs)?;
    let ours = side.qp.endpoint(0x1000, &side.opts)?;
    side.qp
        .connect_to(&Endpoint::from_bytes(&theirs)?, &side.opts)?;
    tcp.write_all(&ours.to_bytes())?;
    tcp.write_all(&target.remote(..)?.to_bytes())?;

    // The client says when its write has completed.
    let mut done = [0; 1];
    tcp.read_exact(&mut done)?;
    let got = target.to_vec(..GREETING.len())?; // a peer may write it: a copy, not a slice
    println!(
        "hello_rc: {} wrote {:?}",
        peer.ip(),
        String::from_utf8_lossy(&got)
    );
    Ok(got)
}

/// The client: an RDMA write into the server's memory, and a read back.
pub fn client(device: &str, mut tcp: TcpStream) -> Result<(), Box<dyn std::error::Error>> {
    let mut side = Side::new(device)?;
    let mut src = MemoryRegion::new(&side.pd, 64, AccessFlags::LOCAL_WRITE)?;
    src.as_mut_slice()?[..GREETING.len()].copy_from_slice(GREETING);

    tcp.write_all(&side.qp.endpoint(0x2000, &side.opts)?.to_bytes())?;
    let mut theirs = [0; Endpoint::BYTES + RemoteBuf::BYTES];
    tcp.read_exact(&mut theirs)?;
    let (endpoint, remote) = theirs.split_at(Endpoint::BYTES);
    side.qp
        .connect_to(&Endpoint::from_bytes(endpoint)?, &side.opts)?;
    let remote = RemoteBuf::from_bytes(remote)?.slice(0, GREETING.len() as u64)?;

    // An RDMA write, then an RDMA read of the same bytes back: the device
    // reads `src` and writes `back`, which the scoped post keeps borrowed
    // until both completions have come (the read's made before the call).
    let mut back = MemoryRegion::new(&side.pd, 64, AccessFlags::LOCAL_WRITE)?;
    let into = back.sge_mut(..GREETING.len())?;
    let wcs = side
        .qp
        .post_and_wait(&mut side.cq, Duration::from_secs(5), |batch| {
            batch
                .wr(1)
                .rdma_write(remote)
                .sge(src.sge(..GREETING.len())?)?;
            batch.wr(2).rdma_read(remote).sge(into)
        })?;
    for (wc, opcode) in wcs.iter().zip([WcOpcode::RDMA_WRITE, WcOpcode::RDMA_READ]) {
        wc.ok()?; // a typed error with the status and its usual causes
        assert_eq!(wc.opcode, opcode);
    }
    if back.as_slice()?[..GREETING.len()] != *GREETING {
        return Err("the bytes read back differ from those written".into());
    }
    tcp.write_all(b"d")?;
    println!(
        "hello_rc: wrote {} bytes and read them back",
        GREETING.len()
    );
    Ok(())
}

fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    match args {
        [device] => {
            let got = server(device, TcpListener::bind(("0.0.0.0", TCP_PORT))?)?;
            if got != GREETING {
                return Err(format!("expected {GREETING:?}, got {got:?}").into());
            }
            Ok(())
        }
        [device, host] => {
            let tcp = TcpStream::connect((host.as_str(), TCP_PORT))
                .map_err(|e| format!("cannot connect to {host}:{TCP_PORT}: {e}"))?;
            client(device, tcp)
        }
        _ => Err("usage: hello_rc DEVICE [HOST]".into()),
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("hello_rc: {e}"); // the error's text, with its usual causes
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
