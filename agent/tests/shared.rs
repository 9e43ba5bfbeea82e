//! Read-write locks on real masters: readers through several agents hold
//! at once and exclude writers; a waiting writer stops new readers and is
//! granted when the readers it waits for leave, even behind a steady
//! stream of overlapping readers; readers waiting behind a writer all
//! enter when it releases; a closed connection releases a reader's and a
//! writer's hold; a reader re-enters its grant by its token, in its mode
//! only.

mod common;

use std::time::Duration;

use common::{wait_for, Cluster, TestAgent};
use hyper::StatusCode;
use serde_json::{json, Value};

const MASTERS: usize = 3;
const PREFIX: &str = "redlock:";
/// How long a release's last masters may take to answer after its quorum.
const SETTLE: Duration = Duration::from_secs(5);

/// The readers recorded at `resource`'s key on master `m` (none when the
/// key is gone or a writer's).
async fn readers_on(cluster: &Cluster, m: usize, resource: &str) -> usize {
    let mut conn = cluster.redis(m).await;
    let key = format!("{PREFIX}{resource}");
    let kind: String = redis::cmd("TYPE")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    if kind != "zset" {
        return 0;
    }
    redis::cmd("ZCARD")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

async fn acquire(agent: &TestAgent, resource: &str, body: Value) -> (StatusCode, Value) {
    agent
        .post(&format!("/v1/locks/{resource}/acquire"), body)
        .await
}

async fn release(agent: &TestAgent, resource: &str, token: &Value) {
    let (status, answer) = agent
        .post(
            &format!("/v1/locks/{resource}/release"),
            json!({"token": token}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["released"], true, "{answer}");
}

/// 20 readers through 3 agents hold one lock at once, each recorded on
/// every master; a writer is refused while they hold it, and so is a
/// reader's re-entry as a writer; once they release it the writer is
/// granted, and then a reader is refused.
#[tokio::test]
async fn twenty_readers_through_three_agents_hold_at_once_and_exclude_a_writer() {
    let cluster = Cluster::start(MASTERS);
    let agents = [
        TestAgent::start(&cluster, "").await,
        TestAgent::start(&cluster, "").await,
        TestAgent::start(&cluster, "").await,
    ];
    let mut holds = Vec::new();
    for i in 0..20 {
        let agent = &agents[i % agents.len()];
        let mut hold = agent
            .hold(
                "catalog",
                json!({"mode": "shared", "ttl_ms": 20000, "owner": format!("reader-{i}")}),
            )
            .await;
        assert_eq!(hold.status, StatusCode::OK, "reader {i}: {:?}", hold.error);
        let acquired = hold.next(Duration::from_secs(5)).await.unwrap();
        assert_eq!(acquired["event"], "acquired", "{acquired}");
        holds.push(hold);
    }
    for m in 0..MASTERS {
        assert_eq!(readers_on(&cluster, m, "catalog").await, 20, "master {m}");
    }
    let (status, refused) = acquire(&agents[1], "catalog", json!({"ttl_ms": 20000})).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "taken");
    // Every agent lists the 20, its own marked held here.
    let (status, listed) = agents[0].get("/v1/locks/catalog").await.unwrap();
    assert_eq!(status, StatusCode::OK, "{listed}");
    let lock = &listed["lock"];
    assert_eq!(lock["mode"], "shared", "{lock}");
    assert_eq!(lock["quorum_agrees"], true, "{lock}");
    let readers = lock["readers"].as_array().unwrap();
    assert_eq!(readers.len(), 20, "{lock}");
    assert!(readers.iter().all(|r| r["masters"] == 3), "{lock}");
    let here = readers.iter().filter(|r| r["held_here"] == true).count();
    assert_eq!(here, 7, "{lock}");
    assert!(readers.iter().any(|r| r["owner"] == "reader-19"), "{lock}");
    // Each agent's summary counts its own readers, apart from its locks.
    let (_, summary) = agents[0].get("/v1/summary").await.unwrap();
    assert_eq!(summary["readers_held"], 7, "{summary}");
    assert_eq!(summary["locks_held"], 0, "{summary}");
    let (_, page) = agents[1].get("/v1/locks?prefix=cat").await.unwrap();
    assert_eq!(
        page["locks"][0]["readers"].as_array().map(Vec::len),
        Some(20),
        "{page}"
    );

    drop(holds);
    wait_for("every reader released on every master", SETTLE, || async {
        let mut left = 0;
        for m in 0..MASTERS {
            left += readers_on(&cluster, m, "catalog").await;
        }
        left == 0
    })
    .await;
    let (status, writer) = acquire(&agents[2], "catalog", json!({"ttl_ms": 20000})).await;
    assert_eq!(status, StatusCode::OK, "{writer}");
    assert!(writer.get("mode").is_none(), "{writer}");
    let (status, refused) = acquire(
        &agents[0],
        "catalog",
        json!({"mode": "shared", "ttl_ms": 20000}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "taken");
}

/// A writer that waits behind two readers stops new readers (on another
/// agent too) while it waits, and is granted once the two release.
#[tokio::test]
async fn a_waiting_writer_excludes_new_readers_and_enters_when_readers_leave() {
    let cluster = Cluster::start(MASTERS);
    let a = TestAgent::start(&cluster, "").await;
    let b = TestAgent::start(&cluster, "").await;
    let shared = json!({"mode": "shared", "ttl_ms": 30000});
    let (status, first) = acquire(&a, "config", shared.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    assert_eq!(first["mode"], "shared");
    let (status, second) = acquire(&b, "config", shared.clone()).await;
    assert_eq!(status, StatusCode::OK, "{second}");

    let writer = {
        let socket = b.client.clone();
        tokio::spawn(async move {
            let options = redlock_client::AcquireOptions::new()
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(60));
            socket.acquire("config", &options).await
        })
    };
    // The writer's first vote flags the key on the masters it reached.
    let flag = redlock_wire::keys::waiting_key(PREFIX, &format!("{PREFIX}config"));
    wait_for("the waiting writer's flag on a quorum", SETTLE, || async {
        let mut flagged = 0;
        for m in 0..MASTERS {
            flagged += usize::from(cluster.get(m, &flag).await.as_deref() == Some("w"));
        }
        flagged >= 2
    })
    .await;
    let (status, refused) = acquire(&a, "config", shared.clone()).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "a new reader beside a waiting writer: {refused}"
    );
    assert!(!writer.is_finished(), "the writer entered beside readers");

    release(&a, "config", &first["token"]).await;
    // One reader still holds it: the writer cannot have entered.
    assert!(!writer.is_finished(), "the writer entered beside a reader");
    release(&b, "config", &second["token"]).await;
    let granted = writer
        .await
        .unwrap()
        .expect("the writer, once the readers left");
    assert_eq!(granted.mode, redlock_wire::Mode::Exclusive);
    let (status, refused) = acquire(&b, "config", shared).await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
}

/// Readers that keep coming, each overlapping the next, never leave the
/// lock free; a writer behind them is granted anyway, long before the
/// stream stops: its waiting flag lets the readers there finish and no
/// new one in.
#[tokio::test]
async fn a_writer_behind_a_steady_stream_of_overlapping_readers_is_granted() {
    const READER_TTL_MS: u64 = 4000;
    let cluster = Cluster::start(MASTERS);
    let a = TestAgent::start(&cluster, "").await;
    let b = TestAgent::start(&cluster, "").await;
    let stop = tokio_util::sync::CancellationToken::new();
    // Each reader holds for a second; a new one starts every 250 ms.
    let stream = {
        let (client, stop) = (a.client.clone(), stop.clone());
        tokio::spawn(async move {
            let mut readers = tokio::task::JoinSet::new();
            let mut admitted = 0_u32;
            while !stop.is_cancelled() {
                let client = client.clone();
                readers.spawn(async move {
                    let options = redlock_client::AcquireOptions::new()
                        .shared()
                        .ttl(Duration::from_millis(READER_TTL_MS));
                    let grant = client.acquire("index", &options).await.ok()?;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    client.release("index", &grant.token).await.ok()
                });
                tokio::time::sleep(Duration::from_millis(250)).await;
                while let Some(done) = readers.try_join_next() {
                    admitted += u32::from(done.unwrap().is_some());
                }
            }
            while let Some(done) = readers.join_next().await {
                admitted += u32::from(done.unwrap().is_some());
            }
            admitted
        })
    };
    wait_for("three readers holding the lock at once", SETTLE, || async {
        readers_on(&cluster, 0, "index").await >= 3
    })
    .await;
    // The stream goes on for far longer than this wait: only the flag
    // can let the writer in.
    let options = redlock_client::AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(30));
    let granted = b.client.acquire("index", &options).await;
    let readers_then: usize = {
        let mut n = 0;
        for m in 0..MASTERS {
            n += readers_on(&cluster, m, "index").await;
        }
        n
    };
    stop.cancel();
    let admitted = stream.await.unwrap();
    let granted = granted.expect("the writer behind the stream of readers");
    assert_eq!(readers_then, 0, "readers beside the writer");
    assert!(admitted >= 3, "the readers overlapped: {admitted} admitted");
    b.client.release("index", &granted.token).await.unwrap();
}

