//! The summary strip's figures over the last minute, from the agent's
//! cumulative counters: a rate is the difference between two readings over
//! the time between them, a percentile comes from the difference of two
//! histogram readings.
//!
//! A reading whose `uptime_ms` went backwards means the agent restarted and
//! its counters began again at zero: older readings are dropped rather than
//! producing negative rates.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use redlock_wire::SummaryResponse;

use super::Known;

/// How far back the strip looks.
pub const WINDOW: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, PartialEq)]
struct Reading {
    at: Instant,
    summary: SummaryResponse,
}

/// Readings of `GET /v1/summary` covering the last [`WINDOW`], plus one just
/// before it as the baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    readings: VecDeque<Reading>,
    /// Why there are no readings, when there are none.
    status: Known<()>,
}

impl Default for Summary {
    fn default() -> Summary {
        Summary {
            readings: VecDeque::new(),
            status: Known::Unknown,
        }
    }
}

impl Summary {
    /// Takes in a reading requested at `at`.
    pub fn apply(&mut self, summary: &SummaryResponse, at: Instant) {
        let restarted = self.readings.back().is_some_and(|last| {
            summary.uptime_ms < last.summary.uptime_ms
                || !same_bounds(&last.summary.wait_buckets, &summary.wait_buckets)
        });
        if restarted {
            self.readings.clear();
        }
        self.readings.push_back(Reading {
            at,
            summary: summary.clone(),
        });
        // Keep exactly one reading at or before the window's start.
        while self.readings.len() > 2 && self.readings[1].at + WINDOW <= at {
            self.readings.pop_front();
        }
        self.status = Known::Known(());
    }

    /// Forgets every reading: the connection dropped or the endpoint failed.
    pub fn forget(&mut self, why: Known<()>) {
        self.readings.clear();
        self.status = why;
    }

    pub fn status(&self) -> &Known<()> {
        &self.status
    }

    /// The newest reading.
    pub fn latest(&self) -> Option<&SummaryResponse> {
        self.readings.back().map(|r| &r.summary)
    }

    /// The oldest and newest readings, when they span some time.
    fn span(&self) -> Option<(&Reading, &Reading)> {
        let (first, last) = (self.readings.front()?, self.readings.back()?);
        (last.at > first.at).then_some((first, last))
    }

    /// Acquire answers per second (every outcome) over the window.
    pub fn acquire_rate(&self) -> Option<f64> {
        let (first, last) = self.span()?;
        Some(
            total(&last.summary.acquires).saturating_sub(total(&first.summary.acquires)) as f64
                / (last.at - first.at).as_secs_f64(),
        )
    }

    /// Share of acquire answers that were `acquired`, over the window.
    pub fn acquired_share(&self) -> Option<f64> {
        let (first, last) = self.span()?;
        let all = total(&last.summary.acquires).saturating_sub(total(&first.summary.acquires));
        let granted = count(&last.summary.acquires, "acquired")
            .saturating_sub(count(&first.summary.acquires, "acquired"));
        (all > 0).then(|| granted as f64 / all as f64)
    }

    /// The `q` quantile of acquire waits over the window; `None` when no
    /// acquire was answered in it.
    pub fn wait_quantile(&self, q: f64) -> Option<Duration> {
        let (first, last) = self.span()?;
        let delta = bucket_delta(&first.summary.wait_buckets, &last.summary.wait_buckets)?;
        quantile(&delta, q).map(Duration::from_secs_f64)
    }

    /// As [`Summary::wait_quantile`], every outcome together, shown honestly.
    pub fn wait_all(&self, q: f64) -> Option<Wait> {
        let (first, last) = self.span()?;
        let delta = bucket_delta(&first.summary.wait_buckets, &last.summary.wait_buckets)?;
        wait_quantile(&delta, q)
    }

    /// Whether the agent reports waits per outcome.
    pub fn has_outcome_waits(&self) -> bool {
        self.latest().is_some_and(|s| !s.waits.is_empty())
    }

