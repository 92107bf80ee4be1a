//! `tether serve`: open the store, start the runtime and the channels, serve the API
//! until SIGINT or SIGTERM, then stop the agents.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use anyhow::{Context, Result};
use tether_runtime::Runtime;
use tether_server::{AuthConfig, Limits};
use tether_store::Store;

use crate::config::Settings;
use crate::token;

/// How long stopping the agents may take before the process exits anyway.
const RUNTIME_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

pub async fn run(settings: Settings) -> Result<()> {
    let shutdown = shutdown_signal()?;
    let token = token::resolve(&settings)?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    let addr = listener
        .local_addr()
        .context("cannot read the bound address")?;

    let store = Store::open(&settings.data_dir)
        .await
        .with_context(|| format!("cannot open the store in {}", settings.data_dir.display()))?;
    let (runtime_config, mcp_socket) = crate::mcp_cmd::runtime_config(&settings);
    let runtime = Runtime::start(runtime_config, store.clone())
        .await
        .context("cannot start the runtime")?;
    let mcp_stop = crate::mcp_cmd::serve_socket(mcp_socket, &runtime);
    let channels =
        tether_channels::Channels::start(runtime.clone(), store, settings.channels.clone())
            .await
            .context("cannot start the channels")?;
    let extra = tether_server::ExtraRoutes {
        protected: Some(channels.api_routes()),
        public: Some(channels.hook_routes()),
    };
    // A sign-in link for the web page; with the token only on an interactive terminal, so
    // captured output (service logs) never holds the secret.
    let web_link = if std::io::stdout().is_terminal() {
        format!("http://{addr}/#token={token}")
    } else {
        format!("http://{addr}/ (sign in with the token from `tether token`)")
    };
    let router = tether_server::router_with(
        runtime.clone(),
        AuthConfig { token },
        Limits::default(),
        extra,
    );

    // The first line is read by scripts and tests: keep its shape.
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "tether listening on http://{addr}");
    let _ = writeln!(stdout, "data dir: {}", settings.data_dir.display());
    let _ = writeln!(stdout, "token: run `tether token`");
    let _ = writeln!(stdout, "web page: {web_link}");
    let _ = stdout.flush();
    drop(stdout);
    tracing::info!(%addr, data_dir = %settings.data_dir.display(), "tether is serving");

    // Delegation waits end at the signal, not after the HTTP server's grace.
    let stopping = runtime.clone();
    let shutdown = async move {
        shutdown.await;
        stopping.begin_shutdown();
    };
    let served = tether_server::serve(listener, router, shutdown).await;
    channels.shutdown();
    mcp_stop.cancel();
    tracing::info!("stopping agent sessions");
    if tokio::time::timeout(RUNTIME_SHUTDOWN_TIMEOUT, runtime.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("agent sessions did not stop within {RUNTIME_SHUTDOWN_TIMEOUT:?}");
    }
    served.context("the HTTP server failed")?;
    tracing::info!("stopped");
    Ok(())
}

/// Registers SIGINT and SIGTERM handlers now (so a signal that arrives right after
/// start-up is not fatal) and resolves on the first of them.
fn shutdown_signal() -> Result<impl std::future::Future<Output = ()> + Send + 'static> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot handle SIGINT")?;
    let mut terminate = signal(SignalKind::terminate()).context("cannot handle SIGTERM")?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("received SIGINT"),
            _ = terminate.recv() => tracing::info!("received SIGTERM"),
        }
    })
}
