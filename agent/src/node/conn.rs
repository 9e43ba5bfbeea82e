//! A master's connection, and who answers on it.
//!
//! ## The connection
//! One multiplexed connection to a single server, or one cluster
//! connection that reaches every shard of a Redis Cluster (routing each
//! command by its key's slot, following `MOVED` and `ASK`). Both are cheap
//! handles to clone; every request shares the one underlying connection
//! (or the cluster's one per node).
//!
//! And how long a master had to answer ([`answer_within`]): the time the
//! agent itself was too busy to write a request or read its answer is the
//! agent's, never the master's. And the name a connection shows in the
//! master's `CLIENT LIST` ([`set_name`]).
//!
//! ## The lock connection's script and the process that runs it
//! The lock commands go on the connection as calls of one script
//! ([`BATCH`], each node its own copy: [`batch`]).
//!
//! A vote counts only from the master process that holds the keys the agent has seen there: a restart, a
//! restore from an old snapshot or AOF, or a failover behind a proxy that
//! keeps the agent's connection open (as Envoy's Redis proxy, twemproxy
//! and managed endpoints do) puts a new process behind the same
//! connection, with the incarnation marker and eviction count of the
//! snapshot it loaded, and none of the locks granted since.
//!
//! Every process starts with an empty script cache, and each node's lock
//! connection runs a vote script of its own (see [`batch`]) that no
//! other agent loads: the first batch a new process gets from this
//! agent answers NOSCRIPT, however many agents talked to it since it
//! started. Only then does the agent ask (`INFO server`) which process it
//! is: after loading the script, so a restart between the two shows as a
//! new `run_id`. A new `run_id` quarantines the master (detector
//! `run_id`) before any vote of that batch counts; the known one (an
//! operator's `SCRIPT FLUSH`) sends the batch again. The check costs
//! nothing per vote: one `INFO` per new process and agent. The health
//! probe tells a known process the same way, by a script of its own
//! ([`super::scripts::probe`]), and reads `INFO server` only when that
//! script is missing.

use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::Instant;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::cluster_async::ClusterConnection;
use redis::{
    Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult, Script, ServerErrorKind, Value,
};

use super::{Detector, Identity, Node};
use crate::redlock::master::NodeError;

/// A master's connection, of the kind its config names.
#[derive(Clone)]
pub enum Conn {
    Single(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Conn::Single(_) => f.write_str("Conn::Single"),
            Conn::Cluster(_) => f.write_str("Conn::Cluster"),
        }
    }
}

impl Conn {
    /// Bounds each request on this handle. A cluster connection's bound is
    /// set once, when it is opened (every attempt, and the whole request
    /// with its redirections and retries): this is a no-op for it.
    pub fn set_response_timeout(&mut self, timeout: Duration) {
        if let Conn::Single(conn) = self {
            conn.set_response_timeout(timeout);
        }
    }

    /// The cluster connection, for commands routed to one node.
    pub fn cluster(&self) -> Option<&ClusterConnection> {
        match self {
            Conn::Cluster(conn) => Some(conn),
            Conn::Single(_) => None,
        }
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// Runs `request` within `bound`. A cluster connection bounds each
/// attempt, but a request to a shard being reconnected after a failover
/// can wait longer than that; a lock request must never hang, so cluster
/// requests also get a timer of their own. A timeout is an I/O timeout,
/// as the connection's own.
pub async fn bounded<T>(
    bound: Duration,
    request: impl std::future::Future<Output = RedisResult<T>>,
) -> RedisResult<T> {
    match tokio::time::timeout(bound, request).await {
        Ok(result) => result,
        Err(_) => Err(timed_out()),
    }
}

/// The error of a request that timed out, an I/O timeout as the
/// connection's own.
pub fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "request timed out",
    ))
}

/// What became of a request run by [`answer_within`].
#[derive(Debug)]
pub enum Within<T> {
    /// The master answered, or its connection failed.
    Answered(RedisResult<T>),
    /// The master had the request for the whole bound and no answer had
    /// arrived when the agent last looked: the master's timeout.
    TimedOut,
    /// The overall limit passed before the agent could even tell that the
    /// request was on its way (how long it took in all): the agent was too
    /// busy. Not the master's failure.
    Backlog(Duration),
}

/// Looks per bound: how often the agent checks whether an answer has
/// arrived, and so how much past its bound a master that never answers
/// is given up (a slice at most).
const SLICES: u32 = 8;

