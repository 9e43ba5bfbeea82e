//! The scripts a master runs: the lock commands' ([`BATCH`]: each command
//! compares the whole stored value with the caller's token, so a client can
//! only touch a lock it still holds), the health task's (the incarnation
//! marker, readmission and the fencing counter's catch-up), and the
//! scanner's and operators' ([`READ_KEYS`], [`LEAK_FENCED`], and
//! [`FORCE_DELETE`], which deletes the key whoever holds it). A cluster's
//! per-slot scripts are in [`super::cluster::sweep`].
//!
//! `redis::Script` calls them by SHA (EVALSHA) and loads them again when a
//! master answers NOSCRIPT (after a restart or `SCRIPT FLUSH`); the batch
//! and a cluster's per-slot sweeps ([`super::cluster::sweep`]) build their
//! own `EVALSHA` and call [`evalsha`], which does the same.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisResult, Script, Value};

/// Runs `call`, an `EVALSHA` of `script` built by the caller, and when the
/// master answers NOSCRIPT (after a restart or `SCRIPT FLUSH`) loads the
/// script and runs the call once more, as `redis::Script` does for its
/// own invocations.
///
/// # Errors
/// The master's or the connection's, of the call or of the load.
pub async fn evalsha(
    script: &Script,
    call: &Cmd,
    conn: &mut impl ConnectionLike,
) -> RedisResult<Value> {
    match call.query_async(conn).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.prepare_invoke().load_async(conn).await?;
            call.query_async(conn).await
        }
        result => result,
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
/// [`MARKER_EVICTIONS`]). Lock keys all have a TTL, so any `volatile-*`
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
///   TTL, so the holder's release announces itself.
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
local function run(op, key, flag, token, number, more)
  if check ~= "0" and (op == "v" or op == "e") and not trusted() then return -1 end
  if op == "v" then
    local wants = tonumber(more) or 0
    local status, previous, written = 0, nil, nil
    if setget then
      written = redis.pcall("set", key, token, "NX", "GET", "PX", number)
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
      previous = redis.call("get", key)
    end
    if (status == 1 or previous == token) and check ~= "0" and not unevicted() then
      if status == 1 then redis.call("del", key) end
      return -3
    end
    if status == 0 and previous == token then
      redis.call("pexpire", key, number)
      status = 1
    end
    if status == 0 and wants >= 2 then redis.call("set", flag, "1", "PX", number) end
    if wants % 2 == 1 then return status .. ":" .. (redis.call("get", KEYS[2]) or "0") end
    return status
  elseif op == "r" then
    if redis.call("get", key) ~= token then return 0 end
    if redis.call("del", key, flag) == 2 then redis.call("publish", more, token) end
    return 1
  elseif op == "e" then
    if redis.call("get", key) == token then return redis.call("pexpire", key, number) end
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
    if redis.call("get", key) ~= token then return 0 end
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
  if op == "v" or op == "e" then
    now = redis.pcall("time")
    if now.err then now = "-" else now = now[1] .. " " .. now[2] end
    break
  end
end
return now .. "\n" .. table.concat(out, "\n")"#;

/// Raise the fencing counter (`KEYS[1]`) to `ARGV[1]` (a decimal integer),
/// never lower it: the catch-up of a master readmitted while its marker was
/// already there (another agent readmitted it, or it restarted with its
/// data). Returns 1.
pub static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"local current = tonumber(redis.call("get", KEYS[1]) or "0") or 0
if current < tonumber(ARGV[1]) then redis.call("set", KEYS[1], ARGV[1]) end
return 1"#,
    )
});

/// For every key in KEYS: its value (false when missing or not a string)
/// and its PTTL, as a flat list. Read-only; used by the scanner and the
/// locks list, which must not fail on a key of another type.
pub static READ_KEYS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"local out = {}
for _, key in ipairs(KEYS) do
  local value = redis.pcall("get", key)
  if type(value) == "table" then value = false end
  out[#out + 1] = value
  out[#out + 1] = redis.call("pttl", key)
end
return out"#,
    )
});

