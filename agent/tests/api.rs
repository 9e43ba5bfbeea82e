//! The socket API's contract for bad input, probes and the socket file:
//! every bad request gets a 4xx JSON error with the documented code.

mod common;

use std::os::unix::fs::PermissionsExt;

use bytes::Bytes;
use common::{Cluster, TestAgent};
use hyper::{Method, StatusCode};
use serde_json::json;

/// Each bad request and the exact status and code it must get.
#[tokio::test]
async fn bad_requests_get_json_errors_with_exact_codes() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start(&cluster, "lock:\n  max_ttl: 60s\n").await;
    let long = "x".repeat(257);
    let cases: Vec<(Method, String, String, StatusCode, &str)> = vec![
        (
            Method::POST,
            "/v1/locks/a/acquire".into(),
            r#"{"ttl": 5000}"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v1/locks/a/acquire".into(),
            "not json".into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v1/locks/a/acquire".into(),
            r#"{"ttl_ms": "5000"}"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v1/locks/a/acquire".into(),
            r#"{"ttl_ms": -1}"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v1/locks/a/acquire".into(),
            r#"{"ttl_ms": 1.5}"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v1/locks/a/acquire".into(),
            r#"[1, 2]"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v1/locks/a/acquire".into(),
            r#"{"ttl_ms": 5000"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v1/locks/a/acquire".into(),
            r#"{"owner": ""}"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v1/locks/a/acquire".into(),
            r#"{"owner": "tab\there"}"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v1/locks/a/acquire".into(),
            r#"{"ttl_ms": 0}"#.into(),
            StatusCode::BAD_REQUEST,
            "ttl_out_of_range",
        ),
        (
            Method::POST,
            "/v1/locks/a/acquire".into(),
            r#"{"ttl_ms": 99}"#.into(),
            StatusCode::BAD_REQUEST,
            "ttl_out_of_range",
        ),
        (
            Method::POST,
            "/v1/locks/a/acquire".into(),
            r#"{"ttl_ms": 60001}"#.into(),
            StatusCode::BAD_REQUEST,
            "ttl_out_of_range",
        ),
        (
            Method::POST,
            "/v1/locks/a/extend".into(),
            r#"{"token": "t", "ttl_ms": 60001}"#.into(),
            StatusCode::BAD_REQUEST,
            "ttl_out_of_range",
        ),
        (
            Method::POST,
            "/v1/locks/a/extend".into(),
            "".into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v1/locks/a/release".into(),
            "{}".into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v1/locks/a/release".into(),
            r#"{"token": 5}"#.into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::POST,
            "/v1/locks/a*b/acquire".into(),
            "".into(),
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        ),
        (
            Method::POST,
            "/v1/locks/a%5Bb/acquire".into(),
            "".into(),
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        ),
        (
            Method::POST,
            "/v1/locks/a%20b/acquire".into(),
            "".into(),
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        ),
        (
            Method::POST,
            "/v1/locks/%ff/acquire".into(),
            "".into(),
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        ),
        (
            Method::POST,
            format!("/v1/locks/{long}/acquire"),
            "".into(),
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        ),
        (
            Method::POST,
            "/v1/locks//acquire".into(),
            "".into(),
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        ),
        (
            Method::POST,
            "/v1/locks/a/b/acquire".into(),
            "".into(),
            StatusCode::BAD_REQUEST,
            "invalid_resource",
        ),
        (
            Method::GET,
            "/v1/locks/a/acquire".into(),
            "".into(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            Method::DELETE,
            "/v1/nodes".into(),
            "".into(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            Method::POST,
            "/v1/locks/a/frobnicate".into(),
            "".into(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        // As the document's prefix: a resource's start, at most 256 bytes.
        (
            Method::GET,
            format!("/v1/locks?prefix={long}"),
            "".into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::GET,
            "/v1/locks?prefix=%C3%A9".into(),
            "".into(),
            StatusCode::BAD_REQUEST,
            "invalid_request",
        ),
        (
            Method::GET,
            "/v2/nodes".into(),
            "".into(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            Method::GET,
            "/".into(),
            "".into(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
    ];
    let mut failures = Vec::new();
    for (method, path, body, status, code) in cases {
        let (got_status, got) = agent.request(method.clone(), &path, &body).await;
        if got_status != status
            || got["error"]["code"] != code
            || !got["error"]["message"].is_string()
        {
            failures.push(format!(
                "{method} {path} {body:?}: expected {status} {code}, got {got_status} {got}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A body over 64 KiB is refused with 413 whether or not its length is
/// declared, and the agent keeps serving.
#[tokio::test]
async fn oversized_bodies_are_refused() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start(&cluster, "").await;
    let big = format!(r#"{{"owner": "{}"}}"#, "x".repeat(70 * 1024));
    let (status, body) = agent
        .request(Method::POST, "/v1/locks/a/acquire", &big)
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(body["error"]["code"], "body_too_large");

    // Chunked, so no Content-Length to check up front.
    let chunks: Vec<Result<hyper::body::Frame<Bytes>, std::convert::Infallible>> = (0..80)
        .map(|_| Ok(hyper::body::Frame::data(Bytes::from(vec![b' '; 1024]))))
        .collect();
    let stream = tokio::net::UnixStream::connect(&agent.socket)
        .await
        .unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let request = hyper::Request::post("http://localhost/v1/locks/a/acquire")
        .header("host", "localhost")
        .body(http_body_util::StreamBody::new(futures::stream::iter(
            chunks,
        )))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);

    agent.acquire_ok("a", json!({})).await;
}

/// Bodies are read as the API document's schemas mean them: `null` for an
/// optional field is the field left out, and a whole number written as a
/// float is that number.
#[tokio::test]
async fn null_is_absent_and_whole_floats_are_integers() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start(&cluster, "lock:\n  default_ttl: 7s\n").await;
    let body =
        r#"{"ttl_ms": 10000.0, "wait_ms": null, "owner": null, "fence": null, "token": null}"#;
    let (status, answer) = agent
        .request(Method::POST, "/v1/locks/f/acquire", body)
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["ttl_ms"], 10000);
    assert!(answer["fence"].is_null(), "{answer}");
    let body = r#"{"ttl_ms": null, "wait_ms": 0.0}"#;
    let (status, answer) = agent
        .request(Method::POST, "/v1/locks/g/acquire", body)
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["ttl_ms"], 7000);
}

/// An empty acquire body means the defaults; an owner shows in the key
/// value after the token, and the answer's token is the whole value.
#[tokio::test]
async fn empty_acquire_body_uses_the_default_ttl() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start(&cluster, "lock:\n  default_ttl: 7s\n").await;
    let (status, body) = agent.request(Method::POST, "/v1/locks/d/acquire", "").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["ttl_ms"], 7000);

    let token = agent.acquire_ok("e", json!({"owner": "cron@host-1"})).await;
    assert!(token.ends_with(".cron@host-1"), "{token}");
    assert_eq!(
        cluster.get(0, "redlock:e").await.as_deref(),
        Some(token.as_str())
    );
}

/// Resources are percent-decoded path segments.
#[tokio::test]
async fn percent_encoded_resources_are_decoded() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start(&cluster, "").await;
    let (status, body) = agent
        .request(Method::POST, "/v1/locks/orders%2F42%3Aeu/acquire", "")
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["resource"], "orders/42:eu");
    assert!(cluster.get(0, "redlock:orders/42:eu").await.is_some());
}

/// The TCP listener serves probes only; lock routes are socket-only.
#[tokio::test]
async fn metrics_listener_serves_probes_not_locks() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start(&cluster, "").await;
    let get = |path: &'static str| {
        let agent = &agent;
        async move { agent.get_tcp(path).await.0 }
    };
    assert_eq!(get("/healthz").await, StatusCode::OK);
    assert_eq!(get("/readyz").await, StatusCode::OK);
    assert_eq!(get("/v1/nodes").await, StatusCode::NOT_FOUND);
}

/// The socket gets the configured mode; a stale socket file is replaced;
/// a second agent on a live socket is refused.
#[tokio::test]
async fn socket_mode_stale_file_and_live_agent() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start_with(|socket| {
        cluster
            .config_yaml(socket, "")
            .replacen("socket:\n", "socket:\n  mode: \"0600\"\n", 1)
    })
    .await;
    let mode = std::fs::metadata(&agent.socket)
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);

    let yaml = cluster.config_yaml(&agent.socket, "");
    let config = redlock_agent::Config::from_yaml(&yaml).unwrap();
    let err = redlock_agent::Bound::bind(config)
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("another agent is already listening"), "{err}");

    // A socket file nobody listens on, as a killed agent leaves behind.
    let dir = tempfile::tempdir().unwrap();
    let stale = dir.path().join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    assert!(stale.exists());
    let config = redlock_agent::Config::from_yaml(&cluster.config_yaml(&stale, "")).unwrap();
    let bound = redlock_agent::Bound::bind(config)
        .await
        .expect("stale socket is replaced");
    drop(bound);
    assert!(
        !stale.exists(),
        "the socket file is removed when the agent stops"
    );
}