    /// The `q` quantile of the waits that ended in `outcome` over the
    /// window, as it can honestly be shown; `None` when none ended so or
    /// the agent does not report waits per outcome.
    pub fn wait_of(&self, outcome: &str, q: f64) -> Option<Wait> {
        let (first, last) = self.span()?;
        let delta = bucket_delta(
            first.summary.waits.get(outcome)?,
            last.summary.waits.get(outcome)?,
        )?;
        wait_quantile(&delta, q)
    }

    /// Waits that ended in `outcome` over the window.
    pub fn answered(&self, outcome: &str) -> u64 {
        self.span().map_or(0, |(first, last)| {
            count(&last.summary.acquires, outcome)
                .saturating_sub(count(&first.summary.acquires, outcome))
        })
    }

    /// Failures per reason over the window, most frequent first, zeros left out.
    pub fn failures(&self) -> Vec<(String, u64)> {
        let Some((first, last)) = self.span() else {
            return Vec::new();
        };
        let mut failures: Vec<(String, u64)> = last
            .summary
            .failures
            .iter()
            .map(|(reason, &n)| {
                (
                    reason.clone(),
                    n.saturating_sub(count(&first.summary.failures, reason)),
                )
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        failures.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        failures
    }

    /// Consecutive readings in the window.
    fn intervals(&self) -> impl Iterator<Item = (&Reading, &Reading)> {
        self.readings.iter().zip(self.readings.iter().skip(1))
    }

    /// Acquire answers per second between consecutive readings.
    pub fn rate_series(&self) -> Vec<f64> {
        self.intervals()
            .map(|(a, b)| {
                let secs = (b.at - a.at).as_secs_f64();
                let n = total(&b.summary.acquires).saturating_sub(total(&a.summary.acquires));
                if secs > 0.0 {
                    n as f64 / secs
                } else {
                    0.0
                }
            })
            .collect()
    }

    /// The `q` wait quantile between consecutive readings, in seconds;
    /// `None` for intervals without acquires.
    pub fn wait_series(&self, q: f64) -> Vec<Option<f64>> {
        self.intervals()
            .map(|(a, b)| {
                bucket_delta(&a.summary.wait_buckets, &b.summary.wait_buckets)
                    .and_then(|d| quantile(&d, q))
            })
            .collect()
    }

    /// Failures for `reason` between consecutive readings.
    pub fn failure_series(&self, reason: &str) -> Vec<u64> {
        self.intervals()
            .map(|(a, b)| {
                count(&b.summary.failures, reason)
                    .saturating_sub(count(&a.summary.failures, reason))
            })
            .collect()
    }
}

fn total(counts: &BTreeMap<String, u64>) -> u64 {
    counts.values().sum()
}

fn count(counts: &BTreeMap<String, u64>, key: &str) -> u64 {
    counts.get(key).copied().unwrap_or(0)
}

fn same_bounds(a: &[(f64, u64)], b: &[(f64, u64)]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.0 == y.0)
}

/// `later - earlier` for each bucket of two cumulative histograms with the
/// same bounds.
pub fn bucket_delta(earlier: &[(f64, u64)], later: &[(f64, u64)]) -> Option<Vec<(f64, u64)>> {
    same_bounds(earlier, later).then(|| {
        earlier
            .iter()
            .zip(later)
            .map(|(e, l)| (l.0, l.1.saturating_sub(e.1)))
            .collect()
    })
}

/// A wait quantile as it can honestly be shown.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wait {
    /// Interpolated inside a bucket.
    Within(Duration),
    /// In the open bucket: only known to be above this bound.
    Above(Duration),
}

/// As [`quantile`], but a quantile in the open (`+Inf`) bucket is
/// [`Wait::Above`] the highest finite bound rather than equal to it.
pub fn wait_quantile(buckets: &[(f64, u64)], q: f64) -> Option<Wait> {
    let observed = buckets.last()?.1;
    let finite = buckets
        .iter()
        .rfind(|(b, _)| b.is_finite() && *b != f64::MAX)
        .copied();
    let rank = q.clamp(0.0, 1.0) * observed as f64;
    let value = quantile(buckets, q)?;
    match finite {
        // More than the rank lie above the highest finite bound.
        Some((bound, below)) if (below as f64) < rank && below < observed => {
            Some(Wait::Above(Duration::from_secs_f64(bound)))
        }
        _ => Some(Wait::Within(Duration::from_secs_f64(value))),
    }
}