/// The leak scanner's writes, fenced (see `crate::scanner`): `KEYS[1]` the
/// master's scan fence (the highest fence of a scanner it has seen; on a
/// cluster, that of `KEYS[2]`'s slot), `KEYS[2]` the key written; `ARGV[1]`
/// the writer's fence (decimal), `ARGV[2]` "1" to check it ("0" only under
/// the test switch `REDLOCK_TEST_NO_SCAN_FENCE`), `ARGV[3]` the write:
///
/// - `c` (claim): nothing more; a new scanner raises every master's scan
///   fence at once, so a paused predecessor is refused from then on, not
///   from its first repair or report.
/// - `x` (repair): give `KEYS[2]` a TTL (`ARGV[5]`, ms) only if it still
///   holds the value the scan read (`ARGV[4]`, a token) and still has no
///   TTL, so a key rewritten since the scan (by an application, or
///   re-acquired) is left alone.
/// - `w` (report): `SET KEYS[2] ARGV[4] PX ARGV[5]`.
///
/// A writer whose fence is below the scan fence is refused (-1) and
/// nothing is written: a newer scanner has taken over, and this one was
/// paused past its scan lock's validity. Otherwise the scan fence is
/// raised to the writer's (never lowered; stored as the caller's text, as
/// Lua would print a large number in exponent form) in the same script as
/// the write, and the answer is 1 when written, 0 for a repair left alone.
/// Fences below 2^53 are exact as Lua numbers.
pub static LEAK_FENCED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"local seen = tonumber(redis.call("get", KEYS[1]) or "0") or 0
local fence = tonumber(ARGV[1])
if ARGV[2] == "1" and seen > fence then return -1 end
if seen < fence then redis.call("set", KEYS[1], ARGV[1]) end
local op = ARGV[3]
if op == "x" then
  if redis.pcall("get", KEYS[2]) == ARGV[4] and redis.call("pttl", KEYS[2]) == -1 then
    return redis.call("pexpire", KEYS[2], ARGV[5])
  end
  return 0
elseif op == "w" then
  redis.call("set", KEYS[2], ARGV[4], "PX", ARGV[5])
end
return 1"#,
    )
});

/// Readmission after a quarantine (`KEYS[1]` the incarnation marker, `KEYS[2]`
/// this agent's quarantine witness, `KEYS[3]` the fencing counter): when the
/// witness the agent wrote as its quarantine began is still there, the
/// master lost nothing since, so the fencing counter is raised to the
/// catch-up value read from the other masters (`ARGV[2]`), the marker is
/// written and the witness removed (1): the master never votes with a
/// counter below the fences granted while it was away. When the witness is
/// gone, the master lost its keys again during the quarantine, possibly
/// after another agent had already readmitted it: nothing is written (0),
/// and the quarantine starts over. `ARGV[1]`: the marker's value, to which
/// the master's eviction count is added (see [`MARKER_EVICTIONS`]).
pub static READMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{EVICTED_KEYS_SOURCE}if redis.call("exists", KEYS[2]) == 0 then return 0 end
redis.call("del", KEYS[2])
local current = tonumber(redis.call("get", KEYS[3]) or "0") or 0
if current < tonumber(ARGV[2]) then redis.call("set", KEYS[3], ARGV[2]) end
local evicted = evicted_keys()
redis.call("set", KEYS[1], evicted and ARGV[1] .. " e=" .. evicted or ARGV[1])
return 1"#
    ))
});

/// Writes the incarnation marker (`KEYS[1]`): `ARGV[1]`, then ` e=` and the
/// master's `evicted_keys` from `INFO stats` at this moment (where the
/// master reports it). Every marker carries that count so that a vote can
/// tell, atomically, that the master evicted nothing since the marker was
/// written (see [`BATCH`]): lock keys have a TTL and the marker has none,
/// so `volatile-*` policies evict lock keys and leave the marker. No TTL: it
/// must outlive every lock. Returns 1.
pub static MARKER_EVICTIONS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r#"{EVICTED_KEYS_SOURCE}local evicted = evicted_keys()
redis.call("set", KEYS[1], evicted and ARGV[1] .. " e=" .. evicted or ARGV[1])
return 1"#
    ))
});

/// The health probe's read of the incarnation marker (`KEYS[1]`), with the
/// same eviction check as a vote's: 0 when the marker is missing, -3 when
/// the master evicted keys since it was written (the marker is deleted, so
/// every agent sees the loss), 1 when it may be trusted. A marker written
/// without a count (an older agent's) gets one when `ARGV[2]` is the count
/// this agent's previous probe read and the master still reports it: no
/// key was evicted between that probe, which found the marker, and now.
/// `ARGV[1]`: the marker's value without its count; `ARGV[2]`: the count
/// last read, or "" when unknown; `ARGV[3]` "0" to skip the check (the test
/// switch).
pub static CHECK_MARKER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{EVICTED_KEYS_SOURCE}{MARKER_CHECK_SOURCE}\nreturn check_marker(KEYS[1], ARGV[1], ARGV[2], ARGV[3] ~= \"0\")"
    ))
});

