//! The processes a run needs: five `redis-server` masters on free loopback
//! ports (killable, freezable; started by `redlock-testkit`, the one master
//! starter of the repository), for W9 five masters that are each a Redis
//! Cluster of three primaries ([`Clusters`]), and redlock-agent processes
//! over either ([`MasterSet`]).
//!
//! ## Behavior
//! - Every process is killed when its handle drops, so a failed run leaves
//!   nothing behind; a frozen master is thawed first.
//! - Logs go to files in the run's scratch directory and are printed when a
//!   process fails to start.

use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Commands that are not lock traffic: health probes, handshakes, the
/// agent's pub/sub, a cluster's topology reads and our own INFO, by name
/// or `name|subcommand`. Everything else a master counts (scripts' inner
/// calls included, such as the in-vote `CLUSTER MYID` on a cluster) is
/// charged to the locks.
const NOT_LOCK_TRAFFIC: &[&str] = &[
    "ping",
    "info",
    "hello",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "select",
    "auth",
    "scan",
    "dbsize",
    "config",
    "command",
    "quit",
    "client",
    "cluster|slots",
    "cluster|shards",
    "cluster|nodes",
    "cluster|info",
];

pub use redlock_testkit::free_port;
use redlock_testkit::{RedisCluster, RedisServer};

use crate::cpu::Process;

/// The masters an agent is pointed at: single servers or clusters.
pub trait MasterSet {
    /// How many masters (entries of the agent's `masters:`).
    fn len(&self) -> usize;

    /// The agent config's `masters:` entries, one YAML line each.
    fn config_lines(&self) -> Vec<String>;

    /// Lock commands executed so far, summed over every process that
    /// serves keys (`INFO commandstats`, script-inner calls included).
    /// `None` when one cannot be asked.
    fn lock_commands(&self) -> Option<u64>;

    /// Every `redis-server` process that serves keys, with its pid (from
    /// its own `INFO server`); `None` when one cannot be asked.
    fn processes(&self) -> Option<Vec<Process>>;

    /// How long an agent may take to see every master usable, with every
    /// hash slot admitted.
    fn settle_time(&self) -> Duration {
        Duration::from_secs(20)
    }
}

/// The pid `redis-server` on `port` reports (`INFO server`'s
/// `process_id`).
fn server_pid(port: u16) -> Option<u32> {
    let info: String = connect(port)
        .and_then(|mut c| redis::cmd("INFO").arg("server").query(&mut c))
        .ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|v| v.trim().parse().ok())
}

/// One master's lock commands so far (see [`MasterSet::lock_commands`]).
fn lock_commands_of(port: u16) -> Option<u64> {
    let info: String = connect(port)
        .and_then(|mut c| redis::cmd("INFO").arg("commandstats").query(&mut c))
        .ok()?;
    Some(count_lock_commands(&info))
}

fn wait_for(what: &str, deadline: Duration, mut ready: impl FnMut() -> bool) -> anyhow::Result<()> {
    let until = Instant::now() + deadline;
    while Instant::now() < until {
        if ready() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("{what} not ready within {deadline:?}")
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) on a pid this process spawned and has not reaped.
    unsafe {
        libc::kill(child.id() as i32, signal);
    }
}

/// One master's connection for our own queries, with short timeouts so a
/// frozen master cannot hang the orchestrator.
fn connect(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let conn = client.get_connection_with_timeout(Duration::from_millis(500))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    Ok(conn)
}

/// The N masters of a run.
pub struct Masters {
    servers: Vec<RedisServer>,
    pub ports: Vec<u16>,
}

impl Masters {
    /// Starts `n` masters, no persistence, each answering PING.
    ///
    /// # Errors
    /// When `redis-server` cannot be started or does not answer in 10 s
    /// (with its log).
    pub fn start(n: usize, dir: &Path) -> anyhow::Result<Masters> {
        let servers = (1..=n)
            .map(|i| RedisServer::start(dir, &format!("r{i}")))
            .collect::<Result<Vec<_>, _>>()?;
        let ports = servers.iter().map(RedisServer::port).collect();
        Ok(Masters { servers, ports })
    }

    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// SIGKILL: the master is gone, its port refuses connections.
    pub fn kill(&mut self, i: usize) {
        self.servers[i].kill();
    }

