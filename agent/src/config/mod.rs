//! Typed configuration: defaults, YAML loading, and a validation that
//! reports every problem at once, each with its field path.
//!
//! The YAML is parsed (serde-saphyr) into a generic tree first and then read
//! field by field, so one run reports every unknown key, wrong type and bad
//! value instead of stopping at the first one.

use std::collections::HashSet;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

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

/// The port the redis client uses when a URL names none.
const DEFAULT_REDIS_PORT: u16 = 6379;

/// The one query parameter the redis client reads from a TCP URL.
const READ_QUERY_KEY: &str = "protocol";

/// Query parameter names shown in messages; any other name is shown as
/// `***`, since a misplaced password could sit there too.
const NAMED_QUERY_KEYS: &[&str] = &[
    READ_QUERY_KEY,
    "password",
    "pass",
    "passwd",
    "pwd",
    "auth",
    "user",
    "username",
    "db",
];

/// A query parameter's name as messages show it.
fn shown_query_key(key: &str) -> &str {
    if NAMED_QUERY_KEYS.contains(&key) {
        key
    } else {
        "***"
    }
}

/// A `redis://` or `rediss://` URL whose password never shows in `Debug`,
/// `Display` or serialized output, neither from the userinfo nor from the
/// query.
#[derive(Clone)]
pub struct MasterUrl {
    url: url::Url,
}

impl MasterUrl {
    /// Parses and checks the scheme, the host and the query; the error says
    /// what is wrong with the value and shows no more of it than
    /// [`MasterUrl`]'s `Display` does (nothing at all when it does not
    /// parse: a password with a reserved character in it breaks the URL
    /// anywhere, and its pieces land in the host, port, path or query).
    ///
    /// The redis client reads only `protocol` from the query of a TCP URL:
    /// a `?password=` would be silently ignored (the master answers NOAUTH
    /// at run time), so every other parameter is refused here.
    pub fn parse(raw: &str) -> Result<MasterUrl, String> {
        let url = url::Url::parse(raw).map_err(|e| {
            format!(
                "not a URL ({e}); the value is not shown, since it may hold a password: write \
                 redis://[USER:PASSWORD@]HOST[:PORT][/DB] (or rediss://), with any of \
                 : / ? # @ % in the user or password percent-encoded, or give the password \
                 in password_file or password_env"
            )
        })?;
        let url = MasterUrl { url };
        match url.url.scheme() {
            "redis" | "rediss" => {}
            _ => {
                return Err(format!(
                    "not a redis:// or rediss:// URL: {:?}",
                    url.to_string()
                ))
            }
        }
        if url.url.host_str().is_none_or(str::is_empty) {
            let hint = if raw.contains("://") {
                ""
            } else {
                " (the scheme takes two slashes: redis://HOST)"
            };
            return Err(format!("URL has no host{hint}: {:?}", url.to_string()));
        }
        for (key, _) in url.url.query_pairs() {
            let hint = match key.as_ref() {
                READ_QUERY_KEY => continue,
                "password" | "pass" | "passwd" | "pwd" | "auth" => {
                    "the redis client ignores a password in the query; put it in the URL \
                     (redis://:PASSWORD@host or redis://USER:PASSWORD@host), or use \
                     password_file or password_env"
                }
                "user" | "username" => {
                    "the redis client ignores a user in the query; put it in the URL \
                     (redis://USER:PASSWORD@host)"
                }
                "db" => "the redis client ignores db in the query; put the number in the path (redis://host:6379/2)",
                _ => "the redis client reads only ?protocol= from the query",
            };
            return Err(format!(
                "query parameter {:?} is not used: {hint}: {:?}",
                shown_query_key(&key),
                url.to_string()
            ));
        }
        Ok(url)
    }

    /// The host and port the redis client connects to (6379 when the URL
    /// names none); an IPv6 host comes without brackets.
    pub fn endpoint(&self) -> (String, u16) {
        let host = match self.url.host() {
            Some(url::Host::Ipv6(ip)) => ip.to_string(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Domain(name)) => name.to_string(),
            // `parse` accepted only URLs with a host.
            None => String::new(),
        };
        (host, self.url.port().unwrap_or(DEFAULT_REDIS_PORT))
    }

    /// A `rediss://` URL.
    pub fn is_tls(&self) -> bool {
        self.url.scheme() == "rediss"
    }

    pub fn has_password(&self) -> bool {
        self.url.password().is_some()
    }

    /// A user name without a password: the redis client then sends no
    /// AUTH at all, so the connection would silently be the default user.
    fn has_user_without_password(&self) -> bool {
        !self.url.username().is_empty() && !self.has_password()
    }

    fn set_password(&mut self, password: &str) {
        // Cannot fail: `parse` accepted only URLs with a host.
        self.url
            .set_password(Some(password))
            .expect("redis URLs have a host");
    }

    /// Connection parameters for the redis crate, password included.
    ///
    /// # Errors
    /// When the redis crate refuses the URL (for example a bad database number).
    pub fn connection_info(&self) -> redis::RedisResult<redis::ConnectionInfo> {
        use redis::IntoConnectionInfo;
        self.url.as_str().into_connection_info()
    }
}

/// The `protocol` values the redis client knows; any other is shown as
/// `***`, like every query value but these.
const PROTOCOLS: &[&str] = &["2", "3", "resp2", "resp3"];

/// Shows the scheme, the host and the port as parsed; the user name only
/// beside a password (alone, it may be a misplaced password: `***`); the
/// password as `***`; the path only when it is a database number; the
/// query's known names with only a known `protocol` value; and a fragment
/// only when it is `#insecure`. Whatever shape the value has, no other
/// text of it shows.
impl fmt::Display for MasterUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = &self.url;
        write!(f, "{}:", url.scheme())?;
        if let Some(host) = url.host_str() {
            f.write_str("//")?;
            if url.password().is_some() {
                write!(f, "{}:***@", url.username())?;
            } else if !url.username().is_empty() {
                f.write_str("***@")?;
            }
            f.write_str(host)?;
            if let Some(port) = url.port() {
                write!(f, ":{port}")?;
            }
        }
        let path = url.path();
        let number = path.strip_prefix('/').unwrap_or(path);
        if number.bytes().all(|b| b.is_ascii_digit()) {
            f.write_str(path)?;
        } else if path.starts_with('/') {
            f.write_str("/***")?;
        } else {
            f.write_str("***")?;
        }
        if url.query().is_some() {
            let pairs: Vec<String> = url
                .query_pairs()
                .map(|(k, v)| {
                    let v = if k == READ_QUERY_KEY && PROTOCOLS.contains(&v.as_ref()) {
                        v.into_owned()
                    } else {
                        "***".into()
                    };
                    format!("{}={v}", shown_query_key(&k))
                })
                .collect();
            write!(f, "?{}", pairs.join("&"))?;
        }
        match url.fragment() {
            None => Ok(()),
            Some("insecure") => f.write_str("#insecure"),
            Some(_) => f.write_str("#***"),
        }
    }
}

impl fmt::Debug for MasterUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MasterUrl({self})")
    }
}

