//! `agent/openapi.yaml` against the wire crate: it parses as OpenAPI 3.1,
//! its schemas are JSON Schema 2020-12, it lists every error code the wire
//! crate has, and real wire values validate against their schemas. The
//! document against the agent, and the document a running agent serves,
//! are in `openapi_agent.rs`.

// The shared helpers this test binary uses, from `tests/common/`.
mod common {
    pub mod document;
}

use std::collections::BTreeSet;

use faults::openapi::Spec;
use redlock_wire::*;
use serde_json::{json, Value};

use common::document::spec;

/// Every `ErrorCode`; a new variant fails to compile here until it is
/// listed, and then this test until the document lists it too.
fn every_code() -> Vec<ErrorCode> {
    use ErrorCode::*;
    let all = vec![
        Taken,
        NoQuorum,
        Lost,
        InvalidRequest,
        InvalidResource,
        TtlOutOfRange,
        BodyTooLarge,
        NotFound,
        MethodNotAllowed,
        ShuttingDown,
        TooManyConnections,
        TooManyWaiters,
        TooManyStreams,
        RequestTimeout,
        Forbidden,
        NotReentrant,
        Busy,
        LimitMismatch,
        NoLeader,
        Internal,
    ];
    for code in &all {
        match code {
            Taken | NoQuorum | Lost | InvalidRequest | InvalidResource | TtlOutOfRange
            | BodyTooLarge | NotFound | MethodNotAllowed | ShuttingDown | TooManyConnections
            | TooManyWaiters | TooManyStreams | RequestTimeout | Forbidden | NotReentrant
            | Busy | LimitMismatch | NoLeader | Internal => {}
        }
    }
    all
}

