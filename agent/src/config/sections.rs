//! The sections of the config but the masters ([`super::masters`]), each
//! read with its defaults and checks, and the top level that reads them
//! all, so that every problem of every section is reported in one run.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::addresses::AddressCheck;
use super::masters::read_masters;
use super::traces::read_tracing;
use super::yaml::{echo, show, Section};
use super::{
    default_admin_path, default_agent_name, AdminConfig, AdminSocketConfig, AgentConfig, Config,
    DelayedRestartConfig, FenceMode, FieldError, HealthConfig, Isolate, LeakScanConfig, LockConfig,
    LogConfig, LogFormat, MetricsConfig, Repair, ShutdownConfig, SocketConfig,
    DEFAULT_METRICS_MAX_CONNECTIONS, MAX_METRICS_CONNECTIONS, MAX_WORKERS,
};

/// The whole configuration from the parsed tree. Every section is read
/// even past problems, so that `errors` gets all of them; when it has any,
/// the config returned is not to be used (a bad value is left at its
/// default, a bad master out).
pub(super) fn read_config(
    tree: Value,
    check: AddressCheck,
    errors: &mut Vec<FieldError>,
) -> Config {
    let mut top = Section::new("", tree, errors);
    let agent_tree = top.raw("agent");
    let admin_tree = top.raw("admin");
    let socket_tree = top.raw("socket");
    let metrics_tree = top.raw("metrics");
    let log_tree = top.raw("log");
    let masters_tree = top.raw("masters");
    let lock_tree = top.raw("lock");
    let health_tree = top.raw("health");
    let restart_tree = top.raw("delayed_restart");
    let shutdown_tree = top.raw("shutdown");
    let leak_tree = top.raw("leak_scan");
    let tracing_tree = top.raw("tracing");
    top.finish();

    let socket = read_socket(socket_tree.unwrap_or(Value::Null), errors);
    let agent = read_agent(agent_tree.unwrap_or(Value::Null), errors);
    let admin = read_admin(admin_tree.unwrap_or(Value::Null), &socket, errors);
    let metrics = read_metrics(metrics_tree.unwrap_or(Value::Null), errors);
    let log = read_log(log_tree.unwrap_or(Value::Null), errors);
    let masters = read_masters(masters_tree, check, errors);
    let lock = read_lock(lock_tree.unwrap_or(Value::Null), errors);

    let mut s = Section::new("health", health_tree.unwrap_or(Value::Null), errors);
    let interval = s.duration("interval", Duration::from_millis(500));
    if interval.is_zero() {
        s.error("interval", "must be above zero");
    }
    // 60s, or the interval where that is longer: each probe of an idle
    // master is a wake-up of its own, which costs it far more than the
    // probe's commands (docs/benchmarks.md, "A fleet of idle agents").
    let idle_interval = s.duration("idle_interval", interval.max(Duration::from_secs(60)));
    if idle_interval < interval {
        s.error(
            "idle_interval",
            format!(
                "must be at least health.interval ({}ms): an idle agent probes less often, \
                 never more",
                interval.as_millis()
            ),
        );
    }
    s.finish();
    let health = HealthConfig {
        interval,
        idle_interval,
    };

    let mut s = Section::new(
        "delayed_restart",
        restart_tree.unwrap_or(Value::Null),
        errors,
    );
    let delayed_restart = DelayedRestartConfig {
        enabled: s.take("enabled", "true or false").unwrap_or(true),
        extra: s.duration("extra", Duration::from_secs(1)),
    };
    s.finish();

    let mut s = Section::new("leak_scan", leak_tree.unwrap_or(Value::Null), errors);
    let leak_scan = LeakScanConfig {
        interval: s.duration("interval", Duration::from_secs(30)),
        count: s.take("count", "a whole number").unwrap_or(500),
        keys_per_second: s.take("keys_per_second", "a whole number").unwrap_or(5000),
        repair: s
            .take("repair", "\"none\" or \"expire\"")
            .unwrap_or(Repair::None),
    };
    if leak_scan.interval.is_zero() {
        s.error("interval", "must be above zero");
    }
    if leak_scan.count == 0 {
        s.error("count", "must be at least 1");
    }
    if leak_scan.keys_per_second == 0 {
        s.error("keys_per_second", "must be at least 1");
    }
    s.finish();

    let mut s = Section::new("shutdown", shutdown_tree.unwrap_or(Value::Null), errors);
    let shutdown = ShutdownConfig {
        grace: s.duration("grace", Duration::from_secs(10)),
    };
    s.finish();

    let tracing = read_tracing(tracing_tree.unwrap_or(Value::Null), errors);

    Config {
        agent,
        socket,
        admin,
        metrics,
        log,
        masters,
        lock,
        health,
        delayed_restart,
        leak_scan,
        shutdown,
        tracing,
    }
}

