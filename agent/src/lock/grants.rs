//! The bookkeeping of the locks this agent granted: who asked for each,
//! until when it is valid, and how many acquires (re-entries) a release
//! must undo. Figures and re-entry only: the masters are the truth.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::isolation;
use crate::metrics::Metrics;
use crate::redlock::{Grant, Kind, Resource};

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub(super) token: String,
    /// What was granted: a lock, a permit or a leadership.
    pub(super) kind: Kind,
    pub(super) granted_at: Instant,
    pub(super) valid_until: Instant,
    /// The longest TTL set on the masters for this token (the grant's,
    /// its extensions', its re-entries'): what a re-entry sets at least,
    /// so that it never cuts a validity told before (see
    /// [`super::reentry`]).
    pub(super) ttl: Duration,
    pub(super) holder: Option<Holder>,
    /// The grant's fence, for the answers to its re-entries.
    pub(super) fence: Option<u64>,
    /// Acquires it takes releases to undo (see [`super::reentry`]): 1 at the
    /// grant, one more per re-entry; 0 once a release went to the masters.
    pub(super) count: u32,
    /// A hold's grant, renewed and released by its hold: never re-entered.
    pub(super) hold: bool,
    /// A permit's semaphore's limit, noted again at each extension.
    pub(super) limit: Option<u32>,
    /// The trace of the request that took it (its id's 16 bytes), when
    /// it was traced.
    pub(super) trace_id: Option<u128>,
}

/// The process that asked for a grant, as the kernel reported it when it
/// connected (`SO_PEERCRED`); shown in `/v1/locks` for locks held here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    pub pid: Option<u32>,
    pub uid: u32,
    pub gid: u32,
    /// Its pod, read from its cgroup when it connected; only under
    /// `socket.isolate: pod` (see [`isolation`]).
    pub pod: Option<isolation::Pod>,
}

/// The locks this agent granted and that are not yet released, by
/// resource: one grant, or a shared lock's readers, each with its own
/// token (at most one valid exclusive grant per resource can exist): what
/// `redlock_locks_held` counts and `redlock_hold_duration_seconds`
/// measures.
///
/// Bookkeeping only: safety never depends on it (the masters are the truth),
/// so an agent restart that forgets it loses nothing but these figures.
#[derive(Debug, Default)]
pub struct Grants {
    // A std Mutex: short critical sections, never across an await.
    by_resource: Mutex<HashMap<String, Vec<Entry>>>,
}

/// The grants of one resource held here: one, or a shared lock's readers.
pub(super) type Table = HashMap<String, Vec<Entry>>;

/// The grant of `resource` held with `token` in `table`.
pub(super) fn entry<'t>(table: &'t Table, resource: &str, token: &str) -> Option<&'t Entry> {
    table.get(resource)?.iter().find(|e| e.token == token)
}

/// [`entry`], to change it.
pub(super) fn entry_mut<'t>(
    table: &'t mut Table,
    resource: &str,
    token: &str,
) -> Option<&'t mut Entry> {
    table
        .get_mut(resource)?
        .iter_mut()
        .find(|e| e.token == token)
}

impl Grants {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.by_resource.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn granted(&self, resource: &Resource, grant: &Grant, holder: Option<Holder>) {
        let mut table = self.lock();
        let entries = table.entry(resource.as_str().to_string()).or_default();
        // A reader joins the others; any other grant is the only one.
        entries.retain(|e| e.kind == Kind::Shared && resource.kind() == Kind::Shared);
        entries.push(Entry {
            token: grant.token.as_str().to_string(),
            kind: resource.kind(),
            granted_at: grant.granted_at,
            valid_until: grant.valid_until(),
            ttl: grant.ttl,
            holder,
            fence: grant.fence,
            count: 1,
            hold: false,
            limit: None,
            trace_id: None,
        });
    }

    /// `resource` as the grant held with `token` took it here: a reader's
    /// lock for a shared grant of a lock, else as named. The masters need
    /// no mode to extend or release a token (see `crate::node::conn::BATCH`);
    /// the bookkeeping and the figures do.
    pub fn as_granted(&self, resource: Resource, token: &str) -> Resource {
        let shared =
            entry(&self.lock(), resource.as_str(), token).is_some_and(|e| e.kind == Kind::Shared);
        if shared && resource.kind() == Kind::Lock {
            resource.shared()
        } else {
            resource
        }
    }

    /// Records the limit of the semaphore whose permit `resource` is.
    pub fn set_limit(&self, resource: &str, token: &str, limit: u32) {
        if let Some(entry) = entry_mut(&mut self.lock(), resource, token) {
            entry.limit = Some(limit);
        }
    }

    /// The limit recorded for the permit `resource` held with `token`.
    pub fn limit(&self, resource: &str, token: &str) -> Option<u32> {
        entry(&self.lock(), resource, token).and_then(|e| e.limit)
    }