/// The document's error codes are exactly the wire crate's.
#[test]
fn the_document_lists_every_error_code() {
    let s = spec();
    let listed: BTreeSet<String> = s.doc()["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .expect("ErrorCode enum")
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let wire: BTreeSet<String> = every_code()
        .iter()
        .map(|c| c.as_str().to_string())
        .collect();
    assert_eq!(listed, wire);
}

fn check(s: &Spec, name: &str, value: impl serde::Serialize) {
    let value: Value = serde_json::to_value(value).unwrap();
    s.validate_component(name, &value)
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

/// Values of every wire type, all optional fields set, validate against
/// their schemas (which refuse undocumented fields): the document does
/// not lag behind the code.
#[test]
fn wire_values_match_their_schemas() {
    let s = spec();
    let token = "rl2-0123456789abcdef0123456789abcdef01234567-0123456789abcdef@pod-0.billing";
    check(
        &s,
        "AcquireRequest",
        AcquireRequest {
            ttl_ms: Some(1),
            wait_ms: Some(0),
            owner: Some("o".into()),
            fence: true,
            token: Some(token.into()),
            mode: Mode::Shared,
        },
    );
    check(
        &s,
        "AcquireResponse",
        AcquireResponse {
            resource: "r".into(),
            token: token.into(),
            validity_ms: 9,
            ttl_ms: 10,
            fence: Some(1_732_300_000_000_000),
            hold_count: Some(2),
            mode: Mode::Shared,
        },
    );
    check(
        &s,
        "ExtendRequest",
        ExtendRequest {
            token: token.into(),
            ttl_ms: Some(5),
        },
    );
    check(
        &s,
        "ExtendResponse",
        ExtendResponse {
            validity_ms: 1,
            ttl_ms: 2,
        },
    );
    check(
        &s,
        "ReleaseRequest",
        ReleaseRequest {
            token: token.into(),
        },
    );
    check(
        &s,
        "ReleaseResponse",
        ReleaseResponse {
            released: false,
            hold_count: Some(1),
        },
    );
    check(
        &s,
        "HoldRequest",
        HoldRequest {
            ttl_ms: Some(1),
            wait_ms: Some(2),
            owner: Some("o".into()),
            max_hold_ms: Some(3),
            fence: true,
            on_disconnect: redlock_wire::OnDisconnect::Expire,
            token: None,
            mode: Mode::Shared,
        },
    );
    check(
        &s,
        "HoldRequest",
        HoldRequest {
            token: Some(token.into()),
            max_hold_ms: Some(3),
            ..HoldRequest::default()
        },
    );
    // A re-entering hold lowers a count when it closes: it cannot expire.
    let reentering_expire = HoldRequest {
        token: Some(token.into()),
        on_disconnect: redlock_wire::OnDisconnect::Expire,
        ..HoldRequest::default()
    };
    let reentering_expire = serde_json::to_value(reentering_expire).unwrap();
    assert!(s
        .validate_component("HoldRequest", &reentering_expire)
        .is_err());
    check(
        &s,
        "HoldEvent",
        HoldEvent::Acquired {
            token: token.into(),
            validity_ms: 1,
            ttl_ms: 2,
            fence: Some(7),
            permit: None,
            hold_count: None,
        },
    );
    check(
        &s,
        "HoldEvent",
        HoldEvent::Acquired {
            token: token.into(),
            validity_ms: 1,
            ttl_ms: 2,
            fence: Some(7),
            permit: Some(3),
            hold_count: None,
        },
    );
    check(
        &s,
        "HoldEvent",
        HoldEvent::Acquired {
            token: token.into(),
            validity_ms: 1,
            ttl_ms: 2,
            fence: None,
            permit: None,
            hold_count: Some(2),
        },
    );
    check(&s, "HoldEvent", HoldEvent::Renewed { validity_ms: 1 });
    for reason in [
        "renew_failed",
        "no_quorum",
        "max_hold",
        "shutdown",
        "force_released",
        "node_lost",
    ] {
        check(
            &s,
            "HoldEvent",
            HoldEvent::Lost {
                reason: reason.into(),
            },
        );
    }
    check(
        &s,
        "ForceReleaseResponse",
        ForceReleaseResponse {
            deleted: 5,
            failed: vec!["r1".into()],
        },
    );
    check(
        &s,
        "NodesResponse",
        NodesResponse {
            quorum: 3,
            usable: 4,
            available: false,
            reason: Some("r".into()),
            slots_without_quorum: 7,
            nodes: vec![NodeStatus {
                name: "r1".into(),
                state: NodeState::Quarantined,
                latency_ms: Some(0.2),
                last_error: Some("x".into()),
                quarantine_remaining_ms: 5,
                quarantine_ms: 10,
                detector: Some("run_id".into()),
                run_id: Some("abc".into()),
                uptime_s: Some(3),
                persistence: Some("none".into()),
                warnings: vec!["w".into()],
                kind: "single".into(),
                quarantined_slots: 0,
                quarantined_slots_remaining_ms: 0,
                shards: Vec::new(),
            }],
        },
    );
    check(
        &s,
        "LocksResponse",
        LocksResponse {
            quorum: 3,
            masters: vec!["r1".into()],
            locks: vec![LockInfo {
                resource: "r".into(),
                owner: Some("o".into()),
                validity_ms: Some(5),
                nodes: vec![NodeKey {
                    node: "r1".into(),
                    state: "held".into(),
                    pttl_ms: Some(4),
                }],
                quorum_agrees: true,
                held_here: true,
                waiters: 2,
                agent: Some("pod-0".into()),
                pid: Some(42),
                uid: Some(1000),
                gid: Some(1000),
                pod: Some("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into()),
                container: Some("4a3b2c1d".repeat(8)),
                trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
                held_with: Vec::new(),
                mode: Mode::Exclusive,
                readers: Vec::new(),
            }],
            truncated: true,
            next_cursor: Some("r".into()),
            total: 7,
            scanned: 35,
            unread: vec!["r2".into()],
            partial: true,
        },
    );
    check(
        &s,
        "LockResponse",
        LockResponse {
            quorum: 3,
            masters: vec!["r1".into()],
            lock: LockInfo {
                resource: "r".into(),
                owner: None,
                validity_ms: None,
                nodes: vec![NodeKey {
                    node: "r1".into(),
                    state: "unknown".into(),
                    pttl_ms: None,
                }],
                quorum_agrees: false,
                held_here: false,
                waiters: 0,
                agent: None,
                pid: None,
                uid: None,
                gid: None,
                pod: None,
                container: None,
                trace_id: None,
                held_with: vec!["a".into(), "b".into()],
                mode: Mode::Shared,
                readers: vec![Reader {
                    agent: Some("pod-0".into()),
                    owner: Some("o".into()),
                    masters: 3,
                    held_here: true,
                }],
            },
            unread: vec!["r1".into()],
            partial: true,
        },
    );
    check(
        &s,
        "LeaksResponse",
        LeaksResponse {
            scans: 1,
            interval_ms: 30000,
            repair: "none".into(),
            nodes: vec![NodeLeaks {
                node: "r1".into(),
                scanned_at_ms: 1,
                duration_ms: 2,
                keys_scanned: 3,
                error: Some("e".into()),
                no_ttl: 1,
                ttl_over_max: 0,
                minority: 0,
                unproven: 1,
                repaired: 0,
                keys: vec![
                    LeakedKey {
                        resource: "r".into(),
                        kind: "no_ttl".into(),
                        pttl_ms: Some(1),
                    },
                    LeakedKey {
                        resource: "sha".into(),
                        kind: "unproven".into(),
                        pttl_ms: None,
                    },
                ],
            }],
            unread: vec!["r1".into()],
            partial: true,
            scanner: Some("pod-7".into()),
            fence: Some(1_722_000_000_000_001),
            scanned_at_ms: Some(1_722_000_000_000),
            last_success_ms: Some(1_721_999_990_000),
            age_ms: Some(1_500),
            stale: false,
            scanning: false,
            copies_unread: vec!["r3".into()],
        },
    );
    check(
        &s,
        "SummaryResponse",
        SummaryResponse {
            version: "0.1.0".into(),
            uptime_ms: 5,
            acquires: [("acquired".to_string(), 1)].into_iter().collect(),
            failures: [("taken".to_string(), 2)].into_iter().collect(),
            wait_buckets: vec![(0.5, 1), (f64::MAX, 2)],
            waits: [("taken".to_string(), vec![(0.5, 0), (f64::MAX, 1)])]
                .into_iter()
                .collect(),
            locks_held: 0,
            waiters: 0,
            permits_held: 2,
            readers_held: 3,
            leaderships_held: 1,
            leadership_changes: [("elected".to_string(), 3)].into_iter().collect(),
        },
    );
    for code in every_code() {
        check(
            &s,
            "ErrorResponse",
            ErrorResponse {
                error: ErrorBody {
                    code,
                    message: "m".into(),
                },
            },
        );
    }
    check(
        &s,
        "MultiAcquireRequest",
        MultiAcquireRequest {
            resources: vec!["a".into(), "b".into()],
            ttl_ms: Some(1),
            wait_ms: Some(2),
            owner: Some("o".into()),
            fence: true,
        },
    );
    check(
        &s,
        "MultiAcquireResponse",
        MultiAcquireResponse {
            resources: vec!["a".into(), "b".into()],
            token: "t".into(),
            validity_ms: 9,
            ttl_ms: 10,
            fence: Some(7),
        },
    );
    check(
        &s,
        "PermitRequest",
        PermitRequest {
            limit: 3,
            ttl_ms: Some(1),
            wait_ms: Some(2),
            owner: Some("o".into()),
            fence: true,
        },
    );
    check(
        &s,
        "PermitHoldRequest",
        PermitHoldRequest {
            limit: 3,
            ttl_ms: Some(1),
            wait_ms: Some(2),
            owner: Some("o".into()),
            fence: true,
            max_hold_ms: Some(3),
            on_disconnect: OnDisconnect::Expire,
        },
    );
    check(
        &s,
        "PermitResponse",
        PermitResponse {
            semaphore: "s".into(),
            permit: 2,
            token: token.into(),
            validity_ms: 9,
            ttl_ms: 10,
            fence: Some(11),
        },
    );
    check(
        &s,
        "PermitExtendRequest",
        PermitExtendRequest {
            permit: Some(2),
            token: token.into(),
            ttl_ms: Some(5),
        },
    );
    check(
        &s,
        "PermitReleaseRequest",
        PermitReleaseRequest {
            permit: Some(2),
            token: token.into(),
        },
    );
    check(
        &s,
        "PermitForceReleaseRequest",
        PermitForceReleaseRequest { permit: 2 },
    );
    check(
        &s,
        "SemaphoreResponse",
        SemaphoreResponse {
            semaphore: "s".into(),
            limit: Some(3),
            permits: vec![PermitInfo {
                permit: 1,
                agent: Some("pod-0".into()),
                owner: Some("o".into()),
                validity_ms: 5,
                held_here: true,
                pid: Some(42),
                uid: Some(1000),
            }],
            waiters: 2,
            unread: vec!["r1".into()],
            partial: true,
        },
    );
    check(
        &s,
        "CampaignRequest",
        CampaignRequest {
            ttl_ms: Some(1),
            owner: Some("o".into()),
            value: Some("10.0.0.7:8080".into()),
            max_hold_ms: Some(2),
        },
    );
    let leader = Leader {
        election: "e".into(),
        agent: Some("pod-0".into()),
        owner: Some("o".into()),
        value: Some("v".into()),
        pid: Some(42),
        uid: Some(1000),
        term: Some(7),
        since_ms: Some(1_722_000_000_000),
        validity_ms: 900,
    };
    check(&s, "Leader", &leader);
    for event in [
        CampaignEvent::Waiting {
            leader: Some(leader.clone()),
        },
        CampaignEvent::Waiting { leader: None },
        CampaignEvent::Elected {
            term: 8,
            validity_ms: 1,
            ttl_ms: 2,
        },
        CampaignEvent::Renewed { validity_ms: 1 },
        CampaignEvent::Lost {
            reason: "max_hold".into(),
        },
        CampaignEvent::Lost {
            reason: "too_many_waiters".into(),
        },
    ] {
        check(&s, "CampaignEvent", event);
    }
    check(&s, "ObserveEvent", ObserveEvent::Leader(leader));
    check(
        &s,
        "ObserveEvent",
        ObserveEvent::NoLeader {
            election: "e".into(),
        },
    );
    check(&s, "Health", json!({"status": "ok"}));
    check(
        &s,
        "Ready",
        json!({"ready": false, "usable": 2, "quorum": 3, "slots_without_quorum": 16384, "reason": "r"}),
    );
    // And the strictness is real.
    assert!(s
        .validate_component("ReleaseResponse", &json!({"released": true, "extra": 1}))
        .is_err());
}
