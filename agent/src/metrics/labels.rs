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

/// The events of `redlock_leadership_changes_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leadership {
    Elected,
    /// The campaign closed its stream.
    Resigned,
    /// Renewal failed, a master lost it, a force release, a shutdown.
    Lost,
}

impl Leadership {
    pub const ALL: [Leadership; 3] = [Leadership::Elected, Leadership::Resigned, Leadership::Lost];

    pub fn as_str(self) -> &'static str {
        match self {
            Leadership::Elected => "elected",
            Leadership::Resigned => "resigned",
            Leadership::Lost => "lost",
        }
    }
}
