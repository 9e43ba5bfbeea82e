//! Each uid's share of the waiter slots (`lock.max_waiters_per_uid`), with
//! real peers under two uids: this process (root) and `curl` run through
//! `setpriv` as uid 65534, whose credentials the agent reads with
//! `SO_PEERCRED`. Needs root (to switch uids), as on the test machine and
//! in CI.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::{wait_for, Cluster, TestAgent};
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

const NOBODY: u32 = 65534;

/// Longer than any test here runs: a waiter never gives up on its own.
const WAIT_MS: u64 = 300_000;

fn require_root() {
    // SAFETY: geteuid cannot fail and touches no memory.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "these tests switch uids with setpriv; run them as root (as CI does)"
    );
}

/// An agent over one master with `lock.max_waiters: 4` and `lock_extra`,
/// its socket open to every uid.
async fn agent(cluster: &Cluster, lock_extra: &str) -> TestAgent {
    let agent = TestAgent::start_with(|socket| {
        cluster
            .config_yaml(socket, &format!("lock:\n  max_waiters: 4\n{lock_extra}"))
            .replacen("socket:\n", "socket:\n  mode: \"0666\"\n", 1)
    })
    .await;
    // The temp dir is 0700: let the other uid reach the socket.
    let dir = agent.socket.parent().expect("the socket is in a dir");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    agent
}

/// `POST /v1/locks/{resource}/acquire` with `wait_ms` from `uid`, through
/// `curl` under `setpriv`: status and JSON body.
async fn acquire_as(uid: u32, socket: &Path, resource: &str) -> (u16, Value) {
    let uid = uid.to_string();
    let body = json!({ "wait_ms": WAIT_MS }).to_string();
    let output = tokio::process::Command::new("setpriv")
        .args(["--reuid", &uid, "--regid", &uid, "--clear-groups", "--"])
        .args(["curl", "-sS", "--max-time", "600", "--unix-socket"])
        .arg(socket)
        .args(["-X", "POST", "-H", "content-type: application/json"])
        .args(["--data-binary", &body, "-w", "\n%{http_code}"])
        .arg(format!("http://localhost/v1/locks/{resource}/acquire"))
        .kill_on_drop(true)
        .output()
        .await
        .expect("run setpriv and curl");
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "curl as {uid} failed: {}{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (body, code) = text.rsplit_once('\n').expect("the status line");
    let body = serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
    (code.parse().expect("a status code"), body)
}

/// Root's requests waiting for `resource` (held), `n` of them, each on its
/// own connection; they wait until aborted.
fn root_waiters(agent: &TestAgent, resource: &str, n: usize) -> Vec<tokio::task::JoinHandle<()>> {
    (0..n)
        .map(|_| {
            let socket = agent.socket.clone();
            let path = format!("/v1/locks/{resource}/acquire");
            tokio::spawn(async move {
                let body = Bytes::from(json!({ "wait_ms": WAIT_MS }).to_string());
                let answer = common::request(&socket, Method::POST, &path, body).await;
                panic!("a waiter of root's was answered: {answer:?}");
            })
        })
        .collect()
}

async fn waiters(agent: &TestAgent) -> Value {
    agent.get("/v1/summary").await.unwrap().1["waiters"].clone()
}

/// Root fills its share of the waiter slots (three of four, the default
/// three quarters) and one more of its requests is refused with 503
/// `too_many_waiters` naming `lock.max_waiters_per_uid`; uid 65534 still
/// waits, in the slot left, and is granted the lock when it is released.
#[tokio::test]
async fn another_uid_still_waits_when_one_uid_has_its_share() {
    require_root();
    let cluster = Cluster::start(1);
    let agent = agent(&cluster, "").await;
    agent.acquire_ok("busy", json!({"ttl_ms": 60000})).await;
    let root = root_waiters(&agent, "busy", 3);
    wait_for("root's three waiters", Duration::from_secs(30), || async {
        waiters(&agent).await == 3
    })
    .await;

    let (status, body) = agent
        .post("/v1/locks/busy/acquire", json!({ "wait_ms": WAIT_MS }))
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "too_many_waiters", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("lock.max_waiters_per_uid"), "{message}");
    assert!(
        message.starts_with("uid 0 already has 3 requests waiting"),
        "{message}"
    );

    // Another resource, held by root, for which nobody waits yet.
    let held = agent.acquire_ok("other", json!({"ttl_ms": 60000})).await;
    let socket = agent.socket.clone();
    let nobody = tokio::spawn(async move { acquire_as(NOBODY, &socket, "other").await });
    wait_for("uid 65534's waiter", Duration::from_secs(30), || async {
        waiters(&agent).await == 4
    })
    .await;
    assert!(!nobody.is_finished(), "uid 65534 waits");
    let (status, body) = agent
        .post("/v1/locks/other/release", json!({ "token": held }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["released"], true, "{body}");
    let (status, body) = nobody.await.unwrap();
    assert_eq!(status, 200, "uid 65534 is granted the lock: {body}");
    assert!(body["token"].is_string(), "{body}");
    for waiter in root {
        waiter.abort();
    }
}

/// The control: with the share as large as `lock.max_waiters`, root takes
/// every slot and uid 65534's waiting request is refused at once with 503
/// `too_many_waiters`, naming `lock.max_waiters`: what every uid met
/// before the share.
#[tokio::test]
async fn without_a_share_one_uid_takes_every_waiter_slot() {
    require_root();
    let cluster = Cluster::start(1);
    let agent = agent(&cluster, "  max_waiters_per_uid: 4\n").await;
    agent.acquire_ok("busy", json!({"ttl_ms": 60000})).await;
    let root = root_waiters(&agent, "busy", 4);
    wait_for("root's four waiters", Duration::from_secs(30), || async {
        waiters(&agent).await == 4
    })
    .await;
    agent.acquire_ok("other", json!({"ttl_ms": 60000})).await;
    let (status, body) = acquire_as(NOBODY, &agent.socket, "other").await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "too_many_waiters", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.ends_with("(lock.max_waiters)"), "{message}");
    for waiter in root {
        waiter.abort();
    }
}
