//! The span queue between the lock path and the collector: a bounded
//! channel the SDK's span end writes to without waiting, and one task on the
//! agent's runtime that sends what queued, in batches, through the OTLP
//! HTTP/protobuf exporter.
//!
//! ## Behavior
//! - A span's end never waits: a full queue drops the span and counts it
//!   (`redlock_trace_spans_dropped_total{reason="queue_full"}`).
//! - One request is in flight at a time, bounded by the exporter's timeout;
//!   a collector that refuses (HTTP 503) or does not answer loses that
//!   batch (`reason="export_failed"`), and the next batch is tried as
//!   usual: no retry queue grows behind a collector that is down.
//! - The task ends when the agent drops its tracer provider (the channel
//!   closes), after sending what was still queued.

use std::time::Duration;

use futures::FutureExt as _;
use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use prometheus::IntCounter;
use tokio::sync::mpsc;

/// Spans that may wait for the collector; past it they are dropped. Above
/// what a busy agent ends in a [`LINGER`] (two spans per lock cycle), a few
/// MiB at most.
pub const QUEUE: usize = 8192;

/// Spans sent in one request to the collector.
pub const BATCH: usize = 512;

/// How long the spans that follow a batch's first wait to join it.
pub const LINGER: Duration = Duration::from_millis(100);

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

/// Sends batches until the queue closes. The first span of a batch wakes
/// the task; it then sleeps [`LINGER`] while spans queue (no wake-up or
/// timer per span: a busy agent's lock path pays only the channel's send)
/// and takes every queued span, sent in requests of up to [`BATCH`].
async fn send<E: SpanExporter>(
    exporter: E,
    mut receiver: mpsc::Receiver<SpanData>,
    failed: IntCounter,
) {
    let mut queued = Vec::with_capacity(BATCH);
    while receiver.recv_many(&mut queued, BATCH).await > 0 {
        tokio::time::sleep(LINGER).await;
        while receiver
            .recv_many(&mut queued, QUEUE)
            .now_or_never()
            .unwrap_or(0)
            > 0
        {}
        while !queued.is_empty() {
            let rest = queued.split_off(queued.len().min(BATCH));
            let batch = std::mem::replace(&mut queued, rest);
            let count = batch.len() as u64;
            if let Err(e) = exporter.export(batch).await {
                failed.inc_by(count);
                tracing::debug!(error = %e, spans = count, "trace spans not exported");
            }
        }
    }
}
