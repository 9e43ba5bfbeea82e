//! Typed configuration: defaults, YAML loading, and a validation that
//! reports every problem at once, each with its field path.
//!
//! The YAML is parsed (serde-saphyr) into a generic tree first and then read
//! field by field, so one run reports every unknown key, wrong type and bad
//! value instead of stopping at the first one. Here are the types, the
//! defaults computed at run time and the entry points ([`Config::load`],
//! [`Config::from_yaml`]); the reading is split by job:
//!
//! - [`yaml`]: the file, read only when it is a regular file of a
//!   config's size; YAML syntax errors, told by their place and never by
//!   the text there; and the walker that reads one mapping's fields
//!   (durations at most a day) and reports the keys nobody asked for.
//! - [`sections`]: every section but the masters, with its defaults and
//!   checks, and the top level that puts them together.
//! - [`masters`]: the masters: a server's URL or a cluster's seeds, a
//!   password from a file or the environment, the TLS files.
//! - [`urls`]: a master's URL, parsed and checked for what the redis
//!   client would silently ignore, and shown with its password hidden.
//! - [`traces`]: `tracing`, the OpenTelemetry collector and sampling,
//!   its URL shown without credentials.
//! - [`addresses`]: the masters' hosts resolved, so two masters that are
//!   one server (whose vote would count twice) are refused.

pub mod addresses;
pub mod masters;
pub mod sections;
pub mod traces;
pub mod urls;
pub mod yaml;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

pub use addresses::{AddressCheck, RESOLVE_TIMEOUT};
pub use traces::{TraceEndpoint, TracingConfig};
pub use urls::MasterUrl;

use sections::read_config;
use yaml::yaml_error;

/// The exit code for a configuration the agent refuses (EX_CONFIG is 78, but
/// the project's contract is EX_USAGE, 64, for every bad invocation).
pub const EXIT_CONFIG: i32 = 64;

/// The agent's whole configuration, validated.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub agent: AgentConfig,
    pub socket: SocketConfig,
    pub admin: AdminConfig,
    pub metrics: MetricsConfig,
    pub log: LogConfig,
    pub masters: Vec<MasterConfig>,
    pub lock: LockConfig,
    pub health: HealthConfig,
    pub delayed_restart: DelayedRestartConfig,
    pub leak_scan: LeakScanConfig,
    pub shutdown: ShutdownConfig,
    pub tracing: TracingConfig,
}

#[derive(Debug, Clone, Serialize)]
pub struct SocketConfig {
    pub path: PathBuf,
    /// Permission bits of the socket file.
    #[serde(serialize_with = "ser_mode")]
    pub mode: u32,
    /// Open connections served at once; more are answered 503 and closed.
    pub max_connections: usize,
    /// Time a client has to send a whole request (headers and body); an
    /// idle connection is closed after this long too.
    #[serde(serialize_with = "ser_duration")]
    pub request_timeout: Duration,
    /// Peer uids (from `SO_PEERCRED`) admitted; with `allow_gids`, empty
    /// both means the file mode alone decides.
    pub allow_uids: Vec<u32>,
    /// Peer primary gids admitted (supplementary groups are not seen).
    pub allow_gids: Vec<u32>,
    /// Open connections one uid may have, so one peer cannot take every slot.
    pub max_connections_per_uid: usize,
    /// Whose tokens a connection may use: anyone's, or only those its own
    /// uid or pod acquired (an agent serving a whole node).
    pub isolate: Isolate,
}

/// `socket.isolate`: who may use a token besides the connection that got
/// it. A token is a bearer secret; with an agent per application that is
/// enough, but an agent that serves every pod of a node keeps each pod's
/// tokens to that pod (see [`crate::lock::isolation`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Isolate {
    /// Any client of the socket that has a token may use it.
    None,
    /// Only connections of the uid that acquired the lock.
    Uid,
    /// Only connections from the pod that acquired the lock, told by each
    /// peer's cgroup; a connection whose pod cannot be told is refused.
    Pod,
}

impl Isolate {
    pub fn as_str(self) -> &'static str {
        match self {
            Isolate::None => "none",
            Isolate::Uid => "uid",
            Isolate::Pod => "pod",
        }
    }
}

/// This agent as others see it.
#[derive(Debug, Clone, Serialize)]
pub struct AgentConfig {
    /// Written into every lock value this agent sets, so `/v1/locks` on any
    /// agent can say which one holds a lock. Default: the host name.
    pub name: String,
    /// Threads that serve the sockets and run the lock path. Default 1: a
    /// lock's own work is microseconds of CPU around round trips to the
    /// masters, and with one thread every hand-off between its tasks stays
    /// on that thread (no wake-up of another).
    pub workers: usize,
}

