//! The fenced store: a `redis-server` of its own (never one of the lock
//! masters) that every critical section writes to once, with its fence.
//!
//! It keeps one hash per resource and accepts a write only when the
//! write's fence is above the highest it accepted for that resource, in one
//! Lua script ([`COMPARE_FENCE`]), so the check and the write are one step.
//! An accepted write gets its place in the store's order of accepted writes
//! (`seq`); a refused one learns the fence that beat it. The checker
//! ([`crate::checker`]) uses both to find stale writes the store accepted.
//!
//! ## Behavior
//! - Every call is bounded in time; a store that does not answer yields
//!   [`WriteOutcome::Failed`], never a finding.
//! - The server is killed when the [`FencedStore`] drops.

use std::path::Path;
use std::time::Duration;

use redlock_testkit::RedisServer;

use crate::checker::WriteOutcome;

/// Accepts `ARGV[1]` (a fence, decimal) for the record `KEYS[1]` only when
/// it is above the highest fence accepted there; stores `ARGV[2]` with it.
/// Returns `{1, seq}` (accepted, its place in the order of accepted
/// writes) or `{0, highest}` (refused; the highest fence, as text).
pub const COMPARE_FENCE: &str = r#"
local highest = redis.call("HGET", KEYS[1], "fence")
if highest and tonumber(ARGV[1]) <= tonumber(highest) then
  return {0, highest}
end
local seq = redis.call("HINCRBY", KEYS[1], "accepted", 1)
redis.call("HSET", KEYS[1], "fence", ARGV[1], "data", ARGV[2])
return {1, tostring(seq)}
"#;

/// The store's `redis-server`, for the run's lifetime.
#[derive(Debug)]
pub struct FencedStore {
    server: RedisServer,
}

impl FencedStore {
    /// Starts the store's `redis-server` in `dir`.
    ///
    /// # Errors
    /// When `redis-server` cannot start.
    pub fn start(dir: &Path) -> Result<FencedStore, String> {
        let server = RedisServer::start(dir, "fenced-store").map_err(|e| e.to_string())?;
        Ok(FencedStore { server })
    }

    pub fn url(&self) -> String {
        self.server.url()
    }
}

/// A connection to the store; cheap to clone.
#[derive(Clone)]
pub struct StoreClient {
    conn: redis::aio::MultiplexedConnection,
    script: redis::Script,
}

impl std::fmt::Debug for StoreClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreClient").finish_non_exhaustive()
    }
}

impl StoreClient {
    /// Connects to the store at `url`.
    ///
    /// # Errors
    /// When the store does not accept the connection within a second.
    pub async fn connect(url: &str) -> Result<StoreClient, String> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_secs(2)));
        let conn = redis::Client::open(url)
            .map_err(|e| format!("fenced store {url}: {e}"))?
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| format!("fenced store {url}: {e}"))?;
        Ok(StoreClient {
            conn,
            script: redis::Script::new(COMPARE_FENCE),
        })
    }

    /// Writes `data` to `resource`'s record with `fence`.
    pub async fn write(&self, resource: &str, fence: u64, data: &str) -> WriteOutcome {
        let mut conn = self.conn.clone();
        let answer: Result<(i64, String), _> = self
            .script
            .key(format!("record:{resource}"))
            .arg(fence)
            .arg(data)
            .invoke_async(&mut conn)
            .await;
        match answer {
            Ok((1, seq)) => match seq.parse() {
                Ok(seq) => WriteOutcome::Accepted { seq },
                Err(_) => WriteOutcome::Failed {
                    error: format!("the store answered seq {seq:?}"),
                },
            },
            Ok((_, highest)) => match highest.parse() {
                Ok(highest) => WriteOutcome::Refused { highest },
                Err(_) => WriteOutcome::Failed {
                    error: format!("the store answered highest {highest:?}"),
                },
            },
            Err(e) => WriteOutcome::Failed {
                error: e.to_string(),
            },
        }
    }
}

