//! One master's lock commands, batched: every vote, fence, extension and
//! release is sent as one call of [`scripts::BATCH`], alone when the master
//! is idle, or with whatever queued while the previous call was on its way.
//!
//! ## Why
//! Under load, most of a lock's cost on a master is per call, not per
//! command: reading and parsing the request, a system call each way, the
//! script lookup, the reply. At 64 clients a master gets dozens of votes
//! within one round trip; sent together they cost one call.
//!
//! ## Behavior
//! - At most one batch per master is on its way at a time. A command that
//!   finds the master idle is sent at once, alone, by its caller: no timer,
//!   no hop through another task, no latency added at low load. A command
//!   that finds a call on its way queues; when that call ends, whatever
//!   queued meanwhile goes as the next batch, sent by this node's batch
//!   task. Batches grow only while a master is busy.
//! - A caller that goes away while its own call is on its way (its client
//!   disconnected) still ends that call's turn: what queued behind it is
//!   handed to the batch task, never left waiting.
//! - Each command runs in the script exactly as it would alone, in queue
//!   order; one command's error (WRONGTYPE, OOM) is its own answer and never
//!   fails the others. The marker is read once per batch: a script is
//!   atomic, so no flush can fall between two of its commands.
//! - Every command is bounded as before: the batch by the node timeout, and
//!   a command that waited in the queue longer than the node timeout is
//!   answered `timeout` without being sent. A command whose caller is gone
//!   is not sent.
//! - A failed batch (connection lost, timeout, NOSCRIPT that could not be
//!   reloaded) fails each of its commands with the same error, recorded
//!   once.
//! - The task holds only a weak reference to its node: it ends when the
//!   node is dropped.

use std::sync::{Mutex, Once, Weak};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use redlock_wire::keys::slot_key;

use super::{classify_text, scripts, ttl_ms, Node};
use crate::redlock::master::NodeError;
use crate::redlock::observe::Op;

/// Most commands in one script call: enough for every client's vote at
/// hundreds of clients, short enough that one call never holds a master
/// for long.
pub const MAX_BATCH: usize = 256;

/// One lock command, as the batch script takes it.
#[derive(Debug)]
pub enum Command {
    /// `SET NX PX` behind the marker; with the fencing counter when asked.
    Vote { ttl: Duration, read_counter: bool },
    /// Round 2 of a fenced grant: raise the counter while the key is ours.
    Fence { fence: u64 },
    /// Compare-and-pexpire behind the marker.
    Extend { ttl: Duration },
    /// Compare-and-delete, announced on the resource's release channel.
    Release { channel: String },
}

impl Command {
    fn op(&self) -> Op {
        match self {
            Command::Vote { .. } => Op::Acquire,
            Command::Fence { .. } => Op::Fence,
            Command::Extend { .. } => Op::Extend,
            Command::Release { .. } => Op::Release,
        }
    }

    /// The script's four arguments for this command after the key and token:
    /// its letter, a number and one more.
    fn args(&self) -> (&'static str, u64, &str) {
        match self {
            Command::Vote { ttl, read_counter } => {
                ("v", ttl_ms(*ttl), if *read_counter { "1" } else { "0" })
            }
            Command::Fence { fence } => ("f", *fence, ""),
            Command::Extend { ttl } => ("e", ttl_ms(*ttl), ""),
            Command::Release { channel } => ("r", 0, channel),
        }
    }
}

/// A command's answer: its status (see [`scripts::BATCH`]) and, for a vote
/// that read it, the fencing counter (0 when the master has none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    pub status: i64,
    pub counter: u64,
}

/// A queued command and where its answer goes.
#[derive(Debug)]
struct Job {
    key: String,
    token: String,
    command: Command,
    queued: Instant,
    reply: oneshot::Sender<Result<Answer, NodeError>>,
}

/// Who may send this node's next batch, and what waits for it.
#[derive(Debug)]
struct Turn {
    /// A batch is on its way (sent by a caller or by the batch task), or
    /// the queue was handed to the batch task to send. While set, commands
    /// queue; it is cleared only with the queue empty.
    busy: bool,
    /// The last batch carried a single command: the master is lightly
    /// used, and a caller that finds it idle sends its own command. After a
    /// batch of several, the batch task sends even a lone command: under
    /// load, a caller's task may wait behind many others before it polls
    /// its answer, and the turn would wait with it.
    light: bool,
    /// Commands that came while busy, in order: the next batches.
    queue: Vec<Job>,
}

/// A node's dispatch: its [`Turn`] and the batch task, started on first
/// use (a node is built before the runtime runs the agent).
#[derive(Debug)]
pub struct Batcher {
    turn: Mutex<Turn>,
    /// Hands a queue to the batch task when a caller's own call ends.
    handoff: mpsc::UnboundedSender<Vec<Job>>,
    start: Once,
    pending: Mutex<Option<(mpsc::UnboundedReceiver<Vec<Job>>, Weak<Node>)>>,
}

