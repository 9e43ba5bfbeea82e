//! Semaphores: at most `limit` holders at once, across every agent on
//! these masters.
//!
//! ## Why permits are locks
//! A semaphore of limit k is k permits, and permit i is an ordinary lock
//! on the resource `<name> permit <i>` ([`Resource::permit`]): granted by a
//! quorum, with its own token, validity, fence, delayed restart and
//! lost-state checks, renewed by holds and released as any lock. At most
//! one client believes it holds each permit, so at most k believe they
//! hold one of the k. Nothing new is assumed: the safety argument is the
//! lock's, k times.
//!
//! The tempting alternative, a counter or a set of holders on each master
//! with a quorum of masters each admitting up to k, is unsafe for k > 1:
//! with N masters and quorum q, up to ⌊N·k/q⌋ clients can each find q
//! masters that admit them (N=3, k=2: A on masters 1 and 2, B on 2 and 3,
//! C on 1 and 3). Every vote here is for one named permit, so two clients
//! can never count the same master's vote for different permits.
//!
//! ## Rounds
//! Waiters of a semaphore wait in one queue per agent (the permits share
//! their release channel, [`Resource::queue`]); only its head competes.
//! A round reads the semaphore's limit and every permit's key on the
//! masters at once, in each master's next batch of lock commands
//! ([`Master::peek`]: one script call per master, shared with the other
//! requests' votes, releases and notes; on a Redis Cluster, one per slot
//! the keys fall in), and votes for the
//! lowest permit free on a quorum of them, then, if another request won
//! it meanwhile, for the next one found free, up to [`FREE_TRIES`]. A
//! request that will not wait stops there: refused, a full semaphore
//! costs each master that one read (one script call), whatever the limit.
//! A first round votes at once, beside its read, for the lowest permit not
//! held through this agent ([`PermitContest::guess`]): a free permit costs
//! one round trip, as a lock does; a guess that another agent's holder
//! took costs each master one command more in that call. A request that
//! waits, or whose read too few masters answered, then votes for every
//! other permit at once (their waiting flags make any permit's release
//! announce itself). It keeps the lowest permit it won and releases the
//! others.
//!
//! A round in line woken by a permit's release (its message is the
//! permit's token, [`token::stored_at`] tells which permit) votes for that
//! permit beside its read, in the same batches: a hand-off costs one round
//! trip when it wins. A release heard while the head's round runs (or
//! before it started, with one already to take) goes to the next waiter
//! not in a round, which competes for that permit beside the head; with no
//! such waiter left, the head lets the next one try at once after its
//! round rather than wait for a release that has already come.
//!
//! ## The limit
//! The limit is part of the semaphore: its permits are granted with it,
//! and the agent that grants one writes it in a bookkeeping note on every
//! master ([`redlock_wire::keys::semaphore_limit_key`]), in the same
//! batches as the lock commands: queued before the grant is answered and
//! not waited for ([`Master::note_queued`]), so a permit costs no round
//! trip more than the read and the vote. Every extension
//! of a permit keeps the note on every master for at least the
//! extension's TTL, whichever agent extends it (a hold's renewal or a
//! request by token) and whether or not that agent granted the permit or
//! ran when it was granted: the granting agent writes the note again, any
//! other lengthens the TTL of the note it finds ([`Store::keep_note`]), in
//! the background, one command per master, so an extension waits for no
//! more round trips than before. On a master, the note is written or kept
//! after the permit's key is set for the same TTL, so it outlives every
//! permit there. While any permit is held, a request with another limit
//! is refused ([`LockError::LimitMismatch`]): its round reads the note
//! with the permits, and one master's note is enough. What this does not
//! cover: two requests with different limits on a semaphore with no
//! permit held, within a round trip of each other through two agents, can
//! both be granted (the note lands after the grant); and the note is
//! written and kept best effort, so a master that missed it (unreachable
//! then, or restarted without its keys) has none, and a permit extended
//! only while every master missed its keep outlives its note. The refusal keeps a
//! misconfiguration from going unnoticed; the bound of k holders for the
//! clients of one limit does not rest on it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_wire::semaphore::MAX_PERMITS;
use redlock_wire::{HoldEvent, OnDisconnect, PermitInfo, SemaphoreResponse};

