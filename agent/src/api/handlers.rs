//! The handlers of the routes that take locks (on one resource or on
//! several at once) and permits: a parsed body to a call of
//! the lock service, its outcome to an answer. Routing is
//! [`super::routes`]'s.
//!
//! And what every route reads and answers with: the request body read and
//! parsed within its limits (or, when it could not be read, an answer that
//! closes the connection: [`closing`]), JSON bodies and NDJSON streams,
//! the error answer with its code ([`ApiError`]), and the lock service's
//! refusals as answers ([`lock_error`]).

use std::convert::Infallible;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::{Body as _, Frame, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use hyper::{HeaderMap, Method, Response, StatusCode};
use redlock_wire::{
    AcquireRequest, AcquireResponse, ErrorBody, ErrorCode, ErrorResponse, HoldRequest, Mode,
    MultiAcquireRequest, MultiAcquireResponse, MultiHoldRequest, PermitHoldRequest, PermitRequest,
    PermitResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::agent::Agent;
use crate::lock::events::{self, Timely};
use crate::lock::semaphores::permit_resource;
use crate::lock::streams::Slot;
use crate::lock::waiters::WaitError;
use crate::lock::{millis, multi, Ask, Holder, LockError};
use crate::redlock::{Grant, Resource, Token};
use crate::telemetry::spans::{follow, Marked};
use crate::telemetry::{Caller, Kind, Traced, Watch};

/// `resource` as `mode` takes it: a reader's lock is [`Resource::shared`].
pub fn moded(resource: Resource, mode: Mode) -> Resource {
    match mode {
        Mode::Shared => resource.shared(),
        Mode::Exclusive => resource,
    }
}

/// What a lock's (or a permit's) route asks for.
#[derive(Clone, Copy)]
pub enum LockAction {
    Acquire,
    Extend,
    Release,
    Hold,
    ForceRelease,
}

pub async fn acquire(
    agent: &Agent,
    resource: Resource,
    holder: Option<Holder>,
    caller: &Caller,
    request: AcquireRequest,
) -> Result<Response<Body>, ApiError> {
    let resource = moded(resource, request.mode);
    if let Some(token) = request.token.clone() {
        let mut span = agent.telemetry().start(
            caller,
            "redlock.acquire",
            resource.kind(),
            resource.as_str(),
        );
        let reentered = agent
            .locks()
            .reenter(
                &resource,
                &Token::from_client(token),
                holder.as_ref(),
                &request,
            )
            .await;
        if let Some(span) = span.as_mut() {
            span.outcome(&reentered);
            span.set("redlock.reentered", true);
            if let Ok(reentered) = &reentered {
                span.set("redlock.hold_count", i64::from(reentered.hold_count));
                if let Some(fence) = reentered.fence {
                    span.set("redlock.fence", i64::try_from(fence).unwrap_or(i64::MAX));
                }
            }
        }
        let reentered = reentered.map_err(lock_error)?;
        return Ok(json(
            StatusCode::OK,
            &AcquireResponse {
                resource: resource.to_string(),
                validity_ms: millis(
                    reentered
                        .validity
                        .saturating_sub(reentered.extended_at.elapsed()),
                ),
                ttl_ms: millis(reentered.ttl),
                fence: reentered.fence,
                token: reentered.token.into_string(),
                hold_count: Some(reentered.hold_count),
                mode: request.mode,
            },
        ));
    }
    let mut span = agent.telemetry().start(
        caller,
        "redlock.acquire",
        resource.kind(),
        resource.as_str(),
    );
    let behind = span.as_ref().and_then(|_| holder_here(agent, &resource));
    let mode = request.mode;
    let ask = Ask {
        lock: request,
        holder,
    };
    let granted = follow(span.as_ref(), pin!(agent.locks().acquire(&resource, ask))).await;
    if let Some(span) = span.as_mut() {
        finish_acquire(agent, span, &resource, &granted, behind.as_deref());
    }
    let grant = granted.map_err(lock_error)?;
    Ok(json(
        StatusCode::OK,
        &AcquireResponse {
            resource: resource.to_string(),
            validity_ms: millis(grant.validity.saturating_sub(grant.granted_at.elapsed())),
            ttl_ms: millis(grant.ttl),
            fence: grant.fence,
            token: grant.token.into_string(),
            hold_count: None,
            mode,
        },
    ))
}

/// `POST /v1/locks/{resource}/hold`: a 200 NDJSON stream that stays open
/// while the lock is held (see [`crate::lock::holds`]), one event per line.
pub async fn hold(
    agent: &Arc<Agent>,
    resource: Resource,
    holder: Option<Holder>,
    caller: &Caller,
    request: HoldRequest,
) -> Result<Response<Body>, ApiError> {
    let resource = moded(resource, request.mode);
    let slot = agent
        .locks()
        .open_stream(holder.as_ref().map(|h| h.uid))
        .map_err(lock_error)?;
    if let Some(token) = request.token.clone() {
        let mut span = agent.telemetry().start(
            caller,
            "redlock.acquire",
            resource.kind(),
            resource.as_str(),
        );
        let events = agent
            .locks()
            .hold_reentered(
                resource.clone(),
                &Token::from_client(token),
                holder.as_ref(),
                &request.lock(),
                request.max_hold_ms,
                request.on_disconnect,
            )
            .await;
        if let Some(span) = span.as_mut() {
            span.outcome(&events);
            span.set("redlock.reentered", true);
        }
        let (events, closing) = events.map_err(lock_error)?;
        let watch = agent
            .telemetry()
            .watch(caller, resource.kind(), resource.as_str(), span);
        // The connection tells it how to see the client close (see
        // `connection::watch_close`).
        let mut response = ndjson(events, slot, watch);
        response.extensions_mut().insert(closing);
        return Ok(response);
    }
    let mut span = agent.telemetry().start(
        caller,
        "redlock.acquire",
        resource.kind(),
        resource.as_str(),
    );
    let behind = span.as_ref().and_then(|_| holder_here(agent, &resource));
    let ask = Ask {
        lock: request.lock(),
        holder,
    };
    let held = agent.locks().hold(
        resource.clone(),
        ask,
        request.max_hold_ms,
        request.on_disconnect,
    );
    let events = follow(span.as_ref(), pin!(held)).await;
    if let Some(span) = span.as_mut() {
        span.outcome(&events);
        span.acquired(None, behind.as_deref());
        if events.is_ok() {
            if let Some((token, _)) = agent.locks().grants().current(resource.as_str()) {
                agent
                    .locks()
                    .grants()
                    .traced(resource.as_str(), &token, span.trace_id());
            }
        }
    }
    let events = events.map_err(lock_error)?;
    let watch = agent
        .telemetry()
        .watch(caller, resource.kind(), resource.as_str(), span);
    Ok(ndjson(events, slot, watch))
}

/// The value of the grant of `resource` held through this agent, if any:
/// the holder a new request waits behind, where it is known.
fn holder_here(agent: &Agent, resource: &Resource) -> Option<String> {
    agent
        .locks()
        .grants()
        .current(resource.as_str())
        .map(|(token, _)| token)
}

/// Ends an acquire's span with what its rounds saw, and notes its trace
/// on the grant, for the listing.
fn finish_acquire(
    agent: &Agent,
    span: &mut Traced,
    resource: &Resource,
    granted: &Result<Grant, LockError>,
    behind: Option<&str>,
) {
    span.outcome(granted);
    span.acquired(granted.as_ref().ok().and_then(|g| g.fence), behind);
    if let Ok(grant) = granted {
        agent
            .locks()
            .grants()
            .traced(resource.as_str(), grant.token.as_str(), span.trace_id());
    }
}

/// `POST /v1/semaphores/{name}/acquire`: one of the semaphore's permits.
pub async fn acquire_permit(
    agent: &Agent,
    name: Resource,
    holder: Option<Holder>,
    caller: &Caller,
    request: PermitRequest,
) -> Result<Response<Body>, ApiError> {
    let ask = Ask {
        lock: request.lock(),
        holder,
    };
    let mut span = agent
        .telemetry()
        .start(caller, "redlock.acquire", Kind::Permit, name.as_str());
    let acquired = agent.locks().acquire_permit(&name, request.limit, ask);
    let permit = follow(span.as_ref(), pin!(acquired)).await;
    if let Some(span) = span.as_mut() {
        span.outcome(&permit);
        span.acquired(permit.as_ref().ok().and_then(|p| p.grant.fence), None);
        if let Ok(permit) = &permit {
            span.set("redlock.permit", i64::from(permit.index));
            if let Ok(resource) = permit_resource(&name, permit.index) {
                let token = permit.grant.token.as_str();
                let grants = agent.locks().grants();
                grants.traced(resource.as_str(), token, span.trace_id());
            }
        }
    }
    let permit = permit.map_err(lock_error)?;
    let grant = permit.grant;
    Ok(json(
        StatusCode::OK,
        &PermitResponse {
            semaphore: name.to_string(),
            permit: permit.index,
            validity_ms: millis(grant.validity.saturating_sub(grant.granted_at.elapsed())),
            ttl_ms: millis(grant.ttl),
            fence: grant.fence,
            token: grant.token.into_string(),
        },
    ))
}

/// `POST /v1/semaphores/{name}/hold`: a permit held while the stream is
/// open, as a lock's hold.
pub async fn hold_permit(
    agent: &Arc<Agent>,
    name: Resource,
    holder: Option<Holder>,
    caller: &Caller,
    request: PermitHoldRequest,
) -> Result<Response<Body>, ApiError> {
    let slot = agent
        .locks()
        .open_stream(holder.as_ref().map(|h| h.uid))
        .map_err(lock_error)?;
    let ask = Ask {
        lock: request.lock(),
        holder,
    };
    let mut span = agent
        .telemetry()
        .start(caller, "redlock.acquire", Kind::Permit, name.as_str());
    let held = agent.locks().hold_permit(
        &name,
        request.limit,
        ask,
        request.max_hold_ms,
        request.on_disconnect,
    );
    let permit = follow(span.as_ref(), pin!(held)).await;
    if let Some(span) = span.as_mut() {
        span.outcome(&permit);
        span.acquired(permit.as_ref().ok().and_then(|p| p.fence), None);
        if let Ok(permit) = &permit {
            span.set("redlock.permit", i64::from(permit.index));
            let resource = permit.resource.as_str();
            let grants = agent.locks().grants();
            grants.traced(resource, permit.token.as_str(), span.trace_id());
        }
    }
    let permit = permit.map_err(lock_error)?;
    let watch = agent
        .telemetry()
        .watch(caller, Kind::Permit, name.as_str(), span);
    Ok(ndjson(permit.events, slot, watch))
}

// Locks on several resources at once, `POST /v1/locks/{acquire,hold,extend,release}`
// (see [`crate::lock::multi`]).

/// What a request on several resources asks for.
#[derive(Clone, Copy)]
pub enum MultiAction {
    Acquire,
    Hold,
    Extend,
    Release,
}

impl MultiAction {
    /// The action named by the last segment of `/v1/locks/{action}`.
    pub fn named(segment: &str) -> Option<MultiAction> {
        match segment {
            "acquire" => Some(MultiAction::Acquire),
            "hold" => Some(MultiAction::Hold),
            "extend" => Some(MultiAction::Extend),
            "release" => Some(MultiAction::Release),
            _ => None,
        }
    }
}

/// The span's name for several resources: each, in order.
pub(super) fn joined(resources: &[Resource]) -> String {
    let names: Vec<&str> = resources.iter().map(Resource::as_str).collect();
    names.join(",")
}

pub async fn acquire_many(
    agent: &Agent,
    holder: Option<Holder>,
    caller: &Caller,
    request: MultiAcquireRequest,
) -> Result<Response<Body>, ApiError> {
    let resources = multi::resources(&request.resources).map_err(lock_error)?;
    let mut span =
        agent
            .telemetry()
            .start(caller, "redlock.acquire", Kind::Lock, &joined(&resources));
    let ask = Ask {
        lock: request.lock(),
        holder,
    };
    let granted = follow(
        span.as_ref(),
        pin!(agent.locks().acquire_many(&resources, ask)),
    )
    .await;
    if let Some(span) = span.as_mut() {
        span.outcome(&granted);
        span.acquired(granted.as_ref().ok().and_then(|g| g.grants[0].fence), None);
    }
    let granted = granted.map_err(lock_error)?;
    let first = &granted.grants[0];
    Ok(json(
        StatusCode::OK,
        &MultiAcquireResponse {
            resources: resources.iter().map(ToString::to_string).collect(),
            validity_ms: millis(first.validity.saturating_sub(first.granted_at.elapsed())),
            ttl_ms: millis(first.ttl),
            fence: first.fence,
            token: granted.token.into_string(),
        },
    ))
}

pub async fn hold_many(
    agent: &Arc<Agent>,
    holder: Option<Holder>,
    caller: &Caller,
    request: MultiHoldRequest,
) -> Result<Response<Body>, ApiError> {
    let resources = multi::resources(&request.resources).map_err(lock_error)?;
    let slot = agent
        .locks()
        .open_stream(holder.as_ref().map(|h| h.uid))
        .map_err(lock_error)?;
    let name = joined(&resources);
    let mut span = agent
        .telemetry()
        .start(caller, "redlock.acquire", Kind::Lock, &name);
    let ask = Ask {
        lock: request.lock(),
        holder,
    };
    let held = agent
        .locks()
        .hold_many(resources, ask, request.max_hold_ms, request.on_disconnect);
    let events = follow(span.as_ref(), pin!(held)).await;
    if let Some(span) = span.as_mut() {
        span.outcome(&events);
        span.acquired(None, None);
    }
    let events = events.map_err(lock_error)?;
    let watch = agent.telemetry().watch(caller, Kind::Lock, &name, span);
    Ok(ndjson(events, slot, watch))
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
