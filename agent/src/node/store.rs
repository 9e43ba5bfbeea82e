//! The lock service's port on a master besides the lock commands
//! ([`Store`]): an operator's force release and announcements, on the
//! lock connection; and the listings' reads, on their reader connection
//! (see [`super::scan`]).

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
}
