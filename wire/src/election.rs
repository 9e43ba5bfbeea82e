//! Wire types of leader elections: `/v1/elections/{name}/...`. Leading is
//! holding the election's lock: a fenced grant, renewed while the
//! campaign's stream is open; the term is its fence.

use serde::{Deserialize, Serialize};

/// The longest `value` a campaigner may publish, in characters (Unicode
/// code points, as JSON Schema's `maxLength` counts them): at most 4 KiB
/// of UTF-8.
pub const MAX_VALUE_LEN: usize = 1024;

/// Body of `POST /v1/elections/{name}/campaign`. Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CampaignRequest {
    /// The leadership's TTL: a leader that vanishes is replaced after at
    /// most this long. The agent's `lock.default_ttl` when absent.
    #[serde(
        default,
        deserialize_with = "crate::fields::optional_whole",
        skip_serializing_if = "Option::is_none"
    )]
    pub ttl_ms: Option<u64>,
    /// A label operators see, as a lock's owner.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// What the leader publishes to everyone who asks (an address, say):
    /// up to [`MAX_VALUE_LEN`] characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Ends the leadership with `lost` (reason `max_hold`) after this long;
    /// defaults to `lock.max_hold`.
    #[serde(
        default,
        deserialize_with = "crate::fields::optional_whole",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_hold_ms: Option<u64>,
}

/// The leader of an election, as `GET /v1/elections/{name}` and the
/// streams tell it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leader {
    pub election: String,
    /// `agent.name` of the agent the leader campaigns through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// The leader's process, as the kernel told its agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The leadership's fence: larger than every earlier term's (and every
    /// fence minted on these masters). Pass it with every write the leader
    /// makes. Absent only when the leader's note could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// When it was elected, in milliseconds since the Unix epoch, by its
    /// agent's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<u64>,
    /// Time until fewer than a quorum of masters hold the leadership,
    /// unless it is renewed.
    pub validity_ms: u64,
}

/// One line of a campaign's `application/x-ndjson` stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum CampaignEvent {
    /// Another leads (or none could be read): this campaigner waits in
    /// line. Sent when the campaign starts to wait and when the leader
    /// changes.
    Waiting {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        leader: Option<Leader>,
    },
    /// This campaigner leads from now, for `validity_ms`.
    Elected {
        term: u64,
        validity_ms: u64,
        ttl_ms: u64,
    },
    /// The leadership was renewed on a quorum: valid for `validity_ms`.
    Renewed { validity_ms: u64 },
    /// Last line, before the leadership's validity ends: stop acting as
    /// leader. `reason` as a hold's `lost`.
    Lost { reason: String },
}

/// One line of `GET /v1/elections/{name}/observe`: the leader when the
/// stream starts, then every change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum ObserveEvent {
    Leader(Leader),
    NoLeader { election: String },
}
