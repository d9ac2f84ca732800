//! A DC write between two hosts, start to finish: the man page's EXAMPLE
//! (`mlx5dv_wr_post(3)`) as a whole program. The server makes a DC target
//! (DCT) and exposes 64 bytes of memory; the client makes a DC initiator
//! (DCI), writes a greeting into that memory with one RDMA write addressed
//! to the DCT, and tells it so; the server prints what arrived. The DCT's
//! number, access key and address go over TCP. mlx5 devices only.
//!
//! ```text
//! hello_dc DEVICE          # on the server: waits on TCP port 18532
//! hello_dc DEVICE HOST     # on the client: writes to the server at HOST
//! ```
use mlx5dv::*;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

const TCP_PORT: u16 = 18532;
const GREETING: &[u8] = b"hello over DC";
/// The DCT's access key: a DCI's work requests must present it.
const DC_KEY: u64 = 0x1ee7_c0de;

/// The port and, on RoCE, the GID of the port's IPv4 address, which the
/// other host can route to (None on InfiniBand).
fn connect_options(ctx: &Context) -> Result<ConnectOptions> {
    Ok(ConnectOptions::default().gid_index(ctx.default_gid_index(1)?))
}

/// The server: a DCT, memory a DCI may write, and the check of what it wrote.
pub fn server(device: &str, listener: TcpListener) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let ctx = Context::open(device)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let opts = connect_options(&ctx)?;
    // A DCT takes its receives from a shared receive queue (RDMA writes
    // consume none) and has no send queue: no builder, nothing to size.
    let cq = CompletionQueue::new(&ctx, 16)?;
    let srq = SharedReceiveQueue::new(&pd, 16, 1)?;
    let dct = Dct::new(&pd, &cq, &srq, DC_KEY)?;
    dct.ready(&opts)?; // RESET → INIT → RTR: a DCT only receives
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let target = MemoryRegion::new(&pd, 64, access)?;
    println!(
        "hello_dc: DCT {:#x} waiting on TCP port {}",
        dct.dctn(),
        listener.local_addr()?.port()
    );

    // The DCT's number, key, LID and GID, and the memory's address and rkey.
    let (mut tcp, peer) = listener.accept()?;
    tcp.write_all(&dct.endpoint(&opts)?.to_bytes())?;
    tcp.write_all(&target.remote(..)?.to_bytes())?;

    let mut done = [0; 1];
    tcp.read_exact(&mut done)?;
    let got = target.to_vec(..GREETING.len())?; // a peer may write it: a copy, not a slice
    println!(
        "hello_dc: {} wrote {:?}",
        peer.ip(),
        String::from_utf8_lossy(&got)
    );
    Ok(got)
}

/// The client: a DCI, and one RDMA write addressed to the server's DCT.
pub fn client(device: &str, mut tcp: TcpStream) -> Result<(), Box<dyn std::error::Error>> {
    let ctx = Context::open(device)?;
    let pd = ProtectionDomain::new(&ctx)?;
    let opts = connect_options(&ctx)?;
    let mut cq = CompletionQueue::new(&ctx, 16)?;
    let mut dci = QpBuilder::dci(&pd, &cq).build()?;
    // RESET → INIT → RTR → RTS with no peer: a DCI reaches any DCT. The 0
    // is the first packet sequence number it sends with: any 24-bit value
    // (a DCT takes it from the DCI's packets; nothing is exchanged).
    dci.ready(0, &opts)?;
    let mut src = MemoryRegion::new(&pd, 64, AccessFlags::LOCAL_WRITE)?;
    src.as_mut_slice()?[..GREETING.len()].copy_from_slice(GREETING);

    let mut theirs = [0; DctEndpoint::BYTES + RemoteBuf::BYTES];
    tcp.read_exact(&mut theirs)?;
    let (endpoint, remote) = theirs.split_at(DctEndpoint::BYTES);
    // An address handle for the DCT's port, with its number and key.
    let dct = RemoteDct::new(&pd, &DctEndpoint::from_bytes(endpoint)?, &opts)?;
    let remote = RemoteBuf::from_bytes(remote)?.slice(0, GREETING.len() as u64)?;

    // Every DCI work request names its target (mlx5dv_wr_set_dc_addr).
    let wcs = dci.post_and_wait(&mut cq, Duration::from_secs(5), |batch| {
        batch
            .wr(1, dct.addr())
            .rdma_write(remote)
            .sge(src.sge(..GREETING.len())?)
    })?;
    wcs[0].ok()?; // a typed error with the status and its usual causes
    assert_eq!(wcs[0].opcode, WcOpcode::RDMA_WRITE);
    tcp.write_all(b"d")?;
    println!(
        "hello_dc: DCI {:#x} wrote {} bytes",
        dci.qp_num(),
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
        _ => Err("usage: hello_dc DEVICE [HOST]".into()),
    }
}

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("hello_dc: {e}"); // the error's text, with its usual causes
        return std::process::ExitCode::FAILURE;
    }
    std::process::ExitCode::SUCCESS
}
