//! The closed sets of label values: one enum per label, each value
//! registered at zero when the agent starts (see [`super::Metrics::new`]).

/// Why a connection was refused before its first request was read, for
/// `redlock_connections_refused_total{listener, reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The peer's uid and gid are in neither allow list.
    Forbidden,
    /// `socket.max_connections`, the admin socket's budget or
    /// `metrics.max_connections` was reached.
    MaxConnections,
    /// The peer's uid already has `socket.max_connections_per_uid` open.
    MaxConnectionsPerUid,
    /// `socket.isolate` needs the peer's pod (or uid), which could not be
    /// told.
    Unidentified,
}

impl Refusal {
    pub const ALL: [Refusal; 4] = [
        Refusal::Forbidden,
        Refusal::MaxConnections,
        Refusal::MaxConnectionsPerUid,
        Refusal::Unidentified,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Forbidden => "forbidden",
            Refusal::MaxConnections => "max_connections",
            Refusal::MaxConnectionsPerUid => "max_connections_per_uid",
            Refusal::Unidentified => "unidentified",
        }
    }
}

/// The Unix listeners, for the `listener` label.
pub const LISTENERS: [&str; 2] = ["app", "admin"];

/// The metrics port (`metrics.listen`), for the `listener` label; refused
/// only for `max_connections`.
pub const TCP_LISTENER: &str = "metrics";

/// How an acquire request ended, for `redlock_acquire_wait_seconds{outcome}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Acquired,
    Taken,
    NoQuorum,
    Error,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [
        Outcome::Acquired,
        Outcome::Taken,
        Outcome::NoQuorum,
        Outcome::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Taken => "taken",
            Outcome::NoQuorum => "no_quorum",
            Outcome::Error => "error",
        }
    }
}

/// Kinds of leaked keys the scanner finds, for `redlock_leaked_keys{kind}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LeakKind {
    /// No TTL: it never expires, a deadlock.
    NoTtl,
    /// A TTL above `lock.max_ttl`: set by something that bypassed the agent.
    TtlOverMax,
    /// On fewer than a quorum of masters on two scans in a row: debris of a
    /// partial acquisition.
    Minority,
    /// Without TTL or with one over `lock.max_ttl`, and a value that looks
    /// like a token but is not proven to be this key's (an older agent's
    /// token, a hex digest, a token copied from another key): maybe a leak,
    /// maybe application data. Never repaired.
    Unproven,
}

impl LeakKind {
    pub const ALL: [LeakKind; 4] = [
        LeakKind::NoTtl,
        LeakKind::TtlOverMax,
        LeakKind::Minority,
        LeakKind::Unproven,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            LeakKind::NoTtl => "no_ttl",
            LeakKind::TtlOverMax => "ttl_over_max",
            LeakKind::Minority => "minority",
            LeakKind::Unproven => "unproven",
        }
    }
}

/// The leak scanner's fenced writes, for
/// `redlock_leak_scan_refused_total{write}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanWrite {
    /// A new scanner raising each master's scan fence.
    Claim,
    /// A TTL given to a lock key left without one.
    Repair,
    /// The fleet's report written on a master.
    Report,
}

impl ScanWrite {
    pub const ALL: [ScanWrite; 3] = [ScanWrite::Claim, ScanWrite::Repair, ScanWrite::Report];

    pub fn as_str(self) -> &'static str {
        match self {
            ScanWrite::Claim => "claim",
            ScanWrite::Repair => "repair",
            ScanWrite::Report => "report",
        }
    }
}

/// A change of leadership of this agent's campaigners, for
/// `redlock_leadership_changes_total{event, reason}`: one series per
/// variant. A leadership ends `resigned`, by its campaign or by the
/// agent's own rules, which is no fault, or `lost`, taken from it by a
/// fault or an operator; the alert counts losses only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    /// `elected`, with no reason (an empty `reason`, which Prometheus
    /// stores as no label).
    Elected,
    /// `resigned`, `closed`: the client closed its campaign's stream.
    Closed,
    /// `resigned`, `max_hold`: the leadership reached its `max_hold`.
    MaxHold,
    /// `resigned`, `shutdown`: the agent shut down.
    Shutdown,
    /// `lost`, `renew_failed`: renewals failed until just before the
    /// validity ended, or showed that no quorum holds the token any more.
    RenewFailed,
    /// `lost`, `no_quorum`: renewals found fewer than a quorum of masters
    /// usable until just before the validity ended.
    NoQuorum,
    /// `lost`, `node_lost`: masters it was held on lost their keys.
    NodeLost,
    /// `lost`, `force_released`: an operator's force release removed it.
    ForceReleased,
}

impl Leadership {
    pub const ALL: [Leadership; 8] = [
        Leadership::Elected,
        Leadership::Closed,
        Leadership::MaxHold,
        Leadership::Shutdown,
        Leadership::RenewFailed,
        Leadership::NoQuorum,
        Leadership::NodeLost,
        Leadership::ForceReleased,
    ];

    /// The `event` label: `elected`, `resigned` or `lost`.
    pub fn event(self) -> &'static str {
        match self {
            Leadership::Elected => "elected",
            Leadership::Closed | Leadership::MaxHold | Leadership::Shutdown => "resigned",
            Leadership::RenewFailed
            | Leadership::NoQuorum
            | Leadership::NodeLost
            | Leadership::ForceReleased => "lost",
        }
    }

    /// The `reason` label: the reason of the campaign stream's `lost`
    /// event when the client was told one, `closed` when the client left,
    /// empty for `elected`.
    pub fn reason(self) -> &'static str {
        match self {
            Leadership::Elected => "",
            Leadership::Closed => "closed",
            Leadership::MaxHold => "max_hold",
            Leadership::Shutdown => "shutdown",
            Leadership::RenewFailed => "renew_failed",
            Leadership::NoQuorum => "no_quorum",
            Leadership::NodeLost => "node_lost",
            Leadership::ForceReleased => "force_released",
        }
    }
}
