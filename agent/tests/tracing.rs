//! OpenTelemetry traces, end to end: a real OTLP/HTTP receiver in the test
//! (hyper, decoding each posted body as the OpenTelemetry project's own
//! `ExportTraceServiceRequest`) and an agent that sends its spans there.
//! Requests carry a W3C `traceparent` as an instrumented application's
//! would; the spans must join that trace under the caller's span, with the
//! attributes `docs/tracing.md` lists. A collector that is down, slow or
//! refusing must change no lock outcome.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{wait_for, Cluster, TestAgent, SHORT};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{json, Value};
use tokio::net::{TcpListener, UnixStream};

/// How the receiver answers an export.
#[derive(Clone, Copy)]
enum Mode {
    Ok,
    /// Answers 200 after five seconds.
    Slow,
    /// Answers 503, as a collector shedding load.
    Refuse,
}

/// One span as received, with its resource's attributes.
#[derive(Clone, Debug)]
struct Received {
    resource: Vec<KeyValue>,
    span: Span,
}

/// An OTLP/HTTP receiver on a free loopback port.
struct Receiver {
    addr: SocketAddr,
    spans: Arc<Mutex<Vec<Received>>>,
    posts: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    async fn start(mode: Mode) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let posts = Arc::new(Mutex::new(Vec::new()));
        let (kept, paths) = (Arc::clone(&spans), Arc::clone(&posts));
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (kept, paths) = (Arc::clone(&kept), Arc::clone(&paths));
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let (kept, paths) = (Arc::clone(&kept), Arc::clone(&paths));
                    async move {
                        paths.lock().unwrap().push(request.uri().path().to_string());
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        let export =
                            ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                        let status = match mode {
                            Mode::Ok => StatusCode::OK,
                            Mode::Slow => {
                                tokio::time::sleep(Duration::from_secs(5)).await;
                                StatusCode::OK
                            }
                            Mode::Refuse => StatusCode::SERVICE_UNAVAILABLE,
                        };
                        if status == StatusCode::OK {
                            let mut kept = kept.lock().unwrap();
                            for rs in export.resource_spans {
                                let resource =
                                    rs.resource.map(|r| r.attributes).unwrap_or_default();
                                for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                                    kept.push(Received {
                                        resource: resource.clone(),
                                        span,
                                    });
                                }
                            }
                        }
                        Ok::<_, Infallible>(
                            Response::builder()
                                .status(status)
                                .header("content-type", "application/x-protobuf")
                                .body(Full::new(Bytes::new()))
                                .unwrap(),
                        )
                    }
                });
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service),
                );
            }
        });
        Receiver { addr, spans, posts }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The first span named `name` in trace `trace`, waiting for it.
    async fn span(&self, trace: &str, name: &str) -> Received {
        let found = Arc::new(Mutex::new(None));
        wait_for(
            &format!("span {name} in trace {trace}"),
            Duration::from_secs(20),
            || {
                let found = Arc::clone(&found);
                async move {
                    let spans = self.spans.lock().unwrap();
                    let span = spans
                        .iter()
                        .find(|r| hex(&r.span.trace_id) == trace && r.span.name == name);
                    *found.lock().unwrap() = span.cloned();
                    span.is_some()
                }
            },
        )
        .await;
        let span = found.lock().unwrap().take();
        span.unwrap()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Any> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

fn text(attributes: &[KeyValue], key: &str) -> String {
    match attr(attributes, key) {
        Some(Any::StringValue(s)) => s.clone(),
        other => panic!("{key}: not a string: {other:?} in {attributes:?}"),
    }
}

fn int(attributes: &[KeyValue], key: &str) -> i64 {
    match attr(attributes, key) {
        Some(Any::IntValue(i)) => *i,
        other => panic!("{key}: not an integer: {other:?} in {attributes:?}"),
    }
}

fn strings(attributes: &[KeyValue], key: &str) -> Vec<String> {
    match attr(attributes, key) {
        Some(Any::ArrayValue(array)) => array
            .values
            .iter()
            .filter_map(|v| match v.value.as_ref()? {
                Any::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .collect(),
        other => panic!("{key}: not an array: {other:?} in {attributes:?}"),
    }
}

fn doubles(attributes: &[KeyValue], key: &str) -> Vec<f64> {
    match attr(attributes, key) {
        Some(Any::ArrayValue(array)) => array
            .values
            .iter()
            .filter_map(|v| match v.value.as_ref()? {
                Any::DoubleValue(d) => Some(*d),
                _ => None,
            })
            .collect(),
        other => panic!("{key}: not an array: {other:?} in {attributes:?}"),
    }
}

/// A caller's trace context: a fresh trace id, the caller's span id, and
/// the `traceparent` header that carries them (sampled).
struct Caller {
    trace: String,
    span: String,
}

impl Caller {
    fn new(n: u8) -> Caller {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        Caller {
            trace: format!("{nanos:030x}{n:02x}"),
            span: format!("00f067aa0ba902{n:02x}"),
        }
    }

    fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace, self.span)
    }
}

/// `POST path` on `socket` with `traceparent`: the status and the JSON
/// answer, or the open response of a stream.
async fn post(
    socket: &Path,
    path: &str,
    body: Value,
    traceparent: Option<&str>,
) -> Response<Incoming> {
    let stream = UnixStream::connect(socket).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(format!("http://localhost{path}"))
        .header("host", "localhost")
        .header("content-type", "application/json");
    if let Some(traceparent) = traceparent {
        request = request
            .header("traceparent", traceparent)
            .header("tracestate", "vendor=1");
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    sender.send_request(request).await.unwrap()
}

async fn post_json(
    socket: &Path,
    path: &str,
    body: Value,
    traceparent: Option<&str>,
) -> (StatusCode, Value) {
    let response = post(socket, path, body, traceparent).await;
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// The next NDJSON line of a stream, within `limit`.
async fn next_line(body: &mut Incoming, buffer: &mut Vec<u8>, limit: Duration) -> Option<Value> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            return Some(serde_json::from_slice(&line).unwrap());
        }
        let frame = tokio::time::timeout_at(deadline, body.frame())
            .await
            .ok()??
            .ok()?;
        if let Ok(data) = frame.into_data() {
            buffer.extend_from_slice(&data);
        }
    }
}

