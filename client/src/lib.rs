//! redlock-client: the typed async client of the redlock-agent socket API
//! (HTTP/1.1 + JSON over a Unix socket), on tokio and hyper.
//!
//! Applications get distributed locks from the agent beside them without a
//! Redis client: [`Client::acquire`], [`Client::extend`] and
//! [`Client::release`] map one-to-one to the API; [`Client::hold`] streams a
//! hold's events; [`Client::lock`] returns a [`LockGuard`] that the agent
//! renews, that says when the lock is lost, and that releases on drop.
//! Semaphores ([`Client::acquire_permit`], [`Client::hold_permit`]) and
//! leader elections ([`Client::campaign`], [`Client::leader`],
//! [`Client::observe`]) are served the same way, on the same quorum.
//! Resources and names are percent-encoded here, once; callers pass them
//! as they are.
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_client::{Client, HoldOptions};
//!
//! # async fn example() -> Result<(), redlock_client::Error> {
//! let client = Client::new("/run/redlock/agent.sock");
//! let options = HoldOptions::new()
//!     .ttl(Duration::from_secs(10))
//!     .wait(Duration::from_secs(5))
//!     .owner("billing-worker-3");
//! let guard = client.lock("orders-42", &options).await?;
//! tokio::select! {
//!     () = do_the_work() => {
//!         let released = guard.release().await?;
//!         assert!(released, "false: the work may have overlapped another holder's");
//!     }
//!     reason = guard.lost() => eprintln!("stopped: the lock was lost: {reason}"),
//! }
//! # Ok(())
//! # }
//! # async fn do_the_work() {}
//! ```
//!
//! With a fencing token, for storage that can refuse a stale writer (see
//! the agent's docs/fencing.md): pass the fence with every write, and
//! have the storage accept a write only when its fence is above the
//! highest it has seen.
//!
//! ```no_run
//! use redlock_client::{AcquireOptions, Client};
//!
//! # async fn example(client: Client) -> Result<(), redlock_client::Error> {
//! let grant = client
//!     .acquire("orders-42", &AcquireOptions::new().fence())
//!     .await?;
//! let fence = grant.fence.expect("asked for a fence");
//! // UPDATE orders SET ..., fence = ?1 WHERE id = 42 AND fence < ?1
//! # let _ = fence;
//! client.release(&grant.resource, &grant.token).await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Tracing
//! Every request carries the caller's W3C trace context (`traceparent`,
//! `tracestate`), so the agent's spans join the caller's trace: with the
//! `opentelemetry` feature, the current `opentelemetry::Context`
//! through the global text-map propagator (the application registers
//! one, the SDK's `TraceContextPropagator`; in async code the context is
//! current while the future that calls the client is polled, as
//! `FutureExt::with_context` or `tracing-opentelemetry` arrange); without
//! it, a [`TraceContext`] the calls are scoped in. Neither: no header.
//!
//! # Layout
//! - this file: [`Client`], its lock calls and their answers.
//! - [`options`]: [`Options`], what every kind of request asks for, each
//!   option declared once ([`AcquireOptions`], [`HoldOptions`],
//!   [`PermitOptions`], [`PermitHoldOptions`], [`CampaignOptions`]).
//! - [`error`]: [`Error`], one variant per case a caller acts on.
//! - [`hold`]: [`Hold`], a hold's NDJSON event stream.
//! - [`guard`]: [`LockGuard`], the renewing, self-releasing lock.
//! - [`semaphore`]: permits of a semaphore ([`Client::acquire_permit`],
//!   [`Client::hold_permit`], ...), each an ordinary lock of its own.
//! - [`election`]: leader elections: [`Client::campaign`]'s [`Campaign`]
//!   stream, [`Client::leader`], [`Client::observe`]'s [`Observer`].
//! - [`trace`]: the caller's W3C trace context ([`TraceContext`], or the
//!   current OpenTelemetry context with the `opentelemetry` feature) on
//!   every request.
//! - `transport`: connections over the socket, their pool, request paths
//!   ([`lock_path`], [`resource_path`], [`semaphore_path`],
//!   [`election_path`]: the one percent-encoding of names) and decoding
//!   answers.

pub mod election;
pub mod error;
pub mod guard;
pub mod hold;
pub mod multi;
pub mod options;
pub mod semaphore;
pub mod trace;
mod transport;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper::Method;
use redlock_wire::{
    AcquireResponse, ExtendRequest, ExtendResponse, ForceReleaseResponse, HoldEvent, LeaksResponse,
    LockResponse, LocksResponse, NodesResponse, ReleaseRequest, ReleaseResponse, SummaryResponse,
};
use tokio::time::Instant;

