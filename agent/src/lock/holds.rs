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
//! - `lost` is also sent between renewals, the moment the agent learns the
//!   lock is gone: an operator's force release removed its token
//!   (`force_released`; through this agent, or through another, whose
//!   force release announces the removed value on the fleet's channel, see
//!   [`super::waiters::force_release_channel`]), or masters it held on were
//!   seen to lose keys (a flush, a restart, an eviction: the health probe's
//!   quarantine, or a vote that found a marker gone) so that fewer than a
//!   quorum of them still hold it (`node_lost`). A probe sees a loss within
//!   one `health.interval`; the hold hears it as it is seen.
//! - A closed connection releases at once (unless the hold asked for
//!   `on_disconnect: expire`); no event can be sent then.
//! - Only a loss (renewals failed, masters lost the lock, a force release:
//!   [`End::is_loss`]) is a failure, counted once: a lock's or a permit's
//!   in `redlock_failures_total{reason="lost"}`, a leadership's by its
//!   campaign in `redlock_leadership_changes_total{event="lost"}`. An end
//!   at `max_hold` or at the agent's shutdown is told `lost` too (the
//!   client must stop), but is no failure.
//! - A client that stops reading (its connection open) keeps its hold
//!   renewed: renewals never wait for the client, and what it reads when it
//!   reads again is never a `renewed` outdated by a later event or whose
//!   validity has passed ([`super::events`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redlock_wire::{HoldEvent, OnDisconnect};
use tokio::sync::{mpsc, watch};

use super::events::Events;
use super::Locks;
use crate::redlock::{Extend, Failure, Grant, Holding, Resource, Store};

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
    /// An operator's force release removed the lock.
    ForceReleased,
    /// Masters it held on lost keys: fewer than a quorum still hold it.
    NodeLost,
}

/// What a hold holds, which says where its loss is counted: a lock's
/// (or a permit's) in `redlock_failures_total{reason="lost"}`, a
/// leadership's once, in `redlock_leadership_changes_total`, by its
/// campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    Lock,
    Leadership,
}

impl End {
    /// Every way a hold ends.
    pub const ALL: [End; 7] = [
        End::Closed,
        End::RenewFailed,
        End::NoQuorum,
        End::MaxHold,
        End::Shutdown,
        End::ForceReleased,
        End::NodeLost,
    ];

    /// Whether the lock was taken from its holder (renewals failed, masters
    /// lost it, an operator's force release) rather than given up: by the
    /// client, at its `max_hold`, or at the agent's shutdown. Only a loss
    /// is a failure; a client still connected is told `lost` either way.
    pub fn is_loss(self) -> bool {
        match self {
            End::RenewFailed | End::NoQuorum | End::ForceReleased | End::NodeLost => true,
            End::Closed | End::MaxHold | End::Shutdown => false,
        }
    }

    /// The end a stream's `lost` reason names, if any.
    pub fn from_reason(reason: &str) -> Option<End> {
        End::ALL.into_iter().find(|end| end.reason() == reason)
    }

    /// The reason the stream's `lost` event gives (`closed`: the client
    /// left, told nothing).
    pub fn reason(self) -> &'static str {
        match self {
            End::Closed => "closed",
            End::RenewFailed => "renew_failed",
            End::NoQuorum => "no_quorum",
            End::MaxHold => "max_hold",
            End::Shutdown => "shutdown",
            End::ForceReleased => "force_released",
            End::NodeLost => "node_lost",
        }
    }
}

/// How long before the validity ends the client is told `lost`: enough to
/// react, and more than the node timeout so a last renewal attempt fits.
pub fn lost_margin(ttl: Duration, node_timeout: Duration) -> Duration {
    (ttl / 10).max(node_timeout * 2).min(ttl / 2)
}

/// The holds running on this agent, by resource: how an operator's force
/// release, through this agent or another, reaches the hold whose lock it
/// removed.
#[derive(Debug, Default)]
pub struct Registry {
    // A std Mutex: short sections, never across an await. Shared with the
    // registrations, which take their entry out when dropped.
    holds: Arc<Mutex<HashMap<String, Vec<Entry>>>>,
    next_id: AtomicU64,
    /// Holds here that re-entered a lock: none, and a release need not
    /// look for one whose client has left ([`Registry::closed`]).
    reentering: Arc<AtomicUsize>,
    /// Only under the test switch `REDLOCK_TEST_UNSETTLED_HOLD_CLOSE`:
    /// closes are settled by the holds' tasks only, 200 ms late.
    unsettled: AtomicBool,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    token: String,
    notice: mpsc::Sender<End>,
    /// A re-entering hold's: how its end is settled once.
    closing: Option<Arc<Closing>>,
}

