//! Operator reads at scale, on real masters: 100,000 lock keys on each of
//! five masters; one lock in one round per master, prefix paging that
//! lists every key exactly once while other keys come and go, and answers
//! that name the masters they could not read instead of looking complete.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use common::{Cluster, TestAgent};
use hyper::StatusCode;
use serde_json::{json, Value};

/// Lock keys written on every master.
const KEYS: usize = 100_000;

/// A lock value of the agents' old token format (40 hex digits, a dot, an
/// owner), which the listing shows as it shows current tokens.
fn token(i: usize) -> String {
    format!("{i:040x}.owner-{}", i % 7)
}

/// The resource names: `job-000000` … `job-099999`.
fn resource(i: usize) -> String {
    format!("job-{i:06}")
}

/// Writes `KEYS` lock keys on master `m` in one server-side loop (a
/// pipeline of 100,000 SETs takes seconds on a busy machine; this takes a
/// fraction of one): the same names and token-shaped values as [`resource`]
/// and [`token`].
async fn fill(cluster: &Cluster, m: usize, prefix: &str) {
    let mut conn = patient(cluster, m).await;
    let () = redis::Script::new(
        r#"for i = 0, tonumber(ARGV[2]) - 1 do
  redis.call("set", ARGV[1] .. string.format("job-%06d", i),
    string.format("%040x", i) .. ".owner-" .. (i % 7), "px", 600000)
end"#,
    )
    .arg(prefix)
    .arg(KEYS)
    .invoke_async(&mut conn)
    .await
    .unwrap();
}

/// A connection to master `m` without a response timeout: a pipeline of
/// 10,000 writes may take longer than the client's default, and so may
/// connecting on a busy machine.
async fn patient(cluster: &Cluster, m: usize) -> redis::aio::MultiplexedConnection {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(10)))
        .set_response_timeout(None);
    redis::Client::open(cluster.masters[m].url())
        .unwrap()
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap()
}

/// `INFO commandstats` of every master.
async fn read_calls(cluster: &Cluster) -> Vec<HashMap<String, u64>> {
    let mut out = Vec::new();
    for m in 0..cluster.masters.len() {
        out.push(cluster.command_calls(m).await);
    }
    out
}

/// Per master: the commands an operator read sent (`SCAN`, `EVALSHA`: its
/// round trips), and all the lock-key commands Redis ran (the `GET` and
/// `PTTL` each script runs inside one `EVALSHA` included). Health probes
/// and these `INFO` calls are not counted.
fn diff(after: &[HashMap<String, u64>], before: &[HashMap<String, u64>]) -> Vec<(u64, u64)> {
    let count = |calls: &HashMap<String, u64>, names: &[&str]| -> u64 {
        names
            .iter()
            .map(|c| calls.get(*c).copied().unwrap_or(0))
            .sum()
    };
    const SENT: &[&str] = &["scan", "evalsha", "eval", "get", "pttl", "mget", "exists"];
    const SCRIPTED: &[&str] = &["get", "pttl"];
    after
        .iter()
        .zip(before)
        .map(|(a, b)| {
            let ran = count(a, SENT) - count(b, SENT);
            let scripted = count(a, SCRIPTED) - count(b, SCRIPTED);
            (ran - scripted, ran)
        })
        .collect()
}

/// A slow probe interval keeps the health task's own commands out of the
/// counts; the scanner is off for the same reason.
/// A node timeout above the default keeps a busy test machine from marking
/// masters down mid-walk (the walk would then rightly answer `partial`).
const EXTRA: &str = "health:\n  interval: 10s\nleak_scan:\n  interval: 1h\nlock:\n  node_timeout: 250ms\n  default_ttl: 5s\n";

