//! What a waiter competes for in each round: one lock, several at once,
//! or any permit of a semaphore (`crate::lock::semaphores`).

use std::time::Duration;

use crate::redlock::{Acquire, Grant, Master, Redlock, Resource, Token};

/// What a waiter competes for in each of its rounds: one lock
/// ([`LockContest`]), several at once ([`MultiContest`]), or any permit of
/// a semaphore (`crate::lock::semaphores::PermitContest`).
pub trait Contest<M: Master>: Send {
    /// The queue it waits in: the lock's resource, or the semaphore's
    /// (see [`Resource::queue`]); its releases wake that queue.
    fn queue(&self) -> &str;

    /// Every queue it waits in, [`Contest::queue`] first: a lock on
    /// several resources waits in each of theirs.
    fn queues(&self) -> impl Iterator<Item = &str> + Send {
        std::iter::once(self.queue())
    }

    /// One round of votes. `waiting`: the caller will wait if it fails,
    /// so the votes ask the holder's release to announce itself.
    fn round(
        &mut self,
        redlock: &Redlock<M>,
        waiting: bool,
    ) -> impl std::future::Future<Output = Acquire> + Send;

    /// Whether waiting cannot help (a semaphore asked with another limit
    /// than its permits'): the last round's answer stands.
    fn settled(&self) -> bool {
        false
    }
}

/// One lock: every round of one request uses the same token (see
/// [`Redlock::acquire_once`]), bound to the resource's lock key.
pub struct LockContest<'a> {
    resource: &'a Resource,
    ttl: Duration,
    token: Token,
    fence: bool,
}

impl<'a> LockContest<'a> {
    pub fn new<M: Master>(
        redlock: &Redlock<M>,
        resource: &'a Resource,
        ttl: Duration,
        owner: Option<&str>,
        fence: bool,
    ) -> LockContest<'a> {
        let token = Token::generate(
            &redlock.key(resource),
            redlock.settings().agent_name.as_deref(),
            owner,
        );
        LockContest {
            resource,
            ttl,
            token,
            fence,
        }
    }
}

impl<M: Master> Contest<M> for LockContest<'_> {
    fn queue(&self) -> &str {
        self.resource.queue()
    }

    async fn round(&mut self, redlock: &Redlock<M>, waiting: bool) -> Acquire {
        redlock
            .acquire_once(self.resource, self.ttl, &self.token, self.fence, waiting)
            .await
    }
}

/// Several locks at once, all or nothing (see [`crate::redlock::multi`]):
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

    /// The client's token.
    pub fn token(&self) -> &Token {
        &self.token
    }

    /// The grants of the round that won, one per resource in order (empty
    /// before).
    pub fn take_grants(&mut self) -> Vec<Grant> {
        std::mem::take(&mut self.grants)
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
