//! The lock commands: the vote, round 2 of a fenced grant, extend and
//! release, each one script on the lock connection, bounded by the node
//! timeout; and [`Master`], the engine's view of this master.

use std::time::Duration;

use redlock_wire::NodeState;

use super::{scripts, ttl_ms, Node};
use crate::redlock::master::{Extension, Master, NodeError, Vote};
use crate::redlock::observe::{Op, VoteLabel};

impl Node {
    /// The vote: `SET key value NX PX ttl` inside the script that checks the
    /// incarnation marker (see [`scripts::ACQUIRE`]), reading the fencing
    /// counter in the same script when `read_counter`; a plain `SET` only
    /// under the test switch without fencing. With `GET` where the master
    /// has it, so a key of another type answers WRONGTYPE instead of looking
    /// taken.
    pub async fn set_nx(&self, key: &str, value: &str, ttl: Duration, read_counter: bool) -> Vote {
        let set_get = self.lock().set_get;
        if self.marker_check || read_counter {
            let (marker, fence_key) = (self.marker_key.as_str(), self.fence_key.as_str());
            let check = if self.marker_check { "1" } else { "0" };
            let result = self
                .request(Op::Acquire, |mut conn| async move {
                    scripts::ACQUIRE
                        .key(key)
                        .key(marker)
                        .key(fence_key)
                        .arg(value)
                        .arg(ttl_ms(ttl))
                        .arg(if set_get { "1" } else { "0" })
                        .arg(check)
                        .arg(if read_counter { "1" } else { "0" })
                        .invoke_async::<redis::Value>(&mut conn)
                        .await
                })
                .await;
            let answer = result.and_then(|reply| {
                acquire_reply(&reply).ok_or_else(|| {
                    self.record_error(NodeError::Other(format!(
                        "unexpected answer to the vote: {reply:?}"
                    )))
                })
            });
            return match answer {
                Ok((1, counter)) => Vote::Granted { counter },
                Ok((-1, _)) => {
                    self.lost_state();
                    Vote::LostState
                }
                Ok(_) => Vote::Taken,
                Err(e) => Vote::Failed(e),
            };
        }
        let result = self
            .request(Op::Acquire, |mut conn| async move {
                let mut cmd = redis::cmd("SET");
                cmd.arg(key).arg(value).arg("NX");
                if set_get {
                    cmd.arg("GET");
                }
                cmd.arg("PX").arg(ttl_ms(ttl));
                cmd.query_async::<redis::Value>(&mut conn).await
            })
            .await;
        match (set_get, result) {
            // With GET: nil = it was free and is ours; a value = taken.
            (true, Ok(redis::Value::Nil)) => Vote::Granted { counter: 0 },
            (true, Ok(_)) => Vote::Taken,
            // Without: OK = ours; nil = taken.
            (false, Ok(redis::Value::Nil)) => Vote::Taken,
            (false, Ok(_)) => Vote::Granted { counter: 0 },
            (_, Err(e)) => Vote::Failed(e),
        }
    }

    /// Round 2 of a fenced grant (see [`scripts::FENCE`]): raises this
    /// master's fencing counter to `fence` while `key` still holds `value`.
    /// `Ok(true)` when raised (or already as high).
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn raise_fence(&self, key: &str, value: &str, fence: u64) -> Result<bool, NodeError> {
        let fence_key = self.fence_key.as_str();
        self.request(Op::Fence, |mut conn| async move {
            scripts::FENCE
                .key(key)
                .key(fence_key)
                .arg(value)
                .arg(fence.to_string())
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|n| n == 1)
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

    /// Compare-and-delete. `Ok(true)` when this master held the token.
    pub async fn release(&self, key: &str, value: &str, channel: &str) -> Result<bool, NodeError> {
        self.request(Op::Release, |mut conn| async move {
            scripts::RELEASE
                .key(key)
                .arg(value)
                .arg(channel)
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|n| n == 1)
    }

    /// Compare-and-pexpire, checking the incarnation marker in the same
    /// script.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn extend(
        &self,
        key: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<Extension, NodeError> {
        let marker = self.marker_key.as_str();
        let check = if self.marker_check { "1" } else { "0" };
        let reply = self
            .request(Op::Extend, |mut conn| async move {
                scripts::EXTEND
                    .key(key)
                    .key(marker)
                    .arg(value)
                    .arg(ttl_ms(ttl))
                    .arg(check)
                    .invoke_async::<i64>(&mut conn)
                    .await
            })
            .await?;
        Ok(match reply {
            1 => Extension::Extended,
            -1 => {
                self.lost_state();
                Extension::LostState
            }
            _ => Extension::NotHeld,
        })
    }
}

/// Parses `INFO` text into its `key:value` fields.
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

    async fn vote(&self, key: &str, value: &str, ttl: Duration, read_counter: bool) -> Vote {
        self.set_nx(key, value, ttl, read_counter).await
    }

    async fn raise_fence(&self, key: &str, value: &str, fence: u64) -> Result<bool, NodeError> {
        Node::raise_fence(self, key, value, fence).await
    }

    async fn extend(&self, key: &str, value: &str, ttl: Duration) -> Result<Extension, NodeError> {
        Node::extend(self, key, value, ttl).await
    }

    async fn release(&self, key: &str, value: &str, channel: &str) -> Result<bool, NodeError> {
        Node::release(self, key, value, channel).await
    }
}

/// Reads the vote script's answer: a bare status, or `{status, counter}`
/// when the counter was asked for. `None` for anything else.
fn acquire_reply(reply: &redis::Value) -> Option<(i64, u64)> {
    match reply {
        redis::Value::Int(status) => Some((*status, 0)),
        redis::Value::Array(items) => match items.as_slice() {
            [redis::Value::Int(status), redis::Value::BulkString(counter)] => {
                let counter = std::str::from_utf8(counter).ok()?.parse().ok()?;
                Some((*status, counter))
            }
            _ => None,
        },
        _ => None,
    }
}
