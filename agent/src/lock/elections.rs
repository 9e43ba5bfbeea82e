//! Leader elections: one leader at a time, across every agent on these
//! masters, with a term that only grows.
//!
//! ## Why leading is holding a lock
//! Leading the election `name` is holding the lock on the resource
//! `<name> election` ([`Resource::election`]) through a hold: a fenced
//! Redlock grant, renewed while the campaign's stream is open, with `lost`
//! sent before its validity ends ([`super::holds`]). Two campaigners
//! believe they lead at once only if two believe they hold one lock, which
//! the lock's safety argument rules out. The term is the grant's fence: a
//! quorum mints it above every fence its masters confirmed before, so a
//! leadership elected after another was granted has a larger term (see
//! `crate::redlock::fence`), and storage that checks it refuses a deposed
//! leader's late writes.
//!
//! ## Campaigns
//! A campaign waits in the election's queue as a lock's waiter does, woken
//! by releases, without polling; it says `waiting` with the leader it
//! found when it starts to wait. Once elected, its agent writes the
//! leader's note (term, value, process, since) on every master
//! ([`redlock_wire::keys::leader_key`]), tied to the leadership's token, so
//! any agent answers who leads; then it announces the change on the
//! election's channel, as it does when the leadership ends, so observers
//! on every agent read it at once. A note is shown only while its token
//! holds the election's lock on a quorum. Observers' reads that no
//! announcement asked for share one budget per agent
//! ([`OBSERVER_READS_PER_SECOND`]), so observers cost the masters per
//! agent, not per election.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redlock_wire::election::MAX_VALUE_LEN;
use redlock_wire::{CampaignEvent, CampaignRequest, HoldEvent, Leader, ObserveEvent};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::acquire::{Contest, LockContest, Take};
use super::events::{self, Events, Stamped};
use super::holds::{End, Held};
use super::listing::{self, ReadError};
use super::waiters::WaitError;
use super::{check_owner, millis, Holder, LockError, Locks};
use crate::metrics::Leadership;
use crate::redlock::{round, Acquire, Grant, KeyState, Kind, Redlock, Resource, Store};

/// Longest a campaign waits in line: for as long as its stream is open.
const FOREVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// How often an observer reads the leader when no change is heard and no
/// leadership is about to run out.
const OBSERVE_EVERY: Duration = Duration::from_secs(5);

/// Observers' reads of a leader that no announcement asked for (the
/// look every 5 s, and at a leadership's end), per second
/// over every observer of one agent: at most about 250 commands a second
/// on each master (a read is 5), however many elections are observed.
/// Beyond, such reads come later; reads woken by an announcement (an
/// election, a resignation, a release) never wait.
pub const OBSERVER_READS_PER_SECOND: f64 = 50.0;

/// How soon an observer whose timer found the reads' budget spent tries
/// again.
const BUDGET_RETRY: Duration = Duration::from_millis(100);

/// How long an observer waits for a new leader's note before it shows the
/// leader without its term.
const NOTE_WAIT: Duration = Duration::from_secs(1);

/// The leader's note on the masters, beside the election's lock.
#[derive(Debug, Serialize, Deserialize)]
struct Note {
    token: String,
    term: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    uid: Option<u32>,
    since_ms: u64,
}

/// An election's leadership: its lock's contest, fenced, that says when
/// it starts to wait (the campaign then tells its client who leads).
pub struct CampaignContest<'a> {
    lock: LockContest<'a>,
    joined: Arc<Notify>,
}

impl<M: Store> Contest<M> for CampaignContest<'_> {
    fn queue(&self) -> &str {
        Contest::<M>::queue(&self.lock)
    }

    async fn round(&mut self, redlock: &Redlock<M>, waiting: bool) -> Acquire {
        self.lock.round(redlock, waiting).await
    }

    fn waiting(&mut self) {
        self.joined.notify_one();
    }
}

impl<M: Store> Take<M> for CampaignContest<'_> {
    type Won = Grant;

    fn refused(&mut self) -> LockError {
        Take::<M>::refused(&mut self.lock)
    }

    async fn won(&mut self, locks: &Locks<M>, grant: Grant, holder: Option<Holder>) -> Grant {
        self.lock.won(locks, grant, holder).await
    }
}

