//! Fuzzing the socket API through a real socket to a real agent (a child
//! process over three real masters), from a proptest strategy: random and
//! mutated methods, paths, percent-encodings, JSON shapes, huge and
//! truncated bodies, chunked framing and slow writers.
//!
//! Every complete request must get one JSON answer that matches the
//! document the agent serves (`GET /v1/openapi.json`: `agent/openapi.yaml`
//! with the agent's own bounds); malformed ones a 4xx or a close;
//! truncated ones a 408/400 or a close; the agent must answer `/healthz`
//! after every case, still grant locks at the end, and never log a panic.
//!
//! `FUZZ_CASES` sets the number of cases (default 400).
//! `FUZZ_DOCUMENT=file` (or `=<path>` of another copy) judges by a file
//! instead of the served document, to measure an agent that serves none.
//!
//! This test and the agreement test (`fuzz_agreement.rs`) draw their
//! cases from a fixed seed by default, so a run that changed nothing draws
//! the same cases as the last one and CI is repeatable; each prints its
//! seed first. `FUZZ_SEED` (decimal or `0x` hex) repeats the run that
//! printed it; `FUZZ_SEED=random` draws a new seed (printed, so a failure
//! can be repeated), the long mode that looks for new cases.

// The shared helpers this test binary uses, from `tests/common/`.
mod common {
    pub mod fuzzing;
}

use std::collections::BTreeMap;
use std::time::Duration;

use faults::client::{AcquireOptions, Answer, Client};
use faults::cluster::AgentSettings;
use faults::fuzz::{self, Case, Class, Delivery, Outcome};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use common::fuzzing::{document, runner, seed, start};

const REQUEST_TIMEOUT: Duration = Duration::from_millis(800);

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => "[a-z0-9_.:-]{1,16}",
        // Any bytes, each percent-encoded: control bytes, invalid UTF-8.
        2 => prop::collection::vec(any::<u8>(), 1..24)
            .prop_map(|b| b.iter().map(|x| format!("%{x:02X}")).collect::<String>()),
        // Visible ASCII and Unicode, percent-encoded as a client would.
        2 => "[!-~]{1,24}".prop_map(|s| utf8_percent_encode(&s, NON_ALPHANUMERIC).to_string()),
        1 => "\\PC{1,8}".prop_map(|s| utf8_percent_encode(&s, NON_ALPHANUMERIC).to_string()),
        1 => (250usize..262).prop_map(|n| "r".repeat(n)),
        1 => prop::sample::select(vec![
            "", ".", "..", "a%2Fb", "a/b", "%2A", "%00", "%ff", "%C3%A9", "a%20b", "%", "%4", "%zz",
        ])
        .prop_map(str::to_string),
    ]
}

