//! The commands `redlock-agent check` sends a master beyond the health
//! task's (see [`crate::check`]): a `PING`, a plain connection to a cluster
//! master's first seed (to tell what answers there when the cluster client
//! cannot connect), and each shard primary's whole `INFO`.

use redis::{AsyncConnectionConfig, InfoDict};

use super::cluster::OnNode;
use super::conn::bounded;
use super::{classify, Conn, Node};
use crate::redlock::master::NodeError;
use crate::redlock::observe::Op;

/// One shard primary's `INFO`, by its address: `None` where an ACL refuses
/// it.
pub type ShardInfo = (String, Result<Option<InfoDict>, NodeError>);

impl Node {
    /// `PING` on `conn`, bounded by the probe timeout.
    ///
    /// # Errors
    /// When the master does not answer `PONG` in time.
    pub async fn ping(&self, conn: &Conn) -> Result<(), NodeError> {
        let mut conn = conn.clone();
        conn.set_response_timeout(self.probe_timeout());
        let pong = self
            .request_on(Op::Probe, conn, |mut conn| async move {
                redis::cmd("PING").query_async::<String>(&mut conn).await
            })
            .await?;
        if pong == "PONG" {
            Ok(())
        } else {
            Err(NodeError::Other(format!(
                "PING answered {:?}, not PONG",
                pong.chars().take(40).collect::<String>()
            )))
        }
    }

    /// A plain connection to the first seed of a cluster master, the same
    /// client that carries its pub/sub, bounded by the connect timeout: to
    /// tell what answers there when the cluster client cannot connect.
    ///
    /// # Errors
    /// When the seed cannot be reached or refuses the handshake in time.
    pub async fn open_seed(&self) -> Result<Conn, NodeError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.connect_timeout));
        let attempt = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        match tokio::time::timeout(self.connect_timeout, attempt).await {
            Ok(Ok(conn)) => Ok(Conn::Single(conn)),
            Ok(Err(e)) => Err(classify(&e)),
            Err(_) => Err(NodeError::Timeout(self.connect_timeout)),
        }
    }

    /// Each shard primary's whole `INFO`, at the shards the last
    /// `Node::probe_shards` read, all at once, each bounded by the probe
    /// timeout. Empty on a single server.
    pub async fn shard_infos(&self, conn: &Conn) -> Vec<ShardInfo> {
        let Some(cluster) = conn.cluster() else {
            return Vec::new();
        };
        let bound = self.probe_timeout();
        let asks = self.shard_addresses().into_iter().map(|(host, port)| {
            let addr = format!("{host}:{port}");
            let mut node = OnNode::new(cluster.clone(), host, port);
            async move {
                let answer =
                    bounded(bound, redis::cmd("INFO").query_async::<InfoDict>(&mut node)).await;
                let info = match answer {
                    Ok(info) => Ok(Some(info)),
                    Err(e) => match classify(&e) {
                        NodeError::NoPerm(_) => Ok(None),
                        other => Err(other),
                    },
                };
                (addr, info)
            }
        });
        futures::future::join_all(asks).await
    }
}
