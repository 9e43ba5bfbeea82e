//! `redlock-agent check` past the file: connects to every master at once,
//! through the agent's own nodes (its redis, TLS and cluster clients, its
//! AUTH, its scripts), and says which masters it could not use and why.
//!
//! A master cannot be used when it cannot be reached within the deadline
//! (a closed port, a host that does not answer), refuses the TLS handshake
//! (an unknown CA, TLS to a plain port, plain to a TLS port) or the login,
//! does not answer `PING`, is a Redis Cluster node listed as a single
//! server or a single server listed as a cluster, or is set up to lose
//! lock keys: a replica, or an eviction policy that can evict them
//! ([`health::topology_warnings`], the warnings the health task gives).
//! What an ACL keeps it from reading (`INFO`) is noted, not failed.
//!
//! Nothing here prints a password: the messages are the nodes' classified
//! errors and the masters' own answers, and the masters are named by their
//! config path and name.

use std::time::{Duration, Instant};

use crate::agent::{Agent, MasterUrlError};
use crate::config::Config;
use crate::health;
use crate::node::{cluster_node_as_server, Conn, Node};
use crate::redlock::master::NodeError;

/// How long the masters have to answer, when `check` is not told.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest one connection attempt may take; a master that times out
/// is tried again until the deadline, so a busy machine is not taken for a
/// dead master.
const ATTEMPT_NODE_TIMEOUT: Duration = Duration::from_millis(200);

/// What `check` found out about one master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Its position in `masters`.
    pub index: usize,
    pub name: String,
    /// Why it cannot be used; empty when it can.
    pub problems: Vec<String>,
    /// What could not be checked (an ACL that refuses `INFO`).
    pub notes: Vec<String>,
    /// What answered, when something did: `single server, redis 7.2.4`.
    pub answered: Option<String>,
}

impl Verdict {
    fn new(index: usize, name: &str) -> Verdict {
        Verdict {
            index,
            name: name.to_string(),
            problems: Vec::new(),
            notes: Vec::new(),
            answered: None,
        }
    }

    /// The master can take part in locks.
    pub fn usable(&self) -> bool {
        self.problems.is_empty()
    }

    /// The lines `check` prints for this master: `masters[1] (r2): ...`.
    pub fn lines(&self) -> Vec<String> {
        let who = format!("masters[{}] ({})", self.index, self.name);
        let mut lines: Vec<String> = self
            .problems
            .iter()
            .map(|p| format!("{who}: cannot be used: {p}"))
            .collect();
        if self.problems.is_empty() {
            lines.push(format!(
                "{who}: ok: {}",
                self.answered.as_deref().unwrap_or("answers")
            ));
        }
        lines.extend(self.notes.iter().map(|n| format!("{who}: note: {n}")));
        lines
    }
}

/// Connects to every master of `config` at once and judges each, all
/// within `timeout`.
///
/// # Errors
/// When the redis client refuses a master's settings (the config's
/// validation has already refused what it can know of).
pub async fn masters(config: &Config, timeout: Duration) -> Result<Vec<Verdict>, MasterUrlError> {
    let mut config = config.clone();
    // The agent bounds a connection attempt by ten node timeouts (at most
    // 2s); here every attempt gets the longest, and is retried until the
    // deadline: a master is judged on what it answers, not how fast.
    config.lock.node_timeout = config.lock.node_timeout.max(ATTEMPT_NODE_TIMEOUT);
    let tls: Vec<bool> = config.masters.iter().map(|m| m.url.is_tls()).collect();
    let agent = Agent::new(config)?;
    let deadline = Instant::now() + timeout;
    let nodes = agent.engine().nodes();
    let verdicts = nodes
        .iter()
        .enumerate()
        .map(|(index, node)| judge(index, node, tls[index], deadline, timeout));
    Ok(futures::future::join_all(verdicts).await)
}

/// One master's verdict.
async fn judge(
    index: usize,
    node: &Node,
    tls: bool,
    deadline: Instant,
    timeout: Duration,
) -> Verdict {
    let mut verdict = Verdict::new(index, node.name());
    let conn = match open(node, deadline, timeout).await {
        Ok(conn) => conn,
        Err(e) => {
            let problem = match node.is_cluster() {
                true => not_a_cluster(node).await,
                false => None,
            };
            verdict
                .problems
                .push(problem.unwrap_or_else(|| format!("cannot connect: {}", explain(tls, &e))));
            return verdict;
        }
    };
    if let Err(e) = retry(deadline, || node.ping(&conn)).await {
        verdict.problems.push(format!("does not answer PING: {e}"));
        return verdict;
    }
    if node.is_cluster() {
        judge_cluster(node, &conn, deadline, &mut verdict).await;
    } else {
        judge_single(node, &conn, deadline, &mut verdict).await;
    }
    verdict
}

/// `ask` again while it times out and the deadline has not passed: an
/// answer late on a busy machine is not a master that cannot be used.
async fn retry<T, F, Fut>(deadline: Instant, mut ask: F) -> Result<T, NodeError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, NodeError>>,
{
    loop {
        match ask().await {
            Err(NodeError::Timeout(_)) if Instant::now() < deadline => {}
            other => return other,
        }
    }
}

/// The note on a master whose ACL refuses `INFO`.
const INFO_REFUSED: &str = "its ACL refuses INFO, so whether it is a cluster node, a replica or \
                            evicts keys was not checked (add +info to the agent's user to check it)";