impl Serialize for MasterUrl {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A redis client error without its detail, which may quote the value it
/// refused (an unknown `?protocol=`, for one).
fn without_detail(e: &redis::RedisError) -> String {
    let text = e.to_string();
    match e.detail() {
        Some(detail) => text
            .strip_suffix(detail)
            .and_then(|t| t.strip_suffix(": "))
            .map_or_else(|| e.category().to_string(), str::to_string),
        None => text,
    }
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
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
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
        match config {
            Some(config) if errors.is_empty() => Ok(config),
            _ => Err(ConfigError::Invalid(errors)),
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

/// A YAML syntax error as users see it: where, and what went wrong, never
/// the text there. The parser's own rendering quotes the lines around the
/// error, and a config's neighbouring lines hold passwords; some of its
/// messages name a key or a value. So only the location and messages that
/// quote nothing of the file are shown; any other error is described by
/// its location alone.
fn yaml_error(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::{Error as E, ExternalMessageSource};
    let e = e.without_snippet();
    let what = match e {
        // The scanner's and the parser's own messages are fixed texts (at
        // most they name one character); quoted words are hidden anyway.
        E::ExternalMessage { source, msg, .. }
            if matches!(**source, ExternalMessageSource::Parser(_)) =>
        {
            hide_quoted_words(msg)
        }
        E::DuplicateMappingKey { key, .. } => match key.as_deref() {
            Some(key) if is_key(key) => format!("the key {key:?} is given twice in one mapping"),
            _ => "a key is given twice in one mapping".to_string(),
        },
        E::Eof { .. } => "the file ends in the middle of a value".to_string(),
        E::MultipleDocuments { .. } => "more than one YAML document (---)".to_string(),
        E::UnknownAnchor { .. } => "an alias (*name) names no anchor (&name)".to_string(),
        E::Budget { .. } => "too large or too deeply nested".to_string(),
        _ => "it cannot be read as YAML".to_string(),
    };
    match e.location() {
        Some(at) => format!(
            "not valid YAML at line {}, column {}: {what} (the text there is not shown: it may hold a password)",
            at.line(),
            at.column()
        ),
        None => format!("not valid YAML: {what}"),
    }
}

/// `text` with every quoted part that holds a letter or a digit replaced
/// by `***` (`','` and `` `@' `` stay, `'hunter2'` does not). Any of
/// `'`, `"` and `` ` `` opens or closes a quote.
fn hide_quoted_words(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quoted = String::new();
    let mut inside = false;
    for c in text.chars() {
        if matches!(c, '\'' | '"' | '`') {
            if inside {
                if quoted.chars().any(char::is_alphanumeric) {
                    out.push_str("***");
                } else {
                    out.push_str(&quoted);
                }
                quoted.clear();
            }
            inside = !inside;
            out.push(c);
        } else if inside {
            quoted.push(c);
        } else {
            out.push(c);
        }
    }
    if quoted.chars().any(char::is_alphanumeric) {
        out.push_str("***");
    } else {
        out.push_str(&quoted);
    }
    out
}

/// A value of a field that holds no secret, quoted, unless it looks like a
/// URL with credentials pasted into the wrong field (then described only).
fn echo(text: &str) -> String {
    if text.contains('@') || text.contains("://") {
        "(not shown: it looks like a URL and may hold a password)".to_string()
    } else {
        format!("{text:?}")
    }
}

/// A key that can be shown: a config key's shape (lowercase letters and
/// underscores), which neither a URL with credentials nor a password of
/// any strength has.
fn is_key(text: &str) -> bool {
    (1..=32).contains(&text.len()) && text.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
}

/// Reads the fields of one YAML mapping, recording every problem under the
/// mapping's path, and reports the keys nobody asked for as unknown.
struct Section<'e> {
    path: String,
    map: Map<String, Value>,
    errors: &'e mut Vec<FieldError>,
}

impl<'e> Section<'e> {
    fn new(path: &str, value: Value, errors: &'e mut Vec<FieldError>) -> Section<'e> {
        let map = match value {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                errors.push(FieldError {
                    path: path.to_string(),
                    message: format!("expected a mapping, found {}", kind(&other)),
                });
                Map::new()
            }
        };
        Section {
            path: path.to_string(),
            map,
            errors,
        }
    }

    fn child(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn error(&mut self, key: &str, message: impl Into<String>) {
        let path = self.child(key);
        self.errors.push(FieldError {
            path,
            message: message.into(),
        });
    }

    /// Takes a field; `None` when absent, null, or of the wrong type (the
    /// last is recorded).
    fn take<T: DeserializeOwned>(&mut self, key: &str, expected: &str) -> Option<T> {
        let value = self.map.remove(key)?;
        if value.is_null() {
            return None;
        }
        match serde_json::from_value(value.clone()) {
            Ok(v) => Some(v),
            Err(_) => {
                self.error(key, format!("expected {expected}, found {}", show(&value)));
                None
            }
        }
    }

    /// As [`Section::take`] for a field that may hold a password: a value
    /// of the wrong type is described by its kind only.
    fn take_secret<T: DeserializeOwned>(&mut self, key: &str, expected: &str) -> Option<T> {
        let value = self.map.remove(key)?;
        if value.is_null() {
            return None;
        }
        match serde_json::from_value(value.clone()) {
            Ok(v) => Some(v),
            Err(_) => {
                self.error(
                    key,
                    format!(
                        "expected {expected}, found {} (not shown: it may hold a password)",
                        kind(&value)
                    ),
                );
                None
            }
        }
    }

    fn raw(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    fn duration(&mut self, key: &str, default: Duration) -> Duration {
        let Some(text) = self.take::<String>(key, "a duration string like \"250ms\"") else {
            return default;
        };
        match humantime::parse_duration(text.trim()) {
            Ok(d) => d,
            Err(e) => {
                self.error(
                    key,
                    format!("not a duration ({e}): {text:?}; write e.g. \"250ms\" or \"10s\""),
                );
                default
            }
        }
    }

    /// Reports every key nobody took. A key not shaped like a config key
    /// (a URL with its password written where a key goes, say) is not
    /// shown.
    fn finish(self) {
        for key in self.map.keys() {
            let (path, message) = if !is_key(key) {
                (
                    self.path.clone(),
                    "an unknown key not shaped like one (not shown: it may hold a password)",
                )
            } else if self.path.is_empty() {
                (key.clone(), "unknown key")
            } else {
                (format!("{}.{key}", self.path), "unknown key")
            };
            self.errors.push(FieldError {
                path,
                message: message.to_string(),
            });
        }
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn show(value: &Value) -> String {
    match value {
        Value::Array(_) | Value::Object(_) => kind(value).to_string(),
        other => format!("{} {other}", kind(other)),
    }
}

fn read_config(tree: Value, check: AddressCheck, errors: &mut Vec<FieldError>) -> Option<Config> {
    let mut top = Section::new("", tree, errors);
    let agent_tree = top.raw("agent");
    let admin_tree = top.raw("admin");
    let socket_tree = top.raw("socket");
    let metrics_tree = top.raw("metrics");
    let log_tree = top.raw("log");
    let masters_tree = top.raw("masters");
    let lock_tree = top.raw("lock");
    let health_tree = top.raw("health");
    let restart_tree = top.raw("delayed_restart");
    let shutdown_tree = top.raw("shutdown");
    let leak_tree = top.raw("leak_scan");
    top.finish();

    let socket = read_socket(socket_tree.unwrap_or(Value::Null), errors);
    let agent = read_agent(agent_tree.unwrap_or(Value::Null), errors);
    let admin = read_admin(admin_tree.unwrap_or(Value::Null), &socket.path, errors);
    let metrics = read_metrics(metrics_tree.unwrap_or(Value::Null), errors);
    let log = read_log(log_tree.unwrap_or(Value::Null), errors);
    let masters = read_masters(masters_tree, check, errors);
    let lock = read_lock(lock_tree.unwrap_or(Value::Null), errors);

    let mut s = Section::new("health", health_tree.unwrap_or(Value::Null), errors);
    let interval = s.duration("interval", Duration::from_millis(500));
    if interval.is_zero() {
        s.error("interval", "must be above zero");
    }
    s.finish();
    let health = HealthConfig { interval };

    let mut s = Section::new(
        "delayed_restart",
        restart_tree.unwrap_or(Value::Null),
        errors,
    );
    let delayed_restart = DelayedRestartConfig {
        enabled: s.take("enabled", "true or false").unwrap_or(true),
        extra: s.duration("extra", Duration::from_secs(1)),
    };
    s.finish();

    let mut s = Section::new("leak_scan", leak_tree.unwrap_or(Value::Null), errors);
    let leak_scan = LeakScanConfig {
        interval: s.duration("interval", Duration::from_secs(30)),
        count: s.take("count", "a whole number").unwrap_or(500),
        keys_per_second: s.take("keys_per_second", "a whole number").unwrap_or(5000),
        repair: s
            .take("repair", "\"none\" or \"expire\"")
            .unwrap_or(Repair::None),
    };
    if leak_scan.interval.is_zero() {
        s.error("interval", "must be above zero");
    }
    if leak_scan.count == 0 {
        s.error("count", "must be at least 1");
    }
    if leak_scan.keys_per_second == 0 {
        s.error("keys_per_second", "must be at least 1");
    }
    s.finish();

    let mut s = Section::new("shutdown", shutdown_tree.unwrap_or(Value::Null), errors);
    let shutdown = ShutdownConfig {
        grace: s.duration("grace", Duration::from_secs(10)),
    };
    s.finish();

    Some(Config {
        agent,
        socket,
        admin,
        metrics,
        log,
        masters,
        lock,
        health,
        delayed_restart,
        leak_scan,
        shutdown,
    })
}

fn read_socket(tree: Value, errors: &mut Vec<FieldError>) -> SocketConfig {
    let mut s = Section::new("socket", tree, errors);
    let path: PathBuf = s
        .take::<String>("path", "a file path")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/redlock/agent.sock"));
    if path.as_os_str().is_empty() {
        s.error("path", "must not be empty");
    }
    let mode = match s.raw("mode") {
        None => 0o660,
        Some(Value::String(text)) => match u32::from_str_radix(text.trim(), 8) {
            Ok(mode) if mode <= 0o777 => mode,
            _ => {
                s.error(
                    "mode",
                    format!("not an octal file mode like \"0660\": {text:?}"),
                );
                0o660
            }
        },
        Some(other) => {
            s.error(
                "mode",
                format!(
                    "expected a quoted octal string like \"0660\", found {}",
                    show(&other)
                ),
            );
            0o660
        }
    };
    let max_connections: usize = s
        .take("max_connections", "a whole number")
        .unwrap_or(16_384);
    if max_connections == 0 {
        s.error("max_connections", "must be at least 1");
    }
    let request_timeout = s.duration("request_timeout", Duration::from_secs(10));
    if request_timeout.is_zero() {
        s.error("request_timeout", "must be above zero");
    }
    let allow_uids = s
        .take("allow_uids", "a list of numeric uids")
        .unwrap_or_default();
    let allow_gids = s
        .take("allow_gids", "a list of numeric gids")
        .unwrap_or_default();
    // Three quarters by default: one uid always leaves room for others.
    let max_connections_per_uid = s
        .take("max_connections_per_uid", "a whole number")
        .unwrap_or_else(|| (max_connections * 3).div_ceil(4).max(1));
    if max_connections_per_uid == 0 {
        s.error("max_connections_per_uid", "must be at least 1");
    } else if max_connections_per_uid > max_connections.max(1) {
        s.error(
            "max_connections_per_uid",
            format!(
                "{max_connections_per_uid} is above socket.max_connections ({max_connections})"
            ),
        );
    }
    s.finish();
    SocketConfig {
        path,
        mode,
        max_connections,
        request_timeout,
        allow_uids,
        allow_gids,
        max_connections_per_uid,
    }
}

fn read_metrics(tree: Value, errors: &mut Vec<FieldError>) -> MetricsConfig {
    let mut s = Section::new("metrics", tree, errors);
    let default: SocketAddr = ([127, 0, 0, 1], 9187).into();
    let listen = match s.take::<String>("listen", "an address like \"127.0.0.1:9187\"") {
        None => default,
        Some(text) => match text.parse() {
            Ok(addr) => addr,
            Err(_) => {
                s.error(
                    "listen",
                    format!("not an IP:port address like \"127.0.0.1:9187\": {text:?}"),
                );
                default
            }
        },
    };
    let max_connections: usize = s
        .take("max_connections", "a whole number")
        .unwrap_or(DEFAULT_METRICS_MAX_CONNECTIONS);
    if max_connections == 0 {
        s.error("max_connections", "must be at least 1");
    } else if max_connections > MAX_METRICS_CONNECTIONS {
        s.error(
            "max_connections",
            format!(
                "{max_connections} is above {MAX_METRICS_CONNECTIONS}: the port serves probes and \
                 scrapes, and every connection it holds is a descriptor the sockets and the \
                 masters cannot have"
            ),
        );
    }
    s.finish();
    MetricsConfig {
        listen,
        max_connections,
    }
}

fn read_log(tree: Value, errors: &mut Vec<FieldError>) -> LogConfig {
    let mut s = Section::new("log", tree, errors);
    let format = s
        .take("format", "\"text\" or \"json\"")
        .unwrap_or(LogFormat::Text);
    let level: String = s
        .take("level", "a filter like \"info\"")
        .unwrap_or_else(|| "info".to_string());
    if let Err(e) = tracing_subscriber::EnvFilter::try_new(&level) {
        s.error("level", format!("not a log filter ({e}): {level:?}"));
    }
    s.finish();
    LogConfig { format, level }
}

fn read_masters(
    tree: Option<Value>,
    check: AddressCheck,
    errors: &mut Vec<FieldError>,
) -> Vec<MasterConfig> {
    let items = match tree {
        None => {
            errors.push(FieldError {
                path: "masters".into(),
                message: "required: list at least one master as {name, url} or {name, cluster}"
                    .into(),
            });
            return Vec::new();
        }
        Some(Value::Array(items)) => items,
        Some(other) => {
            errors.push(FieldError {
                path: "masters".into(),
                message: format!(
                    "expected a list of {{name, url}}, found {} (not shown: it may hold a password)",
                    kind(&other)
                ),
            });
            return Vec::new();
        }
    };
    if items.is_empty() {
        errors.push(FieldError {
            path: "masters".into(),
            message: "needs at least one master".into(),
        });
    }
    let mut seen = HashSet::new();
    let mut masters = Vec::new();
    // Every URL that parsed, named or not, for the same-server check.
    let mut endpoints: Vec<Endpoint> = Vec::new();
    for (i, item) in items.into_iter().enumerate() {
        let path = format!("masters[{i}]");
        let mut s = Section::new(&path, item, errors);
        let name: Option<String> = s.take("name", "a string");
        let url: Option<String> = s.take_secret("url", "a redis:// or rediss:// URL");
        let seeds: Option<Vec<String>> = s.take_secret(
            "cluster",
            "a list of a Redis Cluster's seed nodes as redis:// or rediss:// URLs",
        );
        let password_file: Option<String> = s.take("password_file", "a file path");
        let password_env: Option<String> = s.take("password_env", "an environment variable name");
        let tls_ca_file: Option<String> = s.take("tls_ca_file", "a file path");
        let tls_cert_file: Option<String> = s.take("tls_cert_file", "a file path");
        let tls_key_file: Option<String> = s.take("tls_key_file", "a file path");
        let name = match name {
            None => {
                s.error("name", "required");
                None
            }
            Some(name) if !valid_name(&name) => {
                s.error(
                    "name",
                    format!(
                        "use 1 to 64 letters, digits, '-', '_' or '.': {}",
                        echo(&name)
                    ),
                );
                None
            }
            Some(name) if !seen.insert(name.clone()) => {
                s.error("name", format!("duplicate master name {name:?}"));
                None
            }
            Some(name) => Some(name),
        };
        let parse = |s: &mut Section<'_>, field: &str, raw: &str| match MasterUrl::parse(raw) {
            Ok(url) => match url.connection_info() {
                Ok(_) => Some(url),
                Err(e) => {
                    s.error(
                        field,
                        format!(
                            "refused by the redis client ({}): {:?}",
                            without_detail(&e),
                            url.to_string()
                        ),
                    );
                    None
                }
            },
            Err(message) => {
                s.error(field, message);
                None
            }
        };
        // A single server's URL, or every seed of a cluster (all must parse).
        let urls: Option<Vec<(String, MasterUrl)>> = match (url, seeds) {
            (Some(_), Some(_)) => {
                s.error(
                    "cluster",
                    "give url (one server) or cluster (a Redis Cluster's seed nodes), not both",
                );
                None
            }
            (None, None) => {
                s.error("url", "required (or cluster: a Redis Cluster's seed nodes)");
                None
            }
            (Some(raw), None) => parse(&mut s, "url", &raw).map(|u| vec![("url".to_string(), u)]),
            (None, Some(seeds)) if seeds.is_empty() => {
                s.error("cluster", "needs at least one seed node");
                None
            }
            (None, Some(seeds)) => {
                let parsed: Vec<Option<(String, MasterUrl)>> = seeds
                    .iter()
                    .enumerate()
                    .map(|(j, raw)| {
                        let field = format!("cluster[{j}]");
                        parse(&mut s, &field, raw).map(|u| (field, u))
                    })
                    .collect();
                let tls: HashSet<bool> = parsed.iter().flatten().map(|(_, u)| u.is_tls()).collect();
                if tls.len() > 1 {
                    s.error(
                        "cluster",
                        "mixes redis:// and rediss:// seeds; use one scheme",
                    );
                    None
                } else {
                    parsed.into_iter().collect()
                }
            }
        };
        let url = urls.as_ref().map(|urls| urls[0].1.clone());
        let password = match (password_file, password_env) {
            (Some(_), Some(_)) => {
                s.error(
                    "password_env",
                    "set password_file or password_env, not both",
                );
                None
            }
            (Some(file), None) => match std::fs::read_to_string(&file) {
                Ok(text) => Some((
                    "password_file",
                    text.trim_end_matches(['\r', '\n']).to_string(),
                )),
                Err(e) => {
                    s.error("password_file", format!("cannot read {file:?}: {e}"));
                    None
                }
            },
            (None, Some(var)) => match std::env::var(&var) {
                Ok(value) => Some(("password_env", value)),
                Err(_) => {
                    s.error(
                        "password_env",
                        format!("environment variable {var:?} is not set"),
                    );
                    None
                }
            },
            (None, None) => None,
        };
        let tls_ca = match (&tls_ca_file, &url) {
            (None, _) => None,
            (Some(_), Some(url)) if !url.is_tls() => {
                s.error("tls_ca_file", "only for rediss:// URLs");
                None
            }
            (Some(file), _) => match std::fs::read(file) {
                Ok(pem) => match check_ca(&pem) {
                    Ok(()) => Some(pem),
                    Err(why) => {
                        s.error("tls_ca_file", format!("{file:?} {why}"));
                        None
                    }
                },
                Err(e) => {
                    s.error("tls_ca_file", format!("cannot read {file:?}: {e}"));
                    None
                }
            },
        };
        let tls_client = read_tls_client(&mut s, url.as_ref(), &tls_cert_file, &tls_key_file);
        s.finish();
        for (field, url) in urls.iter().flatten() {
            let (host, port) = url.endpoint();
            endpoints.push(Endpoint {
                path: format!("{path}.{field}"),
                name: name.clone(),
                master: i,
                host,
                port,
            });
        }
        let (Some(name), Some(_), Some(urls)) = (name, url, urls) else {
            continue;
        };
        let wanted = urls.len();
        let mut urls_ok = Vec::with_capacity(wanted);
        for (field, mut url) in urls {
            if let Some((key, password)) = &password {
                if url.has_password() {
                    errors.push(FieldError {
                        path: format!("{path}.{key}"),
                        message: format!(
                            "the {field} already carries a password; give it in one place"
                        ),
                    });
                    continue;
                }
                url.set_password(password);
            }
            if url.has_user_without_password() {
                errors.push(FieldError {
                    path: format!("{path}.{field}"),
                    message: format!(
                        "names a user but no password, so the redis client would not log in as it; \
                         give the password in the URL (redis://USER:PASSWORD@host), password_file or \
                         password_env, or write redis://:PASSWORD@host if this was the password: {:?}",
                        url.to_string()
                    ),
                });
                continue;
            }
            urls_ok.push((field, url));
        }
        if urls_ok.len() != wanted {
            continue;
        }
        let is_cluster = urls_ok[0].0 != "url";
        let urls: Vec<MasterUrl> = urls_ok.into_iter().map(|(_, u)| u).collect();
        masters.push(MasterConfig {
            name,
            url: urls[0].clone(),
            cluster: if is_cluster { urls } else { Vec::new() },
            tls_ca_file: tls_ca_file.map(PathBuf::from),
            tls_ca,
            tls_cert_file: tls_cert_file.map(PathBuf::from),
            tls_key_file: tls_key_file.map(PathBuf::from),
            tls_client,
        });
    }
    if check == AddressCheck::Resolve {
        check_same_server(&endpoints, &resolve_all, &local_addresses(), errors);
    }
    masters
}

/// How parsing treats the masters' addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressCheck {
    /// Resolve every master's host (bounded by [`RESOLVE_TIMEOUT`]) and
    /// refuse two masters that reach the same address and port: one
    /// server's vote would count twice toward a quorum. A host that does
    /// not resolve is refused too, since it cannot be compared.
    Resolve,
    /// Neither resolve nor compare: for `check --offline` (a file checked
    /// away from the network it will run in) and for tests of the run-time
    /// detection of two masters behind one server, which need such a
    /// configuration to start.
    Skip,
}

/// The longest the same-server check waits for host names to resolve, all
/// of them at once.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// A host's addresses, or why it has none.
type Resolved = Result<Vec<SocketAddr>, String>;

/// Resolves `(host, port)` pairs, one answer each in order: [`resolve_all`],
/// or a fixed table in unit tests.
type Resolver = dyn Fn(&[(String, u16)]) -> Vec<Resolved>;

/// One master's URL, as the same-server check sees it.
#[derive(Debug, Clone)]
struct Endpoint {
    /// `masters[i].url` or `masters[i].cluster[j]`
    path: String,
    name: Option<String>,
    /// Which master (`i`): a cluster's seeds are compared only with the
    /// other masters' addresses.
    master: usize,
    host: String,
    port: u16,
}

impl Endpoint {
    fn describe(&self) -> String {
        match &self.name {
            Some(name) => format!("{} ({name})", self.path),
            None => self.path.clone(),
        }
    }
}

/// Reports, on the later of each pair, two masters whose hosts resolve to a
/// shared address on the same port, whatever the spelling (`localhost`,
/// `127.0.0.1`, `[::1]`) or the database number; and every host that does
/// not resolve.
fn check_same_server(
    endpoints: &[Endpoint],
    resolve: &Resolver,
    local: &HashSet<IpAddr>,
    errors: &mut Vec<FieldError>,
) {
    let targets: Vec<(String, u16)> = endpoints.iter().map(|e| (e.host.clone(), e.port)).collect();
    let resolved = resolve(&targets);
    let mut seen: Vec<(&Endpoint, HashSet<SocketAddr>)> = Vec::new();
    for (endpoint, addrs) in endpoints.iter().zip(resolved) {
        let addrs: HashSet<SocketAddr> = match addrs {
            Ok(addrs) => addrs.into_iter().map(|a| canonical(a, local)).collect(),
            Err(why) => {
                errors.push(FieldError {
                    path: endpoint.path.clone(),
                    message: format!(
                        "cannot resolve {:?} to check that no two masters are one server: {why}",
                        endpoint.host
                    ),
                });
                continue;
            }
        };
        let mut shared: Vec<String> = Vec::new();
        let mut at: Option<SocketAddr> = None;
        for (earlier, earlier_addrs) in &seen {
            if earlier.master == endpoint.master {
                continue;
            }
            if let Some(addr) = earlier_addrs.intersection(&addrs).min() {
                shared.push(earlier.describe());
                at.get_or_insert(*addr);
            }
        }
        if let Some(addr) = at {
            let host = if addr.ip().is_loopback() {
                format!("this machine's port {}", addr.port())
            } else {
                addr.to_string()
            };
            errors.push(FieldError {
                path: endpoint.path.clone(),
                message: format!(
                    "{} reaches the same server as {} ({host}): its vote would count twice \
                     toward a quorum; list each server once",
                    endpoint.name.as_deref().unwrap_or("this master"),
                    shared.join(", "),
                ),
            });
        }
        seen.push((endpoint, addrs));
    }
}

/// The address a connection really reaches: an IPv4-mapped IPv6 address is
/// its IPv4 address, and every loopback or unspecified address, and every
/// address of this machine (`local`), is one host: a redis-server listens
/// on all of them by default.
fn canonical(addr: SocketAddr, local: &HashSet<IpAddr>) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        ip => ip,
    };
    let ip = if ip.is_loopback() || ip.is_unspecified() || local.contains(&ip) {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        ip
    };
    SocketAddr::new(ip, addr.port())
}

/// The IP addresses of this machine's interfaces (empty if they cannot be
/// listed), so that `redis://<this host's address>:P` and
/// `redis://127.0.0.1:P` are seen as one server.
fn local_addresses() -> HashSet<IpAddr> {
    let mut local = HashSet::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs(3) gives a linked list that stays valid until
    // freeifaddrs(3); it is only read in between, each ifa_addr through the
    // sockaddr type its sa_family names.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return local;
        }
        let mut entry = head;
        while !entry.is_null() {
            let addr = (*entry).ifa_addr;
            if !addr.is_null() {
                match i32::from((*addr).sa_family) {
                    libc::AF_INET => {
                        let v4 = &*addr.cast::<libc::sockaddr_in>();
                        local.insert(IpAddr::V4(Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr))));
                    }
                    libc::AF_INET6 => {
                        let v6 = &*addr.cast::<libc::sockaddr_in6>();
                        local.insert(IpAddr::V6(Ipv6Addr::from(v6.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
            entry = (*entry).ifa_next;
        }
        libc::freeifaddrs(head);
    }
    local
}

/// Resolves every `(host, port)` with the system resolver, in parallel,
/// giving up on those not answered within [`RESOLVE_TIMEOUT`] (their lookup
/// thread is left to finish on its own). IP literals need no lookup.
fn resolve_all(targets: &[(String, u16)]) -> Vec<Resolved> {
    let mut results: Vec<Option<Resolved>> = vec![None; targets.len()];
    let (tx, rx) = std::sync::mpsc::channel();
    let mut pending = 0;
    for (i, (host, port)) in targets.iter().enumerate() {
        if let Ok(ip) = host.parse::<IpAddr>() {
            results[i] = Some(Ok(vec![SocketAddr::new(ip, *port)]));
            continue;
        }
        let tx = tx.clone();
        let target = (host.clone(), *port);
        let spawned = std::thread::Builder::new()
            .name("resolve".into())
            .spawn(move || {
                let answer = target
                    .to_socket_addrs()
                    .map(Iterator::collect)
                    .map_err(|e| e.to_string());
                let _ = tx.send((i, answer));
            });
        match spawned {
            Ok(_) => pending += 1,
            Err(e) => results[i] = Some(Err(format!("cannot start a lookup: {e}"))),
        }
    }
    let deadline = std::time::Instant::now() + RESOLVE_TIMEOUT;
    while pending > 0 {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok((i, answer)) => {
                results[i] = Some(answer.and_then(|addrs: Vec<SocketAddr>| {
                    if addrs.is_empty() {
                        Err("no addresses".to_string())
                    } else {
                        Ok(addrs)
                    }
                }));
                pending -= 1;
            }
            Err(_) => break,
        }
    }
    results
        .into_iter()
        .map(|r| {
            r.unwrap_or_else(|| {
                Err(format!(
                    "no answer within {}",
                    humantime::format_duration(RESOLVE_TIMEOUT)
                ))
            })
        })
        .collect()
}

/// The client certificate of one master: both files or neither, only for
/// `rediss://`.
fn read_tls_client(
    s: &mut Section<'_>,
    url: Option<&MasterUrl>,
    cert_file: &Option<String>,
    key_file: &Option<String>,
) -> Option<TlsClient> {
    let (cert_file, key_file) = match (cert_file, key_file) {
        (None, None) => return None,
        (Some(_), None) => {
            s.error("tls_key_file", "required with tls_cert_file");
            return None;
        }
        (None, Some(_)) => {
            s.error("tls_cert_file", "required with tls_key_file");
            return None;
        }
        (Some(cert), Some(key)) => (cert, key),
    };
    if url.is_some_and(|url| !url.is_tls()) {
        s.error("tls_cert_file", "only for rediss:// URLs");
        return None;
    }
    let mut read = |key: &str, file: &str| match std::fs::read(file) {
        Ok(pem) => Some(pem),
        Err(e) => {
            s.error(key, format!("cannot read {file:?}: {e}"));
            None
        }
    };
    let cert = read("tls_cert_file", cert_file);
    let key = read("tls_key_file", key_file);
    let cert = cert.filter(|pem| match check_cert(pem) {
        Ok(()) => true,
        Err(why) => {
            s.error("tls_cert_file", format!("{cert_file:?} {why}"));
            false
        }
    });
    let key = key.filter(|pem| match check_key(pem) {
        Ok(()) => true,
        Err(why) => {
            s.error("tls_key_file", format!("{key_file:?} {why}"));
            false
        }
    });
    Some(TlsClient {
        cert: cert?,
        key: key?,
    })
}

/// Checks that `pem` holds certificates, each one rustls takes as a trust
/// anchor: a file that is not a CA (a key, a text file, a truncated
/// copy) would otherwise fail only at the first connection, as an unknown
/// issuer. The messages never quote the file.
fn check_ca(pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut store = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|_| "holds a PEM block that does not decode".to_string())?;
        store.add(cert).map_err(|_| {
            "holds a CERTIFICATE block that is not an X.509 certificate a client can trust"
                .to_string()
        })?;
    }
    if store.is_empty() {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_string());
    }
    Ok(())
}

