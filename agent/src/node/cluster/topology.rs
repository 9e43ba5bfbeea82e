//! A cluster's topology as the health probe reads it: `CLUSTER SHARDS`
//! (each shard's primary and its slots) and each primary's `INFO` (its
//! `run_id` and `evicted_keys`), compared with the last probe's to find
//! the slots that may have lost keys ([`LostSlots`]).

use redis::{InfoDict, Value};
use redlock_wire::keys::SLOTS;

use super::OnNode;
use crate::node::conn::bounded;
use crate::node::{Conn, Detector, Node};
use crate::redlock::master::NodeError;
use crate::redlock::observe::Op;

/// One shard: a primary and the slots it serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    pub host: String,
    pub port: u16,
    pub node_id: String,
    /// Inclusive slot ranges.
    pub slots: Vec<[u16; 2]>,
    pub replicas: u32,
    /// Its `run_id` and `evicted_keys` at the last probe; `None` while it
    /// did not answer.
    pub run_id: Option<String>,
    pub evicted_keys: Option<u64>,
    /// Its primary answered the last probe's `INFO`.
    pub up: bool,
}

impl Shard {
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// Every slot it serves.
    pub(super) fn slot_list(&self) -> impl Iterator<Item = u16> + '_ {
        self.slots
            .iter()
            .flat_map(|[a, b]| *a..=(*b).min(SLOTS - 1))
    }

    /// It serves `slot`.
    pub(super) fn serves(&self, slot: u16) -> bool {
        self.slots.iter().any(|[a, b]| (*a..=*b).contains(&slot))
    }
}

/// Slots that may have lost keys, as a probe saw it: a shard restarted
/// with its data or evicted keys, or slots now served by another node
/// than at the last probe (a failover, a migration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostSlots {
    /// The shard's address, for the log.
    pub addr: String,
    pub slots: Vec<u16>,
    pub detector: Detector,
}

impl Node {
    /// The shards at the last probe, with their slots out, for `/v1/nodes`.
    pub fn shards(&self) -> Vec<(Shard, usize)> {
        let Some(part) = self.part() else {
            return Vec::new();
        };
        let shards = part
            .shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let slots = self.slots();
        shards
            .into_iter()
            .map(|shard| {
                let out = slots.as_ref().map_or(0, |s| s.out_in(&shard.slots));
                (shard, out)
            })
            .collect()
    }

    /// Reads the cluster's shards (`CLUSTER SHARDS`) and each primary's
    /// `INFO`; returns the shards whose primary restarted (a new `run_id`
    /// under the same node ID) or evicted keys since the last probe, with
    /// the detector that saw it.
    ///
    /// # Errors
    /// When no node answers `CLUSTER SHARDS` in time.
    pub(crate) async fn probe_shards(&self, conn: &Conn) -> Result<Vec<LostSlots>, NodeError> {
        let Some(part) = self.part() else {
            return Ok(Vec::new());
        };
        let value = self
            .request_on(Op::Probe, conn.clone(), |mut conn| async move {
                redis::cmd("CLUSTER")
                    .arg("SHARDS")
                    .query_async::<Value>(&mut conn)
                    .await
            })
            .await?;
        let mut shards = parse_shards(&value).ok_or_else(|| {
            NodeError::Other(format!("unexpected CLUSTER SHARDS answer: {value:?}"))
        })?;
        // CLUSTER SHARDS is Redis 7: every shard understands SET ... GET.
        self.lock().set_get = true;
        let Some(cluster) = conn.cluster() else {
            return Ok(Vec::new());
        };
        let probe_timeout = self.probe_timeout();
        let infos = futures::future::join_all(shards.iter().map(|shard| {
            let mut node = OnNode::new(cluster.clone(), shard.host.clone(), shard.port);
            async move {
                let mut cmd = redis::cmd("INFO");
                cmd.arg("server").arg("stats");
                bounded(probe_timeout, cmd.query_async::<InfoDict>(&mut node))
                    .await
                    .ok()
            }
        }))
        .await;
        for (shard, info) in shards.iter_mut().zip(infos) {
            shard.up = info.is_some();
            if let Some(info) = info {
                shard.run_id = info.get("run_id");
                shard.evicted_keys = info.get("evicted_keys");
            }
        }
        let mut known = part.shards.lock().unwrap_or_else(|e| e.into_inner());
        let mut changed = Vec::new();
        let lost = |shard: &Shard, detector| LostSlots {
            addr: shard.addr(),
            slots: shard.slot_list().collect(),
            detector,
        };
        for shard in &shards {
            let Some(before) = known.iter().find(|b| b.node_id == shard.node_id) else {
                continue;
            };
            if let (Some(b), Some(n)) = (&before.run_id, &shard.run_id) {
                if b != n {
                    changed.push(lost(shard, Detector::RunId));
                    continue;
                }
            }
            if let (Some(b), Some(n)) = (before.evicted_keys, shard.evicted_keys) {
                if n > b {
                    changed.push(lost(shard, Detector::Eviction));
                }
            }
        }
        // Slots served by another node than at the last probe. Their
        // markers name the old node, so votes refuse them anyway; deleting
        // the markers also keeps a slot out should it move back (a
        // failback) before any vote saw it away.
        if !known.is_empty() {
            let mut owner: Vec<Option<&str>> = vec![None; usize::from(SLOTS)];
            for shard in known.iter() {
                for slot in shard.slot_list() {
                    owner[usize::from(slot)] = Some(shard.node_id.as_str());
                }
            }
            for shard in &shards {
                let moved: Vec<u16> = shard
                    .slot_list()
                    .filter(|slot| {
                        owner[usize::from(*slot)].is_some_and(|was| was != shard.node_id)
                    })
                    .collect();
                if !moved.is_empty() {
                    changed.push(LostSlots {
                        addr: shard.addr(),
                        slots: moved,
                        detector: Detector::Marker,
                    });
                }
            }
        }
        // A primary that did not answer keeps what was known of it, so its
        // restart is still seen when it answers again.
        for shard in &mut shards {
            if shard.run_id.is_none() {
                if let Some(before) = known.iter().find(|b| b.node_id == shard.node_id) {
                    shard.run_id = before.run_id.clone();
                    shard.evicted_keys = before.evicted_keys;
                }
            }
        }
        *known = shards;
        Ok(changed)
    }

