//! The agreement of the document an agent serves and the agent, through a
//! real socket to a real agent (a child process over three real masters):
//! requests generated around the document's schemas, which the agent must
//! accept exactly when the document does.
//!
//! `AGREE_CASES` sets the number of cases (default 300); `FUZZ_DOCUMENT`
//! judges by a file instead of the served document, and `FUZZ_SEED` draws
//! the cases as in `fuzz.rs`.

// The shared helpers this test binary uses, from `tests/common/`.
mod common {
    pub mod fuzzing;
}

use std::collections::BTreeMap;
use std::time::Duration;

use faults::client::{AcquireOptions, Answer, Client};
use faults::cluster::AgentSettings;
use faults::openapi::{self, Spec};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use common::fuzzing::{document, runner, seed, start};

/// `lock.max_hold` of the agreement test's agent; `lock.node_timeout` and
/// `lock.max_ttl` are [`AgentSettings::default`]'s. The document it serves
/// has them as the bounds of `ttl_ms` and `max_hold_ms`.
const MAX_HOLD_MS: u64 = 5000;

/// Values around what each request field's schema and the agent's
/// settings allow: the bounds, whole floats, fractions, negatives,
/// `null`, wrong types, non-ASCII and lengths around the limits.
fn field_value(name: &'static str) -> BoxedStrategy<serde_json::Value> {
    use serde_json::json;
    let wrong = prop::sample::select(vec![
        json!(null),
        json!(null),
        json!("1000"),
        json!(true),
        json!([]),
        json!({}),
        json!(-1),
        json!(1.5),
    ]);
    match name {
        "ttl_ms" | "max_hold_ms" | "wait_ms" => {
            let n = prop::sample::select(vec![
                0u64, 1, 50, 199, 200, 1000, 1999, 2000, 2001, 4999, 5000, 5001, 60_000,
            ]);
            prop_oneof![
                3 => n.clone().prop_map(|n| json!(n)),
                2 => n.clone().prop_map(|n| json!(n as f64)),
                1 => n.prop_map(|n| json!(n as f64 + 0.25)),
                1 => Just(json!(1e300)),
                1 => Just(json!(u64::MAX)),
                2 => wrong,
            ]
            .boxed()
        }
        "owner" => prop_oneof![
            3 => "[ -~]{1,20}".prop_map(|s| json!(s)),
            1 => (126usize..131).prop_map(|n| json!("o".repeat(n))),
            1 => prop::sample::select(vec![json!(""), json!("é"), json!("a\tb"), json!("\u{7f}")]),
            2 => wrong,
        ]
        .boxed(),
        "fence" => prop_oneof![
            3 => any::<bool>().prop_map(|b| json!(b)),
            1 => prop::sample::select(vec![json!(0), json!("true")]),
            2 => wrong,
        ]
        .boxed(),
        "on_disconnect" => prop_oneof![
            3 => prop::sample::select(vec![json!("release"), json!("expire")]),
            1 => prop::sample::select(vec![json!("RELEASE"), json!("")]),
            2 => wrong,
        ]
        .boxed(),
        // The forms that mean "none", and a token of no grant (a re-entry
        // refused for the token, not for the body's form).
        "token" => prop_oneof![
            Just(json!(null)),
            Just(json!(5)),
            Just(json!(
                "rl2-0123456789abcdef0123456789abcdef01234567-0123456789abcdef"
            )),
        ]
        .boxed(),
        "limit" => prop_oneof![
            3 => prop::sample::select(vec![0u64, 1, 2, 3, 255, 256, 257]).prop_map(|n| json!(n)),
            1 => prop::sample::select(vec![1u64, 2, 256, 257]).prop_map(|n| json!(n as f64)),
            1 => Just(json!(2.5)),
            2 => wrong,
        ]
        .boxed(),
        // Of a permit just taken (limit 1): 0; past a semaphore's most: 256.
        "permit" => prop_oneof![
            3 => Just(json!(0)),
            1 => Just(json!(0.0)),
            1 => Just(json!(256)),
            1 => wrong,
        ]
        .boxed(),
        "value" => prop_oneof![
            3 => "[ -~]{0,20}".prop_map(|s| json!(s)),
            1 => prop::sample::select(vec![1023usize, 1024, 1025])
                .prop_map(|n| json!("v".repeat(n))),
            1 => prop::sample::select(vec![1023usize, 1024, 1025])
                .prop_map(|n| json!("é".repeat(n))),
            2 => wrong,
        ]
        .boxed(),
        _ => prop_oneof![Just(json!(1)), wrong].boxed(),
    }
}

