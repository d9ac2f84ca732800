//! The state of a QP (`enum ibv_qp_state`), and what each state lets a
//! program post, in the words of the refusal: below the errors that name
//! it, as the completion's types are (`crate::wc`).

use crate::ffi;
use std::fmt;

/// The `what` of every `Error::QpNotReady` the direct path builds
/// starts with this: its text then gives a direct QP's own way back.
pub(crate) const WHAT_PREFIX: &str = "DirectQp::";

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

/// Which kind of QP a failure happened on, for the hints that differ by
/// kind: how a QP of this kind becomes ready again after the error state
/// ([`recovery`](Self::recovery)), and what a remote access error means
/// on it ([`WcStatus::hint_for`](crate::WcStatus::hint_for)).
///
/// A completion names its QP by number only, so the crate's errors give
/// the hint for every kind ([`WcStatus::hint`](crate::WcStatus::hint));
/// code that knows the QP asks for its kind's.
///
/// ```
/// use mlx5dv::QpKind;
///
/// assert!(QpKind::Ud.recovery().contains("ready(port, qkey, psn)"));
/// assert!(!QpKind::Ud.recovery().contains("connect_to"));
/// assert!(QpKind::Rc.recovery().contains("connect_to"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpKind {
    /// An RC QP connected with [`connect_to`](crate::QpEx::connect_to) (a
    /// [`RcQp`](crate::RcQp)).
    Rc,
    /// A UC QP (a [`UcQp`](crate::UcQp)).
    Uc,
    /// An XRC initiator ([`XrcIniQp`](crate::XrcIniQp)) or target
    /// ([`XrcTgtQp`](crate::XrcTgtQp)), connected with `connect`.
    Xrc,
    /// A DC initiator ([`DciQp`](crate::DciQp)).
    Dci,
    /// A DC target ([`Dct`](crate::Dct)).
    Dct,
    /// A UD QP ([`UdQp`](crate::UdQp)).
    Ud,
    /// An RC QP connected through rdma_cm (the `rdma-cm` feature's `CmId`).
    RdmaCm,
}

impl QpKind {
    /// How a QP of this kind leaves the error state and becomes ready
    /// again, in this crate's calls.
    pub const fn recovery(self) -> &'static str {
        match self {
            QpKind::Rc | QpKind::Uc => {
                "reset() it and connect it again (connect_to with the peer's Endpoint)"
            }
            QpKind::Xrc => {
                "reset() the initiator and connect(remote, psn, &opts) it again (an \
                 XrcTgtQp has no reset(): create a new one)"
            }
            QpKind::Dci => {
                "reset() it and ready(psn, &opts) it again (a DCI stream in RTS: \
                 dci_stream_id_reset)"
            }
            QpKind::Dct => {
                "create a new Dct (a Dct has no reset()), ready(&opts) it and hand out its \
                 DctEndpoint again"
            }
            QpKind::Ud => "reset() it and ready(port, qkey, psn) it again",
            QpKind::RdmaCm => {
                "a connection made through rdma_cm is not reconnected: make a new CmId"
            }
        }
    }
}

/// How a QP of any kind becomes ready again: [`QpKind::recovery`] for a
/// QP whose kind is not known where the text is made. Only the kinds
/// with a `reset()` are offered it.
pub(crate) const ANY_RECOVERY: &str = "RC, UC, DCI, UD: reset() it, then connect_to (RC, UC) \
     or ready (DCI, UD) again; XRC: reset() the initiator, then connect; a DCT or an XRC \
     target has no reset(): make a new one; through rdma_cm: a new CmId";

/// The `what` of [`UdQp::endpoint`](crate::UdQp::endpoint)'s refusal
/// ([`Error::QpNotReady`](crate::Error::QpNotReady)), whose text
/// [`not_ready_for`] gives its own.
pub(crate) const UD_ENDPOINT: &str = "UdQp::endpoint";

/// The text of [`Error::QpNotReady`](crate::Error::QpNotReady) after
/// `QP 0x… is in `, for the refused call `what`: [`not_ready`] for a
/// post; for [`UD_ENDPOINT`], why the QP has no Q_Key to give.
pub(crate) fn not_ready_for(what: &str, state: QpState, receive: bool) -> String {
    if what != UD_ENDPOINT {
        return not_ready(state, receive);
    }
    match state {
        QpState::Reset => format!(
            "{state} (no Q_Key yet): an endpoint names the Q_Key that ready sets; call \
             ready / ready_with (after a reset(), again) before endpoint"
        ),
        _ => format!(
            "{state}: it receives nothing, so its Q_Key is of no use to a peer; reset() it \
             and ready / ready_with it again before endpoint"
        ),
    }
}

