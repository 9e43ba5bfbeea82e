//! Routing: which route a request names, on which listener it may be
//! served, and the read-only views; the routes that take locks, permits
//! and leadership go to [`super::handlers`], those that act on a grant
//! already made to [`super::grants`]. Every answer, errors included, is
//! JSON with a code ([`super::handlers`] writes them).

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode};
use redlock_wire::ErrorCode;

use super::grants::{self, extend, release, ForceReleaseRequest};
pub use super::handlers::Body;
use super::handlers::{
    self, acquire, closing, hold, json, lock_error, ndjson, parse_body, read_body, ApiError,
    LockAction, MultiAction,
};
use super::openapi;
use super::peer::Peer;
use crate::agent::Agent;
use crate::lock::listing::{self, ListQuery, ReadError};
use crate::lock::Holder;
use crate::redlock::Resource;
use crate::telemetry::{Caller, Kind};

/// Which listener a request came in on. The TCP listener serves probes and
/// metrics only; locks are taken on the application socket; force release
/// is served only on the admin socket; the read-only views on both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    Socket,
    Admin,
    Metrics,
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
    /// `GET /v1/openapi.json`: the API's document with this agent's bounds.
    OpenApi,
    /// `GET /v1/locks/{resource}`: one lock in full.
    LockInfo(Resource),
    Lock(Resource, LockAction),
    /// `POST /v1/locks/{acquire,hold,extend,release}`: a lock on several
    /// resources, named in the body.
    Multi(MultiAction),
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
    /// `POST /v1/elections/{name}/force-release`: an operator ends the
    /// leadership, whoever holds it (admin socket only).
    ForceResign(Resource),
}

impl Route {
    /// Whether the route reads the request's body (the `POST` routes); the
    /// others answer from the head alone.
    fn takes_body(&self) -> bool {
        matches!(
            self,
            Route::Lock(..)
                | Route::Multi(_)
                | Route::Semaphore(..)
                | Route::Campaign(_)
                | Route::ForceResign(_)
        )
    }
}

/// Entry point for every request on either listener.
///
/// One request, one answer: the request's body is read (within
/// [`super::handlers::MAX_BODY`] and `socket.request_timeout`) before any
/// answer, even one that needs nothing from it (the wrong socket, no such
/// route, the wrong method, a malformed resource), since a body left on
/// the connection would be parsed as the next request. A body that cannot
/// be read (too large, late, broken) gets its answer with
/// `connection: close` ([`super::handlers::closing`]): the body's error, or,
/// for a route that reads no body (a `GET`), the route's own answer.
pub async fn handle(
    agent: Arc<Agent>,
    surface: Surface,
    peer: Option<Peer>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let label = route_label(request.method(), request.uri().path());
    let (parts, body) = request.into_parts();
    let routed = route_request(&agent, surface, &parts);
    let body = read_body(&parts.headers, body, agent.config().socket.request_timeout).await;
    let response = match (routed, body) {
        (Ok(route), Ok(body)) => {
            // The caller's trace, when tracing is on: the spans made while
            // serving it are its children.
            let caller = agent.telemetry().caller(&parts.headers);
            dispatch(&agent, route, &parts, peer, &caller, body)
                .await
                .unwrap_or_else(ApiError::into_response)
        }
        (Err(early), Ok(_)) => early.into_response(),
        (Err(early), Err(_)) => closing(early.into_response()),
        (Ok(route), Err(error)) if route.takes_body() => closing(error.into_response()),
        // A route that reads nothing from a body answers as it would
        // without one.
        (Ok(route), Err(_)) => closing(
            match dispatch(
                &agent,
                route,
                &parts,
                peer,
                &Caller::default(),
                Bytes::new(),
            )
            .await
            {
                Ok(response) => response,
                Err(error) => error.into_response(),
            },
        ),
    };
    agent
        .metrics()
        .api_requests
        .with_label_values(&[label, response.status().as_str()])
        .inc();
    Ok(response)
}