/// How late a timer fires on a runtime with nothing else to do (tokio's
/// timer wheel ticks in milliseconds): lateness below this is not a stall.
const TIMER_GRAIN: Duration = Duration::from_millis(1);

/// Turns of the runtime before each look: the connection's reader is a task
/// of its own, and an answer that reached the socket while the agent was
/// busy is delivered once the runtime has worked through the tasks queued
/// ahead of it. At least [`MIN_TURNS`] (the first may only hand the runtime
/// to the reader), then until a turn comes back within [`QUICK_TURN`] (the
/// runtime had next to nothing queued: the reader has run), at most
/// [`MAX_TURNS`].
const MIN_TURNS: usize = 2;
const MAX_TURNS: usize = 64;
const QUICK_TURN: Duration = Duration::from_micros(100);

/// Runs `request` until it is answered, the master has had it for `bound`
/// without answering, or `limit` has passed in all.
///
/// The master's time is counted from when the request is surely on its
/// way, and only up to the last time the agent looked for an answer and
/// found none, so the agent's own stalls are never the master's:
/// - every slice of `bound`, the agent gives its runtime turns until it
///   has worked through what was queued (so the connection's own task
///   writes what is queued and reads what has arrived; see `MIN_TURNS`)
///   and looks: an answer that arrived while the agent was busy is found
///   then, whenever that is;
/// - the request is surely on its way from the first look (the writer had
///   its turns), or from the start when the first slice's timer fired on
///   time (the agent was responsive all along);
/// - the master has timed out once a look at least `bound` after that
///   still finds no answer.
///
/// ## Behavior
/// - A master that answers is never timed out because the agent was
///   slow: its answer is found at the next look.
/// - A master that does not answer times out after `bound` (plus at most a
///   slice), on a busy agent too: the time between looks counts, since the
///   request was on the socket all along.
/// - [`Within::Backlog`] only when `limit` passes before the first look.
/// - The handle `request` runs on must not bound the request below `limit`
///   itself (set its response timeout to `limit`, or to none).
pub async fn answer_within<T>(
    bound: Duration,
    limit: Duration,
    request: impl Future<Output = RedisResult<T>>,
) -> Within<T> {
    let started = Instant::now();
    let end = started + limit.max(bound);
    let slice = (bound / SLICES).max(TIMER_GRAIN);
    // From when the master surely has the request.
    let mut since: Option<Instant> = None;
    tokio::pin!(request);
    loop {
        let planned = match since {
            None => started + slice,
            Some(since) => (Instant::now() + slice).min(since + bound),
        }
        .min(end);
        tokio::select! {
            biased;
            result = &mut request => return Within::Answered(result),
            () = tokio::time::sleep_until(planned) => {}
        }
        let fired = Instant::now();
        for turn in 1..=MAX_TURNS {
            // The real clock: a turn takes real time even on a paused one.
            let before = std::time::Instant::now();
            tokio::task::yield_now().await;
            if let Some(result) = request.as_mut().now_or_never() {
                return Within::Answered(result);
            }
            if turn >= MIN_TURNS && before.elapsed() < QUICK_TURN {
                break;
            }
        }
        let looked = Instant::now();
        match since {
            None if looked >= end => return Within::Backlog(looked - started),
            None if fired.saturating_duration_since(planned) <= TIMER_GRAIN => {
                since = Some(started);
            }
            None => since = Some(looked),
            Some(_) => {}
        }
        if since.is_some_and(|since| looked.saturating_duration_since(since) >= bound) {
            return Within::TimedOut;
        }
    }
}
/// Names `conn` `name` (`CLIENT SETNAME`), so an operator tells a fleet's
/// connections apart in `CLIENT LIST`. `Ok(Err(e))` when the master's ACL
/// refuses it (the documented ACL grants `client|setname`): the
/// connection works on, unnamed. Any other error is the connection's.
///
/// # Errors
/// The connection's, or the master's other than `NOPERM`.
pub async fn set_name(
    conn: &mut MultiplexedConnection,
    name: &str,
) -> RedisResult<Result<(), RedisError>> {
    match redis::cmd("CLIENT")
        .arg("SETNAME")
        .arg(name)
        .query_async::<()>(conn)
        .await
    {
        Ok(()) => Ok(Ok(())),
        Err(e) if e.code() == Some("NOPERM") => Ok(Err(e)),
        Err(e) => Err(e),
    }
}

