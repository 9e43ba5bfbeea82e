//! Locks on several resources at once, all or nothing, under one token
//! (the engine's round is [`crate::redlock::round`]).
//!
//! A grant of N resources is N lock grants, one per resource, each with
//! its own key's value (all made from the client's token, see
//! `Token::for_key`; the token itself is made for the set and proves it,
//! see [`set_key`]), one validity and one fence: each is listed,
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

use super::acquire::Contest;
use super::acquire::Take;
use super::events::{self, Events};
use super::holds::{self, End};
use super::{millis, Ask, Extended, Holder, LockError, Locks, Released};
use crate::redlock::token::{stored_at, Stored};
use crate::redlock::{Acquire, Grant, Kind, Master, Redlock, Resource, Store, Token};

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
        self.take(&ask, Kind::Lock, |locks, terms| {
            Ok(MultiContest::new(
                &locks.engine,
                resources,
                terms.ttl,
                ask.lock.owner.as_deref(),
                terms.fence,
            ))
        })
        .await
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

    /// Every resource of the grant on several made here whose value at
    /// `resource` is `value`; empty for any other grant.
    pub fn held_with(&self, resource: &str, value: &str) -> Vec<String> {
        self.multi
            .lock()
            .values()
            .find(|parts| {
                parts
                    .iter()
                    .any(|(r, v)| r.as_str() == resource && v.as_str() == value)
            })
            .map(|parts| parts.iter().map(|(r, _)| r.to_string()).collect())
            .unwrap_or_default()
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

/// Several locks at once, all or nothing (see [`crate::redlock::round`]):
/// every round uses the same values, one per resource, all made from the
/// client's token (see [`Token::for_key`]), itself made for the set (see
/// [`set_key`]): it proves which resources it holds, and is stored at no
/// key. A round that grants them all keeps their grants here and answers
/// with the first's.
pub struct MultiContest<'a> {
    resources: &'a [Resource],
    ttl: Duration,
    token: Token,
    values: Vec<Token>,
    fence: bool,
    grants: Vec<Grant>,
}

impl<'a> MultiContest<'a> {
    /// `resources`: sorted, distinct, at least one.
    pub fn new<M: Master>(
        redlock: &Redlock<M>,
        resources: &'a [Resource],
        ttl: Duration,
        owner: Option<&str>,
        fence: bool,
    ) -> MultiContest<'a> {
        let token = Token::generate(
            &set_key(&redlock.settings().key_prefix, resources),
            redlock.settings().agent_name.as_deref(),
            owner,
        );
        let values = resources
            .iter()
            .map(|resource| {
                token
                    .for_key(&redlock.key(resource))
                    .expect("a token just generated makes values for other keys")
            })
            .collect();
        MultiContest {
            resources,
            ttl,
            token,
            values,
            fence,
            grants: Vec::new(),
        }
    }
}

impl<M: Master> Contest<M> for MultiContest<'_> {
    fn queue(&self) -> &str {
        self.resources[0].queue()
    }

    fn queues(&self) -> impl Iterator<Item = &str> + Send {
        self.resources.iter().map(Resource::queue)
    }

    async fn round(&mut self, redlock: &Redlock<M>, waiting: bool) -> Acquire {
        match redlock
            .acquire_many(self.resources, self.ttl, &self.values, self.fence, waiting)
            .await
        {
            Ok(grants) => {
                let first = grants[0].clone();
                self.grants = grants;
                Acquire::Granted(first)
            }
            Err(outcome) => outcome,
        }
    }
}

/// The name a lock on `resources` (sorted) makes its client's token for:
/// `<key_prefix>` and each resource after a line break (which no resource
/// has). No key has this name; a token made for it proves the set.
pub fn set_key(key_prefix: &str, resources: &[Resource]) -> String {
    let mut key = String::from(key_prefix);
    for resource in resources {
        key.push('\n');
        key.push_str(resource.as_str());
    }
    key
}

