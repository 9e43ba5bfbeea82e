//! What each master's pub/sub subscriber serves for the waiters: the
//! release channels of the resources with waiters here, and the fleet's
//! force-release channel.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::redlock::{ChannelChange, Channels, Store};

/// What each master's subscriber (`crate::node::subscriber::listen`)
/// serves for the lock service: the fleet's force-release channel and the
/// release channels of the resources with waiters here. A release wakes
/// the matching queue; a force release is told to `locks`
/// (`Locks::heard_force_release`).
pub struct Subscriptions<M: Store> {
    locks: Arc<crate::lock::Locks<M>>,
}

impl<M: Store> Subscriptions<M> {
    /// The channels for one master's subscriber, and the changes to them
    /// as queues come and go (one receiver per master).
    pub fn new(
        locks: Arc<crate::lock::Locks<M>>,
    ) -> (Subscriptions<M>, mpsc::UnboundedReceiver<ChannelChange>) {
        let (changes_tx, changes) = mpsc::unbounded_channel();
        locks
            .waiters()
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(changes_tx);
        (Subscriptions { locks }, changes)
    }
}

impl<M: Store> Channels for Subscriptions<M> {
    fn always(&self) -> &str {
        self.locks.waiters().force_channel()
    }

    fn wanted(&self) -> Vec<String> {
        self.locks.waiters().wanted()
    }

    fn needed(&self) -> bool {
        self.locks.idle_for() < crate::lock::idle::IDLE_AFTER
    }

    fn message(&self, channel: &str, payload: &[u8]) {
        let waiters = self.locks.waiters();
        if channel == waiters.force_channel {
            force_released(&self.locks, payload);
        } else {
            waiters.released_on(channel, payload);
        }
    }
}

/// A message on the fleet's force-release channel: `<resource>\n<value>`
/// (a resource has no line break; the value is the rest).
fn force_released<M: Store>(locks: &crate::lock::Locks<M>, message: &[u8]) {
    let parsed = std::str::from_utf8(message)
        .ok()
        .and_then(|m| m.split_once('\n'));
    match parsed {
        Some((resource, value)) if !resource.is_empty() && !value.is_empty() => {
            locks.heard_force_release(resource, value);
        }
        _ => tracing::debug!("unreadable message on the force-release channel; ignored"),
    }
}
