//! The scanner tests' shared helpers: tokens as agents write them, the
//! parts of a `/v1/leaks` report, keys' TTLs on a master, a fleet member's
//! config and the agents' metrics.
#![allow(dead_code)] // each test binary uses a different part of it

use crate::common::{Cluster, TestAgent};
use redlock_agent::redlock::Token;
use serde_json::Value;

/// A token an agent writes for the lock key `key`, as a lock key leaked by
/// a dead client would hold.
pub fn token(key: &str) -> String {
    Token::generate(key, None, None).into_string()
}

pub fn node<'a>(leaks: &'a Value, name: &str) -> &'a Value {
    leaks["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == name)
        .unwrap()
}

pub async fn pttl(cluster: &Cluster, i: usize, key: &str) -> i64 {
    let mut conn = cluster.redis(i).await;
    redis::cmd("PTTL")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

/// A fleet member's config: its name, `max_ttl` and scan settings, a node
/// timeout a busy machine keeps (the scan lock's extensions ride on it).
pub fn fleet_member(name: &str, max_ttl: &str, scan: &str) -> String {
    format!(
        "agent:\n  name: {name}\nlock:\n  default_ttl: 2s\n  max_ttl: {max_ttl}\n  node_timeout: 200ms\nleak_scan:\n{scan}"
    )
}

/// The value of `series` (a name with its labels, as exposed) in a
/// metrics text.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

pub async fn metric(agent: &TestAgent, series: &str) -> f64 {
    let (_, text) = agent.get_tcp("/metrics").await;
    sample(&text, series).unwrap_or_else(|| panic!("no {series} in:\n{text}"))
}
