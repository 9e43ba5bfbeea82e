//! The fleet's report as every agent sees it: the scanning agent writes
//! its report (a [`LeaksResponse`]) on every master after each scan, with
//! a TTL of a few intervals ([`report_ttl`]); the others read every
//! master's copy once per interval (an idle agent less often:
//! [`looks_every`]) and keep the freshest ([`newer`]:
//! the highest fence, then the most scans). An answer says whose report
//! it is, how old, and whether it is older than the fleet's scans should
//! let it be ([`answer`]): never a stale one presented as current.
//!
//! Pure: times are passed in.

use std::time::Duration;

use redlock_wire::LeaksResponse;

/// What `/v1/leaks` answers from: the freshest report this agent knows,
/// its own or read from the masters.
#[derive(Debug)]
pub(super) struct View {
    pub(super) report: LeaksResponse,
    /// This agent made `report`: it holds the scan lock.
    pub(super) scanning: bool,
    /// Masters whose copy of the report could not be read at the last look.
    pub(super) copies_unread: Vec<String>,
    /// How often this agent reads the report now: the period its age is
    /// judged stale by ([`looks_every`]).
    pub(super) looks_every: Duration,
}

/// `a` is fresher than `b`: made by a later scanner (a higher fence), or
/// later by the same one (more scans). A report without a fence (none
/// yet, or an older agent's) is older than any with one.
pub fn newer(a: &LeaksResponse, b: &LeaksResponse) -> bool {
    (a.fence.unwrap_or(0), a.scans) > (b.fence.unwrap_or(0), b.scans)
}

/// The freshest of the copies read from the masters.
pub fn freshest(copies: impl IntoIterator<Item = LeaksResponse>) -> Option<LeaksResponse> {
    copies
        .into_iter()
        .reduce(|best, copy| if newer(&copy, &best) { copy } else { best })
}

/// How long the copies of a report live on the masters: three intervals
/// and twice the scan that made it (a scan may take longer than the
/// interval, rate-limited over many keys), so the next scan's report
/// replaces them before they expire, even a slower one. A fleet whose
/// scanner is gone leaves no report behind for long.
pub fn report_ttl(interval: Duration, took: Duration) -> Duration {
    interval * 3 + took * 2
}

/// The answer to `GET /v1/leaks` from `report` at `now_ms` (Unix ms, this
/// agent's clock): with its age, whether it is stale, whether this agent
/// made it (`scanning`) and the masters whose copy it could not read.
/// `interval` is this agent's own, which bounds how often it looks.
pub fn answer(
    report: &LeaksResponse,
    scanning: bool,
    copies_unread: &[String],
    interval: Duration,
    now_ms: u64,
) -> LeaksResponse {
    let mut answer = report.clone();
    answer.age_ms = report.scanned_at_ms.map(|at| now_ms.saturating_sub(at));
    answer.stale = answer
        .age_ms
        .is_some_and(|age| age > stale_after(report, interval));
    answer.scanning = scanning;
    answer.copies_unread = copies_unread.to_vec();
    answer
}

/// The age past which a report is stale: three intervals (the scanner's
/// or this agent's, the longer) and the scan's own duration. A scanner
/// that lives writes a new report every interval and scan; a standby
/// reads one every interval of its own.
fn stale_after(report: &LeaksResponse, interval: Duration) -> u64 {
    let own = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX);
    let took = report
        .nodes
        .iter()
        .map(|n| n.duration_ms)
        .max()
        .unwrap_or(0);
    report
        .interval_ms
        .max(own)
        .saturating_mul(3)
        .saturating_add(took)
}

/// How long the scanner task waits before its next round or look. A
/// scanner scans every interval, and so does a standby that may have to
/// take over (its last look found the scan lock free) or whose lock
/// service has work. A standby of an idle agent while another agent
/// scans looks every `health.idle_interval` when that is longer: what an
/// idle fleet costs the masters does not grow as the scan interval
/// shrinks (the scanner's own cost does). Its `/v1/leaks` readers wake it
/// ([`super::Scanner::report`]), and it takes over a stopped scanner's lock at
/// most one idle interval late; the scan itself goes on meanwhile when
/// any busy agent of the fleet is a standby.
pub fn looks_every(
    interval: Duration,
    idle_interval: Duration,
    scanning: bool,
    others_scan: bool,
    idle: bool,
) -> Duration {
    if !scanning && others_scan && idle {
        interval.max(idle_interval)
    } else {
        interval
    }
}

