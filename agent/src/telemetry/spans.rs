//! The spans themselves: [`Traced`], one request's span (an acquire, a
//! permit, a campaign, an extend, a release, a force release) with the
//! trail its rounds noted ([`crate::redlock::trail`]); and [`Watch`],
//! which follows a hold's or a campaign's event stream and keeps the span
//! of the hold or leadership from its grant to its release or loss, with
//! `renewed` and `lost` events. Attribute names: `docs/tracing.md`.

use futures::future::Either;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{Span as _, SpanContext, SpanKind, Status, Tracer};
use opentelemetry::{Context, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::{SdkTracer, Span};
use redlock_wire::{CampaignEvent, HoldEvent, ObserveEvent};
use tokio::task::futures::TaskLocalFuture;

use crate::lock::holds::End;
use crate::lock::LockError;
use crate::redlock::observe::VoteLabel;
use crate::redlock::token;
use crate::redlock::trail::{self, Trail};

/// What a span is about, as `redlock.kind`: the resource's kind.
pub use crate::redlock::Kind;

/// One request's span while it is served; ended when dropped.
#[derive(Debug)]
pub struct Traced {
    span: Span,
    trail: Arc<Trail>,
    kind: Kind,
}

impl Traced {
    pub(super) fn new(span: Span, kind: Kind) -> Traced {
        Traced {
            span,
            trail: Arc::default(),
            kind,
        }
    }

    pub fn span_context(&self) -> SpanContext {
        self.span.span_context().clone()
    }

    /// The trace id, which `GET /v1/locks/{resource}` shows (as 32 hex
    /// digits) for the grant it took.
    pub fn trace_id(&self) -> u128 {
        u128::from_be_bytes(self.span.span_context().trace_id().to_bytes())
    }

    pub fn set(&mut self, key: &'static str, value: impl Into<Value>) {
        self.span.set_attribute(KeyValue::new(key, value));
    }

    /// Sets `redlock.outcome` from a lock call's result; a failure that is
    /// not the lock's answer (no quorum, an error) marks the span's status.
    pub fn outcome<T>(&mut self, result: &Result<T, LockError>) {
        let outcome = match result {
            Ok(_) => "ok",
            Err(LockError::Taken(_) | LockError::TakenMany(_) | LockError::Full { .. }) => "taken",
            Err(LockError::NoQuorum(_)) => "no_quorum",
            Err(LockError::Lost(_)) => "lost",
            Err(_) => "error",
        };
        self.set("redlock.outcome", outcome);
        if let Err(e) = result {
            if !matches!(
                e,
                LockError::Taken(_) | LockError::TakenMany(_) | LockError::Full { .. }
            ) {
                self.span.set_status(Status::error(e.to_string()));
            }
        }
    }

    /// Sets what an acquire's rounds saw: the wait (from joining the
    /// queue to the answer), the place in line, the holder waited behind
    /// (`behind`, a lock value, when known), the last round's votes (the
    /// masters that granted and refused, each with its latency, as arrays
    /// in the order the answers came), and the fence.
    pub fn acquired(&mut self, fence: Option<u64>, behind: Option<&str>) {
        let seen = self.trail.take();
        self.set("redlock.rounds", i64::from(seen.rounds));
        let waited = seen
            .waited_from
            .map_or(Duration::ZERO, |from| from.elapsed());
        self.set("redlock.wait_ms", millis(waited));
        if let Some(position) = seen.queue_position {
            self.set("redlock.queue.position", position as i64);
        }
        if let Some(value) = behind.filter(|_| seen.waited_from.is_some() || seen.rounds > 0) {
            if let Some(agent) = token::agent_of(value) {
                self.set("redlock.holder.agent", agent.to_string());
            }
            if let Some(owner) = token::owner_of(value) {
                self.set("redlock.holder.owner", owner.to_string());
            }
        }
        let mut granted = Votes::with_capacity(seen.votes.len());
        let mut refused = Votes::default();
        for vote in seen.votes {
            let votes = if vote.vote == VoteLabel::Granted {
                &mut granted
            } else {
                refused.votes.push(vote.vote.as_str().into());
                &mut refused
            };
            votes.masters.push(vote.node.into());
            votes.latencies.push(vote.latency.as_secs_f64() * 1000.0);
        }
        granted.set(
            self,
            [
                "redlock.masters.granted",
                "redlock.masters.granted.latency_ms",
                "",
            ],
        );
        refused.set(
            self,
            [
                "redlock.masters.refused",
                "redlock.masters.refused.latency_ms",
                "redlock.masters.refused.vote",
            ],
        );
        if let Some(fence) = fence {
            self.set("redlock.fence", i64::try_from(fence).unwrap_or(i64::MAX));
        }
    }
}

/// The masters of one side of a round's votes, with their latencies (and,
/// for refusals, each vote), in the order the answers came.
#[derive(Default)]
struct Votes {
    masters: Vec<StringValue>,
    latencies: Vec<f64>,
    votes: Vec<StringValue>,
}

impl Votes {
    /// Room for `n` masters: an acquire's granting side is most of them.
    fn with_capacity(n: usize) -> Votes {
        Votes {
            masters: Vec::with_capacity(n),
            latencies: Vec::with_capacity(n),
            votes: Vec::new(),
        }
    }

    /// Sets the masters under `keys[0]`, their latencies under `keys[1]`
    /// and, for refusals, their votes under `keys[2]`; nothing when there
    /// are none.
    fn set(self, span: &mut Traced, [masters, latencies, votes]: [&'static str; 3]) {
        if self.masters.is_empty() {
            return;
        }
        span.set(masters, Value::Array(self.masters.into()));
        span.set(latencies, Value::Array(self.latencies.into()));
        if !self.votes.is_empty() {
            span.set(votes, Value::Array(self.votes.into()));
        }
    }
}

/// Runs `future` with `span`'s trail followed by the engine and the
/// waiters; without a span, just runs it. Not an `async fn`: the future is
/// handed back as it is, or in the trail's scope, not moved into a wrapper
/// twice its size nor boxed. Callers pass a lock request's future pinned
/// where it was made (`pin!`), so only a pointer moves: the future itself
/// is several kilobytes, copied on every move.
pub fn follow<F: std::future::Future>(
    span: Option<&Traced>,
    future: F,
) -> Either<TaskLocalFuture<Arc<Trail>, F>, F> {
    match span {
        Some(span) => Either::Left(trail::follow(Arc::clone(&span.trail), future)),
        None => Either::Right(future),
    }
}

/// What a stream's event means for the span of its hold or leadership.
pub enum Mark<'e> {
    /// The lock was granted (a hold's `acquired`, a campaign's `elected`).
    Granted {
        fence: Option<u64>,
    },
    Waiting {
        behind: Option<(&'e str, &'e str)>,
    },
    Renewed,
    Lost(&'e str),
    Other,
}

/// Events that a [`Watch`] reads.
pub trait Marked {
    fn mark(&self) -> Mark<'_>;
}

impl Marked for HoldEvent {
    fn mark(&self) -> Mark<'_> {
        match self {
            HoldEvent::Acquired { fence, .. } => Mark::Granted { fence: *fence },
            HoldEvent::Renewed { .. } => Mark::Renewed,
            HoldEvent::Lost { reason } => Mark::Lost(reason),
        }
    }
}

impl Marked for CampaignEvent {
    fn mark(&self) -> Mark<'_> {
        match self {
            CampaignEvent::Waiting { leader } => Mark::Waiting {
                behind: leader.as_ref().map(|l| {
                    (
                        l.agent.as_deref().unwrap_or(""),
                        l.owner.as_deref().unwrap_or(""),
                    )
                }),
            },
            CampaignEvent::Elected { term, .. } => Mark::Granted { fence: Some(*term) },
            CampaignEvent::Renewed { .. } => Mark::Renewed,
            CampaignEvent::Lost { reason } => Mark::Lost(reason),
        }
    }
}

