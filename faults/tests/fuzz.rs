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
//! Both tests draw their cases from a fixed seed by default, so a run that
//! changed nothing draws the same cases as the last one and CI is
//! repeatable; each prints its seed first. `FUZZ_SEED` (decimal or `0x`
//! hex) repeats the run that printed it; `FUZZ_SEED=random` draws a new
//! seed (printed, so a failure can be repeated), the long mode that looks
//! for new cases.

use std::collections::BTreeMap;
use std::time::Duration;

use faults::client::{AcquireOptions, Answer, Client};
use faults::cluster::{AgentSettings, Cluster};
use faults::fuzz::{self, Case, Class, Delivery, Outcome};
use faults::openapi::{self, Spec};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

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

/// A runtime, three fresh masters and one agent with `settings`, usable
/// (fresh masters are quarantined at first sight for a moment), and the
/// agent's socket.
fn start(settings: AgentSettings) -> (tokio::runtime::Runtime, Cluster, std::path::PathBuf) {
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
    (runtime, cluster, socket)
}

/// The seed the cases are drawn from when `FUZZ_SEED` is not set: the
/// same cases on every run, in CI as on a laptop.
const DEFAULT_SEED: u64 = 0x5eed_f022_0000_0001;

/// This run's seed: `FUZZ_SEED`'s number (decimal or `0x` hex), a new one
/// for `FUZZ_SEED=random`, else [`DEFAULT_SEED`]. Printed as `test`'s,
/// with how to repeat it, before any case runs.
fn seed(test: &str) -> u64 {
    let given = std::env::var("FUZZ_SEED").unwrap_or_default();
    let seed = match given.trim() {
        "" => DEFAULT_SEED,
        "random" => rand::random(),
        text => text
            .strip_prefix("0x")
            .map_or_else(
                || text.parse().ok(),
                |hex| u64::from_str_radix(hex, 16).ok(),
            )
            .unwrap_or_else(|| {
                panic!("FUZZ_SEED={text:?}: a number (decimal or 0x hex) or \"random\"")
            }),
    };
    eprintln!(
        "{test} seed: {seed:#018x}; set FUZZ_SEED={seed:#018x} to repeat, FUZZ_SEED=random for a new one"
    );
    seed
}

/// A proptest runner of as many cases as the variable `cases_var` says,
/// else `default`, drawn from `seed` (ChaCha, keyed with the seed's 8
/// bytes, little-endian, then zeros), that shrinks a failure briefly and
/// keeps no file.
fn runner(cases_var: &str, default: u32, seed: u64) -> (TestRunner, u32) {
    let cases: u32 = std::env::var(cases_var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&seed.to_le_bytes());
    let runner = TestRunner::new_with_rng(
        Config {
            cases,
            max_shrink_iters: 64,
            failure_persistence: None,
            rng_algorithm: RngAlgorithm::ChaCha,
            ..Config::default()
        },
        TestRng::from_seed(RngAlgorithm::ChaCha, &key),
    );
    (runner, cases)
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

/// The document the agent on `socket` is judged by ([`Spec::judging`]).
fn document(runtime: &tokio::runtime::Runtime, socket: &std::path::Path) -> Spec {
    runtime
        .block_on(Spec::judging(socket))
        .unwrap_or_else(|e| panic!("{e}"))
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
