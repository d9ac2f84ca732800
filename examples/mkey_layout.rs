//! `mkey_layout`: an indirect mkey given a memory layout by a work request,
//! used as the target of an RDMA write, invalidated, and given another:
//!
//! 1. `mlx5dv_wr_mr_list`: the mkey covers three scattered pieces of a
//!    memory region, one after another; an RDMA read of 3 KiB through the
//!    mkey gathers the three pieces;
//! 2. `ibv_wr_local_inv`: the layout is gone;
//! 3. `mlx5dv_wr_mr_interleaved`: the mkey covers 16 bytes of every 64 of
//!    one area and 8 of every 16 of another, interleaved, repeated `-r`
//!    times; a write through it lands in that pattern;
//! 4. invalidated again, and re-registered as a list over other pieces,
//!    and read through once more.
//!
//! After each write every byte of the region is checked: the pieces the
//! layout names hold the written data in layout order, everything else is
//! untouched. After each read, the bytes read are the pieces' in layout
//! order.
//!
//! A list layout is read through, not written: an SGE does not say whether
//! its memory is a peer's to write, so the crate grants no remote write
//! over a list (its memory model); an interleaved layout over a region
//! registered for remote writes may be written.
//!
//! ```text
//! mkey_layout [-d DEV] [-g GID] [-r REPEAT]
//!
//! cargo run --example mkey_layout -- -d mlx5_0
//! ```
//!
//! The mkey is addressed zero-based (`MkeyLayout::remote` gives offsets into the
//! layout). The registrations and invalidations are posted on the target's
//! RC QP (created with `MR_LIST | MR_INTERLEAVED` and `LOCAL_INV`); the
//! writes come from a second QP connected to it, on the same device.
//!
//! Exit status: 0 every step completed and checked out; 1 a verbs call, a
//! completion or a data check failed; 2 bad usage; 3 the device is not an
//! mlx5 device (indirect mkeys need mlx5 direct verbs) or cannot create
//! them: nothing was done.
//!
//! Verified only where an mlx5 device was present; on soft-RoCE it exits 3
//! before any mlx5 call, which is what the project's tests check.

mod common;

use common::{
    connect_options, exit, open_device, pattern, random_psn, require_mlx5, val, Cli, Failure,
};
use mlx5dv::*;
use std::ops::Range;
use std::process::ExitCode;

const PROG: &str = "mkey_layout";
const USAGE: &str = "\
Usage: mkey_layout [OPTIONS]

List and interleaved layouts on an indirect mlx5 mkey: registered, written
through with RDMA, invalidated, registered again.

Options:
  -d, --ib-dev=DEV       use RDMA device DEV (default: the first found)
  -i, --ib-port=PORT     use port PORT of the device (default 1)
  -g, --gid-idx=INDEX    local GID index (default on RoCE: the IPv4 RoCE v2 GID)
  -r, --repeat=N         repeat count of the interleaved layout (default 32)
  -h, --help             this text

Exit status: 0 success, 1 failure, 2 bad usage, 3 not an mlx5 device
(nothing done).
";

/// The target region's size.
const REGION: usize = 64 * 1024;
/// Where the interleaved layout's two entries start, their data and skip.
const INTERLEAVED: [(usize, u32, u32); 2] = [(16 * 1024, 16, 48), (40 * 1024, 8, 8)];

fn main() -> ExitCode {
    let cli = Cli::parse_with_device(PROG, USAGE, &[val('r', "repeat")]);
    cli.no_positional();
    exit(PROG, run(&cli))
}

/// The memory and QPs of the example.
struct Rig {
    // Fields drop in order: QPs and the mkey before the memory they reach.
    /// Registers layouts and invalidates them; the write's target.
    owner: RcQp,
    /// Writes through the mkey.
    writer: RcQp,
    /// The owner's CQ (its sends complete on it).
    owner_cq: CompletionQueue,
    /// The writer's CQ.
    writer_cq: CompletionQueue,
    mkey: Mkey,
    target: MemoryRegion,
    source: MemoryRegion,
    /// The regions' access, and the interleaved layout's.
    access: AccessFlags,
    /// Bytes the last registered layout covers (what its work request
    /// returned).
    layout_len: u64,
}

