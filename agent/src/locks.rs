//! The lock keys on the masters as operators see them: `GET /v1/locks`
//! (every key under the prefix, per-master TTLs, the holding agent's name
//! and, for locks held here, the holding process; never a token) and the
//! operator's force release.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use redlock_wire::{ForceReleaseResponse, LockInfo, LocksResponse, NodeKey};

use crate::agent::Agent;
use crate::grants::Holder;
use crate::health::MARKER_SUFFIX;
use crate::redlock::node::KeyState;
use crate::redlock::{token, Node, Resource};

/// Most locks listed in one answer.
pub const MAX_LOCKS: usize = 1000;
/// Most keys read from one master for one answer.
const MAX_KEYS_PER_NODE: usize = 10_000;

/// One master's keys under the prefix, or why they could not be read.
async fn read_node(node: &Node, pattern: &str) -> Result<(HashMap<String, KeyState>, bool), ()> {
    let mut keys = HashMap::new();
    let mut cursor = 0;
    loop {
        let (next, batch) = node.scan_keys(cursor, pattern, 500).await.map_err(|_| ())?;
        for state in batch {
            if state.pttl != -2 && state.value.is_some() {
                keys.insert(state.key.clone(), state);
            }
        }
        if next == 0 {
            return Ok((keys, false));
        }
        if keys.len() >= MAX_KEYS_PER_NODE {
            return Ok((keys, true));
        }
        cursor = next;
    }
}

/// `GET /v1/locks`: every lock key found on the masters.
pub async fn list(agent: &Agent) -> LocksResponse {
    let redlock = agent.redlock();
    let prefix = &redlock.settings().key_prefix;
    let marker = format!("{prefix}{MARKER_SUFFIX}");
    let pattern = format!("{prefix}*");
    let nodes = redlock.nodes();
    let reads = futures::future::join_all(nodes.iter().map(|n| read_node(n, &pattern))).await;
    let mut truncated = false;
    // key -> per node: Some(state) when read and present.
    let mut found: BTreeMap<&str, Vec<Option<&KeyState>>> = BTreeMap::new();
    for (i, read) in reads.iter().enumerate() {
        if let Ok((keys, cut)) = read {
            truncated |= cut;
            for (key, state) in keys {
                if *key == marker {
                    continue;
                }
                found
                    .entry(key.as_str())
                    .or_insert_with(|| vec![None; nodes.len()])[i] = Some(state);
            }
        }
    }
    if found.len() > MAX_LOCKS {
        truncated = true;
    }
    let quorum = redlock.quorum();
    let drift = redlock.settings().drift;
    let now = Instant::now();
    let locks = found
        .into_iter()
        .take(MAX_LOCKS)
        .map(|(key, per_node)| {
            let resource = key.strip_prefix(prefix.as_str()).unwrap_or(key).to_string();
            // The holder is the value most masters agree on.
            let mut votes: HashMap<&str, usize> = HashMap::new();
            for state in per_node.iter().flatten() {
                if let Some(value) = state.value.as_deref() {
                    *votes.entry(value).or_default() += 1;
                }
            }
            let (holder, agreeing) = votes
                .iter()
                .max_by_key(|&(value, count)| (*count, *value))
                .map(|(v, c)| (*v, *c))
                .unwrap_or(("", 0));
            let node_keys: Vec<NodeKey> = nodes
                .iter()
                .zip(&per_node)
                .zip(&reads)
                .map(|((node, state), read)| {
                    let (state, pttl_ms) = match (read, state) {
                        (Err(()), _) => ("unknown", None),
                        (Ok(_), None) => ("missing", None),
                        (Ok(_), Some(s)) if s.value.as_deref() == Some(holder) => {
                            ("held", u64::try_from(s.pttl).ok())
                        }
                        (Ok(_), Some(s)) => ("other", u64::try_from(s.pttl).ok()),
                    };
                    NodeKey {
                        node: node.name().to_string(),
                        state: state.to_string(),
                        pttl_ms,
                    }
                })
                .collect();
            let held_here = agent.grants().holds(&resource, holder, now);
            let process = held_here.and_then(|_| agent.grants().holder(&resource, holder));
            // Until fewer than a quorum hold it: the quorum-th longest TTL
            // among the holder's copies, less the drift allowance.
            let mut ttls: Vec<u64> = node_keys
                .iter()
                .filter(|k| k.state == "held")
                .filter_map(|k| k.pttl_ms)
                .collect();
            ttls.sort_unstable_by(|a, b| b.cmp(a));
            let validity_ms = held_here
                .map(|left| u64::try_from(left.as_millis()).unwrap_or(u64::MAX))
                .or_else(|| {
                    let ttl = *ttls.get(quorum - 1)?;
                    let ttl = std::time::Duration::from_millis(ttl);
                    Some(
                        u64::try_from(ttl.saturating_sub(drift.allowance(ttl)).as_millis())
                            .unwrap_or(0),
                    )
                });
            LockInfo {
                owner: token::owner_of(holder).map(str::to_string),
                agent: token::agent_of(holder).map(str::to_string),
                pid: process.and_then(|p| p.pid),
                uid: process.map(|p| p.uid),
                gid: process.map(|p| p.gid),
                validity_ms,
                quorum_agrees: agreeing >= quorum,
                held_here: held_here.is_some(),
                waiters: agent.waiters().count(&resource),
                nodes: node_keys,
                resource,
            }
        })
        .collect();
    LocksResponse {
        quorum,
        masters: nodes.iter().map(|n| n.name().to_string()).collect(),
        locks,
        truncated,
    }
}

