//! OpenTelemetry traces, opt-in (`tracing: {otlp: URL}`): one span per run, a child per
//! MCP request and per model request, made from the records the run's journal gets (so
//! they carry exactly what the journal may: no argument values, no results, no secrets),
//! exported over OTLP/HTTP (protobuf) by `opentelemetry-otlp`.
//!
//! A collector that is slow or down costs the run nothing: finished spans go into a
//! bounded queue ([`QUEUE`]) that a thread of its own drains; a span that finds it full,
//! or whose export fails, is dropped and counted in `airlock_trace_spans_dropped_total`.

use std::sync::mpsc;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt, Tracer as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    SdkTracer, SdkTracerProvider, Span, SpanData, SpanExporter as _, SpanProcessor,
};
use prometheus_client::metrics::counter::Counter;

/// Finished spans waiting for export, at most.
pub const QUEUE: usize = 2048;
/// Spans sent in one export request, at most.
const BATCH: usize = 512;
/// One export's longest wait.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the first span of a batch waits for others. Without it, sequential calls
/// cost one export request each (encode, POST, the collector's work) on the same cores
/// as the calls; with it, at most a few requests a second, whatever the call rate.
const BATCH_DELAY: Duration = Duration::from_millis(500);

/// airlockd's tracer.
pub struct Traces {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
}

enum Msg {
    Span(Box<SpanData>),
    Flush(mpsc::Sender<()>),
}

/// The bounded hand-off from the runs' tasks to the exporting thread.
#[derive(Debug)]
struct Queue {
    tx: mpsc::SyncSender<Msg>,
    dropped: Counter,
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if self.tx.try_send(Msg::Span(Box::new(span))).is_err() {
            self.dropped.inc();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        let (t, r) = mpsc::channel();
        if self.tx.send(Msg::Flush(t)).is_ok() {
            let _ = r.recv_timeout(EXPORT_TIMEOUT * 2);
        }
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        self.force_flush()
    }
}

impl Traces {
    /// Start exporting to `otlp` (`<otlp>/v1/traces`); the export runs on `runtime` from a
    /// thread of its own. `dropped` counts spans that never reached the collector.
    pub fn start(
        otlp: &str,
        runtime: tokio::runtime::Handle,
        dropped: Counter,
    ) -> Result<Traces, String> {
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name("airlockd")
            .build();
        let mut exporter = {
            let _entered = runtime.enter();
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(format!("{otlp}/v1/traces"))
                .with_timeout(EXPORT_TIMEOUT)
                .build()
                .map_err(|e| format!("tracing.otlp: {e}"))?
        };
        // The queue stands between the provider and the exporter: the exporter is told the
        // resource itself.
        exporter.set_resource(&resource);
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let d2 = dropped.clone();
        std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || export_loop(rx, exporter, runtime, d2))
            .map_err(|e| format!("tracing: cannot start the export thread: {e}"))?;
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Queue { tx, dropped })
            .with_resource(resource)
            .build();
        let tracer = opentelemetry::trace::TracerProvider::tracer(&provider, "airlock");
        Ok(Traces { provider, tracer })
    }

    /// The span of one run, open until [`RunSpan::end`].
    pub fn run(&self, run: &str, role: &str, instance: &str) -> RunSpan {
        let span = self
            .tracer
            .span_builder(format!("run {role}"))
            .with_kind(SpanKind::Internal)
            .with_attributes(vec![
                KeyValue::new("airlock.run", run.to_string()),
                KeyValue::new("airlock.role", role.to_string()),
                KeyValue::new("airlock.instance", instance.to_string()),
            ])
            .start(&self.tracer);
        RunSpan {
            cx: Context::new().with_span(span),
            tracer: self.tracer.clone(),
        }
    }

    /// Export what is queued (bounded wait).
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
    }
}

