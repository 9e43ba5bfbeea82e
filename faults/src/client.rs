//! The socket API as the harness's clients use it: one fresh connection per
//! call (as a short-lived application process would), typed with the
//! `redlock-wire` types, every call bounded in time.

use std::path::{Path, PathBuf};
use std::time::Duration;

use redlock_wire::{
    AcquireRequest, AcquireResponse, ErrorResponse, ExtendRequest, ExtendResponse, HoldEvent,
    HoldRequest, ReleaseRequest, ReleaseResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::http::{self, Conn, HttpError, Lines, Response};

/// How long past the request's own `wait_ms` an answer may take before the
/// call counts as unanswered.
const SLACK: Duration = Duration::from_secs(5);

/// An agent's answer: the 200 body, or the error it sent.
#[derive(Debug, Clone)]
pub enum Answer<T> {
    Ok(T),
    Refused {
        status: u16,
        code: String,
        message: String,
    },
}

/// Calls one agent's socket.
#[derive(Debug, Clone)]
pub struct Client {
    socket: PathBuf,
}

/// The path of a lock action on `resource`, percent-encoded.
pub fn lock_path(resource: &str, action: &str) -> String {
    let segment: String =
        percent_encoding::utf8_percent_encode(resource, percent_encoding::NON_ALPHANUMERIC)
            .collect();
    format!("/v1/locks/{segment}/{action}")
}

fn decode<T: DeserializeOwned>(response: &Response) -> Result<Answer<T>, HttpError> {
    if response.status() == 200 {
        return serde_json::from_slice(&response.body)
            .map(Answer::Ok)
            .map_err(|e| {
                HttpError::Malformed(format!("200 body ({e}): {}", response.body_text()))
            });
    }
    match serde_json::from_slice::<ErrorResponse>(&response.body) {
        Ok(error) => Ok(Answer::Refused {
            status: response.status(),
            code: error.error.code.as_str().to_string(),
            message: error.error.message,
        }),
        Err(e) => Err(HttpError::Malformed(format!(
            "{} body is not an error ({e}): {}",
            response.status(),
            response.body_text()
        ))),
    }
}

impl Client {
    pub fn new(socket: impl Into<PathBuf>) -> Client {
        Client {
            socket: socket.into(),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// One request on a fresh connection.
    ///
    /// # Errors
    /// When the agent cannot be reached or does not answer within `limit`.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        limit: Duration,
    ) -> Result<Response, HttpError> {
        let mut conn = Conn::connect(&self.socket).await?;
        conn.write(&http::request(method, path, body)).await?;
        conn.read_response(method, limit).await
    }

    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        limit: Duration,
    ) -> Result<Answer<T>, HttpError> {
        // Cannot fail: wire types serialize.
        let bytes = serde_json::to_vec(body).expect("wire types serialize");
        decode(&self.call("POST", path, &bytes, limit).await?)
    }

    /// `POST .../acquire`.
    ///
    /// # Errors
    /// When the agent cannot be reached or answers out of contract.
    pub async fn acquire(
        &self,
        resource: &str,
        request: &AcquireRequest,
    ) -> Result<Answer<AcquireResponse>, HttpError> {
        let limit = Duration::from_millis(request.wait_ms.unwrap_or(0)) + SLACK;
        self.post(&lock_path(resource, "acquire"), request, limit)
            .await
    }

    /// `POST .../extend`.
    ///
    /// # Errors
    /// When the agent cannot be reached or answers out of contract.
    pub async fn extend(
        &self,
        resource: &str,
        token: &str,
        ttl_ms: Option<u64>,
    ) -> Result<Answer<ExtendResponse>, HttpError> {
        let request = ExtendRequest {
            token: token.to_string(),
            ttl_ms,
        };
        self.post(&lock_path(resource, "extend"), &request, SLACK)
            .await
    }

    /// `POST .../release`.
    ///
    /// # Errors
    /// When the agent cannot be reached or answers out of contract.
    pub async fn release(
        &self,
        resource: &str,
        token: &str,
    ) -> Result<Answer<ReleaseResponse>, HttpError> {
        let request = ReleaseRequest {
            token: token.to_string(),
        };
        self.post(&lock_path(resource, "release"), &request, SLACK)
            .await
    }

    /// `GET path` as JSON.
    ///
    /// # Errors
    /// When the agent cannot be reached or the answer is not JSON.
    pub async fn get_json(&self, path: &str) -> Result<(u16, serde_json::Value), HttpError> {
        let response = self.call("GET", path, b"", SLACK).await?;
        let json = response.json().map_err(|e| {
            HttpError::Malformed(format!("not JSON ({e}): {}", response.body_text()))
        })?;
        Ok((response.status(), json))
    }

    /// `POST .../hold`: on 200, the event stream; the hold lasts until the
    /// stream is dropped.
    ///
    /// # Errors
    /// When the agent cannot be reached or answers out of contract.
    pub async fn hold(
        &self,
        resource: &str,
        request: &HoldRequest,
    ) -> Result<Answer<HoldStream>, HttpError> {
        let limit = Duration::from_millis(request.wait_ms.unwrap_or(0)) + SLACK;
        let mut conn = Conn::connect(&self.socket).await?;
        // Cannot fail: wire types serialize.
        let body = serde_json::to_vec(request).expect("wire types serialize");
        conn.write(&http::request("POST", &lock_path(resource, "hold"), &body))
            .await?;
        let head = tokio::time::timeout(limit, conn.read_head())
            .await
            .map_err(|_| HttpError::Timeout(limit))??;
        if head.status == 200 {
            if head.header("content-type") != Some("application/x-ndjson") {
                return Err(HttpError::Malformed(format!(
                    "hold answered 200 with content-type {:?}",
                    head.header("content-type")
                )));
            }
            return Ok(Answer::Ok(HoldStream {
                lines: conn.into_lines(),
            }));
        }
        let body = conn.read_body(&head, "POST").await?;
        match decode::<serde_json::Value>(&Response { head, body })? {
            Answer::Refused {
                status,
                code,
                message,
            } => Ok(Answer::Refused {
                status,
                code,
                message,
            }),
            Answer::Ok(other) => Err(HttpError::Malformed(format!(
                "hold answered 200 twice: {other}"
            ))),
        }
    }
}

/// What a hold's stream said next.
#[derive(Debug)]
pub enum HoldNext {
    Event(HoldEvent),
    /// The stream ended cleanly (after `lost`, or at the agent's drain).
    Ended,
    /// The connection broke: the agent died, or sent something that is no event.
    Broken(String),
}

/// A hold's NDJSON events.
#[derive(Debug)]
pub struct HoldStream {
    lines: Lines,
}

impl HoldStream {
    /// Waits for the next event.
    pub async fn next(&mut self) -> HoldNext {
        match self.lines.next_line().await {
            Ok(Some(line)) => match serde_json::from_slice(&line) {
                Ok(event) => HoldNext::Event(event),
                Err(e) => HoldNext::Broken(format!(
                    "not a hold event ({e}): {}",
                    String::from_utf8_lossy(&line)
                )),
            },
            Ok(None) => HoldNext::Ended,
            Err(e) => HoldNext::Broken(e.to_string()),
        }
    }
}