pub use election::{Campaign, Observer};
pub use error::Error;
pub use guard::{LockGuard, LostReason};
pub use hold::Hold;
pub use multi::MultiGrant;
pub use options::{
    AcquireOptions, CampaignOptions, HoldOptions, Options, PermitHoldOptions, PermitOptions,
};
pub use redlock_wire as wire;
pub use redlock_wire::{CampaignEvent, ErrorCode, Leader, Mode, ObserveEvent, OnDisconnect};
pub use semaphore::{Permit, PermitHold};
pub use trace::{InvalidTraceContext, TraceContext};
pub use transport::{election_path, lock_path, resource_path, semaphore_path};

/// How long a request may take beyond the wait it asks for, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Which page of `GET /v1/locks` to ask for ([`Client::locks_page`]).
/// Unset fields take the agent's defaults: every resource, from the first,
/// `limit` 1000.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LocksQuery {
    /// Only resources that start with this; "" for all.
    pub prefix: String,
    /// List the resources after this one: the last page's `next_cursor`.
    pub cursor: Option<String>,
    /// At most this many locks (the agent takes 1 to 5000).
    pub limit: Option<usize>,
}

impl LocksQuery {
    pub fn new() -> LocksQuery {
        LocksQuery::default()
    }

    pub fn prefix(mut self, prefix: impl Into<String>) -> LocksQuery {
        self.prefix = prefix.into();
        self
    }

    pub fn cursor(mut self, cursor: impl Into<String>) -> LocksQuery {
        self.cursor = Some(cursor.into());
        self
    }

    pub fn limit(mut self, limit: usize) -> LocksQuery {
        self.limit = Some(limit);
        self
    }

    /// The request path: `/v1/locks`, with the parameters that are set,
    /// percent-encoded.
    pub fn path(&self) -> String {
        let mut params = Vec::new();
        if !self.prefix.is_empty() {
            params.push(format!("prefix={}", transport::encode(&self.prefix)));
        }
        if let Some(cursor) = &self.cursor {
            params.push(format!("cursor={}", transport::encode(cursor)));
        }
        if let Some(limit) = self.limit {
            params.push(format!("limit={limit}"));
        }
        if params.is_empty() {
            "/v1/locks".to_string()
        } else {
            format!("/v1/locks?{}", params.join("&"))
        }
    }
}

/// A granted lock ([`Client::acquire`]).
#[derive(Clone, PartialEq, Eq)]
pub struct Grant {
    pub resource: String,
    /// The proof of holding the lock; needed to extend and release it.
    pub token: String,
    pub ttl: Duration,
    /// How long the lock is safe to use, counted from when the answer
    /// arrived.
    pub validity: Duration,
    /// `validity` from when the answer arrived.
    pub valid_until: std::time::Instant,
    /// The fencing token, when asked for ([`AcquireOptions::fence`]) or
    /// the agent's `lock.fence` is `always`: larger than every earlier
    /// grant's. Send it with every write to storage that can refuse a
    /// write whose fence is not above the highest it has seen.
    pub fence: Option<u64>,
    /// After a re-entry ([`AcquireOptions::reenter`]): the releases the
    /// lock now takes before it is released on the masters.
    pub hold_count: Option<u32>,
    /// Shared (a reader's, [`AcquireOptions::shared`]) or exclusive.
    pub mode: wire::Mode,
}

/// What a release came to ([`Client::release_counted`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Released on a quorum of masters.
    Released,
    /// No quorum still held the token: it had expired (or was never
    /// yours), and the work may have overlapped another holder's.
    NotHeld,
    /// A re-entered lock's count was lowered: it is still held, and takes
    /// this many releases more.
    StillHeld(u32),
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Grant")
            .field("resource", &self.resource)
            .field("ttl", &self.ttl)
            .field("validity", &self.validity)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

/// An extended lock ([`Client::extend`]): a new TTL from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extended {
    pub ttl: Duration,
    pub validity: Duration,
    pub valid_until: std::time::Instant,
}

/// A client of one agent's socket. Cheap to clone; clones share idle
/// connections.
///
/// ## Behavior
/// - Every call is bounded by the timeout ([`DEFAULT_TIMEOUT`] unless
///   [`Client::with_timeout`]) plus the wait it asks the agent for; past
///   it, [`Error::Timeout`].
/// - Connections are reused across calls; a call is never sent twice (see
///   [`Error::Connection`] for what a failed acquire means).
/// - A stream (a hold, a guard, a campaign, an observer) opens a connection
///   of its own, closed the moment the stream is dropped: a call made
///   after that reaches the agent after the close (a re-entering hold's
///   count is lowered by then).
#[derive(Debug, Clone)]
pub struct Client {
    transport: Arc<transport::Transport>,
}

