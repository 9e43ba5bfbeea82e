//! The locks this agent granted and that are not yet released: what
//! `redlock_locks_held` counts and `redlock_hold_duration_seconds` measures.
//!
//! Bookkeeping only: safety never depends on it (the masters are the truth),
//! so an agent restart that forgets it loses nothing but these figures.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use crate::metrics::Metrics;

#[derive(Debug, Clone)]
struct Entry {
    token: String,
    granted_at: Instant,
    valid_until: Instant,
    holder: Option<Holder>,
}

/// The process that asked for a grant, as the kernel reported it when it
/// connected (`SO_PEERCRED`); shown in `/v1/locks` for locks held here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder {
    pub pid: Option<u32>,
    pub uid: u32,
    pub gid: u32,
}

/// Grants by resource; at most one valid grant per resource can exist.
#[derive(Debug, Default)]
pub struct Grants {
    // A std Mutex: short critical sections, never across an await.
    by_resource: Mutex<HashMap<String, Entry>>,
}

impl Grants {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.by_resource.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn granted(
        &self,
        resource: &str,
        token: &str,
        granted_at: Instant,
        valid_until: Instant,
        holder: Option<Holder>,
    ) {
        self.lock().insert(
            resource.to_string(),
            Entry {
                token: token.to_string(),
                granted_at,
                valid_until,
                holder,
            },
        );
    }

    /// Who asked for the grant of `resource` whose token is `token`, if
    /// this agent granted it and knows the peer.
    pub fn holder(&self, resource: &str, token: &str) -> Option<Holder> {
        self.lock()
            .get(resource)
            .filter(|e| e.token == token)
            .and_then(|e| e.holder)
    }

    /// The token of this agent's grant of `resource`, if any, with who
    /// asked for it.
    pub fn current(&self, resource: &str) -> Option<(String, Option<Holder>)> {
        self.lock()
            .get(resource)
            .map(|e| (e.token.clone(), e.holder))
    }

    pub fn extended(&self, resource: &str, token: &str, valid_until: Instant) {
        if let Some(entry) = self.lock().get_mut(resource).filter(|e| e.token == token) {
            entry.valid_until = valid_until;
        }
    }

    /// Forgets a released grant and records how long it was held.
    pub fn released(&self, resource: &str, token: &str, metrics: &Metrics) {
        let mut grants = self.lock();
        if grants.get(resource).is_some_and(|e| e.token == token) {
            if let Some(entry) = grants.remove(resource) {
                let end = Instant::now().min(entry.valid_until);
                metrics
                    .hold_duration
                    .observe(end.duration_since(entry.granted_at).as_secs_f64());
            }
        }
    }

    /// Validity left of the grant of `resource` whose token is `token`, if
    /// this agent granted it and it has not run out.
    pub fn holds(&self, resource: &str, token: &str, now: Instant) -> Option<std::time::Duration> {
        self.lock()
            .get(resource)
            .filter(|e| e.token == token && e.valid_until > now)
            .map(|e| e.valid_until - now)
    }

    /// Forgets the grant of `resource`, whatever its token (force release).
    pub fn forget(&self, resource: &str, metrics: &Metrics) {
        if let Some(entry) = self.lock().remove(resource) {
            let end = Instant::now().min(entry.valid_until);
            metrics
                .hold_duration
                .observe(end.duration_since(entry.granted_at).as_secs_f64());
        }
    }

    /// Drops grants whose validity ran out (recording their hold up to
    /// expiry) and returns how many are still held.
    pub fn sweep(&self, now: Instant, metrics: &Metrics) -> usize {
        let mut grants = self.lock();
        grants.retain(|_, e| {
            let live = e.valid_until > now;
            if !live {
                metrics
                    .hold_duration
                    .observe(e.valid_until.duration_since(e.granted_at).as_secs_f64());
            }
            live
        });
        grants.len()
    }
}