fn run(cli: &Cli) -> Result<(), Failure> {
    let repeat: u32 = cli.num_or("repeat", 32);
    let stride = |e: &(usize, u32, u32)| (e.1 + e.2) as usize;
    if repeat == 0
        || INTERLEAVED
            .iter()
            .any(|e| e.0 + stride(e) * repeat as usize > REGION)
    {
        common::usage_error(
            PROG,
            "--repeat must be at least 1, and the layout fit the 64 KiB region",
        );
    }
    let (ib_port, gid_index) = (cli.num_or("ib-port", 1), cli.num("gid-idx"));
    let ctx = open_device(cli.text("ib-dev"))?;
    require_mlx5(
        &ctx,
        "indirect mkeys and their registration need mlx5 direct verbs",
    )?;
    let opts = connect_options(&ctx, ib_port, gid_index, None)?;
    let mut rig = Rig::new(&ctx, &opts)?;
    println!(
        "mkey_layout: {}: mkey lkey {:#x} rkey {:#x}, room for {} entries",
        ctx.name(),
        rig.mkey.lkey(),
        rig.mkey.rkey(),
        rig.mkey.max_entries()
    );

    // 1. A list layout over three pieces, then a read through it.
    let first: [Range<usize>; 3] = [0..1000, 8192..8692, 20000..21548];
    rig.register_list(&first)?;
    rig.read_and_check(1, &first)?;
    // 2. Invalidate.
    rig.invalidate()?;
    // 3. An interleaved layout, then a write through it.
    let pieces = interleaved_pieces(repeat);
    rig.register_interleaved(repeat)?;
    rig.write_and_check(2, &pieces)?;
    // 4. Invalidate, re-register as another list, read again.
    rig.invalidate()?;
    let again: [Range<usize>; 2] = [50000..52000, 60000..61000];
    rig.register_list(&again)?;
    rig.read_and_check(3, &again)?;
    rig.invalidate()?;
    println!(
        "mkey_layout: list, interleaved and list again: every access went where its layout said"
    );
    Ok(())
}

/// The target pieces of the interleaved layout, in layout order: for each
/// repeat, each entry's data block.
fn interleaved_pieces(repeat: u32) -> Vec<Range<usize>> {
    let mut v = Vec::new();
    for r in 0..repeat as usize {
        for &(start, count, skip) in &INTERLEAVED {
            let at = start + r * (count + skip) as usize;
            v.push(at..at + count as usize);
        }
    }
    v
}

impl Rig {
    fn new(ctx: &Context, opts: &ConnectOptions) -> Result<Rig, Failure> {
        let pd = ProtectionDomain::new(ctx)?;
        let access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let target = MemoryRegion::new(&pd, REGION, access)?;
        let source = MemoryRegion::new(&pd, REGION, access)?;
        let owner_cq = CompletionQueue::new(ctx, 64)?;
        let writer_cq = CompletionQueue::new(ctx, 64)?;
        let owner = QpBuilder::rc(&pd, &owner_cq, &owner_cq)
            .send_ops(SendOps::rc_default() | SendOps::LOCAL_INV)
            .mlx5_send_ops(Mlx5SendOps::MR_LIST | Mlx5SendOps::MR_INTERLEAVED)
            .build()?;
        let writer = QpBuilder::rc(&pd, &writer_cq, &writer_cq).build()?;
        let (p1, p2) = (random_psn(), random_psn());
        owner.connect(&writer.endpoint(p2, opts)?, p1, opts)?;
        writer.connect(&owner.endpoint(p1, opts)?, p2, opts)?;
        // Room for the interleaved layout: its entries plus the repeat header.
        let mkey = Mkey::new(&pd, INTERLEAVED.len() as u16 + 1, false)?;
        Ok(Rig {
            owner,
            writer,
            owner_cq,
            writer_cq,
            mkey,
            target,
            source,
            access,
            layout_len: 0,
        })
    }

    fn register_list(&mut self, pieces: &[Range<usize>]) -> Result<(), Failure> {
        let sges = pieces
            .iter()
            .map(|r| self.target.sge(r.clone()))
            .collect::<Result<Vec<_>>>()?;
        let mut len = 0;
        // Peers may read through a list layout, not write (see the top).
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
        let wcs = self
            .owner
            .post_and_wait(&mut self.owner_cq, common::WAIT, |b| {
                len = b.wr(1).mr_list(&self.mkey, access, &sges)?.len();
                Ok(())
            })?;
        expect(wcs, WcOpcode::UMR, "mr_list")?;
        println!(
            "mkey_layout: list layout of {} pieces registered ({} bytes)",
            pieces.len(),
            len
        );
        self.layout_len = len;
        Ok(())
    }

    fn register_interleaved(&mut self, repeat: u32) -> Result<(), Failure> {
        let entries = INTERLEAVED
            .iter()
            .map(|&(at, count, skip)| MrInterleaved::new(&self.target, at, count, skip))
            .collect::<Result<Vec<_>>>()?;
        let mut len = 0;
        let wcs = self
            .owner
            .post_and_wait(&mut self.owner_cq, common::WAIT, |b| {
                len = b
                    .wr(2)
                    .mr_interleaved(&self.mkey, self.access, repeat, &entries)?
                    .len();
                Ok(())
            })?;
        expect(wcs, WcOpcode::UMR, "mr_interleaved")?;
        println!(
            "mkey_layout: interleaved layout of {} entries × {repeat} repeats registered ({} bytes)",
            entries.len(),
            len
        );
        self.layout_len = len;
        Ok(())
    }

