//! Lock tokens: 20 bytes from the OS CSPRNG and a check value bound to the
//! lock key, then the granting agent's name after `@`, then an optional
//! owner label after a dot:
//! `rl2-<40 hex random>-<16 hex check>[@<agent>][.<owner>]`.
//!
//! The token is the whole value stored at the lock key, so compare-and-set
//! scripts compare everything the client holds; the name and label only make
//! the value longer, never easier to guess. The agent name and the owner
//! label are the only parts of a value the agent ever shows to others.
//!
//! ## Why a check value
//! The leaked-key scanner may change keys it finds under `lock.key_prefix`
//! (`leak_scan.repair: expire`), and that prefix may hold application data
//! too. A value's shape proves nothing: a SHA-1 is 40 hex digits, as the
//! tokens of agents before this format were. So the token carries a proof
//! that it was written for the key that holds it: the first 8 bytes of
//! SHA-256 over a domain tag, the lock key's name, the random bytes, the
//! agent name and the owner label ([`stored_at`] checks it). A value an
//! application writes passes only if it was built on purpose from this
//! format (or with odds of 2^-64); a real token copied under another key,
//! or altered, fails, since the key's name and every part are hashed.
//! The check is no secret and no signature: anyone may compute it, and it
//! keeps out accidents, not an adversary with write access to the masters
//! (who can delete any lock anyway). The `rl2-` tag starts with letters
//! that are not hex digits, so no value of the old format and no hex digest
//! looks like one.
//!
//! Values of the old format (`<40 hex>[@<agent>][.<owner>]`, written by
//! agents before this one) still parse for their agent and owner, so a
//! fleet being upgraded lists every lock; the scanner reports them but
//! never changes them.

use std::fmt;

use ring::digest;

/// Number of random bytes, as the Redlock page suggests.
pub const RANDOM_BYTES: usize = 20;

/// Bytes of the check value: a value written by chance passes with odds of
/// 2^-64.
pub const CHECK_BYTES: usize = 8;

/// The version tag every token of this format starts with.
pub const TAG: &str = "rl2-";

/// `rl2-<random>-<check>`: the part before `@` or `.`.
const HEAD_LEN: usize = TAG.len() + 2 * RANDOM_BYTES + 1 + 2 * CHECK_BYTES;

/// Hashed first, so the check is never the same as any other SHA-256 use.
const DOMAIN: &[u8] = b"redlock-agent lock token v2\0";

