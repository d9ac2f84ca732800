//! The clock of the waits that sleep on a completion channel: moments of
//! `CLOCK_MONOTONIC` (the clock [`std::time::Instant`] reads on Linux) as
//! nanoseconds in one `u64`, read and compared inline.
//!
//! `Instant`'s reading, sums and differences are calls into `std`, each
//! with its normalisation of seconds and nanoseconds: about a hundred
//! instructions a round of a direct wait, against the one `clock_gettime`
//! and a few additions of C. The direct path's waits and the channel's
//! sleep keep their deadlines here; the rest of the crate uses `Instant`.

use std::time::{Duration, Instant};

/// A moment of `CLOCK_MONOTONIC`, in nanoseconds. 2^64 ns is 584 years of
/// uptime: sums that would pass it are refused ([`after`](Self::after)),
/// as `Instant::checked_add` refuses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Mono(u64);

impl Mono {
    /// Now.
    #[inline]
    pub(crate) fn now() -> Mono {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: one valid, writable timespec. CLOCK_MONOTONIC exists on
        // every Linux; it cannot fail with a valid pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        // tv_sec and tv_nsec of CLOCK_MONOTONIC are never negative.
        Mono(
            (ts.tv_sec as u64)
                .wrapping_mul(1_000_000_000)
                .wrapping_add(ts.tv_nsec as u64),
        )
    }

    /// `d` after this moment, or `None` past 2^64 ns (a deadline that
    /// never comes).
    #[inline]
    pub(crate) fn after(self, d: Duration) -> Option<Mono> {
        let ns = d
            .as_secs()
            .checked_mul(1_000_000_000)?
            .checked_add(u64::from(d.subsec_nanos()))?;
        self.0.checked_add(ns).map(Mono)
    }

    /// Nanoseconds from this moment to `later`; 0 when `later` is not
    /// later.
    #[inline]
    pub(crate) fn until(self, later: Mono) -> u64 {
        later.0.saturating_sub(self.0)
    }

    /// The time since this moment.
    pub(crate) fn elapsed(self) -> Duration {
        Duration::from_nanos(self.until(Mono::now()))
    }

    /// `deadline` on this clock: never before it (the `Instant` is read
    /// first, so what is left of it is counted from a moment no earlier).
    pub(crate) fn of(deadline: Instant) -> Option<Mono> {
        let left = deadline.saturating_duration_since(Instant::now());
        Mono::now().after(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moments_follow_instants_and_sums_saturate_to_never() {
        let i0 = Instant::now();
        let m0 = Mono::now();
        std::thread::sleep(Duration::from_millis(20));
        let m1 = Mono::now();
        let i1 = Instant::now();
        // The same clock: the span read on it lies within the Instants'.
        assert!(m1 > m0);
        assert!(Duration::from_nanos(m0.until(m1)) >= Duration::from_millis(20));
        assert!(Duration::from_nanos(m0.until(m1)) <= i1 - i0);
        assert_eq!(m1.until(m0), 0);
        assert!(m0.elapsed() >= Duration::from_millis(20));

        assert_eq!(m0.after(Duration::ZERO), Some(m0));
        let later = m0.after(Duration::new(3, 5)).unwrap();
        assert_eq!(m0.until(later), 3_000_000_005);
        assert_eq!(m0.after(Duration::MAX), None);
        assert_eq!(
            m0.after(Duration::from_secs(u64::MAX / 1_000_000_000 + 1)),
            None
        );
        assert_eq!(Mono(u64::MAX - 1).after(Duration::from_nanos(2)), None);

        // A deadline as an Instant: on this clock, never earlier.
        let d = Instant::now() + Duration::from_millis(30);
        let m = Mono::of(d).unwrap();
        let left = Mono::now().until(m);
        assert!(Duration::from_nanos(left) >= d.saturating_duration_since(Instant::now()));
        assert!(Duration::from_nanos(left) <= Duration::from_millis(30));
        assert_eq!(
            Mono::of(Instant::now()).map(|m| m <= Mono::now()),
            Some(true)
        );
    }
}
