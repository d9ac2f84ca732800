//! The async side of an event channel (feature `tokio`): its fd's
//! registrations with the runtimes' reactors, and the tasks waiting for
//! its events.

use crate::channel::Registrations;
use std::sync::{Mutex, MutexGuard};
use std::task::Waker;

/// The async side of an event channel.
#[derive(Default)]
pub(crate) struct Reactor {
    /// One for each runtime that waited, made by its first async wait;
    /// dropped before the channel's fd is closed (by the channel, and by
    /// each wait, which holds a handle of the channel while it holds a
    /// share).
    pub(super) registrations: Mutex<Registrations>,
    /// Tasks waiting for an event, woken when events go to the backlog.
    pub(super) wakers: Mutex<Vec<Waker>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Reactor {
    /// Drops the channel's own share of the registration.
    pub(super) fn deregister(&mut self) {
        self.registrations
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Wakes every waiting task (events of some ids went to the backlog).
    pub(super) fn wake_all(&self) {
        for w in std::mem::take(&mut *lock(&self.wakers)) {
            w.wake();
        }
    }

    pub(super) fn add_waker(&self, waker: &Waker) {
        let mut wakers = lock(&self.wakers);
        if !wakers.iter().any(|w| w.will_wake(waker)) {
            wakers.push(waker.clone());
        }
    }
}
