//! Tests of whole configurations: defaults, every problem at once, the
//! example file; and the helpers the other files' tests share.

use super::*;

pub(super) const MINIMAL: &str = "masters:\n  - {name: r1, url: \"redis://127.0.0.1:6379\"}\n";

pub(super) fn errors_of(yaml: &str) -> Vec<String> {
    match Config::from_yaml(yaml) {
        Ok(_) => Vec::new(),
        Err(ConfigError::Invalid(errors)) => errors.iter().map(ToString::to_string).collect(),
        Err(other) => vec![other.to_string()],
    }
}

#[test]
fn minimal_config_gets_the_documented_defaults() {
    let config = Config::from_yaml(MINIMAL).unwrap();
    assert_eq!(config.socket.mode, 0o660);
    assert_eq!(config.lock.key_prefix, "redlock:");
    assert_eq!(config.lock.default_ttl, Duration::from_secs(10));
    assert_eq!(config.lock.max_ttl, Duration::from_secs(60));
    assert_eq!(config.lock.node_timeout, Duration::from_millis(50));
    assert_eq!(config.health.interval, Duration::from_millis(500));
    assert_eq!(config.health.idle_interval, Duration::from_secs(60));
    assert!(config.delayed_restart.enabled);
    assert_eq!(config.quorum(), 1);
}

#[test]
fn an_idle_agent_probes_less_often_never_more() {
    let health = |extra: &str| format!("{MINIMAL}health:\n{extra}");
    let config = Config::from_yaml(&health("  interval: 90s\n")).unwrap();
    assert_eq!(
        config.health.idle_interval,
        Duration::from_secs(90),
        "the default is the interval where that is longer"
    );
    assert_eq!(
        errors_of(&health("  interval: 2s\n  idle_interval: 1s\n")),
        [
            "health.idle_interval: must be at least health.interval (2000ms): an idle agent \
          probes less often, never more"
        ]
    );
}

#[test]
fn quorum_is_a_majority_of_the_configured_masters() {
    for (n, quorum) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)] {
        let mut yaml = String::from("masters:\n");
        for i in 0..n {
            yaml.push_str(&format!(
                "  - {{name: r{i}, url: \"redis://127.0.0.1:{}\"}}\n",
                6379 + i
            ));
        }
        assert_eq!(Config::from_yaml(&yaml).unwrap().quorum(), quorum, "n={n}");
    }
}

#[test]
fn every_problem_is_reported_at_once_with_its_path() {
    let yaml = r#"
socket: {mode: 660, extra: 1}
masters:
  - {name: r1, url: "redis://127.0.0.1:1"}
  - {name: r1, url: "http://x"}
  - {url: "redis://127.0.0.1:3", port: 5}
lock:
  ttl: 5s
  default_ttl: 90s
  max_ttl: 60s
  node_timeout: "fast"
  drift_factor: "big"
"#;
    let errors = errors_of(yaml);
    let expected = [
        "socket.mode: expected a quoted octal string like \"0660\", found a number 660",
        "socket.extra: unknown key",
        "masters[1].name: duplicate master name \"r1\"",
        "masters[1].url: not a redis:// or rediss:// URL: \"http://x/\"",
        "masters[2].name: required",
        "masters[2].port: unknown key",
        "lock.ttl: unknown key",
        "lock.default_ttl: 1m 30s is above lock.max_ttl (1m)",
        "lock.drift_factor: expected a number, found a string \"big\"",
    ];
    assert_reported(&errors, &expected);
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("lock.node_timeout: not a duration")),
        "{errors:#?}"
    );
}

/// Every duration of the config is at most a day: each one past it is
/// refused with its path, all at once, and read as a day by the checks
/// between fields (no overflow, no second word on it from a
/// comparison it passes); a day itself is accepted.
#[test]
fn durations_past_a_day_are_refused_with_their_paths() {
    let fields = [
        ("socket", "request_timeout"),
        ("lock", "default_ttl"),
        ("lock", "max_ttl"),
        ("lock", "node_timeout"),
        ("lock", "retry_delay"),
        ("lock", "retry_jitter"),
        ("lock", "max_hold"),
        ("health", "interval"),
        ("health", "idle_interval"),
        ("delayed_restart", "extra"),
        ("leak_scan", "interval"),
        ("shutdown", "grace"),
    ];
    let config = |value: &str| {
        let mut yaml = MINIMAL.to_string();
        let mut section = "";
        for (name, key) in fields {
            if name != section {
                yaml.push_str(&format!("{name}:\n"));
                section = name;
            }
            yaml.push_str(&format!("  {key}: {value}\n"));
        }
        yaml
    };
    // A node timeout of a day (the most it is read as) is no tenth of a
    // default TTL of a day: its own rule says so, once.
    let node_timeout_rule = "lock.node_timeout: 1day is not far below lock.default_ttl (1day); \
                             keep it at most a tenth of it";
    let errors = errors_of(&config("25h"));
    let mut expected: Vec<String> = fields
        .iter()
        .map(|(name, key)| {
            format!(
                "{name}.{key}: \"25h\" is longer than a day; no duration in the config may be over \"24h\""
            )
        })
        .collect();
    expected.insert(7, node_timeout_rule.to_string());
    assert_eq!(errors, expected);
    let errors = errors_of(&format!(
        "{MINIMAL}lock: {{max_ttl: 999999999999999s}}\ndelayed_restart: {{extra: 100000d}}\n"
    ));
    assert_eq!(
        errors,
        [
            "lock.max_ttl: \"999999999999999s\" is longer than a day; no duration in the config may be over \"24h\"",
            "delayed_restart.extra: \"100000d\" is longer than a day; no duration in the config may be over \"24h\"",
        ]
    );
    // A node timeout that would overflow the check against default_ttl.
    let errors = errors_of(&format!(
        "{MINIMAL}lock: {{node_timeout: 18446744073709551615s}}\n"
    ));
    assert!(
        errors[0].starts_with("lock.node_timeout: \"18446744073709551615s\" is longer than a day"),
        "{errors:?}"
    );
    // A day is not past it: only node_timeout's own rule speaks.
    assert_eq!(errors_of(&config("24h")), [node_timeout_rule]);
    let config = Config::from_yaml(&format!(
        "{MINIMAL}lock: {{default_ttl: 1day, max_ttl: 24h, max_hold: 86400s}}\ndelayed_restart: {{extra: 1d}}\n"
    ))
    .unwrap();
    assert_eq!(config.lock.max_ttl, yaml::MAX_DURATION);
    assert_eq!(config.quarantine(), 2 * yaml::MAX_DURATION);
}

