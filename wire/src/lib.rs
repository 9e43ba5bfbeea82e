//! Wire types of the redlock-agent socket API.
//!
//! These are the JSON bodies the agent reads and writes on its Unix socket.
//! They live in their own crate so clients (the TUI, tests, benchmarks) can
//! speak the API without pulling in the server. Field names are a contract:
//! add fields, never rename them.

use serde::{Deserialize, Serialize};

pub mod fields;
pub mod keys;

/// Declares a request body that takes a lock: the fields every such
/// request shares, written here once for the wire, the server and the Rust
/// client, then the request's own. Each is a flat JSON object that refuses
/// unknown fields (serde's `flatten` cannot do both).
macro_rules! lock_request {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct $name {
            /// The lock's TTL; the agent's `lock.default_ttl` when absent.
            #[serde(
                default,
                deserialize_with = "crate::fields::optional_whole",
                skip_serializing_if = "Option::is_none"
            )]
            pub ttl_ms: Option<u64>,
            /// How long the agent may keep trying; 0 or absent means one attempt.
            #[serde(
                default,
                deserialize_with = "crate::fields::optional_whole",
                skip_serializing_if = "Option::is_none"
            )]
            pub wait_ms: Option<u64>,
            /// A label stored beside the token so operators can see who holds a lock.
            #[serde(default, skip_serializing_if = "Option::is_none")]
            pub owner: Option<String>,
            /// Ask for a fencing token: the answer carries `fence`, a number minted
            /// by the same quorum that grants the lock, larger than the fence of
            /// every earlier grant of any lock on these masters. Always on when the
            /// agent's `lock.fence` is `always`.
            #[serde(
                default,
                deserialize_with = "crate::fields::null_as_default",
                skip_serializing_if = "std::ops::Not::not"
            )]
            pub fence: bool,
            $($(#[$field_meta])* pub $field: $ty,)*
        }

        impl $name {
            /// The fields every request that takes a lock shares, as an
            /// `acquire` body (without an acquire's own, `token`).
            pub fn lock(&self) -> $crate::AcquireRequest {
                $crate::AcquireRequest {
                    ttl_ms: self.ttl_ms,
                    wait_ms: self.wait_ms,
                    owner: self.owner.clone(),
                    fence: self.fence,
                    ..$crate::AcquireRequest::default()
                }
            }

            /// This request with `lock`'s shared fields and defaults for
            /// its own.
            // The update is needless only for a request with no fields of
            // its own (`acquire`).
            #[allow(clippy::needless_update)]
            pub fn with_lock(lock: $crate::AcquireRequest) -> $name {
                $name {
                    ttl_ms: lock.ttl_ms,
                    wait_ms: lock.wait_ms,
                    owner: lock.owner,
                    fence: lock.fence,
                    ..$name::default()
                }
            }
        }
    };
}

pub mod election;
pub mod multi;
pub mod semaphore;
pub mod shared;

pub use election::{CampaignEvent, CampaignRequest, Leader, ObserveEvent};
pub use multi::{
    MultiAcquireRequest, MultiAcquireResponse, MultiExtendRequest, MultiHoldRequest,
    MultiReleaseRequest, MAX_RESOURCES,
};
pub use semaphore::{
    PermitExtendRequest, PermitForceReleaseRequest, PermitHoldRequest, PermitInfo,
    PermitReleaseRequest, PermitRequest, PermitResponse, SemaphoreResponse,
};
pub use shared::{Mode, Reader};

lock_request! {
    /// Body of `POST /v1/locks/{resource}/acquire`. Every field is optional; an
    /// empty body means "the default TTL, try once, no owner label".
    pub struct AcquireRequest {
        /// Re-enter a lock this process holds: the token of its grant from
        /// this agent. The answer carries the same token (and the first
        /// grant's fence, if it had one), the TTL set again to `ttl_ms` on
        /// the masters, and `hold_count`; each release lowers the count, and
        /// the lock is released on the masters only when it reaches zero.
        /// Only a connection from the process that acquired the lock (the
        /// same peer pid) may re-enter it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub token: Option<String>,
        /// `shared` (a reader: any number at once) or `exclusive` (the
        /// default: one holder).
        #[serde(
            default,
            deserialize_with = "fields::null_as_default",
            skip_serializing_if = "Mode::is_exclusive"
        )]
        pub mode: Mode,
    }
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
    /// How many times the lock is held after a re-entry (`token` in the
    /// request): releases it takes before the lock is released on the
    /// masters. Absent for a first acquire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_count: Option<u32>,
    /// `shared` for a reader's grant; absent for an exclusive one.
    #[serde(default, skip_serializing_if = "Mode::is_exclusive")]
    pub mode: Mode,
}