/// A lock token. Its `Debug` hides the random part and the check.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A fresh token for the lock key `key` (`<key_prefix><resource>`,
    /// exactly the key the token will be stored at: the scanner checks the
    /// value against the key that holds it).
    ///
    /// # Panics
    /// If the OS random source fails, which leaves no safe way to make tokens.
    pub fn generate(key: &str, agent: Option<&str>, owner: Option<&str>) -> Token {
        let mut random = [0u8; RANDOM_BYTES];
        getrandom::fill(&mut random).expect("the OS random source is unavailable");
        Token::with_random(key, &random, agent, owner)
    }

    /// The token for `key` with these random bytes: [`Token::generate`]'s
    /// format, deterministic for tests.
    fn with_random(
        key: &str,
        random: &[u8; RANDOM_BYTES],
        agent: Option<&str>,
        owner: Option<&str>,
    ) -> Token {
        if let Some(agent) = agent {
            debug_assert!(valid_agent(agent), "agent names are validated in config");
        }
        if let Some(owner) = owner {
            debug_assert!(valid_owner(owner), "owner labels are validated per request");
        }
        let check = check(key, random, agent, owner);
        let mut token = String::with_capacity(
            HEAD_LEN + agent.map_or(0, |a| 1 + a.len()) + owner.map_or(0, |o| 1 + o.len()),
        );
        token.push_str(TAG);
        push_hex(&mut token, random);
        token.push('-');
        push_hex(&mut token, &check);
        if let Some(agent) = agent {
            token.push('@');
            token.push_str(agent);
        }
        if let Some(owner) = owner {
            token.push('.');
            token.push_str(owner);
        }
        Token(token)
    }

    /// A token as a client sent it back; not checked beyond being a string,
    /// since an unknown token simply matches no key.
    pub fn from_client(token: String) -> Token {
        Token(token)
    }

    /// The value this token's holder stores at another lock key `key`: the
    /// same random part, agent and owner, with the check value for `key`.
    /// A lock on several resources is one token for the client and one
    /// such value per key (each key's value proves it was written for that
    /// key, as the scanner requires); only the holder of the random part
    /// can make them. `None` for a value of the old format or no token.
    pub fn for_key(&self, key: &str) -> Option<Token> {
        let Parts { head, agent, owner } = parts(&self.0);
        let Head::Checked { random, .. } = self::head(head) else {
            return None;
        };
        if agent.is_some_and(|a| !valid_agent(a)) || owner.is_some_and(|o| !valid_owner(o)) {
            return None;
        }
        let mut bytes = [0u8; RANDOM_BYTES];
        hex::decode_to_slice(random, &mut bytes).ok()?;
        Some(Token::with_random(key, &bytes, agent, owner))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// 20 random bytes from the OS CSPRNG as 40 hex digits: an id that no one
/// can guess or collide with (quarantine witnesses), not a lock token.
///
/// # Panics
/// If the OS random source fails.
pub fn random_id() -> String {
    let mut random = [0u8; RANDOM_BYTES];
    getrandom::fill(&mut random).expect("the OS random source is unavailable");
    hex::encode(random)
}

/// The check value of a token for `key`: the first [`CHECK_BYTES`] of
/// SHA-256 over the domain tag and every part, each with its length, so no
/// two different sets of parts hash the same input.
fn check(
    key: &str,
    random: &[u8; RANDOM_BYTES],
    agent: Option<&str>,
    owner: Option<&str>,
) -> [u8; CHECK_BYTES] {
    let mut hash = digest::Context::new(&digest::SHA256);
    hash.update(DOMAIN);
    // Agent names and owner labels are never empty (see `valid_agent`,
    // `valid_owner`), so "absent" and "empty" cannot be confused.
    for part in [
        key.as_bytes(),
        random,
        agent.unwrap_or("").as_bytes(),
        owner.unwrap_or("").as_bytes(),
    ] {
        hash.update(&(part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    let digest = hash.finish();
    let mut out = [0u8; CHECK_BYTES];
    out.copy_from_slice(&digest.as_ref()[..CHECK_BYTES]);
    out
}

/// Appends `bytes` as lowercase hex.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

/// A stored value cut at its delimiters: the head before the first `@` or
/// `.`, the agent name after that `@`, the owner label after the first `.`.
/// Agent names have no `.` or `@`, and heads neither, so the first `.`
/// always starts the owner label (which may contain both).
struct Parts<'a> {
    head: &'a str,
    agent: Option<&'a str>,
    owner: Option<&'a str>,
}

fn parts(value: &str) -> Parts<'_> {
    let (head, owner) = match value.split_once('.') {
        Some((head, owner)) => (head, Some(owner)),
        None => (value, None),
    };
    let (head, agent) = match head.split_once('@') {
        Some((head, agent)) => (head, Some(agent)),
        None => (head, None),
    };
    Parts { head, agent, owner }
}

/// The format of a value's head.
enum Head<'a> {
    /// `rl2-<40 hex>-<16 hex>`: the random part and the check, in hex.
    Checked {
        random: &'a str,
        check: &'a str,
    },
    /// 40 lowercase hex digits: a token of an agent before check values, or
    /// any hex digest.
    Old,
    Neither,
}

fn head(head: &str) -> Head<'_> {
    if let Some(rest) = head.strip_prefix(TAG) {
        if head.len() == HEAD_LEN {
            let (random, check) = rest.split_at(2 * RANDOM_BYTES);
            if let Some(check) = check.strip_prefix('-') {
                if is_lower_hex(random) && is_lower_hex(check) {
                    return Head::Checked { random, check };
                }
            }
        }
        return Head::Neither;
    }
    if head.len() == 2 * RANDOM_BYTES && is_lower_hex(head) {
        return Head::Old;
    }
    Head::Neither
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What the value stored at a key under `lock.key_prefix` is, as far as the
/// value itself proves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// A token an agent wrote for this very key: its check value holds. The
    /// only kind of value the scanner may change.
    Token,
    /// Shaped like a token but not proven to be one written for this key: a
    /// token of the old format (`<40 hex>[@<agent>][.<owner>]`, which is
    /// also what a hex digest looks like), or a checked token whose check
    /// fails (copied from another key, or altered). Maybe a lock, maybe
    /// application data: reported, never changed.
    Unproven,
    /// Anything else: application data, bookkeeping, the empty string.
    Foreign,
}