    /// Starts a killed master again, empty, on its port.
    ///
    /// # Errors
    /// When it does not come back.
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        Ok(self.servers[i].restart()?)
    }

    /// SIGSTOP: the master accepts connections (the kernel does) but never
    /// answers.
    pub fn freeze(&mut self, i: usize) {
        let _ = self.servers[i].freeze();
    }

    pub fn thaw(&mut self, i: usize) {
        let _ = self.servers[i].thaw();
    }

    /// Lock commands executed so far, summed over every master that answers
    /// (`INFO commandstats`, script-inner calls included). `None` when a
    /// master cannot be asked (killed or frozen).
    pub fn lock_commands(&self) -> Option<u64> {
        let mut total = 0;
        for (i, &port) in self.ports.iter().enumerate() {
            if self.servers[i].pid().is_none() || self.servers[i].is_frozen() {
                return None;
            }
            total += lock_commands_of(port)?;
        }
        Some(total)
    }

    /// Client connections the masters have open, summed over every master
    /// (`INFO clients`'s `connected_clients`; each count includes the
    /// connection asking). `None` when a master cannot be asked.
    pub fn connected_clients(&self) -> Option<u64> {
        let mut total = 0;
        for (i, &port) in self.ports.iter().enumerate() {
            if self.servers[i].pid().is_none() || self.servers[i].is_frozen() {
                return None;
            }
            let info: String = connect(port)
                .and_then(|mut c| redis::cmd("INFO").arg("clients").query(&mut c))
                .ok()?;
            total += info.lines().find_map(|l| {
                l.strip_prefix("connected_clients:")
                    .and_then(|v| v.trim().parse::<u64>().ok())
            })?;
        }
        Some(total)
    }

    /// Each master's process id, in order.
    pub fn pids(&self) -> Vec<u32> {
        self.servers.iter().filter_map(RedisServer::pid).collect()
    }

    /// Each master's `total_commands_processed` (`INFO stats`), in order.
    ///
    /// # Errors
    /// When a master cannot be asked.
    pub fn total_commands(&self) -> anyhow::Result<Vec<u64>> {
        self.info_field_each("stats", "total_commands_processed")
    }

    /// Each master's `connected_clients` (`INFO clients`, the asking
    /// connection included), in order.
    ///
    /// # Errors
    /// When a master cannot be asked.
    pub fn clients_each(&self) -> anyhow::Result<Vec<u64>> {
        self.info_field_each("clients", "connected_clients")
    }

    /// Each master's `SCAN` calls so far (`INFO commandstats`), in order.
    ///
    /// # Errors
    /// When a master cannot be asked.
    pub fn scan_calls_each(&self) -> anyhow::Result<Vec<u64>> {
        self.ports
            .iter()
            .map(|&port| {
                let stats: String = redis::cmd("INFO")
                    .arg("commandstats")
                    .query(&mut connect(port)?)?;
                Ok(stats
                    .lines()
                    .find_map(|l| l.strip_prefix("cmdstat_scan:calls="))
                    .and_then(|rest| rest.split(',').next()?.parse().ok())
                    .unwrap_or(0))
            })
            .collect()
    }

    /// Each master's key count (`DBSIZE`), in order.
    ///
    /// # Errors
    /// When a master cannot be asked.
    pub fn dbsize_each(&self) -> anyhow::Result<Vec<u64>> {
        self.ports
            .iter()
            .map(|&port| Ok(redis::cmd("DBSIZE").query(&mut connect(port)?)?))
            .collect()
    }

    fn info_field_each(&self, section: &str, field: &str) -> anyhow::Result<Vec<u64>> {
        self.ports
            .iter()
            .map(|&port| {
                let info: String = redis::cmd("INFO").arg(section).query(&mut connect(port)?)?;
                info.lines()
                    .find_map(|l| {
                        l.strip_prefix(field)?
                            .strip_prefix(':')?
                            .trim()
                            .parse()
                            .ok()
                    })
                    .with_context(|| format!("no {field} in INFO {section} of port {port}"))
            })
            .collect()
    }

    /// `INFO server`'s `redis_version` of the first master.
    pub fn redis_version(&self) -> String {
        connect(self.ports[0])
            .and_then(|mut c| redis::cmd("INFO").arg("server").query::<String>(&mut c))
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|l| l.strip_prefix("redis_version:").map(str::to_string))
            })
            .unwrap_or_else(|| "?".to_string())
    }

    /// `SET key value` on every master.
    ///
    /// # Errors
    /// When a master refuses it.
    pub fn set_everywhere(&self, key: &str, value: &str) -> anyhow::Result<()> {
        for &port in &self.ports {
            let mut conn = connect(port)?;
            redis::cmd("SET")
                .arg(key)
                .arg(value)
                .query::<()>(&mut conn)?;
        }
        Ok(())
    }

    /// Loads `script` on every master; returns its SHA.
    ///
    /// # Errors
    /// When a master refuses it.
    pub fn load_script(&self, script: &str) -> anyhow::Result<String> {
        let mut sha = String::new();
        for &port in &self.ports {
            let mut conn = connect(port)?;
            sha = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(script)
                .query(&mut conn)?;
        }
        Ok(sha)
    }
}