use super::acquire::Contest;
use super::acquire::Take;
use super::listing::{self, ReadError};
use super::{Ask, Holder, LockError, Locks};
use crate::redlock::{
    round, token, Acquire, Grant, KeyState, Kind, Master, Peeked, Redlock, Resource, Store, Token,
};

/// A granted permit.
#[derive(Debug)]
/// A permit held by its client's connection ([`Locks::hold_permit`]).
pub struct HeldPermit {
    /// The hold's events, from `acquired` to `lost`.
    pub events: super::events::Receiver<HoldEvent>,
    pub index: u32,
    /// The permit's own resource ([`Resource::permit`]).
    pub resource: Resource,
    pub token: Token,
    pub fence: Option<u64>,
}

/// A permit granted: which, and its lock's grant.
#[derive(Debug)]
pub struct Permit {
    pub index: u32,
    pub grant: Grant,
}

/// Any permit of one semaphore: the contest of its waiters.
pub struct PermitContest {
    /// The semaphore's name.
    name: Resource,
    limit: u32,
    ttl: Duration,
    fence: bool,
    /// The permits' resources, by index.
    permits: Vec<Resource>,
    /// One token per permit, bound to its key, for every round.
    tokens: Vec<Token>,
    /// The limit's key, then each permit's: what a round reads.
    keys: Vec<String>,
    queue: String,
    /// The permit the last round won.
    won: Option<u32>,
    /// The limit the semaphore has, when a round found it is not ours.
    mismatch: Option<String>,
    /// The last round won more than one permit and gave back the others:
    /// the next waiter in line may try at once.
    room: bool,
    /// The permit voted for beside the read: the one whose release woke
    /// this round, or the first round's guess ([`PermitContest::guess`]).
    hint: Option<usize>,
}

impl PermitContest {
    pub fn new<M: Master>(
        redlock: &Redlock<M>,
        name: &Resource,
        limit: u32,
        ttl: Duration,
        owner: Option<&str>,
        fence: bool,
    ) -> PermitContest {
        let permits: Vec<Resource> = (0..limit).map(|i| Resource::permit(name, i)).collect();
        let agent = redlock.settings().agent_name.as_deref();
        let tokens = permits
            .iter()
            .map(|p| Token::generate(&redlock.key(p), agent, owner))
            .collect();
        let limit_key =
            redlock_wire::keys::semaphore_limit_key(&redlock.settings().key_prefix, name.as_str());
        let keys = std::iter::once(limit_key)
            .chain(permits.iter().map(|p| redlock.key(p)))
            .collect();
        PermitContest {
            name: name.clone(),
            limit,
            ttl,
            fence,
            queue: permits[0].queue().to_string(),
            permits,
            tokens,
            keys,
            won: None,
            mismatch: None,
            room: false,
            hint: None,
        }
    }

    /// Votes first for the lowest permit not `held` (through this agent),
    /// beside its first read: a semaphore with a permit free costs one
    /// round trip when no other agent holds that permit.
    pub fn guess(mut self, held: impl Fn(&Resource) -> bool) -> PermitContest {
        self.hint = self.permits.iter().position(|permit| !held(permit));
        self
    }

    /// The limit's note and each permit's key, read on every usable master
    /// at once, beside the lock commands ([`Master::peek`]: in each
    /// master's next batch): how many masters have each limit, on how
    /// many each permit is free, and how many masters answered.
    async fn look<M: Store>(&self, redlock: &Redlock<M>) -> Look {
        let usable = redlock.nodes().iter().filter(|n| n.is_usable());
        let reads = futures::future::join_all(usable.map(|n| n.peek(&self.keys))).await;
        let mut look = Look {
            limits: HashMap::new(),
            free: vec![0; self.permits.len()],
            answered: 0,
        };
        for peeked in reads.into_iter().flatten() {
            look.answered += 1;
            let mut peeked = peeked.into_iter();
            if let Some(Peeked::Number(limit)) = peeked.next() {
                *look.limits.entry(limit).or_default() += 1;
            }
            for (free, peek) in look.free.iter_mut().zip(peeked) {
                *free += usize::from(peek == Peeked::Gone);
            }
        }
        look
    }

    /// Votes for `permit`, recording it as won when granted.
    async fn vote<M: Store>(&mut self, redlock: &Redlock<M>, i: usize, waiting: bool) -> Acquire {
        let outcome = redlock
            .acquire_once(
                &self.permits[i],
                self.ttl,
                &self.tokens[i],
                self.fence,
                waiting,
            )
            .await;
        if matches!(outcome, Acquire::Granted(_)) {
            self.won = u32::try_from(i).ok();
        }
        outcome
    }
}

