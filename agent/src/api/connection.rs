//! One connection's life: hyper serves it while requests come, and while it
//! is idle only the socket is kept.
//!
//! hyper's HTTP/1 connection holds an 8 KiB read buffer and an 8 KiB write
//! buffer for as long as it lives, and neither size can be configured
//! lower; with 10,000 idle keep-alive connections that was most of the
//! agent's memory. So a connection alternates between two states:
//!
//! - **Serving**: a hyper connection over the socket, as long as a request
//!   is in progress (a hold's stream included: a hold keeps its connection
//!   serving until it ends or the client closes).
//! - **Parked**: once hyper has answered everything, flushed it and found
//!   nothing more to read, and no request came for a short grace
//!   (`PARK_AFTER`, 10 ms), the hyper connection is taken apart
//!   ([`http1::Connection::into_parts`], without closing the socket) and
//!   the task waits for the socket to become readable with no buffer at
//!   all. The next request starts a fresh hyper connection. The grace
//!   spares a client that sends its next request at once (a release after
//!   an acquire, the next acquire) a new hyper connection per request; a
//!   connection that has sent only one request is parked without it, so
//!   thousands of one-off connections opened at once (health checks) do
//!   not hold hyper's buffers together.
//!
//! ## Behavior
//! - Keep-alive is unchanged for the client: parking never closes the socket
//!   or adds `connection: close`; it happens only when hyper is idle.
//! - A connection whose answer said `connection: close` (a request body
//!   that could not be read, see [`routes::handle`]) is never parked:
//!   hyper ends it, and what is left of that body is never read as a
//!   request.
//! - Bytes hyper had read but not parsed (a request arriving in pieces) are
//!   handed to the next hyper connection first; a connection with such bytes
//!   is never parked, so `socket.request_timeout` still bounds a slow header.
//! - When hyper ends the connection itself (the client closed it, sent
//!   `connection: close`, or broke the protocol) the socket is flushed and
//!   shut down as before.
//! - On shutdown a parked connection is closed at once; a serving one gets
//!   hyper's graceful shutdown (its request finishes, then it closes).
//! - A connection idle for `socket.request_timeout` is closed, as hyper's
//!   header timeout closed it before; once the next request's first bytes
//!   arrive, hyper allows that long again for the rest of its header.
//! - A stream (`application/x-ndjson`: a hold, a campaign, an observer) is
//!   asked for its next line only once the client has read every byte
//!   written before (the socket's unread bytes, `SIOCOUTQ`, are zero),
//!   looked at again after 1 ms, then twice as long each time up to 50 ms.
//!   So a client that stops reading finds at most one line written before
//!   it stopped, and the line made when it reads again says what is true
//!   then ([`crate::lock::events`]), never a backlog of old renewals.

use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_util::sync::CancellationToken;

use super::handlers;
use super::peer::Peer;
use super::routes::{self, Surface};
use crate::agent::Agent;
use crate::lock::holds::Closing;

/// A stream a connection can be parked on: it can say when it has
/// something to read without reading it.
pub trait Socket: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static {
    /// Ready when a read would not block (data, end of stream or an error).
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;

    /// The descriptor whose unread bytes pace a stream; `None` where no
    /// stream is served (the metrics port).
    fn paced_fd(&self) -> Option<RawFd>;
}

impl Socket for UnixStream {
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_read_ready(cx)
    }

    fn paced_fd(&self) -> Option<RawFd> {
        Some(self.as_raw_fd())
    }
}

impl Socket for TcpStream {
    fn poll_readable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_read_ready(cx)
    }

    fn paced_fd(&self) -> Option<RawFd> {
        None
    }
}

/// Bytes written to the Unix socket `fd` that its peer has not read yet
/// (`SIOCOUTQ`); 0 when the kernel does not say.
fn unread_by_peer(fd: RawFd) -> usize {
    let mut unread: libc::c_int = 0;
    // SAFETY: `fd` is the connection's open socket (hyper holds it while it
    // polls a body, see `Paced`), and the ioctl writes one c_int to the
    // pointer given.
    let answered = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, &raw mut unread) };
    if answered == 0 {
        usize::try_from(unread).unwrap_or(0)
    } else {
        0
    }
}