fn read_socket(tree: Value, errors: &mut Vec<FieldError>) -> SocketConfig {
    let mut s = Section::new("socket", tree, errors);
    let path: PathBuf = s
        .take::<String>("path", "a file path")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/redlock/agent.sock"));
    if path.as_os_str().is_empty() {
        s.error("path", "must not be empty");
    }
    let mode = match s.raw("mode") {
        None => 0o660,
        Some(Value::String(text)) => match u32::from_str_radix(text.trim(), 8) {
            Ok(mode) if mode <= 0o777 => mode,
            _ => {
                s.error(
                    "mode",
                    format!("not an octal file mode like \"0660\": {text:?}"),
                );
                0o660
            }
        },
        Some(other) => {
            s.error(
                "mode",
                format!(
                    "expected a quoted octal string like \"0660\", found {}",
                    show(&other)
                ),
            );
            0o660
        }
    };
    let max_connections: usize = s
        .take("max_connections", "a whole number")
        .unwrap_or(16_384);
    if max_connections == 0 {
        s.error("max_connections", "must be at least 1");
    }
    let request_timeout = s.duration("request_timeout", Duration::from_secs(10));
    if request_timeout.is_zero() {
        s.error("request_timeout", "must be above zero");
    }
    let allow_uids = s
        .take("allow_uids", "a list of numeric uids")
        .unwrap_or_default();
    let allow_gids = s
        .take("allow_gids", "a list of numeric gids")
        .unwrap_or_default();
    // Three quarters by default: one uid always leaves room for others.
    let max_connections_per_uid = s
        .take("max_connections_per_uid", "a whole number")
        .unwrap_or_else(|| (max_connections * 3).div_ceil(4).max(1));
    if max_connections_per_uid == 0 {
        s.error("max_connections_per_uid", "must be at least 1");
    } else if max_connections_per_uid > max_connections.max(1) {
        s.error(
            "max_connections_per_uid",
            format!(
                "{max_connections_per_uid} is above socket.max_connections ({max_connections})"
            ),
        );
    }
    let isolate = s
        .take("isolate", "\"none\", \"uid\" or \"pod\"")
        .unwrap_or(Isolate::None);
    if isolate == Isolate::Pod && !cfg!(target_os = "linux") {
        s.error(
            "isolate",
            "pod needs Linux: a peer's pod is read from /proc/<pid>/cgroup",
        );
    }
    s.finish();
    SocketConfig {
        path,
        mode,
        max_connections,
        request_timeout,
        allow_uids,
        allow_gids,
        max_connections_per_uid,
        isolate,
    }
}

