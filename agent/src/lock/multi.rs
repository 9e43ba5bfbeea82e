//! Locks on several resources at once, all or nothing, under one token
//! (the engine's round is [`crate::redlock::multi`]).
//!
//! A grant of N resources is N lock grants, one per resource, each with
//! its own key's value (all made from the client's token, see
//! `Token::for_key`; the token itself is made for the set and proves it,
//! see [`super::waiters::set_key`]), one validity and one fence: each is listed,
//! extended, released and force-released as a lock; a hold of them runs
//! one lock's hold per resource and tells the client one stream: the first
//! loss ends them all.
//!
//! Waiting: the request waits in every resource's queue at once (see
//! [`super::waiters`]) and votes only at the head of all of them, with
//! nothing held between rounds: a single-resource waiter that came after
//! it waits behind it here, and overlapping requests in any order never
//! wait for each other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::join_all;
use redlock_wire::{HoldEvent, OnDisconnect, MAX_RESOURCES};

use super::events::{self, Events};
use super::holds::{self, End};
use super::waiters::{set_key, MultiContest};
use super::{check_owner, millis, Ask, Extended, Holder, LockError, Locks, Released};
use crate::redlock::token::{stored_at, Stored};
use crate::redlock::{Acquire, Failure, Grant, Resource, Store, Token};

/// A grant on several resources: its resources, sorted, each with the
/// value at its key.
pub type Parts = Vec<(Resource, Token)>;

/// A grant on several resources: the client's token, and one lock grant
/// per resource, in order.
#[derive(Debug)]
pub struct MultiGrant {
    pub token: Token,
    pub grants: Vec<Grant>,
}

/// The grants on several resources made here, by the client's token, so
/// that the token alone extends and releases them (through another agent,
/// the request names the resources).
#[derive(Debug, Default)]
pub struct MultiGrants {
    by_token: Mutex<HashMap<String, Parts>>,
}

impl MultiGrants {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Parts>> {
        self.by_token.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The resources one request names: 2 to [`MAX_RESOURCES`], each a valid
/// resource, none twice; sorted.
///
/// # Errors
/// [`LockError::Invalid`] naming what is wrong.
pub fn resources(names: &[String]) -> Result<Vec<Resource>, LockError> {
    if !(2..=MAX_RESOURCES).contains(&names.len()) {
        return Err(LockError::Invalid(format!(
            "resources must name 2 to {MAX_RESOURCES} resources (one is a lock: POST /v1/locks/{{resource}}/acquire); got {}",
            names.len()
        )));
    }
    let mut resources = Vec::with_capacity(names.len());
    for (index, name) in names.iter().enumerate() {
        let resource = Resource::new(name)
            .map_err(|e| LockError::Invalid(format!("resources[{index}]: {e}")))?;
        resources.push(resource);
    }
    resources.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    if let Some(twice) = resources.windows(2).find(|w| w[0] == w[1]) {
        return Err(LockError::Invalid(format!(
            "resources names {} twice",
            twice[0]
        )));
    }
    Ok(resources)
}

impl<M: Store> Locks<M> {
    /// Acquires every resource of `resources` (sorted, distinct, see
    /// [`resources`]) or none, waiting up to `wait_ms` in each one's
    /// line; records each grant.
    ///
    /// # Errors
    /// As [`Locks::acquire`]; `taken` when any resource stayed held.
    pub async fn acquire_many(
        &self,
        resources: &[Resource],
        ask: Ask,
    ) -> Result<MultiGrant, LockError> {
        self.timed_acquire(self.try_acquire_many(resources, ask))
            .await
    }

    async fn try_acquire_many(
        &self,
        resources: &[Resource],
        ask: Ask,
    ) -> Result<MultiGrant, LockError> {
        let lock = &ask.lock;
        let ttl = self.rules.ttl(lock.ttl_ms)?;
        check_owner(lock.owner.as_deref())?;
        let wait = Duration::from_millis(lock.wait_ms.unwrap_or(0));
        let fence = lock.fence || self.rules.fence == super::FenceMode::Always;
        let mut contest =
            MultiContest::new(&self.engine, resources, ttl, lock.owner.as_deref(), fence);
        let uid = ask.holder.as_ref().map(|h| h.uid);
        let outcome = self
            .waiters
            .contend(&self.engine, &mut contest, wait, uid, None)
            .await?;
        match outcome {
            Acquire::Granted(_) => {
                let grants = contest.take_grants();
                let mut parts = Vec::with_capacity(grants.len());
                for (resource, grant) in resources.iter().zip(&grants) {
                    self.grants
                        .granted(resource.as_str(), grant, ask.holder.clone());
                    parts.push((resource.clone(), grant.token.clone()));
                }
                let token = contest.token().clone();
                self.remember_many(&token, parts);
                Ok(MultiGrant { token, grants })
            }
            Acquire::Taken => {
                self.metrics.fail(Failure::Taken);
                Err(LockError::TakenMany(names(resources)))
            }
            Acquire::NoQuorum(message) => {
                self.metrics.fail(Failure::NoQuorum);
                Err(LockError::NoQuorum(message))
            }
        }
    }

