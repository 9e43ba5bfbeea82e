//! Lock commands to one master go in batches: what queued while the
//! previous call was on its way is one script call, and each command in it
//! counts exactly as if it had been sent alone. A master frozen for a moment
//! (SIGSTOP) makes the batch deterministic: its first vote is stuck on the
//! way, every later one queues behind it, and they all go together once it
//! thaws.

mod common;

use std::time::Duration;

use common::{wait_for, Cluster, TestAgent};
use serde_json::json;

/// A long node timeout, so the frozen master's queue is sent, not expired.
const PATIENT: &str = "lock:\n  node_timeout: 5s\n  default_ttl: 60s\n  max_ttl: 120s\n";

/// The value of the sample `name{labels...}` in a Prometheus text scrape.
fn sample(scrape: &str, name: &str, labels: &[&str]) -> Option<f64> {
    scrape
        .lines()
        .filter(|line| line.starts_with(name))
        .find(|line| {
            let series = line.split_whitespace().next().unwrap_or("");
            series[name.len()..].starts_with(['{', ' '])
                && labels.iter().all(|l| series.contains(l))
        })
        .and_then(|line| line.split_whitespace().last()?.parse().ok())
}

/// What r1 holds at each resource's lock key, in the order of `tokens`.
async fn r1_values(cluster: &Cluster, tokens: &[(String, String)]) -> Vec<Option<String>> {
    let mut values = Vec::with_capacity(tokens.len());
    for (resource, _) in tokens {
        values.push(cluster.get(0, &format!("redlock:{resource}")).await);
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn votes_queued_behind_a_busy_master_go_in_one_call_and_each_counts() {
    let cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, PATIENT).await;
    let r1 = &cluster.masters[0];

    r1.freeze().unwrap();
    let mut tokens = Vec::new();
    for i in 0..40 {
        // Granted by the four others while r1's votes queue.
        let resource = format!("batch-{i}");
        let token = agent.acquire_ok(&resource, json!({"ttl_ms": 60_000})).await;
        tokens.push((resource, token));
    }
    r1.thaw().unwrap();

    let held: Vec<Option<String>> = tokens
        .iter()
        .map(|(_, token)| Some(token.clone()))
        .collect();
    wait_for(
        "r1 to hold every lock it voted for",
        Duration::from_secs(10),
        || async { r1_values(&cluster, &tokens).await == held },
    )
    .await;
    let (_, scrape) = agent.get_tcp("/metrics").await;
    let name = "redlock_node_batch_commands";
    let calls = sample(&scrape, &format!("{name}_count"), &["node=\"r1\""]).unwrap();
    let commands = sample(&scrape, &format!("{name}_sum"), &["node=\"r1\""]).unwrap();
    let alone = sample(
        &scrape,
        &format!("{name}_bucket"),
        &["node=\"r1\"", "le=\"1\""],
    )
    .unwrap();
    assert!(
        commands >= 40.0,
        "r1 got {commands} commands, expected every vote: {scrape}"
    );
    assert!(
        alone < calls && calls < commands,
        "the votes queued behind the frozen call went together: {calls} calls, {alone} of one \
         command, {commands} commands"
    );

    // Their releases batch the same way, and each deletes its own key.
    r1.freeze().unwrap();
    for (resource, token) in &tokens {
        agent.client.release(resource, token).await.unwrap();
    }
    r1.thaw().unwrap();
    wait_for(
        "r1 to drop every released key",
        Duration::from_secs(10),
        || async {
            r1_values(&cluster, &tokens)
                .await
                .iter()
                .all(Option::is_none)
        },
    )
    .await;
    agent.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_commands_error_never_fails_its_batch() {
    let cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, PATIENT).await;
    let r1 = &cluster.masters[0];
    // An application's hash where r1 would write the lock key of "wrong".
    let mut direct = cluster.redis(0).await;
    let _: () = redis::cmd("HSET")
        .arg("redlock:wrong")
        .arg("field")
        .arg("value")
        .query_async(&mut direct)
        .await
        .unwrap();

    r1.freeze().unwrap();
    let before = agent.acquire_ok("before", json!({"ttl_ms": 60_000})).await;
    let wrong = agent.acquire_ok("wrong", json!({"ttl_ms": 60_000})).await;
    let after = agent.acquire_ok("after", json!({"ttl_ms": 60_000})).await;
    r1.thaw().unwrap();

    wait_for(
        "r1 to hold the locks around the failed one",
        Duration::from_secs(10),
        || async {
            cluster.get(0, "redlock:before").await.as_deref() == Some(before.as_str())
                && cluster.get(0, "redlock:after").await.as_deref() == Some(after.as_str())
        },
    )
    .await;
    wait_for(
        "r1's WRONGTYPE to be counted",
        Duration::from_secs(10),
        || async {
            let (_, scrape) = agent.get_tcp("/metrics").await;
            sample(
                &scrape,
                "redlock_node_errors_total",
                &["node=\"r1\"", "kind=\"wrongtype\""],
            ) == Some(1.0)
        },
    )
    .await;
    let field: Option<String> = redis::cmd("HGET")
        .arg("redlock:wrong")
        .arg("field")
        .query_async(&mut direct)
        .await
        .unwrap();
    assert_eq!(
        field.as_deref(),
        Some("value"),
        "the application's hash is untouched"
    );
    assert!(!wrong.is_empty());
    agent.stop().await;
}
