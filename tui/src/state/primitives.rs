//! Semaphores and elections, as the locks listing reveals them.
//!
//! The agent keeps a semaphore's permits and an election's leadership as
//! ordinary locks on internal resources: permit `i` of `pay` is the lock
//! `pay permit 3`, the leadership of `sched` is `sched election`. No client
//! can name a resource with a space, so these names are unambiguous: the
//! [`Kind`] of a listed resource is read from its name alone.
//!
//! The primitives view lists every semaphore and election seen in the
//! current listing, with what `GET /v1/semaphores/{name}` and
//! `GET /v1/elections/{name}` last said about it. A name gone from the
//! listing is gone from the view, its answer with it: no stale figures.

use std::cmp::Ordering;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use redlock_wire::{Leader, PermitInfo, SemaphoreResponse};

use super::countdown::Countdown;
use super::filter::Filter;
pub use super::kind::Kind;
use super::locks::Locks;
use super::table::Rows;
use super::Known;

/// The semaphores and elections named in a listing, each once, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Names {
    pub semaphores: Vec<String>,
    pub elections: Vec<String>,
}

impl Names {
    /// The names behind the listed resources.
    pub fn of<'a>(resources: impl IntoIterator<Item = &'a str>) -> Names {
        let mut semaphores = BTreeSet::new();
        let mut elections = BTreeSet::new();
        for resource in resources {
            match Kind::of(resource) {
                Kind::Lock => {}
                Kind::Permit { semaphore, .. } => {
                    semaphores.insert(semaphore.to_string());
                }
                Kind::Leader { election } => {
                    elections.insert(election.to_string());
                }
            }
        }
        Names {
            semaphores: semaphores.into_iter().collect(),
            elections: elections.into_iter().collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.semaphores.is_empty() && self.elections.is_empty()
    }
}

/// The agent's answers about the names of one listing: `Ok(None)` for an
/// election nobody leads (`404 no_leader`), `Err` with the worded error.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answers {
    pub semaphores: Vec<(String, Result<SemaphoreResponse, String>)>,
    pub elections: Vec<(String, Result<Option<Leader>, String>)>,
}

/// One semaphore as the view shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SemaphoreState {
    /// Absent while no permit is held (the agent then knows no limit).
    pub limit: Option<u32>,
    pub permits: Vec<PermitInfo>,
    pub waiters: u64,
    /// The shortest validity among the permits, counted from the read.
    pub validity: Option<Countdown>,
}

/// One election's leader as the view shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaderState {
    pub leader: Leader,
    pub validity: Countdown,
    /// How long it had led when read, from its agent's `since_ms` and
    /// this machine's clock; `None` when either is unknown.
    pub led_for: Option<Duration>,
    pub read_at: Instant,
}

impl LeaderState {
    /// How long it has led at `now`, counted on from the read.
    pub fn led_at(&self, now: Instant) -> Option<Duration> {
        self.led_for
            .map(|d| d + now.saturating_duration_since(self.read_at))
    }
}

/// One row of the primitives view.
#[derive(Debug, Clone, PartialEq)]
pub enum Primitive {
    Semaphore {
        name: String,
        state: Known<SemaphoreState>,
    },
    Election {
        name: String,
        /// `Known(None)`: nobody leads now.
        state: Known<Option<LeaderState>>,
    },
}

impl Primitive {
    pub fn name(&self) -> &str {
        match self {
            Primitive::Semaphore { name, .. } | Primitive::Election { name, .. } => name,
        }
    }

    /// `semaphore` or `election`.
    pub fn kind(&self) -> &'static str {
        match self {
            Primitive::Semaphore { .. } => "semaphore",
            Primitive::Election { .. } => "election",
        }
    }

    /// The term of a known leader.
    pub fn term(&self) -> Option<u64> {
        match self {
            Primitive::Election {
                state: Known::Known(Some(leader)),
                ..
            } => leader.leader.term,
            _ => None,
        }
    }

    /// Who holds it, as the HELD BY column and the filter read it:
    /// `agent/owner` per permit, or the leader's with its value.
    pub fn holders(&self) -> Option<String> {
        match self {
            Primitive::Semaphore {
                state: Known::Known(s),
                ..
            } => Some(
                s.permits
                    .iter()
                    .map(|p| holder(p.agent.as_deref(), p.owner.as_deref()))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            Primitive::Election {
                state: Known::Known(Some(l)),
                ..
            } => {
                let mut text = holder(l.leader.agent.as_deref(), l.leader.owner.as_deref());
                if let Some(value) = &l.leader.value {
                    text.push_str(&format!(" value {value}"));
                }
                Some(text)
            }
            Primitive::Election {
                state: Known::Known(None),
                ..
            } => Some("no leader".to_string()),
            _ => None,
        }
    }
}

/// `agent/owner`, with `-` for what is not known.
pub fn holder(agent: Option<&str>, owner: Option<&str>) -> String {
    format!("{}/{}", agent.unwrap_or("-"), owner.unwrap_or("-"))
}

