//! One critical section as the clients report it, its write to the fenced
//! store, and the window in which its client believed it held the lock.

use serde::Serialize;

use super::{ClientKind, Ending, Primitive};
use crate::clock::Mono;

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
    /// A lock (exclusive or a reader's), a permit, a leadership or a
    /// grant of several resources.
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
    pub(super) fn believed_until(&self, strict: bool) -> Option<Mono> {
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
    pub(super) fn believed_part(&self, now: Mono, strict: bool) -> Option<(Mono, Mono)> {
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
            Primitive::Lock | Primitive::Shared | Primitive::Multi { .. } => &self.resource,
            Primitive::Permit { semaphore, .. } => semaphore,
            Primitive::Leadership { election, .. } => election,
        }
    }

    pub(super) fn brief(&self) -> String {
        let what = match &self.primitive {
            Primitive::Lock | Primitive::Multi { .. } => String::new(),
            Primitive::Shared => "shared, ".to_string(),
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

pub(super) fn ending_text(ending: &Ending) -> String {
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
