//! The compare-and-set scripts. Each compares the whole stored value with the
//! caller's token, so a client can only touch a lock it still holds.
//!
//! `redis::Script` calls them by SHA (EVALSHA) and loads them again when a
//! master answers NOSCRIPT (after a restart or `SCRIPT FLUSH`).

use std::sync::LazyLock;

use redis::Script;

/// Delete the key if it still holds the token. Returns 1 or 0.
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("del", KEYS[1])
end
return 0"#,
    )
});

/// Set a new TTL (ARGV[2], ms) if the key still holds the token. Returns 1 or 0.
pub static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("pexpire", KEYS[1], ARGV[2])
end
return 0"#,
    )
});