/// Readers waiting behind a writer (through two agents) all enter when it
/// releases, and hold together.
#[tokio::test]
async fn readers_behind_a_writer_all_enter_when_it_releases() {
    let cluster = Cluster::start(MASTERS);
    let a = TestAgent::start(&cluster, "").await;
    let b = TestAgent::start(&cluster, "").await;
    let (status, writer) = acquire(&a, "schema", json!({"ttl_ms": 30000})).await;
    assert_eq!(status, StatusCode::OK, "{writer}");
    let mut readers = tokio::task::JoinSet::new();
    for i in 0..6 {
        let client = if i % 2 == 0 {
            a.client.clone()
        } else {
            b.client.clone()
        };
        readers.spawn(async move {
            let options = redlock_client::AcquireOptions::new()
                .shared()
                .ttl(Duration::from_secs(30))
                .wait(Duration::from_secs(60));
            client.acquire("schema", &options).await
        });
    }
    let flag = redlock_wire::keys::waiting_key(PREFIX, &format!("{PREFIX}schema"));
    wait_for("the waiting readers' flag", SETTLE, || async {
        cluster.get(0, &flag).await.is_some()
    })
    .await;
    assert!(
        readers.try_join_next().is_none(),
        "a reader entered beside the writer"
    );
    release(&a, "schema", &writer["token"]).await;
    let mut tokens = Vec::new();
    while let Some(reader) = readers.join_next().await {
        let grant = reader.unwrap().expect("a reader, once the writer left");
        assert_eq!(grant.mode, redlock_wire::Mode::Shared);
        tokens.push(grant.token);
    }
    for m in 0..MASTERS {
        assert_eq!(readers_on(&cluster, m, "schema").await, 6, "master {m}");
    }
}

