//! `[telemetry]` of the config file (issue 31): the Prometheus endpoint, OpenTelemetry
//! traces over OTLP (off by default) and the log format.
//!
//! ```toml
//! [telemetry]
//! metrics_listen = "0.0.0.0:9464"            # Prometheus at GET /metrics here, without a token
//!                                            # (also at GET /metrics on the API port, for admins)
//! otlp_endpoint = "http://collector:4318"    # OTLP/HTTP (protobuf) traces to <endpoint>/v1/traces
//! service_name = "tether"                    # service.name of the traces
//! log_format = "json"                        # "text" (default) or "json" (with the trace id)
//! ```
//!
//! `TETHER_OTLP_ENDPOINT` and `TETHER_LOG_FORMAT` override the file.

use std::net::SocketAddr;

use anyhow::{Result, bail};
use serde::Deserialize;

/// `[telemetry]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelemetryFile {
    pub metrics_listen: Option<String>,
    pub otlp_endpoint: Option<String>,
    pub service_name: Option<String>,
    pub log_format: Option<String>,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    /// One JSON object per line, with the current span's trace id.
    Json,
}

/// `[telemetry]` resolved.
#[derive(Debug, Clone, Default)]
pub struct TelemetrySettings {
    pub metrics_listen: Option<SocketAddr>,
    pub otlp_endpoint: Option<String>,
    pub service_name: String,
    pub log_format: LogFormat,
}

pub fn resolve(
    file: Option<TelemetryFile>,
    env_endpoint: Option<String>,
    env_format: Option<String>,
) -> Result<TelemetrySettings> {
    let file = file.unwrap_or_default();
    let metrics_listen = match file.metrics_listen {
        None => None,
        Some(a) => Some(a.parse::<SocketAddr>().map_err(|e| {
            anyhow::anyhow!("[telemetry] metrics_listen {a:?} is not an address:port ({e})")
        })?),
    };
    let otlp_endpoint = env_endpoint
        .filter(|e| !e.trim().is_empty())
        .or(file.otlp_endpoint);
    if let Some(e) = &otlp_endpoint {
        let url = url::Url::parse(e)
            .map_err(|err| anyhow::anyhow!("[telemetry] otlp_endpoint {e:?}: {err}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            bail!("[telemetry] otlp_endpoint {e:?} must be http:// or https:// (OTLP over HTTP)");
        }
    }
    let log_format = match env_format.or(file.log_format).as_deref() {
        None | Some("text") => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some(other) => bail!("[telemetry] log_format {other:?}: \"text\" or \"json\""),
    };
    Ok(TelemetrySettings {
        metrics_listen,
        otlp_endpoint: otlp_endpoint.map(|e| e.trim_end_matches('/').to_owned()),
        service_name: file.service_name.unwrap_or_else(|| "tether".to_owned()),
        log_format,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_off_and_bad_values_name_the_key() {
        let s = resolve(None, None, None).unwrap();
        assert!(s.metrics_listen.is_none() && s.otlp_endpoint.is_none());
        assert_eq!(s.log_format, LogFormat::Text);
        let bad = TelemetryFile {
            metrics_listen: Some("nowhere".into()),
            ..Default::default()
        };
        assert!(
            resolve(Some(bad), None, None)
                .unwrap_err()
                .to_string()
                .contains("metrics_listen")
        );
        let grpc = TelemetryFile {
            otlp_endpoint: Some("grpc://x:4317".into()),
            ..Default::default()
        };
        assert!(resolve(Some(grpc), None, None).is_err());
        assert!(resolve(None, None, Some("yaml".into())).is_err());
        let env = resolve(None, Some("http://c:4318/".into()), Some("json".into())).unwrap();
        assert_eq!(env.otlp_endpoint.as_deref(), Some("http://c:4318"));
        assert_eq!(env.log_format, LogFormat::Json);
    }
}
