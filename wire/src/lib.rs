//! Wire types of the redlock-agent socket API.
//!
//! These are the JSON bodies the agent reads and writes on its Unix socket.
//! They live in their own crate so clients (the TUI, tests, benchmarks) can
//! speak the API without pulling in the server. Field names are a contract:
//! add fields, never rename them.

use serde::{Deserialize, Serialize};

/// Body of `POST /v1/locks/{resource}/acquire`. Every field is optional; an
/// empty body means "the default TTL, try once, no owner label".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcquireRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// How long the agent may keep trying; 0 or absent means one attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// A label stored beside the token so operators can see who holds a lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Ask for a fencing token: the answer carries `fence`, a number minted
    /// by the same quorum that grants the lock, larger than the fence of
    /// every earlier grant of any lock on these masters. Always on when the
    /// agent's `lock.fence` is `always`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fence: bool,
}

/// 200 answer to `acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireResponse {
    pub resource: String,
    /// Opaque; the only proof of ownership. Needed to extend and release.
    pub token: String,
    /// How long the lock is safe to use, counted from when the agent answered.
    pub validity_ms: u64,
    pub ttl_ms: u64,
    /// The fencing token, when asked for (`fence: true`) or always on:
    /// pass it to the storage with every write, and have the storage refuse
    /// a write whose fence is not above the highest it has seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
}

/// Body of `POST /v1/locks/{resource}/extend`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtendRequest {
    pub token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// 200 answer to `extend`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtendResponse {
    pub validity_ms: u64,
    pub ttl_ms: u64,
}

/// Body of `POST /v1/locks/{resource}/release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseRequest {
    pub token: String,
}

/// 200 answer to `release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseResponse {
    /// True when the lock was still held on a quorum when it was released;
    /// false when so many masters said they do not hold it that no quorum
    /// did: its validity had already run out. When neither is known (too
    /// many masters failed or timed out) the answer is `503 no_quorum`.
    pub released: bool,
}

/// Body of `POST /v1/locks/{resource}/hold`: a lock tied to this connection.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HoldRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Ends the hold with `lost` (reason `max_hold`) after this long;
    /// defaults to `lock.max_hold`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_hold_ms: Option<u64>,
    /// As in [`AcquireRequest::fence`]: the `acquired` event carries it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fence: bool,
    /// What happens to the lock when the client's connection closes
    /// without a release: `release` (the default) deletes it on every
    /// master at once; `expire` leaves it to expire on its own, so writes a
    /// vanished client still had in flight land before anyone else can
    /// hold the lock (for storage that cannot check a fence).
    #[serde(default, skip_serializing_if = "OnDisconnect::is_release")]
    pub on_disconnect: OnDisconnect,
}

/// See [`HoldRequest::on_disconnect`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDisconnect {
    #[default]
    Release,
    Expire,
}

impl OnDisconnect {
    pub fn is_release(&self) -> bool {
        *self == OnDisconnect::Release
    }
}

/// One line of a hold's `application/x-ndjson` stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HoldEvent {
    /// First line: the lock is held.
    Acquired {
        token: String,
        validity_ms: u64,
        ttl_ms: u64,
        /// The fencing token, when asked for or always on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fence: Option<u64>,
    },
    /// Extended on a quorum; valid for `validity_ms` from now.
    Renewed { validity_ms: u64 },
    /// Last line, sent before the validity ends: stop using the lock.
    /// `reason`: `renew_failed`, `no_quorum`, `max_hold`, `shutdown`,
    /// `force_released` (an operator's force release removed it) or
    /// `node_lost` (masters it held on lost their keys: fewer than a quorum
    /// still hold it).
    Lost { reason: String },
}

/// One master's copy of a lock key in `GET /v1/locks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeKey {
    pub node: String,
    /// `held` (same holder as the quorum), `missing`, `other` (a different
    /// holder) or `unknown` (the master could not be read).
    pub state: String,
    /// TTL left on this master when read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pttl_ms: Option<u64>,
}

/// One lock key found on the masters, never with its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockInfo {
    pub resource: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Time until fewer than a quorum of masters hold it (for locks held
    /// through this agent: the validity it granted); absent without a quorum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validity_ms: Option<u64>,
    /// One entry per configured master, in config order.
    pub nodes: Vec<NodeKey>,
    /// A quorum of masters hold the same value.
    pub quorum_agrees: bool,
    /// Granted through this agent (by acquire or a hold) and not released.
    pub held_here: bool,
    /// `agent.name` of the agent that granted it, read from the lock's value
    /// (absent for values written by agents before this field existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The requesting process as the kernel reported it (`SO_PEERCRED`)
    /// when it connected; only for locks held through this agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// This agent's requests waiting for this resource.
    pub waiters: u64,
}

