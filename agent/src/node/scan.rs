//! The operators' and the scanner's reads: `SCAN` and reads of many keys
//! at once, on reader connections apart from the lock path (the
//! listings' own, see [`Node::open_reader`], and the scanner's, kept
//! here). A cluster is scanned shard by shard (see
//! [`super::cluster::scan`]). The scanner's fenced writes are in
//! [`super::leak`]; the lock service's other writes in [`super::store`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{scripts, Conn, Node};
use crate::redlock::master::{KeyState, NodeError};
use crate::redlock::observe::Op;

/// Response timeout on the leak scanner's connection: a `SCAN` and the
/// `READ_KEYS` of its page may take a few milliseconds more than a vote
/// under load, and nothing waits on them but the scanner.
const SCAN_TIMEOUT: Duration = Duration::from_secs(2);

/// Response timeout of one operator read (a listing or a lock lookup).
/// Longer than a lock vote's `node_timeout`: a `SCAN` of a thousand keys or
/// a page's `READ_KEYS` may take a few milliseconds more under load, and an
/// operator waits, not a lock.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the listings' connection stays open after its last read.
const READER_LINGER: Duration = Duration::from_secs(30);

impl Node {
    /// One `SCAN cursor MATCH pattern COUNT count`, then the value and
    /// PTTL of every key it returned, in one script call; on the scanner's
    /// own connection, so its replies never queue ahead of lock commands.
    ///
    /// ## Behavior
    /// - The connection is opened on first use, and dropped after any error
    ///   (the next scan opens a fresh one).
    /// - Health does not watch it: its errors are the scan's, never change
    ///   the node's state. A node that is `down` is not scanned.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn scan_keys(
        &self,
        cursor: u64,
        pattern: &str,
        count: u64,
    ) -> Result<(u64, Vec<KeyState>), NodeError> {
        let conn = self.scan_connection().await?;
        let result = async {
            let (next, keys) = self.scan_names(&conn, cursor, pattern, count).await?;
            let states = self.read_keys(&conn, &keys).await?;
            Ok((next, states))
        }
        .await;
        if result.is_err() {
            *self.scan_conn.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        result
    }

    /// The scanner's connection, opened if there is none.
    async fn scan_connection(&self) -> Result<Conn, NodeError> {
        self.reader(&self.scan_conn, SCAN_TIMEOUT, "scanner").await
    }

    /// The reader connection kept in `slot`, opened if there is none and
    /// named after its `purpose`.
    async fn reader(
        &self,
        slot: &Mutex<Option<Conn>>,
        timeout: Duration,
        purpose: &str,
    ) -> Result<Conn, NodeError> {
        // Poisoning needs a panic while held; clone and replace cannot panic.
        if let Some(conn) = slot.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return Ok(conn);
        }
        let conn = self.open_reader(timeout, purpose).await?;
        *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(conn.clone());
        Ok(conn)
    }

    /// Closes the listings' reader connection once no listing used it for
    /// [`READER_LINGER`]: an agent nobody lists keeps one connection per
    /// master. Called by the health task after each probe.
    pub(crate) fn close_idle_reader(&self) {
        let used = *self.list_used.lock().unwrap_or_else(|p| p.into_inner());
        if used.elapsed() >= READER_LINGER {
            let closed = self
                .list_conn
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            if closed.is_some() {
                tracing::debug!(node = self.name(), "listings connection closed: unused");
            }
        }
    }

    /// Runs one operator read on the listings' reader connection (opened
    /// on first use, dropped after any error so the next read opens a
    /// fresh one). Its timeouts are [`READ_TIMEOUT`]: the redis error does
    /// not say.
    pub(super) async fn operator_read<T, F, Fut>(&self, read: F) -> Result<T, NodeError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: std::future::Future<Output = Result<T, NodeError>>,
    {
        *self.list_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        let conn = self.reader(&self.list_conn, READ_TIMEOUT, "listings").await;
        let result = match conn {
            Ok(conn) => read(conn).await,
            Err(e) => Err(e),
        };
        if result.is_err() {
            *self.list_conn.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        result.map_err(|e| match e {
            NodeError::Timeout(_) => NodeError::Timeout(READ_TIMEOUT),
            other => other,
        })
    }

    /// One page of a scan over every shard of a cluster, one shard after
    /// the other (the cursor names the shard; see
    /// [`super::cluster::shard_cursor`]). A cluster whose shards are not
    /// known yet is an error, never an empty keyspace.
    async fn scan_cluster(
        &self,
        conn: &Conn,
        cursor: u64,
        pattern: &str,
        count: u64,
    ) -> Result<(u64, Vec<String>), NodeError> {
        let (index, shard_cursor) = super::cluster::split_cursor(cursor);
        let shards = self.shard_addresses().len();
        let Some(answer) = self
            .scan_shard(conn, index, shard_cursor, pattern, count)
            .await
        else {
            return Err(NodeError::Other(format!(
                "the cluster's shard {index} of {shards} is not known (its topology changed during the scan)"
            )));
        };
        let (next, keys) = answer?;
        let next = match next {
            0 if index + 1 < shards => super::cluster::shard_cursor(index + 1, 0),
            0 => 0,
            next => super::cluster::shard_cursor(index, next),
        };
        Ok((next, keys))
    }

    /// Opens a connection of its own for operator reads (listings, lock
    /// lookups), whose response timeout is `timeout`.
    ///
    /// ## Behavior
    /// - Large `SCAN` replies on it never queue ahead of votes and probes,
    ///   which keep the node's shared connection.
    /// - Health does not watch it: failing to open it or a timeout on it
    ///   never changes the node's state. A node without its shared
    ///   connection (`down`) is not tried at all.
    ///
    /// # Errors
    /// When the node is down, or the master cannot be reached in time.
    pub async fn open_reader(&self, timeout: Duration, purpose: &str) -> Result<Conn, NodeError> {
        if self.connection().is_none() {
            return Err(NodeError::NotConnected);
        }
        self.connect(timeout, &[&*scripts::READ_KEYS], purpose)
            .await
    }

    /// Runs one operator read on a reader connection (see
    /// [`Node::open_reader`]); a slow answer comes back as an error, never
    /// as "no keys".
    async fn read_request<T, F, Fut>(&self, conn: &Conn, op: F) -> Result<T, NodeError>
    where
        F: FnOnce(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let started = Instant::now();
        let result = op(conn.clone()).await;
        self.observer.request(Op::Scan, started.elapsed());
        result.map_err(|e| self.classify(&e))
    }

    /// One `SCAN cursor MATCH pattern COUNT count`: the next cursor and the
    /// key names, nothing else (the operator listing reads values only for
    /// the page it answers).
    ///
    /// # Errors
    /// When the master does not answer in time on `conn`, or fails.
    pub async fn scan_names(
        &self,
        conn: &Conn,
        cursor: u64,
        pattern: &str,
        count: u64,
    ) -> Result<(u64, Vec<String>), NodeError> {
        if self.is_cluster() {
            return self.scan_cluster(conn, cursor, pattern, count).await;
        }
        self.read_request(conn, |mut conn| async move {
            scan_cmd(cursor, pattern, count)
                .query_async(&mut conn)
                .await
        })
        .await
    }

    /// `keys` as one read call takes them: on a cluster, one group per
    /// slot (read all at once); on a single server, all in one.
    fn read_groups<'k>(&self, keys: &'k [String]) -> Vec<Vec<&'k String>> {
        if self.is_cluster() {
            super::cluster::by_slot(keys, |key| key.as_str())
                .into_iter()
                .map(|(_, group)| group)
                .collect()
        } else {
            vec![keys.iter().collect()]
        }
    }

    /// The value and PTTL of every key in `keys`, in one script call (one
    /// round trip). Keys that are gone answer `pttl: -2`.
    ///
    /// # Errors
    /// When the master does not answer in time on `conn`, or fails.
    pub async fn read_keys(
        &self,
        conn: &Conn,
        keys: &[String],
    ) -> Result<Vec<KeyState>, NodeError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let groups = self.read_groups(keys);
        let reads = futures::future::join_all(groups.iter().map(|group| async move {
            let reply: Vec<redis::Value> = self
                .read_request(conn, |mut conn| async move {
                    let mut invocation = scripts::READ_KEYS.prepare_invoke();
                    for key in group {
                        invocation.key(*key);
                    }
                    invocation.invoke_async(&mut conn).await
                })
                .await?;
            Ok::<_, NodeError>(key_states(group.iter().map(|k| (*k).clone()), &reply))
        }))
        .await;
        if let [read] = &reads[..] {
            return read.clone();
        }
        let mut states: HashMap<String, KeyState> = HashMap::with_capacity(keys.len());
        for read in reads {
            for state in read? {
                states.insert(state.key.clone(), state);
            }
        }
        // In the order asked.
        Ok(keys.iter().filter_map(|k| states.remove(k)).collect())
    }
}

