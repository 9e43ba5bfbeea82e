//! Trace context propagation against a capture socket that records each
//! request's headers and answers an acquire as the agent does: a scoped
//! `TraceContext` arrives as it is; with the `opentelemetry` feature the
//! current OpenTelemetry context arrives as the caller's trace and span;
//! without either nothing is sent and calls work.
//!
//!     cargo test -p redlock-client --test trace
//!     cargo test -p redlock-client --features opentelemetry --test trace

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use redlock_client::{AcquireOptions, Client, TraceContext};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

const GRANT: &str =
    r#"{"resource":"traced","token":"t.capture","ttl_ms":10000,"validity_ms":9990}"#;

type Seen = Arc<Mutex<Vec<BTreeMap<String, String>>>>;

/// A socket in a temp dir whose every request is recorded (header names
/// lowercased) and answered with a grant, keeping the connection open as
/// the agent does.
struct Capture {
    _dir: tempfile::TempDir,
    socket: PathBuf,
    seen: Seen,
}

impl Capture {
    fn start() -> Capture {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let seen = Seen::default();
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut read = BufReader::new(read);
                    while let Some(headers) = read_head(&mut read).await {
                        let length = headers
                            .get("content-length")
                            .map_or(0, |l| l.parse().unwrap());
                        let mut body = vec![0; length];
                        read.read_exact(&mut body).await.unwrap();
                        record.lock().unwrap().push(headers);
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{GRANT}",
                            GRANT.len()
                        );
                        if write.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Capture {
            _dir: dir,
            socket,
            seen,
        }
    }

    /// The one request recorded since the last call.
    fn only(&self) -> BTreeMap<String, String> {
        let mut seen = self.seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        seen.remove(0)
    }
}

/// One request head's headers; None when the connection ends first.
async fn read_head<R: AsyncBufReadExt + Unpin>(read: &mut R) -> Option<BTreeMap<String, String>> {
    let mut headers = BTreeMap::new();
    let mut line = String::new();
    read.read_line(&mut line).await.ok().filter(|n| *n > 0)?; // the request line
    loop {
        line.clear();
        read.read_line(&mut line).await.ok().filter(|n| *n > 0)?;
        let line = line.trim_end();
        if line.is_empty() {
            return Some(headers);
        }
        let (name, value) = line.split_once(':')?;
        headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
    }
}

#[tokio::test]
async fn a_scoped_trace_context_is_sent_as_it_is() {
    let capture = Capture::start();
    let client = Client::new(&capture.socket);
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    let trace = TraceContext::new(parent, Some("vendor=opaque-1".into())).unwrap();
    let grant = trace
        .scope(client.acquire("traced", &AcquireOptions::new()))
        .await
        .unwrap();
    assert_eq!(grant.token, "t.capture");
    let headers = capture.only();
    assert_eq!(headers.get("traceparent").map(String::as_str), Some(parent));
    assert_eq!(
        headers.get("tracestate").map(String::as_str),
        Some("vendor=opaque-1")
    );

    // Outside the scope, on the same client and connection: nothing.
    client
        .acquire("traced", &AcquireOptions::new())
        .await
        .unwrap();
    assert!(!capture.only().contains_key("traceparent"));
}

/// Without a scope, and (with the feature) outside any span, no trace
/// header is sent and the call works as before.
#[tokio::test]
async fn without_trace_context_nothing_is_sent() {
    let capture = Capture::start();
    let grant = Client::new(&capture.socket)
        .acquire("traced", &AcquireOptions::new())
        .await
        .unwrap();
    assert_eq!(grant.token, "t.capture");
    let headers = capture.only();
    assert!(!headers.contains_key("traceparent"), "{headers:?}");
    assert!(!headers.contains_key("tracestate"), "{headers:?}");
}

#[cfg(feature = "opentelemetry")]
#[tokio::test]
async fn the_current_opentelemetry_context_is_sent_with_the_callers_span_as_parent() {
    use opentelemetry::context::FutureExt;
    use opentelemetry::trace::{
        Span, SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
        TracerProvider,
    };
    use opentelemetry::Context;

    // What an application's tracing setup does: the W3C propagator,
    // registered globally, and an SDK tracer.
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    let tracer = opentelemetry_sdk::trace::SdkTracerProvider::builder()
        .build()
        .tracer("redlock-client-test");

    // The caller's span, continued from a remote parent with vendor state
    // (as a server span started from an incoming request is).
    let remote = Context::new().with_remote_span_context(SpanContext::new(
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
        SpanId::from_hex("00f067aa0ba902b7").unwrap(),
        TraceFlags::SAMPLED,
        true,
        TraceState::from_key_value([("vendor", "opaque-1")]).unwrap(),
    ));
    let span = tracer.start_with_context("handle-order", &remote);
    let caller = span.span_context().clone();
    let cx = remote.with_span(span);

    let capture = Capture::start();
    let client = Client::new(&capture.socket);
    let grant = client
        .acquire("traced", &AcquireOptions::new())
        .with_context(cx)
        .await
        .unwrap();
    assert_eq!(grant.token, "t.capture");
    let headers = capture.only();
    let traceparent = headers.get("traceparent").expect("a traceparent");
    let fields: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(
        fields,
        [
            "00",
            caller.trace_id().to_string().as_str(),
            caller.span_id().to_string().as_str(),
            "01"
        ]
    );
    assert_eq!(fields[1], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(
        headers.get("tracestate").map(String::as_str),
        Some("vendor=opaque-1")
    );

    // After the span's future: no current span, nothing sent.
    client
        .acquire("traced", &AcquireOptions::new())
        .await
        .unwrap();
    assert!(!capture.only().contains_key("traceparent"));
}
