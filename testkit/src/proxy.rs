//! A fault-injecting TCP proxy between one agent and one master (the fault
//! suite puts one on every agent-master pair). Every agent reaches every
//! master through its own [`Link`], so a fault can slow or cut one agent's
//! view of one master and nothing else.
//!
//! ## Behavior
//! - `Latency(d)`: every chunk, both ways, is delivered `d` after it was
//!   read, in order (a slow network, not a slow pipe: throughput is kept).
//! - `Cut`: every open connection is closed at once and new ones are
//!   closed as soon as they are accepted (a refused or reset connection).
//! - `Blackhole`: connections stay open but nothing is delivered either way
//!   until the fault heals; then the queued bytes flow (a partition in
//!   which TCP keeps retransmitting).
//! - `Clear` heals; connections made while cut stay closed.
//! - A master restarted on its port is reached again by new connections.
//! - [`Link::switch_upstream`] points the link at another port (a failover
//!   behind a fixed address): every open connection is closed at once, new
//!   ones go to the new port.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The fault on a link right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkFault {
    Clear,
    Latency(Duration),
    Cut,
    Blackhole,
}

/// One agent-to-master link.
#[derive(Debug)]
pub struct Link {
    name: String,
    port: u16,
    fault: watch::Sender<LinkFault>,
    upstream: watch::Sender<u16>,
    connections: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl Link {
    /// Listens on a free loopback port and forwards to `upstream_port`.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn start(name: String, upstream_port: u16) -> io::Result<Link> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let (fault, watcher) = watch::channel(LinkFault::Clear);
        let (upstream, upstream_watcher) = watch::channel(upstream_port);
        let connections = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(accept(
            listener,
            upstream_watcher,
            watcher,
            Arc::clone(&connections),
        ));
        Ok(Link {
            name,
            port,
            fault,
            upstream,
            connections,
            task,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The port the agent connects to.
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn set(&self, fault: LinkFault) {
        self.fault.send_replace(fault);
    }

    pub fn fault(&self) -> LinkFault {
        *self.fault.borrow()
    }

    /// Forwards new connections to `port` from now on and closes every open
    /// one, so the agent reconnects and reaches whatever serves `port`: a
    /// promoted replica behind the address it knows.
    pub fn switch_upstream(&self, port: u16) {
        self.upstream.send_replace(port);
    }

    /// The port connections are forwarded to.
    pub fn upstream(&self) -> u16 {
        *self.upstream.borrow()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.task.abort();
        // Closing the watch ends every pump.
        self.fault.send_replace(LinkFault::Cut);
    }
}

async fn accept(
    listener: TcpListener,
    upstream: watch::Receiver<u16>,
    fault: watch::Receiver<LinkFault>,
    connections: Arc<AtomicU64>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if *fault.borrow() == LinkFault::Cut {
            drop(client);
            continue;
        }
        connections.fetch_add(1, Ordering::Relaxed);
        let fault = fault.clone();
        let mut switched = upstream.clone();
        let upstream_port = *switched.borrow_and_update();
        tokio::spawn(async move {
            let Ok(upstream) = TcpStream::connect(("127.0.0.1", upstream_port)).await else {
                return; // the master is down: the agent sees a closed connection
            };
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            let (client_read, client_write) = client.into_split();
            let (upstream_read, upstream_write) = upstream.into_split();
            // Either direction ending ends both: a half-open proxy would
            // hide a dead master from the agent. A switch of the upstream
            // ends both too (dropping the pumps closes both sockets).
            tokio::select! {
                () = pump(client_read, upstream_write, fault.clone()) => {}
                () = pump(upstream_read, client_write, fault) => {}
                _ = switched.changed() => {}
            }
        });
    }
}

/// Copies one direction, delaying or stalling as the fault says, until
/// either side closes or the link is cut.
async fn pump<R, W>(mut from: R, mut to: W, mut fault: watch::Receiver<LinkFault>)
where
    R: AsyncReadExt + Unpin + Send + 'static,
    W: AsyncWriteExt + Unpin + Send + 'static,
{
    let (queue, mut queued) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let mut read_fault = fault.clone();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = tokio::select! {
                n = from.read(&mut buf) => match n {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                },
                changed = read_fault.changed() => {
                    if changed.is_err() || *read_fault.borrow() == LinkFault::Cut {
                        return;
                    }
                    continue;
                }
            };
            let delay = match *read_fault.borrow() {
                LinkFault::Latency(d) => d,
                _ => Duration::ZERO,
            };
            if queue
                .send((Instant::now() + delay, buf[..n].to_vec()))
                .is_err()
            {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((due, bytes)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            loop {
                let now = *fault.borrow_and_update();
                match now {
                    LinkFault::Cut => return,
                    LinkFault::Blackhole => {
                        if fault.changed().await.is_err() {
                            return;
                        }
                    }
                    LinkFault::Clear | LinkFault::Latency(_) => break,
                }
            }
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
    };
    // The reader ending (EOF) still lets queued bytes drain, unless cut.
    // Dropping this future (a switched upstream) aborts the writer at once,
    // which closes its half of the connection.
    let mut writer = AbortOnDrop(tokio::spawn(writer));
    reader.await;
    let _ = (&mut writer.0).await;
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> u16 {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    async fn round_trip(s: &mut TcpStream) -> io::Result<Duration> {
        let started = std::time::Instant::now();
        s.write_all(b"ping").await?;
        let mut buf = [0u8; 4];
        tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut buf))
            .await
            .map_err(|_| io::Error::other("timed out"))??;
        Ok(started.elapsed())
    }

    /// A server that answers every read with `tag`.
    async fn tagged_server(tag: &'static [u8]) -> u16 {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(tag).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    async fn ask(s: &mut TcpStream) -> io::Result<[u8; 1]> {
        s.write_all(b"?").await?;
        let mut buf = [0u8; 1];
        tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut buf))
            .await
            .map_err(|_| io::Error::other("timed out"))??;
        Ok(buf)
    }

