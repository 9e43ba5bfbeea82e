//! The lock commands: the vote, round 2 of a fenced grant, extend and
//! release, each one command of this master's next batch ([`super::batch`]),
//! bounded by the node timeout; and [`Master`], the engine's view of this
//! master.

use std::sync::Arc;
use std::time::Duration;

use redlock_wire::NodeState;

use super::batch::{Answer, Command};
#[cfg(doc)]
use super::scripts;
use super::{Detector, Node};
use crate::redlock::master::{Claim, Extension, Master, NodeError, Vote};
use crate::redlock::observe::{Op, VoteLabel};

impl Node {
    /// Round 2 of a fenced grant (see [`scripts::BATCH`], `f`): raises this
    /// master's fencing counter to `fence` while the claim's key still holds
    /// its token. `Ok(true)` when raised (or already as high).
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn raise_fence(&self, claim: &Arc<Claim>, fence: u64) -> Result<bool, NodeError> {
        let answer = self.batched(claim, Command::Fence { fence }).await?;
        Ok(answer.status == 1)
    }

    /// This master's fencing counter (0 when it has none), for the catch-up
    /// of another master's readmission.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or the
    /// counter is not a number.
    pub async fn read_fence(&self) -> Result<u64, NodeError> {
        let fence_key = self.fence_key.as_str();
        let value = self
            .request(Op::Fence, |mut conn| async move {
                redis::cmd("GET")
                    .arg(fence_key)
                    .query_async::<Option<String>>(&mut conn)
                    .await
            })
            .await?;
        match value {
            None => Ok(0),
            Some(text) => text.parse().map_err(|_| {
                self.record_error(NodeError::Other(format!(
                    "the fencing counter {fence_key:?} holds {text:?}, not a number"
                )))
            }),
        }
    }

    /// Compare-and-delete, announced on `channel` when a waiter flagged the
    /// key. `Ok(true)` when this master held the token.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn release(&self, claim: &Arc<Claim>, channel: &Arc<str>) -> Result<bool, NodeError> {
        let command = Command::Release {
            channel: Arc::clone(channel),
        };
        let answer = self.batched(claim, command).await?;
        Ok(answer.status == 1)
    }

    /// Compare-and-pexpire, checking the incarnation marker in the same
    /// script.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn extend(&self, claim: &Arc<Claim>, ttl: Duration) -> Result<Extension, NodeError> {
        let answer = self.batched(claim, Command::Extend { ttl }).await?;
        Ok(match answer.status {
            1 => Extension::Extended,
            -1 => {
                self.lost_state_at(claim.key(), Detector::Marker);
                Extension::LostState
            }
            _ => Extension::NotHeld,
        })
    }
}

impl Node {
    /// A vote or extension of `key` found the marker missing (or, on a
    /// cluster, naming another node), or the master evicted keys since the
    /// marker was written: the whole master is quarantined, or on a cluster
    /// only the key's slot.
    fn lost_state_at(&self, key: &str, detector: Detector) {
        let why = match detector {
            Detector::Eviction => {
                "the node evicted keys since the slot's marker was written (seen in a vote)"
            }
            _ => "marker missing or naming another node in a vote",
        };
        match self.slot_of(key) {
            Some(slot) => self.slot_lost(slot, why),
            None => self.lost_state(detector),
        }
    }
}

/// The Redis master as the engine sees it: each request one of the lock
/// commands above.
impl Master for Node {
    fn name(&self) -> &str {
        &self.name
    }

    fn state(&self) -> NodeState {
        Node::state(self)
    }

    fn server_id(&self) -> Option<u64> {
        Node::server_id(self)
    }

    fn unusable_reason(&self) -> String {
        let snap = self.snapshot();
        match (snap.state, snap.detector, snap.last_error) {
            (NodeState::Quarantined, detector, _) => format!(
                "quarantined for {}ms more (lost keys possible, detected by {})",
                snap.quarantine_remaining.as_millis(),
                detector.map_or("?", |d| d.as_str())
            ),
            (state, _, Some(err)) => format!("{} ({err})", state.as_str()),
            (state, _, None) => state.as_str().to_string(),
        }
    }

    fn count_vote(&self, vote: VoteLabel) {
        self.observer.vote(vote);
    }

    fn losses(&self) -> u64 {
        Node::losses(self)
    }

    /// A single server's loss takes every key; a cluster's, the keys of the
    /// slots it keeps out (a quarantine longer than any TTL, so a slot lost
    /// since `mark` is still out when a hold looks).
    fn lost_since(&self, key: &str, mark: u64) -> bool {
        Node::losses(self) != mark && (!self.is_cluster() || self.slot_out(key))
    }

    /// The vote: `SET key value NX PX ttl` behind the incarnation marker
    /// (see [`scripts::BATCH`]), reading the fencing counter in the same
    /// script when `read_counter`, and setting the key's waiting flag when
    /// it is taken and the voter is `waiting`.
    async fn vote(
        &self,
        claim: &Arc<Claim>,
        ttl: Duration,
        read_counter: bool,
        waiting: bool,
    ) -> Vote {
        let command = Command::Vote {
            ttl,
            read_counter,
            waiting,
        };
        match self.batched(claim, command).await {
            Ok(Answer { status: 1, counter }) => Vote::Granted { counter },
            Ok(Answer { status: -1, .. }) => {
                self.lost_state_at(claim.key(), Detector::Marker);
                Vote::LostState
            }
            Ok(Answer { status: -3, .. }) => {
                self.lost_state_at(claim.key(), Detector::Eviction);
                Vote::LostState
            }
            Ok(_) => Vote::Taken,
            Err(e) => Vote::Failed(e),
        }
    }

    async fn raise_fence(&self, claim: &Arc<Claim>, fence: u64) -> Result<bool, NodeError> {
        Node::raise_fence(self, claim, fence).await
    }

    async fn extend(&self, claim: &Arc<Claim>, ttl: Duration) -> Result<Extension, NodeError> {
        Node::extend(self, claim, ttl).await
    }

    async fn release(&self, claim: &Arc<Claim>, channel: &Arc<str>) -> Result<bool, NodeError> {
        Node::release(self, claim, channel).await
    }
}