impl Batcher {
    pub fn new(node: Weak<Node>) -> Batcher {
        let (handoff, receiver) = mpsc::unbounded_channel();
        Batcher {
            turn: Mutex::new(Turn {
                busy: false,
                light: true,
                queue: Vec::new(),
            }),
            handoff,
            start: Once::new(),
            pending: Mutex::new(Some((receiver, node))),
        }
    }

    /// The turn, even after a panic elsewhere held it: every change to it
    /// is a single assignment or push, never left half done.
    fn turn(&self) -> std::sync::MutexGuard<'_, Turn> {
        self.turn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the batch task (once, from the runtime: a caller's guard may
    /// later hand it a queue from a destructor).
    fn start(&self) {
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
    }

    /// Takes the master's turn when it is idle and lightly used (the caller
    /// sends its command itself, then must [`end_turn`](Self::end_turn)),
    /// or queues `job` for the next batch and gives it back as `None`.
    fn submit(&self, job: Job) -> Option<Job> {
        self.start();
        let mut turn = self.turn();
        if turn.busy {
            turn.queue.push(job);
            return None;
        }
        turn.busy = true;
        if turn.light {
            return Some(job);
        }
        drop(turn);
        self.hand_off(vec![job]);
        None
    }

    /// Gives `jobs` to the batch task, with the turn.
    fn hand_off(&self, jobs: Vec<Job>) {
        // The task ends only when the node is dropped, and the node is
        // borrowed by the caller: it takes the jobs. Were it gone, their
        // senders would drop and their callers hear an error.
        let _ = self.handoff.send(jobs);
    }

    /// Ends a caller's turn: the master is idle again, or what queued
    /// meanwhile goes to the batch task as the next batch.
    fn end_turn(&self) {
        let mut turn = self.turn();
        if turn.queue.is_empty() {
            turn.busy = false;
            turn.light = true;
            return;
        }
        let jobs = next_batch(&mut turn.queue);
        drop(turn);
        self.hand_off(jobs);
    }

    /// The batch task's next batch after its previous one of `sent`
    /// commands ended, or `None` with the turn given back (the master
    /// idle).
    fn next(&self, sent: usize) -> Option<Vec<Job>> {
        let mut turn = self.turn();
        if turn.queue.is_empty() {
            turn.busy = false;
            turn.light = sent == 1;
            None
        } else {
            Some(next_batch(&mut turn.queue))
        }
    }
}

/// The first [`MAX_BATCH`] commands of `queue`, in order.
fn next_batch(queue: &mut Vec<Job>) -> Vec<Job> {
    if queue.len() <= MAX_BATCH {
        std::mem::take(queue)
    } else {
        queue.drain(..MAX_BATCH).collect()
    }
}

/// A caller's turn at a master: ended when the caller's call is answered or
/// the caller goes away mid-call, so the turn can never stay taken.
struct TurnGuard<'a>(&'a Batcher);

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        self.0.end_turn();
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
        key: &str,
        token: &str,
        command: Command,
    ) -> Result<Answer, NodeError> {
        // A cluster slot in quarantine votes no without asking: its marker
        // check would fail on the master too, or (readmission pending)
        // its keys are not trusted yet.
        if self.marker_check
            && matches!(command, Command::Vote { .. } | Command::Extend { .. })
            && self.slot_out(key)
        {
            return Ok(Answer {
                status: -1,
                counter: 0,
            });
        }
        let (reply, mut answer) = oneshot::channel();
        let job = Job {
            key: key.to_string(),
            token: token.to_string(),
            command,
            queued: Instant::now(),
            reply,
        };
        if let Some(job) = self.batcher.submit(job) {
            // The master is idle: this caller sends, as a batch of one.
            let _turn = TurnGuard(&self.batcher);
            let mut jobs = vec![job];
            self.send_batch(&mut jobs).await;
            // Answered by now (or its answer dropped with the job, below).
            drop(jobs);
            return answer.try_recv().unwrap_or_else(|_| {
                Err(NodeError::Other("the command was not answered".to_string()))
            });
        }
        answer
            .await
            .unwrap_or_else(|_| Err(NodeError::Other("the batch task ended".to_string())))
    }

    /// Sends `jobs` as one script call and answers each.
    async fn send_batch(&self, jobs: &mut Vec<Job>) {
        let now = Instant::now();
        let mut sent = Vec::with_capacity(jobs.len());
        for job in jobs.drain(..) {
            if job.reply.is_closed() {
                continue;
            }
            if now.duration_since(job.queued) >= self.timeout {
                let _ = job.reply.send(Err(NodeError::Timeout(self.timeout)));
                continue;
            }
            sent.push(job);
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
        if !self.is_cluster() {
            return self.send_group(conn, None, jobs).await;
        }
        // A script's keys must share a slot: one call per slot, all at once.
        let mut groups = super::cluster::by_slot(jobs.drain(..), |job| job.key.as_str());
        futures::future::join_all(
            groups
                .iter_mut()
                .map(|(slot, group)| self.send_group(conn.clone(), Some(*slot), group)),
        )
        .await;
    }

    /// Sends `jobs` (all in `slot` on a cluster) as one script call and
    /// answers each.
    async fn send_group(&self, conn: super::Conn, slot: Option<u16>, jobs: &mut Vec<Job>) {
        let mut call = scripts::BATCH.prepare_invoke();
        match slot {
            Some(slot) => call
                .key(slot_key(&self.marker_key, slot))
                .key(slot_key(&self.fence_key, slot))
                .arg(if self.marker_check { "2" } else { "0" }),
            None => call
                .key(&self.marker_key)
                .key(&self.fence_key)
                .arg(if self.marker_check { "1" } else { "0" }),
        };
        call.arg(if self.lock().set_get { "1" } else { "0" });
        for job in jobs.iter() {
            let (letter, number, more) = job.command.args();
            call.key(&job.key)
                .arg(letter)
                .arg(&job.token)
                .arg(number)
                .arg(more);
        }
        self.observer.batch(jobs.len());
        let mut conn = conn;
        let result = if slot.is_some() {
            super::conn::bounded(self.timeout, call.invoke_async::<redis::Value>(&mut conn)).await
        } else {
            call.invoke_async::<redis::Value>(&mut conn).await
        };
        if slot.is_some() {
            self.cluster_lock_result(matches!(&result, Ok(redis::Value::Array(_))));
        }
        let answers = match result {
            Ok(redis::Value::Array(items)) if items.len() == jobs.len() => items,
            Ok(other) => {
                let error = self.record_error(NodeError::Other(format!(
                    "unexpected answer to a batch of {}: {other:?}",
                    jobs.len()
                )));
                return self.fail_all(jobs, &error);
            }
            Err(e) => {
                let error = self.failed(Op::Acquire, &e);
                return self.fail_all(jobs, &error);
            }
        };
        for (job, item) in jobs.drain(..).zip(answers) {
            let answer = match parse(&item) {
                Some((-2, text)) => Err(self.record_error(classify_text(text))),
                Some((status, "")) => Ok(Answer { status, counter: 0 }),
                Some((status, text)) => match text.parse() {
                    Ok(counter) => Ok(Answer { status, counter }),
                    Err(_) => Err(self.record_error(NodeError::Other(format!(
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

    fn fail_all(&self, jobs: &mut Vec<Job>, error: &NodeError) {
        for job in jobs.drain(..) {
            self.observer
                .request(job.command.op(), job.queued.elapsed());
            let _ = job.reply.send(Err(error.clone()));
        }
    }
}

/// The batch task: sends each queue handed to it, then whatever queued
/// while that batch was on its way, until the queue is empty and the turn
/// given back.
async fn run(node: Weak<Node>, mut handoff: mpsc::UnboundedReceiver<Vec<Job>>) {
    while let Some(mut jobs) = handoff.recv().await {
        loop {
            let Some(node) = node.upgrade() else { return };
            let sent = jobs.len();
            node.send_batch(&mut jobs).await;
            match node.batcher.next(sent) {
                Some(next) => jobs = next,
                None => break,
            }
        }
    }
}

/// One command's answer: a bare status, or `status:more`.
fn parse(item: &redis::Value) -> Option<(i64, &str)> {
    match item {
        redis::Value::Int(status) => Some((*status, "")),
        redis::Value::BulkString(text) => {
            let (status, more) = std::str::from_utf8(text).ok()?.split_once(':')?;
            Some((status.parse().ok()?, more))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    //! The dispatch on a real master, made deterministic by freezing it
    //! (SIGSTOP): a call on its way stays on its way until it thaws.

    use std::sync::Arc;

    use redlock_testkit::server::RedisServer;

    use super::*;
    use crate::node::NodeSettings;
    use crate::redlock::observe::{NodeObserver, VoteLabel};

    /// Records the size of every batch sent.
    #[derive(Debug, Default)]
    struct Batches(Mutex<Vec<usize>>);

    impl Batches {
        fn sizes(&self) -> Vec<usize> {
            self.0.lock().unwrap().clone()
        }
    }

    impl NodeObserver for Batches {
        fn vote(&self, _: VoteLabel) {}
        fn request(&self, _: Op, _: Duration) {}
        fn batch(&self, commands: usize) {
            self.0.lock().unwrap().push(commands);
        }
        fn error(&self, _: usize) {}
        fn restart(&self, _: &'static str) {}
    }

    /// A connected node on `server`, patient enough that a frozen call is
    /// answered once thawed, not timed out.
    async fn connected(server: &RedisServer, batches: &Arc<Batches>) -> Arc<Node> {
        let client = redis::Client::open(server.url()).unwrap();
        let settings = NodeSettings {
            timeout: Duration::from_secs(20),
            marker_key: "test incarnation".to_string(),
            fence_key: "test fence".to_string(),
            marker_check: false,
            quarantine: Duration::ZERO,
        };
        let observer: Arc<dyn NodeObserver> = batches.clone();
        let node = Node::new("r1".to_string(), client, settings, observer);
        let conn = node.open().await.unwrap();
        node.install(conn);
        node
    }

    /// Waits for `condition`, polling, for at most 20 seconds.
    async fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !condition() {
            assert!(Instant::now() < deadline, "gave up waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// A vote for `key` with token `token-<key>`, in a task of its own.
    fn vote(node: &Arc<Node>, key: &str) -> tokio::task::JoinHandle<Result<Answer, NodeError>> {
        let node = Arc::clone(node);
        let key = key.to_string();
        tokio::spawn(async move {
            let command = Command::Vote {
                ttl: Duration::from_secs(60),
                read_counter: false,
            };
            node.batched(&key, &format!("token-{key}"), command).await
        })
    }

    async fn value(server: &RedisServer, key: &str) -> Option<String> {
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        redis::cmd("GET")
            .arg(key)
            .query_async(&mut conn)
            .await
            .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn commands_queued_behind_a_callers_own_call_go_as_one_batch_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let server = RedisServer::start(dir.path(), "r1").unwrap();
        let batches = Arc::new(Batches::default());
        let node = connected(&server, &batches).await;

        server.freeze().unwrap();
        // The master is idle: this caller sends its vote itself, and it
        // stays on its way while the master is frozen.
        let first = vote(&node, "first");
        wait_for("the first vote to take the turn", || {
            node.batcher.turn().busy
        })
        .await;
        let queued: Vec<_> = (0..20).map(|i| vote(&node, &format!("q{i}"))).collect();
        wait_for("every later vote to queue", || {
            node.batcher.turn().queue.len() == 20
        })
        .await;
        server.thaw().unwrap();

        let granted = Answer {
            status: 1,
            counter: 0,
        };
        assert_eq!(first.await.unwrap().unwrap(), granted);
        for handle in queued {
            assert_eq!(handle.await.unwrap().unwrap(), granted);
        }
        assert_eq!(
            batches.sizes(),
            vec![1, 20],
            "the first vote went alone, the twenty queued behind it in one call"
        );
        for i in 0..20 {
            let key = format!("q{i}");
            assert_eq!(value(&server, &key).await, Some(format!("token-{key}")));
        }
        wait_for("the master to be idle again", || {
            let turn = node.batcher.turn();
            !turn.busy && turn.queue.is_empty()
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caller_gone_mid_call_strands_nothing_queued_behind_it() {
        let dir = tempfile::tempdir().unwrap();
        let server = RedisServer::start(dir.path(), "r1").unwrap();
        let batches = Arc::new(Batches::default());
        let node = connected(&server, &batches).await;

        server.freeze().unwrap();
        let gone = vote(&node, "gone");
        wait_for("the first vote to take the turn", || {
            node.batcher.turn().busy
        })
        .await;
        let queued: Vec<_> = (0..5).map(|i| vote(&node, &format!("q{i}"))).collect();
        wait_for("every later vote to queue", || {
            node.batcher.turn().queue.len() == 5
        })
        .await;
        // Its client went away: the caller's future is dropped mid-call.
        gone.abort();
        assert!(gone.await.unwrap_err().is_cancelled());
        // Its turn ended with it: the queue went to the batch task.
        assert!(node.batcher.turn().queue.is_empty());
        server.thaw().unwrap();

        for (i, handle) in queued.into_iter().enumerate() {
            assert_eq!(
                handle.await.unwrap().unwrap().status,
                1,
                "queued vote {i} was sent and granted"
            );
        }
        for i in 0..5 {
            let key = format!("q{i}");
            assert_eq!(value(&server, &key).await, Some(format!("token-{key}")));
        }
        wait_for("the master to be idle again", || {
            let turn = node.batcher.turn();
            !turn.busy && turn.queue.is_empty()
        })
        .await;
        // And the next command finds it idle and goes out alone.
        let next = vote(&node, "next").await.unwrap().unwrap();
        assert_eq!(next.status, 1);
        assert_eq!(batches.sizes(), vec![1, 5, 1]);
    }
}