/// `GET /healthz`'s answer (`Health` in the agent's OpenAPI document).
#[derive(serde::Deserialize)]
struct Health {
    status: String,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn json<T: serde::Serialize>(body: &T) -> Vec<u8> {
    // Cannot fail: the request types hold strings and integers only.
    serde_json::to_vec(body).expect("request bodies serialize")
}

impl Client {
    /// A client of the agent listening on `socket`. Connects on first use.
    pub fn new(socket: impl Into<PathBuf>) -> Client {
        Client {
            transport: Arc::new(transport::Transport::new(socket.into(), DEFAULT_TIMEOUT)),
        }
    }

    /// The same socket with another timeout (beyond the waits asked for).
    pub fn with_timeout(self, timeout: Duration) -> Client {
        Client {
            transport: Arc::new(transport::Transport::new(
                self.transport.socket().to_path_buf(),
                timeout,
            )),
        }
    }

    pub fn socket(&self) -> &Path {
        self.transport.socket()
    }

    /// Opens a connection to the agent now, within the timeout, and keeps
    /// it for the next call: for callers that show whether the agent can
    /// be reached before they ask it anything (the TUI's header).
    ///
    /// # Errors
    /// [`Error::Connect`] when nothing listens on the socket (or no
    /// permission), [`Error::Timeout`], [`Error::Connection`].
    pub async fn connect(&self) -> Result<(), Error> {
        self.transport.warm().await
    }

    /// `POST /v1/locks/{resource}/acquire`: the lock, if a quorum of
    /// masters granted it within `options.wait`.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redlock_client::{AcquireOptions, Client, Error};
    /// # async fn example(client: Client) -> Result<(), Error> {
    /// let options = AcquireOptions::new().ttl(Duration::from_secs(10));
    /// match client.acquire("nightly-report", &options).await {
    ///     Ok(grant) => {
    ///         // ... work, finished well before grant.valid_until ...
    ///         client.release(&grant.resource, &grant.token).await?;
    ///     }
    ///     Err(Error::Taken { .. }) => println!("someone else is on it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::Taken`] when another holder kept it for all of the wait,
    /// [`Error::NoQuorum`], [`Error::Api`] for a refused request
    /// (`invalid_resource`, `ttl_out_of_range`, ...), or a transport error.
    pub async fn acquire(&self, resource: &str, options: &AcquireOptions) -> Result<Grant, Error> {
        let body = options.request();
        let answer: AcquireResponse = self
            .transport
            .call(
                Method::POST,
                lock_path(resource, "acquire"),
                Some(json(body)),
                Duration::from_millis(body.wait_ms.unwrap_or(0)),
            )
            .await?;
        let validity = Duration::from_millis(answer.validity_ms);
        Ok(Grant {
            resource: answer.resource,
            token: answer.token,
            ttl: Duration::from_millis(answer.ttl_ms),
            validity,
            valid_until: std::time::Instant::now() + validity,
            fence: answer.fence,
            hold_count: answer.hold_count,
            mode: answer.mode,
        })
    }

    /// `POST /v1/locks/{resource}/extend`: a new TTL from now (`None`: the
    /// agent's `lock.default_ttl`).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redlock_client::{Client, Error, Grant};
    /// # async fn example(client: Client, grant: Grant) -> Result<(), Error> {
    /// match client.extend(&grant.resource, &grant.token, Some(Duration::from_secs(10))).await {
    ///     Ok(extended) => println!("valid for {:?} more", extended.validity),
    ///     Err(Error::Lost { .. }) => println!("stop: another client may hold it now"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::Lost`] when it was not extended on a quorum in time (stop
    /// using the lock), [`Error::NoQuorum`], [`Error::Api`], or a transport
    /// error.
    pub async fn extend(
        &self,
        resource: &str,
        token: &str,
        ttl: Option<Duration>,
    ) -> Result<Extended, Error> {
        let body = ExtendRequest {
            token: token.to_string(),
            ttl_ms: ttl.map(millis),
        };
        let answer: ExtendResponse = self
            .transport
            .call(
                Method::POST,
                lock_path(resource, "extend"),
                Some(json(&body)),
                Duration::ZERO,
            )
            .await?;
        let validity = Duration::from_millis(answer.validity_ms);
        Ok(Extended {
            ttl: Duration::from_millis(answer.ttl_ms),
            validity,
            valid_until: std::time::Instant::now() + validity,
        })
    }

