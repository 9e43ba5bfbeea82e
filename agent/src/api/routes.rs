//! Routing and handlers: turn HTTP requests into calls of the lock service
//! ([`crate::lock::Locks`]) and its outcomes into JSON answers, and nothing
//! more. Every answer, errors included, is JSON with a code.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, Limited, StreamBody};
use hyper::body::Frame;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use redlock_wire::{
    AcquireRequest, AcquireResponse, ErrorBody, ErrorCode, ErrorResponse, ExtendRequest,
    ExtendResponse, HoldRequest, ReleaseRequest, ReleaseResponse,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::peer::Peer;
use crate::agent::Agent;
use crate::lock::listing::{self, ListQuery, ReadError};
use crate::lock::waiters::WaitError;
use crate::lock::Holder;
use crate::lock::{millis, Ask, LockError, Released};
use crate::redlock::{Resource, Token};

/// Largest request body read.
pub const MAX_BODY: usize = 64 * 1024;

/// Response body type of every route (streaming routes will need more than
/// a full buffer).
pub type Body = BoxBody<Bytes, Infallible>;

/// Which listener a request came in on. The TCP listener serves probes and
/// metrics only; locks are taken on the application socket; force release
/// is served only on the admin socket; the read-only views on both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    Socket,
    Admin,
    Metrics,
}

/// A failed request: the status and the JSON error.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: ErrorCode,
    message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
        }
    }

    fn invalid(message: impl Into<String>) -> ApiError {
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
        response
    }
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

/// The routes, as (method, what the path names).
enum Route {
    Healthz,
    Readyz,
    Metrics,
    Nodes,
    Leaks,
    Locks,
    Summary,
    /// `GET /v1/locks/{resource}`: one lock in full.
    LockInfo(Resource),
    Lock(Resource, LockAction),
    /// `GET /v1/semaphores/{name}`: its held permits.
    SemaphoreInfo(Resource),
    /// `acquire`, `extend`, `release` or `hold` of a permit.
    Semaphore(Resource, LockAction),
    /// `GET /v1/elections/{name}`: its leader.
    Leader(Resource),
    /// `GET /v1/elections/{name}/observe`.
    Observe(Resource),
    /// `POST /v1/elections/{name}/campaign`.
    Campaign(Resource),
}

#[derive(Clone, Copy)]
pub(super) enum LockAction {
    Acquire,
    Extend,
    Release,
    Hold,
    ForceRelease,
}

/// Entry point for every request on either listener.
pub async fn handle(
    agent: Arc<Agent>,
    surface: Surface,
    peer: Option<Peer>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let label = route_label(request.uri().path());
    let response = match dispatch(&agent, surface, peer, request).await {
        Ok(response) => response,
        Err(error) => error.into_response(),
    };
    agent
        .metrics()
        .api_requests
        .with_label_values(&[label, response.status().as_str()])
        .inc();
    Ok(response)
}

/// The route's name for metrics: a closed set, never the resource.
fn route_label(path: &str) -> &'static str {
    match path {
        "/healthz" => "healthz",
        "/readyz" => "readyz",
        "/metrics" => "metrics",
        "/v1/nodes" => "nodes",
        "/v1/leaks" => "leaks",
        "/v1/locks" => "locks",
        "/v1/summary" => "summary",
        _ if path.starts_with("/v1/locks/") && path.matches('/').count() == 3 => "lock",
        _ if path.starts_with("/v1/semaphores/") && path.matches('/').count() == 3 => "semaphore",
        _ if path.starts_with("/v1/semaphores/") => match path.rsplit('/').next() {
            Some("acquire") => "permit_acquire",
            Some("extend") => "permit_extend",
            Some("release") => "permit_release",
            Some("hold") => "permit_hold",
            _ => "unknown",
        },
        _ if path.starts_with("/v1/elections/") && path.matches('/').count() == 3 => "leader",
        _ if path.starts_with("/v1/elections/") => match path.rsplit('/').next() {
            Some("campaign") => "campaign",
            Some("observe") => "observe",
            _ => "unknown",
        },
        _ if path.starts_with("/v1/locks/") => match path.rsplit('/').next() {
            Some("acquire") => "acquire",
            Some("extend") => "extend",
            Some("release") => "release",
            Some("hold") => "hold",
            Some("force-release") => "force_release",
            _ => "unknown",
        },
        _ => "unknown",
    }
}

