//! The checker: every critical section the clients run, on one monotonic
//! clock, and what is wrong with them.
//!
//! A section is `(resource, client, token, validity window, entry, exit)`.
//! Its validity window starts when the grant arrived and ends at the last
//! `valid_until` the client was given (grant, extend or renewal, each
//! counted from when its answer arrived, as docs/api.md tells clients), or
//! earlier, when the client learned the lock was gone (`lost`, a refused
//! extend, a broken hold stream). The part of the section inside that
//! window is where the client *believed* it held the lock.
//!
//! Findings:
//! - **safety violation**: the believed parts of two sections with
//!   different tokens on the same resource overlap. This is what Redlock
//!   promises never happens. Each violation also says whether it survives
//!   a stricter client that counts validity from when it *sent* the
//!   request, to tell a lock granted twice from an answer slow in transit.
//! - **overrun**: a section went on past its validity. For holds the agent
//!   should have said `lost` in time; for plain acquires it is the client's
//!   own lateness (a pause, Kleppmann's GC scenario).
//! - **leak**: a lock key still on a master after its section ended plus its
//!   TTL (nobody released it and it did not expire: something renews it),
//!   or a key without a TTL or with one above `max_ttl`. The key observer
//!   ([`crate::observer`]) reports what it sees on the masters here.
//! - **fence out of order**: section B was requested after section A's
//!   grant was answered, yet B's fence is not above A's. Sound: a grant
//!   answered before another's request began must carry the smaller fence
//!   (the counter is global to the masters, so this holds across resources
//!   too; that case is reported apart).
//! - **stale write accepted**: the fenced store ([`crate::store`]) accepted
//!   A's write after it had accepted B's, B requested after A was
//!   answered: what fencing exists to prevent.
//! - **semaphore excess**: more believed permits of one semaphore at the
//!   same instant than its limit. A permit is a lock of its own (on the
//!   agent's internal resource `<name> permit <i>`), so two holders of one
//!   permit are also a safety violation above; the excess counts across
//!   the permits, whatever their numbers.
//! - **leader overlap**: two believed leaderships of one election at the
//!   same instant. A leadership is believed from its `elected` line's
//!   arrival for its validity, moved by `renewed`, ended early by `lost` or
//!   a broken stream, exactly as a hold.
//! - **term inversion**: a leadership whose `elected` arrived after
//!   another's `elected` had arrived, with a term not above it: terms must
//!   grow in real-time order.
//! - **multi-resource overlap** ([`multi`]): a resource held by two
//!   believed grants at once, a grant of several resources counted on each.
//!
//! Sections of killed clients end when the harness sent SIGKILL: the
//! process runs no code after it, and the command of a killed
//! `redlock-agent lock` only sleeps until the kernel kills it too.
//!
//! A master whose wall clock the nemesis moved keeps keys past their TTL
//! for a while; the leak bounds allow for it there ([`clock_excuse`]).

pub mod clock_excuse;
pub mod multi;
mod primitives;

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use serde::Serialize;

use crate::clock::Mono;

/// What a section held: a lock, a semaphore's permit or an election's
/// leadership. The last two are locks on the agent's internal resources
/// (the section's `resource`: `<name> permit <i>`, `<name> election`),
/// checked as such and for their own properties.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Primitive {
    Lock,
    /// Permit `permit` of `semaphore`, whose limit the client asked for.
    Permit {
        semaphore: String,
        limit: u32,
        permit: u32,
    },
    /// The leadership of `election`; its term is the section's fence.
    Leadership {
        election: String,
        term: u64,
    },
    /// A grant of several resources at once (the section's `resource` is
    /// their names joined, for reports); one token for all of them.
    Multi {
        resources: Vec<String>,
    },
}

impl Primitive {
    /// The agent's internal resource of permit `permit` of `semaphore`.
    pub fn permit_resource(semaphore: &str, permit: u32) -> String {
        format!("{semaphore} permit {permit}")
    }

    /// The agent's internal resource of `election`'s leadership.
    pub fn election_resource(election: &str) -> String {
        format!("{election} election")
    }
}

/// Which kind of client ran a section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientKind {
    /// acquire, work, maybe extend, release; in the harness process.
    Acquire,
    /// A hold stream in the harness process.
    Hold,
    /// A hold in a child process (`faults hold-client`), killable.
    ProcessHold,
    /// `redlock-agent lock -- faults cs-child`, killable. Its command never
    /// sees renewals, so its validity is "until told to stop".
    LockCommand,
    /// A semaphore's acquire, work, maybe extend, release.
    PermitAcquire,
    /// A semaphore's hold stream.
    PermitHold,
    /// A campaign stream; its section is the leadership, from `elected`.
    Campaign,
    /// A grant of several resources: acquire, work, maybe extend, release.
    MultiAcquire,
    /// A hold stream of several resources.
    MultiHold,
}

impl ClientKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientKind::Acquire => "acquire",
            ClientKind::Hold => "hold",
            ClientKind::ProcessHold => "process_hold",
            ClientKind::LockCommand => "lock_command",
            ClientKind::PermitAcquire => "permit_acquire",
            ClientKind::PermitHold => "permit_hold",
            ClientKind::Campaign => "campaign",
            ClientKind::MultiAcquire => "multi_acquire",
            ClientKind::MultiHold => "multi_hold",
        }
    }

    /// The agent renews these and must say `lost` before validity ends.
    pub fn is_hold(self) -> bool {
        matches!(
            self,
            ClientKind::Hold
                | ClientKind::ProcessHold
                | ClientKind::PermitHold
                | ClientKind::Campaign
                | ClientKind::MultiHold
        )
    }
}

/// How a section ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// Released; `released` is the agent's answer.
    Released { released: bool },
    /// The release call could not reach the agent; the lock expires.
    ReleaseUnanswered,
    /// The hold ended by closing the connection.
    Closed,
    /// The agent said `lost` (or refused an extend) and the client stopped.
    Lost { reason: String },
    /// The hold stream broke without `lost` (agent killed) and the client stopped.
    StreamBroken,
    /// The client was killed with SIGKILL.
    Killed,
    /// Still running when the checker looked.
    Open,
}