/// Tells a re-entering hold's [`Closing`] how to see that the client
/// closed this connection: a peek at a duplicate of the socket (kept open
/// by the closure, so it never reads a descriptor reused by another
/// connection) that finds end-of-file. Nothing where there is no
/// descriptor (`fd` < 0) or it cannot be duplicated: the hold's own task
/// settles its end then, as it always can.
fn watch_close(closing: &Closing, fd: RawFd) {
    if fd < 0 {
        return;
    }
    // SAFETY: `fd` is the connection's open socket (hyper holds it while
    // it serves this request); it is only borrowed to be duplicated.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let Ok(socket) = borrowed.try_clone_to_owned() else {
        return;
    };
    closing.watch(move || peer_closed(socket.as_fd()));
}

/// Whether the peer of socket `fd` has closed it (or reset it): a peek that
/// reads end-of-file or fails other than for want of bytes. Bytes waiting
/// to be read say it is still there.
fn peer_closed(fd: BorrowedFd<'_>) -> bool {
    let mut byte = [0u8; 1];
    // SAFETY: `fd` is open (borrowed), and recv writes at most one byte
    // to the buffer given.
    let read = unsafe {
        libc::recv(
            fd.as_raw_fd(),
            byte.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match read {
        0 => true,
        n if n > 0 => false,
        _ => !matches!(
            io::Error::last_os_error().kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
        ),
    }
}

/// What the socket and the service saw of the current hyper connection,
/// enough to tell when hyper is idle. One per connection; only its own
/// task touches it (atomics because the service must be `Send`).
#[derive(Debug)]
struct Activity {
    /// Requests whose response body hyper has not finished with.
    open: AtomicUsize,
    /// Bytes were read since the last request started: hyper may hold an
    /// unparsed (partial or pipelined) request.
    read_since_request: AtomicBool,
    /// hyper flushed after its last write: its write buffer is empty.
    flushed: AtomicBool,
    /// hyper's last read found nothing to read.
    read_pending: AtomicBool,
    /// Requests begun since the connection opened: tells a new request
    /// from the one that was last seen finished.
    begun: AtomicUsize,
    /// An answer said `connection: close` (its request's body was not read
    /// to its end): hyper ends the connection, which is never parked, so
    /// the rest of that body is never parsed as a request.
    closing: AtomicBool,
    /// The socket's descriptor, for pacing streams; -1 where none.
    fd: AtomicI32,
}

impl Activity {
    fn new() -> Arc<Activity> {
        Arc::new(Activity {
            open: AtomicUsize::new(0),
            read_since_request: AtomicBool::new(false),
            flushed: AtomicBool::new(true),
            read_pending: AtomicBool::new(false),
            begun: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            fd: AtomicI32::new(-1),
        })
    }

    /// Whether hyper has answered every request, written it all out and is
    /// waiting for the next one with nothing buffered.
    fn idle(&self) -> bool {
        !self.closing.load(Ordering::Relaxed)
            && self.open.load(Ordering::Relaxed) == 0
            && self.flushed.load(Ordering::Relaxed)
            && self.read_pending.load(Ordering::Relaxed)
            && !self.read_since_request.load(Ordering::Relaxed)
    }

    /// A fresh hyper connection: nothing read, written or waited for yet.
    fn restart(&self) {
        self.read_since_request.store(false, Ordering::Relaxed);
        self.flushed.store(true, Ordering::Relaxed);
        self.read_pending.store(false, Ordering::Relaxed);
    }

    fn begin(self: &Arc<Activity>) -> Exchange {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.begun.fetch_add(1, Ordering::Relaxed);
        self.read_since_request.store(false, Ordering::Relaxed);
        Exchange(Arc::clone(self))
    }
}

/// One request in progress: from the call of the service until hyper drops
/// the response body (written out, or the connection failed).
struct Exchange(Arc<Activity>);

impl Drop for Exchange {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A response body that ends its [`Exchange`] when hyper drops it.
struct Tracked {
    body: routes::Body,
    _exchange: Exchange,
    /// A stream's pacing; `None` for any other answer.
    paced: Option<Paced>,
}

/// How a stream waits for its client to read the last line.
struct Paced {
    fd: RawFd,
    /// The next look, while the client has bytes unread.
    retry: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The wait before the look after it.
    backoff: Duration,
}

/// The first wait for a client that has not read the last line, and the
/// longest.
const PACE_FIRST: Duration = Duration::from_millis(1);
const PACE_LONGEST: Duration = Duration::from_millis(50);

impl Paced {
    fn new(fd: RawFd) -> Paced {
        Paced {
            fd,
            retry: None,
            backoff: PACE_FIRST,
        }
    }

    /// Ready once the client has read every byte written to it.
    fn poll_read_by_client(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if let Some(retry) = &mut self.retry {
                if retry.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.retry = None;
            }
            if unread_by_peer(self.fd) == 0 {
                self.backoff = PACE_FIRST;
                return Poll::Ready(());
            }
            self.retry = Some(Box::pin(tokio::time::sleep(self.backoff)));
            self.backoff = (self.backoff * 2).min(PACE_LONGEST);
        }
    }
}

impl Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(paced) = &mut self.paced {
            if paced.poll_read_by_client(cx).is_pending() {
                return Poll::Pending;
            }
        }
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket as hyper sees it: bytes left by the previous hyper connection
/// first, and every read, write and flush noted in the [`Activity`].
struct Watched<S> {
    socket: S,
    unread: Bytes,
    activity: Arc<Activity>,
}

impl<S: Socket> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.unread.is_empty() {
            let n = this.unread.len().min(buf.remaining());
            buf.put_slice(&this.unread[..n]);
            this.unread.advance(n);
            this.activity
                .read_since_request
                .store(true, Ordering::Relaxed);
            this.activity.read_pending.store(false, Ordering::Relaxed);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.socket).poll_read(cx, buf);
        match &polled {
            Poll::Pending => this.activity.read_pending.store(true, Ordering::Relaxed),
            Poll::Ready(result) => {
                this.activity.read_pending.store(false, Ordering::Relaxed);
                if result.is_ok() && buf.filled().len() > before {
                    this.activity
                        .read_since_request
                        .store(true, Ordering::Relaxed);
                }
            }
        }
        polled
    }
}

