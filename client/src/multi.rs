//! Locks on several resources at once, all or nothing, under one token:
//! `POST /v1/locks/{acquire,hold,extend,release}` with the resources in
//! the body. The options are a lock's ([`AcquireOptions`],
//! [`HoldOptions`]); the agent sorts the resources, and answers with all
//! of them or none.

use std::time::Duration;

use hyper::Method;
use redlock_wire::{
    ExtendResponse, MultiAcquireRequest, MultiAcquireResponse, MultiExtendRequest,
    MultiHoldRequest, MultiReleaseRequest, ReleaseResponse,
};

use crate::{json, millis, AcquireOptions, Client, Error, Extended, Hold, HoldOptions};

/// A lock on several resources ([`Client::acquire_many`]).
#[derive(Clone, PartialEq, Eq)]
pub struct MultiGrant {
    /// Every resource held, sorted.
    pub resources: Vec<String>,
    /// The proof of holding them all; extends and releases them all.
    pub token: String,
    pub ttl: Duration,
    /// How long every resource is safe to use, from when the answer
    /// arrived.
    pub validity: Duration,
    pub valid_until: std::time::Instant,
    /// One fencing token for every resource, when asked for: larger than
    /// every earlier grant's of each of them.
    pub fence: Option<u64>,
}

impl std::fmt::Debug for MultiGrant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token: it is the proof of holding the locks.
        f.debug_struct("MultiGrant")
            .field("resources", &self.resources)
            .field("ttl", &self.ttl)
            .field("validity", &self.validity)
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// `POST /v1/locks/acquire`: every one of `resources` (2 to 32, any
    /// order) or none, waiting in each one's line as a lock does.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use redlock_client::{AcquireOptions, Client, Error};
    /// # async fn example(client: Client) -> Result<(), Error> {
    /// let options = AcquireOptions::new().wait(Duration::from_secs(5)).fence();
    /// let grant = client.acquire_many(&["stock-a", "stock-b"], &options).await?;
    /// // ... move the stock, sending grant.fence with every write ...
    /// client.release_many(&grant.token).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`Client::acquire`]: [`Error::Taken`] when any of them stayed
    /// held for all of the wait.
    pub async fn acquire_many(
        &self,
        resources: &[&str],
        options: &AcquireOptions,
    ) -> Result<MultiGrant, Error> {
        let mut body = MultiAcquireRequest::with_lock(options.request().clone());
        body.resources = resources.iter().map(ToString::to_string).collect();
        let answer: MultiAcquireResponse = self
            .transport
            .call(
                Method::POST,
                "/v1/locks/acquire".to_string(),
                Some(json(&body)),
                Duration::from_millis(body.wait_ms.unwrap_or(0)),
            )
            .await?;
        let validity = Duration::from_millis(answer.validity_ms);
        Ok(MultiGrant {
            resources: answer.resources,
            token: answer.token,
            ttl: Duration::from_millis(answer.ttl_ms),
            validity,
            valid_until: std::time::Instant::now() + validity,
            fence: answer.fence,
        })
    }

    /// `POST /v1/locks/hold`: every one of `resources` or none, renewed
    /// until the returned [`Hold`] is dropped (then released), or until one
    /// of them is lost (`lost` ends the hold of all).
    ///
    /// # Errors
    /// As [`Client::hold`].
    pub async fn hold_many(
        &self,
        resources: &[&str],
        options: &HoldOptions,
    ) -> Result<Hold, Error> {
        let request = options.request();
        let mut body = MultiHoldRequest::with_lock(request.lock());
        body.resources = resources.iter().map(ToString::to_string).collect();
        body.max_hold_ms = request.max_hold_ms;
        body.on_disconnect = request.on_disconnect;
        let limit = self
            .transport
            .timeout()
            .saturating_add(Duration::from_millis(body.wait_ms.unwrap_or(0)));
        let named = resources.join(",");
        let start = self.start_hold(&named, "/v1/locks/hold".to_string(), json(&body));
        let (hold, _) = tokio::time::timeout(limit, start)
            .await
            .map_err(|_| Error::Timeout(limit))??;
        Ok(hold)
    }

    /// `POST /v1/locks/extend`: a new TTL from now for every resource of
    /// the grant of `token` (`None`: the agent's `lock.default_ttl`),
    /// through the agent that granted it.
    ///
    /// # Errors
    /// [`Error::Lost`] when any of them was not extended on a quorum in
    /// time (stop using them all), as [`Client::extend`] otherwise.
    pub async fn extend_many(&self, token: &str, ttl: Option<Duration>) -> Result<Extended, Error> {
        let body = MultiExtendRequest {
            token: token.to_string(),
            ttl_ms: ttl.map(millis),
            resources: None,
        };
        let answer: ExtendResponse = self
            .transport
            .call(
                Method::POST,
                "/v1/locks/extend".to_string(),
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

    /// `POST /v1/locks/release`: every resource of the grant of `token`,
    /// through the agent that granted it. `Ok(false)` when any had run
    /// out (the work may have overlapped another holder's).
    ///
    /// # Errors
    /// As [`Client::release`].
    pub async fn release_many(&self, token: &str) -> Result<bool, Error> {
        let body = MultiReleaseRequest {
            token: token.to_string(),
            resources: None,
        };
        let answer: ReleaseResponse = self
            .transport
            .call(
                Method::POST,
                "/v1/locks/release".to_string(),
                Some(json(&body)),
                Duration::ZERO,
            )
            .await?;
        Ok(answer.released)
    }
}