/// Checks that `pem` holds a client certificate chain the TLS client reads.
fn check_cert(pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "holds a PEM block that does not decode".to_string())?;
    if certs.is_empty() {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_string());
    }
    Ok(())
}

/// Checks that `pem` holds a private key the TLS client reads. The key is
/// never shown, nor anything of the file.
fn check_key(pem: &[u8]) -> Result<(), String> {
    use rustls::pki_types::{pem::PemObject, PrivateKeyDer};
    if PrivateKeyDer::from_pem_slice(pem).is_ok() {
        return Ok(());
    }
    let encrypted = pem.windows(b"ENCRYPTED".len()).any(|w| w == b"ENCRYPTED");
    Err(if encrypted {
        "holds an encrypted private key: the TLS client needs it unencrypted (PKCS#8, PKCS#1 or SEC1 PEM)"
    } else {
        "holds no PEM private key (PKCS#8, PKCS#1 or SEC1)"
    }
    .to_string())
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn read_lock(tree: Value, errors: &mut Vec<FieldError>) -> LockConfig {
    let mut s = Section::new("lock", tree, errors);
    let key_prefix: String = s
        .take("key_prefix", "a string")
        .unwrap_or_else(|| "redlock:".to_string());
    if key_prefix.is_empty() {
        s.error(
            "key_prefix",
            "must not be empty: the scanner and /v1/locks would take every key on the masters \
             for a lock key; use e.g. \"redlock:\"",
        );
    } else if key_prefix
        .bytes()
        .any(|b| matches!(b, b'*' | b'?' | b'[' | b']' | b'\\'))
    {
        s.error(
            "key_prefix",
            format!(
                "must not contain glob characters *?[]\\ (they break key scans): {key_prefix:?}"
            ),
        );
    }
    let default_ttl = s.duration("default_ttl", Duration::from_secs(10));
    let max_ttl = s.duration("max_ttl", Duration::from_secs(60));
    let node_timeout = s.duration("node_timeout", Duration::from_millis(50));
    let drift_factor: f64 = s.take("drift_factor", "a number").unwrap_or(0.01);
    let retry_delay = s.duration("retry_delay", Duration::from_millis(50));
    let retry_jitter = s.duration("retry_jitter", Duration::from_millis(50));
    let max_hold = s.duration("max_hold", Duration::from_secs(3600));
    let max_waiters: usize = s.take("max_waiters", "a whole number").unwrap_or(10_000);
    // Three quarters by default, as socket.max_connections_per_uid: one
    // uid always leaves room for others.
    let max_waiters_per_uid: usize = s
        .take("max_waiters_per_uid", "a whole number")
        .unwrap_or_else(|| (max_waiters * 3).div_ceil(4));
    if max_waiters_per_uid == 0 && max_waiters > 0 {
        s.error("max_waiters_per_uid", "must be at least 1");
    } else if max_waiters_per_uid > max_waiters {
        s.error(
            "max_waiters_per_uid",
            format!("{max_waiters_per_uid} is above lock.max_waiters ({max_waiters})"),
        );
    }
    let fence = s
        .take("fence", "\"on_request\" or \"always\"")
        .unwrap_or(FenceMode::OnRequest);
    if max_hold < default_ttl {
        s.error(
            "max_hold",
            format!(
                "{} is below lock.default_ttl ({}): a hold could not renew even once",
                humantime::format_duration(max_hold),
                humantime::format_duration(default_ttl)
            ),
        );
    }

    if default_ttl.as_millis() < 1 {
        s.error("default_ttl", "must be at least 1ms");
    }
    if max_ttl.as_millis() < 1 {
        s.error("max_ttl", "must be at least 1ms");
    }
    if default_ttl > max_ttl {
        s.error(
            "default_ttl",
            format!(
                "{} is above lock.max_ttl ({})",
                humantime::format_duration(default_ttl),
                humantime::format_duration(max_ttl)
            ),
        );
    }
    if node_timeout.is_zero() {
        s.error("node_timeout", "must be above zero");
    } else if node_timeout * 10 > default_ttl {
        s.error(
            "node_timeout",
            format!(
                "{} is not far below lock.default_ttl ({}); keep it at most a tenth of it",
                humantime::format_duration(node_timeout),
                humantime::format_duration(default_ttl)
            ),
        );
    }
    if !(0.0..0.5).contains(&drift_factor) || drift_factor.is_nan() {
        s.error(
            "drift_factor",
            format!("must be at least 0 and below 0.5: {drift_factor}"),
        );
    }
    s.finish();
    LockConfig {
        key_prefix,
        default_ttl,
        max_ttl,
        node_timeout,
        drift_factor,
        retry_delay,
        retry_jitter,
        max_hold,
        max_waiters,
        max_waiters_per_uid,
        fence,
    }
}

fn read_agent(tree: Value, errors: &mut Vec<FieldError>) -> AgentConfig {
    let mut s = Section::new("agent", tree, errors);
    let name = match s.take::<String>("name", "a string") {
        None => default_agent_name(),
        Some(name) if crate::redlock::token::valid_agent(&name) => name,
        Some(name) => {
            s.error(
                "name",
                format!(
                    "use 1 to 64 letters, digits, '-' or '_' ('.' and '@' separate the parts of a lock value): {}",
                    echo(&name)
                ),
            );
            default_agent_name()
        }
    };
    let workers = s.take("workers", "a whole number").unwrap_or(1);
    if !(1..=MAX_WORKERS).contains(&workers) {
        s.error(
            "workers",
            format!("use 1 to {MAX_WORKERS} threads, not {workers}"),
        );
    }
    s.finish();
    AgentConfig { name, workers }
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

/// A quoted octal file mode like `"0600"`.
fn mode_field(s: &mut Section<'_>, key: &str, default: u32) -> u32 {
    match s.raw(key) {
        None => default,
        Some(Value::String(text)) => match u32::from_str_radix(text.trim(), 8) {
            Ok(mode) if mode <= 0o777 => mode,
            _ => {
                s.error(
                    key,
                    format!("not an octal file mode like \"0600\": {text:?}"),
                );
                default
            }
        },
        Some(other) => {
            s.error(
                key,
                format!(
                    "expected a quoted octal string like \"0600\", found {}",
                    show(&other)
                ),
            );
            default
        }
    }
}

fn read_admin(tree: Value, socket_path: &Path, errors: &mut Vec<FieldError>) -> AdminConfig {
    let mut s = Section::new("admin", tree, errors);
    let socket_tree = s.raw("socket");
    let allow_uids = s
        .take("allow_uids", "a list of numeric uids")
        .unwrap_or_default();
    s.finish();
    let mut s = Section::new("admin.socket", socket_tree.unwrap_or(Value::Null), errors);
    let path = s
        .take::<String>("path", "a file path")
        .map(PathBuf::from)
        .unwrap_or_else(|| default_admin_path(socket_path));
    if path.as_os_str().is_empty() {
        s.error("path", "must not be empty");
    } else if path == socket_path {
        s.error("path", "must differ from socket.path");
    }
    let mode = mode_field(&mut s, "mode", 0o600);
    s.finish();
    AdminConfig {
        socket: AdminSocketConfig { path, mode },
        allow_uids,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "masters:\n  - {name: r1, url: \"redis://127.0.0.1:6379\"}\n";

    fn errors_of(yaml: &str) -> Vec<String> {
        match Config::from_yaml(yaml) {
            Ok(_) => Vec::new(),
            Err(ConfigError::Invalid(errors)) => errors.iter().map(ToString::to_string).collect(),
            Err(other) => vec![other.to_string()],
        }
    }

    #[test]
    fn minimal_config_gets_the_documented_defaults() {
        let config = Config::from_yaml(MINIMAL).unwrap();
        assert_eq!(config.socket.mode, 0o660);
        assert_eq!(config.lock.key_prefix, "redlock:");
        assert_eq!(config.lock.default_ttl, Duration::from_secs(10));
        assert_eq!(config.lock.max_ttl, Duration::from_secs(60));
        assert_eq!(config.lock.node_timeout, Duration::from_millis(50));
        assert_eq!(config.health.interval, Duration::from_millis(500));
        assert!(config.delayed_restart.enabled);
        assert_eq!(config.quorum(), 1);
    }

    #[test]
    fn quorum_is_a_majority_of_the_configured_masters() {
        for (n, quorum) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)] {
            let mut yaml = String::from("masters:\n");
            for i in 0..n {
                yaml.push_str(&format!(
                    "  - {{name: r{i}, url: \"redis://127.0.0.1:{}\"}}\n",
                    6379 + i
                ));
            }
            assert_eq!(Config::from_yaml(&yaml).unwrap().quorum(), quorum, "n={n}");
        }
    }

    #[test]
    fn every_problem_is_reported_at_once_with_its_path() {
        let yaml = r#"
socket: {mode: 660, extra: 1}
masters:
  - {name: r1, url: "redis://127.0.0.1:1"}
  - {name: r1, url: "http://x"}
  - {url: "redis://127.0.0.1:3", port: 5}
lock:
  ttl: 5s
  default_ttl: 90s
  max_ttl: 60s
  node_timeout: "fast"
  drift_factor: "big"
"#;
        let errors = errors_of(yaml);
        let expected = [
            "socket.mode: expected a quoted octal string like \"0660\", found a number 660",
            "socket.extra: unknown key",
            "masters[1].name: duplicate master name \"r1\"",
            "masters[1].url: not a redis:// or rediss:// URL: \"http://x/\"",
            "masters[2].name: required",
            "masters[2].port: unknown key",
            "lock.ttl: unknown key",
            "lock.default_ttl: 1m 30s is above lock.max_ttl (1m)",
            "lock.drift_factor: expected a number, found a string \"big\"",
        ];
        for line in expected {
            assert!(
                errors.iter().any(|e| e == line),
                "missing {line:?} in {errors:#?}"
            );
        }
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("lock.node_timeout: not a duration")),
            "{errors:#?}"
        );
    }

    #[test]
    fn missing_or_empty_masters_are_errors() {
        assert_eq!(
            errors_of(""),
            ["masters: required: list at least one master as {name, url} or {name, cluster}"]
        );
        assert_eq!(
            errors_of("masters: []"),
            ["masters: needs at least one master"]
        );
    }

    #[test]
    fn node_timeout_must_be_far_below_the_default_ttl() {
        let yaml = format!("{MINIMAL}lock: {{default_ttl: 1s, node_timeout: 200ms}}\n");
        let errors = errors_of(&yaml);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].starts_with("lock.node_timeout: 200ms is not far below"));
    }

    #[test]
    fn passwords_never_show() {
        let yaml = "masters:\n  - {name: r1, url: \"redis://:hunter2@127.0.0.1:6379/0\"}\n";
        let config = Config::from_yaml(yaml).unwrap();
        let shown = format!(
            "{:?} {} {}",
            config,
            config.masters[0].url,
            serde_json::to_string(&config).unwrap()
        );
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("redis://:***@127.0.0.1:6379/0"), "{shown}");
        let info = config.masters[0].url.connection_info().unwrap();
        assert_eq!(info.redis_settings().password(), Some("hunter2"));

        let bad = "masters:\n  - {name: r1, url: \"http://u:hunter2@x\"}\n";
        let errors = errors_of(bad).join("\n");
        assert!(!errors.contains("hunter2"), "{errors}");
    }

    #[test]
    fn password_from_file_and_env() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pw");
        std::fs::write(&file, "s3cret\n").unwrap();
        let yaml = format!(
            "masters:\n  - {{name: r1, url: \"redis://127.0.0.1:1\", password_file: {:?}}}\n",
            file.display().to_string()
        );
        let config = Config::from_yaml(&yaml).unwrap();
        let info = config.masters[0].url.connection_info().unwrap();
        assert_eq!(info.redis_settings().password(), Some("s3cret"));

        let yaml = "masters:\n  - {name: r1, url: \"redis://127.0.0.1:1\", password_env: REDLOCK_TEST_UNSET_VAR}\n";
        assert_eq!(
            errors_of(yaml),
            ["masters[0].password_env: environment variable \"REDLOCK_TEST_UNSET_VAR\" is not set"]
        );
    }

    #[test]
    fn query_passwords_are_refused_and_never_show() {
        let yaml = "masters:\n  - {name: r1, url: \"redis://127.0.0.1:6379/0?password=hunter2\"}\n";
        let errors = errors_of(yaml);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("masters[0].url: query parameter \"password\" is not used"),
            "{errors:?}"
        );
        assert!(errors[0].contains("password_file"), "{errors:?}");
        assert!(errors[0].contains("?password=***"), "{errors:?}");
        assert!(!errors[0].contains("hunter2"), "{errors:?}");

        // The other spellings, in URLs that do or do not parse.
        for url in [
            "redis://127.0.0.1:6379?pass=hunter2",
            "redis://127.0.0.1:6379?protocol=resp3&auth=hunter2",
            "redis://u:hunter2@127.0.0.1:6379?user=u",
            "http://127.0.0.1?password=hunter2",
            "redis://127.0.0.1:port?password=hunter2",
        ] {
            let errors = errors_of(&format!("masters:\n  - {{name: r1, url: {url:?}}}\n"));
            assert_eq!(errors.len(), 1, "{url}: {errors:?}");
            assert!(!errors[0].contains("hunter2"), "{errors:?}");
        }
    }

    #[test]
    fn a_user_without_a_password_is_refused_and_not_shown() {
        let yaml = "masters:\n  - {name: r1, url: \"redis://hunter2@127.0.0.1:6379\"}\n";
        let errors = errors_of(yaml);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("masters[0].url: names a user but no password"),
            "{errors:?}"
        );
        assert!(
            errors[0].contains("\"redis://***@127.0.0.1:6379\""),
            "{errors:?}"
        );
        assert!(!errors[0].contains("hunter2"), "{errors:?}");

        // With the password from the environment, the user is used.
        let yaml =
            "masters:\n  - {name: r1, url: \"redis://agent@127.0.0.1:6379\", password_env: PATH}\n";
        let config = Config::from_yaml(yaml).unwrap();
        let info = config.masters[0].url.connection_info().unwrap();
        assert_eq!(info.redis_settings().username(), Some("agent"));
        assert_eq!(
            config.masters[0].url.to_string(),
            "redis://agent:***@127.0.0.1:6379"
        );
    }

    #[test]
    fn unknown_query_names_are_not_shown_either() {
        for url in [
            "redis://127.0.0.1:6379?hunter2",
            "redis://127.0.0.1:6379?hunter2=x",
            "redis://127.0.0.1:port?hunter2",
        ] {
            let errors = errors_of(&format!("masters:\n  - {{name: r1, url: {url:?}}}\n"));
            assert_eq!(errors.len(), 1, "{url}: {errors:?}");
            assert!(!errors[0].contains("hunter2"), "{errors:?}");
        }
    }

    #[test]
    fn the_protocol_query_is_used_and_shown() {
        let yaml =
            "masters:\n  - {name: r1, url: \"redis://:hunter2@127.0.0.1:6379?protocol=resp3\"}\n";
        let config = Config::from_yaml(yaml).unwrap();
        assert_eq!(
            config.masters[0].url.to_string(),
            "redis://:***@127.0.0.1:6379?protocol=resp3"
        );
        let info = config.masters[0].url.connection_info().unwrap();
        assert_eq!(
            info.redis_settings().protocol(),
            redis::ProtocolVersion::RESP3
        );
    }

    #[test]
    fn urls_the_redis_client_refuses_are_config_errors() {
        let yaml = "masters:\n  - {name: r1, url: \"redis://:hunter2@127.0.0.1:6379/zero\"}\n";
        let errors = errors_of(yaml);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("masters[0].url: refused by the redis client"),
            "{errors:?}"
        );
        assert!(!errors[0].contains("hunter2"), "{errors:?}");
    }

    #[test]
    fn an_empty_key_prefix_is_refused() {
        let errors = errors_of(&format!("{MINIMAL}lock: {{key_prefix: \"\"}}\n"));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("lock.key_prefix: must not be empty"),
            "{errors:?}"
        );
    }

    #[test]
    fn two_spellings_of_one_server_are_refused_with_both_paths() {
        let yaml = "masters:
  - {name: a, url: \"redis://127.0.0.1:7001\"}
  - {name: b, url: \"redis://localhost:7001\"}
  - {name: c, url: \"rediss://127.0.0.1:7001/3\"}
  - {name: d, url: \"redis://[::1]:7001\"}
  - {name: e, url: \"redis://[::ffff:127.0.0.1]:7001\"}
  - {name: f, url: \"redis://127.0.0.1:7002\"}
  - {name: g, url: \"redis://127.0.0.1:6379\"}
  - {name: h, url: \"redis://127.0.0.1\"}
";
        let errors = errors_of(yaml);
        let expected = [
            "masters[1].url: b reaches the same server as masters[0].url (a) (this machine's port 7001)",
            "masters[2].url: c reaches the same server as masters[0].url (a), masters[1].url (b) (this machine's port 7001)",
            "masters[3].url: d reaches the same server as masters[0].url (a), masters[1].url (b), masters[2].url (c)",
            "masters[4].url: e reaches the same server as masters[0].url (a), masters[1].url (b), masters[2].url (c), masters[3].url (d)",
            "masters[7].url: h reaches the same server as masters[6].url (g) (this machine's port 6379)",
        ];
        assert_eq!(errors.len(), expected.len(), "{errors:#?}");
        for (error, line) in errors.iter().zip(expected) {
            assert!(error.starts_with(line), "{error:?} is not {line:?}");
        }
        // Skipped on request (tests of the run-time detection).
        assert!(Config::from_yaml_with(yaml, AddressCheck::Skip).is_ok());
    }

    fn endpoint(i: usize, host: &str, port: u16) -> Endpoint {
        Endpoint {
            master: i,
            path: format!("masters[{i}].url"),
            name: Some(format!("r{i}")),
            host: host.to_string(),
            port,
        }
    }

    #[test]
    fn names_that_share_any_address_collide_and_unresolved_names_are_reported() {
        let resolve = |targets: &[(String, u16)]| -> Vec<Resolved> {
            targets
                .iter()
                .map(|(host, port)| {
                    let ips: &[&str] = match host.as_str() {
                        "multi" => &["10.0.0.1", "10.0.0.2"],
                        "other" => &["10.0.0.2"],
                        "third" => &["10.0.0.3"],
                        _ => return Err("name not known".to_string()),
                    };
                    Ok(ips
                        .iter()
                        .map(|ip| SocketAddr::new(ip.parse().unwrap(), *port))
                        .collect())
                })
                .collect()
        };
        let endpoints = [
            endpoint(0, "multi", 6379),
            endpoint(1, "other", 6379),
            endpoint(2, "other", 6380),
            endpoint(3, "third", 6379),
            endpoint(4, "nowhere", 6379),
        ];
        let mut errors = Vec::new();
        check_same_server(&endpoints, &resolve, &HashSet::new(), &mut errors);
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "masters[1].url: r1 reaches the same server as masters[0].url (r0) (10.0.0.2:6379): \
                 its vote would count twice toward a quorum; list each server once",
                "masters[4].url: cannot resolve \"nowhere\" to check that no two masters are one \
                 server: name not known",
            ]
        );
    }

    #[test]
    fn this_machines_addresses_are_one_host_with_loopback() {
        let local: HashSet<IpAddr> = ["192.0.2.7".parse().unwrap(), "fd00::7".parse().unwrap()]
            .into_iter()
            .collect();
        let loopback: SocketAddr = "127.0.0.1:6379".parse().unwrap();
        for addr in [
            "192.0.2.7:6379",
            "[fd00::7]:6379",
            "[::1]:6379",
            "127.0.0.5:6379",
            "[::ffff:127.0.0.1]:6379",
            "0.0.0.0:6379",
        ] {
            assert_eq!(canonical(addr.parse().unwrap(), &local), loopback, "{addr}");
        }
        let other: SocketAddr = "192.0.2.8:6379".parse().unwrap();
        assert_eq!(canonical(other, &local), other);
        assert_eq!(
            canonical("[::ffff:192.0.2.8]:6379".parse().unwrap(), &local),
            other
        );

        // The real list has loopback, and any other address of this
        // machine collides with 127.0.0.1.
        let real = local_addresses();
        assert!(real.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)), "{real:?}");
        if let Some(ip) = real.iter().find(|ip| !ip.is_loopback()) {
            let yaml = format!(
                "masters:\n  - {{name: a, url: \"redis://127.0.0.1:7001\"}}\n  - {{name: b, url: \"redis://{}:7001\"}}\n",
                SocketAddr::new(*ip, 7001).to_string().rsplit_once(':').unwrap().0
            );
            let errors = errors_of(&yaml);
            assert_eq!(errors.len(), 1, "{yaml}: {errors:?}");
            assert!(
                errors[0]
                    .starts_with("masters[1].url: b reaches the same server as masters[0].url (a)"),
                "{errors:?}"
            );
        }
    }

    #[test]
    fn ip_literals_resolve_without_a_lookup() {
        let resolved = resolve_all(&[("::1".to_string(), 1), ("10.1.2.3".to_string(), 2)]);
        assert_eq!(resolved[0], Ok(vec!["[::1]:1".parse().unwrap()]));
        assert_eq!(resolved[1], Ok(vec!["10.1.2.3:2".parse().unwrap()]));
    }

    #[test]
    fn syntax_errors_say_where() {
        let errors = errors_of("masters: [\n  - {name: r1");
        assert_eq!(errors.len(), 1);
        assert!(errors[0].starts_with("not valid YAML"), "{errors:?}");
        assert!(errors[0].contains("line"), "{errors:?}");
    }

    /// Errors of `yaml` without resolving hosts (the shapes below name
    /// hosts that do not exist).
    fn errors_offline(yaml: &str) -> Vec<String> {
        match Config::from_yaml_with(yaml, AddressCheck::Skip) {
            Ok(_) => Vec::new(),
            Err(ConfigError::Invalid(errors)) => errors.iter().map(ToString::to_string).collect(),
            Err(other) => vec![other.to_string()],
        }
    }

    /// The password's two halves: a shape that splits it must show neither.
    const HALVES: [&str; 2] = ["s3cr", "3tPW"];

    #[test]
    fn malformed_urls_never_show_their_password() {
        let shapes = [
            // No authority: the password lands in the path.
            "redis:/:s3cr3tPW@host:6379",
            "redis:///:s3cr3tPW@host",
            "redis:s3cr3tPW@host",
            // Not a URL at all (no scheme).
            "redis//:s3cr3tPW@host",
            "s3cr3tPW",
            // A reserved character in the password breaks the authority.
            "redis://:s3cr/3tPW@host",
            "redis://user:s3cr#3tPW@host",
            "redis://user:s3cr?3tPW@host",
            "redis://:s3cr3tPW@host:port",
            "redis://:s3cr3tPW@host:99999",
            "redis://:s3cr3tPW@",
            "redis://:s3cr3tPW@:6379",
            "redis://:s3cr3tPW@ho st",
            // Parses, but the password sits where nothing should.
            "redis://host:6379/0:s3cr3tPW",
            "rediss://host:6379/#s3cr3tPW",
            "redis://host:6379/?protocol=s3cr3tPW",
            "redis://host:6379/?s3cr3tPW",
            "http://user:s3cr3tPW@host",
            "redis://s3cr3tPW@host",
        ];
        for url in shapes {
            let yaml = format!("masters:\n  - {{name: r1, url: {url:?}}}\n");
            let errors = errors_offline(&yaml);
            assert_eq!(errors.len(), 1, "{url}: {errors:?}");
            assert!(
                errors[0].starts_with("masters[0].url: "),
                "{url}: {errors:?}"
            );
            for half in HALVES {
                assert!(!errors[0].contains(half), "{url}: {errors:?}");
            }
            // And as a cluster's seed.
            let yaml = format!("masters:\n  - {{name: r1, cluster: [{url:?}]}}\n");
            let errors = errors_offline(&yaml).join("\n");
            assert!(
                errors.contains("masters[0].cluster[0]: "),
                "{url}: {errors}"
            );
            assert!(
                !HALVES.iter().any(|h| errors.contains(h)),
                "{url}: {errors}"
            );
        }
        // What shows: the scheme, the host, a hint.
        let errors = errors_offline("masters:\n  - {name: r1, url: \"redis:/:s3cr3tPW@host\"}\n");
        assert_eq!(
            errors,
            ["masters[0].url: URL has no host (the scheme takes two slashes: redis://HOST): \"redis:/***\""]
        );
        let errors = errors_offline("masters:\n  - {name: r1, url: \"redis://:s3cr/3tPW@host\"}\n");
        assert!(
            errors[0].starts_with("masters[0].url: not a URL (empty host); the value is not shown"),
            "{errors:?}"
        );
        // A fragment the redis client ignores is accepted, and hidden.
        let config = Config::from_yaml_with(
            "masters:\n  - {name: r1, url: \"redis://:s3cr3tPW@host:6379/2#s3cr3tPW\"}\n",
            AddressCheck::Skip,
        )
        .unwrap();
        assert_eq!(
            config.masters[0].url.to_string(),
            "redis://:***@host:6379/2#***"
        );
    }

    #[test]
    fn url_fields_of_the_wrong_type_are_described_not_shown() {
        for yaml in [
            "masters:\n  - {name: r1, cluster: \"redis://:s3cr3tPW@host\"}\n",
            "masters:\n  - {name: r1, url: [\"redis://:s3cr3tPW@host\"]}\n",
            "masters: \"redis://:s3cr3tPW@host\"\n",
            // A URL written where a key goes, and where the name goes.
            "masters:\n  - {name: r1, url: \"redis://h:1\", redis://:s3cr3tPW@host}\n",
            "masters:\n  - {name: r1, url: \"redis://h:1\", s3cr3tPW: 1}\n",
            "masters:\n  - {name: \"redis://:s3cr3tPW@host\", url: \"redis://h:1\"}\n",
            "agent: {name: \"redis://:s3cr3tPW@host\"}\nmasters:\n  - {name: r1, url: \"redis://h:1\"}\n",
        ] {
            let errors = errors_offline(yaml).join("\n");
            assert!(errors.contains("masters") || errors.contains("agent.name"), "{yaml}: {errors}");
            assert!(!errors.contains("s3cr3tPW"), "{yaml}: {errors}");
        }
        assert_eq!(
            errors_offline("masters:\n  - {name: r1, url: \"redis://h:1\", redis://:s3cr3tPW@host}\n"),
            ["masters[0]: an unknown key not shaped like one (not shown: it may hold a password)"]
        );
    }

    #[test]
    fn yaml_syntax_errors_say_where_and_quote_nothing() {
        let cases = [
            // An unclosed flow mapping, the passwords on the lines around it.
            (
                "masters:\n  - {name: r1, url: \"redis://:s3cr3tPW@a:1\"\n  - {name: r2, url: \"redis://:s3cr3tPW@b:1\"}\n",
                3,
            ),
            // Bad indentation under a password line.
            (
                "masters:\n  - name: r1\n    url: redis://:s3cr3tPW@a:1\n   password_env: X\n",
                4,
            ),
            // A tab, a comment where it cannot be, an unclosed quote.
            ("masters:\n\ts3cr3tPW: x\n", 2),
            ("a: s3cr3tPW #c\n  b: s3cr3tPW\n", 1),
            ("masters:\n  - {name: r1, url: \"redis://:s3cr3tPW@a:1}\n", 2),
            // A key given twice, an alias without anchor, a stray character.
            ("s3cr3tPW: 1\ns3cr3tPW: 2\n", 2),
            ("a: *s3cr3tPW\n", 1),
            ("a: `s3cr3tPW\n", 1),
        ];
        for (yaml, line) in cases {
            let errors = errors_offline(yaml);
            assert_eq!(errors.len(), 1, "{yaml}: {errors:?}");
            assert!(
                errors[0].starts_with(&format!("not valid YAML at line {line}, column ")),
                "{yaml}: {errors:?}"
            );
            assert!(!errors[0].contains("s3cr3tPW"), "{yaml}: {errors:?}");
        }
        assert_eq!(
            errors_offline("url: 1\nurl: 2\n"),
            ["not valid YAML at line 2, column 1: the key \"url\" is given twice in one mapping (the text there is not shown: it may hold a password)"]
        );
        assert_eq!(
            hide_quoted_words("did not find expected ',' or ']'"),
            "did not find expected ',' or ']'"
        );
        assert_eq!(
            hide_quoted_words("unexpected character: `@'"),
            "unexpected character: `@'"
        );
        assert_eq!(
            hide_quoted_words("found 'abc' and \"d"),
            "found '***' and \"***"
        );
    }

    #[test]
    fn tls_files_that_are_not_what_they_say_are_refused_without_their_text() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, "s3cr3tPW\n").unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let garbage = dir.path().join("garbage.pem");
        std::fs::write(
            &garbage,
            "-----BEGIN CERTIFICATE-----\nczNjcjN0UFc=\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let key = dir.path().join("key.pem");
        std::fs::write(
            &key,
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nczNjcjN0UFc=\n-----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .unwrap();
        let path = |p: &Path| p.display().to_string();
        let yaml = format!(
            "masters:
  - {{name: a, url: \"rediss://h:1\", tls_ca_file: {:?}}}
  - {{name: b, url: \"rediss://h:2\", tls_ca_file: {:?}}}
  - {{name: c, url: \"rediss://h:3\", tls_ca_file: {:?}}}
  - {{name: d, url: \"rediss://h:4\", tls_cert_file: {:?}, tls_key_file: {:?}}}
",
            path(&text),
            path(&empty),
            path(&garbage),
            path(&key),
            path(&key),
        );
        let errors = errors_offline(&yaml);
        let expected = [
            format!("masters[0].tls_ca_file: {:?} holds no PEM certificate", path(&text)),
            format!("masters[1].tls_ca_file: {:?} holds no PEM certificate", path(&empty)),
            format!(
                "masters[2].tls_ca_file: {:?} holds a CERTIFICATE block that is not an X.509 certificate",
                path(&garbage)
            ),
            format!("masters[3].tls_cert_file: {:?} holds no PEM certificate", path(&key)),
            format!(
                "masters[3].tls_key_file: {:?} holds an encrypted private key",
                path(&key)
            ),
        ];
        assert_eq!(errors.len(), expected.len(), "{errors:#?}");
        for (error, start) in errors.iter().zip(&expected) {
            assert!(
                error.starts_with(start.as_str()),
                "{error:?} is not {start:?}"
            );
            assert!(
                !error.contains("s3cr3tPW") && !error.contains("czNjcjN0UFc"),
                "{error}"
            );
        }
    }

    #[test]
    fn access_and_admin_defaults() {
        let config = Config::from_yaml(MINIMAL).unwrap();
        assert!(config.socket.allow_uids.is_empty() && config.socket.allow_gids.is_empty());
        assert_eq!(config.socket.max_connections_per_uid, 12_288);
        assert_eq!(
            config.admin.socket.path,
            PathBuf::from("/run/redlock/admin.sock")
        );
        assert_eq!(config.admin.socket.mode, 0o600);
        assert!(crate::redlock::token::valid_agent(&config.agent.name));
        assert_eq!(
            default_admin_path(Path::new("/tmp/x/a1.sock")),
            PathBuf::from("/tmp/x/a1-admin.sock")
        );
        let yaml = format!(
            "{MINIMAL}socket: {{max_connections: 8, allow_uids: [1000], allow_gids: [10]}}\nagent: {{name: pod-7}}\n"
        );
        let config = Config::from_yaml(&yaml).unwrap();
        assert_eq!(config.socket.max_connections_per_uid, 6);
        assert_eq!(config.socket.allow_uids, [1000]);
        assert_eq!(config.socket.allow_gids, [10]);
        assert_eq!(config.agent.name, "pod-7");
    }

    #[test]
    fn access_admin_and_tls_problems_are_reported_with_their_paths() {
        let yaml = r#"
agent: {name: "host.example"}
socket: {path: /s/agent.sock, max_connections: 4, max_connections_per_uid: 5, allow_uids: ["root"]}
admin: {socket: {path: /s/agent.sock, mode: 600}, allow_uids: 0, extra: 1}
masters:
  - {name: r1, url: "redis://a:1", tls_cert_file: /nonexistent/c.pem, tls_key_file: /nonexistent/k.pem}
  - {name: r2, url: "rediss://b:1", tls_cert_file: /nonexistent/c.pem}
"#;
        let errors = errors_of(yaml);
        let expected = [
            "socket.max_connections_per_uid: 5 is above socket.max_connections (4)",
            "socket.allow_uids: expected a list of numeric uids, found a list",
            "admin.allow_uids: expected a list of numeric uids, found a number 0",
            "admin.extra: unknown key",
            "admin.socket.path: must differ from socket.path",
            "admin.socket.mode: expected a quoted octal string like \"0600\", found a number 600",
            "masters[0].tls_cert_file: only for rediss:// URLs",
            "masters[1].tls_key_file: required with tls_cert_file",
        ];
        for line in expected {
            assert!(
                errors.iter().any(|e| e == line),
                "missing {line:?} in {errors:#?}"
            );
        }
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("agent.name: use 1 to 64")),
            "{errors:#?}"
        );
    }

    #[test]
    fn workers_default_to_one_and_are_checked() {
        let config = Config::from_yaml(MINIMAL).unwrap();
        assert_eq!(config.agent.workers, 1);
        let config = Config::from_yaml(&format!("{MINIMAL}agent: {{workers: 4}}\n")).unwrap();
        assert_eq!(config.agent.workers, 4);
        for (workers, expected) in [
            ("0", "agent.workers: use 1 to 256 threads, not 0"),
            ("257", "agent.workers: use 1 to 256 threads, not 257"),
            (
                "two",
                "agent.workers: expected a whole number, found a string \"two\"",
            ),
        ] {
            let errors = errors_of(&format!("{MINIMAL}agent: {{workers: {workers}}}\n"));
            assert!(
                errors.iter().any(|e| e == expected),
                "{workers}: {errors:#?}"
            );
        }
    }

    #[test]
    fn waiter_shares_default_to_three_quarters_and_are_checked() {
        let config = Config::from_yaml(MINIMAL).unwrap();
        assert_eq!(config.lock.max_waiters, 10_000);
        assert_eq!(config.lock.max_waiters_per_uid, 7_500);
        let config = Config::from_yaml(&format!("{MINIMAL}lock: {{max_waiters: 5}}\n")).unwrap();
        assert_eq!(config.lock.max_waiters_per_uid, 4);
        let config = Config::from_yaml(&format!("{MINIMAL}lock: {{max_waiters: 1}}\n")).unwrap();
        assert_eq!(config.lock.max_waiters_per_uid, 1);
        let config = Config::from_yaml(&format!(
            "{MINIMAL}lock: {{max_waiters: 8, max_waiters_per_uid: 8}}\n"
        ))
        .unwrap();
        assert_eq!(config.lock.max_waiters_per_uid, 8);
        for (lock, expected) in [
            (
                "{max_waiters: 4, max_waiters_per_uid: 5}",
                "lock.max_waiters_per_uid: 5 is above lock.max_waiters (4)",
            ),
            (
                "{max_waiters_per_uid: 0}",
                "lock.max_waiters_per_uid: must be at least 1",
            ),
            (
                "{max_waiters_per_uid: many}",
                "lock.max_waiters_per_uid: expected a whole number, found a string \"many\"",
            ),
        ] {
            let errors = errors_of(&format!("{MINIMAL}lock: {lock}\n"));
            assert_eq!(errors, [expected], "{lock}");
        }
    }

    #[test]
    fn the_metrics_budget_defaults_to_64_and_is_checked() {
        let config = Config::from_yaml(MINIMAL).unwrap();
        assert_eq!(config.metrics.max_connections, 64);
        let config =
            Config::from_yaml(&format!("{MINIMAL}metrics: {{max_connections: 8}}\n")).unwrap();
        assert_eq!(config.metrics.max_connections, 8);
        let errors = errors_of(&format!("{MINIMAL}metrics: {{max_connections: 0}}\n"));
        assert_eq!(errors, ["metrics.max_connections: must be at least 1"]);
        let errors = errors_of(&format!("{MINIMAL}metrics: {{max_connections: 5000}}\n"));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(
            errors[0].starts_with("metrics.max_connections: 5000 is above 4096"),
            "{errors:?}"
        );
    }

    #[test]
    fn the_example_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../config.example.yaml");
        let config = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.masters.len(), 3);
    }
}
