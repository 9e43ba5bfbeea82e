//! The compare-and-set scripts. Each compares the whole stored value with the
//! caller's token, so a client can only touch a lock it still holds.
//!
//! `redis::Script` calls them by SHA (EVALSHA) and loads them again when a
//! master answers NOSCRIPT (after a restart or `SCRIPT FLUSH`).

use std::sync::LazyLock;

use redis::Script;

/// Delete the key if it still holds the token, and announce the release on
/// the resource's channel `ARGV[2]` so its waiters on every agent wake at
/// once (publishing to a channel nobody listens on costs next to nothing).
/// Returns 1 or 0.
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.call("get", KEYS[1]) == ARGV[1] then
  redis.call("del", KEYS[1])
  redis.call("publish", ARGV[2], "released")
  return 1
end
return 0"#,
    )
});

/// The vote: `SET NX PX` of the token, but only while the master still has
/// its incarnation marker (`KEYS[2]`). Checking the marker in the same script
/// as the write makes the check atomic with the vote: a master that lost its
/// keys (FLUSHALL, failover, a restart) has lost the marker too, and answers
/// -1 without writing anything, so its vote can never count.
///
/// A key that already holds this very token was written by an earlier round
/// of the same request (whose release did not arrive in time): it gets the
/// new TTL and counts as granted, exactly as if it had been set now, so a
/// request is never blocked by its own debris.
///
/// ARGV: token, ttl in ms, "1" to use `SET ... GET` (Redis 7), so a key of
/// another type answers WRONGTYPE instead of looking taken; "1" to check the
/// marker ("0" only under the test switch); "1" to read the fencing counter
/// (`KEYS[3]`) with the vote.
/// Returns 1 (granted), 0 (taken) or -1 (marker missing); when the counter
/// is read, `{status, counter}` with the counter as a decimal string ("0"
/// when the master has none yet). The read is atomic with the vote: a
/// grant's fence is raised (see [`FENCE`]) on this master only while its
/// key is here, so a vote that finds the key free reads every fence raised
/// under an earlier holder of this lock.
pub static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"local function answer(status)
  if ARGV[5] == "1" then
    return {status, redis.call("get", KEYS[3]) or "0"}
  end
  return status
end
if ARGV[4] == "1" and redis.call("exists", KEYS[2]) == 0 then return answer(-1) end
local previous
if ARGV[3] == "1" then
  previous = redis.call("set", KEYS[1], ARGV[1], "NX", "GET", "PX", ARGV[2])
  if not previous then return answer(1) end
else
  if redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return answer(1) end
  previous = redis.call("get", KEYS[1])
end
if previous == ARGV[1] then
  redis.call("pexpire", KEYS[1], ARGV[2])
  return answer(1)
end
return answer(0)"#,
    )
});

/// Round 2 of a fenced grant: raise the fencing counter (`KEYS[2]`) to the
/// grant's fence (`ARGV[2]`, a decimal integer) only while the lock key
/// (`KEYS[1]`) still holds this grant's token (`ARGV[1]`), so the raise happens
/// before any later holder's `SET NX` on this master. Never lowers it.
/// The fence is stored as the caller's text, not a Lua number: Lua would
/// print a large number in exponent form. Returns 1, or 0 when the key no
/// longer holds the token.
pub static FENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end
local current = tonumber(redis.call("get", KEYS[2]) or "0") or 0
if current < tonumber(ARGV[2]) then redis.call("set", KEYS[2], ARGV[2]) end
return 1"#,
    )
});

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

/// Set a new TTL (`ARGV[2]`, ms) if the key still holds the token and, when
/// `ARGV[3]` is "1", the master still has its incarnation marker (`KEYS[2]`).
/// Returns 1 (extended), 0 (not held) or -1 (marker missing).
pub static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if ARGV[3] == "1" and redis.call("exists", KEYS[2]) == 0 then return -1 end
if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("pexpire", KEYS[1], ARGV[2])
end
return 0"#,
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

/// The scanner's repair: give the key a TTL (`ARGV[2]`, ms) only if it still
/// holds the value the scan read (`ARGV[1]`, a token) and still has no TTL,
/// so a key rewritten since the scan (by an application, or re-acquired)
/// is left alone. Returns 1 or 0.
pub static EXPIRE_IF_UNCHANGED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.pcall("get", KEYS[1]) == ARGV[1] and redis.call("pttl", KEYS[1]) == -1 then
  return redis.call("pexpire", KEYS[1], ARGV[2])
end
return 0"#,
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
/// and the quarantine starts over. `ARGV[1]`: the marker's value.
pub static READMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.call("exists", KEYS[2]) == 0 then return 0 end
redis.call("del", KEYS[2])
local current = tonumber(redis.call("get", KEYS[3]) or "0") or 0
if current < tonumber(ARGV[2]) then redis.call("set", KEYS[3], ARGV[2]) end
redis.call("set", KEYS[1], ARGV[1])
return 1"#,
    )
});
