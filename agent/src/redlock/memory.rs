//! A master in memory for the unit tests of the engine and the lock
//! service: keys with expiry on tokio's clock (paused in the tests), a
//! fencing counter, the messages announced on it, and a behaviour each
//! test sets (down, slow, lost state, no round 2).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redlock_wire::NodeState;
use tokio::sync::watch;
use tokio::time::Instant;

use super::fence::FenceSettings;
use super::master::{Claim, Extension, KeyState, Master, NodeError, Peeked, Store, Vote};
use super::observe::VoteLabel;
use super::{Drift, Settings};

/// The engine's settings in the unit tests: key prefix `t:`, 1% drift,
/// 10 ms between attempts without jitter.
pub(crate) fn settings(agent_name: Option<&str>, fence: FenceSettings) -> Settings {
    Settings {
        key_prefix: "t:".into(),
        release_channel_prefix: "t:released:".into(),
        drift: Drift::new(0.01),
        retry_delay: Duration::from_millis(10),
        retry_jitter: Duration::ZERO,
        agent_name: agent_name.map(str::to_string),
        fence,
        all_or_nothing: true,
        shared_apart: false,
        poll_waiters: false,
    }
}

/// How a master in memory behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Up,
    Down,
    /// Answers every request after this long.
    Slow(Duration),
    /// Lost its keys: every vote and extension says so.
    LostState,
    /// Votes, but fails round 2 of a fenced grant.
    NoRaise,
}

#[derive(Debug)]
pub(crate) struct Memory {
    pub(crate) name: String,
    mode: Mutex<Mode>,
    pub(crate) keys: Mutex<HashMap<String, (String, Instant)>>,
    /// A shared lock's readers at a lock key: token, until when.
    pub(crate) readers: Mutex<HashMap<String, HashMap<String, Instant>>>,
    pub(crate) counter: Mutex<u64>,
    /// Losses of keys seen, as [`Master::losses`] counts them.
    losses: watch::Sender<u64>,
    /// Every `(channel, message)` announced here, in order.
    pub(crate) announced: Mutex<Vec<(String, String)>>,
    /// Releases asked of this master, answered or not.
    pub(crate) releases: AtomicUsize,
}

impl Memory {
    pub(crate) fn new(i: usize) -> Arc<Memory> {
        Arc::new(Memory {
            name: format!("m{i}"),
            mode: Mutex::new(Mode::Up),
            keys: Mutex::new(HashMap::new()),
            readers: Mutex::new(HashMap::new()),
            counter: Mutex::new(0),
            losses: watch::Sender::new(0),
            announced: Mutex::new(Vec::new()),
            releases: AtomicUsize::new(0),
        })
    }

    pub(crate) fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    fn mode(&self) -> Mode {
        *self.mode.lock().unwrap()
    }

    /// The value of `key` while it has not expired.
    pub(crate) fn holds(&self, key: &str) -> Option<String> {
        let keys = self.keys.lock().unwrap();
        keys.get(key)
            .filter(|(_, until)| *until > Instant::now())
            .map(|(value, _)| value.clone())
    }

    /// The time a writer's key has left, as `PTTL` says on a master.
    fn left(&self, key: &str) -> Option<Duration> {
        let keys = self.keys.lock().unwrap();
        keys.get(key)
            .map(|(_, until)| until.saturating_duration_since(Instant::now()))
            .filter(|left| !left.is_zero())
    }

    /// The readers at `key` that have not expired.
    pub(crate) fn readers_at(&self, key: &str) -> Vec<String> {
        let now = Instant::now();
        let readers = self.readers.lock().unwrap();
        readers.get(key).map_or_else(Vec::new, |at| {
            at.iter()
                .filter(|(_, until)| **until > now)
                .map(|(token, _)| token.clone())
                .collect()
        })
    }

    /// Sets `key` as another client would.
    pub(crate) fn plant(&self, key: &str, value: &str, ttl: Duration) {
        self.keys
            .lock()
            .unwrap()
            .insert(key.into(), (value.into(), Instant::now() + ttl));
    }

    /// Loses every key, as a flushed master whose loss was seen.
    pub(crate) fn lose_keys(&self) {
        self.keys.lock().unwrap().clear();
        self.readers.lock().unwrap().clear();
        self.losses.send_modify(|n| *n += 1);
    }