/// Columns the primitives table sorts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrimitiveColumn {
    Kind,
    Name,
    Term,
}

/// The primitives view's data.
#[derive(Debug, Clone, PartialEq)]
pub struct Primitives {
    /// `Unknown` (or failed) when the listing is.
    pub rows: Known<Vec<Primitive>>,
    /// Row keys (`semaphore:pay`), for the table's selection.
    keys: Vec<String>,
}

impl Default for Primitives {
    fn default() -> Primitives {
        Primitives {
            rows: Known::Unknown,
            keys: Vec::new(),
        }
    }
}

impl Primitives {
    /// Follows a new listing: the names in it, each with the answer it had
    /// if it was listed before, else unknown until asked.
    pub fn follow(&mut self, locks: &Locks) {
        let Some(table) = locks.table.get() else {
            let why = match &locks.table {
                Known::Failed(e) => Known::Failed(e.clone()),
                _ => Known::Unknown,
            };
            self.set(why);
            return;
        };
        let names = Names::of(table.rows.iter().map(|r| r.info.resource.as_str()));
        let old = match std::mem::replace(&mut self.rows, Known::Unknown) {
            Known::Known(rows) => rows,
            _ => Vec::new(),
        };
        let kept = |kind: &str, name: &str| {
            old.iter()
                .find(|p| p.kind() == kind && p.name() == name)
                .cloned()
        };
        let mut rows = Vec::new();
        for name in &names.semaphores {
            rows.push(
                kept("semaphore", name).unwrap_or_else(|| Primitive::Semaphore {
                    name: name.clone(),
                    state: Known::Unknown,
                }),
            );
        }
        for name in &names.elections {
            rows.push(
                kept("election", name).unwrap_or_else(|| Primitive::Election {
                    name: name.clone(),
                    state: Known::Unknown,
                }),
            );
        }
        self.set(Known::Known(rows));
    }

    /// Takes in the agent's answers, asked at `read_at` when the wall
    /// clock said `wall_ms`; answers for names no longer listed are
    /// dropped, names listed but not answered keep what they had.
    pub fn apply(&mut self, answers: &Answers, read_at: Instant, wall_ms: u64) {
        let Known::Known(rows) = &mut self.rows else {
            return;
        };
        for row in rows.iter_mut() {
            match row {
                Primitive::Semaphore { name, state } => {
                    if let Some((_, answer)) = answers.semaphores.iter().find(|(n, _)| n == name) {
                        *state = match answer {
                            Ok(s) => Known::Known(SemaphoreState {
                                limit: s.limit,
                                permits: s.permits.clone(),
                                waiters: s.waiters,
                                validity: s
                                    .permits
                                    .iter()
                                    .map(|p| p.validity_ms)
                                    .min()
                                    .map(|ms| Countdown::from_ms(ms, read_at)),
                            }),
                            Err(e) => Known::Failed(e.clone()),
                        };
                    }
                }
                Primitive::Election { name, state } => {
                    if let Some((_, answer)) = answers.elections.iter().find(|(n, _)| n == name) {
                        *state = match answer {
                            Ok(Some(leader)) => Known::Known(Some(LeaderState {
                                validity: Countdown::from_ms(leader.validity_ms, read_at),
                                led_for: leader.since_ms.filter(|_| wall_ms > 0).map(|since| {
                                    Duration::from_millis(wall_ms.saturating_sub(since))
                                }),
                                read_at,
                                leader: leader.clone(),
                            })),
                            Ok(None) => Known::Known(None),
                            Err(e) => Known::Failed(e.clone()),
                        };
                    }
                }
            }
        }
    }

    /// Forgets everything: the connection dropped.
    pub fn forget(&mut self, why: Known<Vec<Primitive>>) {
        self.set(why);
    }

    fn set(&mut self, rows: Known<Vec<Primitive>>) {
        self.keys = rows
            .get()
            .map(|rows| {
                rows.iter()
                    .map(|p| format!("{}:{}", p.kind(), p.name()))
                    .collect()
            })
            .unwrap_or_default();
        self.rows = rows;
    }

    pub fn rows(&self) -> &[Primitive] {
        self.rows.get().map_or(&[], Vec::as_slice)
    }
}

impl Rows for Primitives {
    type Column = PrimitiveColumn;

    fn len(&self) -> usize {
        self.rows().len()
    }

    fn key(&self, i: usize) -> &str {
        &self.keys[i]
    }

    fn keep(&self, i: usize, filter: &Filter) -> bool {
        let row = &self.rows()[i];
        let holders = row.holders();
        filter.keeps(
            [row.name(), row.kind()]
                .into_iter()
                .chain(holders.as_deref()),
        )
    }

