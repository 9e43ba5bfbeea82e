//! Node health: one task per master that connects, probes with PING every
//! `health.interval` (each probe bounded by the node timeout), and moves the
//! node between `up` and `down`.

use std::sync::Arc;
use std::time::Duration;

use redlock_wire::NodeState;

use crate::redlock::Node;

/// Probes `node` forever; returns only when the task is aborted.
pub async fn watch(node: Arc<Node>, interval: Duration) {
    loop {
        probe(&node).await;
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = node.wake.notified() => {}
        }
    }
}

/// One probe: connect if needed, then PING.
pub async fn probe(node: &Node) {
    let was = node.state();
    if !node.snapshot().connected {
        if let Err(e) = node.connect().await {
            if was != NodeState::Down {
                tracing::warn!(node = node.name(), error = %e, "node down");
            }
            node.disconnect(&e);
            return;
        }
    }
    match node.ping().await {
        Ok(latency) => {
            node.record_probe(latency);
            if was == NodeState::Down {
                tracing::info!(node = node.name(), ?latency, "node up");
                node.set_state(NodeState::Up);
            }
        }
        Err(e) => {
            if was != NodeState::Down {
                tracing::warn!(node = node.name(), error = %e, "node down");
            }
            node.disconnect(&e);
        }
    }
}
