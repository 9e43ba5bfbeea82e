//! The lock service's port on a master besides the lock commands
//! ([`Store`]): an operator's force release, the bookkeeping notes (a
//! semaphore's limit, a leader's note) and announcements, on the lock
//! connection; and the listings' reads, on their reader connection (see
//! [`super::scan`]).

use std::time::Duration;

use tokio::sync::watch;

use super::{scripts, Node};
use crate::redlock::master::{KeyState, NodeError, Store};
use crate::redlock::observe::Op;

impl Node {
    /// An operator's force release of `key` on this master (see
    /// [`scripts::FORCE_DELETE`]): deleted whoever holds it.
    /// `Ok(Some(value))` when a key was deleted ("" for a key of another
    /// type).
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn force_delete(&self, key: &str) -> Result<Option<String>, NodeError> {
        self.request(Op::Release, |mut conn| async move {
            scripts::FORCE_DELETE
                .key(key)
                .invoke_async::<Option<String>>(&mut conn)
                .await
        })
        .await
    }

    /// A bookkeeping note (see [`scripts::NOTE`]).
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn note(&self, key: &str, value: &str, ttl: Duration) -> Result<(), NodeError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        self.request(Op::Release, |mut conn| async move {
            scripts::NOTE
                .key(key)
                .arg(value)
                .arg(ttl_ms)
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|_| ())
    }

    /// A bookkeeping note kept at least `ttl` (see [`scripts::KEEP_NOTE`]).
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn keep_note(&self, key: &str, ttl: Duration) -> Result<(), NodeError> {
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        self.request(Op::Release, |mut conn| async move {
            scripts::KEEP_NOTE
                .key(key)
                .arg(ttl_ms)
                .invoke_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|_| ())
    }

    /// `PUBLISH channel message`: on a cluster, it reaches every node.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or
    /// refuses (an ACL without the channel).
    pub async fn announce(&self, channel: &str, message: &str) -> Result<(), NodeError> {
        self.request(Op::Release, |mut conn| async move {
            redis::cmd("PUBLISH")
                .arg(channel)
                .arg(message)
                .query_async::<i64>(&mut conn)
                .await
        })
        .await
        .map(|_| ())
    }
}

/// Operators' reads go on the listings' reader connection, apart from the
/// lock path; force deletes and announcements on the shared connection.
impl Store for Node {
    fn loss_events(&self) -> watch::Receiver<u64> {
        Node::loss_events(self)
    }

    async fn force_delete(&self, key: &str) -> Result<Option<String>, NodeError> {
        Node::force_delete(self, key).await
    }

    async fn note(&self, key: &str, value: &str, ttl: Duration) -> Result<(), NodeError> {
        Node::note(self, key, value, ttl).await
    }

    async fn keep_note(&self, key: &str, ttl: Duration) -> Result<(), NodeError> {
        Node::keep_note(self, key, ttl).await
    }

    async fn announce(&self, channel: &str, message: &str) -> Result<(), NodeError> {
        Node::announce(self, channel, message).await
    }

    async fn list_names(
        &self,
        cursor: u64,
        pattern: &str,
        count: u64,
    ) -> Result<(u64, Vec<String>), NodeError> {
        self.operator_read(
            |conn| async move { self.scan_names(&conn, cursor, pattern, count).await },
        )
        .await
    }

    async fn list_keys(&self, keys: &[String]) -> Result<Vec<KeyState>, NodeError> {
        self.operator_read(|conn| async move { self.read_keys(&conn, keys).await })
            .await
    }

    async fn list_values(&self, keys: &[String]) -> Result<Vec<Option<String>>, NodeError> {
        self.operator_read(|conn| async move { self.read_values(&conn, keys).await })
            .await
    }
}
