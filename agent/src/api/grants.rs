//! The handlers of the routes that act on a grant already made: extend
//! and release by its token (of a lock, of several resources at once under
//! one token, of a permit), and an operator's force release of a lock, a
//! permit or a leadership. The routes that take them are
//! [`super::handlers`]'s.

use hyper::{Response, StatusCode};
use redlock_wire::{
    ExtendRequest, ExtendResponse, MultiExtendRequest, MultiReleaseRequest, PermitExtendRequest,
    PermitForceReleaseRequest, PermitReleaseRequest, ReleaseRequest, ReleaseResponse,
};

use super::handlers::{joined, json, lock_error, ApiError, Body};
use crate::agent::Agent;
use crate::lock::semaphores::permit_resource;
use crate::lock::{millis, multi, Extended, Holder, LockError, Released};
use crate::redlock::{Resource, Token};
use crate::telemetry::{Caller, Kind, Traced};

/// Empty body of `force-release`; present so unknown fields are refused.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForceReleaseRequest {}

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
    let resource = agent.locks().grants().as_granted(resource, token.as_str());
    let mut span =
        agent
            .telemetry()
            .start(caller, "redlock.extend", resource.kind(), resource.as_str());
    let extended = agent
        .locks()
        .extend(&resource, &token, request.ttl_ms, holder.as_ref())
        .await;
    extended_answer(span.as_mut(), extended)
}

pub async fn release(
    agent: &Agent,
    resource: Resource,
    holder: Option<Holder>,
    caller: &Caller,
    request: ReleaseRequest,
) -> Result<Response<Body>, ApiError> {
    let token = Token::from_client(request.token);
    let resource = agent.locks().grants().as_granted(resource, token.as_str());
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
    extended_answer(span.as_mut(), extended)
}

/// An extend's outcome on its span, when it has one, and its answer.
fn extended_answer(
    span: Option<&mut Traced>,
    extended: Result<Extended, LockError>,
) -> Result<Response<Body>, ApiError> {
    if let Some(span) = span {
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

/// `POST /v1/semaphores/{name}/extend`: a permit's extend, by its token
/// (and its number, when the client gives it).
pub async fn extend_permit(
    agent: &Agent,
    name: Resource,
    holder: Option<Holder>,
    caller: &Caller,
    request: PermitExtendRequest,
) -> Result<Response<Body>, ApiError> {
    let resource = permit_named(agent, &name, request.permit, &request.token)?;
    let request = ExtendRequest {
        token: request.token,
        ttl_ms: request.ttl_ms,
    };
    extend(agent, resource, holder, caller, request).await
}

/// `POST /v1/semaphores/{name}/release`: a permit's release, by its token
/// (and its number, when the client gives it).
pub async fn release_permit(
    agent: &Agent,
    name: Resource,
    holder: Option<Holder>,
    caller: &Caller,
    request: PermitReleaseRequest,
) -> Result<Response<Body>, ApiError> {
    let resource = permit_named(agent, &name, request.permit, &request.token)?;
    let request = ReleaseRequest {
        token: request.token,
    };
    release(agent, resource, holder, caller, request).await
}

/// `POST /v1/semaphores/{name}/force-release` of one permit, by an
/// operator (on the admin socket: the routing checks).
pub async fn force_release_permit(
    agent: &Agent,
    name: Resource,
    holder: Option<Holder>,
    caller: &Caller,
    request: PermitForceReleaseRequest,
) -> Result<Response<Body>, ApiError> {
    let resource = permit_resource(&name, request.permit).map_err(lock_error)?;
    force_release(agent, &resource, holder, caller).await
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
