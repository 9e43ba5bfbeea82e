//! The lock commands: the vote, round 2 of a fenced grant, extend and
//! release, and a semaphore's reads and the bookkeeping notes beside
//! them; [`Master`], the engine's view of this master; and the batch
//! they go in: every one goes through a queue to this node's batch task,
//! which sends whatever queued while its previous batch was on the way as
//! one call of [`super::conn::BATCH`].
//!
//! ## Why batches
//! Under load, most of a lock's cost on a master is per call, not per
//! command: reading and parsing the request, a system call each way, the
//! script lookup, the reply. At 64 clients a master gets dozens of votes
//! within one round trip; sent together they cost one call.
//!
//! ## Behavior
//! - At most one batch per master is on its way at a time. A command that
//!   finds the master idle leaves after one turn of the runtime, with what
//!   the tasks ready in that turn queued (see [`gather`]): no timer, no
//!   latency added at low load but that turn. Batches grow while a master
//!   is busy, and with the requests that arrive together.
//! - Each command runs in the script exactly as it would alone, in queue
//!   order; one command's error (WRONGTYPE, OOM) is its own answer and never
//!   fails the others. The marker is read once per batch: a script is
//!   atomic, so no flush can fall between two of its commands.
//! - The master's time starts when its batch is on its way: it has the
//!   node timeout to answer, and an answer that arrived while the agent was
//!   busy is still found (see [`super::conn::answer_within`]). Time a
//!   command spent queued behind the previous batch, and time the agent was
//!   too busy to write the call or read its answer, is the agent's: never a
//!   `timeout` of the master.
//! - Every command still has an overall bound, counted from when it was
//!   queued (`Command::overall`): one that could not be sent within it is
//!   answered [`NodeError::Backlog`] unsent, and so is a batch the agent
//!   could not even see on its way within the last of its commands'
//!   bounds. Neither counts against the master nor changes its state. A
//!   command whose caller is gone is not sent.
//! - A failed batch (connection lost, timeout, NOSCRIPT that could not be
//!   reloaded) fails each of its commands with the same error, recorded
//!   once.
//! - Under the test switch `REDLOCK_TEST_CHARGE_QUEUED_TIME` (control runs
//!   only), the old bounds come back: a command queued longer than the
//!   node timeout is answered `timeout` unsent, and the batch is bounded by
//!   the node timeout from the call, however busy the agent is.
//! - The task holds only a weak reference to its node: it ends when the
//!   node is dropped.

use std::future::Future;
use std::sync::{Arc, Mutex, Once, Weak};
use std::time::{Duration, Instant};

use redlock_wire::keys::slot_key;
use redlock_wire::NodeState;
use tokio::sync::{mpsc, oneshot};

use super::conn::{Evaluated, Within};
use super::{classify_text, clock, Detector, Node};
use crate::redlock::master::{Claim, Extension, Master, NodeError, Peeked, Vote};
use crate::redlock::observe::{Op, VoteLabel};

mod command;

pub use command::Command;

impl Node {
    /// Round 2 of a fenced grant (see [`super::conn::BATCH`], `f`): raises this
    /// master's fencing counter to `fence` while the claim's key still holds
    /// its token. `Ok(true)` when raised (or already as high).
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn raise_fence(&self, claim: &Arc<Claim>, fence: u64) -> Result<bool, NodeError> {
        let answer = self.batched(claim, Command::Fence { fence }).await?;
        Ok(answer.status == 1)
    }

    /// This master's fencing counter (0 when it has none), for the catch-up
    /// of another master's readmission.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or the
    /// counter is not a number.
    pub async fn read_fence(&self) -> Result<u64, NodeError> {
        let fence_key = self.fence_key.as_str();
        let value = self
            .request(Op::Fence, |mut conn| async move {
                redis::cmd("GET")
                    .arg(fence_key)
                    .query_async::<Option<String>>(&mut conn)
                    .await
            })
            .await?;
        match value {
            None => Ok(0),
            Some(text) => text.parse().map_err(|_| {
                self.record_error(NodeError::Other(format!(
                    "the fencing counter {fence_key:?} holds {text:?}, not a number"
                )))
            }),
        }
    }