/// One lock key as the observer saw it on one master.
#[derive(Debug, Clone, Copy)]
pub struct Sighting<'a> {
    pub master: &'a str,
    pub resource: &'a str,
    pub token: &'a str,
    /// -1: no TTL.
    pub pttl_ms: i64,
    pub seen: Mono,
}

/// Identifies a section in the checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct SectionId(pub usize);

/// One critical section.
#[derive(Debug, Clone, Serialize)]
pub struct Section {
    pub resource: String,
    pub client: String,
    pub kind: ClientKind,
    pub agent: usize,
    pub token: String,
    pub ttl_ms: u64,
    /// When the client sent the request that was granted.
    pub requested: Mono,
    /// When the grant arrived.
    pub granted: Mono,
    /// Last end of validity the client was told; `None`: not told (the
    /// command of `redlock-agent lock`), valid until stopped.
    pub valid_until: Option<Mono>,
    /// `valid_until` as a client counting from its request would have it.
    pub strict_valid_until: Option<Mono>,
    /// When the client learned the lock was gone.
    pub belief_end: Option<Mono>,
    pub entry: Mono,
    pub exit: Option<Mono>,
    pub ending: Ending,
    /// The fencing token the grant carried, if any.
    pub fence: Option<u64>,
    /// The section's one write to the fenced store, once made.
    pub write: Option<StoreWrite>,
    /// A lock, a permit or a leadership.
    pub primitive: Primitive,
}

/// A section's write to the fenced store and what the store said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreWrite {
    /// When the store's answer arrived.
    pub at: Mono,
    pub outcome: WriteOutcome,
}

/// The fenced store's answer to one write.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteOutcome {
    /// Accepted; `seq` is its place in the store's order of accepted
    /// writes to this resource (1, 2, ...).
    Accepted { seq: u64 },
    /// Refused: the store had accepted `highest`, not below this fence.
    Refused { highest: u64 },
    /// No answer from the store (not a finding; counted).
    Failed { error: String },
}

impl Section {
    /// End of the window in which the client believed it held the lock.
    fn believed_until(&self, strict: bool) -> Option<Mono> {
        let valid = if strict {
            self.strict_valid_until
        } else {
            self.valid_until
        };
        match (valid, self.belief_end) {
            (Some(v), Some(b)) => Some(v.min(b)),
            (v, b) => v.or(b),
        }
    }

    /// The part of the section spent believing the lock held, if any.
    fn believed_part(&self, now: Mono, strict: bool) -> Option<(Mono, Mono)> {
        let start = self.entry.max(self.granted);
        let exit = self.exit.unwrap_or(now);
        let end = match self.believed_until(strict) {
            Some(until) => exit.min(until),
            None => exit,
        };
        (end > start).then_some((start, end))
    }

    /// The semaphore or election the section belongs to; for a lock, its
    /// resource.
    pub fn group(&self) -> &str {
        match &self.primitive {
            Primitive::Lock | Primitive::Multi { .. } => &self.resource,
            Primitive::Permit { semaphore, .. } => semaphore,
            Primitive::Leadership { election, .. } => election,
        }
    }

    fn brief(&self) -> String {
        let what = match &self.primitive {
            Primitive::Lock | Primitive::Multi { .. } => String::new(),
            Primitive::Permit { permit, limit, .. } => format!("permit {permit} of {limit}, "),
            Primitive::Leadership { term, .. } => format!("term {term}, "),
        };
        format!(
            "{} ({}{}, agent a{}, token {}…{}) requested {} granted {} entry {} exit {} valid until {}{} ({})",
            self.client,
            what,
            self.kind.as_str(),
            self.agent + 1,
            &self.token[..self.token.len().min(8)],
            self.fence.map_or(String::new(), |f| format!(", fence {f}")),
            self.requested,
            self.granted,
            self.entry,
            self.exit.map_or("-".to_string(), |e| e.to_string()),
            self.valid_until
                .map_or("stopped".to_string(), |e| e.to_string()),
            self.belief_end
                .map_or(String::new(), |b| format!(", told lost at {b}")),
            ending_text(&self.ending),
        )
    }
}

fn ending_text(ending: &Ending) -> String {
    match ending {
        Ending::Released { released } => format!("released={released}"),
        Ending::ReleaseUnanswered => "release unanswered".into(),
        Ending::Closed => "hold closed".into(),
        Ending::Lost { reason } => format!("lost: {reason}"),
        Ending::StreamBroken => "hold stream broke".into(),
        Ending::Killed => "killed".into(),
        Ending::Open => "open".into(),
    }
}

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

#[derive(Debug, Default)]
struct State {
    sections: Vec<Section>,
    by_token: HashMap<String, usize>,
    /// Grants of several resources by the part their keys' values share.
    multi_values: HashMap<String, usize>,
    leaks: Vec<Leak>,
    /// Tokens already reported as leaked, so one key is one finding.
    leaked: std::collections::HashSet<(String, String)>,
    /// First sighting of each (master, token) after its section ended.
    seen_after_exit: HashMap<(String, String), Mono>,
    /// Every sighting the observer reported.
    sightings: u64,
    /// Masters whose clocks were moved, and how much longer they may keep
    /// keys because of it.
    clock_excuses: Vec<clock_excuse::ClockExcuse>,
}

/// Collects sections from every client, thread-safe.
#[derive(Debug, Default)]
pub struct Checker {
    // A std Mutex: every critical section is a few pushes or field writes.
    state: Mutex<State>,
}

/// A grant as a client saw it.
#[derive(Debug, Clone)]
pub struct Grant {
    pub resource: String,
    pub client: String,
    pub kind: ClientKind,
    pub agent: usize,
    pub token: String,
    pub ttl_ms: u64,
    pub requested: Mono,
    pub granted: Mono,
    /// `None` for clients that are never told (lock command).
    pub validity_ms: Option<u64>,
    /// The fencing token, when the grant carried one.
    pub fence: Option<u64>,
}