/// 200 answer to `GET /v1/locks?prefix=&cursor=&limit=`: one page of the
/// lock keys whose resource starts with `prefix`, in resource-name order.
///
/// Paging: each page lists the names strictly after `cursor`, so a walk
/// that passes each page's `next_cursor` to the next call never lists a
/// resource twice, and lists every resource whose key stays on a master
/// that could be read for the whole walk exactly once. Keys created or
/// deleted during the walk appear at most once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocksResponse {
    pub quorum: usize,
    /// Master names in config order (the columns of `nodes` in each lock).
    pub masters: Vec<String>,
    pub locks: Vec<LockInfo>,
    /// More keys exist than were listed: `next_cursor` is set.
    #[serde(default)]
    pub truncated: bool,
    /// Pass as `cursor` for the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// Distinct lock keys under the prefix on the masters that were read.
    #[serde(default)]
    pub total: u64,
    /// Keys `SCAN` returned over all masters for this answer: the work done.
    #[serde(default)]
    pub scanned: u64,
    /// Masters that could not be read (down, timed out, failed); their
    /// columns say `unknown`. Never empty when `partial` is true.
    #[serde(default)]
    pub unread: Vec<String>,
    /// Some masters could not be read: a lock may be missing from the page
    /// or shown on fewer masters than hold it.
    #[serde(default)]
    pub partial: bool,
}

/// 200 answer to `GET /v1/locks/{resource}`: one lock, read from every
/// master at once (one round trip each).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockResponse {
    pub quorum: usize,
    /// Master names in config order (the columns of `lock.nodes`).
    pub masters: Vec<String>,
    pub lock: LockInfo,
    /// Masters that could not be read; their column says `unknown`.
    #[serde(default)]
    pub unread: Vec<String>,
    /// Some masters could not be read.
    #[serde(default)]
    pub partial: bool,
}

/// 200 answer to `POST /v1/locks/{resource}/force-release`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForceReleaseResponse {
    /// Masters on which a key was deleted.
    pub deleted: usize,
    /// Masters that could not be reached.
    pub failed: Vec<String>,
}

/// 200 answer to `GET /v1/summary`: cumulative figures since start, for
/// clients that compute rates and percentiles from two readings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryResponse {
    pub version: String,
    pub uptime_ms: u64,
    /// Acquire answers by outcome (`acquired`, `taken`, `no_quorum`, `error`).
    pub acquires: std::collections::BTreeMap<String, u64>,
    /// Failures by reason, as in `redlock_failures_total`.
    pub failures: std::collections::BTreeMap<String, u64>,
    /// Acquire wait histogram: `(upper bound in seconds, cumulative count)`,
    /// all outcomes together; the last bound is `+Inf` as `f64::MAX`.
    pub wait_buckets: Vec<(f64, u64)>,
    /// The same histogram per outcome (`acquired`, `taken`, `no_quorum`,
    /// `error`), so a long `taken` wait never passes for a slow grant. The
    /// last finite bound is the agent's `lock.max_hold`; a quantile in the
    /// `+Inf` bucket is only known to be above it.
    #[serde(default)]
    pub waits: std::collections::BTreeMap<String, Vec<(f64, u64)>>,
    pub locks_held: u64,
    pub waiters: u64,
}

/// State of one master as the agent sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    Up,
    Down,
    Quarantined,
    /// Reaches the same server as an earlier configured master (same
    /// `run_id`): it never counts toward a quorum.
    Duplicate,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Up => "up",
            NodeState::Down => "down",
            NodeState::Quarantined => "quarantined",
            NodeState::Duplicate => "duplicate",
        }
    }
}