impl MasterSet for Masters {
    fn len(&self) -> usize {
        self.ports.len()
    }

    fn config_lines(&self) -> Vec<String> {
        self.urls()
            .iter()
            .enumerate()
            .map(|(i, url)| format!("{{name: r{}, url: \"{url}\"}}", i + 1))
            .collect()
    }

    fn lock_commands(&self) -> Option<u64> {
        Masters::lock_commands(self)
    }

    fn processes(&self) -> Option<Vec<Process>> {
        self.ports
            .iter()
            .enumerate()
            .map(|(i, &port)| {
                Some(Process {
                    master: format!("r{}", i + 1),
                    addr: format!("127.0.0.1:{port}"),
                    pid: server_pid(port)?,
                })
            })
            .collect()
    }
}

/// W9's masters: `n` Redis Clusters of `shards` primaries each (no
/// replicas: the benchmark injects no fault into them), named `c1` ..
/// `cN` in the agent's config and pointed at by `cluster:` seeds.
pub struct Clusters {
    clusters: Vec<RedisCluster>,
}

impl Clusters {
    /// Starts the clusters one after the other; each has settled (every
    /// slot served, every node agreeing) when this returns.
    ///
    /// # Errors
    /// When a node does not start or a cluster does not settle.
    pub fn start(n: usize, shards: usize, dir: &Path) -> anyhow::Result<Clusters> {
        let clusters = (1..=n)
            .map(|i| {
                RedisCluster::start(dir, &format!("c{i}"), shards, 0)
                    .with_context(|| format!("cannot start cluster c{i}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Clusters { clusters })
    }

    /// Shards (primaries) per cluster.
    pub fn shards(&self) -> usize {
        self.clusters.first().map_or(0, RedisCluster::shards)
    }

    /// The primaries' ports of every cluster, cluster by cluster.
    fn primary_ports(&self) -> impl Iterator<Item = (usize, u16)> + '_ {
        self.clusters
            .iter()
            .enumerate()
            .flat_map(|(i, c)| (0..c.shards()).map(move |shard| (i, c.primary_port(shard))))
    }
}

impl MasterSet for Clusters {
    fn len(&self) -> usize {
        self.clusters.len()
    }

    fn config_lines(&self) -> Vec<String> {
        self.clusters
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let seeds: Vec<String> = c.seeds().iter().map(|u| format!("\"{u}\"")).collect();
                format!("{{name: c{}, cluster: [{}]}}", i + 1, seeds.join(", "))
            })
            .collect()
    }

    fn lock_commands(&self) -> Option<u64> {
        self.primary_ports()
            .map(|(_, port)| lock_commands_of(port))
            .sum()
    }

    /// At first sight of a new cluster the agent finds no slot marker,
    /// quarantines every slot, then witnesses and readmits each one: three
    /// sweeps of 16384 scripts per cluster, on a machine shared with the
    /// 15 shards.
    fn settle_time(&self) -> Duration {
        Duration::from_secs(120)
    }

    fn processes(&self) -> Option<Vec<Process>> {
        self.primary_ports()
            .map(|(i, port)| {
                Some(Process {
                    master: format!("c{}", i + 1),
                    addr: format!("127.0.0.1:{port}"),
                    pid: server_pid(port)?,
                })
            })
            .collect()
    }
}

/// Sums `calls=` of every `cmdstat_*` line that is lock traffic.
fn count_lock_commands(info: &str) -> u64 {
    info.lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|rest| {
            let (name, stats) = rest.split_once(':')?;
            let base = name.split('|').next().unwrap_or(name);
            if NOT_LOCK_TRAFFIC.contains(&base) || NOT_LOCK_TRAFFIC.contains(&name) {
                return None;
            }
            let calls = stats.split(',').find_map(|f| f.strip_prefix("calls="))?;
            calls.parse::<u64>().ok()
        })
        .sum()
}

