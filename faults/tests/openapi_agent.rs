//! `agent/openapi.yaml` against the agent: its links name real operations,
//! parameters and fields, request bodies are read as their schemas mean
//! them, config bounds are named with their defaults and answers. And the
//! document a running agent serves (`GET /v1/openapi.json`): the file with
//! the agent's own bounds, on both sockets, listing the answers the agent
//! gives while it stops.

// The shared helpers this test binary uses, from `tests/common/`.
mod common {
    pub mod document;
}

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use faults::cluster::{AgentSettings, Cluster};
use faults::http::{request, Conn, Response};
use faults::openapi::Spec;
use redlock_wire::*;
use serde_json::{json, Value};

use common::document::spec;

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

/// How the agent reads a request body: the wire type's serde, as its
/// routes do (`Debug` of the value read, or why it was refused).
type Reader = fn(&Value) -> Result<String, String>;

fn reader<T: serde::de::DeserializeOwned + std::fmt::Debug>(
    body: &Value,
) -> Result<String, String> {
    serde_json::from_value::<T>(body.clone())
        .map(|v| format!("{v:?}"))
        .map_err(|e| e.to_string())
}

/// Every operation with a JSON request body of documented fields, and the
/// wire type the agent reads it with.
fn request_readers() -> Vec<(&'static str, &'static str, Reader)> {
    vec![
        (
            "post",
            "/v1/locks/{resource}/acquire",
            reader::<AcquireRequest>,
        ),
        (
            "post",
            "/v1/locks/{resource}/extend",
            reader::<ExtendRequest>,
        ),
        (
            "post",
            "/v1/locks/{resource}/release",
            reader::<ReleaseRequest>,
        ),
        ("post", "/v1/locks/{resource}/hold", reader::<HoldRequest>),
        (
            "post",
            "/v1/semaphores/{name}/acquire",
            reader::<PermitRequest>,
        ),
        (
            "post",
            "/v1/semaphores/{name}/extend",
            reader::<PermitExtendRequest>,
        ),
        (
            "post",
            "/v1/semaphores/{name}/release",
            reader::<PermitReleaseRequest>,
        ),
        (
            "post",
            "/v1/semaphores/{name}/hold",
            reader::<PermitHoldRequest>,
        ),
        (
            "post",
            "/v1/semaphores/{name}/force-release",
            reader::<PermitForceReleaseRequest>,
        ),
        (
            "post",
            "/v1/elections/{name}/campaign",
            reader::<CampaignRequest>,
        ),
        ("post", "/v1/locks/acquire", reader::<MultiAcquireRequest>),
        ("post", "/v1/locks/hold", reader::<MultiHoldRequest>),
        ("post", "/v1/locks/extend", reader::<MultiExtendRequest>),
        ("post", "/v1/locks/release", reader::<MultiReleaseRequest>),
    ]
}

/// Follows `$ref`s to the schema that says what a property is.
fn resolved<'a>(doc: &'a Value, mut schema: &'a Value) -> &'a Value {
    while let Some(pointer) = schema["$ref"].as_str().and_then(|r| r.strip_prefix('#')) {
        schema = doc.pointer(pointer).expect("$ref resolves");
    }
    schema
}

fn has_type(schema: &Value, name: &str) -> bool {
    match &schema["type"] {
        Value::String(t) => t == name,
        Value::Array(types) => types.iter().any(|t| t == name),
        _ => false,
    }
}

/// A value of the property the document accepts, as a base for the cases.
fn sample(name: &str, schema: &Value) -> Value {
    match name {
        "limit" => json!(2),
        "permit" => json!(1),
        "token" => json!("rl2-0123456789abcdef0123456789abcdef01234567-0123456789abcdef"),
        "owner" => json!("worker-1"),
        "value" => json!("10.0.0.7:8080"),
        "resources" => json!(["stock-a", "stock-b"]),
        "on_disconnect" => json!("expire"),
        "mode" => json!("shared"),
        _ if has_type(schema, "boolean") => json!(true),
        _ if has_type(schema, "integer") => json!(1000),
        _ => panic!("{name}: no sample for {schema}"),
    }
}