fn read_metrics(tree: Value, errors: &mut Vec<FieldError>) -> MetricsConfig {
    let mut s = Section::new("metrics", tree, errors);
    let default: SocketAddr = ([127, 0, 0, 1], 9187).into();
    let listen = match s.take::<String>("listen", "an address like \"127.0.0.1:9187\"") {
        None => default,
        Some(text) => match text.parse() {
            Ok(addr) => addr,
            Err(_) => {
                s.error(
                    "listen",
                    format!("not an IP:port address like \"127.0.0.1:9187\": {text:?}"),
                );
                default
            }
        },
    };
    let max_connections: usize = s
        .take("max_connections", "a whole number")
        .unwrap_or(DEFAULT_METRICS_MAX_CONNECTIONS);
    if max_connections == 0 {
        s.error("max_connections", "must be at least 1");
    } else if max_connections > MAX_METRICS_CONNECTIONS {
        s.error(
            "max_connections",
            format!(
                "{max_connections} is above {MAX_METRICS_CONNECTIONS}: the port serves probes and \
                 scrapes, and every connection it holds is a descriptor the sockets and the \
                 masters cannot have"
            ),
        );
    }
    s.finish();
    MetricsConfig {
        listen,
        max_connections,
    }
}

fn read_log(tree: Value, errors: &mut Vec<FieldError>) -> LogConfig {
    let mut s = Section::new("log", tree, errors);
    let format = s
        .take("format", "\"text\" or \"json\"")
        .unwrap_or(LogFormat::Text);
    let level: String = s
        .take("level", "a filter like \"info\"")
        .unwrap_or_else(|| "info".to_string());
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&level) {
        s.error("level", format!("not a log filter ({e}): {level:?}"));
    }
    s.finish();
    LogConfig { format, level }
}

fn read_lock(tree: Value, errors: &mut Vec<FieldError>) -> LockConfig {
    let mut s = Section::new("lock", tree, errors);
    let key_prefix: String = s
        .take("key_prefix", "a string")
        .unwrap_or_else(|| "redlock:".to_string());
    if key_prefix.is_empty() {
        s.error(
            "key_prefix",
            "must not be empty: the scanner and /v1/locks would take every key on the masters \
             for a lock key; use e.g. \"redlock:\"",
        );
    } else if key_prefix
        .bytes()
        .any(|b| matches!(b, b'*' | b'?' | b'[' | b']' | b'\\'))
    {
        s.error(
            "key_prefix",
            format!(
                "must not contain glob characters *?[]\\ (they break key scans): {key_prefix:?}"
            ),
        );
    }
    let default_ttl = s.duration("default_ttl", Duration::from_secs(10));
    let max_ttl = s.duration("max_ttl", Duration::from_secs(60));
    let node_timeout = s.duration("node_timeout", Duration::from_millis(50));
    let drift_factor: f64 = s.take("drift_factor", "a number").unwrap_or(0.01);
    let retry_delay = s.duration("retry_delay", Duration::from_millis(50));
    let retry_jitter = s.duration("retry_jitter", Duration::from_millis(50));
    let max_hold = s.duration("max_hold", Duration::from_secs(3600));
    let max_waiters: usize = s.take("max_waiters", "a whole number").unwrap_or(10_000);
    // Three quarters by default, as socket.max_connections_per_uid: one
    // uid always leaves room for others.
    let max_waiters_per_uid: usize = s
        .take("max_waiters_per_uid", "a whole number")
        .unwrap_or_else(|| (max_waiters * 3).div_ceil(4));
    if max_waiters_per_uid == 0 && max_waiters > 0 {
        s.error("max_waiters_per_uid", "must be at least 1");
    } else if max_waiters_per_uid > max_waiters {
        s.error(
            "max_waiters_per_uid",
            format!("{max_waiters_per_uid} is above lock.max_waiters ({max_waiters})"),
        );
    }
    let max_streams_per_uid: usize = s
        .take("max_streams_per_uid", "a whole number")
        .unwrap_or(DEFAULT_STREAMS_PER_UID);
    if max_streams_per_uid == 0 {
        s.error("max_streams_per_uid", "must be at least 1");
    }
    let fence = s
        .take("fence", "\"on_request\" or \"always\"")
        .unwrap_or(FenceMode::OnRequest);
    if max_hold < default_ttl {
        s.error(
            "max_hold",
            format!(
                "{} is below lock.default_ttl ({}): a hold could not renew even once",
                humantime::format_duration(max_hold),
                humantime::format_duration(default_ttl)
            ),
        );
    }

    if default_ttl.as_millis() < 1 {
        s.error("default_ttl", "must be at least 1ms");
    }
    if max_ttl.as_millis() < 1 {
        s.error("max_ttl", "must be at least 1ms");
    }
    if default_ttl > max_ttl {
        s.error(
            "default_ttl",
            format!(
                "{} is above lock.max_ttl ({})",
                humantime::format_duration(default_ttl),
                humantime::format_duration(max_ttl)
            ),
        );
    }
    if node_timeout.is_zero() {
        s.error("node_timeout", "must be above zero");
    } else if node_timeout * 10 > default_ttl {
        s.error(
            "node_timeout",
            format!(
                "{} is not far below lock.default_ttl ({}); keep it at most a tenth of it",
                humantime::format_duration(node_timeout),
                humantime::format_duration(default_ttl)
            ),
        );
    }
    if !(0.0..0.5).contains(&drift_factor) || drift_factor.is_nan() {
        s.error(
            "drift_factor",
            format!("must be at least 0 and below 0.5: {drift_factor}"),
        );
    }
    s.finish();
    LockConfig {
        key_prefix,
        default_ttl,
        max_ttl,
        node_timeout,
        drift_factor,
        retry_delay,
        retry_jitter,
        max_hold,
        max_waiters,
        max_waiters_per_uid,
        max_streams_per_uid,
        fence,
    }
}

