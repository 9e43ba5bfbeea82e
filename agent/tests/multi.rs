//! Locks on several resources at once, on real masters: all or nothing
//! (a request that cannot take one resource leaves no key of any behind,
//! read on every master); one token releases and extends them all, through
//! the agent that granted it or, naming the resources, another; one fence
//! above every earlier fence of each resource; requests for overlapping
//! sets in opposite orders never deadlock; a waiter on several resources
//! is granted while single-resource clients keep taking one of them; a
//! hold of several renews them, releases them when its connection closes,
//! and ends for all at the loss of one; bad requests refused with codes.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{wait_for, Cluster, TestAgent};
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

const MASTERS: usize = 3;
const PREFIX: &str = "redlock:";
/// How long a release's last masters may take to answer after its quorum.
const SETTLE: Duration = Duration::from_secs(5);

async fn acquire_many(agent: &TestAgent, body: Value) -> (StatusCode, Value) {
    agent.post("/v1/locks/acquire", body).await
}

/// Every master's value at each resource's lock key.
async fn keys(cluster: &Cluster, resources: &[&str]) -> Vec<Option<String>> {
    let mut found = Vec::new();
    for m in 0..MASTERS {
        for r in resources {
            found.push(cluster.get(m, &format!("{PREFIX}{r}")).await);
        }
    }
    found
}

