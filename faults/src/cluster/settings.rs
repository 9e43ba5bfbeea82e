//! What the suite varies in the agents it starts: their config (as YAML
//! for each agent), their test-only switches (as environment variables),
//! and which of them reach the masters through connection-keeping links.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::MasterAddr;

/// The agent settings the suite varies; everything else keeps its default.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    pub key_prefix: String,
    pub default_ttl: Duration,
    pub max_ttl: Duration,
    pub node_timeout: Duration,
    pub retry_delay: Duration,
    pub retry_jitter: Duration,
    pub health_interval: Duration,
    pub delayed_restart: bool,
    pub restart_extra: Duration,
    /// Extra `key: value` lines under `socket:` (e.g. `max_connections: 10`).
    pub socket_extra: Vec<String>,
    /// Extra lines under `lock:`.
    pub lock_extra: Vec<String>,
    pub log_level: String,
    /// The in-vote incarnation marker check. `false` starts the agents with
    /// [`NO_MARKER_CHECK_ENV`]`=1`, the agent's test-only switch: the
    /// control run that must see what a flush does without it.
    pub marker_check: bool,
    /// The in-vote eviction check (a vote on a master that evicted keys
    /// since its marker was written is refused). `false` starts the agents
    /// with [`NO_EVICTION_CHECK_ENV`]`=1`: the eviction control run.
    pub eviction_check: bool,
    /// Extra environment variables of each agent (`[0]` is a1's): the
    /// fence control run's clock skews and write-back switch.
    pub agent_env: Vec<Vec<(String, String)>>,
    /// The watch on the masters' clocks (each vote and probe reads the
    /// master's time and compares it with the agent's monotonic clock).
    /// `false` starts the agents with [`NO_CLOCK_CHECK_ENV`]`=1`: the clock
    /// control run.
    pub clock_check: bool,
    /// The process check of a vote whose script is missing on a master
    /// (NOSCRIPT: has its process changed?). `false` starts the agents
    /// with [`NO_PROCESS_CHECK_ENV`]`=1`: the restore control run.
    pub process_check: bool,
    /// The agents (0 for a1) whose links keep their connections open while
    /// a master dies and comes back behind them, as a Redis proxy or a
    /// managed endpoint does ([`crate::proxy::Link::start_keeping`]).
    pub keeping_links: Vec<usize>,
    /// Each agent's own `health.interval` where set (`[0]` is a1's), in
    /// place of [`AgentSettings::health_interval`]: an agent that probes
    /// seldom, as an idle one does.
    pub agent_health_interval: Vec<Option<Duration>>,
}

/// The agent's test-only switch that skips round 2's fence write-back.
pub const NO_FENCE_WRITEBACK_ENV: &str = redlock_testkit::switches::NO_FENCE_WRITEBACK;
/// The agent's test-only clock skew (signed ms) for the fence floor only.
pub const FENCE_CLOCK_SKEW_ENV: &str = redlock_testkit::switches::FENCE_CLOCK_SKEW_MS;

/// The agent's test-only switch that turns the in-vote incarnation marker
/// check off (not a config key, so no deployment can turn it off by
/// mistake). Removed from every agent's environment unless asked for.
pub const NO_MARKER_CHECK_ENV: &str = redlock_testkit::switches::NO_MARKER_CHECK;

/// The agent's test-only switch that turns the in-vote eviction check off
/// (the votes and the probes no longer compare the master's `evicted_keys`
/// with the count its marker was written with; the probes still see the
/// count grow from one probe to the next). Removed from every agent's
/// environment unless asked for.
pub const NO_EVICTION_CHECK_ENV: &str = redlock_testkit::switches::NO_EVICTION_CHECK;

/// The agent's test-only switch that turns its watch on the masters'
/// clocks off. Removed from every agent's environment unless asked for.
pub const NO_CLOCK_CHECK_ENV: &str = redlock_testkit::switches::NO_CLOCK_CHECK;

/// The agent's test-only switch that turns the process check of a vote
/// answered NOSCRIPT off (and has every agent share one script). Removed
/// from every agent's environment unless asked for.
pub const NO_PROCESS_CHECK_ENV: &str = redlock_testkit::switches::NO_PROCESS_CHECK;