/// A batch's call, as `Node::eval_batch` ends it.
#[derive(Debug)]
pub enum Evaluated {
    /// The master's answer.
    Answered(Value),
    /// The script was missing and the master is another process than the
    /// one the agent knew: quarantined already; every command of the batch
    /// fails with this error.
    Restarted(NodeError),
}

impl Node {
    /// Runs `call`, an `EVALSHA` of this node's vote script; on NOSCRIPT
    /// loads the script and, with the process check on (every single
    /// server but under the test switch), checks the master's `run_id`
    /// before sending `call` again.
    ///
    /// # Errors
    /// The master's or the connection's, of the call, the load or the
    /// `INFO`.
    pub(super) async fn eval_batch(&self, call: &Cmd, conn: &mut Conn) -> RedisResult<Evaluated> {
        match call.query_async(conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {}
            result => return result.map(Evaluated::Answered),
        }
        self.batch_script.prepare_invoke().load_async(conn).await?;
        if self.process_check && !self.is_cluster() {
            let info: redis::InfoDict = redis::cmd("INFO").arg("server").query_async(conn).await?;
            let now: Option<String> = info.get("run_id");
            let known = self.snapshot().identity;
            let known_id = known.as_ref().map(|i| i.run_id.clone());
            if now.is_none() || now != known_id {
                return Ok(Evaluated::Restarted(self.process_changed(known, now)));
            }
        }
        call.query_async(conn).await.map(Evaluated::Answered)
    }

    /// A vote found its script missing and the master's `run_id` changed:
    /// a new process sits behind the connection. Quarantined at once, as
    /// the health task would at its next probe, which then sees the same
    /// `run_id` and does not count the restart twice.
    fn process_changed(&self, known: Option<Identity>, now: Option<String>) -> NodeError {
        tracing::warn!(
            node = %self.name,
            was = known.as_ref().map(|i| i.run_id.as_str()),
            now = now.as_deref(),
            quarantine = ?self.quarantine,
            "the master's script cache was empty and its run_id changed: a new process (a restart, a restore, a failover behind a proxy); its votes do not count; quarantined"
        );
        if let (Some(known), Some(run_id)) = (known, now.clone()) {
            self.set_identity(Some(Identity { run_id, ..known }));
        }
        self.quarantine(std::time::Instant::now() + self.quarantine, Detector::RunId);
        self.restart_detected(Detector::RunId);
        self.wake.notify_one();
        NodeError::Other(format!(
            "{} is another process than the one that holds the keys seen there (run_id {}): quarantined",
            self.name,
            now.as_deref().unwrap_or("unknown")
        ))
    }
}