/// The route's name for metrics: a closed set, never the resource.
fn route_label(method: &Method, path: &str) -> &'static str {
    match path {
        "/v1/locks/acquire" if method == Method::POST => "multi_acquire",
        "/v1/locks/hold" if method == Method::POST => "multi_hold",
        "/v1/locks/extend" if method == Method::POST => "multi_extend",
        "/v1/locks/release" if method == Method::POST => "multi_release",
        "/healthz" => "healthz",
        "/readyz" => "readyz",
        "/metrics" => "metrics",
        "/v1/nodes" => "nodes",
        "/v1/leaks" => "leaks",
        "/v1/locks" => "locks",
        "/v1/summary" => "summary",
        "/v1/openapi.json" => "openapi",
        _ if path.starts_with("/v1/locks/") && path.matches('/').count() == 3 => "lock",
        _ if path.starts_with("/v1/semaphores/") && path.matches('/').count() == 3 => "semaphore",
        _ if path.starts_with("/v1/semaphores/") => match path.rsplit('/').next() {
            Some("acquire") => "permit_acquire",
            Some("extend") => "permit_extend",
            Some("release") => "permit_release",
            Some("hold") => "permit_hold",
            Some("force-release") => "permit_force_release",
            _ => "unknown",
        },
        _ if path.starts_with("/v1/elections/") && path.matches('/').count() == 3 => "leader",
        _ if path.starts_with("/v1/elections/") => match path.rsplit('/').next() {
            Some("campaign") => "campaign",
            Some("observe") => "observe",
            Some("force-release") => "leader_force_release",
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

/// The route a request names, if it may be served on `surface` with its
/// method; otherwise its error (404, 400, 405 or 403), which needs nothing
/// from the body.
fn route_request(agent: &Agent, surface: Surface, parts: &Parts) -> Result<Route, ApiError> {
    let path = parts.uri.path();
    let (route, allowed) = route(surface, &parts.method, path)?;
    if parts.method != allowed {
        return Err(ApiError::method_not_allowed(&parts.method, path, allowed));
    }
    check_surface(agent, surface, &route)?;
    Ok(route)
}

/// Serves `route`, whose request's head is `parts` and whose body,
/// read whole, is `body`.
async fn dispatch(
    agent: &Arc<Agent>,
    route: Route,
    parts: &Parts,
    peer: Option<Peer>,
    caller: &Caller,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    let holder = peer.map(|p| Holder {
        pid: p.pid,
        uid: p.uid,
        gid: p.gid,
        pod: p.pod,
    });
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
            let query = ListQuery::parse(parts.uri.query())
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
        Route::OpenApi => match openapi::served(agent.config()) {
            Ok(document) => Ok(json(StatusCode::OK, &document)),
            Err(e) => Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::Internal,
                e,
            )),
        },
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
        Route::Leader(name) => match agent.locks().read_leader(&name).await.map_err(read_error)? {
            Some(leader) => Ok(json(StatusCode::OK, &leader)),
            None => Err(ApiError::new(
                StatusCode::NOT_FOUND,
                ErrorCode::NoLeader,
                format!("no campaigner leads election {name} now"),
            )),
        },
        Route::Observe(name) => {
            let slot = agent
                .locks()
                .open_stream(holder.as_ref().map(|h| h.uid))
                .map_err(lock_error)?;
            Ok(ndjson(agent.locks().observe(name), slot, None))
        }
        Route::Semaphore(name, action) => match action {
            LockAction::Acquire => {
                let request = parse_body(&body, false)?;
                handlers::acquire_permit(agent, name, holder, caller, request).await
            }
            LockAction::Hold => {
                let request = parse_body(&body, false)?;
                handlers::hold_permit(agent, name, holder, caller, request).await
            }
            LockAction::Extend => {
                let request = parse_body(&body, false)?;
                grants::extend_permit(agent, name, holder, caller, request).await
            }
            LockAction::Release => {
                let request = parse_body(&body, false)?;
                grants::release_permit(agent, name, holder, caller, request).await
            }
            LockAction::ForceRelease => {
                let request = parse_body(&body, false)?;
                grants::force_release_permit(agent, name, holder, caller, request).await
            }
        },
        Route::ForceResign(name) => {
            let _: ForceReleaseRequest = parse_body(&body, true)?;
            let election = Resource::election(&name);
            grants::force_release(agent, &election, holder, caller).await
        }
        Route::Campaign(name) => {
            let request = parse_body(&body, true)?;
            let slot = agent
                .locks()
                .open_stream(holder.as_ref().map(|h| h.uid))
                .map_err(lock_error)?;
            let span = agent.telemetry().start(
                caller,
                "redlock.campaign",
                Kind::Leadership,
                name.as_str(),
            );
            let events = agent
                .locks()
                .campaign(name.clone(), request, holder)
                .map_err(lock_error)?;
            let watch = agent
                .telemetry()
                .watch(caller, Kind::Leadership, name.as_str(), span);
            Ok(ndjson(events, slot, watch))
        }
        Route::Multi(action) => match action {
            MultiAction::Acquire => {
                handlers::acquire_many(agent, holder, caller, parse_body(&body, false)?).await
            }
            MultiAction::Hold => {
                handlers::hold_many(agent, holder, caller, parse_body(&body, false)?).await
            }
            MultiAction::Extend => {
                grants::extend_many(agent, holder, caller, parse_body(&body, false)?).await
            }
            MultiAction::Release => {
                grants::release_many(agent, holder, caller, parse_body(&body, false)?).await
            }
        },
        Route::Lock(resource, action) => match action {
            LockAction::Acquire => {
                acquire(agent, resource, holder, caller, parse_body(&body, true)?).await
            }
            LockAction::Extend => {
                extend(agent, resource, holder, caller, parse_body(&body, false)?).await
            }
            LockAction::Release => {
                release(agent, resource, holder, caller, parse_body(&body, false)?).await
            }
            LockAction::Hold => {
                hold(agent, resource, holder, caller, parse_body(&body, true)?).await
            }
            LockAction::ForceRelease => {
                let _: ForceReleaseRequest = parse_body(&body, true)?;
                grants::force_release(agent, &resource, holder, caller).await
            }
        },
    }
}

