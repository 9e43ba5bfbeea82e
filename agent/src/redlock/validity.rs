//! Validity arithmetic, pure: time is passed in, never read.
//!
//! From the Redlock page: a lock set on a quorum between T1 (before the first
//! request) and T2 (after the quorum-th reply) is safe for
//! `ttl - (T2 - T1) - drift`, where the drift allowance is
//! `ttl * drift_factor + 2ms`.

use std::time::Duration;

/// The fixed part of the drift allowance: the page's "few milliseconds".
pub const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// Clock-drift allowance for one TTL.
///
/// Invariant: `drift_factor` is in `[0, 0.5)` (the config refuses others).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Drift {
    factor: f64,
}

impl Drift {
    pub fn new(factor: f64) -> Drift {
        debug_assert!((0.0..0.5).contains(&factor), "drift_factor {factor}");
        Drift { factor }
    }

    /// `ttl * drift_factor + 2ms`.
    pub fn allowance(self, ttl: Duration) -> Duration {
        ttl.mul_f64(self.factor) + DRIFT_FLOOR
    }

    /// How long a lock set with `ttl` that took `elapsed` to reach a quorum
    /// is safe to use, or `None` when nothing is left (the lock must be
    /// released, not used).
    pub fn validity(self, ttl: Duration, elapsed: Duration) -> Option<Duration> {
        ttl.checked_sub(elapsed)?
            .checked_sub(self.allowance(ttl))
            .filter(|v| !v.is_zero())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn validity_is_ttl_minus_elapsed_minus_drift() {
        let drift = Drift::new(0.01);
        // 10s * 0.01 + 2ms = 102ms of drift.
        assert_eq!(drift.allowance(ms(10_000)), ms(102));
        assert_eq!(drift.validity(ms(10_000), ms(0)), Some(ms(9_898)));
        assert_eq!(drift.validity(ms(10_000), ms(398)), Some(ms(9_500)));
    }

    #[test]
    fn no_validity_when_elapsed_eats_the_ttl() {
        let drift = Drift::new(0.01);
        assert_eq!(
            drift.validity(ms(1_000), ms(988)),
            None,
            "exactly zero left"
        );
        assert_eq!(drift.validity(ms(1_000), ms(987)), Some(ms(1)));
        assert_eq!(
            drift.validity(ms(1_000), ms(5_000)),
            None,
            "elapsed beyond ttl"
        );
        assert_eq!(
            drift.validity(ms(1), ms(0)),
            None,
            "ttl below the drift floor"
        );
    }

    #[test]
    fn zero_factor_still_keeps_the_floor() {
        assert_eq!(Drift::new(0.0).validity(ms(100), ms(10)), Some(ms(88)));
    }
}
