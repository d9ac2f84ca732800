//! Time in the model: the waits of a requester whose responder is not ready
//! (RNR) or does not answer (no such QP or DCT, or not in RTR/RTS). They
//! end as on the wire, after the QP's retry counts and timers: RNR after
//! `(rnr_retry + 1) × min_rnr_timer` (never with `rnr_retry = 7`), no answer
//! after `(retry_cnt + 1) × 4.096 µs × 2^timeout` (never with `timeout = 0`).
//! Nothing else in the model takes time.

use crate::device::cq::syndrome as syn;
use crate::device::outcome::Outcome;
use crate::model::state::Device;
use std::time::{Duration, Instant};

/// `MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR`.
const RNR_RETRY_EXC: u8 = 0x16;

/// The RNR NAK timer of code `c` (IB spec, table of `min_rnr_timer`), in µs.
pub fn rnr_timer_us(c: u8) -> u64 {
    const US: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    US[usize::from(c & 31)]
}

/// Applies the waiting rules to the outcome of the WQE at `ci` of QP `h`:
/// a stall or a missing answer becomes a wait until its deadline, then the
/// error; any other outcome ends the wait.
pub fn wait(dev: &mut Device, h: u32, ci: u16, outcome: Outcome) -> Outcome {
    let q = dev.qps.get_mut(&h).expect("live QP");
    let a = q.attrs;
    let limit = match &outcome {
        Outcome::Stall(timer) if a.rnr_retry < 7 => {
            Some(Some(rnr_timer_us(*timer) * (u64::from(a.rnr_retry) + 1)))
        }
        Outcome::Stall(_) => Some(None),
        Outcome::Error(s, _) if *s == syn::RETRY_EXC && a.timeout != 0 => {
            let per = 4.096 * f64::from(1u32 << a.timeout.min(31));
            Some(Some((per * (f64::from(a.retry_cnt) + 1.0)) as u64))
        }
        Outcome::Error(s, _) if *s == syn::RETRY_EXC => Some(None),
        _ => None,
    };
    let Some(limit) = limit else {
        q.waiting = None;
        return outcome;
    };
    let now = Instant::now();
    let deadline = match q.waiting {
        Some((idx, d)) if idx == ci => d,
        _ => {
            let d = limit.map(|us| now + Duration::from_micros(us));
            q.waiting = Some((ci, d));
            d
        }
    };
    if deadline.is_some_and(|d| now >= d) {
        q.waiting = None;
        return match outcome {
            Outcome::Stall(_) => Outcome::Error(RNR_RETRY_EXC, "RNR retries exhausted".into()),
            other => other,
        };
    }
    Outcome::Stall(0)
}

#[cfg(test)]
mod tests {
    use super::rnr_timer_us;

    #[test]
    fn rnr_timer_codes() {
        assert_eq!(rnr_timer_us(0), 655_360);
        assert_eq!(rnr_timer_us(1), 10);
        assert_eq!(rnr_timer_us(12), 640);
        assert_eq!(rnr_timer_us(31), 491_520);
    }
}
