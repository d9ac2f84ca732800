//! What a target checks of perftest's writes and of an example's, and
//! the exchange of the verdict between two examples.

use super::{to_array, BwReport, Exchange, Layout, Peer, SysData, STEP};
use crate::common::{pattern, Failure};
use std::ops::Range;

/// The byte a target fills its memory with before the writes: never in
/// the examples' pattern (whose bytes are below 251), so a write that did
/// not land shows.
pub const FILL: u8 = 0xff;
/// The answer to a seed when every byte is as it should be; otherwise the
/// answer is the offset of the first that is not.
pub const ALL_AS_WRITTEN: u64 = u64::MAX;
/// perftest's random bytes are taken to have landed in a slot when the
/// slot no longer holds [`FILL`] only: for slots of fewer bytes than this
/// the chance that random bytes are all `FILL` (1 in 256 per byte) is too
/// high, and the slots are not checked.
pub const LANDED_MIN_SIZE: usize = 4;

/// Where a target's memory is not as it should be after the writes.
#[derive(Debug)]
pub struct Mismatch {
    /// The offset of the first byte that is not.
    pub at: usize,
    /// What it should have been, in words.
    pub what: String,
}

/// What the target checks of its memory `mem`, filled with [`FILL`]
/// before the writes, after `iters` writes laid out as `layout`:
///
/// - every byte outside the ranges the writes cover still holds `FILL`
///   (nothing was written elsewhere);
/// - with `seed` (the writer is an example, which writes the pattern of
///   `seed` at the same offsets of its own memory): every byte inside holds
///   the pattern;
/// - without (the writer is perftest, which writes `rand()` bytes that it
///   does not tell): each slot of at least [`LANDED_MIN_SIZE`] bytes no
///   longer holds `FILL` only, so some write landed there; its bytes
///   cannot be checked.
///
/// Returns a line saying what was checked.
pub fn check_target(
    mem: &[u8],
    layout: Layout,
    iters: u64,
    seed: Option<u8>,
) -> Result<String, Mismatch> {
    if layout.len > mem.len() {
        return Err(Mismatch {
            at: mem.len(),
            what: format!(
                "the writes may reach {} bytes, the memory has {} (use the same -s on both sides)",
                layout.len,
                mem.len()
            ),
        });
    }
    let want = seed.map(|s| pattern(mem.len(), s));
    let (mut outside_from, mut covered, mut slots) = (0, 0, 0u64);
    for r in layout.written(iters) {
        untouched(mem, outside_from..r.start)?;
        match &want {
            Some(want) => {
                if let Some(at) = r.clone().find(|&i| mem[i] != want[i]) {
                    return Err(Mismatch {
                        at,
                        what: "the pattern the writer wrote".into(),
                    });
                }
            }
            None if layout.size >= LANDED_MIN_SIZE && mem[r.clone()].iter().all(|&b| b == FILL) => {
                return Err(Mismatch {
                    at: r.start,
                    what: format!("written ({} bytes that no write reached)", r.len()),
                });
            }
            None => {}
        }
        outside_from = r.end;
        covered += r.len();
        slots += 1;
    }
    untouched(mem, outside_from..mem.len())?;
    let rest = mem.len() - covered;
    Ok(match seed {
        Some(_) => format!(
            "the {covered} bytes the writes covered hold what was written, the other {rest} are untouched"
        ),
        None if layout.size >= LANDED_MIN_SIZE => format!(
            "each of the {slots} slots perftest's writes cover ({covered} bytes) was written, the other {rest} bytes are untouched; perftest writes random bytes, whose values cannot be checked"
        ),
        None => format!(
            "the {rest} bytes outside perftest's writes are untouched; writes under {LANDED_MIN_SIZE} bytes are not checked to have landed, nor are perftest's random bytes"
        ),
    })
}

/// Checks that `mem[range]` still holds [`FILL`].
fn untouched(mem: &[u8], range: Range<usize>) -> Result<(), Mismatch> {
    match range.clone().find(|&i| mem[i] != FILL) {
        None => Ok(()),
        Some(at) => Err(Mismatch {
            at,
            what: "untouched: no write covers it".into(),
        }),
    }
}

/// The target's check after the writes ([`check_target`]): against an
/// example (`peer_is_example`), first takes its seed and answers with the
/// verdict ([`ALL_AS_WRITTEN`] or the offset). `mem` is the target's
/// memory, `report` the writer's.
pub fn answer_seed(
    comm: &mut impl Exchange,
    peer_is_example: bool,
    mem: &[u8],
    sys: SysData,
    report: &BwReport,
) -> Result<Result<String, Mismatch>, Failure> {
    let layout = Layout::new(report.size as usize, sys);
    if !peer_is_example {
        return Ok(check_target(mem, layout, report.iters, None));
    }
    let seed = comm.recv(8, "seed", Some(STEP))?;
    let seed = u64::from_be_bytes(to_array(&seed)) as u8;
    let verdict = check_target(mem, layout, report.iters, Some(seed));
    let answer = verdict
        .as_ref()
        .map_or_else(|m| m.at as u64, |_| ALL_AS_WRITTEN);
    comm.send(&answer.to_be_bytes())?;
    Ok(verdict)
}

/// The writer's end of [`answer_seed`]: against an example, sends `seed`
/// and returns the target's verdict; against perftest, `None`.
pub fn ask_verdict(
    comm: &mut impl Exchange,
    peer_is_example: bool,
    seed: u8,
) -> Result<Option<u64>, Failure> {
    if !peer_is_example {
        return Ok(None);
    }
    Ok(Some(comm.xchg_u64(u64::from(seed), "check")?))
}

/// The target's last word: prints what was checked, or fails with where
/// the memory is not as it should be.
pub fn report_target(prog: &str, verdict: Result<String, Mismatch>) -> Result<(), Failure> {
    match verdict {
        Ok(line) => {
            println!("{prog}: data check: {line}");
            Ok(())
        }
        Err(m) => Err(Failure::Failed(format!(
            "data check failed: byte {} of the target is not {}",
            m.at, m.what
        ))),
    }
}

/// The writer's last word on the target's verdict (`None`: perftest,
/// which checks nothing).
pub fn report_writer(
    prog: &str,
    verdict: Option<u64>,
    peer: &Peer,
    iters: u64,
) -> Result<(), Failure> {
    match verdict {
        None => {
            println!(
                "{prog}: {iters} writes completed; the peer is perftest {:?}, which does not check the data",
                peer.version
            );
            Ok(())
        }
        Some(ALL_AS_WRITTEN) => {
            println!("{prog}: the server checked the bytes written: all as written");
            Ok(())
        }
        Some(at) => Err(Failure::Failed(format!(
            "the server's check failed: byte {at} of its memory is not as it should be"
        ))),
    }
}
