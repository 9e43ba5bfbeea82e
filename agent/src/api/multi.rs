//! The handlers of locks on several resources at once,
//! `POST /v1/locks/{acquire,hold,extend,release}` (see
//! [`crate::lock::multi`]): a parsed body to the lock service and back.

use std::sync::Arc;

use hyper::{Response, StatusCode};
use redlock_wire::{
    ExtendResponse, MultiAcquireRequest, MultiAcquireResponse, MultiExtendRequest,
    MultiHoldRequest, MultiReleaseRequest, ReleaseResponse,
};

use super::reply::{json, lock_error, ndjson, ApiError, Body};
use crate::agent::Agent;
use crate::lock::{millis, multi, Ask, Holder, Released};
use crate::redlock::{Resource, Token};
use crate::telemetry::spans::follow;
use crate::telemetry::{Caller, Kind, Traced};

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
fn named(resources: &[Resource]) -> String {
    let names: Vec<&str> = resources.iter().map(Resource::as_str).collect();
    names.join(",")
}

pub async fn acquire(
    agent: &Agent,
    holder: Option<Holder>,
    caller: &Caller,
    request: MultiAcquireRequest,
) -> Result<Response<Body>, ApiError> {
    let resources = multi::resources(&request.resources).map_err(lock_error)?;
    let mut span =
        agent
            .telemetry()
            .start(caller, "redlock.acquire", Kind::Lock, &named(&resources));
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

pub async fn hold(
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
    let name = named(&resources);
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
        .start(caller, name, Kind::Lock, &named(&resources));
    Ok((parts, span))
}

pub async fn extend(
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

pub async fn release(
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
    if let Some(span) = span.as_mut() {
        span.outcome(&released);
        if let Ok(released) = &released {
            span.set("redlock.released", matches!(released, Released::Released));
        }
    }
    let released = released.map_err(lock_error)?;
    Ok(json(
        StatusCode::OK,
        &ReleaseResponse {
            released: released == Released::Released,
            hold_count: None,
        },
    ))
}