    /// `POST /v1/locks/{resource}/release`, on every master. `Ok(false)`
    /// means no quorum still held the token: it had expired (or was never
    /// yours), and the work may have overlapped another holder's. `Ok(true)`
    /// also when it lowered a re-entered lock's count, which leaves the lock
    /// held: [`Client::release_counted`] tells the two apart.
    ///
    /// # Errors
    /// [`Error::NoQuorum`] when the agent cannot tell: too many masters
    /// failed or timed out (a retry with the same token is safe);
    /// [`Error::Api`] for a refused request, or a transport error.
    pub async fn release(&self, resource: &str, token: &str) -> Result<bool, Error> {
        Ok(self.release_counted(resource, token).await? != Released::NotHeld)
    }

    /// [`Client::release`], saying whether a re-entered lock is still held.
    ///
    /// # Errors
    /// As [`Client::release`].
    pub async fn release_counted(&self, resource: &str, token: &str) -> Result<Released, Error> {
        let body = ReleaseRequest {
            token: token.to_string(),
        };
        let answer: ReleaseResponse = self
            .transport
            .call(
                Method::POST,
                lock_path(resource, "release"),
                Some(json(&body)),
                Duration::ZERO,
            )
            .await?;
        Ok(match (answer.released, answer.hold_count) {
            (_, Some(count)) => Released::StillHeld(count),
            (true, None) => Released::Released,
            (false, None) => Released::NotHeld,
        })
    }

    /// `POST /v1/locks/{resource}/hold`: a lock tied to one connection,
    /// returned once the agent sent `acquired`. Read its renewals and a
    /// possible `lost` with [`Hold::next_event`]; drop it to release.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redlock_client::{Client, Error, HoldOptions};
    /// use redlock_client::wire::HoldEvent;
    /// # async fn example(client: Client) -> Result<(), Error> {
    /// let mut hold = client.hold("orders-42", &HoldOptions::new().ttl(Duration::from_secs(10))).await?;
    /// while let Some(event) = hold.next_event().await? {
    ///     match event {
    ///         HoldEvent::Renewed { validity_ms } => println!("renewed, valid {validity_ms} ms"),
    ///         HoldEvent::Lost { reason } => println!("lost: {reason}"),
    ///         HoldEvent::Acquired { .. } => {}
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Client::acquire`]; [`Error::Protocol`] when the answer is not an
    /// NDJSON stream that starts with `acquired`.
    pub async fn hold(&self, resource: &str, options: &HoldOptions) -> Result<Hold, Error> {
        let body = options.request();
        let limit = self
            .transport
            .timeout()
            .saturating_add(Duration::from_millis(body.wait_ms.unwrap_or(0)));
        let start = self.start_hold(resource, lock_path(resource, "hold"), json(body));
        let (hold, _) = tokio::time::timeout(limit, start)
            .await
            .map_err(|_| Error::Timeout(limit))??;
        Ok(hold)
    }

    /// Opens a hold's stream at `path` and reads its `acquired` line: the
    /// hold of `resource` (a lock, or a semaphore for a permit) and the
    /// permit the line names, if any.
    pub(crate) async fn start_hold(
        &self,
        resource: &str,
        path: String,
        body: Vec<u8>,
    ) -> Result<(Hold, Option<u32>), Error> {
        let (body, conn) =
            transport::open_stream(&self.transport, Method::POST, path, Some(body)).await?;
        let mut lines = hold::Lines::new(body);
        match lines.next().await? {
            Some(HoldEvent::Acquired {
                token,
                validity_ms,
                ttl_ms,
                fence,
                permit,
                hold_count,
            }) => {
                let validity = Duration::from_millis(validity_ms);
                let hold = Hold {
                    resource: resource.to_string(),
                    token,
                    ttl: Duration::from_millis(ttl_ms),
                    validity,
                    valid_until: Instant::now() + validity,
                    fence,
                    hold_count,
                    lines,
                    conn,
                };
                Ok((hold, permit))
            }
            other => Err(Error::Protocol(format!(
                "a hold must start with `acquired`, got {other:?}"
            ))),
        }
    }

    /// A lock the agent renews for as long as the returned guard lives (a
    /// hold underneath). The guard tells when the lock is lost
    /// ([`LockGuard::lost`]) and releases it when dropped.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redlock_client::{Client, Error, HoldOptions};
    /// # async fn example(client: Client) -> Result<(), Error> {
    /// let guard = client.lock("orders-42", &HoldOptions::new().wait(Duration::from_secs(5))).await?;
    /// let lost = guard.lost();
    /// tokio::spawn(async move {
    ///     let reason = lost.await;
    ///     eprintln!("lock lost ({reason}): stopping the work");
    /// });
    /// println!("valid until {:?}, renewed by the agent", guard.valid_until());
    /// drop(guard); // released on every master
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Client::hold`].
    pub async fn lock(&self, resource: &str, options: &HoldOptions) -> Result<LockGuard, Error> {
        let hold = self.hold(resource, options).await?;
        Ok(LockGuard::start(self.clone(), hold))
    }

