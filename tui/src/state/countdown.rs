//! Countdowns: a TTL read from the agent at one instant, projected forward so
//! the views tick smoothly between polls.
//!
//! The read instant is when the request was *sent*: the agent read the TTL
//! some time after that, so the projection errs towards less time left,
//! never more.

use std::time::{Duration, Instant};

/// A remaining time as read at `read_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Countdown {
    left_at_read: Duration,
    read_at: Instant,
}

impl Countdown {
    pub fn new(left: Duration, read_at: Instant) -> Countdown {
        Countdown {
            left_at_read: left,
            read_at,
        }
    }

    pub fn from_ms(left_ms: u64, read_at: Instant) -> Countdown {
        Countdown::new(Duration::from_millis(left_ms), read_at)
    }

    /// Time left at `now`; zero once expired, and never more than was read
    /// (an instant before the read does not add time).
    pub fn left(&self, now: Instant) -> Duration {
        self.left_at_read
            .saturating_sub(now.saturating_duration_since(self.read_at))
    }

    /// The value as read, before any ticking.
    pub fn at_read(&self) -> Duration {
        self.left_at_read
    }

    pub fn expired(&self, now: Instant) -> bool {
        self.left(now).is_zero()
    }
}

/// How close a countdown is to its end, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Urgency {
    Calm,
    Warning,
    Critical,
    Expired,
}

/// Below this much time left a countdown is critical whatever its length.
const CRITICAL_FLOOR: Duration = Duration::from_secs(1);
/// Below this much time left a countdown is at least a warning.
const WARNING_FLOOR: Duration = Duration::from_secs(3);

/// Urgency of `left` out of `full` (the longest value seen for this
/// countdown, e.g. the lock's TTL): critical under 10% or 1s, warning under
/// 25% or 3s.
pub fn urgency(left: Duration, full: Duration) -> Urgency {
    if left.is_zero() {
        return Urgency::Expired;
    }
    let full = full.max(left);
    let fraction = left.as_secs_f64() / full.as_secs_f64();
    if left < CRITICAL_FLOOR || fraction <= 0.10 {
        Urgency::Critical
    } else if left < WARNING_FLOOR || fraction <= 0.25 {
        Urgency::Warning
    } else {
        Urgency::Calm
    }
}

/// Fraction of `full` still left, in `0.0..=1.0`, for countdown bars.
pub fn fraction_left(left: Duration, full: Duration) -> f64 {
    if full.is_zero() {
        return 0.0;
    }
    (left.as_secs_f64() / full.as_secs_f64()).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_down_from_the_read_instant_and_stops_at_zero() {
        let t0 = Instant::now();
        let c = Countdown::from_ms(3_000, t0);
        assert_eq!(c.left(t0), Duration::from_secs(3));
        assert_eq!(
            c.left(t0 + Duration::from_millis(1_250)),
            Duration::from_millis(1_750)
        );
        assert_eq!(c.left(t0 + Duration::from_secs(3)), Duration::ZERO);
        assert_eq!(c.left(t0 + Duration::from_secs(60)), Duration::ZERO);
        assert!(c.expired(t0 + Duration::from_secs(4)));
        assert!(!c.expired(t0));
    }

    #[test]
    fn an_instant_before_the_read_adds_no_time() {
        let t0 = Instant::now() + Duration::from_secs(5);
        let c = Countdown::from_ms(1_000, t0);
        assert_eq!(c.left(t0 - Duration::from_secs(2)), Duration::from_secs(1));
    }

    #[test]
    fn urgency_follows_the_fraction_left_and_absolute_floors() {
        let full = Duration::from_secs(30);
        assert_eq!(urgency(Duration::from_secs(20), full), Urgency::Calm);
        assert_eq!(urgency(Duration::from_secs(7), full), Urgency::Warning);
        assert_eq!(urgency(Duration::from_secs(2), full), Urgency::Critical);
        assert_eq!(urgency(Duration::ZERO, full), Urgency::Expired);
        // A short lock: 2.5s of 4s is 62% left, but under the 3s floor.
        assert_eq!(
            urgency(Duration::from_millis(2_500), Duration::from_secs(4)),
            Urgency::Warning
        );
        assert_eq!(
            urgency(Duration::from_millis(900), Duration::from_secs(2)),
            Urgency::Critical
        );
        // A full value smaller than what is left (a renewal) is not an error.
        assert_eq!(urgency(Duration::from_secs(50), full), Urgency::Calm);
    }

    #[test]
    fn fraction_is_clamped() {
        let full = Duration::from_secs(10);
        assert_eq!(fraction_left(Duration::from_secs(5), full), 0.5);
        assert_eq!(fraction_left(Duration::from_secs(20), full), 1.0);
        assert_eq!(fraction_left(Duration::from_secs(1), Duration::ZERO), 0.0);
    }
}
