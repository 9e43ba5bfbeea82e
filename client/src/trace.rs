//! The caller's trace context on every request: W3C `traceparent` and
//! `tracestate` headers, so the agent's spans join the caller's trace.
//!
//! Two sources, read when a request is built, in the caller's task:
//! - a [`TraceContext`] the caller scoped its calls in
//!   ([`TraceContext::scope`]), for callers that carry W3C trace context
//!   themselves (a traceparent taken from an incoming request, say);
//! - with the `opentelemetry` feature, the current
//!   `opentelemetry::Context`, injected through the global text-map
//!   propagator the application registered.
//!
//! A scope wins over the current OpenTelemetry context. Without either,
//! no header is sent and nothing else changes.

use std::future::Future;

use hyper::header::HeaderValue;

tokio::task_local! {
    static SCOPED: TraceContext;
}

/// A W3C trace context: a `traceparent` and, when the trace has vendor
/// state, a `tracestate`. Checked when built, so a header built from it
/// is always valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: HeaderValue,
    tracestate: Option<HeaderValue>,
}

/// What [`TraceContext::new`] refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTraceContext {
    /// Not `version-traceid-parentid-flags` in lowercase hex (2-32-16-2
    /// digits), or version `ff`.
    #[error("not a W3C traceparent: {0:?}")]
    Traceparent(String),
    /// Not printable ASCII, so not a header value.
    #[error("tracestate is not printable ASCII")]
    Tracestate,
}

impl TraceContext {
    /// A trace context from its headers' values; an empty `tracestate`
    /// counts as none.
    ///
    /// # Errors
    /// [`InvalidTraceContext`] when either is malformed.
    pub fn new(
        traceparent: impl Into<String>,
        tracestate: Option<String>,
    ) -> Result<TraceContext, InvalidTraceContext> {
        let traceparent = traceparent.into();
        if !valid_traceparent(&traceparent) {
            return Err(InvalidTraceContext::Traceparent(traceparent));
        }
        let tracestate = match tracestate.filter(|s| !s.is_empty()) {
            None => None,
            Some(s) if printable(&s) => {
                Some(HeaderValue::from_str(&s).map_err(|_| InvalidTraceContext::Tracestate)?)
            }
            Some(_) => return Err(InvalidTraceContext::Tracestate),
        };
        Ok(TraceContext {
            traceparent: HeaderValue::from_str(&traceparent)
                .map_err(|_| InvalidTraceContext::Traceparent(traceparent))?,
            tracestate,
        })
    }

    pub fn traceparent(&self) -> &str {
        // Cannot fail: built from a checked, printable ASCII string.
        self.traceparent.to_str().expect("ASCII")
    }

    pub fn tracestate(&self) -> Option<&str> {
        // Cannot fail: built from a checked, printable ASCII string.
        self.tracestate.as_ref().map(|v| v.to_str().expect("ASCII"))
    }

    /// Runs `calls` with this trace context on every request they make
    /// to the agent (in this task; a task they spawn does not inherit it).
    ///
    /// ```no_run
    /// # use redlock_client::{AcquireOptions, Client, Error, TraceContext};
    /// # async fn example(client: Client, incoming: &str) -> Result<(), Error> {
    /// let trace = TraceContext::new(incoming, None).expect("a W3C traceparent");
    /// let grant = trace.scope(client.acquire("orders-42", &AcquireOptions::new())).await?;
    /// # let _ = grant;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn scope<F: Future>(self, calls: F) -> F::Output {
        SCOPED.scope(self, calls).await
    }

    pub(crate) fn headers(&self) -> (HeaderValue, Option<HeaderValue>) {
        (self.traceparent.clone(), self.tracestate.clone())
    }
}

/// The trace context of the request being built: the scoped one, else
/// (with the feature) the current OpenTelemetry context's, else none.
pub(crate) fn current() -> Option<TraceContext> {
    if let Ok(scoped) = SCOPED.try_with(TraceContext::clone) {
        return Some(scoped);
    }
    from_opentelemetry()
}

#[cfg(not(feature = "opentelemetry"))]
fn from_opentelemetry() -> Option<TraceContext> {
    None
}

/// Injects the current context through the global propagator and keeps
/// the W3C fields, the ones the agent reads; a propagator that writes none
/// (the default no-op, or another format) sends nothing, and a malformed
/// value is dropped: tracing never fails a lock call.
#[cfg(feature = "opentelemetry")]
fn from_opentelemetry() -> Option<TraceContext> {
    use opentelemetry::propagation::Injector;

    #[derive(Default)]
    struct W3c {
        traceparent: Option<String>,
        tracestate: Option<String>,
    }
    impl Injector for W3c {
        fn set(&mut self, key: &str, value: String) {
            if key.eq_ignore_ascii_case("traceparent") {
                self.traceparent = Some(value);
            } else if key.eq_ignore_ascii_case("tracestate") {
                self.tracestate = Some(value);
            }
        }
    }

    let context = opentelemetry::Context::current();
    let mut fields = W3c::default();
    opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&context, &mut fields));
    TraceContext::new(fields.traceparent?, fields.tracestate).ok()
}

/// Version, trace id, parent id and flags in 2-32-16-2 lowercase hex
/// digits; a later version may append fields after a dash, as the W3C
/// format allows. Version `ff` is invalid.
fn valid_traceparent(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() < 55 || (b.len() > 55 && b[55] != b'-') || !printable(s) {
        return false;
    }
    let fields = b[..55].iter().enumerate().all(|(i, c)| match i {
        2 | 35 | 52 => *c == b'-',
        _ => c.is_ascii_digit() || (b'a'..=b'f').contains(c),
    });
    fields && !s.starts_with("ff")
}

fn printable(s: &str) -> bool {
    s.bytes().all(|c| (b' '..=b'~').contains(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn well_formed_trace_contexts_are_kept_and_malformed_ones_refused() {
        let t = TraceContext::new(PARENT, Some("vendor=opaque-1".into())).unwrap();
        assert_eq!(
            (t.traceparent(), t.tracestate()),
            (PARENT, Some("vendor=opaque-1"))
        );
        assert_eq!(
            TraceContext::new(PARENT, Some(String::new()))
                .unwrap()
                .tracestate(),
            None
        );
        let future_version = format!("01{}-extra", &PARENT[2..]);
        assert!(TraceContext::new(future_version, None).is_ok());
        for bad in [
            "",
            "00-xyz",
            &PARENT.to_uppercase(),
            &format!("ff{}", &PARENT[2..]),
            &format!("{PARENT}x"),
            &format!("{}\r\nInjected: 1", &PARENT[..54]),
        ] {
            assert!(
                matches!(
                    TraceContext::new(bad, None),
                    Err(InvalidTraceContext::Traceparent(_))
                ),
                "{bad:?}"
            );
        }
        assert_eq!(
            TraceContext::new(PARENT, Some("a=b\r\nc: d".into())),
            Err(InvalidTraceContext::Tracestate)
        );
    }
}
