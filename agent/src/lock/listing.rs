//! The lock keys on the masters as operators see them: `GET /v1/locks`
//! (one page of the keys under a prefix, per-master TTLs, the holding
//! agent's name and, for locks held here, the holding process; never a
//! token), and `GET /v1/locks/{resource}` (one lock from every master at
//! once). Read through [`Store`], which keeps these reads apart from the
//! lock path (on Redis, a reader connection per master).
//!
//! Operator answers are never silently wrong: a master that cannot be read
//! (down, timed out, failed) is named in `unread` and the answer says
//! `partial`; with fewer than a quorum read the answer is an error, never a
//! list that looks complete.
//!
//! Cost per listing: `SCAN … COUNT 5000` over every master for the names
//! (one command per 5,000 keys per master), then one `READ_KEYS`
//! call per master for the page's keys. At most [`MAX_LISTINGS`] listings
//! run at once per agent, so operators cannot pile scans onto the masters.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::time::{Duration, Instant};

use redlock_wire::{LockInfo, LockResponse, LocksResponse, Mode, NodeKey, Reader};
use tokio::sync::Semaphore;

use super::Locks;
use crate::redlock::resource::{self, MAX_RESOURCE_LEN};
use crate::redlock::{token, KeyState, NodeError, Resource, Store};

/// Locks listed in one page when the caller does not say.
pub const MAX_LOCKS: usize = 1000;
/// Largest `limit` a caller may ask for.
pub const MAX_LIMIT: usize = 5000;
/// Operator reads (listings, and the reads of a semaphore or an
/// election's leader) that may read the masters at once on one agent.
pub const MAX_LISTINGS: usize = 2;
/// How long an operator read waits for its turn before answering `429 busy`.
pub const LISTING_QUEUE_WAIT: Duration = Duration::from_secs(1);
/// Most matching keys one listing walks on one master; beyond, that master
/// counts as unread (an answer built from part of it would look complete).
pub const MAX_SCAN_KEYS: usize = 1_000_000;
/// `SCAN … COUNT` of a listing.
const SCAN_COUNT: u64 = 5000;
/// Keys per `READ_KEYS` call, so one script never blocks a master long.
const READ_CHUNK: usize = 1000;
/// Longest `cursor` accepted, in characters (Unicode scalar values), as the
/// document's `maxLength` counts them: a resource name is at most 256
/// bytes, but a page may end at any key under the prefix.
const MAX_CURSOR_LEN: usize = 512;
/// Names or locks a listing handles between two turns it gives back to the
/// runtime: its sorting and building of up to a million names never holds
/// a worker thread (and the lock commands waiting on it) for long.
const YIELD_EVERY: usize = 512;

/// Turns for operator reads: at most [`MAX_LISTINGS`] read the masters at
/// once, whatever they read (a listing, a semaphore, a leader), so no
/// number of readers adds load on the masters past that.
#[derive(Debug)]
pub struct Listings {
    permits: Semaphore,
}

impl Listings {
    /// A turn to read the masters, held until dropped.
    ///
    /// # Errors
    /// [`ReadError::Busy`] when none came within [`LISTING_QUEUE_WAIT`].
    pub async fn turn(&self) -> Result<tokio::sync::SemaphorePermit<'_>, ReadError> {
        let turn = tokio::time::timeout(LISTING_QUEUE_WAIT, self.permits.acquire())
            .await
            .map_err(|_| ReadError::Busy)?;
        // Cannot fail: the semaphore is never closed.
        Ok(turn.expect("the listings semaphore stays open"))
    }
}

impl Default for Listings {
    fn default() -> Listings {
        Listings {
            permits: Semaphore::new(MAX_LISTINGS),
        }
    }
}

/// What `GET /v1/locks` asks for, from its query string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Resources that start with this; empty for all.
    pub prefix: String,
    /// List names strictly after this one (the previous page's
    /// `next_cursor`).
    pub cursor: Option<String>,
    pub limit: usize,
}

impl Default for ListQuery {
    fn default() -> ListQuery {
        ListQuery {
            prefix: String::new(),
            cursor: None,
            limit: MAX_LOCKS,
        }
    }
}