/// The end of a hold that re-entered a lock: one lowering of the lock's
/// count, made once, by whichever comes first of the hold's own task when
/// it sees its stream end, and a later call with the lock's token that
/// finds the hold's client has already closed its connection
/// ([`Registry::closed`]).
///
/// Without the second, closing a re-entering hold and then releasing the
/// lock (the same process, the next line of its code) raced: the release
/// could arrive before the hold's task had heard of the close, find the
/// count still raised, and answer `released: false` with a count of 1,
/// after which the hold's end released the lock on the masters anyway.
/// The client has closed its end before it sends the release; on a Unix
/// socket the agent's end reads end-of-file from that moment, so a peek at
/// it decides without a race ([`Closing::watch`] is given the peek by the
/// API, which owns the socket). The count is lowered under the settling
/// caller's hold of `settled`, so a call that finds the hold being
/// settled by its task waits for the count that leaves.
#[derive(Default)]
pub struct Closing {
    peer_closed: OnceLock<Box<dyn Fn() -> bool + Send + Sync>>,
    // A std Mutex: held only while the count is lowered, never across an
    // await.
    settled: Mutex<bool>,
}

impl std::fmt::Debug for Closing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Closing")
            .field("watched", &self.peer_closed.get().is_some())
            .field("settled", &*self.settled())
            .finish()
    }
}

impl Closing {
    /// Tells how to see that the hold's client closed its connection; the
    /// first call only counts. Until then the hold is settled by its task.
    pub fn watch(&self, peer_closed: impl Fn() -> bool + Send + Sync + 'static) {
        let _ = self.peer_closed.set(Box::new(peer_closed));
    }

    fn peer_closed(&self) -> bool {
        self.peer_closed.get().is_some_and(|closed| closed())
    }