    /// Compare-and-delete, announced on `channel` when a waiter flagged the
    /// key, queued for this master's next batch now, before the returned
    /// future is first polled. `Ok(true)` when this master held the token.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub fn release(
        &self,
        claim: &Arc<Claim>,
        channel: &Arc<str>,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static {
        let command = Command::Release {
            channel: Arc::clone(channel),
        };
        let answer = self.queue(Arc::clone(claim), command);
        async move { Ok(answered(answer.await)?.status == 1) }
    }

    /// Compare-and-pexpire, checking the incarnation marker in the same
    /// script.
    ///
    /// # Errors
    /// When the master is not connected, does not answer in time, or fails.
    pub async fn extend(&self, claim: &Arc<Claim>, ttl: Duration) -> Result<Extension, NodeError> {
        let answer = self.batched(claim, Command::Extend { ttl }).await?;
        Ok(match answer.status {
            1 => Extension::Extended,
            -1 => {
                self.lost_state_at(claim.key(), Detector::Marker);
                Extension::LostState
            }
            _ => Extension::NotHeld,
        })
    }
}

impl Node {
    /// A vote or extension of `key` found the marker missing (or, on a
    /// cluster, naming another node), or the master evicted keys since the
    /// marker was written: the whole master is quarantined, or on a cluster
    /// only the key's slot.
    fn lost_state_at(&self, key: &str, detector: Detector) {
        let why = match detector {
            Detector::Eviction => {
                "the node evicted keys since the slot's marker was written (seen in a vote)"
            }
            _ => "marker missing or naming another node in a vote",
        };
        match self.slot_of(key) {
            Some(slot) => self.slot_lost(slot, why),
            None => self.lost_state(detector),
        }
    }
}

/// The Redis master as the engine sees it: each request one of the lock
/// commands above.
impl Master for Node {
    fn name(&self) -> &str {
        &self.name
    }

    fn shared_name(&self) -> Arc<str> {
        Arc::clone(&self.name)
    }

    fn probe_soon(&self) {
        self.wake.notify_one();
    }

    fn master_time_us(&self) -> Option<u64> {
        Node::master_time_us(self)
    }

    fn is_stale(&self) -> bool {
        Node::state(self) == NodeState::Down
            || self
                .probed_at()
                .is_none_or(|at| at.elapsed() > self.stale_after)
    }

    async fn refresh(&self) {
        // A probe this recent is the truth already: many requests that
        // find the view stale at once wait for one probe.
        self.fresh(REFRESH_AGE, self.probe_timeout()).await;
    }

    fn state(&self) -> NodeState {
        Node::state(self)
    }

    fn server_id(&self) -> Option<u64> {
        Node::server_id(self)
    }

    fn unusable_reason(&self) -> String {
        let snap = self.snapshot();
        match (snap.state, snap.detector, snap.last_error) {
            (NodeState::Quarantined, detector, _) => format!(
                "quarantined for {}ms more (lost keys possible, detected by {})",
                snap.quarantine_remaining.as_millis(),
                detector.map_or("?", |d| d.as_str())
            ),
            (state, _, Some(err)) => format!("{} ({err})", state.as_str()),
            (state, _, None) => state.as_str().to_string(),
        }
    }

    fn count_vote(&self, vote: VoteLabel) {
        self.observer.vote(vote);
    }

    fn losses(&self) -> u64 {
        Node::losses(self)
    }

    /// A single server's loss takes every key; a cluster's, the keys of the
    /// slots it keeps out (a quarantine longer than any TTL, so a slot lost
    /// since `mark` is still out when a hold looks).
    fn lost_since(&self, key: &str, mark: u64) -> bool {
        Node::losses(self) != mark && (!self.is_cluster() || self.slot_out(key))
    }