/// Every lock command to one master, in batches: the commands that queued
/// while the previous batch was on its way (see [`super::lock`]) run in one
/// script call, each exactly as if it had been called alone, in the order
/// they were queued. One call instead of many saves the master and the
/// kernel a round of parsing, a system call and a reply per command, and
/// reads the incarnation marker once for the whole batch.
///
/// `KEYS[1]` the incarnation marker, `KEYS[2]` the fencing counter, then
/// two per command: its lock key (`KEYS[1 + 2i]` for command `i`) and that
/// key's waiting flag (`KEYS[2 + 2i]`, see
/// `redlock_wire::keys::waiting_key`; the lock key again for commands that
/// do not touch it); on a cluster all of one slot, the marker and counter
/// that slot's (see [`super::cluster`]). `ARGV[1]` "1" to check that the
/// marker exists, "2" (a cluster) to check that it holds the ID of the node
/// running the script (`CLUSTER MYID`: a promoted replica or a slot's new
/// owner holds a copy naming another node; such a copy is deleted, so the
/// slot stays out for every agent even if it moves back to the node it
/// names), "0" only under the test switch; `ARGV[2]` "1" to vote with
/// `SET ... GET` (Redis 7), so a key of another type answers WRONGTYPE
/// instead of looking taken; `ARGV[3]` "1" to check, at the first vote of
/// the call that would count, that the master evicted no key since its
/// marker was written ("0" only under the test switch
/// `REDLOCK_TEST_NO_EVICTION_CHECK`); then
/// four per command: its letter, the token, a number, and one more
/// argument.
///
/// The eviction check: a marker carries the master's `evicted_keys` (`INFO
/// stats`) from when it was written, as ` e=<count>` at its end (see
/// [`super::scripts::MARKER_EVICTIONS`]). Lock keys all have a TTL, so any `volatile-*`
/// policy evicts them first, while the marker, without a TTL, stays: the
/// marker alone cannot tell that a master dropped a held lock to make room
/// for a cache's writes. A vote on a master whose count has moved since
/// deletes the marker (every agent then sees the loss, in its votes and
/// probes, and quarantines the master) and answers -3, leaving nothing
/// written: a key the vote had just set is deleted again. A vote whose
/// write the master refuses (OOM: at `maxmemory` with nothing left to
/// evict, where a cache leaves it) is checked before its error is
/// answered, since the master may have evicted on the way there. The check is
/// atomic with the vote, so no probe interval separates an eviction from
/// the votes that must not count. Only a vote that would count needs it (a
/// vote that finds the lock taken grants nothing), so it costs the master
/// one `INFO stats` per call with a vote that finds its lock free or
/// already its own, and none per call whose votes all find their locks
/// taken, as under contention; markers written without a count (by an
/// older agent) get one from the health probe (see `Node::check_marker`).
/// Where an ACL refuses `INFO` (or a server does not report
/// `evicted_keys`), markers carry no count and evictions go unseen, as the
/// docs/safety.md says: such masters must keep `noeviction`.
///
/// - `v` (the vote; number: TTL in ms; more: the sum of 1 to read the
///   counter and 2 for a voter that will wait if the lock is taken):
///   `SET key token NX PX ttl`, but only while the master still has its
///   marker. Checking the marker in the same script as the write makes the
///   check atomic with the vote: a master that lost its keys (FLUSHALL,
///   failover, a restart) has lost the marker too, and answers -1 without
///   writing anything, so its vote can never count. A key that already
///   holds this very token was written by an earlier round of the same
///   request (whose release did not arrive in time): it gets the new TTL and
///   counts as granted, so a request is never blocked by its own debris.
///   1 granted, 0 taken, -1 marker missing, -3 the master evicted keys
///   since its marker was written. The counter is read atomically
///   with the vote: a grant's fence is raised (`f`) on this master only
///   while its key is here, so a vote that finds the key free reads every
///   fence raised under an earlier holder of this lock. A waiting voter
///   that finds the lock taken sets the key's waiting flag, with its own
///   TTL, so the holder's release announces itself, and answers `0:;<ms>`:
///   the time the key has left (`PTTL`, where it has one), before which
///   only a release (announced) can free it.
/// - `f` (round 2 of a fenced grant; number: the fence): raise the counter
///   to the fence only while the key still holds the token, so the raise
///   happens before any later holder's `SET NX` on this master; never lower
///   it. The fence is stored as the caller's text, not a Lua number: Lua
///   would print a large number in exponent form. 1, or 0 when the key no
///   longer holds the token.
/// - `e` (extend; number: TTL in ms): a new TTL if the key still holds the
///   token and the master still has its marker. 1 extended, 0 not held, -1
///   marker missing.
/// - `r` (release; more: the resource's release channel): delete the key if
///   it still holds the token, with its waiting flag in the same `DEL`, and
///   when the flag was there publish the token on the channel, so the
///   resource's waiters on every agent wake at once and each wakes once per
///   release, whichever master's message comes first. A release nobody
///   waits for publishes nothing: one command per master less than always
///   announcing. 1 or 0.
/// - `p` (peek): what the key holds, for a semaphore's round (its limit's
///   note and its permits): 0 gone (or not a string), `2:<n>` a string of
///   decimal digits (a limit), 1 anything else (a permit's token).
///   Consecutive peeks are one `MGET`, so a round's read of a semaphore
///   costs the master one command whatever its limit.
/// - `n` (a bookkeeping note; token: its value; number: TTL in ms): `SET
///   key value PX ttl`, unless the key holds the value already for at
///   least as long, so a note shared by many writers (a semaphore's limit,
///   an election's leader) lasts as long as the longest of them asked. 1
///   written, 0 already so.
/// - `k` (keep a note; number: TTL in ms): lengthen the note's TTL to at
///   least `ttl` when it is there with a TTL; never written, shortened or
///   made to last forever: an agent that does not know a note's value
///   keeps it alive. 1 or 0.
/// - `s`: a shared lock's vote, as `v` (the same answers, checks and
///   numbers). Readers are one sorted set at the lock key itself, each
///   token scored with when it expires on the master's clock (`TIME`), the
///   key's TTL the longest reader's; expired readers are dropped at every
///   look. A shared vote is granted where the key is gone or a set of
///   readers, unless a waiting exclusive voter flagged it (`w`; a reader
///   already there is renewed); an exclusive vote (`v`) that finds readers
///   drops the expired ones and is granted only if none is left, else it is
///   taken (a waiting one flags it `w`). So one master never admits a
///   writer beside a reader: the key is either a string or a set. `e`,
///   `f` and `r` find a reader's token in the set (an expired one is not
///   extended, nor its fence raised), so the token alone says what to
///   extend or release, through any agent; the last reader's release
///   announces itself when someone waits.
///
/// Returns one answer per command, in one text, a line each: the status,
/// or `status:more` where there is more to say: the counter for a vote that
/// read it (decimal, "0" when the master has none yet), the master's error
/// for a command that failed (status -2: WRONGTYPE, OOM, READONLY, its line
/// breaks made spaces; one command's error never fails the others). One
/// text costs the agent's reply parser one value per call instead of one
/// per command, its largest per-command cost after the call itself.
/// One function, made once per call: a closure per command kind would be
/// made on every call and cost a small call several times its commands.
///
/// The answer's first line is the master's clock (`TIME`: seconds, a
/// space, microseconds), read in the same script as the votes, for the
/// agent's watch on it (see [`super::clock`]), in a batch with a vote or
/// an extension (the commands that must come from a master the agent
/// trusts), else empty; `-` where an ACL refuses `TIME`, and then the
/// master's clock is not watched.
///
/// This text is every agent's; each node's own copy is [`batch`]'s.
pub static BATCH: LazyLock<Script> = LazyLock::new(|| batch(None));