/// A receiver, three masters, and an agent tracing every request to the
/// receiver (the masters kept for as long as the agent).
async fn traced() -> (Receiver, Cluster, TestAgent) {
    let receiver = Receiver::start(Mode::Ok).await;
    let cluster = Cluster::start(3);
    let agent = agent_tracing_to(&cluster, &receiver.endpoint()).await;
    (receiver, cluster, agent)
}

/// An event stream (a hold, a campaign) opened with a caller's
/// `traceparent`.
struct Stream {
    response: Response<Incoming>,
    buffer: Vec<u8>,
}

impl Stream {
    async fn open(agent: &TestAgent, path: &str, body: Value, caller: &Caller) -> Stream {
        let response = post(&agent.socket, path, body, Some(&caller.traceparent())).await;
        assert_eq!(response.status(), StatusCode::OK);
        Stream {
            response,
            buffer: Vec::new(),
        }
    }

    /// The next event, within 10 s.
    async fn next(&mut self) -> Value {
        next_line(
            self.response.body_mut(),
            &mut self.buffer,
            Duration::from_secs(10),
        )
        .await
        .expect("an event within 10 s")
    }
}

async fn agent_tracing_to(cluster: &Cluster, endpoint: &str) -> TestAgent {
    let extra = format!(
        "{SHORT}agent:\n  name: tracer-1\ntracing:\n  otlp_endpoint: \"{endpoint}\"\n  sample_ratio: 1.0\n"
    );
    TestAgent::start(cluster, &extra).await
}