    fn settled(&self) -> std::sync::MutexGuard<'_, bool> {
        self.settled.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lowers the count (`lower`, which answers as
    /// [`super::Grants::release_one`]) unless it was lowered for this
    /// hold before: `None` then, else what `lower` answered.
    pub fn settle(&self, lower: impl FnOnce() -> Option<u32>) -> Option<Option<u32>> {
        let mut settled = self.settled();
        if *settled {
            return None;
        }
        *settled = true;
        Some(lower())
    }
}

/// A hold's place in the [`Registry`]; leaving it (drop) takes it out.
#[derive(Debug)]
struct Registration {
    holds: Arc<Mutex<HashMap<String, Vec<Entry>>>>,
    reentering: Arc<AtomicUsize>,
    resource: String,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut holds = self.holds.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entries) = holds.get_mut(&self.resource) {
            entries.retain(|e| {
                let gone = e.id == self.id;
                if gone && e.closing.is_some() {
                    self.reentering.fetch_sub(1, Ordering::Relaxed);
                }
                !gone
            });
            if entries.is_empty() {
                holds.remove(&self.resource);
            }
        }
    }
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Entry>>> {
        self.holds.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether no hold runs here.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Lists the hold of `token` on `resource` (a re-entering one with its
    /// `closing`); its notices arrive on the receiver while the
    /// registration lives.
    fn register(
        &self,
        resource: &str,
        token: &str,
        closing: Option<Arc<Closing>>,
    ) -> (Registration, mpsc::Receiver<End>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (notice, receiver) = mpsc::channel(1);
        let mut holds = self.lock();
        if closing.is_some() {
            self.reentering.fetch_add(1, Ordering::Relaxed);
        }
        holds.entry(resource.to_string()).or_default().push(Entry {
            id,
            token: token.to_string(),
            notice,
            closing,
        });
        drop(holds);
        let registration = Registration {
            holds: Arc::clone(&self.holds),
            reentering: Arc::clone(&self.reentering),
            resource: resource.to_string(),
            id,
        };
        (registration, receiver)
    }

    /// Lists the hold that re-enters the lock of `token` on `resource`,
    /// before its client hears `acquired`, so a call it makes after
    /// closing the hold finds it ([`Registry::closed`]) however late the
    /// hold's task starts.
    pub fn register_reentering(
        &self,
        resource: &str,
        token: &str,
        closing: Arc<Closing>,
    ) -> Reentering {
        let (registration, notice) = self.register(resource, token, Some(Arc::clone(&closing)));
        Reentering {
            closing,
            registration,
            notice,
        }
    }

    /// An operator's force release removed `value` from the key of
    /// `resource` on some master: the hold of that token, if it runs here,
    /// ends with `force_released`. Only the removed token's hold: one
    /// granted since (the force release freed the lock) is not touched.
    /// True when a hold here was told.
    pub fn force_released(&self, resource: &str, value: &str) -> bool {
        let holds = self.lock();
        let Some(entries) = holds.get(resource) else {
            return false;
        };
        let mut told = false;
        for entry in entries.iter().filter(|e| e.token == value) {
            // A full channel already carries a notice: the hold is ending.
            let _ = entry.notice.try_send(End::ForceReleased);
            told = true;
        }
        told
    }

    /// For the control runs only (see [`Registry::unsettled`]).
    pub fn leave_closes_unsettled(&self) {
        self.unsettled.store(true, Ordering::Relaxed);
    }

    /// The re-entering holds of `token` on `resource` whose client has
    /// closed its connection ([`Closing`]); each is told to end now,
    /// whether or not its task saw the close yet, so it renews no lock
    /// that the caller may be about to release. The caller settles them.
    pub fn closed(&self, resource: &str, token: &str) -> Vec<Arc<Closing>> {
        if self.reentering.load(Ordering::Relaxed) == 0 || self.unsettled.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let holds = self.lock();
        let Some(entries) = holds.get(resource) else {
            return Vec::new();
        };
        let mut closed = Vec::new();
        for entry in entries.iter().filter(|e| e.token == token) {
            let Some(closing) = entry.closing.as_ref().filter(|c| c.peer_closed()) else {
                continue;
            };
            // A full channel already carries a notice: the hold is ending.
            let _ = entry.notice.try_send(End::Closed);
            closed.push(Arc::clone(closing));
        }
        closed
    }
}

/// Resolves when any of `receivers` (each master's
/// [`Store::loss_events`]) says its master lost keys; never
/// without receivers.
async fn any_loss(receivers: &mut [watch::Receiver<u64>]) {
    if receivers.is_empty() {
        return std::future::pending().await;
    }
    let changes = receivers.iter_mut().map(|r| Box::pin(r.changed()));
    let (changed, _, _) = futures::future::select_all(changes).await;
    if changed.is_err() {
        // The node is gone (the agent is stopping): nothing more to hear.
        std::future::pending::<()>().await;
    }
}

/// What woke a hold between renewals.
enum Woken {
    /// Its renewal, its margin or its `max_hold` is due.
    Timer,
    /// A master was seen to lose keys.
    Loss,
}

/// What a hold does with its lock when it ends.
#[derive(Debug)]
pub enum Ending {
    /// Its own grant: released, or left to expire when the client closed
    /// the connection and asked for that.
    Own(OnDisconnect),
    /// A re-entry of a lock acquired before: its count lowered, as a
    /// release does (released on the masters if it was the last), unless
    /// a call that found its client gone lowered it first ([`Closing`]).
    Reentered(Reentering),
}

/// A re-entering hold, listed in the [`Registry`] before it runs
/// ([`Registry::register_reentering`]).
#[derive(Debug)]
pub struct Reentering {
    closing: Arc<Closing>,
    registration: Registration,
    notice: mpsc::Receiver<End>,
}

/// Runs a granted hold until it ends, sending its events on `events`
/// (the first, `acquired`, is already sent by the caller), and releases it
/// as `ending` says; counts its loss as `held` says.
pub async fn run<M: Store>(
    locks: Arc<Locks<M>>,
    resource: Resource,
    grant: Grant,
    max_hold: Duration,
    ending: Ending,
    held: Held,
    events: Events<HoldEvent>,
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
    // Loss notices (off only under the test switch, for control runs).
    let notices = locks.rules().loss_notice;
    let key = engine.key(&resource);
    let mut holding = Arc::clone(&grant.holding);
    // Lost on too many of the masters that confirmed the last grant or
    // renewal for a quorum to hold it still: another client may get it (or
    // will, once they are readmitted).
    let lost_on_masters = |holding: &Holding| {
        let on = holding.still_on(engine.nodes(), &key);
        let lost = on < engine.quorum();
        if lost {
            tracing::debug!(%resource, on, quorum = engine.quorum(), "masters holding the lock lost keys");
        }
        lost
    };
    let mut losses: Vec<watch::Receiver<u64>> = if notices {
        engine.nodes().iter().map(|n| n.loss_events()).collect()
    } else {
        Vec::new()
    };
    let (closing, on_disconnect, (_registration, mut notice)) = match ending {
        Ending::Reentered(r) => (Some(r.closing), None, (r.registration, r.notice)),
        Ending::Own(on_disconnect) => (
            None,
            Some(on_disconnect),
            locks
                .holds
                .register(resource.as_str(), grant.token.as_str(), None),
        ),
    };
    // A loss seen between the grant's votes and the receivers above woke
    // nothing: look once now, as a wake-up would.
    let lost_already = notices && lost_on_masters(&holding);
    // So did a force release heard before the registration above; it
    // forgot the grant here.
    // (Its own token's grant: a shared lock's other readers come and go.)
    let force_released_already =
        notices && !locks.grants().has(resource.as_str(), grant.token.as_str());

    let end = loop {
        if force_released_already {
            break End::ForceReleased;
        }
        if lost_already {
            break End::NodeLost;
        }
        let lost_at = valid_until.checked_sub(margin).unwrap_or(valid_until);
        let wake = next_renewal.min(lost_at).min(hold_until);
        let woken = tokio::select! {
            () = events.closed() => break End::Closed,
            () = shutdown.cancelled() => break End::Shutdown,
            Some(end) = notice.recv(), if notices => break end,
            () = any_loss(&mut losses) => Woken::Loss,
            () = tokio::time::sleep_until(wake.into()) => Woken::Timer,
        };
        if let Woken::Loss = woken {
            if lost_on_masters(&holding) {
                break End::NodeLost;
            }
            continue;
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
        // A re-entered lock's renewal never sets less than a TTL set
        // before for it: the outer holder's validity is not cut.
        let set = locks.reentry_ttl(&resource, &grant.token, ttl);
        let outcome =
            tokio::time::timeout_at(give_up.into(), engine.extend(&resource, &grant.token, set))
                .await;
        let Ok(outcome) = outcome else {
            tracing::debug!(%resource, "hold renewal still unanswered near the end of the validity");
            break last_failure;
        };
        match outcome {
            Extend::Extended {
                validity,
                holding: extended_on,
            } => {
                let now = Instant::now();
                holding = extended_on;
                valid_until = now + validity;
                next_renewal = now + renew_every;
                locks.extended(&resource, &grant.token, validity, set);
                // Never waits for the client: one that stopped reading
                // has older events unread, and the renewals go on (see
                // [`super::events`]).
                let renewed = HoldEvent::Renewed {
                    validity_ms: u64::try_from(validity.as_millis()).unwrap_or(u64::MAX),
                };
                let told = if locks.rules().renewals_wait_for_client {
                    events.send(renewed).await.is_ok()
                } else {
                    events.offer(renewed) || !events.is_closed()
                };
                if !told {
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

    if end.is_loss() && held == Held::Lock {
        locks.metrics().fail(Failure::Lost);
    }
    if end != End::Closed {
        let lost = HoldEvent::Lost {
            reason: end.reason().to_string(),
        };
        let _ = events.send(lost).await;
        tracing::info!(%resource, reason = end.reason(), "hold lost");
    }
    if let Some(closing) = &closing {
        if locks.holds.unsettled.load(Ordering::Relaxed) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let settled = closing.settle(|| {
            locks
                .grants()
                .release_one(resource.as_str(), grant.token.as_str())
        });
        match settled {
            None => {
                tracing::debug!(%resource, reason = end.reason(), "re-entered hold ended; its count was lowered by a call after its client closed");
                return end;
            }
            Some(Some(_)) => {
                tracing::debug!(%resource, reason = end.reason(), "re-entered hold ended; the lock is still held");
                return end;
            }
            // The last acquire: released on the masters below.
            Some(None) => {}
        }
    }
    if end == End::Closed && on_disconnect == Some(OnDisconnect::Expire) {
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

    /// Each end is named by its reason, and only the ends that took the
    /// lock from its holder are losses.
    #[test]
    fn ends_read_back_from_their_reasons_and_losses_are_faults_only() {
        for end in End::ALL {
            assert_eq!(End::from_reason(end.reason()), Some(end));
        }
        assert_eq!(End::from_reason("too_many_waiters"), None);
        let losses: Vec<End> = End::ALL.into_iter().filter(|e| e.is_loss()).collect();
        assert_eq!(
            losses,
            [
                End::RenewFailed,
                End::NoQuorum,
                End::ForceReleased,
                End::NodeLost
            ]
        );
    }

    /// A re-entering hold's close is settled once: found by a call only
    /// once its client is gone, lowered by the first to settle it, never
    /// again, nor by its own task after that; another token's, or a hold
    /// not watched, is never found by a call.
    #[test]
    fn a_closed_reentering_hold_is_settled_once() {
        let registry = Registry::default();
        let gone = Arc::new(AtomicBool::new(false));
        let closing = Arc::new(Closing::default());
        let seen = Arc::clone(&gone);
        closing.watch(move || seen.load(Ordering::Relaxed));
        let (_mine, _) = registry.register("r", "t", Some(Arc::clone(&closing)));
        let (_unwatched, _) = registry.register("r", "t", Some(Arc::default()));
        let (_own, _) = registry.register("r", "t", None);
        assert!(registry.closed("r", "t").is_empty(), "its client is there");
        gone.store(true, Ordering::Relaxed);
        assert!(registry.closed("r", "other").is_empty());
        let closed = registry.closed("r", "t");
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].settle(|| Some(1)), Some(Some(1)));
        assert_eq!(
            closing.settle(|| Some(0)),
            None,
            "its task finds it settled"
        );
    }

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