/// One master in `GET /v1/nodes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub name: String,
    pub state: NodeState,
    /// Round trip of the last successful probe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Time left before a quarantined master takes part in locks again;
    /// 0 when not quarantined.
    #[serde(default)]
    pub quarantine_remaining_ms: u64,
    /// The whole length of the current quarantine (0 when not quarantined),
    /// the scale for a countdown.
    #[serde(default)]
    pub quarantine_ms: u64,
    /// The restart detector behind the last quarantine: `reconnect`,
    /// `run_id`, `uptime` or `marker`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detector: Option<String>,
    /// The master's `run_id` from its last probe (absent when INFO is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uptime_s: Option<u64>,
    /// `none`, `rdb`, `aof everysec`, `aof always`, ...; absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence: Option<String>,
    /// Setups that weaken Redlock: a replica, two URLs reaching one server,
    /// an evicting maxmemory policy, no persistence without delayed restart.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// `single` (one Redis server) or `cluster` (a Redis Cluster as one
    /// master).
    #[serde(default = "single")]
    pub kind: String,
    /// A cluster master's shards (primaries), from its last topology read;
    /// empty for a single server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardStatus>,
    /// Hash slots kept out of locks on this master because they may have
    /// lost keys (a shard restarted empty, failed over or a slot migrated);
    /// 0 for a single server, whose quarantine is the whole master's.
    #[serde(default)]
    pub quarantined_slots: u64,
    /// Time left before the last of those slots may take part in locks
    /// again (a slot whose quarantine witness is not written yet counts a
    /// whole quarantine); 0 with none.
    #[serde(default)]
    pub quarantined_slots_remaining_ms: u64,
}

fn single() -> String {
    "single".to_string()
}

/// One shard (a primary and its slots) of a master given as a Redis
/// Cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardStatus {
    /// `host:port` of the shard's primary.
    pub addr: String,
    /// The primary's cluster node ID.
    pub node_id: String,
    /// The hash slot ranges it serves, inclusive.
    pub slots: Vec<[u16; 2]>,
    /// `up` when the primary answered the last probe, else `down`.
    pub state: NodeState,
    /// Its slots in quarantine.
    #[serde(default)]
    pub quarantined_slots: u64,
    /// Replicas of this primary the cluster reports.
    #[serde(default)]
    pub replicas: u32,
}

/// 200 answer to `GET /v1/nodes`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodesResponse {
    /// N/2+1 of the configured N; never shrinks when nodes are down.
    pub quorum: usize,
    /// Nodes that may take part in a lock right now.
    pub usable: usize,
    /// A lock on any resource could get a quorum now: `usable >= quorum`,
    /// and no hash slot has fewer than a quorum of masters that can vote in
    /// it (a cluster master's slots in quarantine, or on a shard that is
    /// down, do not count). What `/readyz` answers.
    pub available: bool,
    /// Why not `available`; absent when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Hash slots (of 16384; every resource's key falls in one) in which a
    /// lock cannot get a quorum now: all of them while fewer than a quorum
    /// of masters is usable.
    #[serde(default)]
    pub slots_without_quorum: u64,
    pub nodes: Vec<NodeStatus>,
}

/// One leaked key in `GET /v1/leaks`. Shows the resource, never the value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeakedKey {
    pub resource: String,
    /// `no_ttl`, `ttl_over_max`, `minority` or `unproven`.
    pub kind: String,
    /// The key's TTL when scanned; absent for keys without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pttl_ms: Option<u64>,
}

/// The last scan of one master.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeLeaks {
    pub node: String,
    /// Unix time in ms when the scan of this master ended.
    pub scanned_at_ms: u64,
    pub duration_ms: u64,
    pub keys_scanned: u64,
    /// Why this master could not be scanned; its counts are then zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub no_ttl: u64,
    pub ttl_over_max: u64,
    pub minority: u64,
    /// Keys without TTL (or with one over `lock.max_ttl`) whose value looks
    /// like a token but is not proven to be one written for that key: a
    /// token of an agent from before check values, or application data
    /// such as a hex digest. Reported so an operator can look, never
    /// repaired. 0 from agents that predate the count.
    #[serde(default)]
    pub unproven: u64,
    /// TTLs given to `no_ttl` keys when `leak_scan.repair` is `expire`.
    pub repaired: u64,
    /// The leaked keys, at most [`MAX_LEAKED_KEYS_SHOWN`] per master.
    pub keys: Vec<LeakedKey>,
}

/// How many leaked keys `/v1/leaks` lists per master.
pub const MAX_LEAKED_KEYS_SHOWN: usize = 100;

/// 200 answer to `GET /v1/leaks`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaksResponse {
    /// Scans so far; 0 until the first one ends (then `nodes` is empty).
    pub scans: u64,
    pub interval_ms: u64,
    /// `none` or `expire`.
    pub repair: String,
    pub nodes: Vec<NodeLeaks>,
    /// Masters the last scan could not read (their `error` says why), or
    /// every master before the first scan ends.
    #[serde(default)]
    pub unread: Vec<String>,
    /// The report does not cover every master: `unread` is not empty.
    #[serde(default)]
    pub partial: bool,
}

