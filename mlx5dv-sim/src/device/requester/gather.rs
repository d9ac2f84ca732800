//! The requester's own memory: the bytes a WQE's gather list (or inline
//! data) gives, and the ranges its scatter list names, each checked
//! against the key, PD and access (a local protection error otherwise).

use crate::device::cq::syndrome as syn;
use crate::device::mem::{self, Access, Fault};
use crate::device::outcome::{Outcome, Requester};
use crate::model::state::Device;
use crate::wqe::{Data, Sge};

/// A local protection error for a refused access to the requester's
/// own memory.
pub fn local(f: Fault) -> Outcome {
    Outcome::Error(syn::LOCAL_PROT, f.0)
}

/// The bytes of the local data (gather list or inline), checked.
pub fn gather(dev: &Device, rq: &Requester, data: &Data) -> Result<Vec<u8>, Outcome> {
    match data {
        Data::Inline(b) => Ok(b.clone()),
        Data::Sges(sges) => {
            let mut out = Vec::new();
            for s in sges {
                let r = mem::resolve(
                    dev,
                    s.lkey,
                    s.addr,
                    u64::from(s.len),
                    rq.pdn,
                    Access::LocalRead,
                )
                .map_err(local)?;
                out.extend(mem::gather(&r));
            }
            Ok(out)
        }
    }
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
