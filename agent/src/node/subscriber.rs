//! One master's pub/sub subscriber: keeps the channels the lock service
//! wants ([`Channels`]) subscribed on a connection of its own, and hands
//! every message back to it. The only pub/sub code of the agent.
//!
//! ## Behavior
//! - The connection is open only while the lock service needs it
//!   ([`Channels::needed`]): an idle agent keeps one connection per master,
//!   its lock connection, and this one is opened again by the first change
//!   or wake-up ([`ChannelChange`]) that comes.
//! - [`Channels::always`] (the fleet's force-release channel) is
//!   subscribed first on every (re)connect. An ACL that refuses it is
//!   warned about once, not at every reconnect, and the other channels are
//!   still served; any other error is the connection's.
//! - After a (re)connect every channel of [`Channels::wanted`] is
//!   subscribed again; changes queued while disconnected are covered by it,
//!   and their confirmations are sent once it is done.
//! - A failed or closed connection is retried with a backoff from 100 ms
//!   doubling to 5 s; a connection that worked resets it. A wake-up that
//!   asks for a confirmation meanwhile gets it at once.

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

/// How often a connected subscriber asks whether it is still needed.
const NEEDED_EVERY: Duration = Duration::from_secs(10);

type Confirm = tokio::sync::oneshot::Sender<()>;

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
    // Confirmations owed once the next connection is subscribed.
    let mut owed: Vec<Confirm> = Vec::new();
    loop {
        if !channels.needed() && owed.is_empty() {
            // Idle: no connection until something needs one.
            match changes.recv().await {
                None => return,
                Some(change) => owed.extend(confirmation(change)),
            }
        }
        let connected = async {
            let pubsub = node.client().get_async_pubsub().await?;
            let (mut sink, stream) = pubsub.split();
            // Changes queued so far are covered by the full list below.
            while let Ok(change) = changes.try_recv() {
                owed.extend(confirmation(change));
            }
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
                for confirm in owed.drain(..) {
                    let _ = confirm.send(());
                }
                let mut needed = tokio::time::interval(NEEDED_EVERY);
                needed.reset();
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
                                Some(ChannelChange::Wake(confirm)) => {
                                    if let Some(confirm) = confirm {
                                        let _ = confirm.send(());
                                    }
                                    Ok(())
                                }
                                None => return,
                            };
                            if let Err(e) = done {
                                tracing::debug!(node = node.name(), error = %e, "release channel (un)subscribe failed");
                                break;
                            }
                        }
                        _ = needed.tick() => {
                            if !channels.needed() {
                                tracing::debug!(node = node.name(), "the agent is idle: pub/sub connection closed until it is needed");
                                break;
                            }
                        }
                    }
                }
                if !channels.needed() {
                    // Closed for idleness, not failed: no backoff.
                    continue;
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
        // A wake-up that comes while the master cannot be reached is
        // answered at once: waiting for this connection would not help.
        let retry = tokio::time::sleep(backoff);
        tokio::pin!(retry);
        loop {
            tokio::select! {
                () = &mut retry => break,
                change = changes.recv() => match change {
                    None => return,
                    Some(ChannelChange::Wake(confirm)) => {
                        if let Some(confirm) = confirm {
                            let _ = confirm.send(());
                        }
                    }
                    Some(change) => owed.extend(confirmation(change)),
                },
            }
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The confirmation a change asks for, if any. A subscription asked for
/// while disconnected is confirmed once the (re)connect subscribed it with
/// the rest of [`Channels::wanted`].
fn confirmation(change: ChannelChange) -> Option<Confirm> {
    match change {
        ChannelChange::Subscribe(_, confirm) | ChannelChange::Wake(confirm) => confirm,
        ChannelChange::Unsubscribe(_) => None,
    }
}