async fn dispatch(
    agent: &Arc<Agent>,
    surface: Surface,
    peer: Option<Peer>,
    request: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let (route, allowed) = route(surface, request.uri().path())?;
    let holder = peer.map(|p| Holder {
        pid: p.pid,
        uid: p.uid,
        gid: p.gid,
        pod: p.pod,
    });
    if request.method() != allowed {
        let mut response = ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::MethodNotAllowed,
            format!(
                "{} {} is not allowed; use {allowed}",
                request.method(),
                request.uri().path()
            ),
        )
        .into_response();
        response.headers_mut().insert(
            ALLOW,
            HeaderValue::from_str(allowed.as_str()).expect("method names are valid headers"),
        );
        return Ok(response);
    }
    check_surface(agent, surface, &route)?;
    match route {
        Route::Healthz => Ok(json(StatusCode::OK, &serde_json::json!({"status": "ok"}))),
        Route::Readyz => {
            agent.fresh().await;
            let nodes = agent.nodes();
            let status = if nodes.available {
                StatusCode::OK
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            let mut body = serde_json::json!({
                "ready": nodes.available,
                "usable": nodes.usable,
                "quorum": nodes.quorum,
                "slots_without_quorum": nodes.slots_without_quorum,
            });
            if let Some(reason) = nodes.reason {
                body["reason"] = reason.into();
            }
            Ok(json(status, &body))
        }
        Route::Nodes => {
            agent.fresh().await;
            Ok(json(StatusCode::OK, &agent.nodes()))
        }
        Route::Leaks => Ok(json(StatusCode::OK, &agent.scanner().report())),
        Route::Locks => {
            let query = ListQuery::parse(request.uri().query())
                .map_err(|e| ApiError::invalid(e.to_string()))?;
            let answer = listing::list(agent.locks(), &query)
                .await
                .map_err(read_error)?;
            Ok(json(StatusCode::OK, &answer))
        }
        Route::LockInfo(resource) => {
            let answer = listing::get(agent.locks(), &resource)
                .await
                .map_err(read_error)?;
            Ok(json(StatusCode::OK, &answer))
        }
        Route::Summary => {
            agent.fresh().await;
            Ok(json(StatusCode::OK, &agent.summary()))
        }
        Route::Metrics => {
            agent.fresh().await;
            let mut response = Response::new(Full::new(Bytes::from(agent.scrape())).boxed());
            response.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            Ok(response)
        }
        Route::SemaphoreInfo(name) => {
            let answer = agent.locks().semaphore(&name).await.map_err(read_error)?;
            Ok(json(StatusCode::OK, &answer))
        }
        Route::Leader(name) => match agent.locks().leader(&name).await.map_err(read_error)? {
            Some(leader) => Ok(json(StatusCode::OK, &leader)),
            None => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::NoLeader,
                format!("no campaigner leads election {name} now"),
            )),
        },
        Route::Observe(name) => Ok(ndjson(agent.locks().observe(name))),
        Route::Semaphore(name, action) => {
            let body = read_body(request, agent.config().socket.request_timeout).await?;
            super::primitives::semaphore(agent, name, action, holder, &body).await
        }
        Route::Campaign(name) => {
            let body = read_body(request, agent.config().socket.request_timeout).await?;
            let request = parse_body(&body, true)?;
            let events = agent
                .locks()
                .campaign(name, request, holder)
                .map_err(lock_error)?;
            Ok(ndjson(events))
        }
        Route::Lock(resource, action) => {
            let body = read_body(request, agent.config().socket.request_timeout).await?;
            match action {
                LockAction::Acquire => {
                    acquire(agent, resource, holder, parse_body(&body, true)?).await
                }
                LockAction::Extend => {
                    extend(agent, resource, holder, parse_body(&body, false)?).await
                }
                LockAction::Release => {
                    release(agent, resource, holder, parse_body(&body, false)?).await
                }
                LockAction::Hold => hold(agent, resource, holder, parse_body(&body, true)?).await,
                LockAction::ForceRelease => {
                    let _: ForceReleaseRequest = parse_body(&body, true)?;
                    Ok(json(
                        StatusCode::OK,
                        &agent.locks().force_release(&resource, holder).await,
                    ))
                }
            }
        }
    }
}

/// Force release only on the admin socket; lock operations only on the
/// application socket.
fn check_surface(agent: &Agent, surface: Surface, route: &Route) -> Result<(), ApiError> {
    let forbidden = |message: String| {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            message,
        ))
    };
    match (surface, route) {
        (Surface::Socket, Route::Lock(_, LockAction::ForceRelease)) => forbidden(format!(
            "force-release is served only on the admin socket ({}, admin.socket.path)",
            agent.config().admin.socket.path.display()
        )),
        (Surface::Admin, Route::Semaphore(..) | Route::Campaign(_)) => forbidden(format!(
            "permits and leadership are taken on the application socket ({}, socket.path); the admin socket serves views and force-release",
            agent.config().socket.path.display()
        )),
        (Surface::Admin, Route::Lock(_, action)) if !matches!(action, LockAction::ForceRelease) => {
            forbidden(format!(
                "locks are taken on the application socket ({}, socket.path); the admin socket serves views and force-release",
                agent.config().socket.path.display()
            ))
        }
        _ => Ok(()),
    }
}