impl Marked for ObserveEvent {
    fn mark(&self) -> Mark<'_> {
        Mark::Other
    }
}

/// Follows one hold's or campaign's stream: ends the acquire's (or the
/// campaign's) span at the grant, then keeps the hold's (or leadership's)
/// span, named `redlock.hold` or `redlock.leadership`, to the stream's end:
/// `lost`, or the client gone (its hold released).
#[derive(Debug)]
pub struct Watch {
    tracer: SdkTracer,
    kind: Kind,
    resource: String,
    parent: Context,
    acquire: Option<Traced>,
    hold: Option<Span>,
    waiting_since: Option<SystemTime>,
}

impl Watch {
    pub(super) fn new(
        tracer: SdkTracer,
        kind: Kind,
        resource: String,
        parent: Context,
        acquire: Traced,
    ) -> Watch {
        Watch {
            tracer,
            kind,
            resource,
            parent,
            acquire: Some(acquire),
            hold: None,
            waiting_since: None,
        }
    }

    /// Reads one event on its way to the client.
    pub fn saw(&mut self, mark: Mark<'_>) {
        match mark {
            Mark::Waiting { behind } => {
                self.waiting_since.get_or_insert_with(SystemTime::now);
                if let (Some(acquire), Some((agent, owner))) = (self.acquire.as_mut(), behind) {
                    acquire.set("redlock.holder.agent", agent.to_string());
                    acquire.set("redlock.holder.owner", owner.to_string());
                }
            }
            Mark::Granted { fence } => {
                if let Some(mut acquire) = self.acquire.take() {
                    if let Some(since) = self.waiting_since {
                        let waited = since.elapsed().unwrap_or_default();
                        acquire.set("redlock.wait_ms", millis(waited));
                    }
                    if let Some(fence) = fence {
                        acquire.set("redlock.fence", i64::try_from(fence).unwrap_or(i64::MAX));
                    }
                    if acquire.kind == Kind::Leadership {
                        acquire.set("redlock.outcome", "elected");
                    }
                }
                let name = match self.kind {
                    Kind::Leadership => "redlock.leadership",
                    Kind::Lock | Kind::Shared | Kind::Permit => "redlock.hold",
                };
                let mut attributes = vec![
                    KeyValue::new("redlock.resource", self.resource.clone()),
                    KeyValue::new("redlock.kind", self.kind.as_str()),
                ];
                if let Some(fence) = fence {
                    attributes.push(KeyValue::new(
                        "redlock.fence",
                        i64::try_from(fence).unwrap_or(i64::MAX),
                    ));
                }
                self.hold = Some(
                    self.tracer
                        .span_builder(name)
                        .with_kind(SpanKind::Internal)
                        .with_attributes(attributes)
                        .start_with_context(&self.tracer, &self.parent),
                );
            }
            Mark::Renewed => {
                if let Some(hold) = self.hold.as_mut() {
                    hold.add_event("renewed", Vec::new());
                }
            }
            Mark::Lost(reason) => {
                if let Some(hold) = self.hold.as_mut() {
                    hold.add_event(
                        "lost",
                        vec![KeyValue::new("redlock.reason", reason.to_string())],
                    );
                    let outcome = ended_as(self.kind, reason);
                    hold.set_attribute(KeyValue::new("redlock.outcome", outcome));
                    hold.end();
                }
            }
            Mark::Other => {}
        }
    }
}