/// The three rules the schema-driven fuzzer found broken, for every field
/// of every request body, checked on both sides (the document's schema
/// and the wire type the agent reads the body with): `null` for an
/// optional field is the same body as the field absent, and a required
/// field may not be `null`; an integer written as a whole float
/// (`1000.0`) is the same integer; a fraction is refused.
#[test]
fn request_bodies_are_read_as_their_schemas_mean_them() {
    let s = spec();
    let doc = s.doc();
    let readers = request_readers();
    // No operation with a body of fields is left out.
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let schema = resolved(
                doc,
                &op["requestBody"]["content"]["application/json"]["schema"],
            );
            if schema["properties"]
                .as_object()
                .is_some_and(|p| !p.is_empty())
            {
                assert!(
                    readers.iter().any(|(m, p, _)| m == method && p == path),
                    "{method} {path}: a request body this test does not read"
                );
            }
        }
    }
    let mut checked = 0;
    for (method, path, read) in readers {
        let op = &doc["paths"][path][method];
        assert!(op.is_object(), "{method} {path}: not in the document");
        let schema = resolved(
            doc,
            &op["requestBody"]["content"]["application/json"]["schema"],
        );
        let required: BTreeSet<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let properties = schema["properties"].as_object().expect("properties");
        let mut base = serde_json::Map::new();
        for name in &required {
            base.insert(
                name.to_string(),
                sample(name, resolved(doc, &properties[*name])),
            );
        }
        let base = Value::Object(base);
        let both = |body: &Value| -> (Result<(), String>, Result<String, String>) {
            (s.validate_request(method, path, body), read(body))
        };
        let at = |field: &str, body: &Value| format!("{method} {path} .{field}: {body}");
        let (doc_base, wire_base) = both(&base);
        doc_base.unwrap_or_else(|e| panic!("{}: {e}", at("", &base)));
        let wire_base = wire_base.unwrap_or_else(|e| panic!("{}: {e}", at("", &base)));
        for (name, property) in properties {
            let property = resolved(doc, property);
            let with = |value: Value| {
                let mut body = base.clone();
                body[name.as_str()] = value;
                body
            };
            // null: absent when optional, refused when required.
            let body = with(Value::Null);
            let (by_doc, by_wire) = both(&body);
            if required.contains(name.as_str()) {
                assert!(
                    by_doc.is_err(),
                    "{}: the document takes null",
                    at(name, &body)
                );
                assert!(
                    by_wire.is_err(),
                    "{}: the agent takes null",
                    at(name, &body)
                );
            } else {
                by_doc.unwrap_or_else(|e| panic!("{}: {e}", at(name, &body)));
                assert_eq!(
                    by_wire.unwrap_or_else(|e| panic!("{}: {e}", at(name, &body))),
                    wire_base,
                    "{}: null is not read as absent",
                    at(name, &body)
                );
            }
            // A sample value; then, for integers, a whole float and a fraction.
            let value = sample(name, property);
            let body = with(value.clone());
            let (by_doc, by_wire) = both(&body);
            by_doc.unwrap_or_else(|e| panic!("{}: {e}", at(name, &body)));
            let as_integer = by_wire.unwrap_or_else(|e| panic!("{}: {e}", at(name, &body)));
            if has_type(property, "integer") {
                let n = value.as_u64().expect("an integer sample");
                let body = with(json!(n as f64));
                let (by_doc, by_wire) = both(&body);
                by_doc.unwrap_or_else(|e| panic!("{}: {e}", at(name, &body)));
                assert_eq!(
                    by_wire.unwrap_or_else(|e| panic!("{}: {e}", at(name, &body))),
                    as_integer,
                    "{}: a whole float is not read as its integer",
                    at(name, &body)
                );
                let body = with(json!(n as f64 + 0.5));
                let (by_doc, by_wire) = both(&body);
                assert!(
                    by_doc.is_err(),
                    "{}: the document takes a fraction",
                    at(name, &body)
                );
                assert!(
                    by_wire.is_err(),
                    "{}: the agent takes a fraction",
                    at(name, &body)
                );
            }
            checked += 1;
        }
    }
    eprintln!("request fields checked on both sides: {checked}");
    assert!(checked >= 30, "{checked}");
}