    /// The primaries' addresses in a stable order (sorted).
    pub(crate) fn shard_addresses(&self) -> Vec<(String, u16)> {
        let Some(part) = self.part() else {
            return Vec::new();
        };
        let mut addrs: Vec<(String, u16)> = part
            .shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|s| (s.host.clone(), s.port))
            .collect();
        addrs.sort();
        addrs
    }
}

/// A map or a flat key/value array (RESP3 or RESP2) as pairs.
fn pairs(value: &Value) -> Vec<(String, &Value)> {
    match value {
        Value::Map(items) => items
            .iter()
            .filter_map(|(k, v)| text(k).map(|k| (k, v)))
            .collect(),
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|kv| match kv {
                [k, v] => text(k).map(|k| (k, v)),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The primaries of a `CLUSTER SHARDS` answer, with their slots. `None`
/// when the answer is not shaped as Redis 7 sends it.
pub fn parse_shards(value: &Value) -> Option<Vec<Shard>> {
    let Value::Array(items) = value else {
        return None;
    };
    let mut shards = Vec::new();
    for item in items {
        let fields = pairs(item);
        let slots: Vec<u16> = match fields.iter().find(|(k, _)| k == "slots")?.1 {
            Value::Array(bounds) => bounds
                .iter()
                .filter_map(|b| text(b)?.parse().ok())
                .collect(),
            _ => return None,
        };
        let Value::Array(nodes) = fields.iter().find(|(k, _)| k == "nodes")?.1 else {
            return None;
        };
        let nodes: Vec<Vec<(String, String)>> = nodes
            .iter()
            .map(|n| {
                pairs(n)
                    .into_iter()
                    .filter_map(|(k, v)| text(v).map(|v| (k, v)))
                    .collect()
            })
            .collect();
        let get = |node: &[(String, String)], key: &str| {
            node.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
        };
        let Some(primary) = nodes
            .iter()
            .find(|n| get(n, "role").as_deref() == Some("master"))
        else {
            continue;
        };
        if slots.is_empty() {
            continue;
        }
        let host = get(primary, "ip")
            .or_else(|| get(primary, "endpoint"))
            .unwrap_or_default();
        let port = get(primary, "port")
            .or_else(|| get(primary, "tls-port"))
            .and_then(|p| p.parse().ok())?;
        shards.push(Shard {
            host,
            port,
            node_id: get(primary, "id").unwrap_or_default(),
            slots: slots
                .chunks(2)
                .filter(|c| c.len() == 2)
                .map(|c| [c[0], c[1]])
                .collect(),
            replicas: u32::try_from(nodes.len().saturating_sub(1)).unwrap_or(u32::MAX),
            run_id: None,
            evicted_keys: None,
            up: false,
        });
    }
    Some(shards)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn cluster_shards_answer_gives_primaries_and_slots() {
        let node = |id: &str, port: i64, role: &str| {
            Value::Array(vec![
                bulk("id"),
                bulk(id),
                bulk("port"),
                Value::Int(port),
                bulk("ip"),
                bulk("127.0.0.1"),
                bulk("role"),
                bulk(role),
                bulk("health"),
                bulk("online"),
            ])
        };
        let answer = Value::Array(vec![Value::Array(vec![
            bulk("slots"),
            Value::Array(vec![
                Value::Int(0),
                Value::Int(100),
                Value::Int(200),
                Value::Int(5460),
            ]),
            bulk("nodes"),
            Value::Array(vec![node("r", 7002, "replica"), node("p", 7001, "master")]),
        ])]);
        let shards = parse_shards(&answer).unwrap();
        assert_eq!(shards.len(), 1);
        assert_eq!(shards[0].addr(), "127.0.0.1:7001");
        assert_eq!(shards[0].node_id, "p");
        assert_eq!(shards[0].slots, vec![[0, 100], [200, 5460]]);
        assert_eq!(shards[0].replicas, 1);
    }
}