    /// Notes a grant on several resources under its token, and forgets
    /// those that no longer hold any resource here.
    fn remember_many(&self, token: &Token, parts: Parts) {
        let now = Instant::now();
        let mut by_token = self.multi.lock();
        by_token.retain(|_, parts| {
            parts
                .iter()
                .any(|(r, v)| self.grants.holds(r.as_str(), v.as_str(), now).is_some())
        });
        by_token.insert(token.as_str().to_string(), parts);
    }

    /// The resources and values of the grant of `token`: those this agent
    /// noted, else those `named` (the set `token` must have been made
    /// for).
    ///
    /// # Errors
    /// [`LockError::Invalid`]: neither, or a token not of those resources.
    pub fn parts_of(&self, token: &Token, named: Option<&[String]>) -> Result<Parts, LockError> {
        if let Some(named) = named {
            let resources = resources(named)?;
            let set = set_key(&self.engine.settings().key_prefix, &resources);
            if stored_at(&set, token.as_str()) != Stored::Token {
                return Err(LockError::Invalid(format!(
                    "the token is not of a lock on {}",
                    names(&resources)
                )));
            }
            return Ok(resources
                .iter()
                .map(|r| {
                    let value = token
                        .for_key(&self.engine.key(r))
                        .expect("a checked token makes values for other keys");
                    (r.clone(), value)
                })
                .collect());
        }
        self.multi
            .lock()
            .get(token.as_str())
            .cloned()
            .ok_or_else(|| {
                LockError::Invalid(
                    "this agent holds no lock on several resources with this token (ended, or \
                 granted by another agent): name its resources"
                        .into(),
                )
            })
    }

    /// A new TTL for every resource of a grant on several, or the first
    /// resource's error (`lost` when any was not extended).
    ///
    /// # Errors
    /// As [`Locks::extend`].
    pub async fn extend_many(
        &self,
        parts: &Parts,
        ttl_ms: Option<u64>,
        caller: Option<&Holder>,
    ) -> Result<Extended, LockError> {
        let extended = join_all(
            parts
                .iter()
                .map(|(resource, value)| self.extend(resource, value, ttl_ms, caller)),
        )
        .await;
        let mut shortest: Option<Extended> = None;
        for outcome in extended {
            let outcome = outcome?;
            if shortest.is_none_or(|s| outcome.validity < s.validity) {
                shortest = Some(outcome);
            }
        }
        Ok(shortest.expect("a grant on several resources has resources"))
    }

    /// Releases every resource of a grant on several: `Released` when a
    /// quorum still held each, `NotHeld` when any had run out.
    ///
    /// # Errors
    /// As [`Locks::release`], for any resource.
    pub async fn release_many(
        &self,
        token: &Token,
        parts: &Parts,
        caller: Option<&Holder>,
    ) -> Result<Released, LockError> {
        let released = join_all(
            parts
                .iter()
                .map(|(resource, value)| self.release(resource, value, caller)),
        )
        .await;
        self.multi.lock().remove(token.as_str());
        let mut all = Released::Released;
        for outcome in released {
            if outcome? != Released::Released {
                all = Released::NotHeld;
            }
        }
        Ok(all)
    }