/// Why a query string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    #[error("unknown query parameter {0:?}; use prefix, cursor, limit")]
    Unknown(String),
    #[error("{0} is not valid percent-encoded UTF-8")]
    Encoding(&'static str),
    #[error("limit must be a whole number from 1 to {MAX_LIMIT}: {0:?}")]
    Limit(String),
    #[error("cursor is longer than {MAX_CURSOR_LEN} characters")]
    Cursor,
    #[error("prefix has byte {0:#04x} at offset {1}; use visible ASCII without *?[]\\")]
    Prefix(u8, usize),
    /// No resource starts with a prefix longer than a resource may be.
    #[error("prefix is {0} bytes; a resource, and so a prefix, is at most {MAX_RESOURCE_LEN}")]
    PrefixTooLong(usize),
}

impl ListQuery {
    /// Parses `prefix=…&cursor=…&limit=…` (each optional, percent-encoded).
    ///
    /// # Errors
    /// On an unknown or repeated-meaningless parameter, bad encoding, a
    /// limit out of range, or a prefix a resource name could not start with.
    pub fn parse(query: Option<&str>) -> Result<ListQuery, QueryError> {
        let mut parsed = ListQuery::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            // Strict, as a resource in the path: a stray `%` is refused.
            let decode = |what: &'static str| {
                resource::percent_decode(value).map_err(|_| QueryError::Encoding(what))
            };
            match name {
                "prefix" => {
                    let prefix = decode("prefix")?;
                    if let Some((i, b)) = prefix
                        .bytes()
                        .enumerate()
                        .find(|&(_, b)| !b.is_ascii_graphic() || b"*?[]\\".contains(&b))
                    {
                        return Err(QueryError::Prefix(b, i));
                    }
                    if prefix.len() > MAX_RESOURCE_LEN {
                        return Err(QueryError::PrefixTooLong(prefix.len()));
                    }
                    parsed.prefix = prefix;
                }
                "cursor" => {
                    let cursor = decode("cursor")?;
                    if cursor.chars().count() > MAX_CURSOR_LEN {
                        return Err(QueryError::Cursor);
                    }
                    parsed.cursor = Some(cursor).filter(|c| !c.is_empty());
                }
                "limit" => {
                    parsed.limit = value
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=MAX_LIMIT).contains(n))
                        .ok_or_else(|| QueryError::Limit(value.to_string()))?;
                }
                other => return Err(QueryError::Unknown(other.to_string())),
            }
        }
        Ok(parsed)
    }
}

/// Why a listing or a lookup has no answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// [`MAX_LISTINGS`] operator reads are running and none ended in time.
    #[error("{MAX_LISTINGS} listings or semaphore and election reads are already reading the masters; retry in a second")]
    Busy,
    /// Too few masters answered for the answer to mean anything.
    #[error("only {read} of {masters} masters could be read (unread: {}); a quorum of {quorum} is needed", unread.join(", "))]
    TooFewRead {
        read: usize,
        masters: usize,
        quorum: usize,
        unread: Vec<String>,
    },
    /// `GET /v1/locks/{resource}`: no master that was read has the key.
    #[error("no master has a lock key for {0}")]
    NotFound(String),
}

/// `*?[]\` in a `SCAN MATCH` pattern match literally once escaped.
pub fn escape_glob(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// One master's names under the pattern, and how many keys `SCAN` returned.
async fn scan_node<M: Store>(
    node: &M,
    pattern: &str,
    key_prefix: &str,
) -> Result<(Vec<String>, u64), ReadFailure> {
    let mut names = Vec::new();
    let mut scanned = 0u64;
    let mut cursor = 0;
    loop {
        let (next, batch) = node
            .list_names(cursor, pattern, SCAN_COUNT)
            .await
            .map_err(ReadFailure::Node)?;
        scanned += batch.len() as u64;
        // The agents' own keys (the marker, the fence counter, quarantine
        // witnesses) are not locks.
        names.extend(
            batch
                .into_iter()
                .filter(|k| !redlock_wire::keys::is_bookkeeping(key_prefix, k)),
        );
        if names.len() > MAX_SCAN_KEYS {
            return Err(ReadFailure::TooManyKeys);
        }
        if next == 0 {
            return Ok((names, scanned));
        }
        cursor = next;
    }
}

/// Why one master is in `unread`.
#[derive(Debug)]
enum ReadFailure {
    Node(NodeError),
    TooManyKeys,
}

impl std::fmt::Display for ReadFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadFailure::Node(e) => e.fmt(f),
            ReadFailure::TooManyKeys => {
                write!(f, "more than {MAX_SCAN_KEYS} keys under the prefix")
            }
        }
    }
}