fn route(surface: Surface, path: &str) -> Result<(Route, Method), ApiError> {
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            ErrorCode::NotFound,
            format!("no such endpoint: {path}"),
        )
    };
    match path {
        "/healthz" => return Ok((Route::Healthz, Method::GET)),
        "/readyz" => return Ok((Route::Readyz, Method::GET)),
        "/metrics" => return Ok((Route::Metrics, Method::GET)),
        _ if surface == Surface::Metrics => return Err(not_found()),
        "/v1/nodes" => return Ok((Route::Nodes, Method::GET)),
        "/v1/leaks" => return Ok((Route::Leaks, Method::GET)),
        "/v1/locks" => return Ok((Route::Locks, Method::GET)),
        "/v1/summary" => return Ok((Route::Summary, Method::GET)),
        _ => {}
    }
    if let Some(rest) = path.strip_prefix("/v1/semaphores/") {
        let Some((segment, action)) = rest.rsplit_once('/') else {
            return Ok((Route::SemaphoreInfo(resource(rest)?), Method::GET));
        };
        let action = match action {
            "acquire" => LockAction::Acquire,
            "extend" => LockAction::Extend,
            "release" => LockAction::Release,
            "hold" => LockAction::Hold,
            _ => return Err(not_found()),
        };
        return Ok((
            Route::Semaphore(one_segment(segment)?, action),
            Method::POST,
        ));
    }
    if let Some(rest) = path.strip_prefix("/v1/elections/") {
        return match rest.rsplit_once('/') {
            None => Ok((Route::Leader(resource(rest)?), Method::GET)),
            Some((segment, "observe")) => Ok((Route::Observe(one_segment(segment)?), Method::GET)),
            Some((segment, "campaign")) => {
                Ok((Route::Campaign(one_segment(segment)?), Method::POST))
            }
            Some(_) => Err(not_found()),
        };
    }
    let rest = path.strip_prefix("/v1/locks/").ok_or_else(not_found)?;
    let Some((segment, action)) = rest.rsplit_once('/') else {
        return Ok((Route::LockInfo(resource(rest)?), Method::GET));
    };
    let action = match action {
        "acquire" => LockAction::Acquire,
        "extend" => LockAction::Extend,
        "release" => LockAction::Release,
        "hold" => LockAction::Hold,
        "force-release" => LockAction::ForceRelease,
        _ => return Err(not_found()),
    };
    Ok((Route::Lock(one_segment(segment)?, action), Method::POST))
}

/// The resource (or semaphore, or election) before an action: one path
/// segment.
fn one_segment(segment: &str) -> Result<Resource, ApiError> {
    if segment.contains('/') {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidResource,
            "a resource is one path segment; percent-encode '/' as %2F",
        ));
    }
    resource(segment)
}

/// The resource named by one percent-encoded path segment.
fn resource(segment: &str) -> Result<Resource, ApiError> {
    Resource::from_path_segment(segment).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidResource,
            e.to_string(),
        )
    })
}

/// An operator read that has no answer: 429 with `Retry-After` when busy,
/// 503 when too few masters answered, 404 for a lock no master has.
fn read_error(error: ReadError) -> ApiError {
    let (status, code) = match &error {
        ReadError::Busy => (StatusCode::TOO_MANY_REQUESTS, ErrorCode::Busy),
        ReadError::TooFewRead { .. } => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::NoQuorum),
        ReadError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
    };
    ApiError::new(status, code, error.to_string())
}

async fn read_body(request: Request<Incoming>, timeout: Duration) -> Result<Bytes, ApiError> {
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::BodyTooLarge,
            format!("request bodies are limited to {MAX_BODY} bytes"),
        )
    };
    let declared = request
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(too_large());
    }
    let collect = Limited::new(request.into_body(), MAX_BODY).collect();
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
pub(super) fn parse_body<T: DeserializeOwned>(body: &[u8], empty_ok: bool) -> Result<T, ApiError> {
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
pub(super) fn lock_error(error: LockError) -> ApiError {
    let (status, code) = match &error {
        LockError::TtlOutOfRange { .. } => (StatusCode::BAD_REQUEST, ErrorCode::TtlOutOfRange),
        LockError::InvalidOwner | LockError::Invalid(_) => {
            (StatusCode::BAD_REQUEST, ErrorCode::InvalidRequest)
        }
        LockError::Taken(_) => (StatusCode::CONFLICT, ErrorCode::Taken),
        LockError::LimitMismatch { .. } => (StatusCode::CONFLICT, ErrorCode::LimitMismatch),
        LockError::Lost(_) => (StatusCode::CONFLICT, ErrorCode::Lost),
        LockError::NotReentrant(_) => (StatusCode::CONFLICT, ErrorCode::NotReentrant),
        LockError::ReentryForbidden(_) | LockError::Isolated { .. } => {
            (StatusCode::FORBIDDEN, ErrorCode::Forbidden)
        }
        LockError::NoQuorum(_) => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::NoQuorum),
        LockError::Wait(WaitError::TooManyWaiters(_) | WaitError::TooManyWaitersPerUid { .. }) => {
            (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::TooManyWaiters)
        }
        LockError::Wait(WaitError::ShuttingDown) => {
            (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::ShuttingDown)
        }
    };
    ApiError::new(status, code, error.to_string())
}