    /// Acquires every resource (or none) for a hold: one lock's hold per
    /// resource, told to the client as one stream whose first event,
    /// `acquired`, is already in it (see [`Locks::hold`]).
    ///
    /// # Errors
    /// As [`Locks::acquire_many`], and `max_hold_ms` out of range.
    pub async fn hold_many(
        self: &Arc<Self>,
        resources: Vec<Resource>,
        ask: Ask,
        max_hold_ms: Option<u64>,
        on_disconnect: OnDisconnect,
    ) -> Result<events::Receiver<HoldEvent>, LockError> {
        let max_hold = self.rules.max_hold(max_hold_ms)?;
        let MultiGrant { token, grants } = self.acquire_many(&resources, ask).await?;
        let first = grants[0].clone();
        let parts: Parts = resources
            .iter()
            .cloned()
            .zip(grants.iter().map(|g| g.token.clone()))
            .collect();
        let mut inner = Vec::with_capacity(grants.len());
        for (resource, grant) in resources.into_iter().zip(grants) {
            match self
                .start_hold(
                    resource,
                    grant,
                    max_hold,
                    on_disconnect,
                    None,
                    holds::Held::Lock,
                )
                .await
            {
                Ok((mut receiver, task)) => {
                    // Its `acquired`: the client hears the set's.
                    let _ = receiver.recv().await;
                    inner.push((receiver, task));
                }
                Err(error) => {
                    self.end_many(&token, &parts, inner).await;
                    return Err(error);
                }
            }
        }
        let (events, receiver) = events::stream::<HoldEvent>();
        events.first(HoldEvent::Acquired {
            token: token.as_str().to_string(),
            validity_ms: millis(first.validity.saturating_sub(first.granted_at.elapsed())),
            ttl_ms: millis(first.ttl),
            fence: first.fence,
            permit: None,
            hold_count: None,
        });
        let locks = Arc::clone(self);
        tokio::spawn(async move {
            let end = tell_as_one(&events, &mut inner, first.valid_until()).await;
            if end != End::Closed {
                // The first loss ends every resource's hold, each released
                // whatever `on_disconnect` says: the set is gone.
                locks.end_many(&token, &parts, inner).await;
            }
        });
        Ok(receiver)
    }

    /// Ends the holds of a set that failed or lost one resource: each stops
    /// (its client gone), then every resource is released.
    async fn end_many(
        &self,
        token: &Token,
        parts: &Parts,
        inner: Vec<(events::Receiver<HoldEvent>, tokio::task::JoinHandle<End>)>,
    ) {
        let tasks: Vec<_> = inner.into_iter().map(|(_, task)| task).collect();
        for task in tasks {
            let _ = task.await;
        }
        let (resources, values): (Vec<Resource>, Vec<Token>) = parts.iter().cloned().unzip();
        self.engine.release_many(&resources, &values).await;
        for (resource, value) in parts {
            self.released(resource, value);
        }
        self.multi.lock().remove(token.as_str());
    }
}

/// Tells the holds of a set's resources to its client as one hold:
/// `renewed` once every resource has renewed since the last (with the
/// least validity left of any), and the first `lost` of any. Returns how
/// the set's hold ended: [`End::Closed`] when its client went away (each
/// resource's hold then ends as its own `on_disconnect` says).
async fn tell_as_one(
    events: &Events<HoldEvent>,
    inner: &mut [(events::Receiver<HoldEvent>, tokio::task::JoinHandle<End>)],
    valid_until: Instant,
) -> End {
    let mut until = vec![valid_until; inner.len()];
    let mut renewed = vec![false; inner.len()];
    loop {
        let next = futures::future::select_all(
            inner
                .iter_mut()
                .map(|(receiver, _)| Box::pin(receiver.recv())),
        );
        let (event, index, _) = tokio::select! {
            () = events.closed() => return End::Closed,
            next = next => next,
        };
        match event.map(|stamped| stamped.event) {
            Some(HoldEvent::Renewed { validity_ms }) => {
                until[index] = Instant::now() + Duration::from_millis(validity_ms);
                renewed[index] = true;
                if renewed.iter().all(|r| *r) {
                    renewed.iter_mut().for_each(|r| *r = false);
                    let least = until.iter().min().copied().unwrap_or(valid_until);
                    let validity_ms = millis(least.saturating_duration_since(Instant::now()));
                    if !events.offer(HoldEvent::Renewed { validity_ms }) && events.is_closed() {
                        return End::Closed;
                    }
                }
            }
            Some(HoldEvent::Lost { reason }) => {
                let end = End::from_reason(&reason).unwrap_or(End::RenewFailed);
                let _ = events.send(HoldEvent::Lost { reason }).await;
                return end;
            }
            Some(HoldEvent::Acquired { .. }) => {}
            None => {
                let _ = events
                    .send(HoldEvent::Lost {
                        reason: End::RenewFailed.reason().to_string(),
                    })
                    .await;
                return End::RenewFailed;
            }
        }
    }
}

/// `a, b and c`: the resources of a request, for messages.
fn names(resources: &[Resource]) -> String {
    let names: Vec<&str> = resources.iter().map(Resource::as_str).collect();
    names.join(", ")
}
