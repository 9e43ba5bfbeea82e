//! The handlers of the routes that take locks (on one resource or on
//! several at once), permits and leadership: a parsed body to a call of
//! the lock service, its outcome to an answer, and the lock service's
//! refusals as answers with their codes ([`lock_error`]). Routing, and
//! what every route reads and answers with, is [`super::routes`]'s.

use std::sync::Arc;

use hyper::{Response, StatusCode};
use redlock_wire::ErrorCode;
use redlock_wire::{
    AcquireRequest, AcquireResponse, ExtendRequest, ExtendResponse, HoldRequest,
    MultiAcquireRequest, MultiAcquireResponse, MultiExtendRequest, MultiHoldRequest,
    MultiReleaseRequest, PermitExtendRequest, PermitForceReleaseRequest, PermitHoldRequest,
    PermitReleaseRequest, PermitRequest, PermitResponse, ReleaseRequest, ReleaseResponse,
};

use super::routes::{json, ndjson, parse_body, ApiError, Body};
use crate::agent::Agent;
use crate::lock::semaphores::permit_resource;
use crate::lock::waiters::WaitError;
use crate::lock::{millis, multi, Ask, Holder, LockError, Released};
use crate::redlock::{Grant, Resource, Token};
use crate::telemetry::spans::follow;
use crate::telemetry::{Caller, Kind, Traced};

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
    if let Some(token) = request.token.clone() {
        let mut span =
            agent
                .telemetry()
                .start(caller, "redlock.acquire", Kind::Lock, resource.as_str());
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
            },
        ));
    }
    let mut span =
        agent
            .telemetry()
            .start(caller, "redlock.acquire", Kind::Lock, resource.as_str());
    let behind = span.as_ref().and_then(|_| holder_here(agent, &resource));
    let ask = Ask {
        lock: request,
        holder,
    };
    let granted = follow(span.as_ref(), agent.locks().acquire(&resource, ask)).await;
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
        },
    ))
}

/// Empty body of `force-release`; present so unknown fields are refused.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForceReleaseRequest {}