    /// The vote: `SET key value NX PX ttl` behind the incarnation marker
    /// (see [`super::conn::BATCH`]), reading the fencing counter in the same
    /// script when `read_counter`, and setting the key's waiting flag when
    /// it is taken and the voter is `waiting`.
    async fn vote(
        &self,
        claim: &Arc<Claim>,
        ttl: Duration,
        read_counter: bool,
        waiting: bool,
    ) -> Vote {
        let command = Command::Vote {
            ttl,
            read_counter,
            waiting,
        };
        match self.batched(claim, command).await {
            Ok(Answer {
                status: 1, counter, ..
            }) => Vote::Granted { counter },
            Ok(Answer { status: -1, .. }) => {
                self.lost_state_at(claim.key(), Detector::Marker);
                Vote::LostState
            }
            Ok(Answer { status: -3, .. }) => {
                self.lost_state_at(claim.key(), Detector::Eviction);
                Vote::LostState
            }
            Ok(Answer { left, .. }) => Vote::Taken { left },
            Err(e) => Vote::Failed(e),
        }
    }

    async fn raise_fence(&self, claim: &Arc<Claim>, fence: u64) -> Result<bool, NodeError> {
        Node::raise_fence(self, claim, fence).await
    }

    async fn extend(&self, claim: &Arc<Claim>, ttl: Duration) -> Result<Extension, NodeError> {
        Node::extend(self, claim, ttl).await
    }

    fn release(
        self: &Arc<Self>,
        claim: &Arc<Claim>,
        channel: &Arc<str>,
    ) -> impl Future<Output = Result<bool, NodeError>> + Send + 'static {
        Node::release(self, claim, channel)
    }

    /// One `p` per key, in this master's next batch (on a cluster, one
    /// call per slot the keys fall in).
    async fn peek(&self, keys: &[String]) -> Result<Vec<Peeked>, NodeError> {
        let peeks = keys.iter().map(|key| async move {
            let claim = Claim::new(key.clone(), "");
            self.batched(&claim, Command::Peek).await
        });
        futures::future::join_all(peeks)
            .await
            .into_iter()
            .map(|answer| {
                answer.map(|answer| match answer.status {
                    0 => Peeked::Gone,
                    2 => Peeked::Number(answer.counter),
                    _ => Peeked::Held,
                })
            })
            .collect()
    }

    async fn note(&self, key: &str, value: &str, ttl: Duration) -> Result<(), NodeError> {
        let claim = Claim::new(key.to_string(), value);
        self.batched(&claim, Command::Note { ttl })
            .await
            .map(|_| ())
    }

    fn note_queued(self: &Arc<Self>, key: &str, value: &str, ttl: Duration) {
        let claim = Claim::new(key.to_string(), value);
        let answer = self.queue(claim, Command::Note { ttl });
        let key = key.to_string();
        tokio::spawn(async move {
            if let Ok(Err(e)) = answer.await {
                tracing::debug!(key, error = %e, "note not written on a master");
            }
        });
    }

    async fn keep_note(&self, key: &str, ttl: Duration) -> Result<(), NodeError> {
        let claim = Claim::new(key.to_string(), "");
        self.batched(&claim, Command::Keep { ttl })
            .await
            .map(|_| ())
    }
}

/// How recent a probe must be for [`Master::refresh`] to wait for no
/// other.
const REFRESH_AGE: Duration = Duration::from_millis(100);

/// Most commands in one script call: enough for every client's vote at
/// hundreds of clients, short enough that one call never holds a master
/// for long.
pub const MAX_BATCH: usize = 256;

/// Most turns of the runtime a batch waits for more commands (see
/// [`gather`]). At 8 clients on 5 local masters, turns until one
/// brings nothing (at most 4) made batches about 5.5 commands where
/// sending at once made 3.3 (docs/benchmarks.md, "Cost per cycle").
const GATHER_TURNS: usize = 4;