    /// `POST /v1/locks/{resource}/force-release`: for operators, deletes the
    /// lock key on every master whoever holds it (logged and counted by the
    /// agent). Its holder's hold, on whichever agent, hears `lost`
    /// (`force_released`) at once. Permits and leaderships have theirs:
    /// [`Client::force_release_permit`], [`Client::force_release_leadership`].
    ///
    /// # Errors
    /// [`Error::Api`] for a refused request, or a transport error.
    pub async fn force_release(&self, resource: &str) -> Result<ForceReleaseResponse, Error> {
        self.transport
            .call(
                Method::POST,
                lock_path(resource, "force-release"),
                None,
                Duration::ZERO,
            )
            .await
    }

    /// `GET /v1/nodes`: the masters, their state, and whether a quorum is
    /// usable.
    ///
    /// # Errors
    /// A transport error, or an API error (`too_many_connections`).
    pub async fn nodes(&self) -> Result<NodesResponse, Error> {
        self.get("/v1/nodes".to_string()).await
    }

    /// `GET /v1/locks`: the first page of lock keys on the masters (the
    /// agent's default limit), never with tokens.
    ///
    /// # Errors
    /// As [`Client::nodes`].
    pub async fn locks(&self) -> Result<LocksResponse, Error> {
        self.locks_page(&LocksQuery::new()).await
    }

    /// `GET /v1/locks?prefix=&cursor=&limit=`: one page of lock keys, in
    /// resource-name order. Pass the answer's `next_cursor` as the next
    /// query's cursor to walk them all.
    ///
    /// # Errors
    /// As [`Client::nodes`]; also `429 busy` when two listings already run
    /// on the agent, and `no_quorum` when fewer than a quorum could be read.
    pub async fn locks_page(&self, query: &LocksQuery) -> Result<LocksResponse, Error> {
        self.get(query.path()).await
    }

    /// `GET /v1/locks/{resource}`: one lock in full, on every master.
    ///
    /// # Errors
    /// `404 not_found` when no master has it; otherwise as
    /// [`Client::locks_page`].
    pub async fn lock_info(&self, resource: &str) -> Result<LockResponse, Error> {
        self.get(resource_path(resource)).await
    }

    /// `GET /v1/leaks`: the leaked-key scanner's last findings.
    ///
    /// # Errors
    /// As [`Client::nodes`].
    pub async fn leaks(&self) -> Result<LeaksResponse, Error> {
        self.get("/v1/leaks".to_string()).await
    }

    /// `GET /v1/summary`: cumulative figures since the agent started.
    ///
    /// # Errors
    /// As [`Client::nodes`].
    pub async fn summary(&self) -> Result<SummaryResponse, Error> {
        self.get("/v1/summary".to_string()).await
    }

    /// `GET /healthz`: `Ok` while the agent serves. It goes over the same
    /// pooled keep-alive connections as every other call and asks nothing
    /// of the masters, so it also measures the socket's own round trip
    /// (the benchmark's floor under an acquire + release).
    ///
    /// # Errors
    /// A transport error; [`Error::Api`] (`too_many_connections`) when the
    /// agent is over its connection limit; [`Error::Protocol`] when the
    /// answer is not `{"status": "ok"}`.
    pub async fn healthz(&self) -> Result<(), Error> {
        let health: Health = self.get("/healthz".to_string()).await?;
        if health.status == "ok" {
            Ok(())
        } else {
            Err(Error::Protocol(format!(
                "/healthz answered status {:?}",
                health.status
            )))
        }
    }

    async fn get<T: serde::de::DeserializeOwned>(&self, path: String) -> Result<T, Error> {
        self.transport
            .call(Method::GET, path, None, Duration::ZERO)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locks_queries_carry_only_what_is_set_encoded() {
        assert_eq!(LocksQuery::new().path(), "/v1/locks");
        let query = LocksQuery::new()
            .prefix("orders/4")
            .cursor("orders/42 b")
            .limit(2000);
        assert_eq!(
            query.path(),
            "/v1/locks?prefix=orders%2F4&cursor=orders%2F42%20b&limit=2000"
        );
        assert_eq!(LocksQuery::new().limit(5).path(), "/v1/locks?limit=5");
    }
}
