//! The per-slot sweeps: one script call does the same thing for many
//! slots of one shard (read or write their markers, write witnesses,
//! readmit, delete markers, read fencing counters), so the health task's
//! work over thousands of slots takes a few calls per shard.
//!
//! A sweep script runs on one shard for many of its slots at once. It
//! names its keys in `ARGV` (a script's declared keys must share a slot)
//! and carries the `allow-cross-slot-keys` flag; Redis runs it only on keys
//! local to the node, so a chunk whose slots moved fails whole and is tried
//! again after the next topology read. Each slot's part is atomic, as every
//! script is; so is the chunk. It is called by `EVALSHA` on the shard's
//! node (`OnNode`) through [`scripts::evalsha`], as the batch's script
//! is: loaded there first when the node does not know it.

use std::sync::LazyLock;

use futures::stream::{self, StreamExt};
use redis::{Script, Value};
use redlock_wire::keys::SLOTS;

use super::{OnNode, Shard};
use crate::node::conn::bounded;
use crate::node::conn::EVICTED_KEYS_SOURCE;
use crate::node::{classify, scripts, Conn, Node};
use crate::redlock::master::NodeError;

/// Script calls of one kind in flight at once to one cluster, for the
/// per-slot sweeps (16384 markers at first sight).
const SWEEP_CONCURRENCY: usize = 256;

/// Slots per sweep call: one call holds its shard for a few milliseconds
/// at most.
const SWEEP_CHUNK: usize = 1024;

impl Node {
    /// Runs a sweep script on every shard for the slots it serves, in
    /// chunks of [`SWEEP_CHUNK`] slots: `per_slot` gives each slot's
    /// arguments (the same number for every slot), `head` the arguments
    /// before them. Returns one integer answer per slot that was sent, or
    /// the chunk's error; slots on no known shard are left out (a later
    /// probe tries them again).
    pub(super) async fn sweep(
        &self,
        conn: &Conn,
        script: &Script,
        per_slot: Vec<(u16, Vec<String>)>,
        head: &[&str],
    ) -> Vec<(u16, Result<i64, NodeError>)> {
        let Some(cluster) = conn.cluster() else {
            return Vec::new();
        };
        let shards: Vec<Shard> = self
            .part()
            .map(|p| p.shards.lock().unwrap_or_else(|e| e.into_inner()).clone())
            .unwrap_or_default();
        let mut owner: Vec<Option<usize>> = vec![None; usize::from(SLOTS)];
        for (index, shard) in shards.iter().enumerate() {
            for slot in shard.slot_list() {
                owner[usize::from(slot)] = Some(index);
            }
        }
        let mut groups: Vec<Vec<(u16, Vec<String>)>> = vec![Vec::new(); shards.len()];
        for (slot, args) in per_slot {
            if let Some(index) = owner[usize::from(slot)] {
                groups[index].push((slot, args));
            }
        }
        let mut calls = Vec::new();
        for (index, group) in groups.into_iter().enumerate() {
            for chunk in group.chunks(SWEEP_CHUNK) {
                calls.push((index, chunk.to_vec()));
            }
        }
        let bound = self.probe_timeout();
        let shards = &shards;
        stream::iter(calls)
            .map(|(index, chunk)| {
                let cluster = cluster.clone();
                async move {
                    let shard = &shards[index];
                    let mut node = OnNode::new(cluster, shard.host.clone(), shard.port);
                    let mut args: Vec<String> = head.iter().map(|a| a.to_string()).collect();
                    for (_, slot_args) in &chunk {
                        args.extend(slot_args.iter().cloned());
                    }
                    let mut call = redis::cmd("EVALSHA");
                    call.arg(script.get_hash()).arg(0).arg(&args);
                    let answer = bounded(bound, scripts::evalsha(script, &call, &mut node)).await;
                    match answer {
                        Ok(Value::Array(items)) if items.len() == chunk.len() => chunk
                            .iter()
                            .zip(items)
                            .map(|((slot, _), item)| {
                                let n = match item {
                                    Value::Int(n) => Ok(n),
                                    other => Err(NodeError::Other(format!(
                                        "unexpected sweep answer {other:?}"
                                    ))),
                                };
                                (*slot, n)
                            })
                            .collect::<Vec<_>>(),
                        Ok(other) => {
                            let error =
                                NodeError::Other(format!("unexpected sweep answer {other:?}"));
                            chunk
                                .iter()
                                .map(|(slot, _)| (*slot, Err(error.clone())))
                                .collect()
                        }
                        Err(e) => {
                            let error = classify(&e);
                            chunk
                                .iter()
                                .map(|(slot, _)| (*slot, Err(error.clone())))
                                .collect()
                        }
                    }
                }
            })
            .buffer_unordered(SWEEP_CONCURRENCY)
            .flat_map(stream::iter)
            .collect()
            .await
    }
}