/// [`CHECK_MARKER`]'s check as a Lua function, shared with [`probe`]'s
/// script. `evicted` (the master's `evicted_keys`) is read only when the
/// marker is there and its count is checked.
const MARKER_CHECK_SOURCE: &str = r#"local evicted
local function count()
  if evicted == nil then
    evicted = evicted_keys() or false
  end
  return evicted or nil
end
local function check_marker(key, value, last, evictions)
  local found = redis.call("get", key)
  if not found then return 0 end
  if not evictions then return 1 end
  local now = count()
  local counted = string.match(found, " e=(%d+)$")
  if counted == nil then
    if now and now == last then redis.call("set", key, value .. " e=" .. now) end
    return 1
  end
  if now and counted ~= now then
    redis.call("del", key)
    return -3
  end
  return 1
end"#;

/// The health probe of a master whose process the agent knows (an idle
/// agent's; a busy agent's probes read `INFO`), in one call: the
/// incarnation marker's status (when `ARGV[4]` is "1", else empty: 1
/// there, 0 missing, or [`CHECK_MARKER`]'s answer for a marker without
/// its eviction count), the master's `evicted_keys` when it was read (else
/// empty) and its clock (`TIME`, as in [`BATCH`]'s first line; `-` where
/// refused), a line each. Same `KEYS` and first three `ARGV` as
/// [`CHECK_MARKER`].
///
/// No `INFO stats`, most of what the call cost the master, but for a
/// marker written without a count (an older agent's), which
/// [`CHECK_MARKER`]'s rule gives one, or where the marker is not checked
/// (the test switch). An eviction is seen all the same: the votes check
/// the count themselves, atomically, and delete the marker of a master
/// that evicted (see [`BATCH`]), as do busy agents' probes, and this probe
/// finds the marker missing; an idle agent votes nothing before its next
/// request, whose stale view has the masters probed in full first.
///
/// Each node has its own copy, under its own SHA (`tag`, as
/// [`batch`]), loaded only by a probe that then reads `INFO server`: on
/// a new process (a restart, a restore, a failover behind a proxy) the
/// call answers NOSCRIPT, and the probe reads the master's identity from
/// `INFO` as on first sight. So the probe of a known process costs one
/// script call that reads two keys and the clock, and what an idle fleet
/// costs its masters is mostly this call (docs/benchmarks.md).
///
/// With two more keys, `KEYS[2]` the fleet's leak report and `KEYS[3]`
/// its scan lock, the same call is an idle standby scanner's look too
/// (see `Node::leak_view`): two more lines, "1" when the scan lock is
/// there (else "0"), then the report after a `+`, or `-` when there is
/// none (or it is not a string). The report is last: its text is the
/// rest of the answer, whatever it holds.
pub fn probe(tag: &str) -> Script {
    Script::new(&format!(
        r#"{EVICTED_KEYS_SOURCE}{MARKER_CHECK_SOURCE}
local status = ""
if ARGV[4] == "1" then
  local found = redis.call("get", KEYS[1])
  if not found then
    status = 0
  elseif ARGV[3] ~= "0" and not string.match(found, " e=%d+$") then
    status = check_marker(KEYS[1], ARGV[1], ARGV[2], true)
  else
    status = 1
  end
else
  count()
end
local now = redis.pcall("time")
if now.err then now = "-" else now = now[1] .. " " .. now[2] end
local look = ""
if #KEYS == 3 then
  local report = redis.pcall("get", KEYS[2])
  if type(report) == "string" then report = "+" .. report else report = "-" end
  look = "\n" .. redis.call("exists", KEYS[3]) .. "\n" .. report
end
return status .. "\n" .. (evicted or "") .. "\n" .. now .. look
-- {tag}"#
    ))
}

/// An operator's force release on one master (`KEYS[1]` the lock key):
/// deletes the key whoever holds it, and returns the value it held ("" for
/// a key of another type), or nil when there was no key: read and deleted
/// in one script, so the value the force release announces (see
/// `Node::announce`) is the one it removed.
pub static FORCE_DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"local value = redis.pcall("get", KEYS[1])
if type(value) == "table" then value = "" end
if redis.call("del", KEYS[1]) == 0 then return false end
return value"#,
    )
});