/// A body of some of `fields`, sometimes with one the document lacks.
fn body_of(fields: &'static [&'static str]) -> impl Strategy<Value = serde_json::Value> {
    let field = prop::sample::select(fields.to_vec())
        .prop_flat_map(|name| field_value(name).prop_map(move |v| (name.to_string(), v)));
    prop::collection::vec(field, 0..4)
        .prop_map(|pairs| serde_json::Value::Object(pairs.into_iter().collect()))
}

/// One request of the agreement test.
#[derive(Debug, Clone)]
enum Ask {
    /// `POST <path template's prefix>agree-N/<action>` with this body.
    Body {
        path: &'static str,
        body: serde_json::Value,
    },
    /// `extend` of a lock just acquired, with its token.
    Extend { ttl_ms: serde_json::Value },
    /// `extend` of a semaphore's permit just taken (limit 1), with its
    /// token and these fields.
    PermitExtend { body: serde_json::Value },
    /// `GET /v1/locks?prefix=`, percent-encoded.
    Prefix(String),
    /// `POST /v1/locks/<this>-N/acquire` with no body: the resource's path
    /// segment as sent, with valid percent-escapes or stray `%`s.
    Segment(String),
    /// `GET /v1/locks?cursor=<this>&limit=1`: the value as sent,
    /// percent-encoded or with a stray `%`.
    Cursor(String),
}

fn encoded(text: &str) -> String {
    utf8_percent_encode(text, NON_ALPHANUMERIC).to_string()
}

fn ask() -> impl Strategy<Value = Ask> {
    const LOCK: &[&str] = &["ttl_ms", "wait_ms", "owner", "fence", "token", "ttl"];
    const HOLD: &[&str] = &[
        "token",
        "on_disconnect",
        "ttl_ms",
        "wait_ms",
        "owner",
        "fence",
        "max_hold_ms",
        "on_disconnect",
    ];
    const PERMIT: &[&str] = &["limit", "limit", "ttl_ms", "wait_ms", "owner", "fence"];
    const PERMIT_HOLD: &[&str] = &[
        "limit",
        "limit",
        "ttl_ms",
        "wait_ms",
        "owner",
        "fence",
        "max_hold_ms",
        "on_disconnect",
    ];
    const CAMPAIGN: &[&str] = &["ttl_ms", "owner", "value", "max_hold_ms", "fence"];
    let prefix = prop_oneof![
        2 => "[!-~]{0,12}",
        1 => "\\PC{1,4}",
        1 => (250usize..262).prop_map(|n| "p".repeat(n)),
    ];
    // Escapes valid and not: a `%` kept as itself would make `a%ZZ` and
    // `a%25ZZ` one resource.
    let segment = prop_oneof![
        2 => "[A-Za-z0-9._~-]{1,8}",
        3 => prop::sample::select(vec![
            "a%ZZ", "%zz", "%", "a%4", "%4", "%g1", "a%25ZZ", "%25", "a%2Fb", "%C3%A9", "%FF",
            "%2a", "x%20y", "%7E", "%41%42",
        ])
        .prop_map(str::to_string),
        1 => "[!-~]{1,6}".prop_map(|s| encoded(&s)),
        1 => ("[a-z]{1,4}", "[G-Zg-z0-9%]{0,2}").prop_map(|(a, b)| format!("{a}%{b}")),
    ];
    // Lengths around 512 in characters of 1 to 4 bytes: `maxLength`
    // counts characters.
    let cursor = prop_oneof![
        2 => "\\PC{0,6}".prop_map(|s| encoded(&s)),
        3 => (505usize..520, prop::sample::select(vec!["c", "é", "€", "😀"]))
            .prop_map(|(n, c)| encoded(&c.repeat(n))),
        1 => (250usize..262, prop::sample::select(vec!["é", "€"]))
            .prop_map(|(n, c)| encoded(&c.repeat(n))),
        1 => prop::sample::select(vec!["a%ZZ", "%", "%4", "a%25ZZ", "%FF", "%C3"])
            .prop_map(str::to_string),
    ];
    prop_oneof![
        4 => body_of(LOCK).prop_map(|body| Ask::Body { path: "/v1/locks/{resource}/acquire", body }),
        3 => body_of(HOLD).prop_map(|body| Ask::Body { path: "/v1/locks/{resource}/hold", body }),
        2 => field_value("ttl_ms").prop_map(|ttl_ms| Ask::Extend { ttl_ms }),
        3 => body_of(PERMIT).prop_map(|body| Ask::Body { path: "/v1/semaphores/{name}/acquire", body }),
        2 => body_of(PERMIT_HOLD).prop_map(|body| Ask::Body { path: "/v1/semaphores/{name}/hold", body }),
        2 => body_of(&["permit", "ttl_ms", "ttl_ms"]).prop_map(|body| Ask::PermitExtend { body }),
        3 => body_of(CAMPAIGN).prop_map(|body| Ask::Body { path: "/v1/elections/{name}/campaign", body }),
        2 => prefix.prop_map(Ask::Prefix),
        2 => segment.prop_map(Ask::Segment),
        2 => cursor.prop_map(Ask::Cursor),
    ]
}

