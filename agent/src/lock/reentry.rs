//! Reentrant locks: an acquire that carries the token of a lock its
//! process already holds through this agent re-enters it. The answer has
//! the same token, the first grant's fence, the TTL set again on the
//! masters, and the count of acquires that releases must undo; a release
//! lowers the count, and only the release that takes it to zero goes to
//! the masters.
//!
//! ## Why it stays safe
//! A re-entry grants nothing new: the masters hold one key with one token,
//! as for any lock, and the re-entry's TTL is a compare-and-pexpire of that
//! token ([`crate::redlock::Redlock::extend`]), so it succeeds only while a
//! quorum still holds the key.
//!
//! A re-entry never cuts a validity told before. Its TTL is the one it
//! asks for (or the default) or the longest set before for the token (by
//! the grant, an extension or a re-entry), whichever is longer, and the
//! answer says which was set: the key then outlives every validity told
//! before, since each was counted from an earlier moment with a TTL no
//! longer. A re-entering hold renews, and an extension of a re-entered
//! lock sets, at least that TTL too; releases of inner acquires touch no
//! master. So the first holder keeps the validity it was told, however
//! the inner acquires ask and end. The count lives in this agent's
//! bookkeeping ([`super::Grants`]) and only ever delays a release: a lock
//! whose count is lost (an agent restart, expiry, a force release) is
//! released by its TTL as any other.
//!
//! ## Who may re-enter
//! Only a connection from the process that acquired the lock (its peer
//! pid, as the kernel reported it) with its current token, through the
//! agent that granted it, while the grant is valid. A process in a pid
//! namespace the agent does not see (a sidecar's own, the Kubernetes
//! default without `shareProcessNamespace`) is reported as pid 0, as is
//! every other there: no such process re-enters
//! ([`LockError::ReentryUnavailable`], saying why), since the agent cannot
//! tell it from another that was handed the token. A hold's grant is never
//! re-entered: its hold renews and releases it. A re-entry does not wait,
//! and keeps the first grant's owner label and fence: asking for a fence
//! the first grant did not mint, or for another owner label, is refused.
//! Under `socket.isolate` a token of another pod (or uid) is refused
//! first, as any call with it is ([`super::isolation`]), so that a re-entry
//! tells no other pod whether the token is held.
//!
//! ## Races
//! The count is checked before the re-entry's extension and again after
//! it. A release that took the count to zero meanwhile (its delete may be
//! on its way) wins: the re-entry is answered `not_reentrant`, never with
//! a count for a lock being released.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_wire::{AcquireRequest, HoldEvent, OnDisconnect};

use super::events::Receiver;
use super::holds::{self, Closing};
use super::{grants, Grants, Holder, LockError, Locks};
use crate::redlock::{token, Extend, Failure, Resource, Store, Token};

/// A re-entered lock, as the API answers it.
#[derive(Debug, Clone)]
pub struct Reentered {
    pub token: Token,
    /// Safe to use for this long from `extended_at`.
    pub validity: Duration,
    pub extended_at: Instant,
    pub ttl: Duration,
    /// The first grant's fence, if it minted one.
    pub fence: Option<u64>,
    /// Releases the lock now takes before it is released on the masters.
    pub hold_count: u32,
    /// The masters that confirmed the re-entry's extension.
    pub holding: Arc<crate::redlock::Holding>,
}

/// Why this agent will not re-enter a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not this agent's current grant with that token, run out, being
    /// released, or a hold's.
    NotHeld,
    /// Acquired by another process (or by one whose pid is unknown).
    OtherProcess,
    /// Asked by a process whose pid the kernel did not report (none, or 0
    /// for a process in a pid namespace the agent does not see): it cannot
    /// be told from any other.
    UnknownProcess,
}