impl<S: Socket> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.activity.flushed.store(false, Ordering::Relaxed);
        Pin::new(&mut self.socket).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.activity.flushed.store(false, Ordering::Relaxed);
        Pin::new(&mut self.socket).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.socket.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // hyper flushes the socket only once its own buffer is empty.
        let flushed = Pin::new(&mut self.socket).poll_flush(cx);
        if flushed.is_ready() {
            self.activity.flushed.store(true, Ordering::Relaxed);
        }
        flushed
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.socket).poll_shutdown(cx)
    }
}

/// How long hyper stays idle before its connection is parked, once the
/// connection has sent more than one request. Most clients send their next
/// request (the release after an acquire, the next acquire) well within
/// this, and find hyper ready rather than pay for a new one; connections
/// that go quiet are parked soon enough that few hold hyper's buffers at
/// once.
const PARK_AFTER: Duration = Duration::from_millis(10);

/// How one hyper connection over the socket ended.
enum Served<S> {
    /// Idle and taken apart: the socket, and bytes read but not parsed.
    Parked(S, Bytes),
    /// hyper finished the connection (and shut the socket down), or it
    /// failed.
    Ended(Result<(), hyper::Error>),
}

/// Serves `socket` until the client closes it, hyper ends it, it stays idle
/// for `idle_timeout`, or `shutdown` is cancelled (then gracefully, see the
/// module docs). `builder` is hyper's configuration for every request.
pub async fn serve<S: Socket>(
    agent: Arc<Agent>,
    builder: http1::Builder,
    idle_timeout: Duration,
    socket: S,
    surface: Surface,
    peer: Option<Peer>,
    shutdown: CancellationToken,
) {
    let activity = Activity::new();
    activity
        .fd
        .store(socket.paced_fd().unwrap_or(-1), Ordering::Relaxed);
    let mut socket = socket;
    let mut unread = Bytes::new();
    loop {
        if unread.is_empty() {
            // Parked: nothing but the socket until the client sends more,
            // for at most `idle_timeout`, as hyper allows an idle one.
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(idle_timeout) => {
                    tracing::debug!("idle connection closed after socket.request_timeout");
                    return;
                }
                ready = poll_fn(|cx| socket.poll_readable(cx)) => {
                    if ready.is_err() {
                        return;
                    }
                }
            }
        }
        activity.restart();
        // Boxed: a parked connection's task keeps no room for the serving
        // state.
        let served = Box::pin(serve_until_idle(
            &agent,
            &builder,
            Watched {
                socket,
                unread,
                activity: Arc::clone(&activity),
            },
            surface,
            peer,
            &activity,
            &shutdown,
        ))
        .await;
        match served {
            Served::Parked(s, bytes) => {
                socket = s;
                unread = bytes;
            }
            Served::Ended(Ok(())) => return,
            Served::Ended(Err(e)) => {
                tracing::debug!(error = %e, "connection ended with an error");
                return;
            }
        }
    }
}

