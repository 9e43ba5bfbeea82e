//! One master's pub/sub subscriber: keeps the channels the lock service
//! wants ([`Channels`]) subscribed on a connection of its own, and hands
//! every message back to it. The only pub/sub code of the agent.
//!
//! ## Behavior
//! - [`Channels::always`] (the fleet's force-release channel) is
//!   subscribed first on every (re)connect. An ACL that refuses it is
//!   warned about once, not at every reconnect, and the other channels are
//!   still served; any other error is the connection's.
//! - After a (re)connect every channel of [`Channels::wanted`] is
//!   subscribed again; changes queued while disconnected are covered by it.
//! - A failed or closed connection is retried with a backoff from 100 ms
//!   doubling to 5 s; a connection that worked resets it.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;

use super::Node;
use crate::redlock::{ChannelChange, Channels};

/// How long a (re)connect and its subscriptions may take.
const CONNECT_WAIT: Duration = Duration::from_secs(2);
/// The first and the longest wait before a reconnect.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Serves `channels` on `node` forever, with `changes` to the wanted
/// channels as they come; returns only when aborted, or once `changes`
/// is closed (the lock service is gone).
pub async fn listen(
    node: Arc<Node>,
    channels: Arc<dyn Channels>,
    mut changes: mpsc::UnboundedReceiver<ChannelChange>,
) {
    let mut backoff = FIRST_BACKOFF;
    let mut refused_said = false;
    loop {
        let connected = async {
            let pubsub = node.client().get_async_pubsub().await?;
            let (mut sink, stream) = pubsub.split();
            // Changes queued so far are covered by the full list below.
            while changes.try_recv().is_ok() {}
            match sink.subscribe(channels.always()).await {
                Ok(()) => {}
                Err(e) if e.code() == Some("NOPERM") => {
                    if !std::mem::replace(&mut refused_said, true) {
                        tracing::warn!(node = node.name(), error = %e, channel = %channels.always(), "cannot subscribe to the force-release channel: holds here hear of a force release only at their next renewal");
                    }
                }
                Err(e) => return Err(e),
            }
            for channel in channels.wanted() {
                sink.subscribe(&channel).await?;
            }
            Ok::<_, redis::RedisError>((sink, stream))
        };
        match tokio::time::timeout(CONNECT_WAIT, connected).await {
            Ok(Ok((mut sink, mut stream))) => {
                backoff = FIRST_BACKOFF;
                loop {
                    tokio::select! {
                        message = stream.next() => match message {
                            Some(message) => channels.message(message.get_channel_name(), message.get_payload_bytes()),
                            None => break,
                        },
                        change = changes.recv() => {
                            let done = match change {
                                Some(ChannelChange::Subscribe(channel, confirm)) => {
                                    let done = sink.subscribe(&channel).await;
                                    if let (Ok(()), Some(confirm)) = (&done, confirm) {
                                        let _ = confirm.send(());
                                    }
                                    done
                                }
                                Some(ChannelChange::Unsubscribe(channel)) => sink.unsubscribe(&channel).await,
                                None => return,
                            };
                            if let Err(e) = done {
                                tracing::debug!(node = node.name(), error = %e, "release channel (un)subscribe failed");
                                break;
                            }
                        }
                    }
                }
                tracing::debug!(
                    node = node.name(),
                    "release channels closed; subscribing again"
                );
            }
            Ok(Err(e)) => {
                tracing::debug!(node = node.name(), error = %e, "cannot subscribe to the release channels")
            }
            Err(_) => tracing::debug!(
                node = node.name(),
                "subscribing to the release channels timed out"
            ),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}