/// The `q` quantile (`0.0..=1.0`) of a cumulative histogram of
/// `(upper bound, count)` buckets, interpolating linearly inside the bucket
/// as Prometheus' `histogram_quantile` does. A quantile that falls in the
/// last, unbounded bucket is reported as the highest finite bound.
/// `None` for an empty histogram.
pub fn quantile(buckets: &[(f64, u64)], q: f64) -> Option<f64> {
    let observed = buckets.last()?.1;
    if observed == 0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * observed as f64;
    let (mut lower, mut below) = (0.0_f64, 0_u64);
    for &(bound, cumulative) in buckets {
        if cumulative as f64 >= rank && cumulative > below {
            if !bound.is_finite() || bound == f64::MAX {
                return Some(lower);
            }
            let inside = (cumulative - below) as f64;
            return Some(lower + (bound - lower) * (rank - below as f64) / inside);
        }
        lower = if bound.is_finite() && bound != f64::MAX {
            bound
        } else {
            lower
        };
        below = cumulative;
    }
    Some(lower)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn reading(
        uptime_ms: u64,
        acquired: u64,
        taken: u64,
        waits: [u64; 4],
        no_quorum: u64,
    ) -> SummaryResponse {
        // Cumulative buckets 1ms, 10ms, 100ms, +Inf.
        let mut cumulative = 0;
        let wait_buckets = [0.001, 0.01, 0.1, f64::MAX]
            .iter()
            .zip(waits)
            .map(|(&le, n)| {
                cumulative += n;
                (le, cumulative)
            })
            .collect();
        SummaryResponse {
            version: "0.1.0".into(),
            uptime_ms,
            acquires: [
                ("acquired".to_string(), acquired),
                ("taken".to_string(), taken),
            ]
            .into(),
            failures: [
                ("no_quorum".to_string(), no_quorum),
                ("timeout".to_string(), 1),
            ]
            .into(),
            waits: BTreeMap::new(),
            wait_buckets,
            locks_held: 2,
            waiters: 1,
            permits_held: 0,
            readers_held: 0,
            leaderships_held: 0,
            leadership_changes: BTreeMap::new(),
        }
    }

    /// A 60s wait that ended `taken` lands above a 30s top bound: it is
    /// shown as "above 30s", not as 30s; waits per outcome stay apart.
    #[test]
    fn waits_above_the_top_bound_are_only_known_to_be_above_it() {
        let buckets = [(1.0, 0), (30.0, 0), (f64::MAX, 1)];
        assert_eq!(
            wait_quantile(&buckets, 0.5),
            Some(Wait::Above(Duration::from_secs(30)))
        );
        let buckets = [(1.0, 1), (30.0, 2), (f64::MAX, 2)];
        assert!(matches!(
            wait_quantile(&buckets, 0.99),
            Some(Wait::Within(_))
        ));

        let t0 = Instant::now();
        let mut summary = Summary::default();
        let mut first = reading(1_000, 0, 0, [0; 4], 0);
        first.waits = [
            (
                "acquired".to_string(),
                vec![(0.001, 0), (30.0, 0), (f64::MAX, 0)],
            ),
            (
                "taken".to_string(),
                vec![(0.001, 0), (30.0, 0), (f64::MAX, 0)],
            ),
        ]
        .into();
        let mut second = first.clone();
        second.uptime_ms = 61_000;
        second.acquires.insert("acquired".into(), 10);
        second.acquires.insert("taken".into(), 1);
        second.waits.insert(
            "acquired".into(),
            vec![(0.001, 10), (30.0, 10), (f64::MAX, 10)],
        );
        second
            .waits
            .insert("taken".into(), vec![(0.001, 0), (30.0, 0), (f64::MAX, 1)]);
        summary.apply(&first, t0);
        summary.apply(&second, t0 + Duration::from_secs(60));
        assert!(
            matches!(summary.wait_of("acquired", 0.99), Some(Wait::Within(d)) if d <= Duration::from_millis(1))
        );
        assert_eq!(
            summary.wait_of("taken", 0.5),
            Some(Wait::Above(Duration::from_secs(30)))
        );
        assert_eq!(summary.answered("taken"), 1);
        assert_eq!(summary.wait_of("no_quorum", 0.5), None);
    }

    #[test]
    fn quantiles_interpolate_inside_buckets() {
        let buckets = [(0.001, 0), (0.01, 50), (0.1, 100), (f64::MAX, 100)];
        let p50 = quantile(&buckets, 0.5).unwrap();
        assert!((p50 - 0.01).abs() < 1e-12, "{p50}");
        let p99 = quantile(&buckets, 0.99).unwrap();
        assert!((p99 - (0.01 + 0.09 * 0.98)).abs() < 1e-12, "{p99}");
        assert_eq!(quantile(&[(0.1, 0), (f64::MAX, 0)], 0.5), None);
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn a_quantile_in_the_open_bucket_is_the_highest_bound() {
        let buckets = [(0.1, 1), (1.0, 1), (f64::INFINITY, 10)];
        assert_eq!(quantile(&buckets, 0.99), Some(1.0));
        let buckets = [(0.1, 0), (f64::MAX, 3)];
        assert_eq!(quantile(&buckets, 0.5), Some(0.1));
    }

    #[test]
    fn rates_and_percentiles_come_from_the_window_deltas() {
        let t0 = Instant::now();
        let mut summary = Summary::default();
        assert_eq!(summary.acquire_rate(), None);
        summary.apply(&reading(1_000, 100, 0, [0, 100, 0, 0], 5), t0);
        assert_eq!(summary.acquire_rate(), None, "one reading is no rate");
        summary.apply(
            &reading(11_000, 180, 20, [100, 100, 0, 0], 7),
            t0 + Duration::from_secs(10),
        );
        assert_eq!(summary.acquire_rate(), Some(10.0));
        assert_eq!(summary.acquired_share(), Some(0.8));
        // The 100 new waits all fell in the first bucket (0..1ms).
        let p50 = summary.wait_quantile(0.5).unwrap();
        assert_eq!(p50, Duration::from_secs_f64(0.0005));
        assert_eq!(summary.failures(), [("no_quorum".to_string(), 2)]);
        assert_eq!(summary.rate_series(), [10.0]);
        assert_eq!(summary.failure_series("no_quorum"), [2]);
        assert_eq!(summary.wait_series(0.5).len(), 1);
        assert_eq!(summary.latest().unwrap().locks_held, 2);
    }

    #[test]
    fn readings_older_than_the_window_are_dropped_but_one_baseline_stays() {
        let t0 = Instant::now();
        let mut summary = Summary::default();
        for i in 0..=120 {
            summary.apply(
                &reading(i * 1_000, i, 0, [i, 0, 0, 0], 0),
                t0 + Duration::from_secs(i),
            );
        }
        assert_eq!(summary.readings.len(), 61);
        assert_eq!(summary.acquire_rate(), Some(1.0));
        assert_eq!(summary.rate_series().len(), 60);
    }

    #[test]
    fn an_agent_restart_starts_the_window_again() {
        let t0 = Instant::now();
        let mut summary = Summary::default();
        summary.apply(&reading(50_000, 1_000, 0, [1_000, 0, 0, 0], 9), t0);
        summary.apply(
            &reading(1_000, 3, 0, [3, 0, 0, 0], 0),
            t0 + Duration::from_secs(1),
        );
        assert_eq!(summary.acquire_rate(), None);
        assert!(summary.failures().is_empty());
        summary.apply(
            &reading(2_000, 5, 0, [5, 0, 0, 0], 0),
            t0 + Duration::from_secs(2),
        );
        assert_eq!(summary.acquire_rate(), Some(2.0));
    }

    #[test]
    fn forget_leaves_no_numbers() {
        let t0 = Instant::now();
        let mut summary = Summary::default();
        summary.apply(&reading(1_000, 1, 0, [1, 0, 0, 0], 0), t0);
        summary.apply(
            &reading(2_000, 2, 0, [2, 0, 0, 0], 0),
            t0 + Duration::from_secs(1),
        );
        summary.forget(Known::Unknown);
        assert_eq!(summary.acquire_rate(), None);
        assert_eq!(summary.wait_quantile(0.99), None);
        assert_eq!(summary.latest(), None);
    }
}
