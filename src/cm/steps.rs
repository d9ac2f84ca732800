//! The steps of an id awaiting their answer, kept by the id's event
//! channel: whichever reader reads an answer, the step is answered; the
//! late answer of a step whose wait ended without it (a timeout, a
//! cancelled future) goes to no one.
//!
//! A step is begun before the C call that asks for it (`rdma_resolve_addr`,
//! `rdma_resolve_route`, `rdma_connect`, `rdma_accept`), so its answer,
//! whoever reads it, is always known as one. When the wait for it ends
//! without the answer, the step is abandoned: its answer, still unread,
//! is dropped as it is read; already read and queued for the id, it is
//! dropped from the backlog. So a later wait of the id never takes an
//! earlier step's answer for its own.
//!
//! [`Steps`] is defined in `handles.rs`, with the channel that holds it.

use super::handles::{CmEvent, EventChannel, Step, Steps};
use super::kind::{CmEventKind, CmIdKey};

impl Steps {
    fn begin(&mut self, id: CmIdKey, want: CmEventKind) -> u64 {
        self.next += 1;
        self.list.push(Step {
            token: self.next,
            id,
            want,
            abandoned: false,
        });
        self.next
    }

    /// Called for every event read: whether it is the late answer of an
    /// abandoned step (then it goes to no one). The step it answers, if
    /// any, is done.
    pub(super) fn is_late(&mut self, ev: &CmEvent) -> bool {
        match self
            .list
            .iter()
            .position(|s| s.id == ev.id && answers(s.want, ev.kind))
        {
            Some(i) => self.list.remove(i).abandoned,
            None => false,
        }
    }

    /// Marks step `token` abandoned; `false` when it was answered already.
    pub(super) fn abandon(&mut self, token: u64) -> bool {
        match self.list.iter_mut().find(|s| s.token == token) {
            Some(s) => {
                s.abandoned = true;
                true
            }
            None => false,
        }
    }

    fn remove(&mut self, token: u64) {
        self.list.retain(|s| s.token != token);
    }

    /// Forgets the steps of `id` (it is being destroyed).
    pub(super) fn forget_id(&mut self, id: CmIdKey) {
        self.list.retain(|s| s.id != id);
    }
}

/// Whether an event of `kind` answers a step awaiting `want`: the event
/// itself, or the CM's error in its place.
pub(super) fn answers(want: CmEventKind, kind: CmEventKind) -> bool {
    use CmEventKind as K;
    kind == want
        || match want {
            K::AddrResolved => kind == K::AddrError,
            K::RouteResolved => kind == K::RouteError,
            K::ConnectResponse | K::Established => {
                matches!(kind, K::Rejected | K::Unreachable | K::ConnectError)
            }
            _ => false,
        }
}

/// A step of an id awaiting its answer (`want`), begun before the C call
/// that asks for it. Dropped before [`got`](Self::got) saw the answer (a
/// timeout, an error, a cancelled future), it abandons the step.
#[must_use]
pub(super) struct Awaiting {
    channel: EventChannel,
    id: CmIdKey,
    token: u64,
    want: CmEventKind,
    done: bool,
}

impl Awaiting {
    /// Begins a step of `id` on `channel`.
    pub(super) fn begin(channel: &EventChannel, id: CmIdKey, want: CmEventKind) -> Self {
        let token = channel.steps().begin(id, want);
        Awaiting {
            channel: channel.clone(),
            id,
            token,
            want,
            done: false,
        }
    }

    /// The C call that asks for the answer failed: none will come.
    pub(super) fn not_asked(mut self) {
        self.channel.steps().remove(self.token);
        self.done = true;
    }

    /// The wait got `ev`: when it is the answer, the step is done.
    pub(super) fn got(&mut self, ev: &CmEvent) {
        if ev.id == self.id && answers(self.want, ev.kind) {
            self.done = true;
        }
    }
}

impl Drop for Awaiting {
    fn drop(&mut self) {
        if self.done {
            self.channel.steps().remove(self.token);
        } else {
            self.channel.abandon_step(self.token, self.id, self.want);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: u64, kind: CmEventKind) -> CmEvent {
        CmEvent {
            kind,
            status: 0,
            id: CmIdKey(id),
            private_data: Vec::new(),
            request: None,
            request_failed: None,
        }
    }

    #[test]
    fn an_answer_ends_its_step_and_a_late_one_goes_to_no_one_once() {
        use CmEventKind as K;
        let mut steps = Steps::default();
        // Answered as it is read: delivered; the step is done.
        let t = steps.begin(CmIdKey(1), K::AddrResolved);
        assert!(!steps.is_late(&ev(2, K::AddrResolved)), "another id's");
        assert!(!steps.is_late(&ev(1, K::AddrResolved)));
        assert!(!steps.abandon(t), "answered already");
        // Abandoned before its answer: the answer (or the CM's error in
        // its place) is dropped, once; the next step's answer is not.
        let t = steps.begin(CmIdKey(1), K::RouteResolved);
        assert!(steps.abandon(t));
        assert!(!steps.is_late(&ev(1, K::Disconnected)), "no answer");
        assert!(steps.is_late(&ev(1, K::RouteError)));
        assert!(!steps.is_late(&ev(1, K::RouteResolved)));
        // A connect's answers; a destroyed id's steps go with it.
        let t = steps.begin(CmIdKey(3), K::ConnectResponse);
        assert!(steps.abandon(t));
        steps.forget_id(CmIdKey(3));
        assert!(!steps.is_late(&ev(3, K::Rejected)));
        let t = steps.begin(CmIdKey(4), K::ConnectResponse);
        assert!(steps.abandon(t));
        assert!(steps.is_late(&ev(4, K::Unreachable)));
        assert!(steps.list.is_empty());
    }
}
