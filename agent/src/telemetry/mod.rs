//! OpenTelemetry traces of the lock path: the caller's W3C trace context
//! read from each request, the spans of acquires, holds, leaderships,
//! extends and releases ([`spans`]), and their way to the collector
//! ([`export`]: a bounded queue that never makes a lock call wait).
//!
//! Off (no `tracing.otlp_endpoint`), [`Telemetry`] holds nothing: no
//! header is parsed, no span or trail is made, and the lock path runs as
//! it does without this module. On, a request is traced when its caller's
//! `traceparent` says it is sampled, or, without one, by
//! `tracing.sample_ratio`; an unsampled request gets no span here either.
//! Span names and attributes are documented in `docs/tracing.md`.

pub mod export;
pub mod spans;

use hyper::header::HeaderName;
use hyper::HeaderMap;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider, SpanExporter};
use opentelemetry_sdk::Resource as OtelResource;

use crate::config::TracingConfig;
use crate::metrics::Metrics;
pub use spans::{Kind, Traced, Watch};

/// `service.name` of the agent's spans.
pub const SERVICE: &str = "redlock-agent";

/// The attributes a span has room for from its start: an acquire's or a
/// campaign's (`docs/tracing.md`) when it got its lock at once or waited
/// only for its turn; one that waited behind a holder and heard refusals
/// grows once. Every span of a busy agent lives until its batch is sent,
/// so room it never uses is memory churned for nothing.
const ATTRIBUTES: usize = 8;

/// Room for the other spans' attributes (a release's four at most).
const ATTRIBUTES_FEW: usize = 4;

/// The W3C Trace Context header that carries the caller's span.
static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// How long one export to the collector may take before its batch is
/// given up (and counted as dropped).
pub const EXPORT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("tracing.otlp_endpoint: the exporter could not be built: {0}")]
    Exporter(String),
    #[error("tracing: no tokio runtime to send spans from")]
    NoRuntime,
}

/// The agent's tracer, or nothing when tracing is off.
#[derive(Debug, Default)]
pub struct Telemetry {
    on: Option<On>,
}

#[derive(Debug)]
struct On {
    /// Kept so the queue's task lives as long as the agent.
    _provider: SdkTracerProvider,
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
}

impl Telemetry {
    /// Tracing as `config` says, for the agent named `agent` (its
    /// `service.instance.id`), in the pod named by `POD_NAME` if set (the
    /// Helm chart sets it from the downward API). Spawns the export task on
    /// the running runtime.
    ///
    /// # Errors
    /// When the exporter cannot be built or no runtime is running.
    pub fn new(
        config: &TracingConfig,
        agent: &str,
        metrics: &Metrics,
    ) -> Result<Telemetry, TelemetryError> {
        let Some(endpoint) = &config.otlp_endpoint else {
            return Ok(Telemetry::default());
        };
        tokio::runtime::Handle::try_current().map_err(|_| TelemetryError::NoRuntime)?;
        let client =
            opentelemetry_http::hyper::HyperClient::with_default_connector(EXPORT_TIMEOUT, None);
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint.traces_url())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let mut attributes = vec![
            KeyValue::new("service.instance.id", agent.to_string()),
            KeyValue::new("redlock.agent", agent.to_string()),
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
        ];
        if let Some(pod) = std::env::var("POD_NAME").ok().filter(|p| !p.is_empty()) {
            attributes.push(KeyValue::new("k8s.pod.name", pod));
        }
        let resource = OtelResource::builder_empty()
            .with_service_name(SERVICE)
            .with_attributes(attributes)
            .build();
        exporter.set_resource(&resource);
        let dropped = &metrics.trace_spans_dropped;
        let queue = export::Queue::start(
            exporter,
            dropped.with_label_values(&["queue_full"]),
            dropped.with_label_values(&["export_failed"]),
        );
        let provider = SdkTracerProvider::builder()
            .with_span_processor(queue)
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                config.sample_ratio,
            ))))
            .with_resource(resource)
            .build();
        let tracer = provider.tracer(SERVICE);
        Ok(Telemetry {
            on: Some(On {
                _provider: provider,
                tracer,
                propagator: TraceContextPropagator::new(),
            }),
        })
    }

    pub fn is_on(&self) -> bool {
        self.on.is_some()
    }

    /// The caller's trace context from the `traceparent` and `tracestate`
    /// headers; [`Caller::default`] (no trace) when tracing is off (nothing
    /// is read then). A missing or malformed header gives an empty context:
    /// the request is then a trace of its own, sampled by ratio.
    pub fn caller(&self, headers: &HeaderMap) -> Caller {
        Caller(self.on.as_ref().map(|on| {
            // Most requests carry no trace: found by a name made once,
            // not parsed again for every request as the propagator's
            // lookups by string are.
            if !headers.contains_key(&TRACEPARENT) {
                return Context::new();
            }
            on.propagator
                .extract(&opentelemetry_http::HeaderExtractor(headers))
        }))
    }

    /// Starts span `name` for `kind` on `resource` as a child of
    /// `caller`'s span; `None` when tracing is off or the span is not
    /// sampled (then nothing more is recorded for it).
    pub fn start(
        &self,
        caller: &Caller,
        name: &'static str,
        kind: Kind,
        resource: &str,
    ) -> Option<Traced> {
        let (on, parent) = (self.on.as_ref()?, caller.0.as_ref()?);
        // A caller that said "not sampled": nothing is built for it.
        let span = parent.span();
        if span.span_context().is_valid() && !span.span_context().is_sampled() {
            return None;
        }
        // Room for what the span is given later: the vector is the span's
        // own, and growing it one attribute at a time is a copy each time.
        let room = match name {
            "redlock.acquire" | "redlock.campaign" => ATTRIBUTES,
            _ => ATTRIBUTES_FEW,
        };
        let mut attributes = Vec::with_capacity(room);
        attributes.push(KeyValue::new("redlock.resource", resource.to_string()));
        attributes.push(KeyValue::new("redlock.kind", kind.as_str()));
        let span = on
            .tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes)
            .start_with_context(&on.tracer, parent);
        use opentelemetry::trace::Span as _;
        span.is_recording().then(|| Traced::new(span, kind))
    }

    /// A watch over a stream's events that traces the hold or leadership
    /// they tell; `None` when off. `acquire` is the span of the hold's
    /// acquire, or of the campaign (ended by the watch when elected). The
    /// hold's span is a sibling of `acquire` under the caller's span, or
    /// its child when the request came without one (so that both are in
    /// one trace); an unsampled request has neither.
    pub fn watch(
        &self,
        caller: &Caller,
        kind: Kind,
        resource: &str,
        acquire: Option<Traced>,
    ) -> Option<Watch> {
        let on = self.on.as_ref()?;
        let acquire = acquire?;
        let parent = match &caller.0 {
            Some(context) if context.has_active_span() => context.clone(),
            _ => Context::new().with_remote_span_context(acquire.span_context()),
        };
        Some(Watch::new(
            on.tracer.clone(),
            kind,
            resource.to_string(),
            parent,
            acquire,
        ))
    }
}

/// A request's place in its caller's trace, read from its headers by
/// [`Telemetry::caller`]: the spans started while serving it are its
/// children. Handed to the handlers rather than attached to the task, so
/// that serving an untraced request and a traced one costs the same
/// apart from the spans themselves.
#[derive(Debug, Default)]
pub struct Caller(Option<Context>);
