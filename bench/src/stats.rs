//! The arithmetic every driver shares: nearest-rank percentiles, Jain's
//! fairness index, and the hot-key tracker (hand-off, gaps, overlaps).
//!
//! The node and Python drivers implement the same definitions; keep the
//! three in step (`bench/node/driver.mjs`, `bench/python/driver.py`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::spec::Percentiles;

/// Nearest-rank percentiles of `samples` (milliseconds). Sorts in place.
pub fn percentiles(samples: &mut [f64]) -> Percentiles {
    if samples.is_empty() {
        return Percentiles::default();
    }
    samples.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        let n = samples.len();
        // ceil(p * n) - 1, within 0..n
        let index = ((p * n as f64).ceil() as usize).clamp(1, n) - 1;
        samples[index]
    };
    Percentiles {
        count: samples.len() as u64,
        p50: rank(0.50),
        p90: rank(0.90),
        p99: rank(0.99),
        p999: rank(0.999),
        max: samples[samples.len() - 1],
    }
}

/// Jain's fairness index over per-client grants: 1 when every client got
/// the same number, 1/n when one client got them all. `None` without grants.
pub fn jain(grants: &[u64]) -> Option<f64> {
    let sum: f64 = grants.iter().map(|&g| g as f64).sum();
    let squares: f64 = grants.iter().map(|&g| (g as f64) * (g as f64)).sum();
    if grants.is_empty() || squares == 0.0 {
        return None;
    }
    Some(sum * sum / (grants.len() as f64 * squares))
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The measured window of a run: after the warm-up, until the end.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub start: Instant,
    pub end: Instant,
}

impl Window {
    pub fn contains(&self, t: Instant) -> bool {
        t >= self.start && t <= self.end
    }
}

/// Watches one hot key across every client of a driver: who holds it, when
/// the last release started, and the time between grants.
#[derive(Debug, Default)]
pub struct HotTracker {
    inner: Mutex<HotInner>,
}

#[derive(Debug, Default)]
struct HotInner {
    holders: u32,
    /// When the last release started, and by which client.
    release_started: Option<(Instant, usize)>,
    handoffs: Vec<f64>,
    /// Hand-offs to a client other than the one that released.
    handoffs_other: Vec<f64>,
    grants: Vec<Instant>,
    overlaps: u64,
}

/// What the tracker saw, for the report.
#[derive(Debug, Default)]
pub struct HotSummary {
    pub handoff_ms: Percentiles,
    pub handoff_other_ms: Percentiles,
    pub longest_gap_ms: f64,
    pub overlaps: u64,
}

impl HotTracker {
    fn lock(&self) -> std::sync::MutexGuard<'_, HotInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Client `client` got the lock at `now`.
    pub fn granted(&self, now: Instant, window: &Window, client: usize) {
        let mut inner = self.lock();
        if inner.holders > 0 {
            inner.overlaps += 1;
        }
        inner.holders += 1;
        if let Some((started, releaser)) = inner.release_started.take() {
            if window.contains(now) {
                let handoff = ms(now.saturating_duration_since(started));
                inner.handoffs.push(handoff);
                if releaser != client {
                    inner.handoffs_other.push(handoff);
                }
            }
        }
        if window.contains(now) {
            inner.grants.push(now);
        }
    }

    /// The holder, client `client`, is about to send its release.
    pub fn releasing(&self, now: Instant, client: usize) {
        let mut inner = self.lock();
        inner.holders = inner.holders.saturating_sub(1);
        inner.release_started = Some((now, client));
    }

    pub fn summary(&self, window: &Window) -> HotSummary {
        let mut inner = self.lock();
        let mut edges = Vec::with_capacity(inner.grants.len() + 2);
        edges.push(window.start);
        edges.extend(inner.grants.iter().copied());
        edges.push(window.end);
        edges.sort();
        let longest = edges
            .windows(2)
            .map(|w| ms(w[1].saturating_duration_since(w[0])))
            .fold(0.0, f64::max);
        HotSummary {
            handoff_ms: percentiles(&mut inner.handoffs),
            handoff_other_ms: percentiles(&mut inner.handoffs_other),
            longest_gap_ms: longest,
            overlaps: inner.overlaps,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut samples: Vec<f64> = (1..=1000).map(f64::from).collect();
        let p = percentiles(&mut samples);
        assert_eq!(
            (p.p50, p.p90, p.p99, p.p999, p.max),
            (500.0, 900.0, 990.0, 999.0, 1000.0)
        );
        let p = percentiles(&mut [7.0]);
        assert_eq!((p.p50, p.p999), (7.0, 7.0));
    }

    #[test]
    fn jain_is_one_when_equal_and_one_over_n_when_one_takes_all() {
        assert_eq!(jain(&[5, 5, 5, 5]), Some(1.0));
        assert_eq!(jain(&[8, 0, 0, 0]), Some(0.25));
        assert_eq!(jain(&[0, 0]), None);
    }
}