/// Errors of `yaml` without resolving hosts (the shapes below name
/// hosts that do not exist).
pub(super) fn errors_offline(yaml: &str) -> Vec<String> {
    match Config::from_yaml_with(yaml, AddressCheck::Skip) {
        Ok(_) => Vec::new(),
        Err(ConfigError::Invalid(errors)) => errors.iter().map(ToString::to_string).collect(),
        Err(other) => vec![other.to_string()],
    }
}

#[test]
fn access_and_admin_defaults() {
    let config = Config::from_yaml(MINIMAL).unwrap();
    assert!(config.socket.allow_uids.is_empty() && config.socket.allow_gids.is_empty());
    assert_eq!(config.socket.max_connections_per_uid, 12_288);
    assert_eq!(
        config.admin.socket.path,
        PathBuf::from("/run/redlock/admin.sock")
    );
    assert_eq!(config.admin.socket.mode, 0o600);
    assert!(crate::redlock::token::valid_agent(&config.agent.name));
    assert_eq!(
        default_admin_path(Path::new("/tmp/x/a1.sock")),
        PathBuf::from("/tmp/x/a1-admin.sock")
    );
    let yaml = format!(
        "{MINIMAL}socket: {{max_connections: 8, allow_uids: [1000], allow_gids: [10]}}\nagent: {{name: pod-7}}\n"
    );
    let config = Config::from_yaml(&yaml).unwrap();
    assert_eq!(config.socket.max_connections_per_uid, 6);
    assert_eq!(config.socket.allow_uids, [1000]);
    assert_eq!(config.socket.allow_gids, [10]);
    assert_eq!(config.agent.name, "pod-7");
}

#[test]
fn access_admin_and_tls_problems_are_reported_with_their_paths() {
    let yaml = r#"
agent: {name: "host.example"}
socket: {path: /s/agent.sock, max_connections: 4, max_connections_per_uid: 5, allow_uids: ["root"]}
admin: {socket: {path: /s/agent.sock, mode: 600}, allow_uids: 0, extra: 1}
masters:
  - {name: r1, url: "redis://a:1", tls_cert_file: /nonexistent/c.pem, tls_key_file: /nonexistent/k.pem}
  - {name: r2, url: "rediss://b:1", tls_cert_file: /nonexistent/c.pem}
"#;
    let errors = errors_of(yaml);
    let expected = [
        "socket.max_connections_per_uid: 5 is above socket.max_connections (4)",
        "socket.allow_uids: expected a list of numeric uids, found a list",
        "admin.allow_uids: expected a list of numeric uids, found a number 0",
        "admin.extra: unknown key",
        "admin.socket.path: must differ from socket.path",
        "admin.socket.mode: expected a quoted octal string like \"0600\", found a number 600",
        "masters[0].tls_cert_file: only for rediss:// URLs",
        "masters[1].tls_key_file: required with tls_cert_file",
    ];
    assert_reported(&errors, &expected);
    assert!(
        errors
            .iter()
            .any(|e| e.starts_with("agent.name: use 1 to 64")),
        "{errors:#?}"
    );
}

#[test]
fn the_example_config_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config.example.yaml");
    let config = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.masters.len(), 3);
}

/// The API document states the bounds of request fields that come from
/// this config (`x-config-minimum`, `x-config-maximum` in
/// `agent/openapi.yaml`) with their values under the defaults: they are.
#[test]
fn the_api_document_states_the_default_bounds() {
    fn bounds(value: &Value, out: &mut Vec<Value>) {
        match value {
            Value::Object(map) => {
                for (key, v) in map {
                    if key.starts_with("x-config-") {
                        out.push(v.clone());
                    } else {
                        bounds(v, out);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| bounds(v, out)),
            _ => {}
        }
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.yaml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
    let doc: Value = serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    let config = Config::from_yaml(MINIMAL).unwrap();
    let mut found = Vec::new();
    bounds(&doc, &mut found);
    assert!(found.len() >= 6, "{found:?}");
    for bound in found {
        let setting = match bound["setting"].as_str() {
            Some("lock.max_ttl") => config.lock.max_ttl,
            Some("lock.max_hold") => config.lock.max_hold,
            Some("lock.node_timeout") => config.lock.node_timeout,
            other => panic!("{other:?}: a setting this test does not know"),
        };
        let factor = bound["factor"].as_u64().unwrap_or(1);
        let expected = setting.as_millis() as u64 * factor;
        assert_eq!(bound["default"].as_u64(), Some(expected), "{bound}");
    }
}

/// Every line of `expected` is among `errors`, word for word.
fn assert_reported(errors: &[String], expected: &[&str]) {
    for line in expected {
        assert!(
            errors.iter().any(|e| e == line),
            "missing {line:?} in {errors:#?}"
        );
    }
}