/// What `value`, read at `key`, is: a [`Stored::Token`] only if its check
/// value is the one [`Token::generate`] computes for `key` and every part
/// of the value.
pub fn stored_at(key: &str, value: &str) -> Stored {
    let Parts { head, agent, owner } = parts(value);
    if agent.is_some_and(|a| !valid_agent(a)) || owner.is_some_and(|o| !valid_owner(o)) {
        return Stored::Foreign;
    }
    match self::head(head) {
        Head::Checked {
            random,
            check: shown,
        } => {
            let mut bytes = [0u8; RANDOM_BYTES];
            let mut claimed = [0u8; CHECK_BYTES];
            // Both are lowercase hex of the right length (see `head`).
            let decoded = hex::decode_to_slice(random, &mut bytes).is_ok()
                && hex::decode_to_slice(shown, &mut claimed).is_ok();
            if decoded && check(key, &bytes, agent, owner) == claimed {
                Stored::Token
            } else {
                Stored::Unproven
            }
        }
        Head::Old => Stored::Unproven,
        Head::Neither => Stored::Foreign,
    }
}

/// The owner label of a stored lock value, if it has one. Never returns any
/// part of the random token.
pub fn owner_of(value: &str) -> Option<&str> {
    value.split_once('.').map(|(_, owner)| owner)
}

/// The name of the agent that wrote a stored lock value (of either format),
/// if it has one. Never returns any part of the random token.
pub fn agent_of(value: &str) -> Option<&str> {
    let Parts { head, agent, .. } = parts(value);
    if matches!(self::head(head), Head::Neither) {
        return None;
    }
    agent.filter(|name| valid_agent(name))
}

/// Agent names: 1 to 64 letters, digits, `-` or `_` (no `.` or `@`, which
/// delimit the parts of a value).
pub fn valid_agent(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}