/// A command's answer: its status (see [`super::conn::BATCH`]) and, for a vote
/// that read it, the fencing counter (0 when the master has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub status: i64,
    pub counter: u64,
    /// A waiting vote that found the lock taken: the time its key has left
    /// on this master (`PTTL`; `None` where it has no TTL).
    pub left: Option<Duration>,
}

/// A queued command and where its answer goes.
#[derive(Debug)]
struct Job {
    claim: Arc<Claim>,
    command: Command,
    queued: Instant,
    reply: oneshot::Sender<Result<Answer, NodeError>>,
}

/// The queue to a node's batch task, started on first use (a node is built
/// before the runtime runs the agent).
#[derive(Debug)]
pub struct Batcher {
    queue: mpsc::UnboundedSender<Job>,
    start: Once,
    pending: Mutex<Option<(mpsc::UnboundedReceiver<Job>, Weak<Node>)>>,
}

impl Batcher {
    pub fn new(node: Weak<Node>) -> Batcher {
        let (queue, receiver) = mpsc::unbounded_channel();
        Batcher {
            queue,
            start: Once::new(),
            pending: Mutex::new(Some((receiver, node))),
        }
    }

    fn submit(&self, job: Job) {
        self.start.call_once(|| {
            let pending = self
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            if let Some((receiver, node)) = pending {
                tokio::spawn(run(node, receiver));
            }
        });
        // The task ends only when the node is dropped, and the node is
        // borrowed here: the queue is open.
        let _ = self.queue.send(job);
    }
}

impl Node {
    /// Queues one lock command for this master's next batch and waits for
    /// its answer.
    ///
    /// # Errors
    /// When the master is not connected, the batch failed or timed out, the
    /// command waited longer than the node timeout, or the master refused
    /// this command (WRONGTYPE, OOM, READONLY, ...).
    pub(super) async fn batched(
        &self,
        claim: &Arc<Claim>,
        command: Command,
    ) -> Result<Answer, NodeError> {
        // A cluster slot in quarantine votes no without asking: its marker
        // check would fail on the master too, or (readmission pending)
        // its keys are not trusted yet.
        if self.marker_check
            && matches!(command, Command::Vote { .. } | Command::Extend { .. })
            && self.slot_out(claim.key())
        {
            return Ok(Answer {
                status: -1,
                counter: 0,
                left: None,
            });
        }
        answered(self.queue(Arc::clone(claim), command).await)
    }

    /// Queues one lock command for this master's next batch, now.
    fn queue(
        &self,
        claim: Arc<Claim>,
        command: Command,
    ) -> oneshot::Receiver<Result<Answer, NodeError>> {
        let (reply, answer) = oneshot::channel();
        let queued = Instant::now();
        self.batcher.submit(Job {
            claim,
            command,
            queued,
            reply,
        });
        answer
    }

    /// Sends `jobs` as one script call and answers each.
    async fn send_batch(&self, jobs: &mut Vec<Job>) {
        let now = Instant::now();
        let overall = self.overall_bound();
        let mut sent = Vec::with_capacity(jobs.len());
        // How long the batch may stay on its way: until the last of its
        // commands' overall bounds.
        let mut limit = Duration::ZERO;
        let mut expired = false;
        for job in jobs.drain(..) {
            if job.reply.is_closed() {
                continue;
            }
            let waited = now.duration_since(job.queued);
            if self.charge_queued {
                if waited >= self.timeout {
                    let _ = job.reply.send(Err(NodeError::Timeout(self.timeout)));
                    continue;
                }
            } else if let Some(left) = job.command.overall(overall).checked_sub(waited) {
                limit = limit.max(left);
            } else {
                expired = true;
                let _ = job.reply.send(Err(NodeError::Backlog(waited)));
                continue;
            }
            sent.push(job);
        }
        if expired {
            // Counted once, as a failed batch is.
            self.observer.backlog();
        }
        *jobs = sent;
        if jobs.is_empty() {
            return;
        }
        let Some(conn) = self.connection() else {
            for job in jobs.drain(..) {
                let _ = job.reply.send(Err(NodeError::NotConnected));
            }
            return;
        };
        if !self.is_cluster() && self.state() != NodeState::Up {
            // Quarantined since these were queued (a restart or a clock
            // seen by another batch): votes and extensions no longer count;
            // releases and fences still go.
            let (refused, kept): (Vec<Job>, Vec<Job>) =
                jobs.drain(..).partition(|job| job.command.needs_trust());
            *jobs = kept;
            for job in refused {
                let _ = job.reply.send(Err(NodeError::Other(format!(
                    "{} was quarantined while the command was queued",
                    self.name
                ))));
            }
            if jobs.is_empty() {
                return;
            }
        }
        if !self.is_cluster() {
            return self.send_group(conn, None, jobs, limit).await;
        }
        // A script's keys must share a slot: one call per slot, all at once.
        let mut groups = super::cluster::by_slot(jobs.drain(..), |job| job.claim.key());
        futures::future::join_all(
            groups
                .iter_mut()
                .map(|(slot, group)| self.send_group(conn.clone(), Some(*slot), group, limit)),
        )
        .await;
    }