/// The agent's retry settings for a run.
#[derive(Debug, Clone, Copy)]
pub struct AgentRetry {
    pub delay_ms: u64,
    pub jitter_ms: u64,
}

/// The agent's defaults (`lock.retry_delay`, `lock.retry_jitter`).
pub const AGENT_DEFAULT: AgentRetry = AgentRetry {
    delay_ms: 50,
    jitter_ms: 50,
};
/// Tuned for a hot key, like every peer's tuned settings: a 10 ms retry.
pub const AGENT_TUNED: AgentRetry = AgentRetry {
    delay_ms: 10,
    jitter_ms: 10,
};

/// The per-node timeout every benchmark agent runs with (the default).
pub const NODE_TIMEOUT_MS: u64 = 50;

/// The agent's test-only switch (an environment variable, `1` to set it)
/// that turns the in-vote incarnation marker check off: the vote is then a
/// plain `SET NX PX`, as before the check existed. Removed from every
/// agent's environment unless a run asks for it.
pub const MARKER_SWITCH: &str = redlock_testkit::switches::NO_MARKER_CHECK;

/// A redlock-agent process.
pub struct Agent {
    child: Option<Child>,
    pub socket: PathBuf,
    pub metrics: SocketAddr,
    log: PathBuf,
}

impl Agent {
    /// Writes a config for `masters` and starts the agent with `env` added
    /// to its environment; waits until it serves and sees every master
    /// usable. `socket_extra` is added to the `socket:` block as it is
    /// (`key: value` pairs, comma-separated; empty for the defaults).
    ///
    /// Delayed restart is off: the masters are started by this run (young,
    /// so the agent would quarantine them), and the degraded workload
    /// restarts one; quarantine is a safety feature with no place in a
    /// throughput figure.
    ///
    /// # Errors
    /// When it does not start, or does not see every master usable (and
    /// every slot admitted) in [`MasterSet::settle_time`].
    pub fn start(
        bin: &Path,
        dir: &Path,
        name: &str,
        masters: &impl MasterSet,
        retry: AgentRetry,
        env: &[(&str, &str)],
        socket_extra: &str,
    ) -> anyhow::Result<Agent> {
        Agent::launch(bin, dir, name, masters, retry, env, socket_extra, None, "")
    }

    /// As [`Agent::start`] with the default retry, and `yaml` (whole
    /// sections, such as W12's `tracing:`) added to its config.
    ///
    /// # Errors
    /// As [`Agent::start`].
    pub fn start_with(
        bin: &Path,
        dir: &Path,
        name: &str,
        masters: &impl MasterSet,
        yaml: &str,
    ) -> anyhow::Result<Agent> {
        let retry = AGENT_DEFAULT;
        Agent::launch(bin, dir, name, masters, retry, &[], "", None, yaml)
    }

    /// As [`Agent::start`], with the leak scan on every `leak_scan`: the
    /// fleet's, which one agent of those on the same masters runs for all.
    ///
    /// # Errors
    /// As [`Agent::start`].
    pub fn start_scanning(
        bin: &Path,
        dir: &Path,
        name: &str,
        masters: &impl MasterSet,
        retry: AgentRetry,
        leak_scan: Duration,
    ) -> anyhow::Result<Agent> {
        Agent::launch(bin, dir, name, masters, retry, &[], "", Some(leak_scan), "")
    }