/// What a round read before it votes.
struct Look {
    /// Each limit found in the note, and on how many masters.
    limits: HashMap<u64, usize>,
    /// On how many masters each permit is free.
    free: Vec<usize>,
    /// How many masters answered the read.
    answered: usize,
}

/// How many of the permits that looked free a round votes for, one after
/// the other, when the others it tried were taken meanwhile: a few, so a
/// burst of requests reading the same free permit still finds the next,
/// and a round's cost never grows with the limit.
pub const FREE_TRIES: usize = 3;

impl<M: Store> Contest<M> for PermitContest {
    fn queue(&self) -> &str {
        &self.queue
    }

    fn settled(&self) -> bool {
        self.mismatch.is_some()
    }

    fn room_left(&self, released: bool) -> bool {
        released || self.room
    }

    fn several(&self) -> bool {
        true
    }

    fn woken_by(&mut self, token: Option<&str>) {
        let permit_keys = &self.keys[1..];
        self.hint = token.and_then(|token| {
            permit_keys
                .iter()
                .position(|key| token::stored_at(key, token) == token::Stored::Token)
        });
    }

    async fn round(&mut self, redlock: &Redlock<M>, waiting: bool) -> Acquire {
        self.room = false;
        // Woken by a permit's release: vote for that permit beside the
        // read, in the same batches, so a hand-off takes one round trip.
        let (look, guess) = match self.hint.take() {
            Some(i) => {
                let (permit, token) = (&self.permits[i], &self.tokens[i]);
                let vote = redlock.acquire_once(permit, self.ttl, token, self.fence, waiting);
                let (look, outcome) = futures::future::join(self.look(redlock), vote).await;
                (look, Some((i, outcome)))
            }
            None => (self.look(redlock).await, None),
        };
        let ours = u64::from(self.limit);
        if let Some((&limit, _)) = look.limits.iter().max_by_key(|&(v, c)| (*c, *v)) {
            if limit != ours {
                self.mismatch = Some(limit.to_string());
                if let Some((i, Acquire::Granted(_))) = guess {
                    redlock.release(&self.permits[i], &self.tokens[i]).await;
                }
                return Acquire::Taken { free_in: None };
            }
        }
        let quorum = redlock.quorum();
        let mut tried = vec![false; self.permits.len()];
        let mut no_quorum = None;
        if let Some((i, outcome)) = guess {
            tried[i] = true;
            match outcome {
                Acquire::Granted(grant) => {
                    self.won = u32::try_from(i).ok();
                    return Acquire::Granted(grant);
                }
                Acquire::NoQuorum(message) if !redlock.quorum_usable() => {
                    return Acquire::NoQuorum(message);
                }
                Acquire::NoQuorum(message) => no_quorum = Some(message),
                Acquire::Taken { .. } => {}
            }
        }
        let looked_free = (0..self.permits.len()).filter(|&i| look.free[i] >= quorum && !tried[i]);
        for i in looked_free.take(FREE_TRIES).collect::<Vec<_>>() {
            tried[i] = true;
            match self.vote(redlock, i, waiting).await {
                Acquire::Granted(grant) => return Acquire::Granted(grant),
                Acquire::NoQuorum(message) if !redlock.quorum_usable() => {
                    return Acquire::NoQuorum(message);
                }
                Acquire::NoQuorum(message) => no_quorum = Some(message),
                Acquire::Taken { .. } => {}
            }
        }
        // A read that a quorum answered, with no permit it found free
        // left: a request that will not wait is refused here, at the cost
        // of that one read (and the few votes above).
        if !waiting && look.answered >= quorum {
            return no_quorum.map_or(Acquire::Taken { free_in: None }, Acquire::NoQuorum);
        }
        // A request that waits votes for every other permit at once: any
        // that was freed since the read is won, and the votes on the taken
        // ones flag them, so their releases wake this queue. So does one
        // whose read too few masters answered: the votes tell why.
        let (ttl, fence) = (self.ttl, self.fence);
        let (permits, tokens) = (&self.permits, &self.tokens);
        let rounds = (0..permits.len()).filter(|&i| !tried[i]).map(|i| {
            let (permit, token) = (&permits[i], &tokens[i]);
            async move {
                let outcome = redlock
                    .acquire_once(permit, ttl, token, fence, waiting)
                    .await;
                (i, outcome)
            }
        });
        let outcomes = futures::future::join_all(rounds).await;
        let mut won: Option<(usize, Grant)> = None;
        let mut extra = Vec::new();
        for (i, outcome) in outcomes {
            match outcome {
                Acquire::Granted(grant) if won.is_none() => won = Some((i, grant)),
                Acquire::Granted(_) => extra.push(i),
                Acquire::NoQuorum(message) => no_quorum = Some(message),
                Acquire::Taken { .. } => {}
            }
        }
        // One permit per request: the others won go back at once (and
        // their releases wake whoever waits for them).
        let releases = extra
            .iter()
            .map(|&i| redlock.release(&permits[i], &tokens[i]));
        futures::future::join_all(releases).await;
        match (won, no_quorum) {
            (Some((i, grant)), _) => {
                self.won = u32::try_from(i).ok();
                self.room = !extra.is_empty();
                Acquire::Granted(grant)
            }
            (None, Some(message)) => Acquire::NoQuorum(message),
            (None, None) => Acquire::Taken { free_in: None },
        }
    }
}