impl<M: Store> Locks<M> {
    /// Re-enters the lock of `resource` held with `token` for `caller`
    /// (the process asking, by its peer pid): sets its TTL again to
    /// `ttl_ms` on the masters and counts one more acquire (see the module
    /// docs).
    ///
    /// # Errors
    /// Under `socket.isolate`, a token not held here for the caller's pod
    /// or uid ([`LockError::Isolated`], before any other check); the TTL
    /// out of range, a token that is not this agent's current grant
    /// ([`LockError::NotReentrant`]), another process's grant
    /// ([`LockError::ReentryForbidden`]), a caller whose pid is unknown
    /// ([`LockError::ReentryUnavailable`]), another owner label or a fence
    /// the first grant has not, the lock lost on the masters, or no
    /// quorum.
    pub async fn reenter(
        &self,
        resource: &Resource,
        token: &Token,
        caller: Option<&Holder>,
        ask: &AcquireRequest,
    ) -> Result<Reentered, LockError> {
        self.check_isolation(resource, token, caller)?;
        self.settle_closed_holds(resource, token).await;
        // Pid 0 is the kernel's answer for every peer in a pid namespace
        // this agent does not see: it names no one process.
        let pid = caller
            .and_then(|c| c.pid)
            .filter(|&pid| pid != 0 || self.rules.reentry_trusts_pid_zero);
        let ttl = self.rules.ttl(ask.ttl_ms)?;
        super::check_owner(ask.owner.as_deref())?;
        let (fence, longest) = self
            .grants
            .reentry(resource, token.as_str(), pid, Instant::now())
            .map_err(|refusal| match refusal {
                Refusal::NotHeld => LockError::NotReentrant(resource.clone()),
                Refusal::OtherProcess => LockError::ReentryForbidden(resource.clone()),
                Refusal::UnknownProcess => LockError::ReentryUnavailable(resource.clone()),
            })?;
        if let Some(owner) = ask.owner.as_deref() {
            if token::owner_of(token.as_str()) != Some(owner) {
                return Err(LockError::Invalid(
                    "owner: a re-entry keeps the owner label of the first acquire; leave it out or give the same".into(),
                ));
            }
        }
        if ask.fence && fence.is_none() {
            return Err(LockError::Invalid(
                "fence: this lock was acquired without a fence, and a re-entry answers the first grant's; acquire it with fence: true to have one".into(),
            ));
        }
        let ttl = if self.rules.reentry_keeps_ttl {
            ttl.max(longest)
        } else {
            ttl
        };
        match self.engine.extend(resource, token, ttl).await {
            Extend::Extended { validity, holding } => {
                let extended_at = Instant::now();
                let hold_count = self
                    .grants
                    .reentered(
                        resource.as_str(),
                        token.as_str(),
                        extended_at + validity,
                        ttl,
                    )
                    .ok_or_else(|| LockError::NotReentrant(resource.clone()))?;
                Ok(Reentered {
                    token: token.clone(),
                    validity,
                    extended_at,
                    ttl,
                    fence,
                    hold_count,
                    holding,
                })
            }
            Extend::Lost | Extend::Failed => {
                self.metrics.fail(Failure::ExtendFailed);
                Err(LockError::Lost(resource.clone()))
            }
            Extend::NoQuorum(message) => {
                self.metrics.fail(Failure::NoQuorum);
                Err(LockError::NoQuorum(message))
            }
        }
    }
}

impl<M: Store> Locks<M> {
    /// Lowers the count of the lock of `resource` held with `token` once
    /// for each hold that re-entered it and whose client has closed its
    /// connection, if the hold's task has not yet (see
    /// [`Closing`]); releases the lock on the masters when
    /// that was the last acquire. So a call that follows the close in the
    /// client's own order sees the count the close left.
    pub(crate) async fn settle_closed_holds(&self, resource: &Resource, token: &Token) {
        for closing in self.holds.closed(resource.as_str(), token.as_str()) {
            let settled =
                closing.settle(|| self.grants.release_one(resource.as_str(), token.as_str()));
            if settled == Some(None) {
                let released = self.release_ended(resource, token).await;
                tracing::debug!(%resource, ?released, "re-entered hold closed by its client; it was the last acquire");
            }
        }
    }

    /// The TTL an extension of the lock of `resource` held with `token`
    /// sets when it asks for `ttl`: at least the longest set before while
    /// the lock is re-entered (unless the test switch says otherwise), so
    /// that no extension of one acquire cuts another's validity.
    pub(crate) fn reentry_ttl(
        &self,
        resource: &Resource,
        token: &Token,
        ttl: Duration,
    ) -> Duration {
        if !self.rules.reentry_keeps_ttl {
            return ttl;
        }
        self.grants
            .reentered_ttl(resource.as_str(), token.as_str())
            .map_or(ttl, |longest| ttl.max(longest))
    }