    #[tokio::test]
    async fn a_switched_upstream_closes_open_connections_and_takes_new_ones() {
        let (a, b) = (tagged_server(b"a").await, tagged_server(b"b").await);
        let link = Link::start("t".into(), a).await.unwrap();
        let mut old = TcpStream::connect(("127.0.0.1", link.port()))
            .await
            .unwrap();
        assert_eq!(&ask(&mut old).await.unwrap(), b"a");

        link.switch_upstream(b);
        assert_eq!(link.upstream(), b);
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(2), old.read(&mut buf))
            .await
            .expect("a switch closes open connections");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
        let mut fresh = TcpStream::connect(("127.0.0.1", link.port()))
            .await
            .unwrap();
        assert_eq!(
            &ask(&mut fresh).await.unwrap(),
            b"b",
            "new ones reach the new port"
        );
    }

    #[tokio::test]
    async fn latency_cut_and_blackhole_do_what_they_say() {
        let link = Link::start("t".into(), echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(("127.0.0.1", link.port()))
            .await
            .unwrap();
        assert!(round_trip(&mut s).await.unwrap() < Duration::from_millis(50));

        link.set(LinkFault::Latency(Duration::from_millis(40)));
        let rtt = round_trip(&mut s).await.unwrap();
        assert!(
            rtt >= Duration::from_millis(80),
            "two delayed legs: {rtt:?}"
        );

        link.set(LinkFault::Blackhole);
        s.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        assert!(
            tokio::time::timeout(Duration::from_millis(150), s.read_exact(&mut buf))
                .await
                .is_err(),
            "nothing passes a blackhole"
        );
        link.set(LinkFault::Clear);
        tokio::time::timeout(Duration::from_secs(2), s.read_exact(&mut buf))
            .await
            .expect("queued bytes flow after healing")
            .unwrap();

        link.set(LinkFault::Cut);
        let mut buf = [0u8; 4];
        let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
            .await
            .expect("a cut closes open connections");
        assert!(matches!(n, Ok(0) | Err(_)));
        let mut fresh = TcpStream::connect(("127.0.0.1", link.port()))
            .await
            .unwrap();
        assert!(
            round_trip(&mut fresh).await.is_err(),
            "and refuses new ones"
        );

        link.set(LinkFault::Clear);
        let mut fresh = TcpStream::connect(("127.0.0.1", link.port()))
            .await
            .unwrap();
        round_trip(&mut fresh).await.unwrap();
    }
}