/// One hyper connection over `io`, until it is idle (then taken apart) or
/// ends.
async fn serve_until_idle<S: Socket>(
    agent: &Arc<Agent>,
    builder: &http1::Builder,
    io: Watched<S>,
    surface: Surface,
    peer: Option<Peer>,
    activity: &Arc<Activity>,
    shutdown: &CancellationToken,
) -> Served<S> {
    let service = {
        // Streams are paced but under the control runs' test switch (see
        // `Rules::renewals_wait_for_client`).
        let pace = !agent.locks().rules().renewals_wait_for_client;
        let agent = Arc::clone(agent);
        let activity = Arc::clone(activity);
        service_fn(move |request: Request<Incoming>| {
            let exchange = activity.begin();
            let agent = Arc::clone(&agent);
            let activity = Arc::clone(&activity);
            // Boxed: hyper keeps room for one service future for the whole
            // connection, and this one is a few KiB. The handler's future
            // is made inside the box, where it runs: made outside, its few
            // KiB were copied into the box on every request.
            Box::pin(async move {
                let handled = routes::handle(agent, surface, peer, request);
                let response: Response<routes::Body> = match handled.await {
                    Ok(response) => response,
                    Err(never) => match never {},
                };
                if handlers::closes(&response) {
                    activity.closing.store(true, Ordering::Relaxed);
                }
                let fd = activity.fd.load(Ordering::Relaxed);
                if let Some(closing) = response.extensions().get::<Arc<Closing>>() {
                    watch_close(closing, fd);
                }
                let paced =
                    (pace && fd >= 0 && handlers::is_stream(&response)).then(|| Paced::new(fd));
                Ok::<_, Infallible>(response.map(|body| Tracked {
                    body,
                    _exchange: exchange,
                    paced,
                }))
            })
        })
    };
    // Boxed: a parked connection keeps no room for it.
    let mut connection = Box::new(builder.serve_connection(TokioIo::new(io), service));
    let mut draining = false;
    let mut parking = false;
    let cancelled = shutdown.cancelled();
    tokio::pin!(cancelled);
    // The grace before parking, armed when hyper is seen idle after the
    // request `idle_after` (by its count in `begun`). Boxed, and made only
    // when needed: every connection task keeps room for this function's
    // state, parked or not.
    let mut grace: Option<Pin<Box<tokio::time::Sleep>>> = None;
    let mut idle_after = None;
    let step = poll_fn(|cx| {
        if !draining && !parking && cancelled.as_mut().poll(cx).is_ready() {
            draining = true;
            Pin::new(&mut *connection).graceful_shutdown();
        }
        if !parking {
            // Until parking, hyper ends the connection its own way:
            // flushing and shutting the socket down.
            if let Poll::Ready(result) = Pin::new(&mut *connection).poll(cx) {
                return Poll::Ready(Step::Ended(result));
            }
            if draining || !activity.idle() {
                idle_after = None;
                return Poll::Pending;
            }
            let begun = activity.begun.load(Ordering::Relaxed);
            // One request so far: likely a one-off (a health check), parked
            // at once, as are many such connections opened together.
            if begun > 1 {
                let deadline = tokio::time::Instant::now() + PARK_AFTER;
                let grace =
                    grace.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if idle_after != Some(begun) {
                    idle_after = Some(begun);
                    grace.as_mut().reset(deadline);
                }
                if grace.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
            }
            // Idle with everything flushed: closing now makes hyper hand
            // the socket back untouched.
            parking = true;
            Pin::new(&mut *connection).graceful_shutdown();
        }
        connection.poll_without_shutdown(cx).map(Step::Parked)
    })
    .await;
    match step {
        Step::Ended(result) | Step::Parked(result @ Err(_)) => Served::Ended(result),
        Step::Parked(Ok(())) => {
            let parts = connection.into_parts();
            let watched = parts.io.into_inner();
            // Bytes hyper read but did not parse come first next time,
            // before any it was never handed. Copied: `read_buf` shares
            // hyper's whole read buffer, which would stay allocated, even
            // when empty, for as long as it is kept.
            let mut unread = Vec::with_capacity(parts.read_buf.len() + watched.unread.len());
            unread.extend_from_slice(&parts.read_buf);
            unread.extend_from_slice(&watched.unread);
            let unread = Bytes::from(unread);
            Served::Parked(watched.socket, unread)
        }
    }
}

/// How one poll loop over a hyper connection finished.
enum Step {
    /// hyper ended the connection (or failed).
    Ended(Result<(), hyper::Error>),
    /// hyper stopped after being asked to, leaving the socket open.
    Parked(Result<(), hyper::Error>),
}