/// `lock.max_streams_per_uid` by default: room for an application's holds
/// and observers, far below what made one client a load on everyone.
const DEFAULT_STREAMS_PER_UID: usize = 1024;

fn read_agent(tree: Value, errors: &mut Vec<FieldError>) -> AgentConfig {
    let mut s = Section::new("agent", tree, errors);
    let name = match s.take::<String>("name", "a string") {
        None => default_agent_name(),
        Some(name) if crate::redlock::token::valid_agent(&name) => name,
        Some(name) => {
            s.error(
                "name",
                format!(
                    "use 1 to 64 letters, digits, '-' or '_' ('.' and '@' separate the parts of a lock value): {}",
                    echo(&name)
                ),
            );
            default_agent_name()
        }
    };
    let workers = s.take("workers", "a whole number").unwrap_or(1);
    if !(1..=MAX_WORKERS).contains(&workers) {
        s.error(
            "workers",
            format!("use 1 to {MAX_WORKERS} threads, not {workers}"),
        );
    }
    s.finish();
    AgentConfig { name, workers }
}

/// A quoted octal file mode like `"0600"`.
fn mode_field(s: &mut Section<'_>, key: &str, default: u32) -> u32 {
    match s.raw(key) {
        None => default,
        Some(Value::String(text)) => match u32::from_str_radix(text.trim(), 8) {
            Ok(mode) if mode <= 0o777 => mode,
            _ => {
                s.error(
                    key,
                    format!("not an octal file mode like \"0600\": {text:?}"),
                );
                default
            }
        },
        Some(other) => {
            s.error(
                key,
                format!(
                    "expected a quoted octal string like \"0600\", found {}",
                    show(&other)
                ),
            );
            default
        }
    }
}