impl<M: Store> Take<M> for PermitContest {
    type Won = Permit;

    fn refused(&mut self) -> LockError {
        match self.mismatch.take() {
            Some(theirs) => LockError::LimitMismatch {
                semaphore: self.name.clone(),
                theirs,
                ours: self.limit,
            },
            None => LockError::Full {
                semaphore: self.name.clone(),
                limit: self.limit,
            },
        }
    }

    /// Records the grant of the permit won, with the semaphore's limit,
    /// and writes the limit on every master (see the module's doc).
    async fn won(&mut self, locks: &Locks<M>, grant: Grant, holder: Option<Holder>) -> Permit {
        // A granted round names its permit.
        let index = self.won.unwrap_or_default();
        let resource = &self.permits[index as usize];
        locks.grants.granted(resource, &grant, holder);
        locks
            .grants
            .set_limit(resource.as_str(), grant.token.as_str(), self.limit);
        locks.note_limit(self.name.as_str(), self.limit, grant.ttl);
        Permit { index, grant }
    }
}

/// The limit asked for, refused outside 1 to [`MAX_PERMITS`].
fn check_limit(limit: u32) -> Result<u32, LockError> {
    if limit == 0 || limit > MAX_PERMITS {
        return Err(LockError::Invalid(format!(
            "limit must be 1 to {MAX_PERMITS}: {limit}"
        )));
    }
    Ok(limit)
}

/// A permit number from a client, refused at or above [`MAX_PERMITS`].
pub fn permit_resource(name: &Resource, permit: u32) -> Result<Resource, LockError> {
    if permit >= MAX_PERMITS {
        return Err(LockError::Invalid(format!(
            "permit must be below {MAX_PERMITS}: {permit}"
        )));
    }
    Ok(Resource::permit(name, permit))
}

impl<M: Store> Locks<M> {
    /// The permit of the semaphore `name` that `token` was made for: a
    /// token's check value proves the key it was made for (see
    /// [`token::stored_at`]), so a permit is released or extended by its
    /// token alone, by any agent.
    ///
    /// # Errors
    /// [`LockError::Invalid`] when `token` was made for none of its permits.
    pub fn permit_of(&self, name: &Resource, token: &Token) -> Result<Resource, LockError> {
        let redlock = self.engine();
        (0..MAX_PERMITS)
            .map(|i| Resource::permit(name, i))
            .find(|permit| {
                token::stored_at(&redlock.key(permit), token.as_str()) == token::Stored::Token
            })
            .ok_or_else(|| {
                LockError::Invalid(format!(
                    "token: not the token of a permit of semaphore {name:?}"
                ))
            })
    }