    /// Writes the note `key` unless it holds `value` already as long.
    fn write_note(&self, key: &str, value: &str, ttl: Duration) {
        let until = Instant::now() + ttl;
        let mut keys = self.keys.lock().unwrap();
        let keep = keys
            .get(key)
            .is_some_and(|(held, at)| held == value && *at >= until);
        if !keep {
            keys.insert(key.to_string(), (value.to_string(), until));
        }
    }

    /// Deletes `key` (or its reader `value`) while it holds `value`.
    fn delete(&self, key: &str, value: &str) -> bool {
        let mut keys = self.keys.lock().unwrap();
        if keys.get(key).is_some_and(|(held, _)| held == value) {
            keys.remove(key);
            return true;
        }
        let mut readers = self.readers.lock().unwrap();
        readers
            .get_mut(key)
            .is_some_and(|at| at.remove(value).is_some())
    }

    /// Waits as the mode says; `Err` when the master does not answer.
    async fn answer(&self) -> Result<(), NodeError> {
        match self.mode() {
            Mode::Down => Err(NodeError::NotConnected),
            Mode::Slow(after) => {
                tokio::time::sleep(after).await;
                Ok(())
            }
            Mode::Up | Mode::LostState | Mode::NoRaise => Ok(()),
        }
    }
}

impl Master for Memory {
    fn name(&self) -> &str {
        &self.name
    }

    fn state(&self) -> NodeState {
        match self.mode() {
            Mode::Down => NodeState::Down,
            _ => NodeState::Up,
        }
    }

    fn server_id(&self) -> Option<u64> {
        None
    }

    fn unusable_reason(&self) -> String {
        "down".into()
    }

    fn count_vote(&self, _: VoteLabel) {}

    fn losses(&self) -> u64 {
        *self.losses.borrow()
    }

    /// No waiting flag: nothing here publishes (a release wakes the queue
    /// through the agent, as on a real master without other agents). A
    /// waiting voter learns how long a writer's key has left, as on Redis.
    async fn vote(
        &self,
        claim: &Arc<Claim>,
        ttl: Duration,
        read_counter: bool,
        waiting: bool,
    ) -> Vote {
        let (key, value) = (claim.key(), claim.token());
        if let Err(e) = self.answer().await {
            return Vote::Failed(e);
        }
        if self.mode() == Mode::LostState {
            return Vote::LostState;
        }
        // One key is a writer's value or readers, never both (as the
        // batch script keeps it on Redis).
        let readers = self.readers_at(key);
        let taken = match (claim.is_shared(), self.holds(key)) {
            (true, held) => held.is_some(),
            (false, Some(held)) => held != value,
            (false, None) => !readers.is_empty(),
        };
        if taken {
            let left = waiting.then(|| self.left(key)).flatten();
            return Vote::Taken { left };
        }
        if claim.is_shared() {
            let until = Instant::now() + ttl;
            let mut all = self.readers.lock().unwrap();
            all.entry(key.to_string())
                .or_default()
                .insert(value.to_string(), until);
        } else {
            self.plant(key, value, ttl);
        }
        let counter = if read_counter {
            *self.counter.lock().unwrap()
        } else {
            0
        };
        Vote::Granted { counter }
    }

    async fn raise_fence(&self, claim: &Arc<Claim>, fence: u64) -> Result<bool, NodeError> {
        let (key, value) = (claim.key(), claim.token());
        self.answer().await?;
        if self.mode() == Mode::NoRaise {
            return Err(NodeError::Other("refused".into()));
        }
        let reader = self.readers_at(key).iter().any(|t| t == value);
        if self.holds(key).as_deref() != Some(value) && !reader {
            return Ok(false);
        }
        let mut counter = self.counter.lock().unwrap();
        *counter = (*counter).max(fence);
        Ok(true)
    }

    async fn extend(&self, claim: &Arc<Claim>, ttl: Duration) -> Result<Extension, NodeError> {
        let (key, value) = (claim.key(), claim.token());
        self.answer().await?;
        if self.mode() == Mode::LostState {
            return Ok(Extension::LostState);
        }
        if self.holds(key).as_deref() == Some(value) {
            self.plant(key, value, ttl);
            Ok(Extension::Extended)
        } else if self.readers_at(key).iter().any(|t| t == value) {
            let mut all = self.readers.lock().unwrap();
            all.entry(key.to_string())
                .or_default()
                .insert(value.to_string(), Instant::now() + ttl);
            Ok(Extension::Extended)
        } else {
            Ok(Extension::NotHeld)
        }
    }