/// Most `agent.workers`.
pub const MAX_WORKERS: usize = 256;

/// `metrics.max_connections` by default: probes and scrapes need a few.
pub const DEFAULT_METRICS_MAX_CONNECTIONS: usize = 64;

/// Most `metrics.max_connections`.
pub const MAX_METRICS_CONNECTIONS: usize = 4096;

/// The admin socket: read-only views and force release, nothing else.
#[derive(Debug, Clone, Serialize)]
pub struct AdminConfig {
    pub socket: AdminSocketConfig,
    /// Peer uids admitted; empty means the file mode alone decides.
    pub allow_uids: Vec<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct AdminSocketConfig {
    pub path: PathBuf,
    #[serde(serialize_with = "ser_mode")]
    pub mode: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct MetricsConfig {
    pub listen: SocketAddr,
    /// Connections served at once on `listen`; more are closed at once, so
    /// a flood of connections to the port never takes the descriptors the
    /// sockets and the masters need.
    pub max_connections: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Serialize)]
pub struct LogConfig {
    pub format: LogFormat,
    pub level: String,
}

/// One Redis master: a single server (`url`) or a Redis Cluster
/// (`cluster`, its seed nodes), which then counts as one master. Its
/// password, from the URL, a file or the environment, is held in the URLs
/// and never printed.
#[derive(Debug, Clone, Serialize)]
pub struct MasterConfig {
    pub name: String,
    /// The server's URL; for a cluster, its first seed.
    pub url: MasterUrl,
    /// A cluster's seed nodes, all of them (`url` is the first); empty for a
    /// single server.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster: Vec<MasterUrl>,
    /// PEM CA certificates to trust for a `rediss://` master, instead of the
    /// system's (for masters with certificates from a private CA).
    pub tls_ca_file: Option<PathBuf>,
    #[serde(skip)]
    pub tls_ca: Option<Vec<u8>>,
    /// PEM client certificate and key, for masters that require client
    /// certificates (`tls-auth-clients yes`); both or neither.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_key_file: Option<PathBuf>,
    #[serde(skip)]
    pub tls_client: Option<TlsClient>,
}

/// A client certificate and its key, PEM. The key never prints.
#[derive(Clone)]
pub struct TlsClient {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TlsClient { cert: set, key: set }")
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LockConfig {
    pub key_prefix: String,
    #[serde(serialize_with = "ser_duration")]
    pub default_ttl: Duration,
    #[serde(serialize_with = "ser_duration")]
    pub max_ttl: Duration,
    #[serde(serialize_with = "ser_duration")]
    pub node_timeout: Duration,
    pub drift_factor: f64,
    #[serde(serialize_with = "ser_duration")]
    pub retry_delay: Duration,
    #[serde(serialize_with = "ser_duration")]
    pub retry_jitter: Duration,
    /// Longest a hold may be renewed; also the largest `max_hold_ms`.
    #[serde(serialize_with = "ser_duration")]
    pub max_hold: Duration,
    /// Requests waiting for locks on this agent at once, all resources.
    pub max_waiters: usize,
    /// Waiting requests one uid may have at once, so one peer cannot take
    /// every waiter slot.
    pub max_waiters_per_uid: usize,
    /// Streams (holds, campaigns, observers) one uid may have open at once
    /// on this agent, so one peer cannot load the masters for everyone.
    pub max_streams_per_uid: usize,
    /// When grants carry a fencing token.
    pub fence: FenceMode,
}

/// `lock.fence`: when a grant carries a fencing token (a second round to a
/// quorum of masters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FenceMode {
    /// When the request asks (`"fence": true`).
    OnRequest,
    /// Every grant.
    Always,
}

#[derive(Debug, Clone, Serialize)]
pub struct HealthConfig {
    #[serde(serialize_with = "ser_duration")]
    pub interval: Duration,
    /// The probes' interval while the agent is idle (see
    /// [`crate::lock::idle`]).
    #[serde(serialize_with = "ser_duration")]
    pub idle_interval: Duration,
}

#[derive(Debug, Clone, Serialize)]
pub struct DelayedRestartConfig {
    pub enabled: bool,
    #[serde(serialize_with = "ser_duration")]
    pub extra: Duration,
}

/// What the leaked-key scanner does with what it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Repair {
    /// Report only.
    None,
    /// Give keys without a TTL one of `lock.max_ttl`. Nothing is ever deleted.
    Expire,
}