    #[allow(clippy::too_many_arguments)]
    fn launch(
        bin: &Path,
        dir: &Path,
        name: &str,
        masters: &impl MasterSet,
        retry: AgentRetry,
        env: &[(&str, &str)],
        socket_extra: &str,
        leak_scan: Option<Duration>,
        extra_yaml: &str,
    ) -> anyhow::Result<Agent> {
        let socket = dir.join(format!("{name}.sock"));
        let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
        let config = dir.join(format!("{name}.yaml"));
        let extra = if socket_extra.is_empty() {
            String::new()
        } else {
            format!(", {socket_extra}")
        };
        let mut yaml = format!(
            "# Written by redlock-bench.\nsocket: {{path: {:?}{extra}}}\nmetrics: {{listen: \"{metrics}\"}}\nlog: {{level: warn}}\nmasters:\n",
            socket.display().to_string()
        );
        for line in masters.config_lines() {
            yaml.push_str(&format!("  - {line}\n"));
        }
        yaml.push_str(&format!(
            "lock: {{default_ttl: 10s, max_ttl: 60s, node_timeout: {NODE_TIMEOUT_MS}ms, retry_delay: {}ms, retry_jitter: {}ms}}\n\
             delayed_restart: {{enabled: false}}\n",
            retry.delay_ms, retry.jitter_ms
        ));
        match leak_scan {
            Some(interval) => yaml.push_str(&format!(
                "leak_scan: {{interval: {}ms}}\n",
                interval.as_millis()
            )),
            // No leak scan in a throughput figure: its SCANs and scripts
            // would count as lock traffic.
            None => yaml.push_str("leak_scan: {interval: 1h}\n"),
        }
        yaml.push_str(extra_yaml);
        fs::write(&config, yaml)?;
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .env_remove(MARKER_SWITCH)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(fs::File::create(dir.join(format!("{name}.out")))?)
            .stderr(fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let mut agent = Agent {
            child: Some(child),
            socket,
            metrics,
            log,
        };
        let n = masters.len();
        let log = agent.log.clone();
        let settle = masters.settle_time();
        agent
            .wait_usable(n, settle)
            .and_then(|()| agent.wait_admitted(settle))
            .map_err(|e| {
                anyhow::anyhow!(
                    "{e}; its log:\n{}",
                    fs::read_to_string(&log).unwrap_or_default()
                )
            })?;
        Ok(agent)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits until `/readyz` reports `n` usable masters.
    ///
    /// # Errors
    /// When that does not happen in `deadline`.
    pub fn wait_usable(&mut self, n: usize, deadline: Duration) -> anyhow::Result<()> {
        let metrics = self.metrics;
        let child = &mut self.child;
        let mut exited = None;
        let ready = wait_for("the agent", deadline, || {
            if let Some(Ok(Some(status))) = child.as_mut().map(Child::try_wait) {
                exited = Some(status);
                return true;
            }
            http_get(metrics, "/readyz")
                .ok()
                .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok())
                .is_some_and(|v| v["usable"].as_u64() == Some(n as u64))
        });
        match exited {
            Some(status) => bail!("the agent exited: {status}"),
            None => ready,
        }
    }
}

impl Agent {
    /// Waits until `/v1/nodes` shows every master up with no hash slot in
    /// quarantine and every cluster master's shards known and up: a
    /// cluster's slots may be kept out of locks a moment after its
    /// topology is first read, and a run must not start before.
    ///
    /// # Errors
    /// When that does not happen in `deadline`; the last answer is named.
    pub fn wait_admitted(&self, deadline: Duration) -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let client = redlock_client::Client::new(&self.socket);
        let until = Instant::now() + deadline;
        let mut last = String::from("no answer");
        while Instant::now() < until {
            match runtime.block_on(client.nodes()) {
                Ok(nodes) => {
                    let waiting: Vec<String> = nodes
                        .nodes
                        .iter()
                        .filter(|n| {
                            n.state != redlock_wire::NodeState::Up
                                || n.quarantined_slots > 0
                                || (n.kind == "cluster"
                                    && (n.shards.is_empty()
                                        || n.shards
                                            .iter()
                                            .any(|s| s.state != redlock_wire::NodeState::Up)))
                        })
                        .map(|n| {
                            format!(
                                "{} {} ({} slots quarantined, {} shards)",
                                n.name,
                                n.state.as_str(),
                                n.quarantined_slots,
                                n.shards.len()
                            )
                        })
                        .collect();
                    if waiting.is_empty() {
                        return Ok(());
                    }
                    last = waiting.join(", ");
                }
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("the agent's masters not all admitted within {deadline:?}: {last}")
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(&child, libc::SIGTERM);
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A one-shot HTTP/1.0 GET; the body.
fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    Ok(text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::count_lock_commands;

    #[test]
    fn lock_commands_leave_out_probes_and_handshakes() {
        let info = "# Commandstats\r\n\
            cmdstat_set:calls=10,usec=1,usec_per_call=0.1,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_evalsha:calls=5,usec=1,usec_per_call=0.1,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_ping:calls=99,usec=1,usec_per_call=0.1,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_client|setinfo:calls=4,usec=1,usec_per_call=0.1,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_cluster|myid:calls=5,usec=1,usec_per_call=0.1,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_cluster|shards:calls=7,usec=1,usec_per_call=0.1,rejected_calls=0,failed_calls=0\r\n";
        assert_eq!(
            count_lock_commands(info),
            20,
            "the in-vote CLUSTER MYID counts"
        );
    }
}