    /// Released when called, as a node's release is queued then and runs
    /// before anything queued after it; answered as the mode says.
    fn release(
        self: &Arc<Self>,
        claim: &Arc<Claim>,
        _channel: &Arc<str>,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static {
        self.releases.fetch_add(1, Ordering::Relaxed);
        let released = (self.mode() != Mode::Down).then(|| self.delete(claim.key(), claim.token()));
        let node = Arc::clone(self);
        async move {
            node.answer().await?;
            Ok(released.unwrap_or(false))
        }
    }

    async fn peek(&self, keys: &[String]) -> Result<Vec<Peeked>, NodeError> {
        self.answer().await?;
        Ok(keys
            .iter()
            .map(|key| match self.holds(key) {
                None => Peeked::Gone,
                Some(value) => value.parse().map_or(Peeked::Held, Peeked::Number),
            })
            .collect())
    }

    async fn note(&self, key: &str, value: &str, ttl: Duration) -> Result<(), NodeError> {
        self.answer().await?;
        self.write_note(key, value, ttl);
        Ok(())
    }

    /// Written at once, as a real master's is queued at once; a slow
    /// master's later, a down master's never.
    fn note_queued(self: &Arc<Self>, key: &str, value: &str, ttl: Duration) {
        match self.mode() {
            Mode::Down => {}
            Mode::Slow(_) => {
                let (node, key, value) = (Arc::clone(self), key.to_string(), value.to_string());
                tokio::spawn(async move { node.note(&key, &value, ttl).await });
            }
            Mode::Up | Mode::LostState | Mode::NoRaise => self.write_note(key, value, ttl),
        }
    }

    async fn keep_note(&self, key: &str, ttl: Duration) -> Result<(), NodeError> {
        self.answer().await?;
        let until = Instant::now() + ttl;
        let now = Instant::now();
        if let Some((_, at)) = self.keys.lock().unwrap().get_mut(key) {
            if *at > now && *at < until {
                *at = until;
            }
        }
        Ok(())
    }
}

impl Store for Memory {
    fn loss_events(&self) -> watch::Receiver<u64> {
        self.losses.subscribe()
    }

    async fn force_delete(&self, key: &str) -> Result<Option<String>, NodeError> {
        self.answer().await?;
        let value = self.holds(key);
        self.keys.lock().unwrap().remove(key);
        Ok(value)
    }

    async fn announce(&self, channel: &str, message: &str) -> Result<(), NodeError> {
        self.answer().await?;
        self.announced
            .lock()
            .unwrap()
            .push((channel.into(), message.into()));
        Ok(())
    }

    /// Every name in one step; `pattern` is a listing's: an escaped prefix
    /// and `*`.
    async fn list_names(
        &self,
        _cursor: u64,
        pattern: &str,
        _count: u64,
    ) -> Result<(u64, Vec<String>), NodeError> {
        self.answer().await?;
        let prefix = pattern
            .strip_suffix('*')
            .unwrap_or(pattern)
            .replace('\\', "");
        let now = Instant::now();
        let names = self
            .keys
            .lock()
            .unwrap()
            .iter()
            .filter(|(key, (_, until))| key.starts_with(&prefix) && *until > now)
            .map(|(key, _)| key.clone())
            .collect();
        Ok((0, names))
    }

    async fn list_keys(&self, keys: &[String]) -> Result<Vec<KeyState>, NodeError> {
        self.answer().await?;
        let now = Instant::now();
        Ok(keys
            .iter()
            .map(|key| match self.holds(key) {
                Some(value) => {
                    let until = self.keys.lock().unwrap()[key].1;
                    KeyState {
                        key: key.clone(),
                        value: Some(value),
                        pttl: until.duration_since(now).as_millis() as i64,
                        readers: Vec::new(),
                    }
                }
                None => KeyState {
                    key: key.clone(),
                    value: None,
                    pttl: -2,
                    readers: Vec::new(),
                },
            })
            .collect())
    }
}
