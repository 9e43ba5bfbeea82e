//! The key observer: looks at the lock keys on every master directly (not
//! through the proxies, so faults do not hide them) and reports each to the
//! checker, which decides whether it outlived its lock.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;

use crate::checker::{Checker, Sighting};
use crate::clock::Mono;
use crate::cluster::Master;

/// One lock key on one master.
#[derive(Debug, Clone)]
pub struct Key {
    pub master: String,
    pub resource: String,
    pub token: String,
    /// -1: no TTL.
    pub pttl_ms: i64,
}

/// Reads every lock key under `prefix` on `master`, skipping the agents' own
/// keys (the incarnation marker and quarantine witnesses, whose names have
/// a space no resource can have). `None` when the master cannot be read
/// now (down or frozen).
pub async fn keys(master: &Master, prefix: &str) -> Option<Vec<Key>> {
    let mut conn = connect(master).await?;
    let mut out = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .ok()?;
        let batch: Vec<String> = batch
            .into_iter()
            .filter(|k| !redlock_wire::keys::is_bookkeeping(prefix, k))
            .collect();
        if !batch.is_empty() {
            // GET and PTTL of every key in one round trip. Not atomic: a key
            // that expires between the two reads -2 and is skipped. A key
            // that is not a string answers GET with an error, kept in its
            // place by ignore_errors, and is skipped too.
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for key in &batch {
                pipe.cmd("GET").arg(key).cmd("PTTL").arg(key);
            }
            let reply: Vec<redis::Value> = pipe.query_async(&mut conn).await.ok()?;
            for (key, pair) in batch.iter().zip(reply.chunks(2)) {
                let token = match pair.first() {
                    Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                    _ => continue, // gone, or not a string
                };
                let pttl_ms = match pair.get(1) {
                    Some(redis::Value::Int(n)) => *n,
                    _ => continue,
                };
                if pttl_ms == -2 {
                    continue;
                }
                out.push(Key {
                    master: master.name.clone(),
                    resource: key.strip_prefix(prefix).unwrap_or(key).to_string(),
                    token,
                    pttl_ms,
                });
            }
        }
        if next == 0 {
            return Some(out);
        }
        cursor = next;
    }
}

async fn connect(master: &Master) -> Option<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(300)))
        .set_response_timeout(Some(Duration::from_millis(300)));
    let client = redis::Client::open(master.url()).ok()?;
    tokio::time::timeout(
        Duration::from_millis(500),
        client.get_multiplexed_async_connection_with_config(&config),
    )
    .await
    .ok()?
    .ok()
}

/// Whether any master still holds `token` (masters that cannot be read
/// count as holding nothing).
pub async fn token_present(masters: &[Master], prefix: &str, token: &str) -> bool {
    for master in masters {
        if let Some(keys) = keys(master, prefix).await {
            if keys.iter().any(|k| k.token == token) {
                return true;
            }
        }
    }
    false
}

/// Scans every master every `every` until `stop` turns true, reporting
/// each key to the checker.
pub async fn watch(
    masters: Vec<Master>,
    prefix: String,
    checker: Arc<Checker>,
    max_ttl_ms: u64,
    every: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        for master in &masters {
            if let Some(keys) = keys(master, &prefix).await {
                let now = Mono::now();
                for k in keys {
                    // Slack: one scan period, plus the time a release or
                    // expiry takes to be seen.
                    let slack = u64::try_from(every.as_millis()).unwrap_or(0) + 300;
                    checker.key_seen(
                        Sighting {
                            master: &k.master,
                            resource: &k.resource,
                            token: &k.token,
                            pttl_ms: k.pttl_ms,
                            seen: now,
                        },
                        max_ttl_ms,
                        slack,
                    );
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// After every client stopped and `max_ttl` passed: every key left is a leak.
pub async fn final_scan(masters: &[Master], prefix: &str, checker: &Checker) -> usize {
    let mut left = 0;
    for master in masters {
        if let Some(keys) = keys(master, prefix).await {
            let now = Mono::now();
            for k in keys {
                left += 1;
                checker.key_left(&k.master, &k.resource, &k.token, k.pttl_ms, now);
            }
        }
    }
    left
}
