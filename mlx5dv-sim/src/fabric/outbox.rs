//! Answers waiting for room at their requester.
//!
//! A responder's answer goes out at once when the requester's socket has
//! room. When it has none (that host's device thread is behind, or the
//! host never reads), the answer waits here, not in the device step: the
//! step runs with the device lock held, and a host that stops reading must
//! not stall this host's other QPs and verbs commands. The device thread
//! tries the waiting answers again after each step, with the lock
//! released; a process that closes its device, or exits, waits for them
//! (up to [`PATIENCE`]) before it goes, so the last answer of a run still
//! reaches a requester that was only slow.
//!
//! Bounds (a peer decides how many answers it is owed): at most
//! [`MAX_PER_HOST`] answers wait for one host and [`MAX_WAITING`] in all;
//! each waits at most [`PATIENCE`]. An answer beyond them is dropped, as a
//! congested wire drops it, and the requester's timer sends its request
//! again.

use super::Host;
use crate::config::debug;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an answer waits for room at its requester.
pub const PATIENCE: Duration = Duration::from_millis(200);
/// The most answers waiting for one host.
pub const MAX_PER_HOST: usize = 32;
/// The most answers waiting in all.
pub const MAX_WAITING: usize = 256;

struct Waiting {
    to: u16,
    bytes: Vec<u8>,
    since: Instant,
}

/// The answers waiting, oldest first. Its own lock, never held while
/// sleeping; taken after the device lock when both are held.
static OUTBOX: Mutex<VecDeque<Waiting>> = Mutex::new(VecDeque::new());

fn outbox() -> std::sync::MutexGuard<'static, VecDeque<Waiting>> {
    OUTBOX.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sends an answer to host `to` now, or leaves it waiting for room (behind
/// any answer already waiting for that host, so one host's answers stay
/// in order). Never blocks.
pub fn send_or_keep(host: &Host, to: u16, bytes: Vec<u8>) {
    let mut q = outbox();
    let for_host = q.iter().filter(|w| w.to == to).count();
    if for_host == 0 {
        match host.send(to, &bytes) {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => {
                debug!("answer to host {to} lost: {e}");
                return;
            }
        }
    }
    if for_host >= MAX_PER_HOST || q.len() >= MAX_WAITING {
        debug!(
            "answer to host {to} dropped: {for_host} wait for it, {} in all",
            q.len()
        );
        return;
    }
    q.push_back(Waiting {
        to,
        bytes,
        since: Instant::now(),
    });
}

/// Tries the waiting answers again (never blocks); drops those that have
/// waited [`PATIENCE`]. Returns how many still wait.
pub fn flush(host: &Host) -> usize {
    let mut q = outbox();
    if q.is_empty() {
        return 0;
    }
    let now = Instant::now();
    let mut full: Vec<u16> = Vec::new();
    q.retain(|w| {
        if now.duration_since(w.since) >= PATIENCE {
            debug!("answer to host {}: its queue stayed full; lost", w.to);
            return false;
        }
        if full.contains(&w.to) {
            return true;
        }
        match host.send(w.to, &w.bytes) {
            Ok(true) => false,
            Ok(false) => {
                full.push(w.to);
                true
            }
            Err(e) => {
                debug!("answer to host {} lost: {e}", w.to);
                false
            }
        }
    });
    q.len()
}

/// How many answers wait.
pub fn waiting() -> usize {
    outbox().len()
}

/// Tries the waiting answers until none waits, for at most [`PATIENCE`]
/// (answers that keep coming while it waits do not keep it waiting): for a
/// process that closes its device. Sleeps between tries with no lock held.
pub fn drain(host: &Host) {
    let deadline = Instant::now() + PATIENCE;
    while flush(host) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(50));
    }
}