impl Checker {
    pub fn new() -> Checker {
        Checker::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a grant of a lock and the client's entry into its section
    /// at `entry`.
    pub fn enter(&self, grant: Grant, entry: Mono) -> SectionId {
        self.enter_as(grant, entry, Primitive::Lock)
    }

    /// Records a grant of `primitive` (the grant's resource is the
    /// agent's internal one, see [`Primitive`]) and the client's entry.
    pub fn enter_as(&self, grant: Grant, entry: Mono, primitive: Primitive) -> SectionId {
        let mut state = self.lock();
        let id = state.sections.len();
        state.by_token.insert(grant.token.clone(), id);
        if let (Primitive::Multi { .. }, Some(shared)) = (&primitive, multi::shared(&grant.token)) {
            state.multi_values.insert(shared.to_string(), id);
        }
        state.sections.push(Section {
            valid_until: grant.validity_ms.map(|v| grant.granted.plus_ms(v)),
            strict_valid_until: grant.validity_ms.map(|v| grant.requested.plus_ms(v)),
            resource: grant.resource,
            client: grant.client,
            kind: grant.kind,
            agent: grant.agent,
            token: grant.token,
            ttl_ms: grant.ttl_ms,
            requested: grant.requested,
            granted: grant.granted,
            belief_end: None,
            entry,
            exit: None,
            ending: Ending::Open,
            fence: grant.fence,
            write: None,
            primitive,
        });
        SectionId(id)
    }

    /// An extend or renewal answered at `at` with `validity_ms`;
    /// `requested` is when it was asked for (renewals: the same as `at`).
    pub fn renewed(&self, id: SectionId, requested: Mono, at: Mono, validity_ms: u64) {
        if let Some(s) = self.lock().sections.get_mut(id.0) {
            s.valid_until = Some(at.plus_ms(validity_ms));
            s.strict_valid_until = Some(requested.plus_ms(validity_ms));
        }
    }

    /// The client learned at `at` that the lock is gone.
    pub fn belief_ended(&self, id: SectionId, at: Mono) {
        if let Some(s) = self.lock().sections.get_mut(id.0) {
            s.belief_end = Some(s.belief_end.map_or(at, |b| b.min(at)));
        }
    }

    /// The client left its section at `at`.
    pub fn exit(&self, id: SectionId, at: Mono, ending: Ending) {
        if let Some(s) = self.lock().sections.get_mut(id.0) {
            if s.exit.is_none() {
                s.exit = Some(at);
                s.ending = ending;
            }
        }
    }

    /// The section's write to the fenced store, answered at `write.at`.
    pub fn wrote(&self, id: SectionId, write: StoreWrite) {
        if let Some(s) = self.lock().sections.get_mut(id.0) {
            s.write = Some(write);
        }
    }

    /// Corrects how a section ended (a release answered after the exit).
    pub fn ended(&self, id: SectionId, ending: Ending) {
        if let Some(s) = self.lock().sections.get_mut(id.0) {
            s.ending = ending;
        }
    }

    /// Sections open now on `resource` (or a permit of the semaphore, or
    /// the leadership of the election, of that name) with at least
    /// `left_ms` of validity.
    pub fn inside(&self, resource: &str, left_ms: u64) -> usize {
        let now = Mono::now();
        self.lock()
            .sections
            .iter()
            .filter(|s| s.group() == resource && s.exit.is_none())
            .filter(|s| s.valid_until.is_none_or(|v| v > now.plus_ms(left_ms)))
            .count()
    }

    /// The tokens of the sections open now on `resource` with at least
    /// `left_ms` of validity, as [`Checker::inside`] counts them.
    pub fn holders(&self, resource: &str, left_ms: u64) -> Vec<String> {
        let now = Mono::now();
        self.lock()
            .sections
            .iter()
            .filter(|s| s.group() == resource && s.exit.is_none())
            .filter(|s| s.valid_until.is_none_or(|v| v > now.plus_ms(left_ms)))
            .map(|s| s.token.clone())
            .collect()
    }

    /// Sections of `agent` whose grant carried a fence.
    pub fn fenced(&self, agent: usize) -> usize {
        self.lock()
            .sections
            .iter()
            .filter(|s| s.agent == agent && s.fence.is_some())
            .count()
    }

    /// Sections not exited yet.
    pub fn open(&self) -> usize {
        self.lock()
            .sections
            .iter()
            .filter(|s| s.exit.is_none())
            .count()
    }

    pub fn sections(&self) -> usize {
        self.lock().sections.len()
    }

    /// The section of `token`, if a client reported it.
    pub fn by_token(&self, token: &str) -> Option<Section> {
        let state = self.lock();
        state
            .by_token
            .get(token)
            .and_then(|&i| state.sections.get(i))
            .cloned()
    }

    /// The key observer saw `token` of `resource` on `master` at `seen`
    /// with `pttl_ms` left (-1: no TTL). Records a leak when the key should
    /// be gone: no TTL, a TTL above `max_ttl_ms`, or its section ended more
    /// than its TTL plus `slack_ms` ago.
    pub fn key_seen(&self, key: Sighting<'_>, max_ttl_ms: u64, slack_ms: u64) {
        let Sighting {
            master,
            resource,
            token,
            pttl_ms,
            seen,
        } = key;
        let mut state = self.lock();
        state.sightings += 1;
        // A moved clock keeps keys longer (and shows larger TTLs).
        let extra_ms = clock_excuse::extra_ms(&state.clock_excuses, master, seen);
        let ended = multi::section_of(&state.by_token, &state.multi_values, token)
            .and_then(|i| state.sections.get(i))
            .and_then(|s| Some((s.exit?, s.ttl_ms, ending_text(&s.ending))));
        // A key that lands late (a SET queued behind a stalled link) is
        // first seen after its section ended and then expires; a key that
        // stays longer than its TTL after that first sighting is renewed
        // by someone: a leak.
        let first_after_exit = match ended {
            Some((exit, _, _)) if seen > exit => Some(
                *state
                    .seen_after_exit
                    .entry((master.to_string(), token.to_string()))
                    .or_insert(seen),
            ),
            _ => None,
        };
        let why = if pttl_ms == -1 {
            Some("no TTL: it never expires".to_string())
        } else if pttl_ms > i64::try_from(max_ttl_ms + extra_ms).unwrap_or(i64::MAX) {
            Some(format!("TTL above max_ttl ({max_ttl_ms}ms)"))
        } else {
            match (ended, first_after_exit) {
                (Some((exit, ttl_ms, ending)), Some(first))
                    if seen > first.plus_ms(ttl_ms + slack_ms + extra_ms) =>
                {
                    Some(format!(
                        "its section ended {:.0}ms earlier ({ending}) and the key has stayed \
                         {:.0}ms since, over its TTL of {ttl_ms}ms: neither released nor expired",
                        seen.ms_after(exit),
                        seen.ms_after(first),
                    ))
                }
                _ => None,
            }
        };
        if let Some(why) = why {
            if state.leaked.insert((master.to_string(), token.to_string())) {
                state.leaks.push(Leak {
                    master: master.to_string(),
                    resource: resource.to_string(),
                    token: token.to_string(),
                    pttl_ms,
                    seen,
                    why,
                });
            }
        }
    }

    /// The nemesis moved `master`'s wall clock at `from`: until
    /// [`Checker::clock_restored`], and for a while after, the master may
    /// keep keys up to `extra_ms` past their TTL without a leak.
    pub fn clock_moved(&self, master: &str, from: Mono, extra_ms: u64) {
        self.lock().clock_excuses.push(clock_excuse::ClockExcuse {
            master: master.to_string(),
            from,
            extra_ms,
            until: None,
        });
    }

    /// `master`'s clock is back on the real one since `at`, after being
    /// `extra_ms` off at most: its keys written meanwhile are gone within
    /// that, `max_ttl_ms` and a slack.
    pub fn clock_restored(&self, master: &str, at: Mono, extra_ms: u64, max_ttl_ms: u64) {
        clock_excuse::close(
            &mut self.lock().clock_excuses,
            master,
            at,
            extra_ms,
            max_ttl_ms,
        );
    }

    /// When the last key kept by a moved clock is gone; `None` without any
    /// clock moved (or while one still is).
    pub fn clock_excused_until(&self) -> Option<Mono> {
        clock_excuse::last_end(&self.lock().clock_excuses)
    }

    /// A key the final scan found after every lock must have ended.
    pub fn key_left(&self, master: &str, resource: &str, token: &str, pttl_ms: i64, seen: Mono) {
        let mut state = self.lock();
        if state.leaked.insert((master.to_string(), token.to_string())) {
            state.leaks.push(Leak {
                master: master.to_string(),
                resource: resource.to_string(),
                token: token.to_string(),
                pttl_ms,
                seen,
                why: "still there after every client stopped and max_ttl passed".into(),
            });
        }
    }

    /// Analyses every section as of `now` (open ones count as inside).
    pub fn findings(&self, now: Mono) -> Findings {
        let state = self.lock();
        let mut findings = Findings {
            sections: state.sections.len(),
            leaks: state.leaks.clone(),
            sightings: state.sightings,
            ..Findings::default()
        };
        let mut kinds: HashMap<&'static str, usize> = HashMap::new();
        for s in &state.sections {
            *kinds.entry(s.kind.as_str()).or_default() += 1;
        }
        let mut kinds: Vec<(String, usize)> =
            kinds.into_iter().map(|(k, n)| (k.to_string(), n)).collect();
        kinds.sort();
        findings.sections_by_kind = kinds;

        let mut by_resource: HashMap<&str, Vec<&Section>> = HashMap::new();
        for s in &state.sections {
            // Two leaderships at once are the election property's finding,
            // and a grant of several resources the multi-resource one's.
            if matches!(s.primitive, Primitive::Lock | Primitive::Permit { .. }) {
                by_resource.entry(s.resource.as_str()).or_default().push(s);
            }
            // Overruns: the section went on past the validity it was told
            // (stopping a moment after a `lost` notice is not one).
            if let (Some(exit), Some(until)) = (s.exit, s.valid_until) {
                if exit > until && s.entry < until {
                    findings.overruns.push(Overrun {
                        section: s.clone(),
                        by_ms: exit.ms_after(until),
                        note: String::new(),
                        blame: Blame::Unknown,
                    });
                }
            }
        }
        for (resource, sections) in by_resource {
            let (violations, benign) = overlaps(resource, &sections, now);
            findings.violations.extend(violations);
            findings.benign_overlaps += benign;
        }
        findings.violations.sort_by_key(|v| v.second.entry);
        findings.fences = fences(&state.sections);
        findings.primitives = primitives::primitives(&state.sections, now);
        findings.multi = multi::findings(&state.sections, now);
        findings
    }
}

/// Fence order and the fenced store's writes over every section.
///
/// For each fenced section B, the earlier sections are those whose grant
/// arrived before B's request was sent; the one with the highest fence
/// (of B's resource, and of any other) is the witness: B's fence must be
/// above it. A stale write is an accepted write of A that the store placed
/// after an accepted write of some B requested after A was answered.
fn fences(sections: &[Section]) -> FenceFindings {
    let mut out = FenceFindings::default();
    for s in sections {
        if s.fence.is_some() {
            out.fenced_grants += 1;
        } else {
            out.unfenced_grants += 1;
        }
        match s.write.as_ref().map(|w| &w.outcome) {
            Some(WriteOutcome::Accepted { .. }) => out.writes_accepted += 1,
            Some(WriteOutcome::Refused { .. }) => out.writes_refused += 1,
            Some(WriteOutcome::Failed { .. }) => out.writes_failed += 1,
            None => {}
        }
    }
    let fenced: Vec<&Section> = sections.iter().filter(|s| s.fence.is_some()).collect();
    let mut by_granted = fenced.clone();
    by_granted.sort_by_key(|s| s.granted);
    let mut by_requested = fenced;
    by_requested.sort_by_key(|s| s.requested);
    // The highest fence answered so far, per resource, and its section.
    let mut highest: HashMap<&str, &Section> = HashMap::new();
    let mut next = 0;
    for b in by_requested {
        while next < by_granted.len() && by_granted[next].granted < b.requested {
            let a = by_granted[next];
            let slot = highest.entry(a.resource.as_str()).or_insert(a);
            if a.fence > slot.fence {
                *slot = a;
            }
            next += 1;
        }
        let fence_b = b.fence.unwrap_or(0);
        let mut across: Option<&Section> = None;
        for (resource, a) in &highest {
            if a.fence.unwrap_or(0) < fence_b {
                continue;
            }
            if *resource == b.resource {
                out.out_of_order.push(FenceInversion {
                    earlier: (*a).clone(),
                    later: b.clone(),
                    across_resources: false,
                });
            } else if across.is_none_or(|w| a.fence > w.fence) {
                across = Some(a);
            }
        }
        if let Some(a) = across {
            out.out_of_order_across.push(FenceInversion {
                earlier: a.clone(),
                later: b.clone(),
                across_resources: true,
            });
        }
    }
    out.stale_writes_accepted = stale_writes(sections);
    out
}

/// Per resource: accepted writes the store ordered after the accepted write
/// of a section requested after theirs was answered.
fn stale_writes(sections: &[Section]) -> Vec<StaleWrite> {
    let mut by_resource: HashMap<&str, Vec<(&Section, u64)>> = HashMap::new();
    for s in sections {
        if let Some(StoreWrite {
            outcome: WriteOutcome::Accepted { seq },
            ..
        }) = &s.write
        {
            by_resource
                .entry(s.resource.as_str())
                .or_default()
                .push((s, *seq));
        }
    }
    let mut out = Vec::new();
    for (_, mut writes) in by_resource {
        // By request time; the suffix minimum of `seq` says, for any time
        // t, which accepted write of a section requested after t came first.
        writes.sort_by_key(|(s, _)| s.requested);
        let n = writes.len();
        let mut first_after: Vec<usize> = (0..n).collect();
        for i in (0..n.saturating_sub(1)).rev() {
            let j = first_after[i + 1];
            if writes[j].1 < writes[i].1 {
                first_after[i] = j;
            }
        }
        for (a, seq_a) in &writes {
            let from = writes.partition_point(|(s, _)| s.requested <= a.granted);
            if from == writes.len() {
                continue;
            }
            let (b, seq_b) = writes[first_after[from]];
            if seq_b < *seq_a {
                out.push(StaleWrite {
                    stale: (*a).clone(),
                    newer: b.clone(),
                });
            }
        }
    }
    out.sort_by_key(|w| w.stale.granted);
    out
}

/// Pairs of sections of one resource whose believed parts overlap, and
/// how many overlapped only outside them.
fn overlaps(resource: &str, sections: &[&Section], now: Mono) -> (Vec<Violation>, usize) {
    let mut by_entry: Vec<&Section> = sections.to_vec();
    by_entry.sort_by_key(|s| s.entry);
    let mut violations = Vec::new();
    let mut benign = 0;
    for (i, a) in by_entry.iter().enumerate() {
        let a_exit = a.exit.unwrap_or(now);
        for b in &by_entry[i + 1..] {
            if b.entry >= a_exit {
                break; // sorted by entry: no later section overlaps `a`
            }
            if a.token == b.token {
                continue;
            }
            let overlap = |strict: bool| {
                let (a0, a1) = a.believed_part(now, strict)?;
                let (b0, b1) = b.believed_part(now, strict)?;
                let (start, end) = (a0.max(b0), a1.min(b1));
                (end > start).then(|| end.ms_after(start))
            };
            match overlap(false) {
                Some(ms) => violations.push(Violation {
                    resource: resource.to_string(),
                    first: (*a).clone(),
                    second: (*b).clone(),
                    overlap_ms: ms,
                    strict: overlap(true).is_some(),
                }),
                None => benign += 1,
            }
        }
    }
    (violations, benign)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Mono {
        Mono(1_000_000_000).plus_ms(ms)
    }

    fn grant(client: &str, token: &str, granted: u64, validity: Option<u64>) -> Grant {
        Grant {
            resource: "r".into(),
            client: client.into(),
            kind: ClientKind::Acquire,
            agent: 0,
            token: token.into(),
            ttl_ms: 1000,
            requested: at(granted.saturating_sub(2)),
            granted: at(granted),
            validity_ms: validity,
            fence: None,
        }
    }

    /// A fenced section of `resource` requested at `requested`, granted at
    /// `granted`, released at `granted + 50`.
    fn fenced(
        c: &Checker,
        resource: &str,
        token: &str,
        (requested, granted): (u64, u64),
        fence: u64,
    ) -> SectionId {
        let mut g = grant(token, token, granted, Some(900));
        g.resource = resource.into();
        g.requested = at(requested);
        g.fence = Some(fence);
        let id = c.enter(g, at(granted));
        c.exit(id, at(granted + 50), Ending::Released { released: true });
        id
    }

    fn wrote(c: &Checker, id: SectionId, when: u64, outcome: WriteOutcome) {
        c.wrote(
            id,
            StoreWrite {
                at: at(when),
                outcome,
            },
        );
    }

    #[test]
    fn fences_that_grow_from_grant_to_grant_are_in_order() {
        let c = Checker::new();
        let a = fenced(&c, "x", "a", (0, 10), 100);
        wrote(&c, a, 20, WriteOutcome::Accepted { seq: 1 });
        let b = fenced(&c, "x", "b", (60, 70), 101);
        wrote(&c, b, 80, WriteOutcome::Accepted { seq: 2 });
        // Another resource, later still: its fence is above both.
        fenced(&c, "y", "c", (130, 140), 205);
        let f = c.findings(at(1000)).fences;
        assert_eq!((f.fenced_grants, f.unfenced_grants), (3, 0));
        assert_eq!((f.writes_accepted, f.writes_refused), (2, 0));
        assert!(f.out_of_order.is_empty(), "{:?}", f.out_of_order);
        assert!(f.out_of_order_across.is_empty());
        assert!(f.stale_writes_accepted.is_empty());
    }

    #[test]
    fn a_fence_not_above_an_answered_grant_is_out_of_order() {
        let c = Checker::new();
        fenced(&c, "x", "a", (0, 10), 100);
        fenced(&c, "x", "b", (60, 70), 100); // equal: not above
        fenced(&c, "x", "c", (130, 140), 99); // below both
        let f = c.findings(at(1000)).fences;
        assert_eq!(f.out_of_order.len(), 2, "{:?}", f.out_of_order);
        assert_eq!(f.out_of_order[0].later.token, "b");
        assert_eq!(f.out_of_order[1].later.token, "c");
        assert!(f.out_of_order.iter().all(|i| i.earlier.token == "a"));
        assert!(f.out_of_order[0].to_string().contains("FENCE OUT OF ORDER"));
        assert!(f.out_of_order_across.is_empty());
    }

    #[test]
    fn requests_that_overlap_a_grant_may_carry_any_fence() {
        let c = Checker::new();
        // b was requested at 5, before a's grant arrived at 10: the agent
        // may have minted b's fence first.
        fenced(&c, "x", "a", (0, 10), 100);
        fenced(&c, "x", "b", (5, 70), 90);
        let f = c.findings(at(1000)).fences;
        assert!(f.out_of_order.is_empty(), "{:?}", f.out_of_order);
    }

    #[test]
    fn fences_must_grow_across_resources_and_are_reported_apart() {
        let c = Checker::new();
        fenced(&c, "x", "a", (0, 10), 100);
        fenced(&c, "y", "b", (20, 30), 300);
        fenced(&c, "z", "c", (60, 70), 200); // below b, on another resource
        let f = c.findings(at(1000)).fences;
        assert!(f.out_of_order.is_empty());
        assert_eq!(
            f.out_of_order_across.len(),
            1,
            "{:?}",
            f.out_of_order_across
        );
        let i = &f.out_of_order_across[0];
        assert_eq!(
            (i.earlier.token.as_str(), i.later.token.as_str()),
            ("b", "c")
        );
        assert!(i.to_string().contains("across resources"), "{i}");
    }

    #[test]
    fn a_store_that_accepts_an_older_write_after_a_newer_one_is_caught() {
        let c = Checker::new();
        // a is answered at 10 and pauses; b is requested at 60, writes
        // first; a wakes and its write is accepted after b's.
        let a = fenced(&c, "x", "a", (0, 10), 100);
        let b = fenced(&c, "x", "b", (60, 70), 101);
        wrote(&c, b, 80, WriteOutcome::Accepted { seq: 1 });
        wrote(&c, a, 90, WriteOutcome::Accepted { seq: 2 });
        let f = c.findings(at(1000)).fences;
        assert_eq!(f.stale_writes_accepted.len(), 1);
        let w = &f.stale_writes_accepted[0];
        assert_eq!((w.stale.token.as_str(), w.newer.token.as_str()), ("a", "b"));
        assert!(w.to_string().contains("STALE WRITE ACCEPTED"), "{w}");
        assert!(f.out_of_order.is_empty(), "the fences themselves grew");
    }

    #[test]
    fn a_refused_stale_write_is_counted_and_no_finding() {
        let c = Checker::new();
        let a = fenced(&c, "x", "a", (0, 10), 100);
        let b = fenced(&c, "x", "b", (60, 70), 101);
        wrote(&c, b, 80, WriteOutcome::Accepted { seq: 1 });
        wrote(&c, a, 90, WriteOutcome::Refused { highest: 101 });
        let unfenced = c.enter(grant("u", "u", 200, Some(900)), at(200));
        wrote(
            &c,
            unfenced,
            210,
            WriteOutcome::Failed {
                error: "connection refused".into(),
            },
        );
        let f = c.findings(at(1000)).fences;
        assert!(f.stale_writes_accepted.is_empty());
        assert_eq!(
            (
                f.writes_accepted,
                f.writes_refused,
                f.writes_failed,
                f.unfenced_grants
            ),
            (1, 1, 1, 1)
        );
    }

    /// A permit of `semaphore` (limit `limit`) granted at `granted` with
    /// `validity` ms, left at `exit`.
    fn permit(
        c: &Checker,
        (semaphore, limit, number): (&str, u32, u32),
        token: &str,
        (granted, validity, exit): (u64, u64, u64),
    ) -> SectionId {
        let mut g = grant(token, token, granted, Some(validity));
        g.resource = Primitive::permit_resource(semaphore, number);
        g.kind = ClientKind::PermitAcquire;
        let id = c.enter_as(
            g,
            at(granted),
            Primitive::Permit {
                semaphore: semaphore.into(),
                limit,
                permit: number,
            },
        );
        c.exit(id, at(exit), Ending::Released { released: true });
        id
    }

    /// A leadership of `election` with `term`, elected at `elected` with
    /// `validity` ms, told lost at `lost` (if any), left at `exit`.
    fn leadership(
        c: &Checker,
        election: &str,
        term: u64,
        (elected, validity, lost, exit): (u64, u64, Option<u64>, u64),
    ) -> SectionId {
        let token = format!("{election}#{term}");
        let mut g = grant(&token, &token, elected, Some(validity));
        g.resource = Primitive::election_resource(election);
        g.kind = ClientKind::Campaign;
        g.fence = Some(term);
        let id = c.enter_as(
            g,
            at(elected),
            Primitive::Leadership {
                election: election.into(),
                term,
            },
        );
        if let Some(lost) = lost {
            c.belief_ended(id, at(lost));
        }
        c.exit(id, at(exit), Ending::Closed);
        id
    }

    #[test]
    fn one_permit_more_than_the_limit_believed_at_once_is_an_excess() {
        let c = Checker::new();
        permit(&c, ("sem", 2, 0), "a", (0, 900, 500));
        permit(&c, ("sem", 2, 1), "b", (100, 900, 600));
        // A third holder while both are believed, on a number the limit
        // does not have: no permit is held twice, the semaphore is exceeded.
        permit(&c, ("sem", 2, 2), "c", (300, 900, 400));
        let f = c.findings(at(2000));
        let p = &f.primitives;
        assert_eq!(p.permits, 3);
        assert_eq!(p.semaphore_excess.len(), 1, "{:?}", p.semaphore_excess);
        let e = &p.semaphore_excess[0];
        assert_eq!(
            (e.believed, e.limit, e.from, e.until),
            (3, 2, at(300), at(400))
        );
        assert!(e.strict);
        assert_eq!(e.sections.len(), 3);
        assert!(e.to_string().contains("SEMAPHORE EXCESS"), "{e}");
        assert_eq!(p.most_believed, vec![("sem".to_string(), 2, 3)]);
        assert!(f.violations.is_empty(), "no permit was held twice");
        assert_eq!(p.violations(), 1);
    }

    #[test]
    fn one_permit_granted_twice_is_a_violation_and_an_excess_when_over_the_limit() {
        let c = Checker::new();
        permit(&c, ("sem", 2, 0), "a", (0, 900, 500));
        permit(&c, ("sem", 2, 1), "b", (0, 900, 500));
        permit(&c, ("sem", 2, 0), "c", (200, 900, 700));
        let f = c.findings(at(2000));
        assert_eq!(f.violations.len(), 1, "permit 0 twice: {:?}", f.violations);
        assert_eq!(f.violations[0].resource, "sem permit 0");
        assert_eq!(f.primitives.semaphore_excess.len(), 1);
        // Another semaphore's permits never count against this one.
        permit(&c, ("other", 2, 0), "d", (250, 900, 450));
        permit(&c, ("other", 2, 1), "e", (250, 900, 450));
        let f = c.findings(at(2000));
        assert_eq!(f.primitives.semaphore_excess.len(), 1);
        assert_eq!(f.primitives.most_believed.len(), 2);
    }

    #[test]
    fn permits_handed_off_or_lost_in_time_are_no_excess() {
        let c = Checker::new();
        permit(&c, ("sem", 2, 0), "a", (0, 900, 500));
        permit(&c, ("sem", 2, 1), "b", (100, 900, 800));
        // Handed off at the very instant a leaves.
        permit(&c, ("sem", 2, 0), "c", (500, 900, 1200));
        // a2 and e hold; a2 is told lost at 1400 but lingers until 1700;
        // d comes in at 1450: two believed at once, never three.
        let a2 = permit(&c, ("sem", 2, 0), "a2", (1300, 600, 1700));
        c.belief_ended(a2, at(1400));
        permit(&c, ("sem", 2, 1), "e", (1300, 900, 1700));
        permit(&c, ("sem", 2, 0), "d", (1450, 900, 1900));
        let f = c.findings(at(3000));
        let p = &f.primitives;
        assert!(p.semaphore_excess.is_empty(), "{:?}", p.semaphore_excess);
        assert_eq!(p.most_believed, vec![("sem".to_string(), 2, 2)]);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
    }

    #[test]
    fn an_excess_only_counted_from_the_answers_is_not_strict() {
        let c = Checker::new();
        permit(&c, ("sem", 1, 0), "a", (0, 400, 450));
        // Requested at 0, answered at 100: valid until 500 from the
        // answer, 400 from the request.
        let mut g = grant("b", "b", 100, Some(400));
        g.requested = at(0);
        g.resource = Primitive::permit_resource("sem", 0);
        let b = c.enter_as(
            g,
            at(100),
            Primitive::Permit {
                semaphore: "sem".into(),
                limit: 1,
                permit: 0,
            },
        );
        c.exit(b, at(480), Ending::Released { released: false });
        permit(&c, ("sem", 1, 1), "c", (420, 900, 900));
        let f = c.findings(at(2000));
        let e = &f.primitives.semaphore_excess;
        assert!(!e.is_empty());
        assert!(e.iter().any(|e| !e.strict), "{e:?}");
    }

    #[test]
    fn two_believed_leaders_at_once_are_found() {
        let c = Checker::new();
        leadership(&c, "e", 10, (0, 900, None, 600));
        leadership(&c, "e", 11, (400, 900, None, 1000));
        let f = c.findings(at(2000));
        let p = &f.primitives;
        assert_eq!((p.leaderships, p.elections), (2, 1));
        assert_eq!(p.leader_overlaps.len(), 1, "{:?}", p.leader_overlaps);
        let o = &p.leader_overlaps[0];
        assert!((o.overlap_ms - 200.0).abs() < 1e-6, "{}", o.overlap_ms);
        assert!(o.to_string().contains("TWO LEADERS"), "{o}");
        assert!(p.term_inversions.is_empty());
        assert!(
            f.violations.is_empty(),
            "two leaders are the election's finding, not a lock's"
        );
    }

    #[test]
    fn a_later_leader_with_a_term_not_above_is_an_inversion() {
        let c = Checker::new();
        leadership(&c, "e", 10, (0, 300, None, 200));
        leadership(&c, "e", 12, (300, 300, None, 500));
        leadership(&c, "e", 12, (600, 300, None, 800)); // equal: not above
        leadership(&c, "e", 7, (900, 300, None, 1100)); // below both
                                                        // Another election's terms are its own.
        leadership(&c, "other", 3, (1200, 300, None, 1400));
        let f = c.findings(at(2000));
        let p = &f.primitives;
        assert!(p.leader_overlaps.is_empty(), "{:?}", p.leader_overlaps);
        assert_eq!(p.term_inversions.len(), 2, "{:?}", p.term_inversions);
        assert_eq!(p.term_inversions[0].later.fence, Some(12));
        assert_eq!(p.term_inversions[1].later.fence, Some(7));
        assert!(p
            .term_inversions
            .iter()
            .all(|i| i.earlier.fence == Some(12) && i.election == "e"));
        assert!(p.term_inversions[1]
            .to_string()
            .contains("TERM OUT OF ORDER"));
    }

    #[test]
    fn leaders_handed_off_in_time_are_fine() {
        let c = Checker::new();
        // Resigns at 500; the next is elected at 500.
        leadership(&c, "e", 10, (0, 900, None, 500));
        // Told lost at 950 (renewals stopped), lingers until 1000; the
        // next is elected at 960.
        let b = leadership(&c, "e", 11, (500, 300, None, 1000));
        c.renewed(b, at(800), at(800), 300);
        c.belief_ended(b, at(950));
        leadership(&c, "e", 14, (960, 900, Some(1500), 1500));
        // Elected once the last validity ran out, with no word from it.
        leadership(&c, "e", 15, (2400, 900, None, 2600));
        let f = c.findings(at(3000));
        let p = &f.primitives;
        assert_eq!(p.leaderships, 4);
        assert!(p.leader_overlaps.is_empty(), "{:?}", p.leader_overlaps);
        assert!(p.term_inversions.is_empty(), "{:?}", p.term_inversions);
        assert_eq!(p.violations(), 0);
    }

    #[test]
    fn sequential_sections_are_fine() {
        let c = Checker::new();
        let a = c.enter(grant("a", "t1", 0, Some(900)), at(1));
        c.exit(a, at(500), Ending::Released { released: true });
        let b = c.enter(grant("b", "t2", 510, Some(900)), at(511));
        c.exit(b, at(800), Ending::Released { released: true });
        let f = c.findings(at(2000));
        assert_eq!(
            (f.sections, f.violations.len(), f.overruns.len()),
            (2, 0, 0)
        );
        assert_eq!(f.benign_overlaps, 0);
    }

    #[test]
    fn two_believed_holders_at_once_are_a_violation() {
        let c = Checker::new();
        let a = c.enter(grant("a", "t1", 0, Some(900)), at(1));
        let b = c.enter(grant("b", "t2", 300, Some(900)), at(301));
        c.exit(a, at(600), Ending::Released { released: true });
        c.exit(b, at(700), Ending::Released { released: true });
        let f = c.findings(at(2000));
        assert_eq!(f.violations.len(), 1);
        let v = &f.violations[0];
        assert!((v.overlap_ms - 299.0).abs() < 1e-6, "{}", v.overlap_ms);
        assert!(v.strict);
        assert!(v.to_string().contains("SAFETY VIOLATION"), "{v}");
    }

    #[test]
    fn overlap_after_the_first_lost_its_validity_is_benign_and_an_overrun() {
        let c = Checker::new();
        // a is valid until 400 but stays until 600; b enters at 450.
        let a = c.enter(grant("a", "t1", 0, Some(400)), at(1));
        let b = c.enter(grant("b", "t2", 450, Some(900)), at(450));
        c.exit(a, at(600), Ending::Released { released: false });
        c.exit(b, at(700), Ending::Released { released: true });
        let f = c.findings(at(2000));
        assert!(f.violations.is_empty());
        assert_eq!(f.benign_overlaps, 1);
        assert_eq!(f.overruns.len(), 1);
        assert!((f.overruns[0].by_ms - 200.0).abs() < 1e-6);
    }

    #[test]
    fn a_lost_notice_ends_belief_and_renewals_extend_it() {
        let c = Checker::new();
        let a = c.enter(grant("a", "t1", 0, Some(300)), at(1));
        c.renewed(a, at(200), at(200), 300); // valid until 500
        c.belief_ended(a, at(450)); // told lost at 450
        c.exit(
            a,
            at(460),
            Ending::Lost {
                reason: "renew_failed".into(),
            },
        );
        let b = c.enter(grant("b", "t2", 455, Some(900)), at(455));
        c.exit(b, at(900), Ending::Released { released: true });
        let f = c.findings(at(2000));
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        assert_eq!(f.benign_overlaps, 1);
        assert!(
            f.overruns.is_empty(),
            "stopping just after `lost` is in time"
        );
    }

    #[test]
    fn lock_commands_are_believed_until_they_stop_and_open_sections_count() {
        let c = Checker::new();
        let mut g = grant("cmd", "t1", 0, None);
        g.kind = ClientKind::LockCommand;
        let _open = c.enter(g, at(1));
        let b = c.enter(grant("b", "t2", 5000, Some(900)), at(5000));
        c.exit(b, at(5100), Ending::Released { released: true });
        let f = c.findings(at(6000));
        assert_eq!(f.violations.len(), 1, "the command never stopped");
        assert!(f.overruns.is_empty(), "no validity known, no overrun");
    }

    #[test]
    fn strictness_tells_a_slow_answer_from_a_double_grant() {
        let c = Checker::new();
        // Granted at 100 but requested at 0: valid until 500 from the
        // answer, 400 from the request.
        let mut g = grant("a", "t1", 100, Some(400));
        g.requested = at(0);
        let a = c.enter(g, at(100));
        c.exit(a, at(480), Ending::Released { released: false });
        let b = c.enter(grant("b", "t2", 450, Some(900)), at(450));
        c.exit(b, at(900), Ending::Released { released: true });
        let f = c.findings(at(2000));
        assert_eq!(f.violations.len(), 1);
        assert!(!f.violations[0].strict);
    }

    #[test]
    fn keys_that_outlive_their_lock_are_leaks_once() {
        let c = Checker::new();
        let a = c.enter(grant("a", "t1", 0, Some(900)), at(1));
        c.exit(a, at(100), Ending::Killed);
        c.key_seen(
            Sighting {
                master: "r1",
                resource: "r",
                token: "t1",
                pttl_ms: 500,
                seen: at(900),
            },
            2000,
            200,
        ); // first seen after exit
        assert!(c.findings(at(3000)).leaks.is_empty());
        c.key_seen(
            Sighting {
                master: "r1",
                resource: "r",
                token: "t1",
                pttl_ms: 500,
                seen: at(1400),
            },
            2000,
            200,
        ); // within TTL of that
        assert!(c.findings(at(3000)).leaks.is_empty());
        c.key_seen(
            Sighting {
                master: "r1",
                resource: "r",
                token: "t1",
                pttl_ms: 500,
                seen: at(2200),
            },
            2000,
            200,
        ); // 1300ms > 1000+200
        c.key_seen(
            Sighting {
                master: "r1",
                resource: "r",
                token: "t1",
                pttl_ms: 400,
                seen: at(2300),
            },
            2000,
            200,
        );
        // A key that landed late and then expired is no leak.
        let late = c.enter(grant("b", "t3", 0, Some(900)), at(1));
        c.exit(late, at(100), Ending::Released { released: true });
        c.key_seen(
            Sighting {
                master: "r3",
                resource: "r",
                token: "t3",
                pttl_ms: 900,
                seen: at(5000),
            },
            2000,
            200,
        );
        c.key_seen(
            Sighting {
                master: "r3",
                resource: "r",
                token: "t3",
                pttl_ms: 100,
                seen: at(5800),
            },
            2000,
            200,
        );
        c.key_seen(
            Sighting {
                master: "r2",
                resource: "r",
                token: "other",
                pttl_ms: -1,
                seen: at(10),
            },
            2000,
            200,
        );
        c.key_seen(
            Sighting {
                master: "r2",
                resource: "r",
                token: "big",
                pttl_ms: 5000,
                seen: at(10),
            },
            2000,
            200,
        );
        let f = c.findings(at(3000));
        assert_eq!(f.leaks.len(), 3, "{:?}", f.leaks);
    }
}
