//! `tether serve`: open the store, start the runtime and the channels, serve the API
//! until SIGINT, SIGTERM or `tether drain`, drain (issue 31), then stop the agents.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, Result};
use tether_runtime::Runtime;
use tether_server::{AuthConfig, HostPolicy, InstanceId};

use crate::config::Settings;
use crate::daemon_record::{self, DaemonRecord, TokenSource};
use crate::{datadir, token, warnings};

/// How long stopping the agents may take before the process exits anyway.
const RUNTIME_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn run(settings: Settings) -> Result<()> {
    settings.check_directories()?;
    let mut signals = Signals::register()?;
    // Own the data dir before anything in it is touched: a second daemon must not run
    // recovery on a live store or take over its MCP socket.
    datadir::prepare(&settings.data_dir)?;
    let _lock = datadir::lock(&settings.data_dir)?;
    for warning in warnings::risky_settings(&settings) {
        tracing::warn!("{warning}");
    }
    let token = token::resolve(&settings)?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    let addr = listener
        .local_addr()
        .context("cannot read the bound address")?;

    let store = datadir::open_configured_store(&settings).await?;
    // Stable across restarts of this data directory: the node's id in the cluster.
    let node_id = datadir::node_id(&settings.data_dir)?;
    let prometheus = crate::metrics::install(node_id.as_str())?;
    let (runtime_config, mcp_socket) =
        crate::mcp_cmd::runtime_config(&settings, &node_id, Some(addr));
    let runtime = Runtime::start(runtime_config, store.clone())
        .await
        .context("cannot start the runtime")?;
    // Other nodes' commits reach this node's followers (PostgreSQL; none on SQLite).
    let _tail = runtime
        .follow_other_nodes()
        .await
        .context("cannot follow the other nodes' commits")?;
    let mcp_stop = crate::mcp_cmd::serve_socket(mcp_socket, &runtime);
    // This node in the store's node registry, under its stable id. Before the channels:
    // their leader leases hold only while this node's lease does.
    let membership = runtime
        .join_cluster(addr.to_string())
        .await
        .context("cannot register this node in the store")?;
    let cluster_node = tether_channels::ClusterNode {
        id: node_id.clone(),
        lease_ttl: settings.lease_ttl,
    };
    let channels = tether_channels::Channels::start(
        runtime.clone(),
        store.clone(),
        settings.channels.clone(),
        cluster_node,
    )
    .await
    .context("cannot start the channels")?;
    let token_source = match settings.token_override {
        Some(_) => TokenSource::Environment,
        None => TokenSource::File,
    };
    let record = DaemonRecord::new(addr, token_source);
    // Prometheus: for admins on the API port, for the scraper on its own port.
    let metrics_routes = crate::metrics::routes(runtime.clone(), prometheus);
    let metrics_stop = tokio_util::sync::CancellationToken::new();
    if let Some(at) = settings.telemetry.metrics_listen {
        let bound =
            crate::metrics::serve_apart(at, metrics_routes.clone(), metrics_stop.clone()).await?;
        tracing::info!("metrics at http://{bound}/metrics");
    }
    let extra = tether_server::ExtraRoutes {
        protected: Some(channels.api_routes().merge(metrics_routes)),
        public: Some(channels.hook_routes()),
        openapi: Some(tether_channels::openapi()),
    };
    // A sign-in link for the web page; with the token only on an interactive terminal, so
    // captured output (service logs) never holds the secret.
    let web_link = if std::io::stdout().is_terminal() {
        format!("http://{addr}/#token={token}")
    } else {
        format!("http://{addr}/ (sign in with the API token)")
    };
    let hosts = HostPolicy {
        listen: Some(addr),
        allowed_hosts: settings.server.allowed_hosts.clone(),
    };
    let mut limits = settings.server.limits;
    limits.max_connections = connection_cap(limits.max_connections);
    // An upload carries at most one message's files, plus the multipart framing.
    limits.upload_limit =
        usize::try_from(settings.attachments.max_message_bytes).unwrap_or(usize::MAX) + 1024 * 1024;
    let router = tether_server::router_with(
        runtime.clone(),
        AuthConfig {
            token,
            oidc: settings.oidc.clone(),
        },
        limits,
        hosts,
        extra,
    )
    .layer(axum::Extension(InstanceId(record.instance_id.clone())));
    // Written before the address is printed, so whoever reads that line finds it;
    // removed when this function returns.
    let _published = daemon_record::publish(&settings.data_dir, &record)?;

    // The first line is read by scripts and tests: keep its shape.
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "tether listening on http://{addr}");
    let _ = writeln!(stdout, "data dir: {}", settings.data_dir.display());
    let _ = match token_source {
        TokenSource::File => writeln!(stdout, "token: run `tether token`"),
        TokenSource::Environment => writeln!(stdout, "token: TETHER_TOKEN (from the environment)"),
    };
    let _ = writeln!(stdout, "web page: {web_link}");
    let _ = stdout.flush();
    drop(stdout);
    tracing::info!(%addr, data_dir = %settings.data_dir.display(), "tether is serving");

    // A signal or `tether drain` drains the node (issue 31): no new work here, the
    // channels' leases handed over, running turns given `drain_grace` to finish (a
    // second signal stops at once); the HTTP server serves until then (approvals,
    // streams). Delegation waits end then, not after the HTTP server's grace.
    let stopping = runtime.clone();
    let hand_over = channels.hand_over();
    let grace = settings.server.drain_grace;
    let shutdown = async move {
        tokio::select! {
            () = signals.recv() => {}
            () = stopping.ops().drain_started() => tracing::info!("asked to drain"),
        }
        stopping.ops().begin_drain().await;
        hand_over.now();
        tokio::select! {
            _ = stopping.ops().drained(grace) => {}
            () = signals.recv() => tracing::warn!("a second signal: stopping now"),
        }
        stopping.begin_shutdown();
    };
    let served = tether_server::serve(listener, router, limits, shutdown).await;
    channels.shutdown();
    mcp_stop.cancel();
    metrics_stop.cancel();
    tracing::info!("stopping agent sessions");
    if tokio::time::timeout(RUNTIME_SHUTDOWN_TIMEOUT, runtime.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("agent sessions did not stop within {RUNTIME_SHUTDOWN_TIMEOUT:?}");
    }
    membership.leave().await;
    served.context("the HTTP server failed")?;
    tracing::info!("stopped");
    Ok(())
}

/// SIGINT and SIGTERM, registered at start (so a signal that arrives right after
/// start-up is not fatal).
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn register() -> Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
        })
    }

    /// The next of them.
    async fn recv(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => tracing::info!("received SIGINT"),
            _ = self.terminate.recv() => tracing::info!("received SIGTERM"),
        }
    }
}

/// Raises the process's open-file limit to its hard limit where allowed, and keeps the
/// connection cap below it (room for the store, agents' pipes and logs): running out of
/// descriptors stops every `accept` (issue 24 S2).
fn connection_cap(wanted: usize) -> usize {
    let raised = rlimit::increase_nofile_limit(u64::MAX).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot raise the open-file limit");
        rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
    });
    let room = usize::try_from(raised).unwrap_or(usize::MAX);
    let cap = wanted.min(room.saturating_sub(128).max(16));
    if cap < wanted {
        tracing::warn!(
            open_files = raised,
            max_connections = cap,
            "the open-file limit allows fewer connections than configured"
        );
    }
    cap
}