/// [`BATCH`] with `tag` in a comment at its end: the same script under a
/// SHA of its own. A node's lock connection uses its own copy, which no
/// other agent loads, so the first vote after the master's process changed
/// (a restart, a restore from a snapshot, a failover, even behind a proxy
/// that keeps the agent's connection open) answers NOSCRIPT, however many
/// other agents have loaded their copies since (see [`super::lock`]).
pub fn batch(tag: Option<&str>) -> Script {
    let tag = tag.map_or_else(String::new, |tag| format!("\n-- {tag}"));
    Script::new(&format!("{EVICTED_KEYS_SOURCE}{BATCH_SOURCE}{tag}"))
}

/// The master's `evicted_keys` (`INFO stats`) as text, or nil where an ACL
/// refuses `INFO` or the server does not report it: a Lua function every
/// script that reads the count shares. A plain search for the field's name
/// instead of a pattern tried at every position of the section's text.
pub(crate) const EVICTED_KEYS_SOURCE: &str = r#"local function evicted_keys()
  local stats = redis.pcall("info", "stats")
  if type(stats) ~= "string" then return nil end
  local at = string.find(stats, "evicted_keys:", 1, true)
  return at and string.match(stats, "^%d+", at + 13)
end
"#;

const BATCH_SOURCE: &str = r#"local check, setget, evictions = ARGV[1], ARGV[2] == "1", ARGV[3] == "1"
local marker, counted, kept
local function trusted()
  if marker == nil then
    local found = redis.call("get", KEYS[1])
    if check == "2" then
      marker = found and string.match(found, "^%S+") == redis.call("cluster", "myid")
      if found and not marker then redis.call("del", KEYS[1]) end
    else
      marker = found and true
    end
    if marker then counted = string.match(found, " e=(%d+)$") end
  end
  return marker
end
local function unevicted()
  if kept == nil then
    local now = evictions and counted and evicted_keys()
    if now and counted ~= now then
      redis.call("del", KEYS[1])
      marker, kept = false, false
    else
      kept = true
    end
  end
  return kept
end
local function now_ms()
  local t = redis.call("time")
  return t[1] * 1000 + math.floor(t[2] / 1000)
end
local function readers_at(key)
  if redis.call("type", key).ok ~= "zset" then return nil end
  local now = now_ms()
  redis.call("zremrangebyscore", key, "-inf", now)
  return now
