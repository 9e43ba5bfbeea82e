//! Holds, waiters and `redlock-agent lock`, with real processes: renewal,
//! release when the client dies, loss notices, max_hold, FIFO waiters,
//! wake-ups across agents, and commands that never overlap.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{wait_for, Cluster, TestAgent};
use hyper::StatusCode;
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_redlock-agent");
const LOCK: &str = "lock:\n  node_timeout: 100ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\n";
/// A waiter that retries only every 30 s: within a test's wait, only a
/// published release can get it the lock.
const SLOW_RETRIES: &str =
    "lock:\n  node_timeout: 100ms\n  retry_delay: 30s\n  retry_jitter: 0ms\n";

/// `POST /v1/locks/{resource}/acquire` with `wait_ms` on `agent`, as a task:
/// its status and body when it answers.
fn acquire_in_background(
    agent: &TestAgent,
    resource: &str,
    wait_ms: u64,
) -> tokio::task::JoinHandle<(StatusCode, serde_json::Value)> {
    let socket = agent.socket.clone();
    let path = format!("/v1/locks/{resource}/acquire");
    tokio::spawn(async move {
        common::request(
            &socket,
            hyper::Method::POST,
            &path,
            json!({ "wait_ms": wait_ms }).to_string().into(),
        )
        .await
        .unwrap()
    })
}

/// A hold outlives several TTLs while its connection is open, renewing on
/// every master, and is released when the connection closes.
#[tokio::test]
async fn hold_renews_across_several_ttls_and_releases_on_close() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let mut hold = agent
        .hold("h", json!({"ttl_ms": 1000, "owner": "job"}))
        .await;
    assert_eq!(hold.status, StatusCode::OK);
    let acquired = hold.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(acquired["event"], "acquired", "{acquired}");
    assert_eq!(acquired["ttl_ms"], 1000);
    let token = acquired["token"].as_str().unwrap().to_string();
    assert!(token.ends_with(".job"));

    let started = Instant::now();
    let mut renewals = 0;
    while started.elapsed() < Duration::from_millis(3500) {
        let event = hold
            .next(Duration::from_secs(2))
            .await
            .expect("an event within 2s");
        assert_eq!(event["event"], "renewed", "{event}");
        assert!(event["validity_ms"].as_u64().unwrap() > 500, "{event}");
        renewals += 1;
    }
    assert!(renewals >= 6, "renewed every third of the TTL: {renewals}");
    assert_eq!(
        cluster.get(0, "redlock:h").await.as_deref(),
        Some(token.as_str())
    );
    let locks = agent.get("/v1/locks").await.unwrap().1;
    assert_eq!(locks["locks"][0]["held_here"], true, "{locks}");
    assert_eq!(locks["locks"][0]["owner"], "job", "{locks}");
    assert!(
        !locks.to_string().contains(&token[4..44]),
        "/v1/locks never shows a token"
    );

    drop(hold);
    wait_for(
        "the release after close",
        Duration::from_secs(5),
        || async { cluster.get(0, "redlock:h").await.is_none() },
    )
    .await;
}

/// SIGKILL of the client process frees the lock for a waiter within a
/// second. The client is `redlock-agent lock` holding the lock around a
/// long sleep; the waiter is already queued when the client dies.
#[tokio::test]
async fn killed_client_frees_the_lock_for_a_waiter_within_a_second() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("running");
    let mut client = Command::new(BIN)
        .args(["lock", "--ttl", "30s", "--socket"])
        .arg(&agent.socket)
        .args(["victim", "--", "sh", "-c"])
        .arg(format!("touch {}; exec sleep 60", marker.display()))
        .spawn()
        .unwrap();
    wait_for(
        "the command to run under the lock",
        Duration::from_secs(10),
        || async { marker.exists() },
    )
    .await;

    let waiter = {
        let socket = agent.socket.clone();
        tokio::spawn(async move {
            let answer = common::request(
                &socket,
                hyper::Method::POST,
                "/v1/locks/victim/acquire",
                json!({"wait_ms": 20000}).to_string().into(),
            )
            .await
            .unwrap();
            (answer, Instant::now())
        })
    };
    wait_for("the waiter to queue", Duration::from_secs(5), || async {
        agent.get("/v1/locks").await.unwrap().1["locks"][0]["waiters"] == 1
    })
    .await;

    let killed = Instant::now();
    client.kill().unwrap();
    tokio::task::spawn_blocking(move || client.wait().unwrap())
        .await
        .unwrap();
    let ((status, body), granted) = waiter.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    let hand_over = granted - killed;
    eprintln!("release on client death: waiter granted {hand_over:?} after SIGKILL");
    assert!(hand_over < Duration::from_secs(1), "took {hand_over:?}");
}