    /// Sends `jobs` (all in `slot` on a cluster) as one script call and
    /// answers each; the master has the node timeout from now, the call
    /// `limit` in all (see [`super::conn::answer_within`]).
    async fn send_group(
        &self,
        conn: super::Conn,
        slot: Option<u16>,
        jobs: &mut Vec<Job>,
        limit: Duration,
    ) {
        self.observer.batch(jobs.len());
        let call = self.batch_call(slot, jobs);
        let mut conn = conn;
        let sent = clock::since_boot();
        // A loss seen while the batch is on its way (a probe that found the
        // clock moved or a new run_id, another batch's missing marker)
        // may concern what this batch's votes read: they do not count.
        let mark = Node::losses(self);
        let result = if self.charge_queued {
            // The control: bounded from the call, the agent's time included.
            if slot.is_some() {
                super::conn::bounded(self.timeout, self.eval_batch(&call, &mut conn)).await
            } else {
                self.eval_batch(&call, &mut conn).await
            }
        } else {
            // The handle's own response timeout must not cut the call short
            // of the limit; the master's bound is kept here.
            conn.set_response_timeout(limit.max(self.timeout));
            let call = self.eval_batch(&call, &mut conn);
            match super::conn::answer_within(self.timeout, limit, call).await {
                Within::Answered(result) => result,
                Within::TimedOut => Err(super::conn::timed_out()),
                Within::Backlog(waited) => return self.backlog(jobs, waited),
            }
        };
        let received = clock::since_boot();
        let result = match result {
            Ok(Evaluated::Answered(value)) => Ok(value),
            Ok(Evaluated::Restarted(error)) => return self.fail_all(jobs, &error),
            Err(e) => Err(e),
        };
        if slot.is_some() {
            self.cluster_lock_result(matches!(&result, Ok(redis::Value::BulkString(_))));
        }
        // The master's clock, then one line per command (see
        // [`super::conn::BATCH`]).
        let mut fault = None;
        let lines: Option<Vec<&str>> = match &result {
            Ok(redis::Value::BulkString(bytes)) => std::str::from_utf8(bytes)
                .ok()
                .and_then(|text| text.split_once('\n'))
                .and_then(|(time, rest)| {
                    if let Some(master_us) = master_time(time) {
                        let sample = clock::Sample {
                            sent,
                            received,
                            master_us,
                        };
                        fault = self.clock_reading(sample);
                    } else if time == "-" {
                        self.clock_refused();
                    }
                    let lines: Vec<&str> = rest.split('\n').collect();
                    (lines.len() == jobs.len()).then_some(lines)
                }),
            _ => None,
        };
        let answers = match (lines, &result) {
            (Some(lines), _) => lines,
            (None, Err(e)) => {
                let error = self.failed(Op::Acquire, e);
                return self.fail_all(jobs, &error);
            }
            (None, Ok(other)) => {
                let error = self.record_error(NodeError::Other(format!(
                    "unexpected answer to a batch of {}: {other:?}",
                    jobs.len()
                )));
                return self.fail_all(jobs, &error);
            }
        };
        for (job, item) in jobs.drain(..).zip(answers) {
            let answer = match parse(item) {
                // A vote or extension read beside a clock that moved:
                // never counted (the node is quarantined already).
                _ if fault.is_some() && job.command.needs_trust() => Err(NodeError::Other(
                    fault.map_or_else(String::new, |f| f.describe()),
                )),
                _ if job.command.needs_trust() && self.lost_since(job.claim.key(), mark) => {
                    Err(NodeError::Other(format!(
                        "{} was seen to lose keys while the command was on its way",
                        self.name
                    )))
                }
                Some((-2, text)) => Err(self.record_error(classify_text(text))),
                Some((status, text)) => match more(text) {
                    Some((counter, left)) => Ok(Answer {
                        status,
                        counter,
                        left,
                    }),
                    None => Err(self.record_error(NodeError::Other(format!(
                        "the fencing counter holds {text:?}, not a number"
                    )))),
                },
                None => Err(self.record_error(NodeError::Other(format!(
                    "unexpected answer in a batch: {item:?}"
                )))),
            };
            self.observer
                .request(job.command.op(), job.queued.elapsed());
            let _ = job.reply.send(answer);
        }
    }