end
local function past_readers(key, token, ttl)
  if not readers_at(key) then return nil end
  if redis.call("exists", key) == 1 then return true end
  redis.call("set", key, token, "PX", ttl)
  return false
end
local function run(op, key, flag, token, number, more)
  if check ~= "0" and (op == "v" or op == "e" or op == "s") and not trusted() then return -1 end
  if op == "v" then
    local wants = tonumber(more) or 0
    local status, previous, written = 0, nil, nil
    if setget then
      written = redis.pcall("set", key, token, "NX", "GET", "PX", number)
      if type(written) == "table" and written.err then
        local held = past_readers(key, token, number)
        if held ~= nil then written = held and "" end
      end
    else
      written = redis.pcall("set", key, token, "NX", "PX", number)
    end
    if type(written) == "table" and written.err then
      if check ~= "0" and not unevicted() then return -3 end
      error(written)
    end
    if setget then
      previous = written
      if not previous then status = 1 end
    elseif written then
      status = 1
    else
      previous = redis.pcall("get", key)
      if type(previous) == "table" then
        local held = past_readers(key, token, number)
        if held == nil then error(previous) end
        previous = nil
        if not held then status = 1 end
      end
    end
    if (status == 1 or previous == token) and check ~= "0" and not unevicted() then
      if status == 1 then redis.call("del", key) end
      return -3
    end
    if status == 0 and previous == token then
      redis.call("pexpire", key, number)
      status = 1
    end
    if status == 0 and wants >= 2 then
      redis.call("set", flag, "w", "PX", number)
      local left = redis.call("pttl", key)
      if left > 0 then return "0:;" .. left end
    end
    if wants % 2 == 1 then return status .. ":" .. (redis.call("get", KEYS[2]) or "0") end
    return status
  elseif op == "s" then
    local wants, status = tonumber(more) or 0, 0
    local kind = redis.call("type", key).ok
    if kind == "string" then
      if wants >= 2 and redis.call("get", flag) ~= "w" then redis.call("set", flag, "1", "PX", number) end
    elseif kind == "none" or kind == "zset" then
      local now = readers_at(key) or now_ms()
      if redis.call("zscore", key, token) or redis.call("get", flag) ~= "w" then
        redis.call("zadd", key, now + number, token)
        if redis.call("pttl", key) < tonumber(number) then redis.call("pexpire", key, number) end
        status = 1
      end
    else
      error("WRONGTYPE the lock key holds a " .. kind)
    end
    if status == 1 and check ~= "0" and not unevicted() then
      redis.call("zrem", key, token)
      return -3
    end
    if wants % 2 == 1 then return status .. ":" .. (redis.call("get", KEYS[2]) or "0") end
    return status
  elseif op == "r" then
    local value = redis.pcall("get", key)
    if type(value) == "table" then
      if not readers_at(key) or redis.call("zrem", key, token) == 0 then return 0 end
      if redis.call("exists", key) == 0 and redis.call("del", flag) == 1 then redis.call("publish", more, token) end
      return 1
    end
    if value ~= token then return 0 end
    if redis.call("del", key, flag) == 2 then redis.call("publish", more, token) end
    return 1
  elseif op == "e" then
    local value = redis.pcall("get", key)
    if type(value) == "table" then
      local now = readers_at(key)
      if not now or not redis.call("zscore", key, token) then return 0 end
      redis.call("zadd", key, "XX", now + number, token)
      if redis.call("pttl", key) < tonumber(number) then redis.call("pexpire", key, number) end
      return 1
    end
    if value == token then return redis.call("pexpire", key, number) end
    return 0
  elseif op == "n" then
    if redis.pcall("get", key) == token and redis.call("pttl", key) >= tonumber(number) then return 0 end
    redis.call("set", key, token, "px", number)
    return 1
  elseif op == "k" then
    local left = redis.call("pttl", key)
    if left < 0 or left >= tonumber(number) then return 0 end
    redis.call("pexpire", key, number)
    return 1
  elseif op == "f" then
    local value = redis.pcall("get", key)
    if type(value) == "table" then
      if not readers_at(key) or not redis.call("zscore", key, token) then return 0 end
    elseif value ~= token then
      return 0
    end
    if (tonumber(redis.call("get", KEYS[2]) or "0") or 0) < tonumber(number) then
      redis.call("set", KEYS[2], number)
    end
    return 1
  end
  error("unknown command " .. tostring(op))
