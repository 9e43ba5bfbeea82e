//! Semaphores: `/v1/semaphores/{name}/...`. A semaphore of limit `k` is `k`
//! permits, each an ordinary lock of its own on the agent's quorum (its
//! own token, TTL and fence), so at most `k` holders can believe they hold
//! one at the same instant. The calls mirror the lock ones:
//! [`Client::acquire_permit`], [`Client::extend_permit`],
//! [`Client::release_permit`], [`Client::hold_permit`] and
//! [`Client::semaphore`].
//!
//! ```no_run
//! use std::time::Duration;
//! use redlock_client::{Client, Error, PermitOptions};
//!
//! # async fn example() -> Result<(), Error> {
//! let client = Client::new("/run/redlock/agent.sock");
//! // At most 5 workers call the payment API at once.
//! let options = PermitOptions::new(5)
//!     .ttl(Duration::from_secs(10))
//!     .wait(Duration::from_secs(2));
//! match client.acquire_permit("payment-api", &options).await {
//!     Ok(permit) => {
//!         // ... call the API, finished well before permit.valid_until ...
//!         client
//!             .release_permit(&permit.semaphore, &permit.token)
//!             .await?;
//!     }
//!     Err(Error::Taken { .. }) => println!("all 5 permits are in use"),
//!     Err(e) => return Err(e),
//! }
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use hyper::Method;
use redlock_wire::{
    ExtendResponse, ForceReleaseResponse, HoldEvent, PermitExtendRequest,
    PermitForceReleaseRequest, PermitReleaseRequest, PermitResponse, ReleaseResponse,
    SemaphoreResponse,
};

use crate::hold::Hold;
pub use crate::options::{PermitHoldOptions, PermitOptions};
use crate::transport::semaphore_path;
use crate::{json, millis, Client, Error, Extended};

/// A granted permit ([`Client::acquire_permit`]).
#[derive(Clone, PartialEq, Eq)]
pub struct Permit {
    pub semaphore: String,
    /// Which permit, 0 to `limit - 1`: needed with the token to extend and
    /// release it.
    pub permit: u32,
    /// The proof of holding the permit.
    pub token: String,
    pub ttl: Duration,
    /// How long the permit is safe to use, counted from when the answer
    /// arrived.
    pub validity: Duration,
    /// `validity` from when the answer arrived.
    pub valid_until: std::time::Instant,
    /// The permit's fencing token, when asked for: larger than every
    /// earlier grant's of any lock or permit on these masters.
    pub fence: Option<u64>,
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("Permit")
            .field("semaphore", &self.semaphore)
            .field("permit", &self.permit)
            .field("ttl", &self.ttl)
            .field("validity", &self.validity)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

/// A permit tied to one connection ([`Client::hold_permit`]): the agent
/// renews it and says `lost` before its validity ends if it cannot; dropping
/// it closes the connection, and the agent releases the permit.
///
/// ## Behavior
/// As a lock's [`Hold`]: returned once `acquired` arrived; every `renewed`
/// read moves [`PermitHold::valid_until`]; the stream ending without
/// `lost` means lost too.
#[derive(Debug)]
pub struct PermitHold {
    permit: u32,
    hold: Hold,
}

impl PermitHold {
    pub fn semaphore(&self) -> &str {
        self.hold.resource()
    }

    /// Which permit this hold has, 0 to `limit - 1`.
    pub fn permit(&self) -> u32 {
        self.permit
    }

    /// The permit's token: for [`Client::release_permit`]. Keep it secret.
    pub fn token(&self) -> &str {
        self.hold.token()
    }

    pub fn ttl(&self) -> Duration {
        self.hold.ttl()
    }

    /// The permit's fencing token, when asked for.
    pub fn fence(&self) -> Option<u64> {
        self.hold.fence()
    }

    /// The validity last announced (`acquired` or `renewed`).
    pub fn validity(&self) -> Duration {
        self.hold.validity()
    }

    /// When the validity last announced ends, counted from when its line
    /// arrived. Past it, another client may hold this permit.
    pub fn valid_until(&self) -> std::time::Instant {
        self.hold.valid_until()
    }

    /// The next event after `acquired`: `renewed` or `lost` (stop using
    /// the permit); `None` when the stream ended without `lost`, which
    /// means lost too. Cancel-safe.
    ///
    /// # Errors
    /// As [`Hold::next_event`].
    pub async fn next_event(&mut self) -> Result<Option<HoldEvent>, Error> {
        self.hold.next_event().await
    }