/// A resource held by another leaves a request for it and two free ones
/// refused `taken`, with no key of the free ones on any master; once it is
/// free the three are granted under one token, a single acquire of any of
/// them is refused, and the token releases all three on every master.
#[tokio::test]
async fn all_or_nothing_and_one_token_releases_all() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let held = agent.acquire_ok("b", json!({"ttl_ms": 20000})).await;
    let (status, refused) = acquire_many(
        &agent,
        json!({"resources": ["c", "b", "a"], "ttl_ms": 20000}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "taken");
    // Released at once; a master's answer after the quorum's may still be
    // on its way.
    wait_for("no key of a or c on any master", SETTLE, || async {
        keys(&cluster, &["a", "c"])
            .await
            .iter()
            .all(Option::is_none)
    })
    .await;

    let (status, _) = agent
        .post("/v1/locks/b/release", json!({"token": held}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, granted) = acquire_many(
        &agent,
        json!({"resources": ["c", "b", "a"], "ttl_ms": 20000, "owner": "mover"}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{granted}");
    assert_eq!(granted["resources"], json!(["a", "b", "c"]));
    assert!(
        granted["validity_ms"].as_u64().unwrap() > 15000,
        "{granted}"
    );
    let taken = keys(&cluster, &["a", "b", "c"]).await;
    assert!(taken.iter().all(Option::is_some), "{taken:?}");
    for r in ["a", "b", "c"] {
        let (status, answer) = agent
            .post(&format!("/v1/locks/{r}/acquire"), json!({}))
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "{r}: {answer}");
        let (_, info) = agent.get(&format!("/v1/locks/{r}")).await.unwrap();
        assert_eq!(info["lock"]["owner"], "mover", "{info}");
        assert_eq!(info["lock"]["held_with"], json!(["a", "b", "c"]), "{info}");
    }

    let (status, released) = agent
        .post("/v1/locks/release", json!({"token": granted["token"]}))
        .await;
    assert_eq!(status, StatusCode::OK, "{released}");
    assert_eq!(released["released"], true);
    wait_for("no key of the three on any master", SETTLE, || async {
        keys(&cluster, &["a", "b", "c"])
            .await
            .iter()
            .all(Option::is_none)
    })
    .await;
    let (status, again) = agent
        .post("/v1/locks/release", json!({"token": granted["token"]}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{again}");
    assert_eq!(again["error"]["code"], "invalid_request");
}

/// One fence for the set, above each resource's earlier fences; a later
/// grant of any of them gets a larger one.
#[tokio::test]
async fn the_fence_is_above_every_earlier_fence_of_each_resource() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let mut earlier = 0;
    for r in ["x", "y"] {
        let (status, grant) = agent
            .post(&format!("/v1/locks/{r}/acquire"), json!({"fence": true}))
            .await;
        assert_eq!(status, StatusCode::OK, "{grant}");
        earlier = earlier.max(grant["fence"].as_u64().unwrap());
        agent
            .post(
                &format!("/v1/locks/{r}/release"),
                json!({"token": grant["token"]}),
            )
            .await;
    }
    let (status, set) = acquire_many(&agent, json!({"resources": ["x", "y"], "fence": true})).await;
    assert_eq!(status, StatusCode::OK, "{set}");
    let fence = set["fence"].as_u64().unwrap();
    assert!(fence > earlier, "{fence} not above {earlier}");
    agent
        .post("/v1/locks/release", json!({"token": set["token"]}))
        .await;
    for r in ["x", "y"] {
        let (_, later) = agent
            .post(&format!("/v1/locks/{r}/acquire"), json!({"fence": true}))
            .await;
        assert!(
            later["fence"].as_u64().unwrap() > fence,
            "{r}: {later} after {fence}"
        );
        agent
            .post(
                &format!("/v1/locks/{r}/release"),
                json!({"token": later["token"]}),
            )
            .await;
    }
}

/// Extended by its token here; through another agent only naming its
/// resources (the token must be of them), and released there.
#[tokio::test]
async fn extend_and_release_by_token_here_and_naming_the_resources_elsewhere() {
    let cluster = Cluster::start(MASTERS);
    let here = TestAgent::start(&cluster, "").await;
    let elsewhere = TestAgent::start(&cluster, "").await;
    let (status, set) = acquire_many(&here, json!({"resources": ["p", "q"], "ttl_ms": 2000})).await;
    assert_eq!(status, StatusCode::OK, "{set}");
    let token = set["token"].clone();
    let (status, extended) = here
        .post("/v1/locks/extend", json!({"token": token, "ttl_ms": 30000}))
        .await;
    assert_eq!(status, StatusCode::OK, "{extended}");
    assert!(
        extended["validity_ms"].as_u64().unwrap() > 20000,
        "{extended}"
    );

    let (status, unknown) = elsewhere
        .post("/v1/locks/release", json!({"token": token}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{unknown}");
    let (status, wrong) = elsewhere
        .post(
            "/v1/locks/release",
            json!({"token": token, "resources": ["p", "z"]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{wrong}");
    let held = keys(&cluster, &["p", "q"]).await;
    assert!(held.iter().all(Option::is_some), "{held:?}");
    let (status, extended) = elsewhere
        .post(
            "/v1/locks/extend",
            json!({"token": token, "ttl_ms": 30000, "resources": ["q", "p"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{extended}");
    let (status, released) = elsewhere
        .post(
            "/v1/locks/release",
            json!({"token": token, "resources": ["q", "p"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{released}");
    assert_eq!(released["released"], true, "{released}");
    wait_for("no key of p or q on any master", SETTLE, || async {
        keys(&cluster, &["p", "q"])
            .await
            .iter()
            .all(Option::is_none)
    })
    .await;
}

/// Two clients, on two agents, ask for {a, b} and {b, a} in a loop for
/// 30 s, each holding briefly: neither ever waits out its 20 s wait, and
/// both make progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_never_deadlock_and_both_progress() {
    let cluster = Cluster::start(MASTERS);
    let agents = [
        Arc::new(TestAgent::start(&cluster, "").await),
        Arc::new(TestAgent::start(&cluster, "").await),
    ];
    let until = Instant::now() + Duration::from_secs(30);
    let mut clients = Vec::new();
    for (agent, order) in agents.iter().zip([["a", "b"], ["b", "a"]]) {
        let agent = Arc::clone(agent);
        clients.push(tokio::spawn(async move {
            let (mut granted, mut failed) = (0u64, Vec::new());
            while Instant::now() < until {
                let (status, set) = acquire_many(
                    &agent,
                    json!({"resources": order, "ttl_ms": 5000, "wait_ms": 20000}),
                )
                .await;
                if status != StatusCode::OK {
                    failed.push(set);
                    continue;
                }
                granted += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
                let (status, released) = agent
                    .post("/v1/locks/release", json!({"token": set["token"]}))
                    .await;
                assert_eq!(status, StatusCode::OK, "{released}");
            }
            (granted, failed)
        }));
    }
    for (client, order) in clients.into_iter().zip(["{a, b}", "{b, a}"]) {
        let (granted, failed) = client.await.unwrap();
        println!("{order}: {granted} grants, {} refusals", failed.len());
        assert!(failed.is_empty(), "{order} waited out its wait: {failed:?}");
        assert!(granted >= 10, "{order} made little progress: {granted}");
    }
}

/// Three clients keep taking `a` alone through the same agent; a request
/// for {a, b} that came while they did is granted within its wait, and
/// they go on after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_several_is_not_starved_by_single_resource_traffic() {
    granted_while_singles_take_a(false).await;
}

/// The same with the single clients on another agent: the release each
/// publishes wakes the waiter here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nor_by_single_resource_traffic_through_another_agent() {
    granted_while_singles_take_a(true).await;
}

async fn granted_while_singles_take_a(elsewhere: bool) {
    let cluster = Cluster::start(MASTERS);
    let agent = Arc::new(TestAgent::start(&cluster, "").await);
    let singles_agent = if elsewhere {
        Arc::new(TestAgent::start(&cluster, "").await)
    } else {
        Arc::clone(&agent)
    };
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let singles = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for _ in 0..3 {
        let (agent, stop, singles) = (
            Arc::clone(&singles_agent),
            Arc::clone(&stop),
            Arc::clone(&singles),
        );
        clients.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let (status, grant) = agent
                    .post(
                        "/v1/locks/a/acquire",
                        json!({"ttl_ms": 5000, "wait_ms": 30000}),
                    )
                    .await;
                if status == StatusCode::OK {
                    singles.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    agent
                        .post("/v1/locks/a/release", json!({"token": grant["token"]}))
                        .await;
                }
            }
        }));
    }
    wait_for(
        "the single clients to take a",
        Duration::from_secs(20),
        || {
            let singles = Arc::clone(&singles);
            async move { singles.load(Ordering::Relaxed) >= 5 }
        },
    )
    .await;
    let before = singles.load(Ordering::Relaxed);
    let (status, set) = acquire_many(
        &agent,
        json!({"resources": ["a", "b"], "ttl_ms": 5000, "wait_ms": 20000}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "starved: {set}");
    agent
        .post("/v1/locks/release", json!({"token": set["token"]}))
        .await;
    wait_for(
        "the single clients to go on",
        Duration::from_secs(20),
        || {
            let singles = Arc::clone(&singles);
            async move { singles.load(Ordering::Relaxed) > before + 3 }
        },
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
}

/// A hold of several resources renews them past their TTL, keeps each
/// from a single acquire, and releases them all when its connection
/// closes.
#[tokio::test]
async fn a_hold_of_several_renews_and_releases_them_on_close() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let mut hold = agent
        .stream(
            Method::POST,
            "/v1/locks/hold",
            Some(json!({"resources": ["h1", "h2"], "ttl_ms": 1000, "fence": true})),
        )
        .await;
    assert_eq!(hold.status, StatusCode::OK, "{:?}", hold.error);
    let acquired = hold.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(acquired["event"], "acquired", "{acquired}");
    assert!(acquired["fence"].as_u64().is_some(), "{acquired}");
    let mut renewals = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(2500) {
        let event = hold.next(Duration::from_secs(3)).await.expect("an event");
        assert_eq!(event["event"], "renewed", "{event}");
        renewals += 1;
    }
    assert!(renewals >= 2, "{renewals} renewals");
    let (status, _) = agent.post("/v1/locks/h2/acquire", json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "held past its TTL");
    drop(hold);
    wait_for(
        "both released on close",
        Duration::from_secs(10),
        || async {
            keys(&cluster, &["h1", "h2"])
                .await
                .iter()
                .all(Option::is_none)
        },
    )
    .await;
}

/// An operator's force release of one resource ends the hold of the set
/// (`lost`, `force_released`), and the other resource is released too.
#[tokio::test]
async fn the_loss_of_one_resource_ends_the_hold_of_all() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let mut hold = agent
        .stream(
            Method::POST,
            "/v1/locks/hold",
            Some(json!({"resources": ["l1", "l2"], "ttl_ms": 10000})),
        )
        .await;
    assert_eq!(hold.status, StatusCode::OK, "{:?}", hold.error);
    hold.next(Duration::from_secs(5)).await.unwrap();
    let (status, forced) = agent
        .admin_post("/v1/locks/l1/force-release", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{forced}");
    let lost = hold.next(Duration::from_secs(5)).await.expect("lost");
    assert_eq!(lost, json!({"event": "lost", "reason": "force_released"}));
    wait_for(
        "the other resource released",
        Duration::from_secs(10),
        || async { keys(&cluster, &["l2"]).await.iter().all(Option::is_none) },
    )
    .await;
    let (status, _) = agent.post("/v1/locks/l2/acquire", json!({})).await;
    assert_eq!(status, StatusCode::OK);
}

/// Bad requests: one resource, too many, one twice, a bad name, no
/// resources, the admin socket; a `GET` of `/v1/locks/acquire` still reads
/// the lock named `acquire`.
#[tokio::test]
async fn bad_requests_are_refused_with_codes() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let many: Vec<String> = (0..33).map(|i| format!("r{i}")).collect();
    for body in [
        json!({"resources": ["only"]}),
        json!({"resources": many}),
        json!({"resources": ["a", "b", "a"]}),
        json!({"resources": ["a", "bad name"]}),
        json!({"ttl_ms": 1000}),
        json!({"resources": ["a", "b"], "token": "x"}),
    ] {
        let (status, answer) = acquire_many(&agent, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(
            answer["error"]["code"], "invalid_request",
            "{body}: {answer}"
        );
    }
    let (status, answer) = agent
        .admin_post("/v1/locks/acquire", json!({"resources": ["a", "b"]}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    let (status, answer) = agent.get("/v1/locks/acquire").await.unwrap();
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert_eq!(answer["error"]["code"], "not_found", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("lock key for acquire"), "{message}");
}

/// `redlock-agent lock a b -- cmd` runs the command holding both, with
/// every resource in `REDLOCK_RESOURCES` (one a line), and releases both
/// when it exits; one of them held elsewhere keeps the command from
/// running (exit 75).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lock_command_takes_several_resources() {
    let cluster = Cluster::start(MASTERS);
    let agent = Arc::new(TestAgent::start(&cluster, "").await);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "printf '%s|%s\\n' \"$REDLOCK_RESOURCE\" \"$REDLOCK_RESOURCES\" > {0}; sleep 1.5; echo done >> {0}",
        log.display()
    );
    let mut lock = std::process::Command::new(env!("CARGO_BIN_EXE_redlock-agent"));
    lock.arg("lock")
        .arg("--socket")
        .arg(&agent.socket)
        .args(["cmd-b", "cmd-a", "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let child = lock.spawn().unwrap();
    wait_for("the command to run", Duration::from_secs(10), || async {
        log.exists()
    })
    .await;
    let (status, answer) = agent.post("/v1/locks/cmd-a/acquire", json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{answer}");
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text, "cmd-b|cmd-b\ncmd-a\ndone\n", "{text:?}");
    wait_for("both released", SETTLE, || async {
        keys(&cluster, &["cmd-a", "cmd-b"])
            .await
            .iter()
            .all(Option::is_none)
    })
    .await;

    let held = agent.acquire_ok("cmd-b", json!({"ttl_ms": 20000})).await;
    let mut second = std::process::Command::new(env!("CARGO_BIN_EXE_redlock-agent"));
    second
        .arg("lock")
        .arg("--socket")
        .arg(&agent.socket)
        .args(["--wait", "200ms", "cmd-a", "cmd-b", "--", "true"]);
    let taken = tokio::task::spawn_blocking(move || second.output().unwrap())
        .await
        .unwrap();
    assert_eq!(
        taken.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );
    let said = String::from_utf8_lossy(&taken.stderr);
    assert!(said.contains("cmd-a, cmd-b"), "{said}");
    wait_for("no key of cmd-a left", SETTLE, || async {
        keys(&cluster, &["cmd-a"]).await.iter().all(Option::is_none)
    })
    .await;
    agent
        .post("/v1/locks/cmd-b/release", json!({"token": held}))
        .await;
}