    /// One permit of the semaphore `name` of `limit` permits, waiting in
    /// line up to `wait_ms`, recorded as a grant of its permit's resource.
    ///
    /// # Errors
    /// As [`Locks::acquire`], and [`LockError::LimitMismatch`] when the
    /// semaphore's permits are held with another limit.
    pub async fn acquire_permit(
        &self,
        name: &Resource,
        limit: u32,
        ask: Ask,
    ) -> Result<Permit, LockError> {
        self.take(&ask, Kind::Permit, |locks, terms| {
            let contest = PermitContest::new(
                &locks.engine,
                name,
                check_limit(limit)?,
                terms.ttl,
                ask.lock.owner.as_deref(),
                terms.fence,
            );
            Ok(contest.guess(|permit| locks.grants.current(permit.as_str()).is_some()))
        })
        .await
    }

    /// Writes the semaphore's limit on every master, to last `ttl` at
    /// least (see the module's doc), queued before the grant is answered
    /// and not waited for. Best effort: a master that does not take it
    /// only lets a request with another limit through there.
    pub(crate) fn note_limit(&self, name: &str, limit: u32, ttl: Duration) {
        let key = redlock_wire::keys::semaphore_limit_key(&self.engine.settings().key_prefix, name);
        let value = limit.to_string();
        for node in self.engine.nodes() {
            node.note_queued(&key, &value, ttl);
        }
    }

    /// Keeps the semaphore's limit note on every master at least `ttl`
    /// after an extension of one of its permits, in the background: the
    /// limit's value when this agent granted the permit, else the note's
    /// TTL alone (see the module's doc).
    pub(crate) fn keep_limit(&self, name: &str, limit: Option<u32>, ttl: Duration) {
        let nodes = self.engine.nodes().to_vec();
        let key = redlock_wire::keys::semaphore_limit_key(&self.engine.settings().key_prefix, name);
        tokio::spawn(async move {
            let value = limit.map(|l| l.to_string());
            round::note_everywhere(&nodes, &key, value.as_deref(), ttl).await;
        });
    }

    /// A permit tied to the client's connection, as [`Locks::hold`]; its
    /// first event names the permit.
    ///
    /// # Errors
    /// As [`Locks::acquire_permit`], and `max_hold_ms` out of range.
    pub async fn hold_permit(
        self: &Arc<Self>,
        name: &Resource,
        limit: u32,
        ask: Ask,
        max_hold_ms: Option<u64>,
        on_disconnect: OnDisconnect,
    ) -> Result<HeldPermit, LockError> {
        let max_hold = self.rules.max_hold(max_hold_ms)?;
        let permit = self.acquire_permit(name, limit, ask).await?;
        let resource = Resource::permit(name, permit.index);
        let (token, fence) = (permit.grant.token.clone(), permit.grant.fence);
        let (events, _task) = self
            .start_hold(
                resource.clone(),
                permit.grant,
                max_hold,
                on_disconnect,
                Some(permit.index),
                super::holds::Held::Lock,
            )
            .await?;
        Ok(HeldPermit {
            events,
            index: permit.index,
            resource,
            token,
            fence,
        })
    }

