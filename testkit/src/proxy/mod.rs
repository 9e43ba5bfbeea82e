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
//! - A link started with [`Link::start`] closes a connection's client side
//!   when its upstream side closes: the agent sees its master go.
//! - A connection-keeping link ([`Link::start_keeping`]) does what Envoy's
//!   Redis proxy, twemproxy or a managed endpoint do instead: when the
//!   upstream connection dies (EOF, reset) the client's stays open, and
//!   the link connects upstream again (every [`RECONNECT_EVERY`] until it
//!   can) and forwards the client's next requests there. It reads RESP
//!   both ways and forwards whole frames only; each request the lost
//!   upstream left unanswered (its reply lost in flight) is answered with
//!   [`LOST_REPLY`], and so is each request that arrives while no upstream
//!   is connected, so a pipelining client's replies stay matched to its
//!   requests. What the client set up on its connection (`SELECT`,
//!   `CLIENT SETNAME`, `HELLO`) is not set up again; a subscriber's
//!   connection (one that sent `SUBSCRIBE`, `PSUBSCRIBE` or `SSUBSCRIBE`)
//!   is closed instead, as its subscriptions cannot follow it. Cuts,
//!   blackholes, latency and switches act on it as on any link.

mod keep;
pub mod resp;

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use resp::Framer;

/// How often a connection-keeping link tries its upstream again while it
/// is down.
pub const RECONNECT_EVERY: Duration = Duration::from_millis(20);

/// The error a connection-keeping link answers a request with when its
/// upstream connection was lost before the reply came (or none was up):
/// Envoy's Redis proxy answers such requests with an error of its own too.
pub const LOST_REPLY: &[u8] = b"-ERR proxy: upstream connection lost\r\n";

/// The fault on a link right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkFault {
    Clear,
    Latency(Duration),
    Cut,
    Blackhole,
}

/// What a link counts.
#[derive(Debug, Default)]
struct Counters {
    /// Client connections accepted.
    connections: AtomicU64,
    /// Upstream connections opened again by a connection-keeping link.
    reconnects: AtomicU64,
    /// Kept client connections waiting for their upstream to come back.
    reconnecting: AtomicU64,
}

/// One agent-to-master link.
#[derive(Debug)]
pub struct Link {
    name: String,
    port: u16,
    keeping: bool,
    fault: watch::Sender<LinkFault>,
    upstream: watch::Sender<u16>,
    counters: Arc<Counters>,
    task: JoinHandle<()>,
}

impl Link {
    /// Listens on a free loopback port and forwards to `upstream_port`;
    /// a connection closes when its upstream side does.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn start(name: String, upstream_port: u16) -> io::Result<Link> {
        Link::listen(name, upstream_port, false).await
    }

    /// As [`Link::start`], but the link keeps its client connections open
    /// when their upstream dies and connects upstream again behind them
    /// (see the module's Behavior): an agent behind it is not told that
    /// its master went, and meets whatever process serves the port next on
    /// the connection it already had.
    ///
    /// # Errors
    /// When no loopback port can be bound.
    pub async fn start_keeping(name: String, upstream_port: u16) -> io::Result<Link> {
        Link::listen(name, upstream_port, true).await
    }

    async fn listen(name: String, upstream_port: u16, keeping: bool) -> io::Result<Link> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let (fault, watcher) = watch::channel(LinkFault::Clear);
        let (upstream, upstream_watcher) = watch::channel(upstream_port);
        let counters = Arc::new(Counters::default());
        let task = tokio::spawn(accept(
            listener,
            upstream_watcher,
            watcher,
            Arc::clone(&counters),
            keeping,
        ));
        Ok(Link {
            name,
            port,
            keeping,
            fault,
            upstream,
            counters,
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

    /// Started with [`Link::start_keeping`].
    pub fn keeps_connections(&self) -> bool {
        self.keeping
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
        self.counters.connections.load(Ordering::Relaxed)
    }

    /// Upstream connections a connection-keeping link opened again behind
    /// a client connection it kept (zero for a closing link): how a test
    /// knows the link is through to a restarted master.
    pub fn reconnects(&self) -> u64 {
        self.counters.reconnects.load(Ordering::Relaxed)
    }

    /// Kept client connections whose upstream died and has not been
    /// opened again yet: zero once every one is through to the master
    /// that serves the port now.
    pub fn reconnecting(&self) -> u64 {
        self.counters.reconnecting.load(Ordering::Relaxed)
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
    counters: Arc<Counters>,
    keeping: bool,
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
        counters.connections.fetch_add(1, Ordering::Relaxed);
        let fault = fault.clone();
        let upstream = upstream.clone();
        if keeping {
            tokio::spawn(keep::serve(client, upstream, fault, Arc::clone(&counters)));
        } else {
            tokio::spawn(serve(client, upstream, fault));
        }
    }
}

/// One connection of a closing link: it lives as long as its upstream.
async fn serve(
    client: TcpStream,
    mut switched: watch::Receiver<u16>,
    fault: watch::Receiver<LinkFault>,
) {
    let upstream_port = *switched.borrow_and_update();
    let Ok(upstream) = TcpStream::connect(("127.0.0.1", upstream_port)).await else {
        return; // the master is down: the agent sees a closed connection
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut upstream_read, mut upstream_write) = upstream.into_split();
    // Either direction ending ends both: a half-open proxy would hide a
    // dead master from the agent. A switch of the upstream ends both too
    // (both sockets close when this returns).
    tokio::select! {
        _ = pump(&mut client_read, &mut upstream_write, fault.clone(), None) => {}
        _ = pump(&mut upstream_read, &mut client_write, fault, None) => {}
        _ = switched.changed() => {}
    }
}

/// How one direction of a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The side it reads from closed (EOF, an error, or bytes that are not
    /// RESP where frames are read), and what it had read was delivered.
    Source,
    /// A write to the other side failed.
    Sink,
    /// The link was cut (or dropped).
    Cut,
}

