//! Fencing tokens minted by the quorum that grants the lock.
//!
//! Each master keeps one counter, `<key_prefix> fence` (the space keeps it
//! apart from every lock key). A fenced grant takes two rounds:
//! 1. the vote (`ACQUIRE` (`crate::node::scripts`)) reads the counter atomically
//!    with the `SET NX`;
//! 2. with a quorum of yes votes, the fence is `t = max(highest counter
//!    read + 1, floor)`, and every master that voted yes raises its counter
//!    to `t` only while the lock key still holds this grant's token
//!    (`FENCE` (`crate::node::scripts`)). The grant stands once a quorum confirms,
//!    within the validity counted from before round 1.
//!
//! Why fences only grow: a later holder B wins a master only after A's key
//! is gone from it. Any two quorums intersect; on a master in both A's
//! round-2 quorum and B's yes votes, A's raise happened while A's key was
//! there, so before B's `SET NX`, and B's vote reads a counter of at least
//! `t_A`: `t_B > t_A`. The same holds across resources (one counter per
//! master), and for any grant answered before another's request began.
//!
//! A master that loses its keys loses its counter with them; the in-vote
//! marker check keeps its votes out until readmission, which first raises
//! its counter to the highest read from enough of the other masters that
//! every round-2 quorum is among them ([`catch_up_reads`]). The floor,
//! microseconds since the Unix epoch, covers the case where too many lost
//! their counters at once for such a read: delayed restart has then
//! blocked every grant for `max_ttl + extra`, so the floor is past every
//! earlier fence as long as the agents' clocks disagree by less than that.
//!
//! The floor is the agent's clock, but never one agent's clock alone: it
//! counts only while it is within [`FenceSettings::clock_bound`] (that same
//! period) of the masters' clocks as this agent last read them (their
//! median, which no single master moves far; see
//! [`crate::node::clock`]). An agent whose clock is further off, ahead or
//! behind, says so in its log and mints without a floor
//! ([`bounded_floor`]): a clock centuries ahead can no longer raise every
//! counter to [`MAX_FENCE`] and stop every later fence from growing.

use std::time::{SystemTime, UNIX_EPOCH};

/// The test-only switch that skips round 2's write-back, so a control run
/// can show the fault suite's checker finding fences out of order. An
/// environment variable, never a config key.
pub use redlock_testkit::switches::NO_FENCE_WRITEBACK as NO_WRITEBACK_SWITCH;

/// The test-only switch that shifts this agent's clock for the floor only
/// (signed milliseconds), to model hosts whose clocks disagree.
pub use redlock_testkit::switches::FENCE_CLOCK_SKEW_MS as CLOCK_SKEW_SWITCH;

/// The largest fence: 2^53 - 1, exact as a JSON number in every parser
/// and as a Lua number in the scripts.
pub const MAX_FENCE: u64 = (1 << 53) - 1;

/// How fences are minted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FenceSettings {
    /// Raise the counters in round 2 (always, but for control runs).
    pub writeback: bool,
    /// Added to the clock for the floor (0, but for tests).
    pub clock_skew_ms: i64,
    /// How far the agent's clock may be from the masters' for the floor to
    /// count: `lock.max_ttl + delayed_restart.extra`, the period the
    /// fencing guarantee assumes clocks agree within.
    pub clock_bound: std::time::Duration,
}

impl Default for FenceSettings {
    fn default() -> FenceSettings {
        FenceSettings {
            writeback: true,
            clock_skew_ms: 0,
            clock_bound: std::time::Duration::from_secs(60),
        }
    }
}

impl FenceSettings {
    /// The settings the test-only switches ask for, if any.
    pub fn from_env() -> FenceSettings {
        FenceSettings {
            writeback: std::env::var_os(NO_WRITEBACK_SWITCH).is_none_or(|v| v != "1"),
            clock_skew_ms: std::env::var(CLOCK_SKEW_SWITCH)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            ..FenceSettings::default()
        }
    }
}

/// Microseconds since the Unix epoch, shifted by `skew_ms`: the lowest
/// fence this agent mints now.
pub fn floor(skew_ms: i64) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
    now.saturating_add_signed(skew_ms.saturating_mul(1000))
        .min(MAX_FENCE)
}