/// A uid or pid for the log; `-` when unknown.
fn show_id(id: Option<u32>) -> String {
    id.map_or_else(|| "-".to_string(), |id| id.to_string())
}

/// The value of `key` on `node`, if it is connected and answers in time.
async fn read_value(node: &Node, key: &str) -> Option<String> {
    let mut conn = node.connection()?;
    let mut get = redis::cmd("GET");
    get.arg(key);
    let get = get.query_async::<Option<String>>(&mut conn);
    tokio::time::timeout(node.timeout(), get).await.ok()?.ok()?
}

/// Deletes the lock key of `resource` on every master, whoever holds it.
/// For operators clearing a stuck lock (only on the admin socket); logged
/// with the caller and the holder it removed, and counted.
pub async fn force_release(
    agent: &Agent,
    resource: &Resource,
    caller: Option<Holder>,
) -> ForceReleaseResponse {
    let redlock = agent.redlock();
    let key = redlock.key(resource);
    // The holder, for the log: the value most masters hold.
    let values =
        futures::future::join_all(redlock.nodes().iter().map(|n| read_value(n, &key))).await;
    let mut votes: HashMap<&str, usize> = HashMap::new();
    for value in values.iter().flatten() {
        *votes.entry(value.as_str()).or_default() += 1;
    }
    let removed = votes
        .iter()
        .max_by_key(|&(value, count)| (*count, *value))
        .map(|(value, _)| (*value).to_string());
    let process = removed
        .as_deref()
        .and_then(|value| agent.grants().holder(resource.as_str(), value));
    let results = futures::future::join_all(redlock.nodes().iter().map(|n| n.delete(&key))).await;
    let mut deleted = 0;
    let mut failed = Vec::new();
    for (node, result) in redlock.nodes().iter().zip(results) {
        match result {
            Ok(true) => deleted += 1,
            Ok(false) => {}
            Err(_) => failed.push(node.name().to_string()),
        }
    }
    let value = removed.as_deref().unwrap_or("");
    tracing::warn!(
        %resource,
        deleted,
        failed = ?failed,
        caller_uid = %show_id(caller.map(|c| c.uid)),
        caller_pid = %show_id(caller.and_then(|c| c.pid)),
        holder_agent = token::agent_of(value).unwrap_or("-"),
        holder_owner = token::owner_of(value).unwrap_or("-"),
        holder_uid = %show_id(process.map(|p| p.uid)),
        holder_pid = %show_id(process.and_then(|p| p.pid)),
        "force release by an operator"
    );
    agent.metrics().force_releases.inc();
    agent.grants().forget(resource.as_str(), agent.metrics());
    agent.waiters().released(resource.as_str());
    ForceReleaseResponse { deleted, failed }
}
