//! The requester's own memory: the bytes a WQE's gather list (or inline
//! data) gives, and the ranges its scatter list names, each checked
//! against the key, PD and access (a local protection error otherwise).

use crate::device::cq::syndrome as syn;
use crate::device::mem::{self, Access, Fault};
use crate::device::outcome::{Outcome, Requester};
use crate::model::state::Device;
use crate::wqe::{Data, Part, Sge};

/// A local protection error for a refused access to the requester's
/// own memory.
pub fn local(f: Fault) -> Outcome {
    Outcome::Error(syn::LOCAL_PROT, f.0)
}

/// The bytes of the local data: the gather list's segments in WQE order,
/// inline bytes as they are, each pointer segment checked (key, PD, bounds,
/// local read) as it is reached.
pub fn gather(dev: &Device, rq: &Requester, data: &Data) -> Result<Vec<u8>, Outcome> {
    let mut out = Vec::new();
    match data {
        Data::Sges(sges) => {
            for s in sges {
                out.extend(pointer(dev, rq, s)?);
            }
        }
        Data::Gather(parts) => {
            for p in parts {
                match p {
                    Part::Inline(b) => out.extend_from_slice(b),
                    Part::Pointer(s) => out.extend(pointer(dev, rq, s)?),
                }
            }
        }
    }
    Ok(out)
}

/// The bytes a pointer segment names, checked for local read.
fn pointer(dev: &Device, rq: &Requester, s: &Sge) -> Result<Vec<u8>, Outcome> {
    let r = mem::resolve(
        dev,
        s.lkey,
        s.addr,
        u64::from(s.len),
        rq.pdn,
        Access::LocalRead,
    )
    .map_err(local)?;
    Ok(mem::gather(&r))
}

/// Host ranges of a scatter list, checked for local write (a local
/// protection error otherwise).
pub fn scatter_ranges(dev: &Device, pdn: u32, sges: &[Sge]) -> Result<Vec<(u64, u64)>, Outcome> {
    let mut out = Vec::new();
    for s in sges {
        out.extend(
            mem::resolve(
                dev,
                s.lkey,
                s.addr,
                u64::from(s.len),
                pdn,
                Access::LocalWrite,
            )
            .map_err(local)?,
        );
    }
    Ok(out)
}
