//! Wire types of locks on several resources at once:
//! `POST /v1/locks/{acquire,hold,extend,release}` with the resources in the
//! body. One request names 2 to [`MAX_RESOURCES`] resources and gets one
//! token for all of them, or nothing; the token extends and releases them
//! all.

use serde::{Deserialize, Serialize};

use crate::OnDisconnect;

/// The most resources one request may name: every round of a waiter votes
/// on each of them on every master.
pub const MAX_RESOURCES: usize = 32;

lock_request! {
    /// Body of `POST /v1/locks/acquire`: every resource named, or none.
    pub struct MultiAcquireRequest {
        /// 2 to [`MAX_RESOURCES`] distinct resources, in any order (the
        /// agent sorts them).
        pub resources: Vec<String>,
    }
}

lock_request! {
    /// Body of `POST /v1/locks/hold`: every resource named, tied to this
    /// connection and renewed until it closes (as a lock's hold).
    pub struct MultiHoldRequest {
        /// As in [`MultiAcquireRequest::resources`].
        pub resources: Vec<String>,
        /// As in a lock's hold.
        #[serde(
            default,
            deserialize_with = "crate::fields::optional_whole",
            skip_serializing_if = "Option::is_none"
        )]
        pub max_hold_ms: Option<u64>,
        /// As in a lock's hold: `release` deletes every resource's key when
        /// the connection closes, `expire` leaves them to expire.
        #[serde(
            default,
            deserialize_with = "crate::fields::null_as_default",
            skip_serializing_if = "OnDisconnect::is_release"
        )]
        pub on_disconnect: OnDisconnect,
    }
}

/// 200 answer to `POST /v1/locks/acquire`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MultiAcquireResponse {
    /// The resources held, sorted.
    pub resources: Vec<String>,
    /// Opaque; the only proof of holding them. Extends and releases all.
    pub token: String,
    /// How long every resource is safe to use, counted from the answer.
    pub validity_ms: u64,
    pub ttl_ms: u64,
    /// The fencing token, when asked for or always on: one number for every
    /// resource, larger than every earlier grant's fence of each of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
}

/// Body of `POST /v1/locks/extend` (answered with an
/// [`crate::ExtendResponse`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultiExtendRequest {
    pub token: String,
    #[serde(
        default,
        deserialize_with = "crate::fields::optional_whole",
        skip_serializing_if = "Option::is_none"
    )]
    pub ttl_ms: Option<u64>,
    /// The resources of the grant: needed only through an agent that did
    /// not grant it (the token alone names them on the agent that did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
}

/// Body of `POST /v1/locks/release` (answered with a
/// [`crate::ReleaseResponse`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MultiReleaseRequest {
    pub token: String,
    /// As in [`MultiExtendRequest::resources`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_acquire_needs_its_resources_and_refuses_unknown_fields() {
        let parsed: MultiAcquireRequest =
            serde_json::from_str(r#"{"resources": ["a", "b"], "ttl_ms": 5000, "fence": true}"#)
                .unwrap();
        assert_eq!(parsed.resources, ["a", "b"]);
        assert_eq!(parsed.ttl_ms, Some(5000));
        assert!(parsed.fence);
        let missing = serde_json::from_str::<MultiAcquireRequest>(r#"{"ttl_ms": 5000}"#)
            .unwrap_err()
            .to_string();
        assert!(missing.contains("resources"), "{missing}");
        assert!(serde_json::from_str::<MultiAcquireRequest>(
            r#"{"resources": ["a", "b"], "token": "t"}"#
        )
        .is_err());
    }

    #[test]
    fn extend_and_release_take_the_token_and_may_name_the_resources() {
        let release: MultiReleaseRequest = serde_json::from_str(r#"{"token": "t"}"#).unwrap();
        assert_eq!(release.resources, None);
        let extend: MultiExtendRequest =
            serde_json::from_str(r#"{"token": "t", "ttl_ms": 100, "resources": ["a", "b"]}"#)
                .unwrap();
        assert_eq!(
            extend.resources.as_deref(),
            Some(&["a".to_string(), "b".to_string()][..])
        );
    }
}
