//! Using fences: worked examples against real parts (3 `redis-server`
//! masters, 2 agent processes over them, a store of each kind), each
//! showing a store refusing a stale writer. docs/fencing.md points
//! here:
//!
//! ```sh
//! cargo nextest run -p faults --test fencing_examples
//! ```
//!
//! - SQLite (through `rusqlite`): `UPDATE ... WHERE id = ? AND fence < ?`.
//! - A Redis data store of its own: a compare-fence Lua script.
//! - Kleppmann's scenario end to end: client 1, a real process, acquires
//!   with a fence through agent a1 and is paused with SIGSTOP past its
//!   validity; client 2 acquires through agent a2 and writes; client 1
//!   resumes and writes; the store refuses client 1's write.
//!
//! In each, client 1 never releases (it paused), so client 2's acquire,
//! with `wait_ms`, is granted only once client 1's lock has expired.

use std::process::Stdio;
use std::time::Duration;

use faults::client::{AcquireOptions, Answer, Client, Grant};
use faults::clock::Mono;
use faults::cluster::{AgentSettings, Cluster};
use redlock_testkit::RedisServer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// 3 masters, agents a1 and a2 over them, every master usable.
async fn cluster() -> Cluster {
    let settings = AgentSettings::default();
    let cluster = Cluster::start(3, 2, settings.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cluster
        .wait_usable(3, settings.quarantine() + Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    cluster
}

/// Acquires `resource` with a fence, waiting up to `wait_ms`; returns the
/// grant, its fence and when the answer arrived.
async fn acquire(client: &Client, resource: &str, ttl_ms: u64, wait_ms: u64) -> (Grant, u64, Mono) {
    let request = AcquireOptions::new()
        .ttl(Duration::from_millis(ttl_ms))
        .wait(Duration::from_millis(wait_ms))
        .owner("fencing-example")
        .fence();
    match client.acquire(resource, &request).await {
        Ok(Answer::Ok(grant)) => {
            let fence = grant.fence.unwrap_or_else(|| {
                panic!("the agent answered `fence: true` without one: {grant:?}")
            });
            (grant, fence, Mono::now())
        }
        other => panic!("acquire {resource}: {other:?}"),
    }
}

/// The row's update: only a fence above the row's wins.
fn update_balance(db: &rusqlite::Connection, id: i64, balance: i64, fence: u64) -> bool {
    // Fences are microseconds since the Unix epoch, far below i64::MAX.
    let fence = i64::try_from(fence).expect("a fence fits an SQLite integer");
    let changed = db
        .execute(
            "UPDATE accounts SET balance = ?1, fence = ?2 WHERE id = ?3 AND fence < ?2",
            (balance, fence, id),
        )
        .expect("update accounts");
    changed == 1
}

/// SQLite: client 1 is granted, pauses past its lock, client 2 is granted
/// through the other agent with a larger fence and updates the row; client
/// 1's update with its older fence changes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn sqlite_refuses_an_update_whose_fence_is_not_above_the_rows() {
    let cluster = cluster().await;
    let clients = cluster.clients().await;
    let dir = tempfile::tempdir().unwrap();
    let db = rusqlite::Connection::open(dir.path().join("app.db")).unwrap();
    db.execute_batch(
        "CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL,
                                fence INTEGER NOT NULL DEFAULT 0);
         INSERT INTO accounts (id, balance) VALUES (42, 100);",
    )
    .unwrap();

    let (_, fence_1, _) = acquire(&clients[0], "account-42", 500, 0).await;
    let (_, fence_2, _) = acquire(&clients[1], "account-42", 2000, 5000).await;
    assert!(fence_2 > fence_1, "fences {fence_1} then {fence_2}");

    assert!(update_balance(&db, 42, 200, fence_2), "client 2's update");
    assert!(
        !update_balance(&db, 42, 150, fence_1),
        "client 1's stale update was applied"
    );
    let (balance, fence): (i64, i64) = db
        .query_row(
            "SELECT balance, fence FROM accounts WHERE id = 42",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((balance, fence as u64), (200, fence_2));
}

/// Sets `KEYS[1]` to `ARGV[2]` only when the fence `ARGV[1]` is above the
/// one stored beside it in `KEYS[2]`; 1 when written, 0 when refused.
/// (Both keys share a hash tag, so this runs on a Redis Cluster too.)
const SET_IF_FENCE_ABOVE: &str = r#"
local seen = redis.call("GET", KEYS[2])
if seen and tonumber(ARGV[1]) <= tonumber(seen) then
  return 0
end
redis.call("SET", KEYS[2], ARGV[1])
redis.call("SET", KEYS[1], ARGV[2])
return 1
"#;

async fn set_if_fence_above(
    conn: &mut redis::aio::MultiplexedConnection,
    value: &str,
    fence: u64,
) -> bool {
    let written: i64 = redis::Script::new(SET_IF_FENCE_ABOVE)
        .key("{order:7}")
        .key("{order:7}:fence")
        .arg(fence)
        .arg(value)
        .invoke_async(conn)
        .await
        .expect("the compare-fence script");
    written == 1
}

/// A Redis data store (its own `redis-server`, not a lock master): the
/// compare-fence script refuses client 1's write after client 2's.
#[tokio::test(flavor = "multi_thread")]
async fn a_redis_store_refuses_a_write_whose_fence_is_not_above_the_last() {
    let cluster = cluster().await;
    let clients = cluster.clients().await;
    let dir = tempfile::tempdir().unwrap();
    let store = RedisServer::start(dir.path(), "data-store").unwrap();
    let mut conn = redis::Client::open(store.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();

    let (_, fence_1, _) = acquire(&clients[0], "order-7", 500, 0).await;
    let (_, fence_2, _) = acquire(&clients[1], "order-7", 2000, 5000).await;
    assert!(fence_2 > fence_1, "fences {fence_1} then {fence_2}");

    assert!(set_if_fence_above(&mut conn, "shipped by client 2", fence_2).await);
    assert!(
        !set_if_fence_above(&mut conn, "shipped by client 1", fence_1).await,
        "client 1's stale write was accepted"
    );
    let value: String = redis::cmd("GET")
        .arg("{order:7}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(value, "shipped by client 2");
}

/// The next line of a child's stdout, within `limit`.
async fn next_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    limit: Duration,
) -> String {
    match tokio::time::timeout(limit, lines.next_line()).await {
        Ok(Ok(Some(line))) => line,
        other => panic!("no line from the client process within {limit:?}: {other:?}"),
    }
}

fn signal(pid: u32, sig: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("a pid fits pid_t");
    // SAFETY: kill(2) with a pid of a child this test started and still owns.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(
        rc,
        0,
        "kill({pid}, {sig}): {}",
        std::io::Error::last_os_error()
    );
}

/// Kleppmann's scenario, end to end: client 1 (`faults fenced-writer`, a
/// real process) acquires with a fence through a1 and is stopped with
/// SIGSTOP before its write; client 2 acquires through a2 (granted only
/// after client 1's lock expired, past its validity) and writes; client 1
/// is resumed with SIGCONT, writes with its old fence, and the store
/// refuses it.
#[tokio::test(flavor = "multi_thread")]
async fn kleppmanns_paused_client_is_refused_by_the_store() {
    let cluster = cluster().await;
    let clients = cluster.clients().await;
    let dir = tempfile::tempdir().unwrap();
    let server = RedisServer::start(dir.path(), "fenced-store").unwrap();
    let store = faults::store::StoreClient::connect(&server.url())
        .await
        .unwrap();

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_faults"))
        .arg("fenced-writer")
        .arg("--socket")
        .arg(clients[0].socket())
        .args(["--resource", "ledger", "--ttl-ms", "800"])
        .arg("--store")
        .arg(server.url())
        .args(["--data", "client-1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().expect("the child runs");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();

    // Client 1 holds the lock with a fence, then pauses before writing.
    let line = next_line(&mut lines, Duration::from_secs(10)).await;
    let granted_1 = Mono::now();
    let words: Vec<&str> = line.split(' ').collect();
    assert_eq!(words.first(), Some(&"acquired"), "client 1: {line}");
    let fence_1: u64 = words[1]
        .parse()
        .unwrap_or_else(|_| panic!("client 1 got no fence: {line}"));
    let validity_1: u64 = words[2].parse().unwrap();
    signal(pid, libc::SIGSTOP);
    // Its go-ahead waits in the pipe until it runs again.
    stdin.write_all(b"go\n").await.unwrap();
    stdin.flush().await.unwrap();

    // Client 2, through the other agent: granted once client 1's lock is gone.
    let (_, fence_2, granted_2) = acquire(&clients[1], "ledger", 2000, 5000).await;
    assert!(
        granted_2 > granted_1.plus_ms(validity_1),
        "client 2 was granted within client 1's validity"
    );
    assert!(fence_2 > fence_1, "fences {fence_1} then {fence_2}");
    assert_eq!(
        store.write("ledger", fence_2, "client-2").await,
        faults::checker::WriteOutcome::Accepted { seq: 1 }
    );

    // Client 1 wakes up, believes it holds the lock and writes: refused.
    signal(pid, libc::SIGCONT);
    let line = next_line(&mut lines, Duration::from_secs(10)).await;
    assert_eq!(
        line,
        format!("write refused {fence_2}"),
        "client 1's stale write"
    );
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("client 1 exits")
        .unwrap();
    assert!(status.success(), "client 1: {status}");
    assert_eq!(
        store.write("ledger", fence_2, "replayed").await,
        faults::checker::WriteOutcome::Refused { highest: fence_2 },
        "the store kept client 2's fence"
    );
}