/// The outcome as one word and a number, for a child process's report
/// line: `accepted <seq>`, `refused <highest>`, `failed -`.
pub fn outcome_to_wire(outcome: &WriteOutcome) -> String {
    match outcome {
        WriteOutcome::Accepted { seq } => format!("accepted {seq}"),
        WriteOutcome::Refused { highest } => format!("refused {highest}"),
        WriteOutcome::Failed { .. } => "failed -".into(),
    }
}

/// Reads [`outcome_to_wire`]'s words back.
pub fn outcome_from_wire(word: &str, number: &str) -> WriteOutcome {
    match (word, number.parse()) {
        ("accepted", Ok(seq)) => WriteOutcome::Accepted { seq },
        ("refused", Ok(highest)) => WriteOutcome::Refused { highest },
        _ => WriteOutcome::Failed {
            error: format!("the client reported {word} {number}"),
        },
    }
}

/// `faults fenced-writer`: Kleppmann's client as a process. Acquires
/// `resource` with a fence through the agent at `socket`, prints
/// `acquired <fence|-> <validity_ms>`, then reads one line from stdin (its
/// work before the write: a test pauses it there with SIGSTOP), writes
/// `data` to the store at `store` with its fence and prints
/// `write accepted <seq>|refused <highest>|failed -`. Never releases: a
/// paused client does not. Prints `refused <code>` or `error <what>` when
/// not granted.
pub async fn run_fenced_writer(
    socket: std::path::PathBuf,
    resource: String,
    ttl_ms: u64,
    store: String,
    data: String,
) {
    use std::io::{BufRead, Write};
    let say = |line: String| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    let client = crate::client::Client::new(socket);
    let request = crate::client::AcquireOptions::new()
        .ttl(std::time::Duration::from_millis(ttl_ms))
        .owner("fenced-writer")
        .fence();
    let grant = match client.acquire(&resource, &request).await {
        Ok(crate::client::Answer::Ok(grant)) => grant,
        Ok(crate::client::Answer::Refused { code, .. }) => {
            return say(format!("refused {}", code.as_str()))
        }
        Err(e) => return say(format!("error {e}")),
    };
    say(format!(
        "acquired {} {}",
        grant.fence.map_or("-".to_string(), |f| f.to_string()),
        crate::client::ms(grant.validity)
    ));
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    let Some(fence) = grant.fence else {
        return say("write failed -".into());
    };
    let outcome = match StoreClient::connect(&store).await {
        Ok(store) => store.write(&resource, fence, &data).await,
        Err(error) => WriteOutcome::Failed { error },
    };
    say(format!("write {}", outcome_to_wire(&outcome)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_round_trip_as_words() {
        for o in [
            WriteOutcome::Accepted { seq: 7 },
            WriteOutcome::Refused {
                highest: 1_763_800_000_000_000,
            },
        ] {
            let wire = outcome_to_wire(&o);
            let (w, n) = wire.split_once(' ').unwrap();
            assert_eq!(outcome_from_wire(w, n), o);
        }
        assert!(matches!(
            outcome_from_wire("failed", "-"),
            WriteOutcome::Failed { .. }
        ));
    }

    /// The script on a real `redis-server`: a fence not above the highest
    /// accepted is refused, whatever came between; accepted writes count up.
    #[tokio::test]
    async fn the_store_refuses_a_fence_not_above_the_highest() {
        let dir = tempfile::tempdir().unwrap();
        let store = FencedStore::start(dir.path()).unwrap();
        let client = StoreClient::connect(&store.url()).await.unwrap();
        let big = 1_763_800_000_000_123u64; // microseconds: exact in Lua
        assert_eq!(
            client.write("x", big, "a").await,
            WriteOutcome::Accepted { seq: 1 }
        );
        assert_eq!(
            client.write("x", big, "b").await,
            WriteOutcome::Refused { highest: big }
        );
        assert_eq!(
            client.write("x", big - 1, "c").await,
            WriteOutcome::Refused { highest: big }
        );
        assert_eq!(
            client.write("y", 5, "other resource").await,
            WriteOutcome::Accepted { seq: 1 }
        );
        assert_eq!(
            client.write("x", big + 1, "d").await,
            WriteOutcome::Accepted { seq: 2 }
        );
    }
}
