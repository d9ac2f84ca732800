//! The state of a QP (`enum ibv_qp_state`), and what each state lets a
//! program post, in the words of the refusal: below the errors that name
//! it, as the completion's types are (`crate::wc`).

use crate::ffi;
use std::fmt;

/// The state of a QP (`enum ibv_qp_state`).
///
/// Its `Display` is the man page's name: `RESET`, `INIT`, `RTR`, `RTS`,
/// `SQD`, `SQE`, `ERR`.
///
/// ```
/// assert_eq!(mlx5dv::QpState::Rtr.to_string(), "RTR");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpState {
    /// Just created, or reset: nothing may be posted.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Send queue drained.
    Sqd,
    /// Send queue error.
    Sqe,
    /// Error: outstanding work requests are flushed.
    Err,
    /// Another value.
    Other(u32),
}

impl QpState {
    pub(crate) fn from_raw(raw: u32) -> Self {
        match raw {
            ffi::IBV_QPS_RESET => QpState::Reset,
            ffi::IBV_QPS_INIT => QpState::Init,
            ffi::IBV_QPS_RTR => QpState::Rtr,
            ffi::IBV_QPS_RTS => QpState::Rts,
            ffi::IBV_QPS_SQD => QpState::Sqd,
            ffi::IBV_QPS_SQE => QpState::Sqe,
            ffi::IBV_QPS_ERR => QpState::Err,
            other => QpState::Other(other),
        }
    }

    /// The raw value (`enum ibv_qp_state`).
    pub(crate) fn to_raw(self) -> u32 {
        match self {
            QpState::Reset => ffi::IBV_QPS_RESET,
            QpState::Init => ffi::IBV_QPS_INIT,
            QpState::Rtr => ffi::IBV_QPS_RTR,
            QpState::Rts => ffi::IBV_QPS_RTS,
            QpState::Sqd => ffi::IBV_QPS_SQD,
            QpState::Sqe => ffi::IBV_QPS_SQE,
            QpState::Err => ffi::IBV_QPS_ERR,
            QpState::Other(raw) => raw,
        }
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
            QpState::Other(n) => return write!(f, "state {n}"),
        };
        f.write_str(name)
    }
}

/// The text of [`Error::QpNotReady`](crate::Error::QpNotReady) after
/// `QP 0x… is in `: the state, what it means for the refused post, and
/// what to do.
pub(crate) fn not_ready(state: QpState, receive: bool) -> String {
    let advice = match (state, receive) {
        (QpState::Reset, false) => {
            " (not connected): connect it (connect_to / ready) before posting"
        }
        (QpState::Reset, true) => {
            " (not connected): receives are taken from INIT on; move it to INIT (to_init) \
             or connect it (connect_to / ready) before posting receives"
        }
        (QpState::Init, _) => {
            " (not ready to send): sends need RTS; connect it (connect_to / ready) before \
             posting sends"
        }
        (QpState::Rtr, _) => {
            " (not ready to send): sends need RTS; move it to RTS (to_rts) before posting \
             sends (a DCI whose ready stopped at RTR: reset() it and ready it again)"
        }
        (QpState::Err, _) => {
            ": a work request failed or it was stopped; reset() it and connect again \
             (connect_to, or ready for a DCI; a connection made through rdma_cm takes a \
             new CmId)"
        }
        _ => ": it does not take this post",
    };
    format!("{state}{advice}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_states_show_the_man_pages_names() {
        let names: Vec<String> = [
            QpState::Reset,
            QpState::Init,
            QpState::Rtr,
            QpState::Rts,
            QpState::Sqd,
            QpState::Sqe,
            QpState::Err,
            QpState::Other(99),
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            names,
            ["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "state 99"]
        );
    }

    #[test]
    fn each_refusal_says_the_state_flatly_and_what_to_do() {
        assert_eq!(
            not_ready(QpState::Reset, false),
            "RESET (not connected): connect it (connect_to / ready) before posting"
        );
        assert!(not_ready(QpState::Reset, true).contains("receives are taken from INIT on"));
        assert!(not_ready(QpState::Init, false).starts_with("INIT (not ready to send): "));
        assert!(not_ready(QpState::Rtr, false).starts_with("RTR (not ready to send): "));
        assert!(not_ready(QpState::Err, false).starts_with(
            "ERR: a work request failed or it was stopped; reset() it and connect again \
             (connect_to, or ready for a DCI"
        ));
    }
}
