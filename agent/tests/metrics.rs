//! The real `/metrics` endpoint: every metric the dashboards and alerts use
//! is exported with its type and help, `promtool check metrics` is clean,
//! and the figures move with real lock traffic.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{Cluster, TestAgent};
use hyper::StatusCode;
use serde_json::json;

/// Scrapes the TCP metrics address.
async fn scrape(agent: &TestAgent) -> String {
    let (status, text) = agent.get_tcp("/metrics").await;
    assert_eq!(status, StatusCode::OK);
    text
}

/// `# TYPE` of every family in an exposition.
fn types(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(name, kind)| (name.to_string(), kind.to_string()))
        .collect()
}

/// The value of one sample line, e.g. `redlock_quorum_size`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Every name in dashboards/metrics.txt is exported with the right type and
/// a help text, and nothing else with our prefix is. The agent is its own
/// fleet: it scans, so it exports the series only the fleet's scanner has.
#[tokio::test]
async fn exported_metrics_match_what_dashboards_use() {
    let cluster = Cluster::start(3);
    let agent = TestAgent::start(&cluster, "leak_scan:\n  interval: 100ms\n").await;
    common::wait_for(
        "the first scan",
        std::time::Duration::from_secs(20),
        || async { scrape(&agent).await.contains("redlock_leak_scan_info{") },
    )
    .await;
    let text = scrape(&agent).await;
    let exported = types(&text);
    let listed = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../dashboards/metrics.txt"),
    )
    .unwrap();
    let listed: Vec<&str> = listed
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for name in &listed {
        let kind = exported
            .get(*name)
            .unwrap_or_else(|| panic!("{name} is not exported:\n{text}"));
        let expected = if name.ends_with("_total") {
            "counter"
        } else if name.ends_with("_seconds")
            && !name.contains("remaining")
            && !name.contains("timestamp")
            || name.ends_with("_ratio")
            // A histogram of a count is named after what it counts.
            || name.ends_with("_commands")
        {
            "histogram"
        } else {
            "gauge"
        };
        assert_eq!(kind, expected, "{name}");
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} has no help"
        );
    }
    for name in exported.keys() {
        assert!(
            listed.contains(&name.as_str()),
            "{name} is exported but not in dashboards/metrics.txt"
        );
    }
    assert_eq!(sample(&text, "redlock_quorum_size"), Some(2.0));
    assert_eq!(sample(&text, "redlock_usable_nodes"), Some(3.0));
    assert_eq!(sample(&text, "redlock_quorum_available"), Some(1.0));
    assert_eq!(sample(&text, "redlock_node_up{node=\"r2\"}"), Some(1.0));
    for line in text.lines().filter(|l| l.starts_with("redlock_")) {
        assert!(!line.contains("resource="), "a resource in a label: {line}");
    }
}

/// `promtool check metrics` (from Debian's prometheus package) finds no
/// problem in the exposition.
#[tokio::test]
async fn promtool_finds_nothing_to_fix() {
    let cluster = Cluster::start(1);
    let agent = TestAgent::start(&cluster, "").await;
    agent.acquire_ok("p", json!({})).await;
    let text = scrape(&agent).await;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus) is needed; tools/test.sh installs it");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool: {report}"
    );
}

/// Grants, contention, waits, releases and a dead master show up in the
/// figures.
#[tokio::test]
async fn figures_follow_lock_traffic() {
    let mut cluster = Cluster::start(3);
    let agent = TestAgent::start(
        &cluster,
        "lock:\n  retry_delay: 10ms\n  retry_jitter: 10ms\n",
    )
    .await;
    let token = agent.acquire_ok("m", json!({"ttl_ms": 5000})).await;
    // The grant is answered at a quorum; a straggler's vote is counted
    // when it lands, so wait for r1's (bounded) before reading the rest.
    let granted = "redlock_node_votes_total{node=\"r1\",vote=\"granted\"}";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut text = scrape(&agent).await;
    while sample(&text, granted) != Some(1.0) && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        text = scrape(&agent).await;
    }
    assert_eq!(sample(&text, "redlock_locks_held"), Some(1.0));
    assert_eq!(
        sample(
            &text,
            "redlock_acquire_wait_seconds_count{kind=\"lock\",outcome=\"acquired\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "redlock_node_votes_total{node=\"r1\",vote=\"granted\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "redlock_validity_at_grant_ratio_count"),
        Some(1.0)
    );

    let (status, _) = agent
        .post("/v1/locks/m/acquire", json!({"wait_ms": 50}))
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let (status, _) = agent
        .post("/v1/locks/m/extend", json!({"token": token}))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, body) = agent
        .post("/v1/locks/m/release", json!({"token": token}))
        .await;
    assert_eq!(body["released"], true);
    let (_, body) = agent
        .post("/v1/locks/m/release", json!({"token": token}))
        .await;
    assert_eq!(body["released"], false);

    let text = scrape(&agent).await;
    assert_eq!(sample(&text, "redlock_locks_held"), Some(0.0));
    assert_eq!(
        sample(&text, "redlock_failures_total{reason=\"taken\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "redlock_failures_total{reason=\"release_failed\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "redlock_extensions_total{result=\"extended\"}"),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "redlock_hold_duration_seconds_count"),
        Some(1.0)
    );
    assert!(
        sample(
            &text,
            "redlock_node_votes_total{node=\"r1\",vote=\"taken\"}"
        )
        .unwrap()
            >= 1.0
    );
    assert_eq!(
        sample(
            &text,
            "redlock_api_requests_total{code=\"200\",route=\"release\"}"
        ),
        Some(2.0)
    );
    assert_eq!(sample(&text, "redlock_waiters"), Some(0.0));

    cluster.masters[2].kill();
    agent.wait_usable(2).await;
    let text = scrape(&agent).await;
    assert_eq!(sample(&text, "redlock_node_up{node=\"r3\"}"), Some(0.0));
    assert_eq!(sample(&text, "redlock_usable_nodes"), Some(2.0));
}
