//! The lock commands as the batch script takes them (see
//! [`crate::node::conn::BATCH`]): each one's letter and arguments, and
//! the bounds and checks that differ between them.

use std::sync::Arc;
use std::time::Duration;

use crate::node::ttl_ms;
use crate::redlock::observe::Op;

/// One lock command, as the batch script takes it.
#[derive(Debug)]
pub enum Command {
    /// `SET NX PX` behind the marker; with the fencing counter when asked;
    /// `waiting`: the voter will wait if the lock is taken, so a taken vote
    /// sets the key's waiting flag.
    Vote {
        ttl: Duration,
        read_counter: bool,
        waiting: bool,
    },
    /// Round 2 of a fenced grant: raise the counter while the key is ours.
    Fence { fence: u64 },
    /// Compare-and-pexpire behind the marker.
    Extend { ttl: Duration },
    /// Compare-and-delete, announced on the resource's release channel when
    /// someone waits.
    Release { channel: Arc<str> },
    /// What the key holds: gone, a number or anything else.
    Peek,
    /// A bookkeeping note, the claim's token its value.
    Note { ttl: Duration },
    /// A note's TTL lengthened, never written.
    Keep { ttl: Duration },
}

impl Command {
    pub(super) fn op(&self) -> Op {
        match self {
            Command::Vote { .. } | Command::Peek | Command::Note { .. } => Op::Acquire,
            Command::Fence { .. } => Op::Fence,
            Command::Extend { .. } | Command::Keep { .. } => Op::Extend,
            Command::Release { .. } => Op::Release,
        }
    }

    /// The script's four arguments for this command after the key and token:
    /// its letter (a shared claim's vote has its own), a number and one
    /// more.
    pub(super) fn args(&self, shared: bool) -> (&'static str, u64, &str) {
        match self {
            Command::Vote {
                ttl,
                read_counter,
                waiting,
            } => {
                let wants =
                    ["0", "1", "2", "3"][usize::from(*read_counter) + 2 * usize::from(*waiting)];
                (if shared { "s" } else { "v" }, ttl_ms(*ttl), wants)
            }
            Command::Fence { fence } => ("f", *fence, ""),
            Command::Extend { ttl } => ("e", ttl_ms(*ttl), ""),
            Command::Release { channel } => ("r", 0, channel),
            Command::Peek => ("p", 0, ""),
            Command::Note { ttl } => ("n", ttl_ms(*ttl), ""),
            Command::Keep { ttl } => ("k", ttl_ms(*ttl), ""),
        }
    }

    /// Whether the command counts toward a grant, so that it must come
    /// from a master the agent trusts: a vote or an extension.
    pub(super) fn needs_trust(&self) -> bool {
        matches!(self, Command::Vote { .. } | Command::Extend { .. })
    }

    /// Whether the script touches the lock key's waiting flag for this
    /// command: a waiting vote may set it, a release deletes it, and a
    /// reader's vote (`shared`) reads it whether or not it waits.
    pub(super) fn uses_flag(&self, shared: bool) -> bool {
        match self {
            Command::Vote { waiting, .. } => *waiting || shared,
            Command::Release { .. } => true,
            _ => false,
        }
    }

    /// How long this command may take in all, queued or on its way, before
    /// the agent gives it up as its own backlog: `overall` (see
    /// [`crate::node::Node::overall_bound`]), and for a vote or an extension no longer
    /// than its TTL (no validity could be left after it).
    pub(super) fn overall(&self, overall: Duration) -> Duration {
        match self {
            Command::Vote { ttl, .. } | Command::Extend { ttl } => overall.min(*ttl),
            _ => overall,
        }
    }
}