async fn acquire(
    agent: &Agent,
    resource: Resource,
    holder: Option<Holder>,
    request: AcquireRequest,
) -> Result<Response<Body>, ApiError> {
    if let Some(token) = request.token.clone() {
        let reentered = agent
            .locks()
            .reenter(
                &resource,
                &Token::from_client(token),
                holder.as_ref(),
                &request,
            )
            .await
            .map_err(lock_error)?;
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
            },
        ));
    }
    let ask = Ask {
        lock: request,
        holder,
    };
    let grant = agent
        .locks()
        .acquire(&resource, ask)
        .await
        .map_err(lock_error)?;
    Ok(json(
        StatusCode::OK,
        &AcquireResponse {
            resource: resource.to_string(),
            validity_ms: millis(grant.validity.saturating_sub(grant.granted_at.elapsed())),
            ttl_ms: millis(grant.ttl),
            fence: grant.fence,
            token: grant.token.into_string(),
            hold_count: None,
        },
    ))
}

/// Empty body of `force-release`; present so unknown fields are refused.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ForceReleaseRequest {}

/// `POST /v1/locks/{resource}/hold`: a 200 NDJSON stream that stays open
/// while the lock is held (see [`crate::lock::holds`]), one event per line.
async fn hold(
    agent: &Arc<Agent>,
    resource: Resource,
    holder: Option<Holder>,
    request: HoldRequest,
) -> Result<Response<Body>, ApiError> {
    if let Some(token) = request.token.clone() {
        let events = agent
            .locks()
            .hold_reentered(
                resource,
                &Token::from_client(token),
                holder.as_ref(),
                &request.lock(),
                request.max_hold_ms,
                request.on_disconnect,
            )
            .await
            .map_err(lock_error)?;
        return Ok(ndjson(events));
    }
    let ask = Ask {
        lock: request.lock(),
        holder,
    };
    let events = agent
        .locks()
        .hold(resource, ask, request.max_hold_ms, request.on_disconnect)
        .await
        .map_err(lock_error)?;
    Ok(ndjson(events))
}

/// A 200 `application/x-ndjson` stream of `events`, one per line, open
/// until the sender ends it. Dropping the stream (the connection closed)
/// drops the receiver: a hold ends, a campaign resigns, an observer stops.
pub(super) fn ndjson<T: Serialize + Send + 'static>(
    events: tokio::sync::mpsc::Receiver<T>,
) -> Response<Body> {
    let body = futures::stream::unfold(events, |mut events| async move {
        let event = events.recv().await?;
        Some((Ok::<_, Infallible>(Frame::data(line(&event))), events))
    });
    let mut response = Response::new(BodyExt::boxed(StreamBody::new(body)));
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    response
}

/// One event as an NDJSON line.
fn line<T: Serialize>(event: &T) -> Bytes {
    // Cannot fail: the events are plain strings and numbers.
    let mut bytes = serde_json::to_vec(event).expect("events serialize");
    bytes.push(b'\n');
    Bytes::from(bytes)
}

pub(super) async fn extend(
    agent: &Agent,
    resource: Resource,
    holder: Option<Holder>,
    request: ExtendRequest,
) -> Result<Response<Body>, ApiError> {
    let token = Token::from_client(request.token);
    let extended = agent
        .locks()
        .extend(&resource, &token, request.ttl_ms, holder.as_ref())
        .await
        .map_err(lock_error)?;
    Ok(json(
        StatusCode::OK,
        &ExtendResponse {
            validity_ms: millis(extended.validity),
            ttl_ms: millis(extended.ttl),
        },
    ))
}

pub(super) async fn release(
    agent: &Agent,
    resource: Resource,
    holder: Option<Holder>,
    request: ReleaseRequest,
) -> Result<Response<Body>, ApiError> {
    let token = Token::from_client(request.token);
    let released = agent
        .locks()
        .release(&resource, &token, holder.as_ref())
        .await
        .map_err(lock_error)?;
    let answer = match released {
        Released::Released => ReleaseResponse {
            released: true,
            hold_count: None,
        },
        Released::NotHeld => ReleaseResponse {
            released: false,
            hold_count: None,
        },
        Released::StillHeld(count) => ReleaseResponse {
            released: false,
            hold_count: Some(count),
        },
    };
    Ok(json(StatusCode::OK, &answer))
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