/// Masters taken away (3 of 5): the hold says `lost` before the validity
/// it last announced runs out.
#[tokio::test]
async fn hold_says_lost_before_validity_ends_when_masters_go() {
    let mut cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let mut hold = agent.hold("fragile", json!({"ttl_ms": 1500})).await;
    let first = hold.next(Duration::from_secs(5)).await.unwrap();
    let mut valid_until =
        Instant::now() + Duration::from_millis(first["validity_ms"].as_u64().unwrap());
    for i in 0..3 {
        cluster.masters[i].kill();
    }
    loop {
        let event = hold.next(Duration::from_secs(5)).await.expect("an event");
        let now = Instant::now();
        match event["event"].as_str().unwrap() {
            "renewed" => {
                valid_until = now + Duration::from_millis(event["validity_ms"].as_u64().unwrap())
            }
            "lost" => {
                assert!(
                    now < valid_until,
                    "lost came {:?} after the validity ended",
                    now - valid_until
                );
                let reason = event["reason"].as_str().unwrap();
                assert!(reason == "no_quorum" || reason == "renew_failed", "{event}");
                break;
            }
            other => panic!("unexpected {other}: {event}"),
        }
    }
    assert!(
        hold.next(Duration::from_secs(2)).await.is_none(),
        "the stream ends after lost"
    );
}

/// `max_hold_ms` ends a hold with reason `max_hold`, and releases it.
#[tokio::test]
async fn max_hold_ends_a_hold() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let started = Instant::now();
    let mut hold = agent
        .hold("bounded", json!({"ttl_ms": 300, "max_hold_ms": 800}))
        .await;
    let lost = loop {
        let event = hold.next(Duration::from_secs(5)).await.expect("an event");
        if event["event"] == "lost" {
            break event;
        }
    };
    assert_eq!(lost["reason"], "max_hold");
    assert!(started.elapsed() >= Duration::from_millis(800));
    wait_for("the release", Duration::from_secs(5), || async {
        cluster.get(0, "redlock:bounded").await.is_none()
    })
    .await;

    let over = agent
        .hold("bounded", json!({"max_hold_ms": 7_200_000}))
        .await;
    assert_eq!(
        over.status,
        StatusCode::BAD_REQUEST,
        "above lock.max_hold (1h)"
    );
    let bad = agent.hold("bounded", json!({"ttl": 5})).await;
    assert_eq!(bad.error.unwrap()["error"]["code"], "invalid_request");
}

