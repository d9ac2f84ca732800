//! Tests of the WQE parser: fixtures written by a model of libmlx5 44's
//! builders ([`sq`], [`sq_dv`]), a few hand-written byte images, gather
//! lists mixing inline and pointer segments ([`gather`]), every refusal,
//! and the segment offsets against the installed C header.

mod accept;
mod accept_dv;
mod c_helpers;
mod c_layout;
mod gather;
mod refuse;
mod refuse_umr;
mod robust;
mod sq;
mod sq_dv;

use super::{parse, QpKind, Wqe, WqeError};
use sq::Sq;

/// Parses the WQE at producer counter `idx` of `sq`, as the device would.
fn parse_at(sq: &Sq, idx: u32) -> Result<Wqe, WqeError> {
    parse(&sq.linearise(idx), &sq.view(idx))
}

/// Builds one WQE on a fresh SQ of `kind` (8 WQEBBs) and parses it.
fn one(kind: QpKind, build: impl FnOnce(&mut Sq)) -> Result<Wqe, WqeError> {
    let mut sq = Sq::new(kind, 8);
    build(&mut sq);
    parse_at(&sq, 0)
}

/// Asserts `r` is the error `want` and has the syndrome `syndrome`.
#[track_caller]
fn refused(r: Result<Wqe, WqeError>, want: WqeError, syndrome: u8) {
    match r {
        Ok(w) => panic!("accepted {w:?}, want {want}"),
        Err(e) => {
            assert_eq!(e, want, "got: {e}");
            assert_eq!(e.syndrome(), syndrome, "syndrome of {e}");
            assert!(!e.to_string().is_empty());
        }
    }
}