/// Body of `POST /v1/locks/{resource}/extend`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtendRequest {
    pub token: String,
    #[serde(
        default,
        deserialize_with = "fields::optional_whole",
        skip_serializing_if = "Option::is_none"
    )]
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
    /// False with `hold_count`: the lock was re-entered and is still held.
    pub released: bool,
    /// A release of a re-entered lock that lowered its count without
    /// releasing it: the releases it still takes. The lock is still held on
    /// the masters, with its token and TTL unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_count: Option<u32>,
}

lock_request! {
    /// Body of `POST /v1/locks/{resource}/hold`: a lock tied to this connection.
    pub struct HoldRequest {
        /// Re-enter a lock this process holds (as an acquire's `token`) for
        /// as long as this hold lasts: the agent renews it, and closing the
        /// hold lowers its count as a release does (the lock is released on
        /// the masters only if that was the last). `on_disconnect` must be
        /// `release`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub token: Option<String>,
        /// `shared` (a reader: any number at once) or `exclusive` (the
        /// default: one holder).
        #[serde(
            default,
            deserialize_with = "fields::null_as_default",
            skip_serializing_if = "Mode::is_exclusive"
        )]
        pub mode: Mode,
        /// Ends the hold with `lost` (reason `max_hold`) after this long;
        /// defaults to `lock.max_hold`.
        #[serde(
            default,
            deserialize_with = "fields::optional_whole",
            skip_serializing_if = "Option::is_none"
        )]
        pub max_hold_ms: Option<u64>,
        /// What happens to the lock when the client's connection closes
        /// without a release: `release` (the default) deletes it on every
        /// master at once; `expire` leaves it to expire on its own, so writes a
        /// vanished client still had in flight land before anyone else can
        /// hold the lock (for storage that cannot check a fence).
        #[serde(
            default,
            deserialize_with = "fields::null_as_default",
            skip_serializing_if = "OnDisconnect::is_release"
        )]
        pub on_disconnect: OnDisconnect,
    }
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
        /// A semaphore's hold: which permit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        permit: Option<u32>,
        /// A hold that re-entered a lock (`token` in the request): the
        /// count of acquires its releases must undo, this hold's included.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hold_count: Option<u32>,
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
    /// The UID of that process's pod, read from its cgroup when it
    /// connected, and its container's ID; only from an agent that keeps
    /// tokens to their pods (`socket.isolate: pod`), for locks held
    /// through it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    /// This agent's requests waiting for this resource.
    pub waiters: u64,
    /// The trace (32 hex digits) of the request that took the grant, when
    /// it was traced (`tracing.otlp_endpoint`); only for locks held
    /// through this agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// A lock on several resources held through this agent: every
    /// resource of that grant, sorted, this one among them (empty
    /// otherwise).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held_with: Vec<String>,
    /// `shared` when readers hold it (absent for an exclusive holder);
    /// then `readers` names them, and `owner` and `agent` are absent.
    #[serde(default, skip_serializing_if = "Mode::is_exclusive")]
    pub mode: Mode,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub readers: Vec<Reader>,
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

/// 200 answer to `POST /v1/locks/{resource}/force-release`, and to the
/// force release of a permit (`/v1/semaphores/{name}/force-release`) or of
/// a leadership (`/v1/elections/{name}/force-release`).
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
    /// Semaphore permits granted through this agent and still valid.
    #[serde(default)]
    pub permits_held: u64,
    /// Shared locks' readers granted through this agent and still valid
    /// (not in `locks_held`).
    #[serde(default)]
    pub readers_held: u64,
    /// Elections led by this agent's campaigners now.
    #[serde(default)]
    pub leaderships_held: u64,
    /// This agent's leaderships by event (`elected`, `resigned`, `lost`).
    #[serde(default)]
    pub leadership_changes: std::collections::BTreeMap<String, u64>,
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