/// The page's keys on one master, in chunks of [`READ_CHUNK`].
async fn read_node<M: Store>(
    node: &M,
    keys: &[String],
) -> Result<HashMap<String, KeyState>, NodeError> {
    let mut states = HashMap::with_capacity(keys.len());
    for chunk in keys.chunks(READ_CHUNK) {
        for state in node.list_keys(chunk).await? {
            if state.pttl != -2 && (state.value.is_some() || !state.readers.is_empty()) {
                states.insert(state.key.clone(), state);
            }
        }
    }
    Ok(states)
}

/// Fails with [`ReadError::TooFewRead`] when fewer than a quorum of masters
/// answered; else the names of those that did not.
pub(crate) fn check_read<M: Store>(
    locks: &Locks<M>,
    read: &[bool],
) -> Result<Vec<String>, ReadError> {
    let redlock = locks.engine();
    let unread: Vec<String> = redlock
        .nodes()
        .iter()
        .zip(read)
        .filter(|(_, ok)| !**ok)
        .map(|(n, _)| n.name().to_string())
        .collect();
    let count = read.iter().filter(|ok| **ok).count();
    if count < redlock.quorum() {
        return Err(ReadError::TooFewRead {
            read: count,
            masters: read.len(),
            quorum: redlock.quorum(),
            unread,
        });
    }
    Ok(unread)
}

/// `GET /v1/locks`: one page of the lock keys under `query.prefix`.
///
/// # Errors
/// [`ReadError::Busy`] when other listings hold every turn,
/// [`ReadError::TooFewRead`] when fewer than a quorum of masters answered.
pub async fn list<M: Store>(
    locks: &Locks<M>,
    query: &ListQuery,
) -> Result<LocksResponse, ReadError> {
    let _turn = locks.listings().turn().await?;
    let started = Instant::now();
    let redlock = locks.engine();
    let key_prefix = &redlock.settings().key_prefix;
    let pattern = format!("{}*", escape_glob(&format!("{key_prefix}{}", query.prefix)));
    let nodes = redlock.nodes();
    let scans = futures::future::join_all(
        nodes
            .iter()
            .map(|node| scan_node(&**node, &pattern, key_prefix)),
    )
    .await;

    let mut all: BTreeSet<&str> = BTreeSet::new();
    let mut scanned = 0;
    for (node, scan) in nodes.iter().zip(&scans) {
        match scan {
            Ok((names, count)) => {
                scanned += count;
                for chunk in names.chunks(YIELD_EVERY) {
                    all.extend(chunk.iter().map(String::as_str));
                    tokio::task::yield_now().await;
                }
            }
            Err(e) => {
                tracing::warn!(node = node.name(), error = %e, "listing could not read a master")
            }
        }
    }
    let after = query.cursor.as_ref().map(|c| format!("{key_prefix}{c}"));
    let lower = after.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
    let mut window: Vec<String> = all
        .range::<str, _>((lower, Bound::Unbounded))
        .take(query.limit + 1)
        .map(|k| k.to_string())
        .collect();
    let more = window.len() > query.limit;
    window.truncate(query.limit);
    let total = all.len() as u64;

    let readable: Vec<bool> = scans.iter().map(Result::is_ok).collect();
    let reads = futures::future::join_all(nodes.iter().zip(&readable).map(|(node, ok)| {
        let window = &window;
        async move {
            if *ok {
                Some(read_node(&**node, window).await)
            } else {
                None
            }
        }
    }))
    .await;
    let per_node: Vec<Option<HashMap<String, KeyState>>> = nodes
        .iter()
        .zip(reads)
        .map(|(node, read)| match read {
            Some(Ok(states)) => Some(states),
            Some(Err(e)) => {
                tracing::warn!(node = node.name(), error = %e, "listing could not read a master");
                None
            }
            None => None,
        })
        .collect();
    let read: Vec<bool> = per_node.iter().map(Option::is_some).collect();
    let unread = check_read(locks, &read)?;

    let now = Instant::now();
    let mut infos = Vec::with_capacity(window.len());
    for chunk in window.chunks(YIELD_EVERY) {
        infos.extend(chunk.iter().filter_map(|key| {
            let states: Vec<Option<Option<&KeyState>>> = per_node
                .iter()
                .map(|n| n.as_ref().map(|states| states.get(key)))
                .collect();
            // Gone everywhere since the scan: not listed, but the page
            // still covers its name (the cursor moves past it).
            if states.iter().all(|s| !matches!(s, Some(Some(_)))) {
                return None;
            }
            let resource = key.strip_prefix(key_prefix.as_str()).unwrap_or(key);
            Some(lock_info(locks, resource, &states, now))
        }));
        tokio::task::yield_now().await;
    }
    let locks = infos;
    let next_cursor = if more {
        window
            .last()
            .map(|k| k.strip_prefix(key_prefix.as_str()).unwrap_or(k).to_string())
    } else {
        None
    };
    tracing::debug!(
        prefix = %query.prefix,
        scanned,
        total,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "listed locks"
    );
    Ok(LocksResponse {
        quorum: redlock.quorum(),
        masters: nodes.iter().map(|n| n.name().to_string()).collect(),
        locks,
        truncated: next_cursor.is_some(),
        next_cursor,
        total,
        scanned,
        partial: !unread.is_empty(),
        unread,
    })
}

