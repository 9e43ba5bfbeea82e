//! One round of Redlock for several resources at once: a grant of all of
//! them with one validity and one fence, or of none.
//!
//! ## Why two grants never share a resource
//! A round votes on each resource's key exactly as a lock's round does
//! ([`Redlock::acquire_once`]): `SET NX PX` on every usable master, under
//! the same marker, eviction and process checks, counted only within the
//! validity left after the slowest resource's quorum. The grant stands
//! only if *every* resource got a quorum of yes votes in that round; each
//! resource's quorum then holds that resource's key with this grant's
//! value, so for each resource the grant is a lock's grant, and the lock's
//! argument (docs/safety.md) applies resource by resource: two grants that
//! share a resource each hold its key on a quorum of the same N masters,
//! so they meet on a master that gave its key to both while it was held.
//! The validity is the one both arguments need: the TTL less the whole
//! round (every resource's votes, and the fence's raises) and the drift.
//!
//! ## All or nothing
//! A round in which any resource falls short is released on every master,
//! for every resource, stragglers included, before it answers: no key of a
//! failed round stays behind (one that a master wrote after its release
//! expires with the TTL, as a lock's does). A waiter tries again only with
//! nothing held, so two requests for overlapping sets never hold one part
//! each while waiting for the other's: no deadlock, whatever order they
//! name them in.
//!
//! ## One fence
//! The fence is one above the highest counter any yes vote of any
//! resource read, and at least the floor; it is raised on each resource's
//! quorum while that resource's key holds this grant's value, as a lock's
//! is. A later grant of any of the resources reads a counter at least as
//! high on its quorum (it meets each of ours), so its fence is larger.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;

use super::grant::{Grant, Holding};
use super::master::Master;
use super::observe::Failure;
use super::{fence, highest, trail, Acquire, Attempt, Redlock, Resource, Token};

/// One resource's yes votes (with the counter each read) and the masters
/// holding its key.
type Voted<M> = (Vec<(Arc<M>, u64)>, Arc<Holding>);

impl<M: Master> Redlock<M> {
    /// One round for every resource of `resources` at once, `values[i]`
    /// the value stored at `resources[i]`'s key (see
    /// [`Token::for_key`]): a grant of each, all with one validity and one
    /// fence, or `Err` with the round's outcome after every key it took was
    /// released. The arguments are as in [`Redlock::acquire_once`].
    pub async fn acquire_many(
        &self,
        resources: &[Resource],
        ttl: Duration,
        values: &[Token],
        fence: bool,
        waiting: bool,
    ) -> Result<Vec<Grant>, Acquire> {
        debug_assert_eq!(resources.len(), values.len());
        let _turn = self.rounds.acquire().await;
        let usable = self.fresh_usable().await;
        if usable.len() < self.quorum {
            return Err(Acquire::NoQuorum(self.describe_unusable()));
        }
        let keys: Vec<String> = resources.iter().map(|r| self.key(r)).collect();
        trail::note(|seen| {
            seen.rounds += 1;
            seen.votes.clear();
        });
        let started = tokio::time::Instant::now();
        let attempts = join_all(
            keys.iter()
                .zip(values)
                .map(|(key, value)| self.attempt(&usable, key, value, ttl, fence, waiting)),
        )
        .await;
        let granted = attempts
            .iter()
            .filter(|a| matches!(a, Attempt::Granted(..)))
            .count();
        let enough = if self.settings.all_or_nothing {
            granted == attempts.len()
        } else {
            granted > 0
        };
        let outcome = if enough {
            match self
                .grant_many(&keys, values, attempts, ttl, fence, started)
                .await
            {
                Ok(grants) => return Ok(grants),
                Err(outcome) => outcome,
            }
        } else if let Some(Attempt::NoQuorum(message)) = attempts
            .into_iter()
            .find(|a| matches!(a, Attempt::NoQuorum(_)))
        {
            Acquire::NoQuorum(message)
        } else {
            Acquire::Taken
        };
        self.release_many(resources, values).await;
        tracing::debug!(resources = resources.len(), elapsed = ?started.elapsed(), ?outcome, "multi-resource round failed");
        Err(outcome)
    }

    /// The grants of a round whose every resource got its quorum: the
    /// fence minted once for all and raised on each resource's quorum,
    /// then one validity from the round's start.
    async fn grant_many(
        &self,
        keys: &[String],
        values: &[Token],
        attempts: Vec<Attempt<M>>,
        ttl: Duration,
        fence: bool,
        started: tokio::time::Instant,
    ) -> Result<Vec<Grant>, Acquire> {
        // Under the control switch, a resource without a quorum is "held"
        // with no master confirmed: the overlap the checker must find.
        let granting: Vec<Voted<M>> = attempts
            .into_iter()
            .map(|attempt| match attempt {
                Attempt::Granted(granting, holding) => (granting, holding),
                _ => (Vec::new(), Holding::new(&self.nodes)),
            })
            .collect();
        let minted = if fence {
            let top = granting.iter().map(|(g, _)| highest(g)).max().unwrap_or(0);
            let minted = fence::next(top, self.floor());
            let raises = join_all(
                keys.iter()
                    .zip(values)
                    .zip(&granting)
                    .filter(|(_, (g, _))| !g.is_empty())
                    .map(|((key, value), (g, _))| self.raise(key, value, g, minted)),
            )
            .await;
            if let Some(message) = raises.into_iter().find_map(Result::err) {
                self.observer.failure(Failure::FenceFailed);
                return Err(Acquire::NoQuorum(message));
            }
            Some(minted)
        } else {
            None
        };
        let Some(validity) = self.settings.drift.validity(ttl, started.elapsed()) else {
            self.observer.failure(Failure::ValidityExhausted);
            return Err(Acquire::Taken);
        };
        self.observer
            .validity_at_grant(validity.as_secs_f64() / ttl.as_secs_f64());
        let granted_at = tokio::time::Instant::now().into_std();
        Ok(values
            .iter()
            .zip(granting)
            .map(|(value, (_, holding))| Grant {
                token: value.clone(),
                ttl,
                validity,
                granted_at,
                fence: minted,
                holding,
            })
            .collect())
    }

    /// Releases every resource's key on every master at once (see
    /// [`Redlock::release`]); what each came to, in order.
    pub async fn release_many(
        &self,
        resources: &[Resource],
        values: &[Token],
    ) -> Vec<super::Release> {
        join_all(
            resources
                .iter()
                .zip(values)
                .map(|(resource, value)| self.release(resource, value)),
        )
        .await
    }
}