/// Machine-readable error codes. The set only grows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The lock is held by someone else (not acquired within `wait_ms`).
    Taken,
    /// Fewer than a quorum of masters could be used.
    NoQuorum,
    /// The lock was not extended on a quorum in time; it may be held by another.
    Lost,
    InvalidRequest,
    InvalidResource,
    TtlOutOfRange,
    BodyTooLarge,
    NotFound,
    MethodNotAllowed,
    ShuttingDown,
    /// `socket.max_connections` open connections: this one is refused.
    TooManyConnections,
    /// `lock.max_waiters` requests already wait for locks on this agent, or
    /// the caller's uid already has `lock.max_waiters_per_uid` waiting.
    TooManyWaiters,
    /// The request did not arrive in full within `socket.request_timeout`.
    RequestTimeout,
    /// The peer may not use this socket or this route on it (`socket.allow_uids`,
    /// `admin.allow_uids`, force-release off the admin socket).
    Forbidden,
    /// Too many operator listings at once; retry after `Retry-After`.
    Busy,
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::Taken => "taken",
            ErrorCode::NoQuorum => "no_quorum",
            ErrorCode::Lost => "lost",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::InvalidResource => "invalid_resource",
            ErrorCode::TtlOutOfRange => "ttl_out_of_range",
            ErrorCode::BodyTooLarge => "body_too_large",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::TooManyConnections => "too_many_connections",
            ErrorCode::TooManyWaiters => "too_many_waiters",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Busy => "busy",
            ErrorCode::Internal => "internal",
        }
    }
}

/// The `error` object of every non-2xx answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
}

