//! What the clients did: each attempt counted by the run's phase, by client
//! kind and by outcome, the agent's refusal codes, and malformed answers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use serde::Serialize;

use crate::checker::ClientKind;

/// What the system is going through, for availability by phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Quiet = 0,
    Faulted = 1,
    Recovering = 2,
}

impl Phase {
    pub const ALL: [Phase; 3] = [Phase::Quiet, Phase::Faulted, Phase::Recovering];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Quiet => "quiet",
            Phase::Faulted => "faulted",
            Phase::Recovering => "recovering",
        }
    }

    fn from_u8(v: u8) -> Phase {
        match v {
            1 => Phase::Faulted,
            2 => Phase::Recovering,
            _ => Phase::Quiet,
        }
    }
}

/// The shared phase flag the nemesis sets.
#[derive(Debug, Default)]
pub struct PhaseFlag(AtomicU8);

impl PhaseFlag {
    pub fn set(&self, phase: Phase) {
        self.0.store(phase as u8, Ordering::Relaxed);
    }

    pub fn get(&self) -> Phase {
        Phase::from_u8(self.0.load(Ordering::Relaxed))
    }
}

/// How one lock attempt (acquire or hold) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    Granted,
    Taken,
    NoQuorum,
    /// Any other refusal (`too_many_waiters`, ...).
    Refused,
    /// The agent's socket did not accept the connection (agent down).
    Unreachable,
    /// Connected but no whole answer (agent killed mid-request, or slow).
    NoAnswer,
    /// An answer that breaks the API contract.
    Malformed,
}

/// Attempt counts of one phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    pub attempts: u64,
    pub granted: u64,
    pub taken: u64,
    pub no_quorum: u64,
    pub refused: u64,
    pub unreachable: u64,
    pub no_answer: u64,
    pub malformed: u64,
}

impl Counts {
    fn add(&mut self, outcome: Outcome) {
        self.attempts += 1;
        match outcome {
            Outcome::Granted => self.granted += 1,
            Outcome::Taken => self.taken += 1,
            Outcome::NoQuorum => self.no_quorum += 1,
            Outcome::Refused => self.refused += 1,
            Outcome::Unreachable => self.unreachable += 1,
            Outcome::NoAnswer => self.no_answer += 1,
            Outcome::Malformed => self.malformed += 1,
        }
    }

    /// Attempts an agent answered (not unreachable, not unanswered).
    pub fn answered(&self) -> u64 {
        self.granted + self.taken + self.no_quorum + self.refused + self.malformed
    }

    pub fn merge(&mut self, other: &Counts) {
        self.attempts += other.attempts;
        self.granted += other.granted;
        self.taken += other.taken;
        self.no_quorum += other.no_quorum;
        self.refused += other.refused;
        self.unreachable += other.unreachable;
        self.no_answer += other.no_answer;
        self.malformed += other.malformed;
    }
}

/// Everything the clients did, by phase and by kind.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StatsSnapshot {
    pub by_phase: Vec<(String, Counts)>,
    pub by_kind: Vec<(String, Counts)>,
    pub extends: u64,
    pub extends_lost: u64,
    pub renewals: u64,
    pub releases: u64,
    pub releases_false: u64,
    pub releases_unanswered: u64,
    pub holds_lost: u64,
    pub holds_broken: u64,
    /// Contract breaches, with what was received (a few).
    pub malformed_samples: Vec<String>,
    pub refusal_codes: Vec<(String, u64)>,
    /// `/v1/nodes` readings by phase: (readings, without a usable quorum).
    pub quorum_readings: Vec<(String, u64, u64)>,
}

impl StatsSnapshot {
    pub fn total(&self) -> Counts {
        let mut total = Counts::default();
        for (_, c) in &self.by_phase {
            total.merge(c);
        }
        total
    }

    /// Requests made: attempts, extends and releases.
    pub fn operations(&self) -> u64 {
        self.total().attempts + self.extends + self.releases + self.releases_unanswered
    }
}

/// Thread-safe stats.
#[derive(Debug, Default)]
pub struct Stats {
    // A std Mutex: counter bumps only.
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_phase: HashMap<&'static str, Counts>,
    by_kind: HashMap<&'static str, Counts>,
    snapshot: StatsSnapshot,
    codes: HashMap<String, u64>,
    readings: HashMap<&'static str, (u64, u64)>,
}

impl Stats {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn attempt(&self, phase: Phase, kind: ClientKind, outcome: Outcome) {
        let mut inner = self.lock();
        inner
            .by_phase
            .entry(phase.as_str())
            .or_default()
            .add(outcome);
        inner.by_kind.entry(kind.as_str()).or_default().add(outcome);
    }

    /// One `/v1/nodes` reading of one agent: a usable quorum or not.
    pub fn quorum_reading(&self, phase: Phase, available: bool) {
        let mut inner = self.lock();
        let r = inner.readings.entry(phase.as_str()).or_default();
        r.0 += 1;
        r.1 += u64::from(!available);
    }

    pub(super) fn code(&self, code: &str) {
        *self.lock().codes.entry(code.to_string()).or_default() += 1;
    }

    pub(super) fn malformed(&self, what: String) {
        let mut inner = self.lock();
        if inner.snapshot.malformed_samples.len() < 10 {
            inner.snapshot.malformed_samples.push(what);
        }
    }

    pub(super) fn bump(&self, f: impl FnOnce(&mut StatsSnapshot)) {
        f(&mut self.lock().snapshot);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let inner = self.lock();
        let mut s = inner.snapshot.clone();
        s.by_phase = Phase::ALL
            .iter()
            .map(|p| {
                (
                    p.as_str().to_string(),
                    inner.by_phase.get(p.as_str()).cloned().unwrap_or_default(),
                )
            })
            .collect();
        let mut kinds: Vec<(String, Counts)> = inner
            .by_kind
            .iter()
            .map(|(k, c)| (k.to_string(), c.clone()))
            .collect();
        kinds.sort_by(|a, b| a.0.cmp(&b.0));
        s.by_kind = kinds;
        let mut codes: Vec<(String, u64)> =
            inner.codes.iter().map(|(k, v)| (k.clone(), *v)).collect();
        codes.sort();
        s.refusal_codes = codes;
        s.quorum_readings = Phase::ALL
            .iter()
            .map(|p| {
                let (n, down) = inner.readings.get(p.as_str()).copied().unwrap_or_default();
                (p.as_str().to_string(), n, down)
            })
            .collect();
        s
    }
}
