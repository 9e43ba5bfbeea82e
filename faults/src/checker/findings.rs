//! What the checker finds, one type per kind of finding, each printed as
//! a line of the report.

use std::fmt;

use serde::Serialize;

use super::{multi, shared, Section};
use crate::clock::Mono;

/// Two clients inside the same resource at once, both believing they held it.
#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    pub resource: String,
    pub first: Section,
    pub second: Section,
    pub overlap_ms: f64,
    /// The overlap remains when validity is counted from the request.
    pub strict: bool,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SAFETY VIOLATION on {:?}: {:.1}ms of overlap{}\n    first:  {}\n    second: {}",
            self.resource,
            self.overlap_ms,
            if self.strict {
                ""
            } else {
                " (only when validity is counted from the answer's arrival)"
            },
            self.first.brief(),
            self.second.brief()
        )
    }
}

/// A section that went on past its validity.
#[derive(Debug, Clone, Serialize)]
pub struct Overrun {
    pub section: Section,
    pub by_ms: f64,
    /// What else is known: the agent's own record of the loss, the
    /// harness's lag at the time.
    pub note: String,
    /// Whose lateness it was, when the evidence says.
    pub blame: Blame,
}

/// Who made a section overrun its validity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Blame {
    /// Not known yet (or the evidence does not say).
    Unknown,
    /// The agent said `lost` in time (its log says when); the client
    /// acted on it late.
    Client,
    /// The agent said `lost` after the validity it had given ended.
    Agent,
}

impl fmt::Display for Overrun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "overran its validity by {:.1}ms{}: {}",
            self.by_ms,
            if self.section.kind.is_hold() {
                " (a hold: the agent should have said lost in time)"
            } else {
                ""
            },
            self.section.brief()
        )?;
        if !self.note.is_empty() {
            write!(f, "\n      {}", self.note)?;
        }
        Ok(())
    }
}

/// A lock key that outlived its lock.
#[derive(Debug, Clone, Serialize)]
pub struct Leak {
    pub master: String,
    pub resource: String,
    pub token: String,
    pub pttl_ms: i64,
    pub seen: Mono,
    pub why: String,
}

impl fmt::Display for Leak {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "LEAK on {}: {:?} token {}… pttl {}ms at {}: {}",
            self.master,
            self.resource,
            &self.token[..self.token.len().min(8)],
            self.pttl_ms,
            self.seen,
            self.why
        )
    }
}

/// Two sections whose fences did not grow: `later` was requested after
/// `earlier`'s grant was answered, yet its fence is not above.
#[derive(Debug, Clone, Serialize)]
pub struct FenceInversion {
    pub earlier: Section,
    pub later: Section,
    /// The two sections are on different resources (the counter is global).
    pub across_resources: bool,
}

impl fmt::Display for FenceInversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "FENCE OUT OF ORDER{}: {} then {} ({}ms after the first was answered)\n    earlier: {}\n    later:   {}",
            if self.across_resources {
                " across resources"
            } else {
                ""
            },
            self.earlier.fence.unwrap_or(0),
            self.later.fence.unwrap_or(0),
            format_args!("{:.1}", self.later.requested.ms_after(self.earlier.granted)),
            self.earlier.brief(),
            self.later.brief()
        )
    }
}

/// The fenced store accepted `stale`'s write after `newer`'s, although
/// `newer` was requested after `stale` was answered.
#[derive(Debug, Clone, Serialize)]
pub struct StaleWrite {
    pub stale: Section,
    pub newer: Section,
}

impl fmt::Display for StaleWrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "STALE WRITE ACCEPTED on {:?}\n    stale: {}\n    newer: {}",
            self.stale.resource,
            self.stale.brief(),
            self.newer.brief()
        )
    }
}

/// More believed permits of one semaphore at once than its limit: the
/// stretch of time in which they were, and the sections believed in it.
#[derive(Debug, Clone, Serialize)]
pub struct SemaphoreExcess {
    pub semaphore: String,
    pub limit: u32,
    /// The most permits believed at one instant of the stretch.
    pub believed: usize,
    pub from: Mono,
    pub until: Mono,
    /// The excess remains when validity is counted from the request.
    pub strict: bool,
    /// Every section believed at some instant of the stretch.
    pub sections: Vec<Section>,
}