async fn judge_single(node: &Node, conn: &Conn, deadline: Instant, verdict: &mut Verdict) {
    let info = match retry(deadline, || node.info(conn)).await {
        Ok(Some(info)) => info,
        Ok(None) => {
            verdict.answered = Some("single server".to_string());
            verdict.notes.push(INFO_REFUSED.to_string());
            return;
        }
        Err(e) => {
            verdict.problems.push(format!("does not answer INFO: {e}"));
            return;
        }
    };
    verdict.answered = Some(match info.get::<String>("redis_version") {
        Some(version) => format!("single server, redis {version}"),
        None => "single server".to_string(),
    });
    if info.get::<String>("cluster_enabled").as_deref() == Some("1") {
        verdict
            .problems
            .push(cluster_node_as_server("cluster_enabled:1"));
    }
    verdict.problems.extend(health::topology_warnings(&info));
}

async fn judge_cluster(node: &Node, conn: &Conn, deadline: Instant, verdict: &mut Verdict) {
    if let Err(e) = retry(deadline, || node.probe_shards(conn)).await {
        verdict
            .problems
            .push(format!("cannot read its shards (CLUSTER SHARDS): {e}"));
        return;
    }
    let mut infos = node.shard_infos(conn).await;
    while Instant::now() < deadline
        && infos
            .iter()
            .any(|(_, info)| matches!(info, Err(NodeError::Timeout(_))))
    {
        infos = node.shard_infos(conn).await;
    }
    verdict.answered = Some(format!(
        "Redis Cluster, {} shard{}",
        infos.len(),
        if infos.len() == 1 { "" } else { "s" }
    ));
    let mut refused = false;
    for (addr, info) in infos {
        match info {
            Ok(Some(info)) => verdict.problems.extend(
                health::topology_warnings(&info)
                    .into_iter()
                    .map(|w| format!("shard {addr}: {w}")),
            ),
            Ok(None) => refused = true,
            Err(e) => verdict
                .problems
                .push(format!("shard {addr} does not answer INFO: {e}")),
        }
    }
    if refused {
        verdict.notes.push(INFO_REFUSED.to_string());
    }
}

/// The node's connection, as the health task opens it (TLS, AUTH, the
/// scripts loaded), tried again after a timeout until the deadline.
async fn open(node: &Node, deadline: Instant, timeout: Duration) -> Result<Conn, NodeError> {
    let attempts = async {
        loop {
            match node.open().await {
                Err(NodeError::Timeout(_)) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => return other,
            }
        }
    };
    match tokio::time::timeout_at(deadline.into(), attempts).await {
        Ok(Err(NodeError::Timeout(_))) | Err(_) => Err(NodeError::Timeout(timeout)),
        Ok(answer) => answer,
    }
}

/// A master listed as a cluster whose first seed, reached as a single
/// server, says it is not one; `None` when that cannot be told.
async fn not_a_cluster(node: &Node) -> Option<String> {
    let seed = node.open_seed().await.ok()?;
    let info = node.info(&seed).await.ok()??;
    (info.get::<String>("cluster_enabled").as_deref() != Some("1")).then(|| {
        "it is not a Redis Cluster node (cluster_enabled:0), listed as a cluster (cluster): \
         list it as url: instead"
            .to_string()
    })
}

/// A connection error with what most often causes it, when the scheme and
/// the error point at it.
fn explain(tls: bool, error: &NodeError) -> String {
    let hint = match error {
        NodeError::Timeout(_) if tls => {
            " (a port that does not speak TLS never answers the handshake: if so, use redis://)"
        }
        NodeError::Connection(text) if tls && text.contains("corrupt message") => {
            " (the port does not speak TLS: use redis://)"
        }
        NodeError::Connection(text) if !tls && !text.contains("refused") => {
            " (a port that speaks TLS drops a plain connection: if so, use rediss://)"
        }
        _ => "",
    };
    format!("{error}{hint}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_master_is_named_by_path_and_name_with_every_problem() {
        let mut verdict = Verdict::new(2, "r3");
        verdict.answered = Some("single server, redis 7.2.4".to_string());
        assert!(verdict.usable());
        assert_eq!(
            verdict.lines(),
            ["masters[2] (r3): ok: single server, redis 7.2.4"]
        );
        verdict.problems.push("replica (role:slave)".to_string());
        verdict
            .problems
            .push("maxmemory-policy allkeys-lru".to_string());
        verdict.notes.push("a note".to_string());
        assert!(!verdict.usable());
        assert_eq!(
            verdict.lines(),
            [
                "masters[2] (r3): cannot be used: replica (role:slave)",
                "masters[2] (r3): cannot be used: maxmemory-policy allkeys-lru",
                "masters[2] (r3): note: a note",
            ]
        );
    }

    #[test]
    fn scheme_mix_ups_get_a_hint() {
        let reset = NodeError::Connection("Connection reset by peer (os error 104)".into());
        let refused = NodeError::Connection("Connection refused (os error 111)".into());
        let corrupt =
            NodeError::Connection("received corrupt message of type InvalidContentType".into());
        assert!(explain(false, &reset).ends_with("if so, use rediss://)"));
        assert!(!explain(false, &refused).contains("rediss://"));
        assert!(explain(true, &corrupt).ends_with("use redis://)"));
        assert!(
            explain(true, &NodeError::Timeout(DEFAULT_TIMEOUT)).ends_with("if so, use redis://)")
        );
        assert_eq!(
            explain(false, &NodeError::Timeout(DEFAULT_TIMEOUT)),
            "timed out after 10s"
        );
    }
}