/// The first line of a script that touches the keys of several slots: it
/// must come first, before any shared Lua.
const CROSS_SLOT: &str = "#!lua flags=allow-cross-slot-keys\n";

/// `ARGV[1]` "read" or "write", then one marker per slot: 1 where the
/// marker holds this node's ID (after writing it, for "write": clusters
/// this process started empty), else 0. A read is `CLUSTER MYID` and one
/// `GET` per slot: the health probe samples markers with it every probe.
pub(super) static SWEEP_MARKERS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{CROSS_SLOT}{EVICTED_KEYS_SOURCE}{SWEEP_MARKERS_CODE}"
    ))
});
const SWEEP_MARKERS_CODE: &str = r#"local id = redis.call("cluster", "myid")
local evicted = ARGV[1] == "write" and evicted_keys() or nil
local out = {}
for i = 2, #ARGV do
  if ARGV[1] == "write" then redis.call("set", ARGV[i], evicted and id .. " e=" .. evicted or id) end
  local found = redis.call("get", ARGV[i])
  out[i - 1] = found and string.match(found, "^%S+") == id and 1 or 0
end
return out"#;

/// `ARGV[1]` the TTL in ms, then per slot its witness key and nonce: writes
/// each witness as this node's ID and the nonce. 1 per slot.
pub(super) static SWEEP_WITNESSES: LazyLock<Script> =
    LazyLock::new(|| Script::new(&format!("{CROSS_SLOT}{SWEEP_WITNESSES_CODE}")));
const SWEEP_WITNESSES_CODE: &str = r#"local id = redis.call("cluster", "myid")
local out = {}
for i = 2, #ARGV, 2 do
  redis.call("set", ARGV[i], id .. ":" .. ARGV[i + 1], "PX", ARGV[1])
  out[#out + 1] = 1
end
return out"#;

/// Per slot: marker, witness, fencing counter, nonce, catch-up. When the
/// witness still holds this node's ID and this quarantine's nonce, the slot
/// lost nothing since the witness was written on this very node (no flush,
/// no failover, no migration: each would have removed it or moved it to a
/// node with another ID). When the marker already holds this node's ID,
/// another agent readmitted the slot by the same rule (or this agent did,
/// and its answer was lost). Either way the counter is raised to the
/// catch-up value, the marker written with this node's ID (and its
/// eviction count, where the node reports one) and the witness removed: 1
/// readmitted. Otherwise nothing is written: 0, the quarantine starts
/// over.
pub(super) static SWEEP_READMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{CROSS_SLOT}{EVICTED_KEYS_SOURCE}{SWEEP_READMIT_CODE}"
    ))
});
const SWEEP_READMIT_CODE: &str = r#"local id = redis.call("cluster", "myid")
local evicted = evicted_keys()
local out = {}
for i = 1, #ARGV, 5 do
  local marker, witness, fence = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local found = redis.call("get", marker)
  local marked = found and string.match(found, "^%S+") == id
  local answer = 1
  if redis.call("get", witness) == id .. ":" .. ARGV[i + 3] then
    redis.call("del", witness)
  elseif not marked then
    answer = 0
  end
  if answer == 1 then
    local current = tonumber(redis.call("get", fence) or "0") or 0
    if current < tonumber(ARGV[i + 4]) then redis.call("set", fence, ARGV[i + 4]) end
    if not marked then redis.call("set", marker, evicted and id .. " e=" .. evicted or id) end
  end
  out[#out + 1] = answer
end
return out"#;

/// One key per slot, deleted. 1 per slot.
pub(super) static SWEEP_DELETE: LazyLock<Script> = LazyLock::new(|| Script::new(SWEEP_DELETE_CODE));
const SWEEP_DELETE_CODE: &str = r#"#!lua flags=allow-cross-slot-keys
local out = {}
for i = 1, #ARGV do
  redis.call("del", ARGV[i])
  out[i] = 1
end
return out"#;

/// One fencing counter per slot: its value (0 when missing). A counter is
/// below 2^53, so Lua's number keeps it exact.
pub(super) static SWEEP_COUNTERS: LazyLock<Script> =
    LazyLock::new(|| Script::new(SWEEP_COUNTERS_CODE));
const SWEEP_COUNTERS_CODE: &str = r#"#!lua flags=allow-cross-slot-keys
local out = {}
for i = 1, #ARGV do
  out[i] = tonumber(redis.call("get", ARGV[i]) or "0") or 0
end
return out"#;