    /// Who asked for the grant of `resource` whose token is `token`, if
    /// this agent granted it and knows the peer.
    pub fn holder(&self, resource: &str, token: &str) -> Option<Holder> {
        entry(&self.lock(), resource, token).and_then(|e| e.holder)
    }

    /// Notes the trace of the request that took the grant of `resource`
    /// held with `token`, for the listing.
    pub fn traced(&self, resource: &str, token: &str, trace_id: u128) {
        if let Some(entry) = entry_mut(&mut self.lock(), resource, token) {
            entry.trace_id = Some(trace_id);
        }
    }

    /// The trace of the request that took the grant held with `token`, as
    /// 32 hex digits.
    pub fn trace_id(&self, resource: &str, token: &str) -> Option<String> {
        entry(&self.lock(), resource, token)
            .and_then(|e| e.trace_id)
            .map(|id| format!("{id:032x}"))
    }

    /// The token of this agent's grant of `resource`, if any, with who
    /// asked for it (a shared lock's last reader's).
    pub fn current(&self, resource: &str) -> Option<(String, Option<Holder>)> {
        self.lock()
            .get(resource)?
            .last()
            .map(|e| (e.token.clone(), e.holder))
    }

    /// Whether this agent holds the grant of `resource` with `token`.
    pub fn has(&self, resource: &str, token: &str) -> bool {
        entry(&self.lock(), resource, token).is_some()
    }

    /// The tokens of this agent's readers of `resource`.
    pub fn readers(&self, resource: &str) -> Vec<String> {
        self.lock().get(resource).map_or_else(Vec::new, |entries| {
            entries
                .iter()
                .filter(|e| e.kind == Kind::Shared)
                .map(|e| e.token.clone())
                .collect()
        })
    }

    /// An extension of the grant of `resource` held with `token` set
    /// `ttl` on the masters; it is valid until `valid_until`.
    pub fn extended(&self, resource: &str, token: &str, valid_until: Instant, ttl: Duration) {
        if let Some(entry) = entry_mut(&mut self.lock(), resource, token) {
            entry.valid_until = valid_until;
            entry.ttl = entry.ttl.max(ttl);
        }
    }

    /// Forgets a released grant and records how long it was held.
    pub fn released(&self, resource: &str, token: &str, metrics: &Metrics) {
        let mut grants = self.lock();
        let Some(entries) = grants.get_mut(resource) else {
            return;
        };
        if let Some(at) = entries.iter().position(|e| e.token == token) {
            let entry = entries.swap_remove(at);
            if entries.is_empty() {
                grants.remove(resource);
            }
            let end = Instant::now().min(entry.valid_until);
            metrics
                .hold_duration
                .observe(end.duration_since(entry.granted_at).as_secs_f64());
        }
    }

    /// Validity left of the grant of `resource` whose token is `token`, if
    /// this agent granted it and it has not run out.
    pub fn holds(&self, resource: &str, token: &str, now: Instant) -> Option<Duration> {
        entry(&self.lock(), resource, token)
            .filter(|e| e.valid_until > now)
            .map(|e| e.valid_until - now)
    }

    /// Forgets the grants of `resource`, whatever their tokens (force
    /// release).
    pub fn forget(&self, resource: &str, metrics: &Metrics) {
        for entry in self.lock().remove(resource).unwrap_or_default() {
            let end = Instant::now().min(entry.valid_until);
            metrics
                .hold_duration
                .observe(end.duration_since(entry.granted_at).as_secs_f64());
        }
    }

    /// Whether any grant here is still valid at `now`.
    pub fn any_valid(&self, now: Instant) -> bool {
        self.lock().values().flatten().any(|e| e.valid_until > now)
    }

    /// Drops grants whose validity ran out (recording their hold up to
    /// expiry) and returns how many are still held, by kind.
    pub fn sweep(&self, now: Instant, metrics: &Metrics) -> Held {
        let mut grants = self.lock();
        grants.retain(|_, entries| {
            entries.retain(|e| {
                let live = e.valid_until > now;
                if !live {
                    metrics
                        .hold_duration
                        .observe(e.valid_until.duration_since(e.granted_at).as_secs_f64());
                }
                live
            });
            !entries.is_empty()
        });
        let mut held = Held::default();
        for entry in grants.values().flatten() {
            match entry.kind {
                Kind::Lock => held.locks += 1,
                Kind::Shared => held.shared += 1,
                Kind::Permit => held.permits += 1,
                Kind::Leadership => held.leaderships += 1,
            }
        }
        held
    }
}

/// Grants held here, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub locks: usize,
    /// A shared lock's readers, each one.
    pub shared: usize,
    pub permits: usize,
    pub leaderships: usize,
}
