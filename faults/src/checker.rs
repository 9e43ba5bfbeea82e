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
//! - **writer beside a reader** ([`shared`]): an exclusive grant believed
//!   at the same instant as a reader's grant of its resource (readers
//!   together are what the shared mode is for).
//!
//! Sections of killed clients end when the harness sent SIGKILL: the
//! process runs no code after it, and the command of a killed
//! `redlock-agent lock` only sleeps until the kernel kills it too.
//!
//! A master whose wall clock the nemesis moved keeps keys past their TTL
//! for a while; the leak bounds allow for it there ([`clock_excuse`]).

pub mod clock_excuse;
mod fences;
mod findings;
pub mod multi;
mod primitives;
mod section;
pub mod shared;

pub use findings::{
    Blame, FenceFindings, FenceInversion, Findings, LeaderOverlap, Leak, Overrun,
    PrimitiveFindings, SemaphoreExcess, StaleWrite, TermInversion, Violation,
};
pub use section::{Section, SectionId, StoreWrite, WriteOutcome};

use fences::fences;
use section::ending_text;

use std::collections::HashMap;
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
    /// A reader's grant of the lock of the section's resource (`"mode":
    /// "shared"`): readers may hold it together, never beside an exclusive
    /// grant ([`shared`]).
    Shared,
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
    /// A reader's acquire (`"mode": "shared"`), work, maybe extend, release.
    SharedAcquire,
    /// A reader's hold stream.
    SharedHold,
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
            ClientKind::SharedAcquire => "shared_acquire",
            ClientKind::SharedHold => "shared_hold",
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
                | ClientKind::SharedHold
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
            // a grant of several resources the multi-resource one's, and a
            // reader the read-write one's.
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
        findings.shared = shared::findings(&state.sections, now);
        findings
    }
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
mod tests;