/// Sends `bytes` and reads the answer; of a 200 NDJSON stream, the first
/// line only (then the connection closes, which ends a hold).
async fn exchange(socket: &std::path::Path, method: &str, bytes: &[u8]) -> faults::http::Response {
    use faults::http::{Conn, Response};
    let mut conn = Conn::connect(socket).await.expect("connect");
    conn.write(bytes).await.expect("write");
    let head = conn.read_head().await.expect("an answer");
    let stream = head.status == 200
        && head
            .header("content-type")
            .is_some_and(|c| c.starts_with("application/x-ndjson"));
    if stream {
        let mut lines = conn.into_lines();
        let mut body = lines.next_line().await.expect("a line").unwrap_or_default();
        body.push(b'\n');
        return Response { head, body };
    }
    let body = conn.read_body(&head, method).await.expect("a body");
    Response { head, body }
}

/// Whether the document accepts the raw (percent-encoded) value `raw` of
/// the parameter `name` of `method path`: decoded as RFC 3986 says (a `%`
/// not followed by two hex digits encodes nothing), then its schema.
fn parameter_accepted(
    spec: &Spec,
    method: &str,
    path: &str,
    name: &str,
    raw: &str,
) -> Result<(), String> {
    let value = openapi::decode_component(raw)?;
    spec.validate_parameter(method, path, name, &serde_json::Value::String(value))
}

/// What the agreement test sent, how the document judges it, and what
/// came back.
struct Exchange {
    label: String,
    method: &'static str,
    target: String,
    documented: Result<(), String>,
    response: faults::http::Response,
    /// The token of a grant to release once judged.
    release: Option<(String, String)>,
}