/// [`not_ready_for`], or the direct path's own text when `what`, the
/// refused call, is a direct QP's (whose ways back differ).
pub(crate) fn not_ready_in(what: &str, state: QpState, receive: bool) -> String {
    #[cfg(target_pointer_width = "64")]
    if what.starts_with(WHAT_PREFIX) {
        return direct_not_ready(state);
    }
    not_ready_for(what, state, receive)
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
            return format!("{state}: a work request failed or it was stopped; {ANY_RECOVERY}");
        }
        _ => ": it does not take this post",
    };
    format!("{state}{advice}")
}

/// The text of `Error::QpNotReady` for a direct QP's post, after `QP
/// 0x… is in `: the state, and what a direct QP can do (it has no
/// `to_init` or `to_rts`: from any state but RTS, its way back is
/// [`reset`](crate::direct::DirectQp::reset), then `connect_to`, or `ready` for a DCI).
pub(crate) fn direct_not_ready(state: QpState) -> String {
    const BACK: &str = "reset() it, then connect it again (connect_to; a DCI: ready)";
    match state {
        QpState::Reset => {
            format!("{state} (not connected): connect it (connect_to; a DCI: ready) before posting")
        }
        QpState::Init | QpState::Rtr => format!(
            "{state} (not ready to send): a direct QP posts in RTS only, which it reaches \
             from RESET (a connect that stopped half way left it here): {BACK}"
        ),
        QpState::Err => {
            format!("{state}: a work request failed or it was stopped; {BACK}")
        }
        _ => format!("{state}: a direct QP posts in RTS only; {BACK}"),
    }
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
        assert_eq!(
            not_ready(QpState::Err, false),
            "ERR: a work request failed or it was stopped; RC, UC, DCI, UD: reset() it, then \
             connect_to (RC, UC) or ready (DCI, UD) again; XRC: reset() the initiator, then \
             connect; a DCT or an XRC target has no reset(): make a new one; through \
             rdma_cm: a new CmId"
        );
    }

    #[test]
    fn the_generic_recovery_offers_reset_only_to_kinds_that_have_it() {
        // A DCT and an XRC target have no reset(): the text says to make a
        // new one, and never lists them among the kinds to reset.
        let (resettable, rest) = ANY_RECOVERY.split_once(": reset() it").unwrap();
        assert_eq!(resettable, "RC, UC, DCI, UD");
        assert!(rest.contains("a DCT or an XRC target has no reset(): make a new one"));
        assert!(!ANY_RECOVERY.contains("DCT, UD"), "{ANY_RECOVERY}");
        for kind in [QpKind::Dct, QpKind::Xrc] {
            assert!(kind.recovery().contains("no reset()"), "{kind:?}");
        }
    }

    #[test]
    fn a_ud_endpoint_refusal_says_to_call_ready() {
        for state in [QpState::Reset, QpState::Err] {
            let text = not_ready_for(UD_ENDPOINT, state, false);
            assert!(text.starts_with(&state.to_string()), "{text}");
            assert!(
                text.contains("Q_Key") && text.contains("ready / ready_with"),
                "{text}"
            );
            assert!(!text.contains("posting"), "{text}");
        }
        // Any other call keeps the post's text.
        assert_eq!(
            not_ready_for("post_and_wait", QpState::Init, false),
            not_ready(QpState::Init, false)
        );
    }
}

#[cfg(test)]
mod kind_tests {
    use super::*;

    #[test]
    fn each_kind_names_its_own_way_back() {
        let calls = [
            (QpKind::Rc, "connect_to"),
            (QpKind::Uc, "connect_to"),
            (QpKind::Xrc, "connect(remote, psn, &opts)"),
            (QpKind::Dci, "ready(psn, &opts)"),
            (QpKind::Dct, "ready(&opts)"),
            (QpKind::Ud, "ready(port, qkey, psn)"),
            (QpKind::RdmaCm, "new CmId"),
        ];
        for (kind, call) in calls {
            let text = kind.recovery();
            assert!(text.contains(call), "{kind:?}: {text}");
            let ready_kind = matches!(kind, QpKind::Dci | QpKind::Dct | QpKind::Ud);
            assert_eq!(text.contains("connect"), !ready_kind, "{kind:?}: {text}");
        }
    }
}