fn read_admin(tree: Value, socket: &SocketConfig, errors: &mut Vec<FieldError>) -> AdminConfig {
    let socket_path = socket.path.as_path();
    let mut s = Section::new("admin", tree, errors);
    let socket_tree = s.raw("socket");
    let allow_uids = s
        .take("allow_uids", "a list of numeric uids")
        .unwrap_or_default();
    s.finish();
    let mut s = Section::new("admin.socket", socket_tree.unwrap_or(Value::Null), errors);
    let path = s
        .take::<String>("path", "a file path")
        .map(PathBuf::from)
        .unwrap_or_else(|| default_admin_path(socket_path));
    if path.as_os_str().is_empty() {
        s.error("path", "must not be empty");
    } else if path == socket_path {
        s.error("path", "must differ from socket.path");
    } else if socket.isolate != Isolate::None {
        // Whoever reaches the application socket's directory (a node's
        // pods, through their mount of it) would reach force release, which
        // ends any pod's lock, past the isolation.
        let shared = socket_path.parent().filter(|dir| path.starts_with(dir));
        if let Some(dir) = shared {
            s.error(
                "path",
                format!(
                    "{} is inside {}, the directory of socket.path: with socket.isolate: {} \
                     the clients that reach the application socket would reach force release \
                     too; put the admin socket in a directory only operators see",
                    path.display(),
                    if dir.as_os_str().is_empty() {
                        Path::new(".")
                    } else {
                        dir
                    }
                    .display(),
                    socket.isolate.as_str()
                ),
            );
        }
    }
    let mode = mode_field(&mut s, "mode", 0o600);
    s.finish();
    AdminConfig {
        socket: AdminSocketConfig { path, mode },
        allow_uids,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::{errors_of, MINIMAL};

    #[test]
    fn node_timeout_must_be_far_below_the_default_ttl() {
        let yaml = format!("{MINIMAL}lock: {{default_ttl: 1s, node_timeout: 200ms}}\n");
        let errors = errors_of(&yaml);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("lock.node_timeout: 200ms is not far below"));
    }

    #[test]
    fn an_empty_key_prefix_is_refused() {
        let errors = errors_of(&format!("{MINIMAL}lock: {{key_prefix: \"\"}}\n"));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("lock.key_prefix: must not be empty"),
            "{errors:?}"
        );
    }

    #[test]
    fn workers_default_to_one_and_are_checked() {
        let config = Config::from_yaml(MINIMAL).unwrap();
        assert_eq!(config.agent.workers, 1);
        let config = Config::from_yaml(&format!("{MINIMAL}agent: {{workers: 4}}\n")).unwrap();
        assert_eq!(config.agent.workers, 4);
        for (workers, expected) in [
            ("0", "agent.workers: use 1 to 256 threads, not 0"),
            ("257", "agent.workers: use 1 to 256 threads, not 257"),
            (
                "two",
                "agent.workers: expected a whole number, found a string \"two\"",
            ),
        ] {
            let errors = errors_of(&format!("{MINIMAL}agent: {{workers: {workers}}}\n"));
            assert!(
                errors.iter().any(|e| e == expected),
                "{workers}: {errors:#?}"
            );
        }
    }

    #[test]
    fn stream_shares_have_a_default_and_are_checked() {
        let config = Config::from_yaml(MINIMAL).unwrap();
        assert_eq!(config.lock.max_streams_per_uid, 1024);
        let config =
            Config::from_yaml(&format!("{MINIMAL}lock: {{max_streams_per_uid: 3}}\n")).unwrap();
        assert_eq!(config.lock.max_streams_per_uid, 3);
        for (lock, expected) in [
            (
                "{max_streams_per_uid: 0}",
                "lock.max_streams_per_uid: must be at least 1",
            ),
            (
                "{max_streams_per_uid: many}",
                "lock.max_streams_per_uid: expected a whole number, found a string \"many\"",
            ),
        ] {
            let errors = errors_of(&format!("{MINIMAL}lock: {lock}\n"));
            assert_eq!(errors, [expected], "{lock}");
        }
    }

    #[test]
    fn waiter_shares_default_to_three_quarters_and_are_checked() {
        let config = Config::from_yaml(MINIMAL).unwrap();
        assert_eq!(config.lock.max_waiters, 10_000);
        assert_eq!(config.lock.max_waiters_per_uid, 7_500);
        let config = Config::from_yaml(&format!("{MINIMAL}lock: {{max_waiters: 5}}\n")).unwrap();
        assert_eq!(config.lock.max_waiters_per_uid, 4);
        let config = Config::from_yaml(&format!("{MINIMAL}lock: {{max_waiters: 1}}\n")).unwrap();
        assert_eq!(config.lock.max_waiters_per_uid, 1);
        let config = Config::from_yaml(&format!(
            "{MINIMAL}lock: {{max_waiters: 8, max_waiters_per_uid: 8}}\n"
        ))
        .unwrap();
        assert_eq!(config.lock.max_waiters_per_uid, 8);
        for (lock, expected) in [
            (
                "{max_waiters: 4, max_waiters_per_uid: 5}",
                "lock.max_waiters_per_uid: 5 is above lock.max_waiters (4)",
            ),
            (
                "{max_waiters_per_uid: 0}",
                "lock.max_waiters_per_uid: must be at least 1",
            ),
            (
                "{max_waiters_per_uid: many}",
                "lock.max_waiters_per_uid: expected a whole number, found a string \"many\"",
            ),
        ] {
            let errors = errors_of(&format!("{MINIMAL}lock: {lock}\n"));
            assert_eq!(errors, [expected], "{lock}");
        }
    }

    #[test]
    fn isolation_is_off_by_default_and_keeps_the_admin_socket_apart() {
        let config = Config::from_yaml(MINIMAL).unwrap();
        assert_eq!(config.socket.isolate, Isolate::None);
        let apart = "admin: {socket: {path: /run/redlock-admin/admin.sock}}\n";
        for (value, isolate) in [
            ("none", Isolate::None),
            ("uid", Isolate::Uid),
            ("pod", Isolate::Pod),
        ] {
            let yaml = format!("{MINIMAL}socket: {{isolate: {value}}}\n{apart}");
            assert_eq!(Config::from_yaml(&yaml).unwrap().socket.isolate, isolate);
        }
        let errors = errors_of(&format!("{MINIMAL}socket: {{isolate: node}}\n"));
        assert_eq!(
            errors,
            ["socket.isolate: expected \"none\", \"uid\" or \"pod\", found a string \"node\""]
        );
        // The admin socket where the clients of an isolating socket reach
        // it: beside it by default, given there, or below it.
        for admin in [
            "",
            "admin: {socket: {path: /run/redlock/admin.sock}}\n",
            "admin: {socket: {path: /run/redlock/ops/admin.sock}}\n",
        ] {
            let errors = errors_of(&format!("{MINIMAL}socket: {{isolate: pod}}\n{admin}"));
            assert_eq!(errors.len(), 1, "{admin}: {errors:?}");
            assert!(
                errors[0].starts_with("admin.socket.path: /run/redlock/")
                    && errors[0].contains("is inside /run/redlock, the directory of socket.path")
                    && errors[0].contains("socket.isolate: pod"),
                "{errors:?}"
            );
        }
        let errors = errors_of(&format!("{MINIMAL}socket: {{isolate: uid}}\n"));
        assert_eq!(errors.len(), 1, "{errors:?}");
        // Without isolation the default stays as it was.
        assert!(errors_of(&format!("{MINIMAL}socket: {{isolate: none}}\n")).is_empty());
    }

    #[test]
    fn the_metrics_budget_defaults_to_64_and_is_checked() {
        let config = Config::from_yaml(MINIMAL).unwrap();
        assert_eq!(config.metrics.max_connections, 64);
        let config =
            Config::from_yaml(&format!("{MINIMAL}metrics: {{max_connections: 8}}\n")).unwrap();
        assert_eq!(config.metrics.max_connections, 8);
        let errors = errors_of(&format!("{MINIMAL}metrics: {{max_connections: 0}}\n"));
        assert_eq!(errors, ["metrics.max_connections: must be at least 1"]);
        let errors = errors_of(&format!("{MINIMAL}metrics: {{max_connections: 5000}}\n"));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("metrics.max_connections: 5000 is above 4096"),
            "{errors:?}"
        );
    }
}