/// A campaign's fields, checked.
struct Campaign {
    name: Resource,
    ttl: Duration,
    owner: Option<String>,
    value: Option<String>,
    max_hold: Duration,
    holder: Option<Holder>,
}

impl<M: Store> Locks<M> {
    /// Starts a campaign for `name`: its events come on the receiver, and
    /// dropping the receiver (the client's connection closed) stops it, or
    /// resigns at once when it leads.
    ///
    /// # Errors
    /// A field out of range, before any event.
    pub fn campaign(
        self: &Arc<Self>,
        name: Resource,
        request: CampaignRequest,
        holder: Option<Holder>,
    ) -> Result<events::Receiver<CampaignEvent>, LockError> {
        let ttl = self.rules.ttl(request.ttl_ms)?;
        let max_hold = self.rules.max_hold(request.max_hold_ms)?;
        check_owner(request.owner.as_deref())?;
        if request
            .value
            .as_ref()
            .is_some_and(|v| v.chars().count() > MAX_VALUE_LEN)
        {
            return Err(LockError::Invalid(format!(
                "value must be at most {MAX_VALUE_LEN} characters"
            )));
        }
        let (events, receiver) = events::stream();
        let campaign = Campaign {
            name,
            ttl,
            owner: request.owner,
            value: request.value,
            max_hold,
            holder,
        };
        tokio::spawn(Arc::clone(self).run_campaign(campaign, events));
        Ok(receiver)
    }