/// Pairs key names with `READ_KEYS`'s flat `value, pttl, readers, value,
/// …` reply; a key without its triple reads as gone.
pub(super) fn key_states(
    keys: impl Iterator<Item = String>,
    reply: &[redis::Value],
) -> Vec<KeyState> {
    let mut pairs = reply.chunks(3);
    keys.map(|key| {
        let pair = pairs.next().unwrap_or(&[]);
        KeyState {
            key,
            value: match pair.first() {
                Some(redis::Value::BulkString(bytes)) => {
                    Some(String::from_utf8_lossy(bytes).into_owned())
                }
                _ => None,
            },
            pttl: match pair.get(1) {
                Some(redis::Value::Int(n)) => *n,
                _ => -2,
            },
            readers: match pair.get(2) {
                Some(redis::Value::Array(tokens)) => tokens
                    .iter()
                    .filter_map(|t| match t {
                        redis::Value::BulkString(bytes) => {
                            Some(String::from_utf8_lossy(bytes).into_owned())
                        }
                        _ => None,
                    })
                    .collect(),
                _ => Vec::new(),
            },
        }
    })
    .collect()
}

/// `SCAN cursor MATCH pattern COUNT count`, on a single server or, on a
/// cluster, one shard (see [`super::cluster::scan`]).
pub(super) fn scan_cmd(cursor: u64, pattern: &str, count: u64) -> redis::Cmd {
    let mut cmd = redis::cmd("SCAN");
    cmd.arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(count);
    cmd
}
