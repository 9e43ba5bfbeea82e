//! Lock tokens: 20 bytes from the OS CSPRNG, hex, then the granting agent's
//! name after `@`, then an optional owner label after a dot:
//! `<40 hex>[@<agent>][.<owner>]`.
//!
//! The token is the whole value stored at the lock key, so compare-and-set
//! scripts compare everything the client holds; the name and label only make
//! the value longer, never easier to guess. The value always starts with the
//! 40 hex digits (the leaked-key scanner recognises lock values by that).
//! Agent names have no `.` or `@`, so the first `.` still starts the owner
//! label (values written before agent names existed parse the same). The
//! agent name and the owner label are the only parts of a value the agent
//! ever shows to others.

use std::fmt;

/// Number of random bytes, as the Redlock page suggests.
pub const RANDOM_BYTES: usize = 20;

/// A lock token. Its `Debug` hides the random part.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A fresh token.
    ///
    /// # Panics
    /// If the OS random source fails, which leaves no safe way to make tokens.
    pub fn generate(agent: Option<&str>, owner: Option<&str>) -> Token {
        let mut bytes = [0u8; RANDOM_BYTES];
        getrandom::fill(&mut bytes).expect("the OS random source is unavailable");
        let mut token = hex::encode(bytes);
        if let Some(agent) = agent {
            debug_assert!(valid_agent(agent), "agent names are validated in config");
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

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

/// The owner label of a stored lock value, if it has one. Never returns any
/// part of the random token.
pub fn owner_of(value: &str) -> Option<&str> {
    value.split_once('.').map(|(_, owner)| owner)
}

/// The name of the agent that wrote a stored lock value, if it has one.
/// Never returns any part of the random token.
pub fn agent_of(value: &str) -> Option<&str> {
    let rest = value.get(2 * RANDOM_BYTES..)?.strip_prefix('@')?;
    let name = rest.split_once('.').map_or(rest, |(name, _)| name);
    valid_agent(name).then_some(name)
}

/// Agent names: 1 to 64 letters, digits, `-` or `_` (no `.` or `@`, which
/// delimit the parts of a value).
pub fn valid_agent(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
}

/// Whether a stored value has the shape of a token an agent writes: 40
/// lowercase hex digits, then optionally `@` and a valid agent name, then
/// optionally `.` and a valid owner label. The scanner touches only keys
/// whose value has this shape, so application data that happens to sit
/// under `lock.key_prefix` is never changed.
pub fn is_token_shaped(value: &str) -> bool {
    let (head, owner) = match value.split_once('.') {
        Some((head, owner)) => (head, Some(owner)),
        None => (value, None),
    };
    let (random, agent) = match head.split_once('@') {
        Some((random, agent)) => (random, Some(agent)),
        None => (head, None),
    };
    random.len() == 2 * RANDOM_BYTES
        && random
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && agent.is_none_or(valid_agent)
        && owner.is_none_or(valid_owner)
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

    #[test]
    fn tokens_are_40_hex_digits_and_unique() {
        let a = Token::generate(None, None);
        let b = Token::generate(None, None);
        assert_eq!(a.as_str().len(), 2 * RANDOM_BYTES);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn owner_rides_after_a_dot_and_debug_hides_the_secret() {
        let t = Token::generate(None, Some("billing-7.eu"));
        assert_eq!(owner_of(t.as_str()), Some("billing-7.eu"));
        assert_eq!(format!("{t:?}"), "Token(***.billing-7.eu)");
        assert_eq!(owner_of(Token::generate(None, None).as_str()), None);
    }

    #[test]
    fn the_agent_name_rides_after_the_hex_and_before_the_owner() {
        let t = Token::generate(Some("pod-7"), Some("job@x.y"));
        let value = t.as_str();
        assert!(
            value[..40].bytes().all(|c| c.is_ascii_hexdigit()),
            "{value}"
        );
        assert_eq!(&value[40..], "@pod-7.job@x.y");
        assert_eq!(agent_of(value), Some("pod-7"));
        assert_eq!(owner_of(value), Some("job@x.y"));
        assert_eq!(format!("{t:?}"), "Token(***@pod-7.job@x.y)");

        let bare = Token::generate(Some("a_1"), None);
        assert_eq!(agent_of(bare.as_str()), Some("a_1"));
        assert_eq!(owner_of(bare.as_str()), None);
        // Values from before agent names, and foreign values.
        let old = format!("{}.billing", "ab".repeat(20));
        assert_eq!(agent_of(&old), None);
        assert_eq!(owner_of(&old), Some("billing"));
        assert_eq!(agent_of("short@x"), None);
        assert_eq!(agent_of(&format!("{}@", "ab".repeat(20))), None);
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
    fn only_values_this_agent_writes_are_token_shaped() {
        assert!(is_token_shaped(Token::generate(None, None).as_str()));
        assert!(is_token_shaped(
            Token::generate(Some("pod-7"), Some("job")).as_str()
        ));
        assert!(is_token_shaped(
            Token::generate(None, Some("job 42.eu")).as_str()
        ));
        let hex = "0123456789abcdef0123456789abcdef01234567";
        assert!(is_token_shaped(hex));
        for value in [
            "",
            "v",
            "redlock-agent incarnation marker",
            &hex.to_uppercase(),
            &hex[1..],
            &format!("{hex}0"),
            &format!("{hex}."),
            &format!("{hex}.tab\there"),
            &format!("x{}", &hex[1..]),
            "{\"user\": 1}",
        ] {
            assert!(!is_token_shaped(value), "{value:?}");
        }
    }

    #[test]
    fn owner_labels_are_bounded_printable_ascii() {
        assert!(valid_owner("job 42"));
        assert!(!valid_owner(""));
        assert!(!valid_owner("tab\there"));
        assert!(!valid_owner("é"));
        assert!(!valid_owner(&"x".repeat(129)));
    }
}
