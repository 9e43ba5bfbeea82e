//! A stream's events on their way to its client: holds, campaigns and
//! observers send them here, the API writes them.
//!
//! A client that stops reading must never stop a renewal, and must never
//! be told later that a grant is valid when it is not. So:
//! - Each event is stamped with the moment its figures were true
//!   ([`Stamped`]); the API writes a validity as what is left *when it
//!   writes the line*, and drops a `renewed` whose validity has passed
//!   ([`Timely::aged`]).
//! - A renewal never waits for the client: [`Events::offer`] queues a
//!   `renewed` only while room is left for the last event, and drops it
//!   otherwise (the client has older ones unread). The last event (`lost`)
//!   always finds room: nothing else fills the channel's last slot.
//! - A `renewed` with any event queued behind it is outdated by that one
//!   ([`Timely::superseded`]) and never written.
//!
//! What the API writes waits in the socket until the client reads it: the
//! API writes a stream's next event only once the client has read every
//! byte before it (see `api::connection`), so a client that stopped
//! reading finds at most one line written before it stopped, then the
//! events since.

use std::time::Duration;

use redlock_wire::election::{CampaignEvent, ObserveEvent};
use redlock_wire::HoldEvent;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Room for events a client has not read yet; the last slot is kept for
/// the last event.
const ROOM: usize = 8;

/// An event and the moment its figures were true.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamped<T> {
    pub event: T,
    pub at: Instant,
}

/// A stream event whose figures age.
pub trait Timely: Sized {
    /// The event as true at `now`, made `age` earlier: its validity less
    /// that age; `None` when it says something no longer true (a renewal
    /// whose validity has passed). The first and the last event are never
    /// dropped.
    fn aged(self, age: Duration) -> Option<Self>;

    /// Whether any later event makes this one worthless (a renewal: the
    /// next event is a newer renewal or the end).
    fn superseded(&self) -> bool;
}

/// Milliseconds of `validity_ms` left after `age`.
fn left(validity_ms: u64, age: Duration) -> u64 {
    validity_ms.saturating_sub(u64::try_from(age.as_millis()).unwrap_or(u64::MAX))
}

impl Timely for HoldEvent {
    fn aged(self, age: Duration) -> Option<HoldEvent> {
        match self {
            HoldEvent::Acquired {
                token,
                validity_ms,
                ttl_ms,
                fence,
                permit,
                hold_count,
            } => Some(HoldEvent::Acquired {
                token,
                validity_ms: left(validity_ms, age),
                ttl_ms,
                fence,
                permit,
                hold_count,
            }),
            HoldEvent::Renewed { validity_ms } => match left(validity_ms, age) {
                0 => None,
                validity_ms => Some(HoldEvent::Renewed { validity_ms }),
            },
            lost @ HoldEvent::Lost { .. } => Some(lost),
        }
    }

    fn superseded(&self) -> bool {
        matches!(self, HoldEvent::Renewed { .. })
    }
}

impl Timely for CampaignEvent {
    fn aged(self, age: Duration) -> Option<CampaignEvent> {
        match self {
            CampaignEvent::Elected {
                term,
                validity_ms,
                ttl_ms,
            } => Some(CampaignEvent::Elected {
                term,
                validity_ms: left(validity_ms, age),
                ttl_ms,
            }),
            CampaignEvent::Renewed { validity_ms } => match left(validity_ms, age) {
                0 => None,
                validity_ms => Some(CampaignEvent::Renewed { validity_ms }),
            },
            other => Some(other),
        }
    }

    fn superseded(&self) -> bool {
        matches!(self, CampaignEvent::Renewed { .. })
    }
}

impl Timely for ObserveEvent {
    fn aged(self, age: Duration) -> Option<ObserveEvent> {
        match self {
            ObserveEvent::Leader(mut leader) => {
                leader.validity_ms = left(leader.validity_ms, age);
                Some(ObserveEvent::Leader(leader))
            }
            other => Some(other),
        }
    }

    fn superseded(&self) -> bool {
        false
    }
}

/// The sending end of a stream's events.
#[derive(Debug)]
pub struct Events<T> {
    sender: mpsc::Sender<Stamped<T>>,
}