end
local function peeked(value)
  if not value then return 0 end
  if string.match(value, "^%d+$") and #value < 16 then return "2:" .. value end
  return 1
end
local out, count, i = {}, (#ARGV - 3) / 4, 1
while i <= count do
  local a = 3 + (i - 1) * 4
  if ARGV[a + 1] == "p" then
    local last, keys = i, {KEYS[1 + 2 * i]}
    while last < count and ARGV[3 + last * 4 + 1] == "p" do
      last = last + 1
      keys[#keys + 1] = KEYS[1 + 2 * last]
    end
    local values = redis.pcall("mget", unpack(keys))
    for j = i, last do
      if values.err then
        out[j] = "-2:" .. string.gsub(values.err, "[\r\n]", " ")
      else
        out[j] = peeked(values[j - i + 1])
      end
    end
    i = last + 1
  else
    local ok, answer = pcall(run, ARGV[a + 1], KEYS[1 + 2 * i], KEYS[2 + 2 * i], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4])
    if not ok then
      if type(answer) == "table" then answer = answer.err end
      answer = "-2:" .. string.gsub(tostring(answer), "[\r\n]", " ")
    end
    out[i] = answer
    i = i + 1
  end
end
local now = ""
for i = 1, (#ARGV - 3) / 4 do
  local op = ARGV[3 + (i - 1) * 4 + 1]
  if op == "v" or op == "e" or op == "s" then
    now = redis.pcall("time")
    if now.err then now = "-" else now = now[1] .. " " .. now[2] end
    break
  end
end
return now .. "\n" .. table.concat(out, "\n")"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_in_time_is_the_answer() {
        let request = async {
            tokio::time::sleep(ms(30)).await;
            Ok(7)
        };
        assert!(matches!(
            answer_within(ms(50), ms(1000), request).await,
            Within::Answered(Ok(7))
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_master_that_never_answers_times_out_after_its_bound() {
        let started = Instant::now();
        let outcome = answer_within(
            ms(50),
            ms(1000),
            futures::future::pending::<RedisResult<()>>(),
        )
        .await;
        assert!(matches!(outcome, Within::TimedOut), "{outcome:?}");
        let took = started.elapsed();
        assert!(took >= ms(50) && took < ms(100), "{took:?}");
    }

    /// A request whose answer arrives at `at` but is only readable once the
    /// runtime has had a turn after that (as a reply sits on the socket
    /// until the connection's task runs).
    async fn answered_at(at: Instant) -> RedisResult<u8> {
        tokio::time::sleep_until(at).await;
        tokio::task::yield_now().await;
        Ok(1)
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_that_arrived_while_the_agent_was_stalled_is_found() {
        let started = Instant::now();
        // The agent is stalled for 200ms (four bounds) right after sending;
        // the master answered after 5ms, during the stall.
        let request = answered_at(started + ms(5));
        let outcome = tokio::select! {
            outcome = answer_within(ms(50), ms(1000), request) => outcome,
            () = async {
                tokio::task::yield_now().await;
                tokio::time::advance(ms(200)).await;
                futures::future::pending::<()>().await
            } => unreachable!(),
        };
        assert!(matches!(outcome, Within::Answered(Ok(1))), "{outcome:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_agent_stalled_before_its_first_look_does_not_time_the_master_out() {
        // A stall of 80ms (past the 50ms bound) before the first look: the
        // master's time starts at that look, and it answers 10ms later.
        let started = Instant::now();
        let request = answered_at(started + ms(90));
        let outcome = tokio::select! {
            outcome = answer_within(ms(50), ms(1000), request) => outcome,
            () = async {
                tokio::task::yield_now().await;
                tokio::time::advance(ms(80)).await;
                futures::future::pending::<()>().await
            } => unreachable!(),
        };
        assert!(matches!(outcome, Within::Answered(Ok(1))), "{outcome:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_stall_past_the_limit_before_any_look_is_the_agents_backlog() {
        let request = futures::future::pending::<RedisResult<()>>();
        let outcome = tokio::select! {
            outcome = answer_within(ms(50), ms(300), request) => outcome,
            () = async {
                tokio::task::yield_now().await;
                tokio::time::advance(ms(400)).await;
                futures::future::pending::<()>().await
            } => unreachable!(),
        };
        assert!(matches!(outcome, Within::Backlog(_)), "{outcome:?}");
    }
}