/// The bounds that come from the agent's config are named where the
/// schema cannot state them: each `x-config-minimum`/`x-config-maximum`
/// names a setting, its default and a code the operation's 400 lists.
/// (The agent's config tests check the defaults against its own.)
#[test]
fn config_bounds_are_named_with_their_defaults_and_answers() {
    let s = spec();
    let doc = s.doc();
    let mut named = BTreeSet::new();
    for (id, op) in operations(doc) {
        let schema = resolved(
            doc,
            &op["requestBody"]["content"]["application/json"]["schema"],
        );
        let bad = deref(doc, &op["responses"]["400"]).clone();
        let codes = bad["content"]["application/json"]["schema"]["allOf"][1]["properties"]["error"]
            ["properties"]["code"]["enum"]
            .clone();
        for (name, property) in schema["properties"].as_object().into_iter().flatten() {
            let property = resolved(doc, property);
            for bound in ["x-config-minimum", "x-config-maximum"] {
                let b = &property[bound];
                if b.is_null() {
                    continue;
                }
                let setting = b["setting"].as_str().expect("setting");
                assert!(setting.starts_with("lock."), "{id} .{name}: {setting}");
                assert!(b["default"].as_u64().is_some(), "{id} .{name}: {b}");
                let error = &b["error"];
                assert!(
                    codes.as_array().is_some_and(|c| c.contains(error)),
                    "{id} .{name}: {error} not among the 400's codes {codes}"
                );
                named.insert(format!("{id}.{name} {bound} {setting}"));
            }
        }
    }
    for expected in [
        "acquire.ttl_ms x-config-maximum lock.max_ttl",
        "acquire.ttl_ms x-config-minimum lock.node_timeout",
        "extend.ttl_ms x-config-maximum lock.max_ttl",
        "hold.ttl_ms x-config-maximum lock.max_ttl",
        "hold.max_hold_ms x-config-maximum lock.max_hold",
        "semaphoreAcquire.ttl_ms x-config-maximum lock.max_ttl",
        "semaphoreHold.max_hold_ms x-config-maximum lock.max_hold",
        "campaign.ttl_ms x-config-maximum lock.max_ttl",
        "campaign.max_hold_ms x-config-maximum lock.max_hold",
    ] {
        assert!(named.contains(expected), "{expected} not in {named:?}");
    }
}

/// `GET /v1/locks?prefix=`: the document refuses what the agent refuses
/// (the live side is in `faults/tests/fuzz_agreement.rs`).
#[test]
fn the_prefix_is_a_resource_prefix() {
    let s = spec();
    let prefix = |p: &str| s.validate_parameter("get", "/v1/locks", "prefix", &json!(p));
    for ok in ["", "orders-", "a%2Fb", &"r".repeat(256)] {
        prefix(ok).unwrap_or_else(|e| panic!("{ok:?}: {e}"));
    }
    for refused in [&"r".repeat(257), "é", "a*", "a b", "[", "\\"] {
        assert!(prefix(refused).is_err(), "{refused:?}");
    }
}

/// A runtime, three fresh masters and one agent with `settings`, usable,
/// and the agent's application and admin sockets (the admin socket's
/// default path: `NAME-admin.sock` beside `NAME.sock`).
fn start(settings: AgentSettings) -> (tokio::runtime::Runtime, Cluster, PathBuf, PathBuf) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let cluster = runtime
        .block_on(Cluster::start(3, 1, settings))
        .unwrap_or_else(|e| panic!("{e}"));
    runtime
        .block_on(cluster.wait_usable(3, Duration::from_secs(10)))
        .unwrap_or_else(|e| panic!("{e}"));
    let socket = runtime.block_on(async { cluster.agents[0].lock().await.socket.clone() });
    let stem = socket.file_stem().unwrap().to_string_lossy().into_owned();
    let admin = socket.with_file_name(format!("{stem}-admin.sock"));
    (runtime, cluster, socket, admin)
}

