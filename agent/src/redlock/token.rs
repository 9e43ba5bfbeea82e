//! Lock tokens: 20 bytes from the OS CSPRNG, hex, with an optional owner
//! label after a dot.
//!
//! The token is the whole value stored at the lock key, so compare-and-set
//! scripts compare everything the client holds. The owner label is the only
//! part of a value the agent ever shows to others.

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
    pub fn generate(owner: Option<&str>) -> Token {
        let mut bytes = [0u8; RANDOM_BYTES];
        getrandom::fill(&mut bytes).expect("the OS random source is unavailable");
        let mut token = hex::encode(bytes);
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

/// Whether a stored value has the shape of a token this agent writes: 40
/// lowercase hex digits, then optionally `.` and a valid owner label. The
/// scanner touches only keys whose value has this shape, so application
/// data that happens to sit under `lock.key_prefix` is never changed.
pub fn is_token_shaped(value: &str) -> bool {
    let (random, owner) = match value.split_once('.') {
        Some((random, owner)) => (random, Some(owner)),
        None => (value, None),
    };
    random.len() == 2 * RANDOM_BYTES
        && random
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        && owner.is_none_or(valid_owner)
}

/// Owner labels: 1 to 128 bytes of printable ASCII.
pub fn valid_owner(owner: &str) -> bool {
    (1..=128).contains(&owner.len()) && owner.bytes().all(|b| (0x20..0x7f).contains(&b))
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match owner_of(&self.0) {
            Some(owner) => write!(f, "Token(***.{owner})"),
            None => f.write_str("Token(***)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_40_hex_digits_and_unique() {
        let a = Token::generate(None);
        let b = Token::generate(None);
        assert_eq!(a.as_str().len(), 2 * RANDOM_BYTES);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn owner_rides_after_a_dot_and_debug_hides_the_secret() {
        let t = Token::generate(Some("billing-7.eu"));
        assert_eq!(owner_of(t.as_str()), Some("billing-7.eu"));
        assert_eq!(format!("{t:?}"), "Token(***.billing-7.eu)");
        assert_eq!(owner_of(Token::generate(None).as_str()), None);
    }

    #[test]
    fn only_values_this_agent_writes_are_token_shaped() {
        assert!(is_token_shaped(Token::generate(None).as_str()));
        assert!(is_token_shaped(Token::generate(Some("job 42.eu")).as_str()));
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
