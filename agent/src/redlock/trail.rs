//! What one request's rounds saw, for the span that traces it: each
//! master's vote and how long it took, how many rounds ran, and when and
//! where in line the request started to wait. Kept only for a request
//! whose caller follows it ([`follow`], when its span is recorded): the
//! engine and the waiters note into the trail of the task they run in, and
//! without one a note is a thread-local read and nothing else (no clock
//! read, no allocation). The engine knows nothing of traces; the telemetry
//! turns a [`Seen`] into attributes.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::task::futures::TaskLocalFuture;

use super::observe::VoteLabel;

tokio::task_local! {
    static TRAIL: Arc<Trail>;
}

/// The notes of one request, shared by the task that runs it and the
/// caller that reads them when it is answered.
#[derive(Debug, Default)]
pub struct Trail {
    seen: Mutex<Seen>,
}

/// What a request's rounds saw.
#[derive(Debug, Default, Clone)]
pub struct Seen {
    /// Rounds of votes run (one per try while waiting).
    pub rounds: u32,
    /// The last round's votes, in the order they came.
    pub votes: Vec<VoteSeen>,
    /// When the request joined its queue to wait, if it did.
    pub waited_from: Option<Instant>,
    /// Waiters ahead of it on this agent when it joined the queue.
    pub queue_position: Option<usize>,
}

/// One master's answer in a round.
#[derive(Debug, Clone)]
pub struct VoteSeen {
    pub node: Arc<str>,
    pub vote: VoteLabel,
    /// From the round's start to this answer.
    pub latency: Duration,
}

impl Trail {
    /// What was noted so far, taken out (the trail is empty after).
    pub fn take(&self) -> Seen {
        std::mem::take(&mut *self.seen.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// `future`, run with `trail` as the trail its rounds and waits note into.
pub fn follow<F: Future>(trail: Arc<Trail>, future: F) -> TaskLocalFuture<Arc<Trail>, F> {
    TRAIL.scope(trail, future)
}

/// Whether the running task's request is followed: only then are votes
/// timed ([`Heard`]).
pub fn followed() -> bool {
    TRAIL.try_with(|_| ()).is_ok()
}

/// Notes into the running task's trail, if it has one.
pub fn note(f: impl FnOnce(&mut Seen)) {
    let _ =
        TRAIL.try_with(|trail| f(&mut trail.seen.lock().unwrap_or_else(PoisonError::into_inner)));
}

/// The votes of one attempt, as its loop hears them, each timed from when
/// the attempt asked; noted in the trail together when the attempt ends
/// (this is dropped): one note per attempt, not one per master.
#[derive(Debug)]
pub struct Heard {
    asked: Instant,
    votes: Vec<VoteSeen>,
}

impl Heard {
    /// `None` unless the request is followed: an attempt that is not
    /// traced reads no clock for its votes.
    pub fn start(masters: usize) -> Option<Heard> {
        followed().then(|| Heard {
            asked: Instant::now(),
            votes: Vec::with_capacity(masters),
        })
    }

    pub fn push(&mut self, node: Arc<str>, vote: VoteLabel) {
        let latency = self.asked.elapsed();
        self.votes.push(VoteSeen {
            node,
            vote,
            latency,
        });
    }
}

impl Drop for Heard {
    /// Several attempts of one round (a lock on several resources) add
    /// their votes to the round's.
    fn drop(&mut self) {
        let votes = std::mem::take(&mut self.votes);
        note(|seen| {
            if seen.votes.is_empty() {
                seen.votes = votes;
            } else {
                seen.votes.extend(votes);
            }
        });
    }
}

/// The running task's request joins a queue with `ahead` waiters before it
/// on this agent; its first wait is the one its span tells.
pub fn queued(ahead: usize) {
    note(|seen| {
        seen.waited_from.get_or_insert_with(Instant::now);
        seen.queue_position.get_or_insert(ahead);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn notes_reach_the_trail_only_when_followed() {
        note(|s| s.rounds += 1);
        assert!(!followed());
        let trail = Arc::new(Trail::default());
        follow(Arc::clone(&trail), async {
            assert!(followed());
            note(|s| s.rounds += 1);
        })
        .await;
        assert_eq!(trail.take().rounds, 1);
    }

    /// An attempt's votes reach the trail when it ends, in the order they
    /// were heard; a second attempt of the round (another resource) adds
    /// its own; an attempt that is not followed times nothing.
    #[tokio::test]
    async fn heard_votes_are_noted_together_when_the_attempt_ends() {
        assert!(Heard::start(3).is_none());
        let trail = Arc::new(Trail::default());
        follow(Arc::clone(&trail), async {
            let mut first = Heard::start(2).expect("followed");
            first.push("m2".into(), VoteLabel::Granted);
            first.push("m1".into(), VoteLabel::Taken);
            assert!(trail.take().votes.is_empty(), "noted before the end");
            drop(first);
            let mut second = Heard::start(1).expect("followed");
            second.push("m3".into(), VoteLabel::Granted);
        })
        .await;
        let heard: Vec<(String, VoteLabel)> = trail
            .take()
            .votes
            .into_iter()
            .map(|v| (v.node.to_string(), v.vote))
            .collect();
        assert_eq!(
            heard,
            [
                ("m2".to_string(), VoteLabel::Granted),
                ("m1".to_string(), VoteLabel::Taken),
                ("m3".to_string(), VoteLabel::Granted)
            ]
        );
    }
}
