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

/// How long the spans that follow a batch's first wait to join it, at
/// most: a batch that fills sooner is sent then.
pub const LINGER: Duration = Duration::from_millis(100);

/// How often a lingering batch looks whether it is full. Short beside
/// [`LINGER`], so a busy agent sends every [`BATCH`] spans instead of
/// keeping a linger's worth of them (several MiB at 64 clients) alive:
/// memory held that long is handed back to the OS and faulted in again on
/// every linger, which cost more CPU than encoding the spans.
pub const TICK: Duration = Duration::from_millis(10);

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
/// the task; it then looks every [`TICK`] (no wake-up or timer per span: a
/// busy agent's lock path pays only the channel's send) for the spans
/// queued since, and sends the batch once it holds [`BATCH`] spans or
/// [`LINGER`] has passed.
async fn send<E: SpanExporter>(
    exporter: E,
    mut receiver: mpsc::Receiver<SpanData>,
    failed: IntCounter,
) {
    loop {
        let mut batch = Vec::with_capacity(BATCH);
        if receiver.recv_many(&mut batch, BATCH).await == 0 {
            return;
        }
        let deadline = tokio::time::Instant::now() + LINGER;
        while batch.len() < BATCH && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(TICK).await;
            let room = BATCH - batch.len();
            // A closed queue ends the linger; what it held is in `batch`.
            if receiver.recv_many(&mut batch, room).now_or_never() == Some(0) {
                break;
            }
        }
        let count = batch.len() as u64;
        if let Err(e) = exporter.export(batch).await {
            failed.inc_by(count);
            tracing::debug!(error = %e, spans = count, "trace spans not exported");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status};
    use opentelemetry::InstrumentationScope;
    use std::sync::{Arc, Mutex};
    use std::time::SystemTime;

    /// Records the size of each batch and when it was sent.
    #[derive(Debug, Clone, Default)]
    struct Sizes(Arc<Mutex<Vec<(usize, tokio::time::Instant)>>>);

    impl SpanExporter for Sizes {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            let sent = (batch.len(), tokio::time::Instant::now());
            self.0.lock().unwrap().push(sent);
            Ok(())
        }
    }

    fn span() -> SpanData {
        SpanData {
            span_context: SpanContext::empty_context(),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "redlock.acquire".into(),
            start_time: SystemTime::UNIX_EPOCH,
            end_time: SystemTime::UNIX_EPOCH,
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: InstrumentationScope::builder("test").build(),
        }
    }

    /// A full batch goes out at the first look after it filled, not after
    /// the whole linger; the rest waits out the linger.
    #[tokio::test(start_paused = true)]
    async fn a_full_batch_is_sent_without_waiting_out_the_linger() {
        let sizes = Sizes::default();
        let counter = || IntCounter::new("c", "c").unwrap();
        let queue = Queue::start(sizes.clone(), counter(), counter());
        let started = tokio::time::Instant::now();
        for _ in 0..BATCH + 10 {
            queue.on_end(span());
        }
        tokio::time::sleep(LINGER * 3).await;
        let sent = sizes.0.lock().unwrap().clone();
        assert_eq!(sent.iter().map(|s| s.0).collect::<Vec<_>>(), [BATCH, 10]);
        assert!(sent[0].1 - started <= TICK, "{sent:?}");
        assert!(sent[1].1 - started >= LINGER, "{sent:?}");
    }
}
