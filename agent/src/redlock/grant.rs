//! A grant: what the engine answers an acquisition with, how long it may
//! be used, and which masters hold it.
//!
//! ## Validity
//! Pure arithmetic: time is passed in, never read. From the Redlock page: a
//! lock set on a quorum between T1 (before the first request) and T2 (after
//! the quorum-th reply) is safe for `ttl - (T2 - T1) - drift`, where the
//! drift allowance is `ttl * drift_factor + 2ms`.
//!
//! ## Holding
//! The masters that hold a lock's key: those whose vote (or whose answer to
//! the last extension) said yes, less those seen to lose keys since. A
//! lock stays safe only while a quorum of them remains, so a hold can be
//! told `lost` the moment a loss takes them below it, instead of at its
//! next renewal.
//!
//! The caller gets its grant (or extension) at the quorum-th yes; the
//! other masters' answers are still on their way, and fill this in as they
//! come (see [`super::Redlock::acquire_once`] and [`super::Redlock::extend`]),
//! so a master that said yes a moment after the quorum counts too. One
//! still unanswered counts as not holding: the count never includes a
//! master that may not hold the key.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::master::Master;
use super::token::Token;

/// A lock this agent acquired.
#[derive(Debug, Clone)]
pub struct Grant {
    pub token: Token,
    pub ttl: Duration,
    /// Safe to use for this long from `granted_at`.
    pub validity: Duration,
    pub granted_at: Instant,
    /// The fencing token, when one was asked for (see [`super::fence`]).
    pub fence: Option<u64>,
    /// The masters that voted yes, filled in as the stragglers answer.
    pub holding: Arc<Holding>,
}

impl Grant {
    pub fn valid_until(&self) -> Instant {
        self.granted_at + self.validity
    }
}

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

/// The masters a grant or an extension is known to hold on.
#[derive(Debug)]
pub struct Holding {
    /// Per configured master, in config order: it said yes.
    yes: Vec<AtomicBool>,
    /// Per master, its [`Master::losses`] read before the request was
    /// sent: a loss seen after that may have taken the key.
    marks: Vec<u64>,
}

impl Holding {
    /// Nothing confirmed yet; the masters' loss counts read now, before
    /// the request is sent.
    pub(crate) fn new<M: Master>(nodes: &[Arc<M>]) -> Arc<Holding> {
        Arc::new(Holding {
            yes: nodes.iter().map(|_| AtomicBool::new(false)).collect(),
            marks: nodes.iter().map(|n| n.losses()).collect(),
        })
    }

    /// Master `index` (in config order) said yes.
    pub(crate) fn confirm(&self, index: usize) {
        // A flag read on its own: no other memory depends on its order.
        if let Some(yes) = self.yes.get(index) {
            yes.store(true, Ordering::Relaxed);
        }
    }

    /// How many of `nodes` (the engine's, in config order) said yes and
    /// have not lost `key` since.
    pub fn still_on<M: Master>(&self, nodes: &[Arc<M>], key: &str) -> usize {
        nodes
            .iter()
            .zip(self.yes.iter().zip(&self.marks))
            .filter(|(node, (yes, mark))| {
                yes.load(Ordering::Relaxed) && !node.lost_since(key, **mark)
            })
            .count()
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
