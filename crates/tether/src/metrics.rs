//! Prometheus metrics (issue 31): the `metrics` facade's recorder for this process
//! (`metrics-exporter-prometheus`, text format 0.0.4), every series described once, and
//! `GET /metrics` — for admins on the API port, and without a token on `[telemetry]
//! metrics_listen` (a port for the scraper's network only). A scrape first sets the
//! gauges that count the present ([`tether_runtime::Runtime::refresh_gauges`]).

use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tether_runtime::Runtime;
use tether_runtime::metrics as rm;

/// Latency buckets (seconds): from a store commit to a long agent turn.
const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 900.0, 1800.0,
];
/// Group sizes (events per commit).
const EVENTS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0, 4096.0,
];

/// Installs the recorder for this process, every series labelled with `node`.
pub fn install(node: &str) -> Result<PrometheusHandle> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".to_owned()), SECONDS)
        .context("metrics buckets")?
        .set_buckets_for_metric(Matcher::Full(tether_store::GROUP_EVENTS.to_owned()), EVENTS)
        .context("metrics buckets")?
        .add_global_label("node", node)
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder).context("a metrics recorder is installed already")?;
    describe();
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep.run_upkeep();
        }
    });
    metrics::gauge!("tether_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    Ok(handle)
}

/// `GET /metrics`: the gauges refreshed, then every series.
pub fn routes(runtime: Runtime, handle: PrometheusHandle) -> Router {
    Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let (runtime, handle) = (runtime.clone(), handle.clone());
            async move {
                runtime.ops().refresh_gauges().await;
                (
                    [(
                        header::CONTENT_TYPE,
                        "text/plain; version=0.0.4; charset=utf-8",
                    )],
                    handle.render(),
                )
                    .into_response()
            }
        }),
    )
}

/// Serves [`routes`] on `addr` (no token: bind it where only the scraper reaches)
/// until `stop`.
pub async fn serve_apart(
    addr: std::net::SocketAddr,
    router: Router,
    stop: tokio_util::sync::CancellationToken,
) -> Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen for metrics on {addr}"))?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        let served = axum::serve(listener, router)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
        if let Err(e) = served {
            tracing::warn!(error = %e, "the metrics listener failed");
        }
    });
    Ok(bound)
}

/// Every series, with its help text (the README lists the same).
fn describe() {
    use tether_channels::metrics as cm;
    describe_counter!(
        rm::TURNS,
        "Turns ended, by agent, outcome (status) and error code"
    );
    describe_histogram!(
        rm::TURN_SECONDS,
        Unit::Seconds,
        "A turn's duration, by agent"
    );
    describe_histogram!(
        rm::TURN_OWN_SECONDS,
        Unit::Seconds,
        "tether's own share of a turn: its duration less the agent's start and answer"
    );
    describe_histogram!(
        rm::APPROVAL_WAIT,
        Unit::Seconds,
        "From an approval or question asked to a person's decision (kind: approval, question)"
    );
    describe_counter!(
        rm::RESUMES,
        "Strict resumes of agent sessions, by agent and outcome"
    );
    describe_counter!(
        rm::WORKTREES_REMOVED,
        "Worktree directories removed after their snapshot, by reason (archived, stale, budget)"
    );
    describe_gauge!(
        rm::WORKTREES_DISK,
        Unit::Bytes,
        "The disk tether's worktrees take, as the last clean-up measured it"
    );
    describe_counter!(
        rm::TAKEOVERS,
        "Conversations this node took over from a gone owner"
    );
    describe_counter!(
        rm::FORWARDED,
        "Commands forwarded to their owner node, by outcome"
    );
    describe_histogram!(
        rm::FORWARD_SECONDS,
        Unit::Seconds,
        "A forwarded command's round trip"
    );
    describe_gauge!(
        rm::QUEUE_DEPTH,
        "Turns queued behind a running one (cluster-wide)"
    );
    describe_gauge!(
        rm::APPROVALS_PENDING,
        "Approvals waiting for a person (cluster-wide)"
    );
    describe_gauge!(
        rm::QUESTIONS_PENDING,
        "Questions waiting for a person (cluster-wide)"
    );
    describe_gauge!(
        rm::SESSIONS,
        "Runtime sessions by status: live, dormant (cluster-wide)"
    );
    describe_gauge!(rm::LIVE_HERE, "Sessions live on this node, busy or idle");
    describe_gauge!(
        rm::AGENT_PROCESSES,
        "Agent processes on this node, by agent"
    );
    describe_gauge!(
        rm::AGENT_RSS,
        Unit::Bytes,
        "Resident memory of this node's agent processes"
    );
    describe_counter!(rm::EVICTIONS, "Sessions the pool made dormant on this node");
    describe_gauge!(
        rm::OUTBOX_BACKLOG,
        "Outbound channel messages not yet delivered"
    );
    describe_gauge!(
        rm::OUTBOX_AGE,
        Unit::Seconds,
        "Age of the oldest undelivered outbound message, by channel"
    );
    describe_gauge!(
        rm::DB_CONNECTIONS,
        "This node's database connections: in_use, idle"
    );
    describe_counter!(
        rm::FENCED,
        "Writes refused because another node took the conversation"
    );
    describe_gauge!(
        rm::NODES,
        "Live nodes of the cluster, as this node sees them"
    );
    describe_gauge!(
        rm::OWNED,
        "Conversations this node owns (its live sessions' leases)"
    );
    describe_gauge!(
        rm::LEADER,
        "1 where this node leads the channel's connection, else 0"
    );
    describe_gauge!(
        rm::READY,
        "1 while this node serves (store answers, not draining)"
    );
    describe_gauge!(rm::DRAINING, "1 while this node drains");
    describe_histogram!(
        tether_store::COMMIT_SECONDS,
        Unit::Seconds,
        "A group commit of events, start to answer"
    );
    describe_histogram!(
        tether_store::GROUP_EVENTS,
        "Events stored by one group commit"
    );
    describe_counter!(cm::MESSAGES_IN, "Messages received from a channel");
    describe_counter!(cm::MESSAGES_OUT, "Messages delivered to a channel");
    describe_counter!(
        cm::RETRIES,
        "Deliveries that failed and wait for another attempt"
    );
    describe_counter!(
        cm::GIVEN_UP,
        "Messages never delivered: refused for good or failing after the last attempt"
    );
    describe_gauge!("tether_build_info", "The tether version this node runs");
}
