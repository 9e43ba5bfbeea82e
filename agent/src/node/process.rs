//! Which master process answers a vote. A vote counts only from the
//! process that holds the keys the agent has seen there: a restart, a
//! restore from an old snapshot or AOF, or a failover behind a proxy that
//! keeps the agent's connection open (as Envoy's Redis proxy, twemproxy
//! and managed endpoints do) puts a new process behind the same
//! connection, with the incarnation marker and eviction count of the
//! snapshot it loaded, and none of the locks granted since.
//!
//! Every process starts with an empty script cache, and each node's lock
//! connection runs a vote script of its own (see [`super::scripts::batch`])
//! that no other agent loads: the first batch a new process gets from this
//! agent answers NOSCRIPT, however many agents talked to it since it
//! started. Only then does the agent ask (`INFO server`) which process it
//! is: after loading the script, so a restart between the two shows as a
//! new `run_id`. A new `run_id` quarantines the master (detector
//! `run_id`) before any vote of that batch counts; the known one (an
//! operator's `SCRIPT FLUSH`) sends the batch again. The check costs
//! nothing per vote: one `INFO` per new process and agent. The health
//! probe tells a known process the same way, by a script of its own
//! ([`super::scripts::probe`]), and reads `INFO server` only when that
//! script is missing.

use redis::{Cmd, ErrorKind, RedisResult, ServerErrorKind, Value};

use super::{Conn, Detector, Identity, Node};
use crate::redlock::master::NodeError;

/// A batch's call, as [`Node::eval_batch`] ends it.
#[derive(Debug)]
pub enum Evaluated {
    /// The master's answer.
    Answered(Value),
    /// The script was missing and the master is another process than the
    /// one the agent knew: quarantined already; every command of the batch
    /// fails with this error.
    Restarted(NodeError),
}

impl Node {
    /// Runs `call`, an `EVALSHA` of this node's vote script; on NOSCRIPT
    /// loads the script and, with the process check on (every single
    /// server but under the test switch), checks the master's `run_id`
    /// before sending `call` again.
    ///
    /// # Errors
    /// The master's or the connection's, of the call, the load or the
    /// `INFO`.
    pub(super) async fn eval_batch(&self, call: &Cmd, conn: &mut Conn) -> RedisResult<Evaluated> {
        match call.query_async(conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {}
            result => return result.map(Evaluated::Answered),
        }
        self.batch_script.prepare_invoke().load_async(conn).await?;
        if self.process_check && !self.is_cluster() {
            let info: redis::InfoDict = redis::cmd("INFO").arg("server").query_async(conn).await?;
            let now: Option<String> = info.get("run_id");
            let known = self.snapshot().identity;
            let known_id = known.as_ref().map(|i| i.run_id.clone());
            if now.is_none() || now != known_id {
                return Ok(Evaluated::Restarted(self.process_changed(known, now)));
            }
        }
        call.query_async(conn).await.map(Evaluated::Answered)
    }

    /// A vote found its script missing and the master's `run_id` changed:
    /// a new process sits behind the connection. Quarantined at once, as
    /// the health task would at its next probe, which then sees the same
    /// `run_id` and does not count the restart twice.
    fn process_changed(&self, known: Option<Identity>, now: Option<String>) -> NodeError {
        tracing::warn!(
            node = %self.name,
            was = known.as_ref().map(|i| i.run_id.as_str()),
            now = now.as_deref(),
            quarantine = ?self.quarantine,
            "the master's script cache was empty and its run_id changed: a new process (a restart, a restore, a failover behind a proxy); its votes do not count; quarantined"
        );
        if let (Some(known), Some(run_id)) = (known, now.clone()) {
            self.set_identity(Some(Identity { run_id, ..known }));
        }
        self.quarantine(std::time::Instant::now() + self.quarantine, Detector::RunId);
        self.restart_detected(Detector::RunId);
        self.wake.notify_one();
        NodeError::Other(format!(
            "{} is another process than the one that holds the keys seen there (run_id {}): quarantined",
            self.name,
            now.as_deref().unwrap_or("unknown")
        ))
    }
}
