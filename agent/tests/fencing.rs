//! Fencing tokens minted by the quorum, on real masters: they grow from one
//! grant to the next across agents, resources, acquires and holds; a master
//! that lost its counter catches up before it votes again; with agents'
//! clocks apart, only the write-back keeps them in order (the control,
//! through the agent's test-only switch); and a hold can leave its lock to
//! expire when its client vanishes.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{wait_for, Cluster, TestAgent};
use hyper::StatusCode;
use serde_json::{json, Value};

/// Short TTLs so a quarantine (max_ttl + extra = 2.5s) passes quickly.
const SHORT: &str = "lock:\n  default_ttl: 2s\n  max_ttl: 2s\n  node_timeout: 200ms\n  retry_delay: 20ms\n  retry_jitter: 20ms\nhealth:\n  interval: 100ms\ndelayed_restart:\n  extra: 500ms\n";

const COUNTER: &str = "redlock: fence";

async fn fenced(agent: &TestAgent, resource: &str) -> (String, u64) {
    let (status, body) = agent
        .post(
            &format!("/v1/locks/{resource}/acquire"),
            json!({"ttl_ms": 2000, "fence": true}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let fence = body["fence"]
        .as_u64()
        .unwrap_or_else(|| panic!("no fence in {body}"));
    (body["token"].as_str().unwrap().to_string(), fence)
}

async fn release(agent: &TestAgent, resource: &str, token: &str) {
    let (status, body) = agent
        .post(
            &format!("/v1/locks/{resource}/release"),
            json!({ "token": token }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn fences_grow_across_agents_resources_and_holds() {
    let cluster = Cluster::start(3);
    let a = TestAgent::start(&cluster, "").await;
    let b = TestAgent::start(&cluster, "").await;
    let mut last = 0;
    for round in 0..10 {
        let agent = if round % 2 == 0 { &a } else { &b };
        let resource = if round % 3 == 0 { "fa" } else { "fb" };
        let (token, fence) = fenced(agent, resource).await;
        assert!(fence > last, "round {round}: fence {fence} after {last}");
        last = fence;
        release(agent, resource, &token).await;
    }
    // Every master that voted holds the last fence (or more).
    let mut raised = 0;
    for i in 0..3 {
        let counter: u64 = cluster
            .get(i, COUNTER)
            .await
            .unwrap_or_default()
            .parse()
            .unwrap_or(0);
        assert!(
            counter <= last,
            "r{}: {counter} above the last fence {last}",
            i + 1
        );
        raised += usize::from(counter == last);
    }
    assert!(raised >= 2, "a quorum raised the last fence");

    // A hold's `acquired` event carries it too.
    let mut hold = b.hold("fh", json!({"ttl_ms": 2000, "fence": true})).await;
    assert_eq!(hold.status, StatusCode::OK, "{:?}", hold.error);
    let acquired = hold.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(acquired["event"], "acquired", "{acquired}");
    let fence = acquired["fence"].as_u64().unwrap();
    assert!(fence > last, "hold fence {fence} after {last}");
    drop(hold);

    // Not asked for, not minted.
    let (status, body) = a.post("/v1/locks/plain/acquire", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.get("fence").is_none(), "{body}");
}

#[tokio::test]
async fn lock_fence_always_fences_every_grant() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, "lock:\n  fence: always\n").await;
    let (status, first) = agent.post("/v1/locks/x/acquire", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, second) = agent.post("/v1/locks/y/acquire", json!({})).await;
    assert_eq!(status, StatusCode::OK, "{second}");
    let (f1, f2) = (first["fence"].as_u64(), second["fence"].as_u64());
    assert!(f1.is_some() && f2 > f1, "{first} then {second}");
}

/// FLUSHALL on one master loses its counter; the agent quarantines it and,
/// at readmission, raises its counter to the highest the other masters
/// hold, before it may vote again.
#[tokio::test]
async fn a_master_that_lost_its_counter_catches_up_before_it_votes() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, SHORT).await;
    let (token, fence) = fenced(&agent, "c").await;
    release(&agent, "c", &token).await;
    let mut conn = cluster.redis(0).await;
    let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await.unwrap();
    assert_eq!(cluster.get(0, COUNTER).await, None);
    wait_for("r1 quarantined", Duration::from_secs(5), || async {
        agent.nodes().await["nodes"][0]["state"] == "quarantined"
    })
    .await;
    wait_for("r1 readmitted", Duration::from_secs(15), || async {
        agent.nodes().await["nodes"][0]["state"] == "up"
    })
    .await;
    let counter: u64 = cluster
        .get(0, COUNTER)
        .await
        .expect("the counter is back with the marker")
        .parse()
        .unwrap();
    assert!(
        counter >= fence,
        "r1's counter {counter} caught up to {fence}"
    );
    let (_, next) = fenced(&agent, "c").await;
    assert!(next > fence);
}

/// Two agents as child processes with the test-only switches: agent B's
/// clock for the floor is a minute behind A's. With the write-back, B's
/// fence after A's grant is still above it; without (the control), B
/// mints from its own floor, below A's: fences out of order, which is what
/// the fault suite's checker must be able to see.
#[tokio::test]
async fn only_the_write_back_keeps_fences_ordered_across_skewed_clocks() {
    for writeback in [true, false] {
        let cluster = Cluster::start(3);
        let dir = tempfile::tempdir().unwrap();
        let a = spawn_agent(&cluster, dir.path(), "a", 0, writeback).await;
        let b = spawn_agent(&cluster, dir.path(), "b", -60_000, writeback).await;
        let (_, fa) = fenced_at(&a.1, "k").await;
        let (_, fb) = fenced_at(&b.1, "k2").await;
        if writeback {
            assert!(fb > fa, "with the write-back: {fa} then {fb}");
        } else {
            assert!(
                fb < fa,
                "the control found no fence out of order: {fa} then {fb}"
            );
        }
    }
}

async fn spawn_agent(
    cluster: &Cluster,
    dir: &Path,
    name: &str,
    skew_ms: i64,
    writeback: bool,
) -> (tokio::process::Child, std::path::PathBuf) {
    let socket = dir.join(format!("{name}.sock"));
    let admin = dir.join(format!("{name}-admin.sock"));
    let yaml = cluster.config_yaml(
        &socket,
        // SHORT: the masters just started, so this agent (which cannot
        // know they started empty) keeps them out for max_ttl + extra.
        &format!(
            "admin:\n  socket:\n    path: {:?}\n{SHORT}",
            admin.display().to_string()
        ),
    );
    let config = dir.join(format!("{name}.yaml"));
    std::fs::write(&config, yaml).unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlock-agent"));
    command
        .arg("--config")
        .arg(&config)
        .env("REDLOCK_TEST_FENCE_CLOCK_SKEW_MS", skew_ms.to_string())
        .env_remove("REDLOCK_TEST_NO_FENCE_WRITEBACK")
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    if !writeback {
        command.env("REDLOCK_TEST_NO_FENCE_WRITEBACK", "1");
    }
    let child = command.spawn().unwrap();
    wait_for("the agent to serve", Duration::from_secs(20), || async {
        matches!(
            common::request(&socket, hyper::Method::GET, "/v1/nodes", bytes::Bytes::new()).await,
            Ok((StatusCode::OK, ref body)) if body["available"] == true
        )
    })
    .await;
    (child, socket)
}

async fn fenced_at(socket: &Path, resource: &str) -> (String, u64) {
    let (status, body): (StatusCode, Value) = common::request(
        socket,
        hyper::Method::POST,
        &format!("/v1/locks/{resource}/acquire"),
        bytes::Bytes::from(json!({"fence": true}).to_string()),
    )
    .await
    .unwrap();
    assert_eq!(status, StatusCode::OK, "{body}");
    (
        body["token"].as_str().unwrap().to_string(),
        body["fence"].as_u64().unwrap(),
    )
}

/// `on_disconnect: expire`: the client vanishes and its lock stays until
/// its TTL runs out, so its in-flight writes land before anyone else's
/// grant; the default releases at once. Both holds' clients vanish
/// together: once the default one's key is gone, the agent has seen both
/// connections close.
#[tokio::test]
async fn a_hold_may_leave_its_lock_to_expire_when_its_client_vanishes() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, "").await;
    let mut expiring = agent
        .hold("exp", json!({"ttl_ms": 3000, "on_disconnect": "expire"}))
        .await;
    assert_eq!(expiring.status, StatusCode::OK, "{:?}", expiring.error);
    expiring.next(Duration::from_secs(5)).await.unwrap();
    let mut releasing = agent.hold("rel", json!({"ttl_ms": 3000})).await;
    assert_eq!(releasing.status, StatusCode::OK, "{:?}", releasing.error);
    releasing.next(Duration::from_secs(5)).await.unwrap();
    drop(releasing);
    drop(expiring);
    wait_for(
        "the default hold to release",
        Duration::from_secs(5),
        || async {
            let mut gone = true;
            for i in 0..3 {
                gone &= cluster.get(i, "redlock:rel").await.is_none();
            }
            gone
        },
    )
    .await;
    for i in 0..3 {
        assert!(
            cluster.get(i, "redlock:exp").await.is_some(),
            "the expiring hold's key is still on r{}",
            i + 1
        );
    }
    let (status, body) = agent.post("/v1/locks/exp/acquire", json!({})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    // And it does expire.
    let (status, body) = agent
        .post("/v1/locks/exp/acquire", json!({"wait_ms": 10000}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// `redlock-agent lock --fence` against the real agent: the command sees
/// the fence the quorum minted as `REDLOCK_FENCE`, above an earlier grant's.
#[tokio::test]
async fn lock_fence_hands_the_command_the_minted_fence() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, "").await;
    let (token, before) = fenced(&agent, "cmd").await;
    release(&agent, "cmd", &token).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fence");
    let status = tokio::process::Command::new(env!("CARGO_BIN_EXE_redlock-agent"))
        .args(["lock", "--fence", "--socket"])
        .arg(&agent.socket)
        .args(["cmd", "--", "sh", "-c"])
        .arg(format!("printf %s \"$REDLOCK_FENCE\" > {}", out.display()))
        .status()
        .await
        .unwrap();
    assert!(status.success(), "{status}");
    let fence: u64 = std::fs::read_to_string(&out)
        .unwrap()
        .parse()
        .expect("REDLOCK_FENCE is a number");
    assert!(fence > before, "{fence} after {before}");
}
