//! Locks on several resources at once (`POST /v1/locks/{acquire,extend,
//! release}` with the resources in the body), through the raw HTTP client
//! ([`crate::http`]): one fresh connection per call, as the other calls.
//!
//! ## Behavior
//! - The answers are read as the wire types say; an answer that is not
//!   one of them, or not JSON, is [`Error::Protocol`] (the stats count it
//!   as a contract breach).
//! - Every call is bounded by [`SLACK`] plus the wait it asks for.
//! - Extends and releases name the resources as well as the token, so they
//!   reach them through an agent that did not grant the token (one that
//!   restarted since, for one).

use std::time::Duration;

use redlock_wire::{
    ErrorResponse, ExtendResponse, MultiAcquireRequest, MultiAcquireResponse, MultiExtendRequest,
    MultiReleaseRequest, ReleaseResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{answer, Answer, Client, Error, Extended, SLACK};
use crate::http::{self, Conn, HttpError};

/// A grant of several resources as the client saw it.
#[derive(Debug, Clone)]
pub struct MultiGrant {
    /// Sorted, as the agent answers them.
    pub resources: Vec<String>,
    pub token: String,
    pub validity: Duration,
    pub ttl: Duration,
    pub fence: Option<u64>,
}

impl Client {
    /// `POST /v1/locks/acquire`: every resource of `request`, or none.
    ///
    /// # Errors
    /// When the agent cannot be reached, does not answer in time, or
    /// answers out of contract.
    pub async fn acquire_multi(
        &self,
        request: &MultiAcquireRequest,
    ) -> Result<Answer<MultiGrant>, Error> {
        let wait = Duration::from_millis(request.wait_ms.unwrap_or(0));
        let result: Result<MultiAcquireResponse, Error> =
            self.call("/v1/locks/acquire", request, wait).await;
        answer(result.map(|r| MultiGrant {
            resources: r.resources,
            token: r.token,
            validity: Duration::from_millis(r.validity_ms),
            ttl: Duration::from_millis(r.ttl_ms),
            fence: r.fence,
        }))
    }

    /// `POST /v1/locks/extend`: a new TTL from now for every resource of
    /// the grant (`None`: the agent's default).
    ///
    /// # Errors
    /// As [`Client::acquire_multi`].
    pub async fn extend_multi(
        &self,
        resources: &[String],
        token: &str,
        ttl: Option<Duration>,
    ) -> Result<Answer<Extended>, Error> {
        let request = MultiExtendRequest {
            token: token.to_string(),
            ttl_ms: ttl.map(super::ms),
            resources: Some(resources.to_vec()),
        };
        let result: Result<ExtendResponse, Error> = self
            .call("/v1/locks/extend", &request, Duration::ZERO)
            .await;
        answer(result.map(|r| Extended {
            validity: Duration::from_millis(r.validity_ms),
            ttl: Duration::from_millis(r.ttl_ms),
            valid_until: std::time::Instant::now() + Duration::from_millis(r.validity_ms),
        }))
    }

    /// `POST /v1/locks/release`: whether a quorum still held every
    /// resource of the grant.
    ///
    /// # Errors
    /// As [`Client::acquire_multi`].
    pub async fn release_multi(
        &self,
        resources: &[String],
        token: &str,
    ) -> Result<Answer<bool>, Error> {
        let request = MultiReleaseRequest {
            token: token.to_string(),
            resources: Some(resources.to_vec()),
        };
        let result: Result<ReleaseResponse, Error> = self
            .call("/v1/locks/release", &request, Duration::ZERO)
            .await;
        answer(result.map(|r| r.released))
    }

    /// One POST of `body` to `path` on a connection of its own, its answer
    /// read as `T`, or the API error it carries.
    async fn call<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl Serialize,
        wait: Duration,
    ) -> Result<T, Error> {
        let body = serde_json::to_vec(body).map_err(|e| Error::Protocol(e.to_string()))?;
        let limit = SLACK + wait;
        let exchange = async {
            let mut conn = Conn::connect(self.socket()).await?;
            conn.write(&http::request("POST", path, &body)).await?;
            conn.read_response("POST", limit).await
        };
        let response = tokio::time::timeout(limit, exchange)
            .await
            .unwrap_or(Err(HttpError::Timeout(limit)))
            .map_err(|e| match e {
                HttpError::Connect(source) => Error::Connect {
                    socket: self.socket().to_path_buf(),
                    source,
                },
                HttpError::Timeout(d) => Error::Timeout(d),
                HttpError::Malformed(m) => Error::Protocol(m),
                e @ (HttpError::Io(_) | HttpError::Closed) => Error::Connection(Box::new(e)),
            })?;
        let status = response.status();
        if status == 200 {
            return serde_json::from_slice(&response.body)
                .map_err(|e| Error::Protocol(format!("{path}: {e}: {}", response.body_text())));
        }
        let refusal: ErrorResponse = serde_json::from_slice(&response.body).map_err(|e| {
            Error::Protocol(format!("{path}: {status}: {e}: {}", response.body_text()))
        })?;
        let message = refusal.error.message;
        Err(match refusal.error.code {
            redlock_wire::ErrorCode::Taken => Error::Taken { message },
            redlock_wire::ErrorCode::Lost => Error::Lost { message },
            redlock_wire::ErrorCode::NoQuorum => Error::NoQuorum { message },
            code => Error::Api {
                status,
                code,
                message,
            },
        })
    }
}