/// Force release (of a lock, a permit or a leadership) only on the admin
/// socket; lock, permit and leadership operations only on the application
/// socket.
fn check_surface(agent: &Agent, surface: Surface, route: &Route) -> Result<(), ApiError> {
    let forbidden = |message: String| {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            message,
        ))
    };
    match (surface, route) {
        (
            Surface::Socket,
            Route::Lock(_, LockAction::ForceRelease)
            | Route::Semaphore(_, LockAction::ForceRelease)
            | Route::ForceResign(_),
        ) => forbidden(format!(
            "force-release is served only on the admin socket ({}, admin.socket.path)",
            agent.config().admin.socket.path.display()
        )),
        (Surface::Admin, Route::Semaphore(_, action))
            if !matches!(action, LockAction::ForceRelease) =>
        {
            forbidden(format!(
                "permits and leadership are taken on the application socket ({}, socket.path); the admin socket serves views and force-release",
                agent.config().socket.path.display()
            ))
        }
        (Surface::Admin, Route::Campaign(_)) => forbidden(format!(
            "permits and leadership are taken on the application socket ({}, socket.path); the admin socket serves views and force-release",
            agent.config().socket.path.display()
        )),
        (Surface::Admin, Route::Multi(_)) => forbidden(format!(
            "locks are taken on the application socket ({}, socket.path); the admin socket serves views and force-release",
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

fn route(surface: Surface, method: &Method, path: &str) -> Result<(Route, Method), ApiError> {
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
        "/v1/openapi.json" => return Ok((Route::OpenApi, Method::GET)),
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
            "force-release" => LockAction::ForceRelease,
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
            Some((segment, "force-release")) => {
                Ok((Route::ForceResign(one_segment(segment)?), Method::POST))
            }
            Some(_) => Err(not_found()),
        };
    }
    let rest = path.strip_prefix("/v1/locks/").ok_or_else(not_found)?;
    let Some((segment, action)) = rest.rsplit_once('/') else {
        // `POST /v1/locks/acquire` takes several resources; a `GET` of
        // that path reads the lock named `acquire`.
        if let Some(action) = MultiAction::named(rest).filter(|_| method == Method::POST) {
            return Ok((Route::Multi(action), Method::POST));
        }
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
pub fn read_error(error: ReadError) -> ApiError {
    let (status, code) = match &error {
        ReadError::Busy => (StatusCode::TOO_MANY_REQUESTS, ErrorCode::Busy),
        ReadError::TooFewRead { .. } => (StatusCode::SERVICE_UNAVAILABLE, ErrorCode::NoQuorum),
        ReadError::NotFound(_) => (StatusCode::NOT_FOUND, ErrorCode::NotFound),
    };
    ApiError::new(status, code, error.to_string())
}