    /// `GET /v1/semaphores/{name}`: the permits a quorum of masters hold,
    /// and the limit they were granted with. An operator read: it takes a
    /// turn among the listings' (see [`listing::Listings`]).
    ///
    /// # Errors
    /// [`ReadError::Busy`] when other operator reads hold every turn,
    /// [`ReadError::TooFewRead`] when fewer than a quorum of masters
    /// answered.
    pub async fn semaphore(&self, name: &Resource) -> Result<SemaphoreResponse, ReadError> {
        let _turn = self.listings.turn().await?;
        let redlock = &self.engine;
        let limit_key =
            redlock_wire::keys::semaphore_limit_key(&redlock.settings().key_prefix, name.as_str());
        let keys: Vec<String> = std::iter::once(limit_key)
            .chain((0..MAX_PERMITS).map(|i| redlock.key(&Resource::permit(name, i))))
            .collect();
        let nodes = redlock.nodes();
        let reads = futures::future::join_all(nodes.iter().map(|n| n.list_keys(&keys))).await;
        let read: Vec<bool> = reads.iter().map(Result::is_ok).collect();
        let unread = listing::check_read(self, &read)?;
        let states: Vec<Option<Vec<KeyState>>> = reads.into_iter().map(Result::ok).collect();
        let mut limits: HashMap<&str, usize> = HashMap::new();
        for node in states.iter().flatten() {
            if let Some(value) = node
                .first()
                .filter(|s| s.pttl != -2)
                .and_then(|s| s.value.as_deref())
            {
                *limits.entry(value).or_default() += 1;
            }
        }
        let limit = limits
            .iter()
            .max_by_key(|&(v, c)| (*c, *v))
            .and_then(|(v, _)| v.parse::<u32>().ok());
        let now = Instant::now();
        let mut permits = Vec::new();
        for index in 0..MAX_PERMITS {
            let slot = usize::try_from(index).unwrap_or(usize::MAX) + 1;
            let per_node: Vec<Option<Option<&KeyState>>> = states
                .iter()
                .map(|node| {
                    node.as_ref()
                        .map(|n| n.get(slot).filter(|s| s.pttl != -2 && s.value.is_some()))
                })
                .collect();
            if per_node.iter().all(|s| !matches!(s, Some(Some(_)))) {
                continue;
            }
            let resource = Resource::permit(name, index);
            let info = listing::lock_info(self, resource.as_str(), &per_node, now);
            let Some(validity_ms) = info.validity_ms.filter(|_| info.quorum_agrees) else {
                continue;
            };
            permits.push(PermitInfo {
                permit: index,
                agent: info.agent,
                owner: info.owner,
                validity_ms,
                held_here: info.held_here,
                pid: info.pid,
                uid: info.uid,
            });
        }
        Ok(SemaphoreResponse {
            semaphore: name.to_string(),
            limit: if permits.is_empty() { None } else { limit },
            permits,
            waiters: self.waiters.count(Resource::permit(name, 0).queue()),
            partial: !unread.is_empty(),
            unread,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::tests::{ask, resource, service};
    use crate::lock::Released;

    /// On masters in memory: `limit` permits and no more, each its own
    /// lock with its own token and fence; a permit released by its token
    /// alone is the next one granted; another limit while permits are held
    /// is refused, and so is a token of no permit of the semaphore.
    #[tokio::test]
    async fn limit_permits_at_once_each_a_lock_of_its_own() {
        let (masters, locks) = service();
        let pay = resource("pay");
        let mut fenced = ask(0, "worker");
        fenced.lock.fence = true;
        let first = locks.acquire_permit(&pay, 2, fenced.clone()).await.unwrap();
        let second = locks.acquire_permit(&pay, 2, fenced.clone()).await.unwrap();
        let mut numbers = [first.index, second.index];
        numbers.sort_unstable();
        assert_eq!(numbers, [0, 1]);
        assert_ne!(first.grant.token, second.grant.token);
        assert!(second.grant.fence > first.grant.fence);
        for permit in [&first, &second] {
            let key = locks.engine().key(&Resource::permit(&pay, permit.index));
            let holding = masters
                .iter()
                .filter(|m| m.holds(&key).as_deref() == Some(permit.grant.token.as_str()))
                .count();
            assert!(
                holding >= 2,
                "permit {} held on {holding} of 3",
                permit.index
            );
        }
        let full = locks.acquire_permit(&pay, 2, fenced.clone()).await;
        assert!(
            matches!(full, Err(LockError::Full { limit: 2, .. })),
            "{full:?}"
        );
        let other = locks.acquire_permit(&pay, 3, fenced.clone()).await;
        assert!(
            matches!(other, Err(LockError::LimitMismatch { ours: 3, .. })),
            "{other:?}"
        );

        let freed = locks.permit_of(&pay, &first.grant.token).unwrap();
        assert_eq!(freed, Resource::permit(&pay, first.index));
        assert!(locks
            .permit_of(&resource("other"), &first.grant.token)
            .is_err());
        assert_eq!(
            locks
                .release(&freed, &first.grant.token, None)
                .await
                .unwrap(),
            Released::Released
        );
        let next = locks.acquire_permit(&pay, 2, fenced).await.unwrap();
        assert_eq!(next.index, first.index, "the permit just freed");
        assert!(next.grant.fence > second.grant.fence);
    }

    #[test]
    fn limits_and_permit_numbers_out_of_range_are_refused() {
        assert!(check_limit(0).is_err());
        assert!(check_limit(MAX_PERMITS + 1).is_err());
        assert_eq!(check_limit(MAX_PERMITS).unwrap(), MAX_PERMITS);
        let pay = Resource::new("pay").unwrap();
        assert!(permit_resource(&pay, MAX_PERMITS).is_err());
        assert_eq!(permit_resource(&pay, 1).unwrap(), Resource::permit(&pay, 1));
    }
}

#[cfg(test)]
mod handoffs;
