//! The load one client can put on the masters through semaphores and
//! elections, on real masters. A refused acquire (no wait) on a full
//! semaphore costs each master a few commands, the same for limit 256 as
//! for limit 4 (counted in `INFO commandstats`); reads of a semaphore or
//! of an election's leader take turns with the listings, so readers
//! beyond the listings' cap are answered `429 busy`.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::{wait_for, Cluster, TestAgent};
use hyper::StatusCode;
use serde_json::json;

const MASTERS: usize = 3;

/// Long TTLs, so no permit runs out while the test counts; a probe every
/// 10 s and no leak scan, so little else reaches the masters meanwhile.
const CONFIG: &str = "lock:\n  default_ttl: 60s\n  max_ttl: 60s\nhealth:\n  interval: 10s\nleak_scan:\n  interval: 1h\n";

/// Refused acquires counted per limit.
const REFUSALS: u64 = 20;

/// Most commands one refused acquire may cost a master: one read, with
/// room for a vote that raced a release. Before, a refusal on a full
/// semaphore of limit 256 cost each master about 1,900.
const PER_REFUSAL: u64 = 6;

/// Commands a master may serve meanwhile for other reasons (a probe).
const BACKGROUND: u64 = 40;

/// Every call master `m` has served (`INFO commandstats`), but `INFO`'s
/// own (the test's reads and the probes'), by command.
async fn calls(cluster: &Cluster, m: usize) -> HashMap<String, u64> {
    let mut calls = cluster.command_calls(m).await;
    calls.remove("info");
    calls
}

/// Commands each master served while `REFUSALS` acquires of a full
/// semaphore of `limit`, without a wait, were refused; by command, for
/// the failure message.
async fn refusal_cost(cluster: &Cluster, agent: &TestAgent, limit: u32) -> Vec<(u64, String)> {
    let name = format!("full{limit}");
    let path = format!("/v1/semaphores/{name}/acquire");
    let ask = json!({"limit": limit, "ttl_ms": 60_000});
    for _ in 0..limit {
        let (status, granted) = agent.post(&path, ask.clone()).await;
        assert_eq!(status, StatusCode::OK, "{granted}");
    }
    let before: Vec<_> = futures::future::join_all((0..MASTERS).map(|m| calls(cluster, m))).await;
    for _ in 0..REFUSALS {
        let (status, refused) = agent.post(&path, ask.clone()).await;
        assert_eq!(status, StatusCode::CONFLICT, "{refused}");
        assert_eq!(refused["error"]["code"], "taken", "{refused}");
    }
    let after: Vec<_> = futures::future::join_all((0..MASTERS).map(|m| calls(cluster, m))).await;
    before
        .iter()
        .zip(&after)
        .map(|(before, after)| {
            let mut by_command: Vec<(String, u64)> = after
                .iter()
                .map(|(name, n)| (name.clone(), n - before.get(name).copied().unwrap_or(0)))
                .filter(|(_, n)| *n > 0)
                .collect();
            by_command.sort();
            let total = by_command.iter().map(|(_, n)| n).sum();
            (total, format!("{by_command:?}"))
        })
        .collect()
}

/// 20 refused acquires of a full semaphore cost each master at most a few
/// commands apiece, for limit 256 as for limit 4.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_acquire_costs_each_master_the_same_whatever_the_limit() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, CONFIG).await;
    for limit in [4, 256] {
        let cost = refusal_cost(&cluster, &agent, limit).await;
        for (m, (total, by_command)) in cost.iter().enumerate() {
            eprintln!(
                "limit {limit}, master {m}: {total} commands for {REFUSALS} refusals: {by_command}"
            );
            assert!(
                *total <= REFUSALS * PER_REFUSAL + BACKGROUND,
                "limit {limit}, master {m}: {total} commands for {REFUSALS} refusals: {by_command}"
            );
        }
    }
    agent.stop().await;
}

/// With a master frozen, every read of the masters waits for it (two
/// seconds, more than the second a read waits for its turn): two listings,
/// four semaphore reads and four leader reads sent at once share the two
/// turns, and reads of both new kinds are answered `429 busy` with the
/// listings' code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_and_election_reads_share_the_listings_turns() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, CONFIG).await;
    let (status, granted) = agent
        .post("/v1/semaphores/s/acquire", json!({"limit": 2}))
        .await;
    assert_eq!(status, StatusCode::OK, "{granted}");
    // The limit's note is written after the grant, without the client
    // waiting: once every master has it, nothing of the grant is still on
    // its way to the master frozen next.
    let prefix = agent.config.lock.key_prefix.clone();
    let note = redlock_wire::keys::semaphore_limit_key(&prefix, "s");
    wait_for(
        "the limit's note on every master",
        Duration::from_secs(10),
        || async {
            let mut all = true;
            for m in 0..MASTERS {
                all &= cluster.get(m, &note).await.is_some();
            }
            all
        },
    )
    .await;
    cluster.masters[2].freeze().unwrap();
    let paths = ["/v1/locks"; 2]
        .into_iter()
        .chain(["/v1/semaphores/s"; 4])
        .chain(["/v1/elections/e"; 4]);
    let reads = paths.map(|path| {
        let agent = &agent;
        async move { (path, agent.get(path).await.unwrap()) }
    });
    let answers = futures::future::join_all(reads).await;
    cluster.masters[2].thaw().unwrap();
    let mut busy: HashMap<&str, usize> = HashMap::new();
    for (path, (status, body)) in &answers {
        eprintln!("{path}: {status}");
        if *status == StatusCode::TOO_MANY_REQUESTS {
            assert_eq!(body["error"]["code"], "busy", "{path}: {body}");
            *busy.entry(path).or_default() += 1;
        } else {
            assert!(
                [StatusCode::OK, StatusCode::NOT_FOUND].contains(status),
                "{path}: {status} {body}"
            );
        }
    }
    for path in ["/v1/semaphores/s", "/v1/elections/e"] {
        assert!(
            busy.get(path).copied().unwrap_or(0) >= 1,
            "no read of {path} waited for a turn: {busy:?}"
        );
    }
    agent.stop().await;
}