impl<M: Store> Take<M> for MultiContest<'_> {
    type Won = MultiGrant;

    fn refused(&mut self) -> LockError {
        LockError::TakenMany(names(self.resources))
    }

    /// Records each resource's grant, and the set under the client's token.
    async fn won(&mut self, locks: &Locks<M>, _: Grant, holder: Option<Holder>) -> MultiGrant {
        let grants = std::mem::take(&mut self.grants);
        let mut parts = Vec::with_capacity(grants.len());
        for (resource, grant) in self.resources.iter().zip(&grants) {
            locks.grants.granted(resource, grant, holder);
            parts.push((resource.clone(), grant.token.clone()));
        }
        locks.remember_many(&self.token, parts);
        MultiGrant {
            token: self.token.clone(),
            grants,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::tests::{ask, resource, service};

    fn many(names: &[&str]) -> Vec<Resource> {
        let names: Vec<String> = names.iter().map(ToString::to_string).collect();
        resources(&names).unwrap()
    }

    /// A resource held leaves the whole request out with no key of the
    /// others on any master; free, all are granted under one token that
    /// proves the set, and the token releases them all.
    #[tokio::test]
    async fn all_or_nothing_on_every_master_and_one_token_for_all() {
        let (masters, locks) = service();
        let held = locks
            .acquire(&resource("b"), ask(0, "other"))
            .await
            .unwrap();
        let set = many(&["c", "b", "a"]);
        let refused = locks.acquire_many(&set, ask(0, "mover")).await;
        assert!(
            matches!(refused, Err(LockError::TakenMany(_))),
            "{refused:?}"
        );
        for master in &masters {
            assert_eq!(master.holds("t:a"), None);
            assert_eq!(master.holds("t:c"), None);
        }
        locks
            .release(&resource("b"), &held.token, None)
            .await
            .unwrap();
        let granted = locks.acquire_many(&set, ask(0, "mover")).await.unwrap();
        let prefix = &locks.engine().settings().key_prefix;
        assert_eq!(
            stored_at(&set_key(prefix, &set), granted.token.as_str()),
            Stored::Token
        );
        for (resource, grant) in set.iter().zip(&granted.grants) {
            let key = locks.engine().key(resource);
            assert_eq!(stored_at(&key, grant.token.as_str()), Stored::Token);
            let holding = masters
                .iter()
                .filter(|m| m.holds(&key).as_deref() == Some(grant.token.as_str()))
                .count();
            assert!(holding >= 2, "{resource} held on {holding} of 3");
        }
        let parts = locks.parts_of(&granted.token, None).unwrap();
        let named = locks
            .parts_of(&granted.token, Some(&["a".into(), "c".into(), "b".into()]))
            .unwrap();
        assert_eq!(parts, named);
        assert!(locks
            .parts_of(&granted.token, Some(&["a".into(), "b".into()]))
            .is_err());
        assert_eq!(
            locks
                .release_many(&granted.token, &parts, None)
                .await
                .unwrap(),
            Released::Released
        );
        // The last master's release may still be on its way.
        for _ in 0..100 {
            if masters.iter().all(|m| m.holds("t:b").is_none()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(masters.iter().all(|m| m.holds("t:b").is_none()));
        assert!(locks.parts_of(&granted.token, None).is_err(), "forgotten");
    }

    /// The set's one fence is above the fences of each resource's earlier
    /// grants, and a later grant of any of them is above it.
    #[tokio::test]
    async fn one_fence_above_each_resource_earlier_fences() {
        let (_masters, locks) = service();
        let mut fenced = ask(0, "f");
        fenced.lock.fence = true;
        let mut earlier = 0;
        for name in ["x", "y"] {
            let grant = locks
                .acquire(&resource(name), fenced.clone())
                .await
                .unwrap();
            earlier = earlier.max(grant.fence.unwrap());
            locks
                .release(&resource(name), &grant.token, None)
                .await
                .unwrap();
        }
        let set = many(&["x", "y"]);
        let granted = locks.acquire_many(&set, fenced.clone()).await.unwrap();
        let fence = granted.grants[0].fence.unwrap();
        assert!(fence > earlier);
        assert!(granted.grants.iter().all(|g| g.fence == Some(fence)));
        let parts = locks.parts_of(&granted.token, None).unwrap();
        locks
            .release_many(&granted.token, &parts, None)
            .await
            .unwrap();
        let later = locks.acquire(&resource("y"), fenced).await.unwrap();
        assert!(later.fence.unwrap() > fence);
    }

    /// Requests name 2 to the maximum of valid resources, none twice.
    #[test]
    fn requests_name_two_to_the_maximum_distinct_valid_resources() {
        let named =
            |names: &[&str]| resources(&names.iter().map(ToString::to_string).collect::<Vec<_>>());
        assert!(named(&["one"]).is_err());
        assert!(named(&["a", "b", "a"]).is_err());
        assert!(named(&["a", "no spaces"]).is_err());
        let most: Vec<String> = (0..=MAX_RESOURCES).map(|i| format!("r{i}")).collect();
        assert!(resources(&most).is_err());
        assert!(resources(&most[1..]).is_ok());
        let sorted = named(&["b", "c", "a"]).unwrap();
        assert_eq!(names(&sorted), "a, b, c");
    }
}