impl<T> Clone for Events<T> {
    fn clone(&self) -> Events<T> {
        Events {
            sender: self.sender.clone(),
        }
    }
}

/// What the API reads of a stream.
pub type Receiver<T> = mpsc::Receiver<Stamped<T>>;

/// A new stream: its sending end and what the API reads.
pub fn stream<T>() -> (Events<T>, Receiver<T>) {
    let (sender, receiver) = mpsc::channel(ROOM);
    (Events { sender }, receiver)
}

impl<T> Events<T> {
    /// Queues the stream's first event, true now.
    pub fn first(&self, event: T) {
        let first = Stamped {
            event,
            at: Instant::now(),
        };
        // Cannot fail but for a client gone already (then nothing reads
        // it): a new stream has room.
        let _ = self.sender.try_send(first);
    }

    /// Sends `event`, true now, waiting for room; `Err` when the client
    /// is gone. For events that must arrive (the first, a leader's
    /// change, the last): the last always finds room at once.
    pub async fn send(&self, event: T) -> Result<(), T> {
        self.send_as_of(event, Instant::now()).await
    }

    /// As [`Events::send`], for an event true at `at` (passed on from
    /// another stream).
    pub async fn send_as_of(&self, event: T, at: Instant) -> Result<(), T> {
        self.sender
            .send(Stamped { event, at })
            .await
            .map_err(|e| e.0.event)
    }

    /// Queues `event`, true now, if room is left besides the slot kept
    /// for the last event; never waits. `false` when it was dropped (the
    /// client has events unread, or is gone).
    pub fn offer(&self, event: T) -> bool {
        self.offer_as_of(event, Instant::now())
    }

    /// As [`Events::offer`], for an event true at `at`.
    pub fn offer_as_of(&self, event: T, at: Instant) -> bool {
        if self.sender.capacity() < 2 {
            return false;
        }
        self.sender.try_send(Stamped { event, at }).is_ok()
    }

    /// Whether the client is gone.
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    /// Until the client is gone.
    pub async fn closed(&self) {
        self.sender.closed().await;
    }
}

/// The next event of `receiver` worth writing now: outdated renewals are
/// skipped and validities aged to now. `None` once the stream ends.
pub async fn next_timely<T: Timely>(receiver: &mut Receiver<T>) -> Option<T> {
    loop {
        let Stamped { event, at } = receiver.recv().await?;
        if event.superseded() && !receiver.is_empty() {
            continue;
        }
        if let Some(event) = event.aged(at.elapsed()) {
            return Some(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn renewals_never_wait_and_the_last_event_always_has_room() {
        let (events, mut receiver) = stream::<HoldEvent>();
        let offered = (0..100)
            .filter(|_| events.offer(HoldEvent::Renewed { validity_ms: 900 }))
            .count();
        assert_eq!(offered, ROOM - 1, "one slot is kept for the last event");
        let lost = HoldEvent::Lost {
            reason: "max_hold".into(),
        };
        events.send(lost.clone()).await.unwrap();
        assert_eq!(
            next_timely(&mut receiver).await,
            Some(lost),
            "the renewals queued before the end are never written"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_renewal_is_written_with_the_validity_left_or_not_at_all() {
        let (events, mut receiver) = stream::<HoldEvent>();
        events.offer(HoldEvent::Renewed { validity_ms: 900 });
        tokio::time::advance(Duration::from_millis(300)).await;
        assert_eq!(
            next_timely(&mut receiver).await,
            Some(HoldEvent::Renewed { validity_ms: 600 })
        );
        events.offer(HoldEvent::Renewed { validity_ms: 900 });
        tokio::time::advance(Duration::from_millis(900)).await;
        drop(events);
        assert_eq!(
            next_timely(&mut receiver).await,
            None,
            "its validity passed"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_event_is_written_however_late() {
        let (events, mut receiver) = stream::<CampaignEvent>();
        events
            .send(CampaignEvent::Elected {
                term: 4,
                validity_ms: 100,
                ttl_ms: 300,
            })
            .await
            .unwrap();
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(
            next_timely(&mut receiver).await,
            Some(CampaignEvent::Elected {
                term: 4,
                validity_ms: 0,
                ttl_ms: 300,
            })
        );
    }
}