/// A reader's hold and then a writer's hold are released on every master
/// when their connections close.
#[tokio::test]
async fn holds_of_readers_and_writers_end_with_their_connections() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let mut reader = agent
        .hold("report", json!({"mode": "shared", "ttl_ms": 1500}))
        .await;
    assert_eq!(reader.status, StatusCode::OK, "{:?}", reader.error);
    reader.next(Duration::from_secs(5)).await.unwrap();
    let mut other = agent
        .hold("report", json!({"mode": "shared", "ttl_ms": 1500}))
        .await;
    other.next(Duration::from_secs(5)).await.unwrap();
    // Each reader's hold is its own: both are renewed, neither taken for
    // the other's.
    let renewed = other.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(renewed["event"], "renewed", "{renewed}");
    drop(reader);
    wait_for("one reader left on every master", SETTLE, || async {
        let mut counts = Vec::new();
        for m in 0..MASTERS {
            counts.push(readers_on(&cluster, m, "report").await);
        }
        counts == vec![1; MASTERS]
    })
    .await;
    drop(other);
    wait_for("the key gone on every master", SETTLE, || async {
        let mut left = 0;
        for m in 0..MASTERS {
            left += readers_on(&cluster, m, "report").await;
        }
        left == 0
    })
    .await;
    let mut writer = agent.hold("report", json!({"ttl_ms": 30000})).await;
    assert_eq!(writer.status, StatusCode::OK, "{:?}", writer.error);
    writer.next(Duration::from_secs(5)).await.unwrap();
    drop(writer);
    wait_for("the writer's key gone on every master", SETTLE, || async {
        let mut left = 0;
        for m in 0..MASTERS {
            left += usize::from(cluster.get(m, &format!("{PREFIX}report")).await.is_some());
        }
        left == 0
    })
    .await;
}

/// A reader re-enters its grant by its token, shared; the same token in
/// exclusive mode is not its grant.
#[tokio::test]
async fn a_shared_grant_reenters_by_its_token_in_its_mode_only() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let shared = json!({"mode": "shared", "ttl_ms": 20000});
    let (status, first) = acquire(&agent, "feed", shared.clone()).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, again) = acquire(
        &agent,
        "feed",
        json!({"mode": "shared", "ttl_ms": 20000, "token": first["token"]}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["hold_count"], 2, "{again}");
    assert_eq!(again["token"], first["token"]);
    let (status, refused) = acquire(
        &agent,
        "feed",
        json!({"ttl_ms": 20000, "token": first["token"]}),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["error"]["code"], "not_reentrant");
    // Two releases: the first lowers the count, the second leaves.
    let (_, answer) = agent
        .post("/v1/locks/feed/release", json!({"token": first["token"]}))
        .await;
    assert_eq!(answer["hold_count"], 1, "{answer}");
    assert_eq!(readers_on(&cluster, 0, "feed").await, 1);
    release(&agent, "feed", &first["token"]).await;
    wait_for("the reader gone on every master", SETTLE, || async {
        let mut left = 0;
        for m in 0..MASTERS {
            left += readers_on(&cluster, m, "feed").await;
        }
        left == 0
    })
    .await;
}