/// `GET /v1/locks/{resource}`: one lock, one `READ_KEYS` per master, all
/// masters at once.
///
/// # Errors
/// [`ReadError::TooFewRead`] when fewer than a quorum of masters answered,
/// [`ReadError::NotFound`] when none of those that did has the key.
pub async fn get<M: Store>(
    locks: &Locks<M>,
    resource: &Resource,
) -> Result<LockResponse, ReadError> {
    let redlock = locks.engine();
    let key = redlock.key(resource);
    let keys = [key.clone()];
    let nodes = redlock.nodes();
    let reads = futures::future::join_all(nodes.iter().map(|node| node.list_keys(&keys))).await;
    let states: Vec<Option<Option<KeyState>>> = nodes
        .iter()
        .zip(reads)
        .map(|(node, read)| match read {
            Ok(states) => Some(
                states
                    .into_iter()
                    .find(|s| {
                        s.key == key && s.pttl != -2 && (s.value.is_some() || !s.readers.is_empty())
                    }),
            ),
            Err(e) => {
                tracing::warn!(node = node.name(), error = %e, "lock lookup could not read a master");
                None
            }
        })
        .collect();
    let read: Vec<bool> = states.iter().map(Option::is_some).collect();
    let unread = check_read(locks, &read)?;
    if states.iter().all(|s| !matches!(s, Some(Some(_)))) {
        return Err(ReadError::NotFound(resource.to_string()));
    }
    let borrowed: Vec<Option<Option<&KeyState>>> = states
        .iter()
        .map(|s| s.as_ref().map(Option::as_ref))
        .collect();
    Ok(LockResponse {
        quorum: redlock.quorum(),
        masters: nodes.iter().map(|n| n.name().to_string()).collect(),
        lock: lock_info(locks, resource.as_str(), &borrowed, Instant::now()),
        partial: !unread.is_empty(),
        unread,
    })
}