    async fn run_campaign(self: Arc<Self>, campaign: Campaign, events: Events<CampaignEvent>) {
        let resource = Resource::election(&campaign.name);
        // The client gone: the wait is given up.
        let cancel = CancellationToken::new();
        let _gone = {
            let (events, cancel) = (events.clone(), cancel.clone());
            DropGuard(tokio::spawn(async move {
                events.closed().await;
                cancel.cancel();
            }))
        };
        // The leader last told in a `waiting` event.
        let mut told: Option<Option<(Option<u64>, Option<String>)>> = None;
        // The last round found no quorum: the campaign goes round again
        // every retry delay, and one outage counts once.
        let mut without_quorum = false;
        loop {
            self.touch();
            let started = Instant::now();
            let joined = Arc::new(Notify::new());
            let mut contest = CampaignContest {
                lock: LockContest::new(
                    &self.engine,
                    &resource,
                    campaign.ttl,
                    campaign.owner.as_deref(),
                    true,
                ),
                joined: Arc::clone(&joined),
            };
            // Waits in line, saying who leads when it starts to wait and
            // whenever that changes (woken by the election's
            // announcements, as observers are).
            let tell = async {
                joined.notified().await;
                let mut watch = self.waiters.observe(resource.queue());
                loop {
                    let leader = self.leader(&campaign.name).await.ok().flatten();
                    let seen = leader.as_ref().map(|l| (l.term, l.agent.clone()));
                    if told.as_ref() != Some(&seen) {
                        told = Some(seen);
                        if events
                            .send(CampaignEvent::Waiting { leader })
                            .await
                            .is_err()
                        {
                            cancel.cancel();
                            return;
                        }
                    }
                    watch.changed().await;
                }
            };
            let wait = self.contend(&mut contest, FOREVER, campaign.holder, Some(&cancel));
            tokio::pin!(wait);
            let outcome = tokio::select! {
                outcome = &mut wait => outcome,
                () = tell => wait.await,
            };
            if cancel.is_cancelled() && outcome.is_err() {
                return;
            }
            let again = matches!(outcome, Err(LockError::NoQuorum(_)));
            if !(again && without_quorum) {
                self.count_acquire(Kind::Leadership, started, &outcome);
            }
            without_quorum = again;
            let grant = match outcome {
                Ok(grant) => grant,
                Err(LockError::Wait(error)) => {
                    let reason = match error {
                        WaitError::ShuttingDown => "shutdown",
                        _ => "too_many_waiters",
                    };
                    let lost = CampaignEvent::Lost {
                        reason: reason.into(),
                    };
                    let _ = events.send(lost).await;
                    return;
                }
                // No quorum (or a refusal a wait for as long as the
                // client's cannot end with): it says it waits, with no
                // leader it could read, and tries again after the retry
                // delay.
                Err(_) => {
                    if told.is_none() {
                        told = Some(None);
                        let waiting = CampaignEvent::Waiting { leader: None };
                        if events.send(waiting).await.is_err() {
                            return;
                        }
                    }
                    tokio::select! {
                        () = cancel.cancelled() => return,
                        () = tokio::time::sleep(self.engine.retry_delay()) => continue,
                    }
                }
            };
            let token = grant.token.as_str().to_string();
            let Some(term) = grant.fence else {
                unreachable!("a campaign's grant is fenced")
            };
            let valid_until = grant.valid_until();
            let (mut hold, task) = match self
                .start_hold(
                    resource.clone(),
                    grant,
                    campaign.max_hold,
                    redlock_wire::OnDisconnect::Release,
                    None,
                    Held::Leadership,
                )
                .await
            {
                Ok(started) => started,
                // Too little validity left to lead: in line again.
                Err(_) => continue,
            };
            let Some(Stamped {
                event: HoldEvent::Acquired { ttl_ms, .. },
                ..
            }) = hold.recv().await
            else {
                continue;
            };
            let mut elected = false;
            if !events.is_closed() {
                self.note_leader(&campaign, &token, term).await;
                self.announce_change(&resource, &format!("elected {term}"))
                    .await;
                self.metrics.leadership(Leadership::Elected);
                elected = true;
                self.metrics
                    .last_term
                    .set(i64::try_from(term).unwrap_or(i64::MAX));
                tracing::info!(election = %campaign.name, term, "elected");
                // The validity left now, after the note and the
                // announcement: the client counts it from arrival.
                let elected = CampaignEvent::Elected {
                    term,
                    validity_ms: millis(valid_until.saturating_duration_since(Instant::now())),
                    ttl_ms,
                };
                if events.send(elected).await.is_ok() {
                    // The client gone resigns at once, not at the next
                    // renewal.
                    while let Some(Stamped { event, at }) = tokio::select! {
                        event = hold.recv() => event,
                        () = events.closed() => None,
                    } {
                        let event = match event {
                            HoldEvent::Renewed { validity_ms } => {
                                // As a hold's: never waits for the client.
                                let renewed = CampaignEvent::Renewed { validity_ms };
                                let told = if self.rules.renewals_wait_for_client {
                                    events.send_as_of(renewed, at).await.is_ok()
                                } else {
                                    events.offer_as_of(renewed, at) || !events.is_closed()
                                };
                                if !told {
                                    break;
                                }
                                continue;
                            }
                            HoldEvent::Lost { reason } => CampaignEvent::Lost { reason },
                            HoldEvent::Acquired { .. } => continue,
                        };
                        if events.send_as_of(event, at).await.is_err() {
                            break;
                        }
                    }
                }
            }
            // Resigns (the hold releases the lock once its events are
            // dropped), then tells the observers. The hold's end says how
            // the leadership ended, counted here alone (not as a lock's
            // failure): resigned or lost.
            drop(hold);
            match task.await {
                Ok(end) if elected => {
                    let change = ended(end);
                    self.metrics.leadership(change);
                    tracing::info!(
                        election = %campaign.name,
                        term,
                        event = change.event(),
                        reason = change.reason(),
                        "leadership ended"
                    );
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(election = %campaign.name, term, %error, "leadership's hold stopped");
                }
            }
            self.announce_change(&resource, &format!("ended {term}"))
                .await;
            return;
        }
    }

