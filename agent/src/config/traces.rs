//! The `tracing` section: where the agent's OpenTelemetry spans go
//! (`otlp_endpoint`, off when unset) and which share of the requests that
//! carry no trace context of their own is traced (`sample_ratio`). The
//! endpoint may carry a user and a password no log or error shows, so a URL
//! with either is refused with its value not shown, and a good one is held
//! as a [`TraceEndpoint`] that prints its scheme, host, port and path only.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use super::yaml::Section;
use super::FieldError;

/// `tracing`: OpenTelemetry traces (see `docs/tracing.md`).
#[derive(Debug, Clone, Serialize)]
pub struct TracingConfig {
    /// The OTLP/HTTP collector; spans are posted to `<endpoint>/v1/traces`.
    /// `None`: tracing is off, and the lock path records nothing.
    pub otlp_endpoint: Option<TraceEndpoint>,
    /// The share of requests without a `traceparent` that are traced, 0 to 1;
    /// a request with one follows its caller's sampled flag.
    pub sample_ratio: f64,
}

impl Default for TracingConfig {
    fn default() -> Self {
        TracingConfig {
            otlp_endpoint: None,
            sample_ratio: DEFAULT_SAMPLE_RATIO,
        }
    }
}

/// `tracing.sample_ratio` by default: every request, since an agent's spans
/// are few (one or two per lock call) and the caller's own sampling decides
/// for the requests that carry a trace context.
pub const DEFAULT_SAMPLE_RATIO: f64 = 1.0;

/// An `http://` collector URL without user, password, query or fragment;
/// it prints as it was written, with a trailing `/` dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct TraceEndpoint(String);

impl TraceEndpoint {
    /// Checks `text` as a collector's base URL.
    ///
    /// # Errors
    /// A message for the field when it is not an `http://` URL with a host,
    /// or carries a user, a password, a query or a fragment. A value that
    /// may hold a password (it has an `@`) is not quoted in the message.
    pub fn parse(text: &str) -> Result<TraceEndpoint, String> {
        let shown = if text.contains('@') {
            "(not shown: it may hold a password)".to_string()
        } else {
            format!("{text:?}")
        };
        let url = url::Url::parse(text.trim()).map_err(|e| {
            format!("not a URL ({e}): {shown}; write e.g. \"http://127.0.0.1:4318\"")
        })?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!(
                "must not carry a user or password: {shown}; the agent sends no credentials to \
                 the collector (run one beside it)"
            ));
        }
        match url.scheme() {
            "http" => {}
            "https" => {
                return Err(format!(
                    "https is not supported: {shown}; send to a collector beside the agent over \
                     http (it can forward over TLS)"
                ))
            }
            other => return Err(format!("not an http:// URL (scheme {other:?}): {shown}")),
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(format!("has no host: {shown}"));
        }
        if url.query().is_some() || url.fragment().is_some() {
            return Err(format!("must not have a query or fragment: {shown}"));
        }
        Ok(TraceEndpoint(
            url.as_str().trim_end_matches('/').to_string(),
        ))
    }

    /// The URL spans are posted to: the OTLP/HTTP path under the endpoint,
    /// as a collector's port 4318 expects.
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.0)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TraceEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TraceEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl Serialize for TraceEndpoint {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

/// Reads `tracing` with its checks.
pub(super) fn read_tracing(tree: Value, errors: &mut Vec<FieldError>) -> TracingConfig {
    let mut s = Section::new("tracing", tree, errors);
    let otlp_endpoint = s
        .take_secret::<String>("otlp_endpoint", "a URL like \"http://127.0.0.1:4318\"")
        .and_then(|text| match TraceEndpoint::parse(&text) {
            Ok(endpoint) => Some(endpoint),
            Err(message) => {
                s.error("otlp_endpoint", message);
                None
            }
        });
    let sample_ratio = s
        .take::<f64>("sample_ratio", "a number from 0.0 to 1.0")
        .unwrap_or(DEFAULT_SAMPLE_RATIO);
    if !(0.0..=1.0).contains(&sample_ratio) {
        s.error(
            "sample_ratio",
            format!("{sample_ratio} is not from 0.0 to 1.0"),
        );
    }
    s.finish();
    TracingConfig {
        otlp_endpoint,
        sample_ratio,
    }
}

#[cfg(test)]
mod tests {
    use super::TraceEndpoint;

    #[test]
    fn endpoint_takes_http_and_drops_the_trailing_slash() {
        let e = TraceEndpoint::parse("http://otel-collector:4318/").unwrap();
        assert_eq!(e.traces_url(), "http://otel-collector:4318/v1/traces");
    }

    #[test]
    fn endpoint_with_a_password_is_refused_without_showing_it() {
        let message = TraceEndpoint::parse("http://u:hunter2@collector:4318").unwrap_err();
        assert!(message.contains("user or password"), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[test]
    fn endpoint_refuses_other_schemes_and_queries() {
        assert!(TraceEndpoint::parse("https://c:4318").is_err());
        assert!(TraceEndpoint::parse("grpc://c:4317").is_err());
        assert!(TraceEndpoint::parse("http://c:4318?x=1").is_err());
        assert!(TraceEndpoint::parse("not a url").is_err());
    }
}