/// `served` with the bounds of `file` put back where the agent filled in
/// its own (`minimum`/`maximum` beside an `x-config-*`, and its `value`).
fn without_filled_bounds(served: &Value, file: &Value) -> Value {
    match (served, file) {
        (Value::Object(s), Value::Object(f)) => {
            let mut out = serde_json::Map::new();
            for (key, value) in s {
                let filled = matches!(
                    (
                        key.as_str(),
                        s.get("x-config-minimum"),
                        s.get("x-config-maximum")
                    ),
                    ("minimum", Some(_), _) | ("maximum", _, Some(_))
                );
                let value = match f.get(key) {
                    Some(original) if filled => original.clone(),
                    Some(original) => without_filled_bounds(value, original),
                    None => value.clone(),
                };
                out.insert(key.clone(), value);
            }
            for extension in ["x-config-minimum", "x-config-maximum"] {
                if let Some(Value::Object(named)) = out.get_mut(extension) {
                    named.remove("value");
                }
            }
            Value::Object(out)
        }
        (Value::Array(s), Value::Array(f)) if s.len() == f.len() => Value::Array(
            s.iter()
                .zip(f)
                .map(|(s, f)| without_filled_bounds(s, f))
                .collect(),
        ),
        _ => served.clone(),
    }
}

/// The `ttl_ms` or `max_hold_ms` schema of a request body, `$ref`s
/// followed.
fn field<'a>(doc: &'a Value, schema: &str, name: &str) -> &'a Value {
    resolved(
        doc,
        &doc["components"]["schemas"][schema]["properties"][name],
    )
}

/// An agent with a `lock.max_ttl` of 7.3 s (and `lock.node_timeout` 100
/// ms, `lock.max_hold` 90 s) serves, on its application socket and on its
/// admin socket alike, the file with those bounds as `minimum`/`maximum`
/// of every `ttl_ms` and `max_hold_ms` (and as `value` in `x-config-*`),
/// and nothing else changed; so a TTL of 7301 ms is outside the served
/// document and inside the file. The metrics listener does not serve it.
#[test]
fn the_agent_serves_the_document_with_its_bounds_on_both_sockets() {
    let settings = AgentSettings {
        key_prefix: "served:".into(),
        max_ttl: Duration::from_millis(7300),
        // Fresh masters are not kept out for `max_ttl` first.
        delayed_restart: false,
        lock_extra: vec!["max_hold: 90s".into()],
        ..AgentSettings::default()
    };
    let (runtime, cluster, socket, admin) = start(settings);
    let served = runtime
        .block_on(Spec::fetch(&socket))
        .unwrap_or_else(|e| panic!("{e}"));
    let served_admin = runtime
        .block_on(Spec::fetch(&admin))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        served.doc(),
        served_admin.doc(),
        "the two sockets serve one document"
    );
    let doc = served.doc();
    for schema in [
        "AcquireRequest",
        "ExtendRequest",
        "HoldRequest",
        "PermitRequest",
        "PermitHoldRequest",
        "PermitExtendRequest",
        "CampaignRequest",
    ] {
        let ttl = field(doc, schema, "ttl_ms");
        assert_eq!(ttl["maximum"], 7300, "{schema}.ttl_ms: {ttl}");
        assert_eq!(ttl["minimum"], 200, "{schema}.ttl_ms: {ttl}");
        assert_eq!(ttl["x-config-maximum"]["value"], 7300, "{schema}.ttl_ms");
    }
    for schema in ["HoldRequest", "PermitHoldRequest", "CampaignRequest"] {
        let most = field(doc, schema, "max_hold_ms");
        assert_eq!(most["maximum"], 90_000, "{schema}.max_hold_ms: {most}");
        assert_eq!(most["minimum"], 1, "{schema}.max_hold_ms: {most}");
    }
    let file = spec();
    let acquire = "/v1/locks/{resource}/acquire";
    for (ttl, inside) in [(7300, true), (7301, false), (200, true), (199, false)] {
        let body = json!({ "ttl_ms": ttl });
        assert_eq!(
            served.validate_request("POST", acquire, &body).is_ok(),
            inside,
            "ttl_ms {ttl} in the served document"
        );
        file.validate_request("POST", acquire, &body)
            .unwrap_or_else(|e| panic!("ttl_ms {ttl} in the file: {e}"));
    }
    assert_eq!(
        without_filled_bounds(doc, file.doc()),
        *file.doc(),
        "the served document is the file but for the bounds"
    );
    let metrics_port = runtime.block_on(async { cluster.agents[0].lock().await.metrics_port });
    let status = runtime.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", metrics_port))
            .await
            .unwrap();
        tcp.write_all(b"GET /v1/openapi.json HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(10), tcp.read_to_string(&mut answer))
            .await
            .expect("the metrics listener answers")
            .unwrap();
        answer.lines().next().unwrap_or_default().to_string()
    });
    assert!(status.starts_with("HTTP/1.1 404"), "{status}");
}

