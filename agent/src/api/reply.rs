//! What every route answers with: JSON bodies and NDJSON streams, the
//! error answer with its code ([`ApiError`]), and the request body read
//! and parsed within its limits (or, when it could not be read, an answer
//! that closes the connection: [`closing`]). The lock service's refusals become
//! answers here, once ([`lock_error`], [`read_error`]).

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Body as _, Frame, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use hyper::{HeaderMap, Method, Response, StatusCode};
use redlock_wire::{ErrorBody, ErrorCode, ErrorResponse};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::lock::events::{self, Timely};
use crate::lock::listing::ReadError;
use crate::lock::streams::Slot;
use crate::lock::waiters::WaitError;
use crate::lock::LockError;
use crate::telemetry::spans::Marked;
use crate::telemetry::Watch;

/// Largest request body read.
pub const MAX_BODY: usize = 64 * 1024;

/// Response body type of every route (streaming routes will need more than
/// a full buffer).
pub type Body = BoxBody<Bytes, Infallible>;

/// A failed request: the status and the JSON error.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: ErrorCode,
    message: String,
    /// The method the route takes, for a 405's `Allow` header.
    allow: Option<Method>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            allow: None,
        }
    }

    /// 405 for `method` on `path`, whose route takes only `allowed`.
    pub fn method_not_allowed(method: &Method, path: &str, allowed: Method) -> ApiError {
        ApiError {
            allow: Some(allowed.clone()),
            ..ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                ErrorCode::MethodNotAllowed,
                format!("{method} {path} is not allowed; use {allowed}"),
            )
        }
    }

    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest, message)
    }

    pub fn into_response(self) -> Response<Body> {
        let busy = self.code == ErrorCode::Busy;
        let body = ErrorResponse {
            error: ErrorBody {
                code: self.code,
                message: self.message,
            },
        };
        let mut response = json(self.status, &body);
        if busy {
            response
                .headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if let Some(allowed) = self.allow {
            response.headers_mut().insert(
                ALLOW,
                // Cannot fail: method names are valid header values.
                HeaderValue::from_str(allowed.as_str()).expect("method names are valid headers"),
            );
        }
        response
    }
}

/// `response` with `connection: close`: the answer to a request whose
/// body was not read to its end, so the rest of it is never parsed as a
/// request. hyper closes the connection once it is written, and the
/// connection is never parked for reuse (see [`super::connection`]).
pub fn closing(mut response: Response<Body>) -> Response<Body> {
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Whether `response` closes its connection (see [`closing`]).
pub fn closes(response: &Response<Body>) -> bool {
    response
        .headers()
        .get(CONNECTION)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"close"))
}

/// Serializes an answer.
pub fn json<T: Serialize>(status: StatusCode, value: &T) -> Response<Body> {
    // Cannot fail: the wire types are plain structs of strings and numbers.
    let mut bytes = serde_json::to_vec(value).expect("wire types serialize");
    bytes.push(b'\n');
    let mut response = Response::new(Full::new(Bytes::from(bytes)).boxed());
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// An operator read that has no answer: 429 with `Retry-After` when busy,
/// 503 when too few masters answered, 404 for a lock no master has.
pub fn read_error(error: ReadError) -> ApiError {
    let (status, code) = match &error {
        ReadError::Busy => (StatusCode::TOO_MANY_REQUESTS, ErrorCode::Busy),
        ReadError::TooFewRead { .. } => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::NoQuorum),
        ReadError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
    };
    ApiError::new(status, code, error.to_string())
}

/// Reads a request's whole body, at most [`MAX_BODY`] bytes, within
/// `timeout`. Every request's body is read before it is answered (see
/// [`super::routes::handle`]): a body left on the connection would be
/// parsed as the next request.
///
/// # Errors
/// 413 when the body is (or is declared) larger than [`MAX_BODY`], 408
/// when it does not arrive within `timeout`, 400 when it cannot be read;
/// the rest of the body is then still on the connection.
pub async fn read_body(
    headers: &HeaderMap,
    body: Incoming,
    timeout: Duration,
) -> Result<Bytes, ApiError> {
    if body.is_end_stream() {
        return Ok(Bytes::new());
    }
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::BodyTooLarge,
            format!("request bodies are limited to {MAX_BODY} bytes"),
        )
    };
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    let collect = Limited::new(body, MAX_BODY).collect();
    let Ok(collected) = tokio::time::timeout(timeout, collect).await else {
        return Err(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            ErrorCode::RequestTimeout,
            format!(
                "the request body did not arrive within {}ms (socket.request_timeout)",
                timeout.as_millis()
            ),
        ));
    };
    match collected {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
        Err(e) => Err(ApiError::invalid(format!(
            "could not read the request body: {e}"
        ))),
    }
}

