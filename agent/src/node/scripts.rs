//! The scripts a master runs besides the lock commands' (those are
//! [`super::conn::BATCH`], beside the check of the process that runs it):
//! the health task's (the incarnation marker, readmission and the fencing
//! counter's catch-up), and the scanner's and operators' ([`READ_KEYS`],
//! [`LEAK_FENCED`], and [`FORCE_DELETE`], which deletes the key whoever
//! holds it). A cluster's per-slot scripts are in
//! [`super::cluster::sweep`].
//!
//! `redis::Script` calls them by SHA (EVALSHA) and loads them again when a
//! master answers NOSCRIPT (after a restart or `SCRIPT FLUSH`); a cluster's
//! per-slot sweeps ([`super::cluster::sweep`]) build their own `EVALSHA`
//! and call [`evalsha`], which does the same.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Cmd, RedisResult, Script, Value};

use super::conn::EVICTED_KEYS_SOURCE;

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

/// For every key in KEYS: its value (false when missing or not a string),
/// its PTTL and a shared lock's readers (the tokens in the sorted set at
/// the key that have not expired, see `super::conn::BATCH`; empty for
/// any other key), as a flat list. Read-only; used by the scanner and the
/// locks list, which must not fail on a key of another type.
pub static READ_KEYS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"local out, now = {}, nil
for _, key in ipairs(KEYS) do
  local value, readers = redis.pcall("get", key), {}
  if type(value) == "table" then
    value = false
    if redis.call("type", key).ok == "zset" then
      if not now then
        local t = redis.call("time")
        now = t[1] * 1000 + math.floor(t[2] / 1000)
      end
      readers = redis.call("zrangebyscore", key, "(" .. now, "+inf")
    end
  end
  out[#out + 1] = value
  out[#out + 1] = redis.call("pttl", key)
  out[#out + 1] = readers
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
/// written (see [`super::conn::BATCH`]): lock keys have a TTL and the marker has none,
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
/// empty) and its clock (`TIME`, as in [`super::conn::BATCH`]'s first line; `-` where
/// refused), a line each. Same `KEYS` and first three `ARGV` as
/// [`CHECK_MARKER`].
///
/// No `INFO stats`, most of what the call cost the master, but for a
/// marker written without a count (an older agent's), which
/// [`CHECK_MARKER`]'s rule gives one, or where the marker is not checked
/// (the test switch). An eviction is seen all the same: the votes check
/// the count themselves, atomically, and delete the marker of a master
/// that evicted (see [`super::conn::BATCH`]), as do busy agents' probes, and this probe
/// finds the marker missing; an idle agent votes nothing before its next
/// request, whose stale view has the masters probed in full first.
///
/// Each node has its own copy, under its own SHA (`tag`, as
/// [`super::conn::batch`]), loaded only by a probe that then reads `INFO server`: on
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
/// deletes the key whoever holds it, and returns the value it held (a
/// shared lock's readers, one per line; "" for a key of another type), or
/// nil when there was no key: read and deleted
/// in one script, so the value the force release announces (see
/// `Node::announce`) is the one it removed.
pub static FORCE_DELETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"local value = redis.pcall("get", KEYS[1])
if type(value) == "table" then
  value = ""
  if redis.call("type", KEYS[1]).ok == "zset" then
    value = table.concat(redis.call("zrange", KEYS[1], 0, -1), "\n")
  end
end
if redis.call("del", KEYS[1]) == 0 then return false end
return value"#,
    )
});
