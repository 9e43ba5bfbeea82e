//! The agent's own bookkeeping keys on every master, beside the lock keys
//! (`<key_prefix><resource>`). Each is the key prefix followed by a suffix
//! that starts with a space, which no resource may contain, so none of
//! them can be a lock key; listings, scans and the fault suite's observer
//! skip them with [`is_bookkeeping`].

/// The incarnation marker: written once, no TTL. A master without it
/// lost its keys (FLUSHALL, failover, a restart without persistence).
pub const MARKER_SUFFIX: &str = " incarnation";
/// The quarantine witness, after `<key_prefix><40 hex>` (the agent's
/// id): written when a quarantine begins, so readmission can tell that
/// the master lost nothing since.
pub const WITNESS_SUFFIX: &str = " quarantine witness";
/// The fencing counter: the highest fence minted with this master's
/// vote. No TTL; lost with the marker, restored from the other masters
/// on readmission.
pub const FENCE_SUFFIX: &str = " fence";
/// The waiting flag of one lock key, after `<key_prefix>` and before
/// ` {<tag>} <resource>` (see [`waiting_key`]): set by a vote that found
/// the lock taken and will wait for it, with that vote's TTL; the
/// release deletes it with the lock and announces the release only when
/// it was there. A release nobody waits for publishes nothing.
pub const WAITING_SUFFIX: &str = " waiting";
/// The fleet's leak-scan lock: the key of the reserved resource
/// `" leak scan"` (a name with a space, which no client may use), taken
/// with a fenced grant and a TTL by the agent that scans for every agent
/// with this prefix on these masters.
pub const LEAK_SCAN_SUFFIX: &str = " leak scan";
/// The fleet's last leak report (JSON, a `LeaksResponse`), written by the
/// scanning agent on every master after each scan, with a TTL of a few
/// scan intervals; every other agent reads it.
pub const LEAK_REPORT_SUFFIX: &str = " leak report";
/// The highest scan fence the master has seen: the scanner's repairs and
/// reports are written in one script with it, and refused when it is
/// above the writer's fence. No TTL, one per prefix (on a cluster, one per
/// slot written in, with the slot's hash tag after it; see [`slot_key`]).
pub const LEAK_FENCE_SUFFIX: &str = " leak fence";

/// A semaphore's limit, after `<key_prefix>` and before ` <name>` (see
/// [`semaphore_limit_key`]): the limit its permits were granted with,
/// written with the longest TTL of them, so a request with another limit
/// is refused while any is held.
pub const SEMAPHORE_LIMIT_SUFFIX: &str = " semaphore limit";
/// An election's leader note, after `<key_prefix>` and before ` <name>`
/// (see [`leader_key`]): the leader's term, value and process, written by
/// its agent once elected, with the leadership's token, so a reader shows
/// it only while that token leads.
pub const LEADER_SUFFIX: &str = " leader";

/// `<key_prefix> semaphore limit <name>`.
pub fn semaphore_limit_key(key_prefix: &str, name: &str) -> String {
    format!("{key_prefix}{SEMAPHORE_LIMIT_SUFFIX} {name}")
}

/// `<key_prefix> leader <name>`.
pub fn leader_key(key_prefix: &str, name: &str) -> String {
    format!("{key_prefix}{LEADER_SUFFIX} {name}")
}

/// The key is one of the agent's bookkeeping keys under `key_prefix`,
/// not a lock: on a single server, or on a cluster with its slot's hash
/// tag after the suffix (see [`slot_key`]).
pub fn is_bookkeeping(key_prefix: &str, key: &str) -> bool {
    key.strip_prefix(key_prefix).is_some_and(|rest| {
        if rest.starts_with(WAITING_SUFFIX)
            || rest.starts_with(SEMAPHORE_LIMIT_SUFFIX)
            || rest.starts_with(LEADER_SUFFIX)
        {
            return true;
        }
        let rest = strip_slot_tag(rest);
        rest == MARKER_SUFFIX
            || rest == FENCE_SUFFIX
            || rest == LEAK_SCAN_SUFFIX
            || rest == LEAK_REPORT_SUFFIX
            || rest == LEAK_FENCE_SUFFIX
            || rest.ends_with(WITNESS_SUFFIX)
    })
}

/// Hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag
/// (the text between the first `{` and the next `}`, when not empty) or
/// of the whole key, modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(hash_tag(key)) % SLOTS
}

fn hash_tag(key: &[u8]) -> &[u8] {
    if let Some(open) = key.iter().position(|b| *b == b'{') {
        if let Some(len) = key[open + 1..].iter().position(|b| *b == b'}') {
            if len > 0 {
                return &key[open + 1..open + 1 + len];
            }
        }
    }
    key
}