    /// A hold that re-enters the lock of `resource` held with `token` by
    /// `caller`'s process: [`Locks::reenter`], then renewed by a hold until
    /// its connection closes, which lowers the count as a release does.
    ///
    /// With the events, the hold's [`Closing`], which settles
    /// its end once: the API tells it how to see that the client closed
    /// the connection.
    ///
    /// # Errors
    /// As [`Locks::reenter`], `max_hold_ms` out of range, and
    /// `on_disconnect: expire` (a count cannot be left to expire).
    pub async fn hold_reentered(
        self: &Arc<Self>,
        resource: Resource,
        token: &Token,
        caller: Option<&Holder>,
        ask: &AcquireRequest,
        max_hold_ms: Option<u64>,
        on_disconnect: OnDisconnect,
    ) -> Result<(Receiver<HoldEvent>, Arc<Closing>), LockError> {
        if on_disconnect == OnDisconnect::Expire {
            return Err(LockError::Invalid(
                "on_disconnect: a hold that re-enters a lock lowers its count when it closes; expire does not apply".into(),
            ));
        }
        let max_hold = self.rules.max_hold(max_hold_ms)?;
        let reentered = self.reenter(&resource, token, caller, ask).await?;
        let grant = crate::redlock::Grant {
            token: reentered.token,
            ttl: reentered.ttl,
            validity: reentered.validity,
            granted_at: reentered.extended_at,
            fence: reentered.fence,
            holding: reentered.holding,
        };
        // Listed before its client can hear `acquired` and close it.
        let closing = Arc::new(Closing::default());
        let reentering = self.holds.register_reentering(
            resource.as_str(),
            grant.token.as_str(),
            Arc::clone(&closing),
        );
        let (events, receiver) = super::events::stream::<HoldEvent>();
        let acquired = HoldEvent::Acquired {
            token: grant.token.as_str().to_string(),
            validity_ms: super::millis(grant.validity.saturating_sub(grant.granted_at.elapsed())),
            ttl_ms: super::millis(grant.ttl),
            fence: grant.fence,
            permit: None,
            hold_count: Some(reentered.hold_count),
        };
        events.first(acquired);
        tokio::spawn(holds::run(
            Arc::clone(self),
            resource,
            grant,
            max_hold,
            holds::Ending::Reentered(reentering),
            holds::Held::Lock,
            events,
        ));
        Ok((receiver, closing))
    }
}

impl Grants {
    /// Whether `pid` may re-enter the grant of `resource` held with
    /// `token` at `now`: its fence and the longest TTL set for it so far
    /// if so.
    pub fn reentry(
        &self,
        resource: &Resource,
        token: &str,
        pid: Option<u32>,
        now: Instant,
    ) -> Result<(Option<u64>, Duration), Refusal> {
        let grants = self.lock();
        // A re-entry in the other mode (shared into exclusive, or back) is
        // not this grant's: a reader's token never makes a writer.
        let entry = grants::entry(&grants, resource.as_str(), token)
            .filter(|e| e.kind == resource.kind())
            .filter(|e| e.valid_until > now && e.count > 0 && !e.hold)
            .ok_or(Refusal::NotHeld)?;
        match (pid, entry.holder.and_then(|h| h.pid)) {
            (None, _) => Err(Refusal::UnknownProcess),
            (Some(asking), Some(holding)) if asking == holding => Ok((entry.fence, entry.ttl)),
            _ => Err(Refusal::OtherProcess),
        }
    }

    /// A re-entry's extension set `ttl` and went through: the grant is
    /// valid until `valid_until` (or later, if it was before) and counts
    /// one acquire more, returned. `None` when a release took the count to
    /// zero meanwhile, or the grant is gone.
    pub fn reentered(
        &self,
        resource: &str,
        token: &str,
        valid_until: Instant,
        ttl: Duration,
    ) -> Option<u32> {
        let mut grants = self.lock();
        let entry = grants::entry_mut(&mut grants, resource, token).filter(|e| e.count > 0)?;
        entry.count += 1;
        entry.valid_until = entry.valid_until.max(valid_until);
        entry.ttl = entry.ttl.max(ttl);
        Some(entry.count)
    }

    /// The longest TTL set so far for the grant of `resource` held with
    /// `token`, while it is re-entered (counts more than one acquire).
    pub fn reentered_ttl(&self, resource: &str, token: &str) -> Option<Duration> {
        grants::entry(&self.lock(), resource, token)
            .filter(|e| e.count > 1)
            .map(|e| e.ttl)
    }

    /// One release of the grant of `resource` held with `token`: `Some(n)`
    /// when it was re-entered and `n` releases remain (nothing goes to the
    /// masters); `None` when this release is to go to them (the last one,
    /// or a grant not known here), from when on it cannot be re-entered.
    pub fn release_one(&self, resource: &str, token: &str) -> Option<u32> {
        let mut grants = self.lock();
        let entry = grants::entry_mut(&mut grants, resource, token)?;
        if entry.count > 1 {
            entry.count -= 1;
            return Some(entry.count);
        }
        entry.count = 0;
        None
    }

    /// Marks the grant of `resource` held with `token` as a hold's.
    pub fn mark_hold(&self, resource: &str, token: &str) {
        if let Some(entry) = grants::entry_mut(&mut self.lock(), resource, token) {
            entry.hold = true;
        }
    }
}