/// Whether a standby's look rides on the health probes' calls (see
/// `crate::node::leak::Look`): it is idle behind a live scanner, so it
/// looks once per `health.idle_interval` ([`looks_every`]), as often as
/// its probes come. One that looks less often (a scan interval above the
/// idle interval) reads the masters itself: one call per look costs them
/// less than a read in every probe.
pub fn folded(
    interval: Duration,
    idle_interval: Duration,
    scanning: bool,
    others_scan: bool,
    idle: bool,
) -> bool {
    !scanning && others_scan && idle && interval <= idle_interval
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_idle_standby_behind_a_live_scanner_looks_seldom() {
        let (interval, idle) = (Duration::from_secs(5), Duration::from_secs(30));
        // scanning, others_scan, idle
        assert_eq!(looks_every(interval, idle, false, true, true), idle);
        assert_eq!(looks_every(interval, idle, true, false, true), interval);
        assert_eq!(
            looks_every(interval, idle, false, false, true),
            interval,
            "may take over"
        );
        assert_eq!(
            looks_every(interval, idle, false, true, false),
            interval,
            "has work"
        );
        let long = Duration::from_secs(60);
        assert_eq!(
            looks_every(long, idle, false, true, true),
            long,
            "never more often"
        );
    }

    #[test]
    fn only_an_idle_standby_behind_a_live_scanner_looks_through_its_probes() {
        let (interval, idle) = (Duration::from_secs(5), Duration::from_secs(30));
        // scanning, others_scan, idle
        assert!(folded(interval, idle, false, true, true));
        assert!(folded(idle, idle, false, true, true), "the defaults");
        assert!(!folded(interval, idle, true, false, true), "scans");
        assert!(!folded(interval, idle, false, false, true), "may take over");
        assert!(!folded(interval, idle, false, true, false), "has work");
        let long = Duration::from_secs(60);
        assert!(!folded(long, idle, false, true, true), "looks less often");
    }

    fn report(fence: Option<u64>, scans: u64, scanned_at_ms: Option<u64>) -> LeaksResponse {
        LeaksResponse {
            scans,
            interval_ms: 1000,
            repair: "none".into(),
            nodes: Vec::new(),
            unread: Vec::new(),
            partial: false,
            scanner: fence.map(|f| format!("agent-{f}")),
            fence,
            scanned_at_ms,
            last_success_ms: scanned_at_ms,
            age_ms: None,
            stale: false,
            scanning: false,
            copies_unread: Vec::new(),
        }
    }

    #[test]
    fn a_later_scanner_wins_over_more_scans() {
        let old = report(Some(5), 90, Some(1_000));
        let new = report(Some(9), 12, Some(2_000));
        assert!(newer(&new, &old));
        assert!(!newer(&old, &new));
        assert!(newer(&report(Some(5), 91, None), &old));
        assert!(newer(&old, &report(None, 500, None)));
        let best = freshest([old.clone(), new.clone(), report(Some(9), 11, None)]).unwrap();
        assert_eq!(best, new);
        assert_eq!(freshest(Vec::new()), None);
    }

    #[test]
    fn an_answer_says_its_age_and_when_it_is_stale() {
        let r = report(Some(3), 4, Some(10_000));
        let fresh = answer(&r, false, &[], Duration::from_secs(1), 12_000);
        assert_eq!(fresh.age_ms, Some(2_000));
        assert!(!fresh.stale);
        let old = answer(&r, false, &["r2".into()], Duration::from_secs(1), 13_001);
        assert!(old.stale, "over three intervals");
        assert_eq!(old.copies_unread, ["r2"]);
        // A clock behind the scanner's: age 0, not a wrap.
        assert_eq!(
            answer(&r, true, &[], Duration::from_secs(1), 9_000).age_ms,
            Some(0)
        );
        // An agent that looks every 10s is not stale after 3s.
        assert!(!answer(&r, false, &[], Duration::from_secs(10), 14_000).stale);
        // No report yet: no age, not stale.
        let none = answer(
            &report(None, 0, None),
            false,
            &[],
            Duration::from_secs(1),
            5,
        );
        assert_eq!(none.age_ms, None);
        assert!(!none.stale);
    }

    #[test]
    fn copies_outlive_a_slow_next_scan() {
        let interval = Duration::from_secs(5);
        let took = Duration::from_secs(8);
        assert!(report_ttl(interval, took) > interval + took * 2);
    }
}