/// One lock from its key on each master: `None` = the master could not be
/// read, `Some(None)` = read and missing.
pub(crate) fn lock_info<M: Store>(
    locks: &Locks<M>,
    resource: &str,
    per_node: &[Option<Option<&KeyState>>],
    now: Instant,
) -> LockInfo {
    let redlock = locks.engine();
    let quorum = redlock.quorum();
    let drift = redlock.settings().drift;
    if per_node
        .iter()
        .flatten()
        .flatten()
        .any(|s| !s.readers.is_empty())
    {
        return shared_info(locks, resource, per_node);
    }
    // The holder is the value most masters agree on.
    let mut votes: HashMap<&str, usize> = HashMap::new();
    for state in per_node.iter().flatten().flatten() {
        if let Some(value) = state.value.as_deref() {
            *votes.entry(value).or_default() += 1;
        }
    }
    let (holder, agreeing) = votes
        .iter()
        .max_by_key(|&(value, count)| (*count, *value))
        .map(|(v, c)| (*v, *c))
        .unwrap_or(("", 0));
    let node_keys: Vec<NodeKey> = redlock
        .nodes()
        .iter()
        .zip(per_node)
        .map(|(node, state)| {
            let (state, pttl_ms) = match state {
                None => ("unknown", None),
                Some(None) => ("missing", None),
                Some(Some(s)) if s.value.as_deref() == Some(holder) => {
                    ("held", u64::try_from(s.pttl).ok())
                }
                Some(Some(s)) => ("other", u64::try_from(s.pttl).ok()),
            };
            NodeKey {
                node: node.name().to_string(),
                state: state.to_string(),
                pttl_ms,
            }
        })
        .collect();
    let held_here = locks.grants().holds(resource, holder, now);
    let process = held_here.and_then(|_| locks.grants().holder(resource, holder));
    // Until fewer than a quorum hold it: the quorum-th longest TTL among the
    // holder's copies, less the drift allowance.
    let mut ttls: Vec<u64> = node_keys
        .iter()
        .filter(|k| k.state == "held")
        .filter_map(|k| k.pttl_ms)
        .collect();
    ttls.sort_unstable_by(|a, b| b.cmp(a));
    let validity_ms = held_here
        .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
        .or_else(|| {
            let ttl = Duration::from_millis(*ttls.get(quorum - 1)?);
            Some(u64::try_from(ttl.saturating_sub(drift.allowance(ttl)).as_millis()).unwrap_or(0))
        });
    LockInfo {
        owner: token::owner_of(holder).map(str::to_string),
        agent: token::agent_of(holder).map(str::to_string),
        pid: process.and_then(|p| p.pid),
        uid: process.map(|p| p.uid),
        gid: process.map(|p| p.gid),
        pod: process.and_then(|p| p.pod).map(|p| p.uid.to_string()),
        container: process
            .and_then(|p| p.pod?.container)
            .map(|c| c.to_string()),
        validity_ms,
        quorum_agrees: agreeing >= quorum,
        held_here: held_here.is_some(),
        waiters: locks.waiters().count(resource),
        trace_id: held_here.and_then(|_| locks.grants().trace_id(resource, holder)),
        held_with: if held_here.is_some() {
            locks.held_with(resource, holder)
        } else {
            Vec::new()
        },
        nodes: node_keys,
        mode: Mode::Exclusive,
        readers: Vec::new(),
        resource: resource.to_string(),
    }
}