/// Frames one direction of a connection-keeping link: only whole frames
/// are delivered, and each is counted as read (requests) or as delivered
/// (replies).
struct Framing<'a> {
    framer: &'a mut Framer,
    read: Option<&'a AtomicU64>,
    delivered: Option<&'a AtomicU64>,
}

/// Copies one direction, delaying or stalling as the fault says, until
/// either side closes or the link is cut. The reader ending (EOF) still
/// lets the bytes queued for delivery drain, unless cut; dropping the
/// future drops them.
async fn pump<R, W>(
    from: &mut R,
    to: &mut W,
    fault: watch::Receiver<LinkFault>,
    framing: Option<Framing<'_>>,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let (mut framer, read, delivered) = match framing {
        Some(f) => (Some(f.framer), f.read, f.delivered),
        None => (None, None, None),
    };
    // Each chunk: when it is due, its bytes, and how many frames it counts.
    let (queue, mut queued) = mpsc::unbounded_channel::<(Instant, Vec<u8>, u64)>();
    let mut read_fault = fault.clone();
    let mut write_fault = fault;
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        let end = loop {
            let n = tokio::select! {
                n = from.read(&mut buf) => match n {
                    Ok(0) | Err(_) => break End::Source,
                    Ok(n) => n,
                },
                changed = read_fault.changed() => {
                    if changed.is_err() || *read_fault.borrow() == LinkFault::Cut {
                        break End::Cut;
                    }
                    continue;
                }
            };
            let (bytes, frames) = match framer.as_deref_mut() {
                Some(framer) => match framer.push(&buf[..n]) {
                    Ok(f) => (f.bytes, f.count),
                    Err(_) => break End::Source,
                },
                None => (buf[..n].to_vec(), 0),
            };
            if bytes.is_empty() {
                continue;
            }
            if let Some(read) = read {
                read.fetch_add(frames, Ordering::Relaxed);
            }
            let delay = match *read_fault.borrow() {
                LinkFault::Latency(d) => d,
                _ => Duration::ZERO,
            };
            if queue.send((Instant::now() + delay, bytes, frames)).is_err() {
                break End::Sink;
            }
        };
        // The writer drains what is queued, then sees the queue closed.
        drop(queue);
        end
    };
    let writer = async move {
        while let Some((due, bytes, frames)) = queued.recv().await {
            tokio::time::sleep_until(due).await;
            loop {
                let now = *write_fault.borrow_and_update();
                match now {
                    LinkFault::Cut => return End::Cut,
                    LinkFault::Blackhole => {
                        if write_fault.changed().await.is_err() {
                            return End::Cut;
                        }
                    }
                    LinkFault::Clear | LinkFault::Latency(_) => break,
                }
            }
            if to.write_all(&bytes).await.is_err() {
                return End::Sink;
            }
            if let Some(delivered) = delivered {
                delivered.fetch_add(frames, Ordering::Relaxed);
            }
        }
        End::Source
    };
    tokio::pin!(reader, writer);
    tokio::select! {
        end = &mut writer => end,
        end = &mut reader => match end {
            End::Source => writer.await,
            other => other,
        },
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

    /// One whole RESP reply from `s`, within 2 s.
    async fn reply(s: &mut TcpStream) -> io::Result<String> {
        let mut framer = Framer::replies();
        let mut buf = [0u8; 4096];
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let n = tokio::time::timeout_at(deadline, s.read(&mut buf))
                .await
                .map_err(|_| io::Error::other("no reply within 2s"))??;
            if n == 0 {
                return Err(io::Error::other("closed"));
            }
            let frames = framer.push(&buf[..n]).map_err(io::Error::other)?;
            if frames.count > 0 {
                return Ok(String::from_utf8_lossy(&frames.bytes).into_owned());
            }
        }
    }

    async fn ask_redis(s: &mut TcpStream, request: &str) -> io::Result<String> {
        s.write_all(request.as_bytes()).await?;
        reply(s).await
    }

    /// A connection-keeping link in front of a real master that dies and
    /// comes back on its port: the request in flight when it died and the
    /// one sent while it was down are answered with the link's error, and
    /// the same client connection then gets a PONG from the new process;
    /// a closing link's connection is closed by the same death.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_keeping_link_reaches_a_restarted_master_on_the_same_connection() {
        let dir = tempfile::tempdir().unwrap();
        let mut server =
            crate::RedisServer::start(dir.path(), "r1").unwrap_or_else(|e| panic!("{e}"));
        let keeping = Link::start_keeping("k".into(), server.port())
            .await
            .unwrap();
        let closing = Link::start("c".into(), server.port()).await.unwrap();
        assert!(keeping.keeps_connections() && !closing.keeps_connections());
        let mut kept = TcpStream::connect(("127.0.0.1", keeping.port()))
            .await
            .unwrap();
        let mut closed = TcpStream::connect(("127.0.0.1", closing.port()))
            .await
            .unwrap();
        assert_eq!(ask_redis(&mut kept, "PING\r\n").await.unwrap(), "+PONG\r\n");
        assert_eq!(
            ask_redis(&mut closed, "PING\r\n").await.unwrap(),
            "+PONG\r\n"
        );

        // In flight when the master dies: its reply never comes.
        kept.write_all(b"*3\r\n$5\r\nBLPOP\r\n$4\r\nnone\r\n$1\r\n0\r\n")
            .await
            .unwrap();
        let lost = std::str::from_utf8(LOST_REPLY).unwrap();
        // The master has the BLPOP (blocked on it) before it dies.
        let mut other = TcpStream::connect(("127.0.0.1", server.port()))
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let clients = ask_redis(&mut other, "INFO clients\r\n").await.unwrap();
            if clients.contains("blocked_clients:1") {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the BLPOP never blocked: {clients}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(other);
        server.kill();
        assert_eq!(
            reply(&mut kept).await.unwrap(),
            lost,
            "the reply in flight is answered"
        );
        assert_eq!(
            ask_redis(&mut kept, "PING\r\n").await.unwrap(),
            lost,
            "no upstream"
        );
        let mut buf = [0u8; 16];
        let n = tokio::time::timeout(Duration::from_secs(2), closed.read(&mut buf))
            .await
            .expect("a closing link closes the client side");
        assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");

        server.restart().unwrap_or_else(|e| panic!("{e}"));
        let deadline = Instant::now() + Duration::from_secs(5);
        while keeping.reconnects() == 0 || keeping.reconnecting() > 0 {
            assert!(Instant::now() < deadline, "the link never reconnected");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(ask_redis(&mut kept, "PING\r\n").await.unwrap(), "+PONG\r\n");
        let info = ask_redis(&mut kept, "INFO server\r\n").await.unwrap();
        let pid = server.pid().unwrap();
        assert!(
            info.contains(&format!("process_id:{pid}\r\n")),
            "the same connection reaches the new process {pid}: {info}"
        );
        assert_eq!(keeping.connections(), 1, "one client connection throughout");
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
