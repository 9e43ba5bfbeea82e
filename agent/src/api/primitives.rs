//! The semaphore routes' handlers: requests to the lock service's
//! semaphores and back, as [`super::routes`] does for locks (whose extend
//! and release they share: a permit is a lock of its own). The election
//! routes need no more than a line each and stay in [`super::routes`].

use std::sync::Arc;

use hyper::{Response, StatusCode};
use redlock_wire::{
    ExtendRequest, PermitExtendRequest, PermitHoldRequest, PermitReleaseRequest, PermitRequest,
    PermitResponse, ReleaseRequest,
};

use super::routes::{self, json, lock_error, ndjson, parse_body, ApiError, Body, LockAction};
use crate::agent::Agent;
use crate::lock::semaphores::permit_resource;
use crate::lock::{millis, Ask, Holder};
use crate::redlock::Resource;

/// `POST /v1/semaphores/{name}/{acquire,extend,release,hold}`.
pub(super) async fn semaphore(
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
            Ok(ndjson(events))
        }
        LockAction::Extend => {
            let request: PermitExtendRequest = parse_body(body, false)?;
            let resource = permit_resource(&name, request.permit).map_err(lock_error)?;
            let extend = ExtendRequest {
                token: request.token,
                ttl_ms: request.ttl_ms,
            };
            routes::extend(agent, resource, holder, extend).await
        }
        LockAction::Release => {
            let request: PermitReleaseRequest = parse_body(body, false)?;
            let resource = permit_resource(&name, request.permit).map_err(lock_error)?;
            let release = ReleaseRequest {
                token: request.token,
            };
            routes::release(agent, resource, holder, release).await
        }
        LockAction::ForceRelease => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            redlock_wire::ErrorCode::NotFound,
            "a semaphore has no force-release",
        )),
    }
}