/// The hash tag that lands in `slot`: the smallest decimal number whose
/// slot it is. Every agent derives the same table, so the per-slot
/// bookkeeping keys have one name for all of them.
pub fn slot_tag(slot: u16) -> &'static str {
    static TAGS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let tags = TAGS.get_or_init(|| {
        let mut tags = vec![String::new(); usize::from(SLOTS)];
        let mut missing = usize::from(SLOTS);
        let mut n: u64 = 0;
        while missing > 0 {
            let text = n.to_string();
            let slot = usize::from(key_slot(text.as_bytes()));
            if tags[slot].is_empty() {
                tags[slot] = text;
                missing -= 1;
            }
            n += 1;
        }
        tags
    });
    &tags[usize::from(slot % SLOTS)]
}

/// A bookkeeping key (`<key_prefix><suffix>`) for the cluster slot
/// `slot`: the same name followed by ` {<tag>}`, so the key lives in that
/// slot beside the locks it guards. A script's keys must share a slot;
/// every vote reads its slot's marker and counter in the same script.
pub fn slot_key(key: &str, slot: u16) -> String {
    format!("{key} {{{}}}", slot_tag(slot))
}

/// The waiting flag of `lock_key` (`<key_prefix><resource>`):
/// `<key_prefix> waiting {<tag>} <resource>`, with the tag of the lock
/// key's own slot, so on a cluster the flag lives in the lock's slot and
/// one script can write both.
pub fn waiting_key(key_prefix: &str, lock_key: &str) -> String {
    let resource = lock_key.strip_prefix(key_prefix).unwrap_or(lock_key);
    let tag = slot_tag(key_slot(lock_key.as_bytes()));
    format!("{key_prefix}{WAITING_SUFFIX} {{{tag}}} {resource}")
}

/// `rest` without a trailing ` {<tag>}`.
fn strip_slot_tag(rest: &str) -> &str {
    match rest.strip_suffix('}').and_then(|r| r.rsplit_once(" {")) {
        Some((head, tag)) if !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_digit()) => head,
        _ => rest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis_cluster() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(key_slot(b"foo{}{bar}"), key_slot(b"foo{}{bar}"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
    }

    #[test]
    fn every_slot_has_a_tag_that_lands_in_it() {
        for slot in 0..SLOTS {
            let key = slot_key("redlock: incarnation", slot);
            assert_eq!(key_slot(key.as_bytes()), slot, "{key}");
        }
    }

    #[test]
    fn slot_keys_are_bookkeeping_and_locks_are_not() {
        let p = "redlock:";
        assert!(is_bookkeeping(p, &slot_key("redlock: incarnation", 7)));
        assert!(is_bookkeeping(p, &slot_key("redlock: fence", 16383)));
        assert!(is_bookkeeping(
            p,
            &slot_key("redlock:0123 quarantine witness", 9)
        ));
        assert!(is_bookkeeping(p, "redlock: fence"));
        assert!(!is_bookkeeping(p, "redlock:jobs {42}"));
        for suffix in [LEAK_SCAN_SUFFIX, LEAK_REPORT_SUFFIX, LEAK_FENCE_SUFFIX] {
            let key = format!("{p}{suffix}");
            assert!(is_bookkeeping(p, &key), "{key}");
            assert!(is_bookkeeping(p, &slot_key(&key, 99)), "{key} in slot 99");
            assert!(
                !is_bookkeeping("other:", &key),
                "{key} under another prefix"
            );
        }
        assert!(!is_bookkeeping(p, "redlock:leak scan"));
        assert!(is_bookkeeping(p, &semaphore_limit_key(p, "pay")));
        assert!(is_bookkeeping(p, &leader_key(p, "scheduler")));
        assert!(!is_bookkeeping(p, "redlock:pay permit 0"));
        assert!(!is_bookkeeping(p, "redlock:scheduler election"));
        assert!(!is_bookkeeping(p, "redlock:{42}"));
    }

    #[test]
    fn a_waiting_flag_lives_in_its_locks_slot_and_is_bookkeeping() {
        let p = "redlock:";
        for resource in ["jobs", "a{b", "{user7}.orders", "x}y{", "{}z"] {
            let lock = format!("{p}{resource}");
            let flag = waiting_key(p, &lock);
            assert_eq!(
                key_slot(flag.as_bytes()),
                key_slot(lock.as_bytes()),
                "{flag}"
            );
            assert!(is_bookkeeping(p, &flag), "{flag}");
            assert!(flag.ends_with(resource), "{flag}");
        }
    }
}