/// Owner labels: 1 to 128 bytes of printable ASCII.
pub fn valid_owner(owner: &str) -> bool {
    (1..=128).contains(&owner.len()) && owner.bytes().all(|b| (0x20..0x7f).contains(&b))
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***")?;
        if let Some(agent) = agent_of(&self.0) {
            write!(f, "@{agent}")?;
        }
        if let Some(owner) = owner_of(&self.0) {
            write!(f, ".{owner}")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "redlock:orders-42";

    #[test]
    fn a_token_makes_its_value_for_another_key_and_only_a_token_does() {
        let token = Token::generate(KEY, Some("agent-1"), Some("billing job"));
        let other = token.for_key("redlock:stock-7").unwrap();
        assert_ne!(other, token);
        assert_eq!(stored_at("redlock:stock-7", other.as_str()), Stored::Token);
        assert_eq!(stored_at(KEY, other.as_str()), Stored::Unproven);
        assert_eq!(
            other.as_str()[..44],
            token.as_str()[..44],
            "one random part"
        );
        assert_eq!(agent_of(other.as_str()), Some("agent-1"));
        assert_eq!(owner_of(other.as_str()), Some("billing job"));
        assert_eq!(other.for_key(KEY), Some(token));
        let old = Token::from_client("ab".repeat(RANDOM_BYTES));
        assert_eq!(old.for_key(KEY), None);
        assert_eq!(Token::from_client("nonsense".into()).for_key(KEY), None);
    }

    #[test]
    fn tokens_are_tagged_random_and_checked_hex() {
        let a = Token::generate(KEY, None, None);
        let b = Token::generate(KEY, None, None);
        let value = a.as_str();
        assert_eq!(value.len(), HEAD_LEN, "{value}");
        assert!(value.starts_with("rl2-"), "{value}");
        assert_eq!(&value[44..45], "-", "{value}");
        assert!(
            is_lower_hex(&value[4..44]) && is_lower_hex(&value[45..]),
            "{value}"
        );
        assert_ne!(a, b);
        assert_ne!(a.as_str()[4..44], b.as_str()[4..44]);
    }

    /// The format pinned by a value computed apart from this code (Python's
    /// hashlib: SHA-256 over the domain tag, then each part after its
    /// length as 8 big-endian bytes; the first 8 bytes in hex), so a change
    /// to the format cannot pass unnoticed: agents of one fleet must agree.
    #[test]
    fn the_check_value_is_sha256_over_the_key_and_every_part() {
        let random: [u8; RANDOM_BYTES] = std::array::from_fn(|i| i as u8);
        let full = Token::with_random(KEY, &random, Some("web-7"), Some("billing"));
        assert_eq!(
            full.as_str(),
            "rl2-000102030405060708090a0b0c0d0e0f10111213-6edce40ed120961e@web-7.billing"
        );
        let bare = Token::with_random(KEY, &random, None, None);
        assert_eq!(
            bare.as_str(),
            "rl2-000102030405060708090a0b0c0d0e0f10111213-1223e9e19c23fee0"
        );
        assert_eq!(stored_at(KEY, full.as_str()), Stored::Token);
        assert_eq!(stored_at(KEY, bare.as_str()), Stored::Token);
    }

    #[test]
    fn a_token_is_proven_only_at_its_own_key_and_unaltered() {
        for (agent, owner) in [
            (None, None),
            (Some("pod-7"), None),
            (None, Some("job 42.eu")),
            (Some("pod-7"), Some("job@x.y")),
        ] {
            let token = Token::generate(KEY, agent, owner);
            let value = token.as_str();
            assert_eq!(stored_at(KEY, value), Stored::Token, "{value}");
            // Copied under another key, or another prefix.
            assert_eq!(stored_at("redlock:orders-43", value), Stored::Unproven);
            assert_eq!(stored_at("app:orders-42", value), Stored::Unproven);
            // Altered: another owner, another agent, one digit changed.
            let other_owner = match owner {
                Some(_) => format!("{value}x"),
                None => format!("{value}.x"),
            };
            assert_eq!(
                stored_at(KEY, &other_owner),
                Stored::Unproven,
                "{other_owner}"
            );
            let other_agent = match agent {
                Some(_) => value.replacen("@pod-7", "@pod-8", 1),
                None => format!("{}@pod-8{}", &value[..HEAD_LEN], &value[HEAD_LEN..]),
            };
            assert_eq!(
                stored_at(KEY, &other_agent),
                Stored::Unproven,
                "{other_agent}"
            );
            let mut digits = value.to_string().into_bytes();
            digits[60] = if digits[60] == b'0' { b'1' } else { b'0' };
            let flipped = String::from_utf8(digits).unwrap();
            assert_eq!(stored_at(KEY, &flipped), Stored::Unproven, "{flipped}");
        }
    }

    #[test]
    fn hex_digests_and_old_tokens_are_unproven_and_the_rest_foreign() {
        let sha1 = "da39a3ee5e6b4b0d3255bfef95601890afd80709";
        let old = "0123456789abcdef0123456789abcdef01234567";
        for value in [
            sha1,
            &format!("{sha1}@cdn"),
            &format!("{sha1}.v2"),
            old,
            &format!("{old}@pod-7.billing"),
        ] {
            assert_eq!(stored_at(KEY, value), Stored::Unproven, "{value}");
        }
        let token = Token::generate(KEY, None, None);
        for value in [
            "",
            "v",
            "rl2-",
            "redlock-agent incarnation marker",
            "{\"user\": 1}",
            &sha1.to_uppercase(),
            &sha1[1..],
            &format!("{sha1}0"),
            &format!("{sha1}."),
            &format!("{sha1}@"),
            &format!("{sha1}.tab\there"),
            &format!("x{}", &sha1[1..]),
            &token.as_str().to_uppercase(),
            &token.as_str()[1..],
            &format!("{}0", token.as_str()),
            &format!("{}.", token.as_str()),
            &token.as_str().replace('-', "_"),
        ] {
            assert_eq!(stored_at(KEY, value), Stored::Foreign, "{value:?}");
        }
    }

    #[test]
    fn owner_rides_after_a_dot_and_debug_hides_the_secret() {
        let t = Token::generate(KEY, None, Some("billing-7.eu"));
        assert_eq!(owner_of(t.as_str()), Some("billing-7.eu"));
        assert_eq!(format!("{t:?}"), "Token(***.billing-7.eu)");
        assert_eq!(owner_of(Token::generate(KEY, None, None).as_str()), None);
    }

    #[test]
    fn the_agent_name_rides_after_the_check_and_before_the_owner() {
        let t = Token::generate(KEY, Some("pod-7"), Some("job@x.y"));
        let value = t.as_str();
        assert_eq!(&value[HEAD_LEN..], "@pod-7.job@x.y");
        assert_eq!(agent_of(value), Some("pod-7"));
        assert_eq!(owner_of(value), Some("job@x.y"));
        assert_eq!(format!("{t:?}"), "Token(***@pod-7.job@x.y)");

        let bare = Token::generate(KEY, Some("a_1"), None);
        assert_eq!(agent_of(bare.as_str()), Some("a_1"));
        assert_eq!(owner_of(bare.as_str()), None);
        // Values of the old format, from agents before check values.
        let old = format!("{}.billing", "ab".repeat(20));
        assert_eq!(agent_of(&old), None);
        assert_eq!(owner_of(&old), Some("billing"));
        assert_eq!(
            agent_of(&format!("{}@web-2.x", "ab".repeat(20))),
            Some("web-2")
        );
        // Foreign values.
        assert_eq!(agent_of("short@x"), None);
        assert_eq!(agent_of(&format!("{}@", "ab".repeat(20))), None);
        assert_eq!(agent_of("rl2-x@web-2"), None);
    }

    #[test]
    fn agent_names_are_bounded_and_never_contain_delimiters() {
        assert!(valid_agent("redlock-0_a"));
        assert!(!valid_agent(""));
        assert!(!valid_agent("host.example"));
        assert!(!valid_agent("a@b"));
        assert!(!valid_agent(&"x".repeat(65)));
    }

    #[test]
    fn owner_labels_are_bounded_printable_ascii() {
        assert!(valid_owner("job 42"));
        assert!(!valid_owner(""));
        assert!(!valid_owner("tab\there"));
        assert!(!valid_owner("é"));
        assert!(!valid_owner(&"x".repeat(129)));
    }

    /// The cost of a token on the lock path (one per request), printed:
    /// `cargo test --release -p redlock-agent --lib token_cost -- --ignored --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn token_cost() {
        const N: u32 = 200_000;
        let started = std::time::Instant::now();
        for _ in 0..N {
            std::hint::black_box(Token::generate(
                std::hint::black_box(KEY),
                Some("web-7"),
                Some("billing"),
            ));
        }
        let generate = started.elapsed() / N;
        let value = Token::generate(KEY, Some("web-7"), Some("billing")).into_string();
        let started = std::time::Instant::now();
        for _ in 0..N {
            std::hint::black_box(stored_at(std::hint::black_box(KEY), &value));
        }
        let check = started.elapsed() / N;
        eprintln!("Token::generate: {generate:?} per token; stored_at: {check:?} per value");
    }

    #[test]
    fn random_ids_are_40_hex_digits_and_unique() {
        let a = random_id();
        assert_eq!(a.len(), 40);
        assert!(is_lower_hex(&a));
        assert_ne!(a, random_id());
    }
}