/// The schema-driven agreement of the document an agent serves and the
/// agent: for bodies, listing prefixes and cursors, and resource path
/// segments generated around the document's schemas (bounds, whole
/// floats, fractions, `null`, wrong types, non-ASCII, lengths around the
/// limits in characters of 1 to 4 bytes, stray `%`s), the agent accepts
/// exactly what the document accepts, and every answer is one the
/// document lists. Every disagreement is counted by kind, then the test
/// fails if there was any. `AGREE_CASES` sets the number of cases
/// (default 300); `FUZZ_DOCUMENT` judges by a file instead.
#[test]
fn the_agent_accepts_exactly_what_the_document_accepts() {
    use faults::http::request;
    let settings = AgentSettings {
        key_prefix: "agree:".into(),
        lock_extra: vec![format!("max_hold: {MAX_HOLD_MS}ms")],
        ..AgentSettings::default()
    };
    let seed = seed("agreement");
    let (runtime, cluster, socket) = start(settings);
    let spec = document(&runtime, &socket);
    let client = Client::new(&socket);
    let (mut runner, cases) = runner("AGREE_CASES", 300, seed);
    let counter = std::sync::atomic::AtomicU64::new(0);
    let tally = std::sync::Mutex::new(BTreeMap::<String, u64>::new());
    // By kind: how many, and the first case of the kind.
    let findings = std::sync::Mutex::new(BTreeMap::<String, (u64, String)>::new());
    let result = runner.run(&ask(), |ask| {
        let n = counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let resource = format!("agree-{n}");
        let sent = runtime.block_on(async {
            let post = |path: &str, body: &serde_json::Value| {
                let target = path
                    .replace("{resource}", &resource)
                    .replace("{name}", &resource);
                let bytes = request("POST", &target, body.to_string().as_bytes());
                (target, bytes)
            };
            match &ask {
                Ask::Body { path, body } => {
                    let (target, bytes) = post(path, body);
                    let label = path
                        .trim_start_matches("/v1/")
                        .replace("/{resource}", "")
                        .replace("/{name}", "");
                    Exchange {
                        label,
                        method: "POST",
                        documented: spec.validate_request("POST", path, body),
                        response: exchange(&socket, "POST", &bytes).await,
                        target,
                        release: None,
                    }
                }
                Ask::Extend { ttl_ms } => {
                    let options = AcquireOptions::new().ttl(Duration::from_millis(1000));
                    let grant = match client.acquire(&resource, &options).await {
                        Ok(Answer::Ok(grant)) => grant,
                        other => panic!("no lock to extend: {other:?}"),
                    };
                    let body = serde_json::json!({"token": grant.token, "ttl_ms": ttl_ms});
                    let path = "/v1/locks/{resource}/extend";
                    let (target, bytes) = post(path, &body);
                    Exchange {
                        label: "locks/extend".into(),
                        method: "POST",
                        documented: spec.validate_request("POST", path, &body),
                        response: exchange(&socket, "POST", &bytes).await,
                        target,
                        release: Some((resource.clone(), grant.token.clone())),
                    }
                }
                Ask::PermitExtend { body } => {
                    let taken = request(
                        "POST",
                        &format!("/v1/semaphores/{resource}/acquire"),
                        br#"{"limit": 1, "ttl_ms": 1000}"#,
                    );
                    let taken = exchange(&socket, "POST", &taken).await;
                    let taken = taken.json().expect("a permit");
                    let token = taken["token"].as_str().expect("a permit's token");
                    let mut body = body.clone();
                    if body.get("permit").is_none() {
                        body["permit"] = serde_json::json!(0);
                    }
                    body["token"] = token.into();
                    let path = "/v1/semaphores/{name}/extend";
                    let (target, bytes) = post(path, &body);
                    Exchange {
                        label: "semaphores/extend".into(),
                        method: "POST",
                        documented: spec.validate_request("POST", path, &body),
                        response: exchange(&socket, "POST", &bytes).await,
                        target,
                        release: None,
                    }
                }
                Ask::Prefix(prefix) => {
                    let target = format!("/v1/locks?prefix={}&limit=1", encoded(prefix));
                    let value = serde_json::Value::String(prefix.clone());
                    Exchange {
                        label: "locks?prefix".into(),
                        method: "GET",
                        documented: spec.validate_parameter("GET", "/v1/locks", "prefix", &value),
                        response: exchange(&socket, "GET", &request("GET", &target, b"")).await,
                        target,
                        release: None,
                    }
                }
                Ask::Segment(segment) => {
                    let segment = format!("{segment}-{n}");
                    let path = "/v1/locks/{resource}/acquire";
                    let target = format!("/v1/locks/{segment}/acquire");
                    let response = exchange(&socket, "POST", &request("POST", &target, b"")).await;
                    let token = response
                        .json()
                        .ok()
                        .and_then(|v| v["token"].as_str().map(str::to_string));
                    Exchange {
                        label: "locks/{resource}/acquire".into(),
                        method: "POST",
                        documented: parameter_accepted(&spec, "POST", path, "resource", &segment),
                        response,
                        target,
                        release: token.map(|t| (segment, t)),
                    }
                }
                Ask::Cursor(raw) => {
                    let target = format!("/v1/locks?cursor={raw}&limit=1");
                    Exchange {
                        label: "locks?cursor".into(),
                        method: "GET",
                        documented: parameter_accepted(&spec, "GET", "/v1/locks", "cursor", raw),
                        response: exchange(&socket, "GET", &request("GET", &target, b"")).await,
                        target,
                        release: None,
                    }
                }
            }
        });
        let Exchange {
            label,
            method,
            target,
            documented,
            response,
            release,
        } = sent;
        if let Some((segment, token)) = release {
            // The segment as sent: a valid one names the resource granted.
            let body = serde_json::json!({ "token": token }).to_string();
            let bytes = request(
                "POST",
                &format!("/v1/locks/{segment}/release"),
                body.as_bytes(),
            );
            runtime.block_on(exchange(&socket, "POST", &bytes));
        }
        let code = response
            .json()
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string));
        let status = response.status();
        let answered = format!("{status} {}", code.as_deref().unwrap_or_default());
        let finding = |kind: String, why: String| {
            let mut findings = findings.lock().unwrap();
            let entry = findings
                .entry(kind)
                .or_insert_with(|| (0, format!("{why}\n      ask: {ask:?}")));
            entry.0 += 1;
        };
        if let Err(e) = spec.check(method, &target, &response) {
            finding(
                format!("{label}: an answer the document does not list ({answered})"),
                e,
            );
        }
        // A re-entry with a token of no grant is refused for the token,
        // except a hold's asking to expire when it closes, which no
        // re-entry may (its count is lowered when it closes).
        let (reentry, expiring_reentry) = match &ask {
            Ask::Body { path, body } => {
                let reentry = body.get("token").is_some_and(|t| t.is_string());
                let expire = path.ends_with("/hold") && body["on_disconnect"] == "expire";
                (reentry, reentry && expire)
            }
            _ => (false, false),
        };
        let code_is = |c: &str| code.as_deref() == Some(c);
        let agrees = match (&documented, &ask) {
            // A path segment that is no resource is `invalid_resource`.
            (Err(_), Ask::Segment(_)) => status == 400 && code_is("invalid_resource"),
            (Err(_), Ask::Cursor(_) | Ask::Prefix(_)) => {
                status == 400 && code_is("invalid_request")
            }
            (Err(_), _) => status == 400,
            (Ok(()), _) if expiring_reentry => status == 400 && code_is("invalid_request"),
            (Ok(()), _) if reentry => {
                (status == 409 && code_is("not_reentrant"))
                    || (status == 403 && code_is("forbidden"))
            }
            (Ok(()), _) => status == 200,
        };
        if !agrees {
            let verdict = if documented.is_ok() {
                "accepts"
            } else {
                "refuses"
            };
            finding(
                format!("{label}: the document {verdict}, the agent answered {answered}"),
                format!(
                    "{} ({}): {}",
                    target,
                    documented.as_ref().err().map_or("valid", String::as_str),
                    response.body_text()
                ),
            );
        }
        *tally
            .lock()
            .unwrap()
            .entry(format!("{label} {answered}"))
            .or_default() += 1;
        Ok::<(), TestCaseError>(())
    });
    eprintln!("agreement: {cases} cases (seed {seed:#018x}); answers by request and status:");
    for (what, n) in tally.lock().unwrap().iter() {
        eprintln!("  {what}: {n}");
    }
    let findings = findings.into_inner().unwrap();
    let total: u64 = findings.values().map(|(n, _)| n).sum();
    eprintln!(
        "agreement: {total} disagreements in {cases} cases, {} kinds",
        findings.len()
    );
    for (kind, (n, first)) in &findings {
        eprintln!("  {n:>4} x {kind}\n      first: {first}");
    }
    if let Err(e) = result {
        panic!("{e}");
    }
    if total > 0 {
        let log = runtime.block_on(async { cluster.agents[0].lock().await.log_text() });
        panic!(
            "{total} disagreements of the document and the agent (listed above)\n(seed {seed:#018x}: FUZZ_SEED={seed:#018x} repeats these cases)\n--- agent log (end) ---\n{}",
            faults::cluster::tail(&log, 30)
        );
    }
}
