//! Locks on several resources at once (`POST /v1/locks/{acquire,hold,
//! extend,release}` with the resources in the body), through the raw HTTP
//! client ([`crate::http`]): one fresh connection per call, as the other
//! calls.
//!
//! ## Behavior
//! - The answers are read as the wire types say; an answer that is not
//!   one of them, or not JSON, is [`Error::Protocol`] (the stats count it
//!   as a contract breach).
//! - Every call is bounded by [`SLACK`] plus the wait it asks for (a
//!   hold: until its `acquired` line).
//! - A [`MultiHold`] keeps its connection until dropped; dropping it
//!   closes it, and the agent releases every resource.
//! - Extends and releases name the resources as well as the token, so they
//!   reach them through an agent that did not grant the token (one that
//!   restarted since, for one).

use std::time::Duration;

use redlock_wire::{
    ErrorResponse, ExtendResponse, HoldEvent, MultiAcquireRequest, MultiAcquireResponse,
    MultiExtendRequest, MultiHoldRequest, MultiReleaseRequest, ReleaseResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{answer, Answer, Client, Error, Extended, HoldNext, SLACK};
use crate::http::{self, Conn, HttpError, Lines};

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

/// A hold of several resources once its `acquired` line arrived: the
/// stream of its next events, until dropped.
pub struct MultiHold {
    lines: Lines,
    pub token: String,
    pub validity: Duration,
    pub fence: Option<u64>,
}

impl MultiHold {
    /// The stream's next event, as a lock's hold's ([`HoldNext`]).
    pub async fn next_event(&mut self) -> HoldNext {
        match self.lines.next_line().await {
            Ok(Some(line)) => match serde_json::from_slice::<HoldEvent>(&line) {
                Ok(event) => HoldNext::Event(event),
                Err(e) => HoldNext::Broken(format!(
                    "not an event ({e}): {}",
                    String::from_utf8_lossy(&line)
                )),
            },
            Ok(None) => HoldNext::Ended,
            Err(e) => HoldNext::Broken(e.to_string()),
        }
    }
}

impl Client {
    /// `POST /v1/locks/hold`: once `acquired` has arrived, the hold of
    /// every resource of `request`; read its next events with
    /// [`MultiHold::next_event`]. It lasts until dropped.
    ///
    /// # Errors
    /// As [`Client::acquire_multi`]; a stream whose first line is not
    /// `acquired` is [`Error::Protocol`].
    pub async fn hold_multi(&self, request: &MultiHoldRequest) -> Result<Answer<MultiHold>, Error> {
        let path = "/v1/locks/hold";
        let limit = SLACK + Duration::from_millis(request.wait_ms.unwrap_or(0));
        let body = serde_json::to_vec(request).map_err(|e| Error::Protocol(e.to_string()))?;
        let opened = async {
            let mut conn = Conn::connect(self.socket()).await?;
            conn.write(&http::request("POST", path, &body)).await?;
            let head = conn.read_head().await?;
            if head.status != 200 {
                let body = conn.read_body(&head, "POST").await?;
                return Ok(Err((head.status, body)));
            }
            let mut lines = conn.into_lines();
            let first = lines.next_line().await?;
            Ok(Ok((lines, first)))
        };
        let opened = tokio::time::timeout(limit, opened)
            .await
            .unwrap_or(Err(HttpError::Timeout(limit)))
            .map_err(|e| self.transport(e));
        let (lines, first) = match opened {
            Ok(Ok(stream)) => stream,
            Ok(Err((status, body))) => return answer(Err(refusal(path, status, &body))),
            Err(e) => return answer(Err(e)),
        };
        let first = first.unwrap_or_default();
        match serde_json::from_slice::<HoldEvent>(&first) {
            Ok(HoldEvent::Acquired {
                token,
                validity_ms,
                fence,
                ..
            }) => Ok(Answer::Ok(MultiHold {
                lines,
                token,
                validity: Duration::from_millis(validity_ms),
                fence,
            })),
            _ => Err(Error::Protocol(format!(
                "{path}: first line not `acquired`: {}",
                String::from_utf8_lossy(&first)
            ))),
        }
    }

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
            .map_err(|e| self.transport(e))?;
        let status = response.status();
        if status == 200 {
            return serde_json::from_slice(&response.body)
                .map_err(|e| Error::Protocol(format!("{path}: {e}: {}", response.body_text())));
        }
        Err(refusal(path, status, &response.body))
    }

    /// A transport failure as `redlock-client` names it.
    fn transport(&self, e: HttpError) -> Error {
        match e {
            HttpError::Connect(source) => Error::Connect {
                socket: self.socket().to_path_buf(),
                source,
            },
            HttpError::Timeout(d) => Error::Timeout(d),
            HttpError::Malformed(m) => Error::Protocol(m),
            e @ (HttpError::Io(_) | HttpError::Closed) => Error::Connection(Box::new(e)),
        }
    }
}

/// An answer other than 200 to `path`: the API error it carries, as
/// `redlock-client` names it, or [`Error::Protocol`] when it carries none.
fn refusal(path: &str, status: u16, body: &[u8]) -> Error {
    let refusal: ErrorResponse = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            let text = String::from_utf8_lossy(body);
            return Error::Protocol(format!("{path}: {status}: {e}: {text}"));
        }
    };
    let message = refusal.error.message;
    match refusal.error.code {
        redlock_wire::ErrorCode::Taken => Error::Taken { message },
        redlock_wire::ErrorCode::Lost => Error::Lost { message },
        redlock_wire::ErrorCode::NoQuorum => Error::NoQuorum { message },
        code => Error::Api {
            status,
            code,
            message,
        },
    }
}