impl Default for AgentSettings {
    fn default() -> AgentSettings {
        AgentSettings {
            key_prefix: "faults:".into(),
            default_ttl: Duration::from_secs(1),
            max_ttl: Duration::from_secs(2),
            // The most default_ttl allows (a tenth): the machine that runs
            // the suite is shared and busy.
            node_timeout: Duration::from_millis(100),
            retry_delay: Duration::from_millis(20),
            retry_jitter: Duration::from_millis(30),
            health_interval: Duration::from_millis(100),
            delayed_restart: true,
            restart_extra: Duration::from_millis(500),
            socket_extra: Vec::new(),
            lock_extra: Vec::new(),
            log_level: "info".into(),
            marker_check: true,
            eviction_check: true,
            agent_env: Vec::new(),
            clock_check: true,
            process_check: true,
            keeping_links: Vec::new(),
            agent_health_interval: Vec::new(),
        }
    }
}

impl AgentSettings {
    /// How long a master that came back stays out: `max_ttl + extra`.
    pub fn quarantine(&self) -> Duration {
        self.max_ttl + self.restart_extra
    }

    /// Environment variables the agents start with.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = Vec::new();
        if !self.marker_check {
            env.push((NO_MARKER_CHECK_ENV.to_string(), "1".to_string()));
        }
        if !self.eviction_check {
            env.push((NO_EVICTION_CHECK_ENV.to_string(), "1".to_string()));
        }
        if !self.clock_check {
            env.push((NO_CLOCK_CHECK_ENV.to_string(), "1".to_string()));
        }
        if !self.process_check {
            env.push((NO_PROCESS_CHECK_ENV.to_string(), "1".to_string()));
        }
        env
    }

    /// The settings of agent `index` (0 for a1): its own health interval,
    /// if it has one.
    pub fn of_agent(&self, index: usize) -> AgentSettings {
        let mut own = self.clone();
        if let Some(Some(interval)) = self.agent_health_interval.get(index) {
            own.health_interval = *interval;
        }
        own
    }

    /// Environment variables agent `index` (0 for a1) starts with.
    pub fn env_of(&self, index: usize) -> Vec<(String, String)> {
        let mut env = self.env();
        env.extend(self.agent_env.get(index).cloned().unwrap_or_default());
        env
    }

    /// The config YAML of an agent on `socket` reaching single masters at
    /// `urls`.
    pub fn yaml(&self, socket: &Path, metrics_port: u16, urls: &[(String, String)]) -> String {
        let masters: Vec<(String, MasterAddr)> = urls
            .iter()
            .map(|(name, url)| (name.clone(), MasterAddr::Url(url.clone())))
            .collect();
        self.yaml_for(socket, metrics_port, &masters)
    }

    /// The config YAML of an agent on `socket` reaching `masters`, single
    /// servers or clusters.
    pub fn yaml_for(
        &self,
        socket: &Path,
        metrics_port: u16,
        masters: &[(String, MasterAddr)],
    ) -> String {
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        let mut y = String::new();
        let _ = writeln!(y, "socket:\n  path: {:?}", socket.display().to_string());
        for line in &self.socket_extra {
            let _ = writeln!(y, "  {line}");
        }
        let _ = writeln!(y, "metrics:\n  listen: \"127.0.0.1:{metrics_port}\"");
        let _ = writeln!(y, "log:\n  format: json\n  level: {:?}", self.log_level);
        let _ = writeln!(y, "masters:");
        for (name, addr) in masters {
            match addr {
                MasterAddr::Url(url) => {
                    let _ = writeln!(y, "  - name: {name}\n    url: {url:?}");
                }
                MasterAddr::Cluster(seeds) => {
                    let _ = writeln!(y, "  - name: {name}\n    cluster:");
                    for seed in seeds {
                        let _ = writeln!(y, "      - {seed:?}");
                    }
                }
            }
        }
        let _ = writeln!(y, "lock:\n  key_prefix: {:?}", self.key_prefix);
        let _ = writeln!(y, "  default_ttl: {}", ms(self.default_ttl));
        let _ = writeln!(y, "  max_ttl: {}", ms(self.max_ttl));
        let _ = writeln!(y, "  node_timeout: {}", ms(self.node_timeout));
        let _ = writeln!(y, "  retry_delay: {}", ms(self.retry_delay));
        let _ = writeln!(y, "  retry_jitter: {}", ms(self.retry_jitter));
        for line in &self.lock_extra {
            let _ = writeln!(y, "  {line}");
        }
        let _ = writeln!(y, "health:\n  interval: {}", ms(self.health_interval));
        let _ = writeln!(
            y,
            "delayed_restart:\n  enabled: {}\n  extra: {}",
            self.delayed_restart,
            ms(self.restart_extra)
        );
        let _ = writeln!(y, "leak_scan:\n  interval: 5s");
        let _ = writeln!(y, "shutdown:\n  grace: 1s");
        y
    }
}