/// A client that sends half a request and hangs up does not hurt the agent.
#[tokio::test]
async fn truncated_requests_do_not_hurt_the_agent() {
    use tokio::io::AsyncWriteExt;
    let cluster = Cluster::start(1);
    let agent = TestAgent::start(&cluster, "").await;
    for partial in [
        &b"POST /v1/locks/a/acquire HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"ttl"[..],
        b"GARBAGE\r\n\r\n",
        b"POST /v1/lo",
    ] {
        let mut stream = tokio::net::UnixStream::connect(&agent.socket)
            .await
            .unwrap();
        stream.write_all(partial).await.unwrap();
        drop(stream);
    }
    agent.acquire_ok("a", json!({})).await;
}

/// The limits answer with their own codes: a waiter over
/// `lock.max_waiters`, a body that does not arrive within
/// `socket.request_timeout`, a connection over `socket.max_connections`.
#[tokio::test]
async fn limits_answer_with_clear_errors() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = Cluster::start(1);
    let agent = TestAgent::start_with(|socket| {
        cluster
            .config_yaml(socket, "lock:\n  max_waiters: 1\n")
            .replacen("socket:\n", "socket:\n  request_timeout: 300ms\n", 1)
    })
    .await;

    // Waiters: one waits behind a held lock; the second is refused.
    agent.acquire_ok("w", json!({"ttl_ms": 10000})).await;
    let socket = agent.socket.clone();
    let first = tokio::spawn(async move {
        common::request(
            &socket,
            Method::POST,
            "/v1/locks/w/acquire",
            Bytes::from(json!({"wait_ms": 3000}).to_string()),
        )
        .await
    });
    common::wait_for(
        "the first waiter",
        std::time::Duration::from_secs(5),
        || async { agent.get("/v1/summary").await.unwrap().1["waiters"] == 1 },
    )
    .await;
    let (status, body) = agent
        .post("/v1/locks/w/acquire", json!({"wait_ms": 3000}))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "too_many_waiters");
    first.abort();

    // A body that never completes: 408 after request_timeout.
    let mut slow = tokio::net::UnixStream::connect(&agent.socket)
        .await
        .unwrap();
    slow.write_all(b"POST /v1/locks/s/acquire HTTP/1.1\r\nhost: x\r\ncontent-length: 50\r\n\r\n{")
        .await
        .unwrap();
    let mut answer = String::new();
    slow.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout"), "{answer}");
    drop(agent);

    // Connections: two held open, the third is refused with a JSON 503.
    let agent = TestAgent::start_with(|socket| {
        cluster
            .config_yaml(socket, "")
            .replacen("socket:\n", "socket:\n  max_connections: 2\n", 1)
    })
    .await;
    // A connection that got an answer and stays open holds a slot. The
    // first tries may still meet the start-up probe's connection.
    async fn served(socket: &std::path::Path) -> Option<tokio::net::UnixStream> {
        let mut stream = tokio::net::UnixStream::connect(socket).await.ok()?;
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .ok()?;
        let mut seen = Vec::new();
        let mut buf = [0u8; 512];
        while !seen.ends_with(b"}\n") {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 {
                return None;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        seen.starts_with(b"HTTP/1.1 200").then_some(stream)
    }
    let mut held = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while held.len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "two connections were never served"
        );
        if let Some(stream) = served(&agent.socket).await {
            held.push(stream);
        }
    }
    let mut third = tokio::net::UnixStream::connect(&agent.socket)
        .await
        .unwrap();
    let mut answer = String::new();
    third.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap();
    let json: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(json["error"]["code"], "too_many_connections", "{answer}");
}