    fn invalidate(&mut self) -> Result<(), Failure> {
        let rkey = self.mkey.rkey();
        let wcs = self
            .owner
            .post_and_wait(&mut self.owner_cq, common::WAIT, |b| {
                b.wr(3).local_inv(rkey)
            })?;
        expect(wcs, WcOpcode::LOCAL_INV, "local invalidate")?;
        println!("mkey_layout: layout invalidated");
        Ok(())
    }

    /// Clears the target, writes the whole layout through the mkey from a
    /// fresh pattern, and checks that `pieces` (in layout order) hold it and
    /// nothing else changed.
    fn write_and_check(&mut self, seed: u8, pieces: &[Range<usize>]) -> Result<(), Failure> {
        let layout = MkeyLayout::new(&self.mkey, self.layout_len);
        let len = usize::try_from(layout.len()).unwrap_or(usize::MAX);
        let total: usize = pieces.iter().map(|r| r.len()).sum();
        if len != total {
            return Err(Failure::Failed(format!(
                "the layout covers {len} bytes, the pieces {total}"
            )));
        }
        self.target.fill(.., 0)?;
        self.source.write_at(0, &pattern(len, seed))?;
        let remote = layout.remote(..)?;
        let src = self.source.sge(0..len)?;
        let wcs = self
            .writer
            .post_and_wait(&mut self.writer_cq, common::WAIT, |b| {
                b.wr(4).rdma_write(remote).sge(src)
            })?;
        expect(wcs, WcOpcode::RDMA_WRITE, "RDMA write through the mkey")?;
        // The expected target: the source's bytes, piece after piece.
        let mut want = vec![0u8; REGION];
        let mut from = 0;
        for r in pieces {
            self.source.read_at(from, &mut want[r.clone()])?;
            from += r.len();
        }
        let got = self.target.to_vec(..)?;
        if let Some(at) = (0..REGION).find(|&i| got[i] != want[i]) {
            return Err(Failure::Failed(format!(
                "byte {at} of the target is {:#04x}, expected {:#04x}",
                got[at], want[at]
            )));
        }
        println!(
            "mkey_layout: {len}-byte write through the mkey landed in {} pieces; the other {} bytes untouched",
            pieces.len(),
            REGION - len
        );
        Ok(())
    }
}

impl Rig {
    /// Fills the target with a fresh pattern, reads the whole layout
    /// through the mkey into the source, and checks that the bytes read are
    /// `pieces`' (in layout order).
    fn read_and_check(&mut self, seed: u8, pieces: &[Range<usize>]) -> Result<(), Failure> {
        let layout = MkeyLayout::new(&self.mkey, self.layout_len);
        let len = usize::try_from(layout.len()).unwrap_or(usize::MAX);
        let total: usize = pieces.iter().map(|r| r.len()).sum();
        if len != total {
            return Err(Failure::Failed(format!(
                "the layout covers {len} bytes, the pieces {total}"
            )));
        }
        let data = pattern(REGION, seed);
        self.target.write_at(0, &data)?;
        self.source.fill(.., 0)?;
        let remote = layout.remote(..)?;
        let into = self.source.sge_mut(0..len)?;
        let wcs = self
            .writer
            .post_and_wait(&mut self.writer_cq, common::WAIT, |b| {
                b.wr(5).rdma_read(remote).sge(into)
            })?;
        expect(wcs, WcOpcode::RDMA_READ, "RDMA read through the mkey")?;
        let want: Vec<u8> = pieces
            .iter()
            .flat_map(|r| data[r.clone()].to_vec())
            .collect();
        let got = self.source.to_vec(0..len)?;
        if let Some(at) = (0..len).find(|&i| got[i] != want[i]) {
            return Err(Failure::Failed(format!(
                "byte {at} read through the mkey is {:#04x}, expected {:#04x}",
                got[at], want[at]
            )));
        }
        println!(
            "mkey_layout: {len}-byte read through the mkey gathered {} pieces in layout order",
            pieces.len()
        );
        Ok(())
    }
}

/// Checks that the one completion succeeded with `opcode`.
fn expect(wcs: &[WorkCompletion], opcode: WcOpcode, what: &str) -> Result<(), Failure> {
    match wcs {
        [wc] if wc.status.is_success() && wc.opcode == opcode => Ok(()),
        _ => Err(Failure::Failed(format!(
            "{what}: expected one successful {opcode:?} completion, got {wcs:?}"
        ))),
    }
}