    /// The `EVALSHA` of [`super::conn::BATCH`] for `jobs`, written straight
    /// into one command buffer (no argument is allocated on its own).
    fn batch_call(&self, slot: Option<u16>, jobs: &[Job]) -> redis::Cmd {
        let mut call = redis::Cmd::with_capacity(6 + 6 * jobs.len(), 64 + 96 * jobs.len());
        call.arg("EVALSHA")
            .arg(self.batch_script.get_hash())
            .arg(2 + 2 * jobs.len());
        let marker_mode = match slot {
            Some(slot) => {
                call.arg(slot_key(&self.marker_key, slot))
                    .arg(slot_key(&self.fence_key, slot));
                "2"
            }
            None => {
                call.arg(&self.marker_key).arg(&self.fence_key);
                "1"
            }
        };
        for job in jobs {
            let key = job.claim.key();
            call.arg(key);
            if job.command.uses_flag(job.claim.is_shared()) {
                call.arg(job.claim.flag(&self.key_prefix));
            } else {
                call.arg(key);
            }
        }
        call.arg(if self.marker_check { marker_mode } else { "0" })
            .arg(if self.lock().set_get { "1" } else { "0" })
            .arg(if self.eviction_check { "1" } else { "0" });
        for job in jobs {
            let (letter, number, more) = job.command.args(job.claim.is_shared());
            call.arg(letter)
                .arg(job.claim.token())
                .arg(number)
                .arg(more);
        }
        call
    }

    /// Answers `jobs` [`NodeError::Backlog`]: the agent could not give the
    /// master its time. Counted, never recorded as the master's error.
    fn backlog(&self, jobs: &mut Vec<Job>, waited: Duration) {
        tracing::debug!(
            node = %self.name,
            commands = jobs.len(),
            ?waited,
            "a batch outlived its commands' bounds while the agent was busy; not the master's failure"
        );
        self.observer.backlog();
        let error = NodeError::Backlog(waited);
        for job in jobs.drain(..) {
            self.observer
                .request(job.command.op(), job.queued.elapsed());
            let _ = job.reply.send(Err(error.clone()));
        }
    }

    fn fail_all(&self, jobs: &mut Vec<Job>, error: &NodeError) {
        for job in jobs.drain(..) {
            self.observer
                .request(job.command.op(), job.queued.elapsed());
            let _ = job.reply.send(Err(error.clone()));
        }
    }
}

