//! The minimal Redis ACL that docs/security.md documents, proven: real masters
//! get that user (`ACL SETUSER`, the page's own line), and two agents log
//! in as it and do everything they do: acquire, extend, release, hold,
//! waits across agents (pub/sub), the leaked-key scanner, the incarnation
//! marker and force release. `INFO` is refused, and the masters' ACL logs
//! show nothing else was.

mod common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::{wait_for, Cluster, TestAgent};
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

const PASSWORD: &str = "acl-test-pw";
/// Short scans and probes so the test sees them soon.
const EXTRA: &str = "leak_scan:\n  interval: 200ms\nhealth:\n  interval: 100ms\n";

/// The `ACL SETUSER redlock ...` line of docs/security.md, split into arguments,
/// with the password filled in.
fn documented_acl() -> Vec<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/security.md"))
            .expect("read docs/security.md");
    let line = readme
        .lines()
        .map(str::trim)
        .find(|l| l.starts_with("ACL SETUSER redlock "))
        .expect("docs/security.md documents the agent's ACL as `ACL SETUSER redlock ...`");
    line.split_whitespace()
        .skip(1)
        .map(|arg| arg.replace(">PASSWORD", &format!(">{PASSWORD}")))
        .collect()
}

/// Every master gets the documented user; the default user stays, for the
/// test's own look behind the agents.
async fn restrict(cluster: &Cluster) {
    let acl = documented_acl();
    assert!(acl.iter().any(|a| a == "-@all"), "an allow list: {acl:?}");
    for i in 0..cluster.masters.len() {
        let mut conn = cluster.redis(i).await;
        let _: () = redis::cmd("ACL")
            .arg(&acl)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("ACL {acl:?}: {e}"));
        let _: () = redis::cmd("ACL")
            .arg("LOG")
            .arg("RESET")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

fn as_acl_user(yaml: String) -> String {
    yaml.replace(
        "url: redis://127.0.0.1",
        &format!("url: redis://redlock:{PASSWORD}@127.0.0.1"),
    )
}

/// The commands (or keys, channels) each master refused, from `ACL LOG`.
async fn refused(cluster: &Cluster, i: usize) -> Vec<String> {
    let mut conn = cluster.redis(i).await;
    let log: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut objects = Vec::new();
    for entry in log {
        let fields: Vec<(String, redis::Value)> =
            redis::from_redis_value(entry).unwrap_or_default();
        let get = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .and_then(|(_, v)| redis::from_redis_value::<String>(v.clone()).ok())
                .unwrap_or_default()
        };
        if get("username") == "redlock" {
            objects.push(format!("{} {}", get("reason"), get("object")));
        }
    }
    objects.sort();
    objects.dedup();
    objects
}