/// The issue-18 scenario: 100,000 lock keys on 5 masters. One lock answers
/// in one round per master; a prefix walk returns every key that stays
/// exactly once while other keys under the prefix come and go; 20 listings
/// at once each answer honestly (complete, or 429 busy), never an empty
/// list that looks complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_locks_on_five_masters() {
    let cluster = Cluster::start(5);
    let agent = TestAgent::start(&cluster, EXTRA).await;
    let prefix = agent.config.lock.key_prefix.clone();
    let started = Instant::now();
    futures::future::join_all((0..5).map(|m| fill(&cluster, m, &prefix))).await;
    eprintln!(
        "wrote {KEYS} keys on each of 5 masters in {:?}",
        started.elapsed()
    );
    // The writes block each master for a moment; a probe may have timed out.
    agent.wait_usable(5).await;

    // One lock: one READ_KEYS call per master, nothing else.
    let (status, _) = agent.get("/v1/locks/job-012345").await.unwrap();
    assert_eq!(
        status,
        StatusCode::OK,
        "a first call to load nothing lazily"
    );
    let before = read_calls(&cluster).await;
    let asked = Instant::now();
    let (status, one) = agent.get("/v1/locks/job-012345").await.unwrap();
    let took = asked.elapsed();
    let cost = diff(&read_calls(&cluster).await, &before);
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(
        cost,
        [(1, 3); 5],
        "one EVALSHA (GET + PTTL inside) per master"
    );
    let lock = &one["lock"];
    assert_eq!(lock["resource"], "job-012345");
    assert_eq!(lock["owner"], format!("owner-{}", 12345 % 7));
    assert_eq!(lock["quorum_agrees"], true);
    assert_eq!(one["partial"], false);
    assert_eq!(one["unread"], json!([]));
    let nodes = lock["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 5);
    assert!(nodes
        .iter()
        .all(|n| n["state"] == "held" && n["pttl_ms"].as_u64().unwrap() > 0));
    assert!(
        !one.to_string().contains(&token(12345)[..40]),
        "never the token"
    );
    eprintln!("GET /v1/locks/job-012345: {took:?}, (commands sent, run) per master {cost:?}");

    let (status, missing) = agent.get("/v1/locks/job-999999").await.unwrap();
    assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    assert_eq!(missing["error"]["code"], "not_found");

    // A prefix page: the first names after nothing, with the total.
    let before = read_calls(&cluster).await;
    let asked = Instant::now();
    let (status, page) = agent
        .get("/v1/locks?prefix=job-0123&limit=50")
        .await
        .unwrap();
    let took = asked.elapsed();
    let cost = diff(&read_calls(&cluster).await, &before);
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["total"], 100);
    assert_eq!(page["locks"].as_array().unwrap().len(), 50);
    assert_eq!(page["locks"][0]["resource"], "job-012300");
    assert_eq!(page["next_cursor"], "job-012349");
    assert_eq!(page["truncated"], true);
    assert_eq!(page["partial"], false);
    eprintln!(
        "GET /v1/locks?prefix=job-0123&limit=50: {took:?}, {} keys scanned, (commands sent, run) per master {cost:?}",
        page["scanned"]
    );

    // Walk `job-01` (10,000 keys) in pages of 2,500 while a churn task
    // deletes and re-creates the odd-numbered keys. The even ones stay put
    // and must each be listed exactly once; nothing may be listed twice.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn = {
        let stop = std::sync::Arc::clone(&stop);
        let mut conns = Vec::new();
        for m in 0..5 {
            conns.push(patient(&cluster, m).await);
        }
        let prefix = prefix.clone();
        tokio::spawn(async move {
            let mut round = 0usize;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let mut pipe = redis::pipe();
                for i in (10_001..20_000).step_by(2).skip(round % 50).step_by(50) {
                    let key = format!("{prefix}{}", resource(i));
                    if round.is_multiple_of(2) {
                        pipe.cmd("DEL").arg(&key).ignore();
                    } else {
                        pipe.cmd("SET")
                            .arg(&key)
                            .arg(token(i))
                            .arg("PX")
                            .arg(600_000)
                            .ignore();
                    }
                }
                for conn in &mut conns {
                    let () = pipe.query_async(conn).await.unwrap();
                }
                round += 1;
            }
            round
        })
    };
    let mut seen: Vec<String> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    let mut partial_pages = 0;
    let walk = Instant::now();
    let before = read_calls(&cluster).await;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/locks?prefix=job-01&limit=2500&cursor={c}"),
            None => "/v1/locks?prefix=job-01&limit=2500".to_string(),
        };
        let (status, page) = agent.get(&path).await.unwrap();
        assert_eq!(status, StatusCode::OK, "{page}");
        // A master a busy machine marks down mid-walk makes a page partial,
        // and says which; the keys are on every master, so the walk still
        // finds each of them on the others.
        if page["partial"] == true {
            assert!(!page["unread"].as_array().unwrap().is_empty(), "{page}");
            partial_pages += 1;
        }
        pages += 1;
        for lock in page["locks"].as_array().unwrap() {
            seen.push(lock["resource"].as_str().unwrap().to_string());
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_string()),
            None => break,
        }
        assert!(pages < 100, "the walk does not end");
    }
    let walked = walk.elapsed();
    let cost = diff(&read_calls(&cluster).await, &before);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds = churn.await.unwrap();
    assert!(rounds > 0, "keys came and went during the walk");
    let unique: BTreeSet<&String> = seen.iter().collect();
    assert_eq!(unique.len(), seen.len(), "a resource was listed twice");
    assert!(
        seen.iter().all(|r| r.starts_with("job-01")),
        "only the prefix"
    );
    let stable: BTreeSet<String> = (10_000..20_000).step_by(2).map(resource).collect();
    let missing: Vec<_> = stable
        .iter()
        .filter(|r| !unique.contains(r))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "keys present for the whole walk were not listed: {missing:?}"
    );
    eprintln!(
        "walked job-01 in {pages} pages ({partial_pages} partial, {} locks, {rounds} churn rounds) in {walked:?}, (commands sent, run) per master {cost:?}",
        seen.len()
    );

    // 20 listings at once: each answers complete, or 429 busy; never 200
    // with an empty list.
    let calls = (0..20).map(|_| agent.get("/v1/locks?limit=100"));
    let answers = futures::future::join_all(calls).await;
    let mut busy = 0;
    for answer in answers {
        let (status, body) = answer.unwrap();
        match status {
            StatusCode::OK => {
                // Complete, or partial and naming what it could not read.
                assert_eq!(
                    body["partial"] == true,
                    !body["unread"].as_array().unwrap().is_empty(),
                    "{}",
                    body["unread"]
                );
                assert_eq!(body["locks"].as_array().unwrap().len(), 100, "a full page");
                assert!(
                    body["total"].as_u64().unwrap() >= 95_000,
                    "{}",
                    body["total"]
                );
            }
            StatusCode::TOO_MANY_REQUESTS => {
                assert_eq!(body["error"]["code"], "busy");
                busy += 1;
            }
            other => panic!("{other}: {body}"),
        }
    }
    eprintln!("20 parallel listings: {} answered, {busy} busy", 20 - busy);
    agent.stop().await;
}