fn path() -> impl Strategy<Value = String> {
    let action = prop::sample::select(vec![
        "acquire",
        "acquire",
        "acquire",
        "extend",
        "release",
        "hold",
        "force-release",
        "ACQUIRE",
        "",
        "nope",
    ]);
    let lock = (segment(), action).prop_map(|(s, a)| format!("/v1/locks/{s}/{a}"));
    let primitive = prop::sample::select(vec![
        "semaphores/{}/acquire",
        "semaphores/{}/extend",
        "semaphores/{}/release",
        "semaphores/{}/hold",
        "semaphores/{}",
        "semaphores/{}/force-release",
        "elections/{}/campaign",
        "elections/{}/observe",
        "elections/{}",
        "elections/{}/nope",
    ]);
    let primitive =
        (segment(), primitive).prop_map(|(s, p)| format!("/v1/{}", p.replace("{}", &s)));
    let fixed = prop::sample::select(vec![
        "/v1/nodes",
        "/v1/locks",
        "/v1/locks/fuzz-lock",
        "/v1/semaphores/fuzz-semaphore",
        "/v1/elections/fuzz-election",
        "/v1/elections/fuzz-election/observe",
        "/v1/locks/a%2Fb",
        "/v1/leaks",
        "/v1/summary",
        "/healthz",
        "/readyz",
        "/metrics",
        "/",
        "/v1",
        "/v1/locks/",
        "/v2/nodes",
        "/healthz/",
        "//v1/nodes",
        "/v1/nodes/..",
    ])
    .prop_map(str::to_string);
    let query = prop_oneof![
        8 => Just(String::new()),
        1 => Just("?a=1&b".to_string()),
        1 => prop::sample::select(vec!["?prefix=fuzz&limit=2", "?limit=0", "?cursor=%FF", "?prefix=a*"])
            .prop_map(str::to_string),
    ];
    let absolute = prop_oneof![9 => Just(""), 1 => Just("http://localhost")];
    (
        prop_oneof![4 => lock, 2 => primitive, 1 => fixed],
        query,
        absolute,
    )
        .prop_map(|(p, q, a)| format!("{a}{p}{q}"))
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::json;
    prop_oneof![
        (0u64..5000).prop_map(|n| json!(n)),
        Just(json!(0)),
        Just(json!(u64::MAX)),
        Just(json!(-1)),
        Just(json!(1.5)),
        Just(json!(1e300)),
        "[ -~]{0,12}".prop_map(|s| json!(s)),
        Just(json!("x".repeat(200))),
        Just(json!(null)),
        Just(json!(true)),
        Just(json!([])),
        Just(json!({})),
    ]
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    let field = prop::sample::select(vec![
        "ttl_ms",
        "ttl_ms",
        "wait_ms",
        "owner",
        "token",
        "max_hold_ms",
        "limit",
        "limit",
        "permit",
        "value",
        "fence",
        "on_disconnect",
        "ttl",
        "extra",
    ]);
    let object = move || {
        prop::collection::btree_map(field.clone(), json_value(), 0..4).prop_map(|m| {
            let map: serde_json::Map<String, serde_json::Value> =
                m.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            serde_json::Value::Object(map).to_string().into_bytes()
        })
    };
    prop_oneof![
        6 => object(),
        2 => Just(Vec::new()),
        1 => prop::sample::select(vec!["[]", "1", "\"s\"", "null", "true", "{", "{\"ttl_ms\":", " ", "{}{}", "{\"ttl_ms\":1,\"ttl_ms\":2}"])
            .prop_map(|s| s.as_bytes().to_vec()),
        1 => prop::collection::vec(any::<u8>(), 0..200),
        1 => (object(), any::<prop::sample::Index>()).prop_map(|(b, i)| {
            let cut = i.index(b.len().max(1));
            b[..cut].to_vec()
        }),
        1 => (1usize..6000).prop_map(|d| format!("{}{}", "[".repeat(d), "]".repeat(d)).into_bytes()),
        1 => (64 * 1024 - 8..64 * 1024 + 8usize).prop_map(|n| {
            let mut b = b"{\"owner\":\"".to_vec();
            b.resize(n.saturating_sub(2), b'x');
            b.extend_from_slice(b"\"}");
            b
        }),
        1 => (100_000usize..300_000).prop_map(|n| vec![b' '; n]),
    ]
}