    /// Resolves when the permit is lost: the agent said `lost` (its
    /// reason), or the stream ended or failed (`None`). Renewals read on
    /// the way move [`PermitHold::valid_until`]. Cancel-safe.
    pub async fn lost(&mut self) -> Option<String> {
        loop {
            match self.hold.next_event().await {
                Ok(Some(HoldEvent::Lost { reason })) => return Some(reason),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Ends the hold: closes the connection, and the agent releases the
    /// permit on every master. The same as dropping it.
    pub fn close(self) {}

    /// The permit's hold as a lock's [`Hold`] (its resource is the
    /// semaphore's name), for code that reads any hold's events the same
    /// way; the permit number goes, the connection stays.
    pub fn into_hold(self) -> Hold {
        self.hold
    }
}

impl Client {
    /// `POST /v1/semaphores/{name}/acquire`: one permit, if a quorum of
    /// masters granted one of the `limit` within `options.wait`.
    ///
    /// # Errors
    /// [`Error::Taken`] when every permit stayed held for all of the wait,
    /// [`Error::Api`] with [`crate::ErrorCode::LimitMismatch`] when permits
    /// are held with another limit, [`Error::NoQuorum`], another
    /// [`Error::Api`], or a transport error.
    pub async fn acquire_permit(
        &self,
        name: &str,
        options: &PermitOptions,
    ) -> Result<Permit, Error> {
        let body = options.request();
        let answer: PermitResponse = self
            .transport
            .call(
                Method::POST,
                semaphore_path(name, "acquire"),
                Some(json(body)),
                Duration::from_millis(body.wait_ms.unwrap_or(0)),
            )
            .await?;
        let validity = Duration::from_millis(answer.validity_ms);
        Ok(Permit {
            semaphore: answer.semaphore,
            permit: answer.permit,
            token: answer.token,
            ttl: Duration::from_millis(answer.ttl_ms),
            validity,
            valid_until: std::time::Instant::now() + validity,
            fence: answer.fence,
        })
    }

    /// `POST /v1/semaphores/{name}/extend`: a new TTL from now for the
    /// permit `token` holds (`None`: the agent's `lock.default_ttl`); the
    /// agent finds the permit from the token.
    ///
    /// # Errors
    /// [`Error::Lost`] when it was not extended on a quorum in time (stop
    /// using the permit); otherwise as [`Client::extend`].
    pub async fn extend_permit(
        &self,
        name: &str,
        token: &str,
        ttl: Option<Duration>,
    ) -> Result<Extended, Error> {
        let body = PermitExtendRequest {
            permit: None,
            token: token.to_string(),
            ttl_ms: ttl.map(millis),
        };
        let answer: ExtendResponse = self
            .transport
            .call(
                Method::POST,
                semaphore_path(name, "extend"),
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

    /// `POST /v1/semaphores/{name}/release` of the permit `token` holds
    /// (the agent finds which from the token). `Ok(false)` means no quorum
    /// still held the permit: it had expired, and the work may have run
    /// beside `limit` others.
    ///
    /// # Errors
    /// As [`Client::release`].
    pub async fn release_permit(&self, name: &str, token: &str) -> Result<bool, Error> {
        let body = PermitReleaseRequest {
            permit: None,
            token: token.to_string(),
        };
        let answer: ReleaseResponse = self
            .transport
            .call(
                Method::POST,
                semaphore_path(name, "release"),
                Some(json(&body)),
                Duration::ZERO,
            )
            .await?;
        Ok(answer.released)
    }

    /// `POST /v1/semaphores/{name}/hold`: a permit tied to one
    /// connection, returned once the agent sent `acquired`; drop it to
    /// release.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redlock_client::{Client, Error, PermitHoldOptions};
    /// # async fn example(client: Client) -> Result<(), Error> {
    /// let options = PermitHoldOptions::new(2).ttl(Duration::from_secs(5));
    /// let mut permit = client.hold_permit("gpu", &options).await?;
    /// println!("permit {} of 2", permit.permit());
    /// tokio::select! {
    ///     () = use_the_gpu() => {}
    ///     reason = permit.lost() => eprintln!("stopped: permit lost ({reason:?})"),
    /// }
    /// drop(permit); // released on every master
    /// # Ok(())
    /// # }
    /// # async fn use_the_gpu() {}
    /// ```
    ///
    /// # Errors
    /// As [`Client::acquire_permit`]; [`Error::Protocol`] when the answer
    /// is not an NDJSON stream that starts with `acquired` naming a permit.
    pub async fn hold_permit(
        &self,
        name: &str,
        options: &PermitHoldOptions,
    ) -> Result<PermitHold, Error> {
        let body = options.request();
        let limit = self
            .transport
            .timeout()
            .saturating_add(Duration::from_millis(body.wait_ms.unwrap_or(0)));
        let start = self.start_hold(name, semaphore_path(name, "hold"), json(body));
        let (hold, permit) = tokio::time::timeout(limit, start)
            .await
            .map_err(|_| Error::Timeout(limit))??;
        let permit = permit.ok_or_else(|| {
            Error::Protocol("a semaphore's `acquired` must name its permit".into())
        })?;
        Ok(PermitHold { permit, hold })
    }

    /// `POST /v1/semaphores/{name}/force-release`: for operators, on the
    /// admin socket, deletes permit `permit` on every master whoever holds
    /// it, as [`Client::force_release`] does a lock: its holder's hold
    /// hears `lost` (`force_released`) at once, and a waiter may take it.
    ///
    /// # Errors
    /// [`Error::Api`] for a refused request (`forbidden` on the
    /// application socket, `invalid_request` for a permit number past the
    /// largest limit), or a transport error.
    pub async fn force_release_permit(
        &self,
        name: &str,
        permit: u32,
    ) -> Result<ForceReleaseResponse, Error> {
        self.transport
            .call(
                Method::POST,
                semaphore_path(name, "force-release"),
                Some(json(&PermitForceReleaseRequest { permit })),
                Duration::ZERO,
            )
            .await
    }

    /// `GET /v1/semaphores/{name}`: the held permits (never tokens), the
    /// limit while any is held, and this agent's waiters.
    ///
    /// # Errors
    /// A transport error, or an API error.
    pub async fn semaphore(&self, name: &str) -> Result<SemaphoreResponse, Error> {
        self.get(semaphore_path(name, "")).await
    }
}