/// Sends one request and reads its whole answer.
async fn exchange(socket: &Path, method: &str, target: &str, body: &str) -> Response {
    let mut conn = Conn::connect(socket).await.expect("connect");
    conn.write(&request(method, target, body.as_bytes()))
        .await
        .expect("write");
    conn.read_response(method, Duration::from_secs(60))
        .await
        .unwrap_or_else(|e| panic!("{method} {target}: {e}"))
}

/// Requests that wait their turn when the agent is told to stop
/// (SIGTERM) are answered 503 `shutting_down`, and the document the agent
/// served (or the file, with `FUZZ_DOCUMENT=file`) lists that answer for
/// each: a lock's acquire and hold, a
/// permit's acquire and hold. The lock and the semaphore's one permit are
/// taken by plain acquires of a minute (not holds, which end when the
/// agent stops and would wake the waiters), so nothing but the stop ends
/// the waits.
#[test]
fn requests_waiting_when_the_agent_stops_get_a_documented_answer() {
    let settings = AgentSettings {
        key_prefix: "stopping:".into(),
        max_ttl: Duration::from_secs(60),
        // Fresh masters are not kept out for `max_ttl` first.
        delayed_restart: false,
        ..AgentSettings::default()
    };
    let (runtime, cluster, socket, _) = start(settings);
    let spec = runtime
        .block_on(Spec::judging(&socket))
        .unwrap_or_else(|e| panic!("{e}"));
    let waits = [
        ("/v1/locks/stopping/acquire", r#"{"wait_ms": 60000}"#),
        ("/v1/locks/stopping/hold", r#"{"wait_ms": 60000}"#),
        (
            "/v1/semaphores/stopping/acquire",
            r#"{"limit": 1, "wait_ms": 60000}"#,
        ),
        (
            "/v1/semaphores/stopping/hold",
            r#"{"limit": 1, "wait_ms": 60000}"#,
        ),
    ];
    let answers = runtime.block_on(async {
        for (target, body) in [
            ("/v1/locks/stopping/acquire", r#"{"ttl_ms": 60000}"#),
            (
                "/v1/semaphores/stopping/acquire",
                r#"{"limit": 1, "ttl_ms": 60000}"#,
            ),
        ] {
            let taken = exchange(&socket, "POST", target, body).await;
            assert_eq!(taken.status(), 200, "{target}: {}", taken.body_text());
        }
        let waiting: Vec<_> = waits
            .iter()
            .map(|&(target, body)| {
                let socket = socket.clone();
                tokio::spawn(async move { exchange(&socket, "POST", target, body).await })
            })
            .collect();
        // Every request waits in its queue before the agent is told to stop.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let lock = exchange(&socket, "GET", "/v1/locks/stopping", "").await;
            let semaphore = exchange(&socket, "GET", "/v1/semaphores/stopping", "").await;
            let lock_waiters = lock.json().ok().and_then(|v| v["lock"]["waiters"].as_u64());
            let permit_waiters = semaphore.json().ok().and_then(|v| v["waiters"].as_u64());
            if lock_waiters == Some(2) && permit_waiters == Some(2) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the waiters never all waited: {} / {}",
                lock.body_text(),
                semaphore.body_text()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let pid = cluster.agents[0]
            .lock()
            .await
            .pid()
            .expect("the agent runs");
        // SAFETY: a signal to the agent this test started.
        let sent = unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        assert_eq!(sent, 0, "SIGTERM to the agent");
        let mut answers = Vec::new();
        for task in waiting {
            answers.push(task.await.expect("the waiter's task"));
        }
        answers
    });
    let mut undocumented = Vec::new();
    for ((target, _), answer) in waits.iter().zip(&answers) {
        let code = answer.json().ok().map(|v| v["error"]["code"].clone());
        assert_eq!(
            (answer.status(), code),
            (503, Some(json!("shutting_down"))),
            "{target}: {}",
            answer.body_text()
        );
        if let Err(e) = spec.check("POST", target, answer) {
            undocumented.push(e);
        }
    }
    assert!(undocumented.is_empty(), "{}", undocumented.join("\n"));
}
