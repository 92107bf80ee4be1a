//! Logs and traces (issue 31): logs to stderr as text or JSON (`[telemetry] log_format`;
//! JSON lines carry the spans they are in, with the trace id), filtered by `TETHER_LOG`
//! (else `RUST_LOG`); with `[telemetry] otlp_endpoint`, every span also goes to an
//! OpenTelemetry collector over OTLP/HTTP (protobuf), batched on a thread of its own.

use std::io::IsTerminal;

use anyhow::{Context, Result};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config_telemetry::{LogFormat, TelemetrySettings};
use crate::paths;

/// The default log filter: `info`, without rmcp's per-request "Service initialized"
/// dumps and PostgreSQL's notices (a migrations notice on every cluster start) below
/// warnings (issue 24 S10, first use 6).
const DEFAULT_LOG: &str = "info,rmcp=warn,sqlx::postgres::notice=warn";

/// Keeps the trace exporter; dropping it sends what is still batched.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take()
            && let Err(e) = p.shutdown()
        {
            eprintln!("warning: the last traces were not sent: {e}");
        }
    }
}

fn filter() -> EnvFilter {
    let spec = paths::process_env("TETHER_LOG")
        .or_else(|| paths::process_env("RUST_LOG"))
        .unwrap_or_else(|| DEFAULT_LOG.to_owned());
    EnvFilter::try_new(&spec).unwrap_or_else(|e| {
        eprintln!("warning: ignoring invalid log filter {spec:?}: {e}");
        EnvFilter::new(DEFAULT_LOG)
    })
}

/// Installs the logs (and, when configured, the traces) for this process. `settings`:
/// `serve`'s `[telemetry]`; other commands log text only.
pub fn init(settings: Option<&TelemetrySettings>, node: Option<&str>) -> Result<Telemetry> {
    let format = settings.map_or(LogFormat::Text, |s| s.log_format);
    let logs = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let (provider, traces) = match settings.and_then(|s| s.otlp_endpoint.as_deref()) {
        // JSON logs without a collector: traces are made (ids, propagation to the other
        // nodes) but not sent, so each log line still names its trace.
        None if format == LogFormat::Json => {
            let provider = SdkTracerProvider::builder().build();
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("tether"))
                .boxed();
            (Some(provider), Some(layer))
        }
        None => (None, None),
        Some(endpoint) => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(format!("{endpoint}/v1/traces"))
                .build()
                .context("cannot set up the OTLP exporter")?;
            let mut resource = opentelemetry_sdk::Resource::builder().with_service_name(
                settings.map_or_else(|| "tether".to_owned(), |s| s.service_name.clone()),
            );
            if let Some(node) = node {
                resource = resource.with_attribute(opentelemetry::KeyValue::new(
                    "service.instance.id",
                    node.to_owned(),
                ));
            }
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource.build())
                .build();
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("tether"))
                .boxed();
            (Some(provider), Some(layer))
        }
    };
    tracing_subscriber::registry()
        .with(filter())
        .with(logs)
        .with(traces)
        .try_init()
        .context("cannot install the log subscriber")?;
    Ok(Telemetry { provider })
}
