//! Holds: a lock tied to the client's connection. The agent renews it on a
//! quorum every third of its TTL, tells the client `renewed`, and releases
//! it on every master the moment the connection closes (the kernel tells us
//! when the client process dies). If renewal fails, the client is told
//! `lost` before the validity it was last given ends.
//!
//! ## Behavior
//! - Renewal starts a third of the TTL after the last grant or renewal; a
//!   failed renewal is retried after the retry delay.
//! - `lost` is sent at once when a renewal shows that no quorum can hold
//!   the token any more (gone or another token on too many masters); when
//!   renewals have failed otherwise (timeouts, no quorum) until `margin`
//!   before the validity ends, or a renewal is still unanswered half the
//!   margin before it ends; when `max_hold` is reached; or when the agent
//!   shuts down. The lock is then released everywhere and the stream ends.
//! - A closed connection releases at once (unless the hold asked for
//!   `on_disconnect: expire`); no event can be sent then.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_wire::{HoldEvent, OnDisconnect};
use tokio::sync::mpsc;

use super::Locks;
use crate::redlock::{Extend, Failure, Grant, Resource};

/// Why a hold ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The client closed the connection: released.
    Closed,
    /// Renewals failed until the margin before validity ran out.
    RenewFailed,
    /// Renewals failed for want of a quorum.
    NoQuorum,
    MaxHold,
    Shutdown,
}

impl End {
    fn reason(self) -> &'static str {
        match self {
            End::Closed => "closed",
            End::RenewFailed => "renew_failed",
            End::NoQuorum => "no_quorum",
            End::MaxHold => "max_hold",
            End::Shutdown => "shutdown",
        }
    }
}

/// How long before the validity ends the client is told `lost`: enough to
/// react, and more than the node timeout so a last renewal attempt fits.
pub fn lost_margin(ttl: Duration, node_timeout: Duration) -> Duration {
    (ttl / 10).max(node_timeout * 2).min(ttl / 2)
}

/// One NDJSON line.
/// Runs a granted hold until it ends, sending its events on `events`
/// (the first, `acquired`, is already sent by the caller), and releases it.
pub async fn run(
    locks: Arc<Locks>,
    resource: Resource,
    grant: Grant,
    max_hold: Duration,
    on_disconnect: OnDisconnect,
    events: mpsc::Sender<HoldEvent>,
) -> End {
    let engine = locks.engine();
    let ttl = grant.ttl;
    let renew_every = ttl / 3;
    let margin = lost_margin(ttl, locks.rules().node_timeout);
    let hold_until = grant.granted_at + max_hold;
    let mut valid_until = grant.valid_until();
    let mut next_renewal = grant.granted_at + renew_every;
    let mut last_failure = End::RenewFailed;
    let shutdown = locks.shutdown_token();

    let end = loop {
        let lost_at = valid_until.checked_sub(margin).unwrap_or(valid_until);
        let wake = next_renewal.min(lost_at).min(hold_until);
        tokio::select! {
            () = events.closed() => break End::Closed,
            () = shutdown.cancelled() => break End::Shutdown,
            () = tokio::time::sleep_until(wake.into()) => {}
        }
        let now = Instant::now();
        if now >= hold_until {
            break End::MaxHold;
        }
        if now >= lost_at {
            break last_failure;
        }
        // A renewal that has not answered by half the margin before the
        // validity ends is given up: the client hears `lost` while its
        // validity still runs, however long the masters take (a request
        // can wait a node timeout in its master's queue and another on its
        // way, more than the margin when the TTL is short).
        let give_up = valid_until.checked_sub(margin / 2).unwrap_or(valid_until);
        let outcome =
            tokio::time::timeout_at(give_up.into(), engine.extend(&resource, &grant.token, ttl))
                .await;
        let Ok(outcome) = outcome else {
            tracing::debug!(%resource, "hold renewal still unanswered near the end of the validity");
            break last_failure;
        };
        match outcome {
            Extend::Extended { validity } => {
                let now = Instant::now();
                valid_until = now + validity;
                next_renewal = now + renew_every;
                locks.extended(&resource, &grant.token, validity);
                let renewed = HoldEvent::Renewed {
                    validity_ms: u64::try_from(validity.as_millis()).unwrap_or(u64::MAX),
                };
                if events.send(renewed).await.is_err() {
                    break End::Closed;
                }
            }
            Extend::Lost => {
                // Too many masters no longer hold the token for any quorum
                // to: another client may hold the lock already. Say so now,
                // not at the end of the validity.
                locks
                    .metrics()
                    .extensions
                    .with_label_values(&["lost"])
                    .inc();
                break End::RenewFailed;
            }
            outcome => {
                locks
                    .metrics()
                    .extensions
                    .with_label_values(&["lost"])
                    .inc();
                last_failure = match outcome {
                    Extend::NoQuorum(_) => End::NoQuorum,
                    _ => End::RenewFailed,
                };
                tracing::debug!(%resource, ?outcome, "hold renewal failed; retrying until the margin");
                next_renewal = Instant::now() + engine.retry_delay();
            }
        }
    };

    if end != End::Closed {
        locks.metrics().fail(Failure::Lost);
        let lost = HoldEvent::Lost {
            reason: end.reason().to_string(),
        };
        let _ = events.send(lost).await;
        tracing::info!(%resource, reason = end.reason(), "hold lost");
    }
    if end == End::Closed && on_disconnect == OnDisconnect::Expire {
        // The client asked for its lock to outlive it: writes it still had
        // in flight land before anyone else can hold the lock. The grant
        // stays listed here until its validity ends (see `Grants::sweep`).
        tracing::debug!(%resource, "hold closed; left to expire as asked");
        return end;
    }
    let released = locks.release_ended(&resource, &grant.token).await;
    tracing::debug!(%resource, reason = end.reason(), ?released, "hold ended");
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_margin_leaves_room_to_react() {
        let ms = Duration::from_millis;
        assert_eq!(lost_margin(ms(10_000), ms(50)), ms(1_000));
        assert_eq!(
            lost_margin(ms(500), ms(50)),
            ms(100),
            "twice the node timeout"
        );
        assert_eq!(
            lost_margin(ms(100), ms(50)),
            ms(50),
            "never more than half the TTL"
        );
    }
}