/// Parses a JSON body; an empty body is `{}` where every field is optional.
pub fn parse_body<T: DeserializeOwned>(body: &[u8], empty_ok: bool) -> Result<T, ApiError> {
    let text: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
        if !empty_ok {
            return Err(ApiError::invalid("a JSON body is required"));
        }
        b"{}"
    } else {
        body
    };
    // serde would read a struct from a JSON array too; only objects are
    // bodies. Looking at the first byte spares a second parse.
    if text.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::invalid("the JSON body must be an object"));
    }
    serde_json::from_slice(text).map_err(|e| ApiError::invalid(format!("bad JSON body: {e}")))
}

/// The answer for a lock request the service refused.
pub fn lock_error(error: LockError) -> ApiError {
    let (status, code) = match &error {
        LockError::TtlOutOfRange { .. } => (StatusCode::BAD_REQUEST, ErrorCode::TtlOutOfRange),
        LockError::InvalidOwner | LockError::Invalid(_) => {
            (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest)
        }
        LockError::Taken(_) | LockError::TakenMany(_) | LockError::Full { .. } => {
            (StatusCode::CONFLICT, ErrorCode::Taken)
        }
        LockError::LimitMismatch { .. } => (StatusCode::CONFLICT, ErrorCode::LimitMismatch),
        LockError::Lost(_) => (StatusCode::CONFLICT, ErrorCode::Lost),
        LockError::NotReentrant(_) => (StatusCode::CONFLICT, ErrorCode::NotReentrant),
        LockError::ReentryForbidden(_)
        | LockError::ReentryUnavailable(_)
        | LockError::Isolated { .. } => (StatusCode::FORBIDDEN, ErrorCode::Forbidden),
        LockError::NoQuorum(_) => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::NoQuorum),
        LockError::Wait(WaitError::TooManyWaiters(_) | WaitError::TooManyWaitersPerUid { .. }) => {
            (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::TooManyWaiters)
        }
        LockError::TooManyStreams(_) => (StatusCode::TOO_MANY_REQUESTS, ErrorCode::TooManyStreams),
        LockError::Wait(WaitError::ShuttingDown) => {
            (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ShuttingDown)
        }
    };
    ApiError::new(status, code, error.to_string())
}

/// A 200 `application/x-ndjson` stream of `events`, one per line, open
/// until the sender ends it: each as true when its line is made, outdated
/// renewals left out ([`events::next_timely`]). The connection asks for
/// the next line only once the client has read the last
/// ([`super::connection`]). Dropping the stream (the connection closed)
/// drops the receiver: a hold ends, a campaign resigns, an observer stops,
/// and the stream's `slot` in its uid's share is given back.
pub fn ndjson<T: Serialize + Timely + Marked + Send + 'static>(
    events: events::Receiver<T>,
    slot: Slot,
    watch: Option<Watch>,
) -> Response<Body> {
    // The slot lives as long as the body: given back when the stream ends;
    // so does the watch, whose hold span ends with it.
    let state = (events, slot, watch);
    let body = futures::stream::unfold(state, |(mut events, slot, mut watch)| async move {
        let event = events::next_timely(&mut events).await?;
        if let Some(watch) = watch.as_mut() {
            watch.saw(event.mark());
        }
        Some((
            Ok::<_, Infallible>(Frame::data(line(&event))),
            (events, slot, watch),
        ))
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(body)));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    response
}

/// Whether `response` is a stream of events ([`ndjson`]).
pub fn is_stream<B>(response: &Response<B>) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|t| t == "application/x-ndjson")
}

/// One event as an NDJSON line.
fn line<T: Serialize>(event: &T) -> Bytes {
    // Cannot fail: the events are plain strings and numbers.
    let mut bytes = serde_json::to_vec(event).expect("events serialize");
    bytes.push(b'\n');
    Bytes::from(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use redlock_wire::HoldEvent;

    #[test]
    fn hold_events_are_one_json_object_per_line() {
        let bytes = line(&HoldEvent::Lost {
            reason: "max_hold".into(),
        });
        assert_eq!(
            &bytes[..],
            b"{\"event\":\"lost\",\"reason\":\"max_hold\"}\n"
        );
    }
}
