//! Wire types of semaphores: `/v1/semaphores/{name}/...`. A semaphore is
//! `limit` permits, each an ordinary lock of its own (a Redlock grant with
//! its own token, TTL and fence), taken in line as locks are.

use serde::{Deserialize, Serialize};

use crate::OnDisconnect;

/// The largest `limit` a semaphore may have: each round of a waiter reads
/// every permit's key on every master.
pub const MAX_PERMITS: u32 = 256;

lock_request! {
    /// Body of `POST /v1/semaphores/{name}/acquire`: one permit of `limit`.
    pub struct PermitRequest {
        /// How many permits the semaphore has, 1 to [`MAX_PERMITS`]. Part of
        /// the semaphore: a request with another limit while permits are
        /// held is refused (`409 limit_mismatch`).
        #[serde(deserialize_with = "crate::fields::whole_u32")]
        pub limit: u32,
    }
}

lock_request! {
    /// Body of `POST /v1/semaphores/{name}/hold`: a permit tied to this
    /// connection, renewed until it closes (as `POST /v1/locks/{resource}/hold`).
    pub struct PermitHoldRequest {
        /// As in [`PermitRequest::limit`].
        #[serde(deserialize_with = "crate::fields::whole_u32")]
        pub limit: u32,
        /// As in a lock's hold.
        #[serde(
            default,
            deserialize_with = "crate::fields::optional_whole",
            skip_serializing_if = "Option::is_none"
        )]
        pub max_hold_ms: Option<u64>,
        /// As in a lock's hold.
        #[serde(
            default,
            deserialize_with = "crate::fields::null_as_default",
            skip_serializing_if = "OnDisconnect::is_release"
        )]
        pub on_disconnect: OnDisconnect,
    }
}

/// 200 answer to a semaphore's `acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitResponse {
    pub semaphore: String,
    /// Which permit, 0 to `limit - 1`: needed with the token to extend and
    /// release it.
    pub permit: u32,
    /// Opaque; the only proof of holding the permit.
    pub token: String,
    /// How long the permit is safe to use, counted from the answer.
    pub validity_ms: u64,
    pub ttl_ms: u64,
    /// The permit's fencing token, when asked for or always on: larger than
    /// the fence of every earlier grant of any lock or permit on these
    /// masters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
}

/// Body of a semaphore's `extend`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermitExtendRequest {
    /// The permit the token holds; when absent the agent finds it from the
    /// token, which names its permit's key (see the agent's tokens).
    #[serde(
        default,
        deserialize_with = "crate::fields::optional_whole_u32",
        skip_serializing_if = "Option::is_none"
    )]
    pub permit: Option<u32>,
    pub token: String,
    #[serde(
        default,
        deserialize_with = "crate::fields::optional_whole",
        skip_serializing_if = "Option::is_none"
    )]
    pub ttl_ms: Option<u64>,
}

/// Body of a semaphore's `release`; the answer is a lock's
/// (`ReleaseResponse`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermitReleaseRequest {
    /// As [`PermitExtendRequest::permit`].
    #[serde(
        default,
        deserialize_with = "crate::fields::optional_whole_u32",
        skip_serializing_if = "Option::is_none"
    )]
    pub permit: Option<u32>,
    pub token: String,
}

/// Body of a semaphore's `force-release` (admin socket only): the permit
/// to delete on every master, whoever holds it; the answer is a lock's
/// (`ForceReleaseResponse`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermitForceReleaseRequest {
    #[serde(deserialize_with = "crate::fields::whole_u32")]
    pub permit: u32,
}

/// One held permit in `GET /v1/semaphores/{name}`: who holds it, never
/// its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermitInfo {
    pub permit: u32,
    /// `agent.name` of the agent that granted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Time until fewer than a quorum of masters hold it.
    pub validity_ms: u64,
    /// Granted through this agent: the requesting process as the kernel
    /// reported it.
    pub held_here: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
}

/// 200 answer to `GET /v1/semaphores/{name}`: the permits a quorum of
/// masters hold, read from every master at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SemaphoreResponse {
    pub semaphore: String,
    /// The semaphore's limit while any permit is held; absent when none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// Held permits, by permit number.
    pub permits: Vec<PermitInfo>,
    /// This agent's requests waiting for a permit.
    pub waiters: u64,
    /// Masters that could not be read: a permit may be missing.
    #[serde(default)]
    pub unread: Vec<String>,
    #[serde(default)]
    pub partial: bool,
}