/// Waiters on one agent get the lock in the order they came.
#[tokio::test]
async fn local_waiters_are_served_in_fifo_order() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let token = agent.acquire_ok("queue", json!({"ttl_ms": 30000})).await;
    let (order_tx, mut order_rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..5u64 {
        let socket = agent.socket.clone();
        let order_tx = order_tx.clone();
        tokio::spawn(async move {
            let (status, body) = common::request(
                &socket,
                hyper::Method::POST,
                "/v1/locks/queue/acquire",
                json!({"wait_ms": 20000, "ttl_ms": 5000}).to_string().into(),
            )
            .await
            .unwrap();
            assert_eq!(status, StatusCode::OK, "{body}");
            order_tx.send(i).unwrap();
            let release = json!({"token": body["token"]}).to_string();
            common::request(
                &socket,
                hyper::Method::POST,
                "/v1/locks/queue/release",
                release.into(),
            )
            .await
            .unwrap();
        });
        // Each waiter is queued before the next one comes.
        wait_for(
            &format!("waiter {i} to queue"),
            Duration::from_secs(5),
            || async { agent.get("/v1/locks").await.unwrap().1["locks"][0]["waiters"] == i + 1 },
        )
        .await;
    }
    let (_, body) = agent
        .post("/v1/locks/queue/release", json!({"token": token}))
        .await;
    assert_eq!(body["released"], true);
    let mut order = Vec::new();
    for _ in 0..5 {
        order.push(
            tokio::time::timeout(Duration::from_secs(10), order_rx.recv())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert_eq!(order, [0, 1, 2, 3, 4]);
}

/// A release through one agent wakes a waiter on another at once: the
/// second agent retries only every 30s, far beyond its 5s wait, so only the
/// published release can get it the lock.
#[tokio::test]
async fn release_on_one_agent_wakes_a_waiter_on_another() {
    let cluster = Cluster::start(3);
    let first = TestAgent::start(&cluster, LOCK).await;
    let second = TestAgent::start(&cluster, SLOW_RETRIES).await;
    let token = first.acquire_ok("shared", json!({"ttl_ms": 30000})).await;
    let waiter = acquire_in_background(&second, "shared", 5000);
    wait_for(
        "the waiter to make its first attempt",
        Duration::from_secs(5),
        || async { second.get("/v1/locks").await.unwrap().1["locks"][0]["waiters"] == 1 },
    )
    .await;
    let released = Instant::now();
    let (_, body) = first
        .post("/v1/locks/shared/release", json!({"token": token}))
        .await;
    assert_eq!(body["released"], true);
    let (status, body) = waiter.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    eprintln!(
        "cross-agent hand-off: granted {:?} after the release",
        released.elapsed()
    );
}

/// `PUBLISH` calls master `i` has served (`INFO commandstats`, calls
/// from scripts included).
async fn publishes(cluster: &Cluster, i: usize) -> u64 {
    let mut conn = cluster.redis(i).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_publish:calls="))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// A release nobody waits for publishes nothing; a waiter on another agent
/// flags the key when its vote finds it taken, so the holder's release
/// deletes the flag with the key and announces itself once per master, and
/// the waiter (whose own retries are 30 s apart) gets the lock from that.
#[tokio::test]
async fn a_release_is_announced_only_when_someone_waits() {
    let cluster = Cluster::start(3);
    let first = TestAgent::start(&cluster, LOCK).await;
    let prefix = first.config.lock.key_prefix.clone();
    let flag = redlock_wire::keys::waiting_key(&prefix, &format!("{prefix}shared"));
    for _ in 0..5 {
        let token = first.acquire_ok("shared", json!({"ttl_ms": 30000})).await;
        let (_, body) = first
            .post("/v1/locks/shared/release", json!({"token": token}))
            .await;
        assert_eq!(body["released"], true);
    }
    for i in 0..3 {
        assert_eq!(publishes(&cluster, i).await, 0, "r{}: nobody waited", i + 1);
    }

    let second = TestAgent::start(&cluster, SLOW_RETRIES).await;
    let token = first.acquire_ok("shared", json!({"ttl_ms": 30000})).await;
    let waiter = acquire_in_background(&second, "shared", 20000);
    wait_for(
        "the waiter's votes to flag the key on every master",
        Duration::from_secs(10),
        || async {
            let mut flagged = 0;
            for i in 0..3 {
                flagged += usize::from(cluster.get(i, &flag).await.is_some());
            }
            flagged == 3
        },
    )
    .await;
    let (_, listed) = first.get("/v1/locks").await.unwrap();
    let listed = listed["locks"].as_array().unwrap().clone();
    assert_eq!(listed.len(), 1, "the flag is not a lock: {listed:?}");
    assert_eq!(listed[0]["resource"], "shared", "{listed:?}");
    let (_, body) = first
        .post("/v1/locks/shared/release", json!({"token": token}))
        .await;
    assert_eq!(body["released"], true);
    let (status, body) = waiter.await.unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    for i in 0..3 {
        assert_eq!(publishes(&cluster, i).await, 1, "r{}: one waited", i + 1);
    }
    let (_, body) = second
        .post("/v1/locks/shared/release", json!({"token": body["token"]}))
        .await;
    assert_eq!(body["released"], true);
    // The waiter's own grant was flagged by nobody: its release was silent,
    // and no flag is left.
    for i in 0..3 {
        assert_eq!(publishes(&cluster, i).await, 1, "r{}", i + 1);
        assert_eq!(cluster.get(i, &flag).await, None, "r{}", i + 1);
    }
}

fn lock_command(socket: &Path, args: &[&str], script: &str) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("lock")
        .arg("--socket")
        .arg(socket)
        .args(args)
        .args(["--", "sh", "-c", script])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Two `redlock-agent lock` runs started together never overlap.
#[tokio::test]
async fn lock_command_runs_never_overlap() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "echo \"start $$\" >> {0}; test \"$REDLOCK_RESOURCE\" = batch && test -n \"$REDLOCK_TOKEN\" && test \"$REDLOCK_VALID_UNTIL_MS\" -gt 0 || echo bad-env >> {0}; sleep 0.3; echo \"end $$\" >> {0}",
        log.display()
    );
    let children: Vec<_> = (0..4)
        .map(|_| {
            lock_command(&agent.socket, &["--wait", "20s", "batch"], &script)
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for out in &outputs {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 8, "{text}");
    for pair in lines.chunks(2) {
        let (start, end) = (pair[0].strip_prefix("start "), pair[1].strip_prefix("end "));
        assert!(start.is_some() && start == end, "interleaved runs:\n{text}");
    }
}

/// When the lock is lost the command gets SIGTERM, and `lock` exits 70;
/// when it cannot be had within --wait, the command never runs (exit 75).
#[tokio::test]
async fn lock_command_stops_the_command_on_loss_and_skips_it_when_taken() {
    let mut cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "trap 'echo TERM >> {0}; exit 0' TERM; echo running >> {0}; sleep 30 & wait",
        log.display()
    );
    let child = lock_command(&agent.socket, &["--ttl", "1500ms", "fragile"], &script)
        .spawn()
        .unwrap();
    wait_for("the command to run", Duration::from_secs(10), || async {
        log.exists()
    })
    .await;

    // Blocking waits run off the runtime: the agent serves on this thread.
    let mut second = lock_command(
        &agent.socket,
        &["--wait", "200ms", "fragile"],
        "echo ran >> /dev/null",
    );
    let taken = tokio::task::spawn_blocking(move || second.output().unwrap())
        .await
        .unwrap();
    assert_eq!(
        taken.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );

    for i in 0..3 {
        cluster.masters[i].kill();
    }
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(70), "{stderr}");
    assert!(stderr.contains("lost"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "running\nTERM\n");
}

/// When the agent shuts down, a hold ends with `lost` (reason `shutdown`)
/// and is released, so the drain does not wait on it.
#[tokio::test]
async fn shutdown_ends_holds_with_lost_and_releases_them() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, LOCK).await;
    let mut hold = agent.hold("draining", json!({"ttl_ms": 30000})).await;
    assert_eq!(
        hold.next(Duration::from_secs(5)).await.unwrap()["event"],
        "acquired"
    );
    let stopped = tokio::spawn(agent.stop());
    let lost = hold
        .next(Duration::from_secs(5))
        .await
        .expect("a lost event");
    assert_eq!(lost, json!({"event": "lost", "reason": "shutdown"}));
    tokio::time::timeout(Duration::from_secs(5), stopped)
        .await
        .expect("the drain ends")
        .unwrap();
    assert_eq!(
        cluster.get(0, "redlock:draining").await,
        None,
        "released on shutdown"
    );
}
