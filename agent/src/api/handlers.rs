//! The handlers of the routes that take locks, permits and leadership:
//! a parsed body to a call of the lock service, its outcome to an answer
//! ([`super::reply`]). Routing is [`super::routes`]'s.

use std::sync::Arc;

use hyper::{Response, StatusCode};
use redlock_wire::{
    AcquireRequest, AcquireResponse, ExtendRequest, ExtendResponse, HoldRequest,
    PermitExtendRequest, PermitForceReleaseRequest, PermitHoldRequest, PermitReleaseRequest,
    PermitRequest, PermitResponse, ReleaseRequest, ReleaseResponse,
};

use super::reply::{json, lock_error, ndjson, parse_body, ApiError, Body};
use crate::agent::Agent;
use crate::lock::semaphores::permit_resource;
use crate::lock::{millis, Ask, Holder, Released};
use crate::redlock::{Resource, Token};

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
pub struct ForceReleaseRequest {}

/// `POST /v1/locks/{resource}/hold`: a 200 NDJSON stream that stays open
/// while the lock is held (see [`crate::lock::holds`]), one event per line.
pub async fn hold(
    agent: &Arc<Agent>,
    resource: Resource,
    holder: Option<Holder>,
    request: HoldRequest,
) -> Result<Response<Body>, ApiError> {
    let slot = agent
        .locks()
        .open_stream(holder.as_ref().map(|h| h.uid))
        .map_err(lock_error)?;
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
        return Ok(ndjson(events, slot));
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
    Ok(ndjson(events, slot))
}

pub async fn extend(
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

pub async fn release(
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

/// `POST /v1/semaphores/{name}/{acquire,extend,release,hold}`, and
/// `force-release` of one permit (on the admin socket: the routing checks).
pub async fn semaphore(
    agent: &Arc<Agent>,
    name: Resource,
    action: LockAction,
    holder: Option<Holder>,
    body: &[u8],
) -> Result<Response<Body>, ApiError> {
    match action {
        LockAction::Acquire => {
            let request: PermitRequest = parse_body(body, false)?;
            let ask = Ask {
                lock: request.lock(),
                holder,
            };
            let permit = agent
                .locks()
                .acquire_permit(&name, request.limit, ask)
                .await
                .map_err(lock_error)?;
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
            let events = agent
                .locks()
                .hold_permit(
                    &name,
                    request.limit,
                    ask,
                    request.max_hold_ms,
                    request.on_disconnect,
                )
                .await
                .map_err(lock_error)?;
            Ok(ndjson(events, slot))
        }
        LockAction::Extend => {
            let request: PermitExtendRequest = parse_body(body, false)?;
            let resource = permit_resource(&name, request.permit).map_err(lock_error)?;
            let request = ExtendRequest {
                token: request.token,
                ttl_ms: request.ttl_ms,
            };
            extend(agent, resource, holder, request).await
        }
        LockAction::Release => {
            let request: PermitReleaseRequest = parse_body(body, false)?;
            let resource = permit_resource(&name, request.permit).map_err(lock_error)?;
            let request = ReleaseRequest {
                token: request.token,
            };
            release(agent, resource, holder, request).await
        }
        LockAction::ForceRelease => {
            let request: PermitForceReleaseRequest = parse_body(body, false)?;
            let resource = permit_resource(&name, request.permit).map_err(lock_error)?;
            Ok(json(
                StatusCode::OK,
                &agent.locks().force_release(&resource, holder).await,
            ))
        }
    }
}