/// A lock held shared, as its readers on each master show it: a master
/// that records any reader holds it (`held`), every reader is listed with
/// the masters that record it, and the lock agrees on a quorum when one
/// reader is on a quorum of masters.
fn shared_info<M: Store>(
    locks: &Locks<M>,
    resource: &str,
    per_node: &[Option<Option<&KeyState>>],
) -> LockInfo {
    let redlock = locks.engine();
    // Masters per reader's token, counted in a map: a shared lock may have
    // thousands of readers.
    let mut masters_of: HashMap<&str, usize> = HashMap::new();
    for state in per_node.iter().flatten().flatten() {
        for token in &state.readers {
            *masters_of.entry(token.as_str()).or_default() += 1;
        }
    }
    let mut readers: Vec<(&str, usize)> = masters_of.into_iter().collect();
    readers.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let here: HashSet<String> = locks.grants().readers(resource).into_iter().collect();
    let nodes = redlock
        .nodes()
        .iter()
        .zip(per_node)
        .map(|(node, state)| {
            let (state, pttl_ms) = match state {
                None => ("unknown", None),
                Some(Some(s)) if !s.readers.is_empty() => ("held", u64::try_from(s.pttl).ok()),
                Some(Some(s)) if s.pttl != -2 => ("other", u64::try_from(s.pttl).ok()),
                Some(_) => ("missing", None),
            };
            NodeKey {
                node: node.name().to_string(),
                state: state.to_string(),
                pttl_ms,
            }
        })
        .collect();
    LockInfo {
        resource: resource.to_string(),
        owner: None,
        validity_ms: None,
        nodes,
        quorum_agrees: readers.first().is_some_and(|r| r.1 >= redlock.quorum()),
        held_here: readers.iter().any(|(t, _)| here.contains(*t)),
        agent: None,
        pid: None,
        uid: None,
        gid: None,
        pod: None,
        container: None,
        waiters: locks.waiters().count(resource),
        trace_id: None,
        held_with: Vec::new(),
        mode: Mode::Shared,
        readers: readers
            .iter()
            .map(|(t, masters)| Reader {
                agent: token::agent_of(t).map(str::to_string),
                owner: token::owner_of(t).map(str::to_string),
                masters: *masters,
                held_here: here.contains(*t),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_characters_are_escaped() {
        assert_eq!(escape_glob("lock:a"), "lock:a");
        assert_eq!(escape_glob("l[1]*?\\"), "l\\[1\\]\\*\\?\\\\");
    }

    #[test]
    fn queries_parse_with_defaults_and_decoding() {
        assert_eq!(ListQuery::parse(None).unwrap(), ListQuery::default());
        let q = ListQuery::parse(Some("prefix=orders%2F4&cursor=orders%2F41&limit=50")).unwrap();
        assert_eq!(q.prefix, "orders/4");
        assert_eq!(q.cursor.as_deref(), Some("orders/41"));
        assert_eq!(q.limit, 50);
        assert_eq!(ListQuery::parse(Some("cursor=")).unwrap().cursor, None);
    }

    #[test]
    fn bad_queries_say_what_is_wrong() {
        assert_eq!(
            ListQuery::parse(Some("limit=0")).unwrap_err(),
            QueryError::Limit("0".into())
        );
        assert!(matches!(
            ListQuery::parse(Some(&format!("limit={}", MAX_LIMIT + 1))),
            Err(QueryError::Limit(_))
        ));
        assert_eq!(
            ListQuery::parse(Some("page=2")).unwrap_err(),
            QueryError::Unknown("page".into())
        );
        assert_eq!(
            ListQuery::parse(Some("prefix=a%2A")).unwrap_err(),
            QueryError::Prefix(b'*', 1)
        );
        assert_eq!(
            ListQuery::parse(Some("prefix=%FF")).unwrap_err(),
            QueryError::Encoding("prefix")
        );
        // As long as a resource may be, not longer (the document's maxLength).
        let longest = "r".repeat(MAX_RESOURCE_LEN);
        assert_eq!(
            ListQuery::parse(Some(&format!("prefix={longest}")))
                .unwrap()
                .prefix,
            longest
        );
        assert_eq!(
            ListQuery::parse(Some(&format!("prefix={longest}r"))).unwrap_err(),
            QueryError::PrefixTooLong(MAX_RESOURCE_LEN + 1)
        );
        // A stray `%` is refused, never read as itself.
        assert_eq!(
            ListQuery::parse(Some("prefix=a%ZZ")).unwrap_err(),
            QueryError::Encoding("prefix")
        );
        assert_eq!(
            ListQuery::parse(Some("cursor=a%2")).unwrap_err(),
            QueryError::Encoding("cursor")
        );
    }

    /// The cursor's length counts characters, as the document's
    /// `maxLength` does: 512 two-byte characters are a cursor, 513 are not.
    #[test]
    fn the_cursor_is_measured_in_characters() {
        let at_most = "%C3%A9".repeat(MAX_CURSOR_LEN);
        let cursor = ListQuery::parse(Some(&format!("cursor={at_most}")))
            .unwrap()
            .cursor;
        assert_eq!(cursor.map(|c| c.len()), Some(2 * MAX_CURSOR_LEN));
        assert_eq!(
            ListQuery::parse(Some(&format!("cursor={at_most}%C3%A9"))).unwrap_err(),
            QueryError::Cursor
        );
    }
}