/// The control: with readers kept at a key of their own (the test switch
/// `REDLOCK_TEST_SHARED_APART`), no vote sees the other mode, and a writer
/// is granted while readers hold the lock: the one-key check is what
/// excludes them.
#[tokio::test]
async fn control_readers_kept_apart_let_a_writer_in_beside_them() {
    let cluster = Cluster::start(MASTERS);
    let agent = {
        let _switch = common::Switch::set(redlock_testkit::switches::SHARED_APART, "1");
        TestAgent::start(&cluster, "").await
    };
    let (status, reader) =
        acquire(&agent, "ledger", json!({"mode": "shared", "ttl_ms": 20000})).await;
    assert_eq!(status, StatusCode::OK, "{reader}");
    let (status, writer) = acquire(&agent, "ledger", json!({"ttl_ms": 20000})).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "without the check, a writer beside a reader: {writer}"
    );
}

/// `redlock-agent lock --shared -- cmd`: two commands run at once under the
/// shared lock, and a `lock` without `--shared` cannot have it meanwhile
/// (exit 75, its command never runs); `--shared` on several resources is
/// bad usage (exit 64).
#[tokio::test]
async fn lock_commands_with_shared_run_together_and_exclude_a_writer() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let dir = tempfile::tempdir().unwrap();
    let started = |i: usize| dir.path().join(format!("started-{i}"));
    let go = dir.path().join("go");
    let lock = |args: &[&str], script: String| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_redlock-agent"));
        command
            .arg("lock")
            .arg("--socket")
            .arg(&agent.socket)
            .args(args)
            .args(["--", "sh", "-c", &script])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        command
    };
    // Each reader waits for the other to have started: they overlap.
    let readers: Vec<_> = (0..2)
        .map(|i| {
            let script = format!(
                "touch {}; while [ ! -e {} ]; do sleep 0.05; done",
                started(i).display(),
                go.display()
            );
            lock(
                &["--shared", "--ttl", "5s", "--wait", "10s", "journal"],
                script,
            )
            .spawn()
            .unwrap()
        })
        .collect();
    wait_for(
        "both readers' commands running",
        Duration::from_secs(20),
        || async { started(0).exists() && started(1).exists() },
    )
    .await;
    let mut writer = lock(
        &["--wait", "0s", "journal"],
        format!("touch {}/wrote", dir.path().display()),
    );
    let refused = tokio::task::spawn_blocking(move || writer.output().unwrap())
        .await
        .unwrap();
    assert_eq!(
        refused.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(
        !dir.path().join("wrote").exists(),
        "the writer's command ran beside readers"
    );
    std::fs::write(&go, "").unwrap();
    let outputs = tokio::task::spawn_blocking(move || {
        readers
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    for out in outputs {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut several = lock(&["--shared", "journal", "ledger"], "true".into());
    let usage = tokio::task::spawn_blocking(move || several.output().unwrap())
        .await
        .unwrap();
    assert_eq!(
        usage.status.code(),
        Some(64),
        "{}",
        String::from_utf8_lossy(&usage.stderr)
    );
    assert!(String::from_utf8_lossy(&usage.stderr).contains("--shared takes one resource"));
}

/// An operator's force release of a lock held shared removes every reader
/// on every master, and each reader's hold hears `lost` at once.
#[tokio::test]
async fn a_force_release_ends_every_readers_hold() {
    let cluster = Cluster::start(MASTERS);
    let agent = TestAgent::start(&cluster, "").await;
    let other = TestAgent::start(&cluster, "").await;
    let mut here = agent
        .hold("stuck", json!({"mode": "shared", "ttl_ms": 30000}))
        .await;
    here.next(Duration::from_secs(5)).await.unwrap();
    let mut there = other
        .hold("stuck", json!({"mode": "shared", "ttl_ms": 30000}))
        .await;
    there.next(Duration::from_secs(5)).await.unwrap();
    let forced = agent
        .admin_client
        .force_release("stuck")
        .await
        .expect("force release");
    assert_eq!(forced.deleted, MASTERS, "{forced:?}");
    let lost = json!({"event": "lost", "reason": "force_released"});
    assert_eq!(here.next(Duration::from_secs(10)).await, Some(lost.clone()));
    assert_eq!(there.next(Duration::from_secs(10)).await, Some(lost));
    for m in 0..MASTERS {
        assert_eq!(readers_on(&cluster, m, "stuck").await, 0, "master {m}");
    }
}