    /// Writes the leader's note on every master, for as long as the
    /// leadership may last; best effort: a master without it answers the
    /// leader without its term and value.
    async fn note_leader(&self, campaign: &Campaign, token: &str, term: u64) {
        let note = Note {
            token: token.to_string(),
            term,
            value: campaign.value.clone(),
            pid: campaign.holder.and_then(|h| h.pid),
            uid: campaign.holder.map(|h| h.uid),
            since_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, millis),
        };
        // Cannot fail: strings and numbers.
        let value = serde_json::to_string(&note).expect("a note serializes");
        let key = redlock_wire::keys::leader_key(
            &self.engine.settings().key_prefix,
            campaign.name.as_str(),
        );
        let ttl = campaign.max_hold + campaign.ttl;
        round::note_everywhere(self.engine.nodes(), &key, Some(&value), ttl).await;
    }

    /// Announces a change of leader on the election's channel, on every
    /// master: observers (and waiting campaigners) on every agent wake.
    async fn announce_change(&self, resource: &Resource, message: &str) {
        let channel = format!(
            "{}{}",
            self.engine.settings().release_channel_prefix,
            resource.queue()
        );
        let sends = self
            .engine
            .nodes()
            .iter()
            .map(|node| node.announce(&channel, message));
        futures::future::join_all(sends).await;
        self.waiters.released(resource.queue(), Some(message));
    }

    /// `GET /v1/elections/{name}`: [`Locks::leader`] as an operator read,
    /// which takes a turn among the listings' (see [`listing::Listings`]).
    ///
    /// # Errors
    /// [`ReadError::Busy`] when other operator reads hold every turn, and
    /// as [`Locks::leader`].
    pub async fn read_leader(&self, name: &Resource) -> Result<Option<Leader>, ReadError> {
        let _turn = self.listings.turn().await?;
        self.leader(name).await
    }

    /// Who leads `name` now: the holder of its lock on a quorum of
    /// masters, with its note; `None` when no campaigner does.
    ///
    /// # Errors
    /// [`ReadError::TooFewRead`] when fewer than a quorum answered.
    pub async fn leader(&self, name: &Resource) -> Result<Option<Leader>, ReadError> {
        let resource = Resource::election(name);
        let redlock = &self.engine;
        let lock_key = redlock.key(&resource);
        let note_key =
            redlock_wire::keys::leader_key(&redlock.settings().key_prefix, name.as_str());
        let keys = [lock_key, note_key];
        let nodes = redlock.nodes();
        let reads = futures::future::join_all(nodes.iter().map(|n| n.list_keys(&keys))).await;
        let read: Vec<bool> = reads.iter().map(Result::is_ok).collect();
        listing::check_read(self, &read)?;
        let present = |s: &&KeyState| s.pttl != -2 && s.value.is_some();
        let states: Vec<Option<Vec<KeyState>>> = reads.into_iter().map(Result::ok).collect();
        let per_node: Vec<Option<Option<&KeyState>>> = states
            .iter()
            .map(|n| n.as_ref().map(|n| n.first().filter(present)))
            .collect();
        let info = listing::lock_info(
            self,
            resource.as_str(),
            &per_node,
            std::time::Instant::now(),
        );
        let Some(validity_ms) = info.validity_ms.filter(|v| info.quorum_agrees && *v > 0) else {
            return Ok(None);
        };
        // The token a quorum holds, to find its note.
        let mut counts: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for state in per_node.iter().flatten().flatten() {
            if let Some(value) = state.value.as_deref() {
                *counts.entry(value).or_default() += 1;
            }
        }
        let token = counts
            .into_iter()
            .filter(|&(_, c)| c >= redlock.quorum())
            .map(|(v, _)| v)
            .next();
        let note = states
            .iter()
            .flatten()
            .filter_map(|n| n.get(1).filter(present))
            .filter_map(|s| serde_json::from_str::<Note>(s.value.as_deref()?).ok())
            .find(|note| Some(note.token.as_str()) == token);
        Ok(Some(Leader {
            election: name.to_string(),
            agent: info.agent,
            owner: info.owner,
            value: note.as_ref().and_then(|n| n.value.clone()),
            pid: note.as_ref().and_then(|n| n.pid).or(info.pid),
            uid: note.as_ref().and_then(|n| n.uid).or(info.uid),
            term: note.as_ref().map(|n| n.term),
            since_ms: note.as_ref().map(|n| n.since_ms),
            validity_ms,
        }))
    }

    /// Streams who leads `name`: now, then at every change, until the
    /// receiver is dropped. Woken by the election's announcements and
    /// releases; read again when a leadership would run out, and every
    /// [`OBSERVE_EVERY`] besides, those reads within the agent's budget
    /// ([`OBSERVER_READS_PER_SECOND`]).
    pub fn observe(self: &Arc<Self>, name: Resource) -> events::Receiver<ObserveEvent> {
        let (events, receiver) = events::stream();
        let locks = Arc::clone(self);
        tokio::spawn(async move {
            let queue = Resource::election(&name).queue().to_string();
            let mut watch = locks.waiters.observe(&queue);
            let mut last: Option<Option<Seen>> = None;
            let mut noteless_since: Option<Instant> = None;
            // The first read, and reads woken by an announcement, are
            // never held back; a timer's waits for the agent's budget.
            let mut woken = true;
            loop {
                if !woken && !locks.observer_reads.try_take() {
                    tokio::select! {
                        () = events.closed() => return,
                        () = watch.changed() => woken = true,
                        () = tokio::time::sleep(BUDGET_RETRY) => {}
                    }
                    continue;
                }
                let mut wait = OBSERVE_EVERY;
                match locks.leader(&name).await {
                    Ok(leader) => {
                        let seen = leader
                            .as_ref()
                            .map(|l| (l.term, l.agent.clone(), l.owner.clone()));
                        if let Some(leader) = &leader {
                            wait = wait.min(Duration::from_millis(leader.validity_ms + 50));
                        }
                        // Elected a moment ago: its note (the term) comes
                        // before the announcement; shown without it only
                        // if the note stays missing.
                        let noteless = leader.as_ref().is_some_and(|l| l.term.is_none());
                        let young = *noteless_since.get_or_insert_with(Instant::now);
                        if !noteless {
                            noteless_since = None;
                        } else if young.elapsed() < NOTE_WAIT {
                            wait = wait.min(NOTE_WAIT);
                        }
                        let hold_back = noteless && young.elapsed() < NOTE_WAIT;
                        if !hold_back && last.as_ref() != Some(&seen) {
                            let event = match leader {
                                Some(leader) => ObserveEvent::Leader(leader),
                                None => ObserveEvent::NoLeader {
                                    election: name.to_string(),
                                },
                            };
                            if events.send(event).await.is_err() {
                                return;
                            }
                            last = Some(seen);
                        }
                    }
                    Err(_) => wait = locks.engine.retry_delay().max(Duration::from_millis(100)),
                }
                tokio::select! {
                    () = events.closed() => return,
                    () = watch.changed() => woken = true,
                    () = tokio::time::sleep(wait) => woken = false,
                }
            }
        });
        receiver
    }
}

