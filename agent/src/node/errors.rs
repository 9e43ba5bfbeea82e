//! How a master's errors are sorted into the engine's [`NodeError`]s,
//! and which of them cost the node its connection.

use std::time::Duration;

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::redlock::master::NodeError;

/// Errors after which the connection is not worth keeping.
pub(super) fn drops_connection(error: &NodeError) -> bool {
    matches!(error, NodeError::Connection(_) | NodeError::Auth(_))
}

/// Sorts a redis error into the engine's [`NodeError`].
pub(super) fn classify(e: &RedisError) -> NodeError {
    if e.is_timeout() {
        return NodeError::Timeout(Duration::ZERO);
    }
    if e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal() {
        return NodeError::Connection(e.to_string());
    }
    match e.kind() {
        ErrorKind::AuthenticationFailed => NodeError::Auth(e.to_string()),
        ErrorKind::Server(ServerErrorKind::NoPerm) => NodeError::NoPerm(e.to_string()),
        ErrorKind::Server(ServerErrorKind::ReadOnly) => NodeError::ReadOnly,
        ErrorKind::Server(ServerErrorKind::NoScript) => NodeError::Script(e.to_string()),
        _ => match e.code() {
            Some("OOM") => NodeError::OutOfMemory,
            Some("WRONGTYPE") => NodeError::WrongType,
            Some("NOAUTH") | Some("WRONGPASS") => NodeError::Auth(e.to_string()),
            Some("READONLY") => NodeError::ReadOnly,
            _ => classify_text(&e.to_string()),
        },
    }
}

/// What the agent says of a master listed as a single server (`url`) that
/// is a Redis Cluster node, with what showed it (`cluster_enabled:1`, or
/// the answer it gave): in `/v1/nodes` (its error and warnings), the logs
/// and `check`.
pub fn cluster_node_as_server(evidence: &str) -> String {
    format!(
        "it is a Redis Cluster node ({evidence}), listed as a single server (url): list the \
         cluster's nodes under cluster: instead (see docs/redis-cluster.md), so each lock goes \
         to the shard of its slot"
    )
}

/// The code of an answer only a Redis Cluster node gives: a key served by
/// another node (`MOVED`, `ASK`), keys of several slots in one call
/// (`CROSSSLOT`), or a cluster without all its slots (`CLUSTERDOWN`).
pub(super) fn cluster_only(e: &RedisError) -> Option<&'static str> {
    match e.kind() {
        ErrorKind::Server(ServerErrorKind::Moved) => Some("MOVED"),
        ErrorKind::Server(ServerErrorKind::Ask) => Some("ASK"),
        ErrorKind::Server(ServerErrorKind::CrossSlot) => Some("CROSSSLOT"),
        ErrorKind::Server(ServerErrorKind::ClusterDown) => Some("CLUSTERDOWN"),
        _ => match e.code() {
            Some("MOVED") => Some("MOVED"),
            Some("ASK") => Some("ASK"),
            Some("CROSSSLOT") => Some("CROSSSLOT"),
            Some("CLUSTERDOWN") => Some("CLUSTERDOWN"),
            _ => None,
        },
    }
}

/// Sorts an error's text: a script's error wraps the failed command's
/// (`WRONGTYPE ...`, `OOM ...`, `READONLY ...`).
pub(super) fn classify_text(text: &str) -> NodeError {
    if text.contains("WRONGTYPE") {
        NodeError::WrongType
    } else if text.contains("OOM") {
        NodeError::OutOfMemory
    } else if text.contains("READONLY") {
        NodeError::ReadOnly
    } else if text.contains("NOPERM") {
        NodeError::NoPerm(text.to_string())
    } else {
        NodeError::Other(text.to_string())
    }
}
