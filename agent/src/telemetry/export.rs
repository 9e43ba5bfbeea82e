//! The span queue between the lock path and the collector: a bounded
//! channel the SDK's span end writes to without waiting, and one task on the
//! agent's runtime that sends what queued, in batches, through the OTLP
//! HTTP/protobuf exporter.
//!
//! ## Behavior
//! - A span's end never waits: a full queue drops the span and counts it
//!   (`redlock_trace_spans_dropped_total{reason="queue_full"}`).
//! - One batch is in flight at a time, bounded by the exporter's timeout;
//!   a collector that refuses (HTTP 503) or does not answer loses that
//!   batch (`reason="export_failed"`), and the next batch is tried as
//!   usual: no retry queue grows behind a collector that is down.
//! - The task ends when the agent drops its tracer provider (the channel
//!   closes), after sending what was still queued.

use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus::IntCounter;
use tokio::sync::mpsc;

/// Spans that may wait for the collector; past it they are dropped. A few
/// seconds of a busy agent's spans, a few MiB at most.
pub const QUEUE: usize = 4096;

/// Spans sent in one request to the collector.
pub const BATCH: usize = 512;

/// How long a span may wait in the queue for a batch to fill.
pub const LINGER: Duration = Duration::from_secs(1);

/// The SDK's span processor: hands each ended span to the queue.
#[derive(Debug)]
pub struct Queue {
    spans: mpsc::Sender<SpanData>,
    full: IntCounter,
}

impl Queue {
    /// A queue whose task sends through `exporter`, counting spans lost in
    /// `full` (the queue was full) and `failed` (the export failed). Spawns
    /// the task on the running tokio runtime.
    pub fn start<E>(exporter: E, full: IntCounter, failed: IntCounter) -> Queue
    where
        E: SpanExporter + 'static,
    {
        let (spans, receiver) = mpsc::channel(QUEUE);
        tokio::spawn(send(exporter, receiver, failed));
        Queue { spans, full }
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if self.spans.try_send(span).is_err() {
            self.full.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Sends batches until the queue closes: a batch goes once it is full or
/// its first span has waited [`LINGER`].
async fn send<E: SpanExporter>(
    exporter: E,
    mut receiver: mpsc::Receiver<SpanData>,
    failed: IntCounter,
) {
    let mut batch = Vec::with_capacity(BATCH);
    while let Some(first) = receiver.recv().await {
        batch.push(first);
        let deadline = tokio::time::Instant::now() + LINGER;
        while batch.len() < BATCH {
            match tokio::time::timeout_at(deadline, receiver.recv()).await {
                Ok(Some(span)) => batch.push(span),
                Ok(None) | Err(_) => break,
            }
        }
        let sent = std::mem::replace(&mut batch, Vec::with_capacity(BATCH));
        let count = sent.len() as u64;
        if let Err(e) = exporter.export(sent).await {
            failed.inc_by(count);
            tracing::debug!(error = %e, spans = count, "trace spans not exported");
        }
    }
}