/// Every non-2xx answer: `{"error": {"code": ..., "message": ...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorResponse {
    pub error: ErrorBody,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `as_str` is what logs and metrics use; it must match the JSON name.
    #[test]
    fn error_code_names_match_their_json() {
        for code in [
            ErrorCode::Taken,
            ErrorCode::NoQuorum,
            ErrorCode::Lost,
            ErrorCode::InvalidRequest,
            ErrorCode::InvalidResource,
            ErrorCode::TtlOutOfRange,
            ErrorCode::BodyTooLarge,
            ErrorCode::NotFound,
            ErrorCode::MethodNotAllowed,
            ErrorCode::ShuttingDown,
            ErrorCode::TooManyConnections,
            ErrorCode::TooManyWaiters,
            ErrorCode::RequestTimeout,
            ErrorCode::Forbidden,
            ErrorCode::Busy,
            ErrorCode::Internal,
        ] {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
    }

    #[test]
    fn unknown_request_fields_are_refused() {
        let err = serde_json::from_str::<AcquireRequest>(r#"{"ttl": 5}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `ttl`"), "{err}");
    }
}

/// The agent's own bookkeeping keys on every master, beside the lock keys
/// (`<key_prefix><resource>`). Each is the key prefix followed by a suffix
/// that starts with a space, which no resource may contain, so none of
/// them can be a lock key; listings, scans and the fault suite's observer
/// skip them with [`keys::is_bookkeeping`].
pub mod keys {
    /// The incarnation marker: written once, no TTL. A master without it
    /// lost its keys (FLUSHALL, failover, a restart without persistence).
    pub const MARKER_SUFFIX: &str = " incarnation";
    /// The quarantine witness, after `<key_prefix><40 hex>` (the agent's
    /// id): written when a quarantine begins, so readmission can tell that
    /// the master lost nothing since.
    pub const WITNESS_SUFFIX: &str = " quarantine witness";
    /// The fencing counter: the highest fence minted with this master's
    /// vote. No TTL; lost with the marker, restored from the other masters
    /// on readmission.
    pub const FENCE_SUFFIX: &str = " fence";
    /// The waiting flag of one lock key, after `<key_prefix>` and before
    /// ` {<tag>} <resource>` (see [`waiting_key`]): set by a vote that found
    /// the lock taken and will wait for it, with that vote's TTL; the
    /// release deletes it with the lock and announces the release only when
    /// it was there. A release nobody waits for publishes nothing.
    pub const WAITING_SUFFIX: &str = " waiting";

    /// The key is one of the agent's bookkeeping keys under `key_prefix`,
    /// not a lock: on a single server, or on a cluster with its slot's hash
    /// tag after the suffix (see [`slot_key`]).
    pub fn is_bookkeeping(key_prefix: &str, key: &str) -> bool {
        key.strip_prefix(key_prefix).is_some_and(|rest| {
            if rest.starts_with(WAITING_SUFFIX) {
                return true;
            }
            let rest = strip_slot_tag(rest);
            rest == MARKER_SUFFIX || rest == FENCE_SUFFIX || rest.ends_with(WITNESS_SUFFIX)
        })
    }

    /// Hash slots of a Redis Cluster.
    pub const SLOTS: u16 = 16384;

    /// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag
    /// (the text between the first `{` and the next `}`, when not empty) or
    /// of the whole key, modulo 16384.
    pub fn key_slot(key: &[u8]) -> u16 {
        crc16::State::<crc16::XMODEM>::calculate(hash_tag(key)) % SLOTS
    }

    fn hash_tag(key: &[u8]) -> &[u8] {
        if let Some(open) = key.iter().position(|b| *b == b'{') {
            if let Some(len) = key[open + 1..].iter().position(|b| *b == b'}') {
                if len > 0 {
                    return &key[open + 1..open + 1 + len];
                }
            }
        }
        key
    }

    /// The hash tag that lands in `slot`: the smallest decimal number whose
    /// slot it is. Every agent derives the same table, so the per-slot
    /// bookkeeping keys have one name for all of them.
    pub fn slot_tag(slot: u16) -> &'static str {
        static TAGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
        let tags = TAGS.get_or_init(|| {
            let mut tags = vec![String::new(); usize::from(SLOTS)];
            let mut missing = usize::from(SLOTS);
            let mut n: u64 = 0;
            while missing > 0 {
                let text = n.to_string();
                let slot = usize::from(key_slot(text.as_bytes()));
                if tags[slot].is_empty() {
                    tags[slot] = text;
                    missing -= 1;
                }
                n += 1;
            }
            tags
        });
        &tags[usize::from(slot % SLOTS)]
    }

    /// A bookkeeping key (`<key_prefix><suffix>`) for the cluster slot
    /// `slot`: the same name followed by ` {<tag>}`, so the key lives in that
    /// slot beside the locks it guards. A script's keys must share a slot;
    /// every vote reads its slot's marker and counter in the same script.
    pub fn slot_key(key: &str, slot: u16) -> String {
        format!("{key} {{{}}}", slot_tag(slot))
    }

    /// The waiting flag of `lock_key` (`<key_prefix><resource>`):
    /// `<key_prefix> waiting {<tag>} <resource>`, with the tag of the lock
    /// key's own slot, so on a cluster the flag lives in the lock's slot and
    /// one script can write both.
    pub fn waiting_key(key_prefix: &str, lock_key: &str) -> String {
        let resource = lock_key.strip_prefix(key_prefix).unwrap_or(lock_key);
        let tag = slot_tag(key_slot(lock_key.as_bytes()));
        format!("{key_prefix}{WAITING_SUFFIX} {{{tag}}} {resource}")
    }

    /// `rest` without a trailing ` {<tag>}`.
    fn strip_slot_tag(rest: &str) -> &str {
        match rest.strip_suffix('}').and_then(|r| r.rsplit_once(" {")) {
            Some((head, tag)) if !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_digit()) => head,
            _ => rest,
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn slots_match_redis_cluster() {
            // Values from `CLUSTER KEYSLOT` on Redis 7.
            assert_eq!(key_slot(b"foo"), 12182);
            assert_eq!(key_slot(b"bar"), 5061);
            assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
            assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
            assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        }

        #[test]
        fn every_slot_has_a_tag_that_lands_in_it() {
            for slot in 0..SLOTS {
                let key = slot_key("redlock: incarnation", slot);
                assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
            }
        }

        #[test]
        fn slot_keys_are_bookkeeping_and_locks_are_not() {
            let p = "redlock:";
            assert!(is_bookkeeping(p, &slot_key("redlock: incarnation", 7)));
            assert!(is_bookkeeping(p, &slot_key("redlock: fence", 16383)));
            assert!(is_bookkeeping(
                p,
                &slot_key("redlock:0123 quarantine witness", 9)
            ));
            assert!(is_bookkeeping(p, "redlock: fence"));
            assert!(!is_bookkeeping(p, "redlock:jobs {42}"));
            assert!(!is_bookkeeping(p, "redlock:{42}"));
        }

        #[test]
        fn a_waiting_flag_lives_in_its_locks_slot_and_is_bookkeeping() {
            let p = "redlock:";
            for resource in ["jobs", "a{b", "{user7}.orders", "x}y{", "{}z"] {
                let lock = format!("{p}{resource}");
                let flag = waiting_key(p, &lock);
                assert_eq!(
                    key_slot(flag.as_bytes()),
                    key_slot(lock.as_bytes()),
                    "{flag}"
                );
                assert!(is_bookkeeping(p, &flag), "{flag}");
                assert!(flag.ends_with(resource), "{flag}");
            }
        }
    }
}