fn method() -> impl Strategy<Value = String> {
    prop_oneof![
        10 => Just("POST".to_string()),
        4 => Just("GET".to_string()),
        2 => prop::sample::select(vec!["PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "get", "post", "M-SEARCH", "X"])
            .prop_map(str::to_string),
    ]
}

/// Request head lines besides the request line and framing.
fn extra_headers() -> impl Strategy<Value = Vec<String>> {
    let header = prop::sample::select(vec![
        "content-type: application/json",
        "content-type: text/plain",
        "content-type: application/json; charset=utf-8",
        "connection: close",
        "connection: keep-alive",
        "accept: */*",
        "x-fuzz: \u{7f}",
        "user-agent: faults-fuzz",
    ])
    .prop_map(str::to_string);
    prop::collection::vec(header, 0..3)
}

/// A well-formed request: the bytes, and whether it is chunked.
fn wellformed(
    method: &str,
    target: &str,
    headers: &[String],
    body: &[u8],
    chunks: Option<usize>,
) -> Vec<u8> {
    let mut out = format!("{method} {target} HTTP/1.1\r\nhost: localhost\r\n").into_bytes();
    for h in headers {
        out.extend_from_slice(h.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    match chunks {
        None => {
            out.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
            out.extend_from_slice(body);
        }
        Some(n) => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
            let size = body.len().div_ceil(n.max(1)).max(1);
            for chunk in body.chunks(size) {
                out.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                out.extend_from_slice(chunk);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\n\r\n");
        }
    }
    out
}

fn complete_or_truncated() -> impl Strategy<Value = Case> {
    let delivery = prop_oneof![
        12 => Just(Delivery::AllAtOnce),
        2 => (2usize..6, 5u64..60).prop_map(|(pieces, pause_ms)| Delivery::Slow { pieces, pause_ms }),
        2 => (any::<prop::sample::Index>(), any::<bool>())
            .prop_map(|(i, half_close)| Delivery::Cut { keep: i.index(1 << 20), half_close }),
    ];
    let chunked = prop_oneof![5 => Just(None), 1 => (1usize..5).prop_map(Some)];
    (method(), path(), extra_headers(), body(), chunked, delivery).prop_map(
        |(method, target, headers, body, chunks, delivery)| {
            let bytes = wellformed(&method, &target, &headers, &body, chunks);
            let valid = fuzz::valid_target(&target.replacen("http://localhost", "", 1))
                && fuzz::valid_method(&method)
                && !headers.iter().any(|h| h.contains('\u{7f}'));
            let (delivery, class) = match delivery {
                Delivery::Cut { keep, half_close } => {
                    let keep = keep % bytes.len().max(1);
                    let class = if valid {
                        Class::Truncated
                    } else {
                        Class::Malformed
                    };
                    (Delivery::Cut { keep, half_close }, class)
                }
                other if valid => (other, Class::Complete),
                other => (other, Class::Malformed),
            };
            let label = format!(
                "{}{}",
                if chunks.is_some() { "chunked " } else { "" },
                if body.len() > 1000 {
                    format!("{}-byte body", body.len())
                } else {
                    "request".into()
                }
            );
            Case {
                method,
                target,
                bytes,
                delivery,
                class,
                label,
            }
        },
    )
}

fn malformed() -> impl Strategy<Value = Case> {
    let raw = prop::sample::select(vec![
        ("no version", "GET /v1/nodes\r\n\r\n"),
        ("HTTP/2.0", "GET /v1/nodes HTTP/2.0\r\nhost: x\r\n\r\n"),
        ("HTTP/1.0", "GET /v1/nodes HTTP/1.0\r\n\r\n"),
        ("double space", "GET  /v1/nodes HTTP/1.1\r\nhost: x\r\n\r\n"),
        ("bare LF", "GET /healthz HTTP/1.1\nhost: x\n\n"),
        ("space in target", "GET /v1/locks/a b/acquire HTTP/1.1\r\nhost: x\r\n\r\n"),
        ("non-ASCII target", "POST /v1/locks/\u{e9}/acquire HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"),
        ("bad percent", "POST /v1/locks/%zz/acquire HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"),
        ("header without colon", "GET /v1/nodes HTTP/1.1\r\nhost x\r\n\r\n"),
        ("space in header name", "GET /v1/nodes HTTP/1.1\r\nho st: x\r\n\r\n"),
        ("bad content-length", "POST /v1/locks/a/acquire HTTP/1.1\r\nhost: x\r\ncontent-length: abc\r\n\r\n"),
        ("two content-lengths", "POST /v1/locks/a/acquire HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}"),
        ("negative content-length", "POST /v1/locks/a/acquire HTTP/1.1\r\nhost: x\r\ncontent-length: -1\r\n\r\n"),
        ("length and chunked", "POST /v1/locks/a/acquire HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ntransfer-encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n"),
        ("bad chunk size", "POST /v1/locks/a/acquire HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
        ("bad method char", "GE(T /v1/nodes HTTP/1.1\r\nhost: x\r\n\r\n"),
        ("TLS hello", "\u{16}\u{3}\u{1}\u{0}\u{a5}\u{1}\u{0}\u{0}\u{a1}\u{3}\u{3}"),
        ("h2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
        ("empty", ""),
        ("CRLFs", "\r\n\r\n\r\n"),
    ]);
    let fixed = raw.prop_map(|(label, text)| Case {
        method: "GET".into(),
        target: "/".into(),
        bytes: text.as_bytes().to_vec(),
        delivery: Delivery::AllAtOnce,
        class: Class::Malformed,
        label: label.into(),
    });
    let garbage = prop::collection::vec(any::<u8>(), 1..300).prop_map(|bytes| Case {
        method: "GET".into(),
        target: "/".into(),
        bytes,
        delivery: Delivery::AllAtOnce,
        class: Class::Malformed,
        label: "random bytes".into(),
    });
    let many_headers = (101usize..300).prop_map(|n| {
        let mut text = "GET /v1/nodes HTTP/1.1\r\nhost: x\r\n".to_string();
        for i in 0..n {
            text.push_str(&format!("x-h{i}: v\r\n"));
        }
        text.push_str("\r\n");
        Case {
            method: "GET".into(),
            target: "/v1/nodes".into(),
            bytes: text.into_bytes(),
            delivery: Delivery::AllAtOnce,
            class: Class::Malformed,
            label: "over 100 headers".into(),
        }
    });
    let huge_header = (20_000usize..200_000).prop_map(|n| Case {
        method: "GET".into(),
        target: "/v1/nodes".into(),
        bytes: format!(
            "GET /v1/nodes HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
            "a".repeat(n)
        )
        .into_bytes(),
        delivery: Delivery::AllAtOnce,
        class: Class::Malformed,
        label: "a header of 20 KB or more".into(),
    });
    prop_oneof![4 => fixed, 2 => garbage, 1 => many_headers, 1 => huge_header]
}

fn case() -> impl Strategy<Value = Case> {
    prop_oneof![8 => complete_or_truncated(), 2 => malformed()]
}

/// Every complete request answered with JSON that matches the document;
/// malformed and truncated ones answered with a 4xx or closed; the agent
/// never panics and keeps serving.
#[test]
fn fuzzed_requests_get_documented_json_answers_and_the_agent_keeps_serving() {
    let settings = AgentSettings {
        key_prefix: "fuzz:".into(),
        socket_extra: vec![
            format!("request_timeout: {}ms", REQUEST_TIMEOUT.as_millis()),
            "max_connections: 256".into(),
        ],
        lock_extra: vec!["max_waiters: 64".into()],
        ..AgentSettings::default()
    };
    let seed = seed("fuzz");
    let (runtime, cluster, socket) = start(settings);
    let spec = document(&runtime, &socket);
    let client = Client::new(&socket);
    let (mut runner, cases) = runner("FUZZ_CASES", 400, seed);
    let tallies = std::sync::Mutex::new(BTreeMap::<(String, u16), u64>::new());
    let bare = std::sync::Mutex::new(BTreeMap::<String, u64>::new());
    let result = runner.run(&case(), |case| {
        let outcome = runtime.block_on(fuzz::run_case(&socket, &case, &spec, REQUEST_TIMEOUT));
        let status = match outcome {
            Outcome::Fine { status, json } => {
                if case.class == Class::Malformed && status >= 400 && !json {
                    let label: String = case
                        .label
                        .split(' ')
                        .map(|w| if w.ends_with("-byte") { "N-byte" } else { w })
                        .collect::<Vec<_>>()
                        .join(" ");
                    *bare
                        .lock()
                        .unwrap()
                        .entry(format!("{status} {label}"))
                        .or_default() += 1;
                }
                status
            }
            Outcome::Breach(why) => {
                return Err(TestCaseError::fail(format!("{why}\n  case: {case:?}")));
            }
        };
        *tallies
            .lock()
            .unwrap()
            .entry((format!("{:?}", case.class), status))
            .or_default() += 1;
        // The agent keeps serving.
        let health = runtime.block_on(client.healthz());
        match health {
            Ok(()) => Ok(()),
            other => Err(TestCaseError::fail(format!(
                "after the case the agent does not answer /healthz: {other:?}\n  case: {case:?}"
            ))),
        }
    });

    let log = runtime.block_on(async { cluster.agents[0].lock().await.log_text() });
    eprintln!("fuzz: {cases} cases (seed {seed:#018x}); answers by class and status (0 = closed):");
    for ((class, status), n) in tallies.lock().unwrap().iter() {
        eprintln!("  {class:<10} {status:>3}: {n}");
    }
    for (what, n) in bare.lock().unwrap().iter() {
        eprintln!("  malformed, answered without a JSON body: {what} x{n}");
    }
    if let Err(e) = result {
        panic!(
            "{e}\n(seed {seed:#018x}: FUZZ_SEED={seed:#018x} repeats these cases)\n--- agent log (end) ---\n{}",
            faults::cluster::tail(&log, 30)
        );
    }
    let panics: Vec<&str> = log.lines().filter(|l| l.contains("panicked")).collect();
    assert!(
        panics.is_empty(),
        "the agent panicked:\n{}",
        panics.join("\n")
    );

    // It still locks.
    runtime.block_on(async {
        let request = AcquireOptions::new()
            .ttl(Duration::from_millis(1000))
            .wait(Duration::from_millis(3000));
        match client.acquire("after-fuzz", &request).await {
            Ok(Answer::Ok(grant)) => {
                let released = client.release("after-fuzz", &grant.token).await;
                assert!(matches!(released, Ok(Answer::Ok(true))));
            }
            other => panic!("no lock after the fuzz: {other:?}"),
        }
        let mut agent = cluster.agents[0].lock().await;
        assert!(agent.is_running(), "the agent process died");
    });
}