impl fmt::Display for SemaphoreExcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SEMAPHORE EXCESS on {:?}: {} permits believed at once, limit {}, for {:.1}ms from {}{}",
            self.semaphore,
            self.believed,
            self.limit,
            self.until.ms_after(self.from),
            self.from,
            if self.strict {
                ""
            } else {
                " (only when validity is counted from the answer's arrival)"
            },
        )?;
        for s in self.sections.iter().take(6) {
            write!(f, "\n    {}", s.brief())?;
        }
        Ok(())
    }
}

/// Two leaderships of one election believed at the same instant.
#[derive(Debug, Clone, Serialize)]
pub struct LeaderOverlap {
    pub election: String,
    pub first: Section,
    pub second: Section,
    pub overlap_ms: f64,
}

impl fmt::Display for LeaderOverlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TWO LEADERS of {:?}: {:.1}ms of overlap\n    first:  {}\n    second: {}",
            self.election,
            self.overlap_ms,
            self.first.brief(),
            self.second.brief()
        )
    }
}

/// A leadership elected (its `elected` arrived) after `earlier`'s was,
/// whose term is not above `earlier`'s.
#[derive(Debug, Clone, Serialize)]
pub struct TermInversion {
    pub election: String,
    pub earlier: Section,
    pub later: Section,
}

impl fmt::Display for TermInversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TERM OUT OF ORDER in {:?}: {} then {} ({:.1}ms later)\n    earlier: {}\n    later:   {}",
            self.election,
            self.earlier.fence.unwrap_or(0),
            self.later.fence.unwrap_or(0),
            self.later.granted.ms_after(self.earlier.granted),
            self.earlier.brief(),
            self.later.brief()
        )
    }
}

/// What the semaphore and election properties say.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PrimitiveFindings {
    /// Sections holding a permit.
    pub permits: usize,
    /// Per semaphore: its limit and the most permits believed at once.
    pub most_believed: Vec<(String, u32, usize)>,
    pub semaphore_excess: Vec<SemaphoreExcess>,
    /// Sections holding a leadership.
    pub leaderships: usize,
    /// Elections that had a leader.
    pub elections: usize,
    pub leader_overlaps: Vec<LeaderOverlap>,
    pub term_inversions: Vec<TermInversion>,
}

impl PrimitiveFindings {
    /// Findings of either property.
    pub fn violations(&self) -> usize {
        self.semaphore_excess.len() + self.leader_overlaps.len() + self.term_inversions.len()
    }
}

/// What the fenced store saw, and what the fences say.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FenceFindings {
    /// Sections whose grant carried a fence.
    pub fenced_grants: usize,
    /// Sections granted without one (none once every client asks).
    pub unfenced_grants: usize,
    pub writes_accepted: usize,
    pub writes_refused: usize,
    /// Writes the store did not answer.
    pub writes_failed: usize,
    /// Same resource: one per later section, against the earlier section
    /// with the highest fence.
    pub out_of_order: Vec<FenceInversion>,
    /// Different resources, the same way.
    pub out_of_order_across: Vec<FenceInversion>,
    pub stale_writes_accepted: Vec<StaleWrite>,
}

/// Everything the checker found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Findings {
    pub sections: usize,
    pub sections_by_kind: Vec<(String, usize)>,
    pub violations: Vec<Violation>,
    pub overruns: Vec<Overrun>,
    pub leaks: Vec<Leak>,
    /// Sections that overlapped outside their validity (one client no
    /// longer believed it held the lock): allowed, and counted.
    pub benign_overlaps: usize,
    /// Lock keys the observer saw on the masters (one per key per scan).
    pub sightings: u64,
    /// Fences and the fenced store.
    pub fences: FenceFindings,
    /// The semaphore and election properties.
    pub primitives: PrimitiveFindings,
    /// The multi-resource property.
    pub multi: multi::MultiFindings,
    /// The read-write property.
    pub shared: shared::SharedFindings,
}

impl Findings {
    /// Holds that ran past their validity, unless the agent is known to
    /// have said `lost` in time.
    pub fn hold_overruns(&self) -> usize {
        self.overruns
            .iter()
            .filter(|o| o.section.kind.is_hold() && o.blame != Blame::Client)
            .count()
    }
}