    fn compare(&self, a: usize, b: usize, column: PrimitiveColumn) -> Ordering {
        let rows = self.rows();
        let (a, b) = (&rows[a], &rows[b]);
        let by_name = a.name().cmp(b.name());
        match column {
            PrimitiveColumn::Kind => a.kind().cmp(b.kind()).then(by_name),
            PrimitiveColumn::Name => by_name.then(a.kind().cmp(b.kind())),
            PrimitiveColumn::Term => super::nodes::cmp_known(a.term(), b.term()).then(by_name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::locks::tests as lock_fixtures;

    const M3: &[&str] = &["r1", "r2", "r3"];

    #[test]
    fn kinds_are_read_from_the_internal_names() {
        assert_eq!(
            Kind::of("pay permit 3"),
            Kind::Permit {
                semaphore: "pay",
                permit: 3
            }
        );
        assert_eq!(
            Kind::of("sched election"),
            Kind::Leader { election: "sched" }
        );
        assert_eq!(Kind::of("orders/42"), Kind::Lock);
        // Not the agent's forms: locks (as far as the TUI can tell).
        for name in [
            "a b permit 1",
            "pay permit x",
            "pay permit 01",
            " permit 1",
            "election",
            "a b election",
        ] {
            assert_eq!(Kind::of(name), Kind::Lock, "{name:?}");
        }
    }

    #[test]
    fn names_come_once_each_from_the_listing() {
        let names = Names::of([
            "pay permit 0",
            "pay permit 1",
            "api permit 0",
            "sched election",
            "plain",
        ]);
        assert_eq!(names.semaphores, ["api", "pay"]);
        assert_eq!(names.elections, ["sched"]);
        assert!(Names::of(["plain"]).is_empty());
    }

    fn listing(resources: &[&str]) -> Locks {
        let mut locks = Locks::default();
        let infos = resources
            .iter()
            .map(|r| lock_fixtures::lock(r, None, 10_000, M3, M3))
            .collect();
        locks.apply(&lock_fixtures::response(infos, M3), Instant::now());
        locks
    }

    /// Unknown until answered; an answer sticks while the name is listed
    /// and goes with it.
    #[test]
    fn answers_follow_the_listing_and_never_outlive_it() {
        let t0 = Instant::now();
        let mut primitives = Primitives::default();
        primitives.follow(&listing(&["pay permit 0", "sched election"]));
        assert_eq!(primitives.rows().len(), 2);
        assert!(primitives
            .rows()
            .iter()
            .all(|p| p.holders().is_none() && p.term().is_none()));
        let leader = Leader {
            election: "sched".into(),
            agent: Some("a1".into()),
            owner: Some("cron".into()),
            value: Some("10.0.0.7".into()),
            pid: None,
            uid: None,
            term: Some(7),
            since_ms: Some(1_000),
            validity_ms: 9_000,
        };
        let answers = Answers {
            semaphores: vec![(
                "pay".into(),
                Ok(SemaphoreResponse {
                    semaphore: "pay".into(),
                    limit: Some(2),
                    permits: vec![PermitInfo {
                        permit: 0,
                        agent: Some("a1".into()),
                        owner: Some("w1".into()),
                        validity_ms: 5_000,
                        held_here: true,
                        pid: None,
                        uid: None,
                    }],
                    waiters: 0,
                    unread: vec![],
                    partial: false,
                }),
            )],
            elections: vec![("sched".into(), Ok(Some(leader)))],
        };
        primitives.apply(&answers, t0, 4_000);
        let rows = primitives.rows();
        assert_eq!(rows[0].holders().as_deref(), Some("a1/w1"));
        assert_eq!(rows[1].term(), Some(7));
        assert_eq!(rows[1].holders().as_deref(), Some("a1/cron value 10.0.0.7"));
        let Primitive::Election {
            state: Known::Known(Some(l)),
            ..
        } = &rows[1]
        else {
            panic!("{:?}", rows[1]);
        };
        assert_eq!(l.led_at(t0), Some(Duration::from_secs(3)));
        assert_eq!(
            l.led_at(t0 + Duration::from_secs(2)),
            Some(Duration::from_secs(5))
        );
        // Listed again: the answers stay until the next ones.
        primitives.follow(&listing(&["pay permit 1", "sched election"]));
        assert_eq!(primitives.rows()[1].term(), Some(7));
        // Nobody leads: said so, not the old term.
        let answers = Answers {
            semaphores: vec![],
            elections: vec![("sched".into(), Ok(None))],
        };
        primitives.apply(&answers, t0, 4_000);
        assert_eq!(primitives.rows()[1].term(), None);
        assert_eq!(primitives.rows()[1].holders().as_deref(), Some("no leader"));
        // Gone from the listing, gone from the view.
        primitives.follow(&listing(&["plain"]));
        assert!(primitives.rows().is_empty());
        primitives.follow(&listing(&["sched election"]));
        assert_eq!(primitives.rows()[0].holders(), None, "asked afresh");
        primitives.follow(&Locks::default());
        assert_eq!(primitives.rows, Known::Unknown);
    }
}