#[tokio::test]
async fn agents_work_as_the_documented_acl_user() {
    let cluster = Cluster::start(3);
    restrict(&cluster).await;
    let a = TestAgent::start_with(|socket| as_acl_user(cluster.config_yaml(socket, EXTRA))).await;
    let b = TestAgent::start_with(|socket| as_acl_user(cluster.config_yaml(socket, EXTRA))).await;
    a.wait_usable(3).await;
    b.wait_usable(3).await;

    // INFO is refused: the agents run without run ids, on the marker.
    let nodes = a.nodes().await;
    assert!(nodes["nodes"][0]["run_id"].is_null(), "{nodes}");
    let user = redis::Client::open(format!(
        "redis://redlock:{PASSWORD}@127.0.0.1:{}",
        cluster.masters[0].port()
    ))
    .unwrap();
    let mut conn = user.get_multiplexed_async_connection().await.unwrap();
    let info = redis::cmd("INFO").query_async::<String>(&mut conn).await;
    let err = info.expect_err("INFO is refused to the agent's user");
    assert!(err.to_string().to_lowercase().contains("noperm"), "{err}");
    for i in 0..3 {
        assert!(
            cluster.get(i, "redlock: incarnation").await.is_some(),
            "the marker on master {i}"
        );
    }

    // Acquire, extend, release.
    let token = a
        .acquire_ok("acl", json!({"ttl_ms": 5000, "owner": "t"}))
        .await;
    let (status, body) = a
        .post(
            "/v1/locks/acl/extend",
            json!({"token": token, "ttl_ms": 8000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, body) = a
        .post("/v1/locks/acl/release", json!({"token": token}))
        .await;
    assert_eq!(body["released"], true, "{body}");

    // A hold renews.
    let mut hold = a.hold("held", json!({"ttl_ms": 900})).await;
    assert_eq!(hold.status, StatusCode::OK);
    assert_eq!(
        hold.next(Duration::from_secs(5)).await.unwrap()["event"],
        "acquired"
    );
    assert_eq!(
        hold.next(Duration::from_secs(5)).await.unwrap()["event"],
        "renewed"
    );
    drop(hold);

    // A waiter on B wakes on A's release through pub/sub: the lock's TTL
    // (60s) is far beyond the wait (20s), so only the release notice can
    // hand it over in time.
    let token = a.acquire_ok("w", json!({"ttl_ms": 60000})).await;
    let socket = b.socket.clone();
    let waiting = tokio::spawn(async move {
        common::request(
            &socket,
            Method::POST,
            "/v1/locks/w/acquire",
            Bytes::from(json!({"wait_ms": 20000}).to_string()),
        )
        .await
    });
    wait_for("B's waiter", Duration::from_secs(10), || async {
        b.get("/v1/locks").await.unwrap().1["locks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["resource"] == "w" && l["waiters"] == 1)
    })
    .await;
    let (_, body) = a.post("/v1/locks/w/release", json!({"token": token})).await;
    assert_eq!(body["released"], true);
    let (status, body) = waiting.await.unwrap().unwrap();
    assert_eq!(
        status,
        StatusCode::OK,
        "B acquired after the release: {body}"
    );

    // A semaphore: its rounds read the limit and the permits (one MGET
    // inside the batch script) and write the limit's note. A full one
    // refuses at once: its read saw every permit taken.
    for _ in 0..2 {
        let (status, body) = a
            .post(
                "/v1/semaphores/s/acquire",
                json!({"limit": 2, "ttl_ms": 60000}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, body) = a
        .post(
            "/v1/semaphores/s/acquire",
            json!({"limit": 2, "ttl_ms": 60000}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "taken", "{body}");
    for i in 0..3 {
        assert_eq!(
            cluster
                .get(i, "redlock: semaphore limit s")
                .await
                .as_deref(),
            Some("2"),
            "the limit's note on master {i}"
        );
    }

    // The scanner reads keys under the prefix and finds a leaked one.
    for i in 0..3 {
        let mut conn = cluster.redis(i).await;
        let _: () = redis::cmd("SET")
            .arg("redlock:leaked")
            // A token for this key: the scanner reports only what an agent
            // wrote for the key that holds it.
            .arg(redlock_agent::redlock::Token::generate("redlock:leaked", None, None).as_str())
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    wait_for(
        "the scanner to find the leak",
        Duration::from_secs(10),
        || async {
            let leaks: Value = a.get("/v1/leaks").await.unwrap().1;
            leaks["nodes"].as_array().is_some_and(|nodes| {
                nodes.len() == 3
                    && nodes
                        .iter()
                        .all(|n| n["error"].is_null() && n["no_ttl"] == 1)
            })
        },
    )
    .await;

    // Force release, on the admin socket.
    let (status, body) = a
        .admin_post("/v1/locks/leaked/force-release", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["deleted"], 3, "{body}");

    // Nothing but INFO (and the CONFIG GET persistence probe) was refused.
    for i in 0..3 {
        let refused = refused(&cluster, i).await;
        assert!(
            refused
                .iter()
                .all(|r| r == "command info" || r == "command config|get"),
            "master {i} refused more than INFO: {refused:?}"
        );
        assert!(refused.contains(&"command info".to_string()), "{refused:?}");
    }
}