/// An acquire with a `traceparent` is a span in the caller's trace, whose
/// parent is the caller's span, with the resource, kind, outcome, votes
/// (the masters that granted, each with its latency) and fence; the lock's
/// listing names the trace; its release is a span of that trace too.
#[tokio::test]
async fn acquire_with_a_traceparent_joins_the_callers_trace() {
    let (receiver, _cluster, agent) = traced().await;
    let caller = Caller::new(1);
    let (status, grant) = post_json(
        &agent.socket,
        "/v1/locks/orders/acquire",
        json!({"ttl_ms": 2000, "owner": "job-7", "fence": true}),
        Some(&caller.traceparent()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{grant}");

    let acquire = receiver.span(&caller.trace, "redlock.acquire").await;
    assert_eq!(hex(&acquire.span.parent_span_id), caller.span);
    let a = &acquire.span.attributes;
    assert_eq!(text(a, "redlock.resource"), "orders");
    assert_eq!(text(a, "redlock.kind"), "lock");
    assert_eq!(text(a, "redlock.outcome"), "ok");
    assert_eq!(
        int(a, "redlock.fence") as u64,
        grant["fence"].as_u64().unwrap()
    );
    assert_eq!(int(a, "redlock.wait_ms"), 0);
    let granted = strings(a, "redlock.masters.granted");
    assert!(granted.len() >= 2, "a quorum voted yes: {granted:?}");
    let latencies = doubles(a, "redlock.masters.granted.latency_ms");
    assert_eq!(latencies.len(), granted.len(), "{a:?}");
    assert!(latencies.iter().all(|ms| *ms >= 0.0), "{latencies:?}");
    assert!(
        attr(a, "redlock.masters.refused").is_none(),
        "no master refused: {a:?}"
    );
    assert_eq!(text(&acquire.resource, "service.name"), "redlock-agent");
    assert_eq!(text(&acquire.resource, "service.instance.id"), "tracer-1");
    assert!(receiver
        .posts
        .lock()
        .unwrap()
        .iter()
        .all(|p| p == "/v1/traces"));

    let (status, listed) = agent.get("/v1/locks/orders").await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        listed["lock"]["trace_id"],
        caller.trace.as_str(),
        "{listed}"
    );

    let (status, released) = post_json(
        &agent.socket,
        "/v1/locks/orders/release",
        json!({"token": grant["token"]}),
        Some(&caller.traceparent()),
    )
    .await;
    assert_eq!(
        (status, released["released"].clone()),
        (StatusCode::OK, json!(true))
    );
    let release = receiver.span(&caller.trace, "redlock.release").await;
    assert_eq!(hex(&release.span.parent_span_id), caller.span);
    assert_eq!(text(&release.span.attributes, "redlock.outcome"), "ok");
}

/// An acquire that waits behind another holder says so: its wait, its
/// place in line, and the holder (agent and owner) it waited behind.
#[tokio::test]
async fn a_wait_behind_another_holder_shows_the_wait_and_the_holder() {
    let (receiver, _cluster, agent) = traced().await;
    let first = agent
        .acquire_ok("ledger", json!({"ttl_ms": 2000, "owner": "first"}))
        .await;
    let caller = Caller::new(2);
    let socket = agent.socket.clone();
    let traceparent = caller.traceparent();
    let waiting = tokio::spawn(async move {
        post_json(
            &socket,
            "/v1/locks/ledger/acquire",
            json!({"ttl_ms": 2000, "owner": "second", "wait_ms": 20000}),
            Some(&traceparent),
        )
        .await
    });
    wait_for(
        "the second acquire to wait",
        Duration::from_secs(20),
        || async {
            let (_, listed) = agent.get("/v1/locks/ledger").await.unwrap();
            listed["lock"]["waiters"] == 1
        },
    )
    .await;
    let (status, _) = post_json(
        &agent.socket,
        "/v1/locks/ledger/release",
        json!({"token": first}),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, grant) = waiting.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{grant}");

    let span = receiver.span(&caller.trace, "redlock.acquire").await;
    let a = &span.span.attributes;
    assert_eq!(text(a, "redlock.outcome"), "ok");
    assert_eq!(int(a, "redlock.queue.position"), 0);
    assert!(int(a, "redlock.wait_ms") > 0, "{a:?}");
    assert!(int(a, "redlock.rounds") >= 2, "{a:?}");
    assert_eq!(text(a, "redlock.holder.owner"), "first");
    assert_eq!(text(a, "redlock.holder.agent"), "tracer-1");
}

/// A hold's span runs from its grant to its end: `renewed` events while
/// held, ended as `released` when the client leaves, or with a `lost`
/// event when an operator force-releases it.
#[tokio::test]
async fn a_hold_span_ends_at_its_release_or_loss_with_events() {
    let (receiver, _cluster, agent) = traced().await;

    let caller = Caller::new(3);
    let mut stream = Stream::open(
        &agent,
        "/v1/locks/batch/hold",
        json!({"ttl_ms": 900}),
        &caller,
    )
    .await;
    let acquired = stream.next().await;
    assert_eq!(acquired["event"], "acquired");
    let renewed = stream.next().await;
    assert_eq!(renewed["event"], "renewed");
    drop(stream);
    let hold = receiver.span(&caller.trace, "redlock.hold").await;
    assert_eq!(hex(&hold.span.parent_span_id), caller.span);
    assert_eq!(text(&hold.span.attributes, "redlock.outcome"), "released");
    assert!(
        hold.span.events.iter().any(|e| e.name == "renewed"),
        "{:?}",
        hold.span.events
    );
    let acquire = receiver.span(&caller.trace, "redlock.acquire").await;
    assert!(acquire.span.end_time_unix_nano <= hold.span.start_time_unix_nano);

    let caller = Caller::new(4);
    let mut stream = Stream::open(
        &agent,
        "/v1/locks/report/hold",
        json!({"ttl_ms": 2000}),
        &caller,
    )
    .await;
    let acquired = stream.next().await;
    assert_eq!(acquired["event"], "acquired");
    let (status, _) = agent
        .admin_post("/v1/locks/report/force-release", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let lost = stream.next().await;
    assert_eq!(lost["event"], "lost");
    let hold = receiver.span(&caller.trace, "redlock.hold").await;
    assert_eq!(text(&hold.span.attributes, "redlock.outcome"), "lost");
    let event = hold
        .span
        .events
        .iter()
        .find(|e| e.name == "lost")
        .expect("a lost event");
    assert_eq!(
        text(&event.attributes, "redlock.reason"),
        lost["reason"].as_str().unwrap()
    );
}

/// A re-entry by token is an acquire span of its own caller's trace,
/// marked `redlock.reentered`, with the hold count and the first grant's
/// fence.
#[tokio::test]
async fn a_reentry_is_a_span_with_its_hold_count() {
    let (receiver, _cluster, agent) = traced().await;
    let (status, first) = post_json(
        &agent.socket,
        "/v1/locks/nested/acquire",
        json!({"ttl_ms": 2000, "fence": true}),
        Some(&Caller::new(5).traceparent()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{first}");

    let caller = Caller::new(6);
    let (status, again) = post_json(
        &agent.socket,
        "/v1/locks/nested/acquire",
        json!({"ttl_ms": 2000, "token": first["token"]}),
        Some(&caller.traceparent()),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["hold_count"], 2);
    let reentry = receiver.span(&caller.trace, "redlock.acquire").await;
    assert_eq!(hex(&reentry.span.parent_span_id), caller.span);
    let a = &reentry.span.attributes;
    assert_eq!(text(a, "redlock.outcome"), "ok");
    assert_eq!(attr(a, "redlock.reentered"), Some(&Any::BoolValue(true)));
    assert_eq!(int(a, "redlock.hold_count"), 2);
    assert_eq!(
        int(a, "redlock.fence") as u64,
        first["fence"].as_u64().unwrap()
    );
}

/// A campaign is a `redlock.campaign` span that ends `elected`, and the
/// leadership a `redlock.leadership` span from the election to the stream's
/// end, both in the campaigner's trace with the term as the fence.
#[tokio::test]
async fn a_campaign_and_its_leadership_are_spans_of_the_callers_trace() {
    let (receiver, _cluster, agent) = traced().await;
    let caller = Caller::new(7);
    let mut stream = Stream::open(
        &agent,
        "/v1/elections/scheduler/campaign",
        json!({"ttl_ms": 900}),
        &caller,
    )
    .await;
    let elected = loop {
        let event = stream.next().await;
        if event["event"] == "elected" {
            break event;
        }
    };
    let term = elected["term"].as_u64().unwrap();
    let renewed = stream.next().await;
    assert_eq!(renewed["event"], "renewed");
    drop(stream);

    let campaign = receiver.span(&caller.trace, "redlock.campaign").await;
    assert_eq!(hex(&campaign.span.parent_span_id), caller.span);
    let a = &campaign.span.attributes;
    assert_eq!(text(a, "redlock.kind"), "leadership");
    assert_eq!(text(a, "redlock.resource"), "scheduler");
    assert_eq!(text(a, "redlock.outcome"), "elected");
    assert_eq!(int(a, "redlock.fence") as u64, term);

    let leadership = receiver.span(&caller.trace, "redlock.leadership").await;
    assert_eq!(hex(&leadership.span.parent_span_id), caller.span);
    let l = &leadership.span.attributes;
    assert_eq!(int(l, "redlock.fence") as u64, term);
    assert_eq!(text(l, "redlock.outcome"), "resigned");
    assert!(
        leadership.span.events.iter().any(|e| e.name == "renewed"),
        "{:?}",
        leadership.span.events
    );
    assert!(campaign.span.end_time_unix_nano <= leadership.span.start_time_unix_nano);
}

/// A permit's hold is traced as a lock's: an acquire span naming the
/// permit, then a hold span to the stream's end.
#[tokio::test]
async fn a_permit_hold_names_its_permit_and_ends_released() {
    let (receiver, _cluster, agent) = traced().await;
    let caller = Caller::new(8);
    let mut stream = Stream::open(
        &agent,
        "/v1/semaphores/workers/hold",
        json!({"limit": 2, "ttl_ms": 900}),
        &caller,
    )
    .await;
    let acquired = stream.next().await;
    assert_eq!(acquired["event"], "acquired", "{acquired}");
    drop(stream);

    let acquire = receiver.span(&caller.trace, "redlock.acquire").await;
    let a = &acquire.span.attributes;
    assert_eq!(text(a, "redlock.kind"), "permit");
    assert_eq!(text(a, "redlock.resource"), "workers");
    assert_eq!(text(a, "redlock.outcome"), "ok");
    assert_eq!(
        int(a, "redlock.permit") as u64,
        acquired["permit"].as_u64().unwrap()
    );
    let hold = receiver.span(&caller.trace, "redlock.hold").await;
    assert_eq!(text(&hold.span.attributes, "redlock.kind"), "permit");
    assert_eq!(text(&hold.span.attributes, "redlock.outcome"), "released");
}

/// The outcomes of a fixed run of lock calls: grants, a taken lock, and
/// releases, each sampled with its own traceparent.
async fn run_calls(agent: &TestAgent) -> Vec<(u16, Value)> {
    let mut outcomes = Vec::new();
    for i in 0..10u8 {
        let caller = Caller::new(i);
        let resource = format!("/v1/locks/job-{i}");
        let tp = Some(caller.traceparent());
        let (status, grant) = post_json(
            &agent.socket,
            &format!("{resource}/acquire"),
            json!({"ttl_ms": 2000}),
            tp.as_deref(),
        )
        .await;
        outcomes.push((status.as_u16(), json!(grant["token"].is_string())));
        let (status, taken) = post_json(
            &agent.socket,
            &format!("{resource}/acquire"),
            json!({}),
            tp.as_deref(),
        )
        .await;
        outcomes.push((status.as_u16(), taken["error"]["code"].clone()));
        let (status, released) = post_json(
            &agent.socket,
            &format!("{resource}/release"),
            json!({"token": grant["token"]}),
            tp.as_deref(),
        )
        .await;
        outcomes.push((status.as_u16(), released["released"].clone()));
    }
    outcomes
}

/// A collector that is down, answers after five seconds, or refuses with
/// 503 changes no lock outcome: the same calls give the same answers as
/// with tracing off, and promptly (a margin far under what waiting for the
/// collector would take: thirty calls behind a five-second answer).
#[tokio::test]
async fn a_collector_down_slow_or_refusing_changes_no_lock_outcome() {
    let cluster = Cluster::start(3);
    let baseline = {
        let agent = TestAgent::start(&cluster, SHORT).await;
        let outcomes = run_calls(&agent).await;
        agent.stop().await;
        outcomes
    };
    assert!(baseline.iter().any(|(s, _)| *s == 409), "{baseline:?}");
    let down = {
        // A port that was free a moment ago: connections are refused.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    let slow = Receiver::start(Mode::Slow).await;
    let refusing = Receiver::start(Mode::Refuse).await;
    for (what, endpoint) in [
        ("down", down),
        ("slow", slow.endpoint()),
        ("refusing", refusing.endpoint()),
    ] {
        let agent = agent_tracing_to(&cluster, &endpoint).await;
        let started = Instant::now();
        let outcomes = run_calls(&agent).await;
        assert_eq!(outcomes, baseline, "collector {what}");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "collector {what}: the calls took {:?}",
            started.elapsed()
        );
        if what == "refusing" {
            wait_for(
                "spans counted as dropped",
                Duration::from_secs(30),
                || async {
                    let (_, text) = agent.get_tcp("/metrics").await;
                    text.lines().any(|l| {
                        l.starts_with("redlock_trace_spans_dropped_total{reason=\"export_failed\"}")
                            && !l.ends_with(" 0")
                    })
                },
            )
            .await;
        }
        agent.stop().await;
    }
}