#[derive(Debug, Clone, Serialize)]
pub struct LeakScanConfig {
    #[serde(serialize_with = "ser_duration")]
    pub interval: Duration,
    /// `SCAN ... COUNT` hint per call.
    pub count: u64,
    /// Upper bound on keys examined per second on each master.
    pub keys_per_second: u64,
    pub repair: Repair,
}

#[derive(Debug, Clone, Serialize)]
pub struct ShutdownConfig {
    #[serde(serialize_with = "ser_duration")]
    pub grace: Duration,
}

fn ser_duration<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_duration(*d))
}

fn ser_mode<S: serde::Serializer>(mode: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&format_args!("{mode:04o}"))
}

/// One problem in a configuration, at a field path like `masters[2].url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every problem found in a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The path names something that is not a regular file (a device, a
    /// FIFO, a directory, a socket): it is not read, since reading it could
    /// never end (`/dev/zero`, a FIFO nobody writes to).
    #[error("{path} is {what}, not a regular file; give the path of a YAML file")]
    NotAFile { path: PathBuf, what: &'static str },
    /// The file is larger than any config (see [`yaml::MAX_FILE`]).
    #[error("{path} is larger than {} KiB, more than any config; give the path of a YAML file", yaml::MAX_FILE / 1024)]
    TooLarge { path: PathBuf },
    #[error("{}", display_fields(.0))]
    Invalid(Vec<FieldError>),
}

fn display_fields(errors: &[FieldError]) -> String {
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    lines.join("\n")
}

impl Config {
    /// Reads and validates a YAML file.
    ///
    /// # Errors
    /// Every problem at once, each with its field path.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with(path, AddressCheck::Resolve)
    }

    /// As [`Config::load`], with the masters' addresses checked as `check`
    /// says.
    ///
    /// # Errors
    /// Every problem at once, each with its field path.
    pub fn load_with(path: &Path, check: AddressCheck) -> Result<Config, ConfigError> {
        let text = yaml::read_file(path)?;
        Config::from_yaml_with(&text, check)
    }

    /// Parses and validates YAML text.
    ///
    /// # Errors
    /// Every problem at once, each with its field path.
    pub fn from_yaml(text: &str) -> Result<Config, ConfigError> {
        Config::from_yaml_with(text, AddressCheck::Resolve)
    }

    /// As [`Config::from_yaml`], with the masters' addresses checked as
    /// `check` says.
    ///
    /// # Errors
    /// Every problem at once, each with its field path.
    pub fn from_yaml_with(text: &str, check: AddressCheck) -> Result<Config, ConfigError> {
        let tree: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_saphyr::from_str(text).map_err(|e| {
                ConfigError::Invalid(vec![FieldError {
                    path: String::new(),
                    message: yaml_error(&e),
                }])
            })?
        };
        let mut errors = Vec::new();
        let config = read_config(tree, check, &mut errors);
        if errors.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError::Invalid(errors))
        }
    }

    /// N/2+1 of the configured N.
    pub fn quorum(&self) -> usize {
        self.masters.len() / 2 + 1
    }

    /// How long a master that came back is kept out of locking.
    pub fn quarantine(&self) -> Duration {
        self.lock.max_ttl + self.delayed_restart.extra
    }
}

/// `$REDLOCK_AGENT_NAME` (the Helm chart sets the pod name there), else
/// the host name; its first label, cut to what an agent name allows;
/// `agent` when there is none.
pub fn default_agent_name() -> String {
    if let Some(name) = std::env::var("REDLOCK_AGENT_NAME")
        .ok()
        .map(|n| agent_name_from(&n))
        .filter(|n| !n.is_empty())
    {
        return name;
    }
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `len` bytes into the buffer given.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let host = if ok {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    let name = agent_name_from(&host);
    if name.is_empty() {
        "agent".to_string()
    } else {
        name
    }
}

/// The first label of a host or pod name, keeping only what agent names
/// allow, at most 64 characters.
fn agent_name_from(host: &str) -> String {
    host.split('.')
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        .take(64)
        .collect()
}

/// The admin socket's default path: beside `socket.path`, `admin.sock` for
/// `agent.sock` (so `/run/redlock/admin.sock` by default), else
/// `NAME-admin.sock` for `NAME.sock`, so agents sharing a directory never
/// share an admin socket.
pub fn default_admin_path(socket: &Path) -> PathBuf {
    let stem = socket
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = if stem == "agent" || stem.is_empty() {
        "admin.sock".to_string()
    } else {
        format!("{stem}-admin.sock")
    };
    socket.with_file_name(name)
}

#[cfg(test)]
mod tests;