/// `POST /v1/locks/{resource}/hold`: a 200 NDJSON stream that stays open
/// while the lock is held (see [`crate::lock::holds`]), one event per line.
pub async fn hold(
    agent: &Arc<Agent>,
    resource: Resource,
    holder: Option<Holder>,
    caller: &Caller,
    request: HoldRequest,
) -> Result<Response<Body>, ApiError> {
    let slot = agent
        .locks()
        .open_stream(holder.as_ref().map(|h| h.uid))
        .map_err(lock_error)?;
    if let Some(token) = request.token.clone() {
        let mut span =
            agent
                .telemetry()
                .start(caller, "redlock.acquire", Kind::Lock, resource.as_str());
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
        let events = events.map_err(lock_error)?;
        let watch = agent
            .telemetry()
            .watch(caller, Kind::Lock, resource.as_str(), span);
        return Ok(ndjson(events, slot, watch));
    }
    let mut span =
        agent
            .telemetry()
            .start(caller, "redlock.acquire", Kind::Lock, resource.as_str());
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
    let events = follow(span.as_ref(), held).await;
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
        .watch(caller, Kind::Lock, resource.as_str(), span);
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

/// `force-release` of a lock, a permit or a leadership, by an operator.
pub async fn force_release(
    agent: &Agent,
    resource: &Resource,
    holder: Option<Holder>,
    caller: &Caller,
) -> Result<Response<Body>, ApiError> {
    let mut span = agent.telemetry().start(
        caller,
        "redlock.force_release",
        resource.kind(),
        resource.as_str(),
    );
    let answer = agent.locks().force_release(resource, holder).await;
    if let Some(span) = span.as_mut() {
        span.set("redlock.deleted", answer.deleted as i64);
    }
    Ok(json(StatusCode::OK, &answer))
}

pub async fn extend(
    agent: &Agent,
    resource: Resource,
    holder: Option<Holder>,
    caller: &Caller,
    request: ExtendRequest,
) -> Result<Response<Body>, ApiError> {
    let token = Token::from_client(request.token);
    let mut span =
        agent
            .telemetry()
            .start(caller, "redlock.extend", resource.kind(), resource.as_str());
    let extended = agent
        .locks()
        .extend(&resource, &token, request.ttl_ms, holder.as_ref())
        .await;
    if let Some(span) = span.as_mut() {
        span.outcome(&extended);
    }
    let extended = extended.map_err(lock_error)?;
    Ok(json(
        StatusCode::OK,
        &ExtendResponse {
            validity_ms: millis(extended.validity),
            ttl_ms: millis(extended.ttl),
        },
    ))
}

pub async fn release(
    agent: &Agent,
    resource: Resource,
    holder: Option<Holder>,
    caller: &Caller,
    request: ReleaseRequest,
) -> Result<Response<Body>, ApiError> {
    let token = Token::from_client(request.token);
    let mut span = agent.telemetry().start(
        caller,
        "redlock.release",
        resource.kind(),
        resource.as_str(),
    );
    let released = agent
        .locks()
        .release(&resource, &token, holder.as_ref())
        .await;
    released_on(span.as_mut(), &released);
    let released = released.map_err(lock_error)?;
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

/// `POST /v1/semaphores/{name}/{acquire,extend,release,hold}`, and
/// `force-release` of one permit (on the admin socket: the routing checks).
pub async fn semaphore(
    agent: &Arc<Agent>,
    name: Resource,
    action: LockAction,
    holder: Option<Holder>,
    caller: &Caller,
    body: &[u8],
) -> Result<Response<Body>, ApiError> {
    match action {
        LockAction::Acquire => {
            let request: PermitRequest = parse_body(body, false)?;
            let ask = Ask {
                lock: request.lock(),
                holder,
            };
            let mut span =
                agent
                    .telemetry()
                    .start(caller, "redlock.acquire", Kind::Permit, name.as_str());
            let acquired = agent.locks().acquire_permit(&name, request.limit, ask);
            let permit = follow(span.as_ref(), acquired).await;
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
        LockAction::Hold => {
            let request: PermitHoldRequest = parse_body(body, false)?;
            let slot = agent
                .locks()
                .open_stream(holder.as_ref().map(|h| h.uid))
                .map_err(lock_error)?;
            let ask = Ask {
                lock: request.lock(),
                holder,
            };
            let mut span =
                agent
                    .telemetry()
                    .start(caller, "redlock.acquire", Kind::Permit, name.as_str());
            let held = agent.locks().hold_permit(
                &name,
                request.limit,
                ask,
                request.max_hold_ms,
                request.on_disconnect,
            );
            let permit = follow(span.as_ref(), held).await;
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
        LockAction::Extend => {
            let request: PermitExtendRequest = parse_body(body, false)?;
            let resource = permit_named(agent, &name, request.permit, &request.token)?;
            let request = ExtendRequest {
                token: request.token,
                ttl_ms: request.ttl_ms,
            };
            extend(agent, resource, holder, caller, request).await
        }
        LockAction::Release => {
            let request: PermitReleaseRequest = parse_body(body, false)?;
            let resource = permit_named(agent, &name, request.permit, &request.token)?;
            let request = ReleaseRequest {
                token: request.token,
            };
            release(agent, resource, holder, caller, request).await
        }
        LockAction::ForceRelease => {
            let request: PermitForceReleaseRequest = parse_body(body, false)?;
            let resource = permit_resource(&name, request.permit).map_err(lock_error)?;
            force_release(agent, &resource, holder, caller).await
        }
    }
}

/// The permit's resource of an extend or a release: the one the request
/// names, or the one its token was made for.
fn permit_named(
    agent: &Agent,
    name: &Resource,
    permit: Option<u32>,
    token: &str,
) -> Result<Resource, ApiError> {
    match permit {
        Some(permit) => permit_resource(name, permit),
        None => agent
            .locks()
            .permit_of(name, &Token::from_client(token.to_string())),
    }
    .map_err(lock_error)
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
fn joined(resources: &[Resource]) -> String {
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
    let granted = follow(span.as_ref(), agent.locks().acquire_many(&resources, ask)).await;
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
    let events = follow(span.as_ref(), held).await;
    if let Some(span) = span.as_mut() {
        span.outcome(&events);
        span.acquired(None, None);
    }
    let events = events.map_err(lock_error)?;
    let watch = agent.telemetry().watch(caller, Kind::Lock, &name, span);
    Ok(ndjson(events, slot, watch))
}

/// The resources and values of the grant of `token` (those `listed` in
/// the request, or those this agent noted), and the span of the request
/// `name`d on them.
fn by_token(
    agent: &Agent,
    caller: &Caller,
    name: &'static str,
    token: &Token,
    listed: Option<Vec<String>>,
) -> Result<(multi::Parts, Option<Traced>), ApiError> {
    let parts = agent
        .locks()
        .parts_of(token, listed.as_deref())
        .map_err(lock_error)?;
    let resources: Vec<Resource> = parts.iter().map(|(r, _)| r.clone()).collect();
    let span = agent
        .telemetry()
        .start(caller, name, Kind::Lock, &joined(&resources));
    Ok((parts, span))
}

pub async fn extend_many(
    agent: &Agent,
    holder: Option<Holder>,
    caller: &Caller,
    request: MultiExtendRequest,
) -> Result<Response<Body>, ApiError> {
    let token = Token::from_client(request.token);
    let (parts, mut span) = by_token(agent, caller, "redlock.extend", &token, request.resources)?;
    let extended = agent
        .locks()
        .extend_many(&parts, request.ttl_ms, holder.as_ref())
        .await;
    if let Some(span) = span.as_mut() {
        span.outcome(&extended);
    }
    let extended = extended.map_err(lock_error)?;
    Ok(json(
        StatusCode::OK,
        &ExtendResponse {
            validity_ms: millis(extended.validity),
            ttl_ms: millis(extended.ttl),
        },
    ))
}

pub async fn release_many(
    agent: &Agent,
    holder: Option<Holder>,
    caller: &Caller,
    request: MultiReleaseRequest,
) -> Result<Response<Body>, ApiError> {
    let token = Token::from_client(request.token);
    let (parts, mut span) = by_token(agent, caller, "redlock.release", &token, request.resources)?;
    let released = agent
        .locks()
        .release_many(&token, &parts, holder.as_ref())
        .await;
    released_on(span.as_mut(), &released);
    let released = released.map_err(lock_error)?;
    Ok(json(
        StatusCode::OK,
        &ReleaseResponse {
            released: released == Released::Released,
            hold_count: None,
        },
    ))
}

/// A release's outcome on its span, when it has one.
fn released_on(span: Option<&mut Traced>, released: &Result<Released, LockError>) {
    if let Some(span) = span {
        span.outcome(released);
        if let Ok(released) = released {
            span.set("redlock.released", matches!(released, Released::Released));
        }
    }
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
