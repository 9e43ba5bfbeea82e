//! Wire types of read-write locks: a lock's acquire and hold take `mode`,
//! `shared` (readers: any number at once) or `exclusive` (one holder, the
//! default and every lock before modes existed). A listing shows which
//! mode holds a lock and, for readers, who they are.

use serde::{Deserialize, Serialize};

/// How a lock is held: by one holder, or by any number of readers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// One holder at a time, excluding readers too.
    #[default]
    Exclusive,
    /// Any number of holders at once, while no exclusive holder is there.
    Shared,
}

impl Mode {
    pub fn is_exclusive(&self) -> bool {
        *self == Mode::Exclusive
    }

    /// Its name on the wire, in metrics and in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared => "shared",
        }
    }
}

/// One reader of a lock held shared, in `GET /v1/locks` and
/// `GET /v1/locks/{resource}`: never with its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reader {
    /// `agent.name` of the agent that granted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Masters on which this reader is recorded, of those read.
    pub masters: usize,
    /// Granted through this agent and not released.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub held_here: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_is_its_name_and_exclusive_is_the_default() {
        assert_eq!(serde_json::to_string(&Mode::Shared).unwrap(), r#""shared""#);
        assert_eq!(
            serde_json::from_str::<Mode>(r#""exclusive""#).unwrap(),
            Mode::Exclusive
        );
        assert_eq!(Mode::default(), Mode::Exclusive);
        assert!(serde_json::from_str::<Mode>(r#""read""#).is_err());
    }
}