/// 200 answer to `GET /v1/leaks`: the fleet's last leak scan. One agent
/// of all those with the same `lock.key_prefix` on the same masters scans
/// (the one holding the fleet's scan lock) and writes this report on every
/// master; the others answer the freshest copy they read, saying whose it
/// is and how old. The same type is the copy written on the masters, where
/// the fields of the answering agent's view (`age_ms`, `stale`,
/// `scanning`, `copies_unread`) are absent.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaksResponse {
    /// Scans so far by the fleet's scanners, each continuing from its
    /// predecessor's count; 0 until the first one ends (then `nodes` is
    /// empty).
    pub scans: u64,
    /// The scanner's `leak_scan.interval`.
    pub interval_ms: u64,
    /// `none` or `expire`: the scanner's `leak_scan.repair`.
    pub repair: String,
    pub nodes: Vec<NodeLeaks>,
    /// Masters the last scan could not read (their `error` says why), or
    /// every master before the first scan ends.
    #[serde(default)]
    pub unread: Vec<String>,
    /// The report does not cover every master: `unread` is not empty.
    #[serde(default)]
    pub partial: bool,
    /// `agent.name` of the agent that made this scan (the holder of the
    /// fleet's scan lock). Absent before the first scan, and from agents
    /// that predate the fleet scan (each scanned for itself).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scanner: Option<String>,
    /// The scanner's fence: that of its grant of the scan lock. A scanner
    /// that took over later has a higher one; the masters refuse the
    /// repairs and reports of a lower one than they have seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
    /// Unix time in ms when the scan ended, by the scanner's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scanned_at_ms: Option<u64>,
    /// Unix time in ms of the fleet's last scan that reached every master
    /// it could (what `redlock_leak_scan_last_success_timestamp_seconds`
    /// says); absent before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_success_ms: Option<u64>,
    /// How old the report was when the answering agent sent it: its clock
    /// minus `scanned_at_ms` (0 when its clock is behind the scanner's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age_ms: Option<u64>,
    /// The report is older than the fleet's scans should ever let it be
    /// (three intervals and the scan's own duration): no agent has scanned
    /// since, or this agent cannot read the newer copies.
    #[serde(default)]
    pub stale: bool,
    /// The answering agent made this scan itself: it holds the scan lock.
    #[serde(default)]
    pub scanning: bool,
    /// Masters from which the answering agent could not read the report's
    /// copy at its last look: a fresher copy may be there.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub copies_unread: Vec<String>,
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
    /// The caller's uid already has `lock.max_streams_per_uid` streams
    /// (holds, campaigns, observers) open on this agent.
    TooManyStreams,
    /// The request did not arrive in full within `socket.request_timeout`.
    RequestTimeout,
    /// The peer may not use this socket or this route on it (`socket.allow_uids`,
    /// `admin.allow_uids`, force-release off the admin socket), or re-enter
    /// a lock another process acquired.
    Forbidden,
    /// A re-entry (`token` in an acquire) whose token is not this agent's
    /// current grant of the lock: unknown here, run out, released, or
    /// acquired through another agent.
    NotReentrant,
    /// Too many operator listings at once; retry after `Retry-After`.
    Busy,
    /// A semaphore request whose `limit` is not the semaphore's while
    /// permits are held.
    LimitMismatch,
    /// `GET /v1/elections/{name}`: no campaigner leads now.
    NoLeader,
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
            ErrorCode::TooManyStreams => "too_many_streams",
            ErrorCode::RequestTimeout => "request_timeout",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotReentrant => "not_reentrant",
            ErrorCode::Busy => "busy",
            ErrorCode::LimitMismatch => "limit_mismatch",
            ErrorCode::NoLeader => "no_leader",
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
            ErrorCode::TooManyStreams,
            ErrorCode::RequestTimeout,
            ErrorCode::Forbidden,
            ErrorCode::NotReentrant,
            ErrorCode::Busy,
            ErrorCode::LimitMismatch,
            ErrorCode::NoLeader,
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