/// How the span of a hold or a leadership whose stream said `lost` ends:
/// `lost` when the lock was taken from it; when the agent's rules ended
/// it (`max_hold`, the agent's shutdown), `resigned` for a leadership and
/// `released` for a hold, as the metrics count them (see
/// [`End::is_loss`]).
fn ended_as(kind: Kind, reason: &str) -> &'static str {
    if End::from_reason(reason).is_none_or(End::is_loss) {
        return "lost";
    }
    match kind {
        Kind::Leadership => "resigned",
        Kind::Lock | Kind::Shared | Kind::Permit => "released",
    }
}

impl Drop for Watch {
    /// The stream ended without `lost`: the client left, and its hold is
    /// released (its leadership resigned, or its campaign withdrawn).
    fn drop(&mut self) {
        if let Some(hold) = self.hold.as_mut() {
            if hold.is_recording() {
                let outcome = match self.kind {
                    Kind::Leadership => "resigned",
                    Kind::Lock | Kind::Shared | Kind::Permit => "released",
                };
                hold.set_attribute(KeyValue::new("redlock.outcome", outcome));
                hold.end();
            }
        }
        if let Some(acquire) = self.acquire.as_mut() {
            acquire.set("redlock.outcome", "withdrawn");
        }
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only a loss ends a span as `lost`; `max_hold` and the agent's
    /// shutdown end a leadership as resigned and a hold as released.
    #[test]
    fn an_end_by_the_agents_rules_is_no_loss() {
        assert_eq!(ended_as(Kind::Leadership, "max_hold"), "resigned");
        assert_eq!(ended_as(Kind::Leadership, "shutdown"), "resigned");
        assert_eq!(ended_as(Kind::Leadership, "node_lost"), "lost");
        assert_eq!(ended_as(Kind::Lock, "max_hold"), "released");
        assert_eq!(ended_as(Kind::Permit, "renew_failed"), "lost");
        assert_eq!(ended_as(Kind::Lock, "unheard_of"), "lost");
    }
}