/// A frozen master is named in `unread` and the page says `partial`; with
/// fewer than a quorum readable the answer is 503, never a short list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_masters_are_named_never_a_silent_short_list() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, "health:\n  interval: 10s\n").await;
    let prefix = agent.config.lock.key_prefix.clone();
    for m in 0..3 {
        cluster
            .plant(m, &format!("{prefix}a"), &token(1), 60_000)
            .await;
    }
    cluster.masters[2].freeze().unwrap();
    let (status, page) = agent.get("/v1/locks").await.unwrap();
    assert_eq!(status, StatusCode::OK, "{page}");
    assert_eq!(page["partial"], true);
    assert_eq!(page["unread"], json!(["r3"]));
    assert_eq!(page["locks"][0]["nodes"][2]["state"], "unknown");
    let (status, one) = agent.get("/v1/locks/a").await.unwrap();
    assert_eq!(status, StatusCode::OK, "{one}");
    assert_eq!(one["unread"], json!(["r3"]));
    assert_eq!(one["partial"], true);

    cluster.masters[1].freeze().unwrap();
    for path in ["/v1/locks", "/v1/locks/a"] {
        let (status, body) = agent.get(path).await.unwrap();
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{path}: {body}");
        assert_eq!(body["error"]["code"], "no_quorum");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("r2, r3"), "{message}");
    }
    cluster.masters[1].thaw().unwrap();
    cluster.masters[2].thaw().unwrap();

    let (status, body) = agent.get("/v1/locks?limit=0").await.unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "invalid_request");
    let (status, body) = agent.get("/v1/locks?prefix=a*").await.unwrap();
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    agent.stop().await;
}

/// `/v1/leaks` names the masters its last scan could not read, and says
/// `partial` before the first scan instead of an empty, clean-looking report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leak_reports_name_the_masters_they_could_not_scan() {
    let mut cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, "leak_scan:\n  interval: 1h\n").await;
    let report: Value = agent.get("/v1/leaks").await.unwrap().1;
    assert_eq!(report["scans"], 0);
    assert_eq!(report["partial"], true);
    assert_eq!(report["unread"], json!(["r1", "r2", "r3"]));
    drop(report);
    agent.stop().await;

    cluster.masters[1].kill();
    let agent = TestAgent::start(&cluster, "leak_scan:\n  interval: 200ms\n").await;
    common::wait_for("a scan to end", Duration::from_secs(10), || async {
        agent.get("/v1/leaks").await.unwrap().1["scans"].as_u64() >= Some(1)
    })
    .await;
    let report = agent.get("/v1/leaks").await.unwrap().1;
    assert_eq!(report["partial"], true, "{report}");
    assert_eq!(report["unread"], json!(["r2"]));
    assert!(report["nodes"][1]["error"].is_string());
    agent.stop().await;
}