/// How a leadership ended, from how its hold did: resigned when its
/// campaign or the agent's rules ended it, lost when it was taken.
fn ended(end: End) -> Leadership {
    match end {
        End::Closed => Leadership::Closed,
        End::MaxHold => Leadership::MaxHold,
        End::Shutdown => Leadership::Shutdown,
        End::RenewFailed => Leadership::RenewFailed,
        End::NoQuorum => Leadership::NoQuorum,
        End::NodeLost => Leadership::NodeLost,
        End::ForceReleased => Leadership::ForceReleased,
    }
}

/// What an observer compares to tell a change of leader: term, agent,
/// owner.
type Seen = (Option<u64>, Option<String>, Option<String>);

/// Aborts its task when dropped.
struct DropGuard(tokio::task::JoinHandle<()>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A leadership is counted lost exactly when its hold was lost, under
    /// the reason its campaign's `lost` event gave.
    #[test]
    fn a_leadership_ends_lost_only_when_its_hold_was_lost() {
        for end in End::ALL {
            let change = ended(end);
            assert_eq!(change.event() == "lost", end.is_loss(), "{end:?}");
            assert_eq!(change.event() == "resigned", !end.is_loss(), "{end:?}");
            assert_eq!(change.reason(), end.reason(), "{end:?}");
        }
    }
}
