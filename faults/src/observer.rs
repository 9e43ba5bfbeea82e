//! The key observer: looks at the lock keys on every master directly (not
//! through the proxies, so faults do not hide them) and reports each to the
//! checker, which decides whether it outlived its lock.
//!
//! On a cluster master it asks the cluster which nodes are primaries now
//! (`CLUSTER NODES`, from the first node that answers), scans each, and
//! reads each key on the shard that serves it: the owner of its slot, or
//! mid-migration the shard it has moved to (`ASKING`). Replicas are not
//! read, and a primary that cannot be read is skipped.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;

use crate::checker::{Checker, Sighting};
use crate::clock::Mono;
use crate::cluster::{Backend, Master};

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
/// keys (the incarnation marker, fence counters and quarantine witnesses,
/// whose names have a space no resource can have). `None` when the master
/// cannot be read now (down or frozen; for a cluster: no node answers).
pub async fn keys(master: &Master, prefix: &str) -> Option<Vec<Key>> {
    match &master.backend {
        Backend::Single(_) => {
            let mut conn = connect(master.port()).await?;
            keys_on(&mut conn, &master.name, prefix, false).await
        }
        Backend::Cluster(cluster) => {
            let mut primaries = None;
            for &port in &cluster.ports {
                if let Some(found) = primaries_of(port).await {
                    primaries = Some(found);
                    break;
                }
            }
            let mut out = Vec::new();
            for port in primaries? {
                let Some(mut conn) = connect(port).await else {
                    continue;
                };
                if let Some(keys) = keys_on(&mut conn, &master.name, prefix, true).await {
                    out.extend(keys);
                }
            }
            Some(out)
        }
    }
}

/// The ports of the primaries that serve slots, as the cluster node on
/// `port` sees them.
async fn primaries_of(port: u16) -> Option<Vec<u16>> {
    let mut conn = connect(port).await?;
    let text: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut conn)
        .await
        .ok()?;
    Some(
        redlock_testkit::cluster::parse_nodes(&text)
            .into_iter()
            .filter(redlock_testkit::cluster::NodeLine::serves_slots)
            .map(|n| n.port)
            .collect(),
    )
}

/// Every lock key under `prefix` on one server, as [`keys`]; on a cluster
/// node (`asking`), each read is preceded by `ASKING` so a key that has
/// moved here mid-migration is read, while a replica or a node that does
/// not serve the key's slot answers with a redirection and the key is
/// skipped.
async fn keys_on(
    conn: &mut MultiplexedConnection,
    master: &str,
    prefix: &str,
    asking: bool,
) -> Option<Vec<Key>> {
    let mut out = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
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
                if asking {
                    pipe.cmd("ASKING");
                }
                pipe.cmd("GET").arg(key);
                if asking {
                    pipe.cmd("ASKING");
                }
                pipe.cmd("PTTL").arg(key);
            }
            let reply: Vec<redis::Value> = pipe.query_async(conn).await.ok()?;
            let mut reply = reply.into_iter();
            // Each key's GET and PTTL replies, without the ASKING ones.
            let pairs = batch.iter().map(|_| {
                let mut next = || {
                    if asking {
                        reply.next();
                    }
                    reply.next()
                };
                [next(), next()]
            });
            let pairs: Vec<[Option<redis::Value>; 2]> = pairs.collect();
            for (key, pair) in batch.iter().zip(pairs.iter()) {
                let token = match &pair[0] {
                    Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                    _ => continue, // gone, not a string, or served elsewhere
                };
                let pttl_ms = match &pair[1] {
                    Some(redis::Value::Int(n)) => *n,
                    _ => continue,
                };
                if pttl_ms == -2 {
                    continue;
                }
                out.push(Key {
                    master: master.to_string(),
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

async fn connect(port: u16) -> Option<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_millis(300)))
        .set_response_timeout(Some(Duration::from_millis(300)));
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
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
