//! One connection of a connection-keeping link: the client side lives on
//! while upstream connections come and go behind it (see the Behavior
//! list of [`super`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::resp::Framer;
use super::{pump, Counters, End, Framing, LinkFault, LOST_REPLY, RECONNECT_EVERY};

/// The client side of one kept connection and what it has asked.
struct Client {
    read: OwnedReadHalf,
    write: OwnedWriteHalf,
    requests: Framer,
    /// Requests read from the client.
    asked: AtomicU64,
    /// Replies delivered to it, [`LOST_REPLY`]s included.
    answered: AtomicU64,
}

impl Client {
    /// Answers every request still owed a reply with [`LOST_REPLY`].
    ///
    /// # Errors
    /// When the client side is gone.
    async fn answer_lost(&mut self) -> std::io::Result<()> {
        let asked = self.asked.load(Ordering::Relaxed);
        let owed = asked.saturating_sub(self.answered.load(Ordering::Relaxed));
        if owed > 0 {
            let errors = LOST_REPLY.repeat(usize::try_from(owed).unwrap_or(usize::MAX));
            self.write.write_all(&errors).await?;
        }
        self.answered.store(
            asked.max(self.answered.load(Ordering::Relaxed)),
            Ordering::Relaxed,
        );
        Ok(())
    }
}

/// Serves `client` until it closes, the link is cut or dropped, or its
/// upstream is switched; its upstream connection is opened again each
/// time it dies.
pub(super) async fn serve(
    client: TcpStream,
    mut switched: watch::Receiver<u16>,
    mut fault: watch::Receiver<LinkFault>,
    counters: Arc<Counters>,
) {
    let _ = client.set_nodelay(true);
    let (read, write) = client.into_split();
    let mut client = Client {
        read,
        write,
        requests: Framer::requests(),
        asked: AtomicU64::new(0),
        answered: AtomicU64::new(0),
    };
    let mut replies = Framer::replies();
    let port = *switched.borrow_and_update();
    let mut first = true;
    loop {
        let connected = connect(port, &mut client, &mut fault, &mut switched).await;
        if !first {
            counters.reconnecting.fetch_sub(1, Ordering::Relaxed);
        }
        let Some(upstream) = connected else {
            return;
        };
        if !first {
            counters.reconnects.fetch_add(1, Ordering::Relaxed);
        }
        first = false;
        let _ = upstream.set_nodelay(true);
        let (mut upstream_read, mut upstream_write) = upstream.into_split();
        let lost = {
            let asking = Framing {
                framer: &mut client.requests,
                read: Some(&client.asked),
                delivered: None,
            };
            let answering = Framing {
                framer: &mut replies,
                read: None,
                delivered: Some(&client.answered),
            };
            tokio::select! {
                end = pump(&mut client.read, &mut upstream_write, fault.clone(), Some(asking)) => {
                    end == End::Sink
                }
                end = pump(&mut upstream_read, &mut client.write, fault.clone(), Some(answering)) => {
                    end == End::Source
                }
                _ = switched.changed() => false,
            }
        };
        // The upstream is gone; a subscriber's subscriptions go with it.
        if !lost || client.requests.subscribed() {
            return;
        }
        counters.reconnecting.fetch_add(1, Ordering::Relaxed);
        replies.clear();
        if client.answer_lost().await.is_err() {
            counters.reconnecting.fetch_sub(1, Ordering::Relaxed);
            return;
        }
    }
}

/// An upstream connection to `port`, tried every [`RECONNECT_EVERY`]
/// until one opens; meanwhile each whole request the client sends is
/// answered with [`LOST_REPLY`]. `None` when the client closes, the link
/// is cut or dropped, or the upstream is switched.
async fn connect(
    port: u16,
    client: &mut Client,
    fault: &mut watch::Receiver<LinkFault>,
    switched: &mut watch::Receiver<u16>,
) -> Option<TcpStream> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if *fault.borrow_and_update() == LinkFault::Cut {
            return None;
        }
        if let Ok(upstream) = TcpStream::connect(("127.0.0.1", port)).await {
            return Some(upstream);
        }
        let retry = tokio::time::sleep(RECONNECT_EVERY);
        tokio::pin!(retry);
        loop {
            tokio::select! {
                () = &mut retry => break,
                n = client.read.read(&mut buf) => {
                    let n = match n {
                        Ok(0) | Err(_) => return None,
                        Ok(n) => n,
                    };
                    let frames = client.requests.push(&buf[..n]).ok()?;
                    client.asked.fetch_add(frames.count, Ordering::Relaxed);
                    client.answer_lost().await.ok()?;
                }
                changed = fault.changed() => {
                    if changed.is_err() || *fault.borrow() == LinkFault::Cut {
                        return None;
                    }
                }
                _ = switched.changed() => return None,
            }
        }
    }
}