fn export_loop(
    rx: mpsc::Receiver<Msg>,
    exporter: opentelemetry_otlp::SpanExporter,
    runtime: tokio::runtime::Handle,
    dropped: Counter,
) {
    while let Ok(first) = rx.recv() {
        let mut batch = Vec::new();
        let mut flushes = Vec::new();
        // Gather until the batch is full, its delay is over, or a flush is asked for.
        let due = std::time::Instant::now() + BATCH_DELAY;
        let mut next = Some(first);
        while let Some(m) = next.take() {
            match m {
                Msg::Span(s) => batch.push(*s),
                Msg::Flush(t) => flushes.push(t),
            }
            if batch.len() < BATCH && flushes.is_empty() {
                let left = due.saturating_duration_since(std::time::Instant::now());
                next = rx.recv_timeout(left).ok();
            }
        }
        if !batch.is_empty() {
            let n = batch.len() as u64;
            let sent = runtime.block_on(async {
                tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(batch)).await
            });
            if !matches!(sent, Ok(Ok(()))) {
                dropped.inc_by(n);
            }
        }
        for f in flushes {
            let _ = f.send(());
        }
    }
}

/// What an MCP request's span says (labels already bounded: see [`super::labels`]).
pub struct McpCall<'a> {
    pub method: &'a str,
    pub tool: &'a str,
    pub connector: &'a str,
    pub session: Option<&'a str>,
    pub protocol: Option<&'a str>,
    pub request_id: Option<&'a str>,
    pub allow: bool,
    pub rule: &'a str,
    pub is_error: bool,
    pub duration_ms: u64,
}

/// What a model request's span says.
pub struct ModelCall<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub allow: bool,
    pub rule: &'a str,
    pub duration_ms: u64,
}

/// A run's span, parent of its calls' spans.
pub struct RunSpan {
    cx: Context,
    tracer: SdkTracer,
}

fn started(duration_ms: u64) -> (SystemTime, SystemTime) {
    let end = SystemTime::now();
    (end - Duration::from_millis(duration_ms), end)
}

impl RunSpan {
    pub fn mcp(&self, c: &McpCall<'_>) {
        let (start, end) = started(c.duration_ms);
        let mut attrs = vec![
            KeyValue::new("mcp.method.name", c.method.to_string()),
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", c.tool.to_string()),
            KeyValue::new("airlock.connector", c.connector.to_string()),
            KeyValue::new("airlock.decision", super::labels::decision(c.allow)),
            KeyValue::new("airlock.rule", c.rule.to_string()),
        ];
        for (k, v) in [
            ("mcp.session.id", c.session),
            ("mcp.protocol.version", c.protocol),
            ("jsonrpc.request.id", c.request_id),
        ] {
            if let Some(v) = v {
                attrs.push(KeyValue::new(k, v.to_string()));
            }
        }
        if c.allow && c.is_error {
            attrs.push(KeyValue::new("error.type", "tool_error"));
        }
        let mut span = self
            .tracer
            .span_builder(format!("{} {}", c.method, c.tool))
            .with_kind(SpanKind::Server)
            .with_start_time(start)
            .with_attributes(attrs)
            .start_with_context(&self.tracer, &self.cx);
        span.end_with_timestamp(end);
    }

    pub fn model(&self, m: &ModelCall<'_>) {
        let (start, end) = started(m.duration_ms);
        let attrs = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", m.provider.to_string()),
            KeyValue::new("gen_ai.request.model", m.model.to_string()),
            KeyValue::new("gen_ai.usage.input_tokens", m.input_tokens as i64),
            KeyValue::new("gen_ai.usage.output_tokens", m.output_tokens as i64),
            KeyValue::new("airlock.decision", super::labels::decision(m.allow)),
            KeyValue::new("airlock.rule", m.rule.to_string()),
        ];
        let mut span = self
            .tracer
            .span_builder(format!("chat {}", m.model))
            .with_kind(SpanKind::Client)
            .with_start_time(start)
            .with_attributes(attrs)
            .start_with_context(&self.tracer, &self.cx);
        span.end_with_timestamp(end);
    }

    /// The run is over.
    pub fn end(&self) {
        self.cx.span().end();
    }
}
