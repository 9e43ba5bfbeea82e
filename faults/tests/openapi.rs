//! `agent/openapi.yaml` against the code: it parses as OpenAPI 3.1, its
//! schemas are JSON Schema 2020-12, it lists every error code the wire
//! crate has, and real wire values validate against their schemas.

use std::collections::BTreeSet;

use faults::openapi::{self, Spec};
use redlock_wire::*;
use serde_json::{json, Value};

fn spec() -> Spec {
    Spec::load(&openapi::default_path()).unwrap_or_else(|e| panic!("{e}"))
}

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
        RequestTimeout,
        Forbidden,
        NotReentrant,
        Busy,
        Internal,
    ];
    for code in &all {
        match code {
            Taken | NoQuorum | Lost | InvalidRequest | InvalidResource | TtlOutOfRange
            | BodyTooLarge | NotFound | MethodNotAllowed | ShuttingDown | TooManyConnections
            | TooManyWaiters | RequestTimeout | Forbidden | NotReentrant | Busy | Internal => {}
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
            permit: None,
            hold_count: None,
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

/// Follows one `$ref` within the document.
fn deref<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str().and_then(|r| r.strip_prefix('#')) {
        Some(pointer) => doc.pointer(pointer).unwrap_or(value),
        None => value,
    }
}

/// The property names of an operation's JSON request or response schema.
fn properties(doc: &Value, content: &Value) -> BTreeSet<String> {
    let schema = deref(doc, &content["content"]["application/json"]["schema"]);
    schema["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default()
}

/// Every operation by its operationId.
fn operations(doc: &Value) -> std::collections::BTreeMap<String, Value> {
    let mut out = std::collections::BTreeMap::new();
    for item in doc["paths"].as_object().expect("paths").values() {
        for op in item.as_object().expect("path item").values() {
            if let Some(id) = op["operationId"].as_str() {
                out.insert(id.to_string(), op.clone());
            }
        }
    }
    out
}

fn parameter_names(doc: &Value, op: &Value) -> BTreeSet<String> {
    op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            deref(doc, p)["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// The OpenAPI links (what stateful API testers walk) name real operations,
/// real parameters and real body fields at both ends, and acquire's token
/// leads into extend, release and hold.
#[test]
fn links_name_real_operations_parameters_and_fields() {
    let s = spec();
    let doc = s.doc();
    let ops = operations(doc);
    let mut walked = BTreeSet::new();
    for (source_id, source) in &ops {
        for (status, response) in source["responses"].as_object().expect("responses") {
            let response = deref(doc, response);
            for (name, link) in response["links"].as_object().into_iter().flatten() {
                let at = format!("{source_id} {status} links.{name}");
                let target_id = link["operationId"].as_str().expect("operationId");
                let target = ops
                    .get(target_id)
                    .unwrap_or_else(|| panic!("{at}: no operation {target_id:?}"));
                let expression = |value: &Value| -> String {
                    let e = value.as_str().unwrap_or_else(|| panic!("{at}: {value}"));
                    if let Some(p) = e.strip_prefix("$request.path.") {
                        assert!(
                            parameter_names(doc, source).contains(p),
                            "{at}: {e}: no such parameter"
                        );
                    } else if let Some(field) = e.strip_prefix("$response.body#/") {
                        assert!(
                            properties(doc, response).contains(field),
                            "{at}: {e}: no such response field"
                        );
                    } else if let Some(field) = e.strip_prefix("$request.body#/") {
                        assert!(
                            properties(doc, &source["requestBody"]).contains(field),
                            "{at}: {e}: no such request field"
                        );
                    } else {
                        panic!("{at}: {e}: not a runtime expression this test knows");
                    }
                    e.to_string()
                };
                for (param, value) in link["parameters"].as_object().into_iter().flatten() {
                    assert!(
                        parameter_names(doc, target).contains(param),
                        "{at}: {target_id} has no parameter {param:?}"
                    );
                    expression(value);
                }
                let fields = properties(doc, deref(doc, &target["requestBody"]));
                for (field, value) in link["requestBody"].as_object().into_iter().flatten() {
                    assert!(
                        fields.contains(field),
                        "{at}: {target_id}'s body has no field {field:?}"
                    );
                    if field == "token" {
                        walked.insert(format!("{source_id} -> {target_id}: {}", expression(value)));
                    } else {
                        expression(value);
                    }
                }
                if link["requestBody"].is_null() {
                    walked.insert(format!("{source_id} -> {target_id}"));
                }
            }
        }
    }
    for expected in [
        "acquire -> extend: $response.body#/token",
        "acquire -> release: $response.body#/token",
        "acquire -> hold",
        "extend -> release: $request.body#/token",
    ] {
        assert!(
            walked.contains(expected),
            "missing link {expected}: {walked:?}"
        );
    }
}