/// The floor a grant may use: `floor` (this agent's clock) while it is
/// within `bound` of `masters` (the masters' clocks, microseconds since the
/// epoch, when known), else `Err` with how far off it is, signed (ahead
/// positive). Where the masters' clocks are unknown (none read yet, an ACL
/// refusing `INFO`), the agent's clock is all there is.
pub fn bounded_floor(
    floor: u64,
    masters: Option<u64>,
    bound: std::time::Duration,
) -> Result<u64, i128> {
    let Some(masters) = masters else {
        return Ok(floor);
    };
    let off = i128::from(floor) - i128::from(masters);
    if off.unsigned_abs() <= bound.as_micros() {
        Ok(floor)
    } else {
        Err(off)
    }
}

/// The middle value of `values` (the lower of the two middle ones for an
/// even count): the masters' time as most of them see it, which no single
/// master's clock can move far.
pub fn median(mut values: Vec<u64>) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    Some(values[(values.len() - 1) / 2])
}

/// The fence of a grant whose yes votes read at most `highest`.
pub fn next(highest: u64, floor: u64) -> u64 {
    highest.saturating_add(1).max(floor).min(MAX_FENCE)
}

/// How many of the other masters a readmission must read counters from,
/// out of `masters` configured with quorum `quorum`: enough that any
/// round-2 quorum that included the readmitted master has another member
/// among them (`|reads| + (quorum - 1) > masters - 1`). With one master
/// there is no other: the floor alone carries fences across its loss.
pub fn catch_up_reads(masters: usize, quorum: usize) -> usize {
    (masters + 1)
        .saturating_sub(quorum)
        .min(masters.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_is_above_every_counter_read_and_the_floor() {
        assert_eq!(next(41, 7), 42);
        assert_eq!(next(41, 100), 100);
        assert_eq!(next(0, 0), 1);
        assert_eq!(next(MAX_FENCE, 0), MAX_FENCE);
    }

    #[test]
    fn the_floor_is_microseconds_since_the_epoch_and_follows_the_skew() {
        let plain = floor(0);
        // 2020-01-01 in microseconds: the clock is not read in seconds.
        assert!(plain > 1_577_836_800_000_000);
        assert!(plain < MAX_FENCE);
        let behind = floor(-5_000);
        assert!(behind + 4_000_000 < floor(0));
    }

    #[test]
    fn the_floor_counts_only_near_the_masters_clocks() {
        let minute = std::time::Duration::from_secs(60);
        let now = 1_764_000_000_000_000;
        assert_eq!(bounded_floor(now, Some(now + 59_000_000), minute), Ok(now));
        assert_eq!(bounded_floor(now, None, minute), Ok(now));
        // 230 years ahead, or an hour behind: refused, with the offset.
        let far = MAX_FENCE;
        assert_eq!(
            bounded_floor(far, Some(now), minute),
            Err(i128::from(far) - i128::from(now))
        );
        assert_eq!(
            bounded_floor(now - 3_600_000_000, Some(now), minute),
            Err(-3_600_000_000)
        );
    }

    #[test]
    fn the_median_is_what_most_masters_say() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![5]), Some(5));
        assert_eq!(median(vec![9, 1, 5]), Some(5));
        assert_eq!(median(vec![u64::MAX, 1, 2, 3, 4]), Some(3));
        assert_eq!(median(vec![4, 1, 3, 2]), Some(2));
    }

    #[test]
    fn catch_up_reads_meet_every_other_quorum_member() {
        for masters in 1..=9 {
            let quorum = masters / 2 + 1;
            let reads = catch_up_reads(masters, quorum);
            assert!(reads < masters, "only the other masters can be read");
            if masters > 1 {
                // Any quorum with the readmitted master has quorum - 1
                // others; together with the reads they overflow the others.
                assert!(reads + (quorum - 1) > masters - 1, "{masters} masters");
            }
        }
        assert_eq!(catch_up_reads(5, 3), 3);
        assert_eq!(catch_up_reads(3, 2), 2);
        assert_eq!(catch_up_reads(1, 1), 0);
    }
}