/// The batch task: one batch on its way at a time; whatever queued
/// meanwhile is the next batch.
async fn run(node: Weak<Node>, mut queue: mpsc::UnboundedReceiver<Job>) {
    let mut jobs = Vec::new();
    while let Some(first) = queue.recv().await {
        jobs.push(first);
        gather(&mut queue, &mut jobs).await;
        let Some(node) = node.upgrade() else { return };
        node.send_batch(&mut jobs).await;
        jobs.clear();
    }
}

/// Adds to `jobs` what else is queued, after letting every task that is
/// ready run first: the runtime's other tasks (requests read in the same
/// wake-up, answers from other masters) queue their commands before the
/// batch leaves, instead of waiting a whole round trip behind it. Again
/// while a turn brought more, up to [`GATHER_TURNS`] turns. A turn is a
/// pass over the tasks that are ready and a look at the sockets, never a
/// timer: alone, a command waits one turn.
async fn gather(queue: &mut mpsc::UnboundedReceiver<Job>, jobs: &mut Vec<Job>) {
    for _ in 0..GATHER_TURNS {
        tokio::task::yield_now().await;
        let before = jobs.len();
        while jobs.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        if jobs.len() == before || jobs.len() == MAX_BATCH {
            return;
        }
    }
}

/// A queued command's answer, or the error of a batch task that ended
/// without giving one.
fn answered(
    answer: Result<Result<Answer, NodeError>, oneshot::error::RecvError>,
) -> Result<Answer, NodeError> {
    answer.unwrap_or_else(|_| Err(NodeError::Other("the batch task ended".to_string())))
}

/// The master's clock in a batch's answer (`seconds microseconds`), in
/// microseconds since the Unix epoch.
fn master_time(line: &str) -> Option<u64> {
    let (seconds, micros) = line.split_once(' ')?;
    let seconds: u64 = seconds.parse().ok()?;
    let micros: u64 = micros.parse().ok()?;
    seconds.checked_mul(1_000_000)?.checked_add(micros)
}

/// One command's answer: a bare status, or `status:more`.
fn parse(item: &str) -> Option<(i64, &str)> {
    let (status, more) = item.split_once(':').unwrap_or((item, ""));
    Some((status.parse().ok()?, more))
}

/// What follows a status: nothing, the fencing counter, or `;` and the
/// milliseconds a taken lock's key has left (a waiting vote's).
fn more(text: &str) -> Option<(u64, Option<Duration>)> {
    match text.split_once(';') {
        None if text.is_empty() => Some((0, None)),
        None => Some((text.parse().ok()?, None)),
        Some(("", left)) => Some((0, Some(Duration::from_millis(left.parse().ok()?)))),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{master_time, more, parse, Duration};

    #[test]
    fn a_taken_vote_says_how_long_the_key_has_left() {
        assert_eq!(more(""), Some((0, None)));
        assert_eq!(more("41"), Some((41, None)));
        assert_eq!(more(";2500"), Some((0, Some(Duration::from_millis(2500)))));
        assert_eq!(more("x"), None);
        assert_eq!(more(";"), None);
        assert_eq!(more("3;5"), None);
    }

    #[test]
    fn the_master_time_line_is_seconds_and_microseconds() {
        assert_eq!(master_time("1764000000 5"), Some(1_764_000_000_000_005));
        assert_eq!(
            master_time("1764000000 999999"),
            Some(1_764_000_000_999_999)
        );
        assert_eq!(master_time("1764000000"), None);
        assert_eq!(master_time("x 1"), None);
    }

    #[test]
    fn an_answer_line_is_a_status_and_what_follows_its_first_colon() {
        assert_eq!(parse("1"), Some((1, "")));
        assert_eq!(parse("0"), Some((0, "")));
        assert_eq!(parse("1:42"), Some((1, "42")));
        assert_eq!(
            parse("-2:ERR Error running script: oom"),
            Some((-2, "ERR Error running script: oom"))
        );
        assert_eq!(parse(""), None);
        assert_eq!(parse("granted"), None);
    }
}
